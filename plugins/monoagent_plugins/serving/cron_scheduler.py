"""The cron scheduler: one task that sleeps until the next tick of any job and hands the tick over.

Policies (documented in docs/serving.md, "Cron"):

* **Overlap**: a tick whose job's previous tick is still running is skipped; the channel emits
  ``cron_tick_skipped`` with reason ``overlap`` and logs it.
* **Missed ticks**: the scheduled time of each job's last handled tick (run or skipped) is
  recorded in :class:`~monoagent_plugins.serving.cron_state.CronState` before the tick's turn
  starts. At start-up a job whose latest scheduled time at or before now is after its recorded
  one fires once, right away, whatever the number of ticks missed (``cron_tick_missed`` says how
  many); a job never run before does not fire at start-up. The same holds while running: after
  a suspend or a jump of the wall clock, each job fires its latest due tick once.
* **Clock going back**: a tick at or before a job's recorded one is never fired again.

The scheduler decides when; what a tick does (the turn, notify, events) is ``run_tick`` and
``report``, given by the channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from monoagent import logger
from monoagent_plugins.serving.cron_schedule import Clock, CronSchedule
from monoagent_plugins.serving.cron_state import CronState

RunTick = Callable[[str, datetime], Awaitable[None]]
"""``run_tick(job, scheduled)``: run one tick of ``job``, scheduled at ``scheduled`` (never raises)."""
Report = Callable[[str, str, dict[str, Any]], None]
"""``report(event_type, job, data)``: a channel-level happening (``cron_tick_skipped``, ``cron_tick_missed``)."""


class CronScheduler:
    """Fires the ticks of ``schedules`` (job name -> schedule) on ``clock``, one at a time per job."""

    def __init__(self, schedules: Mapping[str, CronSchedule], clock: Clock, state: CronState,
                 run_tick: RunTick, report: Report) -> None:
        self.schedules = dict(schedules)
        self.clock = clock
        self.state = state
        self.run_tick = run_tick
        self.report = report
        self.running: dict[str, asyncio.Task[None]] = {}
        self.stopped = False
        """Set when the server stops accepting turns: no tick is recorded or handed over after it."""

    async def run(self) -> None:
        """Catch up on missed ticks, then fire every tick as it comes, until cancelled or no job fires again."""
        now = self.clock.now()
        await asyncio.to_thread(self.state.load)
        for name, schedule in self.schedules.items():
            last = self.state.last(name)
            if last is not None and last > now:
                logger.warning("cron: job {} last ran at {} by the cron state, which is after now; that record is ignored",
                               name, last.isoformat())
                self.state.forget(name)
            elif last is not None:
                missed, latest = schedule.missed(last, now)
                if latest is not None:
                    await self._fire(name, latest, missed, at_startup=True)
        upcoming = {name: schedule.next_after(now) for name, schedule in self.schedules.items()}
        while pending := {name: due for name, due in upcoming.items() if due is not None}:
            await self.clock.sleep_until(min(pending.values()))
            now = self.clock.now()
            for name, due in sorted(pending.items(), key=lambda item: (item[1], item[0])):
                if due <= now:
                    missed, latest = self.schedules[name].missed(due, now)
                    await self._fire(name, latest or due, missed + 1, at_startup=False)
                    upcoming[name] = self.schedules[name].next_after(now)
        logger.info("cron: no job has a tick left within 50 years; the scheduler stops")

    async def _fire(self, name: str, scheduled: datetime, ticks: int, *, at_startup: bool) -> None:
        """Hand over ``name``'s tick at ``scheduled``, the latest of ``ticks`` due ones; or skip it on overlap."""
        last = self.state.last(name)
        if self.stopped or (last is not None and scheduled <= last):
            return
        if ticks > 1 or at_startup:
            self.report("cron_tick_missed", name, {"scheduled": scheduled.isoformat(), "missed": ticks,
                                                   "at_startup": at_startup})
            logger.warning("cron: job {} missed {} tick(s){}; running the latest ({}) once", name, ticks,
                           " while the server was down" if at_startup else " (the machine slept or the clock jumped)",
                           scheduled.isoformat())
        previous = self.running.get(name)
        skipped = previous is not None and not previous.done()
        await asyncio.to_thread(self.state.record, name, scheduled)
        if skipped:
            self.report("cron_tick_skipped", name, {"scheduled": scheduled.isoformat(), "reason": "overlap"})
            logger.warning("cron: job {} tick at {} skipped: its previous tick is still running", name, scheduled.isoformat())
            return
        task = asyncio.ensure_future(self.run_tick(name, scheduled))
        task.add_done_callback(_log_failure)
        self.running[name] = task

    async def stop(self) -> None:
        """Wait for the ticks still running (the channel has cancelled their runs first)."""
        ticks = [task for task in self.running.values() if not task.done()]
        if ticks:
            await asyncio.wait(ticks)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.opt(exception=error).error("cron: a tick failed outside its turn: {}", error)
