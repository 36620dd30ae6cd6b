"""Section 1, Core Guardrails: the soul.

The soul is the agent home's SOUL.md (or ``context.soulPath``). This plugin owns the file: its
``configure`` writes the home's SOUL.md from the default soul when no path is configured and the
file is missing (never overwriting one), and its section reads it once per turn under the
bootstrap budgets (:func:`monoagent_plugins.prompt.bootstrap.bootstrap_files`, which also records the
diagnostics for a missing, unreadable or truncated file). When no file could be read the built-in
default soul stands in, so the section is never empty.

A file block shows the file's name (never its path, which would leak the host's layout into a
cacheable prompt), its text, and the "yours to evolve" reminder. The reminder is rendered here;
it is never written into the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from monoagent import Section, Turn, hookimpl
from monoagent_plugins.prompt.bootstrap import DEFAULT_SOUL, bootstrap_files, create_home_file

if TYPE_CHECKING:
    from monoagent import Agent

HEADING = "# Core guardrails"


@hookimpl(trylast=True)
def configure(agent: Agent) -> None:
    """Create the agent home's SOUL.md (owner-only) when ``context.soulPath`` is unset and it is missing."""
    create_home_file(agent.config, agent.config.context.soul_path, "SOUL.md", DEFAULT_SOUL)


@hookimpl(trylast=True)
def section_core_guardrails(turn: Turn) -> Section:
    """SOUL.md as a file block with the evolve reminder, else the built-in default soul."""
    soul = bootstrap_files(turn).soul
    body = soul.block() if soul.present else DEFAULT_SOUL.rstrip()
    return Section(
        id="core_guardrails",
        text=f"{HEADING}\n\n{body}",
        order=100,
        stability="stable",
        source="guardrails",
    )
