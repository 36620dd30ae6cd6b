"""The bundled plugin ``cron``: the ``cron`` channel, turns the host starts on a schedule.

Each job of ``cron.jobs`` names a five-field cron expression read in an IANA time zone; at each
tick ``monoagent serve`` runs the job's ``prompt`` as one request-driven, proactive turn
(``channel = "cron"``, ``delivery = "request"``, ``proactive = True``) in the conversation
``cron:<name>`` (or the job's ``conversationId``), so the ticks of a job share history, unless
``isolate`` runs each tick outside it. A job with ``notify`` delivers the successful final answer
to those destinations, unless the model answers exactly ``NO_REPLY``.

The channel has no HTTP routes (so nothing to authenticate) and one harness of its own; its
scheduler (:mod:`monoagent_plugins.serving.cron_scheduler`) starts on the serving loop. Overlapping
ticks of one job are skipped, a tick missed while the server was down runs once at start-up,
and an admission overload skips the tick; each is a ``cron_tick_skipped`` or
``cron_tick_missed`` event and a log line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import CONFIG_NAME_ALLOWED as NAME_ALLOWED
from monoagent import CONFIG_NAME_PATTERN as NAME_PATTERN
from monoagent import (
    AdmissionRejected,
    Channel,
    ComponentRegistrar,
    ConfigError,
    ConfigSectionRegistrar,
    MonoagentError,
    RunEvent,
    TurnRequest,
    failure_text,
    hookimpl,
    logger,
    setting,
)
from monoagent_plugins.serving.serve import ServeConfig

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.serving.cron_schedule import Clock, CronSchedule
    from monoagent_plugins.serving.cron_scheduler import CronScheduler
    from monoagent_plugins.serving.notify_dispatch import NotifyDispatch

CHANNEL = "cron"


def _name_problem(name: str) -> str | None:
    if NAME_PATTERN.fullmatch(name):
        return None
    return f"not an allowed job name; allowed: {NAME_ALLOWED}"


def _zone_problem(name: str) -> str | None:
    from monoagent_plugins.serving.cron_schedule import zone_problem

    return zone_problem(name)


def _prompt_problem(value: str) -> str | None:
    return None if value.strip() else "must not be blank; allowed: the text of the turn each tick runs"


def _conversation_problem(value: str | None) -> str | None:
    if value is not None and not value.strip():
        return "must not be blank; allowed: a conversation id (unset: cron:<name>)"
    return None


def _notify_problem(names: list[str]) -> str | None:
    bad = [name for name in names if not NAME_PATTERN.fullmatch(name)]
    return f"not a destination name: {bad[0]!r}; allowed: names of notify.destinations" if bad else None


@attrs.define
class CronJob:
    """One job of ``cron.jobs``: when it fires, the turn it runs, and where its answer goes."""

    name: str = setting(doc="The job's name (unique): in logs, events and the default conversation id.",
                        check=_name_problem, allowed=NAME_ALLOWED)
    schedule: str = setting(doc="When it fires: a five-field cron expression (minute hour day-of-month month day-of-week).",
                            example="30 2 * * *")
    prompt: str = setting(doc="The text of the turn each tick runs.", check=_prompt_problem)
    timezone: str = setting("UTC", doc="The IANA time zone the schedule is read in.", check=_zone_problem,
                            allowed="an IANA time zone name known to this machine, such as 'UTC' or 'Europe/Berlin'")
    conversation_id: str | None = setting(None, doc="The conversation the ticks share (unset: cron:<name>).",
                                          check=_conversation_problem)
    isolate: bool = setting(False, doc="Run each tick isolated: it reads the conversation's history but adds nothing to it.")
    notify: list[str] = setting(doc="Names of notify.destinations that receive the successful final answer.",
                                factory=list, check=_notify_problem)
    model: str | None = setting(None, doc="The model of this job's turns (unset: runtime.model).")
    enabled: bool = setting(True, doc="Whether the job fires.")


@attrs.define
class CronConfig:
    """cron: the cron channel of ``monoagent serve``: turns that run on a schedule."""

    enabled: bool = setting(True, doc="Run the cron channel when at least one job is enabled.", env="MONO_AGENT_CRON_ENABLED")
    jobs: list[CronJob] = setting(doc="The jobs ([[cron.jobs]] tables), each fired on its own schedule.", factory=list)


def conversation_of(job: CronJob) -> str:
    """The conversation a job's ticks run in: its ``conversationId``, else ``cron:<name>``."""
    return job.conversation_id or f"{CHANNEL}:{job.name}"


def checked_schedules(jobs: Sequence[CronJob], agent: Agent, notify: NotifyDispatch | None) -> dict[str, CronSchedule]:
    """Each enabled job's schedule; a :class:`ConfigError` naming ``cron.jobs[i].<key>`` for every problem of any job.

    ``notify`` is the channel's ``NotifyDispatch`` (None without the notify plugin), which checks
    each job's destinations.
    """
    from monoagent_plugins.serving.cron_schedule import CronSchedule, ScheduleError, WallClock

    problems: list[str] = []
    schedules: dict[str, CronSchedule] = {}
    first_of: dict[str, int] = {}
    now = WallClock().now()
    for index, job in enumerate(jobs):
        where = f"cron.jobs[{index}]"
        if job.name in first_of:
            problems.append(f"{where}.name = {job.name!r}: {where} and cron.jobs[{first_of[job.name]}] have the same name; "
                            f"job names must be unique")
        else:
            first_of[job.name] = index
        try:
            schedule = CronSchedule(job.schedule, job.timezone)
        except ScheduleError as exc:
            problems.append(f"{where}.schedule = {job.schedule!r}: {exc}")
        else:
            if schedule.next_after(now) is None:
                problems.append(f"{where}.schedule = {job.schedule!r}: never fires within 50 years")
            elif job.enabled:
                schedules[job.name] = schedule
        if job.model is not None:
            try:
                agent.provider(job.model)
            except MonoagentError as exc:
                problems.append(f"{where}.model = {job.model!r}: {exc}")
        if job.notify and notify is None:
            problems.append(f"{where}.notify: needs the notify plugin (monoagent_plugins.serving.notify_dispatch), which is not there")
        elif job.notify and notify is not None:
            try:
                notify.check(job.notify, f"{where}.notify")
            except ConfigError as exc:
                problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return schedules


def _notify_dispatch(agent: Agent) -> NotifyDispatch | None:
    """The channel's ``NotifyDispatch``, or None when the notify plugin's library is not installed."""
    try:
        from monoagent_plugins.serving.notify_dispatch import NotifyDispatch
    except ImportError as exc:
        from monoagent import missing_extra

        logger.warning("cron: {}; jobs with notify are refused", missing_extra("serve", "notify", exc))
        return None
    return NotifyDispatch(agent)


class CronChannel:
    """The ``cron`` channel: its jobs' schedules, its own harness, and the scheduler task once started.

    ``clock`` is the :class:`~monoagent_plugins.serving.cron_schedule.Clock` the scheduler reads and
    sleeps on (the wall clock unless given: a test passes its own).
    """

    name = CHANNEL
    has_credentials = True
    credential_hint = "cron has no HTTP surface and needs no credential"

    def __init__(self, agent: Agent, *, clock: Clock | None = None) -> None:
        from monoagent_plugins.serving.channel_runs import ChannelRuns

        self.agent = agent
        self.settings = agent.config.section("cron", CronConfig)
        self.jobs = {job.name: job for job in self.settings.jobs if job.enabled}
        self.enabled = self.settings.enabled and bool(self.jobs)
        wants_notify = self.enabled and any(job.notify for job in self.settings.jobs)
        self.notify = _notify_dispatch(agent) if wants_notify else None
        self.schedules = checked_schedules(self.settings.jobs, agent, self.notify) if self.enabled else {}
        self.clock = clock
        self.runs = ChannelRuns(agent)
        self.scheduler: CronScheduler | None = None
        self._task: Any = None

    async def serve(self, agent: Agent | None = None) -> None:
        """Not a standalone channel: ``monoagent serve`` starts it (:meth:`start`)."""
        raise NotImplementedError("the cron channel is run by `monoagent serve`")

    def routes(self) -> Sequence[Any]:
        """None: the channel is driven by its schedule, not by requests."""
        return []

    def check(self) -> list[str]:
        """One line per job: its schedule, zone, next tick (local and UTC), conversation and notify destinations."""
        from datetime import UTC

        from monoagent_plugins.serving.cron_schedule import WallClock

        now = (self.clock or WallClock()).now()
        lines = []
        for job in self.settings.jobs:
            schedule = self.schedules.get(job.name)
            if schedule is None or not job.enabled:
                lines.append(f"cron job {job.name}: disabled")
                continue
            due = schedule.next_after(now)
            when = "never" if due is None else f"{due.astimezone(schedule.zone).isoformat()} ({due.astimezone(UTC):%Y-%m-%dT%H:%MZ})"
            extras = (", isolated" if job.isolate else "") + (f", notify {', '.join(job.notify)}" if job.notify else "")
            lines.append(f"cron job {job.name}: {job.schedule!r} in {job.timezone}, next at {when}, "
                         f"conversation {conversation_of(job)}{extras}")
        return lines

    async def start(self) -> None:
        """Start the scheduler task on the serving loop (it catches up on missed ticks first)."""
        import asyncio

        from monoagent_plugins.serving.cron_schedule import WallClock
        from monoagent_plugins.serving.cron_scheduler import CronScheduler
        from monoagent_plugins.serving.cron_state import CronState

        self.scheduler = CronScheduler(self.schedules, self.clock or WallClock(), CronState(self.agent.config.home / "cron"),
                                       self.run_tick, self.report)
        self._task = asyncio.ensure_future(self.scheduler.run())
        self._task.add_done_callback(_scheduler_ended)
        logger.info("cron: {} job(s) scheduled: {}", len(self.schedules), ", ".join(sorted(self.schedules)))

    def request(self, job: CronJob) -> TurnRequest:
        """The turn one tick of ``job`` runs."""
        return TurnRequest(job.prompt, conversation_id=conversation_of(job), channel=CHANNEL, delivery="request",
                           proactive=True, isolated=job.isolate, notify=bool(job.notify), model=job.model)

    async def run_tick(self, name: str, scheduled: datetime) -> None:
        """Run one tick's turn, then start delivering its answer to the job's notify destinations; never raises."""
        from monoagent_plugins.serving.channel_runs import ShutdownCancelled

        job = self.jobs[name]
        try:
            result = await self.runs.run(self.request(job))
        except AdmissionRejected as exc:
            self.report("cron_tick_skipped", name, {"scheduled": scheduled.isoformat(), "reason": "admission", "detail": str(exc)})
            logger.warning("cron: job {} tick at {} skipped, not retried: {}", name, scheduled.isoformat(), exc)
            return
        except ShutdownCancelled:
            logger.info("cron: job {} tick at {} cancelled: the server is shutting down", name, scheduled.isoformat())
            return
        except Exception as exc:  # the turn failed; its run_failed event has the detail
            logger.warning("cron: job {} tick at {} failed: {}", name, scheduled.isoformat(), failure_text(exc))
            return
        if job.notify and self.notify is not None:
            self.notify.start(job.notify, result, channel=CHANNEL, source=name)  # a receiver's retries never hold the job

    def report(self, type: str, job: str, data: dict[str, Any]) -> None:
        """A channel-level event (no run of its own: a fresh run id) to every ``on_run_event`` observer."""
        from monoagent import new_run_id

        event = RunEvent(type, new_run_id(), conversation_of(self.jobs[job]), 1, time.time(),
                         {"channel": CHANNEL, "job": job, **data})
        self.agent.publish_event(event)

    def stop_accepting(self) -> None:
        """Fire no further tick (the server is stopping); ticks already running go on until the grace period ends.

        The scheduler stops before it records another tick as handled, so a tick that falls in the
        grace period is not marked done without running: it counts as missed at the next start-up.
        """
        if self.scheduler is not None:
            self.scheduler.stopped = True
        if self._task is not None:
            self._task.cancel()
        self.runs.stop_accepting()

    def cancel_in_flight(self) -> int:
        """Stop firing ticks and cancel the turns still running (the grace period is over); returns how many."""
        if self._task is not None:
            self._task.cancel()
        return self.runs.cancel_in_flight()

    async def shutdown(self) -> None:
        """Stop the scheduler, cancel what runs, wait for the ticks and their continuity accounts, close the harness;
        then give deliveries still under way ``serve.shutdownGraceMs`` before they are cancelled (each reported)."""
        import asyncio

        self.cancel_in_flight()
        if self._task is not None:
            await asyncio.wait([self._task])
        if self.scheduler is not None:
            await self.scheduler.stop()
        await self.runs.shutdown()
        if self.notify is not None:
            await self.notify.drain(self.agent.config.section("serve", ServeConfig).shutdown_grace_ms / 1000)


def _scheduler_ended(task: Any) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.opt(exception=error).error("cron: the scheduler stopped on an error; no further tick fires: {}", error)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("cron", CronConfig)


@hookimpl(trylast=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    register(CHANNEL, CronChannel, description="Turns on a schedule (cron.jobs), run by monoagent serve")
