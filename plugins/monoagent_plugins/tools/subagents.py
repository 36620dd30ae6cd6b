"""Subagents: named agents in config, the ``task`` tool that delegates to one, and ``task_orchestration``.

``[agents.named.<name>]`` tables (and ``Agent(subagents=...)``) name the subagents an agent may
hand a self-contained job to; ``agents.maxDepth`` bounds how deep delegation goes (1: a subagent
cannot delegate further) and ``agents.maxConcurrent`` how many ``task`` calls of one agent run at
once. The ``task`` tool (category ``subagent``, domain ``task``) is offered on every turn of an
agent that has a subagent and depth left; a subagent's own turns are offered only the tools its
``tools`` list names (least privilege). How a call runs: :mod:`monoagent_plugins.tools.delegation`;
the user's view: docs/subagents.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import attrs

from monoagent import (
    ConfigError,
    ConfigSectionRegistrar,
    Section,
    SubagentSpec,
    Tool,
    ToolSpec,
    Turn,
    check_model,
    hookimpl,
    setting,
)
from monoagent_plugins.tools.delegation import DELEGATIONS, TASK_TOOL, Delegation, roster, run_task, task_spec

if TYPE_CHECKING:
    from monoagent import Agent

CONFIG_PATH = "agents"
IDENTITY_HEADING = "# Identity"


@attrs.define
class NamedAgentConfig:
    """One named subagent ([agents.named.<name>])."""

    description: str = setting("", doc="For the model: when to delegate to this agent and what to give it.")
    model: str | None = setting(None, doc="The provider:model its turns call. Unset: the delegating turn's model.",
                                check=check_model)
    profile: Literal["full", "minimal", "none"] = setting(
        "minimal", doc="Its prompt profile; minimal = core guardrails, its identity and the session block.")
    skills: list[str] = setting(doc="Skills it loads (rendered under the full profile only).", factory=list)
    tools: list[str] = setting(doc="Tools it may call, by tool name or domain (task lets it delegate where maxDepth "
                               "allows). Empty: no tools at all.", factory=list)
    permissions: str | None = setting(None, doc="Permission profile name for its tool calls, applied within the delegating turn's (never wider). Unset: the delegating turn's.")
    system: str | None = setting(None, doc="Its identity as text (instead of an identity file).")
    identity: Path | None = setting(None, doc="An IDENTITY.md for it (instead of system). Unset: the agent home's.")


@attrs.define
class AgentsConfig:
    """agents: named subagents the task tool delegates to, and the bounds on delegation."""

    max_depth: int = setting(1, doc="How deep delegation may go: 1 = subagents cannot delegate further.",
                             env="MONO_AGENT_AGENTS_MAX_DEPTH", min=1, max=4)
    max_concurrent: int = setting(2, doc="task calls of one agent running at once; further calls wait for one to end.",
                                  env="MONO_AGENT_AGENTS_MAX_CONCURRENT", min=1, max=64)
    named: dict[str, NamedAgentConfig] = setting(doc="The subagents, by name ([agents.named.<name>]).", factory=dict)


def configured_subagents(settings: AgentsConfig) -> dict[str, SubagentSpec]:
    """``[agents.named.<name>]`` as :class:`SubagentSpec` records; a :class:`ConfigError` naming each bad table."""
    specs: dict[str, SubagentSpec] = {}
    problems: list[str] = []
    for name, named in settings.named.items():
        try:
            specs[name] = SubagentSpec(
                named.description, named.model, named.profile, tuple(named.skills), tuple(named.tools),
                named.permissions, named.system, named.identity,
            )
        except (TypeError, ValueError) as exc:
            problems.append(f"agents.named.{name}: {str(exc).replace('SubagentSpec', 'this agent')}")
    if problems:
        raise ConfigError(problems)
    return specs


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, AgentsConfig)


@hookimpl(trylast=True)
def configure(agent: Agent) -> None:
    """Build the agent's roster (config and ``Agent(subagents=...)``); nothing to do without one."""
    settings = agent.config.section(CONFIG_PATH, AgentsConfig)
    specs = roster(configured_subagents(settings), agent.subagents)
    if specs:
        DELEGATIONS[agent] = Delegation(specs, settings.max_depth, settings.max_concurrent)


@hookimpl(trylast=True)
def provide_tools(agent: Agent, turn: Turn | None) -> list[Tool] | None:
    """The ``task`` tool, for an agent with a subagent and depth left."""
    delegation = DELEGATIONS.get(agent)
    if delegation is None or not delegation.may_delegate:
        return None
    return [Tool(task_spec(delegation), run_task)]


@hookimpl(trylast=True)
def filter_tools(turn: Turn, tools: Sequence[ToolSpec]) -> list[ToolSpec] | None:
    """A subagent's turn keeps only the tools its ``tools`` list names, by name or by domain."""
    if turn.subagent is None:
        return None
    allowed = set(turn.subagent.tools)
    return [spec for spec in tools if spec.name in allowed or (spec.domain is not None and spec.domain in allowed)]


@hookimpl(trylast=True)
def section_task_orchestration(turn: Turn) -> Section | None:
    """When to delegate, and the agents there are; only on a turn that is offered the ``task`` tool."""
    if not any(spec.name == TASK_TOOL for spec in turn.tools):
        return None
    specs = roster(configured_subagents(turn.config.section(CONFIG_PATH, AgentsConfig)), turn.subagents)
    agents = "\n".join(
        f"- {name}: {spec.description}" if spec.description else f"- {name}" for name, spec in sorted(specs.items())
    )
    text = (
        "# Task orchestration\n\n"
        "You can delegate a self-contained job to a subagent with the `task` tool. Delegate when a job can be "
        "described completely on its own (research a question, review a text, draft a section) and doing it here "
        "would crowd this conversation; do small steps and anything that needs this conversation yourself.\n\n"
        "The subagent sees nothing of this conversation: no history, no files you were shown, no earlier tool "
        "results. Put everything it needs in `task`: the goal, the inputs (or pass them in `context`), the "
        "constraints and the form of the answer you want. Its final answer comes back as the tool result; check it "
        "before you rely on it, and tell the user what you did with it.\n\n"
        f"Available agents:\n{agents}"
    )
    return Section("task_orchestration", text, order=620, stability="dynamic", source="subagents")


@hookimpl  # not trylast: it must answer before the bundled ``identity`` plugin, whatever their load order
def section_identity(turn: Turn) -> Section | None:
    """A subagent's ``system`` text as its identity; None for every other turn (the ``identity`` plugin answers).

    A plugin registered after this one (third-party, project-local, programmatic) is still called
    first, so a project's own ``section_identity`` wins over both.
    """
    if turn.subagent is None or turn.subagent.system is None:
        return None
    return Section("identity", f"{IDENTITY_HEADING}\n\n{turn.subagent.system}", order=200, stability="stable",
                   source="subagents")


@hookimpl(trylast=True)
async def shutdown(agent: Agent) -> None:
    """Let the agent's subagents settle their cancelled runs and close their harnesses.

    The roster stays: an Agent used again after ``aclose`` derives its subagents afresh.
    """
    delegation = DELEGATIONS.get(agent)
    children = list(delegation.children.values()) if delegation is not None else []
    if delegation is not None:
        delegation.children.clear()
    for child in children:
        await child.harness.wait_settled()
        await child.harness.close()
        DELEGATIONS.pop(child, None)
