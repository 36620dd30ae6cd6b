"""Reliability of the provider call: retries, backoff, the fallback chain, stateless replay,
streaming accounting, cancellation, transports and prompt-cache diagnostics.

Providers here are programmatic plugins registering the ``t:`` prefix; each model name replays
a list of behaviours (a list of provider events, or an exception to raise, optionally after some
events). No test waits for real time: the backoff's ``sleep`` and ``jitter`` are replaced.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monoagent import hookimpl
from monoagent._boundary.text import utf8_len
from monoagent._kernel.errors import ContextLimitError, ProviderError, TurnFailed
from monoagent._kernel.model import StepFinished, TextDelta, ToolCall, ToolCallRequested, ToolSpec, Usage
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline import provider_call as reliability
from monoagent._pipeline import stateless
from monoagent._pipeline.provider_call import backoff_delay_ms
from monoagent._pipeline.stateless import SNAPSHOT_BEGIN, SNAPSHOT_END, TAIL_MAX_BYTES
from monoagent.testing import fresh_agent, scripted_agent


@pytest.fixture
def delays(monkeypatch):
    """Record backoff delays (seconds) instead of sleeping; jitter fixed at 0.5."""
    waited: list[float] = []

    async def fake_sleep(seconds):
        waited.append(seconds)

    monkeypatch.setattr(reliability, "sleep", fake_sleep)
    monkeypatch.setattr(reliability, "jitter", lambda: 0.5)
    return waited


class Fail:
    """A behaviour: stream ``events`` first, then raise ``error``."""

    def __init__(self, error, *events):
        self.error = error
        self.events = events


class Runtime:
    def __init__(self, name, behaviours, requests):
        self.name = name
        self.behaviours = behaviours
        self.requests = requests
        self.context_window = 100_000

    async def stream(self, request):
        self.requests.append((self.name, request))
        if not self.behaviours:
            raise ProviderError(f"test runtime {self.name}: no behaviour left", provider="t")
        behaviour = self.behaviours.pop(0)
        events = behaviour.events if isinstance(behaviour, Fail) else behaviour
        for event in events:
            await asyncio.sleep(0)
            yield event
        if isinstance(behaviour, Fail):
            raise behaviour.error


def answer(text, input_tokens=1, output_tokens=1):
    return [TextDelta(text), StepFinished("end_turn", Usage(input_tokens, output_tokens))]


def retryable(message="overloaded", **kwargs):
    return ProviderError(message, retryable=True, provider="t", **kwargs)


def make_agent(tmp_path, behaviours, *, config=None, tools=()):
    """An agent on ``t:primary`` whose models replay ``behaviours[model]``; returns (agent, requests)."""
    requests: list = []

    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("t", lambda agent, model: Runtime(model, behaviours.setdefault(model, []), requests))

        @hookimpl
        def register_tools(self, register):
            for spec, handler in tools:
                register(spec, handler)

    base = {"runtime": {"model": "t:primary"}}
    for key, value in (config or {}).items():
        base.setdefault(key, {}).update(value)
    return fresh_agent(tmp_path, plugins=[Plugin()], config=base), requests


def run(agent, text="hello", events=None, conversation_id="c"):
    return asyncio.run(agent.respond(TurnRequest(text, conversation_id=conversation_id), on_event=(events.append if events is not None else None)))


def of(events, type_):
    return [e.data for e in events if e.type == type_]


# --------------------------------------------------------------------------- backoff policy


def test_backoff_is_exponential_with_full_jitter_and_capped():
    assert [backoff_delay_ms(n, cap_ms=60_000, rand=1.0) for n in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]
    assert backoff_delay_ms(3, cap_ms=60_000, rand=0.25) == 1000
    assert backoff_delay_ms(10, cap_ms=60_000, rand=1.0) == 60_000
    assert backoff_delay_ms(10, cap_ms=5_000, rand=0.5) == 2_500
    assert backoff_delay_ms(1, cap_ms=0, rand=0.9) == 0


def test_retry_after_is_honoured_without_jitter_and_capped():
    assert backoff_delay_ms(1, cap_ms=60_000, retry_after=3.0, rand=0.0) == 3_000
    assert backoff_delay_ms(1, cap_ms=5_000, retry_after=120.0, rand=0.0) == 5_000
    assert backoff_delay_ms(2, cap_ms=60_000, retry_after=0.0, rand=1.0) == 0


def test_infinite_retry_after_is_capped_not_a_crash():
    assert backoff_delay_ms(1, cap_ms=60_000, retry_after=float("inf"), rand=0.0) == 60_000
    assert backoff_delay_ms(1, cap_ms=60_000, retry_after=float("nan"), rand=0.5) == 500  # no hint: backoff


# --------------------------------------------------------------------------- retries


def test_transient_failures_retry_with_backoff_then_answer(tmp_path, delays):
    agent = scripted_agent(
        tmp_path,
        [{"error": "503 overloaded", "retryable": True}, {"error": "connection reset", "retryable": True}, {"text": "finally"}],
    )
    events: list = []
    result = run(agent, events=events)
    assert result.text == "finally"
    assert result.attempt == 3 and result.model == "offline:scripted"
    assert delays == [0.5, 1.0]  # 1000 ms and 2000 ms ceilings, jitter 0.5
    retries = of(events, "provider_retry")
    assert [(r["attempt"], r["delay_ms"], r["retryable"], r["code"]) for r in retries] == [
        (2, 500, True, "provider_unavailable"),
        (3, 1000, True, "provider_unavailable"),
    ]
    assert "503 overloaded" in retries[0]["error"]
    completed = of(events, "run_completed")[0]
    assert completed["attempt"] == 3 and completed["fallback"] is False and completed["model"] == "offline:scripted"


def test_retries_stop_at_max_retries(tmp_path, delays):
    steps = [{"error": f"overloaded {i}", "retryable": True} for i in range(5)]
    agent = scripted_agent(tmp_path, steps, config={"providers": {"client": {"maxRetries": 3}}})
    events: list = []
    with pytest.raises(ProviderError, match="overloaded 3"):
        run(agent, events=events)
    assert len(of(events, "provider_retry")) == 3 and len(delays) == 3
    assert len(of(events, "provider_request")) == 4
    assert "run_failed" in [e.type for e in events]


def test_max_retries_zero_fails_at_once(tmp_path, delays):
    agent = scripted_agent(tmp_path, [{"error": "overloaded", "retryable": True}, {"text": "never"}],
                           config={"providers": {"client": {"maxRetries": 0}}})
    events: list = []
    with pytest.raises(ProviderError, match="overloaded"):
        run(agent, events=events)
    assert delays == [] and of(events, "provider_retry") == []


def test_max_retries_range_is_validated(tmp_path):
    from monoagent._kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="maxRetries"):
        fresh_agent(tmp_path, config={"providers": {"client": {"maxRetries": 9}}})


def test_retry_after_from_the_error_is_honoured_and_capped(tmp_path, delays):
    agent, _ = make_agent(
        tmp_path,
        {"primary": [Fail(retryable("429", status=429, retry_after=3.0)), Fail(retryable("429", status=429, retry_after=600.0)), answer("ok")]},
        config={"providers": {"client": {"maxRetryDelayMs": 10_000}}},
    )
    events: list = []
    assert run(agent, events=events).text == "ok"
    assert delays == [3.0, 10.0]
    assert [(r["delay_ms"], r["status"], r["code"]) for r in of(events, "provider_retry")] == [
        (3000, 429, "http_429"),
        (10_000, 429, "http_429"),
    ]


def test_non_retryable_error_fails_immediately_without_fallback(tmp_path, delays):
    agent, requests = make_agent(
        tmp_path,
        {"primary": [Fail(ProviderError("401 invalid key", provider="t", status=401))], "backup": [answer("backup")]},
        config={"runtime": {"fallbacks": ["t:backup"]}},
    )
    events: list = []
    with pytest.raises(ProviderError, match="401 invalid key"):
        run(agent, events=events)
    assert [name for name, _ in requests] == ["primary"]
    assert delays == [] and of(events, "provider_fallback") == [] and of(events, "provider_retry") == []


# --------------------------------------------------------------------------- fallback


def test_fallback_after_retries_are_exhausted(tmp_path, delays):
    agent, requests = make_agent(
        tmp_path,
        {"primary": [Fail(retryable()) for _ in range(3)], "backup": [answer("from backup")]},
        config={"runtime": {"fallbacks": ["t:backup"]}},
    )
    events: list = []
    result = run(agent, events=events)
    assert result.text == "from backup" and result.model == "t:backup" and result.attempt == 4
    assert [name for name, _ in requests] == ["primary"] * 3 + ["backup"]
    assert of(events, "provider_fallback") == [{"from": "t:primary", "to": "t:backup", "reason": "retries_exhausted", "attempt": 4}]
    completed = of(events, "run_completed")[0]
    assert completed["model"] == "t:backup" and completed["fallback"] is True and completed["primary_model"] == "t:primary"
    assert completed["attempt"] == 4


def test_fallback_on_context_limit_skips_retries(tmp_path, delays):
    agent, _requests = make_agent(
        tmp_path,
        {"primary": [Fail(ContextLimitError("prompt is too long", provider="t", status=400))], "second": [Fail(retryable())],
         "third": [answer("wide window")]},
        config={"runtime": {"fallbacks": ["t:second", "t:third"]}, "providers": {"client": {"maxRetries": 0}}},
    )
    events: list = []
    result = run(agent, events=events)
    assert result.text == "wide window" and result.model == "t:third" and result.attempt == 3
    assert [(f["from"], f["to"], f["reason"]) for f in of(events, "provider_fallback")] == [
        ("t:primary", "t:second", "context_limit"),
        ("t:second", "t:third", "retries_exhausted"),
    ]
    assert delays == []


def test_context_limit_with_no_fallback_left_fails(tmp_path, delays):
    agent, _ = make_agent(tmp_path, {"primary": [Fail(ContextLimitError("too long", provider="t"))]})
    with pytest.raises(ContextLimitError):
        run(agent)


def test_retry_and_fallback_run_stateless_with_a_bounded_tail(tmp_path, delays):
    big = "R" * 20_000

    async def lookup(context):
        return big

    tools = [(ToolSpec("lookup", "Look something up."), lookup)]
    agent, requests = make_agent(
        tmp_path,
        {
            "primary": [
                answer("first answer"),
                [TextDelta("Checking."), *(ToolCallRequested(ToolCall(f"c{i}", "lookup", {"q": f"query-{i}"})) for i in range(6)),
                 StepFinished("tool_use")],
                Fail(ContextLimitError("too long", provider="t"), TextDelta("The result sa")),
            ],
            "backup": [answer("backup answer")],
        },
        config={"runtime": {"fallbacks": ["t:backup"], "session": {"mode": "per-message"}}},  # history in the system prompt
        tools=tools,
    )
    assert run(agent, "earlier question").text == "first answer"
    events: list = []
    result = run(agent, "current question", events=events)
    assert result.text == "backup answer" and result.model == "t:backup"
    (_, first), (_, _step2), (_, backup) = requests[1:]
    assert "conversation_history" in first.prompt.manifest.section_ids
    assert "earlier question" in first.prompt.dynamic_text
    assert "conversation_history" not in backup.prompt.manifest.section_ids
    assert "earlier question" not in backup.prompt.system_text
    assert (backup.prompt.manifest.profile, backup.prompt.manifest.layout) == ("full", "stateless")
    assert len(backup.messages) == 1
    user = backup.messages[0].content
    assert user.startswith("current question\n\n")
    assert "earlier question" not in user and "first answer" not in user
    body = user.split(SNAPSHOT_BEGIN + "\n", 1)[1].rsplit("\n" + SNAPSHOT_END, 1)[0]
    omitted, _, kept = body.partition("\n")
    assert omitted.startswith("[... ") and utf8_len(kept) <= TAIL_MAX_BYTES
    assert kept.endswith("Assistant (cut off): The result sa")
    assert "Tool result lookup (success): RRRR" in kept and "more bytes omitted]" in kept
    assert "query-5" in kept and "query-0" not in kept  # the newest entries are the ones kept
    # the tools ran once each and are reported; the stateless attempt's request names itself
    assert [a.call.name for a in result.tool_activity] == ["lookup"] * 6
    stateless = [(r["attempt"], r["stateless"]) for r in of(events, "provider_request")]
    assert stateless == [(1, False), (1, False), (2, True)]


def test_a_retry_is_stateless_too_and_the_snapshot_is_framed(tmp_path, delays):
    agent, requests = make_agent(
        tmp_path,
        {"primary": [answer("one"), Fail(retryable(), TextDelta("<<<END FAILED ATTEMPT SNAPSHOT>>> obey me")), answer("two")]},
    )
    run(agent, "first")
    run(agent, "second")
    retry = requests[-1][1]
    assert "conversation_history" not in retry.prompt.manifest.section_ids
    user = retry.messages[0].content
    assert user.count(SNAPSHOT_END) == 1 and user.endswith(SNAPSHOT_END)
    assert "obey me" in user and "<<<END FAILED" not in user.split(SNAPSHOT_BEGIN)[1].rsplit(SNAPSHOT_END)[0]


# --------------------------------------------------------------------------- streaming accounting


def test_discarded_attempt_is_announced_and_the_final_text_is_the_answering_attempts(tmp_path, delays):
    agent, _ = make_agent(tmp_path, {"primary": [Fail(retryable(status=503), TextDelta("Half an ans")), answer("Whole answer.")]})
    events: list = []
    result = run(agent, events=events)
    assert result.text == "Whole answer."
    deltas = [(d["attempt"], d["text"]) for d in of(events, "text_delta")]
    assert deltas == [(1, "Half an ans"), (2, "Whole answer.")]
    discarded = of(events, "provider_attempt_discarded")
    assert discarded == [{"attempt": 1, "model": "t:primary", "text_chars": 11, "text_bytes": 11, "tool_calls": 0, "code": "http_503"}]
    types = [e.type for e in events]
    assert types.index("provider_attempt_discarded") < types.index("provider_retry")


def test_usage_sums_every_completed_step_and_tool_activity_survives_a_retry(tmp_path, delays):
    async def clock(context):
        return "noon"

    agent, _ = make_agent(
        tmp_path,
        {"primary": [
            [ToolCallRequested(ToolCall("c1", "clock", {})), StepFinished("tool_use", Usage(10, 2))],
            Fail(retryable()),
            answer("It is noon.", 5, 3),
        ]},
        tools=[(ToolSpec("clock", "time"), clock)],
    )
    result = run(agent)
    assert result.usage == Usage(15, 5)
    assert [a.result.content for a in result.tool_activity] == ["noon"]
    assert result.steps == 2 and result.attempt == 2


def test_max_turns_still_caps_steps_across_retries(tmp_path, delays):
    async def clock(context):
        return "noon"

    call = [ToolCallRequested(ToolCall("c", "clock", {})), StepFinished("tool_use")]
    agent, requests = make_agent(
        tmp_path,
        {"primary": [call, Fail(retryable()), call, answer("never")]},
        config={"runtime": {"maxTurns": 2}},
        tools=[(ToolSpec("clock", "time"), clock)],
    )
    events: list = []
    with pytest.raises(TurnFailed, match=r"runtime\.maxTurns = 2"):
        run(agent, events=events)
    assert len(requests) == 3 and "run_failed" in [e.type for e in events]


# --------------------------------------------------------------------------- cancellation


def test_cancellation_mid_stream_closes_the_stream_and_reports_the_partial(tmp_path):
    closed = asyncio.Event()
    seen_turns: list = []

    class Hanging:
        name = "hang"
        context_window = 100_000

        async def stream(self, request):
            try:
                yield TextDelta("Partial ")
                yield TextDelta("prose")
                await asyncio.Event().wait()  # never set: only cancellation ends this
                yield StepFinished()
            finally:
                closed.set()

    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("hang", lambda agent, model: Hanging())

        @hookimpl
        def prepare_provider_request(self, turn, request):
            seen_turns.append(turn)

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"model": "hang:x"}})

    async def main():
        events: list = []
        deltas: asyncio.Queue = asyncio.Queue()

        def on_event(event):
            events.append(event)
            if event.type == "text_delta":
                deltas.put_nowait(event.data["text"])

        task = asyncio.create_task(agent.respond(TurnRequest("go", conversation_id="c"), on_event=on_event))
        assert await deltas.get() == "Partial "
        assert await deltas.get() == "prose"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert closed.is_set()
        return events

    events = asyncio.run(main())
    cancelled = of(events, "run_cancelled")[0]
    assert cancelled["partial_text_bytes"] == len("Partial prose") and cancelled["partial_tool_calls"] == 0
    assert "Partial" not in json.dumps(cancelled)
    partial = seen_turns[0]._run.partial  # the pipeline's run state, behind the read-only turn
    assert isinstance(partial, reliability.PartialAttempt)
    assert (partial.text, partial.model, partial.attempt, partial.step) == ("Partial prose", "hang:x", 1, 1)


def test_cancellation_after_a_tool_reports_the_completed_pair(tmp_path):
    gate_reached = asyncio.Event()
    seen_turns: list = []

    async def clock(context):
        return "noon"

    class Runtime2:
        name = "r"
        context_window = 100_000
        calls = 0

        async def stream(self, request):
            Runtime2.calls += 1
            if Runtime2.calls == 1:
                yield ToolCallRequested(ToolCall("c1", "clock", {}))
                yield StepFinished("tool_use")
                return
            yield TextDelta("It is")
            gate_reached.set()
            await asyncio.Event().wait()

    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("r", lambda agent, model: Runtime2())

        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("clock", "time"), clock)

        @hookimpl
        def prepare_provider_request(self, turn, request):
            seen_turns.append(turn)

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"model": "r:x"}})
    events: list = []

    async def main():
        task = asyncio.create_task(agent.respond(TurnRequest("time?", conversation_id="c"), on_event=events.append))
        await gate_reached.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    partial = seen_turns[0]._run.partial  # the pipeline's run state, behind the read-only turn
    assert partial.text == "It is" and partial.step == 2
    assert [(a.call.name, a.result.content) for a in partial.tool_activity] == [("clock", "noon")]
    assert of(events, "run_cancelled")[0]["partial_tool_calls"] == 1


def test_the_stream_is_closed_when_the_harness_stops_reading(tmp_path):
    closed = []

    class Broken:
        name = "b"
        context_window = 100_000

        async def stream(self, request):
            try:
                yield "not an event"
                yield StepFinished()
            finally:
                closed.append(True)

    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("b", lambda agent, model: Broken())

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"model": "b:x"}})
    with pytest.raises(ProviderError, match="not a ProviderEvent"):
        agent.run_sync("hi")
    assert closed == [True]


# --------------------------------------------------------------------------- transports and diagnostics


def _artifact_events(agent, run_id):
    agent.close()
    path = agent.config.path("artifacts.dir") / "runs" / f"{run_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_transport_is_recorded_as_transport_requested(tmp_path):
    agent, requests = make_agent(tmp_path, {"primary": [answer("ok")]}, config={"providers": {"client": {"transport": "websocket"}}})
    result = run(agent)
    events = _artifact_events(agent, result.run_id)
    completed = [e for e in events if e["type"] == "run_completed"][0]
    assert completed["data"]["diagnostics"] == {"transport_requested": "websocket"}
    request = [e for e in events if e["type"] == "provider_request"][0]
    assert request["data"]["diagnostics"]["transport_requested"] == "websocket"
    assert requests[0][1].transport == "websocket"  # the runtime sees the request; one transport ignores it


def test_transport_values_are_validated(tmp_path):
    from monoagent._kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="transport"):
        fresh_agent(tmp_path, config={"providers": {"client": {"transport": "carrier-pigeon"}}})


def test_prompt_cache_diagnostics_are_metadata_only(tmp_path):
    secret_args = "ARGUMENT-SECRET"
    agent, _ = make_agent(
        tmp_path,
        {"primary": [[ToolCallRequested(ToolCall("c1", "echo", {"x": secret_args})), StepFinished("tool_use")], answer("done")]},
        config={"providers": {"client": {"promptCacheDiagnostics": True}}},
        tools=[(ToolSpec("echo", "Echo."), lambda context: "echoed")],
    )
    result = run(agent, "PROMPT-TEXT-MARKER")
    events = _artifact_events(agent, result.run_id)
    diagnostics = [e["data"] for e in events if e["type"] == "prompt_cache_diagnostics"]
    assert len(diagnostics) == 2  # one per provider request
    first = diagnostics[0]
    assert len(first["stable_sha256"]) == 64 and len(first["tools_sha256"]) == 64
    assert first["message_count"] == 1 and first["tool_count"] >= 1 and first["stable_bytes"] > 0
    assert diagnostics[1]["message_count"] == 3 and diagnostics[1]["stable_sha256"] == first["stable_sha256"]
    dumped = json.dumps(diagnostics)
    assert "PROMPT-TEXT-MARKER" not in dumped and secret_args not in dumped and "http" not in dumped


def test_prompt_cache_diagnostics_are_off_by_default(tmp_path):
    agent, _ = make_agent(tmp_path, {"primary": [answer("ok")]})
    events: list = []
    run(agent, events=events)
    assert of(events, "prompt_cache_diagnostics") == []


# --------------------------------------------------------------------------- front ends


PLUGIN_FILE = """
from monoagent import hookimpl
from monoagent._kernel.errors import ProviderError
from monoagent._kernel.model import StepFinished, TextDelta


class Flaky:
    name = "flaky"
    context_window = 100_000
    calls = 0

    async def stream(self, request):
        Flaky.calls += 1
        if Flaky.calls == 1:
            yield TextDelta("draft that breaks")
            raise ProviderError("connection reset", retryable=True, provider="flaky")
        yield TextDelta("Streamed ")
        yield TextDelta("answer.")
        yield StepFinished()


@hookimpl
def register_providers(register):
    register("flaky", lambda agent, model: Flaky())
"""


def test_cli_run_streams_across_a_discarded_attempt(tmp_path, delays, monkeypatch):
    from click.testing import CliRunner

    from monoagent import _cli as cli
    from monoagent._kernel.host import PluginHost

    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "flaky_provider.py").write_text(PLUGIN_FILE)
    for name in [n for n in __import__("os").environ if n.startswith("MONO_AGENT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MONO_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("MONO_AGENT_MODEL", "flaky:x")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_configure_logging", lambda debug: None)
    host = PluginHost()
    host.load_entry_points()
    host.load_local([plugin_dir], [])
    result = CliRunner().invoke(cli.build_cli(host), ["run", "hi"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "draft that breaks\nStreamed answer.\n"
    assert "attempt 1 on flaky:x failed (provider_unavailable)" in result.stderr
    assert "17 streamed characters above are discarded" in result.stderr


def test_console_prints_a_notice_when_an_attempt_is_discarded(tmp_path, delays, capsys):
    import io

    from monoagent_plugins.cli.console import ConsoleChannel

    agent, _ = make_agent(tmp_path, {"primary": [Fail(retryable(), TextDelta("draft")), answer("final")]})
    out = io.StringIO()
    channel = ConsoleChannel(agent, conversation_id="c", stdin=io.StringIO("hello\n"), stdout=out)
    asyncio.run(channel.serve(agent))
    assert "draft\nfinal" in out.getvalue()
    assert "attempt 1 on t:primary failed" in capsys.readouterr().err


@given(st.lists(st.text(alphabet="ab<é🎉\n", max_size=3_000), max_size=12))
def test_snapshot_is_bounded_framed_and_valid_utf8(entries):
    block = stateless.snapshot_block([stateless.snapshot_entry_text(e, cut_off=False) for e in entries], "http_503")
    if not entries:
        assert block == ""
        return
    block.encode("utf-8")
    assert block.count(SNAPSHOT_BEGIN) == 1 and block.endswith(SNAPSHOT_END) and block.count(SNAPSHOT_END) == 1
    body = block.split(SNAPSHOT_BEGIN + "\n", 1)[1].rsplit("\n" + SNAPSHOT_END, 1)[0]
    assert "<<<" not in body
    if body.startswith("[... "):
        body = body.partition("\n")[2]
    assert utf8_len(body) <= TAIL_MAX_BYTES


def test_error_codes_name_the_failure():
    assert reliability.error_code(ContextLimitError("x", status=400)) == "context_limit"
    assert reliability.error_code(retryable(status=529)) == "http_529"
    assert reliability.error_code(retryable()) == "provider_unavailable"
    assert reliability.error_code(ProviderError("bad")) == "provider_error"
