"""Delegation: the subagents an Agent may hand a job to, and one ``task`` call run to its result.

Each Agent the ``subagents`` plugin knows has a :class:`Delegation`: its roster (the named
:class:`~monoagent._kernel.subagents.SubagentSpec` records, from ``[agents.named.<name>]`` and
``Agent(subagents=...)``), its depth (0 for the Agent a user built, 1 for a subagent, ...), its
bound on concurrent ``task`` calls, and the derived Agent of each subagent, made on first use
and reused (:meth:`monoagent._agent.Agent.derive`: same plugins, providers and stores, its own
configuration and harness).

One call (:func:`run_task`) runs the child turn as an *isolated* request (it reads and commits no
shared history) in a conversation of its own, derived from the parent's run id and the tool
call's id, so nothing of it is ever in the parent's history and nothing of the parent's is in
its prompt. Its final answer is the tool result; what it spent is added to the parent run's
usage (:meth:`monoagent._kernel.tool_context.ToolContext.add_usage`). A failure of the child (its provider, its
model, a bad argument) is an ``error`` tool result, never the parent's failure; cancelling the
parent cancels the child, because the child's run is awaited inside the parent's tool call.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import (
    ConfigError,
    MonoagentError,
    RunEvent,
    SubagentSpec,
    ToolResult,
    ToolSpec,
    ToolStatus,
    TurnRequest,
    Usage,
    utf8_len,
)

if TYPE_CHECKING:
    from monoagent import Agent, Config, ToolContext

TASK_TOOL = "task"
TASK_DOMAIN = "task"
CHANNEL = "subagent"
MAX_TASK_BYTES = 64 * 1024
"""UTF-8 bytes of ``task`` and ``context`` together: the child's user message, bounded as one history message is."""


@attrs.define(eq=False)
class Delegation:
    """What one Agent may delegate: its roster, its place in the tree, its bound and its derived children."""

    roster: Mapping[str, SubagentSpec]
    max_depth: int
    max_concurrent: int
    depth: int = 0
    spec: SubagentSpec | None = None
    """The spec this Agent runs as (None for the Agent a user built)."""
    children: dict[str, Agent] = attrs.Factory(dict)
    running: int = 0
    _slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    @property
    def may_delegate(self) -> bool:
        """Whether this Agent's turns are offered the ``task`` tool: a roster, and depth left."""
        return bool(self.roster) and self.depth < self.max_depth

    def slots(self) -> asyncio.Semaphore:
        """The bound on concurrent ``task`` calls, one per event loop (``run_sync`` runs each turn on a new one)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.max_concurrent))
            self.running = 0
        return self._slots[1]

    def child(self, agent: Agent, name: str) -> Agent:
        """The derived Agent subagent ``name`` runs as, made from ``agent`` (whose delegation this is) on first use."""
        child = self.children.get(name)
        if child is None:
            spec = self.roster[name]
            child = self.children[name] = agent.derive(child_config(agent.config, spec, self), subagent=spec)
            DELEGATIONS[child] = Delegation(self.roster, self.max_depth, self.max_concurrent, self.depth + 1, spec)
        return child


DELEGATIONS: weakref.WeakKeyDictionary[Agent, Delegation] = weakref.WeakKeyDictionary()
"""The delegation of each Agent the ``subagents`` plugin configured, and of each subagent derived from one."""


def roster(configured: Mapping[str, SubagentSpec], programmatic: Mapping[str, SubagentSpec]) -> dict[str, SubagentSpec]:
    """The configured and the programmatic subagents together; a name in both is a :class:`ConfigError`."""
    both = sorted(set(configured) & set(programmatic))
    if both:
        raise ConfigError([f"subagent {name!r} is defined twice: in [agents.named.{name}] and in Agent(subagents=...); "
                           f"rename or remove one" for name in both])
    return {**configured, **programmatic}


def task_spec(delegation: Delegation) -> ToolSpec:
    """The ``task`` tool's spec: ``agent`` is an enum of the roster, each described in the tool's text."""
    names = sorted(delegation.roster)
    listed = "\n".join(f"- {name}: {delegation.roster[name].description or '(no description)'}" for name in names)
    return ToolSpec(
        TASK_TOOL,
        "Delegate a self-contained job to a named subagent and get its final answer back as this tool's result. "
        "The subagent sees nothing of this conversation: put everything it needs in `task` (and `context`).\n"
        f"Available agents:\n{listed}",
        {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": names, "description": "The subagent to run the job."},
                "task": {"type": "string", "description": "The complete job: goal, inputs, constraints, the answer wanted."},
                "context": {"type": "string", "description": "Optional material the job needs (text, data, excerpts)."},
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        },
        categories=("subagent",),
        domain=TASK_DOMAIN,
    )


def child_config(parent: Config, spec: SubagentSpec, delegation: Delegation) -> Config:
    """``parent``'s configuration overlaid with ``spec``: profile, identity, skills; no memory, no warm session.

    A subagent sees nothing but its task: no memory tiers (no recall), per-message sessions (its
    conversation is one turn long). Its harness runs up to ``agents.maxConcurrent`` turns at once.
    """
    identity = parent.resolve(spec.identity) if spec.identity is not None else parent.context.identity_path
    sections = dict(parent.sections)
    skills = sections.get("context")
    if skills is not None and hasattr(skills, "selected_skills"):
        sections["context"] = attrs.evolve(skills, selected_skills=list(spec.skills))
    return attrs.evolve(
        parent,
        context=attrs.evolve(parent.context, profile=spec.profile, identity_path=identity),
        memory=attrs.evolve(parent.memory, tiers=[]),
        runtime=attrs.evolve(parent.runtime, session=attrs.evolve(parent.runtime.session, mode="per-message")),
        concurrency=attrs.evolve(parent.concurrency, max_concurrent_runs=delegation.max_concurrent),
        sections=sections,
        warnings=[],
    )


def child_conversation(name: str, run_id: str, call_id: str) -> str:
    """The child's conversation id: its agent's name and a digest of the parent's run id and the call id."""
    digest = hashlib.sha256(f"{run_id}\0{call_id}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{CHANNEL}:{name}:{digest}"


def _refuse(context: ToolContext, delegation: Delegation, problem: str) -> ToolResult:
    names = ", ".join(sorted(delegation.roster)) or "none"
    return context.result(f"The task was not run: {problem} (available agents: {names}).", ToolStatus.ERROR)


def _job(context: ToolContext, delegation: Delegation) -> tuple[str, str] | ToolResult:
    """The checked ``agent`` name and the child's message, or the error result that refuses the call."""
    arguments = context.arguments
    unknown = sorted(set(arguments) - {"agent", "task", "context"})
    if unknown:
        return _refuse(context, delegation, f"unknown argument(s) {', '.join(map(repr, unknown))}; "
                                            f"the arguments are agent, task and context")
    name, task, extra = arguments.get("agent"), arguments.get("task"), arguments.get("context", "")
    if not isinstance(name, str) or name not in delegation.roster:
        return _refuse(context, delegation, f"'agent' must name a configured agent, not {name!r:.80}")
    if not isinstance(task, str) or not task.strip():
        return _refuse(context, delegation, "'task' must be the job's description as non-empty text")
    if not isinstance(extra, str):
        return _refuse(context, delegation, f"'context' must be text, not {type(extra).__name__}")
    message = f"{task}\n\nContext:\n{extra}" if extra.strip() else task
    if utf8_len(message) > MAX_TASK_BYTES:
        return _refuse(context, delegation, f"'task' and 'context' together are {utf8_len(message):,} bytes, over the "
                                            f"{MAX_TASK_BYTES:,}-byte limit; give the subagent a shorter, self-contained job")
    return name, message


async def run_task(context: ToolContext) -> ToolResult:
    """Run one ``task`` call of the turn's Agent (see the module docstring)."""
    turn, call = context.turn, context.call
    delegation = DELEGATIONS.get(context.agent)
    if delegation is None or not delegation.may_delegate:  # offered by an earlier configuration of this Agent
        return context.result("The task tool is not available to this agent.", ToolStatus.REJECTED)
    job = _job(context, delegation)
    if isinstance(job, ToolResult):
        return job
    name, message = job
    spec = delegation.roster[name]
    child = delegation.child(context.agent, name)
    request = TurnRequest(
        message,
        conversation_id=child_conversation(name, turn.run_id, call.id),
        channel=CHANNEL,
        delivery="request",
        model=spec.model or turn.model,
        profile=spec.profile,
        isolated=True,
        permissions=turn.permissions,  # the child narrows it by the subagent's own profile (plugin permissions)
        approver=turn.request.approver,
    )
    slots = delegation.slots()
    if slots.locked():
        turn.emit("subagent_waiting", agent=name, call_id=call.id, running=delegation.running,
                  max_concurrent=delegation.max_concurrent)
    async with slots:
        delegation.running += 1
        try:
            return await _run_child(context, name, child, request, delegation.depth + 1)
        finally:
            delegation.running -= 1


async def _run_child(context: ToolContext, name: str, child: Agent, request: TurnRequest, depth: int) -> ToolResult:
    turn, call = context.turn, context.call
    link: dict[str, Any] = {"agent": name, "call_id": call.id, "conversation_id": request.conversation_id, "depth": depth}
    spent = _Spending()
    try:
        handle = child.submit(request, on_event=spent.observe)
    except MonoagentError as exc:  # an unknown model prefix, a provider without its key: before any run
        return _failed(context, link, exc, Usage())
    link["run_id"] = handle.run_id
    turn.emit("subagent_started", **link)
    try:
        result = await handle
    except asyncio.CancelledError:
        turn.emit("subagent_finished", **link, status="cancelled")
        raise
    except Exception as exc:
        return _failed(context, link, exc, spent.usage)
    context.add_usage(result.usage)
    turn.emit("subagent_finished", **link, status="completed", usage=attrs.asdict(result.usage), steps=result.steps)
    return context.result(result.text)


@attrs.define
class _Spending:
    """What a child's provider steps reported spending, for a child that fails before its result says so."""

    usage: Usage = Usage()

    def observe(self, event: RunEvent) -> None:
        reported = event.data.get("usage") if event.type == "provider_response" else None
        if isinstance(reported, dict):
            self.usage = self.usage + Usage(**{key: int(reported.get(key, 0)) for key in attrs.fields_dict(Usage)})


def _failed(context: ToolContext, link: dict[str, Any], error: BaseException, spent: Usage) -> ToolResult:
    """The error result for a child that failed; what its provider steps spent still counts for the parent."""
    turn = context.turn
    context.add_usage(spent)
    detail = turn.redact(f"{type(error).__name__}: {error}", "error")
    turn.emit("subagent_finished", **link, status="failed", error=detail, usage=attrs.asdict(spent))
    return context.result(f"Subagent {link['agent']!r} failed: {detail}", ToolStatus.ERROR)
