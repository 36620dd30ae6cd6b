"""What a tool handler receives: one typed context for one tool call.

A handler is ``handler(context) -> str | ToolResult`` (or an awaitable of one). The context
carries the :class:`~monoagent._kernel.turn.Turn`, the :class:`~monoagent._kernel.model.ToolCall`
being answered (provider call id, tool name, parsed arguments) and :meth:`ToolContext.progress`,
so a handler never has to find out which call it is answering. A wrapper that adapts a plain
function needs nothing else: ``lambda context: str(fn(**context.arguments))``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._boundary.text import utf8_prefix
from monoagent._kernel.log import logger
from monoagent._kernel.model import ContentBlock, ToolCall, ToolResult, ToolSpec, ToolStatus, Usage

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.turn import RunAccess, Turn

PROGRESS_MAX_BYTES = 1024
"""UTF-8 bytes of one ``tool_progress`` text (after redaction); the rest is cut off."""

PROGRESS_MAX_EVENTS = 64
"""``tool_progress`` events one call may emit; later reports are counted, not emitted."""


@attrs.define
class _Progress:
    """The mutable side of a frozen context: the loop it belongs to, what was reported, whether it settled."""

    loop: asyncio.AbstractEventLoop | None
    emitted: int = 0
    dropped: int = 0
    finished: bool = False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@attrs.frozen
class ToolContext:
    """One tool call as its handler sees it: the turn, the call, and what a tool may do to its run.

    ``turn`` is the run as it stands (a read-only :class:`~monoagent._kernel.turn.Turn`:
    ``turn.config``, ``turn.request``, ``turn.state``, ``turn.redact(...)``); ``call`` the
    :class:`~monoagent._kernel.model.ToolCall` the model requested. Build results with
    :meth:`result` so they answer this call; the tool loop binds any returned
    :class:`~monoagent._kernel.model.ToolResult` to ``call`` in any case (its ``call_id`` and
    ``name`` are the call's, whatever the handler put there). Beyond reading, a tool may report
    :meth:`progress`, count :meth:`add_usage` it spent on the run's behalf (a subagent's turn),
    :meth:`reveal_tools` (make hidden tools callable for the rest of the run) and reach
    the :attr:`agent` running the turn (a tool that drives it, such as ``task``).
    """

    _run: RunAccess = attrs.field(alias="run", repr=False)
    call: ToolCall
    _progress: _Progress = attrs.field(init=False, factory=lambda: _Progress(_running_loop()), repr=False, eq=False)

    @property
    def turn(self) -> Turn:
        """The run as it stands now (a new snapshot after :meth:`reveal_tools`)."""
        return self._run.view

    @property
    def agent(self) -> Agent:
        """The Agent running this turn, for a tool that drives it (the ``task`` tool derives a subagent from it)."""
        return self._run.agent

    def add_usage(self, usage: Usage) -> None:
        """Count ``usage`` spent for this run outside its own provider steps (a subagent's turn) in its usage
        (its :class:`~monoagent._kernel.model.TurnResult` and ``run_completed`` include it)."""
        self._run.add_usage(usage)

    def reveal_tools(self, names: Iterable[str]) -> tuple[ToolSpec, ...]:
        """Make the hidden tools among ``names`` (``turn.hidden_tools``, held back by ``hide_tools``)
        callable for the rest of the run, offered from the next provider round; returns them (none
        when none of them is hidden)."""
        return self._run.reveal_tools(names)

    @property
    def arguments(self) -> dict[str, Any]:
        """The call's parsed arguments (a JSON object; the harness checked its shape and depth)."""
        return self.call.arguments

    @property
    def progress_dropped(self) -> int:
        """Reports that emitted no event: over :data:`PROGRESS_MAX_EVENTS`, or after the call settled."""
        return self._progress.dropped

    def result(self, content: str, status: ToolStatus = ToolStatus.SUCCESS, blocks: Sequence[ContentBlock] = ()) -> ToolResult:
        """A :class:`~monoagent._kernel.model.ToolResult` answering this call.

        A status other than ``success`` reaches the model as an error (Anthropic ``is_error``,
        see docs/providers.md for the OpenAI format).
        """
        return ToolResult(self.call.id, self.call.name, content, status, tuple(blocks))

    def progress(self, text: str) -> None:
        """Report progress of a long call: a ``tool_progress`` run event (``id``, ``name``, ``text``, ``truncated``).

        The text goes through the ``redact`` chain (kind ``event``) and is then cut to
        :data:`PROGRESS_MAX_BYTES`; a call emits at most :data:`PROGRESS_MAX_EVENTS` of them, and
        none after it settled (both counted in the call's ``tool_result`` event as
        ``progress_dropped``). Progress never reaches the model or history. Safe to call from a
        worker thread running the handler's blocking part: the event is emitted on the turn's loop.
        """
        if not isinstance(text, str):
            raise TypeError(f"ToolContext.progress takes a str, not {type(text).__name__}")
        loop = self._progress.loop
        if loop is not None and _running_loop() is not loop:
            try:
                loop.call_soon_threadsafe(self._emit, text)
            except RuntimeError:  # the loop closed under a thread that outlived the call
                self._progress.dropped += 1
                logger.debug("tool_progress of {} dropped: its event loop is closed", self.call.name)
            return
        self._emit(text)

    def finish(self) -> None:
        """Mark the call settled (the tool loop does it): later progress is dropped, not emitted."""
        self._progress.finished = True

    def _emit(self, text: str) -> None:
        progress = self._progress
        if progress.finished or progress.emitted >= PROGRESS_MAX_EVENTS:
            progress.dropped += 1
            return
        progress.emitted += 1
        cut = utf8_prefix(self._run.agent.redact(text, "event"), PROGRESS_MAX_BYTES)
        self._run.emit("tool_progress", id=self.call.id, name=self.call.name, text=cut.text, truncated=cut.truncated)
