"""The bundled plugin ``registry-cli``: ``monoagent tools`` and ``monoagent models``, what the registries hold.

``monoagent tools`` lists every tool the agent knows: the registered ones (source: the plugin's
name) and the ones ``provide_tools`` offers (an MCP server's, source ``mcp:<server>``), each with
its description and what a turn does with it at its start: ``offered`` (sent to the provider from
the first round), ``hidden`` (held back by ``hide_tools``, with its tool domain, until revealed) or
``inactive`` (not offered on this turn, and why: its ``enabled`` answered false, or a
``filter_tools`` implementation withdrew it). That is worked out by :meth:`Agent.tool_offer
<monoagent.Agent.tool_offer>`, the very steps a ``monoagent run`` turn takes before its first
provider call, so what it says is what such a turn does. A source that could not list its tools
(an MCP server that did not start within its ``startupTimeoutMs``) is listed as failed with the
reason. ``monoagent tools --schema [NAME]`` prints the JSON Schema of the tool's arguments exactly
as the provider is offered it (of every tool, by name, without NAME). ``monoagent models`` lists
the provider registry: each prefix, its plugin, its description and the models it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from monoagent import PROVIDERS, command_agent, echo, echo_json, hookimpl, one_line, run_async

if TYPE_CHECKING:
    from monoagent import ToolOffer

SUMMARY_CHARS = 100
"""Characters of a description in the plain listing (``--json`` carries all of it)."""


def _tool_rows(offer: ToolOffer) -> list[dict[str, Any]]:
    rows = []
    for tool in offer.tools:
        status, why = offer.status(tool.spec.name)
        rows.append({
            "name": tool.spec.name, "status": status, "why": why, "domain": tool.spec.domain,
            "source": tool.source or tool.plugin, "plugin": tool.plugin, "description": tool.spec.description,
        })
    return rows


def _schemas(offer: ToolOffer, name: str | None) -> Any:
    """The input schema of ``name``, or of every tool by name; a usage error naming the tools for an unknown name."""
    schemas = {tool.spec.name: tool.spec.input_schema for tool in offer.tools}
    if name is None:
        return schemas
    if name not in schemas:
        known = ", ".join(schemas) or "none"
        raise click.UsageError(f"no tool is called {name!r}; the tools are: {known}")
    return schemas[name]


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    @cli.command("tools")
    @click.argument("name", required=False)
    @click.option("--schema", is_flag=True, help="Print the JSON Schema of NAME's arguments exactly as the provider is "
                  "offered it (without NAME: every tool's, by name).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON: {tools: [{name, status, why, domain, source, plugin, "
                  "description}], failed: [...]}.")
    def tools(name: str | None, schema: bool, as_json: bool) -> None:
        """List every tool: offered at a turn's start, hidden (its domain) or inactive (why), its source and description.

        With NAME, that tool only. It connects to MCP servers, as a turn does.
        """
        offer = run_async(command_agent("tools").tool_offer())
        if schema:
            echo_json(_schemas(offer, name))
            return
        rows = _tool_rows(offer)
        if name is not None:
            _schemas(offer, name)  # an unknown name is a usage error naming the tools
            rows = [row for row in rows if row["name"] == name]
        failed = [{"source": f.source, "status": "failed", "reason": f.reason} for f in offer.failures]
        if as_json:
            echo_json({"tools": rows, "failed": failed})
            return
        width = max((len(r["name"]) for r in rows), default=4)
        source_width = max((len(r["source"]) for r in rows), default=6)
        for row in rows:
            echo(f"{row['name']:<{width}}  {row['source']:<{source_width}}  {row['status']:<8}  {one_line(row['description'], SUMMARY_CHARS)}")
            if row["why"]:
                echo(f"{'':<{width}}  {'':<{source_width}}  ({one_line(row['why'], 2 * SUMMARY_CHARS)})")
        for failure in failed:
            echo(f"{failure['source']}: failed: {failure['reason']}")
        if not rows and not failed:
            echo("no tools")

    @cli.command("models")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON: [{prefix, plugin, description, models}].")
    def models(as_json: bool) -> None:
        """List the provider registry: each model prefix, its description and the models it knows."""
        registry = command_agent("models").components.registered(PROVIDERS)
        rows: list[dict[str, Any]] = [
            {"prefix": c.name, "plugin": c.plugin, "description": c.description, "models": list(c.models)}
            for c in sorted(registry.values(), key=lambda c: c.name)
        ]
        if as_json:
            echo_json(rows)
            return
        width = max((len(r["prefix"]) for r in rows), default=6)
        for row in rows:
            known = f"  models: {', '.join(row['prefix'] + ':' + m for m in row['models'])}" if row["models"] else ""
            echo(f"{row['prefix'] + ':':<{width + 1}}  {row['description'] or '-'}{known}")
