"""The tool loop: which tools a turn offers, and how each tool call the model requests runs.

**Offered tools** (:func:`offered_tools`, called by the harness when it prepares the turn, after
the history is loaded and before recall): every registered tool and every tool the
``provide_tools`` step offers for this turn (:func:`provided_tools`), less the ones whose
``enabled(turn)`` (``register(..., enabled=...)``, :attr:`~monoagent._kernel.interfaces.Tool.enabled`)
is false on this turn, narrowed by the ``filter_tools`` step. Every implementation sees the full
registered list and may return the ones it keeps; a tool is offered when it is enabled and every
implementation that answered kept it (the lists are intersected, so the outcome does not depend
on load order and no plugin can re-admit a tool another withdrew). Of those, the ones any
``hide_tools`` implementation holds back are *hidden* (:func:`held_back`): they become
``turn.hidden_tools``, the rest ``turn.tools``. The section producers and every provider request
of the turn read ``turn.tools``; the one thing that changes it later is
:meth:`~monoagent._kernel.tool_context.ToolContext.reveal_tools` (a tool such as the
``tool-domains`` plugin's ``request_tools``), which moves hidden tools into it for the rest of
the run, so the next provider round offers them. Which tools are hidden, and why, is the hiding
plugin's policy; the loop only keeps the two lists.

**One call** (:meth:`ToolLoop.run`), in this order:

1. the repeated-call guard: the same tool with the same (canonical) arguments more than
   ``runtime.maxRepeatedToolCalls`` times in a row, or in a repeating cycle of up to
   :data:`MAX_REPEATED_CYCLE` calls (A, B, A, B, ...), over the whole run, retries included, ends
   the run before that call runs (:class:`~monoagent._kernel.errors.RepeatedToolCall`);
2. the invocation record in tool history (:mod:`monoagent._pipeline.continuity`), then the
   ``tool_call`` event, which carries a redacted preview of the arguments (:func:`arguments_preview`)
   so a front end can show the call while it runs;
3. availability: a name that is not in ``turn.tools`` (not offered, or hidden) is answered with
   status ``rejected``;
4. ``before_tool_call`` (:meth:`~monoagent._kernel.hooks.Hooks.first_awaited`: an answer may be
   awaited), which may answer the call instead of the tool. Permission profiles are enforced
   here, by the ``permissions`` plugin's implementation, which runs first (``tryfirst``): it
   refuses a call the turn's profile refuses, or asks the request's approver, before any other
   implementation or the handler sees the call (docs/permissions.md);
5. the handler, with a :class:`~monoagent._kernel.tool_context.ToolContext`; an exception becomes
   an ``error`` result whose text is redacted, a ``str`` a ``success`` result;
6. the result is bound to the call (its ``call_id`` and ``name`` are the call's), replaced
   surrogates are reported, the tool-output bloat guard (:mod:`monoagent._pipeline.bloat`) runs,
   ``after_tool_call`` observes it, the result record goes to tool history and ``tool_result``
   is emitted (with a short, redacted ``error`` when the result is not a success).

The result goes back to the model as :func:`tool_message`, whose ``is_error`` the provider
formats carry on the wire.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._boundary.text import utf8_len
from monoagent._kernel import hookspecs
from monoagent._kernel.errors import MonoagentError, PluginError, RepeatedToolCall
from monoagent._kernel.host import await_me_maybe
from monoagent._kernel.interfaces import Tool, ToolSourceFailure
from monoagent._kernel.model import Message, ToolCall, ToolResult, ToolSpec, ToolStatus
from monoagent._kernel.tool_context import ToolContext
from monoagent._kernel.tool_names import tool_name_problem
from monoagent._pipeline.bloat import guard_tool_result
from monoagent._pipeline.continuity import RunContinuity
from monoagent._pipeline.stream import canonical_arguments

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.turn import Turn
    from monoagent._pipeline.turn_run import TurnRun

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
    :class:`~monoagent._kernel.errors.PluginError` naming the plugin for a value that is not a
    ``Tool`` or ``ToolSourceFailure`` or a tool name outside the providers' rule
    (:data:`~monoagent._kernel.tool_names.TOOL_NAME_PATTERN`), and naming both plugins for a name
    registered or provided twice.
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
            problem = tool_name_problem(name)
            if problem:  # the registrar checks registered names; a provided one is checked here, before any provider sees it
                raise PluginError(f"plugin {plugin!r} provided a tool whose {problem}")
            other = registered.get(name) or tools.get(name)
            if other is not None:
                raise PluginError(f"tool {name!r} is offered by plugins {other.plugin!r} and {plugin!r}; a tool name must be unique")
            tools[name] = attrs.evolve(item, plugin=plugin)
    return tools, failures


@attrs.frozen
class ToolOffer:
    """What a turn offers at its start, and why each other tool is not offered (:func:`tool_offer`).

    ``offered`` are the tools sent to the provider from the first round (``turn.tools``), in
    registration order, then the provided ones; ``hidden`` the ones a ``hide_tools``
    implementation holds back (``turn.hidden_tools``; ``hidden_by`` names, per tool, the plugins
    that hid it); ``inactive`` every other registered or provided tool with the reason it is not
    offered on this turn (its ``enabled`` answered false, or a ``filter_tools`` implementation
    withdrew it, naming the plugin); ``failures`` the tool sources that could not list their tools;
    ``tools`` every registered and provided tool (with its plugin and source), in that order.
    ``monoagent tools`` and ``monoagent prompt --json`` show it; the harness sets the turn's lists from it.
    """

    offered: tuple[ToolSpec, ...]
    hidden: tuple[ToolSpec, ...] = ()
    inactive: tuple[tuple[ToolSpec, str], ...] = ()
    hidden_by: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    failures: tuple[ToolSourceFailure, ...] = ()
    tools: tuple[Tool, ...] = ()

    def status(self, name: str) -> tuple[str, str]:
        """``("offered", "")``, ``("hidden", why)`` or ``("inactive", why)`` for the tool called ``name``.

        Raises ``KeyError`` for a name that is neither registered nor provided.
        """
        if any(spec.name == name for spec in self.offered):
            return "offered", ""
        hidden = next((spec for spec in self.hidden if spec.name == name), None)
        if hidden is not None:
            by = ", ".join(repr(plugin) for plugin in self.hidden_by.get(name, ()))
            domain = f"tool domain {hidden.domain!r}" if hidden.domain else "no tool domain"
            return "hidden", f"{domain}, hidden by plugin {by} until it is revealed (request_tools)"
        why = next((reason for spec, reason in self.inactive if spec.name == name), None)
        if why is None:
            raise KeyError(name)
        return "inactive", why


def tool_offer(turn: TurnRun, failures: Sequence[ToolSourceFailure] = ()) -> ToolOffer:
    """The tools ``turn`` offers, holds back and leaves out (``turn.provided_tools`` already set):
    the one place a turn's tools are decided (``enabled=``, ``filter_tools``, ``hide_tools``), for
    a turn and for a listing alike. See :func:`offered_tools` and :func:`held_back`."""
    offered, inactive = _offered(turn)
    hidden_by: dict[str, list[str]] = {}
    callable_now, hidden = held_back(turn, offered, hidden_by)
    records = (*turn.agent.tools.values(), *turn.provided_tools.values())
    by = {name: tuple(plugins) for name, plugins in hidden_by.items()}
    return ToolOffer(callable_now, hidden, inactive, by, tuple(failures), records)


def offered_tools(turn: TurnRun) -> tuple[ToolSpec, ...]:
    """The tools offered on ``turn``: every registered and provided tool whose ``enabled`` holds on
    the turn, narrowed by ``filter_tools``.

    While they are worked out, ``turn.tools`` holds every registered and provided tool: that is
    what each tool's ``enabled(turn)`` sees, and ``filter_tools`` gets the same list as its
    ``tools`` (its answers and the ``enabled`` answers are intersected, so the order does not
    matter). Raises
    :class:`~monoagent._kernel.errors.PluginError` naming the plugin when an implementation returns
    something other than registered tool specs, or a tool's ``enabled`` fails or answers other than a bool.
    """
    return _offered(turn)[0]


def _offered(turn: TurnRun) -> tuple[tuple[ToolSpec, ...], tuple[tuple[ToolSpec, str], ...]]:
    """:func:`offered_tools`, and each tool left out with why (the first reason found: ``enabled``, then each ``filter_tools``)."""
    tools = (*turn.agent.tools.values(), *turn.provided_tools.values())
    registered = tuple(tool.spec for tool in tools)
    turn.tools, turn.hidden_tools = registered, ()
    view = turn.view
    known = {spec.name for spec in registered}
    why: dict[str, str] = {tool.spec.name: _disabled_because(tool) for tool in tools if not _enabled(tool, view)}
    keep = known - set(why)
    for answer in turn.agent.hooks.each(hookspecs.filter_tools, turn=view, tools=registered):
        kept = _kept_names(answer.plugin, answer.value, known, "filter_tools")
        for name in keep - kept:
            why[name] = f"withdrawn by filter_tools of plugin {answer.plugin!r}"
        keep = keep & kept
    left_out = tuple((spec, why[spec.name]) for spec in registered if spec.name in why)
    return (registered if keep == known else tuple(spec for spec in registered if spec.name in keep)), left_out


def _disabled_because(tool: Tool) -> str:
    """Why ``tool`` is not offered when its ``enabled`` answers false: the plugin, and the condition
    the ``enabled`` callable's docstring states (its first paragraph), when it has one."""
    try:
        condition = _condition(tool.enabled)  # worked out once per callable: every turn asks for the same tools
    except TypeError:  # an unhashable callable object
        condition = _condition.__wrapped__(tool.enabled)
    return f"enabled= of plugin {tool.plugin!r} is false on this turn" + (f": {condition}" if condition else "")


@functools.lru_cache(maxsize=1024)
def _condition(enabled: object) -> str:
    doc = (getattr(enabled, "__doc__", None) or "").strip().split("\n\n")[0]
    return " ".join(doc.replace("``", "").split())


def _enabled(tool: Tool, turn: Turn) -> bool:
    """``tool.enabled(turn)`` (True without one), or a :class:`~monoagent._kernel.errors.PluginError` naming its plugin."""
    if tool.enabled is None:
        return True
    try:
        answer = tool.enabled(turn)
    except MonoagentError:
        raise
    except Exception as exc:
        raise PluginError(f"enabled= of tool {tool.spec.name!r} (plugin {tool.plugin!r}) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(answer, bool):
        raise PluginError(f"enabled= of tool {tool.spec.name!r} (plugin {tool.plugin!r}) returned a value of type "
                          f"{type(answer).__name__}; it answers True (offer the tool on this turn) or False")
    return answer


def held_back(
    turn: TurnRun, offered: Sequence[ToolSpec], hidden_by: dict[str, list[str]] | None = None,
) -> tuple[tuple[ToolSpec, ...], tuple[ToolSpec, ...]]:
    """``offered`` split into the tools callable from the start and the ones ``hide_tools`` holds back.

    A tool is hidden when any implementation hides it (the answers are joined), in offered order;
    ``hidden_by``, when given, gets the plugins that hid each one.
    Raises :class:`~monoagent._kernel.errors.PluginError` naming the plugin when an implementation
    returns something other than offered tool specs.
    """
    known = {spec.name for spec in offered}
    hidden: set[str] = set()
    for answer in turn.agent.hooks.each(hookspecs.hide_tools, turn=turn.view, tools=tuple(offered)):
        names = _kept_names(answer.plugin, answer.value, known, "hide_tools")
        hidden |= names
        if hidden_by is not None:
            for name in names:
                hidden_by.setdefault(name, []).append(answer.plugin)
    if not hidden:
        return tuple(offered), ()
    return tuple(spec for spec in offered if spec.name not in hidden), tuple(spec for spec in offered if spec.name in hidden)


#: What each tool-narrowing hook's answer is, for its errors: (what to return, where an unknown tool comes from).
_ANSWERS = {
    "filter_tools": ("the ToolSpecs to keep (a subset of the 'tools' argument)",
                     "not registered; filter_tools only withdraws tools (register new ones with register_tools)"),
    "hide_tools": ("the ToolSpecs to hide (a subset of the 'tools' argument)",
                   "not offered on this turn; hide_tools only holds back offered tools"),
}


def _kept_names(plugin: str, kept: Any, known: set[str], hook: str) -> set[str]:
    answer, unknown_because = _ANSWERS[hook]
    if isinstance(kept, (str, bytes, ToolSpec)) or not isinstance(kept, Iterable):
        kept = (kept,)  # one spec is a list of one; anything else is reported below
    names: set[str] = set()
    for spec in kept:
        if not isinstance(spec, ToolSpec):
            raise PluginError(
                f"plugin {plugin!r} returned a value of type {type(spec).__name__} from {hook} where a "
                f"ToolSpec belongs; return {answer} or None"
            )
        names.add(spec.name)
    unknown = names - known
    if unknown:
        raise PluginError(
            f"plugin {plugin!r} returned tool(s) {', '.join(map(repr, sorted(unknown)))} from {hook}, which are {unknown_because}"
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

    Built by the harness per run and handed to :class:`~monoagent._pipeline.provider_call.ProviderCall`,
    which calls :meth:`run` for each requested call in order.
    """

    def __init__(self, turn: TurnRun) -> None:
        self.turn = turn
        self.max_repeats = turn.config.runtime.max_repeated_tool_calls
        self._repeats = _Repeats()
        self.client = frozenset(spec.name for spec in turn.request.client_tools)
        """The names of the request's client-side tools: their calls are :meth:`handed_over`, not run."""

    async def run(self, call: ToolCall) -> ToolResult:
        """Run ``call`` to its result (see the module docstring); raises only to end the run."""
        canonical = self._start(call)
        return await self._settle(call, canonical, self._answer)

    async def handed_over(self, call: ToolCall) -> ToolResult | None:
        """A call to a client-side tool (:attr:`client`): None when the caller runs it, or the server's answer.

        The repeated-call guard counts it and ``before_tool_call`` sees it first (a permission
        profile that refuses it answers it here, and the result goes back to the model like any
        tool's); otherwise a ``tool_call`` event with ``client: true`` announces it and the caller
        answers it in a later request (:meth:`accept`).
        """
        canonical = self._start(call)
        turn = self.turn
        answer = await turn.agent.hooks.first_awaited(hookspecs.before_tool_call, turn=turn.view, call=call)
        if answer is None:
            turn.emit("tool_call", id=call.id, name=call.name, client=True, **arguments_preview(turn, canonical))
            return None

        async def answered(context: ToolContext) -> ToolResult:
            return answer

        return await self._settle(call, canonical, answered)

    async def accept(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """The caller's ``result`` of a client-side ``call`` (a continuation's ``tool_results``), through what every
        tool result goes through: the bloat guard, ``after_tool_call``, tool history and the events."""
        canonical = self._start(call, count=False)

        async def given(context: ToolContext) -> ToolResult:
            return result

        return await self._settle(call, canonical, given)

    def _start(self, call: ToolCall, *, count: bool = True) -> str:
        """A new call of the run: refused once the run is sealed, counted by the repeated-call guard
        (``count``); its canonical arguments."""
        if RunContinuity.of(self.turn).collector.sealed:  # the run was cancelled and its runtime ignored it: no new tool runs
            raise asyncio.CancelledError
        return self._check_repeats(call) if count else canonical_arguments(self.turn.model, call)

    async def _settle(self, call: ToolCall, canonical: str, answer: Callable[[ToolContext], Awaitable[ToolResult]]) -> ToolResult:
        """Record ``call``, get its result from ``answer``, and take it through the steps every result takes."""
        turn = self.turn
        continuity = RunContinuity.of(turn)
        persistence = await continuity.tool_invocation(call)
        turn.emit("tool_call", id=call.id, name=call.name, **arguments_preview(turn, canonical), **persistence)
        context = ToolContext(turn, call)
        try:
            result = await answer(context)
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
        """The call's result: refused as unavailable, answered by ``before_tool_call``, or the handler's."""
        turn, call = self.turn, context.call
        agent = turn.agent
        tool = agent.tools.get(call.name) or turn.provided_tools.get(call.name)
        if tool is None or call.name not in {spec.name for spec in turn.tools}:
            return context.result(_unavailable(turn, call.name), ToolStatus.REJECTED)
        answer = await agent.hooks.first_awaited(hookspecs.before_tool_call, turn=turn.view, call=call)
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
    hidden = next((spec for spec in turn.hidden_tools if spec.name == name), None)
    if hidden is not None:
        domain = f" (tool domain {hidden.domain!r})" if hidden.domain is not None else ""
        return f"Tool {name!r}{domain} is hidden in this turn: it is not callable until it is revealed."
    available = ", ".join(sorted(spec.name for spec in turn.tools)) or "none"
    return f"Tool {name!r} is not available in this turn (available: {available})."
