"""The store: :class:`SqliteToolHistory`, what the ``sqlite`` component of ``toolHistory.store`` is.

* **Bounds.** Arguments are retained up to 8 KiB and results up to 16 KiB (of redacted text),
  with the exact original byte count of an admitted value; a value whose original exceeds the
  limit is omitted wholesale *before* redaction (its count saturates at limit + 1), never cut
  into a prefix that could split a credential. Redaction is the Agent's ``redact`` hook chain;
  arguments are redacted structurally (keys and values, see
  :func:`monoagent_plugins.observability.redaction.redact_structure`).
* **Retention** (after each result, in the result's transaction): 100,000 completed calls, 365
  days, 256 MiB of retained payload; each removed call leaves a tombstone, and tombstones are
  kept up to 10,000 and 30 days. All configurable under ``toolHistory.*``.
* **Maintenance** (``stats``, ``clear_logical``, ``clear_conversation``, ``clear_all``) works
  beside running writers of other processes: stats only reads, a clear is one ``IMMEDIATE``
  transaction of its own.
* **Reading** (``records``, ``query``) opens a read-only connection per call; a zero-byte sidecar
  counts as absent, a corrupt, unsafe or unknown one raises :class:`~.sidecar.SidecarUnavailable`.
* **Threads are internal.** The protocol's methods are coroutines. A write, a flush and a clear
  through a handle that wrote are queued on the process's writer thread before the coroutine's
  first ``await`` (so the order in which the coroutines start is the order the writer runs them
  in, see :class:`~monoagent._kernel.stores.ToolHistoryStore`), and the coroutine awaits the
  writer's future (:func:`_outcome`); reads and the maintenance of a handle that never wrote run
  in the event loop's default executor. Cancelling a coroutine withdraws nothing it queued: the
  writer still runs the job (an abandoned write is still written, as the harness expects).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from monoagent import (
    ToolHistoryClearReport,
    ToolHistoryError,
    ToolHistoryStats,
    ToolInvocation,
    ToolRecord,
    ToolResult,
    ToolStatus,
    utf8_len,
    utf8_prefix,
)
from monoagent_plugins.history.tool_calls.sidecar import (
    READ_BUSY_TIMEOUT_MS,
    READABLE_SCHEMAS,
    SIDECAR,
    SidecarUnavailable,
    connect,
    next_seq,
    transaction,
)
from monoagent_plugins.history.tool_calls.writer import OpenRetry, SidecarWriter, release_writer, writer_for

if TYPE_CHECKING:
    from monoagent_plugins.history.tool_history import ToolHistoryConfig

DAY = 86_400.0

_T = TypeVar("_T")


async def _outcome(future: concurrent.futures.Future[_T]) -> _T:
    """The outcome of a job queued on the writer thread, awaited without blocking the event loop.

    Shielded: cancelling the awaiting coroutine (a ``wait_for`` that ran out, a loop shutting
    down) leaves the job queued and its outcome retrieved, so nothing is withdrawn half-way (and a
    job that fails after its caller left is not reported as an exception never retrieved).
    """
    outcome = asyncio.wrap_future(future)
    try:
        return await asyncio.shield(outcome)
    except asyncio.CancelledError:
        outcome.add_done_callback(_read_outcome)
        raise


def _read_outcome(outcome: asyncio.Future[Any]) -> None:
    """Read the outcome nobody awaits any more, so that asyncio does not report its exception as never retrieved."""
    if not outcome.cancelled():
        outcome.exception()


def _bounded(text: str, limit: int, redact: Callable[[str], str]) -> tuple[str | None, int, int, bool, bool]:
    """(retained, original bytes, retained bytes, truncated, omitted) of one value."""
    size = utf8_len(text)
    if size > limit:
        return None, limit + 1, 0, True, True
    cut = utf8_prefix(redact(text), limit)
    return cut.text, size, cut.kept_bytes, cut.truncated, False


class SqliteToolHistory:
    """The bundled tool-history store, the ``sqlite`` component (a
    :class:`~monoagent._kernel.stores.ToolHistoryStore`); see the module docstring."""

    name = "sqlite"

    def __init__(
        self,
        history_dir: Path,
        settings: ToolHistoryConfig,
        redact: Callable[[str, str], str],
        clock: Callable[[], float] = time.time,
        retry: OpenRetry | None = None,
    ) -> None:
        self.history_dir = history_dir
        self.path = history_dir / SIDECAR
        self.settings = settings
        self.redact = redact
        self.clock = clock
        self.retry = retry or OpenRetry()
        self.confirm_timeout = settings.confirm_timeout_ms / 1000
        self.reconcile_timeout = settings.reconcile_timeout_ms / 1000
        self._writer: SidecarWriter | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- writing

    @property
    def writer(self) -> SidecarWriter:
        with self._lock:
            if self._writer is None:
                self._writer = writer_for(self.history_dir, self.settings, self.clock, self.retry)
            return self._writer

    @property
    def unavailable(self) -> str | None:
        """Why this process's writer could not open the sidecar, while its back-off lasts.

        None when it is open, has not tried yet, or is due for its next attempt.
        """
        with self._lock:
            writer = self._writer
        if writer is None or writer.unavailable is None or writer.retry_at is None:
            return None
        return writer.unavailable if writer.retry.clock() < writer.retry_at else None

    async def close(self) -> None:
        """Settle what this handle queued, then release the writer (the last handle stops its thread)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is None:
            return
        with contextlib.suppress(ToolHistoryError):  # an outage: the writer logged it once already
            await _outcome(writer.submit(lambda db: None))
        await asyncio.to_thread(release_writer, writer)

    def _arguments(self, arguments: dict[str, Any]) -> tuple[str | None, int, int, bool, bool]:
        from monoagent_plugins.observability.redaction import redact_structure

        raw = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str)
        limit = self.settings.max_argument_bytes
        if utf8_len(raw) > limit:
            return None, limit + 1, 0, True, True
        redacted = json.dumps(
            redact_structure(arguments, lambda text: self.redact(text, "tool_arguments")),
            ensure_ascii=False, separators=(",", ":"), default=str,
        )
        cut = utf8_prefix(redacted, limit)
        return cut.text, utf8_len(raw), cut.kept_bytes, cut.truncated, False

    async def write_invocation(self, invocation: ToolInvocation) -> None:
        """Queue the invocation on the writer (before the first ``await``), then wait until it is durable."""
        await _outcome(self._queue_invocation(invocation))

    async def write_result(self, invocation: ToolInvocation, result: ToolResult, finished_at: float) -> None:
        """Queue the result on the writer (before the first ``await``), then wait until it is durable."""
        await _outcome(self._queue_result(invocation, result, finished_at))

    def _queue_invocation(self, invocation: ToolInvocation) -> concurrent.futures.Future[str]:
        call = invocation.call
        args, args_bytes, args_kept, args_cut, args_omitted = self._arguments(dict(call.arguments))
        row = (
            invocation.invocation_id, invocation.result_id, invocation.conversation_id, invocation.logical_conversation_id,
            invocation.run_id, call.id, call.name, int(invocation.isolated), invocation.started_at,
            args, args_bytes, args_kept, int(args_cut), int(args_omitted), args_kept,
        )

        writer = self.writer

        def job(db: sqlite3.Connection) -> str:
            with transaction(db):
                exists = db.execute("SELECT 1 FROM calls WHERE invocation_id = ?", (row[0],)).fetchone()
                if exists is None:
                    db.execute(
                        "INSERT INTO calls (invocation_id, result_id, conversation_id, logical_id, run_id, call_id, tool, isolated,"
                        " start_seq, started_at, arguments, arguments_bytes, arguments_retained_bytes, arguments_truncated,"
                        " arguments_omitted, payload_bytes, writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (*row[:8], next_seq(db), *row[8:], writer.writer_id),
                    )
            return row[0]

        return writer.submit(job)

    def _queue_result(self, invocation: ToolInvocation, result: ToolResult, finished_at: float) -> concurrent.futures.Future[str]:
        status = result.status.value if isinstance(result.status, ToolStatus) else ToolStatus(result.status).value
        text, size, kept, cut, omitted = _bounded(result.content, self.settings.max_result_bytes, lambda t: self.redact(t, "tool_result"))
        call = invocation.call
        args, args_bytes, args_kept, args_cut, args_omitted = self._arguments(dict(call.arguments))

        writer = self.writer

        def job(db: sqlite3.Connection) -> str:
            with transaction(db):
                found = db.execute("SELECT status FROM calls WHERE invocation_id = ?", (invocation.invocation_id,)).fetchone()
                if found is None:
                    db.execute(
                        "INSERT INTO calls (invocation_id, result_id, conversation_id, logical_id, run_id, call_id, tool, isolated,"
                        " start_seq, started_at, arguments, arguments_bytes, arguments_retained_bytes, arguments_truncated,"
                        " arguments_omitted, writer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            invocation.invocation_id, invocation.result_id, invocation.conversation_id,
                            invocation.logical_conversation_id, invocation.run_id, call.id, call.name, int(invocation.isolated),
                            next_seq(db), invocation.started_at, args, args_bytes, args_kept, int(args_cut), int(args_omitted),
                            writer.writer_id,
                        ),
                    )
                elif found[0] is not None:
                    return invocation.result_id
                db.execute(
                    "UPDATE calls SET status = ?, end_seq = ?, finished_at = ?, result = ?, result_bytes = ?,"
                    " result_retained_bytes = ?, result_truncated = ?, result_omitted = ?,"
                    " payload_bytes = arguments_retained_bytes + ? WHERE invocation_id = ?",
                    (status, next_seq(db), finished_at, text, size, kept, int(cut), int(omitted), kept, invocation.invocation_id),
                )
                self._retain(db)
            return invocation.result_id

        return writer.submit(job)

    def _retain(self, db: sqlite3.Connection) -> int:
        """Apply retention (count, age, payload bytes) and prune tombstones; the calls removed."""
        cfg = self.settings
        now = self.clock()
        doomed: dict[str, str] = {}
        (count,) = db.execute("SELECT COUNT(*) FROM calls WHERE status IS NOT NULL").fetchone()
        if count > cfg.max_calls:
            for (inv,) in db.execute(
                "SELECT invocation_id FROM calls WHERE status IS NOT NULL ORDER BY end_seq LIMIT ?", (count - cfg.max_calls,)
            ):
                doomed[inv] = "count"
        for (inv,) in db.execute(
            "SELECT invocation_id FROM calls WHERE status IS NOT NULL AND finished_at < ?", (now - cfg.max_age_days * DAY,)
        ):
            doomed.setdefault(inv, "age")
        (total,) = db.execute("SELECT COALESCE(SUM(payload_bytes), 0) FROM calls WHERE status IS NOT NULL").fetchone()
        if total > cfg.max_payload_bytes:
            for inv in doomed:  # the payload bound measures what the count and age bounds leave
                (size,) = db.execute("SELECT payload_bytes FROM calls WHERE invocation_id = ?", (inv,)).fetchone()
                total -= size
            for inv, size in db.execute("SELECT invocation_id, payload_bytes FROM calls WHERE status IS NOT NULL ORDER BY end_seq"):
                if total <= cfg.max_payload_bytes:
                    break
                if inv not in doomed:
                    total -= size
                    doomed[inv] = "bytes"
        for inv, reason in doomed.items():
            db.execute(
                "INSERT OR REPLACE INTO tombstones SELECT invocation_id, result_id, conversation_id, logical_id, run_id, tool,"
                " status, ?, ? FROM calls WHERE invocation_id = ?",
                (now, reason, inv),
            )
            db.execute("DELETE FROM calls WHERE invocation_id = ?", (inv,))
        db.execute("DELETE FROM tombstones WHERE removed_at < ?", (now - cfg.tombstone_days * DAY,))
        (stones,) = db.execute("SELECT COUNT(*) FROM tombstones").fetchone()
        if stones > cfg.max_tombstones:
            db.execute(
                "DELETE FROM tombstones WHERE invocation_id IN (SELECT invocation_id FROM tombstones ORDER BY removed_at, rowid LIMIT ?)",
                (stones - cfg.max_tombstones,),
            )
        return len(doomed)

    async def flush(self) -> None:
        """Return once every write queued so far is done (or failed); bounded by the caller (``asyncio.wait_for``).

        It starts this process's writer if none runs (which opens the sidecar and recovers the
        calls of dead writers). A writer in an outage settles the queue by rejecting it, so then
        flush returns as well: each write's own awaiter gets its error.
        """
        with contextlib.suppress(ToolHistoryError):
            await _outcome(self.writer.submit(lambda db: None))

    # ---------------------------------------------------------------- maintenance (CLI)

    def _bytes_on_disk(self) -> int:
        total = 0
        for path in (self.path, self.path.with_name(self.path.name + "-journal")):
            try:
                total += os.lstat(path).st_size
            except FileNotFoundError:
                continue
        return total

    async def _maintain(self, job: Callable[[sqlite3.Connection], _T]) -> _T | None:
        """Run a maintenance job: on this process's writer if this handle wrote, else on a connection of its own.

        Through the writer, the job is queued before the first ``await``, behind every write this
        handle submitted before it (so a clear covers them, settled or not). Without a writer of
        its own (the CLI) the job needs no ownership: it runs, in the event loop's default
        executor, in its own ``IMMEDIATE`` transaction, which SQLite serialises with the writes
        of running agents, waiting for their locks as long as a write does
        (``retry.lock_wait_ms``). None when there is no sidecar (or a fresh zero-byte one) to change.
        """
        with self._lock:
            writer = self._writer
        if writer is not None:
            return await _outcome(writer.submit(job))
        return await asyncio.to_thread(self._maintain_alone, job)

    def _maintain_alone(self, job: Callable[[sqlite3.Connection], _T]) -> _T | None:
        if not self._usable():
            return None
        probe = self._reader()  # corrupt or unsafe: fail closed before touching anything
        if probe is not None:
            probe.close()
        try:
            db = connect(self.path, self.settings, self.retry.lock_wait_ms)
        except sqlite3.Error as exc:
            raise SidecarUnavailable(f"{self.path} could not be opened for maintenance: {exc}") from None
        try:
            return job(db)
        except sqlite3.Error as exc:
            raise SidecarUnavailable(f"{self.path} could not be changed: {exc}") from None
        finally:
            db.close()

    def _usable(self) -> bool:
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return False
        return not (stat.S_ISREG(info.st_mode) and info.st_size == 0)

    async def stats(self) -> ToolHistoryStats:
        """Calls, records and bytes in the sidecar (zeros when there is none), read in the default executor."""
        return await asyncio.to_thread(self._stats)

    def _stats(self) -> ToolHistoryStats:
        found = self.query("SELECT COUNT(*) AS calls, COUNT(status) AS done, COALESCE(SUM(payload_bytes), 0) AS payload FROM calls")
        if not found:
            return ToolHistoryStats(0, 0, self._bytes_on_disk(), 0, 0)
        calls, done, payload = found[0]["calls"], found[0]["done"], found[0]["payload"]
        stones = self.query("SELECT COUNT(*) AS n FROM tombstones")[0]["n"]
        return ToolHistoryStats(calls, calls + done + stones, self._bytes_on_disk(), payload, stones)

    async def _clear(self, where: str, params: tuple[Any, ...]) -> ToolHistoryClearReport:
        before = self._bytes_on_disk()

        def job(db: sqlite3.Connection) -> tuple[int, int]:
            with transaction(db):
                calls, done = db.execute(f"SELECT COUNT(*), COUNT(status) FROM calls WHERE {where}", params).fetchone()
                (stones,) = db.execute(f"SELECT COUNT(*) FROM tombstones WHERE {where}", params).fetchone()
                db.execute(f"DELETE FROM calls WHERE {where}", params)
                db.execute(f"DELETE FROM tombstones WHERE {where}", params)
            db.execute("VACUUM")
            return calls, calls + done + stones

        values = await self._maintain(job)
        if values is None:
            return ToolHistoryClearReport(0, 0, 0)
        return ToolHistoryClearReport(values[0], values[1], max(before - self._bytes_on_disk(), 0))

    async def clear_logical(self, logical_conversation_id: str) -> ToolHistoryClearReport:
        """Remove every record of a logical conversation: ``<id>`` and each ``<id>:<YYYY-MM-DD>`` bucket."""
        bucket = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
        where = (
            "(logical_id = ? OR conversation_id = ? OR (length(conversation_id) = ? AND substr(conversation_id, 1, ?) = ?"
            f" AND substr(conversation_id, ?) GLOB '{bucket}'))"
        )
        n = len(logical_conversation_id)
        prefix = logical_conversation_id + ":"
        return await self._clear(where, (logical_conversation_id, logical_conversation_id, n + 11, n + 1, prefix, n + 2))

    async def clear_conversation(self, conversation_id: str) -> ToolHistoryClearReport:
        """Remove the records of exactly one conversation id (a reset with daily rollover off)."""
        return await self._clear("conversation_id = ?", (conversation_id,))

    async def clear_all(self) -> ToolHistoryClearReport:
        """Remove every record and tombstone of the sidecar."""
        return await self._clear("1", ())

    # ---------------------------------------------------------------- reading

    def _reader(self) -> sqlite3.Connection | None:
        """A read-only connection, None when the sidecar is absent (or fresh and empty)."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            raise SidecarUnavailable(f"{self.path} is not a regular file (symlinks are refused)")
        if info.st_size == 0:
            return None
        try:
            uri = "file:" + urllib.parse.quote(os.fspath(self.path)) + "?mode=ro"  # '#', '?' and '%' are legal in paths
            db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout={min(READ_BUSY_TIMEOUT_MS, self.retry.lock_wait_ms)}")
            row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        except sqlite3.Error as exc:
            raise SidecarUnavailable(f"{self.path} is not a readable tool-history database: {exc}") from None
        if row is None or row[0] not in READABLE_SCHEMAS:
            db.close()
            raise SidecarUnavailable(f"{self.path} has an unknown schema ({row[0] if row else 'none'})")
        return db

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """Rows of a read query ([] when there is no sidecar); :class:`SidecarUnavailable` otherwise."""
        db = self._reader()
        if db is None:
            return []
        try:
            db.row_factory = sqlite3.Row
            return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise SidecarUnavailable(f"{self.path} could not be read: {exc}") from None
        finally:
            db.close()

    async def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """:meth:`query` in the event loop's default executor (the SessionHistory tool's reads)."""
        return await asyncio.to_thread(self.query, sql, params)

    async def records(
        self, *, conversation_id: str | None = None, logical_conversation_id: str | None = None
    ) -> list[ToolRecord]:
        """Retained calls (all, or of one physical or logical conversation) in ``start_seq`` order."""
        clauses, params = ["1"], []
        if conversation_id is not None:
            clauses.append("conversation_id = ?")
            params.append(conversation_id)
        if logical_conversation_id is not None:
            clauses.append("logical_id = ?")
            params.append(logical_conversation_id)
        rows = await self.rows(f"SELECT * FROM calls WHERE {' AND '.join(clauses)} ORDER BY start_seq", tuple(params))
        return [
            ToolRecord(
                invocation_id=r["invocation_id"], result_id=r["result_id"], conversation_id=r["conversation_id"],
                logical_conversation_id=r["logical_id"], run_id=r["run_id"], call_id=r["call_id"], tool=r["tool"],
                start_seq=r["start_seq"], end_seq=r["end_seq"], status=r["status"], arguments=r["arguments"],
                arguments_bytes=r["arguments_bytes"], arguments_retained_bytes=r["arguments_retained_bytes"],
                arguments_truncated=bool(r["arguments_truncated"]), arguments_omitted=bool(r["arguments_omitted"]),
                result=r["result"], result_bytes=r["result_bytes"], result_retained_bytes=r["result_retained_bytes"],
                result_truncated=bool(r["result_truncated"]), result_omitted=bool(r["result_omitted"]), isolated=bool(r["isolated"]),
                started_at=r["started_at"], finished_at=r["finished_at"],
            )
            for r in rows
        ]

    def recent_completed(self, conversation_id: str, exclude_run: str, limit: int) -> list[sqlite3.Row]:
        rows = self.query(
            "SELECT * FROM calls WHERE conversation_id = ? AND status IS NOT NULL AND run_id != ? AND isolated = 0"
            " ORDER BY end_seq DESC LIMIT ?",
            (conversation_id, exclude_run, limit),
        )
        return rows
