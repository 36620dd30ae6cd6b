"""Run handles: a submitted run the caller can await or cancel, and the settle window after a cancel.

:meth:`Harness.submit <monoagent._pipeline.run_control.RunControl.submit>` starts a run in a task of its
own (the *worker*) and returns its :class:`RunHandle`. The caller awaits the handle, never the
worker, which is what lets a cancellation release the caller at once even when the provider
runtime ignores it (swallows ``CancelledError``, or blocks):

1. before admission (queued in the conversation's lane, or at the continuity barrier), a cancel
   ends the request: no run events, no account;
2. after admission and before the answer's commit begins, a cancel seals the run's accepted
   partial prefix (:class:`~monoagent._pipeline.continuity.ContinuityCollector`), quarantines the
   worker's later events, starts publishing the continuity account behind the conversation's
   :class:`~monoagent._pipeline.continuity.PublicationBarrier`, frees the execution slot and the
   conversation lane, cancels the worker and rejects the caller with ``CancelledError``, all
   before it returns. The account's publication first waits for the worker to settle, for at
   most the *settle window* (``terminal_recovery_settlement_ms``, 1,000 ms by default, a host
   option of :class:`~monoagent._agent.Agent` and the harness, not a configuration key); a
   worker still running then is left to finish in the background (``runtime_warning``
   ``provider_unsettled``), quarantined: nothing it does is emitted, run as a tool, or
   committed. The account is then published, and ``run_cancelled`` follows it;
3. once the answer's commit has begun, the commit decides (see :mod:`monoagent._pipeline.harness`):
   the caller receives ``CancelledError`` when the run has completed.

Quarantine: once a run is quarantined, only the settlement's own events (the account, warnings
about it, ``run_cancelled``) are emitted; they run in a context marked by :func:`settling`,
so events from the worker, its tools' threads or any callback it scheduled are dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from monoagent._kernel.log import logger

if TYPE_CHECKING:
    from monoagent._kernel.turn_request import TurnRequest, TurnResult
    from monoagent._pipeline.run_control import RunControl, RunRecord

DEFAULT_SETTLE_WINDOW_MS = 1000
"""How long a cancelled run's account waits for the provider call to settle, unless
``Agent(terminal_recovery_settlement_ms=...)`` says otherwise."""

_settling: contextvars.ContextVar[bool] = contextvars.ContextVar("monoagent_settling", default=False)


def settling() -> None:
    """Mark the current task as a settlement: its events pass a quarantined run's emitter."""
    _settling.set(True)


def in_settlement() -> bool:
    return _settling.get()


def settle_window_ms(value: Any) -> int:
    """``value`` checked as a settle window: a positive whole number of milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"terminal_recovery_settlement_ms must be a positive whole number of milliseconds, not {value!r} "
            f"(default {DEFAULT_SETTLE_WINDOW_MS})"
        )
    return value


class RunHandle:
    """One submitted run: ``await handle`` for its :class:`~monoagent._kernel.model.TurnResult`.

    Like an ``asyncio.Task`` of the run, with a cancellation that does not wait for the provider:
    :meth:`cancel` returns after the caller has been released (see the module docstring).
    Awaiting the handle from a task that is itself cancelled cancels the run, as awaiting a task
    does. ``run_id`` is the id every event of the run carries (also when the run was cancelled
    before admission and emitted none); ``conversation_id`` is the request's.
    """

    def __init__(self, harness: RunControl, run: RunRecord, request: TurnRequest) -> None:
        self._harness = harness
        self._run = run
        self.request: TurnRequest = request
        loop = asyncio.get_running_loop()
        self._outcome: asyncio.Future[TurnResult] = loop.create_future()
        self._settled: asyncio.Future[None] | None = None  # made when someone waits for it
        self._is_settled = False
        self._decided = False  # the harness set (or is about to set) the outcome: the run's, not a waiter's cancel

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def conversation_id(self) -> str:
        return self.request.conversation_id

    def __repr__(self) -> str:
        state = "pending" if not self.done() else "cancelled" if self.cancelled() else "done"
        return f"<RunHandle {self.run_id} {self.conversation_id!r} {state}>"

    def __await__(self) -> Generator[Any, None, TurnResult]:
        return self._wait().__await__()

    async def _wait(self) -> TurnResult:
        """The outcome, awaited directly (the turn's path): a cancelled waiter cancels it, and so the run."""
        try:
            return await self._outcome
        except asyncio.CancelledError as exc:
            if self._decided:
                raise  # the run's own outcome
            committing = self._committing()
            self._harness._cancel_run(self, exc.args[0] if exc.args else None)
            if committing:  # the answer's commit decides; the caller is cancelled once the run has settled
                worker = self._run.worker
                assert worker is not None
                while not worker.done():
                    try:
                        await asyncio.wait((worker,))
                    except asyncio.CancelledError:
                        continue
            raise

    def _committing(self) -> bool:
        turn = self._run.turn
        collector = turn.continuity.collector if turn is not None and turn.continuity is not None else None
        return collector is not None and (collector.claiming or collector.claimed)

    def done(self) -> bool:
        """True once the caller's outcome is known (a result, an error, or the cancellation)."""
        return self._outcome.done()

    def cancelled(self) -> bool:
        return self._outcome.cancelled()

    def result(self) -> TurnResult:
        """The result of a finished run; raises its error, ``CancelledError``, or ``InvalidStateError`` if not done."""
        return self._outcome.result()

    def cancel(self, reason: str | None = None) -> bool:
        """Cancel the run; False when its outcome was already known.

        ``reason`` is the ``CancelledError``'s message, recorded in the continuity account when it
        is a short identifier (``user_cancelled``), else as ``cancelled``.
        """
        if self._outcome.done():
            return False
        return self._harness._cancel_run(self, reason)

    async def settled(self) -> None:
        """Wait until the run has settled: its worker ended, or its account was published (or failed to be)."""
        if self._is_settled:
            return
        if self._settled is None:
            self._settled = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._settled)

    # ------------------------------------------------------------------ called by the harness

    def _release(self, msg: str | None) -> None:
        self._decided = True
        if not self._outcome.done():
            self._outcome.cancel(msg)

    def _mark_settled(self) -> None:
        self._is_settled = True
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)

    def _finish(self, result: TurnResult | None, error: BaseException | None) -> None:
        """The worker's last step: its outcome goes to the caller, unless a cancel released the caller already.

        Called by the worker itself rather than from a done callback, so the caller wakes one
        event-loop iteration sooner (this is on every turn's path).
        """
        self._decided = True
        self._harness._forget(self)
        if self._outcome.done():
            if error is not None and not isinstance(error, asyncio.CancelledError):
                logger.debug("cancelled run {} ended late with {}: {}", self.run_id, type(error).__name__, error)
        elif isinstance(error, asyncio.CancelledError):
            self._outcome.cancel()
        elif error is not None:
            self._outcome.set_exception(error)
        else:
            assert result is not None
            self._outcome.set_result(result)
        if self._run.quarantined:
            logger.debug("cancelled run {} ended; {} of its late events were dropped", self.run_id, self._run.late_events)
        else:
            self._mark_settled()
