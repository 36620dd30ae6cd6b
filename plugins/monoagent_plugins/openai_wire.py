"""Chat Completions over SSE, shared by ``openai``, ``ollama``, ``lmstudio`` and ``openai-compatible``.

Not a plugin: each of those plugins builds an :class:`OpenAIChatRuntime` with its own endpoint.

The request is ``POST <baseUrl>/chat/completions`` with ``stream: true`` and
``stream_options: {"include_usage": true}``. The system text is one system message, the stable
and dynamic parts joined by a blank line (these APIs cache prefixes automatically; the boundary
marker is never sent). Tools travel as ``tools: [{"type": "function", "function": {...}}]``;
assistant tool calls as ``tool_calls`` and tool results as ``role: "tool"`` messages with their
``tool_call_id``.

The answer is a stream of ``data: {chunk}`` events ending with ``data: [DONE]``: text in
``choices[0].delta.content``, tool calls in ``delta.tool_calls[]`` pieces keyed by ``index``
whose ``function.arguments`` arrive split across chunks, ``finish_reason`` on the last choice
chunk, and a final usage chunk. Finish reasons are normalised to the Anthropic vocabulary the
harness uses (``stop`` -> ``end_turn``, ``length`` -> ``max_tokens``, ``tool_calls`` ->
``tool_use``, ``content_filter`` -> ``refusal``). ``Usage.input_tokens`` counts the prompt tokens
not read from the cache (``prompt_tokens - cached_tokens``), as Anthropic reports them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs

from monoagent.errors import ProviderError
from monoagent.model import Message, ProviderEvent, ProviderRequest, StepFinished, TextDelta, ToolCall, ToolCallRequested, Usage

from .provider_http import Endpoint, bad_event, sse_events, stream_ended

FINISH_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use", "content_filter": "refusal"}
CONTEXT_LIMIT_PHRASES = ("maximum context length", "context length exceeded", "exceeds the available context size", "context window")


@attrs.frozen
class WireFunction:
    name: str
    arguments: str


@attrs.frozen
class WireToolCall:
    id: str
    type: str
    function: WireFunction


@attrs.frozen
class WireMessage:
    role: str
    content: str | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None


@attrs.frozen
class FunctionSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@attrs.frozen
class WireTool:
    type: str
    function: FunctionSpec


@attrs.frozen
class StreamOptions:
    include_usage: bool


@attrs.frozen(kw_only=True)
class ChatRequest:
    """The body of ``POST /chat/completions`` (fields left None are not sent)."""

    model: str
    messages: list[WireMessage]
    tools: list[WireTool] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool
    stream_options: StreamOptions


_converter: Any = None


def _wire_converter() -> Any:
    global _converter
    if _converter is None:
        import cattrs

        _converter = cattrs.Converter(omit_if_default=True)
    return _converter


def wire_message(message: Message) -> WireMessage:
    if message.role == "tool":
        return WireMessage("tool", message.content, tool_call_id=message.tool_call_id or "")
    if message.role == "assistant" and message.tool_calls:
        calls = [
            WireToolCall(call.id, "function", WireFunction(call.name, json.dumps(call.arguments, ensure_ascii=False)))
            for call in message.tool_calls
        ]
        return WireMessage("assistant", message.content or None, tool_calls=calls)
    return WireMessage(message.role, message.content)


def request_body(request: ProviderRequest, max_tokens: int | None, max_tokens_field: str) -> bytes:
    """The JSON body for ``request``; the output cap goes in ``max_tokens_field`` when set."""
    system = request.prompt.system_text_without_boundary
    messages = ([WireMessage("system", system)] if system else []) + [
        wire_message(m) for m in request.messages if m.role != "system"
    ]
    limit = request.max_output_tokens or max_tokens
    body = ChatRequest(
        model=request.model,
        messages=messages,
        tools=[WireTool("function", FunctionSpec(t.name, t.description, t.input_schema)) for t in request.tools] or None,
        max_tokens=limit if max_tokens_field == "max_tokens" else None,
        max_completion_tokens=limit if max_tokens_field == "max_completion_tokens" else None,
        stream=True,
        stream_options=StreamOptions(True),
    )
    return json.dumps(_wire_converter().unstructure(body), ensure_ascii=False).encode("utf-8")


def is_context_limit(status: int, kind: str, code: str, message: str) -> bool:
    if code == "context_length_exceeded" or kind == "exceed_context_size_error":
        return True
    lowered = message.lower()
    return status in (400, 413) and any(phrase in lowered for phrase in CONTEXT_LIMIT_PHRASES)


@attrs.define
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.Factory(list)


class OpenAIChatRuntime:
    """Streams one Chat Completions call per provider step (see the module docstring).

    ``max_tokens_field`` is ``max_completion_tokens`` for OpenAI itself and ``max_tokens`` for
    the local servers, which implement the older name.
    """

    def __init__(
        self,
        provider: str,
        model: str,
        endpoint: Endpoint,
        *,
        max_output_tokens: int | None,
        context_window: int,
        max_tokens_field: str = "max_tokens",
    ) -> None:
        self.provider = provider
        self.name = f"{provider}:{model}"
        self.model = model
        self.endpoint = endpoint
        self.max_output_tokens = max_output_tokens
        self.context_window = context_window
        self.max_tokens_field = max_tokens_field

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        endpoint = self.endpoint
        body = request_body(request, self.max_output_tokens, self.max_tokens_field)
        calls: list[_PendingCall] = []
        slots: dict[int, int] = {}  # the wire's tool-call index -> its position in ``calls``
        finish: str | None = None
        usage = Usage()
        done = False
        async with sse_events(endpoint, body, is_context_limit) as events:
            async for sse in events:
                if done or not sse.data:
                    continue
                if sse.data == "[DONE]":
                    done = True  # read on to the end of the body, so the connection can be reused
                    continue
                texts: list[str] = []
                try:
                    chunk = json.loads(sse.data)
                    if chunk.get("error"):
                        raise self._stream_error(chunk["error"])
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            texts.append(delta["content"])
                        for piece in delta.get("tool_calls") or ():
                            pending = _pending_call(calls, slots, piece)
                            pending.id = piece.get("id") or pending.id
                            function = piece.get("function") or {}
                            pending.name = function.get("name") or pending.name
                            if function.get("arguments"):
                                pending.arguments.append(function["arguments"])
                        finish = choice.get("finish_reason") or finish
                    if chunk.get("usage"):
                        usage = _usage(chunk["usage"])
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise bad_event(endpoint, sse.data, exc) from None
                for text in texts:
                    yield TextDelta(text)
        if not done and finish is None:
            raise stream_ended(endpoint, "data: [DONE]")
        for index, pending in enumerate(calls):
            yield ToolCallRequested(self._tool_call(index, pending))
        stop = FINISH_REASONS.get(finish or "stop", finish or "end_turn")
        if calls and stop == "end_turn":
            stop = "tool_use"
        yield StepFinished(stop, usage)

    def _tool_call(self, index: int, pending: _PendingCall) -> ToolCall:
        text = "".join(pending.arguments)
        call_id = pending.id or f"call_{index}"
        try:
            arguments = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise ProviderError(
                f"{self.provider}: tool call {pending.name!r} ({call_id}) has arguments that are not JSON ({exc}): {text[:200]!r}",
                provider=self.provider,
            ) from None
        if not isinstance(arguments, dict):
            raise ProviderError(
                f"{self.provider}: tool call {pending.name!r} ({call_id}) has arguments that are not a JSON object",
                provider=self.provider,
            )
        return ToolCall(call_id, pending.name, arguments)

    def _stream_error(self, error: Any) -> ProviderError:
        if not isinstance(error, dict):
            error = {"message": str(error)}
        kind = str(error.get("type") or error.get("code") or "error")
        message = " ".join(str(error.get("message") or "no detail").split())
        retryable = kind in ("server_error", "rate_limit_exceeded", "overloaded_error", "api_error") or "overloaded" in message.lower()
        return ProviderError(
            f"{self.provider}: stream error {kind}: {message} (POST {self.endpoint.url})",
            retryable=retryable,
            provider=self.provider,
        )


def _pending_call(calls: list[_PendingCall], slots: dict[int, int], piece: Any) -> _PendingCall:
    """The call a ``delta.tool_calls[]`` piece continues, or a new one.

    Pieces are keyed by ``index``. A piece without one starts a new call (Ollama before 0.4.7),
    and so does a piece whose ``id`` differs from the id its index already carries: Ollama sends
    ``index: 0`` for every call of a parallel set (ollama/ollama#15457), which would otherwise
    merge their arguments into one unreadable JSON text.
    """
    index = piece.get("index")
    position = slots.get(index) if isinstance(index, int) else None
    new_id = piece.get("id")
    if position is None or (new_id and calls[position].id and new_id != calls[position].id):
        position = len(calls)
        calls.append(_PendingCall())
        if isinstance(index, int):
            slots[index] = position
    return calls[position]


def _usage(data: Any) -> Usage:
    prompt = int(data.get("prompt_tokens") or 0)
    details = data.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=int(data.get("completion_tokens") or 0),
        cache_read_tokens=cached,
    )


def chat_runtime(
    provider: str,
    model: str,
    config: Any,
    *,
    url: str,
    setting: str,
    url_env: str | None,
    headers: dict[str, str] | None = None,
    key_env: str | None = None,
    max_tokens_field: str = "max_tokens",
) -> OpenAIChatRuntime:
    """A Chat Completions runtime from a provider's config section.

    ``config`` carries the fields every OpenAI-family section has: ``connect_timeout_seconds``,
    ``timeout_seconds``, ``max_output_tokens`` and ``context_window``.
    """
    endpoint = Endpoint(
        provider=provider,
        url=url,
        headers=headers or {},
        setting=setting,
        url_env=url_env,
        connect_timeout=config.connect_timeout_seconds,
        read_timeout=config.timeout_seconds,
        key_env=key_env,
    )
    return OpenAIChatRuntime(
        provider, model, endpoint, max_output_tokens=config.max_output_tokens,
        context_window=config.context_window, max_tokens_field=max_tokens_field,
    )
