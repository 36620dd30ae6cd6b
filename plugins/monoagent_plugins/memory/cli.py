"""The bundled plugin ``memory-cli``: ``monoagent memory search|add|list|forget|stats``.

Every command takes ``--tier NAME`` and ``--json``. Without ``--tier``, ``search``, ``list``
and ``stats`` cover every tier in ``memory.tiers`` and ``add`` and ``forget`` use the first one;
``--tier`` may also name a registered tier that is not configured (its data is then read or
written all the same, under ``memory.path``). Commands talk to tiers through the
:class:`~monoagent._kernel.interfaces.MemoryTier` protocol only; ``list`` and ``stats`` need a tier that
also implements :class:`~monoagent._kernel.interfaces.BrowsableMemoryTier`. A tier that fails (a damaged
or locked file, a broken embedder, a factory that raises) is one line on stderr and exit status
1, after whatever the other tiers answered; never a traceback unless ``--debug`` asks for it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from monoagent import (
    MEMORY_TIERS,
    AgentComponents,
    AsciiIntRange,
    BrowsableMemoryTier,
    ClosableMemoryTier,
    ComponentError,
    ConfigError,
    MemoryTier,
    command_agent,
    echo,
    echo_json,
    hookimpl,
    read_stdin,
    run_async,
)
from monoagent_plugins.memory.database import MemoryTierError, single_line

if TYPE_CHECKING:
    from monoagent import Agent

PREVIEW_CHARS = 160


def _preview(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def _echo_json(agent: Agent, value: Any) -> None:
    echo_json(agent.unstructure(value))


async def _with_tiers(
    agent: Agent, tier: str | None, every: bool, work: Callable[[MemoryTier], Awaitable[Any]]
) -> tuple[dict[str, Any], list[str]]:
    """``work`` on each selected tier: the results by tier, in order, and one line per tier that failed.

    A tier that cannot be built or fails its work does not stop the others; the command prints
    what the others found and then the failures (:func:`_finish`, exit status 1). ``--debug``
    shows the traceback instead. Tiers opened only for this command are closed.
    """
    components: AgentComponents = agent.components
    configured = list(agent.config.memory.tiers)
    if tier is not None:
        names = [tier]
    elif not configured:
        raise click.UsageError(
            'no memory tier is configured: set memory.tiers (for example memory.tiers = ["lite"]) or pass --tier NAME'
        )
    else:
        names = configured if every else configured[:1]
    results: dict[str, Any] = {}
    failures: list[str] = []
    for name in names:
        made: MemoryTier | None = None
        try:
            if name in configured:
                selected = agent.memory_tier(name)
            else:
                selected = made = agent.components.new(MEMORY_TIERS, name, options={})
            results[name] = await work(selected)
        except (click.ClickException, ComponentError, ConfigError):
            raise  # the command or the configuration is wrong, not the tier
        except Exception as exc:  # one line per failing tier; the others still answer
            if click.get_current_context().find_root().obj.debug:
                raise
            failures.append(str(exc) if isinstance(exc, MemoryTierError) else single_line(f"memory tier {name!r} failed: {type(exc).__name__}: {exc}"))
        finally:
            if made is not None and components.supports(made, ClosableMemoryTier):
                value = made.close()
                if inspect.isawaitable(value):
                    await value
    return results, failures


def _finish(failures: list[str]) -> None:
    """Print the failures of the command's tiers, one line each, and exit 1 if there was any."""
    for line in failures[:-1]:
        echo(f"monoagent: error: {line}", err=True)
    if failures:
        raise click.ClickException(failures[-1])


def _browsable(agent: Agent, tier: MemoryTier, what: str) -> BrowsableMemoryTier:
    components: AgentComponents = agent.components
    if not components.supports(tier, BrowsableMemoryTier):
        raise click.ClickException(f"memory tier {tier.name!r} cannot {what} (it does not implement BrowsableMemoryTier: list, stats)")
    return tier


_tier_option = click.option("--tier", default=None, metavar="NAME", help="One memory tier (default: the configured ones).")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("memory")
def memory_group() -> None:
    """Search, add, list, forget and count long-term memories."""


@memory_group.command("search")
@click.argument("query")
@click.option("-n", "--limit", default=5, show_default=True, type=AsciiIntRange(1, 100), help="Hits per tier.")
@_tier_option
@_json_option
def search_command(query: str, limit: int, tier: str | None, as_json: bool) -> None:
    """Search memory for QUERY (best first, per tier)."""
    agent = command_agent("memory")

    async def work(t: MemoryTier) -> list[Any]:
        return list(await t.search(query, limit=limit))

    found, failures = run_async(_with_tiers(agent, tier, True, work))
    hits = sorted((hit for hits in found.values() for hit in hits), key=lambda h: -h.score)
    if as_json:
        _echo_json(agent, hits)
    elif found and not hits:
        echo("no memory matched")
    else:
        for hit in hits:
            echo(f"{hit.source:<8} {hit.id or '-':>6}  {hit.score:.2f}  {_preview(hit.text)}")
    _finish(failures)


@memory_group.command("add")
@click.argument("text")
@_tier_option
@_json_option
def add_command(text: str, tier: str | None, as_json: bool) -> None:
    """Store TEXT as a memory ('-' reads stdin)."""
    agent = command_agent("memory")
    if text == "-":
        text = read_stdin()
    if not text.strip():
        raise click.BadParameter("the memory text is empty", param_hint="TEXT")

    async def work(t: MemoryTier) -> str:
        return await t.add(text, metadata={"source": "cli", "added_at": time.time()})

    added, failures = run_async(_with_tiers(agent, tier, False, work))
    _finish(failures)
    [(name, entry_id)] = added.items()
    if as_json:
        _echo_json(agent, {"tier": name, "id": entry_id})
    else:
        echo(f"added {name} {entry_id}")


@memory_group.command("list")
@click.option("-n", "--limit", default=20, show_default=True, type=AsciiIntRange(1, 10_000), help="Entries per tier.")
@click.option("--offset", default=0, show_default=True, type=AsciiIntRange(0), help="Entries to skip, per tier.")
@_tier_option
@_json_option
def list_command(limit: int, offset: int, tier: str | None, as_json: bool) -> None:
    """List stored memories, newest first."""
    agent = command_agent("memory")

    async def work(t: MemoryTier) -> list[Any]:
        return list(await _browsable(agent, t, "list").list(limit=limit, offset=offset))

    listed, failures = run_async(_with_tiers(agent, tier, True, work))
    if as_json:
        _echo_json(agent, [{"tier": name, **agent.unstructure(r)} for name, records in listed.items() for r in records])
    else:
        for name, records in listed.items():
            if not records:
                echo(f"{name:<8} (empty)")
            for record in records:
                stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.updated_at))
                echo(f"{name:<8} {record.id:>6}  {stamp}  {_preview(record.text)}")
    _finish(failures)


@memory_group.command("forget")
@click.argument("memory_id", metavar="ID")
@_tier_option
@_json_option
def forget_command(memory_id: str, tier: str | None, as_json: bool) -> None:
    """Remove the memory ID (from --tier, default the first configured tier)."""
    agent = command_agent("memory")

    async def work(t: MemoryTier) -> bool:
        return await t.forget(memory_id)

    done, failures = run_async(_with_tiers(agent, tier, False, work))
    _finish(failures)
    [(name, forgotten)] = done.items()
    outcome = {"tier": name, "id": memory_id, "forgotten": forgotten}
    if as_json:
        _echo_json(agent, outcome)
    elif outcome["forgotten"]:
        echo(f"forgot {outcome['tier']} {memory_id}")
    if not outcome["forgotten"]:
        raise click.ClickException(f"memory tier {outcome['tier']!r} has no entry {memory_id!r} (see `monoagent memory list`)")


@memory_group.command("stats")
@_tier_option
@_json_option
def stats_command(tier: str | None, as_json: bool) -> None:
    """Show how many memories each tier holds and where."""
    agent = command_agent("memory")

    async def work(t: MemoryTier) -> Any:
        return await _browsable(agent, t, "stats").stats()

    found, failures = run_async(_with_tiers(agent, tier, True, work))
    if as_json:
        _echo_json(agent, list(found.values()))
    else:
        for item in found.values():
            echo(f"{item.tier}: {item.entries} entries, {item.bytes} bytes of text, at {item.location or '-'}")
            for key, value in item.details.items():
                if value is not None:
                    echo(f"  {key}: {value}")
    _finish(failures)


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    cli.add_command(memory_group)
