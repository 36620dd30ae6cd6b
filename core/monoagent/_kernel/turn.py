"""The turn every per-turn hook receives (read-only), and the outcome of one provider step.

Hooks read a turn; they do not change it. :class:`Turn` is a frozen snapshot of the run at the
moment a hook is called: the request, the session, the loaded history, the offered tools, the
recalled memory, the time, the configuration, and a scratch dict per plugin (``state``). What a
hook may *do* is narrow and explicit: report (:meth:`Turn.emit`, :meth:`Turn.diagnose`) and reach
the components the turn uses (:meth:`Turn.redact`, :meth:`Turn.memory_tier`,
:attr:`Turn.tool_history`, :meth:`Turn.provider`). The run's own state (its continuity record,
the partial answer of a cancelled attempt, its session lease, the usage others spent for it, the
mutable tool lists) stays in the pipeline (:class:`monoagent._pipeline.turn_run.TurnRun`), which
makes a new snapshot whenever that state changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar

import attrs

from monoagent._kernel.model import Delivery, Diagnostic, MemoryHit, Message, ReasoningBlock, ToolCall, ToolSpec, Usage
from monoagent._kernel.turn_request import TurnRequest
from monoagent._kernel.valid_text import Replacements

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.config import Config
    from monoagent._kernel.interfaces import MemoryTier, ProviderRuntime
    from monoagent._kernel.permissions import PermissionProfile
    from monoagent._kernel.stores import ToolHistoryStore
    from monoagent._kernel.subagents import SubagentSpec

C = TypeVar("C")


@attrs.frozen
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
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`); the first round of a run
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


class RunAccess(Protocol):
    """What a :class:`Turn` (and a tool's :class:`~monoagent._kernel.tool_context.ToolContext`) reach
    through to the run they belong to: the pipeline's ``TurnRun``."""

    agent: Agent
    diagnostics: list[Diagnostic]

    @property
    def view(self) -> Turn: ...

    def emit(self, type: str, **data: Any) -> None: ...

    def add_usage(self, usage: Usage) -> None: ...

    def reveal_tools(self, names: Iterable[str]) -> tuple[ToolSpec, ...]: ...


@attrs.frozen(eq=False)
class Turn:
    """One run as a hook sees it: read-only, a snapshot taken when the hook is called.

    ``request`` (the :class:`~monoagent._kernel.model.TurnRequest`), ``run_id``, ``model`` (the
    ``provider:model`` string), ``session`` (:class:`SessionInfo`), ``config``, ``history``
    (retained messages, oldest first), ``recalled`` (gated memory hits), ``tools`` (the tool
    specs callable now) and ``hidden_tools`` (offered but held back by ``hide_tools`` until a tool
    reveals them: the ``tool-domains`` plugin hides the domains ``tools.visible`` does not list),
    ``permissions`` (the effective permission profile, from ``turn_permissions``: the
    ``permissions`` plugin's; None when no plugin decides one), ``provider_round`` (where the provider round about to be
    sent stands), ``now`` (an aware datetime in the configured time zone), ``profile`` (the prompt
    profile).

    ``state`` is a scratch dict for plugins that lives as long as the run, keyed by plugin name:
    a plugin keeps its per-turn state under its own name, the one it is registered and blocked by
    (``turn.state["memory"]``, ``turn.state["skills"]``), and a helper library shared by several
    plugins under its module name. It is the one mutable thing a hook holds; every snapshot of
    one run shares it. Its values are typed ``Any``: each is whatever its owner keeps there, and
    only its owner reads it.

    What a hook may do through it: :meth:`emit` a :class:`~monoagent._kernel.model.RunEvent`,
    :meth:`diagnose` a prompt problem (it lands in the manifest), and reach the components the
    turn uses: :meth:`redact`, :meth:`memory_tier`, :attr:`tool_history`, :meth:`provider`;
    :attr:`subagent` and :attr:`subagents` say which subagent the turn's Agent runs as and which
    it may delegate to (docs/subagents.md).
    """

    request: TurnRequest
    run_id: str
    model: str
    session: SessionInfo
    config: Config = attrs.field(repr=False)
    started_at: float
    _run: RunAccess = attrs.field(alias="run", repr=False)
    history: tuple[Message, ...] = ()
    recalled: tuple[MemoryHit, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    hidden_tools: tuple[ToolSpec, ...] = ()
    permissions: PermissionProfile | None = attrs.field(default=None, repr=False)
    provider_round: ProviderRound = attrs.field(default=ProviderRound(), repr=False)
    state: dict[str, Any] = attrs.field(factory=dict, repr=False)

    @property
    def conversation_id(self) -> str:
        """The physical conversation id history is keyed by (see :class:`SessionInfo`)."""
        return self.session.conversation_id

    @property
    def profile(self) -> str:
        """The prompt profile of this turn: the request's ``profile``, else ``context.profile``."""
        return self.request.profile or self.config.context.profile

    @property
    def timezone(self) -> tzinfo | None:
        """The configured time zone (``runtime.session.rolloverTimezone``), else None (the system's)."""
        return configured_timezone(self.config)

    @property
    def now(self) -> datetime:
        """The turn's start time, in the configured time zone (else the system's)."""
        return datetime.fromtimestamp(self.started_at, self.timezone).astimezone(self.timezone)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The prompt diagnostics reported so far (they land in the manifest): a copy; add one with :meth:`diagnose`."""
        return list(self._run.diagnostics)

    def diagnose(self, code: str, message: str, section: str | None = None) -> None:
        """Record a prompt diagnostic (missing file, truncation); it lands in the manifest."""
        self._run.diagnostics.append(Diagnostic(code, message, section))

    def emit(self, type: str, **data: Any) -> None:
        """Emit a :class:`~monoagent._kernel.model.RunEvent` of this run to every observer."""
        self._run.emit(type, **data)

    def report_invalid_unicode(self, where: str, replaced: Replacements, **data: Any) -> None:
        """One ``runtime_warning`` (code ``invalid_unicode_replaced``) per field in ``replaced``.

        ``where`` names what the text came from (``request``, ``tool_result``, ``provider``); the
        event's ``field`` is ``<where>.<field path>`` and ``count`` the surrogates that became
        U+FFFD (see :class:`monoagent._kernel.valid_text.ValidText`). ``data`` adds context (a tool, a model).
        """
        report_invalid_unicode(self.emit, where, replaced, **data)

    def redact(self, text: str, kind: str) -> str:
        """``text`` through the Agent's redaction chain (the ``redact`` hook) for ``kind``."""
        return self._run.agent.redact(text, kind)

    def memory_tier(self, name: str) -> MemoryTier:
        """The configured memory tier ``name`` (built once; a ComponentError names what is wrong)."""
        return self._run.agent.memory_tier(name)

    @property
    def tool_history(self) -> ToolHistoryStore | None:
        """The tool-history store the Agent records tool calls in; None when tool history is off."""
        return self._run.agent.tool_history_store()

    def supports(self, component: object, capability: Callable[..., C]) -> TypeGuard[C]:
        """Whether a component the turn uses (a memory tier, a store) implements the optional sub-protocol
        ``capability`` (:meth:`monoagent._kernel.components.AgentComponents.supports`)."""
        return self._run.agent.components.supports(component, capability)

    def provider(self, model: str) -> ProviderRuntime:
        """The runtime of ``provider:model`` (a side call of a plugin's own: an extractor, a judge)."""
        return self._run.agent.provider(model)

    @property
    def subagent(self) -> SubagentSpec | None:
        """The subagent the turn's Agent runs as (:meth:`monoagent.Agent.derive`), None for an Agent a user built."""
        return self._run.agent.subagent

    @property
    def subagents(self) -> Mapping[str, SubagentSpec]:
        """The subagents given in Python (``Agent(subagents=...)``) to the Agent that runs this turn."""
        return self._run.agent.subagents


def configured_timezone(config: Config) -> tzinfo | None:
    name = config.runtime.session.rollover_timezone
    if name:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
    return None


def report_invalid_unicode(emit: Any, where: str, replaced: Replacements, **data: Any) -> None:
    """One ``runtime_warning`` (``invalid_unicode_replaced``) per field in ``replaced``, through ``emit``."""
    for path, count in replaced:
        emit(
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
