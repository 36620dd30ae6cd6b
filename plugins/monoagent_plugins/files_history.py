"""The ``files`` history store: one owner-only JSON record per exact conversation id.

Layout of the history directory (``history.dir``, normally ``.mono-agent/history``)::

    history/                          0700, owned by the running user, never a symlink
      <L16>.<P64>.json                one record per conversation, 0600
      .reset.<L16>                    a logical-session reset in progress (journal), 0600
      .stages/<P64>.<rand>.stage      unpublished stages, each flock-ed by its live writer
      .locks/shard-00.lock .. 15      the fixed table of conversation locks (flock)
      .locks/retention.lock           root-wide retention (flock)

``P64`` is the SHA-256 of the exact conversation id and ``L16`` the first 16 hex digits of the
SHA-256 of its logical session (:func:`monoagent.kernel.interfaces.logical_conversation_id`), so
discovering a logical session's daily buckets needs no record to be read. Ids live only inside
the records; no id reaches a path.

Publication: the new record is written to a stage file, fsynced, renamed over the record and the
directory is fsynced; readers see the old record or the new one, never a mix, and a power cut
leaves one of the two. Stages count against ``history.maxStageBytes``; a stage whose writer died
is recognised by its free flock (no PID, no age) and reclaimed. Same-conversation commits, resets
and pruning hold the conversation's shard lock; root-wide retention holds ``retention.lock`` and
runs only after a successful publication. flock locks belong to the open file description, so
they die with their owner and are never lost by closing an unrelated descriptor.

Anything else may sit in the directory (a ``package.json``, an editor's backup, a symlink). The
store reads, counts (retention, ``stats``, ``conversations``) and deletes (retention, resets,
``clear_all``, stage reclamation) only its own files: a name of exactly the shape above (lower-case
hex of the right lengths), a regular file (``lstat``, so never a symlink, FIFO or directory)
owned by the running user, in its own directory. Other files named like the store's (``*.json``,
``.reset.*``, anything in ``.stages``) are left untouched and logged once per store object.

Reading a record is bounded before a byte is read: a record over :meth:`FilesHistoryStore.record_cap`
(the window at the per-message cap, never below the documented 64 x 64 KiB, plus the envelope) is
not read. A record that is over the cap, not UTF-8, nested deeper than :data:`MAX_DEPTH`, not
strict JSON (:mod:`monoagent.boundary.strict_json`: no NaN, no duplicated keys, no out-of-range numbers),
of the wrong shape or types (cattrs, strictly: no coercion between JSON types) or naming another
conversation is *unreadable*: the
conversation starts cold with a ``history_record_unreadable`` warning and the next commit replaces
it. A record of a newer version is refused instead (:class:`NewerRecordError`), so that this
version never overwrites what a newer one wrote; a reset removes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
from monoagent.kernel.config import setting
from monoagent.kernel.errors import HistoryStoreError
from monoagent.kernel.interfaces import (
    CAPABILITY_LOAD_WARNINGS,
    CommitReceipt,
    ConversationInfo,
    HistoryResetReport,
    HistoryStats,
    HistoryWarningCallback,
    logical_conversation_id,
)
from monoagent.kernel.log import logger
from monoagent.kernel.model import Message
from monoagent.kernel.host import bundled_impl
from monoagent.boundary.files import FileTooLarge, read_open_file
from monoagent.boundary.strict_json import StrictJSONError, nesting_over
from monoagent.boundary.strict_json import loads as strict_loads
from monoagent.text import utf8_prefix

RECORD_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
SHARDS = 16
SUFFIX = ".json"
STAGE_SUFFIX = ".stage"
RESET_PREFIX = ".reset."
UNREADABLE = "history_record_unreadable"
MiB = 1024 * 1024
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

RECORD_NAME = re.compile(r"[0-9a-f]{16}\.[0-9a-f]{64}\.json")
JOURNAL_NAME = re.compile(r"\.reset\.[0-9a-f]{16}")
STAGE_NAME = re.compile(r"[0-9a-f]{64}\.[0-9a-f]{12}\.stage")
MAX_DEPTH = 128
"""How deep a record's arrays and objects may nest (the envelope and message list take two levels)."""
DOCUMENTED_MAX_MESSAGES = 64
DOCUMENTED_MESSAGE_BYTES = 64 * 1024
FRAMING_BYTES = MiB
"""The envelope allowance of :meth:`FilesHistoryStore.record_cap` when the conversation id is not known."""
LATEST_UPDATE = 253402300800.0
"""``updatedAt`` must be before 10000-01-01 (UTC) so that every listing can print it."""


class HistoryRecordError(HistoryStoreError):
    """A history record or directory is unsafe (symlink, foreign owner, loose mode) or of a newer version."""


class HistoryWriteError(HistoryStoreError):
    """A turn could not be published; the previously committed record is intact."""


class HistoryStageQuotaError(HistoryWriteError):
    """Live unpublished stages already fill ``history.maxStageBytes``."""


class NewerRecordError(HistoryRecordError):
    """A record was written by a newer version of the store; this one neither reads nor replaces it."""


class UnreadableRecord(ValueError):
    """Why some bytes are not a record this store can read (the conversation starts cold)."""


@attrs.define
class HistoryRecord:
    """The on-disk shape (cattrs structures it; the message list is spliced for speed, see ``_record_bytes``)."""

    version: int
    conversationId: str
    updatedAt: float
    messages: list[Message]
    logicalConversationId: str | None = None


@attrs.define
class ResetJournal:
    """The on-disk shape of a logical-session reset in progress."""

    logicalConversationId: str


class FsOps:
    """The file-system operations of staging and publication.

    The store performs every write, fsync, rename and unlink of a commit through one of these,
    so tests can record the operation sequence (power-loss enumeration) or fail the k-th one.
    """

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def set_mtime(self, fd: int, ns: int) -> None:
        os.utime(fd, ns=(ns, ns))

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record_name(conversation_id: str) -> str:
    """The record's file name: ``<logical digest[:16]>.<sha256(id)>.json``."""
    return f"{_digest(logical_conversation_id(conversation_id))[:16]}.{_digest(conversation_id)}{SUFFIX}"


def _shard(logical_digest16: str) -> int:
    return int(logical_digest16[:8], 16) % SHARDS


def _short(conversation_id: str) -> str:
    text = repr(conversation_id)
    return text if len(text) <= 80 else text[:77] + "..."


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _shape_problems(error: Exception) -> str:
    """What cattrs found wrong, as ``problem @ field path`` (at most three), instead of its summary line."""
    from cattrs import transform_error

    try:
        problems = transform_error(error, path="")
    except Exception:  # not a cattrs validation error: its own message is all there is
        return str(error)
    problems = [_one_line(p.replace("@ .", "@ ", 1), 160) for p in problems]
    return "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` with control characters escaped and cut to ``limit`` characters, for a one-line report."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _converter() -> Any:
    from monoagent.kernel.serial import converter

    return converter


_STRICT: Any = None


def _exactly(kind: type) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, not {type(value).__name__}")
        return value

    return structure


def _finite_number(value: Any, _: Any) -> float:
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def _record_converter() -> Any:
    """The project's converter made strict for records: no coercion between JSON types
    (``12345`` is not a string, ``"1"`` not a number, ``true`` not an int) and finite numbers
    only. A key it does not know is ignored, as before: a newer version may add an optional
    field without a new record version (the continuity envelope did), and a downgrade must not
    turn such a record into a cold start that the next commit would make a loss.
    """
    global _STRICT
    if _STRICT is None:
        strict = _converter().copy()
        for kind in (str, int, bool):
            strict.register_structure_hook(kind, _exactly(kind))
        strict.register_structure_hook(float, _finite_number)
        _STRICT = strict
    return _STRICT


def decode_record(data: bytes, name: str) -> tuple[HistoryRecord, str, dict[str, Any]]:
    """The record in ``data``, read from the file ``name``, with its text and raw JSON.

    Raises :class:`UnreadableRecord` when the bytes are not a record of the conversation the
    file name is derived from, :class:`NewerRecordError` for a record of a newer version.
    """
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise UnreadableRecord(f"it is not UTF-8 (byte {exc.start})") from None
    try:
        raw = strict_loads(text, max_depth=MAX_DEPTH)
    except StrictJSONError as exc:
        raise UnreadableRecord(str(exc)) from None
    if not isinstance(raw, dict):
        raise UnreadableRecord(f"it holds a JSON {type(raw).__name__}, not a record object")
    version = raw.get("version")
    supported = f"{SUPPORTED_VERSIONS[0]}-{SUPPORTED_VERSIONS[-1]}"
    if type(version) is int and version > RECORD_VERSION:
        raise NewerRecordError(
            f"history record {name} was written by a newer version of monoagent (record version "
            f"{_one_line(str(version), 40)}; this one reads versions {supported}); it is neither read nor replaced: "
            f"upgrade monoagent, or discard it with `monoagent history reset CONVERSATION`"
        )
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        raise UnreadableRecord(f"its version {_one_line(repr(version), 40)} is not one this store writes ({supported})")
    try:
        record = _record_converter().structure(raw, HistoryRecord)
    except Exception as exc:  # cattrs raises a family of errors; each means "not the record shape"
        raise UnreadableRecord(f"it is not of the record shape: {_shape_problems(exc)}") from None
    if _digest(record.conversationId) != name[17 : -len(SUFFIX)]:
        raise UnreadableRecord("it names another conversation than the one its file name is derived from")
    if record.logicalConversationId not in (None, logical_conversation_id(record.conversationId)):
        raise UnreadableRecord("its logicalConversationId is not the logical session of its conversationId")
    if not 0 <= record.updatedAt < LATEST_UPDATE:
        raise UnreadableRecord(f"its updatedAt {record.updatedAt!r} is not a time")
    return record, text, raw


def serialize_message(message: Message) -> bytes:
    return _dumps(_converter().unstructure(message))


def truncation_marker(original_bytes: int, cap: int) -> str:
    return f"\n[message truncated to fit the {cap}-byte history cap; original content {original_bytes} bytes]"


def cap_message(message: Message, cap: int) -> tuple[Message, bytes]:
    """``message`` and its serialization, cut so that the serialization is at most ``cap`` bytes.

    Within the cap the message is unchanged. Over it, the content keeps its longest prefix of
    whole code points that fits together with :func:`truncation_marker` (which states the
    original byte count of the content), found by bisection on the serialized size, so JSON
    escaping is accounted for exactly. Lone surrogates become ``?`` first, so the result is valid
    UTF-8. Should the other fields alone not fit, they are cut to 256 bytes each and tool calls
    are dropped.
    """
    data = serialize_message(message)
    if len(data) <= cap:
        return message, data
    content = message.content.encode("utf-8", "replace").decode("utf-8")
    marker = truncation_marker(len(content.encode("utf-8")), cap)
    base = attrs.evolve(message, content=marker)
    if len(serialize_message(base)) > cap:
        base = attrs.evolve(
            base,
            name=utf8_prefix(message.name, 256).text if message.name else message.name,
            tool_call_id=utf8_prefix(message.tool_call_id, 256).text if message.tool_call_id else message.tool_call_id,
            tool_calls=(),
        )
    budget = cap - len(serialize_message(base))
    if budget < 0:
        raise HistoryWriteError(f"a message cannot be reduced to the {cap}-byte history cap (history.maxMessageBytes)")
    low, high = 0, min(len(content), budget)
    best = serialize_message(base)
    while low < high:
        middle = (low + high + 1) // 2
        candidate = serialize_message(attrs.evolve(base, content=content[:middle] + marker))
        if len(candidate) <= cap:
            low, best = middle, candidate
        else:
            high = middle - 1
    if low == 0:
        return base, best
    final = attrs.evolve(base, content=content[:low] + marker)
    return final, best


_DECODER = json.JSONDecoder()


def _split_messages(text: str, raw: dict[str, Any]) -> tuple[bytes, ...] | None:
    """The exact serialized bytes of each message of a record this writer wrote, else None.

    A record in this store's own layout is the envelope followed by the message array; the
    decoder's end positions cut that array into its elements, so a commit after a cache miss
    (another process wrote last, or a cold start) reuses the bytes instead of re-serializing.
    """
    envelope = json.dumps(
        {"version": raw.get("version"), "conversationId": raw.get("conversationId"),
         "logicalConversationId": raw.get("logicalConversationId"), "updatedAt": raw.get("updatedAt"), "messages": []},
        ensure_ascii=False, separators=(",", ":"),
    )[:-2]
    if not text.startswith(envelope):
        return None
    pos, fragments = len(envelope), []
    try:
        if text[pos] != "]":
            while True:
                _, end = _DECODER.raw_decode(text, pos)
                fragments.append(text[pos:end].encode("utf-8", "surrogatepass"))
                if text[end] == "]":
                    pos = end
                    break
                if text[end] != ",":
                    return None
                pos = end + 1
    except (ValueError, IndexError):  # whitespace or anything else this writer never writes: re-serialize
        return None
    return tuple(fragments) if text[pos:] == "]}" else None


@attrs.frozen
class _Entry:
    """A parsed record, valid while the file keeps this stat identity."""

    key: tuple[int, ...]
    messages: tuple[Message, ...]
    fragments: tuple[bytes, ...] | None
    size: int


@attrs.frozen
class _Unreadable:
    """A record that cannot be read, and why (one line)."""

    reason: str


def _stat_key(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class FilesHistoryStore:
    """See the module docstring. The public coroutines run blocking work in worker threads."""

    name = "files"
    capabilities = frozenset({CAPABILITY_LOAD_WARNINGS, "logical_reset"})

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_messages: int = 64,
        *,
        max_message_bytes: int = 64 * 1024,
        max_bytes: int = 256 * MiB,
        max_conversations: int = 10_000,
        max_inactive_days: float = 365,
        max_stage_bytes: int = 256 * MiB,
        clock: Callable[[], float] = time.time,
        fs: FsOps | None = None,
        retention_every: int = 64,
    ) -> None:
        self.directory = os.fspath(directory)
        self.max_messages = max_messages
        self.max_message_bytes = max_message_bytes
        self.max_bytes = max_bytes
        self.max_conversations = max_conversations
        self.max_inactive_days = max_inactive_days
        self.max_stage_bytes = max_stage_bytes
        self.clock = clock
        self.fs = fs or FsOps()
        self.retention_every = retention_every
        self._stages = os.path.join(self.directory, ".stages")
        self._locks = os.path.join(self.directory, ".locks")
        self._cache: dict[str, _Entry] = {}
        self._names: dict[str, tuple[str, str, str]] = {}
        self._ready = False
        self._uid = os.geteuid()
        self._estimate: list[float] | None = None
        self._commits = 0
        self._reported: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ paths and safety

    def _paths(self, conversation_id: str) -> tuple[str, str, str]:
        """(record path, logical digest prefix, reset-journal path) of a conversation id."""
        found = self._names.get(conversation_id)
        if found is None:
            if not isinstance(conversation_id, str):
                raise TypeError(f"conversation ids are strings, not {type(conversation_id).__name__}")
            name = record_name(conversation_id)
            logical16 = name[:16]
            found = (os.path.join(self.directory, name), logical16, os.path.join(self.directory, RESET_PREFIX + logical16))
            if len(self._names) > 4096:
                self._names.clear()
            self._names[conversation_id] = found
        return found

    def _check_dir(self, path: str, what: str) -> None:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise HistoryRecordError(f"{what} {path} is a symlink or not a directory; refusing it (it must be a real directory)")
        if info.st_uid != self._uid:
            raise HistoryRecordError(f"{what} {path} belongs to uid {info.st_uid}, not to this user ({self._uid}); refusing it")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise HistoryRecordError(
                f"{what} {path} has mode {stat.S_IMODE(info.st_mode):04o}; it must be owner-only (0700): chmod 700 {path}"
            )

    def _ensure_dir(self) -> None:
        if self._ready:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.directory)), exist_ok=True)
        self._check_dir(self.directory, "history directory")
        self._check_dir(self._stages, "history stage directory")
        self._check_dir(self._locks, "history lock directory")
        self._ready = True
        self.reclaim_stages()

    def _open_owned(self, path: str, flags: int, what: str) -> int | None:
        """Open ``path`` without following a symlink; None if missing; refuse foreign or odd files."""
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC, 0o600)  # a FIFO must not block
        except FileNotFoundError:
            return None
        except OSError as exc:
            reason = "it is a symlink (refused)" if exc.errno == errno.ELOOP else exc.strerror
            raise HistoryRecordError(f"{what} {os.path.basename(path)} cannot be opened safely: {reason}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
            os.close(fd)
            problem = "is not a regular file" if not stat.S_ISREG(info.st_mode) else f"belongs to uid {info.st_uid}, not {self._uid}"
            raise HistoryRecordError(
                f"{what} {os.path.basename(path)} {problem}; refusing it (it is not the store's own file: the store neither "
                f"reads nor replaces it; move it out of {os.path.dirname(path)})"
            )
        return fd

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        fd = self._open_owned(os.path.join(self._locks, name), os.O_RDWR | os.O_CREAT, "history lock file")
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _shard_lock(self, logical16: str) -> contextlib.AbstractContextManager[None]:
        return self._locked(f"shard-{_shard(logical16):02d}.lock")

    # ------------------------------------------------------------------ reading

    def record_cap(self, conversation_id: str | None = None) -> int:
        """The largest record this store reads: the window at the per-message cap plus the envelope.

        The window is never taken below the documented 64 messages of 64 KiB, so lowering
        ``history.maxMessages`` or ``history.maxMessageBytes`` never makes a written record
        unreadable. The envelope allowance is :data:`FRAMING_BYTES`, or twice the serialized
        conversation id (it is stored with its logical id) when that is larger.
        """
        window = max(self.max_messages, DOCUMENTED_MAX_MESSAGES) * (max(self.max_message_bytes, DOCUMENTED_MESSAGE_BYTES) + 1)
        if conversation_id is None:
            return window + FRAMING_BYTES
        return window + max(FRAMING_BYTES, 2 * len(_dumps(conversation_id)) + 256)

    def _read_owned(self, fd: int, path: str, cap: int) -> bytes | _Unreadable:
        """The bytes of the open record ``fd``, or why not: the cap is checked before reading."""
        try:
            return read_open_file(fd, cap, what="history record", path=os.path.basename(path))
        except FileTooLarge as exc:
            return _Unreadable(f"it is {exc.size:,} bytes, over the {cap:,}-byte cap of a record")

    def _read(self, conversation_id: str) -> _Entry | _Unreadable | None:
        """The current record: an entry, why it is unreadable, or None (no record). Uses the cache by stat identity."""
        path, _, _ = self._paths(conversation_id)
        fd = self._open_owned(path, os.O_RDONLY, "history record")
        if fd is None:
            self._cache.pop(conversation_id, None)
            return None
        try:
            key = _stat_key(os.fstat(fd))
            cached = self._cache.get(conversation_id)
            if cached is not None and cached.key == key:
                return cached
            data = self._read_owned(fd, path, self.record_cap(conversation_id))
        finally:
            os.close(fd)
        if isinstance(data, _Unreadable):
            return data
        try:
            record, text, raw = decode_record(data, os.path.basename(path))
        except UnreadableRecord as exc:
            return _Unreadable(str(exc))
        messages = tuple(record.messages)
        fragments = _split_messages(text, raw)
        if fragments is not None and len(fragments) != len(messages):
            fragments = None
        entry = _Entry(key, messages, fragments, len(data))
        self._cache[conversation_id] = entry
        return entry

    def _pending_reset(self, journal: str) -> bool:
        try:
            info = os.lstat(journal)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(info.st_mode):
            raise HistoryRecordError(
                f"history reset journal {os.path.basename(journal)} is a symlink or not a regular file; refusing it"
            )
        if info.st_uid != self._uid:
            raise HistoryRecordError(
                f"history reset journal {os.path.basename(journal)} belongs to uid {info.st_uid}, not {self._uid}; refusing it"
            )
        return True

    def _load(self, conversation_id: str, on_warning: HistoryWarningCallback | None) -> tuple[Message, ...]:
        self._ensure_dir()
        _, _, journal = self._paths(conversation_id)
        if self._pending_reset(journal):
            return ()
        entry = self._read(conversation_id)
        if entry is None:
            return ()
        if isinstance(entry, _Unreadable):
            message = (
                f"the history record of conversation {_short(conversation_id)} is unreadable ({entry.reason}); "
                f"the conversation starts cold and the record is replaced by the next successful turn"
            )
            if on_warning is None:
                logger.bind(plugin="files").warning(message)
            else:
                on_warning(UNREADABLE, message)
            return ()
        return entry.messages

    async def load(self, conversation_id: str, *, on_warning: HistoryWarningCallback | None = None) -> Sequence[Message]:
        path, _, journal = self._paths(conversation_id)
        cached = self._cache.get(conversation_id)
        if cached is not None and self._ready:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                info = None
            if info is not None and _stat_key(info) == cached.key and not self._pending_reset(journal):
                return cached.messages
        import asyncio

        return await asyncio.to_thread(self._load, conversation_id, on_warning)

    # ------------------------------------------------------------------ the store's own files

    def _inventory(
        self, directory: str, shapes: dict[str, re.Pattern[str]], lookalike: Callable[[str], bool], prefix: str = ""
    ) -> dict[str, list[tuple[str, os.stat_result]]]:
        """The store's own files in ``directory``, by kind: a name of exactly one of ``shapes``, a
        regular file (by ``lstat``) of this user. Entries that are not, but whose name is
        ``lookalike``, are left alone and reported once. Only names starting with ``prefix`` are looked at.
        """
        found: dict[str, list[tuple[str, os.stat_result]]] = {kind: [] for kind in shapes}
        foreign = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.startswith(prefix):
                    continue
                kind = next((k for k, shape in shapes.items() if shape.fullmatch(entry.name)), None)
                if kind is None and not lookalike(entry.name):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if kind is not None and stat.S_ISREG(info.st_mode) and info.st_uid == self._uid:
                    found[kind].append((entry.name, info))
                else:
                    foreign.append(entry.name)
        if foreign:
            self._report_foreign(directory, foreign)
        return found

    def _root_files(self, prefix: str = "") -> dict[str, list[tuple[str, os.stat_result]]]:
        """Own ``record`` and ``journal`` files of the history directory (whose names start with ``prefix``)."""
        return self._inventory(
            self.directory, {"record": RECORD_NAME, "journal": JOURNAL_NAME},
            lambda name: name.lower().endswith(SUFFIX) or name.startswith(RESET_PREFIX), prefix,
        )

    def _stage_files(self) -> list[tuple[str, os.stat_result]]:
        return self._inventory(self._stages, {"stage": STAGE_NAME}, lambda name: True)["stage"]

    def _report_foreign(self, directory: str, names: list[str]) -> None:
        """Log, once per store object, the entries the store leaves alone although they look like its own."""
        new = sorted(name for name in names if (directory, name) not in self._reported)
        if not new:
            return
        if len(self._reported) > 4096:
            self._reported.clear()
        self._reported.update((directory, name) for name in new)
        shown = ", ".join(_one_line(repr(name), 120) for name in new[:10]) + (f" and {len(new) - 10} more" if len(new) > 10 else "")
        logger.bind(plugin="files").warning(
            "{} file(s) in {} are not the store's own (a name of its exact shape, a regular file, this user's) and were "
            "left untouched: {}", len(new), _one_line(directory), shown,
        )

    # ------------------------------------------------------------------ staging and publication

    def _stage_usage(self) -> tuple[int, int]:
        stages = self._stage_files()
        return len(stages), sum(info.st_size for _, info in stages)

    def reclaim_stages(self) -> tuple[int, int]:
        """Remove own stages whose writer is gone (their flock is free); returns (stages, bytes) reclaimed."""
        reclaimed = freed = 0
        for name, _ in self._stage_files():
            path = os.path.join(self._stages, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC)
            except FileNotFoundError:
                continue
            except OSError as exc:
                logger.bind(plugin="files").warning("history stage {} cannot be opened ({}); left in place", name, exc.strerror)
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                info = os.fstat(fd)
                try:
                    current = os.lstat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(info.st_mode) and (current.st_dev, current.st_ino) == (info.st_dev, info.st_ino):
                    os.unlink(path)
                    reclaimed += 1
                    freed += info.st_size
            finally:
                os.close(fd)
        if reclaimed:
            logger.bind(plugin="files").info("reclaimed {} abandoned history stage(s), {} bytes", reclaimed, freed)
        return reclaimed, freed

    def _stage(self, name: str, data: bytes, now: float) -> tuple[int, str]:
        """Write ``data`` to a new, flock-ed, fsynced stage file; returns (fd, path). The caller closes fd."""
        _, used = self._stage_usage()
        if used + len(data) > self.max_stage_bytes:
            self.reclaim_stages()
            _, used = self._stage_usage()
            if used + len(data) > self.max_stage_bytes:
                raise HistoryStageQuotaError(
                    f"live unpublished history stages hold {used} bytes and this turn needs {len(data)} more, over "
                    f"history.maxStageBytes = {self.max_stage_bytes}; committed history is untouched (retry when other "
                    f"turns finish, or raise the limit)"
                )
        fs = self.fs
        while True:
            path = os.path.join(self._stages, f"{name[17:-len(SUFFIX)]}.{os.urandom(6).hex()}{STAGE_SUFFIX}")
            fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_nlink:
                    break
            except BlockingIOError:
                pass
            fs.close(fd)
        try:
            view = memoryview(data)
            while view:
                view = view[fs.write(fd, view) :]
            fs.set_mtime(fd, int(now * 1e9))
            fs.fsync(fd)
        except BaseException:
            self._discard(fd, path)
            raise
        return fd, path

    def _discard(self, fd: int, path: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.unlink(path)
        with contextlib.suppress(OSError):
            self.fs.close(fd)

    def _record_bytes(self, conversation_id: str, logical: str, now: float, fragments: Sequence[bytes]) -> bytes:
        """The record: the envelope serialized by json, the already-serialized messages spliced in.

        Messages are serialized once, when they are committed or first read, and reused on every
        later commit, so a commit's cost does not grow with the retained window.
        """
        envelope = _dumps({"version": RECORD_VERSION, "conversationId": conversation_id,
                           "logicalConversationId": logical, "updatedAt": now, "messages": []})
        assert envelope.endswith(b"[]}")
        return envelope[:-2] + b",".join(fragments) + b"]}"

    def _fragments(self, entry: _Entry) -> tuple[bytes, ...]:
        if entry.fragments is not None:
            return entry.fragments
        return tuple(serialize_message(m) for m in entry.messages)

    def _commit(self, conversation_id: str, new: Sequence[Message]) -> CommitReceipt:
        for message in new:
            if not isinstance(message, Message):
                raise TypeError(f"commit takes monoagent.kernel.model.Message values, not {type(message).__name__}")
        self._ensure_dir()
        path, logical16, journal = self._paths(conversation_id)
        logical = logical_conversation_id(conversation_id)
        capped = self._capped(conversation_id, new)
        with self._shard_lock(logical16):
            if self._pending_reset(journal):
                self._complete_reset(logical16, journal)
            current = self._read(conversation_id)
            old_size = 0
            if isinstance(current, _Entry):
                base_messages, base_fragments, old_size = current.messages, self._fragments(current), current.size
            else:
                base_messages, base_fragments = (), ()
                if isinstance(current, _Unreadable):
                    logger.bind(plugin="files").warning(
                        "replacing the unreadable history record of {} ({})", _short(conversation_id), current.reason
                    )
            keep = self.max_messages
            messages = (base_messages + tuple(m for m, _ in capped))[-keep:]
            fragments = (base_fragments + tuple(f for _, f in capped))[-keep:]
            now = self.clock()
            data = self._record_bytes(conversation_id, logical, now, fragments)
            if len(data) > self.record_cap() and len(data) > (cap := self.record_cap(conversation_id)):
                # messages kept from a record written under larger limits: drop the oldest until it reads back
                excess, drop = len(data) - cap, 0
                while excess > 0:
                    excess -= len(fragments[drop]) + 1
                    drop += 1
                messages, fragments = messages[drop:], fragments[drop:]
                data = self._record_bytes(conversation_id, logical, now, fragments)
            try:
                fd, stage = self._stage(os.path.basename(path), data, now)
            except HistoryWriteError:
                raise
            except OSError as exc:
                raise HistoryWriteError(
                    f"could not stage the turn of conversation {_short(conversation_id)} in {self.directory}: {exc}; "
                    f"the previously committed history is intact"
                ) from exc
            try:
                try:
                    self.fs.replace(stage, path)
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        self.fs.unlink(stage)  # the descriptor is closed once, below
                    raise HistoryWriteError(
                        f"could not publish the turn of conversation {_short(conversation_id)}: {exc}; "
                        f"the previously committed history is intact"
                    ) from exc
                key = _stat_key(os.fstat(fd))
                try:
                    self.fs.fsync_dir(self.directory)
                except OSError as exc:
                    self._cache.pop(conversation_id, None)
                    raise HistoryWriteError(
                        f"the turn of conversation {_short(conversation_id)} was written but the history directory could not "
                        f"be synced ({exc}); it may not survive a power cut; the earlier messages are kept either way"
                    ) from exc
            finally:
                with contextlib.suppress(OSError):
                    self.fs.close(fd)
            self._cache[conversation_id] = _Entry(key, messages, fragments, len(data))
        self._after_publication(path, len(data) - old_size, not isinstance(current, _Entry), now)
        return CommitReceipt(conversation_id, len(messages), len(data))

    def _capped(self, conversation_id: str, new: Sequence[Message]) -> list[tuple[Message, bytes]]:
        """Each new message cut to the per-message cap with its serialization; one nested deeper
        than a record may be is refused here, so that a commit never writes what a load refuses.
        Only tool-call arguments nest (and the envelope and message list take two levels).
        """
        try:
            capped = [cap_message(m, self.max_message_bytes) for m in new]
            deep = any(m.tool_calls and nesting_over(f.decode("utf-8", "surrogatepass"), MAX_DEPTH - 2) for m, f in capped)
        except RecursionError:
            deep = True
        if deep:
            raise HistoryWriteError(
                f"a message of conversation {_short(conversation_id)} nests deeper than the {MAX_DEPTH} levels a history "
                f"record allows (tool-call arguments?); nothing was committed and the previously committed history is intact"
            )
        return capped

    async def commit(self, conversation_id: str, messages: Sequence[Message]) -> CommitReceipt:
        import asyncio

        return await asyncio.to_thread(self._commit, conversation_id, list(messages))

    # ------------------------------------------------------------------ retention

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

    # ------------------------------------------------------------------ resets

    def _reset(self, conversation_id: str) -> int:
        self._ensure_dir()
        path, logical16, journal = self._paths(conversation_id)
        with self._shard_lock(logical16):
            if self._pending_reset(journal):
                self._complete_reset(logical16, journal)
            try:
                current = self._read(conversation_id)
            except NewerRecordError as exc:  # a reset discards it, as it discards an unreadable one
                current = _Unreadable(str(exc))
            if current is None:
                return 0
            count = len(current.messages) if isinstance(current, _Entry) else 0
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
            logical = _record_converter().structure(strict_loads(text, max_depth=MAX_DEPTH), ResetJournal).logicalConversationId
        except Exception as exc:  # any bytes: over the cap, not UTF-8, not JSON, not the journal shape (cattrs)
            logger.bind(plugin="files").info(
                "history reset journal {} is unreadable ({}); completing it by its prefix", os.path.basename(journal),
                _one_line(str(exc), 160),
            )
            return None
        finally:
            os.close(fd)
        return logical if _digest(logical)[:16] == logical16 else None

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
        if isinstance(data, _Unreadable):
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
                fd = self.fs.open(journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | _O_CLOEXEC, 0o600)
            except OSError as exc:
                raise HistoryWriteError(
                    f"could not write the reset journal {os.path.basename(journal)} in {self.directory}: {exc}; nothing was reset"
                ) from exc
            try:
                view = memoryview(_dumps({"logicalConversationId": logical}))
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

    # ------------------------------------------------------------------ listing, totals, clear-all

    def _list(self) -> list[ConversationInfo]:
        self._ensure_dir()
        found: list[ConversationInfo] = []
        log = logger.bind(plugin="files")
        for _, _, name, _ in sorted(self._scan()):
            examined = self._examine(name)
            if examined is None:
                continue
            size, record = examined
            if isinstance(record, HistoryRecord):
                found.append(ConversationInfo(record.conversationId, len(record.messages), record.updatedAt, size))
            elif isinstance(record, NewerRecordError):
                log.warning("{}; not listed", record)
            else:
                log.warning("history record {} is unreadable ({}); not listed: its conversation starts cold and its next "
                            "turn replaces it", name, record)
        return found

    async def conversations(self) -> Sequence[ConversationInfo]:
        import asyncio

        return await asyncio.to_thread(self._list)

    def _stats(self) -> HistoryStats:
        self._ensure_dir()
        records = self._scan()
        stages, stage_bytes = self._stage_usage()
        return HistoryStats(len(records), sum(r[1] for r in records), None, stages, stage_bytes)

    async def stats(self) -> HistoryStats:
        import asyncio

        return await asyncio.to_thread(self._stats)

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

    async def close(self) -> None:
        self._cache.clear()


CONFIG_PATH = "history"
"""The store's limits live in the kernel's ``history`` table, at their documented paths."""


@attrs.define
class FilesHistoryConfig:
    """The ``files`` store's keys of the ``history`` table: what it retains, and its stage budget."""

    max_messages: int = setting(
        64, doc="Messages retained per conversation (the newest).", env="MONO_AGENT_HISTORY_MAX_MESSAGES",
        min=1, max=10_000,
    )
    max_message_bytes: int = setting(
        64 * 1024, doc="Cap of one serialized message in bytes; longer content is cut UTF-8-safely with a marker and the original byte count.",
        env="MONO_AGENT_HISTORY_MAX_MESSAGE_BYTES", min=1024, max=16 * 1024 * 1024,
    )
    max_bytes: int = setting(
        256 * 1024 * 1024, doc="Aggregate bytes of all retained records; the oldest inactive conversations are pruned beyond it.",
        env="MONO_AGENT_HISTORY_MAX_BYTES", min=64 * 1024, max=1 << 40,
    )
    max_conversations: int = setting(
        10_000, doc="Retained conversations (records); the oldest inactive ones are pruned beyond it.",
        env="MONO_AGENT_HISTORY_MAX_CONVERSATIONS", min=1, max=10_000_000,
    )
    max_inactive_days: float = setting(
        365, doc="Days without a commit after which a conversation is pruned.",
        env="MONO_AGENT_HISTORY_MAX_INACTIVE_DAYS", min=0.001, max=36_500,
    )
    max_stage_bytes: int = setting(
        256 * 1024 * 1024, doc="Aggregate bytes of live unpublished stages (prepared or crash-abandoned turns).",
        env="MONO_AGENT_HISTORY_MAX_STAGE_BYTES", min=64 * 1024, max=1 << 40,
    )


def store_from_config(agent: Any) -> FilesHistoryStore:
    cfg = agent.config.section(CONFIG_PATH)
    return FilesHistoryStore(
        agent.config.history_dir,
        cfg.max_messages,
        max_message_bytes=cfg.max_message_bytes,
        max_bytes=cfg.max_bytes,
        max_conversations=cfg.max_conversations,
        max_inactive_days=cfg.max_inactive_days,
        max_stage_bytes=cfg.max_stage_bytes,
    )


@bundled_impl
def register_history_stores(register: Any) -> None:
    register("files", store_from_config, description="owner-only JSON records, staged and atomically published with fsync")


@bundled_impl
def register_config_sections(register: Any) -> None:
    register(CONFIG_PATH, FilesHistoryConfig)
