"""Client-side tools: the tools a caller runs itself, and the open turn their calls leave behind.

A request's :attr:`~monoagent._kernel.turn_request.TurnRequest.client_tools` are offered beside the
agent's own (:func:`check_registered` before admission, :func:`check_provided` once the turn's tools
are known: a name the agent offers too is refused). When the model calls one, the run ends after
that step with the call pending (:attr:`TurnResult.pending_tool_calls
<monoagent._kernel.turn_request.TurnResult.pending_tool_calls>`), and the run's tool loop is
committed after its user message: the conversation now ends with an *open turn*
(:func:`open_turn`), the user message and the assistant steps and server-side results that
followed it, the last step holding calls no ``tool`` message answers. A request with
``tool_results`` continues it (:func:`resume`): the open turn's user message becomes the current one
again, its steps and the caller's results go back to the model in place, and the commit appends
the results and what the model does next. A new turn on a conversation whose open turn was never
answered reads its history through :func:`paired_tool_messages`, which drops the unanswered calls (a
provider refuses a call without its result, and a result without its call).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import attrs

from monoagent._kernel.errors import ClientToolsRefused
from monoagent._kernel.model import Message, ToolCall
from monoagent._kernel.turn_request import TOOL_CHOICES, TurnRequest

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._pipeline.turn_run import TurnRun

OUTSIDE_HISTORY = "[The message that started these tool calls is no longer in the kept history.]"
"""The current user message of a continuation whose open turn began before the kept history window."""


@attrs.frozen
class OpenTurn:
    """The open turn at the end of a conversation: ``before`` it, its ``user`` message (None when it
    fell out of the kept window), its ``steps`` (assistant steps and tool results, in order) and the
    ``pending`` calls of its last step that no ``tool`` message answers, in call order."""

    before: tuple[Message, ...]
    user: Message | None
    steps: tuple[Message, ...]
    pending: tuple[ToolCall, ...]


def _collisions(names: Iterable[str], request: TurnRequest) -> list[str]:
    taken = set(names)
    return [spec.name for spec in request.client_tools if spec.name in taken]


def check_registered(agent: Agent, request: TurnRequest) -> None:
    """Refuse client tools named like a tool the agent registered (:class:`ClientToolsRefused`), before admission."""
    if request.client_tools:
        _refuse_collisions(_collisions(agent.tools, request))


def check_provided(turn: TurnRun) -> None:
    """Refuse client tools named like a tool ``provide_tools`` offers on ``turn`` (an MCP server's, say), and a
    ``tool_choice`` that names no tool the turn offers; run once the turn's tools are known."""
    request = turn.request
    if request.client_tools:
        _refuse_collisions(_collisions(turn.provided_tools, request))
    choice = request.tool_choice
    if choice is not None and choice not in TOOL_CHOICES and all(spec.name != choice for spec in turn.tools):
        offered = ", ".join(sorted(spec.name for spec in turn.tools)) or "none"
        raise ClientToolsRefused(f"tool_choice names tool {choice!r}, which this turn does not offer (offered: {offered})")


def _refuse_collisions(names: Sequence[str]) -> None:
    if names:
        raise ClientToolsRefused(
            f"client tool name(s) {', '.join(map(repr, names))} are taken by the agent's own tools; rename the "
            f"client's tool(s) (the agent's tools run on the server and keep their names)"
        )


def open_turn(history: Sequence[Message]) -> OpenTurn | None:
    """The open turn ``history`` ends with, or None: after its last user message only assistant steps and
    tool results, the last step with calls that no later ``tool`` message answers."""
    start = len(history)
    while start > 0 and history[start - 1].role in ("assistant", "tool") and history[start - 1].continuity is None:
        start -= 1
    steps = tuple(history[start:])
    if not steps or (steps[-1].role == "assistant" and not steps[-1].tool_calls):
        return None
    last = max(index for index, message in enumerate(steps) if message.role == "assistant")
    answered = {message.tool_call_id for message in steps[last + 1 :] if message.role == "tool"}
    pending = tuple(call for call in steps[last].tool_calls if call.id not in answered)
    if not pending:
        return None
    user = history[start - 1] if start > 0 and history[start - 1].role == "user" else None
    return OpenTurn(tuple(history[: start - 1 if user is not None else start]), user, steps, pending)


def resume(turn: TurnRun) -> OpenTurn:
    """Make ``turn`` (a request with ``tool_results``) the continuation of its conversation's open turn.

    ``turn.history`` becomes the history before the open turn, and the request's text the open turn's
    user message (the current message again). Raises :class:`ClientToolsRefused` when the history ends
    with no open turn, or the results do not answer exactly its pending calls.
    """
    request = turn.request
    found = open_turn(turn.history)
    given = [result.call_id for result in request.tool_results]
    if found is None:
        raise ClientToolsRefused(
            f"tool results for call(s) {', '.join(map(repr, given))} were sent, but the conversation has no tool "
            f"call waiting for a result (its last turn was answered, or it never called a client tool)"
        )
    waiting = [call.id for call in found.pending]
    unknown = [call_id for call_id in given if call_id not in waiting]
    missing = [call_id for call_id in waiting if call_id not in given]
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"result(s) for {', '.join(map(repr, unknown))} answer no waiting call")
        if missing:
            parts.append(f"call(s) {', '.join(map(repr, missing))} have no result")
        raise ClientToolsRefused(
            f"the tool results do not answer the conversation's waiting tool calls ({', '.join(map(repr, waiting))}): "
            f"{'; '.join(parts)}"
        )
    turn.history = found.before
    text = found.user.content if found.user is not None else OUTSIDE_HISTORY
    turn.request = attrs.evolve(request, text=text)
    return found


def paired_tool_messages(messages: Iterable[Message]) -> tuple[Message, ...]:
    """``messages`` with every tool call answered and every tool result called: a provider refuses either alone.

    An assistant's call with no later ``tool`` message of its id is dropped (the message too when
    that leaves it empty), and so is a ``tool`` message answering no call kept before it (its call
    was cut by a bound, or never sent). Messages without tool calls or results pass unchanged.
    """
    messages = tuple(messages)
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    called: set[str] = set()
    kept: list[Message] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            calls = tuple(call for call in message.tool_calls if call.id in answered)
            called.update(call.id for call in calls)
            if not calls and not message.content:
                continue
            if len(calls) != len(message.tool_calls):
                message = attrs.evolve(message, tool_calls=calls)
        elif message.role == "tool" and message.tool_call_id not in called:
            continue
        kept.append(message)
    return tuple(kept)
