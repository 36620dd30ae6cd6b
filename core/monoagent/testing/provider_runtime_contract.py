"""The provider-runtime contract: what any :class:`~monoagent._kernel.interfaces.ProviderRuntime` must do.

:class:`~monoagent.testing.ProviderContract` proves an HTTP provider against a scripted server
speaking its wire format. This suite needs no server: it checks the protocol the harness relies
on, so an in-process runtime (a local model, a test double, a provider whose SDK hides the wire)
proves itself too. A test module subclasses :class:`ProviderRuntimeContract` and says how to make
its runtime play a :class:`StepScript`::

    from monoagent.testing import ProviderRuntimeContract

    class TestMyRuntimeContract(ProviderRuntimeContract):
        def runtime_for(self, script):
            if script is None:                  # any answer of the runtime's own
                return MyRuntime()
            if script.stall_after is not None:  # a script it cannot play: those tests skip
                return None
            return MyRuntime(replay=script)

What it proves: every event is a :data:`~monoagent._kernel.model.ProviderEvent`; a stream ends
with exactly one :class:`~monoagent._kernel.model.StepFinished` and nothing after it; text deltas
join to the text, in order, before the step ends; a tool call has a non-empty unique id, a name
and a JSON object of arguments, and a step with tool calls stops with ``tool_use``; usage is
non-negative token counts; a failure is a one-line
:class:`~monoagent._kernel.errors.ProviderError` whose ``retryable`` says whether to try again;
cancelling the consuming task while the runtime waits raises ``CancelledError`` out of the stream
within :data:`PROMPT_SECONDS` (not swallowed, not turned into an error) and leaves no task of the
runtime running; closing the stream early (``aclose``) ends it the same way. Also: an answer's stop
reason is one of :data:`STOP_REASONS`; an error keeps the model's message and names its provider;
usage counts the prompt and the answer (``reports_usage``); with :meth:`runtime_for_steps`,
successive calls play successive steps (a call past the last is a ProviderError) and, through a
real Agent, ``maxRetries`` retries are made and not one more; with :meth:`misconfigurations`,
each is refused before any request, saying what to fix.

Like the other contracts it runs its coroutines with ``asyncio.run`` and needs pytest only to
skip a test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._kernel.errors import ConfigError, ProviderError
from monoagent._kernel.interfaces import ProviderRuntime, WindowedProviderRuntime
from monoagent._kernel.model import (
    ProviderEvent,
    ProviderRequest,
    ReasoningBlock,
    StepFinished,
    StreamProgress,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
)
from monoagent.testing.wire_server import LOOKUP, cancel_after_first_text, contract_request

if TYPE_CHECKING:
    import pytest

__all__ = ["PROMPT_SECONDS", "STOP_REASONS", "Misconfiguration", "ProviderRuntimeContract", "StepScript", "stream_problems"]

PROMPT_SECONDS = 5.0
"""How long a cancelled or closed stream may take to end (a bound for a slow machine, not a wait)."""

_EVENT_TYPES = (TextDelta, ToolCallRequested, StepFinished, StreamProgress, ReasoningBlock)

STOP_REASONS = frozenset({"end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal"})
"""The harness's stop reasons (Anthropic's words, docs/providers.md); a runtime maps its API's onto them."""


@attrs.frozen
class Misconfiguration:
    """A configuration the runtime's provider must refuse before any request (see
    :meth:`ProviderRuntimeContract.misconfigurations`): ``build`` makes the runtime from it and
    must raise :class:`~monoagent._kernel.errors.ConfigError` (or a ProviderError that is not
    retryable, as a missing API key is) saying ``must_say`` (the setting to fix, the offending key)."""

    what: str
    build: Callable[[], object]
    must_say: str


@attrs.frozen
class StepScript:
    """One provider step the contract asks a runtime to play.

    The step streams ``text_pieces`` (the contract compares their join, so a runtime may cut the
    text differently), then ``tool_calls``, then ends. ``error`` makes the step fail with a
    :class:`~monoagent._kernel.errors.ProviderError` of that message and ``retryable`` instead.
    ``stall_after`` makes the runtime stop after that many text pieces and wait, without end,
    until it is cancelled.
    """

    text_pieces: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    retryable: bool = False
    stall_after: int | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_pieces)

    def describe(self) -> str:
        if self.error is not None:
            return f"a {'retryable' if self.retryable else 'fatal'} error"
        if self.stall_after is not None:
            return f"a stream that stalls after {self.stall_after} text piece(s) until cancelled"
        return f"{len(self.text_pieces)} text piece(s) and {len(self.tool_calls)} tool call(s)"


def _json_object(value: Any) -> bool:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        return False
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def stream_problems(events: Sequence[Any]) -> list[str]:
    """What in one step's ``events`` breaks the stream rules of the protocol; empty when none does."""
    problems: list[str] = []
    finals = [n for n, event in enumerate(events) if isinstance(event, StepFinished)]
    if len(finals) != 1:
        problems.append(f"a stream ends with exactly one StepFinished; this one has {len(finals)}")
    elif finals[0] != len(events) - 1:
        problems.append(f"nothing follows StepFinished; {len(events) - 1 - finals[0]} event(s) did")
    ids: list[str] = []
    for n, event in enumerate(events):
        if not isinstance(event, _EVENT_TYPES):
            problems.append(f"event {n} is a {type(event).__name__}, not a ProviderEvent")
        elif isinstance(event, TextDelta) and not isinstance(event.text, str):
            problems.append(f"event {n}: TextDelta.text is a {type(event.text).__name__}, not a str")
        elif isinstance(event, ToolCallRequested):
            call = event.call
            if not isinstance(call, ToolCall):
                problems.append(f"event {n}: ToolCallRequested.call is a {type(call).__name__}, not a ToolCall")
                continue
            if not isinstance(call.id, str) or not call.id:
                problems.append(f"event {n}: tool call id {call.id!r} is not a non-empty str")
            if not isinstance(call.name, str) or not call.name:
                problems.append(f"event {n}: tool call name {call.name!r} is not a non-empty str")
            if not _json_object(call.arguments):
                problems.append(f"event {n}: tool call arguments {call.arguments!r:.80} are not a JSON object")
            ids.append(call.id)
        elif isinstance(event, StepFinished):
            usage = event.usage
            counts = attrs.astuple(usage) if isinstance(usage, Usage) else ()
            if not counts or not all(isinstance(c, int) and c >= 0 for c in counts):
                problems.append(f"event {n}: StepFinished.usage {usage!r} is not a Usage of non-negative ints")
            if not isinstance(event.stop_reason, str) or not event.stop_reason:
                problems.append(f"event {n}: StepFinished.stop_reason {event.stop_reason!r} is not a non-empty str")
            elif ids and event.stop_reason != "tool_use":
                problems.append(f"a step with tool calls stops with 'tool_use', not {event.stop_reason!r}")
    if len(set(ids)) != len(ids):
        problems.append(f"tool call ids repeat within one step: {ids}")
    return problems


async def _collect(runtime: ProviderRuntime, script: StepScript | None) -> list[ProviderEvent]:
    tools = [LOOKUP] if script is not None and script.tool_calls else []
    return [event async for event in runtime.stream(contract_request(tools=tools))]


async def _runtime_tasks(before: set[asyncio.Task[Any]], allowed: float) -> list[str]:
    """The tasks started since ``before`` still running once ``allowed`` seconds let them end."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + allowed
    while True:
        running = [t for t in asyncio.all_tasks() if t not in before and t is not asyncio.current_task() and not t.done()]
        if not running or loop.time() > deadline:
            return [getattr(t.get_coro(), "__qualname__", repr(t.get_coro())) for t in running]
        await asyncio.sleep(0.01)  # a bounded wait for the runtime's own tasks to see their cancellation


class ContractModel:
    """The runtime under test under a model id of the contracts' own (``contract:model-x``), so it
    goes into a fresh Agent (``fresh_agent(provider=...)``) without clashing with a plugin's prefix."""

    def __init__(self, runtime: ProviderRuntime) -> None:
        self.runtime = runtime
        self.name = "contract:model-x"
        if isinstance(runtime, WindowedProviderRuntime):  # so the harness budgets it as it would the runtime itself
            self.context_window = runtime.context_window

    def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        return self.runtime.stream(request)


class ProviderRuntimeContract:
    """Subclass as ``Test<Name>RuntimeContract`` and implement :meth:`runtime_for`; pytest collects the rest.

    ``prompt_seconds`` bounds how long a cancelled or closed stream, and the tasks of its
    runtime, may take to end.
    """

    prompt_seconds = PROMPT_SECONDS
    reports_usage = True
    """Whether the runtime reports token usage; one that cannot know it reports zeros and sets this False."""

    def runtime_for(self, script: StepScript | None) -> ProviderRuntime | None:
        """A runtime that plays ``script`` (None: any answer of its own), or None if it cannot (the test skips)."""
        raise NotImplementedError("subclasses of ProviderRuntimeContract implement runtime_for(script)")

    def runtime_for_steps(self, scripts: Sequence[StepScript]) -> ProviderRuntime | None:
        """A runtime whose successive ``stream`` calls play ``scripts`` in order, or None if it cannot.

        Once they are played, a further call fails with a ProviderError (the runtime has nothing
        to answer). The default plays a single script through :meth:`runtime_for`; a runtime
        that can play several (a replayed script, a scripted server) overrides it, and the
        multi-step tests (steps in order, retries through a real Agent) run.
        """
        return self.runtime_for(scripts[0]) if len(scripts) == 1 else None

    def misconfigurations(self) -> Iterable[Misconfiguration]:
        """Configurations the provider refuses before any request (a missing setting, an unknown
        model, an unreadable script...); none by default (that test skips)."""
        return ()

    def playing_steps(self, scripts: Sequence[StepScript]) -> ProviderRuntime:
        runtime = self.runtime_for_steps(scripts)
        if runtime is None:
            import pytest

            pytest.skip(f"this runtime cannot play {len(scripts)} steps in order (runtime_for_steps returned None)")
        return runtime

    def playing(self, script: StepScript | None) -> ProviderRuntime:
        runtime = self.runtime_for(script)
        if runtime is None:
            import pytest

            pytest.skip(f"this runtime cannot play {script.describe() if script else 'an answer'} (runtime_for returned None)")
        return runtime

    # ------------------------------------------------------------------ streaming

    def test_runtime_contract_any_answer_keeps_the_stream_rules(self) -> None:
        runtime = self.playing(None)
        assert isinstance(runtime.name, str) and runtime.name, "a runtime has a name (its provider:model)"
        events = asyncio.run(_collect(runtime, None))
        assert stream_problems(events) == []
        finished = events[-1]
        assert isinstance(finished, StepFinished) and finished.stop_reason in STOP_REASONS, (
            f"stop reason {getattr(finished, 'stop_reason', None)!r}: a runtime reports one of {sorted(STOP_REASONS)}"
        )

    def test_runtime_contract_text_streams_in_order(self) -> None:
        script = StepScript(text_pieces=("Hel", "lo, ", "wörld", " — ", "done ", "and ", "dusted."))
        events = asyncio.run(_collect(self.playing(script), script))
        assert stream_problems(events) == []
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == script.text
        assert [type(e).__name__ for e in events if isinstance(e, ToolCallRequested)] == []
        assert isinstance(events[-1], StepFinished) and events[-1].stop_reason == "end_turn"

    def test_runtime_contract_tool_calls_keep_their_shape(self) -> None:
        calls = (ToolCall("call_a", "lookup", {"word": "café", "limit": 3}), ToolCall("call_b", "lookup", {"word": "b", "n": [1, {"x": None}]}))
        script = StepScript(text_pieces=("Let me ", "check."), tool_calls=calls)
        events = asyncio.run(_collect(self.playing(script), script))
        assert stream_problems(events) == []
        got = [(e.call.id, e.call.name, e.call.arguments) for e in events if isinstance(e, ToolCallRequested)]
        assert got == [(c.id, c.name, c.arguments) for c in calls]
        kinds = [type(e).__name__ for e in events if isinstance(e, (TextDelta, ToolCallRequested))]
        assert kinds == sorted(kinds, key=lambda kind: kind == "ToolCallRequested"), "text streams before the tool calls"

    # ------------------------------------------------------------------ errors

    def test_runtime_contract_errors_carry_retryable(self) -> None:
        for retryable in (True, False):
            script = StepScript(text_pieces=("partial",), error="the model is overloaded", retryable=retryable)
            runtime = self.playing(script)
            try:
                asyncio.run(_collect(runtime, script))
            except ProviderError as exc:
                assert exc.retryable is retryable, f"a {script.describe()} came out with retryable={exc.retryable!r}"
                assert "\n" not in str(exc), "a provider error is one line"
                assert str(script.error) in str(exc), f"the error says what the model's side said ({script.error!r}): {exc}"
                assert isinstance(exc.provider, str) and exc.provider, "a provider error names its provider (ProviderError.provider)"
                assert exc.provider in str(exc), f"the message names the provider {exc.provider!r}: {exc}"
            except Exception as exc:
                raise AssertionError(f"a failing step raised {type(exc).__name__}: {exc}; a runtime raises ProviderError") from exc
            else:
                raise AssertionError(f"the runtime answered where the script asked for {script.describe()}")

    def test_runtime_contract_configuration_errors_fail_before_any_request(self) -> None:
        cases = list(self.misconfigurations())
        if not cases:
            import pytest

            pytest.skip("this runtime declares no misconfigurations (misconfigurations() is empty)")
        for case in cases:
            try:
                case.build()
            except (ConfigError, ProviderError) as exc:
                assert not getattr(exc, "retryable", False), f"{case.what}: a configuration error is not retried"
                assert case.must_say in str(exc), f"{case.what}: the error must say {case.must_say!r}: {exc}"
                if isinstance(exc, ProviderError):
                    assert exc.provider and exc.provider in str(exc), f"{case.what}: the error names its provider: {exc}"
            except Exception as exc:
                raise AssertionError(f"{case.what} raised {type(exc).__name__}: {exc}; a provider raises ConfigError") from exc
            else:
                raise AssertionError(f"{case.what}: the runtime was made; a provider refuses it with a ConfigError")

    # ------------------------------------------------------------------ usage

    def test_runtime_contract_usage_counts_the_prompt_and_the_answer(self) -> None:
        if not self.reports_usage:
            import pytest

            pytest.skip(f"{type(self).__name__}.reports_usage is False: this runtime reports no usage")
        for script in (None, StepScript(text_pieces=("An answer ", "in words.",))):
            events = asyncio.run(_collect(self.playing(script), script))
            usage = events[-1].usage if isinstance(events[-1], StepFinished) else None
            assert isinstance(usage, Usage), events[-1:]
            assert usage.input_tokens + usage.cache_read_tokens > 0, f"a prompt was sent, yet the usage counts none: {usage}"
            assert usage.output_tokens > 0, f"text was streamed, yet the usage counts no output: {usage}"

    # ------------------------------------------------------------------ several steps

    def test_runtime_contract_each_call_plays_the_next_step(self) -> None:
        call = ToolCall("call_look", "lookup", {"word": "first"})
        scripts = (StepScript(tool_calls=(call,)), StepScript(text_pieces=("second",)), StepScript(text_pieces=("third",)))
        runtime = self.playing_steps(scripts)
        first = asyncio.run(_collect(runtime, scripts[0]))
        assert [e.call.arguments for e in first if isinstance(e, ToolCallRequested)] == [call.arguments]
        for script in scripts[1:]:
            events = asyncio.run(_collect(runtime, script))
            assert stream_problems(events) == []
            assert "".join(e.text for e in events if isinstance(e, TextDelta)) == script.text
        try:
            asyncio.run(_collect(runtime, None))
        except ProviderError as exc:
            assert "\n" not in str(exc)
            assert exc.provider and exc.provider in str(exc), f"the message names the provider {exc.provider!r}: {exc}"
        except Exception as exc:
            raise AssertionError(f"a call past the last step raised {type(exc).__name__}: {exc}; a runtime raises ProviderError") from exc
        else:
            raise AssertionError("a call past the last step answered")

    def test_runtime_contract_retries_stop_at_the_cap(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Through a real Agent with ``maxRetries = 2``: two retryable failures then an answer
        answer; three fail the turn with the third error (a fourth call would fail otherwise, past the
        last step); a fatal failure is not retried."""
        from monoagent._pipeline import provider_call
        from monoagent.testing import fresh_agent

        async def no_wait(seconds: float) -> None:
            pass

        monkeypatch.setattr(provider_call, "sleep", no_wait)
        down = StepScript(error="the model is overloaded", retryable=True)
        cases = (
            ((down, down, StepScript(text_pieces=("third time",))), "third time"),
            ((down, down, StepScript(error="still overloaded", retryable=True)), "still overloaded"),
            ((StepScript(error="bad request"),), "bad request"),
        )  # a call past the last step fails differently: the turn's error says whether the cap held
        for n, (scripts, outcome) in enumerate(cases):
            runtime = self.playing_steps(scripts)
            agent = fresh_agent(tmp_path / f"agent-{n}", provider=ContractModel(runtime), config={"providers": {"client": {"maxRetries": 2}}})
            try:
                assert agent.run_sync("hi").text == outcome, f"{len(scripts) - 1} steps before an answer"
            except ProviderError as exc:
                assert outcome in str(exc), f"the turn failed with {exc}; expected {outcome!r}"
            finally:
                agent.close()

    # ------------------------------------------------------------------ cancellation

    def test_runtime_contract_cancellation_propagates(self) -> None:
        script = StepScript(text_pieces=("first", "never sent"), stall_after=1)
        runtime = self.playing(script)

        async def scenario() -> tuple[list[str], str, list[str]]:
            before = asyncio.all_tasks()
            seen, outcome = await cancel_after_first_text(runtime, self.prompt_seconds)
            return seen, outcome, await _runtime_tasks(before, self.prompt_seconds)

        seen, outcome, left = asyncio.run(scenario())
        assert seen == ["first"]
        assert outcome == "cancelled", "cancelling the consumer must raise CancelledError out of the stream"
        assert left == [], "tasks the runtime started must end with its stream"

    def test_runtime_contract_closing_the_stream_early_ends_it(self) -> None:
        runtime = self.playing(None)

        async def scenario() -> tuple[str, list[str]]:
            before = asyncio.all_tasks()
            outcome = "closed"
            stream = runtime.stream(contract_request())
            try:
                async for _event in stream:
                    break  # the consumer has what it needs and closes the stream, as the harness does
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()
            except Exception as exc:
                outcome = f"aclose raised {type(exc).__name__}: {exc}"
            return outcome, await _runtime_tasks(before, self.prompt_seconds)

        outcome, left = asyncio.run(asyncio.wait_for(scenario(), self.prompt_seconds * 2))
        assert outcome == "closed"
        assert left == [], "tasks the runtime started must end when its stream is closed"
