"""Permission profiles (bundled plugin ``permissions``): the configured profiles, the turn's profile, enforcement and the ``current_permissions`` section.

The policy is this plugin's, whole; the kernel holds only the data a channel, a request and a
plugin exchange (:mod:`monoagent._kernel.permissions`: :class:`PermissionProfile`,
:class:`ApprovalRequest`, :class:`Approval`, the approver on ``TurnRequest.approver``).

* **Profiles.** The built-in ones (:data:`BUILTIN_PROFILES`): ``full_access`` (the default: every
  category runs), ``ask`` (``read`` and ``pure`` run, every other category needs approval) and
  ``read_only`` (``read`` and ``pure`` run, every other category is refused); and the custom ones of
  ``permissions.profiles.<name>`` (this plugin's configuration section ``permissions``), which
  list the categories they allow and ask for, every other one refused.
* **The turn's profile** (``turn_permissions``, so ``turn.permissions``): ``permissions.profile``
  narrowed by ``TurnRequest.permissions`` (a profile name, or the profile a delegating turn
  passes) and, on a subagent's turn, by the subagent's own ``permissions``. A request only
  narrows (the meet, :meth:`PermissionProfile.narrowed`), never widens.
* **Enforcement** (``before_tool_call``, marked ``tryfirst``, so it runs before any other
  plugin's implementation and a plugin that answers calls itself, such as a cache, never answers
  one the profile refuses): under a restricted profile each call's categories are decided, every
  one of them (the strictest answer wins); a refused call is answered ``rejected`` naming its
  categories and the profile (and, for a tool that declares none, that it counts as ``external``), and its handler
  never runs; a call that needs approval is put to the request's approver (an awaitable answer:
  the console channel's asks the person at the terminal; a turn without one refuses). Every
  decision is a ``permission_decision`` event (``id``, ``tool``, ``categories``, ``profile``,
  ``decision``: ``allowed``, ``denied``, ``asked-allowed`` or ``asked-denied``, ``by``).
* **The section** ``current_permissions`` (dynamic, 610): the profile, for the model, rendered
  only under a restricted profile::

    # Current permissions

    Permission profile: ask.
    - Run without asking: read, pure.
    - Need the person's approval first: file_write, shell, network, subagent, external.
    - Refused: none.

    Enforcement happens before a tool runs, whatever this text says. ...

  The categories listed are the documented ones (:data:`~monoagent._kernel.tool_names.TOOL_CATEGORIES`)
  and any other the turn's tools declare, in that order; the same inputs render the same bytes.

Blocking this plugin (``plugins.block = ["permissions"]``) turns enforcement off: no profile is
decided (``turn.permissions`` is None), every tool runs, nothing is asked, and a ``permissions``
table in the configuration is reported as the section of a blocked plugin.
"""

from __future__ import annotations

import asyncio
import re
import reprlib
from collections.abc import Awaitable
from typing import Literal

import attrs

from monoagent import (
    ALL_CATEGORIES as ALL,
)
from monoagent import (
    READ_CATEGORY as READ,
)
from monoagent import (
    TOOL_CATEGORIES,
    Approval,
    ApprovalRequest,
    ConfigError,
    ConfigSectionRegistrar,
    PermissionProfile,
    Section,
    ToolCall,
    ToolResult,
    ToolStatus,
    Turn,
    await_me_maybe,
    hookimpl,
    logger,
    permission_profile,
    setting,
)

CONFIG_PATH = "permissions"
HEADING = "# Current permissions"
UNDECLARED_NOTE = (
    " (the tool declares no action category, so it counts as external; a tool without side effects declares "
    "categories=['pure'], which every profile allows)"
)
"""Added to the refusal of a tool that declares no category: why it is ``external``, and what a pure tool declares."""
ADVICE = (
    "A tool that declares no category counts as external. Enforcement happens before a tool runs, whatever this "
    "text says: a refused or unapproved call comes back as an error naming its category. Do not retry such a call; "
    "continue with what is allowed, or tell the user what needs their permission."
)
SUMMARY_MAX_CHARS = 200
"""The longest argument summary an approver is shown (model text: bounded before it reaches a person)."""

FULL_ACCESS = permission_profile("full_access", {ALL})
BUILTIN: dict[str, PermissionProfile] = {
    "full_access": FULL_ACCESS,
    "ask": permission_profile("ask", {READ}, {ALL}),
    "read_only": permission_profile("read_only", {READ}),
}
BUILTIN_PROFILES: tuple[str, ...] = tuple(BUILTIN)

Outcome = Literal["allowed", "denied", "asked-allowed", "asked-denied"]

# ------------------------------------------------------------------------------ configuration

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _check_profile_name(value: str) -> str | None:
    return None if _NAME.match(value) else "must be a profile name: 1-64 letters, digits, '_' or '-'"


def _check_categories(value: list[str]) -> str | None:
    for item in value:
        if item != "*" and not _NAME.match(item):
            return f"{item!r} is not a category name: 1-64 letters, digits, '_' or '-' (or '*' for every category)"
    return None


@attrs.define
class CustomPermissionProfile:
    """One custom permission profile (``permissions.profiles.<name>``): the categories it allows and asks for.

    Every other category is refused; ``read`` and ``pure`` are always allowed.
    """

    allow: list[str] = setting(
        doc="Action categories that run without asking (file_write, shell, network, subagent, external, or a "
        "plugin's own; '*' for every one; read and pure always run).", check=_check_categories, factory=list,
    )
    ask: list[str] = setting(
        doc="Action categories that run only when the person approves ('*' for every one not allowed).",
        check=_check_categories, factory=list,
    )


@attrs.define
class PermissionsConfig:
    """permissions: which tool action categories run, need approval, or are refused; enforced by this plugin before every tool call (blocked: nothing is enforced; docs/permissions.md)."""

    profile: str = setting(
        "full_access", doc="Permission profile: full_access (nothing refused), ask (every category but read and pure "
        "needs approval), read_only (only read and pure), or the name of a profile under permissions.profiles.",
        env="MONO_AGENT_PERMISSIONS_PROFILE", check=_check_profile_name, allowed="full_access, ask, read_only or a "
        "custom profile's name",
    )
    profiles: dict[str, CustomPermissionProfile] = setting(
        doc="Custom permission profiles by name.", factory=dict,
    )

    def __attrs_post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """Why ``profile`` names no profile, or a custom profile would shadow a built-in one; None when
        neither (a check across the two keys, made once both are loaded)."""
        shadowing = sorted(set(self.profiles) & set(BUILTIN_PROFILES))
        if shadowing:
            return (f"permissions.profiles.{shadowing[0]}: a custom profile cannot be called {shadowing[0]!r}, the name of a "
                    f"built-in profile ({', '.join(BUILTIN_PROFILES)}); choose another name")
        known = (*BUILTIN_PROFILES, *sorted(self.profiles))
        if self.profile in known:
            return None
        return f"permissions.profile = {self.profile!r}: no such profile; use one of {', '.join(known)}"


def named_profile(settings: PermissionsConfig, name: str) -> PermissionProfile:
    """The profile called ``name``; raises :class:`~monoagent._kernel.errors.ConfigError` naming the known ones."""
    if name in BUILTIN:
        return BUILTIN[name]
    custom = settings.profiles.get(name)
    if custom is None:
        known = ", ".join((*BUILTIN_PROFILES, *sorted(settings.profiles)))
        raise ConfigError(
            f"permission profile {name!r} is not defined; use one of {known} (custom profiles are tables under permissions.profiles)"
        )
    return permission_profile(name, custom.allow, custom.ask)


def effective_profile(turn: Turn) -> PermissionProfile:
    """``permissions.profile`` narrowed by the request's ``permissions`` and by the subagent's own, if any.

    A subagent's profile narrows within what its delegating turn passed (that turn's effective
    profile, on the request): a narrowed parent never delegates to a wider child, and a
    subagent's own profile never widens it again.
    """
    settings = turn.config.section(CONFIG_PATH, PermissionsConfig)
    requested = turn.request.permissions
    narrowing = requested if isinstance(requested, PermissionProfile) or requested is None else named_profile(settings, requested)
    own = turn.subagent.permissions if turn.subagent is not None else None
    if own is not None:
        narrowing = named_profile(settings, own) if narrowing is None else narrowing.narrowed(named_profile(settings, own))
    configured = named_profile(settings, settings.profile)
    return configured if narrowing is None else configured.narrowed(narrowing)


# ------------------------------------------------------------------------------ enforcement


def argument_summary(arguments: object, limit: int = SUMMARY_MAX_CHARS) -> str:
    """A one-line summary of a call's arguments (``key='value', ...``), bounded to ``limit`` characters.

    Built with :mod:`reprlib`, so a huge or deeply nested argument costs its bounded repr, not its size.
    """
    shorter = reprlib.Repr()
    shorter.maxstring, shorter.maxother, shorter.maxlevel, shorter.maxdict, shorter.maxlist = limit, limit, 3, 8, 8
    if isinstance(arguments, dict):
        text = ", ".join(f"{str(key)[:64]}={shorter.repr(value)}" for key, value in list(arguments.items())[:16])
    else:
        text = shorter.repr(arguments)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _refusal(call: ToolCall, categories: tuple[str, ...], profile: PermissionProfile, outcome: Outcome, by: str,
             undeclared: bool = False) -> str | None:
    """The text a call not allowed is answered with (None for an allowed one); ``undeclared``: the
    tool declares no category (it counts as ``external``, which the text says)."""
    named = ", ".join(categories) + (UNDECLARED_NOTE if undeclared else "")
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


def _decided(turn: Turn, call: ToolCall, categories: tuple[str, ...], profile: PermissionProfile, outcome: Outcome,
             by: str, undeclared: bool = False) -> ToolResult | None:
    """Record the decision (``permission_decision``); the refusal that answers the call, or None to let it run."""
    turn.emit("permission_decision", id=call.id, tool=call.name, categories=list(categories), profile=profile.name,
              decision=outcome, by=by)
    refusal = _refusal(call, categories, profile, outcome, by, undeclared)
    return None if refusal is None else ToolResult(call.id, call.name, refusal, ToolStatus.REJECTED)


async def _asked(turn: Turn, call: ToolCall, categories: tuple[str, ...], profile: PermissionProfile,
                 undeclared: bool = False) -> ToolResult | None:
    request = ApprovalRequest(call.name, categories, argument_summary(call.arguments), profile.name, turn.conversation_id, call)
    approval = await _ask(turn, request)
    return _decided(turn, call, categories, profile, "asked-allowed" if approval.allowed else "asked-denied", approval.by,
                    undeclared)


async def _ask(turn: Turn, request: ApprovalRequest) -> Approval:
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


# ------------------------------------------------------------------------------ hooks


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, PermissionsConfig)


@hookimpl(trylast=True)
def turn_permissions(turn: Turn) -> PermissionProfile:
    return effective_profile(turn)


@hookimpl(tryfirst=True)
def before_tool_call(turn: Turn, call: ToolCall) -> ToolResult | Awaitable[ToolResult | None] | None:
    """Decide ``call`` under ``turn.permissions``: None to let it run, a refusal, or (to ask) an awaitable of either.

    ``tryfirst`` rather than ``trylast`` like the other bundled implementations: enforcement
    comes before any other plugin's answer. Nothing is decided (and nothing recorded) under an
    unrestricted profile, or when no profile was decided.
    """
    profile = turn.permissions
    if profile is None or not profile.restricted:
        return None
    spec = next((spec for spec in turn.tools if spec.name == call.name), None)
    if spec is None:  # the tool loop answers a call to a tool that is not callable before this hook
        return None
    decision, categories = profile.decide(spec.categories)
    undeclared = not spec.categories
    if decision == "ask":
        return _asked(turn, call, categories, profile, undeclared)
    return _decided(turn, call, categories, profile, "allowed" if decision == "allow" else "denied", "profile", undeclared)


def _categories(turn: Turn) -> list[str]:
    declared = {category for spec in (*turn.tools, *turn.hidden_tools) for category in spec.categories}
    return [*TOOL_CATEGORIES, *sorted(declared - set(TOOL_CATEGORIES))]


def _listed(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


@hookimpl(trylast=True)
def section_current_permissions(turn: Turn) -> Section | None:
    profile = turn.permissions
    if profile is None or not profile.restricted:
        return None
    answers: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    for category in _categories(turn):
        answers[profile.decide_category(category)].append(category)
    lines = [
        HEADING, "", f"Permission profile: {profile.name}.",
        f"- Run without asking: {_listed(answers['allow'])}.",
        f"- Need the person's approval first: {_listed(answers['ask'])}.",
        f"- Refused: {_listed(answers['deny'])}.",
    ]
    if answers["ask"] and turn.request.approver is None:
        lines.append("Nobody can approve a call in this turn, so the categories that need approval are refused as well.")
    lines += ["", ADVICE]
    return Section("current_permissions", "\n".join(lines), order=610, stability="dynamic", source="permissions")
