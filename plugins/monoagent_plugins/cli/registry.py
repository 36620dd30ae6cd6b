"""The bundled plugin ``registry-cli``: ``monoagent tools`` and ``monoagent models``, what the registries hold.

``monoagent tools`` lists every tool the agent could offer: the registered ones (source: the
plugin's name) and the ones ``provide_tools`` offers (an MCP server's, source ``mcp:<server>``),
each with its description; a source that could not list its tools (an MCP server that did not
start within its ``startupTimeoutMs``) is listed as failed with the reason. Neither a tool's
``enabled`` nor ``filter_tools`` is applied: they decide per turn, and there is no turn here. ``monoagent models`` lists the
provider registry: each prefix, its plugin, its description and the models it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from monoagent import PROVIDERS, command_agent, echo, echo_json, hookimpl, one_line, run_async

if TYPE_CHECKING:
    from monoagent import Agent

SUMMARY_CHARS = 100
"""Characters of a description in the plain listing (``--json`` carries all of it)."""


async def _tool_rows(agent: Agent) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    from monoagent import provided_tools

    provided, failures = await provided_tools(agent, None)
    rows = [
        {"name": name, "source": tool.source or tool.plugin, "plugin": tool.plugin, "description": tool.spec.description}
        for name, tool in (*agent.tools.items(), *provided.items())
    ]
    return rows, [{"source": f.source, "status": "failed", "reason": f.reason} for f in failures]


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    @cli.command("tools")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON: {tools: [{name, source, plugin, description}], failed: [...]}.")
    def tools(as_json: bool) -> None:
        """List every tool with its source (plugin, or mcp:<server>) and description; connects to MCP servers."""
        rows, failed = run_async(_tool_rows(command_agent("tools")))
        if as_json:
            echo_json({"tools": rows, "failed": failed})
            return
        width = max((len(r["name"]) for r in rows), default=4)
        source_width = max((len(r["source"]) for r in rows), default=6)
        for row in rows:
            echo(f"{row['name']:<{width}}  {row['source']:<{source_width}}  {one_line(row['description'], SUMMARY_CHARS)}")
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
