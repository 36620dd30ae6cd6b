"""Hidden tool domains (bundled plugin ``tool-domains``): the ``request_tools`` tool and the ``hidden_tool_domains`` section.

A tool may declare a domain (``ToolSpec.domain``: ``memory``, ``task``, ``artifact``, ``mcp:<server>``).
``tools.visible`` decides which domains are visible when a turn starts; the kernel keeps the others
in ``turn.hidden_tools``, neither offered to the provider nor callable
(:func:`~monoagent.pipeline.tool_loop.split_hidden_domains`). This plugin adds what lets the model
reach them:

* ``request_tools(domain)`` (category ``read``, no domain): makes that domain's tools callable and
  offered to the provider for the rest of the turn
  (:meth:`ToolContext.reveal_domain <monoagent.kernel.tool_context.ToolContext.reveal_domain>`); an unknown domain is an error result
  listing the hidden ones. It is withdrawn (``filter_tools``) on turns where nothing is hidden.
* ``hidden_tool_domains`` (dynamic, 640): a compact catalogue of the hidden domains with their
  exact tool names (no schemas), rendered only when something is hidden and ``request_tools`` is
  offered. The catalogue does not make a tool callable; only ``request_tools`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

from monoagent.kernel.host import bundled_impl
from monoagent.kernel.model import Section, ToolResult, ToolSpec, ToolStatus
from monoagent.kernel.registrars import ToolRegistrar
from monoagent.kernel.tool_context import ToolContext
from monoagent.kernel.turn import Turn

TOOL_NAME = "request_tools"
HEADING = "# Hidden tool domains"
NAMES_PER_DOMAIN = 32
"""Tool names listed per domain in the catalogue; the rest are counted."""


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


def request_tools(context: ToolContext) -> ToolResult | str:
    """The ``request_tools`` handler: reveal the named hidden domain, or say which ones are hidden."""
    from monoagent.pipeline.tool_loop import hidden_domains

    domain = context.arguments.get("domain")
    if not isinstance(domain, str):
        return context.result("request_tools needs 'domain', a string naming a hidden tool domain.", ToolStatus.REJECTED)
    revealed = context.reveal_domain(domain)
    turn = context.turn
    if revealed:
        names = ", ".join(spec.name for spec in revealed)
        return f"The tool domain {domain!r} is visible for the rest of this turn: {names}. Call them directly."
    if any(spec.domain == domain for spec in turn.tools):
        return f"The tool domain {domain!r} is already visible in this turn."
    hidden = ", ".join(hidden_domains(turn)) or "none"
    return context.result(f"{domain[:80]!r} is not a hidden tool domain of this turn (hidden: {hidden}).", ToolStatus.REJECTED)


@bundled_impl
def register_tools(register: ToolRegistrar) -> None:
    register(TOOL_SPEC, request_tools)


@bundled_impl
def filter_tools(turn: Turn, tools: Sequence[ToolSpec]) -> list[ToolSpec] | None:
    """Withdraw ``request_tools`` when ``tools.visible`` hides nothing on this turn."""
    from monoagent.pipeline.tool_loop import split_hidden_domains

    if split_hidden_domains(turn.config.tools.visible, tools)[1]:
        return None
    return [spec for spec in tools if spec.name != TOOL_NAME]


@bundled_impl
def section_hidden_tool_domains(turn: Turn) -> Section | None:
    from monoagent.pipeline.tool_loop import hidden_domains

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
