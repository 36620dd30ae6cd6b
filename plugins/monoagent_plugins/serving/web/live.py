"""What the web console keeps in memory while it serves: each thread's live events and its active turn.

Every thread has a :class:`ThreadLive`: the increasing event ids of its ``events`` stream (they
start from the process's start time in microseconds, so the ids of a restarted server are above
every id an earlier one sent), the subscribers (open ``GET .../events`` streams, each an
``asyncio.Queue``) and the :class:`ActiveTurn` while one runs: its text so far and its tool lines,
which a (re)connecting browser's ``snapshot`` carries.

Tool lines (:func:`tool_line`) come from the run's ``tool_call`` and ``tool_result`` events. The
tool-history bookkeeping on them (``persistence``: ``persisted``, ``deferred``) gives no line; a
definitive ``failed`` is one plain line of its own with its error (:func:`record_failure_line`), and
the tool's own line and terminal status are shown as usual.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import attrs

from monoagent import one_line_cut, tool_argument_summary

NAME_CHARS = 64
REASON_CHARS = 160
EVENT_BASE = int(time.time() * 1_000_000)
"""Where this process's event ids start: above any id an earlier process sent (a clock-derived base)."""


def tool_line(event_type: str, data: dict[str, Any], opened: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tool line a ``tool_call`` (``running``) or ``tool_result`` event makes (``opened``: the call's line so far)."""
    call_id = str(data.get("id", ""))
    name = one_line_cut(str(data.get("name", "?")), NAME_CHARS)
    call = opened["line"].split(" → ", 1)[0] if opened else f"{name}({tool_argument_summary(data.get('arguments'))})"
    if event_type == "tool_call":
        status, line = "running", call
    else:
        status = str(data.get("status", "error"))
        outcome = "ok" if status == "success" else status
        if status != "success" and data.get("error"):
            outcome += f": {one_line_cut(str(data['error']), REASON_CHARS)}"
        line = f"{call} → {outcome}"
    return {"id": call_id, "name": name, "status": status, "line": line}


def record_failure_line(event_type: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """The one plain line of a definitive tool-history failure (``persistence: "failed"``), with its error; None for
    anything else (``persisted`` and ``deferred`` are bookkeeping: no line). Its id is the call's id and the phase."""
    if data.get("persistence") != "failed":
        return None
    name = one_line_cut(str(data.get("name", "?")), NAME_CHARS)
    phase = "call" if event_type == "tool_call" else "result"
    code = one_line_cut(str(data.get("persistence_error") or ""), REASON_CHARS)
    line = f"{name}: the {phase} was not recorded in tool history" + (f" ({code})" if code else "")
    return {"id": f"{data.get('id', '')}/{phase}-record", "name": name, "status": "failed", "line": line}


@attrs.define
class ActiveTurn:
    """The turn a thread runs now: its submission, run, text so far and tool lines."""

    submission_id: str
    run_id: str
    handle: Any = None
    text: str = ""
    tools: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    cancel_reason: str | None = None
    outcome: Any = None
    """The future of the run's :class:`~monoagent.TurnResult` (``ChannelRuns.finish``)."""
    admitted: asyncio.Event = attrs.field(factory=asyncio.Event)
    started_at: float = attrs.field(factory=time.time)

    def view(self) -> dict[str, Any]:
        return {"submission_id": self.submission_id, "run_id": self.run_id, "text": self.text,
                "tools": list(self.tools.values()), "started_at": self.started_at}


class ThreadLive:
    """One thread's live state in this process (see the module docstring)."""

    def __init__(self) -> None:
        self.last_id = EVENT_BASE
        self.active: ActiveTurn | None = None
        self.worker: asyncio.Task[None] | None = None
        self.subscribers: set[asyncio.Queue[tuple[int, str, Any] | None]] = set()

    def publish(self, kind: str, data: Any) -> int:
        """Give ``data`` the thread's next event id and hand it to every subscriber; returns the id."""
        self.last_id += 1
        for queue in self.subscribers:
            queue.put_nowait((self.last_id, kind, data))
        return self.last_id

    def subscribe(self) -> asyncio.Queue[tuple[int, str, Any] | None]:
        queue: asyncio.Queue[tuple[int, str, Any] | None] = asyncio.Queue()
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[tuple[int, str, Any] | None]) -> None:
        self.subscribers.discard(queue)

    def close(self) -> None:
        """End every subscriber's stream (the server stops)."""
        for queue in self.subscribers:
            queue.put_nowait(None)
