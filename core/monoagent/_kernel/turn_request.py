"""What a channel submits for one turn (:class:`TurnRequest`) and what a completed turn returns (:class:`TurnResult`).

Split from :mod:`monoagent._kernel.model`, whose other classes they are built from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs

from monoagent._kernel.model import (
    PROMPT_PROFILES,
    Attachment,
    Delivery,
    Message,
    PrecedingMessage,
    PromptManifest,
    PromptProfile,
    Speaker,
    Surface,
    ToolActivity,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    _tuple,
)
from monoagent._kernel.tool_names import tool_name_problem
from monoagent._kernel.valid_text import ValidText

if TYPE_CHECKING:
    from monoagent._kernel.permissions import PermissionProfile, ToolApprover

TOOL_CHOICES = ("auto", "none", "required")
"""The values of :attr:`TurnRequest.tool_choice` besides a tool's name (and None, which is ``auto``)."""


def _prompt_profile(value: str | None) -> str | None:
    if value is not None and value not in PROMPT_PROFILES:
        raise ValueError(f"profile {value!r} is not a prompt profile; use one of {', '.join(PROMPT_PROFILES)} (or None for context.profile)")
    return value


REQUEST_CONTEXT_MAX_CHARS = 16_000
"""The cap on :attr:`TurnRequest.context`, in characters: the ``dynamic_context`` section keeps
that many and records a ``dynamic_context_truncated`` diagnostic for the rest."""


def _request_context(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"context is the caller's text for this turn (a str or None), not {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- requests


@attrs.frozen
class TurnRequest(ValidText):
    """What a channel submits for one turn.

    ``delivery`` classifies the turn for the session block: ``console`` (terminal or web console,
    the reader is in this thread), ``push`` (a chat channel the host delivers into) or
    ``request`` (cron, webhook, API: no proactive follow-up possible). ``console`` names the
    console (``terminal``, ``web``) on console turns. ``sender``, ``preceding_messages`` and
    ``surface`` are optional; a channel without them builds a turn byte-identical to one from
    before they existed.

    ``permissions`` names a permission profile (or is a
    :class:`~monoagent._kernel.permissions.PermissionProfile`, as a delegating turn passes its own
    effective one) that narrows ``permissions.profile`` for this turn (a subagent, a channel, a
    script): a request can only narrow, never widen
    (:mod:`monoagent._kernel.permissions`). ``approver`` answers the tool calls the profile asks
    about (a :data:`~monoagent._kernel.permissions.ToolApprover`: the console channel's asks the
    person); without one, such calls are refused. Neither is part of the request's equality.

    ``isolated`` marks a run that must stay out of the conversation's shared history (a proactive
    or continuation run): it reads history but commits nothing to it (no ``after_commit``, so no
    memory capture), a cancellation or failure publishes no continuity account for it, and its
    tool calls are recorded but never projected into later turns. ``proactive`` marks a turn
    the host started rather than a user message (cron, heartbeat, follow-up); with
    ``runtime.session.isolateProactive`` it runs isolated, outside the conversation's warm
    session. ``notify`` marks a request-driven turn whose successful final answer the channel
    delivers verbatim to notify destinations (a cron job or webhook hook with ``notify``); the
    session block then says so and how to stay silent (:data:`SILENT_RESULT`). ``profile`` overrides
    ``context.profile`` for this turn (:data:`PROMPT_PROFILES`). ``context`` is text the caller
    gives the model for this turn only (the ``dynamic_context`` section, after the cache boundary,
    capped at :data:`REQUEST_CONTEXT_MAX_CHARS` characters with a ``dynamic_context_truncated``
    diagnostic); it is never written to history. ``metadata`` is the channel's own data; the kernel and the bundled plugins read no key of it.

    ``history`` is the conversation so far as the caller holds it (a stateless API client that
    resends its chat): when set, the run reads it instead of the history store, and it goes through
    the same compaction and prompt budget as stored history. The caller bounds it first (the
    ``openai-api`` channel keeps the newest ``history.maxMessages``, each cut to
    ``history.maxMessageBytes``). It is usually paired with ``isolated`` (the store keeps nothing of
    the turn); None (the default) reads the store.

    **Client-side tools.** ``client_tools`` are tools the caller runs (an API client's own
    functions): offered to the model beside the agent's tools. A name the agent offers too is
    refused with :class:`~monoagent._kernel.errors.ClientToolsRefused` (by ``submit`` for a
    registered tool, by the run for a provided one), before any provider call. When the model calls
    one, the run ends after that provider step: the step's server-side calls run as usual, the
    step's calls are checked by ``before_tool_call`` (a permission profile that refuses a client
    call answers it on the server), the run's tool loop (every assistant step and server result of
    the run, the client's calls last) is committed after the user message, and
    :attr:`TurnResult.pending_tool_calls` lists the calls the caller must answer.
    ``tool_results`` answers them: a request with results (its ``text`` is ignored, ``""`` is
    usual) continues the conversation's *open turn* (the history, stored or ``history``, ends with
    the assistant step holding those calls and its server-side results) with the results in place,
    and must answer exactly the pending calls (:class:`~monoagent._kernel.errors.ClientToolsRefused`
    otherwise). Each result goes through the bloat guard, ``after_tool_call``, tool history and the
    ``tool_result`` event as a server tool's result does; the commit appends the results and the
    answer. A new turn (no ``tool_results``) on a conversation whose open turn was never answered
    drops the unanswered calls (:func:`~monoagent._pipeline.client_tools.paired_tool_messages`).
    A run that offers client tools or continues one uses no warm session (it starts cold; the
    transcript could end on a call the server never answers).

    ``tool_choice`` is ``None`` or ``"auto"`` (the model decides), ``"none"`` (no tool is offered),
    ``"required"`` (the model must call one) or a tool's name (it must call that one); it applies to
    the run's first provider step only (a forced call answered, the model decides again). The
    runtimes send it in their wire's own form (``tool_choice`` of
    :class:`~monoagent._kernel.model.ProviderRequest`).
    """

    text: str
    conversation_id: str = "cli:default"
    channel: str = "api"
    delivery: Delivery = "request"
    console: str | None = None
    sender: Speaker | None = None
    preceding_messages: tuple[PrecedingMessage, ...] = attrs.field(default=(), converter=_tuple)
    surface: Surface | None = None
    attachments: tuple[Attachment, ...] = attrs.field(default=(), converter=_tuple)
    model: str | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    isolated: bool = False
    proactive: bool = False
    notify: bool = False
    profile: PromptProfile | None = attrs.field(default=None, converter=_prompt_profile)
    context: str | None = attrs.field(default=None, converter=_request_context)
    permissions: str | PermissionProfile | None = None
    approver: ToolApprover | None = attrs.field(default=None, eq=False, repr=False)
    history: tuple[Message, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(_tuple))
    client_tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tuple)
    tool_results: tuple[ToolResult, ...] = attrs.field(default=(), converter=_tuple)
    tool_choice: str | None = attrs.field(default=None)

    @client_tools.validator
    def _client_tools(self, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        seen: set[str] = set()
        for index, spec in enumerate(value):
            if not isinstance(spec, ToolSpec):
                raise TypeError(f"TurnRequest.client_tools[{index}] is a {type(spec).__name__}, not a ToolSpec")
            problem = tool_name_problem(spec.name)
            if problem:
                raise ValueError(f"TurnRequest.client_tools[{index}]: {problem}")
            if spec.name in seen:
                raise ValueError(f"TurnRequest.client_tools names tool {spec.name!r} twice; a tool name must be unique")
            seen.add(spec.name)

    @tool_results.validator
    def _tool_results(self, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        seen: set[str] = set()
        for index, result in enumerate(value):
            if not isinstance(result, ToolResult):
                raise TypeError(f"TurnRequest.tool_results[{index}] is a {type(result).__name__}, not a ToolResult")
            if result.call_id in seen:
                raise ValueError(f"TurnRequest.tool_results answers call {result.call_id!r} twice")
            seen.add(result.call_id)

    @tool_choice.validator
    def _tool_choice(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None or value in TOOL_CHOICES:
            return
        problem = tool_name_problem(value)
        if problem:
            raise ValueError(f"TurnRequest.tool_choice must be None, {', '.join(map(repr, TOOL_CHOICES))} or a tool's name: {problem}")

    @history.validator
    def _messages_only(self, attribute: attrs.Attribute[Any], value: tuple[Any, ...] | None) -> None:
        for index, message in enumerate(value or ()):
            if not isinstance(message, Message):
                raise TypeError(f"TurnRequest.history[{index}] is a {type(message).__name__}, not a Message")



@attrs.frozen
class TurnResult:
    """What a completed turn returns to its caller.

    ``model`` is the model that answered (a fallback when the primary failed) and ``attempt``
    the provider attempt that answered (1 is the primary's first attempt; see
    :mod:`monoagent._pipeline.provider_call`). ``usage`` sums every attempt, failed ones included.
    ``status`` is always ``"completed"``: a failed or cancelled turn raises instead of returning.
    ``notice`` is host text for the caller that ``text`` starts with (the daily-rollover notice,
    ``runtime.session.rolloverNotice``); it is never written to history or captured to memory.
    ``pending_tool_calls`` are the calls of the request's ``client_tools`` the model made, which the
    caller runs and answers with a request of ``tool_results`` (empty when the model answered).
    """

    run_id: str
    conversation_id: str
    text: str
    model: str
    status: Literal["completed"] = "completed"
    usage: Usage = Usage()
    tool_activity: tuple[ToolActivity, ...] = ()
    manifest: PromptManifest | None = None
    steps: int = 0
    attempt: int = 1
    notice: str = ""
    pending_tool_calls: tuple[ToolCall, ...] = ()
