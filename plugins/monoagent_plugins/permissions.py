"""The ``current_permissions`` section (bundled plugin ``permissions``): the turn's permission profile, for the model.

Guidance only: enforcement is the tool loop's, before a handler runs
(:mod:`monoagent.kernel.permissions`, :mod:`monoagent.pipeline.tool_loop`), so blocking this plugin
changes what the model is told, never what runs. Rendered only under a restricted profile (never
for ``full_access``), dynamic (the profile may change per turn, so it stays out of the cached
stable part)::

    # Current permissions

    Permission profile: ask.
    - Run without asking: read.
    - Need the person's approval first: file_write, shell, network, subagent, external.
    - Refused: none.

    Enforcement happens before a tool runs, whatever this text says. ...

The categories listed are the documented ones (:data:`~monoagent.kernel.model.TOOL_CATEGORIES`)
and any other the turn's tools declare, in that order; the same inputs render the same bytes.
"""

from __future__ import annotations

from monoagent.kernel.host import bundled_impl
from monoagent.kernel.model import TOOL_CATEGORIES, Section
from monoagent.kernel.turn import Turn

HEADING = "# Current permissions"
ADVICE = (
    "A tool that declares no category counts as external. Enforcement happens before a tool runs, whatever this "
    "text says: a refused or unapproved call comes back as an error naming its category. Do not retry such a call; "
    "continue with what is allowed, or tell the user what needs their permission."
)


def _categories(turn: Turn) -> list[str]:
    declared = {category for spec in (*turn.tools, *turn.hidden_tools) for category in spec.categories}
    return [*TOOL_CATEGORIES, *sorted(declared - set(TOOL_CATEGORIES))]


def _listed(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


@bundled_impl
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
