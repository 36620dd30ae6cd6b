"""Section 2, Identity (IDENTITY.md), and the optional User Persona section (USER.md).

This plugin owns both files: its ``configure`` writes the agent home's IDENTITY.md from the default
text when ``context.identityPath`` is unset and the file is missing (never overwriting one), and
its sections read both files once per turn under the bootstrap budgets
(:func:`monoagent_plugins.prompt.bootstrap.bootstrap_files`, which records every missing, unreadable
or truncated file as a diagnostic). Identity is a required section: when IDENTITY.md could not be
read the section still appears and says so, rather than silently dropping who the agent is.
USER.md is never created; when it is absent the persona section is simply not contributed.

Blocks show the file's name, never its path. IDENTITY.md carries the "yours to evolve"
reminder; USER.md describes the person, not the agent, so it does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from monoagent import Section, Turn, hookimpl
from monoagent_plugins.prompt.bootstrap import DEFAULT_IDENTITY, bootstrap_files, create_home_file

if TYPE_CHECKING:
    from monoagent import Agent

IDENTITY_HEADING = "# Identity"
PERSONA_HEADING = "# User persona"


@hookimpl(trylast=True)
def configure(agent: Agent) -> None:
    """Create the agent home's IDENTITY.md (owner-only) when ``context.identityPath`` is unset and it is missing."""
    create_home_file(agent.config, agent.config.context.identity_path, "IDENTITY.md", DEFAULT_IDENTITY)


@hookimpl(trylast=True)
def section_identity(turn: Turn) -> Section:
    """IDENTITY.md with the evolve reminder, or a note that no identity file could be read."""
    identity = bootstrap_files(turn).identity
    if identity.present:
        body = identity.block()
    else:
        body = f"No identity file could be read ({identity.name}), so no identity is configured for this turn."
    return Section(
        id="identity",
        text=f"{IDENTITY_HEADING}\n\n{body}",
        order=200,
        stability="stable",
        source="identity",
    )


@hookimpl(trylast=True)
def extra_sections(turn: Turn) -> Section | None:
    """USER.md as the ``user_persona`` section (order 250, stable) when it is present."""
    user = bootstrap_files(turn).user
    if user is None or not user.present or not user.text.strip():
        return None
    return Section(
        id="user_persona",
        text=f"{PERSONA_HEADING}\n\n{user.block(None)}",
        order=250,
        stability="stable",
        source="identity",
    )
