"""A tool call's arguments as one short line: what every front end shows beside a call (the terminal, the web console).

:func:`tool_argument_summary` turns a call's redacted ``arguments`` preview (the ``tool_call``
event's, see :func:`monoagent._pipeline.tool_loop.arguments_preview`) into ``key=value, ...``,
bounded to :data:`SUMMARY_CHARS` with each value cut to :data:`VALUE_CHARS` (a list shows its
length, an object ``{…}``); :func:`one_line_cut` bounds any other piece of such a line. The names,
arguments and errors are the model's and the tools': hostile text, which the caller still escapes
for its medium (the terminal strips controls; the web console renders text, never HTML).
"""

from __future__ import annotations

import json
from typing import Any

SUMMARY_CHARS = 80
"""The most characters of a call's argument summary."""

VALUE_CHARS = 24
"""The most characters of one argument's value in the summary (longer ones end in ``…``)."""


def one_line_cut(text: str, limit: int) -> str:
    """``text`` on one line (every run of whitespace, line ends included, one space), at most ``limit`` characters
    (a longer one ends in ``…``)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return one_line_cut(json.dumps(value, ensure_ascii=False), VALUE_CHARS)
    if isinstance(value, list):
        return f"[{len(value)} item{'s' if len(value) != 1 else ''}]"
    if isinstance(value, dict):
        return "{…}" if value else "{}"
    return one_line_cut(json.dumps(value, default=str), VALUE_CHARS)


def tool_argument_summary(arguments: Any) -> str:
    """``key=value, ...`` for a JSON object of arguments (its text), values elided, at most :data:`SUMMARY_CHARS`.

    Text that is not a JSON object (a preview cut short, a model's odd arguments) is shown as it
    is, cut to the same bound.
    """
    text = str(arguments or "")
    try:
        parsed = json.loads(text) if text and not text.endswith("…") else None
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        text = ", ".join(f"{key}={_value(value)}" for key, value in parsed.items())
    return one_line_cut(text, SUMMARY_CHARS)
