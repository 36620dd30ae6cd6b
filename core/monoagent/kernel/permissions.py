"""Permission profiles: which tool action categories run, which need a person's approval, which are refused.

A profile decides per action category (:data:`~monoagent.kernel.model.TOOL_CATEGORIES`, or a custom
category a plugin declares) one of three answers: ``allow``, ``ask`` or ``deny``. The built-in
profiles (:data:`BUILTIN_PROFILES`):

* ``full_access`` (the default): every category runs; nothing is asked, nothing refused;
* ``ask``: ``read`` runs, every other category needs approval;
* ``read_only``: ``read`` runs, every other category is refused.

A custom profile (``permissions.profiles.<name>``) lists the categories it allows and the ones it
asks for; every other category is refused. ``read`` (a tool that only reads what the agent already
holds) is allowed under every profile. A tool that declares no category counts as ``external``.
A tool with several categories gets the strictest answer among them.

The profile of a turn is ``permissions.profile``, narrowed by ``TurnRequest.permissions``: a request
(from a subagent, a channel, a Python caller) can only narrow, never widen. The effective profile is
the *meet* of the two (:meth:`PermissionProfile.narrowed`): a category runs when both allow it, is
asked for when both at least ask for it, and is refused otherwise. So a request naming
``full_access`` under a configured ``read_only`` still gets ``read_only``.

Enforcement is the tool loop's (:mod:`monoagent.pipeline.tool_loop`), before the handler runs; the
``current_permissions`` section is guidance for the model only. ``ask`` answers come from the
request's :data:`ToolApprover` (the console channel's asks the person at the terminal); a turn
without one refuses every call that needs approval.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Literal

import attrs

from monoagent.kernel.errors import ConfigError
from monoagent.kernel.model import ToolCall

if TYPE_CHECKING:
    from monoagent.kernel.config import Config

Decision = Literal["allow", "ask", "deny"]
ALL = "*"
"""In a profile's category set: every category."""

READ = "read"
UNDECLARED = "external"
"""The category of a tool that declares none."""

BUILTIN_PROFILES: tuple[str, ...] = ("full_access", "ask", "read_only")
SUMMARY_MAX_CHARS = 200
"""The longest argument summary an approver is shown (model text: bounded before it reaches a person)."""


def _meet(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    if ALL in a:
        return b
    if ALL in b:
        return a
    return a & b


def _canonical(allow: Iterable[str], ask: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The one spelling of a rule: ``read`` always allowed, :data:`ALL` alone when present, ``ask`` without the allowed ones."""
    allowed = frozenset({ALL}) if ALL in allow else frozenset({READ, *allow})
    asked = frozenset() if ALL in allowed else frozenset({ALL}) if ALL in ask else frozenset(ask) - allowed
    return allowed, asked


@attrs.frozen
class PermissionProfile:
    """One profile: the categories it allows and the ones it asks for; every other one is refused.

    ``allow`` and ``ask`` may be ``{ALL}`` (every category); ``allow`` is consulted first, so
    ``ask = {ALL}`` means "every category not allowed". Build one with :func:`permission_profile`,
    which spells the rule canonically (so two equal rules compare equal).
    """

    name: str
    allow: frozenset[str]
    ask: frozenset[str] = frozenset()

    @property
    def restricted(self) -> bool:
        """Whether any category is asked for or refused (``full_access`` is not restricted)."""
        return ALL not in self.allow

    def decide_category(self, category: str) -> Decision:
        if ALL in self.allow or category in self.allow:
            return "allow"
        if ALL in self.ask or category in self.ask:
            return "ask"
        return "deny"

    def decide(self, categories: Iterable[str]) -> tuple[Decision, tuple[str, ...]]:
        """The strictest answer for a tool of ``categories`` (none declared: ``external``), and the categories that gave it."""
        cats = tuple(categories) or (UNDECLARED,)
        answers = [(category, self.decide_category(category)) for category in cats]
        for decision in ("deny", "ask"):
            hit = tuple(category for category, answer in answers if answer == decision)
            if hit:
                return decision, hit
        return "allow", cats

    def narrowed(self, other: PermissionProfile) -> PermissionProfile:
        """The meet of this profile and ``other``: a category runs only when both allow it, and is asked
        for only when both at least ask for it. Named after whichever of the two it equals, else
        ``"<other> within <self>"``."""
        allow, ask = _canonical(_meet(self.allow, other.allow), _meet(self.allow | self.ask, other.allow | other.ask))
        for candidate in (other, self):
            if (allow, ask) == (candidate.allow, candidate.ask):
                return candidate
        return PermissionProfile(f"{other.name} within {self.name}", allow, ask)


def permission_profile(name: str, allow: Iterable[str], ask: Iterable[str] = ()) -> PermissionProfile:
    """A :class:`PermissionProfile` with its rule spelt canonically (``read`` always allowed)."""
    return PermissionProfile(name, *_canonical(allow, ask))


FULL_ACCESS = permission_profile("full_access", {ALL})
_BUILTIN = {
    "full_access": FULL_ACCESS,
    "ask": permission_profile("ask", {READ}, {ALL}),
    "read_only": permission_profile("read_only", {READ}),
}


def profile_names(config: Config) -> tuple[str, ...]:
    """Every profile name ``config`` knows: the built-in ones, then the custom ones."""
    return (*BUILTIN_PROFILES, *sorted(config.permissions.profiles))


def named_profile(config: Config, name: str) -> PermissionProfile:
    """The profile called ``name``; raises :class:`~monoagent.kernel.errors.ConfigError` naming the known ones."""
    if name in _BUILTIN:
        return _BUILTIN[name]
    custom = config.permissions.profiles.get(name)
    if custom is None:
        raise ConfigError(
            f"permission profile {name!r} is not defined; use one of {', '.join(profile_names(config))} "
            f"(custom profiles are tables under permissions.profiles)"
        )
    return permission_profile(name, custom.allow, custom.ask)


def turn_profile(config: Config, requested: str | PermissionProfile | None) -> PermissionProfile:
    """The effective profile: ``permissions.profile`` narrowed by the request's ``permissions`` (if any:
    a profile name, or a profile itself, which narrows the same way)."""
    configured = named_profile(config, config.permissions.profile)
    if requested is None:
        return configured
    return configured.narrowed(requested if isinstance(requested, PermissionProfile) else named_profile(config, requested))


# --------------------------------------------------------------------------- approval


@attrs.frozen
class ApprovalRequest:
    """What an approver is asked: may ``tool`` (of ``categories``) run with these arguments?

    ``summary`` is a one-line account of the arguments, bounded to :data:`SUMMARY_MAX_CHARS`. It is
    model text: an approver that shows it to a person still passes it through
    :mod:`monoagent.boundary.terminal` (or its own escaping).
    """

    tool: str
    categories: tuple[str, ...]
    summary: str
    profile: str
    conversation_id: str
    call: ToolCall = attrs.field(repr=False)


@attrs.frozen
class Approval:
    """An approver's answer; ``by`` names who decided (``person``, ``remembered``, a policy's name), for the event."""

    allowed: bool
    by: str = "approver"


ToolApprover = Callable[[ApprovalRequest], "Approval | bool | Awaitable[Approval | bool]"]
"""Answers a call the profile asks about: sync or async, ``True``/``False`` or an :class:`Approval`."""


def argument_summary(arguments: object, limit: int = SUMMARY_MAX_CHARS) -> str:
    """A one-line summary of a call's arguments (``key='value', ...``), bounded to ``limit`` characters.

    Built with :mod:`reprlib`, so a huge or deeply nested argument costs its bounded repr, not its size.
    """
    import reprlib

    shorter = reprlib.Repr()
    shorter.maxstring, shorter.maxother, shorter.maxlevel, shorter.maxdict, shorter.maxlist = limit, limit, 3, 8, 8
    if isinstance(arguments, dict):
        text = ", ".join(f"{str(key)[:64]}={shorter.repr(value)}" for key, value in list(arguments.items())[:16])
    else:
        text = shorter.repr(arguments)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
