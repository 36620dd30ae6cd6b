"""The Anthropic Messages API on the wire: request bodies, the SSE stream, errors.

Kept out of the ``anthropic`` plugin module so that loading the plugin (every CLI start) does not
build these classes; :func:`monoagent_plugins.providers.anthropic.make_runtime` imports it on first use.

Every field the stream reader uses is type-checked (:class:`MessageStream`): an event of the
wrong shape, a delta for a block that is not open, a second start of an open block or a tool
call whose arguments are not a JSON object is a one-line ``ProviderError`` with code
``malformed_event``, never a traceback. Tool-call argument pieces, thinking and unknown deltas
are reported as :class:`~monoagent._kernel.model.StreamProgress`, so the harness's stream limits see
them as they arrive.

Extended thinking: a ``thinking`` block (``thinking_delta`` and ``signature_delta`` pieces) or a
``redacted_thinking`` block (its opaque ``data`` in the start event) becomes a
:class:`~monoagent._kernel.model.ReasoningBlock` at its ``content_block_stop``. An assistant message
that carries Anthropic reasoning blocks sends them first, verbatim, then its text and tool calls:
the API requires them back on a tool-use turn with thinking on, and they keep the cache prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any, Literal

import attrs

from monoagent import (
    MAX_TOOL_CALLS_PER_STEP,
    Message,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    ReasoningBlock,
    StepFinished,
    StreamProgress,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
    wire_converter,
)
from monoagent_plugins.providers.anthropic import API_VERSION, PROVIDER, AnthropicConfig
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
from monoagent_plugins.providers.http import Endpoint, encode_body, normalise_base_url, sse_events


@attrs.frozen
class CacheControl:
    type: str


EPHEMERAL = CacheControl("ephemeral")


@attrs.frozen
class SystemBlock:
    type: str
    text: str
    cache_control: CacheControl | None = None


@attrs.frozen
class TextBlock:
    type: str
    text: str
    cache_control: CacheControl | None = None


@attrs.frozen
class ToolUseBlock:
    type: str
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None


@attrs.frozen
class ToolResultBlock:
    """A tool's answer; ``is_error`` (sent only when true) tells the model the call failed or was refused."""

    type: str
    tool_use_id: str
    content: str
    is_error: bool = False
    cache_control: CacheControl | None = None


@attrs.frozen
class ThinkingBlock:
    """A signed thinking block sent back as it came (every field always sent)."""

    type: str
    thinking: str
    signature: str


@attrs.frozen
class RedactedThinkingBlock:
    type: str
    data: str


@attrs.frozen
class ThinkingConfig:
    type: str
    budget_tokens: int


Block = ThinkingBlock | RedactedThinkingBlock | TextBlock | ToolUseBlock | ToolResultBlock


@attrs.frozen
class WireMessage:
    role: str
    content: list[Block]


@attrs.frozen
class WireTool:
    name: str
    description: str
    input_schema: dict[str, Any]


@attrs.frozen(kw_only=True)
class MessagesRequest:
    """The body of ``POST /v1/messages`` (fields left None are not sent)."""

    model: str
    max_tokens: int
    system: list[SystemBlock] | None = None
    messages: list[WireMessage]
    tools: list[WireTool] | None = None
    tool_choice: dict[str, str] | None = None
    thinking: ThinkingConfig | None = None
    stream: bool


def _blocks(message: Message) -> tuple[str, list[Block]]:
    if message.role == "tool":
        return "user", [ToolResultBlock("tool_result", message.tool_call_id or "", message.content, message.is_error)]
    # The API refuses a blank text block ("text content blocks must contain non-whitespace text"),
    # yet Claude itself may stream one before a tool_use: the tool calls alone carry that turn.
    blocks: list[Block] = [
        ThinkingBlock("thinking", r.text, r.signature) if r.kind == "thinking" else RedactedThinkingBlock("redacted_thinking", r.data)
        for r in message.reasoning
        if r.provider == PROVIDER
    ]
    if message.content.strip() or not message.tool_calls:
        blocks.append(TextBlock("text", message.content))
    blocks.extend(ToolUseBlock("tool_use", call.id, call.name, dict(call.arguments)) for call in message.tool_calls)
    return ("assistant" if message.role == "assistant" else "user"), blocks


EARLIER_OMITTED = "[Earlier conversation omitted.]"
"""The host note that opens a request whose history starts with an answer (its question was
compacted or fell out of the retained window): the Messages API refuses an assistant turn first."""


def wire_messages(messages: tuple[Message, ...], breakpoints: Collection[int] = ()) -> list[WireMessage]:
    """Provider-neutral messages as Messages API turns; consecutive same-role turns are merged.

    Merging puts the tool results of one assistant step into one user message, as the API
    requires, and keeps a user message that follows them in the same turn. A conversation that
    starts with an assistant turn (history as leading messages whose first question was
    compacted away or dropped by retention) opens with :data:`EARLIER_OMITTED`. The last content
    block of each message whose index is in ``breakpoints`` carries ``cache_control``.
    """
    wire: list[WireMessage] = []
    for index, message in enumerate(messages):
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        last = blocks[-1] if blocks else None
        if index in breakpoints and isinstance(last, (TextBlock, ToolUseBlock, ToolResultBlock)):  # never a thinking block
            blocks[-1] = attrs.evolve(last, cache_control=EPHEMERAL)
        if wire and wire[-1].role == role:
            wire[-1].content.extend(blocks)
        else:
            wire.append(WireMessage(role, blocks))
    if wire and wire[0].role == "assistant":  # the API requires the user role first
        wire.insert(0, WireMessage("user", [TextBlock("text", EARLIER_OMITTED)]))
    return wire


def cache_breakpoints(request: ProviderRequest) -> set[int]:
    """The messages that end a cacheable prefix: the newest leading message (the end of the warm
    transcript, or of history sent as messages) and, in a tool-loop step, the last message.

    With the stable system block that makes at most three breakpoints, within the API's four.
    """
    marks = set()
    if request.prompt.leading > 0:
        marks.add(request.prompt.leading - 1)
    if len(request.messages) > len(request.prompt.messages):
        marks.add(len(request.messages) - 1)
    return marks


def tool_choice(request: ProviderRequest) -> dict[str, str] | None:
    """``tool_choice`` on the wire: ``{"type": "any"}`` (some tool) or ``{"type": "tool", "name": ...}``; None
    (not sent: the model decides) otherwise, and whenever the request offers no tools."""
    choice = request.tool_choice
    if choice is None or not request.tools:
        return None
    return {"type": "any"} if choice == "required" else {"type": "tool", "name": choice}


def request_body(request: ProviderRequest, max_tokens: int, thinking_budget: int | None = None) -> bytes:
    """The JSON body for ``request``: two system blocks, cache control on the stable one and on
    the messages of :func:`cache_breakpoints`; ``thinking`` only when ``thinking_budget`` is set and
    below the request's ``max_tokens`` (a request that caps its own answer lower, such as a
    compaction summary, runs without thinking rather than being refused by the API)."""
    prompt = request.prompt
    system = []
    if prompt.stable_text:
        system.append(SystemBlock("text", prompt.stable_text, EPHEMERAL))
    if prompt.dynamic_text:
        system.append(SystemBlock("text", prompt.dynamic_text))
    max_tokens = request.max_output_tokens or max_tokens
    thinking = ThinkingConfig("enabled", thinking_budget) if thinking_budget is not None and thinking_budget < max_tokens else None
    body = MessagesRequest(
        model=request.model,
        max_tokens=max_tokens,
        system=system or None,
        messages=wire_messages(request.messages, cache_breakpoints(request)),
        tools=[WireTool(t.name, t.description, t.input_schema) for t in request.tools] or None,
        tool_choice=tool_choice(request) if thinking is None else None,  # the API refuses a forced tool with thinking
        thinking=thinking,
        stream=True,
    )
    return encode_body(wire_converter().unstructure(body))


CONTEXT_LIMIT_PHRASES = ("prompt is too long", "exceed context limit")
"""400 ``invalid_request_error`` messages that mean the request does not fit the window:
"prompt is too long: 208310 tokens > 200000 maximum" and "input length and `max_tokens` exceed
context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"."""


def is_context_limit(status: int, kind: str, code: str, message: str) -> bool:
    lowered = message.lower()
    return status == 400 and any(phrase in lowered for phrase in CONTEXT_LIMIT_PHRASES)


# --------------------------------------------------------------------------- the runtime


RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


class AnthropicRuntime:
    """Streams one Messages API call per provider step (see the module docstring)."""

    def __init__(self, model: str, config: AnthropicConfig, api_key: str, *, max_event_bytes: int | None = None) -> None:
        self.name = f"{PROVIDER}:{model}"
        self.model = model
        self.context_window = config.context_window
        self.max_tokens = config.max_output_tokens
        self.thinking_budget = config.thinking_budget_tokens
        self.endpoint = Endpoint(
            provider=PROVIDER,
            url=f"{normalise_base_url(config.base_url)}/v1/messages",
            headers={"x-api-key": api_key, "anthropic-version": API_VERSION},
            setting="providers.anthropic.baseUrl",
            url_env="ANTHROPIC_BASE_URL",
            connect_timeout=config.connect_timeout_seconds,
            read_timeout=config.timeout_seconds,
            key_env="ANTHROPIC_API_KEY",
            **({"max_event_bytes": max_event_bytes} if max_event_bytes else {}),
        )

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        endpoint = self.endpoint
        body = request_body(request, self.max_tokens, self.thinking_budget)
        message = MessageStream(endpoint)
        async with sse_events(endpoint, body, is_context_limit) as events:
            async for sse in events:
                if message.finished is not None:
                    message.read_on += 1
                    if message.read_on > READ_ON_EVENTS:
                        break  # leaving the block closes the connection instead of reusing it
                    continue
                if sse.event == "ping":
                    continue
                try:
                    event = message.apply(event_json(endpoint, sse.data), len(sse.data))
                except Malformed as exc:
                    raise bad_event(endpoint, sse.data, exc) from None
                if event is not None:
                    yield event
        # Reading on to the end of the body after message_stop lets the connection be reused.
        if message.finished is None:
            raise stream_ended(endpoint, "message_stop")
        yield message.finished


class MessageStream:
    """The state of one Messages API stream: open tool_use blocks, usage, the stop reason.

    :meth:`apply` takes one event's JSON object and returns the provider event it makes, if any,
    raising :class:`~monoagent_plugins.providers.events.Malformed` for a field of the wrong type.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.usage: dict[str, int] = {}
        self.stop_reason = "end_turn"
        self.tools: dict[int, tuple[str, str, list[str]]] = {}
        self.reasoning: dict[int, _OpenReasoning] = {}
        self.calls = 0
        self.finished: StepFinished | None = None
        self.read_on = 0

    def apply(self, data: dict[str, Any], size: int) -> ProviderEvent | None:
        kind = want(data, "type", str)
        if kind == "content_block_delta":
            index = want(data, "index", int)
            delta = want(data, "delta", dict)
            delta_kind = want(delta, "type", str, "delta.")
            if delta_kind == "text_delta":
                text = want(delta, "text", str, "delta.")
                return TextDelta(text) if text else None
            if delta_kind == "input_json_delta":
                piece = want(delta, "partial_json", str, "delta.")
                if index not in self.tools:
                    raise Malformed(f"input_json_delta for index {index}, which is no open tool_use block")
                self.tools[index][2].append(piece)
                return StreamProgress(utf8_size(piece))
            if delta_kind in ("thinking_delta", "signature_delta"):
                field = "thinking" if delta_kind == "thinking_delta" else "signature"
                piece = want(delta, field, str, "delta.")
                block = self.reasoning.get(index)
                if block is None or block.kind != "thinking":
                    raise Malformed(f"{delta_kind} for index {index}, which is no open thinking block")
                (block.text if field == "thinking" else block.signature).append(piece)
                return StreamProgress(utf8_size(piece), "reasoning")
            return StreamProgress(size, "other")
        if kind == "content_block_start":
            index = want(data, "index", int)
            block = want(data, "content_block", dict)
            block_kind = want(block, "type", str, "content_block.")
            if block_kind in ("thinking", "redacted_thinking"):
                return self._start_reasoning(index, block_kind, block)
            if block_kind != "tool_use":
                return None
            call_id = want(block, "id", str, "content_block.")
            name = want(block, "name", str, "content_block.")
            if index in self.tools or index in self.reasoning:
                raise Malformed(f"content_block_start for index {index}, which is already open")
            self.calls += 1
            if self.calls > MAX_TOOL_CALLS_PER_STEP:
                raise too_many_calls(self.endpoint, MAX_TOOL_CALLS_PER_STEP)
            self.tools[index] = (call_id, name, [])
            return StreamProgress(utf8_size(call_id) + utf8_size(name))
        if kind == "content_block_stop":
            index = want(data, "index", int)
            reasoning = self.reasoning.pop(index, None)
            if reasoning is not None:
                return reasoning.block()
            pending = self.tools.pop(index, None)
            return ToolCallRequested(self._tool_call(*pending)) if pending is not None else None
        if kind == "message_start":
            message = want(data, "message", dict)
            self._count(want(message, "usage", dict, "message.", optional=True))
        elif kind == "message_delta":
            delta = want(data, "delta", dict)
            self.stop_reason = want(delta, "stop_reason", str, "delta.", optional=True) or self.stop_reason
            self._count(want(data, "usage", dict, optional=True))
        elif kind == "message_stop":
            usage = self.usage
            self.finished = StepFinished(
                self.stop_reason,
                Usage(
                    input_tokens=usage.get("input_tokens", 0),
                    output_tokens=usage.get("output_tokens", 0),
                    cache_read_tokens=usage.get("cache_read_input_tokens", 0),
                    cache_write_tokens=usage.get("cache_creation_input_tokens", 0),
                ),
            )
        elif kind == "error":
            raise self._stream_error(data.get("error"))
        return None

    def _start_reasoning(self, index: int, kind: str, block: dict[str, Any]) -> StreamProgress:
        if index in self.tools or index in self.reasoning:
            raise Malformed(f"content_block_start for index {index}, which is already open")
        if kind == "redacted_thinking":
            opened = _OpenReasoning("redacted", data=want(block, "data", str, "content_block."))
        else:
            opened = _OpenReasoning("thinking")
            opened.text.append(want(block, "thinking", str, "content_block.", optional=True) or "")
            opened.signature.append(want(block, "signature", str, "content_block.", optional=True) or "")
        self.reasoning[index] = opened
        return StreamProgress(opened.size, "reasoning")

    def _count(self, usage: dict[str, Any] | None) -> None:
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            if usage is not None and key in usage:
                self.usage[key] = count(usage, key)

    def _tool_call(self, call_id: str, name: str, pieces: list[str]) -> ToolCall:
        return ToolCall(call_id, name, tool_arguments(self.endpoint, name, call_id, "".join(pieces)))

    def _stream_error(self, error: Any) -> ProviderError:
        error = error if isinstance(error, dict) else {}
        kind = error.get("type") if isinstance(error.get("type"), str) else "error"
        message = error.get("message") if isinstance(error.get("message"), str) else "no detail"
        return ProviderError(
            f"{PROVIDER}: stream error {excerpt(' '.join(kind.split()), 100)}: {excerpt(' '.join(message.split()), 500)} (POST {self.endpoint.url})",
            retryable=kind in RETRYABLE_STREAM_ERRORS,
            provider=PROVIDER,
            status=529 if kind == "overloaded_error" else None,
        )


@attrs.define
class _OpenReasoning:
    """A reasoning block being streamed: its thinking and signature pieces, or its redacted data."""

    kind: Literal["thinking", "redacted"]
    text: list[str] = attrs.Factory(list)
    signature: list[str] = attrs.Factory(list)
    data: str = ""

    @property
    def size(self) -> int:
        return sum(utf8_size(piece) for piece in (*self.text, *self.signature, self.data))

    def block(self) -> ReasoningBlock:
        return ReasoningBlock(self.kind, "".join(self.text), "".join(self.signature), self.data, PROVIDER)
