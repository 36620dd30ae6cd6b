"""The ``summary`` compaction policy's stored summaries: one owner-only JSON file per conversation.

Layout, beside the conversation records of the history directory (``history.dir``)::

    history/summaries/                 0700, owned by the running user, never a symlink
      <L16>.<P64>.json                 one summary record per conversation, 0600

``P64`` is the SHA-256 of the exact conversation id and ``L16`` the first 16 hex digits of the
SHA-256 of its logical session, as for the ``files`` store's records, so a logical-session reset
finds every daily bucket's summary by name and no id reaches a path.

A record (:class:`SummaryRecord`) holds the summary text, what it replaced (the digest of the last
message it covers and of the message that followed it then, see :func:`message_digest`), the
model that wrote it and when. It is written to a temporary file in the same directory, fsynced,
renamed over the old one and the directory fsynced, so a reader sees the old summary or the new
one. A record is read only if it is a regular file of this user under :data:`MAX_RECORD_BYTES`,
UTF-8, strict JSON (:mod:`monoagent._boundary.strict_json`) of exactly the record's shape and types
(cattrs, no coercion) naming the conversation its file name is derived from; anything else is
*damaged* (:class:`DamagedSummary`): the caller warns and summarises again, and the next save
replaces it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import attrs

from monoagent import (
    Message,
    MonoagentError,
    SymlinkedPath,
    fsync_directory,
    logical_conversation_id,
    private_directory_under,
    read_open_file,
    replace_file_durably,
)
from monoagent import strict_json_loads as strict_loads

RECORD_VERSION = 1
MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 8
DIRECTORY = "summaries"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class DamagedSummary(MonoagentError):
    """A stored summary cannot be used (unreadable, malformed, unsafe); it is summarised again."""


@attrs.frozen
class SummaryRecord:
    """The on-disk shape of one conversation's summary (camelCase, as the history records)."""

    version: int
    conversationId: str
    summary: str
    covers: str
    follows: str
    model: str
    createdAt: float


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def message_digest(message: Message) -> str:
    """A digest of what a message says and who said it (role, name, content, tool calls and call id)."""
    calls = [[c.id, c.name, c.arguments] for c in message.tool_calls]
    return _sha(json.dumps([message.role, message.name, message.tool_call_id, message.content, calls],
                           ensure_ascii=False, default=str, sort_keys=True))


def anchor(history: Sequence[Message], record: SummaryRecord) -> int | None:
    """Where the messages after the summary start in ``history``, or None when it no longer fits.

    The summary replaced the history up to and including a message with digest ``covers``, then
    followed by one with digest ``follows`` (``""`` if none followed). The earliest such place
    counts: should the same pair recur, the view repeats a summarised message rather than drop
    an unsummarised one.
    """
    for index, message in enumerate(history):  # digests only as far as the anchor
        if message_digest(message) != record.covers:
            continue
        following = message_digest(history[index + 1]) if index + 1 < len(history) else ""
        if not record.follows or following == record.follows:
            return index + 1
    return None


@functools.lru_cache(maxsize=1024)  # looked up on every turn; two digests and a regex cost more than the read
def file_name(conversation_id: str) -> str:
    """``<L16>.<P64>.json``: digests of the logical session and of the exact conversation id."""
    return f"{_sha(logical_conversation_id(conversation_id))[:16]}.{_sha(conversation_id)}.json"


class SummaryFiles:
    """The summary records under ``<history dir>/summaries`` (see the module docstring)."""

    def __init__(self, history_dir: str | os.PathLike[str]) -> None:
        self.root = Path(history_dir)
        self.directory = self.root / DIRECTORY
        self._directory = str(self.directory)

    def path(self, conversation_id: str) -> Path:
        return self.directory / file_name(conversation_id)

    def load(self, conversation_id: str) -> SummaryRecord | None:
        """The stored record, None when there is none; raises :class:`DamagedSummary` for a damaged one."""
        name = file_name(conversation_id)
        try:
            fd = os.open(os.path.join(self._directory, name), os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a symlink (ELOOP), no permission
            raise DamagedSummary(f"summary {name} cannot be opened: {exc.strerror or exc}") from None
        try:
            if os.fstat(fd).st_uid != os.getuid():
                raise DamagedSummary(f"summary {name} belongs to another user")
            data = read_open_file(fd, MAX_RECORD_BYTES, what="summary", path=name)
        except OSError as exc:
            raise DamagedSummary(str(exc)) from None
        finally:
            os.close(fd)
        return self._decode(data, conversation_id, name)

    @staticmethod
    def _decode(data: bytes, conversation_id: str, name: str) -> SummaryRecord:
        from monoagent_plugins.history.records import record_converter

        try:
            raw = strict_loads(data.decode("utf-8"), max_depth=MAX_DEPTH)
            record = record_converter().structure(raw, SummaryRecord)
        except Exception as exc:  # not UTF-8, not strict JSON, not the record's shape (cattrs raises a family)
            raise DamagedSummary(f"summary {name} is not a summary record ({type(exc).__name__})") from None
        if record.version != RECORD_VERSION or record.conversationId != conversation_id or not record.summary.strip():
            raise DamagedSummary(f"summary {name} is of another version or conversation, or empty")
        return record

    def _ensure_directory(self) -> None:
        try:
            problem = private_directory_under(self.root, DIRECTORY, create=True, what="summary directory")
        except SymlinkedPath as exc:
            raise DamagedSummary(f"{exc}; summaries are not stored there") from None
        if problem is not None:
            raise DamagedSummary(f"{problem}; summaries are not stored there")

    def save(self, record: SummaryRecord) -> None:
        """Atomically replace the conversation's record (stage, fsync, rename, fsync the directory)."""
        self._ensure_directory()
        target = self.path(record.conversationId)
        data = json.dumps(attrs.asdict(record), ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        replace_file_durably(target, data, stage_prefix=f".{target.name}.", root=self.root)

    def _fsync_directory(self) -> None:
        fsync_directory(self.directory)

    def remove(self, conversation_id: str) -> bool:
        """Remove one exact conversation's record; whether there was one."""
        try:
            os.unlink(self.path(conversation_id))
        except FileNotFoundError:
            return False
        self._fsync_directory()
        return True

    def remove_logical(self, logical: str | None) -> int:
        """Remove every record of a logical session (its daily buckets too), or all with None; how many."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return 0
        prefix = "" if logical is None else _sha(logical_conversation_id(logical))[:16] + "."
        removed = 0
        for name in names:
            ours = name.endswith(".json") and name.startswith(prefix)
            if ours or (logical is None and name.endswith(".tmp")):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / name)
                    removed += 1
        if removed:
            self._fsync_directory()
        return removed
