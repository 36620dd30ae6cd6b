"""The bundled plugin ``recovery``: the three recovery sections of the system prompt.

* ``tool_recovery_policy`` (stable, 360): how to recover from a failed tool call. Rendered when
  the turn offers tools (``turn.tools`` is not empty); fixed text, so it sits in the cached part.
* ``recovery_continuation`` (dynamic, 660): the continuation hint, in the provider round after a
  reply stopped at the output-token limit (``turn.provider_round.continuation``).
* ``retry_instruction`` (dynamic, 670): in the final round that ``runtime.maxTurns`` allows after
  tool rounds, the final-answer instruction; otherwise, in the round after a recoverable tool
  failure (a result with status ``error`` or ``rejected``), which tools failed and that the
  model may retry with corrected arguments or choose another way.

The round state comes from :class:`~monoagent._kernel.turn.ProviderRound`, which the provider loop
sets before each round after the first and then re-renders the dynamic sections. Tool names in
the retry instruction are the model's own calls (a rejected call may name anything), so each is
cut to :data:`NAME_MAX_CHARS` and at most :data:`MAX_NAMED_TOOLS` are named.
"""

from __future__ import annotations

from monoagent import Section, Turn, hookimpl

NAME = "recovery"
NAME_MAX_CHARS = 64
MAX_NAMED_TOOLS = 8

TOOL_RECOVERY_POLICY = (
    "# Tool recovery\n"
    "When a tool call fails (its result is an error or a refusal), read the result: it says what went wrong. "
    "Correct the arguments and call again, or try another tool or another way. Never repeat the identical "
    "call that failed. If you cannot recover, say plainly which tool failed and why, and answer with what you "
    "have. Never invent a tool result or claim a tool succeeded when it did not."
)
RETRY_INSTRUCTION = (
    "# Retry\n"
    "In the previous step {calls} failed. Read the error in the result, then retry with corrected arguments "
    "or choose another way; do not repeat the identical call."
)
FINAL_ANSWER_INSTRUCTION = (
    "# Final answer\n"
    "The tool budget of this turn is used up: no more tool calls are possible. Answer now with what you have, "
    "and say what you could not finish or check."
)
CONTINUATION_HINT = (
    "# Continue\n"
    "Your previous reply was cut off at the output limit. Continue exactly where it stopped, without "
    "repeating anything already written and without any preamble."
)


def _named(name: str) -> str:
    return repr(name[:NAME_MAX_CHARS] + ("..." if len(name) > NAME_MAX_CHARS else ""))


@hookimpl(trylast=True)
def section_tool_recovery_policy(turn: Turn) -> Section | None:
    if not turn.tools:
        return None
    return Section("tool_recovery_policy", TOOL_RECOVERY_POLICY, order=360, stability="stable", source=NAME)


@hookimpl(trylast=True)
def section_retry_instruction(turn: Turn) -> Section | None:
    state = turn.provider_round
    if state.final:
        text = FINAL_ANSWER_INSTRUCTION
    elif state.failed_tools:
        failed = state.failed_tools
        names = [f"tool {_named(f.name)} ({f.status})" for f in failed[:MAX_NAMED_TOOLS]]
        more = len(failed) - len(names)
        calls = ", ".join(names) + (f" and {more} more tool call(s)" if more > 0 else "")
        text = RETRY_INSTRUCTION.format(calls=f"the call of {calls}" if len(failed) == 1 else f"the calls of {calls}")
    else:
        return None
    return Section("retry_instruction", text, order=670, stability="dynamic", source=NAME)


@hookimpl(trylast=True)
def section_recovery_continuation(turn: Turn) -> Section | None:
    if not turn.provider_round.continuation:
        return None
    return Section("recovery_continuation", CONTINUATION_HINT, order=660, stability="dynamic", source=NAME)
