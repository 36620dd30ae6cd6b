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

Each write is a task of its own (the store's ``write_invocation`` / ``write_result`` coroutine,
started in the order the calls happen, which is the order the store numbers them in). A wait
that runs out never cancels it: :func:`asyncio.wait` leaves the task running, and a cancelled run
leaves its writes running too, to be reconciled on the run's way out.

A store that cannot be opened at all (locked by another process, unreadable) rejects writes with
:class:`~monoagent._kernel.errors.ToolHistoryUnavailable` while it retries; a run reports those as
one warning line with a count, not one line per record. Every write's outcome is retrieved by the
ledger, including one that settles after the run stopped waiting for it (logged unless it is
such an unavailability, which the store reports once), so asyncio never reports a "Task
exception was never retrieved".

Record ids are derived, never random (:func:`~monoagent._kernel.stores.record_id`: the SHA-256
of physical conversation id, run id, provider tool-call id and phase), so a retried write is
idempotent. The store assigns sequence numbers (per-run order); timestamps are metadata.

The store is the component ``toolHistory.store`` selects (a
:class:`~monoagent._kernel.stores.ToolHistoryStore`, ``agent.tool_history_store()``); with
none (``toolHistory.store = "none"``), tool events carry no ``persistence`` field and nothing is
recorded.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent._kernel.errors import ToolHistoryUnavailable
from monoagent._kernel.log import logger
from monoagent._kernel.model import ToolCall, ToolResult, ToolStatus
from monoagent._kernel.stores import ToolHistoryStore, ToolInvocation

if TYPE_CHECKING:
    import asyncio

    from monoagent._pipeline.turn_run import TurnRun


FOREGROUND_CONFIRM_SECONDS = 0.25
RECONCILE_SECONDS = 10.0

Persistence = Literal["persisted", "deferred", "failed"]


@attrs.define
class RunLedger:
    """The tool lifecycles of one run: what was written, what is still deferred, what is open."""

    turn: TurnRun
    store: ToolHistoryStore | None
    open: dict[str, ToolInvocation] = attrs.Factory(dict)
    deferred: list[tuple[str, asyncio.Task[None]]] = attrs.Factory(list)
    failures: list[str] = attrs.Factory(list)
    unavailable: list[str] = attrs.Factory(list)
    abandoned: set[asyncio.Task[None]] = attrs.Factory(set)

    def _start(self, what: str, write: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """``write`` as a task whose outcome is always retrieved (see the module docstring)."""
        import asyncio  # imported where used: plugin modules import this one at CLI start-up

        task = asyncio.ensure_future(write)
        task.add_done_callback(lambda done: self._settled(what, done))
        return task

    def _settled(self, what: str, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        if task in self.abandoned:
            self.abandoned.discard(task)
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

    async def _confirm(self, what: str, write: Coroutine[Any, Any, None]) -> dict[str, Any]:
        import asyncio  # imported where used: plugin modules import this one at CLI start-up

        assert self.store is not None
        task = self._start(what, write)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.store.confirm_timeout)
        except asyncio.CancelledError:
            self.deferred.append((what, task))  # the run settles it (reconcile) on its way out
            raise
        if not done:
            self.deferred.append((what, task))
            return {"persistence": "deferred"}
        error = None if task.cancelled() else task.exception()
        if task.cancelled() or error is not None:
            error = error or RuntimeError("the write was cancelled")
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
        return await self._confirm(f"invocation of {call.name!r}", self.store.write_invocation(invocation))

    async def result(self, call: ToolCall, result: ToolResult) -> dict[str, Any]:
        """Record the result of ``call``; the fields to add to its ``tool_result`` event."""
        if self.store is None:
            return {}
        invocation = self.open.pop(call.id, None) or self._invocation(call)
        return await self._confirm(f"result of {call.name!r}", self.store.write_result(invocation, result, time.time()))

    def close_open(self, status: ToolStatus, reason: str) -> list[ToolInvocation]:
        """Start a result write with ``status`` for every call still open (cancelled or failed run).

        Called on the event loop; the writes start in the order the calls were opened.
        """
        closed = list(self.open.values())
        self.open.clear()
        if self.store is None:
            return closed
        for invocation in closed:
            call = invocation.call
            result = ToolResult(call.id, call.name, reason, status)
            what = f"result of {call.name!r}"
            self.deferred.append((what, self._start(what, self.store.write_result(invocation, result, time.time()))))
        return closed

    async def reconcile(self) -> list[str]:
        """Wait (bounded) for every deferred write; the problems, one line each (empty: all durable).

        Writes rejected because the store is unavailable make one line with their count.
        """
        pending = self.deferred
        self.deferred = []
        late: set[asyncio.Task[None]] = set()
        timeout = 0.0
        if pending:
            assert self.store is not None
            import asyncio

            timeout = self.store.reconcile_timeout
            _, late = await asyncio.wait({task for _, task in pending}, timeout=timeout)
        problems: list[str] = []
        for what, task in pending:
            if task in late:
                self.abandoned.add(task)
                problems.append(f"{what}: still not confirmed after {timeout:g} s")
            elif not task.cancelled() and (error := task.exception()) is not None:
                self._failed(what, error)
        problems[:0] = self.failures
        if self.unavailable:
            count = len(self.unavailable)
            problems.append(f"{count} tool-history record{'s' if count > 1 else ''} of this run not written: {self.unavailable[-1]}")
        self.failures, self.unavailable = [], []
        return problems
