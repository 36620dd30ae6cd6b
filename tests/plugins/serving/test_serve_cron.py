"""The ``cron`` channel: schedules in time zones (DST days too), overlap, missed ticks, isolation, config errors.

The scheduler runs in-process on a :class:`ManualClock` the test moves (no sleeps: the test waits
until the scheduler is asleep, reads when it wants to wake, and moves the clock there); the turns
run through the real harness, history store and state file. The last tests run ``monoagent serve``
as a subprocess on the wall clock: a tick missed while the server was down runs right after start,
SIGTERM during a tick publishes its account, and bad jobs are start-up errors naming their keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from plugin_sources import SLOW_PROVIDER
from serving import Server, serve_env
from serving import history as history_shown
from waiting import wait_until

from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.model import RunEvent, StepFinished, TextDelta
from monoagent.testing import fresh_agent
from monoagent_plugins.serving.cron import CronChannel
from monoagent_plugins.serving.cron_schedule import MAX_COUNTED_TICKS, CronSchedule, ScheduleError
from monoagent_plugins.serving.cron_state import CronState

BOUND_S = 30  # a bound on failure, never synchronisation


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


class ManualClock:
    """The scheduler's clock, moved by the test; ``sleep_until`` returns once the clock reached the time."""

    def __init__(self, now: datetime) -> None:
        self.current = now
        self.sleeping_until: datetime | None = None
        self._asleep = asyncio.Event()
        self._moved = asyncio.Event()

    def now(self) -> datetime:
        return self.current

    async def sleep_until(self, moment: datetime) -> None:
        self.sleeping_until = moment
        self._asleep.set()
        while self.current < moment:
            self._moved.clear()
            await self._moved.wait()

    async def next_wake(self) -> datetime:
        """When the scheduler, now asleep, wants to wake."""
        await asyncio.wait_for(self._asleep.wait(), BOUND_S)
        assert self.sleeping_until is not None
        return self.sleeping_until

    def move_to(self, moment: datetime) -> None:
        self.current = moment
        if self.sleeping_until is not None and moment >= self.sleeping_until:
            self._asleep.clear()
        self._moved.set()


class Recorder:
    """Every RunEvent of the agent, with a bounded wait for one that matches."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self._changed: asyncio.Event | None = None

    @hookimpl
    def on_run_event(self, event: RunEvent, agent: Any) -> None:
        self.events.append(event)
        if self._changed is not None:
            self._changed.set()

    def of(self, type: str, conversation: str | None = None) -> list[RunEvent]:
        return [e for e in self.events if e.type == type and conversation in (None, e.conversation_id)]

    async def wait(self, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + BOUND_S
        self._changed = changed = asyncio.Event()
        while not ready():
            changed.clear()
            await asyncio.wait_for(changed.wait(), max(0.0, deadline - time.monotonic()))


class Gate:
    """A provider that answers at once, except a prompt with "slow", which waits until :attr:`release` is set;
    to a prompt with "quiet" it answers the silent sentinel ``NO_REPLY``."""

    name = "gate"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0
        self.systems: list[str] = []

    async def stream(self, request: Any) -> Any:
        self.calls += 1
        self.systems.append(request.prompt.stable_text + request.prompt.dynamic_text)
        prompt = request.messages[-1].content
        if "slow" in prompt:
            await self.release.wait()
        yield TextDelta("NO_REPLY" if "quiet" in prompt else f"answer {self.calls}")
        yield StepFinished()

    @hookimpl
    def register_providers(self, register: Any) -> None:
        register("gate", lambda agent, model: self)


def job(name: str = "digest", schedule: str = "30 2 * * *", **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedule": schedule, "prompt": f"run {name}", **extra}


def cron_agent(tmp_path: Path, jobs: list[dict[str, Any]], *plugins: Any, **config: Any) -> Any:
    return fresh_agent(tmp_path, config={"cron": {"jobs": jobs}, **config}, plugins=list(plugins))


@contextlib.asynccontextmanager
async def serving(agent: Any, clock: ManualClock) -> AsyncIterator[CronChannel]:
    channel = CronChannel(agent, clock=clock)
    assert channel.enabled
    await channel.start()
    try:
        yield channel
    finally:
        await channel.shutdown()
        await agent.aclose()


async def tick(clock: ManualClock, recorder: Recorder, conversation: str) -> datetime:
    """Move the clock to the scheduler's next wake and wait for that tick's turn to complete; returns the wake time."""
    due = await clock.next_wake()
    done = len(recorder.of("run_completed", conversation))
    clock.move_to(due)
    await recorder.wait(lambda: len(recorder.of("run_completed", conversation)) > done)
    return due


async def stored(agent: Any, conversation: str) -> list[str]:
    return [m.content for m in await agent.history_store.load(conversation)]


# --------------------------------------------------------------------------- schedules and time zones


def test_next_fire_times_are_read_in_the_job_zone() -> None:
    berlin = CronSchedule("0 9 * * MON-FRI", "Europe/Berlin")
    assert berlin.next_after(utc(2026, 1, 2, 7, 59)) == utc(2026, 1, 2, 8, 0)  # 09:00 CET, a Friday
    assert berlin.next_after(utc(2026, 1, 2, 8, 0)) == utc(2026, 1, 5, 8, 0)  # strictly after; then Monday
    assert berlin.next_after(utc(2026, 7, 1, 0, 0)) == utc(2026, 7, 1, 7, 0)  # 09:00 CEST
    assert berlin.latest_at_or_before(utc(2026, 1, 5, 8, 0)) == utc(2026, 1, 5, 8, 0)
    assert berlin.latest_at_or_before(utc(2026, 1, 5, 7, 59)) == utc(2026, 1, 2, 8, 0)
    assert CronSchedule("*/15 * * * *").missed(utc(2026, 1, 1), utc(2026, 1, 1, 1, 0)) == (4, utc(2026, 1, 1, 1, 0))
    assert CronSchedule("*/15 * * * *").missed(utc(2026, 1, 1), utc(2026, 1, 1, 0, 14)) == (0, None)
    month_down = CronSchedule("* * * * *").missed(utc(2026, 1, 1), utc(2026, 2, 1, 0, 0, 30))
    assert month_down == (MAX_COUNTED_TICKS, utc(2026, 2, 1))  # counting stops; the latest tick is still exact


@pytest.mark.parametrize("expression, timezone, named", [
    ("30 2 * *", "UTC", "five fields"), ("61 * * * *", "UTC", "Bad minute"), ("@daily", "UTC", "five fields"),
    ("30 2 * * *", "Mars/Olympus", "unknown time zone"), ("30 2 * * *", "../../etc/passwd", "IANA"),
])
def test_a_bad_expression_or_zone_says_what_is_allowed(expression: str, timezone: str, named: str) -> None:
    with pytest.raises(ScheduleError, match=named):
        CronSchedule(expression, timezone)


@pytest.mark.parametrize("zone, spring, fall, repeated", [
    ("Europe/Berlin", datetime(2026, 3, 29), datetime(2026, 10, 25), True),  # 03:00 CEST -> 02:00 CET: 02:30 twice
    ("America/New_York", datetime(2026, 3, 8), datetime(2026, 11, 1), False),  # 02:00 EDT -> 01:00 EST: 02:30 once
])
def test_a_daily_0230_job_fires_once_a_day_at_the_right_instant_across_both_dst_changes(
        tmp_path: Path, zone: str, spring: datetime, fall: datetime, repeated: bool) -> None:
    from zoneinfo import ZoneInfo

    local = ZoneInfo(zone)

    async def days_from(start: datetime, recorder: Recorder, clock: ManualClock) -> list[datetime]:
        clock.move_to(start)
        return [await tick(clock, recorder, "cron:digest") for _ in range(3)]

    async def scenario() -> tuple[list[datetime], list[datetime]]:
        recorder, gate = Recorder(), Gate()
        clock = ManualClock((spring - timedelta(days=1)).replace(tzinfo=local).astimezone(UTC))
        agent = cron_agent(tmp_path, [job(timezone=zone)], recorder, gate, runtime={"model": "gate:x"})
        async with serving(agent, clock):
            springs = [await tick(clock, recorder, "cron:digest") for _ in range(3)]
            clock.move_to((fall - timedelta(days=1)).replace(tzinfo=local).astimezone(UTC))
            falls = [await tick(clock, recorder, "cron:digest") for _ in range(3)]
        assert gate.calls == 6  # one turn per tick, never two
        return springs, falls

    springs, falls = asyncio.run(scenario())
    as_local = [(t.astimezone(local).replace(tzinfo=None), t.astimezone(local).utcoffset()) for t in springs + falls]
    day = timedelta(days=1)
    before, after = as_local[0][1], as_local[2][1]
    assert after is not None and before is not None and after - before == timedelta(hours=1)
    assert [t for t, _ in as_local[:3]] == [(spring - day).replace(hour=2, minute=30), spring.replace(hour=3),
                                            (spring + day).replace(hour=2, minute=30)]  # 02:30 does not exist: 03:00
    assert [t for t, _ in as_local[3:]] == [(fall - day).replace(hour=2, minute=30), fall.replace(hour=2, minute=30),
                                            (fall + day).replace(hour=2, minute=30)]
    assert as_local[4][1] == (after if repeated else before)  # 02:30 twice on the fall-back day: the first (summer time) one


def test_an_hourly_job_fires_once_per_real_hour_through_the_repeated_fall_back_hour(tmp_path: Path) -> None:
    async def scenario() -> list[datetime]:
        recorder = Recorder()
        clock = ManualClock(utc(2026, 10, 24, 22, 30))  # 00:30 CEST on the fall-back day
        agent = cron_agent(tmp_path, [job("hourly", "0 * * * *", timezone="Europe/Berlin")], recorder)
        async with serving(agent, clock):
            return [await tick(clock, recorder, "cron:hourly") for _ in range(5)]

    fired = asyncio.run(scenario())
    assert fired == [utc(2026, 10, 24, hour) for hour in (23,)] + [utc(2026, 10, 25, hour) for hour in range(4)]
    from zoneinfo import ZoneInfo

    walls = [t.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M%z") for t in fired]
    assert walls == ["01:00+0200", "02:00+0200", "02:00+0100", "03:00+0100", "04:00+0100"]


# --------------------------------------------------------------------------- overlap and admission


def test_a_tick_whose_previous_run_still_runs_is_skipped_with_an_event(tmp_path: Path) -> None:
    async def scenario() -> tuple[Recorder, Gate]:
        recorder, gate = Recorder(), Gate()
        clock = ManualClock(utc(2026, 1, 1))
        agent = cron_agent(tmp_path, [job("slowjob", "*/5 * * * *", prompt="slow work")], recorder, gate,
                           runtime={"model": "gate:x"})
        async with serving(agent, clock):
            first = await clock.next_wake()
            clock.move_to(first)
            await recorder.wait(lambda: gate.calls == 1)  # the first tick's turn is running, blocked
            second = await clock.next_wake()
            assert second == first + timedelta(minutes=5)
            clock.move_to(second)
            await recorder.wait(lambda: bool(recorder.of("cron_tick_skipped")))
            assert gate.calls == 1 and not recorder.of("run_completed")
            gate.release.set()
            await recorder.wait(lambda: len(recorder.of("run_completed")) == 1)
            await tick(clock, recorder, "cron:slowjob")  # the next tick runs again
        return recorder, gate

    recorder, gate = asyncio.run(scenario())
    (skipped,) = recorder.of("cron_tick_skipped")
    assert skipped.conversation_id == "cron:slowjob"
    assert skipped.data == {"channel": "cron", "job": "slowjob", "scheduled": "2026-01-01T00:10:00+00:00", "reason": "overlap"}
    assert gate.calls == 2


def test_a_tick_due_after_the_server_stops_accepting_is_neither_run_nor_recorded(tmp_path: Path) -> None:
    """SIGTERM's first step (stop_accepting) stops the scheduler: a tick in the grace period stays missed, not done."""

    async def scenario() -> tuple[Recorder, Gate, Any]:
        recorder, gate = Recorder(), Gate()
        clock = ManualClock(utc(2026, 1, 1))
        agent = cron_agent(tmp_path, [job("often", "*/5 * * * *")], recorder, gate, runtime={"model": "gate:x"})
        async with serving(agent, clock) as channel:
            await tick(clock, recorder, "cron:often")
            due = await clock.next_wake()
            channel.stop_accepting()
            clock.move_to(due)
            await asyncio.wait_for(asyncio.wait([channel._task]), BOUND_S)  # the scheduler has ended, not fired
            state = CronState(agent.config.home / "cron")
            state.load()
            return recorder, gate, state.last("often")

    recorder, gate, last = asyncio.run(scenario())
    assert gate.calls == 1 and len(recorder.of("run_completed")) == 1
    assert last == utc(2026, 1, 1, 0, 5)  # the tick that ran, not the one due after stop_accepting


def test_an_admission_overload_skips_the_tick_with_an_event_and_no_retry(tmp_path: Path) -> None:
    async def scenario() -> tuple[Recorder, Gate]:
        recorder, gate = Recorder(), Gate()
        clock = ManualClock(utc(2026, 1, 1))
        agent = cron_agent(tmp_path, [job("a", "0 * * * *", prompt="slow a"), job("b", "0 * * * *", prompt="b")],
                           recorder, gate, runtime={"model": "gate:x"},
                           concurrency={"maxConcurrentRuns": 1, "maxPendingRuns": 0})
        async with serving(agent, clock):
            clock.move_to(await clock.next_wake())
            await recorder.wait(lambda: bool(recorder.of("cron_tick_skipped")))
            gate.release.set()
            await recorder.wait(lambda: len(recorder.of("run_completed")) == 1)
        return recorder, gate

    recorder, gate = asyncio.run(scenario())
    (skipped,) = recorder.of("cron_tick_skipped")
    assert skipped.data["job"] == "b" and skipped.data["reason"] == "admission" and "maxPendingRuns" in skipped.data["detail"]
    assert gate.calls == 1 and [e.conversation_id for e in recorder.of("run_completed")] == ["cron:a"]


# --------------------------------------------------------------------------- missed ticks and the state file


def test_ticks_missed_while_down_run_once_at_start_up_never_a_burst(tmp_path: Path) -> None:
    recorder = Recorder()

    async def first_run() -> datetime:
        clock = ManualClock(utc(2026, 1, 1, 0, 0))
        agent = cron_agent(tmp_path, [job("every", "*/10 * * * *"), job("fresh", "0 0 1 1 *")], recorder)
        async with serving(agent, clock):
            return await tick(clock, recorder, "cron:every")

    async def restart() -> list[str]:
        clock = ManualClock(utc(2026, 1, 1, 0, 55))  # ticks at 00:20, 00:30, 00:40, 00:50 went by while down
        agent = cron_agent(tmp_path, [job("every", "*/10 * * * *"), job("fresh", "0 0 1 1 *")], recorder)
        async with serving(agent, clock):
            await recorder.wait(lambda: len(recorder.of("run_completed", "cron:every")) == 2)
            assert await clock.next_wake() == utc(2026, 1, 1, 1, 0)  # then back on schedule
            return await stored(agent, "cron:every")

    assert asyncio.run(first_run()) == utc(2026, 1, 1, 0, 10)
    state = json.loads((tmp_path / "home" / "cron" / "state.json").read_text())
    assert state == {"version": 1, "jobs": {"every": {"lastScheduled": "2026-01-01T00:10:00+00:00"}}}
    assert oct(os.stat(tmp_path / "home" / "cron").st_mode & 0o777) == "0o700"
    messages = asyncio.run(restart())
    (missed,) = recorder.of("cron_tick_missed")
    assert missed.data == {"channel": "cron", "job": "every", "scheduled": "2026-01-01T00:50:00+00:00", "missed": 4,
                           "at_startup": True}
    assert len(messages) == 4  # two ticks ran in all: the first, and one for the four missed
    assert not recorder.of("run_completed", "cron:fresh")  # never ran before: no start-up run
    state = json.loads((tmp_path / "home" / "cron" / "state.json").read_text())
    assert state["jobs"]["every"]["lastScheduled"] == "2026-01-01T00:50:00+00:00"


def test_a_clock_jump_forward_fires_the_latest_due_tick_once(tmp_path: Path) -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        clock = ManualClock(utc(2026, 1, 1))
        async with serving(cron_agent(tmp_path, [job("every", "* * * * *")], recorder), clock):
            await clock.next_wake()
            clock.move_to(utc(2026, 1, 1, 3, 0, 30))  # the machine slept three hours
            await recorder.wait(lambda: len(recorder.of("run_completed")) == 1)
            assert await clock.next_wake() == utc(2026, 1, 1, 3, 1)
        return recorder

    recorder = asyncio.run(scenario())
    (missed,) = recorder.of("cron_tick_missed")
    assert missed.data["missed"] == 180 and missed.data["at_startup"] is False
    assert missed.data["scheduled"] == "2026-01-01T03:00:00+00:00"
    assert len(recorder.of("run_started")) == 1


@pytest.fixture
def caplog_loguru() -> Any:
    from monoagent._kernel.log import logger

    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="WARNING")
    logger.enable("monoagent_plugins")
    try:
        yield lines
    finally:
        logger.disable("monoagent_plugins")
        logger.remove(sink)


@pytest.mark.parametrize("plant", ["garbage", "wrong shape", "future", "symlink", "huge", "open directory"])
def test_a_damaged_or_planted_state_file_is_named_in_a_warning_and_treated_as_empty(tmp_path: Path, plant: str,
                                                                                    caplog_loguru: list[str]) -> None:
    directory = tmp_path / "home" / "cron"
    directory.mkdir(parents=True, mode=0o700)
    state = directory / "state.json"
    if plant == "garbage":
        state.write_bytes(b"\xff{not json")
    elif plant == "wrong shape":
        state.write_text(json.dumps({"version": 1, "jobs": {"every": {"lastScheduled": 5}}}))
    elif plant == "future":
        state.write_text(json.dumps({"version": 1, "jobs": {"every": {"lastScheduled": "2099-01-01T00:00:00+00:00"}}}))
    elif plant == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"version": 1, "jobs": {"every": {"lastScheduled": "2025-01-01T00:00:00+00:00"}}}))
        state.symlink_to(target)
    elif plant == "huge":
        state.write_text(" " * 2_000_000)
    else:  # anyone may write the directory: whatever is in it may be planted
        state.write_text(json.dumps({"version": 1, "jobs": {"every": {"lastScheduled": "2025-01-01T00:00:00+00:00"}}}))
        directory.chmod(0o757)

    async def scenario() -> Recorder:
        recorder = Recorder()
        clock = ManualClock(utc(2026, 1, 1, 0, 0, 30))
        async with serving(cron_agent(tmp_path, [job("every", "* * * * *")], recorder), clock):
            assert await clock.next_wake() == utc(2026, 1, 1, 0, 1)
            await tick(clock, recorder, "cron:every")
        return recorder

    recorder = asyncio.run(scenario())
    assert not recorder.of("cron_tick_missed") and len(recorder.of("run_completed")) == 1  # no start-up run
    assert any("cron state" in line for line in caplog_loguru), caplog_loguru
    written = json.loads(state.read_text())
    if plant == "open directory":
        assert written["jobs"]["every"]["lastScheduled"] == "2025-01-01T00:00:00+00:00"  # nothing is written there
        assert any("cron state directory" in line and "0757" in line for line in caplog_loguru)
    elif plant != "symlink":
        assert written == {"version": 1, "jobs": {"every": {"lastScheduled": "2026-01-01T00:01:00+00:00"}}}


def test_a_cron_directory_swapped_for_a_symlink_is_neither_written_nor_read_through(tmp_path: Path,
                                                                                   caplog_loguru: list[str]) -> None:
    """The state's directory becomes a symlink after start-up: the next save is refused (a warning naming the
    path and the rule), nothing is written through it, the committed state stays; the next start reads nothing."""
    home = tmp_path / "home"
    state = CronState(home / "cron")
    state.load()
    state.record("every", utc(2026, 1, 1, 0, 1))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "state.json").write_text("planted")
    (home / "cron").rename(home / "cron-moved")
    (home / "cron").symlink_to(elsewhere)
    state.record("every", utc(2026, 1, 1, 0, 2))
    assert (elsewhere / "state.json").read_text() == "planted" and os.listdir(elsewhere) == ["state.json"]
    assert json.loads((home / "cron-moved" / "state.json").read_text())["jobs"]["every"]["lastScheduled"] == "2026-01-01T00:01:00+00:00"
    assert any(f"{home / 'cron'} is a symlink; refused: below {home}" in line for line in caplog_loguru), caplog_loguru
    again = CronState(home / "cron")
    again.load()
    assert again.last("every") is None and not again.usable


# --------------------------------------------------------------------------- conversations


def test_ticks_share_their_conversation_and_an_isolated_job_adds_nothing_to_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str], list[RunEvent]]:
        recorder = Recorder()
        clock = ManualClock(utc(2026, 1, 1))
        jobs = [job("shared", "0 * * * *"), job("alone", "0 * * * *", isolate=True, conversationId="ops")]
        agent = cron_agent(tmp_path, jobs, recorder)
        async with serving(agent, clock):
            for runs in (2, 4):
                clock.move_to(await clock.next_wake())
                await recorder.wait(lambda: len(recorder.of("run_completed")) == runs)  # noqa: B023 (awaited in the loop)
            return await stored(agent, "cron:shared"), await stored(agent, "ops"), recorder.of("run_started", "ops")

    shared, ops, isolated_runs = asyncio.run(scenario())
    assert len(shared) == 4 and "history: 2 messages" in shared[3]  # the second tick saw the first
    assert ops == [] and len(isolated_runs) == 2  # isolated ticks ran, and added nothing to their conversation


def test_each_tick_is_captured_into_memory_unless_the_job_is_isolated(tmp_path: Path) -> None:
    """What docs/serving.md says under the cron example: a tick is a committed turn, so memory captures it."""
    async def scenario() -> list[str]:
        recorder = Recorder()
        clock = ManualClock(utc(2026, 1, 1))
        jobs = [job("kept", "0 * * * *"), job("alone", "0 * * * *", isolate=True)]
        agent = cron_agent(tmp_path, jobs, recorder, memory={"tiers": ["lite"]})
        async with serving(agent, clock):
            clock.move_to(await clock.next_wake())
            await recorder.wait(lambda: len(recorder.of("run_completed")) == 2)
            await agent.wait_settled()
            return [record.text for record in await agent.memory_tiers()["lite"].list(limit=10)]

    captured = asyncio.run(scenario())
    assert any("run kept" in text for text in captured), captured
    assert not any("run alone" in text for text in captured), captured


# --------------------------------------------------------------------------- notify


def test_a_job_with_notify_delivers_each_answer_unless_it_is_no_reply(tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"

    async def scenario() -> tuple[Recorder, Gate]:
        recorder, gate = Recorder(), Gate()
        clock = ManualClock(utc(2026, 1, 1))
        jobs = [job("report", "0 * * * *", notify=["log"]), job("watch", "30 * * * *", prompt="quiet check", notify=["log"])]
        agent = cron_agent(tmp_path, jobs, recorder, gate, runtime={"model": "gate:x"},
                           notify={"destinations": {"log": {"type": "file", "path": str(notes)}}})
        async with serving(agent, clock):
            for outcome in ("notify_skipped", "notify_delivered"):  # 00:30 watch (silent), then 01:00 report
                clock.move_to(await clock.next_wake())
                await recorder.wait(lambda: bool(recorder.of(outcome)))  # noqa: B023 (awaited in the loop)
        return recorder, gate

    recorder, gate = asyncio.run(scenario())
    assert all("NO_REPLY" in system for system in gate.systems)  # the session block says how to stay silent
    (delivered,) = [json.loads(line) for line in notes.read_text().splitlines()]
    (report_run,) = recorder.of("run_completed", "cron:report")
    assert delivered["channel"] == "cron" and delivered["source"] == "report" and delivered["text"] == "answer 2"
    assert delivered["conversation_id"] == "cron:report" and delivered["run_id"] == report_run.run_id
    (skipped,) = recorder.of("notify_skipped")
    assert skipped.data["reason"] == "silent" and skipped.conversation_id == "cron:watch"
    assert [e.data["source"] for e in recorder.of("notify_delivered")] == ["report"]


def test_a_notify_destination_that_is_not_configured_stops_start_up_naming_the_job(tmp_path: Path) -> None:
    from monoagent._kernel.errors import ConfigError

    agent = cron_agent(tmp_path, [job(notify=["nowhere"])])
    with pytest.raises(ConfigError, match=r"cron\.jobs\[0\]\.notify") as caught:
        CronChannel(agent)
    assert "nowhere" in str(caught.value)


# --------------------------------------------------------------------------- through `monoagent serve`


def cron_project(tmp_path: Path, jobs: list[dict[str, Any]]) -> dict[str, str]:
    """A project whose config has ``jobs``, and the environment of a server with only the cron channel."""
    (tmp_path / "monoagent.toml").write_text(tomli_w.dumps({"cron": {"jobs": jobs}}), encoding="utf-8")
    env = serve_env(tmp_path)
    del env["MONO_AGENT_OPENAI_API_ENABLED"]
    return env


def run_files(tmp_path: Path) -> list[dict[str, Any]]:
    runs = tmp_path / "home" / "artifacts" / "runs"
    return [json.loads(line) for file in sorted(runs.glob("*.jsonl")) for line in file.read_text().splitlines()] if runs.is_dir() else []


def test_a_tick_missed_while_the_server_was_down_runs_once_right_after_start(tmp_path: Path) -> None:
    env = cron_project(tmp_path, [job("newyear", "0 0 1 1 *", prompt="happy new year")])
    state = tmp_path / "home" / "cron"
    state.mkdir(parents=True, mode=0o700)
    (state / "state.json").write_text(json.dumps({"version": 1, "jobs": {"newyear": {"lastScheduled": "2019-01-01T00:00:00+00:00"}}}))
    # The newest new year is read from the wall clock before the server starts and after it stops: a
    # run across midnight of 31 December sees two, and the server's tick took one of them.
    latest_before = CronSchedule("0 0 1 1 *").latest_at_or_before(datetime.now(UTC))
    server = Server(tmp_path, env=env)
    try:
        assert server.client.get("/readyz").json()["channels"] == ["cron"]
        wait_until(lambda: any(e["type"] == "run_completed" for e in run_files(tmp_path)),
                   "the run file the start-up tick writes", timeout=BOUND_S, interval=0.05)
        assert server.terminate() == 0
    finally:
        server.stop()
    events = run_files(tmp_path)
    (missed,) = [e for e in events if e["type"] == "cron_tick_missed"]
    latest_after = CronSchedule("0 0 1 1 *").latest_at_or_before(datetime.now(UTC))
    assert latest_before is not None and latest_after is not None
    (latest,) = {latest_before, latest_after} & {datetime.fromisoformat(missed["data"]["scheduled"])}
    assert missed["data"]["job"] == "newyear" and missed["data"]["missed"] == latest.year - 2019
    assert missed["data"]["scheduled"] == latest.isoformat() and missed["conversation_id"] == "cron:newyear"
    (started,) = [e for e in events if e["type"] == "run_started"]
    assert started["data"]["channel"] == "cron" and started["data"]["delivery"] == "request"
    shown = history_shown(tmp_path, "cron:newyear")
    assert "you said: happy new year" in shown and "history: 0 messages" in shown
    recorded = json.loads((state / "state.json").read_text())
    assert recorded["jobs"]["newyear"]["lastScheduled"] == latest.isoformat()


def test_sigterm_during_a_tick_cancels_it_after_the_grace_period_and_publishes_its_account(tmp_path: Path) -> None:
    env = cron_project(tmp_path, [job("newyear", "0 0 1 1 *", prompt="slow review")])
    env["MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS"] = "100"
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow_provider.py").write_text(SLOW_PROVIDER, encoding="utf-8")
    config = tomllib.loads((tmp_path / "monoagent.toml").read_text())
    (tmp_path / "monoagent.toml").write_text(tomli_w.dumps({**config, "runtime": {"model": "slow:x"}}), encoding="utf-8")
    state = tmp_path / "home" / "cron"
    state.mkdir(parents=True, mode=0o700)
    (state / "state.json").write_text(json.dumps({"version": 1, "jobs": {"newyear": {"lastScheduled": "2019-01-01T00:00:00+00:00"}}}))
    server = Server(tmp_path, "--plugins-dir", "plugins", env=env)
    try:
        wait_until((tmp_path / "turn-started").exists, "the file the provider writes when the start-up tick's turn begins",
                   timeout=BOUND_S)
        assert server.terminate() == 0
    finally:
        server.stop()
    assert "Status: cancelled (reason: server_shutdown)" in history_shown(tmp_path, "cron:newyear")


def test_serve_refuses_a_bad_job_naming_each_key_and_what_is_allowed(tmp_path: Path) -> None:
    env = cron_project(tmp_path, [job("a", "61 * * * *"), job("a", "* * *"), job("b", model="nosuch:model")])
    done = subprocess.run([sys.executable, "-m", "monoagent", "serve"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr  # serve reports a channel it cannot build as a ClickException
    for named in ("cron.jobs[0].schedule = '61 * * * *': not a valid cron expression (Bad minute)",
                  "cron.jobs[1].name = 'a': cron.jobs[1] and cron.jobs[0] have the same name",
                  "cron.jobs[1].schedule = '* * *': a cron expression has five fields",
                  "cron.jobs[2].model = 'nosuch:model'"):
        assert named in done.stderr, done.stderr


def test_serve_check_lists_each_job_with_its_next_tick_or_the_problems(tmp_path: Path) -> None:
    env = cron_project(tmp_path, [job("digest", timezone="Europe/Berlin")])
    checked = subprocess.run([sys.executable, "-m", "monoagent", "serve", "--check"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert "cron job digest: '30 2 * * *' in Europe/Berlin, next at " in checked.stdout
    assert not (tmp_path / "home" / "cron").exists()  # checking fires nothing and writes no state
    env = cron_project(tmp_path, [job("digest", "30 2 * *")])
    refused = subprocess.run([sys.executable, "-m", "monoagent", "serve", "--check"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "cron.jobs[0].schedule = '30 2 * *'" in refused.stdout + refused.stderr


@pytest.mark.parametrize("bad, named", [
    ({"timezone": "Europe/Atlantis"}, "cron.jobs[0].timezone"),
    ({"name": "no spaces allowed"}, "cron.jobs[0].name"),
    ({"conversationId": " "}, "cron.jobs[0].conversationId"),
    ({"isolate": "yes"}, "cron.jobs[0].isolate"),
    ({"scheduel": "* * * * *"}, "did you mean 'schedule'"),
    ({"name": None}, "cron.jobs[0].name: missing"),
    ({"prompt": None}, "cron.jobs[0].prompt: missing"),
    ({"schedule": None}, "cron.jobs[0].schedule: missing"),
    ({"prompt": "  "}, "cron.jobs[0].prompt"),
])
def test_a_bad_job_key_is_a_config_error_naming_it(tmp_path: Path, bad: dict[str, Any], named: str) -> None:
    env = cron_project(tmp_path, [{k: v for k, v in {**job(), **bad}.items() if v is not None}])
    done = subprocess.run([sys.executable, "-m", "monoagent", "config", "validate"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and named in done.stderr + done.stdout, done.stderr


def test_check_describes_each_job_and_its_next_tick_in_its_zone(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        jobs = [job("digest", "30 2 * * *", timezone="Europe/Berlin", isolate=True), job("off", enabled=False)]
        agent = cron_agent(tmp_path, jobs)
        try:
            return CronChannel(agent, clock=ManualClock(utc(2026, 3, 28, 12))).check()
        finally:
            await agent.aclose()

    assert asyncio.run(scenario()) == [
        "cron job digest: '30 2 * * *' in Europe/Berlin, next at 2026-03-29T03:00:00+02:00 (2026-03-29T01:00Z), "
        "conversation cron:digest, isolated",
        "cron job off: disabled",
    ]


def test_the_wall_clock_wakes_no_earlier_than_asked_and_at_once_for_a_time_gone_by() -> None:
    from monoagent_plugins.serving.cron_schedule import WallClock

    class Napping(WallClock):
        nap_s = 0.01

    async def scenario() -> tuple[datetime, datetime]:
        clock = Napping()
        await clock.sleep_until(clock.now() - timedelta(hours=1))  # a time gone by: returns at once
        target = clock.now() + timedelta(seconds=0.05)
        await clock.sleep_until(target)  # in naps of 10 ms, each followed by a fresh reading of the wall clock
        return target, clock.now()

    target, woke = asyncio.run(scenario())
    assert woke >= target and woke.tzinfo is not None
