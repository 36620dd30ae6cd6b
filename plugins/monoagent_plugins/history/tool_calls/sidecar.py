"""The sidecar on disk: where its files live, how they are created, its schema, SQLite helpers.

The sidecar lives at ``<history>/tool-history/tool-lifecycles.sqlite``; writer ownership is kept
in ``<history>/.locks/``: the owner lock ``tool-lifecycles-owner.sqlite`` and one liveness lock
``tool-writer-<id>.lock`` per running writer (:mod:`.writer`). Every file is created 0600 (with
``os.open``, ``O_NOFOLLOW``, before SQLite opens it, whatever the umask) in 0700 directories;
symlinks are refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monoagent import SymlinkedPath, ToolHistoryError, open_directory_under, open_file_under

if TYPE_CHECKING:
    from monoagent_plugins.history.tool_history import ToolHistoryConfig

SIDECAR = Path("tool-history") / "tool-lifecycles.sqlite"
LOCKS = Path(".locks")
OWNER_LOCK = LOCKS / "tool-lifecycles-owner.sqlite"
WRITER_LOCK_PREFIX = "tool-writer-"
WRITER_LOCK_SUFFIX = ".lock"
WRITER_ID = re.compile(r"[0-9a-f]{32}")
SCHEMA_VERSION = 2
READABLE_SCHEMAS = ("1", "2")  # schema 1 (development builds) lacks only the writer column
BUSY_TIMEOUT_MS = 30_000
READ_BUSY_TIMEOUT_MS = 5_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    invocation_id TEXT PRIMARY KEY,
    result_id TEXT NOT NULL UNIQUE,
    conversation_id TEXT NOT NULL,
    logical_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    writer TEXT,
    isolated INTEGER NOT NULL DEFAULT 0,
    start_seq INTEGER NOT NULL,
    end_seq INTEGER,
    started_at REAL NOT NULL,
    finished_at REAL,
    status TEXT,
    arguments TEXT,
    arguments_bytes INTEGER NOT NULL,
    arguments_retained_bytes INTEGER NOT NULL,
    arguments_truncated INTEGER NOT NULL,
    arguments_omitted INTEGER NOT NULL,
    result TEXT,
    result_bytes INTEGER,
    result_retained_bytes INTEGER,
    result_truncated INTEGER,
    result_omitted INTEGER,
    payload_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS calls_by_conversation ON calls (conversation_id, end_seq);
CREATE INDEX IF NOT EXISTS calls_by_logical ON calls (logical_id, end_seq);
CREATE INDEX IF NOT EXISTS calls_by_end ON calls (end_seq);
CREATE TABLE IF NOT EXISTS tombstones (
    invocation_id TEXT PRIMARY KEY,
    result_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    logical_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    status TEXT,
    removed_at REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_by_time ON tombstones (removed_at);
"""
IN_FLIGHT_INDEX = "CREATE INDEX IF NOT EXISTS calls_in_flight ON calls (writer) WHERE status IS NULL"


class SidecarUnavailable(ToolHistoryError):
    """The sidecar is corrupt, unsafe (a symlink, not a regular file) or of an unknown schema."""


def ensure_dir(path: Path) -> None:
    """Create ``path`` (0700) if missing; a symlink or a file in its place is refused."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SidecarUnavailable(f"{path} must be a real directory, not a symlink or a file")


def ensure_dir_under(path: Path, root: Path) -> None:
    """:func:`ensure_dir` for a directory below ``root`` (the history directory): every component from ``root``
    down is created (0700) and opened without following a symlink (:func:`monoagent.open_directory_under`)."""
    try:
        os.close(open_directory_under(root, os.path.relpath(path, root), create=True, what="tool history directory"))
    except (SymlinkedPath, NotADirectoryError) as exc:
        raise SidecarUnavailable(str(exc)) from None


def create_private(path: Path, root: Path | None = None) -> None:
    """Create ``path`` 0600 if missing (O_NOFOLLOW: a symlink is refused), whatever the umask.

    With ``root``, no directory from ``root`` down to ``path`` is followed through a symlink either.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if root is None:
            fd = os.open(path, flags, 0o600)
        else:
            fd = open_file_under(root, os.path.relpath(path, root), flags, 0o600, what="tool history file")
    except SymlinkedPath as exc:
        raise SidecarUnavailable(str(exc)) from None
    except FileExistsError:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            raise SidecarUnavailable(f"{path} must be a regular file, not a symlink") from None
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def connect(path: Path, settings: ToolHistoryConfig, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """A writing connection: autocommit (transactions are explicit), DELETE journal, the configured synchronous mode."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute(f"PRAGMA synchronous={settings.synchronous}")
    return db


def is_moved(error: sqlite3.Error) -> bool:
    """Whether the open connection's file was deleted or replaced (SQLITE_READONLY_DBMOVED): the
    connection can never write again, while the path may name a new file (or none, to create)."""
    return getattr(error, "sqlite_errorcode", 0) == getattr(sqlite3, "SQLITE_READONLY_DBMOVED", 1032)


def is_busy(error: sqlite3.Error) -> bool:
    """Whether SQLite gave up waiting for another connection's lock (SQLITE_BUSY or SQLITE_LOCKED)."""
    return (getattr(error, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class transaction:
    """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error (a failed COMMIT too)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is not None:
            self.db.execute("ROLLBACK")
            return
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error:  # e.g. SQLITE_BUSY: the transaction would stay open and block every later BEGIN
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise


def next_seq(db: sqlite3.Connection) -> int:
    """The next sequence number, allocated inside the caller's transaction (unique across processes)."""
    (value,) = db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'seq' RETURNING value").fetchone()
    return int(value)
