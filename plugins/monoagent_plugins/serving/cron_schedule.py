"""When a cron job fires: its schedule in its time zone, and the clock the scheduler sleeps on.

A :class:`CronSchedule` is a five-field cron expression read in an IANA time zone, parsed by
`cronsim <https://github.com/cuu508/cronsim>`_ (the ``serve`` extra). cronsim was chosen over
croniter because it works on :mod:`zoneinfo` datetimes directly (croniter keeps pytz-era code
paths and pulls in python-dateutil), has no dependencies, ships type information, and documents
one DST policy, Debian cron's, that it is tested against:

* a job at a fixed local time (minute and hour fields not ``*``) whose time does not exist on a
  spring-forward day fires once, at the first minute that exists after it (a daily 02:30 in
  Europe/Berlin fires at 03:00 CEST on that day);
* such a job whose time exists twice on a fall-back day fires once, at the first occurrence
  (the daylight-saving one);
* a job whose hour field is ``*`` (hourly, every minute) is scheduled on real time, so it fires
  once per real hour, twice at the "same" wall-clock hour of a fall-back night.

Every instant this module returns is an aware UTC datetime; :class:`Clock` is what the
scheduler reads the time from and sleeps on, so tests inject one and never sleep.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

FIELDS = "minute hour day-of-month month day-of-week"
MAX_COUNTED_TICKS = 10_000
"""How many missed ticks :meth:`CronSchedule.missed` counts one by one before it stops counting."""


class ScheduleError(ValueError):
    """A cron expression or a time zone that cannot be used; the message says what is allowed."""


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone this machine knows, or None when it is one."""
    if not name or name != name.strip() or name.startswith(("/", ".")) or ".." in name or "\x00" in name:
        return "not an IANA time zone name; allowed: a name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return "unknown time zone; allowed: an IANA name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"
    return None


class CronSchedule:
    """A cron expression in a time zone: the instants it fires at."""

    def __init__(self, expression: str, timezone: str = "UTC") -> None:
        from cronsim import CronSim, CronSimError

        problem = zone_problem(timezone)
        if problem is not None:
            raise ScheduleError(problem)
        if len(expression.split()) != 5:
            raise ScheduleError(f"a cron expression has five fields ({FIELDS}), such as '30 2 * * *'; "
                                f"this one has {len(expression.split())}")
        self.expression = expression
        self.timezone = timezone
        self.zone = ZoneInfo(timezone)
        self._sim = CronSim
        try:
            CronSim(expression, datetime.now(self.zone))
        except CronSimError as exc:
            raise ScheduleError(f"not a valid cron expression ({exc}); allowed: five fields ({FIELDS}), such as '30 2 * * *'") from None

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, {self.timezone!r})"

    def next_after(self, moment: datetime) -> datetime | None:
        """The first instant strictly after ``moment`` the job fires at (UTC), or None if none within 50 years.

        cronsim reads a fixed-time job in naive local time, so on a fall-back night it can
        answer the first occurrence of a repeated time when ``moment`` is already past it; such
        an answer is skipped, which is what makes the repeated time fire once.
        """
        iterator = self._sim(self.expression, moment.astimezone(self.zone))
        for found in iterator:
            instant = found.astimezone(UTC)
            if instant > moment:
                return instant
        return None

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last instant at or before ``moment`` the job fired at (UTC), or None if none within 50 years."""
        start = moment.astimezone(self.zone).replace(microsecond=0) + timedelta(seconds=1)
        found = next(self._sim(self.expression, start, reverse=True), None)
        return None if found is None else found.astimezone(UTC)

    def missed(self, after: datetime, until: datetime) -> tuple[int, datetime | None]:
        """How many instants fall in ``(after, until]``, and the latest of them.

        The count stops at :data:`MAX_COUNTED_TICKS` (a job every minute, down for a month,
        would otherwise be walked tick by tick); the latest instant is exact either way.
        """
        count, latest = 0, None
        for found in self._sim(self.expression, after.astimezone(self.zone)):
            instant = found.astimezone(UTC)
            if instant <= after:
                continue
            if instant > until:
                break
            count, latest = count + 1, instant
            if count >= MAX_COUNTED_TICKS:
                return count, self.latest_at_or_before(until)
        return count, latest

@runtime_checkable
class Clock(Protocol):
    """The time the scheduler reads, and its sleep: the wall clock in production, a test's own elsewhere."""

    def now(self) -> datetime:
        """The current instant, an aware datetime."""
        ...

    async def sleep_until(self, moment: datetime) -> None:
        """Return at ``moment`` or later (the scheduler reads :meth:`now` again afterwards)."""
        ...


class WallClock:
    """The system's wall clock; a long sleep is taken in naps of at most :attr:`nap_s` seconds.

    asyncio sleeps on a monotonic clock that stops while the machine is suspended and does not
    follow a change of the wall clock. Napping and reading the wall clock again bounds how late
    a tick fires after a resume or a jump forward; the scheduler then fires each job's latest
    due tick once, however many went by (see :class:`~monoagent_plugins.serving.cron_scheduler.CronScheduler`).
    """

    nap_s = 30.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, moment: datetime) -> None:
        import asyncio

        while (left := (moment - self.now()).total_seconds()) > 0:
            await asyncio.sleep(min(left, self.nap_s))
