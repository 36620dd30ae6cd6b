"""The bundled plugin ``logs-cli``: ``monoagent logs`` lists recent runs and shows one run's timeline.

It reads what the ``artifacts`` plugin already writes, one event file per run under
``<artifacts.dir>/runs/`` (see :mod:`monoagent_plugins.observability.run_log`), and for a run's tool calls
their retained arguments from the configured tool-history store (redacted when they were
recorded). Nothing is stored for the logs. A file that is not the writer's, or a damaged line,
is skipped with one warning on stderr naming the files; the rest is shown.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from monoagent import ToolHistoryError, command_agent, echo, echo_json, hookimpl, run_async

if TYPE_CHECKING:
    from monoagent import Agent
    from monoagent_plugins.observability.run_log import RunSummary

LIMIT_DEFAULT = 20
LIMIT_MAX = 1000
STATUSES = ("completed", "failed", "cancelled", "refused", "unsettled", "channel_event")
"""What ``--status`` accepts: the three settlements, ``refused`` at admission, ``unsettled`` (started, no
terminal event), ``channel_event`` (a channel's own event outside any run, such as a skipped cron tick)."""


def _warn_skipped(log: Any, directory: Any) -> None:
    if log.skipped:
        shown = ", ".join(repr(name) for name in log.skipped[:10]) + (" ..." if len(log.skipped) > 10 else "")
        echo(f"monoagent: warning: in {directory}, skipped what is not a readable run file of this user's or "
             f"held damaged lines ({log.damaged_lines} line(s) left out): {shown}", err=True)
    if log.limited:
        echo("monoagent: warning: the listing stopped at the scan bound; older runs are not shown", err=True)


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _summary_row(summary: RunSummary) -> dict[str, Any]:
    import attrs

    return attrs.asdict(summary)


def _tool_arguments(agent: Agent, conversation_id: str, run_id: str) -> dict[str, str]:
    """Each tool call's retained arguments, shortened; {} without tool history (a warning when it cannot be read)."""
    from monoagent_plugins.observability.run_log import short

    store = agent.tool_history_store()
    if store is None:
        return {}
    try:
        records = run_async(store.records(conversation_id=conversation_id))
    except ToolHistoryError as exc:
        echo(f"monoagent: warning: tool arguments not shown, the tool history cannot be read: {exc}", err=True)
        return {}
    shown = {}
    for record in records:
        if record.run_id != run_id:
            continue
        if record.arguments is None:
            shown[record.call_id] = f"(arguments not kept, {record.arguments_bytes} bytes)"
        else:
            cut = f" ({record.arguments_bytes} bytes, cut)" if record.arguments_truncated else ""
            shown[record.call_id] = short(record.arguments) + cut
    return shown


def _artifacts_dir(agent: Agent) -> Path:
    """``artifacts.dir``, where the ``artifacts`` plugin writes the run files this command reads."""
    try:
        return Path(agent.config.path("artifacts.dir"))
    except KeyError:
        raise click.ClickException(
            "no run files to read: the artifacts plugin, which writes them (and declares artifacts.dir), is not active"
        ) from None


def _list(agent: Agent, limit: int, conversation: str | None, status: str | None, as_json: bool) -> None:
    from monoagent_plugins.observability.run_log import read_runs

    artifacts_dir = _artifacts_dir(agent)
    log = read_runs(artifacts_dir, limit=limit, conversation=conversation, status=status)
    _warn_skipped(log, artifacts_dir / "runs")
    if as_json:
        echo_json([_summary_row(summary) for summary, _ in log.runs])
        return
    if not log.runs:
        echo(f"no runs recorded in {artifacts_dir / 'runs'}" + (" match the filters" if conversation or status else ""))
        return
    for s, _ in log.runs:
        took = "-" if s.duration_s is None else f"{s.duration_s:.2f} s"
        echo(f"{_when(s.started_at)}  {s.run_id}  {s.status:<9}  {s.conversation_id!r}  {s.model or '-'}  "
             f"{s.input_tokens}/{s.output_tokens} tok  {s.tool_calls} tool(s)  {took}")


def _show(agent: Agent, run_id: str, as_json: bool) -> None:
    from monoagent_plugins.observability.run_log import read_run, timeline

    artifacts_dir = _artifacts_dir(agent)
    log, summary, events = read_run(artifacts_dir, run_id)
    _warn_skipped(log, artifacts_dir / "runs")
    if summary is None:
        raise click.ClickException(
            f"no readable run {run_id!r} in {artifacts_dir / 'runs'} (a run id is 22 hex digits; "
            f"see `monoagent logs`)"
        )
    arguments = _tool_arguments(agent, summary.conversation_id, run_id)
    if as_json:
        start = events[0]["at"]
        shown = [{**e, "offset_ms": round((e["at"] - start) * 1000, 3)} for e in events]
        for event in shown:
            if event["type"] == "tool_call" and str(event["data"].get("id")) in arguments:
                event["data"] = {**event["data"], "arguments": arguments[str(event["data"]["id"])]}
        echo_json({"run": _summary_row(summary), "events": shown})
        return
    took = "not settled" if summary.duration_s is None else f"{summary.duration_s:.3f} s"
    echo(f"run {summary.run_id}  {summary.status}  {summary.conversation_id!r}  {summary.model or '-'}  "
         f"started {_when(summary.started_at)}  {took}  {summary.input_tokens}/{summary.output_tokens} tokens")
    for line in timeline(events, arguments):
        echo(line)


@click.command("logs")
@click.argument("run_id", required=False)
@click.option("--limit", type=click.IntRange(1, LIMIT_MAX), default=LIMIT_DEFAULT, show_default=True, help="Runs to list.")
@click.option("-c", "--conversation", default=None, help="Only runs of this conversation (or of every daily bucket of it).")
@click.option("--status", type=click.Choice(STATUSES), default=None,
              help="Only runs that ended so (unsettled: no terminal event was written; channel_event: a channel's "
                   "own event, such as a skipped cron tick).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def logs_command(run_id: str | None, limit: int, conversation: str | None, status: str | None, as_json: bool) -> None:
    """List recent runs, newest first, or show RUN_ID's events as a timeline (from the run event files)."""
    from monoagent_plugins.observability.run_history import RunHistoryUnavailable

    agent = command_agent("logs")
    try:
        if run_id is None:
            _list(agent, limit, conversation, status, as_json)
        else:
            _show(agent, run_id, as_json)
    except (RunHistoryUnavailable, OSError) as exc:
        raise click.ClickException(f"the run files cannot be read: {exc}") from None


@hookimpl(trylast=True)
def register_commands(cli: click.Group) -> None:
    cli.add_command(logs_command)
