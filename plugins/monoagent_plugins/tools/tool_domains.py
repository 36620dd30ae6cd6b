"""Hidden tool domains (bundled plugin ``tool-domains``): ``tools.visible``, the ``request_tools`` tool and the ``hidden_tool_domains`` section.

A tool may declare a domain (``ToolSpec.domain``: ``memory``, ``task``, ``artifact``, ``mcp:<server>``).
The domain policy is this plugin's, whole:

* ``tools.visible`` (this plugin's configuration section ``tools``; default ``["memory", "task",
  "mcp:*"]``) lists, as :mod:`fnmatch` patterns, the domains visible when a turn starts. The tools
  of every other domain are held back (``hide_tools``): the kernel keeps them in
  ``turn.hidden_tools``, neither offered to the provider nor callable. A tool without a domain
  is never hidden.
* ``request_tools(domain)`` (category ``read``, no domain): reveals that domain's tools for the
  rest of the turn (:meth:`ToolContext.reveal_tools <monoagent._kernel.tool_context.ToolContext.reveal_tools>`,
  then a ``tools_revealed`` event with ``domain`` and ``tools``); an unknown domain is an error
  result listing the hidden ones. It is offered only on turns where something is hidden
  (``register(..., enabled=...)``).
* ``hidden_tool_domains`` (dynamic, 640): a compact catalogue of the hidden domains with their
  exact tool names (no schemas), rendered only when something is hidden and ``request_tools`` is
  offered. The catalogue does not make a tool callable; only ``request_tools`` does.

Blocking the plugin hides nothing: every offered tool is callable from the start, and a
``tools.visible`` in the configuration is reported as the section of a blocked plugin.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Sequence

import attrs

from monoagent import (
    ConfigSectionRegistrar,
    Section,
    ToolContext,
    ToolRegistrar,
    ToolResult,
    ToolSpec,
    ToolStatus,
    Turn,
    hookimpl,
    setting,
)

CONFIG_PATH = "tools"
TOOL_NAME = "request_tools"
HEADING = "# Hidden tool domains"
NAMES_PER_DOMAIN = 32
"""Tool names listed per domain in the catalogue; the rest are counted."""
DEFAULT_VISIBLE = ("memory", "task", "mcp:*")
"""The domains visible from the start unless ``tools.visible`` says otherwise: the memory tools, the
``task`` tool and every MCP server's tools; ``artifact`` and any other plugin domain start hidden."""


def _check_domains(value: list[str]) -> str | None:
    for item in value:
        if not re.fullmatch(r"[A-Za-z0-9_:*.-]{1,80}", item):
            return f"{item!r} is not a tool domain or pattern: letters, digits, '_', ':', '.', '-' and '*' (e.g. 'memory', 'mcp:*')"
    return None


@attrs.define
class ToolDomainsConfig:
    """tools: which tool domains are visible when a turn starts (docs/permissions.md)."""

    visible: list[str] = setting(
        doc="Tool domains visible from the start (patterns: '*' for all, 'mcp:*' for every MCP server); the others "
        "stay hidden until the model calls request_tools. Tools without a domain are always visible.",
        env="MONO_AGENT_TOOLS_VISIBLE", check=_check_domains, factory=lambda: list(DEFAULT_VISIBLE),
    )


TOOL_SPEC = ToolSpec(
    TOOL_NAME,
    "Make the tools of a hidden tool domain callable for the rest of this turn.",
    {
        "type": "object",
        "properties": {"domain": {"type": "string", "description": "The hidden domain's exact name, as the hidden tool "
                                  "domains section lists it."}},
        "required": ["domain"],
        "additionalProperties": False,
    },
    categories=("read",),
)


def visible_patterns(turn: Turn) -> tuple[str, ...]:
    """``tools.visible`` of the turn's configuration."""
    settings = turn.config.section(CONFIG_PATH, ToolDomainsConfig)
    return tuple(settings.visible)


@functools.lru_cache(maxsize=512)
def _domain_visible(patterns: tuple[str, ...], domain: str) -> bool:
    return any(fnmatch.fnmatchcase(domain, pattern) for pattern in patterns)


def hidden_specs(patterns: tuple[str, ...], tools: Sequence[ToolSpec]) -> list[ToolSpec]:
    """The tools of ``tools`` in a domain that no pattern of ``patterns`` matches."""
    return [spec for spec in tools if spec.domain is not None and not _domain_visible(patterns, spec.domain)]


def hidden_domains(turn: Turn) -> dict[str, tuple[str, ...]]:
    """The turn's hidden tool domains, each with its exact tool names, in domain order."""
    domains: dict[str, list[str]] = {}
    for spec in turn.hidden_tools:
        if spec.domain is not None:
            domains.setdefault(spec.domain, []).append(spec.name)
    return {domain: tuple(names) for domain, names in sorted(domains.items())}


def request_tools(context: ToolContext) -> ToolResult | str:
    """The ``request_tools`` handler: reveal the named hidden domain, or say which ones are hidden."""
    domain = context.arguments.get("domain")
    if not isinstance(domain, str):
        return context.result("request_tools needs 'domain', a string naming a hidden tool domain.", ToolStatus.REJECTED)
    turn = context.turn
    revealed = context.reveal_tools(spec.name for spec in turn.hidden_tools if spec.domain == domain)
    if revealed:
        context.turn.emit("tools_revealed", domain=domain, tools=[spec.name for spec in revealed])
        names = ", ".join(spec.name for spec in revealed)
        return f"The tool domain {domain!r} is visible for the rest of this turn: {names}. Call them directly."
    if any(spec.domain == domain for spec in turn.tools):
        return f"The tool domain {domain!r} is already visible in this turn."
    hidden = ", ".join(hidden_domains(turn)) or "none"
    return context.result(f"{domain[:80]!r} is not a hidden tool domain of this turn (hidden: {hidden}).", ToolStatus.REJECTED)


def _something_hidden(turn: Turn) -> bool:
    """``request_tools`` is offered on a turn where ``tools.visible`` hides the domain of a tool the turn
    may offer (``enabled`` is asked while ``turn.tools`` holds every registered and provided tool)."""
    return bool(hidden_specs(visible_patterns(turn), turn.tools))


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(CONFIG_PATH, ToolDomainsConfig)


@hookimpl(trylast=True)
def register_tools(register: ToolRegistrar) -> None:
    register(TOOL_SPEC, request_tools, enabled=_something_hidden)


@hookimpl(trylast=True)
def hide_tools(turn: Turn, tools: Sequence[ToolSpec]) -> list[ToolSpec] | None:
    """The tools of every domain ``tools.visible`` does not list."""
    return hidden_specs(visible_patterns(turn), tools) or None


@hookimpl(trylast=True)
def section_hidden_tool_domains(turn: Turn) -> Section | None:
    domains = hidden_domains(turn)
    if not domains or not any(spec.name == TOOL_NAME for spec in turn.tools):
        return None
    lines = [
        HEADING, "",
        f"These tool domains are hidden in this turn: their tools are not callable until you call {TOOL_NAME} with the "
        "domain's name, which makes them callable for the rest of the turn. Request a domain only when you need one "
        "of its tools.",
    ]
    for domain, names in domains.items():
        more = f" (and {len(names) - NAMES_PER_DOMAIN} more)" if len(names) > NAMES_PER_DOMAIN else ""
        lines.append(f"- {domain}: {', '.join(names[:NAMES_PER_DOMAIN])}{more}")
    return Section("hidden_tool_domains", "\n".join(lines), order=640, stability="dynamic", source="tool-domains")
