"""Managed tool-call lifecycles: the store interface and the per-run ledger the harness drives.

Every provider tool call is recorded twice in the tool-history store: an *invocation* record
written (and awaited) before any client sees the ``tool_call`` event, and a *result* record
written when the call settles, whether or not the turn later commits. The harness waits at most
:data:`FOREGROUND_CONFIRM_SECONDS` (250 ms) for the writer's confirmation of each record:

* confirmed: the event carries ``persistence: "persisted"``;
* still queued or syncing: ``persistence: "deferred"``, without an error code. The write stays
  live and :meth:`RunLedger.reconcile` waits for it before the run is finalised;
* rejected by the writer (a definitive error from the store): ``persistence: "failed"`` with
  ``persistence_error``.

A store that cannot be opened at all (locked by another process, unreadable) rejects writes with
:class:`ToolHistoryUnavailable` while it retries; a run reports those as one warning line with a
count, not one line per record. Every write's outcome is retrieved by the ledger, including one
that settles after the run stopped waiting for it (logged unless it is such an unavailability,
which the store reports once), so asyncio never reports a "Future exception was never retrieved".

Record ids are derived, never random: the SHA-256 of physical conversation id, run id, provider
tool-call id and phase (``invocation`` or ``result``), so a retried write is idempotent. The
store assigns sequence numbers (per-run order); timestamps are metadata.

An Agent has a tool-history store when a plugin sets ``agent.tool_history`` in its
``configure`` hook (the bundled ``tool-history`` plugin does, unless one is already set); with
none, tool events carry no ``persistence`` field and nothing is recorded.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import time
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import attrs

from monoagent.kernel.errors import MonoagentError
from monoagent.kernel.log import logger
from monoagent.kernel.model import ToolCall, ToolResult, ToolStatus

if TYPE_CHECKING:
    import asyncio

    from monoagent.kernel.turn import Turn

def _wrap_future(future: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
    import asyncio  # imported where used: plugin modules import this one at CLI start-up

    return asyncio.wrap_future(future)


FOREGROUND_CONFIRM_SECONDS = 0.25
RECONCILE_SECONDS = 10.0

Persistence = Literal["persisted", "deferred", "failed"]
Phase = Literal["invocation", "result"]


class ToolHistoryError(MonoagentError):
    """The tool-history store is unavailable, corrupt or refused an operation."""


class ToolHistoryRejected(ToolHistoryError):
    """The writer definitively rejected a record (the only cause of ``persistence: "failed"``)."""


class ToolHistoryUnavailable(ToolHistoryRejected):
    """The store cannot be opened right now (locked by another process, unreadable); it rejects
    writes without waiting while it retries opening with back-off, and records again once it can."""


def record_id(conversation_id: str, run_id: str, call_id: str, phase: Phase) -> str:
    """The derived id of one record: SHA-256 over the four parts, NUL-separated, in hex."""
    material = "\0".join((conversation_id, run_id, call_id, phase)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(material).hexdigest()


@attrs.frozen
class ToolInvocation:
    """One managed tool call as the store receives it.

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
    """One retained call as a store reports it: both records' ids, order, status and payloads.

    ``arguments`` / ``result`` are the retained (redacted, bounded) text, None when omitted;
    ``*_bytes`` are the exact original sizes of admitted values (limit + 1 for an omitted one);
    ``status`` is None while the call is in flight.
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


@runtime_checkable
class ToolHistoryStore(Protocol):
    """Where tool lifecycles are kept. Writes return a ``concurrent.futures.Future``.

    ``submit_invocation`` and ``submit_result`` must not block the event loop: they queue the
    write for the store's writer and return a future that resolves when the record is durable,
    or fails with :class:`ToolHistoryRejected` when the writer refuses it. ``confirm_timeout``
    (seconds) is how long the harness waits in the foreground; ``reconcile_timeout`` how long
    it waits for deferred writes before finalising a run.
    """

    name: str
    confirm_timeout: float
    reconcile_timeout: float

    def submit_invocation(self, invocation: ToolInvocation) -> concurrent.futures.Future[Any]: ...

    def submit_result(self, invocation: ToolInvocation, result: ToolResult, finished_at: float) -> concurrent.futures.Future[Any]: ...


@runtime_checkable
class ManagedToolHistoryStore(ToolHistoryStore, Protocol):
    """A :class:`ToolHistoryStore` that can also be read and maintained (CLI, SessionHistory, tests).

    The conformance suite (:mod:`monoagent.testing.tool_history_contract`) checks every clause:

    ``submit_invocation`` / ``submit_result``
        Idempotent by derived id; a result for an unknown invocation creates both. Sequence
        numbers increase in submission order; ``end_seq`` of a result exceeds its ``start_seq``.
        Arguments (as compact JSON) over the argument limit and results over the result limit
        are omitted wholesale before redaction (count saturated at limit + 1); everything kept
        passed through the store's redactor.
    ``records(*, conversation_id=None, logical_conversation_id=None)``
        Retained calls as :class:`ToolRecord`, in ``start_seq`` order. Raises
        :class:`ToolHistoryError` (fail closed) when the stored data is corrupt or unsafe.
    ``flush()``
        Blocks until every write submitted so far is settled.
    ``stats()`` / ``clear_logical(id)`` / ``clear_all()``
        Objects with ``calls``, ``records`` and ``bytes``; ``clear_logical`` removes ``<id>``
        and each ``<id>:<YYYY-MM-DD>`` bucket and nothing else.
    Retention
        Completed calls beyond the count, age or payload bounds are removed oldest first, each
        leaving a tombstone; calls in flight are never removed.
    """

    def records(self, *, conversation_id: str | None = None, logical_conversation_id: str | None = None) -> list[ToolRecord]: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def stats(self) -> Any: ...

    def clear_logical(self, logical_conversation_id: str) -> Any: ...

    def clear_all(self) -> Any: ...


@attrs.define
class RunLedger:
    """The tool lifecycles of one run: what was written, what is still deferred, what is open."""

    turn: Turn
    store: ToolHistoryStore | None
    open: dict[str, ToolInvocation] = attrs.Factory(dict)
    deferred: list[tuple[str, asyncio.Future[Any]]] = attrs.Factory(list)
    failures: list[str] = attrs.Factory(list)
    unavailable: list[str] = attrs.Factory(list)
    abandoned: set[asyncio.Future[Any]] = attrs.Factory(set)

    def _watch(self, what: str, future: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
        """``future`` as an asyncio future whose outcome is always retrieved (see the module docstring)."""
        waiting = _wrap_future(future)
        waiting.add_done_callback(lambda done: self._settled(what, done))
        return waiting

    def _settled(self, what: str, future: asyncio.Future[Any]) -> None:
        error = None if future.cancelled() else future.exception()
        if future in self.abandoned:
            self.abandoned.discard(future)
            if error is not None and not isinstance(error, ToolHistoryUnavailable):
                logger.warning("tool history: the {} of run {} failed after the run was finalised: {}", what, self.turn.run_id, error)

    def _failed(self, what: str, error: BaseException) -> None:
        if isinstance(error, ToolHistoryUnavailable):
            self.unavailable.append(str(error))
        else:
            self.failures.append(f"{what}: {error}")

    def _invocation(self, call: ToolCall) -> ToolInvocation:
        session = self.turn.session
        return ToolInvocation(
            conversation_id=session.conversation_id,
            logical_conversation_id=session.logical_conversation_id,
            run_id=self.turn.run_id,
            call=call,
            started_at=time.time(),
            isolated=self.turn.request.isolated,
        )

    async def _confirm(self, what: str, future: concurrent.futures.Future[Any]) -> dict[str, Any]:
        import asyncio  # imported where used: plugin modules import this one at CLI start-up

        assert self.store is not None
        waiting = self._watch(what, future)
        try:
            done, _ = await asyncio.wait({waiting}, timeout=self.store.confirm_timeout)
        except asyncio.CancelledError:
            self.deferred.append((what, waiting))  # the run settles it (reconcile) on its way out
            raise
        if not done:
            self.deferred.append((what, waiting))
            return {"persistence": "deferred"}
        error = waiting.exception()
        if error is not None:
            self._failed(what, error)
            return {"persistence": "failed", "persistence_error": self._error(error)}
        return {"persistence": "persisted"}

    def _error(self, error: BaseException) -> str:
        return self.turn.agent.redact(f"{type(error).__name__}: {error}", "error")

    async def invocation(self, call: ToolCall) -> dict[str, Any]:
        """Record the invocation of ``call``; the fields to add to its ``tool_call`` event."""
        if self.store is None:
            return {}
        invocation = self._invocation(call)
        self.open[call.id] = invocation
        try:
            future = self.store.submit_invocation(invocation)
        except ToolHistoryError as exc:
            self._failed(f"invocation of {call.name!r}", exc)
            return {"persistence": "failed", "persistence_error": self._error(exc)}
        return await self._confirm(f"invocation of {call.name!r}", future)

    async def result(self, call: ToolCall, result: ToolResult) -> dict[str, Any]:
        """Record the result of ``call``; the fields to add to its ``tool_result`` event."""
        if self.store is None:
            return {}
        invocation = self.open.pop(call.id, None) or self._invocation(call)
        try:
            future = self.store.submit_result(invocation, result, time.time())
        except ToolHistoryError as exc:
            self._failed(f"result of {call.name!r}", exc)
            return {"persistence": "failed", "persistence_error": self._error(exc)}
        return await self._confirm(f"result of {call.name!r}", future)

    def close_open(self, status: ToolStatus, reason: str) -> list[ToolInvocation]:
        """Queue a result with ``status`` for every call still open (cancelled or failed run)."""
        closed = list(self.open.values())
        self.open.clear()
        if self.store is None:
            return closed
        for invocation in closed:
            call = invocation.call
            result = ToolResult(call.id, call.name, reason, status)
            what = f"result of {call.name!r}"
            try:
                future = self.store.submit_result(invocation, result, time.time())
            except ToolHistoryError as exc:
                self._failed(what, exc)
                continue
            self.deferred.append((what, self._watch(what, future)))
        return closed

    async def reconcile(self) -> list[str]:
        """Wait (bounded) for every deferred write; the problems, one line each (empty: all durable).

        Writes rejected because the store is unavailable make one line with their count.
        """
        pending = self.deferred
        self.deferred = []
        late: set[asyncio.Future[Any]] = set()
        if pending:
            assert self.store is not None
            import asyncio

            _, late = await asyncio.wait({future for _, future in pending}, timeout=self.store.reconcile_timeout)
        problems: list[str] = []
        for what, future in pending:
            if future in late:
                self.abandoned.add(future)
                problems.append(f"{what}: still not confirmed after {self.store.reconcile_timeout:g} s")
            elif not future.cancelled() and future.exception() is not None:
                self._failed(what, future.exception())
        problems[:0] = self.failures
        if self.unavailable:
            count = len(self.unavailable)
            problems.append(f"{count} tool-history record{'s' if count > 1 else ''} of this run not written: {self.unavailable[-1]}")
        self.failures, self.unavailable = [], []
        return problems
