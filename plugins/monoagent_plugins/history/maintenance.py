"""The ``files`` history store's maintenance: aggregate retention, resets, clearing everything.

:class:`HistoryMaintenance` is the part of :class:`~monoagent_plugins.history.files.FilesHistoryStore`
that removes records: the retention pass after a publication (256 MiB, 10,000 conversations,
365 days by default: ``history.maxBytes``, ``maxConversations``, ``maxInactiveDays``), under the
root-wide retention lock, each victim under its shard lock and only if unchanged since it was
judged; the reset of one exact conversation; the atomic reset of a logical session across its
daily buckets through a reset journal, completed by whoever finds it; and ``clear_all``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from monoagent import HistoryResetReport, HistoryStats, logger, logical_conversation_id, read_open_file
from monoagent import strict_json_loads as strict_loads
from monoagent_plugins.history.directory import HistoryDirectory
from monoagent_plugins.history.records import (
    FRAMING_BYTES,
    MAX_DEPTH,
    O_CLOEXEC,
    SHARDS,
    CachedRecord,
    HistoryRecord,
    HistoryRecordError,
    HistoryWriteError,
    NewerRecordError,
    ResetJournal,
    Unreadable,
    UnreadableRecord,
    compact_json,
    decode_record,
    digest,
    one_line,
    record_converter,
)


class HistoryMaintenance(HistoryDirectory):
    """Retention, resets and clear-all (see the module docstring)."""

    max_bytes: int
    max_conversations: int
    max_inactive_days: float
    clock: Callable[[], float]
    retention_every: int
    _estimate: list[float] | None
    _commits: int

    def _after_publication(self, path: str, grown: int, new_record: bool, now: float) -> None:
        self._commits += 1
        estimate = self._estimate
        if estimate is not None:
            estimate[0] += 1 if new_record else 0
            estimate[1] += grown
        due = (
            estimate is None
            or self._commits % self.retention_every == 0
            or estimate[0] > self.max_conversations
            or estimate[1] > self.max_bytes
            or estimate[2] < now - self.max_inactive_days * 86400
        )
        if due:
            try:
                self.enforce_retention(keep=path)
            except Exception as exc:  # the turn is committed: a failed retention pass must not report it failed
                logger.bind(plugin="files").warning(
                    "history retention pass failed ({}: {}); the turn is committed", type(exc).__name__, exc
                )

    def _scan(self) -> list[tuple[int, int, str, int]]:
        """(mtime_ns, size, name, ino) of every own record."""
        return [(info.st_mtime_ns, info.st_size, name, info.st_ino) for name, info in self._root_files()["record"]]

    def enforce_retention(self, keep: str | None = None) -> list[str]:
        """Prune the oldest inactive records beyond the aggregate bounds; returns the removed file names.

        Runs under the root-wide retention lock. Each victim is removed under its conversation's
        shard lock and only if it is still the file that was judged (same inode and mtime), so
        a commit that lands meanwhile is never pruned. ``keep`` (the record just published) is
        never a victim.
        """
        self._ensure_dir()
        removed: list[str] = []
        with self._locked("retention.lock"):
            records = sorted(self._scan())
            horizon = int((self.clock() - self.max_inactive_days * 86400) * 1e9)
            keep_name = os.path.basename(keep) if keep else None
            count, total = len(records), sum(r[1] for r in records)
            survivors = []
            for mtime, size, name, ino in records:
                over = count > self.max_conversations or total > self.max_bytes or mtime < horizon
                if over and name != keep_name and self._prune(name, ino, mtime):
                    removed.append(name)
                    count -= 1
                    total -= size
                else:
                    survivors.append(mtime)
            if removed:
                self.fs.fsync_dir(self.directory)
                logger.bind(plugin="files").info("history retention removed {} conversation record(s)", len(removed))
            oldest = min(survivors) / 1e9 if survivors else float("inf")
            self._estimate = [count, total, oldest]
        return removed

    def _prune(self, name: str, ino: int, mtime: int) -> bool:
        path = os.path.join(self.directory, name)
        with self._shard_lock(name[:16]):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                return False
            if (info.st_ino, info.st_mtime_ns) != (ino, mtime):
                return False
            self.fs.unlink(path)
            return True

    def _reset(self, conversation_id: str) -> int:
        self._ensure_dir()
        path, logical16, journal = self._paths(conversation_id)
        with self._shard_lock(logical16):
            if self._pending_reset(journal):
                self._complete_reset(logical16, journal)
            try:
                current = self._read(conversation_id)
            except NewerRecordError as exc:  # a reset discards it, as it discards an unreadable one
                current = Unreadable(str(exc))
            if current is None:
                return 0
            count = len(current.messages) if isinstance(current, CachedRecord) else 0
            with contextlib.suppress(FileNotFoundError):
                self.fs.unlink(path)
            self.fs.fsync_dir(self.directory)
            self._cache.pop(conversation_id, None)
            return count

    async def reset(self, conversation_id: str) -> int:
        """Remove one exact conversation's record; returns how many messages it held."""
        import asyncio

        return await asyncio.to_thread(self._reset, conversation_id)

    def _complete_reset(self, logical16: str, journal: str) -> tuple[list[str], int, int, int]:
        """Remove every record of the journaled logical session, then the journal (shard lock held).

        Returns the removed conversation ids, their messages, the files and bytes removed. A record
        whose bytes cannot be read is removed too (its file name puts it in this session); only a
        readable record of another logical session whose digest shares the 16-digit prefix is kept.
        """
        logical = self._journal_logical(journal, logical16)
        removed: list[str] = []
        messages = files = freed = 0
        for name, _ in self._root_files(logical16 + ".")["record"]:
            examined = self._examine(name)
            if examined is None:
                continue
            size, record = examined
            if isinstance(record, HistoryRecord) and logical not in (None, logical_conversation_id(record.conversationId)):
                continue
            try:
                self.fs.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                continue
            if isinstance(record, HistoryRecord):
                removed.append(record.conversationId)
                messages += len(record.messages)
            files += 1
            freed += size
        self.fs.fsync_dir(self.directory)
        with contextlib.suppress(FileNotFoundError):
            self.fs.unlink(journal)
        self.fs.fsync_dir(self.directory)
        for conversation_id in [c for c, (_, l16, _) in self._names.items() if l16 == logical16]:
            self._cache.pop(conversation_id, None)
        return removed, messages, files, freed

    def _journal_logical(self, journal: str, logical16: str) -> str | None:
        """The logical session a reset journal names; None when it cannot be read (torn by a power
        cut, damaged, over its cap), and then every record with the journal's prefix is removed.
        """
        fd = self._open_owned(journal, os.O_RDONLY, "history reset journal")
        if fd is None:
            return None
        try:
            data = read_open_file(fd, FRAMING_BYTES, what="history reset journal", path=os.path.basename(journal))
            text = data.decode("utf-8", "surrogatepass")
            logical = record_converter().structure(strict_loads(text, max_depth=MAX_DEPTH), ResetJournal).logicalConversationId
        except Exception as exc:  # any bytes: over the cap, not UTF-8, not JSON, not the journal shape (cattrs)
            logger.bind(plugin="files").info(
                "history reset journal {} is unreadable ({}); completing it by its prefix", os.path.basename(journal),
                one_line(str(exc), 160),
            )
            return None
        finally:
            os.close(fd)
        return logical if digest(logical)[:16] == logical16 else None

    def _examine(self, name: str) -> tuple[int, HistoryRecord | UnreadableRecord | NewerRecordError] | None:
        """(size, the record or why it cannot be read) of the own record file ``name``; None if it
        is gone, or was swapped for something that is not a regular file of this user since the scan.
        """
        path = os.path.join(self.directory, name)
        try:
            fd = self._open_owned(path, os.O_RDONLY, "history record")
        except HistoryRecordError as exc:
            logger.bind(plugin="files").warning("{}; left untouched", exc)
            return None
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            data = self._read_owned(fd, path, self.record_cap())
        finally:
            os.close(fd)
        if isinstance(data, Unreadable):
            return size, UnreadableRecord(data.reason)
        try:
            return size, decode_record(data, name)[0]
        except (UnreadableRecord, NewerRecordError) as exc:
            return size, exc

    def _reset_logical(self, logical: str) -> HistoryResetReport:
        if not isinstance(logical, str):
            raise TypeError(f"conversation ids are strings, not {type(logical).__name__}")
        self._ensure_dir()
        _, logical16, journal = self._paths(logical)
        with self._shard_lock(logical16):
            self._pending_reset(journal)  # refuses a symlink or odd file in the journal's place
            try:
                fd = self.fs.open(journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | O_CLOEXEC, 0o600)
            except OSError as exc:
                raise HistoryWriteError(
                    f"could not write the reset journal {os.path.basename(journal)} in {self.directory}: {exc}; nothing was reset"
                ) from exc
            try:
                view = memoryview(compact_json({"logicalConversationId": logical}))
                while view:
                    view = view[self.fs.write(fd, view) :]
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)
            self.fs.fsync_dir(self.directory)
            removed, messages, files, freed = self._complete_reset(logical16, journal)
        return HistoryResetReport(logical, tuple(sorted(removed)), messages, files, freed)

    async def reset_logical(self, logical_conversation_id: str) -> HistoryResetReport:
        import asyncio

        return await asyncio.to_thread(self._reset_logical, logical_conversation_id)

    def _has_logical_records(self, logical: str, besides: str) -> bool:
        self._ensure_dir()
        logical16 = self._paths(logical)[1]
        own = os.path.basename(self._paths(besides)[0])
        return any(name != own for name, _ in self._root_files(logical16 + ".")["record"])

    async def has_logical_records(self, logical_conversation_id: str, *, besides: str) -> bool:
        """Whether a record of the logical session other than ``besides`` exists, from file names alone."""
        import asyncio

        return await asyncio.to_thread(self._has_logical_records, logical_conversation_id, besides)

    def _clear_all(self) -> HistoryStats:
        self._ensure_dir()
        records = freed = 0
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._locked("retention.lock"))
            for shard in range(SHARDS):
                stack.enter_context(self._locked(f"shard-{shard:02d}.lock"))
            own = self._root_files()
            for kind in ("record", "journal"):
                for name, info in own[kind]:
                    try:
                        self.fs.unlink(os.path.join(self.directory, name))
                    except FileNotFoundError:
                        continue
                    if kind == "record":
                        records += 1
                        freed += info.st_size
            self.fs.fsync_dir(self.directory)
            stages, stage_bytes = self.reclaim_stages()
            self._cache.clear()
            self._estimate = [0, 0, float("inf")]
        return HistoryStats(records, freed, None, stages, stage_bytes)

    async def clear_all(self) -> HistoryStats:
        import asyncio

        return await asyncio.to_thread(self._clear_all)
