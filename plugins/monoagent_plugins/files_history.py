"""The ``files`` history store: one owner-only JSON record per conversation.

* The directory is created 0700 and each record 0600, created that way (``os.open`` modes, not
  a later chmod). A symlinked directory or record is refused.
* File names are the SHA-256 of the conversation id; the id itself is kept only inside the
  record, never used as a path component, so no id can escape the directory.
* A commit reads the current record, appends the turn, keeps the newest ``history.maxMessages``
  (64) messages, writes a fresh temporary file, fsyncs it, renames it over the record and
  fsyncs the directory. Readers see the old record or the new one, never a mix.
* Same-conversation commits are serialised across processes with ``flock`` on a per-record lock
  file (the lock dies with its owner; there is no lease to expire).
* A record truncated into invalid JSON starts the conversation cold (logged) and is replaced
  by the next commit; a record of an unknown shape fails closed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from monoagent.log import logger

from monoagent.errors import MonoagentError
from monoagent.interfaces import CommitReceipt, ConversationInfo
from monoagent.model import Message
from monoagent.plugins import bundled_impl

RECORD_VERSION = 1
SUFFIX = ".json"


class HistoryRecordError(MonoagentError):
    """A history record or directory is unsafe or of an unsupported shape."""


@attrs.define
class HistoryRecord:
    version: int
    conversationId: str
    updatedAt: float
    messages: list[Message]


async def _in_thread(function: Any, *args: Any) -> Any:
    """Run blocking file work in a worker thread (asyncio is imported late: CLI start-up)."""
    import asyncio

    return await asyncio.to_thread(function, *args)


def _converter():
    from monoagent.serial import converter

    return converter


def record_name(conversation_id: str) -> str:
    return hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()


class FilesHistoryStore:
    """See the module docstring. Blocking work runs in worker threads."""

    name = "files"

    def __init__(self, directory: Path, max_messages: int = 64) -> None:
        self.directory = directory
        self.max_messages = max_messages
        self._cache: dict[str, tuple[tuple[int, int, int], tuple[Message, ...]]] = {}
        self._ready = False

    # ------------------------------------------------------------------ paths and safety

    def _ensure_dir(self) -> None:
        if self._ready:
            return
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(self.directory, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(self.directory)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise HistoryRecordError(f"history directory {self.directory} is a symlink or not a directory; refusing it")
        if info.st_uid != os.getuid():
            raise HistoryRecordError(f"history directory {self.directory} belongs to another user; refusing it")
        self._ready = True

    def _path(self, conversation_id: str) -> Path:
        return self.directory / (record_name(conversation_id) + SUFFIX)

    @staticmethod
    def _stat_key(info: os.stat_result) -> tuple[int, int, int]:
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    # ------------------------------------------------------------------ reading

    def _read(self, conversation_id: str) -> tuple[Message, ...]:
        path = self._path(conversation_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise HistoryRecordError(f"history record for this conversation cannot be opened safely: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.getuid():
                raise HistoryRecordError(f"history record {path.name} belongs to another user; refusing it")
            key = self._stat_key(info)
            cached = self._cache.get(conversation_id)
            if cached is not None and cached[0] == key:
                return cached[1]
            data = handle.read()
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            logger.warning("history record {} is not valid JSON; this conversation starts cold", path.name)
            return ()
        messages = self._parse(raw, conversation_id, path)
        self._cache[conversation_id] = (key, messages)
        return messages

    @staticmethod
    def _parse(raw: Any, conversation_id: str, path: Path) -> tuple[Message, ...]:
        if not isinstance(raw, dict) or raw.get("version") != RECORD_VERSION:
            raise HistoryRecordError(f"history record {path.name} has an unsupported shape (expected version {RECORD_VERSION})")
        try:
            record = _converter().structure(raw, HistoryRecord)
        except Exception as exc:
            raise HistoryRecordError(f"history record {path.name} has an unsupported shape: {exc}") from None
        if record.conversationId != conversation_id:
            raise HistoryRecordError(f"history record {path.name} belongs to another conversation id; refusing it")
        return tuple(record.messages)

    async def load(self, conversation_id: str) -> Sequence[Message]:
        self._ensure_dir()
        cached = self._cache.get(conversation_id)
        if cached is not None:
            try:
                info = os.stat(self._path(conversation_id), follow_symlinks=False)
            except FileNotFoundError:
                self._cache.pop(conversation_id, None)
                return ()
            if self._stat_key(info) == cached[0] and stat.S_ISREG(info.st_mode):
                return cached[1]
        return await _in_thread(self._read, conversation_id)

    # ------------------------------------------------------------------ writing

    def _lock(self, conversation_id: str) -> int:
        lock_path = self.directory / (record_name(conversation_id) + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _commit(self, conversation_id: str, new: Sequence[Message]) -> CommitReceipt:
        self._ensure_dir()
        lock = self._lock(conversation_id)
        try:
            messages = (tuple(self._read(conversation_id)) + tuple(new))[-self.max_messages :]
            record = HistoryRecord(RECORD_VERSION, conversation_id, time.time(), list(messages))
            data = json.dumps(_converter().unstructure(record), ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
            path = self._path(conversation_id)
            tmp = self.directory / f".{path.stem}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                info = os.fstat(fd)
            finally:
                os.close(fd)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
            dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._cache[conversation_id] = (self._stat_key(info), messages)
            return CommitReceipt(conversation_id, len(messages), len(data))
        finally:
            os.close(lock)

    async def commit(self, conversation_id: str, messages: Sequence[Message]) -> CommitReceipt:
        return await _in_thread(self._commit, conversation_id, messages)

    def _reset(self, conversation_id: str) -> int:
        self._ensure_dir()
        lock = self._lock(conversation_id)
        try:
            path = self._path(conversation_id)
            count = len(self._read(conversation_id)) if path.exists() else 0
            path.unlink(missing_ok=True)
            self._cache.pop(conversation_id, None)
            return count
        finally:
            os.close(lock)

    async def reset(self, conversation_id: str) -> int:
        return await _in_thread(self._reset, conversation_id)

    def _list(self) -> list[ConversationInfo]:
        self._ensure_dir()
        found: list[ConversationInfo] = []
        for path in sorted(self.directory.glob("*" + SUFFIX)):
            try:
                raw = json.loads(path.read_bytes())
                record = _converter().structure(raw, HistoryRecord)
            except Exception:  # a broken record is listed by the store's own checks, not here
                logger.warning("history record {} is unreadable; not listed", path.name)
                continue
            found.append(ConversationInfo(record.conversationId, len(record.messages), record.updatedAt, path.stat().st_size))
        return found

    async def conversations(self) -> Sequence[ConversationInfo]:
        return await _in_thread(self._list)

    async def close(self) -> None:
        self._cache.clear()


@bundled_impl
def register_history_stores(register: Any) -> None:
    register(
        "files",
        lambda agent: FilesHistoryStore(agent.config.history_dir, agent.config.history.max_messages),
        description="owner-only JSON records, atomic replacement with fsync",
    )
