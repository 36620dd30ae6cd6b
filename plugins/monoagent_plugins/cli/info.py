"""The bundled plugin ``info-cli``: ``monoagent info``, what this installation is and where it keeps things.

One screen for a bug report or a first look: the versions (monoagent, Python, the libraries the
kernel stands on and the ``serve`` extra's, read from package metadata, never imported), the
config file in use, every resolved path (agent home, bootstrap files, message history, tool
history, run artifacts, memory, durable provider sessions), the selected components, the plugins
and what each registry holds. It opens no store and reads no history (building the Agent writes
the bootstrap files when they are missing, as every command that needs it does).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from monoagent import command_agent, echo, echo_json, hookimpl

if TYPE_CHECKING:
    from monoagent import Agent

LIBRARIES = ("pluggy", "click", "attrs", "cattrs", "loguru", "platformdirs", "tomli-w", "starlette", "uvicorn", "httpx", "mcp")
"""Distributions whose versions ``info`` reports (``not installed`` for an optional one that is absent)."""


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _tool_history_path(agent: Agent) -> str:
    """Where tool history lives: the bundled ``sqlite`` sidecar's file, else the store's name."""
    store = agent.config.tool_history.store
    if not agent.config.tool_history.enabled or store == "none":
        return "(off)"
    if store == "sqlite":
        from monoagent_plugins.history.tool_calls.sidecar import SIDECAR

        return str(agent.config.history_dir / SIDECAR)
    return f"(store {store!r}: see its plugin)"


def _transcripts_path(agent: Agent) -> str:
    """Where the ``files`` session backend keeps transcripts (its key, declared by ``session-files``), resolved."""
    from monoagent_plugins.history.session_files import SessionFilesConfig

    config = agent.config
    root = config.section("runtime.session", SessionFilesConfig).transcripts_dir if "runtime.session" in config.sections else None
    return str(config.resolve(root)) if root else "(unset: in memory)"


def describe(agent: Agent) -> dict[str, Any]:
    """Everything ``info`` prints, as data (``--json`` prints exactly this)."""
    import platform

    config = agent.config
    paths = {key: str(path) for key, path in config.default_paths().items()}
    paths["toolHistory"] = _tool_history_path(agent)
    paths["runtime.session.transcriptsDir"] = _transcripts_path(agent)
    registries: dict[str, list[dict[str, str]]] = {}
    for record in agent.host.records:
        if record.status != "active":
            continue
        for entry in record.registrations:
            registries.setdefault(entry.kind, []).append(
                {"name": entry.name, "plugin": record.name, "description": entry.description.strip().split("\n")[0]}
            )
    return {
        "versions": {"monoagent": _version("monoagent"), "python": f"{platform.python_version()} ({sys.executable})",
                     **{name: _version(name) for name in LIBRARIES}},
        "config_file": str(config.source_file) if config.source_file else None,
        "paths": paths,
        "selected": {
            "model": agent.model, "history.store": config.history.store, "toolHistory.store": config.tool_history.store,
            "runtime.session.backend": config.runtime.session.backend,
            "memory.tiers": list(config.memory.tiers), "runtime.fallbacks": list(config.runtime.fallbacks),
            "runtime.compaction.policy": config.runtime.compaction.policy if config.runtime.compaction.enabled else "(off)",
        },
        "plugins": [{"name": r.name, "version": r.version, "source": r.source, "status": r.status, "reason": r.reason}
                    for r in agent.host.records],
        "registries": registries,
    }


@click.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_command(as_json: bool) -> None:
    """Show versions, the config file in use, every resolved path, the plugins and what each registry holds."""
    data = describe(command_agent("info"))
    if as_json:
        echo_json(data)
        return
    echo("versions:")
    for name, value in data["versions"].items():
        echo(f"  {name:<16} {value}")
    echo(f"config file: {data['config_file'] or '(none: embedded defaults)'}")
    echo("paths:")
    for key, value in data["paths"].items():
        echo(f"  {key:<34} {value}")
    echo("selected:")
    for key, value in data["selected"].items():
        echo(f"  {key:<34} {value if isinstance(value, str) else ', '.join(value) or '-'}")
    echo("plugins:")
    for plugin in data["plugins"]:
        reason = f" ({plugin['reason']})" if plugin["reason"] else ""
        echo(f"  {plugin['name']:<20} {plugin['version'] or '-':<10} {plugin['source']:<10} {plugin['status']}{reason}")
    for kind, entries in sorted(data["registries"].items()):
        echo(f"{kind}:")
        for entry in entries:
            echo(f"  {entry['name']:<28} from {entry['plugin']}" + (f": {entry['description']}" if entry["description"] else ""))


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    cli.add_command(info_command)
