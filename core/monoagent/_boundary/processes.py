"""Who owns a claim: a process named so that a reused PID is not mistaken for its owner.

A record that says "process 4242 holds this" (an idempotency key in flight, a lock) outlives
that process when it crashes, and the kernel hands 4242 to another process sooner or later: a
liveness check on the PID alone then keeps the claim forever. :class:`ProcessIdentity` names a
process by three things: the machine's boot (``/proc/sys/kernel/random/boot_id``), its PID, and
its start time (field 22 of ``/proc/<pid>/stat``, in clock ticks since boot). A claim is held
while a process with that PID runs *and* started at that time in that boot; a reboot or a PID
handed to a new process releases it.

Where ``/proc`` is not there (macOS), the boot and the start time are unknown (``None``) and only
the PID can be checked: a claim stored there must also carry an expiry (its lease) of its own.
An identity read from an older record that stored only a PID is judged the same way.
"""

from __future__ import annotations

import functools
import os
import re

import attrs

__all__ = ["ProcessIdentity"]

_TOKEN = re.compile(r"(?P<pid>[1-9][0-9]{0,9}):(?P<started>[0-9]{1,20}|-):(?P<boot>[0-9a-f-]{1,64}|-)")


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            boot = file.read(64).strip().lower()
    except (OSError, UnicodeDecodeError):
        return None
    return boot if re.fullmatch(r"[0-9a-f-]{1,64}", boot) else None


@functools.cache
def _this_boot() -> str | None:
    return _boot_id()


def _start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``; None when there is no such process or no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read(4096)
    except OSError:
        return None
    # Field 2 (the command) is in parentheses and may hold spaces and ")": split after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (the state), so field 22 is fields[19]
    except (IndexError, ValueError):
        return None


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@attrs.frozen
class ProcessIdentity:
    """A process named by its PID, its start time and the boot it runs in (see the module docstring).

    ``started`` and ``boot`` are None where they cannot be known (no ``/proc``, or a record that
    stored only a PID): such an identity is judged by its PID alone, which a reused PID fools, so
    a claim that may carry one needs a lease (an expiry) as well. :meth:`token` and
    :meth:`parse` store it as one short string (``"<pid>:<started>:<boot>"``, ``-`` for unknown).
    """

    pid: int
    started: int | None = None
    boot: str | None = None

    @classmethod
    def current(cls) -> ProcessIdentity:
        """This process (read again after a ``fork``: the child is another process)."""
        pid = os.getpid()
        return _current(pid)

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The process running as ``pid`` now, or None when there is none."""
        if pid <= 0 or not _pid_runs(pid):
            return None
        return cls(pid, _start_time(pid), _this_boot())

    @property
    def precise(self) -> bool:
        """Whether the start time and the boot are known, so a reused PID is told apart."""
        return self.started is not None and self.boot is not None

    def alive(self) -> bool:
        """Whether this very process still runs: same boot, a process with the PID, started at the same time.

        An identity that is not :attr:`precise` is alive while its PID runs, except the PID of
        the calling process itself, which cannot be the one that recorded it before this process
        started (a previous process of the same PID): it reads as gone.
        """
        if self == ProcessIdentity.current():
            return True
        if not self.precise:
            return self.pid != os.getpid() and _pid_runs(self.pid)
        if self.boot != _this_boot():
            return False  # recorded in another boot: every process of it is gone
        return _pid_runs(self.pid) and _start_time(self.pid) == self.started

    def token(self) -> str:
        """The identity as one string, for a database column or a file (:meth:`parse` reads it back)."""
        started = "-" if self.started is None else str(self.started)
        return f"{self.pid}:{started}:{self.boot or '-'}"

    @classmethod
    def parse(cls, token: object) -> ProcessIdentity | None:
        """The identity :meth:`token` wrote, or None when ``token`` is not one."""
        match = _TOKEN.fullmatch(token) if isinstance(token, str) else None
        if match is None:
            return None
        started, boot = match["started"], match["boot"]
        return cls(int(match["pid"]), None if started == "-" else int(started), None if boot == "-" else boot)


@functools.cache
def _current(pid: int) -> ProcessIdentity:
    return ProcessIdentity(pid, _start_time(pid), _this_boot())
