"""The bundled plugin ``history-cli``: ``monoagent history list|show|reset|clear`` and ``restart --clear-sessions``.

Message history is the configured history store (``history.store``); tool history is the
configured tool-history store (``toolHistory.store``, ``agent.tool_history_store()``) unless it is
``none``. Every report keeps the two apart: message-history records (files) and bytes, then
tool-history calls, records and bytes.
Memory (``memory.path``) and run artifacts (``artifacts.dir``) are never touched.
``restart --clear-sessions`` also clears the durable provider sessions of the configured session
backend (``runtime.session.backend``) when it keeps any (a ``ClearableSessionBackend``, such as
``files`` under ``runtime.session.transcriptsDir``) and reports their transcripts and bytes.

``history show --tools`` interleaves the conversation's tool calls and their results, from the
tool history, with its messages (:func:`interleave`).

``history reset CONVERSATION`` is a logical-session reset: the conversation and each of its daily
buckets (``CONVERSATION:<YYYY-MM-DD>``) in both stores. A store that cannot reset a logical session
fails closed before either store is cleared.

A stored record that cannot be read, or that a store refuses, is one line on stderr (``show``
exits 1 with it; ``list`` names it and lists the rest), never a traceback.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import click

from monoagent import (
    SESSION_BACKENDS,
    ClearableSessionBackend,
    ComponentError,
    HistoryStats,
    HistoryStoreError,
    ManagedHistoryStore,
    ToolHistoryClearReport,
    ToolHistoryError,
    ToolHistoryStats,
    ToolRecord,
    command_agent,
    echo,
    echo_json,
    hookimpl,
    logical_conversation_id,
    run_async,
)

if TYPE_CHECKING:
    from monoagent import Agent

NOT_CONFIGURED = "not configured"


def _managed(agent: Agent, method: str, what: str) -> ManagedHistoryStore:
    """The agent's history store, or a refusal naming ``method`` when it is not a ``ManagedHistoryStore``."""
    store = agent.history_store
    if not agent.components.supports(store, ManagedHistoryStore):
        raise click.ClickException(
            f"history store {store.name!r} does not implement {method}() ({what}); nothing was cleared "
            f"(see monoagent._kernel.stores.ManagedHistoryStore)"
        )
    return store


def _tool_counts(value: ToolHistoryStats | ToolHistoryClearReport | None) -> dict[str, int] | None:
    """The calls, records and bytes of a tool-history report, as every command prints them; None when off."""
    return None if value is None else {"calls": value.calls, "records": value.records, "bytes": value.bytes}


async def _tool_stats(agent: Agent) -> dict[str, int] | None:
    """The totals of the Agent's tool-history store (its one store: the Agent owns and closes it); None when off."""
    store = agent.tool_history_store()
    return None if store is None else _tool_counts(await store.stats())


def _message_line(label: str, records: int, bytes_: int) -> str:
    return f"message history {label}: {records} file(s), {bytes_} bytes"


def _tool_line(label: str, tool: dict[str, int] | None) -> str:
    if tool is None:
        return f"tool history {label}: {NOT_CONFIGURED}"
    return f"tool history {label}: {tool['calls']} call(s), {tool['records']} record(s), {tool['bytes']} bytes"


@click.group("history")
def history_group() -> None:
    """List, show, reset and clear conversation history (message and tool history)."""


@history_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_command(as_json: bool) -> None:
    """List stored conversations, newest first, with totals for both history stores."""
    agent = command_agent("history")
    store = agent.history_store

    async def work() -> tuple[list[Any], dict[str, int] | None]:
        return list(await store.conversations()), await _tool_stats(agent)

    try:
        conversations, tool = run_async(work())
    except HistoryStoreError as exc:
        raise click.ClickException(str(exc)) from None
    conversations.sort(key=lambda c: -c.updated_at)
    rows = [
        {"conversation_id": c.conversation_id, "logical_conversation_id": logical_conversation_id(c.conversation_id),
         "messages": c.message_count, "bytes": c.bytes, "updated_at": c.updated_at}
        for c in conversations
    ]
    if as_json:
        echo_json({"message_history": {"conversations": rows, "files": len(rows), "bytes": sum(r["bytes"] for r in rows)},
                    "tool_history": tool})
        return
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["updated_at"]))
        echo(f"{when}  {row['messages']:>4} msgs  {row['bytes']:>9} B  {json.dumps(row['conversation_id'], ensure_ascii=False)}")
    echo(_message_line("total", len(rows), sum(r["bytes"] for r in rows)))
    echo(_tool_line("total", tool))


def interleave(messages: list[Any], records: list[Any]) -> list[tuple[str, Any]]:
    """``("message", m)`` and ``("tool_call", r)`` items in conversation order.

    Message history keeps a turn's user message and its answer, not the steps between, so a
    run's calls go right before the first assistant message stamped at or after the run's last
    call finished (that run's answer or continuity account); calls of a run with no such message
    (a run that committed nothing, or whose messages were compacted away) come last. Calls keep
    their recorded order; a store that keeps no times puts every call last.
    """
    runs: dict[str, list[Any]] = {}
    for record in records:
        runs.setdefault(record.run_id, []).append(record)
    before: dict[int, list[Any]] = {}
    last: list[Any] = []
    for calls in runs.values():
        times = [t for r in calls for t in (r.finished_at, r.started_at) if isinstance(t, (int, float))]
        anchor = max(times) if times else None
        index = None if anchor is None else next(
            (i for i, m in enumerate(messages) if m.role == "assistant" and m.timestamp >= anchor), None)
        (last if index is None else before.setdefault(index, [])).extend(calls)
    items: list[tuple[str, Any]] = []
    for i, message in enumerate(messages):
        items.extend(("tool_call", r) for r in sorted(before.get(i, []), key=lambda r: r.start_seq))
        items.append(("message", message))
    items.extend(("tool_call", r) for r in sorted(last, key=lambda r: r.start_seq))
    return items


async def _conversation_calls(agent: Agent, conversation_id: str) -> list[ToolRecord]:
    """The tool history's calls of one stored conversation ([] when tool history is off)."""
    store = agent.tool_history_store()
    return [] if store is None else list(await store.records(conversation_id=conversation_id))


def _call_json(record: ToolRecord) -> dict[str, Any]:
    import attrs

    return attrs.asdict(record)


def _echo_call(record: ToolRecord) -> None:
    status = record.status or "in flight"
    echo(f"--- tool call {record.tool} [{record.call_id}] run {record.run_id}: {status} ---")
    kept = "not kept" if record.arguments is None else record.arguments
    echo(f"arguments ({record.arguments_bytes} bytes{', cut' if record.arguments_truncated else ''}): {kept}")
    if record.status is not None:
        result = "not kept" if record.result is None else record.result
        echo(f"result ({record.result_bytes} bytes{', cut' if record.result_truncated else ''}): {result}")


@history_group.command("show")
@click.argument("conversation")
@click.option("--tools", is_flag=True, help="Interleave the tool calls and their results (from the tool history).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show_command(conversation: str, tools: bool, as_json: bool) -> None:
    """Print the messages of CONVERSATION (or, without an exact record, of each of its daily buckets)."""
    agent = command_agent("history")
    store = agent.history_store
    unreadable: list[str] = []

    async def load(cid: str) -> list[Any]:
        return list(await store.load(cid, on_warning=lambda code, message: unreadable.append(message)))

    async def work() -> list[tuple[str, list[Any]]]:
        exact = await load(conversation)
        if exact or unreadable:
            return [(conversation, exact)]
        buckets = sorted(c.conversation_id for c in await store.conversations()
                         if logical_conversation_id(c.conversation_id) == conversation and c.conversation_id != conversation)
        return [(b, await load(b)) for b in buckets]

    try:
        found = run_async(work())
    except HistoryStoreError as exc:
        raise click.ClickException(str(exc)) from None
    if unreadable and not any(messages for _, messages in found):
        raise click.ClickException(unreadable[0])
    for message in unreadable:
        echo(f"monoagent: warning: {message}", err=True)
    async def tool_calls() -> dict[str, list[ToolRecord]]:
        return {cid: await _conversation_calls(agent, cid) if tools else [] for cid, _ in found}

    try:
        calls = run_async(tool_calls())
    except ToolHistoryError as exc:
        raise click.ClickException(f"tool history cannot be read: {exc} (run without --tools for the messages)") from None
    if as_json:
        shown = [{"conversation_id": cid, "messages": agent.unstructure(messages)} for cid, messages in found]
        for entry, (cid, messages) in zip(shown, found, strict=True):
            if tools:
                entry["items"] = [{"message": agent.unstructure(item)} if kind == "message" else {"tool_call": _call_json(item)}
                                  for kind, item in interleave(messages, calls[cid])]
        echo_json(shown)
        return
    if not found:
        raise click.ClickException(f"no history for conversation {conversation!r} (see `monoagent history list`)")
    for cid, messages in found:
        counted = f", {len(calls[cid])} tool calls" if tools else ""
        echo(f"=== {cid} ({len(messages)} messages{counted}) ===")
        for kind, item in interleave(messages, calls[cid]):
            if kind == "tool_call":
                _echo_call(item)
                continue
            who = item.role + (f" ({item.name})" if item.name else "")
            echo(f"--- {who} ---")
            echo(item.content)


@history_group.command("reset")
@click.argument("conversation")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def reset_command(conversation: str, as_json: bool) -> None:
    """Clear CONVERSATION's message and tool history: across all its daily buckets under daily rollover, else exactly CONVERSATION."""
    agent = command_agent("history")
    if agent.config.runtime.session.rollover == "daily":
        logical = logical_conversation_id(conversation)
        _managed(agent, "reset_logical", "logical-session reset")
    else:
        logical = conversation
    _check_tool_history(agent)
    try:
        report, cleared = run_async(agent.reset_conversation(logical))
    except (HistoryStoreError, ToolHistoryError, OSError) as exc:
        raise click.ClickException(f"history reset of {logical!r} failed: {exc}") from None
    tool = _tool_counts(cleared)
    if as_json:
        echo_json({"logical_conversation_id": logical,
                    "message_history": {"conversations": list(report.conversation_ids), "files": report.records,
                                        "messages": report.messages, "bytes": report.bytes},
                    "tool_history": tool})
        return
    echo(f"reset {logical!r}: {', '.join(repr(c) for c in report.conversation_ids) or 'no stored conversation'}")
    echo(_message_line("removed", report.records, report.bytes) + f" ({report.messages} messages)")
    echo(_tool_line("removed", tool))


def _check_tool_history(agent: Agent) -> None:
    """Fail closed, before either store is cleared, when the tool-history store cannot be read."""
    try:
        run_async(_tool_stats(agent))
    except ToolHistoryError as exc:
        raise click.ClickException(
            f"tool history cannot be read ({exc}); nothing was cleared. To discard a corrupt sidecar, stop every "
            f"agent using {agent.config.history_dir} and delete the file named above"
        ) from None


def _clear_everything(agent: Agent) -> tuple[HistoryStats, dict[str, int] | None]:
    store = _managed(agent, "clear_all", "clearing every conversation")
    _check_tool_history(agent)

    async def work() -> tuple[HistoryStats, dict[str, int] | None]:
        tool_history = agent.tool_history_store()
        cleared = await store.clear_all(), _tool_counts(await tool_history.clear_all() if tool_history is not None else None)
        await agent.after_history_reset(None)
        return cleared

    return run_async(work())


def _clear_report(removed: HistoryStats, tool: dict[str, int] | None, as_json: bool, extra: dict[str, Any] | None = None) -> None:
    if as_json:
        echo_json({"message_history": {"files": removed.records, "bytes": removed.bytes, "stages": removed.stages,
                                        "stage_bytes": removed.stage_bytes}, "tool_history": tool, **(extra or {})})
        return
    echo(_message_line("removed", removed.records, removed.bytes))
    echo(_tool_line("removed", tool))
    echo("memory and run artifacts were not touched")


@history_group.command("clear")
@click.option("--all", "clear_all", is_flag=True, help="Clear every conversation (required).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def clear_command(clear_all: bool, yes: bool, as_json: bool) -> None:
    """Clear the message and tool history of every conversation (memory and run artifacts stay)."""
    if not clear_all:
        raise click.UsageError("history clear needs --all (to clear one conversation, use `monoagent history reset CONVERSATION`)")
    agent = command_agent("history")
    if not yes:
        click.confirm(f"Clear the message and tool history of every conversation in {agent.config.history_dir}?", abort=True)
    try:
        removed, tool = _clear_everything(agent)
    except (HistoryStoreError, OSError) as exc:
        raise click.ClickException(f"history clear failed: {exc}") from None
    _clear_report(removed, tool, as_json)


@click.command("restart")
@click.option("--clear-sessions", is_flag=True,
              help="Also clear message history, tool history and the durable provider sessions (runtime.session.backend).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def restart_command(clear_sessions: bool, yes: bool, as_json: bool) -> None:
    """Restart with a fresh start: --clear-sessions clears both history stores (memory and run artifacts stay)."""
    if not clear_sessions:
        echo("monoagent runs in the foreground: nothing to restart. Message and tool history are kept "
                   "(pass --clear-sessions to clear them).")
        return
    agent = command_agent("history")
    try:
        backend = _durable_sessions(agent)
    except ComponentError as exc:
        raise click.ClickException(f"restart --clear-sessions cleared nothing: {exc}") from None
    if not yes:
        click.confirm(f"Clear every conversation's message and tool history in {agent.config.history_dir}"
                      f"{' and the provider sessions' if backend is not None else ''}?", abort=True)
    try:
        removed, tool = _clear_everything(agent)
        sessions = _clear_sessions(backend)
    except (HistoryStoreError, OSError) as exc:  # a transcript directory's TranscriptStoreError is a HistoryStoreError
        raise click.ClickException(str(exc)) from None
    _clear_report(removed, tool, as_json, {"provider_sessions": sessions, "acp_session_authorizations": NOT_CONFIGURED})
    if not as_json:
        echo(f"provider sessions removed: {NOT_CONFIGURED}" if sessions is None else
             f"provider sessions removed: {sessions['transcripts']} transcript(s), {sessions['bytes']} bytes")
        echo(f"ACP session authorizations: {NOT_CONFIGURED}")


def _durable_sessions(agent: Agent) -> ClearableSessionBackend | None:
    """The configured session backend when it keeps sessions beyond the process (it can clear them), else None."""
    backend = agent.components.new(SESSION_BACKENDS, agent.config.runtime.session.backend)
    return backend if agent.components.supports(backend, ClearableSessionBackend) else None


def _clear_sessions(backend: ClearableSessionBackend | None) -> dict[str, int] | None:
    """Clear every durable provider session of ``backend``; None when the backend keeps none."""
    if backend is None:
        return None

    async def work() -> dict[str, int]:
        try:
            report = await backend.clear_all()
        finally:
            await backend.close()
        return {"transcripts": report.transcripts, "bytes": report.bytes}

    return run_async(work())


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    cli.add_command(history_group)
    cli.add_command(restart_command)
