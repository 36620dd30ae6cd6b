"""The harness: one turn from request to committed result.

channel -> :meth:`Harness.run` -> per-conversation lane (one active turn per conversation;
follow-ups queue there without counting against any limit) -> admission
(``concurrency.maxPendingRuns`` runs may wait for a slot, further ones are rejected) -> session
resolution (daily bucket) -> history load -> warm session (continuous mode,
:mod:`monoagent._pipeline.sessions`) -> offered tools (``enabled=``, ``filter_tools``, ``hide_tools``) -> memory recall ->
user message -> sections, assembly and compaction (:mod:`monoagent._pipeline.compaction`) -> manifest
-> execution slot (``concurrency.maxConcurrentRuns``) -> provider steps
(:mod:`monoagent._pipeline.provider_call`, with one reactive compaction after a context overflow) with
the tool loop (:mod:`monoagent._pipeline.tool_loop`, capped by ``runtime.maxTurns``) -> commit
(history publish and the warm session's transcript, events, ``after_commit``).

A turn that fails or is cancelled after admission commits no answer and leaves committed history
untouched; it publishes a bounded continuity account instead (:mod:`monoagent._pipeline.continuity`).

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
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from monoagent._boundary.text import utf8_len
from monoagent._kernel import hookspecs
from monoagent._kernel.errors import AdmissionRejected, ClientToolsRefused, CommitFailed, EmptyResponse, TurnFailed
from monoagent._kernel.host import await_me_maybe
from monoagent._kernel.log import logger
from monoagent._kernel.model import (
    AssembledPrompt,
    MemoryHit,
    Message,
    RunEvent,
    ToolActivity,
    UserMessagePart,
    artifact_refs,
)
from monoagent._kernel.stores import CommitReceipt, logical_session_has_records
from monoagent._kernel.turn import SessionInfo
from monoagent._kernel.turn_request import TurnRequest, TurnResult
from monoagent._pipeline import client_tools
from monoagent._pipeline.assembly import CONTINUOUS_LAYOUT, collect_sections, compile_prompt, current_user_message
from monoagent._pipeline.compaction import CompactionResult, compact_proactively, compact_reactively
from monoagent._pipeline.continuity import (
    PublicationBarrier,
    RunContinuity,
    settle_run,
)
from monoagent._pipeline.continuity_account import settlement_code
from monoagent._pipeline.provider_call import Answer, ProviderCall, partial_event_data
from monoagent._pipeline.run_control import ConversationLane, RunControl, RunRecord
from monoagent._pipeline.run_control import EventCallback as EventCallback  # re-exported, as before the split
from monoagent._pipeline.run_control import new_run_id as new_run_id  # re-exported, as before the split
from monoagent._pipeline.run_handle import DEFAULT_SETTLE_WINDOW_MS, RunHandle, in_settlement, settle_window_ms
from monoagent._pipeline.sessions import (
    SessionBackend,
    WarmSession,
    canonical_user_message,
    history_tail,
    leading_messages,
    open_warm_session,
    retire_session,
    retire_settling,
    session_backend,
)
from monoagent._pipeline.tool_loop import ToolLoop, ToolOffer, provided_tools, tool_message, tool_offer
from monoagent._pipeline.turn_run import TurnRun

if TYPE_CHECKING:
    from monoagent._agent import Agent

T = TypeVar("T")


class Harness(RunControl):
    """Runs turns for one Agent; one harness (and so one set of limits) per channel.

    ``clock`` is the wall clock (seconds since the epoch, like ``time.time``) read once when a
    turn starts: the turn's daily bucket under ``runtime.session.rollover = "daily"`` and
    :attr:`~monoagent._kernel.turn.Turn.now` (the dates sections show) come from that
    one reading. Assign another callable to run turns at a chosen moment, e.g. a second before
    midnight in the rollover time zone; event timestamps and run ids stay on the real clock.
    """

    def __init__(self, agent: Agent, *, terminal_recovery_settlement_ms: int = DEFAULT_SETTLE_WINDOW_MS) -> None:
        self.agent: Agent = agent
        self.clock: Callable[[], float] = time.time
        self.settle_window_ms = settle_window_ms(terminal_recovery_settlement_ms)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lanes: dict[str, ConversationLane] = {}
        self._slots: asyncio.Semaphore | None = None
        self._pending = 0
        self._running = 0
        self._continuity = PublicationBarrier()
        self._live: dict[str, list[RunHandle]] = {}
        self._settlements: set[asyncio.Task[None]] = set()
        self._sessions: SessionBackend | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the harness last ran turns on (None before the first)."""
        return self._loop

    @property
    def sessions(self) -> SessionBackend:
        """This harness's warm-session backend (:func:`~monoagent._pipeline.sessions.session_backend`), made on first use."""
        if self._sessions is None:
            self._sessions = session_backend(self.agent)
        return self._sessions

    async def close(self) -> None:
        """Dispose of this harness's warm sessions (the Agent calls it when it closes)."""
        if self._sessions is not None:
            await self._sessions.close()

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

    def _emitter(self, run: RunRecord) -> Callable[[str, dict[str, Any]], None]:
        publish = self.agent.publish_event

        def emit(type: str, data: dict[str, Any]) -> None:
            if run.quarantined and not in_settlement():
                run.late_events += 1  # the late work of a cancelled run: never emitted, never in its account
                return
            run.seq += 1
            if run.observe is not None:
                run.observe(type, data)
            event = RunEvent(type, run.run_id, run.conversation_id, run.seq, time.time(), data)
            publish(event)
            if run.callback is not None:
                run.callback(event)

        return emit

    # ------------------------------------------------------------------ session

    def _session(self, request: TurnRequest, started: float) -> SessionInfo:
        """The turn's session: its daily bucket, if any (whether the bucket is new is known once history is loaded)."""
        cfg = self.agent.config.runtime.session
        logical = request.conversation_id
        physical, bucket = logical, None
        if cfg.rollover == "daily" and request.delivery != "console":
            tz = None
            if cfg.rollover_timezone:
                from zoneinfo import ZoneInfo

                tz = ZoneInfo(cfg.rollover_timezone)
            bucket = datetime.fromtimestamp(started, tz).astimezone(tz).strftime("%Y-%m-%d")
            physical = f"{logical}:{bucket}"
        return SessionInfo(
            delivery=request.delivery,
            mode=cfg.mode,
            logical_conversation_id=logical,
            conversation_id=physical,
            bucket=bucket,
            memory_configured=bool(self.agent.config.memory.tiers),
        )

    # ------------------------------------------------------------------ the turn

    async def _run_admitted_turn(self, request: TurnRequest, run: RunRecord) -> TurnResult:
        """Admit the turn (or reject it), run it to its commit, and settle it on cancellation or failure."""
        assert self._slots is not None
        await self._continuity.wait(request.conversation_id)  # an earlier turn's account is published first
        limit = self.agent.config.concurrency.max_pending_runs
        width = self.agent.config.concurrency.max_concurrent_runs
        if self._pending + self._running >= width + limit:  # admitted runs each hold a slot or will wait for one
            self._emitter(run)("admission_rejected", {
                "channel": request.channel, "conversation_id": request.conversation_id, "pending": self._pending,
                "running": self._running, "max_pending_runs": limit, "max_concurrent_runs": width,
            })
            raise AdmissionRejected(
                f"{self._pending} runs already wait for an execution slot (concurrency.maxPendingRuns = {limit}); "
                f"try again later or raise the limit"
            )
        started = self.clock()
        session = self._session(request, started)
        run.conversation_id = session.conversation_id
        turn = run.turn = TurnRun(
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
                isolated=request.isolated,
            )
            turn.report_invalid_unicode("request", request.invalid_unicode)
            if request.isolated and request.proactive:
                turn.emit("session_boundary", kind="isolated", reason="proactive")
            prompt = await self.prepare(turn, open_session=True)
            await self._slots.acquire()
            run.slot = "held"
            self._pending -= 1
            self._running += 1
            result = await self._execute(turn, prompt)
        except asyncio.CancelledError as exc:
            if run.quarantined or RunContinuity.of(turn).collector.claimed:
                raise  # settled by the cancel that released the caller, or cancelled after its durable commit
            await retire_settling(turn, "cancelled_turn")
            await settle_run(turn, self._continuity, "cancelled", exc)  # the account, before the terminal event
            turn.emit("run_cancelled", reason="cancelled", **partial_event_data(turn))
            raise
        except BaseException as exc:
            if run.quarantined:
                raise
            await retire_settling(turn, "failed_turn")
            # a bad request (client tools, results), refused before any provider call, has nothing to account for
            await settle_run(turn, self._continuity, "failed", exc, account=not isinstance(exc, ClientToolsRefused))
            turn.emit("run_failed", error=self.agent.redact(f"{type(exc).__name__}: {exc}", "error"), settlement=settlement_code(exc))
            raise
        finally:
            self._release_slot(run)
        return result

    async def _load_history(self, turn: TurnRun) -> None:
        if turn.request.history is not None:  # the caller's own conversation (a stateless API client)
            turn.history = turn.request.history
            return
        turn.history = tuple(await self.agent.history_store.load(
            turn.conversation_id, on_warning=lambda code, message: turn.emit("runtime_warning", code=code, message=message)
        ))
        await self._resolve_bucket(turn)

    async def _offer_tools(self, turn: TurnRun, *, log: bool = True) -> ToolOffer:
        """The provide_tools step, then ``enabled=``, ``filter_tools`` and ``hide_tools``: sets
        ``turn.tools`` and ``turn.hidden_tools`` (``log``: a failed tool source is a log line too)."""
        turn.provided_tools, unavailable = await provided_tools(self.agent, turn)
        for failure in unavailable:
            if log:
                logger.warning("tool source {} unavailable: {}", failure.source, failure.reason)
            turn.emit("runtime_warning", code="tool_source_unavailable", source=failure.source, message=failure.reason)
        offer = tool_offer(turn, unavailable)
        turn.tools, turn.hidden_tools = (*offer.offered, *turn.request.client_tools), offer.hidden
        return offer

    async def tool_offer(self, turn: TurnRun) -> ToolOffer:
        """What ``turn`` would offer at its start, worked out exactly as :meth:`prepare` does it
        (history loaded, then the tool steps), without the rest of the preparation; a failed tool
        source is in the answer (``failures``), not logged."""
        await self._load_history(turn)
        return await self._offer_tools(turn, log=False)

    async def prepare(self, turn: TurnRun, *, open_session: bool = False) -> AssembledPrompt:
        """Everything before the provider: history, warm session, recall, compaction, sections, assembly.

        ``open_session`` (a run, not a preview) resumes the conversation's warm session in
        continuous mode; without it a continuous-mode prompt has the cold shape.
        """
        agent = self.agent
        hooks = agent.hooks
        agent.history_store  # noqa: B018  (the property builds the store, or raises: the first selection a turn meets)
        agent._check_turn_selections()
        await self._load_history(turn)
        request = turn.request
        if request.tool_results:  # a continuation: the open turn's user message is the current one again
            turn.open_turn = client_tools.resume(turn)
        elif any(message.tool_calls for message in turn.history):  # an open turn never answered: its calls go
            turn.history = client_tools.paired_tool_messages(turn.history)
        client_run = bool(request.client_tools or request.tool_results)  # may end on a call the server never answers
        if open_session and turn.session.mode == "continuous" and not request.isolated and not client_run:
            await open_warm_session(turn, self.sessions)
        await self._offer_tools(turn)
        client_tools.check_provided(turn)
        turn.permissions = hooks.first(hookspecs.turn_permissions, turn=turn.view)
        recalled: list[MemoryHit] = []
        for value in hooks.collect(hookspecs.recall_memory, turn=turn.view):  # each implementation bounds its own
            hits = await await_me_maybe(value)
            recalled.extend(hits or ())
        turn.recalled = tuple(recalled)
        if turn.recalled:
            turn.emit(
                "memory_recalled",
                hits=[{"source": h.source, "bytes": utf8_len(h.text)} for h in turn.recalled],
                bytes=sum(utf8_len(h.text) for h in turn.recalled),
            )
        parts: list[UserMessagePart] = []
        for part in hooks.collect(hookspecs.augment_user_message, turn=turn.view, recalled=turn.recalled):
            if isinstance(part, UserMessagePart):
                parts.append(part)
            elif part is not None:
                parts.extend(part)
        parts.sort(key=lambda p: p.order)
        user_message = hooks.first(hookspecs.render_user_message, turn=turn.view, parts=tuple(parts))
        if not isinstance(user_message, Message):
            raise TurnFailed("no plugin rendered the current user message (hook render_user_message)")
        compacted = await self._compact(turn, turn.history, user_message)
        prompt = compacted.prompt
        if compacted.applied and turn.session.warm:  # the transcript holds what compaction just replaced
            await retire_session(turn, "compaction")
            prompt = self._assemble(turn, compacted.messages, user_message)
        turn.emit("prompt_manifest", manifest=agent.unstructure(prompt.manifest))
        return prompt

    async def _resolve_bucket(self, turn: TurnRun) -> None:
        """Mark the first turn of a new daily bucket (``session_boundary`` ``rollover``).

        Derived from the history store, so a restart changes nothing: a bucket with history is not
        new, and an empty one is new only when the logical session has a record elsewhere (an
        earlier bucket, the undated id); a brand-new conversation has none and gets no boundary.
        """
        session = turn.session
        if session.bucket is None or turn.history:
            return
        store = self.agent.history_store
        if await logical_session_has_records(self.agent.components, store, session.logical_conversation_id, besides=session.conversation_id):
            turn.session = attrs.evolve(session, new_bucket=True)
            turn.emit("session_boundary", kind="rollover", bucket=session.bucket)

    def _assemble(
        self, turn: TurnRun, history: tuple[Message, ...], user_message: Message, *, resume: bool = True
    ) -> AssembledPrompt:
        """The request built from ``history``: sections, then the current user message last.

        In continuous mode the history travels as leading messages instead of the history
        section, and on a warm turn (unless ``resume`` is false: ``history`` is a compacted
        view the transcript does not hold) the session's transcript stands in for it.
        """
        hooks = self.agent.hooks
        if turn.session.mode != "continuous":
            sections = collect_sections(hooks, turn, history)
            return compile_prompt(sections, [user_message], turn.diagnostics, profile=turn.profile, history_messages=len(history))
        lease = turn.session_lease
        session = lease.session if resume and lease is not None else None
        leading = list(session.transcript) if session is not None else leading_messages(history)
        return compile_prompt(
            collect_sections(hooks, turn, ()), [*leading, user_message], turn.diagnostics,
            profile=turn.profile, layout=CONTINUOUS_LAYOUT, history_messages=len(leading), leading=len(leading),
        )

    async def _compact(self, turn: TurnRun, history: tuple[Message, ...], user_message: Message) -> CompactionResult:
        """The proactive compaction step (:mod:`monoagent._pipeline.compaction`); ``.applied`` when it changed the history.

        The step assembles the view it was given first, then, when a policy applied, the
        compacted one: only the first is what a warm transcript stands for.
        """
        views: list[tuple[Message, ...]] = []

        def assemble(view: tuple[Message, ...]) -> AssembledPrompt:
            views.append(view)
            return self._assemble(turn, view, user_message, resume=view is views[0])

        return await compact_proactively(turn, history, assemble)

    async def _compact_after_overflow(self, turn: TurnRun, refused: AssembledPrompt) -> AssembledPrompt | None:
        """The reactive compaction step: a smaller request after a context overflow, or None.

        A warm turn's session is retired first: its transcript is what overflowed, so the smaller
        request is built cold from the compacted history.
        """
        if turn.session.warm:
            await retire_session(turn, "compaction")
        user_message = current_user_message(refused)
        smaller = await compact_reactively(turn, refused, lambda view: self._assemble(turn, view, user_message))
        if smaller is not None:
            turn.emit("prompt_manifest", manifest=self.agent.unstructure(smaller.manifest))
        return smaller

    async def _execute(self, turn: TurnRun, prompt: AssembledPrompt) -> TurnResult:
        agent = self.agent
        prelude = ""
        if turn.session.new_bucket and turn.session.bucket and agent.config.runtime.session.rollover_notice:
            prelude = f"New session bucket started: {turn.session.bucket}.\n\n"
            turn.emit("text_delta", text=prelude, step=0)
        loop = ToolLoop(turn)
        answered: list[Message] = []  # a continuation's results, through the tool loop's checks
        accepted: list[ToolActivity] = []
        if turn.open_turn is not None:
            results = {result.call_id: result for result in turn.request.tool_results}
            for pending in turn.open_turn.pending:
                accepted.append(ToolActivity(pending, await loop.accept(pending, results[pending.id])))
                answered.append(tool_message(pending, accepted[-1].result))
        resumed = (*turn.open_turn.steps, *answered) if turn.open_turn is not None else ()
        call = ProviderCall(turn, prompt, loop, compact=lambda refused: self._compact_after_overflow(turn, refused), resumed=resumed)
        provided = await call.run()  # retries, fallbacks, the tool loop, one reactive compaction
        outcome, usage, activity, step = provided.outcome, provided.usage, (*accepted, *provided.tool_activity), provided.steps
        usage = usage + turn.delegated_usage  # what its subagents spent is this run's too
        if not outcome.text.strip() and not provided.pending:
            raise EmptyResponse(
                f"{provided.model} answered with no text and no tool call; nothing was committed "
                f"(the turn settles as empty_response)"
            )
        text = prelude + outcome.text  # the notice reaches the caller, never history
        request = turn.request
        user = Message(
            "user", request.text, name=request.sender.label if request.sender else None,
            attachments=artifact_refs(request.attachments),
        )
        # a run that hands calls over commits its tool loop (the open turn); a continuation commits no user message (it is
        # in history already, before the open turn), only the results and what follows
        ending = list(provided.tool_loop) if provided.pending else [Message("assistant", outcome.text)]
        committed = [*([] if turn.open_turn is not None else [user]), *answered, *ending]
        continuity = RunContinuity.of(turn)
        await continuity.reconcile(turn)  # deferred tool-history writes settle before the run does
        receipt, cancelled = await self._publish(turn, call.prompt, provided, committed)
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
            notice=prelude,
            pending_tool_calls=provided.pending,
        )
        if turn.request.isolated:  # nothing was committed, so no after_commit (no memory capture)
            turn.emit(
                "run_completed", model=provided.model, steps=step, usage=attrs.asdict(usage), chars=len(text),
                committed=False, **provided.event_data(),
            )
            return result
        turn.emit("run_committed", messages=receipt.message_count, bytes=receipt.bytes_written)
        for observed in agent.hooks.each(hookspecs.after_commit, turn=turn.view, result=result):
            plugin = observed.plugin
            try:
                if observed.error is not None:
                    raise observed.error
                await await_me_maybe(observed.value)
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

    async def _publish(
        self, turn: TurnRun, prompt: AssembledPrompt, provided: Answer, messages: list[Message]
    ) -> tuple[CommitReceipt, asyncio.CancelledError | None]:
        """Commit the answered turn, and keep its warm session when the primary's first attempt answered.

        An isolated run commits nothing. An answer from a retry or a fallback model retires the
        session: that attempt ran stateless, so no transcript holds this turn.
        """
        collector = RunContinuity.of(turn).collector
        if collector.sealed:  # cancelled, its account under way: a provider that ignored the cancel commits nothing
            raise asyncio.CancelledError
        collector.claiming = True
        if turn.request.isolated:
            return CommitReceipt(turn.conversation_id, 0, 0), None
        lease = turn.session_lease
        if lease is None:
            return await self._commit(turn, messages)
        if provided.attempt > 1:
            await retire_session(turn, "retry_answered")
            return await self._commit(turn, messages)
        session = lease.session
        final = Message("assistant", provided.outcome.text, reasoning=provided.outcome.reasoning)  # transcript only
        appended = [canonical_user_message(turn.request), *provided.tool_loop, final]
        if session is None:
            session = WarmSession.start(turn.conversation_id, turn.model)
            appended[:0] = prompt.messages[: prompt.leading]
        session.history_tail = history_tail(messages)
        cancelled: list[asyncio.CancelledError] = []

        async def commit(state: object | None) -> CommitReceipt:
            receipt, late = await self._commit(turn, messages, provider_session=state)
            if late is not None:
                cancelled.append(late)
            return receipt

        receipt = await lease.backend.publish(turn.view, session, appended, commit)
        return receipt, cancelled[0] if cancelled else None

    async def _commit(
        self, turn: TurnRun, messages: list[Message], *, provider_session: object | None = None
    ) -> tuple[CommitReceipt, asyncio.CancelledError | None]:
        """Commit ``messages``; a cancellation meanwhile waits for the outcome (see the module docstring).

        Returns the receipt and the cancellation to re-raise once the run has completed, if one
        arrived. Raises that cancellation if the commit failed after it, else :class:`CommitFailed`.
        ``provider_session`` (a durable session backend's state) is passed to the store only when set.
        """
        store = self.agent.history_store
        if provider_session is None:
            pending = store.commit(turn.conversation_id, messages)
        else:
            pending = store.commit(  # type: ignore[call-arg]  # set only by a backend that requires a ProviderSessionStore
                turn.conversation_id, messages, provider_session=provider_session
            )
        commit, cancelled = await _outcome(pending, None)
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
        self, turn: TurnRun, messages: list[Message], error: BaseException, cancelled: asyncio.CancelledError | None
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
