"""The writer: one thread per sidecar and process, its liveness, locks, back-off and recovery.

* **Writers.** Each process runs one writer thread per sidecar (shared by every store handle of
  the process on the same history directory). Several processes write the same sidecar at once:
  SQLite serialises them (every write is one ``BEGIN IMMEDIATE`` transaction, with a busy
  timeout), and the sequence numbers are allocated inside that transaction, so they are unique
  and ordered across processes. The writer uses DELETE journaling and ``synchronous=EXTRA``:
  with a DELETE journal a transaction commits when its rollback journal is unlinked, and FULL
  does not fsync the directory after that unlink, so a power cut could bring the journal back
  and roll an acknowledged record back; EXTRA syncs the directory too (one more fsync per write).
* **Liveness.** A writer creates its own ``tool-writer-<id>.lock`` (``O_EXCL``, 0600) and holds an
  exclusive ``flock`` on it for its lifetime; ``<id>`` is stored in the ``writer`` column of every
  invocation it writes. A writer is dead when its lock file is missing or can be locked
  (``LOCK_EX | LOCK_NB``): the kernel drops a ``flock`` the moment its process dies, so this needs
  no PID (PIDs are reused) and no elapsed-time lease. A stale lock file is deleted by whoever
  finds it lockable.
* **Opening, and a locked sidecar.** A writer opens the sidecar on its first write, waiting up to
  :attr:`OpenRetry.lock_wait_ms` (30 s) for a lock another connection holds (SQLite's, or the
  owner lock); each write waits as long for SQLite's lock. If it cannot open the sidecar, or a
  write gives up on the lock, the sidecar is *unavailable*: every write is rejected at once with
  :class:`~monoagent._kernel.errors.ToolHistoryUnavailable` (``persistence: "failed"``), one log
  line says so, and the next write after a back-off (1 s, doubling up to 60 s) tries again (the
  open, or taking the write lock once), waiting only :attr:`OpenRetry.probe_wait_ms` (1 s); once
  that succeeds, writes are recorded again and one log line says that too. Nothing stays failed
  for the life of the process, and a lock held for minutes costs each write no wait at all.
  A sidecar deleted or replaced under the open connection (``SQLITE_READONLY_DBMOVED``) is
  opened again at its path and the write retried once.
* **Recovery.** At writer start-up, and whenever another store handle of the process attaches to
  the running writer, every invocation still without a result whose writer is dead is closed as
  ``interrupted`` (never re-run). Invocations of live writers (another process's tool still
  running) are never touched. Recovery holds the owner lock, a short critical section that a
  writer also takes while it creates its liveness lock, so a lock file is never judged before
  its owner holds it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import fcntl
import os
import queue
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import ToolHistoryError, ToolHistoryRejected, ToolHistoryUnavailable, logger, utf8_len
from monoagent_plugins.history.tool_calls.sidecar import (
    BUSY_TIMEOUT_MS,
    IN_FLIGHT_INDEX,
    LOCKS,
    OWNER_LOCK,
    SCHEMA,
    SCHEMA_VERSION,
    SIDECAR,
    WRITER_ID,
    WRITER_LOCK_PREFIX,
    WRITER_LOCK_SUFFIX,
    SidecarUnavailable,
    connect,
    create_private,
    ensure_dir,
    ensure_dir_under,
    is_busy,
    is_moved,
    next_seq,
    transaction,
)

if TYPE_CHECKING:
    from monoagent_plugins.history.tool_history import ToolHistoryConfig

INTERRUPTED_TEXT = "The process running this tool call ended before it returned; the call was not re-run."


@attrs.frozen
class OpenRetry:
    """How a writer waits for locks and retries a sidecar it could not open (see the module docstring).

    ``lock_wait_ms`` bounds every wait for another connection's lock: SQLite's busy timeout of
    each write and of the first open, and the owner lock. Later open attempts wait
    ``probe_wait_ms``. After a failed open, writes are rejected for ``first_delay`` seconds,
    doubling per failure up to ``max_delay``, measured by ``clock`` (monotonic; tests inject one).
    """

    lock_wait_ms: int = BUSY_TIMEOUT_MS
    probe_wait_ms: int = 1_000
    first_delay: float = 1.0
    max_delay: float = 60.0
    clock: Callable[[], float] = time.monotonic

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed open in a row."""
        return min(self.first_delay * 2.0 ** min(failures - 1, 32), self.max_delay)


class OwnerLockBusy(ToolHistoryError):
    """Another process held the owner lock for longer than the writer waits."""


@contextlib.contextmanager
def _owner_lock(history_dir: Path, wait_ms: int = BUSY_TIMEOUT_MS) -> Iterator[None]:
    """Hold the owner lock: the short critical section of recovery and writer registration.

    Waits at most ``wait_ms`` for another holder (polling, as SQLite's busy handler does), then
    raises :class:`OwnerLockBusy` instead of blocking the writer thread for good.
    """
    path = history_dir / OWNER_LOCK
    ensure_dir_under(path.parent, history_dir)
    create_private(path, history_dir)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + wait_ms / 1000
        pause = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OwnerLockBusy(f"{path} is held by another process for more than {wait_ms / 1000:g} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
        yield
    finally:
        os.close(fd)


def _writer_lock_path(locks: Path, writer_id: str) -> Path:
    return locks / f"{WRITER_LOCK_PREFIX}{writer_id}{WRITER_LOCK_SUFFIX}"


class WriterLock:
    """A writer's liveness identity: an exclusive ``flock`` on a fresh lock file of its own.

    Created (``O_EXCL``, 0600, ``O_NOFOLLOW``) and locked under the owner lock, so recovery never
    sees the file before it is held. The kernel releases the lock when the process dies;
    :meth:`release` (a clean stop) deletes the file, which also reads as a dead writer.
    """

    def __init__(self, locks: Path) -> None:
        self.id = secrets.token_hex(16)
        self.path = _writer_lock_path(locks, self.id)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(self.fd, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.release()
            raise

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)


def writer_alive(locks: Path, writer_id: str | None) -> bool:
    """Whether the writer ``writer_id`` still runs; the lock file of a dead one is deleted.

    Dead: no id (rows of a schema-1 writer, which owned the whole sidecar: whoever holds the
    owner lock has outlived it), a missing or non-regular lock file, or one that can be locked
    ``LOCK_EX | LOCK_NB`` (nobody holds it). Never a PID, never elapsed time.
    """
    if writer_id is None or not WRITER_ID.fullmatch(writer_id):
        return False
    path = _writer_lock_path(locks, writer_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:  # a symlink or something else that no writer created
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # stale: removed while we hold its lock
        return False
    finally:
        os.close(fd)


def _sweep_writer_locks(locks: Path, own: str) -> None:
    """Delete the lock files of dead writers (those that crashed with no call in flight too)."""
    for entry in os.scandir(locks):
        name = entry.name
        if name.startswith(WRITER_LOCK_PREFIX) and name.endswith(WRITER_LOCK_SUFFIX):
            writer_id = name[len(WRITER_LOCK_PREFIX) : -len(WRITER_LOCK_SUFFIX)]
            if writer_id != own:
                writer_alive(locks, writer_id)


def _in_flight_writers(db: sqlite3.Connection, own: str) -> set[str | None]:
    return {w for (w,) in db.execute("SELECT DISTINCT writer FROM calls WHERE status IS NULL")} - {own}


def recover(db: sqlite3.Connection, history_dir: Path, own: str, now: float, *, locked: bool = False, wait_ms: int = BUSY_TIMEOUT_MS) -> int:
    """Close as ``interrupted`` every invocation in flight whose writer is dead; the number closed.

    A quick unlocked look first: with no call in flight of another writer (the common case) it
    costs one indexed query. Otherwise it takes the owner lock (unless ``locked``) and decides
    each writer's liveness inside one ``IMMEDIATE`` transaction.
    """
    if not _in_flight_writers(db, own):
        return 0
    with contextlib.nullcontext() if locked else _owner_lock(history_dir, wait_ms), transaction(db):
        locks = history_dir / LOCKS
        dead = [w for w in _in_flight_writers(db, own) if not writer_alive(locks, w)]
        closed = 0
        for writer in dead:
            where = "writer IS NULL" if writer is None else "writer = ?"
            params = () if writer is None else (writer,)
            for (invocation_id,) in db.execute(
                f"SELECT invocation_id FROM calls WHERE status IS NULL AND {where} ORDER BY start_seq", params
            ).fetchall():
                db.execute(
                    "UPDATE calls SET status = 'interrupted', end_seq = ?, finished_at = ?, result = ?, result_bytes = ?,"
                    " result_retained_bytes = ?, result_truncated = 0, result_omitted = 0 WHERE invocation_id = ?",
                    (next_seq(db), now, INTERRUPTED_TEXT, utf8_len(INTERRUPTED_TEXT), utf8_len(INTERRUPTED_TEXT), invocation_id),
                )
                closed += 1
    return closed


class SidecarWriter:
    """The one writer thread of a sidecar in this process (refcounted by :func:`writer_for`)."""

    def __init__(self, history_dir: Path, settings: ToolHistoryConfig, clock: Callable[[], float], retry: OpenRetry) -> None:
        self.history_dir = history_dir
        self.path = history_dir / SIDECAR
        self.settings = settings
        self.clock = clock
        self.retry = retry
        self.open_failures = 0
        self.retry_at: float | None = None
        self.unavailable: str | None = None  # why the sidecar cannot be opened, while it cannot
        self.gate = threading.Event()
        self.gate.set()
        self.users = 0
        self.writer_id: str | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=f"tool-history-writer:{self.path}", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[sqlite3.Connection], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queue.put((job, future))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def recover(self) -> concurrent.futures.Future[Any]:
        """Queue a recovery pass (close the calls of dead writers as interrupted); resolves to the count."""
        return self.submit(lambda db: recover(db, self.history_dir, self.writer_id or "", self.clock(), wait_ms=self.retry.lock_wait_ms))

    # An outage: the sidecar cannot be opened, or stays locked by another connection past the lock
    # wait. Writes are then rejected at once until the back-off ends; the next write after it tries
    # again (opening, or taking the write lock once) and only a real success ends the outage.

    def _refused(self) -> ToolHistoryUnavailable | None:
        """The rejection of a write while the back-off runs, else None."""
        now = self.retry.clock()
        if self.retry_at is None or now >= self.retry_at:
            return None
        return ToolHistoryUnavailable(
            f"tool history at {self.path} is unavailable ({self.unavailable}); the record was not written; "
            f"next attempt in {self.retry_at - now:.1f} s"
        )

    def _outage(self, error: BaseException, db: sqlite3.Connection | None) -> ToolHistoryUnavailable:
        """Start or extend the back-off after ``error``; the outage is logged once, when it starts."""
        retry = self.retry
        self.open_failures += 1
        delay = retry.delay(self.open_failures)
        self.retry_at = retry.clock() + delay
        if self.unavailable is None:
            logger.bind(plugin="tool-history").warning(
                "tool history at {} is unavailable ({}); writes are rejected until it can be reached again, "
                "retried with back-off from {:g} s up to {:g} s",
                self.path, error, retry.first_delay, retry.max_delay,
            )
        self.unavailable = str(error)
        if db is not None:  # later attempts only probe
            with contextlib.suppress(sqlite3.Error):
                db.execute(f"PRAGMA busy_timeout={int(min(retry.probe_wait_ms, retry.lock_wait_ms))}")
        return ToolHistoryUnavailable(
            f"tool history at {self.path} is unavailable ({error}); the record was not written; next attempt in {delay:g} s"
        )

    def _reached(self, db: sqlite3.Connection) -> None:
        """End an outage after a real success: logged once, lock waits back to normal."""
        logger.bind(plugin="tool-history").warning(
            "tool history at {} is reachable again after {} failed attempts; writes are recorded again", self.path, self.open_failures
        )
        db.execute(f"PRAGMA busy_timeout={int(self.retry.lock_wait_ms)}")
        self.open_failures, self.retry_at, self.unavailable = 0, None, None

    def _reach(self, db: sqlite3.Connection | None) -> tuple[sqlite3.Connection, WriterLock | None]:
        """The open connection, opening the sidecar first if needed; during an outage, a real
        attempt (the open, or taking the write lock once) that ends it or raises."""
        refused = self._refused()
        if refused is not None:
            raise refused
        identity = None
        if db is None:
            wait_ms = self.retry.lock_wait_ms if self.open_failures == 0 else min(self.retry.probe_wait_ms, self.retry.lock_wait_ms)
            try:
                db, identity = self._open(wait_ms)
            except (OSError, sqlite3.Error, ToolHistoryError) as exc:
                raise self._outage(exc, None) from None
        elif self.unavailable is not None:
            try:
                db.execute("BEGIN IMMEDIATE")
                db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise self._outage(exc, db) from None
        if self.unavailable is not None:
            self._reached(db)
        return db, identity

    def _open(self, wait_ms: int) -> tuple[sqlite3.Connection, WriterLock]:
        ensure_dir(self.history_dir)
        ensure_dir_under(self.path.parent, self.history_dir)
        locks = self.history_dir / LOCKS
        ensure_dir_under(locks, self.history_dir)
        with _owner_lock(self.history_dir, wait_ms):
            identity = WriterLock(locks)
            try:
                create_private(self.path, self.history_dir)
                db = connect(self.path, self.settings, wait_ms)
                try:
                    self._prepare(db)
                    db.execute(f"PRAGMA busy_timeout={int(self.retry.lock_wait_ms)}")
                    _sweep_writer_locks(locks, identity.id)
                    recover(db, self.history_dir, identity.id, self.clock(), locked=True)
                except BaseException:
                    db.close()
                    raise
            except BaseException:
                identity.release()
                raise
        self.writer_id = identity.id
        return db, identity

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Create the schema, or check it (migrating a schema-1 development file in place)."""
        with transaction(db):
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema', ?), ('seq', '0')", (str(SCHEMA_VERSION),))
            elif row[0] == "1":
                if "writer" not in {column[1] for column in db.execute("PRAGMA table_info(calls)")}:
                    db.execute("ALTER TABLE calls ADD COLUMN writer TEXT")
                db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise SidecarUnavailable(f"{self.path} has schema {row[0]}; this monoagent reads schema {SCHEMA_VERSION}")
            db.execute(IN_FLIGHT_INDEX)

    def _main(self) -> None:
        db: sqlite3.Connection | None = None
        identity: WriterLock | None = None
        while True:
            item = self._queue.get()
            if item is None:
                break
            job, future = item
            self.gate.wait()
            if not future.set_running_or_notify_cancel():
                continue
            for attempt in (1, 2):
                try:
                    db, opened = self._reach(db)
                    identity = opened or identity
                    future.set_result(job(db))
                except sqlite3.Error as exc:
                    if attempt == 1 and db is not None and is_moved(exc):
                        logger.bind(plugin="tool-history").warning(
                            "tool history at {} was deleted or replaced while open; opening it again", self.path
                        )
                        db.close()
                        db = None
                        if identity is not None:
                            identity.release()
                            identity = None
                        continue
                    busy = isinstance(exc, sqlite3.OperationalError) and is_busy(exc)
                    future.set_exception(
                        self._outage(exc, db) if busy else ToolHistoryRejected(f"tool history at {self.path} rejected the write: {exc}")
                    )
                except BaseException as exc:
                    future.set_exception(exc)
                break
        if db is not None:
            db.close()
        if identity is not None:
            identity.release()


_writers: dict[str, SidecarWriter] = {}
_writers_lock = threading.Lock()


@atexit.register
def _drain_writers() -> None:
    """At interpreter exit, let every writer finish what is queued (no acknowledged write is dropped)."""
    with _writers_lock:
        writers = list(_writers.values())
        _writers.clear()
    for writer in writers:
        writer.stop()


def writer_for(history_dir: Path, settings: ToolHistoryConfig, clock: Callable[[], float], retry: OpenRetry) -> SidecarWriter:
    """This process's writer of the sidecar under ``history_dir``, started on first use; one more user of it."""
    key = os.path.realpath(history_dir)
    with _writers_lock:
        writer = _writers.get(key)
        if writer is None:
            writer = _writers[key] = SidecarWriter(history_dir, settings, clock, retry)
        else:
            writer.recover()  # a new handle on a running writer: a cheap look for calls of dead writers
        writer.users += 1
        return writer


def release_writer(writer: SidecarWriter) -> None:
    """One user fewer; the last one stops the writer (after what is queued is written)."""
    with _writers_lock:
        writer.users -= 1
        if writer.users > 0:
            return
        _writers.pop(os.path.realpath(writer.history_dir), None)
    writer.stop()
