"""The cron channel's memory across restarts: the last tick each job handled, in ``<home>/cron/state.json``.

The scheduler records a job's scheduled time before it runs the tick's turn, so a tick is run
at most once even when the process dies mid-turn. At start-up the record says whether ticks were
missed while the server was down (:class:`~monoagent_plugins.serving.cron_scheduler.CronScheduler`).

The file is written atomically (a temporary file in the same directory, fsync, rename, fsync
of the directory) in an owner-only directory. Anyone who can write the disk may have planted or
damaged it, so reading is defensive: the directory and the file are reached from the agent home
with no component below it followed through a symlink (:func:`monoagent.open_file_under`), and a file that is not a regular file of this user, is too
large, is not strict JSON or not of the record's shape is named in a warning and treated as
empty (no job is then considered missed), never a crash. A directory that is not private is
named in a warning too, and then the state is neither read nor written.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import attrs

from monoagent import (
    SymlinkedPath,
    logger,
    open_file_under,
    private_directory_under,
    read_open_file,
    replace_file_durably,
)
from monoagent import strict_json_loads as strict_loads

STATE_VERSION = 1
MAX_STATE_BYTES = 1_048_576
MAX_DEPTH = 8
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


@attrs.frozen
class JobState:
    """What the state file keeps of one job: the scheduled time (ISO 8601, UTC) of the last tick it handled."""

    lastScheduled: str


@attrs.frozen
class StateRecord:
    """The whole state file: its version and each job's :class:`JobState` by job name."""

    version: int
    jobs: dict[str, JobState]


class DamagedState(Exception):
    """The state file cannot be used; the message names it and says why."""


class CronState:
    """The last handled tick of each job, loaded once at start-up and saved after each change."""

    def __init__(self, directory: Path, root: Path | None = None) -> None:
        self.directory = directory
        self.root = directory.parent if root is None else root
        """The agent home: opened as it is; ``directory`` and the file below it are never reached through a symlink."""
        self.path = directory / "state.json"
        self.usable = True
        self._last: dict[str, datetime] = {}

    def last(self, job: str) -> datetime | None:
        """The scheduled time of the last tick ``job`` handled, or None if it never ran here."""
        return self._last.get(job)

    def forget(self, job: str) -> None:
        """Drop ``job``'s record (one that cannot be true, such as a time after now); the next save leaves it out."""
        self._last.pop(job, None)

    def load(self) -> None:
        """Read the file; a missing one is an empty state, a damaged or planted one a warning and an empty state."""
        try:
            self._ensure_directory()
            self._last = self._read()
        except FileNotFoundError:
            self._last = {}
        except (DamagedState, OSError) as exc:
            logger.warning("cron: {}; treating the cron state as empty (no missed tick runs at start-up)", exc)
            self._last = {}

    def record(self, job: str, scheduled: datetime) -> None:
        """Remember that ``job`` handled its tick at ``scheduled`` and save the file (blocking: call it in a thread)."""
        self._last[job] = scheduled.astimezone(UTC)
        if not self.usable:
            return
        record = StateRecord(STATE_VERSION, {name: JobState(when.isoformat()) for name, when in sorted(self._last.items())})
        data = json.dumps(attrs.asdict(record), separators=(",", ":")).encode()
        try:
            self._write(data)
        except OSError as exc:
            logger.warning("cron: could not save {} ({}); a restart may not know this tick ran", self.path, exc)

    def _ensure_directory(self) -> None:
        try:
            problem = private_directory_under(self.root, os.path.relpath(self.directory, self.root), create=True,
                                              what="cron state directory")
        except SymlinkedPath as exc:
            self.usable = False
            raise DamagedState(f"{exc}; the cron state is not kept there") from None
        if problem is not None:
            self.usable = False
            raise DamagedState(f"{problem}; the cron state is not kept there")

    def _read(self) -> dict[str, datetime]:
        import cattrs

        try:
            fd = open_file_under(self.root, os.path.relpath(self.path, self.root), os.O_RDONLY | _O_NONBLOCK, what="cron state file")
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            if isinstance(exc, SymlinkedPath):
                raise DamagedState(str(exc)) from None
            raise DamagedState(f"cron state file {self.path} cannot be opened ({exc.strerror}; a symlink is refused)") from None
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise DamagedState(f"cron state file {self.path} belongs to another user")
            data = read_open_file(fd, MAX_STATE_BYTES, what="cron state file", path=self.path)
        finally:
            os.close(fd)
        try:
            record = cattrs.Converter(forbid_extra_keys=True).structure(strict_loads(data.decode("utf-8"), max_depth=MAX_DEPTH), StateRecord)
            if record.version != STATE_VERSION:
                raise ValueError(f"version {record.version}")
            last = {name: datetime.fromisoformat(job.lastScheduled) for name, job in record.jobs.items()}
        except Exception as exc:  # not UTF-8, not strict JSON, not the record's shape (cattrs raises a family)
            reason = str(exc).splitlines()[0][:120] if str(exc) else ""
            raise DamagedState(f"cron state file {self.path} is not a cron state record ({type(exc).__name__}: {reason})") from None
        if any(when.tzinfo is None for when in last.values()):
            raise DamagedState(f"cron state file {self.path} holds a time without a time zone")
        return {name: when.astimezone(UTC) for name, when in last.items()}

    def _write(self, data: bytes) -> None:
        replace_file_durably(self.path, data, stage_prefix=".state.", root=self.root)
