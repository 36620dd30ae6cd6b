"""Section 1, Core Guardrails: the soul.

The soul is the agent home's SOUL.md (or ``context.soulPath``), read once per turn under the
bootstrap budgets by :func:`monoagent.pipeline.bootstrap.read_bootstrap_files`, which also records the
diagnostics for a missing, unreadable or truncated file. When no file could be read the built-in
default soul stands in, so the section is never empty.

A file block shows the file's name (never its path, which would leak the host's layout into a
cacheable prompt), its text, and the "yours to evolve" reminder. The reminder is rendered here;
it is never written into the file.
"""

from __future__ import annotations

from monoagent.pipeline.bootstrap import DEFAULT_SOUL
from monoagent.kernel.model import Section
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.turn import Turn

HEADING = "# Core guardrails"


@bundled_impl
def section_core_guardrails(turn: Turn) -> Section:
    """SOUL.md as a file block with the evolve reminder, else the built-in default soul."""
    soul = turn.bootstrap.soul
    body = soul.block() if soul.present else DEFAULT_SOUL.rstrip()
    return Section(
        id="core_guardrails",
        text=f"{HEADING}\n\n{body}",
        order=100,
        stability="stable",
        source="guardrails",
    )
