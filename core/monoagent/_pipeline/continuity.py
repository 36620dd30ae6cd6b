"""Continuity: when a cancelled or failed turn publishes its account, and what the next turn waits for.

A turn admitted into a conversation that settles as cancelled or failed before its successful
commit publishes, through the history store's ordinary ``commit``, the original user request
plus one host-authored assistant message, the *account* (its content, bounds and forgery rules:
:mod:`monoagent._pipeline.continuity_account`), instead of a normal turn. Memory capture
(``after_commit``) never runs for an account. An isolated run (``TurnRequest.isolated``)
publishes none: it stays out of the conversation's shared history.

What an account needs is kept incrementally on every run by its :class:`ContinuityCollector`
(the partial text, from each ``text_delta``) and its tool-call ledger
(:class:`~monoagent._pipeline.tool_lifecycle.RunLedger`), together the run's
:class:`RunContinuity` (``turn.continuity``).

A success claims its commit only once the history store has made it durable: it is then never
replaced by an account. A commit that fails settles the run as ``commit_failed`` and publishes
the account; a request cancelled before admission publishes none. The :class:`PublicationBarrier` makes the next turn of the same
conversation wait until the account is published; if publication failed, the next turn retries
it and fails closed with :class:`ContinuityPublicationError` while it still cannot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent._boundary.text import utf8_len, utf8_prefix
from monoagent._kernel.errors import MonoagentError
from monoagent._kernel.model import ToolCall, ToolResult, ToolStatus
from monoagent._kernel.stores import ToolInvocation
from monoagent._pipeline.continuity_account import (
    PREFIX_LOOKAHEAD_BYTES,
    PREFIX_MAX_BYTES,
    account_messages,
    account_request_text,
    build_account,
    render_account,
)
from monoagent._pipeline.tool_lifecycle import RunLedger

if TYPE_CHECKING:
    from monoagent._pipeline.turn_run import TurnRun


class ContinuityPublicationError(MonoagentError):
    """A continuity account could not be published; the conversation fails closed until it is."""


# --------------------------------------------------------------------------- the collector


@attrs.define
class _Pair:
    invocation: ToolInvocation
    result: ToolResult


@attrs.define
class ContinuityCollector:
    """Keeps, incrementally on every run, what an account would need.

    The assistant prefix grows with each ``text_delta`` up to 8 KiB plus an 8 KiB lookahead
    (:data:`PREFIX_LOOKAHEAD_BYTES`), so that a credential crossing the cut the account makes
    (:func:`redacted_prefix`) is redacted whole first; bytes beyond the window are counted
    (a delta of a new provider ``attempt`` restarts it: a retried attempt's text replaces the
    discarded one's);
    completed tool pairs and in-flight calls come from the run's :class:`RunLedger`. Once
    :meth:`seal` is called (the run settled), later events are quarantined. ``claiming`` is set
    when a success begins its commit (a cancellation then waits for the commit's outcome),
    ``claimed`` once that commit is durable.
    """

    pieces: list[str] = attrs.Factory(list)
    kept_bytes: int = 0
    omitted_bytes: int = 0
    runtime_events: int = 0
    pairs: list[_Pair] = attrs.Factory(list)
    in_flight: dict[str, ToolInvocation] = attrs.Factory(dict)
    sealed: bool = False
    claiming: bool = False
    claimed: bool = False
    attempt: Any = None

    def observe(self, type: str, data: dict[str, Any]) -> None:
        if self.sealed:
            return
        if type == "text_delta":
            text = data.get("text") or ""
            attempt = data.get("attempt")
            if attempt is not None and attempt != self.attempt:
                self.attempt = attempt
                self.pieces, self.kept_bytes, self.omitted_bytes = [], 0, 0
            if self.omitted_bytes:
                self.omitted_bytes += utf8_len(text)
                return
            piece = utf8_prefix(text, PREFIX_MAX_BYTES + PREFIX_LOOKAHEAD_BYTES - self.kept_bytes)
            if piece.text:
                self.pieces.append(piece.text)
            self.kept_bytes += piece.kept_bytes
            self.omitted_bytes += piece.original_bytes - piece.kept_bytes
        elif type in ("provider_request", "provider_response", "tool_call", "tool_result", "runtime_warning"):
            self.runtime_events += 1

    def tool_started(self, invocation: ToolInvocation) -> None:
        if not self.sealed:
            self.in_flight[invocation.call.id] = invocation

    def tool_finished(self, call: ToolCall, result: ToolResult) -> None:
        if self.sealed:
            return
        invocation = self.in_flight.pop(call.id, None)
        if invocation is not None:
            self.pairs.append(_Pair(invocation, result))

    @property
    def partial_text(self) -> str:
        return "".join(self.pieces)

    def seal(self) -> None:
        self.sealed = True


# --------------------------------------------------------------------------- the run record and barrier


@attrs.define
class RunContinuity:
    """Per-run continuity state, kept on the turn (:attr:`monoagent._kernel.turn.Turn.continuity`)."""

    collector: ContinuityCollector
    ledger: RunLedger

    @classmethod
    def of(cls, turn: TurnRun) -> RunContinuity:
        record = turn.continuity
        if record is None:
            record = turn.continuity = cls(ContinuityCollector(), RunLedger(turn, turn.agent.tool_history_store()))
        return record

    async def tool_invocation(self, call: ToolCall) -> dict[str, Any]:
        fields = await self.ledger.invocation(call)
        invocation = self.ledger.open.get(call.id) or self.ledger._invocation(call)
        self.collector.tool_started(invocation)
        return fields

    async def tool_result(self, call: ToolCall, result: ToolResult) -> dict[str, Any]:
        self.collector.tool_finished(call, result)
        return await self.ledger.result(call, result)

    async def reconcile(self, turn: TurnRun) -> None:
        """Wait (bounded) for deferred tool-history writes; a warning names each that failed."""
        for problem in await self.ledger.reconcile():
            turn.emit("runtime_warning", code="tool_history_write_failed", error=turn.agent.redact(problem, "error"))


@attrs.define
class _Pending:
    publish: Callable[[], Coroutine[Any, Any, None]]
    task: asyncio.Task[None] | None = None
    error: BaseException | None = None


def _read_outcome(task: asyncio.Task[None]) -> None:
    """A publication's failure is kept in ``_Pending.error`` for the next turn, which retries it; read here,
    it is not reported as an exception never retrieved when no turn follows (or its waiter was cancelled)."""
    if not task.cancelled():
        task.exception()


class PublicationBarrier:
    """Per-conversation publication of accounts; the next turn waits for (and retries) it."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def start(self, key: str, publish: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        pending = _Pending(publish)
        self._pending[key] = pending
        pending.task = asyncio.ensure_future(self._run(key, pending))
        pending.task.add_done_callback(_read_outcome)
        return pending.task

    async def _run(self, key: str, pending: _Pending) -> None:
        """Publish; only success removes the entry, so a failed or cancelled publication is retried."""
        try:
            await pending.publish()
        except Exception as exc:
            pending.error = exc
            raise
        if self._pending.get(key) is pending:
            del self._pending[key]

    async def wait(self, key: str) -> None:
        """Return once no account of ``key`` is unpublished; retry a failed publication once."""
        pending = self._pending.get(key)
        if pending is None:
            return
        if pending.task is not None and not pending.task.done():
            try:
                await asyncio.shield(pending.task)
            except Exception:
                pass  # recorded in pending.error; retried below
        if self._pending.get(key) is not pending:
            return  # published
        if pending.task is None or pending.task.done():
            # The retry runs as a task of its own: a waiter cancelled meanwhile does not abandon a
            # commit already under way, and the next waiter awaits that one instead of publishing twice.
            pending.error = None
            pending.task = asyncio.ensure_future(self._run(key, pending))
            pending.task.add_done_callback(_read_outcome)
        try:
            await asyncio.shield(pending.task)
        except Exception as exc:
            raise ContinuityPublicationError(
                f"the continuity account of the previous turn in this conversation could not be published "
                f"({type(exc).__name__}: {exc}); this conversation stays closed until it is"
            ) from exc


def begin_settlement(
    turn: TurnRun,
    barrier: PublicationBarrier,
    outcome: Literal["cancelled", "failed"],
    error: BaseException | None,
    *,
    settle: Callable[[], Awaitable[None]] | None = None,
    account: bool = True,
) -> asyncio.Task[None] | None:
    """Seal the run now and start publishing its account behind the conversation's barrier.

    Returns the publication's task, or None when a success already claimed its commit or the run
    was settled before. Synchronous up to the task's start, so a caller that frees the
    conversation's lane right after knows the next turn waits for this account. The task first
    awaits ``settle`` (the harness waits there, bounded, for a cancelled run's provider call to
    settle); then open tool calls are closed in tool history (``cancelled`` for a cancellation,
    ``interrupted`` for a failure) and deferred writes reconciled before the account is built.
    An isolated run publishes no account and holds no barrier: its task only closes and reconciles;
    so does a run settled with ``account=False`` (a request refused before any provider call:
    :class:`~monoagent._kernel.errors.ClientToolsRefused`), which has nothing to account for.
    """
    record = turn.continuity
    if record is None or record.collector.claimed or record.collector.sealed:
        return None
    record.collector.seal()
    status = ToolStatus.CANCELLED if outcome == "cancelled" else ToolStatus.INTERRUPTED
    agent = turn.agent
    user_bytes = utf8_len(account_request_text(turn.request.text))
    publishes = account and not turn.request.isolated

    async def publish() -> None:
        if settle is not None:
            await settle()
        if not publishes:  # isolated proactive/continuation runs (and refused requests) stay out of shared history
            record.ledger.close_open(status, f"The run was {outcome}.")
            await record.reconcile(turn)
            return
        record.ledger.close_open(status, f"The run was {outcome} before this tool call returned a result.")
        await record.reconcile(turn)
        account = build_account(
            record.collector, run_id=turn.run_id, outcome=outcome, redact=agent.redact, error=error, user_bytes=user_bytes
        )
        receipt = await agent.history_store.commit(turn.conversation_id, account_messages(turn, account))
        turn.emit(
            "continuity_account",
            outcome=outcome,
            bytes=utf8_len(render_account(account)),
            tool_pairs=len(account.tool_pairs),
            omitted_tool_pairs=account.omitted_tool_pairs,
            in_flight=len(account.in_flight),
            messages=receipt.message_count,
        )

    if not publishes:  # no barrier keeps its failure: read it, so a waiter cancelled meanwhile leaves no noise
        task = asyncio.ensure_future(publish())
        task.add_done_callback(_read_outcome)
        return task
    return barrier.start(turn.session.logical_conversation_id, publish)


async def await_settlement(turn: TurnRun, task: asyncio.Task[None] | None) -> None:
    """Wait for a publication :func:`begin_settlement` started, shielded; a failure becomes a warning.

    A further cancellation only stops the waiting (the barrier still holds the next turn until
    the publication ends), so the caller's terminal event and its original exception follow either way.
    """
    if task is None:
        return
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        return  # cancelled again while waiting: the barrier still holds the next turn until it ends
    except Exception as exc:
        turn.emit(
            "runtime_warning",
            code="continuity_publication_failed",
            error=turn.agent.redact(f"{type(exc).__name__}: {exc}", "error"),
        )


async def settle_run(
    turn: TurnRun,
    barrier: PublicationBarrier,
    outcome: Literal["cancelled", "failed"],
    error: BaseException | None,
    *,
    account: bool = True,
) -> None:
    """Seal the run and publish its account behind the conversation's barrier (unless ``account`` is false), and
    wait for it.

    Does nothing when a success already claimed its commit. See :func:`begin_settlement` and
    :func:`await_settlement`.
    """
    await await_settlement(turn, begin_settlement(turn, barrier, outcome, error, account=account))
