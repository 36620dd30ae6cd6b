"""Run control: run ids, conversation lanes, admission places and execution slots, run handles and cancellation.

The part of :class:`~monoagent._pipeline.harness.Harness` that decides who runs and who waits, and
what a cancellation frees (:class:`RunControl`, which the harness extends); the turn itself is the
harness's. A run's worker holds its lane (one active turn per conversation) and, once admitted,
its place in admission and then its execution slot, each recorded on its :class:`RunRecord` so
that whichever comes first, the run's end or a cancel releasing the caller at once (see
:mod:`monoagent._pipeline.run_handle`), frees it exactly once.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent._kernel.log import logger
from monoagent._pipeline.client_tools import check_registered
from monoagent._pipeline.continuity import PublicationBarrier, await_settlement, begin_settlement
from monoagent._pipeline.provider_call import partial_event_data
from monoagent._pipeline.run_handle import RunHandle, settling
from monoagent._pipeline.sessions import retire_settling

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.model import RunEvent
    from monoagent._kernel.turn_request import TurnRequest, TurnResult
    from monoagent._pipeline.turn_run import TurnRun

EventCallback = Callable[["RunEvent"], object]

_run_ids = random.Random(os.urandom(16))
if hasattr(os, "register_at_fork"):  # a forked child must not repeat its parent's run ids
    os.register_at_fork(after_in_child=lambda: _run_ids.seed(os.urandom(16)))


def new_run_id() -> str:
    """A time-ordered, unique run id: 12 hex digits of milliseconds, then 10 random ones.

    The random part comes from a generator seeded per process (again in a forked child) from ``os.urandom``: run ids
    must not collide, they need not be secret.
    """
    return f"{int(time.time() * 1000):012x}{_run_ids.getrandbits(40):010x}"


@attrs.define
class ConversationLane:
    """One conversation's lane (``key``: the request's conversation id): its lock and how many turns hold or await it."""

    key: str
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    users: int = 0


@attrs.define
class RunRecord:
    """Book-keeping of one run: its events, and what it holds (lane, slot) so a cancel can free them at once."""

    run_id: str
    conversation_id: str
    callback: EventCallback | None
    seq: int = 0
    observe: Callable[[str, dict[str, Any]], None] | None = None
    worker: asyncio.Task[None] | None = None
    turn: TurnRun | None = None
    lane: ConversationLane | None = None
    lane_locked: bool = False
    slot: Literal["pending", "held"] | None = None
    quarantined: bool = False
    late_events: int = 0


class RunControl:
    """Lanes, slots, handles and cancellation of a :class:`~monoagent._pipeline.harness.Harness` (its base class)."""

    agent: Agent
    settle_window_ms: int
    _lanes: dict[str, ConversationLane]
    _slots: asyncio.Semaphore | None
    _pending: int
    _running: int
    _continuity: PublicationBarrier
    _live: dict[str, list[RunHandle]]
    _settlements: set[asyncio.Task[None]]

    def _bind_loop(self) -> None:
        raise NotImplementedError

    async def _run_admitted_turn(self, request: TurnRequest, run: RunRecord) -> TurnResult:
        raise NotImplementedError

    async def _enter_lane(self, run: RunRecord) -> None:
        """Take the conversation's lane for ``run`` (queued behind the turn holding it)."""
        lane = self._lanes.get(run.conversation_id)
        if lane is None:
            lane = self._lanes[run.conversation_id] = ConversationLane(run.conversation_id)
        lane.users += 1
        run.lane = lane
        try:
            await lane.lock.acquire()
        except BaseException:
            self._leave_lane(run)
            raise
        run.lane_locked = True

    def _leave_lane(self, run: RunRecord) -> None:
        """Free ``run``'s lane (once: the run's end and a cancel both call it); drop it when no turn holds or awaits it."""
        lane, run.lane = run.lane, None
        if lane is None:
            return
        if run.lane_locked:
            run.lane_locked = False
            lane.lock.release()
        lane.users -= 1
        if lane.users == 0 and self._lanes.get(lane.key) is lane:
            del self._lanes[lane.key]

    def _release_slot(self, run: RunRecord) -> None:
        """Give back ``run``'s place in admission or its execution slot (once, as for the lane)."""
        slot, run.slot = run.slot, None
        if slot == "held":
            assert self._slots is not None
            self._running -= 1
            self._slots.release()
        elif slot == "pending":
            self._pending -= 1

    # ------------------------------------------------------------------ events

    def submit(self, request: TurnRequest, *, on_event: EventCallback | None = None) -> RunHandle:
        """Start one turn and return its :class:`~monoagent._pipeline.run_handle.RunHandle` (await it for the result).

        The turn's models are resolved first (their provider factories run): an unknown prefix, a
        malformed model string or a provider without its API key raises here, before admission,
        with no run events and no continuity account; so do client tools named like a tool the agent
        registered (:class:`~monoagent._kernel.errors.ClientToolsRefused`).
        """
        self._bind_loop()
        for model in dict.fromkeys((request.model or self.agent.model, *self.agent.config.runtime.fallbacks)):
            self.agent.provider(model)
        check_registered(self.agent, request)  # client tools named like the agent's: refused before admission
        if request.proactive and not request.isolated and self.agent.config.runtime.session.isolate_proactive:
            request = attrs.evolve(request, isolated=True)
        run = RunRecord(new_run_id(), request.conversation_id, on_event)
        handle = RunHandle(self, run, request)
        run.worker = asyncio.ensure_future(self._drive(request, run, handle))
        self._live.setdefault(request.conversation_id, []).append(handle)
        return handle

    async def run(self, request: TurnRequest, *, on_event: EventCallback | None = None) -> TurnResult:
        """Run one turn to its committed result, or raise (committing nothing); cancelling the caller cancels the turn."""
        return await self.submit(request, on_event=on_event)

    def cancel(self, conversation_id: str, msg: str | None = None) -> int:
        """Cancel every unfinished run of ``conversation_id`` (the request's id), queued ones included; how many."""
        return sum(handle.cancel(msg) for handle in list(self._live.get(conversation_id, ())))

    async def wait_settled(self) -> None:
        """Wait until every cancelled run of this harness has settled (its account published, or failed to be)."""
        loop = asyncio.get_running_loop()
        while pending := [t for t in self._settlements if not t.done() and t.get_loop() is loop]:
            await asyncio.wait(pending)

    def _forget(self, handle: RunHandle) -> None:
        """Take an ended run off its conversation's list of live runs (what :meth:`cancel` reaches)."""
        live = self._live.get(handle.conversation_id)
        if live is not None and handle in live:
            live.remove(handle)
            if not live:
                del self._live[handle.conversation_id]

    async def _drive(self, request: TurnRequest, run: RunRecord, handle: RunHandle) -> None:
        """The worker of one run: its lane, then the turn; the outcome goes to the handle, never out of the task."""
        try:
            await self._enter_lane(run)
            try:
                result = await self._run_admitted_turn(request, run)
            finally:
                self._leave_lane(run)
        except (Exception, asyncio.CancelledError) as exc:
            handle._finish(None, exc)
        else:
            handle._finish(result, None)

    def _cancel_run(self, handle: RunHandle, msg: str | None) -> bool:
        """Cancel a run whose caller is still waiting (see :mod:`monoagent._pipeline.run_handle`)."""
        run = handle._run
        assert run.worker is not None
        if run.worker.done():
            return False  # its outcome is on its way to the caller
        turn = run.turn
        if turn is not None and turn.continuity is not None:
            collector = turn.continuity.collector
            if collector.claiming or collector.claimed:  # the answer's commit decides; the caller waits for it
                return run.worker.cancel(msg)
            if not collector.sealed:
                run.quarantined = True
                error = asyncio.CancelledError(msg) if msg is not None else asyncio.CancelledError()
                publication = begin_settlement(
                    turn, self._continuity, "cancelled", error, settle=lambda: self._provider_settled(run)
                )
                settlement = asyncio.ensure_future(self._settle_cancelled(handle, turn, publication, error))
                self._settlements.add(settlement)
                settlement.add_done_callback(self._settlements.discard)
        self._release_slot(run)
        self._leave_lane(run)
        run.worker.cancel(msg)
        handle._release(msg)
        return True

    async def _provider_settled(self, run: RunRecord) -> None:
        """Wait for a cancelled run's worker to end, for at most the settle window; then retire its warm session."""
        settling()
        assert run.worker is not None and run.turn is not None
        # A worker of an earlier loop (a publication retried on a later one) is gone: nothing to wait for.
        if not run.worker.done() and run.worker.get_loop() is asyncio.get_running_loop():
            done, _ = await asyncio.wait((run.worker,), timeout=self.settle_window_ms / 1000)
            if not done:
                logger.warning(
                    "run {} was cancelled, but its provider call or tool did not stop within {} ms; it is left to "
                    "finish in the background and whatever it still produces is discarded",
                    run.run_id, self.settle_window_ms,
                )
                run.turn.emit("runtime_warning", code="provider_unsettled", settle_window_ms=self.settle_window_ms)
        await retire_settling(run.turn, "cancelled_turn")

    async def _settle_cancelled(
        self, handle: RunHandle, turn: TurnRun, publication: asyncio.Task[None] | None, error: asyncio.CancelledError
    ) -> None:
        """A cancelled run's account, then its terminal event; the caller was released before."""
        settling()
        try:
            await await_settlement(turn, publication)
            turn.emit("run_cancelled", reason="cancelled", **partial_event_data(turn))
        finally:
            handle._mark_settled()
