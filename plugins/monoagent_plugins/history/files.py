"""The ``files`` history store: one owner-only JSON record per exact conversation id.

Layout of the history directory (``history.dir``, normally ``.mono-agent/history``)::

    history/                          0700, owned by the running user, never a symlink
      <L16>.<P64>.json                one record per conversation, 0600
      .reset.<L16>                    a logical-session reset in progress (journal), 0600
      .stages/<P64>.<rand>.stage      unpublished stages, each flock-ed by its live writer
      .locks/shard-00.lock .. 15      the fixed table of conversation locks (flock)
      .locks/retention.lock           root-wide retention (flock)

``P64`` is the SHA-256 of the exact conversation id and ``L16`` the first 16 hex digits of the
SHA-256 of its logical session (:func:`monoagent._kernel.stores.logical_conversation_id`), so
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
strict JSON (:mod:`monoagent._boundary.strict_json`: no NaN, no duplicated keys, no out-of-range numbers),
of the wrong shape or types (cattrs, strictly: no coercion between JSON types) or naming another
conversation is *unreadable*: the
conversation starts cold with a ``history_record_unreadable`` warning and the next commit replaces
it. A record of a newer version is refused instead (:class:`NewerRecordError`), so that this
version never overwrites what a newer one wrote; a reset removes it.

A record may carry ``providerSession`` (epoch, revision, model): the durable provider session it
is bound to (:class:`~monoagent._kernel.stores.ProviderSessionStore`). It is written in
the same publication as the messages (``commit(..., provider_session=...)``) and dropped by a
commit without one, so a host-only append or a continuity account unbinds the record and the next
durable turn reseeds from history. A malformed one makes the record unreadable, like any field.
"""


from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from monoagent import (
    CommitReceipt,
    ComponentRegistrar,
    ConfigSectionRegistrar,
    ConversationInfo,
    HistoryStats,
    HistoryStore,
    HistoryWarningCallback,
    Message,
    ProviderSessionState,
    hookimpl,
    logger,
    logical_conversation_id,
    setting,
)
from monoagent import json_nesting_over as nesting_over
from monoagent_plugins.history.directory import FsOps
from monoagent_plugins.history.maintenance import HistoryMaintenance
from monoagent_plugins.history.records import (
    EPOCH_SHAPE,
    MAX_DEPTH,
    UNREADABLE,
    CachedRecord,
    HistoryRecord,
    HistoryWriteError,
    MiB,
    NewerRecordError,
    Unreadable,
    cap_message,
    envelope_bytes,
    provider_session_json,
    record_converter,
    serialise_message,
    short_id,
    stat_key,
)

if TYPE_CHECKING:
    from monoagent import Agent

_T = TypeVar("_T")


async def _off_loop(work: Callable[..., _T], *args: Any) -> _T:
    """``work(*args)`` in a worker thread; the store's file I/O never blocks the event loop.

    asyncio is imported here, not with the module: the plugin loads for ``monoagent --help``,
    which otherwise never needs it (see bench/startup.py).
    """
    import asyncio

    return await asyncio.to_thread(work, *args)


def _as_read(serialised: bytes) -> Message:
    """The message a load of the record returns for ``serialised``, which the committing handle caches so that it
    reads what every other handle reads (tool-call arguments are free-form: JSON turns a tuple into a list and an
    int key into a string)."""
    return record_converter().structure(json.loads(serialised), Message)


class FilesHistoryStore(HistoryMaintenance):
    """See the module docstring. The public coroutines run blocking work in worker threads.

    Its file-system layer is :class:`~monoagent_plugins.history.directory.HistoryDirectory`,
    its retention and resets :class:`~monoagent_plugins.history.maintenance.HistoryMaintenance`,
    its record format :mod:`monoagent_plugins.history.records`. It implements every
    sub-protocol of :class:`~monoagent._kernel.stores.HistoryStore`: managed (logical reset,
    totals, clear-all), logical lookup, provider sessions, and durable (``durable = True``, which
    ``HistoryDurabilityContract`` proves).
    """

    name = "files"
    durable = True

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
        self._cache: dict[str, CachedRecord] = {}
        self._names: dict[str, tuple[str, str, str]] = {}
        self._ready = False
        self._uid = os.geteuid()
        self._estimate: list[float] | None = None
        self._commits = 0
        self._reported: set[tuple[str, str]] = set()

    def _load(self, conversation_id: str, on_warning: HistoryWarningCallback | None) -> tuple[Message, ...]:
        self._ensure_dir()
        _, _, journal = self._paths(conversation_id)
        if self._pending_reset(journal):
            return ()
        entry = self._read(conversation_id)
        if entry is None:
            return ()
        if isinstance(entry, Unreadable):
            message = (
                f"the history record of conversation {short_id(conversation_id)} is unreadable ({entry.reason}); "
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
            if info is not None and stat_key(info) == cached.key and not self._pending_reset(journal):
                return cached.messages
        return await _off_loop(self._load, conversation_id, on_warning)

    def _record_bytes(self, conversation_id: str, logical: str, now: float, fragments: Sequence[bytes],
                      provider_session: ProviderSessionState | None = None) -> bytes:
        """The record: the envelope serialised by json, the already-serialised messages spliced in.

        Messages are serialised once, when they are committed or first read, and reused on every
        later commit, so a commit's cost does not grow with the retained window.
        """
        envelope = envelope_bytes(conversation_id, logical, now, provider_session=provider_session_json(provider_session))
        return envelope + b",".join(fragments) + b"]}"

    def _fragments(self, entry: CachedRecord) -> tuple[bytes, ...]:
        if entry.fragments is not None:
            return entry.fragments
        return tuple(serialise_message(m) for m in entry.messages)

    def _commit(self, conversation_id: str, new: Sequence[Message], provider_session: ProviderSessionState | None = None) -> CommitReceipt:
        if provider_session is not None and (
            not isinstance(provider_session, ProviderSessionState) or not EPOCH_SHAPE.fullmatch(provider_session.epoch)
            or type(provider_session.revision) is not int or not 0 <= provider_session.revision < 2**53
            or not isinstance(provider_session.model, str | None)
        ):
            raise TypeError(f"provider_session must be a ProviderSessionState with an epoch of 32 hex digits and a revision "
                            f"from 0 to 2**53, not {provider_session!r}")
        for message in new:
            if not isinstance(message, Message):
                raise TypeError(f"commit takes monoagent._kernel.model.Message values, not {type(message).__name__}")
        self._ensure_dir()
        path, logical16, journal = self._paths(conversation_id)
        logical = logical_conversation_id(conversation_id)
        capped = self._capped(conversation_id, new)
        with self._shard_lock(logical16):
            if self._pending_reset(journal):
                self._complete_reset(logical16, journal)
            current = self._read(conversation_id)
            old_size = 0
            if isinstance(current, CachedRecord):
                base_messages, base_fragments, old_size = current.messages, self._fragments(current), current.size
            else:
                base_messages, base_fragments = (), ()
                if isinstance(current, Unreadable):
                    logger.bind(plugin="files").warning(
                        "replacing the unreadable history record of {} ({})", short_id(conversation_id), current.reason
                    )
            keep = self.max_messages
            messages = (base_messages + tuple(m for m, _ in capped))[-keep:]
            fragments = (base_fragments + tuple(f for _, f in capped))[-keep:]
            now = self.clock()
            data = self._record_bytes(conversation_id, logical, now, fragments, provider_session)
            if len(data) > self.record_cap() and len(data) > (cap := self.record_cap(conversation_id)):
                # messages kept from a record written under larger limits: drop the oldest until it reads back
                excess, drop = len(data) - cap, 0
                while excess > 0:
                    excess -= len(fragments[drop]) + 1
                    drop += 1
                messages, fragments = messages[drop:], fragments[drop:]
                data = self._record_bytes(conversation_id, logical, now, fragments, provider_session)
            try:
                fd, stage = self._stage(os.path.basename(path), data, now)
            except HistoryWriteError:
                raise
            except OSError as exc:
                raise HistoryWriteError(
                    f"could not stage the turn of conversation {short_id(conversation_id)} in {self.directory}: {exc}; "
                    f"the previously committed history is intact"
                ) from exc
            try:
                try:
                    self.fs.replace(stage, path)
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        self.fs.unlink(stage)  # the descriptor is closed once, below
                    raise HistoryWriteError(
                        f"could not publish the turn of conversation {short_id(conversation_id)}: {exc}; "
                        f"the previously committed history is intact"
                    ) from exc
                key = stat_key(os.fstat(fd))
                try:
                    self.fs.fsync_dir(self.directory)
                except OSError as exc:
                    self._cache.pop(conversation_id, None)
                    raise HistoryWriteError(
                        f"the turn of conversation {short_id(conversation_id)} was written but the history directory could not "
                        f"be synced ({exc}); it may not survive a power cut; the earlier messages are kept either way"
                    ) from exc
            finally:
                with contextlib.suppress(OSError):
                    self.fs.close(fd)
            self._cache[conversation_id] = CachedRecord(key, messages, fragments, len(data), provider_session)
        self._after_publication(path, len(data) - old_size, not isinstance(current, CachedRecord), now)
        return CommitReceipt(conversation_id, len(messages), len(data))

    def _capped(self, conversation_id: str, new: Sequence[Message]) -> list[tuple[Message, bytes]]:
        """Each new message cut to the per-message cap with its serialisation; one nested deeper
        than a record may be is refused here, so that a commit never writes what a load refuses.
        Only tool-call arguments nest (and the envelope and message list take two levels). Each
        message comes back as a load reads it (:func:`_as_read`).
        """
        try:
            capped = [cap_message(m, self.max_message_bytes) for m in new]
            deep = any(m.tool_calls and nesting_over(f.decode("utf-8", "surrogatepass"), MAX_DEPTH - 2) for m, f in capped)
        except RecursionError:
            deep = True
        if deep:
            raise HistoryWriteError(
                f"a message of conversation {short_id(conversation_id)} nests deeper than the {MAX_DEPTH} levels a history "
                f"record allows (tool-call arguments?); nothing was committed and the previously committed history is intact"
            )
        return [(_as_read(f), f) for _, f in capped]

    async def commit(
        self, conversation_id: str, messages: Sequence[Message], *, provider_session: ProviderSessionState | None = None
    ) -> CommitReceipt:
        """Append one turn; the record's provider session becomes ``provider_session`` in the same publication."""
        return await _off_loop(self._commit, conversation_id, list(messages), provider_session)

    def _load_provider_session(self, conversation_id: str) -> ProviderSessionState | None:
        self._ensure_dir()
        _, _, journal = self._paths(conversation_id)
        if self._pending_reset(journal):
            return None
        entry = self._read(conversation_id)
        return entry.provider_session if isinstance(entry, CachedRecord) else None

    async def load_provider_session(self, conversation_id: str) -> ProviderSessionState | None:
        """The provider session the record is bound to; None without a record, for an unreadable or an unbound one."""
        return await _off_loop(self._load_provider_session, conversation_id)

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
        return await _off_loop(self._list)

    def _stats(self) -> HistoryStats:
        self._ensure_dir()
        records = self._scan()
        stages, stage_bytes = self._stage_usage()
        return HistoryStats(len(records), sum(r[1] for r in records), None, stages, stage_bytes)

    async def stats(self) -> HistoryStats:
        return await _off_loop(self._stats)

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
        64 * 1024, doc="Cap of one serialised message in bytes; longer content is cut UTF-8-safely with a marker and the original byte count.",
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


def store_from_config(agent: Agent) -> FilesHistoryStore:
    cfg = agent.config.section(CONFIG_PATH, FilesHistoryConfig)
    return FilesHistoryStore(
        agent.config.history_dir,
        cfg.max_messages,
        max_message_bytes=cfg.max_message_bytes,
        max_bytes=cfg.max_bytes,
        max_conversations=cfg.max_conversations,
        max_inactive_days=cfg.max_inactive_days,
        max_stage_bytes=cfg.max_stage_bytes,
    )


@hookimpl(trylast=True)
def register_history_stores(register: ComponentRegistrar[HistoryStore]) -> None:
    register("files", store_from_config, description="owner-only JSON records, staged and atomically published with fsync")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, FilesHistoryConfig)
