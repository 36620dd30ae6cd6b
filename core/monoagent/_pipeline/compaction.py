"""Compaction, the harness's step that keeps a request inside the model's context window.

history budget = context window (``runtime.compaction.contextWindowOverride``, else the
provider runtime's ``context_window`` (:class:`~monoagent._kernel.interfaces.WindowedProviderRuntime`),
else 200,000) - ``runtime.compaction.responseReserveTokens``.

**Proactive**, on every turn before the provider call (:func:`compact_proactively`):

1. the *view*: when the configured policy (``runtime.compaction.policy``) stores its work
   (:class:`~monoagent._kernel.interfaces.StoredCompaction`), the history as its last compaction
   left it (one ``Summary of earlier conversation:`` message, then the messages after the ones it
   replaced); otherwise the history itself. A stored summary is reused until the next compaction.
2. the *estimate*: the tokens of the whole request assembled from that view
   (:func:`request_tokens`): the system prompt (with the cold tool-history projection and, on the
   prompt path, the history section), the messages and the current user message.
3. ``choose_compaction(turn, history_tokens=<estimate>, budget)`` names a policy or ``"none"``
   (the bundled default answers ``"none"`` under ``triggerRatio``, 80%, of the budget).
4. the policy compacts the view; an applied outcome is persisted and the request assembled again.

**Reactive**, at most once per run (:func:`compact_reactively`): after the provider refuses the
primary model's first attempt with a :class:`~monoagent._kernel.errors.ContextLimitError` (a 400
"prompt is too long"), the configured policy compacts the view once; only when the rebuilt
request is estimated smaller than the refused one is the outcome persisted and the request sent
again. Otherwise nothing is stored and the error takes its usual course (the fallback chain, or
the turn fails with it).

A turn whose history the caller gave (``TurnRequest.history``, a stateless API client's chat) is
compacted by the same rules, but neither reads a stored compaction nor persists one: the caller's
conversation is not the store's.

Event ``context_compaction_applied``: once per run from the proactive step, once more when a
reactive compaction is tried. Fields: ``applied`` (true: fired; false: not needed, nothing to
compact or rejected; null: compaction disabled), ``trigger`` (``proactive`` or ``reactive`` when
a policy ran, else null), ``reused`` (a stored summary shaped the view), ``budget``,
``tokens_before`` / ``tokens_after`` (request estimates), ``messages_before`` /
``messages_after`` (history messages), and when a policy ran ``policy``, ``method`` and
``reason`` (why an outcome was not used).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._kernel import hookspecs
from monoagent._kernel.interfaces import CompactionOutcome, CompactionPolicy, StoredCompaction, WindowedProviderRuntime
from monoagent._kernel.model import AssembledPrompt, Message

if TYPE_CHECKING:
    from monoagent._pipeline.turn_run import TurnRun

DEFAULT_CONTEXT_WINDOW = 200_000

Assemble = Callable[[tuple[Message, ...]], AssembledPrompt]
"""Builds the turn's request from a history (the harness's assembly, current user message last)."""


@attrs.frozen
class CompactionResult:
    """What the proactive step sends: the history after compaction, the request built from it.

    ``applied`` is true when a policy changed the history on this turn (a warm provider session
    built on the old history cannot continue); a reused stored summary is not a change.
    """

    messages: tuple[Message, ...]
    applied: bool
    prompt: AssembledPrompt


def history_budget(turn: TurnRun) -> int:
    """The context window of the turn's model minus the response reserve (never below 0)."""
    cfg = turn.config.runtime.compaction
    window = cfg.context_window_override
    if not window:
        runtime = turn.agent.provider(turn.model)
        if turn.agent.components.supports(runtime, WindowedProviderRuntime):
            window = runtime.context_window
        window = window or DEFAULT_CONTEXT_WINDOW
    return max(window - cfg.response_reserve_tokens, 0)


def request_tokens(turn: TurnRun, prompt: AssembledPrompt) -> int:
    """The estimated tokens of ``prompt`` as sent: system text, messages and their tool calls.

    One ``count_tokens`` call over everything, so a tokeniser sees whole texts and a
    per-call cost is paid once per request, not per message.
    """
    messages = prompt.messages
    if not any(map(_tool_calls_of, messages)):  # the usual history: its texts joined in C
        return turn.agent.count_tokens("\n".join([prompt.stable_text, prompt.dynamic_text, *map(_content_of, messages)]), turn.model)
    parts = [prompt.stable_text, prompt.dynamic_text]
    for message in messages:
        parts.append(message.content)
        if message.tool_calls:
            parts.append(json.dumps([[c.name, c.arguments] for c in message.tool_calls], ensure_ascii=False, default=str))
    return turn.agent.count_tokens("\n".join(parts), turn.model)


_tool_calls_of = operator.attrgetter("tool_calls")
_content_of = operator.attrgetter("content")


async def stored_view(turn: TurnRun, history: tuple[Message, ...]) -> tuple[Message, ...] | None:
    """The history as the configured policy's last stored compaction left it; None if there is none."""
    cfg = turn.config.runtime.compaction
    if not cfg.enabled or turn.request.history is not None:  # the caller's own history: no stored summary of it
        return None
    policy = turn.agent.compaction_policy(cfg.policy)
    if not turn.agent.components.supports(policy, StoredCompaction):  # recorded when the policy was built
        return None
    stored = await policy.view(turn.view, history)
    return None if stored is None else tuple(stored)


def _report(trigger: str | None, reused: bool, budget: int, tokens: int, history: int, view: int) -> dict[str, Any]:
    """The fields every ``context_compaction_applied`` event carries, before a policy ran."""
    return {
        "trigger": trigger,
        "reused": reused,
        "budget": budget,
        "tokens_before": tokens,
        "tokens_after": tokens,
        "messages_before": history,
        "messages_after": view,
    }


async def compact_proactively(turn: TurnRun, history: tuple[Message, ...], assemble: Assemble) -> CompactionResult:
    """Steps 1 to 4 of the module docstring; emits ``context_compaction_applied``."""
    agent = turn.agent
    cfg = turn.config.runtime.compaction
    stored = await stored_view(turn, history)
    view = history if stored is None else stored
    prompt = assemble(view)
    budget = history_budget(turn)
    tokens = request_tokens(turn, prompt)
    report = _report(None, stored is not None, budget, tokens, len(history), len(view))
    choice = "none"
    if view:
        choice = agent.hooks.first(hookspecs.choose_compaction, turn=turn.view, history_tokens=tokens, budget=budget) or "none"
    if choice == "none":
        turn.emit("context_compaction_applied", applied=None if not cfg.enabled else False, **report)
        return CompactionResult(view, False, prompt)
    policy = agent.compaction_policy(choice)
    outcome = await policy.compact(turn.view, view, budget)
    report.update(trigger="proactive", policy=choice, method=outcome.method)
    if not outcome.applied:
        turn.emit("context_compaction_applied", applied=False, **report)
        return CompactionResult(view, False, prompt)
    messages = tuple(outcome.messages)
    if outcome.persist is not None and turn.request.history is None:  # the caller's history is not stored
        await outcome.persist()
    prompt = assemble(messages)
    report.update(tokens_after=request_tokens(turn, prompt), messages_after=len(messages))
    turn.emit("context_compaction_applied", applied=True, **report)
    return CompactionResult(messages, True, prompt)


async def compact_reactively(turn: TurnRun, refused: AssembledPrompt, assemble: Assemble) -> AssembledPrompt | None:
    """The reactive compaction (module docstring): the smaller request, or None to let the error stand."""
    cfg = turn.config.runtime.compaction
    if not cfg.enabled:
        return None
    history = turn.history
    stored = await stored_view(turn, history)
    view = history if stored is None else stored
    budget = history_budget(turn)
    tokens = request_tokens(turn, refused)
    report = _report("reactive", stored is not None, budget, tokens, len(history), len(view))
    report["policy"] = cfg.policy
    if not view:
        turn.emit("context_compaction_applied", applied=False, method="none", reason="no_history", **report)
        return None
    policy: CompactionPolicy = turn.agent.compaction_policy(cfg.policy)
    outcome: CompactionOutcome = await policy.compact(turn.view, view, budget)
    report["method"] = outcome.method
    if not outcome.applied:
        turn.emit("context_compaction_applied", applied=False, reason="nothing_to_compact", **report)
        return None
    messages = tuple(outcome.messages)
    preview = assemble(messages)
    smaller = request_tokens(turn, preview)
    report.update(tokens_after=smaller, messages_after=len(messages))
    if smaller >= tokens:
        turn.emit("context_compaction_applied", applied=False, reason="preview_not_smaller", **report)
        return None
    if outcome.persist is not None and turn.request.history is None:  # the caller's history is not stored
        await outcome.persist()
    turn.emit("context_compaction_applied", applied=True, **report)
    return preview
