"""The turn context every per-turn hook receives, and the outcome of one provider step."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

import attrs

from monoagent.kernel.model import (
    Delivery,
    Diagnostic,
    MemoryHit,
    Message,
    ReasoningBlock,
    ToolCall,
    ToolSpec,
    TurnRequest,
    Usage,
)
from monoagent.kernel.valid_text import Replacements

if TYPE_CHECKING:
    from monoagent.agent import Agent
    from monoagent.kernel.config import Config
    from monoagent.kernel.interfaces import Tool
    from monoagent.kernel.permissions import PermissionProfile
    from monoagent.pipeline.continuity import RunContinuity
    from monoagent.pipeline.provider_call import PartialAttempt
    from monoagent.pipeline.sessions import SessionLease


@attrs.define
class SessionInfo:
    """How this turn sits in its conversation.

    ``logical_conversation_id`` is the id the channel submitted; ``conversation_id`` is the
    physical id history is keyed by (the same, or ``<id>:<YYYY-MM-DD>`` under daily rollover).
    ``new_bucket`` is true on the first turn of a new daily bucket of a conversation that has
    history elsewhere (set once history is loaded; never on a brand-new conversation). ``warm`` is
    true on a confirmed warm turn of ``runtime.session.mode = "continuous"``: the request carries
    the conversation's native transcript, so the conversation-history section and the cold
    tool-history projection stay empty (the harness sets it before the sections are produced).
    """

    delivery: Delivery
    mode: str
    logical_conversation_id: str
    conversation_id: str
    bucket: str | None = None
    new_bucket: bool = False
    memory_configured: bool = False
    warm: bool = False


RECOVERABLE_TOOL_STATUSES = frozenset({"error", "rejected"})
"""The tool-result statuses a model can recover from by retrying with corrected arguments or
choosing another way: ``error`` (the handler raised, a typed tool refused invalid arguments, a
policy refused the call) and ``rejected`` (the tool is not offered this turn)."""


@attrs.frozen
class FailedToolCall:
    """A tool call of the previous provider round whose result was a recoverable failure."""

    name: str
    status: str


@attrs.frozen
class ProviderRound:
    """Where the provider round about to be sent stands in its run; read by section producers.

    The provider loop sets it on :attr:`Turn.provider_round` before each round after the run's
    first and then produces the per-round sections (order 610 to 690) again
    (:func:`~monoagent.pipeline.assembly.refresh_dynamic_sections`); the first round of a run
    has the default value. ``step`` is the 1-based provider step over the run; ``failed_tools``
    the recoverable tool failures (:data:`RECOVERABLE_TOOL_STATUSES`) of the round just before
    this one, in call order; ``final`` is true for the last round ``runtime.maxTurns`` allows
    after tool rounds, which is sent without tools and must answer; ``continuation`` counts
    the rounds so far that continue a reply cut off at the output-token limit (0 when this round
    does not continue one).
    """

    step: int = 1
    failed_tools: tuple[FailedToolCall, ...] = ()
    final: bool = False
    continuation: int = 0


@attrs.define(eq=False)
class Turn:
    """One run in progress: what hooks read, and where they report.

    Attributes hooks rely on: ``agent``, ``config``, ``request``, ``run_id``, ``model`` (the
    ``provider:model`` string), ``session``, ``history`` (retained messages, oldest first),
    ``recalled`` (gated memory hits), ``tools`` (the tool specs callable this turn),
    ``provided_tools`` (the tools ``provide_tools`` offered on this turn, by name), ``now`` (an
    aware datetime in the configured time zone), ``diagnostics`` and ``state``. Report problems
    with :meth:`diagnose` (they land in the prompt manifest) and facts with :meth:`emit` (a
    :class:`~monoagent.kernel.model.RunEvent`).

    ``state`` is a scratch dict for plugins that lives as long as the turn, keyed by plugin name:
    a plugin keeps its per-turn state under its own name, the one it is registered and blocked by
    (``turn.state["memory"]``, ``turn.state["skills"]``, ``turn.state["artifacts"]``), and a
    helper library shared by several plugins under its module name. Keys starting with
    ``monoagent.`` are reserved for the kernel. The kernel's own per-run state is typed attributes,
    set by the turn pipeline and read-only for plugins: ``continuity`` (the run's continuity
    record: the account collector and the tool-call ledger) and ``partial`` (what the unfinished
    attempt of a cancelled or failed run had produced), ``session_lease`` (the run's use of the
    warm-session backend, None when the run does not use one). ``delegated_usage`` is what other
    runs spent on this run's behalf (a subagent's turn, added with :meth:`add_usage`); the run's
    :class:`~monoagent.kernel.model.TurnResult` usage and ``run_completed`` event include it.

    ``permissions`` is the turn's effective permission profile (``permissions.profile`` narrowed by
    the request's; :mod:`monoagent.kernel.permissions`), set when the turn is prepared.
    ``hidden_tools`` are the offered tools of the domains ``tools.visible`` hides: not in ``tools``,
    so neither offered to the provider nor callable, until
    :func:`~monoagent.pipeline.tool_loop.reveal_tool_domain` moves a domain's into ``tools`` for
    the rest of the turn.
    """

    agent: Agent
    request: TurnRequest
    run_id: str
    model: str
    session: SessionInfo
    emitter: Callable[..., Any] = attrs.field(repr=False)
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
        name = self.config.runtime.session.rollover_timezone
        if name:
            from zoneinfo import ZoneInfo

            return ZoneInfo(name)
        return None

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
        """Emit a :class:`~monoagent.kernel.model.RunEvent` of this run to every observer."""
        self.emitter(type, data)

    def report_invalid_unicode(self, where: str, replaced: Replacements, **data: Any) -> None:
        """One ``runtime_warning`` (code ``invalid_unicode_replaced``) per field in ``replaced``.

        ``where`` names what the text came from (``request``, ``tool_result``, ``provider``); the
        event's ``field`` is ``<where>.<field path>`` and ``count`` the surrogates that became
        U+FFFD (see :class:`monoagent.kernel.valid_text.ValidText`). ``data`` adds context (a tool, a model).
        """
        for path, count in replaced:
            self.emit(
                "runtime_warning",
                code="invalid_unicode_replaced",
                field=f"{where}.{path}",
                count=count,
                message=f"{where}.{path} was not valid Unicode: {count} character(s) replaced by U+FFFD",
                **data,
            )


@attrs.frozen
class StepOutcome:
    """What one provider step produced; ``reasoning`` holds its signed reasoning blocks in stream order."""

    model: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    stop_reason: str = "end_turn"
    reasoning: tuple[ReasoningBlock, ...] = ()
