"""Named subagents: what a delegated job runs as, declared in config (``[agents.named.<name>]``) or in Python.

A subagent is not a second process or a second plugin load: its turn runs through the same
plugins, providers and stores as the agent that delegates to it, on a configuration overlaid
with its spec (:meth:`monoagent._agent.Agent.derive`), and with a history of its own that the
delegating conversation never sees. The bundled ``subagents`` plugin offers the ``task`` tool
that starts one; this module holds only the public description of a subagent::

    agent = Agent(config, subagents={
        "reviewer": SubagentSpec("Reviews a diff for bugs; give it the diff.", model="anthropic:claude-sonnet-4-6"),
    })
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from monoagent._kernel.config import check_model
from monoagent._kernel.errors import ConfigError
from monoagent._kernel.model import PROMPT_PROFILES, PromptProfile

SUBAGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A subagent's name: it is the ``task`` tool's ``agent`` value and part of the child's conversation id."""


def _names(value: Iterable[str] | str) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"a list of names, such as ['read_file', 'memory'], not {value!r:.120}")
    return tuple(value)


def _check(spec: SubagentSpec, attribute: attrs.Attribute[Any], value: Any) -> None:
    problem = None
    if attribute.name == "model":
        problem = check_model(value) if isinstance(value, str) else "must be a string" if value is not None else None
    elif attribute.name == "profile" and value not in PROMPT_PROFILES:
        problem = f"must be one of {', '.join(PROMPT_PROFILES)}"
    elif attribute.name in ("description", "system", "permissions") and value is not None and not isinstance(value, str):
        problem = f"must be a string, not {type(value).__name__}"
    if problem:
        raise ValueError(f"SubagentSpec.{attribute.name} = {value!r:.80}: {problem}")


@attrs.frozen
class SubagentSpec:
    """One named subagent: when to use it, and the configuration its turns run with.

    Built as ``SubagentSpec(description, model=None, profile="minimal", skills=(), tools=(),
    permissions=None, system=None, identity=None)``; a bad value is a ``ValueError`` (``TypeError``
    for a list that is not of names) naming the field and what is allowed.

    Attributes:
        description: for the model: when to delegate to this agent and what to give it (shown in
            the ``task`` tool and the ``task_orchestration`` section).
        model: the ``provider:model`` its turns call; None for the delegating agent's model.
        profile: its prompt profile (``full``, ``minimal``, ``none``); ``minimal`` by default, so a
            subagent gets the core guardrails, its identity and the session block only.
        skills: the skills it loads (``context.selectedSkills`` for its turns); rendered only under
            the ``full`` profile, as for any turn.
        tools: the tools it may call, by tool name or tool domain (``memory``, ``mcp:<server>``,
            ``task`` to let it delegate further when ``agents.maxDepth`` allows). Least privilege:
            an empty list (the default) offers it no tool at all.
        permissions: a permission profile name for its tool calls, applied within the delegating
            turn's effective profile (never wider); None for the delegating turn's.
        system: its identity as text (the identity section of its prompt); mutually exclusive with
            ``identity``.
        identity: an IDENTITY.md file for it (relative paths against the config file's directory).
    """

    description: str = attrs.field(default="", validator=_check)
    model: str | None = attrs.field(default=None, validator=_check)
    profile: PromptProfile = attrs.field(default="minimal", validator=_check)
    skills: tuple[str, ...] = attrs.field(default=(), converter=_names)
    tools: tuple[str, ...] = attrs.field(default=(), converter=_names)
    permissions: str | None = attrs.field(default=None, validator=_check)
    system: str | None = attrs.field(default=None, validator=_check)
    identity: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))

    def __attrs_post_init__(self) -> None:
        if self.system is not None and self.identity is not None:
            raise ValueError("SubagentSpec takes a system text or an identity file, not both")


def checked_subagents(value: Mapping[str, SubagentSpec] | None, where: str = "Agent(subagents=...)") -> dict[str, SubagentSpec]:
    """``value`` as a dict of valid names to specs; a :class:`ConfigError` naming every problem otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} takes a mapping of names to SubagentSpec, not {type(value).__name__}")
    problems = []
    for name, spec in value.items():
        if not isinstance(name, str) or not SUBAGENT_NAME.fullmatch(name):
            problems.append(f"{where}: {name!r} is not an allowed subagent name (1-64 letters, digits, '_', '-' or '.', "
                            f"starting with a letter or digit)")
        elif not isinstance(spec, SubagentSpec):
            problems.append(f"{where}[{name!r}] is a {type(spec).__name__}; pass a monoagent.SubagentSpec")
    if problems:
        raise ConfigError(problems if len(problems) > 1 else problems[0])
    return dict(value)
