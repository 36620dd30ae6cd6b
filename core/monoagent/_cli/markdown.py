"""Answers rendered as Markdown in a capable terminal (``chat``, and ``run --markdown``), with ``rich``.

**When.** :func:`markdown_console` decides once per command: ``--plain`` never renders,
``--markdown`` always does (and needs ``rich``: ``pip install 'monoagent[rich]'``); the default
renders only when standard output is a terminal, ``NO_COLOR`` is unset, ``TERM`` is not ``dumb``
and ``rich`` is installed. Otherwise the answer is printed as plain text exactly as before.
``rich`` is imported here only, and only when an answer is rendered: CLI start-up stays light.

**How it streams.** A step's text is shown in a :class:`rich.live.Live` area that re-renders
the Markdown of the text so far, showing its last screenful (:class:`_Tail`), refreshed a few
times a second; when the step ends (its text is over, a tool call starts, the turn ends) the area
is cleared and the whole step is printed once as Markdown, into the scrollback. Re-rendering
in place only ever touches the lines below the cursor's start, so an answer longer than the
screen never leaves half-redrawn copies behind (which a Live area that overflows the screen does).

**Hostile text.** What reaches ``rich`` has already passed the terminal boundary
(:class:`~monoagent._cli.terminal.TerminalStream`: controls and escape sequences stripped,
secrets redacted, a line at a time). ``rich``'s Markdown does not interpret console markup, so
``[bold red]`` or ``[link=...]`` in an answer is shown as typed; Markdown links are shown as
their text followed by the address (``hyperlinks=False``), never as a terminal hyperlink whose
address the reader cannot see.
"""

from __future__ import annotations

import io
import os
import threading
from importlib.util import find_spec
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # rich is an optional extra, imported at run time only when an answer is rendered
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.live import Live
    from rich.markdown import Markdown

REFRESHES_PER_SECOND = 8


def markdown_console(out: IO[str], choice: bool | None) -> Console | None:
    """A ``rich`` console writing to ``out`` when answers are to be rendered, else None.

    ``choice`` is ``--markdown`` (True), ``--plain`` (False) or neither (None: see the module docstring).
    Raises :class:`~monoagent._kernel.errors.ConfigError` for ``--markdown`` without ``rich``.
    """
    if choice is False:
        return None
    installed = find_spec("rich") is not None
    if choice is None:
        capable = getattr(out, "isatty", lambda: False)() and os.environ.get("TERM") != "dumb"
        if not (installed and capable) or os.environ.get("NO_COLOR"):
            return None
    elif not installed:
        from monoagent._kernel.errors import ConfigError
        from monoagent._kernel.extras import missing_extra

        raise ConfigError(f"{missing_extra('rich', '--markdown')} (or use --plain)")
    from rich.console import Console

    return Console(file=out, force_terminal=True if choice else None, highlight=False, markup=False, emoji=False)


class _Tail:
    """The last screenful of the rendered Markdown of ``text()`` (a rich renderable)."""

    def __init__(self, step: MarkdownStep) -> None:
        self.step = step

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        lines = console.render_lines(self.step.markdown(), options.update(height=None), pad=False)
        for line in lines[-max(console.height - 1, 1):]:
            yield from line
            yield Segment.line()


class MarkdownStep:
    """The text of one provider step, shown live and printed as Markdown when it ends.

    :meth:`feed` takes text that already passed the terminal boundary (shown live only on a
    terminal: ``--markdown`` into a pipe writes the rendering alone); :meth:`end` clears the
    live area and writes the whole step's rendering, without its final line end (the caller ends
    the line, as it does for plain text). Returns whether anything was written.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._text = io.StringIO()
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._interactive = bool(getattr(console.file, "isatty", lambda: False)())

    def markdown(self) -> Markdown:
        from rich.markdown import Markdown

        with self._lock:
            text = self._text.getvalue()
        return Markdown(text, hyperlinks=False)

    def feed(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._text.write(text)
        if self._live is None and self._interactive:
            from rich.live import Live

            self._live = Live(
                _Tail(self), console=self.console, transient=True, auto_refresh=True,
                refresh_per_second=REFRESHES_PER_SECOND, redirect_stdout=False, redirect_stderr=False,
            )
            self._live.start()

    def end(self) -> bool:
        live, self._live = self._live, None
        if live is not None:
            live.stop()
        with self._lock:
            text = self._text.getvalue()
            self._text = io.StringIO()
        if not text.strip():
            return False
        from rich.markdown import Markdown

        with self.console.capture() as captured:
            self.console.print(Markdown(text, hyperlinks=False))
        rendered = captured.get()
        self.console.file.write(rendered[:-1] if rendered.endswith("\n") else rendered)
        self.console.file.flush()
        return True
