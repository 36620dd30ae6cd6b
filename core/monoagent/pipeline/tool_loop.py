"""The tool loop: which tools a turn offers, and how each tool call the model requests runs.

**Offered tools** (:func:`offered_tools`, called by the harness when it prepares the turn, after
the history is loaded and before recall): every registered tool and every tool the
``provide_tools`` step offers for this turn (:func:`provided_tools`), narrowed by the
``filter_tools`` step. Every implementation sees the full registered list and may return the
ones it keeps; a tool is offered when every implementation that answered kept it (the lists are
intersected, so the outcome does not depend on load order and no plugin can re-admit a tool
another withdrew). Of those, the tools of a domain ``tools.visible`` does not list are *hidden*
(:func:`split_hidden_domains`): they become ``turn.hidden_tools``, the rest ``turn.tools``. The
section producers and every provider request of the turn read ``turn.tools``; the one thing that
changes it later is :meth:`~monoagent.kernel.tool_context.ToolContext.reveal_domain` (the ``request_tools`` tool), which moves a hidden
domain's tools into it for the rest of the turn, so the next provider round offers them.

**One call** (:meth:`ToolLoop.run`), in this order:

1. the repeated-call guard: the same tool with the same (canonical) arguments more than
   ``runtime.maxRepeatedToolCalls`` times in a row, or in a repeating cycle of up to
   :data:`MAX_REPEATED_CYCLE` calls (A, B, A, B, ...), over the whole run, retries included, ends
   the run before that call runs (:class:`~monoagent.kernel.errors.RepeatedToolCall`);
2. the invocation record in tool history (:mod:`monoagent.pipeline.continuity`), then the
   ``tool_call`` event, which carries a redacted preview of the arguments (:func:`arguments_preview`)
   so a front end can show the call while it runs;
3. availability: a name that is not in ``turn.tools`` (not offered, or in a hidden domain) is
   answered with status ``rejected``;
4. permission (:mod:`monoagent.kernel.permissions`): under a restricted profile the call's
   categories are decided (allowed, refused, or asked of the request's approver) and the decision
   is a ``permission_decision`` event (``tool``, ``id``, ``categories``, ``profile``, ``decision``:
   ``allowed``, ``denied``, ``asked-allowed`` or ``asked-denied``, ``by``); a call not allowed is
   answered with status ``rejected`` naming the categories and the profile, and its handler never runs;
5. ``before_tool_call``, which may answer the call instead of the tool;
6. the handler, with a :class:`~monoagent.kernel.tool_context.ToolContext`; an exception becomes
   an ``error`` result whose text is redacted, a ``str`` a ``success`` result;
7. the result is bound to the call (its ``call_id`` and ``name`` are the call's), replaced
   surrogates are reported, the tool-output bloat guard (:mod:`monoagent.pipeline.bloat`) runs,
   ``after_tool_call`` observes it, the result record goes to tool history and ``tool_result``
   is emitted (with a short, redacted ``error`` when the result is not a success).

The result goes back to the model as :func:`tool_message`, whose ``is_error`` the provider
formats carry on the wire.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from monoagent.kernel import hookspecs
from monoagent.kernel.errors import PluginError, RepeatedToolCall
from monoagent.kernel.host import await_me_maybe
from monoagent.kernel.interfaces import Tool, ToolSourceFailure
from monoagent.kernel.log import logger
from monoagent.kernel.model import Message, ToolCall, ToolResult, ToolSpec, ToolStatus
from monoagent.kernel.permissions import FULL_ACCESS, Approval, ApprovalRequest, argument_summary
from monoagent.kernel.tool_context import ToolContext
from monoagent.pipeline.bloat import guard_tool_result
from monoagent.pipeline.continuity import RunContinuity
from monoagent.pipeline.stream import canonical_arguments
from monoagent.text import utf8_len

if TYPE_CHECKING:
    from monoagent.agent import Agent
    from monoagent.kernel.turn import Turn
    from monoagent.pipeline.turn_run import TurnRun

MAX_REPEATED_CYCLE = 16
"""The longest cycle of tool calls (A, B, A, B, ... is a cycle of 2) the repeated-call guard sees."""

ARGUMENTS_PREVIEW_CHARS = 1000
"""The most characters of a call's arguments the ``tool_call`` event carries (the tool history keeps them all)."""

ERROR_PREVIEW_CHARS = 200
"""The most characters of a failed result's text the ``tool_result`` event carries as its ``error``."""

REDACT_WINDOW = 8 * 1024
"""The most characters of a value the previews pass to the redaction chain (the tool history's own
argument bound, so redaction never sees an oversized value whole)."""

_UNSEEN_TAIL = 1024


def redacted_head(turn: TurnRun, text: str, kind: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` redacted, ending in ``…`` when cut.

    Redacted before it is cut, so a secret at the cut is recognised whole. Text longer than
    :data:`REDACT_WINDOW` is redacted in its first window only, and the redacted window's last
    characters (which may hold the start of a secret the window cut in two) are never shown.
    """
    window = text[:REDACT_WINDOW]
    shown = turn.agent.redact(window, kind)
    if len(text) > REDACT_WINDOW:
        shown = shown[: max(len(shown) - _UNSEEN_TAIL, 0)][:limit] + "…"
    elif len(shown) > limit:
        shown = shown[:limit] + "…"
    return shown


def arguments_preview(turn: TurnRun, canonical: str) -> dict[str, Any]:
    """The ``tool_call`` event's ``arguments`` (the canonical JSON, redacted, at most
    :data:`ARGUMENTS_PREVIEW_CHARS` characters, ending in ``…`` when cut: :func:`redacted_head`)
    and ``arguments_bytes`` (the whole JSON's UTF-8 size)."""
    shown = redacted_head(turn, canonical, "tool_arguments", ARGUMENTS_PREVIEW_CHARS)
    return {"arguments": shown, "arguments_bytes": utf8_len(canonical)}


def error_preview(turn: TurnRun, result: ToolResult) -> dict[str, Any]:
    """``{"error": ...}`` for a result that is not a success: its first line, redacted, at most
    :data:`ERROR_PREVIEW_CHARS` characters; nothing for a success."""
    if not result.is_error:
        return {}
    first = result.content[: 2 * REDACT_WINDOW].strip().split("\n", 1)[0]
    return {"error": redacted_head(turn, first, "tool_result", ERROR_PREVIEW_CHARS)}


async def provided_tools(agent: Agent, turn: TurnRun | None) -> tuple[dict[str, Tool], list[ToolSourceFailure]]:
    """What ``provide_tools`` offers (on ``turn``, or for a listing when None): the tools by name, and the failed sources.

    Each tool is stamped with the plugin that provided it. Raises
    :class:`~monoagent.kernel.errors.PluginError` naming the plugin for a value that is not a
    ``Tool`` or ``ToolSourceFailure``, and naming both plugins for a name registered or provided twice.
    """
    tools: dict[str, Tool] = {}
    failures: list[ToolSourceFailure] = []
    registered = agent.tools
    answers = [
        (answer.plugin, await await_me_maybe(answer.value))
        for answer in agent.hooks.each(hookspecs.provide_tools, agent=agent, turn=turn.view if turn is not None else None)
    ]
    for plugin, offered in answers:
        for item in offered or ():
            if isinstance(item, ToolSourceFailure):
                failures.append(item)
                continue
            if not isinstance(item, Tool):
                raise PluginError(
                    f"plugin {plugin!r} returned a value of type {type(item).__name__} from provide_tools where a "
                    f"monoagent.Tool or monoagent.ToolSourceFailure belongs"
                )
            name = item.spec.name
            other = registered.get(name) or tools.get(name)
            if other is not None:
                raise PluginError(f"tool {name!r} is offered by plugins {other.plugin!r} and {plugin!r}; a tool name must be unique")
            tools[name] = attrs.evolve(item, plugin=plugin)
    return tools, failures


def offered_tools(turn: TurnRun) -> tuple[ToolSpec, ...]:
    """The tools offered on ``turn``: every registered and provided tool, narrowed by ``filter_tools``.

    Raises :class:`~monoagent.kernel.errors.PluginError` naming the plugin when an implementation
    returns something other than registered tool specs.
    """
    registered = tuple(tool.spec for tool in (*turn.agent.tools.values(), *turn.provided_tools.values()))
    known = {spec.name for spec in registered}
    keep = known
    for answer in turn.agent.hooks.each(hookspecs.filter_tools, turn=turn.view, tools=registered):
        keep = keep & _kept_names(answer.plugin, answer.value, known)
    return registered if keep == known else tuple(spec for spec in registered if spec.name in keep)


def split_hidden_domains(visible: Sequence[str], tools: Sequence[ToolSpec]) -> tuple[tuple[ToolSpec, ...], tuple[ToolSpec, ...]]:
    """``tools`` split into the visible ones and the hidden ones, by ``visible`` (``tools.visible``).

    A tool without a domain is always visible; one with a domain is visible when the domain
    matches a pattern of ``visible`` (:mod:`fnmatch`: ``*`` for every domain, ``mcp:*`` for every
    MCP server).
    """
    patterns = tuple(visible)
    hidden = tuple(spec for spec in tools if spec.domain is not None and not _domain_visible(patterns, spec.domain))
    if not hidden:
        return tuple(tools), ()
    hidden_ids = {id(spec) for spec in hidden}
    return tuple(spec for spec in tools if id(spec) not in hidden_ids), hidden


@functools.lru_cache(maxsize=512)
def _domain_visible(patterns: tuple[str, ...], domain: str) -> bool:
    return any(fnmatch.fnmatchcase(domain, pattern) for pattern in patterns)


def hidden_domains(turn: Turn) -> dict[str, tuple[str, ...]]:
    """The turn's hidden tool domains, each with its exact tool names, in domain order."""
    domains: dict[str, list[str]] = {}
    for spec in turn.hidden_tools:
        domains.setdefault(spec.domain or "", []).append(spec.name)
    return {domain: tuple(names) for domain, names in sorted(domains.items())}


def _kept_names(plugin: str, kept: Any, known: set[str]) -> set[str]:
    if isinstance(kept, (str, bytes, ToolSpec)) or not isinstance(kept, Iterable):
        kept = (kept,)  # one spec is a list of one; anything else is reported below
    names: set[str] = set()
    for spec in kept:
        if not isinstance(spec, ToolSpec):
            raise PluginError(
                f"plugin {plugin!r} returned a value of type {type(spec).__name__} from filter_tools where a "
                f"ToolSpec belongs; return the ToolSpecs to keep (a subset of the 'tools' argument) or None"
            )
        names.add(spec.name)
    unknown = names - known
    if unknown:
        raise PluginError(
            f"plugin {plugin!r} returned tool(s) {', '.join(map(repr, sorted(unknown)))} from filter_tools, which are not "
            f"registered; filter_tools only withdraws tools (register new ones with register_tools)"
        )
    return names


def tool_message(call: ToolCall, result: ToolResult) -> Message:
    """The ``tool`` message that answers ``call`` in the next provider step, with the result's ``is_error``."""
    return Message("tool", result.content, name=call.name, tool_call_id=call.id, is_error=result.is_error)


def bind_result(result: ToolResult, call: ToolCall) -> ToolResult:
    """``result`` answering ``call``: its ``call_id`` and ``name`` set to the call's."""
    if result.call_id == call.id and result.name == call.name:
        return result
    return attrs.evolve(result, call_id=call.id, name=call.name)


@attrs.define
class _Repeats:
    """The run's latest tool calls (name and canonical arguments) and how often they repeat in a row.

    A run of calls that repeats the same cycle of ``period`` calls (one call: A, A, A; two:
    A, B, A, B, ...; up to :data:`MAX_REPEATED_CYCLE`) is one runaway loop, whichever call the
    model varies between: ``streaks[period]`` counts the calls that each equal the call
    ``period`` places before them.
    """

    keys: list[tuple[str, str]] = attrs.Factory(list)
    streaks: list[int] = attrs.Factory(lambda: [0] * (MAX_REPEATED_CYCLE + 1))

    def see(self, name: str, arguments: str) -> tuple[int, int]:
        """How many times in a row the newest call has now come in its cycle, and the cycle's length."""
        key = (name, arguments)
        keys, streaks = self.keys, self.streaks
        count, period = 1, 1
        for lag in range(1, MAX_REPEATED_CYCLE + 1):
            streaks[lag] = streaks[lag] + 1 if len(keys) >= lag and keys[-lag] == key else 0
            times = -(-streaks[lag] // lag) + 1  # the calls of a cycle of ``lag`` repeated over streak + lag calls
            if streaks[lag] and times > count:
                count, period = times, lag
        keys.append(key)
        del keys[:-MAX_REPEATED_CYCLE]
        return count, period


class ToolLoop:
    """Runs the tool calls of one run, over all its attempts (the repeat streak spans retries).

    Built by the harness per run and handed to :class:`~monoagent.pipeline.provider_call.ProviderCall`,
    which calls :meth:`run` for each requested call in order.
    """

    def __init__(self, turn: TurnRun) -> None:
        self.turn = turn
        self.max_repeats = turn.config.runtime.max_repeated_tool_calls
        self._repeats = _Repeats()

    async def run(self, call: ToolCall) -> ToolResult:
        """Run ``call`` to its result (see the module docstring); raises only to end the run."""
        turn = self.turn
        continuity = RunContinuity.of(turn)
        if continuity.collector.sealed:  # the run was cancelled and its runtime ignored it: no new tool runs
            raise asyncio.CancelledError
        canonical = self._check_repeats(call)
        persistence = await continuity.tool_invocation(call)
        turn.emit("tool_call", id=call.id, name=call.name, **arguments_preview(turn, canonical), **persistence)
        context = ToolContext(turn, call)
        try:
            result = await self._answer(context)
        finally:
            context.finish()
        turn.report_invalid_unicode("tool_result", result.invalid_unicode, tool=call.name)
        result = guard_tool_result(turn, bind_result(result, call))
        turn.agent.hooks.collect(hookspecs.after_tool_call, turn=turn.view, call=call, result=result)
        persistence = await continuity.tool_result(call, result)
        dropped = {"progress_dropped": context.progress_dropped} if context.progress_dropped else {}
        turn.emit(
            "tool_result", id=call.id, name=call.name, status=result.status.value, bytes=utf8_len(result.content),
            **error_preview(turn, result), **persistence, **dropped,
        )
        return result

    async def _answer(self, context: ToolContext) -> ToolResult:
        """The call's result: refused, answered by ``before_tool_call``, or the handler's."""
        turn, call = self.turn, context.call
        agent = turn.agent
        tool = agent.tools.get(call.name) or turn.provided_tools.get(call.name)
        if tool is None or call.name not in {spec.name for spec in turn.tools}:
            return context.result(_unavailable(turn, call.name), ToolStatus.REJECTED)
        refusal = await self._permission(context, tool.spec)
        if refusal is not None:
            return context.result(refusal, ToolStatus.REJECTED)
        answer = agent.hooks.first(hookspecs.before_tool_call, turn=turn.view, call=call)
        if answer is not None:
            return answer
        try:
            value = await await_me_maybe(tool.handler(context))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            detail = agent.redact(f"{type(exc).__name__}: {exc}", "error")
            return context.result(f"Tool {call.name!r} failed: {detail}", ToolStatus.ERROR)
        return value if isinstance(value, ToolResult) else context.result(str(value))

    async def _permission(self, context: ToolContext, spec: ToolSpec) -> str | None:
        """Decide ``spec``'s call under the turn's profile; None to run it, else why it was refused."""
        turn, call = self.turn, context.call
        profile = turn.permissions or FULL_ACCESS
        if not profile.restricted:
            return None
        decision, categories = profile.decide(spec.categories)
        by = "profile"
        if decision == "ask":
            approval = await _ask(turn, ApprovalRequest(
                call.name, categories, argument_summary(call.arguments), profile.name, turn.conversation_id, call
            ))
            outcome, by = ("asked-allowed" if approval.allowed else "asked-denied"), approval.by
        else:
            outcome = "allowed" if decision == "allow" else "denied"
        turn.emit("permission_decision", id=call.id, tool=call.name, categories=list(categories), profile=profile.name,
                  decision=outcome, by=by)
        named = ", ".join(categories)
        if outcome == "denied":
            return (f"Tool {call.name!r} was not run: its action category {named} is refused under the permission profile "
                    f"{profile.name!r}. Continue with what the profile allows, or tell the user what needs permission.")
        if outcome == "asked-denied" and by == "no_approver":
            return (f"Tool {call.name!r} was not run: its action category {named} needs approval under the permission "
                    f"profile {profile.name!r}, and nobody can approve it in this turn.")
        if outcome == "asked-denied":
            return (f"Tool {call.name!r} was not run: approval for its action category {named} was refused "
                    f"(permission profile {profile.name!r}, by {by}). Do not retry it; continue without it.")
        return None

    def _check_repeats(self, call: ToolCall) -> str:
        """Count ``call`` in the run's streak of identical calls; stop the run before one too many.

        Returns the call's canonical arguments (JSON)."""
        canonical = canonical_arguments(self.turn.model, call)
        count, period = self._repeats.see(call.name, canonical)
        if self.max_repeats and count > self.max_repeats:
            cycle = f" (in a repeating cycle of {period} tool calls)" if period > 1 else ""
            raise RepeatedToolCall(
                f"the model called tool {call.name[:64]!r} with the same arguments {count} times in a row{cycle}; the run "
                f"was stopped before that call ran (runtime.maxRepeatedToolCalls = {self.max_repeats}, 0 for no limit); "
                f"nothing was committed"
            )
        return canonical


def _unavailable(turn: TurnRun, name: str) -> str:
    hidden = next((spec.domain for spec in turn.hidden_tools if spec.name == name), None)
    if hidden is not None:
        return (f"Tool {name!r} belongs to the tool domain {hidden!r}, which is hidden in this turn: it is not callable "
                f"until that domain is requested.")
    available = ", ".join(sorted(spec.name for spec in turn.tools)) or "none"
    return f"Tool {name!r} is not available in this turn (available: {available})."


async def _ask(turn: TurnRun, request: ApprovalRequest) -> Approval:
    """The request's approver's answer; refused when there is none, or it fails or answers nonsense (logged)."""
    approver = turn.request.approver
    if approver is None:
        return Approval(False, "no_approver")
    try:
        answer = await await_me_maybe(approver(request))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("tool approver failed for {}: {}: {}; the call is refused", request.tool, type(exc).__name__, exc)
        return Approval(False, "approver_error")
    if isinstance(answer, Approval):
        return answer
    if isinstance(answer, bool):
        return Approval(answer, "approver")
    logger.warning("tool approver answered {} for {}, not a bool or Approval; the call is refused", type(answer).__name__, request.tool)
    return Approval(False, "approver_error")
