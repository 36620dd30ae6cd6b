"""Command-line parameter types that read numbers the way configuration does.

click's ``INT`` and ``IntRange`` convert with ``int()``, which also takes ``1_000``, ``+5`` and
fullwidth or other Unicode digits. A count typed on the command line takes what a
``MONO_AGENT_*`` integer takes (:func:`monoagent._kernel.config_loading.parse_ascii_number`): ASCII digits, and
a leading ``-`` only when the range allows negatives.
"""

from __future__ import annotations

from typing import Any

import click

from monoagent._kernel.config_loading import parse_ascii_number


class AsciiIntRange(click.IntRange):
    """``click.IntRange`` that accepts ASCII digits only; the error names the value and the range."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            negative = self.min is None or self.min < 0
            try:
                value = parse_ascii_number(value.strip(" \t"), int, negative=negative)
            except ValueError as exc:
                self.fail(f"{value!r}: {exc}; allowed: {self._describe_range()}", param, ctx)
        return super().convert(value, param, ctx)
