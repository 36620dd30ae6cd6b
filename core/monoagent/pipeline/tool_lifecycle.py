"""Managed tool-call lifecycles: the per-run ledger the harness drives over the tool-history store.

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
:class:`~monoagent.kernel.errors.ToolHistoryUnavailable` while it retries; a run reports those as
one warning line with a count, not one line per record. Every write's outcome is retrieved by the
ledger, including one that settles after the run stopped waiting for it (logged unless it is
such an unavailability, which the store reports once), so asyncio never reports a "Future
exception was never retrieved".

Record ids are derived, never random (:func:`~monoagent.kernel.interfaces.record_id`: the SHA-256
of physical conversation id, run id, provider tool-call id and phase), so a retried write is
idempotent. The store assigns sequence numbers (per-run order); timestamps are metadata.

The store is the component ``toolHistory.store`` selects (a
:class:`~monoagent.kernel.interfaces.ToolHistoryStore`, ``agent.tool_history_store()``); with
none (``toolHistory.store = "none"``), tool events carry no ``persistence`` field and nothing is
recorded.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent.kernel.errors import ToolHistoryError, ToolHistoryUnavailable
from monoagent.kernel.interfaces import ToolHistoryStore, ToolInvocation
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
        timeout = 0.0
        if pending:
            assert self.store is not None
            import asyncio

            timeout = self.store.reconcile_timeout
            _, late = await asyncio.wait({future for _, future in pending}, timeout=timeout)
        problems: list[str] = []
        for what, future in pending:
            if future in late:
                self.abandoned.add(future)
                problems.append(f"{what}: still not confirmed after {timeout:g} s")
            elif not future.cancelled() and (error := future.exception()) is not None:
                self._failed(what, error)
        problems[:0] = self.failures
        if self.unavailable:
            count = len(self.unavailable)
            problems.append(f"{count} tool-history record{'s' if count > 1 else ''} of this run not written: {self.unavailable[-1]}")
        self.failures, self.unavailable = [], []
        return problems
