"""Tool activity as compact lines beside a streamed answer (``monoagent run`` and ``chat``).

One line per tool call, opened when the call starts (its ``tool_call`` event) and finished when
it ends (``tool_result``)::

    -> get_weather(city="Paris", days=3) ok (12 ms, 159 bytes)
    -> read_file(path="notes/a very long file name th…") error: Tool 'read_file' failed: FileNo… (1 ms, 61 bytes)

The name and the arguments are the model's and the error a tool's: hostile text. The summary is
built from the event's redacted ``arguments`` preview (see
:func:`monoagent._pipeline.tool_loop.arguments_preview`), bounded by
:func:`~monoagent._kernel.tool_summary.tool_argument_summary`, and the whole line passes
:func:`~monoagent._cli.terminal.terminal_text` (controls stripped, redacted) before it is
written. Lines go to their own stream (standard error for the CLI), so standard output carries
the answer alone.
"""

from __future__ import annotations

from typing import IO, Any

from monoagent._cli.terminal import Redactor, terminal_text
from monoagent._kernel.model import RunEvent
from monoagent._kernel.tool_summary import one_line_cut, tool_argument_summary

NAME_CHARS = 64
REASON_CHARS = 80


def call_line(data: dict[str, Any]) -> str:
    """The opening of a call's line (no line end): ``-> name(summary)``."""
    name = one_line_cut(str(data.get("name", "?")), NAME_CHARS)
    return f"-> {name}({tool_argument_summary(data.get('arguments', ''))})"


def outcome_text(data: dict[str, Any], duration_ms: float | None) -> str:
    """The end of a call's line: ``ok`` or ``<status>: <reason>``, then duration and result size."""
    status = str(data.get("status", "?"))
    head = "ok" if status == "success" else status
    if status != "success" and data.get("error"):
        head += f": {one_line_cut(str(data['error']), REASON_CHARS)}"
    facts = [f"{duration_ms:.0f} ms"] if duration_ms is not None else []
    facts.append(f"{data.get('bytes', 0)} bytes")
    return f"{head} ({', '.join(facts)})"


class ToolLines:
    """Writes the compact tool lines of one front end to ``stream`` (see the module docstring).

    A line stays open while its call runs; :meth:`close` ends an open line (before other output
    goes to the same terminal, and when the turn is over: a call that never finished, cancelled
    with its run, keeps its opening alone).
    """

    def __init__(self, stream: IO[str], redact: Redactor | None) -> None:
        self.stream = stream
        self.redact = redact
        self._open: tuple[str, float] | None = None

    def start(self, event: RunEvent) -> None:
        self.close()
        self._write(call_line(event.data))
        self._open = (str(event.data.get("id")), event.at)

    def finish(self, event: RunEvent) -> None:
        started = self._open
        if started is None or started[0] != str(event.data.get("id")):
            self.close()
            self._write(call_line(event.data))
            started = None
        duration = (event.at - started[1]) * 1000 if started is not None else None
        self._write(f" {outcome_text(event.data, duration)}\n")
        self._open = None

    def close(self) -> None:
        if self._open is not None:
            self._open = None
            self._write("\n")

    def _write(self, text: str) -> None:
        self.stream.write(terminal_text(text, self.redact))
        self.stream.flush()
