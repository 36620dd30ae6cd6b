"""The harness: one turn from request to committed result.

channel -> :meth:`Harness.run` -> per-conversation lane (one active turn per conversation;
follow-ups queue there without counting against any limit) -> admission
(``concurrency.maxPendingRuns`` runs may wait for a slot, further ones are rejected) -> session
resolution (daily bucket) -> history load -> offered tools (``filter_tools``) -> memory recall ->
user message -> sections, assembly and compaction (:mod:`monoagent.pipeline.compaction`) -> manifest
-> execution slot (``concurrency.maxConcurrentRuns``) -> provider steps
(:mod:`monoagent.pipeline.provider_call`, with one reactive compaction after a context overflow) with
the tool loop (:mod:`monoagent.pipeline.tool_loop`, capped by ``runtime.maxTurns``) -> commit
(history publish, events, ``after_commit``).

A turn that fails or is cancelled after admission commits no answer and leaves committed history
untouched; it publishes a bounded continuity account instead (:mod:`monoagent.pipeline.continuity`).

The commit is the line between the two outcomes, and the run crosses it only when the history
store says the answer is durable. A commit that fails (disk full, file too large) settles the
run as failed (``CommitFailed``, settlement ``commit_failed``) with its account. A cancellation
that arrives while the commit is in progress cannot stop it half-way (the store finishes in its
worker thread), so it waits for the outcome: after a durable commit the run completes
(``run_committed``, ``after_commit``, ``run_completed``) and only then does the caller receive
its ``CancelledError``, as asyncio's contract for a cancelled task requires; after a failed
commit the run settles as cancelled with its account (``run_cancelled``). A cancellation during
``after_commit`` interrupts that hook (``runtime_warning`` ``after_commit_cancelled``); the
commit stands and the run completes the same way.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs

from monoagent.kernel.errors import AdmissionRejected, CommitFailed, EmptyResponse, TurnFailed
from monoagent.kernel.host import await_me_maybe
from monoagent.kernel.interfaces import CommitReceipt, load_history
from monoagent.kernel.log import failure_text, logger
from monoagent.kernel.model import (
    AssembledPrompt,
    MemoryHit,
    Message,
    RunEvent,
    TurnRequest,
    TurnResult,
    UserMessagePart,
)
from monoagent.kernel.turn import SessionInfo, Turn
from monoagent.pipeline.assembly import collect_sections, compile_prompt
from monoagent.pipeline.compaction import CompactionResult, compact_proactively, compact_reactively
from monoagent.pipeline.continuity import (
    PublicationBarrier,
    RunContinuity,
    await_settlement,
    begin_settlement,
    settle_run,
)
from monoagent.pipeline.continuity_account import settlement_code
from monoagent.pipeline.provider_call import ProviderCall, partial_event_data
from monoagent.pipeline.run_handle import DEFAULT_SETTLE_WINDOW_MS, RunHandle, in_settlement, settle_window_ms, settling
from monoagent.pipeline.tool_loop import ToolLoop, offered_tools
from monoagent.text import utf8_len

if TYPE_CHECKING:
    from monoagent.agent import Agent

RECALL_MAX_HITS = 5
RECALL_MAX_BYTES = 8 * 1024

EventCallback = Callable[[RunEvent], Any]
T = TypeVar("T")


_run_ids = random.Random(os.urandom(16))
if hasattr(os, "register_at_fork"):  # a forked child must not repeat its parent's run ids
    os.register_at_fork(after_in_child=lambda: _run_ids.seed(os.urandom(16)))


def new_run_id() -> str:
    """A time-ordered, unique run id: 12 hex digits of milliseconds, then 10 random ones.

    The random part comes from a generator seeded per process (again in a forked child) from ``os.urandom``: run ids
    must not collide, they need not be secret.
    """
    return f"{int(time.time() * 1000):012x}{_run_ids.getrandbits(40):010x}"


def gate_recall(hits: Sequence[MemoryHit]) -> tuple[MemoryHit, ...]:
    """Highest scores first, at most 5 hits and 8 KB of text in all; a hit that does not fit is skipped."""
    kept: list[MemoryHit] = []
    used = 0
    for hit in sorted(hits, key=lambda h: -h.score):
        if len(kept) == RECALL_MAX_HITS:
            break
        size = utf8_len(hit.text)
        if not hit.text.strip() or used + size > RECALL_MAX_BYTES:
            continue
        kept.append(hit)
        used += size
    return tuple(kept)


@attrs.define
class _Lane:
    """One conversation's lane (``key``: the request's conversation id): its lock and how many turns hold or await it."""

    key: str
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    users: int = 0


@attrs.define
class _Run:
    """Book-keeping of one run: its events, and what it holds (lane, slot) so a cancel can free them at once."""

    run_id: str
    conversation_id: str
    callback: EventCallback | None
    seq: int = 0
    observe: Callable[[str, dict[str, Any]], None] | None = None
    worker: asyncio.Task[None] | None = None
    turn: Turn | None = None
    lane: _Lane | None = None
    lane_locked: bool = False
    slot: Literal["pending", "held"] | None = None
    quarantined: bool = False
    late_events: int = 0


class Harness:
    """Runs turns for one Agent; one harness (and so one set of limits) per channel."""

    def __init__(self, agent: Agent, *, terminal_recovery_settlement_ms: int = DEFAULT_SETTLE_WINDOW_MS) -> None:
        self.agent = agent
        self.settle_window_ms = settle_window_ms(terminal_recovery_settlement_ms)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lanes: dict[str, _Lane] = {}
        self._slots: asyncio.Semaphore | None = None
        self._pending = 0
        self._running = 0
        self._buckets: dict[str, str] = {}
        self._continuity = PublicationBarrier()
        self._live: dict[str, list[RunHandle]] = {}
        self._settlements: set[asyncio.Task[None]] = set()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the harness last ran turns on (None before the first)."""
        return self._loop

    # ------------------------------------------------------------------ primitives bound to the loop

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._lanes = {}
            self._slots = asyncio.Semaphore(self.agent.config.concurrency.max_concurrent_runs)
            self._pending = 0
            self._running = 0
            self._live = {}
            self._settlements = set()

    async def _enter_lane(self, run: _Run) -> None:
        """Take the conversation's lane for ``run`` (queued behind the turn holding it)."""
        lane = self._lanes.get(run.conversation_id)
        if lane is None:
            lane = self._lanes[run.conversation_id] = _Lane(run.conversation_id)
        lane.users += 1
        run.lane = lane
        try:
            await lane.lock.acquire()
        except BaseException:
            self._leave_lane(run)
            raise
        run.lane_locked = True

    def _leave_lane(self, run: _Run) -> None:
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

    def _release_slot(self, run: _Run) -> None:
        """Give back ``run``'s place in admission or its execution slot (once, as for the lane)."""
        slot, run.slot = run.slot, None
        if slot == "held":
            assert self._slots is not None
            self._running -= 1
            self._slots.release()
        elif slot == "pending":
            self._pending -= 1

    # ------------------------------------------------------------------ events

    def _emitter(self, run: _Run) -> Callable[[str, dict[str, Any]], None]:
        hooks = self.agent.hooks
        agent = self.agent

        def emit(type: str, data: dict[str, Any]) -> None:
            if run.quarantined and not in_settlement():
                run.late_events += 1  # the late work of a cancelled run: never emitted, never in its account
                return
            run.seq += 1
            if run.observe is not None:
                run.observe(type, data)
            event = RunEvent(type, run.run_id, run.conversation_id, run.seq, time.time(), data)
            for plugin, _, error in hooks.on_run_event(event=event, agent=agent):
                if error is not None:
                    logger.bind(plugin=plugin).opt(exception=error).warning(
                        "run-event observer in plugin {} failed on {}: {}", plugin, type, failure_text(error)
                    )
            if run.callback is not None:
                run.callback(event)

        return emit

    # ------------------------------------------------------------------ session

    def _session(self, request: TurnRequest, started: float, *, record: bool = True) -> SessionInfo:
        """The turn's session; ``record=False`` (a preview) leaves the daily bucket unmarked as seen."""
        cfg = self.agent.config.runtime.session
        logical = request.conversation_id
        physical, bucket, new_bucket = logical, None, False
        if cfg.rollover == "daily" and request.delivery != "console":
            tz = None
            if cfg.rollover_timezone:
                from zoneinfo import ZoneInfo

                tz = ZoneInfo(cfg.rollover_timezone)
            bucket = datetime.fromtimestamp(started, tz).astimezone(tz).strftime("%Y-%m-%d")
            physical = f"{logical}:{bucket}"
            new_bucket = self._buckets.get(logical) != bucket
            if record:
                self._buckets[logical] = bucket
        return SessionInfo(
            delivery=request.delivery,
            mode=cfg.mode,
            logical_conversation_id=logical,
            conversation_id=physical,
            bucket=bucket,
            new_bucket=new_bucket,
            memory_configured=bool(self.agent.config.memory.tiers),
        )

    # ------------------------------------------------------------------ the turn

    def submit(self, request: TurnRequest, *, on_event: EventCallback | None = None) -> RunHandle:
        """Start one turn and return its :class:`~monoagent.pipeline.run_handle.RunHandle` (await it for the result).

        The turn's models are resolved first (their provider factories run): an unknown prefix, a
        malformed model string or a provider without its API key raises here, before admission,
        with no run events and no continuity account.
        """
        self._bind_loop()
        for model in dict.fromkeys((request.model or self.agent.model, *self.agent.config.runtime.fallbacks)):
            self.agent.provider(model)
        run = _Run(new_run_id(), request.conversation_id, on_event)
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

    async def _drive(self, request: TurnRequest, run: _Run, handle: RunHandle) -> None:
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
        """Cancel a run whose caller is still waiting (see :mod:`monoagent.pipeline.run_handle`)."""
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

    async def _provider_settled(self, run: _Run) -> None:
        """Wait for a cancelled run's worker to end, for at most the settle window."""
        settling()
        assert run.worker is not None and run.turn is not None
        if run.worker.done() or run.worker.get_loop() is not asyncio.get_running_loop():
            return  # ended, or a publication retried on a later loop: the old loop's worker is gone
        done, _ = await asyncio.wait((run.worker,), timeout=self.settle_window_ms / 1000)
        if not done:
            logger.warning(
                "run {} was cancelled, but its provider call or tool did not stop within {} ms; it is left to finish "
                "in the background and whatever it still produces is discarded",
                run.run_id, self.settle_window_ms,
            )
            run.turn.emit("runtime_warning", code="provider_unsettled", settle_window_ms=self.settle_window_ms)

    async def _settle_cancelled(
        self, handle: RunHandle, turn: Turn, publication: asyncio.Task[None] | None, error: asyncio.CancelledError
    ) -> None:
        """A cancelled run's account, then its terminal event; the caller was released before."""
        settling()
        try:
            await await_settlement(turn, publication)
            turn.emit("run_cancelled", reason="cancelled", **partial_event_data(turn))
        finally:
            handle._mark_settled()

    async def _run_admitted_turn(self, request: TurnRequest, run: _Run) -> TurnResult:
        """Admit the turn (or reject it), run it to its commit, and settle it on cancellation or failure."""
        assert self._slots is not None
        await self._continuity.wait(request.conversation_id)  # an earlier turn's account is published first
        limit = self.agent.config.concurrency.max_pending_runs
        width = self.agent.config.concurrency.max_concurrent_runs
        if self._pending + self._running >= width + limit:  # admitted runs each hold a slot or will wait for one
            raise AdmissionRejected(
                f"{self._pending} runs already wait for an execution slot (concurrency.maxPendingRuns = {limit}); "
                f"try again later or raise the limit"
            )
        started = time.time()
        session = self._session(request, started)
        run.conversation_id = session.conversation_id
        turn = run.turn = Turn(
            agent=self.agent,
            request=request,
            run_id=run.run_id,
            model=request.model or self.agent.model,
            session=session,
            emitter=self._emitter(run),
            started_at=started,
        )
        run.observe = RunContinuity.of(turn).collector.observe
        run.slot = "pending"
        self._pending += 1  # no await since the check: admission stays atomic; the finally below undoes it
        try:
            turn.emit(
                "run_started",
                model=turn.model,
                channel=request.channel,
                delivery=request.delivery,
                logical_conversation_id=session.logical_conversation_id,
            )
            turn.report_invalid_unicode("request", request.invalid_unicode)
            if session.new_bucket and session.bucket:
                turn.emit("session_boundary", kind="rollover", bucket=session.bucket)
            prompt = await self.prepare(turn)
            await self._slots.acquire()
            run.slot = "held"
            self._pending -= 1
            self._running += 1
            result = await self._execute(turn, prompt)
        except asyncio.CancelledError as exc:
            if run.quarantined or RunContinuity.of(turn).collector.claimed:
                raise  # settled by the cancel that released the caller, or cancelled after its durable commit
            await settle_run(turn, self._continuity, "cancelled", exc)  # the account, before the terminal event
            turn.emit("run_cancelled", reason="cancelled", **partial_event_data(turn))
            raise
        except BaseException as exc:
            if run.quarantined:
                raise
            await settle_run(turn, self._continuity, "failed", exc)
            turn.emit("run_failed", error=self.agent.redact(f"{type(exc).__name__}: {exc}", "error"), settlement=settlement_code(exc))
            raise
        finally:
            self._release_slot(run)
        return result

    async def prepare(self, turn: Turn) -> AssembledPrompt:
        """Everything before the provider: history, recall, compaction, sections, assembly."""
        agent = self.agent
        hooks = agent.hooks
        store = agent.history_store
        turn.history = tuple(await load_history(
            store, turn.conversation_id, lambda code, message: turn.emit("runtime_warning", code=code, message=message)
        ))
        turn.tools = offered_tools(turn)  # the filter_tools step
        recalled: list[MemoryHit] = []
        for value in hooks.recall_memory(turn=turn):
            hits = await await_me_maybe(value)
            recalled.extend(hits or ())
        turn.recalled = gate_recall(recalled)
        if turn.recalled:
            turn.emit(
                "memory_recalled",
                hits=[{"source": h.source, "bytes": utf8_len(h.text)} for h in turn.recalled],
                bytes=sum(utf8_len(h.text) for h in turn.recalled),
            )
        parts: list[UserMessagePart] = []
        for part in hooks.augment_user_message(turn=turn, recalled=turn.recalled):
            if isinstance(part, UserMessagePart):
                parts.append(part)
            else:
                parts.extend(part)
        parts.sort(key=lambda p: p.order)
        user_message = hooks.render_user_message(turn=turn, parts=tuple(parts))
        if not isinstance(user_message, Message):
            raise TurnFailed("no plugin rendered the current user message (hook render_user_message)")
        prompt = (await self._compact(turn, turn.history, user_message)).prompt
        turn.emit("prompt_manifest", manifest=agent.unstructure(prompt.manifest))
        return prompt

    def _assemble(self, turn: Turn, history: tuple[Message, ...], user_message: Message) -> AssembledPrompt:
        """The request built from ``history``: sections, then the current user message last."""
        sections = collect_sections(self.agent.hooks, turn, history)
        return compile_prompt(sections, [user_message], turn.diagnostics, history_messages=len(history))

    async def _compact(self, turn: Turn, history: tuple[Message, ...], user_message: Message) -> CompactionResult:
        """The proactive compaction step (:mod:`monoagent.pipeline.compaction`); ``.applied`` when it changed the history."""
        return await compact_proactively(turn, history, lambda view: self._assemble(turn, view, user_message))

    async def _compact_after_overflow(self, turn: Turn, refused: AssembledPrompt) -> AssembledPrompt | None:
        """The reactive compaction step: a smaller request after a context overflow, or None."""
        user_message = refused.messages[-1]
        smaller = await compact_reactively(turn, refused, lambda view: self._assemble(turn, view, user_message))
        if smaller is not None:
            turn.emit("prompt_manifest", manifest=self.agent.unstructure(smaller.manifest))
        return smaller

    async def _execute(self, turn: Turn, prompt: AssembledPrompt) -> TurnResult:
        agent = self.agent
        prelude = ""
        if turn.session.new_bucket and turn.session.bucket and agent.config.runtime.session.rollover_notice:
            prelude = f"New session bucket started: {turn.session.bucket}.\n\n"
            turn.emit("text_delta", text=prelude, step=0)
        call = ProviderCall(turn, prompt, ToolLoop(turn), compact=lambda refused: self._compact_after_overflow(turn, refused))
        provided = await call.run()  # retries, fallbacks, the tool loop, one reactive compaction
        outcome, usage, activity, step = provided.outcome, provided.usage, provided.tool_activity, provided.steps
        if not outcome.text.strip():
            raise EmptyResponse(
                f"{provided.model} answered with no text and no tool call; nothing was committed "
                f"(the turn settles as empty_response)"
            )
        text = prelude + outcome.text
        user = Message("user", turn.request.text, name=turn.request.sender.label if turn.request.sender else None)
        answer = Message("assistant", text)
        continuity = RunContinuity.of(turn)
        await continuity.reconcile(turn)  # deferred tool-history writes settle before the run does
        receipt, cancelled = await self._commit(turn, [user, answer])
        continuity.collector.claimed = True  # durable: from here on, no continuity account replaces this turn
        result = TurnResult(
            run_id=turn.run_id,
            conversation_id=turn.conversation_id,
            text=text,
            model=provided.model,
            usage=usage,
            tool_activity=tuple(activity),
            manifest=call.prompt.manifest,
            steps=step,
            attempt=provided.attempt,
        )
        turn.emit("run_committed", messages=receipt.message_count, bytes=receipt.bytes_written)
        for plugin, value, error in agent.hooks.after_commit(turn=turn, result=result):
            try:
                if error is not None:
                    raise error
                await await_me_maybe(value)
            except asyncio.CancelledError as exc:  # the commit stands; this hook was interrupted
                cancelled = cancelled or exc
                turn.emit("runtime_warning", code="after_commit_cancelled", plugin=plugin)
            except Exception as exc:  # the commit stands; say what did not happen
                turn.emit(
                    "runtime_warning",
                    code="after_commit_failed",
                    plugin=plugin,
                    error=agent.redact(f"{type(exc).__name__}: {exc}", "error"),
                )
        turn.emit(
            "run_completed", model=provided.model, steps=step, usage=attrs.asdict(usage), chars=len(text), **provided.event_data()
        )
        if cancelled is not None:
            raise cancelled
        return result

    async def _commit(self, turn: Turn, messages: list[Message]) -> tuple[CommitReceipt, asyncio.CancelledError | None]:
        """Commit ``messages``; a cancellation meanwhile waits for the outcome (see the module docstring).

        Returns the receipt and the cancellation to re-raise once the run has completed, if one
        arrived. Raises that cancellation if the commit failed after it, else :class:`CommitFailed`.
        """
        collector = RunContinuity.of(turn).collector
        if collector.sealed:  # cancelled, its account under way: a provider that ignored the cancel commits nothing
            raise asyncio.CancelledError
        collector.claiming = True
        commit, cancelled = await _outcome(self.agent.history_store.commit(turn.conversation_id, messages), None)
        error = asyncio.CancelledError("the history store cancelled the commit") if commit.cancelled() else commit.exception()
        if error is None:
            return commit.result(), cancelled
        landed, cancelled = await self._landed(turn, messages, error, cancelled)
        if landed is not None:
            return landed, cancelled
        if cancelled is not None:
            raise cancelled from error
        raise CommitFailed(
            f"this turn's answer was not committed to history ({type(error).__name__}: {error}); "
            f"the turn settles as commit_failed and its continuity account is published instead"
        ) from error

    async def _landed(
        self, turn: Turn, messages: list[Message], error: BaseException, cancelled: asyncio.CancelledError | None
    ) -> tuple[CommitReceipt | None, asyncio.CancelledError | None]:
        """After a commit that raised: a receipt if the store published ``messages`` all the same.

        A store may publish and then fail (the ``files`` store's directory fsync, a database whose
        acknowledgement is lost), so the conversation is read back; when it ends with exactly these
        messages the answer is in history, and an account beside it would contradict it. The run
        then completes with a ``commit_not_confirmed`` warning. Cancellations wait, as for the commit.
        """
        load, cancelled = await _outcome(self.agent.history_store.load(turn.conversation_id), cancelled)
        if load.cancelled() or load.exception() is not None or list(load.result())[-len(messages) :] != messages:
            return None, cancelled
        turn.emit(
            "runtime_warning",
            code="commit_not_confirmed",
            error=self.agent.redact(f"{type(error).__name__}: {error}", "error"),
            message="the history store raised after publishing this turn's answer; the answer is in history, "
            "but may not survive a crash",
        )
        return CommitReceipt(turn.conversation_id, len(load.result()), 0), cancelled


async def _outcome(
    awaitable: Awaitable[T], cancelled: asyncio.CancelledError | None
) -> tuple[asyncio.Task[T], asyncio.CancelledError | None]:
    """Run ``awaitable`` in a task of its own to its outcome; a cancellation meanwhile waits for it.

    Returns the finished task and the last cancellation that arrived (else ``cancelled``), for
    the caller to re-raise once it has settled. The task wakes this one from its own last step,
    an event-loop iteration sooner than ``asyncio.wait`` (the commit is on every turn's path).
    """
    loop = asyncio.get_running_loop()
    waiter = [loop.create_future()]

    async def run() -> T:
        try:
            return await awaitable
        finally:
            if not waiter[0].done():
                waiter[0].set_result(None)

    task = loop.create_task(run())
    while not task.done():
        try:
            await waiter[0]
        except asyncio.CancelledError as exc:
            cancelled = exc
            waiter[0] = loop.create_future()
    return task, cancelled
