"""The Anthropic Messages API on the wire: request bodies, the SSE stream, errors.

Kept out of the ``anthropic`` plugin module so that loading the plugin (every CLI start) does not
build these classes; :func:`monoagent_plugins.anthropic.make_runtime` imports it on first use.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs

from monoagent.errors import ProviderError
from monoagent.model import Message, ProviderEvent, ProviderRequest, StepFinished, TextDelta, ToolCall, ToolCallRequested, Usage

from .anthropic import API_VERSION, PROVIDER, AnthropicConfig
from .provider_http import Endpoint, bad_event, normalise_base_url, sse_events, stream_ended


@attrs.frozen
class CacheControl:
    type: str


@attrs.frozen
class SystemBlock:
    type: str
    text: str
    cache_control: CacheControl | None = None


@attrs.frozen
class TextBlock:
    type: str
    text: str


@attrs.frozen
class ToolUseBlock:
    type: str
    id: str
    name: str
    input: dict[str, Any]


@attrs.frozen
class ToolResultBlock:
    type: str
    tool_use_id: str
    content: str


Block = TextBlock | ToolUseBlock | ToolResultBlock


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
    stream: bool


_converter: Any = None


def _wire_converter() -> Any:
    global _converter
    if _converter is None:
        import cattrs

        _converter = cattrs.Converter(omit_if_default=True)
    return _converter


def _blocks(message: Message) -> tuple[str, list[Block]]:
    if message.role == "tool":
        return "user", [ToolResultBlock("tool_result", message.tool_call_id or "", message.content)]
    # The API refuses a blank text block ("text content blocks must contain non-whitespace text"),
    # yet Claude itself may stream one before a tool_use: the tool calls alone carry that turn.
    blocks: list[Block] = [TextBlock("text", message.content)] if message.content.strip() or not message.tool_calls else []
    blocks.extend(ToolUseBlock("tool_use", call.id, call.name, dict(call.arguments)) for call in message.tool_calls)
    return ("assistant" if message.role == "assistant" else "user"), blocks


def wire_messages(messages: tuple[Message, ...]) -> list[WireMessage]:
    """Provider-neutral messages as Messages API turns; consecutive same-role turns are merged.

    Merging puts the tool results of one assistant step into one user message, as the API
    requires, and keeps a user message that follows them in the same turn.
    """
    wire: list[WireMessage] = []
    for message in messages:
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        if wire and wire[-1].role == role:
            wire[-1].content.extend(blocks)
        else:
            wire.append(WireMessage(role, blocks))
    return wire


def request_body(request: ProviderRequest, max_tokens: int) -> bytes:
    """The JSON body for ``request``: two system blocks, cache control on the stable one only."""
    prompt = request.prompt
    system = []
    if prompt.stable_text:
        system.append(SystemBlock("text", prompt.stable_text, CacheControl("ephemeral")))
    if prompt.dynamic_text:
        system.append(SystemBlock("text", prompt.dynamic_text))
    body = MessagesRequest(
        model=request.model,
        max_tokens=request.max_output_tokens or max_tokens,
        system=system or None,
        messages=wire_messages(request.messages),
        tools=[WireTool(t.name, t.description, t.input_schema) for t in request.tools] or None,
        stream=True,
    )
    return json.dumps(_wire_converter().unstructure(body), ensure_ascii=False).encode("utf-8")


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

    def __init__(self, model: str, config: AnthropicConfig, api_key: str) -> None:
        self.name = f"{PROVIDER}:{model}"
        self.model = model
        self.context_window = config.context_window
        self.max_tokens = config.max_output_tokens
        self.endpoint = Endpoint(
            provider=PROVIDER,
            url=f"{normalise_base_url(config.base_url)}/v1/messages",
            headers={"x-api-key": api_key, "anthropic-version": API_VERSION},
            setting="providers.anthropic.baseUrl",
            url_env="ANTHROPIC_BASE_URL",
            connect_timeout=config.connect_timeout_seconds,
            read_timeout=config.timeout_seconds,
            key_env="ANTHROPIC_API_KEY",
        )

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        endpoint = self.endpoint
        body = request_body(request, self.max_tokens)
        usage: dict[str, int] = {}
        stop_reason = "end_turn"
        tools: dict[int, tuple[str, str, list[str]]] = {}
        finished: StepFinished | None = None
        async with sse_events(endpoint, body, is_context_limit) as events:
            async for sse in events:
                if sse.event == "ping" or finished is not None:
                    continue
                try:
                    data = json.loads(sse.data)
                    kind = data["type"]
                    if kind == "content_block_delta":
                        delta = data["delta"]
                        if delta["type"] == "text_delta":
                            event: ProviderEvent | None = TextDelta(delta["text"])
                        else:
                            event = None
                            if delta["type"] == "input_json_delta":
                                tools[data["index"]][2].append(delta["partial_json"])
                    elif kind == "content_block_start":
                        event = None
                        block = data["content_block"]
                        if block["type"] == "tool_use":
                            tools[data["index"]] = (block["id"], block["name"], [])
                    elif kind == "content_block_stop":
                        event = ToolCallRequested(self._tool_call(*tools.pop(data["index"]))) if data["index"] in tools else None
                    elif kind == "message_start":
                        event = None
                        usage.update(_counts(data["message"].get("usage")))
                    elif kind == "message_delta":
                        event = None
                        stop_reason = data["delta"].get("stop_reason") or stop_reason
                        usage.update(_counts(data.get("usage")))
                    elif kind == "message_stop":
                        event = None
                        finished = StepFinished(
                            stop_reason,
                            Usage(
                                input_tokens=usage.get("input_tokens", 0),
                                output_tokens=usage.get("output_tokens", 0),
                                cache_read_tokens=usage.get("cache_read_input_tokens", 0),
                                cache_write_tokens=usage.get("cache_creation_input_tokens", 0),
                            ),
                        )
                    elif kind == "error":
                        raise self._stream_error(data.get("error") or {})
                    else:
                        event = None
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise bad_event(endpoint, sse.data, exc) from None
                if event is not None:
                    yield event
        # Reading on to the end of the body after message_stop lets the connection be reused.
        if finished is None:
            raise stream_ended(endpoint, "message_stop")
        yield finished

    def _tool_call(self, call_id: str, name: str, pieces: list[str]) -> ToolCall:
        text = "".join(pieces)
        try:
            arguments = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise ProviderError(
                f"{PROVIDER}: tool call {name!r} ({call_id}) has arguments that are not JSON ({exc}): {text[:200]!r}",
                provider=PROVIDER,
            ) from None
        if not isinstance(arguments, dict):
            raise ProviderError(f"{PROVIDER}: tool call {name!r} ({call_id}) has arguments that are not a JSON object", provider=PROVIDER)
        return ToolCall(call_id, name, arguments)

    def _stream_error(self, error: dict[str, Any]) -> ProviderError:
        kind = str(error.get("type") or "error")
        message = " ".join(str(error.get("message") or "no detail").split())
        return ProviderError(
            f"{PROVIDER}: stream error {kind}: {message} (POST {self.endpoint.url})",
            retryable=kind in RETRYABLE_STREAM_ERRORS,
            provider=PROVIDER,
            status=529 if kind == "overloaded_error" else None,
        )


def _counts(usage: Any) -> dict[str, int]:
    if not isinstance(usage, dict):
        return {}
    return {key: value for key, value in usage.items() if isinstance(value, int) and not isinstance(value, bool)}
