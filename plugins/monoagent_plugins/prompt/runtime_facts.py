"""Runtime facts, so "what day is it" is answerable: the ``extra_system`` section (``section_runtime_facts``).

The section states the turn's local date, time and weekday with its time zone (the IANA name
when one is configured, ``runtime.session.rolloverTimezone``, else the system's zone name) and
its UTC offset, and the operating system the agent runs on. It is read from the turn's start
time (:attr:`~monoagent._kernel.turn.Turn.now`), so every provider round of a turn sees the same
facts, and it is dynamic: it follows the cache boundary (or heads the current user message in
continuous mode), so the stable prompt never changes with the clock.

Blocking this plugin (``plugins.block = ["runtime-facts"]``) leaves the facts out.
"""

from __future__ import annotations

import functools
import platform
from datetime import datetime

from monoagent import Section, Turn, hookimpl

HEADING = "# Runtime facts"


@functools.cache
def operating_system() -> str:
    """``Linux 6.8.0 (x86_64)``: the platform's name, release and machine, read once per process."""
    parts = [platform.system() or "unknown", platform.release()]
    machine = platform.machine()
    return " ".join(p for p in parts if p) + (f" ({machine})" if machine else "")


def zone_label(now: datetime, configured: str | None) -> str:
    """``Europe/Berlin, UTC+01:00``: the IANA zone when configured, else the system zone's name, and the offset."""
    offset = now.strftime("%z")
    utc = f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC offset unknown"
    name = configured or now.tzname() or ""
    return f"{name}, {utc}" if name and name != utc else utc


def runtime_facts(turn: Turn) -> str:
    """The section text for ``turn``: date, weekday, time, zone, operating system."""
    now = turn.now
    zone = zone_label(now, turn.config.runtime.session.rollover_timezone)
    return (
        f"{HEADING}\n\n"
        f"- Current local date and time: {now:%A, %Y-%m-%d %H:%M} ({zone})\n"
        f"- Operating system: {operating_system()}"
    )


@hookimpl(trylast=True)
def section_runtime_facts(turn: Turn) -> Section:
    return Section("extra_system", runtime_facts(turn), order=690, stability="dynamic", source="runtime-facts")
