"""One run in progress, as the pipeline holds it: the mutable side of a turn.

Hooks see a frozen :class:`~monoagent._kernel.turn.Turn` (:attr:`TurnRun.view`); the pipeline keeps
what changes as the run goes on here: the history once loaded, the offered and hidden tools, the
recalled memory, the permission profile, the provider round, and the run's own state that no hook
reads (the continuity record, the partial answer of a cancelled attempt, the warm-session lease,
the usage others spent for the run, the provided tools). Setting any attribute drops the cached
view, so the next hook sees the run as it now stands; the plugins' ``state`` dict and the
diagnostics list are shared by every view of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._kernel.model import Diagnostic, MemoryHit, Message, ToolSpec, Usage
from monoagent._kernel.turn import ProviderRound, SessionInfo, Turn, configured_timezone, report_invalid_unicode
from monoagent._kernel.turn_request import TurnRequest
from monoagent._kernel.valid_text import Replacements

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.config import Config
    from monoagent._kernel.interfaces import Tool
    from monoagent._kernel.permissions import PermissionProfile
    from monoagent._pipeline.client_tools import OpenTurn
    from monoagent._pipeline.continuity import RunContinuity
    from monoagent._pipeline.provider_call import PartialAttempt
    from monoagent._pipeline.sessions import SessionLease


SNAPSHOT_FIELDS = frozenset({
    "agent", "request", "run_id", "model", "session", "started_at", "history", "recalled", "tools", "hidden_tools",
    "permissions", "provider_round", "state",
})
"""The fields of a :class:`TurnRun` its :class:`~monoagent._kernel.turn.Turn` snapshot shows (``agent`` for its config)."""


def _stale(run: TurnRun, attribute: attrs.Attribute[Any], value: Any) -> Any:
    """A new value of a field the snapshot shows makes the next :attr:`TurnRun.view` a new snapshot
    (an ``on_setattr`` hook, so ``__init__`` bypasses it); the pipeline's own state (continuity, the
    session lease, ...) and a value set again do not."""
    if attribute.name in SNAPSHOT_FIELDS and getattr(run, attribute.name) is not value:
        object.__setattr__(run, "_view", None)
    return value


@attrs.define(eq=False, on_setattr=_stale)
class TurnRun:
    """One run in progress: the :class:`~monoagent._kernel.turn.Turn` hooks see, and the pipeline's state of it.

    ``emitter(type, data)`` publishes a run event; ``started_at`` is the clock reading the turn's
    daily bucket and ``now`` come from. ``continuity`` is the run's continuity record (the account
    collector and the tool-call ledger), ``partial`` what the unfinished attempt of a cancelled or
    failed run had produced, ``session_lease`` the run's use of the warm-session backend (None when
    the run does not use one), ``delegated_usage`` what other runs spent on this run's behalf (a
    subagent's turn, added with :meth:`add_usage`), ``provided_tools`` the tools ``provide_tools``
    offered on this turn, by name, ``open_turn`` the open turn a continuation resumes
    (:func:`~monoagent._pipeline.client_tools.resume`).
    """

    agent: Agent
    request: TurnRequest
    run_id: str
    model: str
    session: SessionInfo
    emitter: Callable[[str, dict[str, Any]], None] = attrs.field(repr=False)
    started_at: float = attrs.field(factory=time.time)
    history: tuple[Message, ...] = ()
    recalled: tuple[MemoryHit, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    hidden_tools: tuple[ToolSpec, ...] = ()
    provided_tools: dict[str, Tool] = attrs.Factory(dict)
    diagnostics: list[Diagnostic] = attrs.Factory(list)
    state: dict[str, Any] = attrs.Factory(dict)
    continuity: RunContinuity | None = attrs.field(default=None, repr=False)
    partial: PartialAttempt | None = attrs.field(default=None, repr=False)
    session_lease: SessionLease | None = attrs.field(default=None, repr=False)
    provider_round: ProviderRound = attrs.field(factory=ProviderRound, repr=False)
    delegated_usage: Usage = Usage()
    permissions: PermissionProfile | None = attrs.field(default=None, repr=False)
    open_turn: OpenTurn | None = attrs.field(default=None, repr=False)
    _view: Turn | None = attrs.field(default=None, init=False, repr=False)

    @property
    def view(self) -> Turn:
        """The run as hooks see it now: a frozen :class:`~monoagent._kernel.turn.Turn`, made again after any change."""
        view = self._view
        if view is None:
            view = Turn(
                request=self.request, run_id=self.run_id, model=self.model, session=self.session,
                config=self.agent.config, started_at=self.started_at, run=self, history=self.history,
                recalled=self.recalled, tools=self.tools, hidden_tools=self.hidden_tools,
                permissions=self.permissions, provider_round=self.provider_round, state=self.state,
            )
            object.__setattr__(self, "_view", view)
        return view

    @property
    def config(self) -> Config:
        return self.agent.config

    @property
    def conversation_id(self) -> str:
        return self.session.conversation_id

    @property
    def profile(self) -> str:
        """The prompt profile of this turn: the request's ``profile``, else ``context.profile``."""
        return self.request.profile or self.config.context.profile

    @property
    def timezone(self) -> tzinfo | None:
        return configured_timezone(self.config)

    @property
    def now(self) -> datetime:
        """The turn's start time, in the configured time zone (else the system's)."""
        return datetime.fromtimestamp(self.started_at, self.timezone).astimezone(self.timezone)

    def add_usage(self, usage: Usage) -> None:
        """Count ``usage`` spent for this run outside its own provider steps (a subagent's turn) in its usage."""
        self.delegated_usage = self.delegated_usage + usage

    def diagnose(self, code: str, message: str, section: str | None = None) -> None:
        """Record a prompt diagnostic (missing file, truncation); it lands in the manifest."""
        self.diagnostics.append(Diagnostic(code, message, section))

    def emit(self, type: str, **data: Any) -> None:
        """Emit a :class:`~monoagent._kernel.model.RunEvent` of this run to every observer."""
        self.emitter(type, data)

    def report_invalid_unicode(self, where: str, replaced: Replacements, **data: Any) -> None:
        """One ``runtime_warning`` (``invalid_unicode_replaced``) per field in ``replaced``."""
        report_invalid_unicode(self.emit, where, replaced, **data)

    def reveal_tools(self, names: Iterable[str]) -> tuple[ToolSpec, ...]:
        """Make the hidden tools among ``names`` callable for the rest of the run; returns them, in hidden
        order (none when none of ``names`` is hidden).

        They move from ``hidden_tools`` to ``tools``: callable from now on, and offered to the
        provider from the next round (each round's request reads ``tools``).
        """
        wanted = set(names)
        revealed = tuple(spec for spec in self.hidden_tools if spec.name in wanted)
        if revealed:
            self.hidden_tools = tuple(spec for spec in self.hidden_tools if spec.name not in wanted)
            self.tools = (*self.tools, *revealed)
        return revealed
