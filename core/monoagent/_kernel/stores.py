"""The interfaces of the stores a turn's history lives in: the conversation history and the tool history.

A history store (``history.store``) keeps each conversation's messages; optional sub-protocols
declare what more it offers (:class:`ManagedHistoryStore`, :class:`LogicalLookupStore`,
:class:`DurableHistoryStore`, :class:`ProviderSessionStore`). A tool-history store
(``toolHistory.store``) records every managed tool call. Both are components
(:mod:`monoagent._kernel.components`), proven by the conformance suites in :mod:`monoagent.testing`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import attrs

from monoagent._kernel.model import Message, ToolCall, ToolResult

if TYPE_CHECKING:
    from monoagent._kernel.components import AgentComponents


@attrs.frozen
class CommitReceipt:
    """What a history store returns after publishing a turn."""

    conversation_id: str
    message_count: int
    bytes_written: int


@attrs.frozen
class ConversationInfo:
    """One stored conversation, as :meth:`HistoryStore.conversations` lists it: its exact id, how
    many messages it retains, when it was last committed (Unix seconds) and its size in bytes."""

    conversation_id: str
    message_count: int
    updated_at: float
    bytes: int


HistoryWarningCallback = Callable[[str, str], None]
"""``on_warning(code, message)``: how a store reports a recoverable problem during ``load``."""


@runtime_checkable
class HistoryStore(Protocol):
    """Durable conversation history, one record per exact conversation id.

    ``load`` returns the retained messages oldest first. ``commit`` appends one turn's messages
    (user message, any tool messages, the assistant answer) atomically: after it returns, the
    turn survives a crash; if it raises, the previously committed record is intact. ``reset``
    removes one conversation; ``conversations`` lists what is stored. All methods are
    coroutines; blocking I/O belongs in a worker thread.

    Every store's ``load`` takes ``on_warning``: a store calls ``on_warning(code, message)`` for
    a recoverable problem it met while loading (a stored record it could not read, see
    :class:`ManagedHistoryStore`), and a store that meets none (a database that checks what it
    stores) never calls it. A store whose ``load`` cannot take the keyword is refused when it is
    built, with an error naming its plugin.

    What a store can do beyond this is declared by the sub-protocols it implements, each checked
    when the store is built (see :data:`monoagent._kernel.components.HISTORY_STORES`):
    :class:`ManagedHistoryStore` (logical-session reset, totals, clear-all),
    :class:`LogicalLookupStore` (a cheap logical-session lookup), :class:`ProviderSessionStore`
    (durable provider sessions) and :class:`DurableHistoryStore` (the durability claim). A store
    that implements one only in part (``stats`` without ``clear_all``) is refused at build, naming
    what it lacks; the kernel asks ``agent.components.supports(store, ManagedHistoryStore)``.
    """

    name: str

    async def load(self, conversation_id: str, *, on_warning: HistoryWarningCallback | None = None) -> Sequence[Message]: ...

    async def commit(self, conversation_id: str, messages: Sequence[Message]) -> CommitReceipt: ...

    async def reset(self, conversation_id: str) -> int: ...

    async def conversations(self) -> Sequence[ConversationInfo]: ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------- logical sessions

_DAILY_BUCKET = re.compile(r"(?s)(?P<logical>.*):(?P<bucket>\d{4}-\d{2}-\d{2})")


def logical_conversation_id(conversation_id: str) -> str:
    """The logical session a physical conversation id belongs to.

    Under ``runtime.session.rollover = "daily"`` the harness keys history by
    ``<logical>:<YYYY-MM-DD>``; this strips such a date-shaped bucket suffix (and only that), so
    every store, the CLI and the harness agree on which records make up one logical session. An
    id without a bucket suffix is its own logical session.
    """
    match = _DAILY_BUCKET.fullmatch(conversation_id)
    return match.group("logical") if match else conversation_id


@attrs.frozen
class HistoryResetReport:
    """What a logical-session reset removed: the exact ids, their messages, files and bytes."""

    logical_conversation_id: str
    conversation_ids: tuple[str, ...] = ()
    messages: int = 0
    records: int = 0
    bytes: int = 0


@attrs.frozen
class HistoryStats:
    """Totals of a history store: retained conversations (records), their messages and bytes."""

    records: int
    bytes: int
    messages: int | None = None
    stages: int = 0
    stage_bytes: int = 0


@runtime_checkable
class ManagedHistoryStore(HistoryStore, Protocol):
    """A :class:`HistoryStore` that also supports logical-session reset, totals and clear-all.

    A store implements all three of ``reset_logical``, ``stats`` and ``clear_all`` or none (one
    that has some of them is refused when it is built). Without them, ``monoagent history reset``
    under daily rollover and ``monoagent history clear`` refuse, clearing nothing, and a reset
    with rollover off reports no bytes. The bundled ``files`` store implements it; the conformance
    suite (:mod:`monoagent.testing.history_contract`) checks every clause below, so a PostgreSQL
    store proves itself by running that suite unchanged. Contracts, beyond :class:`HistoryStore`'s
    (the ``load`` and ``commit`` clauses hold for every store the suite can damage records of and
    bound; the others are this sub-protocol's):

    ``load(conversation_id, *, on_warning=None)``
        As :meth:`HistoryStore.load`. A stored record that cannot be read, whatever its bytes
        (truncated, not valid JSON, nested too deep, over the store's size cap, of the wrong
        shape or types, naming another conversation), is not an error: the conversation starts
        cold (returns ``()``), ``on_warning("history_record_unreadable", message)`` is called
        once with a one-line message saying what is wrong (a field at fault is named; without a
        callback the store logs it), and the next successful ``commit`` replaces the record. A
        record of a newer version of the store, or an unsafe path (a symlink, a FIFO, a file of another owner), raises
        :class:`~monoagent._kernel.errors.HistoryStoreError` instead (fail closed: neither read nor replaced).

    ``commit(conversation_id, messages)``
        As :meth:`HistoryStore.commit`, with these guarantees: the turn is staged and published
        atomically (a reader sees the whole previous record or the whole new one); when it
        returns, the turn survives a process crash and a power cut; when it raises, the
        previous record is intact and a partial stage never counts as history; at most the
        newest ``history.maxMessages`` messages are kept; each serialised message is at most
        ``history.maxMessageBytes`` (longer content is cut UTF-8-safely and ends with a marker
        stating the original byte count); concurrent commits to one conversation, from any
        number of processes, are serialised and none is lost; commits to unrelated
        conversations do not wait for each other's I/O. Aggregate retention (records, bytes,
        days of inactivity) runs only after a successful publication and removes the oldest
        inactive conversations first, never the one just published. The record keeps the
        conversation id and its :func:`logical_conversation_id`. Every handle, the committing one
        included, reads the same history afterwards. A value that is not a ``Message`` is refused
        with an error naming its type; a commit that fails on an I/O error raises a
        ``HistoryStoreError`` whose message states the operating system's error.

    ``reset_logical(logical_conversation_id) -> HistoryResetReport``
        Removes every record whose logical session is ``logical_conversation_id`` (each daily
        bucket, and the undated id itself), atomically with respect to concurrent commits of
        that session in any process: a commit either lands before the reset (and is removed)
        or after it (and survives). Other conversations are untouched. A crash part-way leaves
        the reset to be completed by the next operation on that session; readers never see a
        half-reset session. Records that cannot be read (or are of a newer version) are removed
        like the others; what a record holds never stops a reset part-way.

    ``stats() -> HistoryStats``
        Retained records (conversations), their bytes and, when cheap, messages; live
        unpublished stages separately.

    ``clear_all() -> HistoryStats``
        Removes every record (and abandoned stages) and returns what was removed. Only the
        store's own records are read, counted (here, in ``stats`` and in retention) or removed;
        anything else in its storage is left untouched.
    """

    async def reset_logical(self, logical_conversation_id: str) -> HistoryResetReport: ...

    async def stats(self) -> HistoryStats: ...

    async def clear_all(self) -> HistoryStats: ...


@runtime_checkable
class LogicalLookupStore(HistoryStore, Protocol):
    """A :class:`HistoryStore` that answers cheaply whether a logical session has records.

    ``has_logical_records(logical_conversation_id, *, besides) -> bool``
        Whether any record of the logical session (a daily bucket or the undated id) exists
        other than the exact id ``besides``; cheap (the daily-rollover check runs it on the
        first turn of every bucket). Without it the harness answers the same question from
        ``conversations()`` (:func:`logical_session_has_records`).
    """

    async def has_logical_records(self, logical_conversation_id: str, *, besides: str) -> bool: ...


@runtime_checkable
class DurableHistoryStore(HistoryStore, Protocol):
    """A :class:`HistoryStore` that says whether its commits are durable.

    ``durable`` is a claim, not a structure, so it is a value: ``True`` promises that an
    acknowledged commit survives a process crash and a power cut, and that a commit that raises,
    or is cut off, leaves the previous record. A store whose durability depends on how it is
    configured (SQLite's ``synchronous``) says so per instance. A store claiming it proves it with
    :class:`monoagent.testing.HistoryDurabilityContract`, which holds only stores whose
    ``durable`` is ``True``; nothing else reads it. A ``durable`` that is not a bool is refused
    when the store is built.
    """

    durable: bool


@attrs.frozen
class ProviderSessionState:
    """The provider session a conversation's history record is bound to.

    ``epoch`` is a random id (``secrets.token_hex(16)``) naming one durable transcript;
    ``revision`` counts the turns committed into that transcript (0 = bound, nothing written
    yet); ``model`` is the primary ``provider:model`` the session belongs to, None for a record
    bound before sessions were bound to a model.
    """

    epoch: str
    revision: int
    model: str | None = None


@runtime_checkable
class ProviderSessionStore(HistoryStore, Protocol):
    """A :class:`HistoryStore` that keeps the provider session with each record (the transaction).

    The ``files`` session backend (``runtime.session.backend``, plugin ``session-files``) binds
    its durable transcripts to such a store's records, and refuses a store that is not one. A store that
    has ``load_provider_session`` but whose ``commit`` cannot take ``provider_session`` is refused
    when it is built.

    ``load_provider_session(conversation_id)``
        The :class:`ProviderSessionState` the current record is bound to, or None (no record, an
        unreadable one, or one committed without a provider session).
    ``commit(conversation_id, messages, *, provider_session=None)``
        As :meth:`HistoryStore.commit`, and in the same atomic publication the record's provider
        session becomes ``provider_session``: a commit without one (a continuity account, a
        host-only append) unbinds the record, so the next durable turn reseeds from history.
    """

    async def load_provider_session(self, conversation_id: str) -> ProviderSessionState | None: ...

    async def commit(
        self, conversation_id: str, messages: Sequence[Message], *, provider_session: ProviderSessionState | None = None
    ) -> CommitReceipt: ...


async def logical_session_has_records(components: AgentComponents, store: HistoryStore, logical: str, *, besides: str) -> bool:
    """Whether ``store`` holds a record of the logical session ``logical`` other than ``besides``.

    Asks the store directly when it is a :class:`LogicalLookupStore` (``components.supports``,
    answered from what was recorded when the store was built), else lists ``conversations()``.
    The daily-rollover check uses it: the first turn of a bucket is a rollover only when the
    logical session has a record elsewhere (a brand-new conversation has none).
    """
    if components.supports(store, LogicalLookupStore):
        return bool(await store.has_logical_records(logical, besides=besides))
    return any(
        info.conversation_id != besides and logical_conversation_id(info.conversation_id) == logical
        for info in await store.conversations()
    )


# --------------------------------------------------------------------------- tool history

ToolRecordPhase = Literal["invocation", "result"]


def record_id(conversation_id: str, run_id: str, call_id: str, phase: ToolRecordPhase) -> str:
    """The derived id of one tool-history record: SHA-256 over the four parts, NUL-separated, in hex.

    Derived, never random, so a retried write is idempotent.
    """
    material = "\0".join((conversation_id, run_id, call_id, phase)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(material).hexdigest()


@attrs.frozen
class ToolInvocation:
    """One managed tool call as a tool-history store receives it.

    ``conversation_id`` is the physical id (a daily bucket under rollover);
    ``logical_conversation_id`` the id the channel submitted. ``isolated`` runs are persisted
    but left out of projection and search.
    """

    conversation_id: str
    logical_conversation_id: str
    run_id: str
    call: ToolCall
    started_at: float
    isolated: bool = False

    @property
    def invocation_id(self) -> str:
        return record_id(self.conversation_id, self.run_id, self.call.id, "invocation")

    @property
    def result_id(self) -> str:
        return record_id(self.conversation_id, self.run_id, self.call.id, "result")


@attrs.frozen
class ToolRecord:
    """One retained call as a tool-history store reports it: both records' ids, order, status and payloads.

    ``arguments`` / ``result`` are the retained (redacted, bounded) text, None when omitted;
    ``*_bytes`` are the exact original sizes of admitted values (limit + 1 for an omitted one);
    ``*_truncated`` says the retained text is not the whole value (a prefix cut at the limit, or
    nothing at all: an omitted value is truncated too);
    ``status`` is None while the call is in flight. ``started_at`` / ``finished_at`` are the
    call's wall-clock times (None when a store does not keep them, and ``finished_at`` while in
    flight); ``history show --tools`` places calls among the messages by them.
    """

    invocation_id: str
    result_id: str
    conversation_id: str
    logical_conversation_id: str
    run_id: str
    call_id: str
    tool: str
    start_seq: int
    end_seq: int | None
    status: str | None
    arguments: str | None
    arguments_bytes: int
    arguments_retained_bytes: int
    arguments_truncated: bool
    arguments_omitted: bool
    result: str | None
    result_bytes: int | None
    result_retained_bytes: int | None
    result_truncated: bool
    result_omitted: bool
    isolated: bool = False
    started_at: float | None = None
    finished_at: float | None = None


@attrs.frozen
class ToolHistoryStats:
    """Totals of a tool-history store, as ``stats()`` reports them.

    ``calls`` retained (in flight or completed); ``records`` = invocations + results +
    tombstones; ``bytes`` the room the stored data takes (bytes on disk for the ``sqlite``
    store). ``payload_bytes`` (retained argument and result bytes) and ``tombstones`` are
    reported by a store that keeps them, exactly; None means the store does not report it,
    never zero.
    """

    calls: int
    records: int
    bytes: int
    payload_bytes: int | None = None
    tombstones: int | None = None


@attrs.frozen
class ToolHistoryClearReport:
    """What a clear removed: ``calls``, ``records`` (invocations + results + tombstones) and ``bytes`` freed."""

    calls: int
    records: int
    bytes: int


@runtime_checkable
class ToolHistoryStore(Protocol):
    """Where managed tool calls are recorded: the component ``toolHistory.store`` selects.

    A plugin registers one with :func:`~monoagent._kernel.hookspecs.register_tool_history_stores`;
    the Agent creates the selected one on first use (``agent.tool_history_store()``), is its one
    owner, and closes it in ``aclose()``: whatever else uses it (the harness, the ``history``
    commands, the SessionHistory tool, tests) takes the Agent's and never closes it. The harness
    writes every tool call's invocation and result through it
    (:mod:`monoagent._pipeline.tool_lifecycle`); the ``history`` commands, the SessionHistory tool
    and tests read and maintain it. Every method is a coroutine, awaited on the Agent's event
    loop; blocking I/O belongs in the store's own threads or its async driver, never on the loop.
    The conformance suite (:mod:`monoagent.testing.tool_history_contract`) checks every clause:

    ``confirm_timeout`` / ``reconcile_timeout``
        Seconds the harness waits in the foreground for a write's confirmation (by default
        0.25, the documented 250 ms), and for deferred writes before it finalises a run.
    Submission order
        A write or a clear is *submitted* when its coroutine starts running: for tasks created on
        one event loop, the order in which they were created (asyncio starts them in that
        order); for coroutines awaited one after another, the order of the awaits. A store fixes
        a call's place in that order before the coroutine first suspends (the ``sqlite`` store
        queues the write on its writer thread before its first ``await``), so the clauses below
        that speak of submission order hold however long each call then takes.
    ``write_invocation(invocation)`` / ``write_result(invocation, result, finished_at)``
        Return once the record is durable; raise
        :class:`~monoagent._kernel.errors.ToolHistoryRejected` when the store refuses it
        (:class:`~monoagent._kernel.errors.ToolHistoryUnavailable`, a subclass, while it cannot
        be reached at all), or another :class:`~monoagent._kernel.errors.ToolHistoryError` when
        its stored data is unsafe or unreadable. Idempotent by derived id (:func:`record_id`);
        a result for an unknown invocation creates both. Sequence numbers increase in submission
        order; ``end_seq`` of a result exceeds its ``start_seq``. Arguments (as compact JSON)
        over the argument limit and results over the result limit are omitted wholesale before
        redaction (count saturated at limit + 1); everything kept passed through the Agent's
        redaction chain (``kind`` ``"tool_arguments"`` or ``"tool_result"``). ``started_at``
        (the invocation's) and ``finished_at`` (the result's) are kept as given, or both None by
        a store that keeps no times. The harness runs each write as a task of its own and never
        cancels it: a foreground wait that runs out leaves the write running (``deferred``).
    ``records(*, conversation_id=None, logical_conversation_id=None)``
        Retained calls as :class:`ToolRecord`, in ``start_seq`` order (both filters must match
        when both are given). Raises :class:`~monoagent._kernel.errors.ToolHistoryError` (fail
        closed) when the stored data is corrupt or unsafe.
    ``flush()``
        Returns once every write submitted before it is settled (durable or failed). It takes
        no timeout: a caller bounds it with ``asyncio.wait_for``, the one way every coroutine is
        bounded, so the store must let it be cancelled, and cancelling it withdraws none of the
        writes it was waiting for.
    ``stats() -> ToolHistoryStats``
        Calls, records and bytes; ``payload_bytes`` and ``tombstones`` exactly, or None when
        the store does not report them (see :class:`ToolHistoryStats`).
    ``clear_logical(id)`` / ``clear_conversation(id)`` / ``clear_all()`` -> :class:`ToolHistoryClearReport`
        ``clear_logical`` removes ``<id>`` and each ``<id>:<YYYY-MM-DD>`` bucket and nothing
        else (a logical-session reset under daily rollover); ``clear_conversation`` exactly
        ``id`` (the reset with daily rollover off); ``clear_all`` everything. Each reports what
        it removed, and covers every write submitted through the same store before it, settled
        or not. A handle that never wrote (the ``history`` commands') clears what other handles
        and processes wrote.
    ``close()``
        Releases the store's resources once every write submitted before it is settled; called
        once, by the Agent that created the store, when it closes.
    Stored data
        A lock another process holds longer than the store waits makes a write fail with
        ``ToolHistoryUnavailable``, leaving nothing half-written; writes are recorded again once
        the lock is released. Data of a format version the store does not read is refused by
        every read, write and clear (``ToolHistoryError``); a fresh zero-byte data file is an
        empty store.
    Retention
        Completed calls beyond the count, age or payload bounds are removed oldest first, each
        leaving a tombstone; the payload bound measures what the count and age bounds leave;
        calls in flight are never removed. Tombstones are bounded too: the oldest go beyond
        the tombstone count, and each goes once it is older than the tombstone age.
    """

    name: str
    confirm_timeout: float
    reconcile_timeout: float

    async def write_invocation(self, invocation: ToolInvocation) -> None: ...

    async def write_result(self, invocation: ToolInvocation, result: ToolResult, finished_at: float) -> None: ...

    async def records(
        self, *, conversation_id: str | None = None, logical_conversation_id: str | None = None
    ) -> Sequence[ToolRecord]: ...

    async def flush(self) -> None: ...

    async def stats(self) -> ToolHistoryStats: ...

    async def clear_logical(self, logical_conversation_id: str) -> ToolHistoryClearReport: ...

    async def clear_conversation(self, conversation_id: str) -> ToolHistoryClearReport: ...

    async def clear_all(self) -> ToolHistoryClearReport: ...

    async def close(self) -> None: ...
