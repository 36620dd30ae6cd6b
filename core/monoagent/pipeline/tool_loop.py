"""The tool loop: how each tool call the model requests runs.

**One call** (:meth:`ToolLoop.run`), in this order:

1. the repeated-call guard: the same tool with the same (canonical) arguments more than
   ``runtime.maxRepeatedToolCalls`` times in a row, over the whole run, retries included, ends
   the run before that call runs (:class:`~monoagent.kernel.errors.RepeatedToolCall`);
2. the invocation record in tool history (:mod:`monoagent.pipeline.continuity`), then the
   ``tool_call`` event;
3. availability: a name that is not in ``turn.tools`` is answered with status ``rejected``;
4. ``before_tool_call``, which may answer the call instead of the tool;
5. the handler, with a :class:`~monoagent.kernel.tool_context.ToolContext`; an exception becomes
   an ``error`` result whose text is redacted, a ``str`` a ``success`` result;
6. the result is bound to the call (its ``call_id`` and ``name`` are the call's), replaced
   surrogates are reported, the tool-output bloat guard (:mod:`monoagent.pipeline.bloat`) runs,
   ``after_tool_call`` observes it, the result record goes to tool history and ``tool_result``
   is emitted.

The result goes back to the model as :func:`tool_message`, whose ``is_error`` the provider
formats carry on the wire.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import attrs

from monoagent.kernel.errors import RepeatedToolCall
from monoagent.kernel.host import await_me_maybe
from monoagent.kernel.model import Message, ToolCall, ToolResult, ToolStatus
from monoagent.kernel.tool_context import ToolContext
from monoagent.pipeline.bloat import guard_tool_result
from monoagent.pipeline.continuity import RunContinuity
from monoagent.pipeline.stream import canonical_arguments
from monoagent.text import utf8_len

if TYPE_CHECKING:
    from monoagent.kernel.turn import Turn


def tool_message(call: ToolCall, result: ToolResult) -> Message:
    """The ``tool`` message that answers ``call`` in the next provider step, with the result's ``is_error``."""
    return Message("tool", result.content, name=call.name, tool_call_id=call.id, is_error=result.is_error)


def bind_result(result: ToolResult, call: ToolCall) -> ToolResult:
    """``result`` answering ``call``: its ``call_id`` and ``name`` set to the call's."""
    if result.call_id == call.id and result.name == call.name:
        return result
    return attrs.evolve(result, call_id=call.id, name=call.name)


class ToolLoop:
    """Runs the tool calls of one run, over all its attempts (the repeat streak spans retries).

    Built by the harness per run and handed to :class:`~monoagent.pipeline.provider_call.ProviderCall`,
    which calls :meth:`run` for each requested call in order.
    """

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.max_repeats = turn.config.runtime.max_repeated_tool_calls
        self._streak: tuple[str, str] | None = None
        self._repeats = 0

    async def run(self, call: ToolCall) -> ToolResult:
        """Run ``call`` to its result (see the module docstring); raises only to end the run."""
        self._check_repeats(call)
        turn = self.turn
        continuity = RunContinuity.of(turn)
        turn.emit("tool_call", id=call.id, name=call.name, **await continuity.tool_invocation(call))
        context = ToolContext(turn, call)
        try:
            result = await self._answer(context)
        finally:
            context.finish()
        turn.report_invalid_unicode("tool_result", result.invalid_unicode, tool=call.name)
        result = guard_tool_result(turn, bind_result(result, call))
        turn.agent.host.call("after_tool_call", turn=turn, call=call, result=result)
        persistence = await continuity.tool_result(call, result)
        dropped = {"progress_dropped": context.progress_dropped} if context.progress_dropped else {}
        turn.emit(
            "tool_result", id=call.id, name=call.name, status=result.status.value, bytes=utf8_len(result.content),
            **persistence, **dropped,
        )
        return result

    async def _answer(self, context: ToolContext) -> ToolResult:
        """The call's result: refused, answered by ``before_tool_call``, or the handler's."""
        turn, call = context.turn, context.call
        agent = turn.agent
        tool = agent.tools.get(call.name)
        if tool is None or call.name not in {spec.name for spec in turn.tools}:
            available = ", ".join(sorted(spec.name for spec in turn.tools)) or "none"
            return context.result(f"Tool {call.name!r} is not available in this turn (available: {available}).", ToolStatus.REJECTED)
        answer = agent.host.call("before_tool_call", turn=turn, call=call)
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

    def _check_repeats(self, call: ToolCall) -> None:
        """Count ``call`` in the run's streak of identical calls; stop the run before one too many."""
        key = (call.name, canonical_arguments(self.turn.model, call))
        self._repeats = self._repeats + 1 if key == self._streak else 1
        self._streak = key
        if self.max_repeats and self._repeats > self.max_repeats:
            raise RepeatedToolCall(
                f"the model called tool {call.name[:64]!r} with the same arguments {self._repeats} times in a row; the run "
                f"was stopped before that call ran (runtime.maxRepeatedToolCalls = {self.max_repeats}, 0 for no limit); "
                f"nothing was committed"
            )
