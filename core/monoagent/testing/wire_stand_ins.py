"""Stand-ins for the Anthropic and OpenAI APIs: scripted local servers speaking their streaming wire formats, byte for byte (part of :mod:`monoagent.testing`).

Each is a :class:`~monoagent.testing.WireServer` (stdlib ``ThreadingHTTPServer`` on 127.0.0.1,
no dependency beyond the kernel's): point a provider's base URL at ``server.url``, queue
:class:`~monoagent.testing.Reply` objects, read back ``server.requests``. A plugin whose provider
speaks one of these wires tests against the real format with nothing but ``monoagent`` and
``monoagent.testing``; the bundled providers' tests use the same servers.

The frames follow the vendors' documented streams: Anthropic's ``event:``/``data:`` pairs
(message_start, content_block_start, ping, content_block_delta with thinking_delta, signature_delta,
text_delta or input_json_delta, content_block_stop, message_delta with stop_reason and usage, message_stop,
and ``event: error``), and OpenAI's ``data: {chat.completion.chunk}`` lines ending with
``data: [DONE]``, usage in a last chunk with empty ``choices`` (reasoning as local servers send it,
``delta.reasoning_content``). ``Reply.stream_error`` names the mid-stream error: ``overloaded``,
``rate_limited`` or ``invalid_request``, each in the vendor's own words.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs

from monoagent._kernel.model import ReasoningBlock
from monoagent.testing.wire_server import Reply, WireServer

__all__ = ["AnthropicWireServer", "LocalServerWire", "OpenAIWireServer", "WholeCallsWire"]


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))


class AnthropicWireServer(WireServer):
    """The Messages API stream (``POST /v1/messages`` with ``stream: true``)."""

    def event(self, name: str, data: Any) -> bytes:
        return f"event: {name}\ndata: {_json(data)}\n\n".encode()

    def frames(self, reply: Reply) -> Iterator[bytes | object]:
        usage = reply.usage
        yield self.event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": reply.model,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": usage.input_tokens,
                        "cache_creation_input_tokens": usage.cache_write_tokens,
                        "cache_read_input_tokens": usage.cache_read_tokens,
                        "output_tokens": 1,
                    },
                },
            },
        )
        index = 0
        for block in reply.reasoning:
            yield from self.reasoning(index, block)
            index += 1
        if reply.text_pieces or reply.stream_error:
            text_index = index
            yield self.event(
                "content_block_start", {"type": "content_block_start", "index": text_index, "content_block": {"type": "text", "text": ""}}
            )
            yield self.event("ping", {"type": "ping"})
            yield from self.cut(reply, 0)
            for sent, piece in enumerate(reply.text_pieces, start=1):
                yield self.event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": text_index, "delta": {"type": "text_delta", "text": piece}},
                )
                yield from self.cut(reply, sent)
            if reply.stream_error:
                kind = {"rate_limited": "rate_limit_error", "invalid_request": "invalid_request_error"}.get(reply.stream_error, "overloaded_error")
                yield self.event("error", {"type": "error", "error": {"type": kind, "message": reply.error_message}})
                return
            yield self.event("content_block_stop", {"type": "content_block_stop", "index": text_index})
            index += 1
        for call in reply.tool_calls:
            yield self.event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}},
            )
            yield self.event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}},
            )
            for piece in call.argument_pieces:
                yield self.event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}},
                )
            yield self.event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        yield self.event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": usage.output_tokens}},
        )
        yield self.event("message_stop", {"type": "message_stop"})

    def reasoning(self, index: int, block: ReasoningBlock) -> Iterator[bytes]:
        """A thinking block (empty start, its text in two thinking_delta pieces, one signature_delta)
        or a redacted_thinking block (its data whole in the start event)."""
        if block.kind == "redacted":
            start = {"type": "redacted_thinking", "data": block.data}
            yield self.event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        else:
            start = {"type": "thinking", "thinking": "", "signature": ""}
            yield self.event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            half = len(block.text) // 2
            for piece in (block.text[:half], block.text[half:]):
                delta = {"type": "thinking_delta", "thinking": piece}
                yield self.event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            delta = {"type": "signature_delta", "signature": block.signature}
            yield self.event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield self.event("content_block_stop", {"type": "content_block_stop", "index": index})

    def error_body(self, reply: Reply) -> bytes:
        if reply.context_limit:
            kind, message = "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"
        else:
            kind = {
                400: "invalid_request_error",
                401: "authentication_error",
                403: "permission_error",
                404: "not_found_error",
                413: "request_too_large",
                429: "rate_limit_error",
                529: "overloaded_error",
            }.get(reply.status, "api_error")
            message = reply.error_message
        return _json({"type": "error", "error": {"type": kind, "message": message}}).encode()


class OpenAIWireServer(WireServer):
    """The Chat Completions stream (``POST /chat/completions`` with ``stream: true``)."""

    reasoning_key: str = "reasoning_content"
    usage_without_choices: bool = False  # the usage chunk leaves ``choices`` out instead of sending []
    sends_done: bool = True
    stop_with_calls: str = "tool_calls"  # the finish reason of a step that calls tools

    def call_pieces(self, index: int, call: Any) -> list[dict[str, Any]]:
        """The ``delta.tool_calls[]`` pieces of one call: its id (left out when empty) and name, then its argument pieces."""
        first = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        if not call.id:
            del first["id"]
        return [first, *({"index": index, "function": {"arguments": piece}} for piece in call.argument_pieces)]

    def tool_call_deltas(self, calls: tuple[Any, ...]) -> Iterator[list[dict[str, Any]]]:
        """The ``delta.tool_calls`` lists of a step, one chunk each: here one piece a chunk."""
        for index, call in enumerate(calls):
            for piece in self.call_pieces(index, call):
                yield [piece]

    def chunk(self, reply: Reply, choices: list[Any], usage: Any = None) -> bytes:
        data = {
            "id": "chatcmpl-AbC123",
            "object": "chat.completion.chunk",
            "created": 1735689600,
            "model": reply.model,
            "system_fingerprint": "fp_44709d6fcb",
            "choices": choices,
            "usage": usage,
        }
        if usage is not None and not choices and self.usage_without_choices:
            del data["choices"]
        return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    def frames(self, reply: Reply) -> Iterator[bytes | object]:
        def choice(delta: dict[str, Any], finish: str | None = None) -> list[Any]:
            return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

        yield self.chunk(reply, choice({"role": "assistant", "content": "", "refusal": None}))
        for block in reply.reasoning:  # as local servers stream it (llama.cpp, vLLM, Ollama)
            half = len(block.text) // 2
            for piece in (block.text[:half], block.text[half:]):
                yield self.chunk(reply, choice({self.reasoning_key: piece}))
        for piece in reply.refusal_pieces:
            yield self.chunk(reply, choice({"refusal": piece}))
        yield from self.cut(reply, 0)
        for sent, piece in enumerate(reply.text_pieces, start=1):
            yield self.chunk(reply, choice({"content": piece}))
            yield from self.cut(reply, sent)
        if reply.stream_error:
            error = {
                "overloaded": {"message": reply.error_message, "type": "server_error", "param": None, "code": None},
                "rate_limited": {"message": reply.error_message, "type": "requests", "param": None, "code": "rate_limit_exceeded"},
                "invalid_request": {"message": reply.error_message, "type": "invalid_request_error", "param": None, "code": None},
            }[reply.stream_error]
            yield f"data: {json.dumps({'error': error})}\n\n".encode()
            return
        for pieces in self.tool_call_deltas(reply.tool_calls):
            yield self.chunk(reply, choice({"content": None, "tool_calls": pieces}))
        finish = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}.get(
            reply.stop_reason or "", self.stop_with_calls if reply.tool_calls else "stop"
        )
        yield self.chunk(reply, choice({}, finish))
        usage = reply.usage
        prompt = usage.input_tokens + usage.cache_read_tokens
        counts: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": usage.output_tokens, "total_tokens": prompt + usage.output_tokens}
        if usage.cache_read_tokens:  # local servers leave the details out; OpenAI sends them
            counts["prompt_tokens_details"] = {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0}
            counts["completion_tokens_details"] = {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        yield self.chunk(reply, [], counts)
        if self.sends_done:
            yield b"data: [DONE]\n\n"

    def error_body(self, reply: Reply) -> bytes:
        error: dict[str, Any]
        if reply.context_limit:
            error = {
                "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        else:
            kind = {400: "invalid_request_error", 401: "invalid_request_error", 429: "requests"}.get(reply.status, "server_error")
            code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(reply.status)
            error = {"message": reply.error_message, "type": kind, "param": None, "code": code}
        return json.dumps({"error": error}).encode()


class LocalServerWire(OpenAIWireServer):
    """Chat Completions as local servers stream it, quirks included: every tool call of a step at
    ``index`` 0 told apart by its ``id`` (Ollama, ollama/ollama#15457), a call's first piece with
    its id and no ``function``, then its name without ``arguments``, then the arguments (vLLM);
    reasoning as ``delta.reasoning`` (vLLM, Ollama); ``delta: null`` on the finishing chunk, the
    usage chunk without ``choices``, an overload reported as a bare string error, a rate limit
    with a ``code`` and no ``type``, an invalid request with a numeric ``code`` and no ``type``
    (llama.cpp sends ``"code": 400``)."""

    reasoning_key: str = "reasoning"
    usage_without_choices: bool = True

    def call_pieces(self, index: int, call: Any) -> list[dict[str, Any]]:
        rest = ({"index": 0, "function": {"arguments": piece}} for piece in call.argument_pieces)
        return [{"index": 0, "id": call.id, "type": "function"}, {"index": 0, "function": {"name": call.name}}, *rest]

    def chunk(self, reply: Reply, choices: list[Any], usage: Any = None) -> bytes:
        for choice in choices:
            if choice.get("finish_reason") and choice["delta"] == {}:
                choice["delta"] = None
        return super().chunk(reply, choices, usage)

    def frames(self, reply: Reply) -> Iterator[bytes | object]:
        if not reply.stream_error:
            yield from super().frames(reply)
            return
        for frame in super().frames(attrs.evolve(reply, stream_error=None, tool_calls=(), text_pieces=reply.text_pieces)):
            if isinstance(frame, bytes) and b'"finish_reason":"' in frame:
                break  # the error comes where the stream would have finished
            yield frame
        error: Any = {
            "overloaded": f"the server is overloaded: {reply.error_message}",
            "rate_limited": {"code": "rate_limit_exceeded", "message": reply.error_message},
            "invalid_request": {"code": 400, "message": reply.error_message},
        }[reply.stream_error]
        yield f"data: {json.dumps({'error': error})}\n\n".encode()


class WholeCallsWire(LocalServerWire):
    """Ollama before 0.4.7: every tool call of a step whole in one chunk, without ``index`` (and
    without ``id`` where the reply has none), the step finishing with ``stop`` rather than
    ``tool_calls``; and a body that ends after the usage chunk without ``data: [DONE]``."""

    sends_done: bool = False
    stop_with_calls: str = "stop"

    def tool_call_deltas(self, calls: tuple[Any, ...]) -> Iterator[list[dict[str, Any]]]:
        if calls:
            yield [
                {**({"id": call.id} if call.id else {}), "type": "function",
                 "function": {"name": call.name, "arguments": "".join(call.argument_pieces)}}
                for call in calls
            ]
