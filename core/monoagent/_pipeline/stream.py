"""One provider step's stream, read within bounds: the reader every provider call goes through.

Every provider stream is bounded here, whatever runtime produced it (:class:`StreamLimits`, from
``providers.client``): an idle timeout (no progress: a non-empty text delta, a tool call, a
:class:`~monoagent._kernel.model.StreamProgress` with bytes, the step's end; pings never reach the kernel
and an empty delta is no progress), a deadline from the request to the end, a cap on the output
bytes (text, tool-call arguments, reasoning) and on tool calls per step
(:data:`MAX_TOOL_CALLS_PER_STEP`), and the type of every event and field the harness reads, tool
arguments included (JSON data nested at most :data:`MAX_ARGUMENT_DEPTH` deep). Each violation is
a one-line :class:`~monoagent._kernel.errors.ProviderError` with a ``code``; only the idle timeout is
retryable. The clock is checked on every event as well as by a timer, so a runtime that never
awaits is bounded too. The stream ends at its ``StepFinished``: nothing after it is read.

The harness reads every step through :func:`read_step` (from :mod:`monoagent._pipeline.provider_call`),
and so does anything else that calls a provider (the ``summary`` compaction policy).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from monoagent._boundary.text import utf8_len, utf8_prefix
from monoagent._kernel.errors import ProviderError
from monoagent._kernel.model import (
    ProviderRequest,
    ReasoningBlock,
    StepFinished,
    StreamProgress,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
)

if TYPE_CHECKING:
    from monoagent._kernel.config import ProviderClientConfig
    from monoagent._kernel.interfaces import ProviderRuntime

MAX_TOOL_CALLS_PER_STEP = 1024
"""Tool calls one provider step may request; more is a ``too_many_tool_calls`` ProviderError."""

RESCHEDULE_EVERY = 0.001
"""Seconds: progress moves the idle timer at most this often, so it may fire up to this much early."""

MAX_ARGUMENT_DEPTH = 64
"""How deep a tool call's arguments may nest objects and arrays (the arguments object is level 1)."""


def too_deep(value: object, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether ``value`` nests dicts, lists or tuples more than ``limit`` levels deep (no recursion)."""
    if not isinstance(value, (dict, list, tuple)):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return False


@attrs.frozen
class StreamLimits:
    """The bounds of one provider stream, from ``providers.client`` (seconds and bytes)."""

    idle: float
    timeout: float
    max_bytes: int

    @classmethod
    def from_config(cls, client: ProviderClientConfig) -> StreamLimits:
        return cls(client.stream_idle_timeout_ms / 1000, client.stream_timeout_ms / 1000, client.max_stream_bytes)


def _stream_error(model: str, message: str, code: str, *, retryable: bool = False) -> ProviderError:
    return ProviderError(f"{model}: {message}", retryable=retryable, provider=model.partition(":")[0], code=code)


def _malformed(model: str, what: str) -> ProviderError:
    return _stream_error(
        model,
        f"the runtime yielded {what}; a runtime yields TextDelta(str), ToolCallRequested(ToolCall with str id and "
        f"name and a JSON object of arguments), StreamProgress(int), ReasoningBlock(str fields) and "
        f"StepFinished(str, Usage of ints)",
        "malformed_event",
    )


def _counts_ok(usage: object) -> bool:
    return isinstance(usage, Usage) and all(
        type(value) is int and value >= 0
        for value in (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
    )


def canonical_arguments(model: str, call: object) -> str:
    """The canonical JSON of a requested tool call's arguments, or the ``malformed_event`` error."""
    if not isinstance(call, ToolCall) or type(call.id) is not str or type(call.name) is not str:
        raise _malformed(model, f"a tool call that is not a ToolCall of str id and name ({type(call).__name__})")
    arguments = call.arguments
    if not isinstance(arguments, dict):
        raise _malformed(model, f"tool call {call.name[:64]!r} with arguments of type {type(arguments).__name__}")
    if too_deep(arguments):
        raise _malformed(model, f"tool call {call.name[:64]!r} with arguments nested over {MAX_ARGUMENT_DEPTH} levels deep")
    try:
        return json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _malformed(model, f"tool call {call.name[:64]!r} with arguments that are not JSON data ({type(exc).__name__})") from None


async def read_step(
    runtime: ProviderRuntime,
    request: ProviderRequest,
    *,
    model: str,
    limits: StreamLimits,
    on_text: Callable[[str], object],
    replaced: dict[str, int] | None = None,
    reasoning: list[ReasoningBlock] | None = None,
) -> tuple[list[ToolCall], StepFinished]:
    """Read one provider step's stream within ``limits``: its tool calls and its end.

    Every non-empty text piece goes to ``on_text`` (synchronously, as it arrives). Everything
    the module docstring promises about a stream holds here (types, bytes, idle timeout,
    deadline, tool calls per step); a violation raises a one-line ProviderError with its code.
    The stream is always closed, also on cancellation, and nothing after its ``StepFinished``
    is read. The harness reads every step through it, and so does anything else that calls a
    provider (the ``summary`` compaction policy). When ``replaced`` is given, it counts, per
    event field (``text_delta.text``), the surrogates the model classes replaced with U+FFFD.
    When ``reasoning`` is given, the step's reasoning blocks are appended to it in stream order;
    their bytes count towards the cap either way.
    """
    calls: list[ToolCall] = []
    finished = StepFinished()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.timeout
    settled = provisional = thinking = 0  # output bytes; progress stays provisional until its call or block arrives
    stream = runtime.stream(request)
    armed = loop.time()  # when the idle timer was last moved: it moves at most once a millisecond
    expires = min(deadline, armed + limits.idle)  # the timer's when(), which is never None here
    timer = asyncio.timeout_at(expires)
    try:
        async with timer:
            async for event in stream:
                now = loop.time()
                if replaced is not None:
                    for path, count in getattr(event, "invalid_unicode", ()):
                        key = f"{_EVENT_NAMES.get(type(event), type(event).__name__)}.{path}"
                        replaced[key] = replaced.get(key, 0) + count
                if isinstance(event, TextDelta):
                    text = event.text
                    if type(text) is not str:
                        raise _malformed(model, f"a TextDelta whose text is {type(text).__name__}")
                    progress = bool(text)
                    if progress:
                        settled += len(text) if text.isascii() else utf8_len(text)
                        on_text(text)
                elif isinstance(event, ToolCallRequested):
                    call = event.call
                    arguments = canonical_arguments(model, call)
                    calls.append(call)
                    if len(calls) > MAX_TOOL_CALLS_PER_STEP:
                        raise _stream_error(model, f"more than {MAX_TOOL_CALLS_PER_STEP} tool calls in one step", "too_many_tool_calls")
                    provisional = 0
                    settled += utf8_len(arguments) + utf8_len(call.id) + utf8_len(call.name)
                    progress = True
                elif isinstance(event, StreamProgress):
                    size = event.bytes
                    if type(size) is not int or size < 0:
                        raise _malformed(model, f"a StreamProgress whose bytes are not a count ({type(size).__name__})")
                    if event.kind == "tool_arguments":
                        provisional += size
                    elif event.kind == "reasoning":
                        thinking += size
                    else:
                        settled += size
                    progress = size > 0
                elif isinstance(event, ReasoningBlock):
                    if not all(type(v) is str for v in (event.text, event.signature, event.data, event.provider)):
                        raise _malformed(model, "a ReasoningBlock whose text, signature, data or provider is not a str")
                    thinking = 0
                    settled += event.size
                    progress = True
                    if reasoning is not None:
                        reasoning.append(event)
                elif isinstance(event, StepFinished):
                    if type(event.stop_reason) is not str or not _counts_ok(event.usage):
                        raise _malformed(model, "a StepFinished whose stop_reason is not a str or whose usage is not counts")
                    finished = event
                    if not (event.stop_reason.isascii() and len(event.stop_reason) <= 64):
                        finished = attrs.evolve(event, stop_reason=utf8_prefix(event.stop_reason, 64).text)
                    break
                else:
                    raise _malformed(model, f"an object of type {type(event).__name__}, which is not a ProviderEvent")
                if settled + provisional + thinking > limits.max_bytes:
                    raise _stream_error(
                        model,
                        f"the stream passed providers.client.maxStreamBytes = {limits.max_bytes} bytes of output "
                        f"(text, tool-call arguments, reasoning); it was stopped",
                        "stream_too_large",
                    )
                if progress:
                    if now - armed >= RESCHEDULE_EVERY:
                        armed = now
                        expires = min(deadline, now + limits.idle)
                        timer.reschedule(expires)
                elif now >= expires:  # a runtime that never awaits cannot be stopped by the timer
                    raise TimeoutError
    except TimeoutError:
        if not timer.expired() and loop.time() < expires:
            raise  # the runtime's own TimeoutError
        raise _timed_out(model, limits, deadline) from None
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    return calls, finished


def _timed_out(model: str, limits: StreamLimits, deadline: float) -> ProviderError:
    if asyncio.get_running_loop().time() >= deadline:
        return _stream_error(
            model,
            f"the stream passed providers.client.streamTimeoutMs = {round(limits.timeout * 1000)} ms from the request; "
            f"it was stopped",
            "stream_timeout",
        )
    return _stream_error(
        model,
        f"no progress in the stream for providers.client.streamIdleTimeoutMs = {round(limits.idle * 1000)} ms "
        f"(nothing, or only keep-alives, arrived)",
        "stream_idle_timeout",
        retryable=True,
    )


_EVENT_NAMES = {TextDelta: "text_delta", ToolCallRequested: "tool_call", StepFinished: "step_finished", ReasoningBlock: "reasoning"}
