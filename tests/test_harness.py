"""The harness: lanes, admission, execution width, cancellation, rollover, events, failures."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from datetime import UTC, datetime

import pytest
from waiting import DEFAULT_BOUND_S, until

from monoagent import hookimpl
from monoagent._kernel.errors import AdmissionRejected, ProviderError
from monoagent._kernel.model import Message, StepFinished, TextDelta
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.assembly import current_user_message
from monoagent.testing import fresh_agent, write_script


class GatedRuntime:
    """A provider that waits on an asyncio.Event per call, so tests control concurrency exactly."""

    name = "gated"
    context_window = 100_000

    def __init__(self):
        self.active = 0
        self.peak = 0
        self.started = asyncio.Queue()
        self.release = {}

    async def stream(self, request):
        self.active += 1
        self.peak = max(self.peak, self.active)
        gate = asyncio.Event()
        text = current_user_message(request.prompt).content  # the user's text, without the dynamic block
        self.release[text] = gate
        await self.started.put(text)
        try:
            await gate.wait()
            yield TextDelta(f"answer to {text}")
            yield StepFinished()
        finally:
            self.active -= 1

    async def next_started(self) -> str:
        """The text of the next run to reach the provider; fails (never hangs) when none comes."""
        try:
            return await asyncio.wait_for(self.started.get(), DEFAULT_BOUND_S)
        except TimeoutError:
            raise AssertionError(f"no run reached the provider within {DEFAULT_BOUND_S:g} s") from None


LAST_SECOND = datetime(2026, 3, 28, 23, 59, 59, tzinfo=UTC)
"""The moment the rollover tests run at (an injected clock): one second before midnight UTC."""


def gated_agent(tmp_path, **concurrency):
    runtime = GatedRuntime()

    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("gated", lambda agent, model: runtime)

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"model": "gated:x"}, "concurrency": concurrency})
    return agent, runtime


def test_execution_width_is_capped(tmp_path):
    agent, runtime = gated_agent(tmp_path, maxConcurrentRuns=2, maxPendingRuns=8)

    async def main():
        tasks = [asyncio.create_task(agent.respond(TurnRequest(f"m{i}", conversation_id=f"c{i}"))) for i in range(5)]
        for _ in range(5):
            text = await runtime.next_started()
            assert runtime.active <= 2
            runtime.release[text].set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert runtime.peak == 2
    assert sorted(r.text for r in results) == [f"answer to m{i}" for i in range(5)]


def test_admission_rejects_beyond_max_pending(tmp_path):
    agent, runtime = gated_agent(tmp_path, maxConcurrentRuns=1, maxPendingRuns=1)

    async def main():
        first = asyncio.create_task(agent.respond(TurnRequest("a", conversation_id="c1")))
        text = await runtime.next_started()
        events = []
        second = asyncio.create_task(agent.respond(TurnRequest("b", conversation_id="c2"), on_event=events.append))
        # admitted (its run_started is emitted once it counts as pending) while "a" holds the one slot
        await until(lambda: any(e.type == "run_started" for e in events) or second.done(), "the second run to be admitted")
        with pytest.raises(AdmissionRejected, match="maxPendingRuns = 1"):  # admitted, it would wait for a slot: bounded
            await asyncio.wait_for(agent.respond(TurnRequest("c", conversation_id="c3")), DEFAULT_BOUND_S)
        runtime.release[text].set()
        runtime.release[await runtime.next_started()].set()
        return await asyncio.gather(first, second)

    results = asyncio.run(main())
    assert [r.text for r in results] == ["answer to a", "answer to b"]


def test_same_conversation_follow_ups_queue_without_counting_as_pending(tmp_path):
    agent, runtime = gated_agent(tmp_path, maxConcurrentRuns=1, maxPendingRuns=0)

    async def main():
        tasks = [asyncio.create_task(agent.respond(TurnRequest(f"m{i}", conversation_id="same"))) for i in range(3)]
        for _ in range(3):
            text = await runtime.next_started()
            assert runtime.active == 1
            runtime.release[text].set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert [r.text for r in results] == ["answer to m0", "answer to m1", "answer to m2"]
    history = asyncio.run(agent.history_store.load("same"))
    assert [m.content for m in history if m.role == "user"] == ["m0", "m1", "m2"]


def test_cancellation_commits_nothing_and_is_reported(tmp_path):
    agent, runtime = gated_agent(tmp_path)
    events = []

    async def main():
        await_done = asyncio.create_task(agent.respond(TurnRequest("first", conversation_id="c")))
        runtime.release[await runtime.next_started()].set()
        await await_done
        task = asyncio.create_task(agent.respond(TurnRequest("cancel me", conversation_id="c"), on_event=events.append))
        await runtime.next_started()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await agent.wait_settled()  # the caller is released at once; the account follows

    asyncio.run(main())
    assert events[-1].type == "run_cancelled"
    history = asyncio.run(agent.history_store.load("c"))
    assert [m.content for m in history if m.role == "user"] == ["first", "cancel me"]  # + its continuity account
    assert history[-1].content.startswith("[Continuity account v1")
    assert runtime.active == 0


def test_provider_failure_keeps_committed_history(tmp_path):
    script = write_script(tmp_path / "s.json", [{"text": "fine"}, {"error": "upstream exploded", "retryable": True}])
    providers = {"offline": {"scriptPath": str(script)}, "client": {"maxRetries": 0}}  # no retry (test_reliability)
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "offline:scripted"}, "providers": providers})
    assert agent.run_sync("one", conversation_id="c").text == "fine"
    events = []
    with pytest.raises(ProviderError, match="upstream exploded") as info:
        agent.run_sync("two", conversation_id="c", on_event=events.append)
    assert info.value.retryable
    assert events[-1].type == "run_failed" and "upstream exploded" in events[-1].data["error"]
    stored = asyncio.run(agent.history_store.load("c"))
    assert [m.content for m in stored][:3] == ["one", "fine", "two"]  # the failed turn left an account
    assert stored[3].content.startswith("[Continuity account v1") and len(stored) == 4


def test_run_events_land_in_an_owner_only_jsonl_file(tmp_path):
    agent = fresh_agent(tmp_path)
    result = agent.run_sync("hello", conversation_id="c")
    agent.close()  # the background writer has written every line once the agent is closed
    path = tmp_path / "home" / "artifacts" / "runs" / f"{result.run_id}.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "run_started" and types[-1] == "run_completed"
    assert "text_delta" not in types
    manifest = next(e for e in events if e["type"] == "prompt_manifest")["data"]["manifest"]
    assert manifest["fingerprints"]["stable"] == result.manifest.fingerprints.stable
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_daily_rollover_buckets_history_but_not_the_console(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"session": {"rollover": "daily", "rolloverTimezone": "UTC", "rolloverNotice": True}}})
    agent.harness.clock = LAST_SECOND.timestamp  # both turns in one bucket, whatever the real time
    asyncio.run(agent.history_store.commit("slack:C1:2020-01-01", [Message("user", "old"), Message("assistant", "old answer")]))
    events = []
    result = asyncio.run(agent.respond(TurnRequest("hi", conversation_id="slack:C1", delivery="push"), on_event=events.append))
    bucket = next(e for e in events if e.type == "session_boundary")
    assert bucket.data["kind"] == "rollover"
    day = bucket.data["bucket"]
    assert day == "2026-03-28"
    assert result.conversation_id == f"slack:C1:{day}"
    assert result.text.startswith(f"New session bucket started: {day}.\n\n")
    again = []
    second = asyncio.run(agent.respond(TurnRequest("again", conversation_id="slack:C1", delivery="push"), on_event=again.append))
    assert not any(e.type == "session_boundary" for e in again)
    assert not second.text.startswith("New session bucket")
    console = asyncio.run(agent.respond(TurnRequest("hi", conversation_id="web:1", delivery="console")))
    assert console.conversation_id == "web:1"


def test_run_sync_works_repeatedly_across_event_loops(tmp_path):
    agent = fresh_agent(tmp_path)
    for i in range(3):
        result = agent.run_sync(f"turn {i}", conversation_id="loops")
    assert "history: 4 messages" in result.text


def test_unknown_provider_prefix_is_a_clear_error(tmp_path):
    from monoagent._kernel.errors import ConfigError

    agent = fresh_agent(tmp_path, config={"runtime": {"model": "nope:model"}})
    with pytest.raises(ConfigError, match=r"provider prefix 'nope'.*registered provider prefixes: anthropic, lmstudio, offline, ollama, openai"):
        agent.run_sync("hi")


def test_scripted_script_errors_are_clear(tmp_path):
    from monoagent._kernel.errors import ConfigError

    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": [{"txt": "typo"}]}')
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(bad)}}})
    with pytest.raises(ConfigError, match=r"bad\.json has an invalid step"):
        agent.run_sync("hi")
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "offline:scripted"}})
    with pytest.raises(ConfigError, match=r"providers\.offline\.scriptPath"):
        agent.run_sync("hi")


def test_admission_counts_a_burst_that_has_not_reached_the_slot_yet(tmp_path):
    agent, runtime = gated_agent(tmp_path, maxConcurrentRuns=1, maxPendingRuns=0)

    async def main():
        async def release_each():
            while True:
                runtime.release[await runtime.started.get()].set()

        releaser = asyncio.create_task(release_each())
        tasks = [asyncio.create_task(agent.respond(TurnRequest(f"m{i}", conversation_id=f"c{i}"))) for i in range(3)]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        releaser.cancel()
        return results

    results = asyncio.run(main())
    assert [type(r).__name__ for r in results] == ["TurnResult", "AdmissionRejected", "AdmissionRejected"]
    assert runtime.peak == 1


def test_lanes_are_dropped_when_their_conversation_is_idle(tmp_path):
    agent = fresh_agent(tmp_path)

    async def main():
        for i in range(5):
            await agent.respond(TurnRequest("hi", conversation_id=f"lane-{i}"))
        return dict(agent.harness._lanes)

    assert asyncio.run(main()) == {}


def test_assembling_a_preview_leaves_the_rollover_notice_to_the_real_turn(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"session": {"rollover": "daily", "rolloverTimezone": "UTC", "rolloverNotice": True}}})
    agent.harness.clock = LAST_SECOND.timestamp  # the preview and the turn in one bucket, whatever the real time
    asyncio.run(agent.history_store.commit("slack:C1:2020-01-01", [Message("user", "old"), Message("assistant", "old answer")]))
    request = TurnRequest("hi", conversation_id="slack:C1", delivery="push")
    asyncio.run(agent.assemble(request))
    result = asyncio.run(agent.respond(request))
    assert result.text.startswith("New session bucket started: ")


def test_a_run_that_fails_before_it_starts_gives_its_admission_back(tmp_path, monkeypatch):
    agent = fresh_agent(tmp_path, config={"concurrency": {"maxConcurrentRuns": 1, "maxPendingRuns": 0}})

    def broken_session(request, started, **_):
        raise RuntimeError("session resolution failed")

    async def main():
        with monkeypatch.context() as patch:
            patch.setattr(agent.harness, "_session", broken_session)
            with pytest.raises(RuntimeError, match="session resolution failed"):
                await agent.respond(TurnRequest("x", conversation_id="a"))
        return await agent.respond(TurnRequest("y", conversation_id="b"))

    assert "you said: y" in asyncio.run(main()).text
