"""The documented limits of an HTTP provider, each checked at and either side of its boundary.

Part of :class:`~monoagent.testing.ProviderContract` (it inherits these tests); a separate module
so that each stays readable in one sitting. Each test builds data that makes *its* limit the one
that binds, and each limit is a class attribute a provider declares (None: the test skips, naming
the attribute), with the documented value of the bundled providers as the default:

- ``max_event_bytes`` (``providers.client.maxStreamEventBytes``, 4 MiB): a line of exactly
  that many bytes is read, one byte more is refused (``event_too_large``) while it is read; an
  event whose ``data:`` lines are each short but add up past it is refused, one well under it read;
- ``error_body_max_bytes`` (64 KiB): an HTTP error body of exactly that size is read whole (its
  message reaches the error), one byte more is not read past the cap;
- ``retry_after_headers``: the forms of a server's retry hint the provider reads into
  ``ProviderError.retry_after`` (``retry-after-ms``, ``Retry-After`` in seconds or as an HTTP
  date, OpenAI's ``x-ratelimit-reset-*`` on a 429 only), a value that is not a finite number
  ignored;
- the harness's limits as the provider meets them (:func:`monoagent._pipeline.stream.read_step`
  and a real Agent): 1,024 tool calls in one step pass and 1,025 are ``too_many_tool_calls``;
  tool arguments nested 64 levels deep pass and 65 are ``malformed_event``;
  ``providers.client.maxRetries`` retries of a retryable failure and not one more; a
  ``Retry-After`` honoured as the delay and bounded by ``maxRetryDelayMs``.

The harness-level tests run the provider's runtime inside a fresh Agent under a model id of
their own (``contract:<model>``), so its prefix never clashes with an installed plugin, and
replace the harness's ``sleep`` (``monoagent._pipeline.provider_call.sleep``) so nothing waits.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monoagent._kernel.errors import ProviderError
from monoagent._kernel.interfaces import ProviderRuntime
from monoagent._kernel.model import TextDelta, ToolCall
from monoagent.testing.provider_runtime_contract import ContractModel
from monoagent.testing.wire_server import (
    LOOKUP,
    Reply,
    ScriptedToolCall,
    WireServer,
    collect,
    contract_request,
    expect_error,
)

if TYPE_CHECKING:
    import pytest

    from monoagent._agent import Agent

__all__ = ["ProviderLimitsContract", "nested_arguments"]

_LINE_END = re.compile(rb"\r\n|\r|\n")


def _longest_line(frames: Iterable[Any]) -> int:
    data = b"".join(frame for frame in frames if isinstance(frame, bytes))
    return max(len(line) for line in _LINE_END.split(data))


def _ignore(text: str) -> None:
    """The text of a step read for its tool calls alone."""


def nested_arguments(depth: int) -> dict[str, Any]:
    """Tool-call arguments nested exactly ``depth`` levels deep (the arguments object is level 1)."""
    value: Any = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value} if depth > 1 else {}


def _read_step(runtime: ProviderRuntime) -> list[ToolCall]:
    """One step read as the harness reads every step (:func:`monoagent._pipeline.stream.read_step`), with the default limits."""
    from monoagent._pipeline.stream import StreamLimits, read_step

    limits = StreamLimits(idle=300.0, timeout=1800.0, max_bytes=16 * 1024 * 1024)

    async def step() -> list[ToolCall]:
        found, _ = await read_step(runtime, contract_request(tools=[LOOKUP]), model="contract:model-x", limits=limits, on_text=_ignore)
        return found

    return asyncio.run(step())


def _read_step_error(runtime: ProviderRuntime, answered: str) -> ProviderError:
    try:
        _read_step(runtime)
    except ProviderError as exc:
        return exc
    raise AssertionError(answered)


class ProviderLimitsContract:
    """The limit tests of :class:`~monoagent.testing.ProviderContract`; see the module docstring."""

    max_event_bytes: int | None = 4 * 1024 * 1024
    error_body_max_bytes: int | None = 64 * 1024
    retry_after_headers: frozenset[str] = frozenset(
        {"retry-after-ms", "retry-after", "retry-after-date", "x-ratelimit-reset"}
    )

    def _needs(self, attribute: str) -> Any:
        value = getattr(self, attribute)
        if value is None:
            import pytest

            pytest.skip(f"needs {type(self).__name__}.{attribute}; this provider declares none")
        return value

    # ------------------------------------------------------------------ what a server sends

    def test_the_longest_line_is_read_and_one_byte_more_refused(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        limit = self._needs("max_event_bytes")
        probe = 4096
        overhead = _longest_line(provider_server.frames(Reply(text_pieces=("A" * probe,)))) - probe
        text = "A" * (limit - overhead)
        assert _longest_line(provider_server.frames(Reply(text_pieces=(text,)))) == limit, "the wire's text line does not scale with its text"
        provider_server.enqueue(Reply(text_pieces=(text,)), Reply(text_pieces=(text + "A",)))
        events = asyncio.run(collect(runtime, contract_request()))
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text, f"a line of exactly {limit} bytes is read whole"
        error = expect_error(runtime, contract_request())
        assert error.code == "event_too_large", f"a line of {limit + 1} bytes: {error}"
        assert not error.retryable and "\n" not in str(error)

    def test_an_event_of_short_lines_past_the_cap_is_refused(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        limit = self._needs("max_event_bytes")
        line = limit // 16  # every line far under the line cap: only the event's total can bind

        def padded(lines: int) -> list[bytes]:
            """The frames of a text answer whose one text event carries ``lines`` padding lines in its data."""
            frames: list[Any] = []
            for frame in provider_server.frames(Reply(text_pieces=("padded",))):
                if isinstance(frame, bytes) and b'"padded"' in frame:
                    head, _, rest = frame.partition(b"data:")
                    data = rest.strip().partition(b"\n")[0]
                    event = json.loads(data)
                    event["contract_padding"] = ["P" * line] * lines
                    text = json.dumps(event, indent=0)
                    frame = head + b"".join(b"data: " + part.encode() + b"\n" for part in text.split("\n")) + b"\n"
                frames.append(frame)
            return frames

        provider_server.enqueue(Reply(raw_frames=padded(8)), Reply(raw_frames=padded(17)))
        events = asyncio.run(collect(runtime, contract_request()))
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "padded", "an event of half the cap is read"
        error = expect_error(runtime, contract_request())
        assert error.code == "event_too_large", f"an event of 17 lines of {line} bytes: {error}"

    def test_an_error_body_is_read_up_to_its_cap(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        limit = self._needs("error_body_max_bytes")
        overhead = len(provider_server.error_body(Reply(status=500, error_message="")))
        message = "w " * ((limit - overhead - 20) // 2) + "tail-mark"
        message += "x" * (limit - overhead - len(message))
        assert len(provider_server.error_body(Reply(status=500, error_message=message))) == limit
        provider_server.enqueue(Reply(status=500, error_message=message), Reply(status=500, error_message=message + "x"))
        whole = expect_error(runtime, contract_request())
        assert "tail-mark" + "x" in str(whole), f"an error body of exactly {limit} bytes is read whole"
        cut = expect_error(runtime, contract_request())
        assert cut.retryable and cut.status == 500, "an error body over the cap still makes the status's error"
        assert "tail-mark" not in str(cut), f"an error body of {limit + 1} bytes is read only up to its cap"
        assert "\n" not in str(cut)

    # ------------------------------------------------------------------ retry hints

    def test_retry_hints_are_read_in_each_documented_form(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        forms = self.retry_after_headers
        date = email.utils.formatdate(4_102_444_800, usegmt=True)  # 2100-01-01: far ahead of any clock here
        cases = [
            ("retry-after-ms", 429, {"retry-after-ms": "1500"}, 1.5),
            ("retry-after-ms", 429, {"retry-after-ms": "2500", "retry-after": "9"}, 2.5),
            ("retry-after", 503, {"retry-after": "7"}, 7.0),
            ("retry-after", 429, {"retry-after": "0"}, 0.0),
            ("retry-after", 429, {"retry-after": "inf"}, None),
            ("retry-after", 429, {"retry-after": "nan"}, None),
            ("retry-after-date", 429, {"retry-after": date}, "future"),
            ("retry-after-date", 429, {"retry-after": "Sat, 01 Jan 2000 00:00:00 GMT"}, 0.0),
            ("x-ratelimit-reset", 429, {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, 360.0),
            ("x-ratelimit-reset", 429, {"x-ratelimit-reset-tokens": "20ms"}, 0.02),
            ("x-ratelimit-reset", 503, {"x-ratelimit-reset-requests": "30s"}, None),
        ]
        played = [case for case in cases if case[0] in forms]
        if not played:
            import pytest

            pytest.skip(f"{type(self).__name__}.retry_after_headers declares no retry hint")
        for _form, status, headers, expected in played:
            provider_server.enqueue(Reply(status=status, headers=headers))
            error = expect_error(runtime, contract_request())
            assert error.retryable and error.status == status, (status, headers)
            if expected == "future":
                assert error.retry_after is not None and error.retry_after > 3600, (headers, error.retry_after)
            else:
                assert error.retry_after == expected, (status, headers, error.retry_after)

    # ------------------------------------------------------------------ the harness's limits

    def test_tool_calls_per_step_up_to_the_cap(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        from monoagent._pipeline.stream import MAX_TOOL_CALLS_PER_STEP

        def calls(n: int) -> tuple[ScriptedToolCall, ...]:
            return tuple(ScriptedToolCall(f"call_{i}", "lookup", (f'{{"word": "w{i}"}}',)) for i in range(n))

        provider_server.enqueue(Reply(tool_calls=calls(MAX_TOOL_CALLS_PER_STEP)), Reply(tool_calls=calls(MAX_TOOL_CALLS_PER_STEP + 1)))
        found = _read_step(runtime)
        assert [(c.id, c.arguments) for c in found] == [(f"call_{i}", {"word": f"w{i}"}) for i in range(MAX_TOOL_CALLS_PER_STEP)]
        error = _read_step_error(runtime, f"{MAX_TOOL_CALLS_PER_STEP + 1} tool calls in one step were read")
        assert error.code == "too_many_tool_calls", str(error)
        assert str(MAX_TOOL_CALLS_PER_STEP) in str(error).replace(",", ""), f"the error names the limit: {error}"

    def test_tool_arguments_nest_up_to_the_cap(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        from monoagent._pipeline.stream import MAX_ARGUMENT_DEPTH

        deepest, too_deep = nested_arguments(MAX_ARGUMENT_DEPTH), nested_arguments(MAX_ARGUMENT_DEPTH + 1)
        for arguments in (deepest, too_deep):
            provider_server.enqueue(Reply(tool_calls=(ScriptedToolCall("call_deep", "lookup", (json.dumps(arguments),)),)))
        assert [c.arguments for c in _read_step(runtime)] == [deepest], f"arguments {MAX_ARGUMENT_DEPTH} levels deep pass"
        error = _read_step_error(runtime, f"tool arguments nested {MAX_ARGUMENT_DEPTH + 1} levels deep were read")
        assert error.code == "malformed_event" and not error.retryable, str(error)

    def _harness(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: ProviderRuntime, **client: Any) -> tuple[Agent, list[float]]:
        from monoagent._pipeline import provider_call
        from monoagent.testing import fresh_agent

        waited: list[float] = []

        async def no_wait(seconds: float) -> None:
            waited.append(seconds)

        monkeypatch.setattr(provider_call, "sleep", no_wait)
        monkeypatch.setattr(provider_call, "jitter", lambda: 0.5)
        agent = fresh_agent(tmp_path, provider=ContractModel(runtime), config={"providers": {"client": client}})
        return agent, waited

    def test_retries_stop_at_the_cap(self, provider_server: WireServer, runtime: ProviderRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        agent, _ = self._harness(tmp_path, monkeypatch, runtime, maxRetries=2)
        try:
            provider_server.enqueue(Reply(status=503), Reply(status=503), Reply(text_pieces=("third ", "time")))
            assert agent.run_sync("hi", conversation_id="retries").text == "third time"
            assert len(provider_server.requests) == 3, "two retries are allowed"
            provider_server.enqueue(*[Reply(status=503, error_message="still down") for _ in range(4)])
            try:
                agent.run_sync("hi", conversation_id="retries")
            except ProviderError as exc:
                assert "still down" in str(exc) and exc.status == 503, str(exc)
            else:
                raise AssertionError("a fourth attempt answered: maxRetries = 2 allows three")
            assert len(provider_server.requests) == 6, "the third retry was made"
        finally:
            agent.close()

    def test_retry_after_is_honoured_and_bounded(self, provider_server: WireServer, runtime: ProviderRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        if "retry-after" not in self.retry_after_headers:
            import pytest

            pytest.skip(f"{type(self).__name__}.retry_after_headers does not declare 'retry-after'")
        agent, waited = self._harness(tmp_path, monkeypatch, runtime, maxRetries=3, maxRetryDelayMs=5000)
        try:
            provider_server.enqueue(
                Reply(status=429, headers={"retry-after": "4.999"}),
                Reply(status=429, headers={"retry-after": "5"}),
                Reply(status=429, headers={"retry-after": "5.001"}),
                Reply(text_pieces=("ok",)),
            )
            assert agent.run_sync("hi").text == "ok"
        finally:
            agent.close()
        assert waited == [4.999, 5.0, 5.0], "Retry-After is the delay, never past maxRetryDelayMs"
