"""Permission profiles, the data: which tool action categories run, which need a person's approval, which are refused.

A profile decides per action category (:data:`~monoagent._kernel.tool_names.TOOL_CATEGORIES`, or a custom
category a plugin declares) one of three answers: ``allow``, ``ask`` or ``deny``. ``read`` (a tool
that only reads what the agent already holds) and ``pure`` (a tool without side effects that
computes its answer from its arguments alone, such as a calculator) are allowed under every
profile; a tool that declares no category counts as ``external``; a tool with several categories
gets the strictest answer among them (every category is decided, not only the first). Two profiles meet (:meth:`PermissionProfile.narrowed`): a category runs when both
allow it, is asked for when both at least ask for it, and is refused otherwise.

This module holds what a channel, a ``TurnRequest`` and a plugin exchange: the profile
(``TurnRequest.permissions`` may be one, ``turn.permissions`` is one), the approval request and
answer, and the approver type on ``TurnRequest.approver``. The policy is the bundled
``permissions`` plugin's (:mod:`monoagent_plugins.tools.permissions`): the built-in and configured
profiles (``permissions.profile``, ``permissions.profiles``), the turn's profile
(``turn_permissions``) and enforcement before a tool runs (``before_tool_call``), with the
approvals and the ``permission_decision`` events. Blocking that plugin turns enforcement off.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Literal

import attrs

from monoagent._kernel.model import ToolCall

Decision = Literal["allow", "ask", "deny"]
ALL = "*"
"""In a profile's category set: every category."""

READ = "read"
PURE = "pure"
"""The category of a tool without side effects (it computes from its arguments alone): allowed, like ``read``, under every profile."""
ALWAYS_ALLOWED = (READ, PURE)
"""The categories every profile allows."""
UNDECLARED = "external"
"""The category of a tool that declares none."""


def _meet(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    if ALL in a:
        return b
    if ALL in b:
        return a
    return a & b


def _canonical(allow: Iterable[str], ask: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The one spelling of a rule: ``read`` and ``pure`` always allowed, :data:`ALL` alone when present, ``ask`` without the allowed ones."""
    allowed = frozenset({ALL}) if ALL in allow else frozenset({*ALWAYS_ALLOWED, *allow})
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
    """A :class:`PermissionProfile` with its rule spelt canonically (``read`` and ``pure`` always allowed)."""
    return PermissionProfile(name, *_canonical(allow, ask))


# --------------------------------------------------------------------------- approval


@attrs.frozen
class ApprovalRequest:
    """What an approver is asked: may ``tool`` (of ``categories``) run with these arguments?

    ``summary`` is a one-line account of the arguments, bounded (the ``permissions`` plugin bounds it
    to 200 characters). It is model text: an approver that shows it to a person still passes it through
    :mod:`monoagent._cli.terminal` (or its own escaping).
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
