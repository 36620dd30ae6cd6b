"""What ``monoagent logs`` shows: run summaries and one run's timeline, from the run event files.

The files are the ``artifacts`` plugin's (``<artifacts.dir>/runs/<runId>.jsonl``), read with the
RunHistory tool's reader (:class:`monoagent_plugins.observability.run_history.RunFiles`) and its trust
rules: a file that is not provably the writer's is skipped, a damaged line is left out, and the
names of both are reported in :attr:`RunLog.skipped` for the command's warning. Nothing is
stored for the logs: every figure is derived from the events the harness already wrote.

Everything a file holds is untrusted text (model output, error text, a planted value): the
summaries keep it as data, and the timeline cuts every value to one short line
(:func:`monoagent._boundary.fences.one_line`); the command prints both through the terminal
boundary, which strips controls and redacts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from monoagent import logical_conversation_id, one_line
from monoagent_plugins.observability.artifacts import REFUSED, RUN_TEXT, TERMINAL
from monoagent_plugins.observability.run_history import MAX_FILES, MAX_SCAN_BYTES, RunFiles, Scan

_SETTLED = {"run_completed": "completed", "run_failed": "failed", "run_cancelled": "cancelled"}
VALUE_CHARS = 120
"""Characters of one value (an argument summary, an error) shown on a timeline line."""
ANSWER_LINES = 3
"""Lines of the answer the timeline shows."""


@attrs.frozen
class RunSummary:
    """One run as ``monoagent logs`` lists it (strings as the file holds them)."""

    run_id: str
    conversation_id: str
    status: str
    model: str
    started_at: float
    duration_s: float | None
    input_tokens: int
    output_tokens: int
    tool_calls: int


@attrs.define
class RunLog:
    """The runs a listing found, newest first, with what the reader skipped."""

    runs: list[tuple[RunSummary, list[dict[str, Any]]]] = attrs.Factory(list)
    skipped: list[str] = attrs.Factory(list)
    damaged_lines: int = 0
    limited: bool = False


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _field(data: dict[str, Any], key: str, kind: type[Any]) -> Any:
    """``data[key]`` when it is a ``kind``, else an empty ``kind`` (a file's values are untrusted)."""
    value = data.get(key)
    return value if isinstance(value, kind) else kind()


def summarise(run_id: str, conversation: str, events: list[dict[str, Any]]) -> RunSummary:
    """A run's summary from its events: the terminal event's status and usage, else the steps' usage."""
    started = next((e for e in events if e["type"] == "run_started"), events[0] if events else None)
    terminal = next((e for e in events if e["type"] in TERMINAL or e["type"] == REFUSED), None)
    if terminal is not None:
        status = _SETTLED.get(terminal["type"], "refused")
    else:  # a channel's own events (a skipped cron tick) have a file of their own and no run_started
        status = "unsettled" if any(e["type"] == "run_started" for e in events) else "channel_event"
    usage = terminal["data"].get("usage") if terminal is not None else None
    if not isinstance(usage, dict):
        steps = [e["data"].get("usage") for e in events if e["type"] == "provider_response"]
        usage = {key: sum(_int(u.get(key)) for u in steps if isinstance(u, dict)) for key in ("input_tokens", "output_tokens")}
    model = (terminal or {}).get("data", {}).get("model") or (started or {}).get("data", {}).get("model") or ""
    began = started["at"] if started is not None else 0.0
    return RunSummary(
        run_id=run_id,
        conversation_id=conversation,
        status=status,
        model=str(model),
        started_at=began,
        duration_s=None if terminal is None else round(terminal["at"] - began, 6),
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        tool_calls=sum(1 for e in events if e["type"] == "tool_call"),
    )


def _in_conversation(conversation: str, wanted: str | None) -> bool:
    return wanted is None or conversation == wanted or logical_conversation_id(conversation) == wanted


def read_runs(artifacts_dir: Path, *, limit: int, conversation: str | None = None, status: str | None = None) -> RunLog:
    """The newest ``limit`` runs matching the filters (a conversation or its logical session, a status).

    Bounded like the RunHistory tool: at most :data:`MAX_FILES` files and :data:`MAX_SCAN_BYTES`
    read (``limited`` says a bound stopped the listing). Entries that are not run files
    (``notes.txt``, a directory) are named in ``skipped`` as well: nothing but the writer puts
    files there.
    """
    files, scan, log = RunFiles(artifacts_dir), Scan(), RunLog()
    for index, name in enumerate(files.names()):
        if index == MAX_FILES or scan.read_bytes >= MAX_SCAN_BYTES:
            log.limited = True
            break
        found = files.read_events(name, scan)
        if found is None:
            if name not in scan.skipped_names:
                scan.skipped_names.append(name)
            continue
        summary = summarise(*found)
        if _in_conversation(summary.conversation_id, conversation) and status in (None, summary.status):
            log.runs.append((summary, found[2]))
            if len(log.runs) == limit:
                break
    log.runs.sort(key=lambda run: -run[0].started_at)
    log.skipped, log.damaged_lines = list(dict.fromkeys(scan.skipped_names)), scan.damaged_lines
    return log


def read_run(artifacts_dir: Path, run_id: str) -> tuple[RunLog, RunSummary | None, list[dict[str, Any]]]:
    """One run's summary and events (None when there is no readable file for ``run_id``)."""
    files, scan, log = RunFiles(artifacts_dir), Scan(), RunLog()
    found = files.read_events(f"{run_id}.jsonl", scan) if files.exists() else None
    log.skipped, log.damaged_lines = list(dict.fromkeys(scan.skipped_names)), scan.damaged_lines
    if found is None:
        return log, None, []
    return log, summarise(*found), found[2]


# --------------------------------------------------------------------------- the timeline


def short(value: Any, limit: int = VALUE_CHARS) -> str:
    """Any value on one line of at most ``limit`` characters (JSON-ish for containers)."""
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    return one_line(text, limit)


def _pairs(data: dict[str, Any], *keys: str) -> str:
    """``key value, ...`` for the keys ``data`` has; a message or an error gets a longer cut than a name."""
    return ", ".join(f"{key} {short(data[key], VALUE_CHARS if key in ('error', 'message') else 40)}"
                     for key in keys if data.get(key) not in (None, "", [], {}))


def _manifest(data: dict[str, Any]) -> list[str]:
    manifest = _field(data, "manifest", dict)
    sections = [s for s in _field(manifest, "sections", list) if isinstance(s, dict)]
    lines = [f"prompt: {len(sections)} section(s), history {short(manifest.get('history_messages', 0), 12)} message(s), "
             f"user message {short(manifest.get('user_message_bytes', 0), 12)} bytes"]
    lines += [f"    section {short(s.get('id', '?'), 40)} ({short(s.get('part', ''), 12)}): {short(s.get('bytes', 0), 12)} bytes"
              for s in sections]
    return lines


def _usage(data: dict[str, Any]) -> str:
    usage = _field(data, "usage", dict)
    return f"{_int(usage.get('input_tokens'))} in / {_int(usage.get('output_tokens'))} out tokens"


def _answer(data: dict[str, Any]) -> list[str]:
    lines = _field(data, "text", str).splitlines() or [""]
    shown = [f"    | {one_line(line, VALUE_CHARS)}" for line in lines[:ANSWER_LINES]]
    more = f", {len(lines) - ANSWER_LINES} more line(s)" if len(lines) > ANSWER_LINES else ""
    cut = ", kept text cut" if data.get("truncated") is True else ""
    return [f"answer: {_int(data.get('bytes'))} bytes{more}{cut}", *shown]


def _tool_call(data: dict[str, Any], arguments: dict[str, str]) -> str:
    call = str(data.get("id", ""))
    shown = arguments.get(call)
    return f"tool call {short(data.get('name', '?'), 60)} [{short(call, 40)}]" + (f" {shown}" if shown is not None else "")


def _describe(event: dict[str, Any], arguments: dict[str, str]) -> list[str]:
    kind, data = event["type"], event["data"]
    described: dict[str, Callable[[], list[str]]] = {
        "run_started": lambda: [f"run started: {_pairs(data, 'model', 'channel', 'delivery')}"],
        "prompt_manifest": lambda: _manifest(data),
        "memory_recalled": lambda: [f"memory recalled: {len(_field(data, 'hits', list))} hit(s), {_int(data.get('bytes'))} bytes"],
        "context_compaction_applied": lambda: [
            f"compaction {'applied' if data.get('applied') is True else 'not needed'}: "
            f"{_int(data.get('tokens_before'))} -> {_int(data.get('tokens_after'))} tokens of {_int(data.get('budget'))}"
            + (f" ({short(data.get('trigger'), 40)})" if data.get("trigger") else "")
        ],
        "provider_request": lambda: [f"provider request: {_pairs(data, 'model', 'step', 'attempt', 'messages', 'tools')}"],
        "provider_response": lambda: [f"provider response: {_pairs(data, 'stop_reason', 'tool_calls')}, {_usage(data)}"],
        "provider_retry": lambda: [f"retry: {_pairs(data, 'model', 'attempt', 'retry', 'delay_ms', 'code', 'error')}"],
        "provider_fallback": lambda: [f"fallback: {_pairs(data, 'from', 'to', 'reason')}"],
        "tool_call": lambda: [_tool_call(data, arguments)],
        "tool_result": lambda: [f"tool result {short(data.get('name', '?'), 60)} [{short(data.get('id', ''), 40)}]: "
                                f"{short(data.get('status', '?'), 20)}, {_int(data.get('bytes'))} bytes"],
        "runtime_warning": lambda: [f"warning: {_pairs(data, 'code', 'message')}"],
        "run_committed": lambda: [f"committed: {_pairs(data, 'messages', 'bytes')}"],
        RUN_TEXT: lambda: _answer(data),
        "run_completed": lambda: [f"completed: {_pairs(data, 'model', 'steps')}, {_usage(data)}"],
        "run_failed": lambda: [f"failed: {_pairs(data, 'settlement', 'error')}"],
        "run_cancelled": lambda: [f"cancelled: {_pairs(data, 'reason')}"],
        REFUSED: lambda: [f"refused at admission: {short(data, VALUE_CHARS)}"],
    }
    render = described.get(kind)
    return render() if render is not None else [f"{one_line(kind, 40)}: {short(data, VALUE_CHARS)}"]


def timeline(events: Iterable[dict[str, Any]], arguments: dict[str, str]) -> list[str]:
    """One run's events as readable lines, each with its time from the run's first event.

    ``arguments`` maps a tool call's id to its (redacted, shortened) arguments from the tool
    history; a call without an entry is shown without them.
    """
    events = list(events)
    start = events[0]["at"] if events else 0.0
    lines = []
    for event in events:
        first, *rest = _describe(event, arguments)
        lines.append(f"+{(event['at'] - start) * 1000:9.1f} ms  {first}")
        lines.extend(f"{'':14}{line}" for line in rest)
    return lines
