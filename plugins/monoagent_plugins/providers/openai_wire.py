"""Chat Completions over SSE, shared by ``openai``, ``ollama``, ``lmstudio`` and ``openai-compatible``.

Not a plugin: each of those plugins builds an :class:`OpenAIChatRuntime` with its own endpoint.

The request is ``POST <baseUrl>/chat/completions`` with ``stream: true`` and
``stream_options: {"include_usage": true}``. The system text is one system message, the stable
and dynamic parts joined by a blank line (these APIs cache prefixes automatically; the boundary
marker is never sent). Tools travel as ``tools: [{"type": "function", "function": {...}}]``;
assistant tool calls as ``tool_calls`` and tool results as ``role: "tool"`` messages with their
``tool_call_id``. The format has no error flag on a tool message, so a result that is an error
(``Message.is_error``: the tool failed or was refused) says so in its text: its content starts
with :data:`TOOL_ERROR_PREFIX`.

The answer is a stream of ``data: {chunk}`` events ending with ``data: [DONE]``: text in
``choices[0].delta.content``, tool calls in ``delta.tool_calls[]`` pieces keyed by ``index``
whose ``function.arguments`` arrive split across chunks, ``finish_reason`` on the last choice
chunk, and a final usage chunk. Finish reasons are normalised to the Anthropic vocabulary the
harness uses (``stop`` -> ``end_turn``, ``length`` -> ``max_tokens``, ``tool_calls`` ->
``tool_use``, ``content_filter`` -> ``refusal``). ``Usage.input_tokens`` counts the prompt tokens
not read from the cache (``prompt_tokens - cached_tokens``), as Anthropic reports them.

Every field the reader uses is type-checked (:class:`ChunkStream`): a chunk of the wrong shape
or a tool call whose arguments are not a JSON object is a one-line ``ProviderError`` with code
``malformed_event``, never a traceback. Tool-call pieces, and reasoning that local servers
stream as ``delta.reasoning_content`` or ``delta.reasoning`` (not passed on), are reported as
:class:`~monoagent._kernel.model.StreamProgress`. Ollama is read through this same SSE endpoint; no
bundled provider reads its NDJSON API.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs

from monoagent import (
    MAX_TOOL_CALLS_PER_STEP,
    Message,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    StepFinished,
    StreamProgress,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
    wire_converter,
)
from monoagent_plugins.providers.events import (
    READ_ON_EVENTS,
    Malformed,
    bad_event,
    count,
    event_json,
    excerpt,
    stream_ended,
    too_many_calls,
    tool_arguments,
    utf8_size,
    want,
)
from monoagent_plugins.providers.http import DEFAULT_MAX_EVENT_BYTES, Endpoint, encode_body, sse_events

TOOL_ERROR_PREFIX = "Error: "
"""What the content of a tool message whose result is an error starts with (the OpenAI format has no flag)."""

FINISH_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use", "content_filter": "refusal"}
RETRYABLE_STREAM_ERRORS = frozenset({"server_error", "rate_limit_exceeded", "overloaded_error", "api_error"})
"""An error chunk's ``type`` or ``code`` that makes it transient (OpenAI's rate limit is type ``requests``, code ``rate_limit_exceeded``)."""
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
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool
    stream_options: StreamOptions


def wire_message(message: Message) -> WireMessage:
    if message.role == "tool":
        content = TOOL_ERROR_PREFIX + message.content if message.is_error else message.content
        return WireMessage("tool", content, tool_call_id=message.tool_call_id or "")
    if message.role == "assistant" and message.tool_calls:
        calls = [
            WireToolCall(call.id, "function", WireFunction(call.name, json.dumps(call.arguments, ensure_ascii=False)))
            for call in message.tool_calls
        ]
        return WireMessage("assistant", message.content or None, tool_calls=calls)
    return WireMessage(message.role, message.content)


def tool_choice(request: ProviderRequest) -> str | dict[str, Any] | None:
    """``tool_choice`` on the wire: ``"required"``, or ``{"type": "function", "function": {"name": ...}}`` for one
    tool; None (not sent: the model decides) otherwise, and whenever the request offers no tools."""
    choice = request.tool_choice
    if choice is None or not request.tools:
        return None
    return "required" if choice == "required" else {"type": "function", "function": {"name": choice}}


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
        tool_choice=tool_choice(request),
        max_tokens=limit if max_tokens_field == "max_tokens" else None,
        max_completion_tokens=limit if max_tokens_field == "max_completion_tokens" else None,
        stream=True,
        stream_options=StreamOptions(True),
    )
    return encode_body(wire_converter().unstructure(body))


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
        chunks = ChunkStream(self, endpoint)
        async with sse_events(endpoint, body, is_context_limit) as events:
            async for sse in events:
                if chunks.done:
                    chunks.read_on += 1
                    if chunks.read_on > READ_ON_EVENTS:
                        break  # leaving the block closes the connection instead of reusing it
                    continue
                if not sse.data:
                    continue
                if sse.data == "[DONE]":
                    chunks.done = True  # read on to the end of the body, so the connection can be reused
                    continue
                try:
                    found = chunks.apply(event_json(endpoint, sse.data))
                except Malformed as exc:
                    raise bad_event(endpoint, sse.data, exc) from None
                for event in found:
                    yield event
        if not chunks.done and chunks.finish is None:
            raise stream_ended(endpoint, "data: [DONE]")
        for index, pending in enumerate(chunks.calls):
            yield ToolCallRequested(self._tool_call(request.step, index, pending))
        finish = chunks.finish
        stop = FINISH_REASONS.get(finish or "stop", finish or "end_turn")
        if chunks.calls and stop == "end_turn":
            stop = "tool_use"
        yield StepFinished(stop, chunks.usage)

    def _tool_call(self, step: int, index: int, pending: _PendingCall) -> ToolCall:
        call_id = pending.id or f"call_{step}_{index}"  # unique in the run: tool-history record ids derive from it
        return ToolCall(call_id, pending.name, tool_arguments(self.endpoint, pending.name, call_id, "".join(pending.arguments)))

    def _stream_error(self, error: Any) -> ProviderError:
        if not isinstance(error, dict):
            error = {"message": error if isinstance(error, str) else "no detail"}
        names = [v for v in (error.get("type"), error.get("code")) if isinstance(v, str) and v]
        kind = "/".join(dict.fromkeys(names)) or "error"
        message = error.get("message") if isinstance(error.get("message"), str) else "no detail"
        retryable = not RETRYABLE_STREAM_ERRORS.isdisjoint(names) or "overloaded" in message.lower()
        return ProviderError(
            f"{self.provider}: stream error {excerpt(' '.join(kind.split()), 100)}: {excerpt(' '.join(message.split()), 500)} (POST {self.endpoint.url})",
            retryable=retryable,
            provider=self.provider,
        )


class ChunkStream:
    """The state of one Chat Completions stream: pending tool calls, the finish reason, usage.

    :meth:`apply` takes one chunk's JSON object and returns the provider events it makes,
    raising :class:`~monoagent_plugins.providers.events.Malformed` for a field of the wrong type.
    """

    def __init__(self, runtime: OpenAIChatRuntime, endpoint: Endpoint) -> None:
        self.runtime = runtime
        self.endpoint = endpoint
        self.calls: list[_PendingCall] = []
        self.slots: dict[int, int] = {}  # the wire's tool-call index -> its position in ``calls``
        self.finish: str | None = None
        self.usage = Usage()
        self.done = False
        self.read_on = 0

    def apply(self, chunk: dict[str, Any]) -> list[ProviderEvent]:
        if chunk.get("error"):
            raise self.runtime._stream_error(chunk["error"])
        found: list[ProviderEvent] = []
        arguments = reasoning = other = 0
        for position, choice in enumerate(want(chunk, "choices", list, optional=True) or ()):
            where = f"choices[{position}]."
            if type(choice) is not dict:
                raise Malformed(f"choices[{position}] is not an object")
            delta = want(choice, "delta", dict, where, optional=True) or {}
            where += "delta."
            content = want(delta, "content", str, where, optional=True)
            if content:
                found.append(TextDelta(content))
            for key in ("reasoning_content", "reasoning"):
                value = delta.get(key)
                if type(value) is str:
                    reasoning += utf8_size(value)
            if type(delta.get("refusal")) is str:
                other += utf8_size(delta["refusal"])
            for number, piece in enumerate(want(delta, "tool_calls", list, where, optional=True) or ()):
                arguments += self._piece(piece, f"{where}tool_calls[{number}].")
            self.finish = want(choice, "finish_reason", str, f"choices[{position}].", optional=True) or self.finish
        usage = want(chunk, "usage", dict, optional=True)
        if usage:
            self.usage = _usage(usage)
        if arguments:
            found.append(StreamProgress(arguments))
        if reasoning:
            found.append(StreamProgress(reasoning, "reasoning"))
        if other:
            found.append(StreamProgress(other, "other"))
        return found

    def _piece(self, piece: Any, where: str) -> int:
        """Add one ``delta.tool_calls[]`` piece to its call; returns its bytes."""
        if type(piece) is not dict:
            raise Malformed(f"{where[:-1]} is not an object")
        index = want(piece, "index", int, where, optional=True)
        call_id = want(piece, "id", str, where, optional=True)
        function = want(piece, "function", dict, where, optional=True) or {}
        name = want(function, "name", str, f"{where}function.", optional=True)
        text = want(function, "arguments", str, f"{where}function.", optional=True)
        pending = _pending_call(self.calls, self.slots, index, call_id)
        if len(self.calls) > MAX_TOOL_CALLS_PER_STEP:
            raise too_many_calls(self.endpoint, MAX_TOOL_CALLS_PER_STEP)
        pending.id = call_id or pending.id
        pending.name = name or pending.name
        if text:
            pending.arguments.append(text)
        return sum(utf8_size(part) for part in (call_id, name, text) if part)


def _pending_call(calls: list[_PendingCall], slots: dict[int, int], index: int | None, new_id: str | None) -> _PendingCall:
    """The call a ``delta.tool_calls[]`` piece continues, or a new one.

    Pieces are keyed by ``index``. A piece without one starts a new call (Ollama before 0.4.7),
    and so does a piece whose ``id`` differs from the id its index already carries: Ollama sends
    ``index: 0`` for every call of a parallel set (ollama/ollama#15457), which would otherwise
    merge their arguments into one unreadable JSON text.
    """
    position = slots.get(index) if index is not None else None
    if position is None or (new_id and calls[position].id and new_id != calls[position].id):
        position = len(calls)
        calls.append(_PendingCall())
        if index is not None:
            slots[index] = position
    return calls[position]


def _usage(data: dict[str, Any]) -> Usage:
    prompt = count(data, "prompt_tokens")
    details = data.get("prompt_tokens_details")
    cached = count(details, "cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=count(data, "completion_tokens"),
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
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> OpenAIChatRuntime:
    """A Chat Completions runtime from a provider's config section.

    ``config`` carries the fields every OpenAI-family section has: ``connect_timeout_seconds``,
    ``timeout_seconds``, ``max_output_tokens`` and ``context_window``; ``max_event_bytes`` is
    ``providers.client.maxStreamEventBytes``.
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
        max_event_bytes=max_event_bytes,
    )
    return OpenAIChatRuntime(
        provider, model, endpoint, max_output_tokens=config.max_output_tokens,
        context_window=config.context_window, max_tokens_field=max_tokens_field,
    )
