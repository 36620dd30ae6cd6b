"""The terminal boundary: text that comes in from a terminal, and every byte that goes out to one.

**In.** Command-line arguments, standard input (``-``) and ``chat`` lines are text. Bytes that are
not valid UTF-8 reach Python as surrogate code points (``surrogateescape``); :func:`input_text`
replaces them by U+FFFD (the project's one decision, :func:`monoagent._boundary.text.scrub_unicode`) and
says so in one line on stderr.

**Out.** Whatever monoagent prints (answers, streamed deltas, history and memory listings,
configuration, error messages, log lines) may hold text a provider, a tool, another chat
participant or a file controls, so it passes :func:`terminal_text`, the one function for terminal
output:

1. escape sequences are removed whole (CSI, OSC such as a window-title change, DCS/SOS/PM/APC
   strings, two-character ``ESC`` sequences, and their 8-bit C1 forms such as U+009B), then every
   remaining control character: C0 but ``\\n`` and ``\\t`` (``\\r\\n`` becomes ``\\n``), DEL, C1
   (U+0080 to U+009F), and the bidi embedding, override, isolate and mark characters;
2. the text is redacted through the agent's redaction chain (the ``redact`` hook, kind
   ``"terminal"``: secrets go, filesystem paths stay, since the reader is the machine's own user);
3. what is left is valid Unicode.

**State.** A command that reads lines with line editing (``chat``) keeps the terminal's settings
and restores them on every way out (:func:`kept_terminal_state`): readline switches echo and
canonical input off while it waits for a line, so leaving in the middle of one (Ctrl-C, an
error, SIGTERM) used to leave the shell without echo. The restore is the last change to the
settings: readline prepares the terminal on the thread that reads the line, so that thread reads
through :func:`edited_input`, which lets readline prepare it only before the restore, never after
(:class:`KeptTerminal`).

A streamed answer arrives in pieces that may cut an escape sequence or a secret in two;
:class:`TerminalStream` holds text back until a line ends (see its docstring for the exact
promise). JSON output goes through :func:`terminal_json`: strings redacted, and the characters
step 1 removes written as ``\\uXXXX`` escapes, so the document stays JSON and prints safely.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from monoagent._boundary.text import LazyPattern, scrub_unicode, valid_unicode

if TYPE_CHECKING:
    from rich.console import Console

    from monoagent._cli.markdown import MarkdownStep
    from monoagent._cli.tool_lines import ToolLines
    from monoagent._kernel.model import RunEvent

Redactor = Callable[[str, str], str]
"""``redact(text, kind)``, as :meth:`monoagent._agent.Agent.redact`."""

KIND = "terminal"

_UNSAFE_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = LazyPattern(f"[{_UNSAFE_CHARS}]")
_SEQUENCE = LazyPattern(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI, 7- and 8-bit
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # other escape sequences: ESC, intermediates, final byte
)


def strip_controls(text: str) -> str:
    """``text`` without escape sequences and control characters (``\\n`` and ``\\t`` stay)."""
    if not _UNSAFE.search(text):
        return text
    text = _SEQUENCE.sub("", text.replace("\r\n", "\n"))
    return _UNSAFE.sub("", text)


def terminal_text(text: str, redact: Redactor | None = None) -> str:
    """``text`` safe to print: controls stripped, redacted (when a chain is given), valid Unicode."""
    text = strip_controls(valid_unicode(text))
    if redact is not None:
        text = strip_controls(valid_unicode(redact(text, KIND)))
    return text


class TerminalStream:
    """Streamed text (an answer's ``text_delta`` pieces) on its way to a terminal.

    :meth:`feed` returns what may be printed now, :meth:`end` the rest. Text is released a line
    at a time, each release passed through :func:`terminal_text` together with the lines before
    it while a redaction may still be open across them (a private-key block, ``password`` at the
    end of one line and its value on the next). The promise, however the stream is cut:

    * no control character or escape sequence reaches the terminal, not even one split across
      pieces (the line is whole before it is cleaned);
    * a secret the redaction chain recognises in the finished text is redacted in the printed
      text too, as long as it lies within one line, or within a block of lines that a redaction
      is still open across (a block longer than :attr:`MAX_CONTEXT` characters keeps only its
      first line as context, which is enough for a match that runs on from there);
    * a line longer than :attr:`MAX_LINE` characters is released before it ends (see
      :meth:`_cut`), never inside a secret the chain recognises in the text it has so far.

    Whether a redaction is open at the end of the released text is asked of the chain itself:
    if a probe (a newline and a run of letters) appended to it does not come back unchanged, a
    match is still running on and the lines stay as context for the next release.
    """

    MAX_LINE = 4096
    HOLD_BACK = 256
    MAX_CONTEXT = 16 * 1024
    MAX_CUT_TRIES = 8
    PROBE = "\n" + "Q" * 40

    def __init__(self, redact: Redactor | None = None) -> None:
        self.redact: Redactor | None = redact
        self._pending = ""
        self._context = ""
        self._shown = ""

    def feed(self, piece: str) -> str:
        pending = self._pending = self._pending + piece  # held text never holds a line end
        if "\n" in piece:
            cut = pending.rfind("\n") + 1
        elif len(pending) > self.MAX_LINE:
            cut = self._cut(pending)
        else:
            return ""
        self._pending = pending[cut:]
        return self._release(pending[:cut])

    def _cut(self, line: str) -> int:
        """Where to release a long unfinished line: after its last space (or tab) that leaves
        the last :attr:`HOLD_BACK` characters held, without one before those characters; moved
        back (at most :attr:`MAX_CUT_TRIES` times, to the space or the hold-back before) while the
        two parts would print otherwise than the whole, that is while the cut falls inside
        something the chain redacts. What is held keeps the start of a secret that is still
        arriving (a quoted value, a key) with the name or prefix that makes it one."""
        limit = len(line) - self.HOLD_BACK
        first = whole = None
        for _ in range(self.MAX_CUT_TRIES):
            space = max(line.rfind(" ", 0, limit), line.rfind("\t", 0, limit))
            cut = space + 1 if space > 0 else limit
            if cut <= 0:
                break
            if first is None:
                first = cut
                if self.redact is None:
                    return cut
                whole = terminal_text(line, self.redact)
            if terminal_text(line[:cut], self.redact) + terminal_text(line[cut:], self.redact) == whole:
                return cut
            limit = space if space > 0 else cut - self.HOLD_BACK
        return first if first is not None else len(line) - self.HOLD_BACK

    def end(self) -> str:
        """The text still held back, released; the stream starts afresh after it."""
        out = self._release(self._pending) if self._pending else ""
        self._pending = self._context = self._shown = ""
        return out

    def _release(self, text: str) -> str:
        window = self._context + text
        shown = terminal_text(window, self.redact)
        out = shown[len(self._shown):] if shown.startswith(self._shown) else terminal_text(text, self.redact)
        if self.redact is None:
            settled = True
        elif text and not out:  # the new lines vanished into a redaction that runs on
            settled = False
        else:
            settled = self._settled(window)
        if settled:
            self._context = self._shown = ""
        elif len(window) > self.MAX_CONTEXT:  # keep the line that opened the redaction, not the whole block
            head = window[: window.find("\n") + 1] or window[: self.MAX_LINE]
            self._context, self._shown = head, terminal_text(head, self.redact)
        else:
            self._context, self._shown = window, shown
        return out

    def _settled(self, window: str) -> bool:
        probed = terminal_text(window + self.PROBE, self.redact)
        return probed.endswith(self.PROBE)


class AnswerPrinter:
    """Prints an answer as the turn streams it: the ``on_event`` of ``monoagent run`` and ``chat``.

    ``text_delta`` pieces go to ``out`` through a :class:`TerminalStream`. The text of each
    provider step starts on a line of its own: when a step (or another attempt) begins after
    text that did not end a line, a line end is written first, so a turn of two steps (text, a
    tool call, more text) never prints the two texts glued together.

    With ``markdown`` (a ``rich`` console from :func:`monoagent._cli.markdown.markdown_console`),
    each step's text is rendered as Markdown (:class:`~monoagent._cli.markdown.MarkdownStep`)
    after it passed the same :class:`TerminalStream`.

    With ``tool_lines`` (a :class:`~monoagent._cli.tool_lines.ToolLines`, on standard error
    for the CLI), each ``tool_call`` and ``tool_result`` becomes one compact line; the answer
    text printed so far is released and its line ended first, so the two streams interleave
    cleanly on one terminal.

    A ``provider_attempt_discarded`` event ends the line printed so far and says on stderr (one
    line, :func:`discard_notice`) that those characters are discarded and another attempt
    follows. Call :meth:`end` when the turn is over, whether it answered or raised, for the text
    held back.
    """

    def __init__(
        self, out: IO[str], redact: Redactor | None, *, tool_lines: ToolLines | None = None, markdown: Console | None = None
    ) -> None:
        self.out: IO[str] = out
        self.redact: Redactor | None = redact
        self.tool_lines: ToolLines | None = tool_lines
        self._printed = TerminalStream(redact)
        self._step: tuple[Any, Any] | None = None
        self._line_open = False
        self._markdown: MarkdownStep | None = None
        if markdown is not None:
            from monoagent._cli.markdown import MarkdownStep

            self._markdown = MarkdownStep(markdown)

    def __call__(self, event: RunEvent) -> None:
        kind = event.type
        if kind == "text_delta":
            step = (event.data.get("attempt"), event.data.get("step"))
            if step != self._step:
                if self._step is not None:
                    self._end_line()
                self._step = step
            if self.tool_lines is not None:
                self.tool_lines.close()
            self._answer(self._printed.feed(event.data["text"]))
        elif kind in ("tool_call", "tool_result") and self.tool_lines is not None:
            self._end_line()
            if kind == "tool_call":
                self.tool_lines.start(event)
            else:
                self.tool_lines.finish(event)
        elif kind == "provider_attempt_discarded":
            self._end_line()
            if self.tool_lines is not None:
                self.tool_lines.close()
            echo(discard_notice(event.data), err=True, redact=self.redact)

    def end(self) -> str:
        """The text still held back (printed by the caller, who knows what follows it).

        An open tool line is ended first; with Markdown, the step's rendering is written here
        and nothing is returned. The next turn starts afresh.
        """
        if self.tool_lines is not None:
            self.tool_lines.close()
        self._step, self._line_open = None, False
        held = self._printed.end()
        if self._markdown is None:
            return held
        self._markdown.feed(held)
        self._markdown.end()
        return ""

    def _answer(self, text: str) -> None:
        if self._markdown is not None:
            self._markdown.feed(text)
        else:
            self._write(text)

    def _end_line(self) -> None:
        """Release the held text (with Markdown: render the step) and end its line, if any text is on it."""
        held = self._printed.end()
        if self._markdown is not None:
            self._markdown.feed(held)
            self._line_open = self._markdown.end() or self._line_open
        else:
            self._write(held)
        if self._line_open:
            self._write("\n")

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._line_open = not text.endswith("\n")


def discard_notice(data: dict[str, Any]) -> str:
    """The one-line notice a streaming front end prints (on stderr) for ``provider_attempt_discarded``."""
    return (
        f"[attempt {data.get('attempt')} on {data.get('model')} failed ({data.get('code')}); "
        f"its {data.get('text_chars', 0)} streamed characters above are discarded, another attempt follows]"
    )


def terminal_json(value: Any, redact: Redactor | None = None, **dumps: Any) -> str:
    """``value`` as JSON safe to print: strings and keys valid Unicode and redacted, terminal controls escaped.

    Strings are made valid before they are dumped: with ``ensure_ascii`` a surrogate would be
    written as a ``\\udcff`` escape, which a JSON reader turns back into text that is not valid.
    """
    value = _redact_json(value, redact)
    dumps.setdefault("ensure_ascii", False)
    dumps.setdefault("default", lambda other: valid_unicode(str(other)))
    text = valid_unicode(json.dumps(value, **dumps))
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _redact_json(value: Any, redact: Redactor | None) -> Any:
    if isinstance(value, str):
        value = valid_unicode(value)
        return value if redact is None else redact(value, KIND)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = _redact_json(key, redact) if isinstance(key, str) else key
            unique, n = name, 1
            while unique in out:
                n += 1
                unique = f"{name}#{n}"
            out[unique] = _redact_json(item, redact)
        return out
    if isinstance(value, (list, tuple)):
        return [_redact_json(item, redact) for item in value]
    return value


# --------------------------------------------------------------------------- the click side


def context_redactor() -> Redactor | None:
    """The redaction chain of the running ``monoagent`` command (its root context object's ``redact``)."""
    import click

    ctx = click.get_current_context(silent=True)
    root = ctx.find_root().obj if ctx is not None else None
    return getattr(root, "redact", None)


def echo(message: str = "", *, err: bool = False, nl: bool = True, redact: Redactor | None = None) -> None:
    """:func:`click.echo` of :func:`terminal_text`; the chain defaults to the running command's."""
    import click

    click.echo(terminal_text(message, redact or context_redactor()), err=err, nl=nl)


def echo_json(value: Any, *, redact: Redactor | None = None, **dumps: Any) -> None:
    """:func:`click.echo` of :func:`terminal_json` (indented by 2 unless told otherwise)."""
    import click

    dumps.setdefault("indent", 2)
    click.echo(terminal_json(value, redact or context_redactor(), **dumps))


class TerminalFile(io.TextIOBase):
    """A text stream that passes every write through :func:`terminal_text` (for click's ``show()``)."""

    def __init__(self, stream: IO[str], redact: Redactor | None = None) -> None:
        self._stream = stream
        self._redact = redact

    def write(self, text: str) -> int:
        self._stream.write(terminal_text(text, self._redact))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())


def notice(message: str, redact: Redactor | None = None) -> None:
    """One ``monoagent: warning:`` line on stderr."""
    echo(f"monoagent: warning: {message}", err=True, redact=redact)


def input_text(text: str, what: str) -> str:
    """``text`` from the terminal as valid Unicode; a replacement is reported on stderr, naming ``what``."""
    text, count = scrub_unicode(text)
    if count:
        notice(f"{what} held {count} byte(s) that are not valid UTF-8; each became U+FFFD")
    return text


def accept_undecodable(stream: IO[str]) -> None:
    """Make ``stream`` (standard input) hand undecodable bytes over as surrogates instead of raising.

    Python decodes standard input strictly under a UTF-8 locale, so one stray byte would end
    ``chat`` or ``run -`` with a ``UnicodeDecodeError``; with ``surrogateescape`` the bytes
    arrive as surrogates and :func:`input_text` replaces and reports them.
    """
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and getattr(stream, "errors", None) != "surrogateescape":
        try:
            reconfigure(errors="surrogateescape")
        except (ValueError, io.UnsupportedOperation) as exc:
            from monoagent._kernel.log import logger

            logger.debug("standard input keeps its strict decoding (cannot reconfigure it: {})", exc)


INPUT_MAX_CHARS = 16 * 1024 * 1024
"""The most standard input (``-``) or one ``chat`` line may hold (the largest ``history.maxMessageBytes``)."""


def read_capped(read: Callable[[int], str], what: str) -> str:
    """``read(INPUT_MAX_CHARS + 1)``, or :class:`~monoagent._kernel.errors.InputTooLarge` when that is more than the cap.

    Standard input may be ``/dev/zero`` or a line without an end: read whole, it would take all
    memory before anything could say so.
    """
    text = read(INPUT_MAX_CHARS + 1)
    if len(text) > INPUT_MAX_CHARS:
        from monoagent._kernel.errors import InputTooLarge

        raise InputTooLarge(f"{what} is over the {INPUT_MAX_CHARS:,}-character limit; refused")
    return text


def read_stdin(what: str = "standard input") -> str:
    """All of standard input as valid Unicode (``-`` arguments), at most :data:`INPUT_MAX_CHARS` characters."""
    accept_undecodable(sys.stdin)
    return input_text(read_capped(sys.stdin.read, what), what)


class KeptTerminal:
    """A terminal's settings as :func:`kept_terminal_state` found them, and the gate every change to them passes.

    The restore has to be the last change: a thread that changed the settings after it (readline
    preparing the terminal for the next line, on the chat's reader thread) would leave the shell
    without echo, or with Return sending ``^M``, once the command exits. So a thread about to
    change them calls :meth:`begin_change`, which refuses once the block is being left, and
    :meth:`end_change` once the change is made. :meth:`restore` waits for a change that has begun
    (at most :attr:`CHANGE_WAIT` seconds: a change that never ends must not keep the command from
    ending) and then puts the settings back; a change that ends after the restore stopped waiting
    puts them back once more, so even then the kept settings are the last written.
    """

    CHANGE_WAIT = 5.0

    def __init__(self, fd: int = -1, saved: list[Any] | None = None) -> None:
        self.fd: int = fd
        self.saved: list[Any] | None = saved
        """The ``termios`` settings found on entry; None when the stream is not a terminal."""
        self._changes = threading.Condition()
        self._changing = 0
        self._left = False
        self._restored = False

    @property
    def left(self) -> bool:
        """True once the block is being left: no change may begin any more."""
        return self._left

    def begin_change(self) -> bool:
        """Whether the caller may change the terminal's settings now; when True, :meth:`end_change` must follow."""
        with self._changes:
            if self._left:
                return False
            self._changing += 1
            return True

    def end_change(self) -> None:
        """The change begun by :meth:`begin_change` is made (or was not made after all)."""
        with self._changes:
            self._changing -= 1
            self._changes.notify_all()
            if self._restored:  # the restore gave up waiting for this change: put the settings back again
                self._put_back()

    def restore(self) -> None:
        """Refuse every later change, wait for the one under way, and put the settings back."""
        with self._changes:
            self._left = True
            if not self._changes.wait_for(lambda: self._changing == 0, self.CHANGE_WAIT):
                from monoagent._kernel.log import logger

                logger.debug("a change to the terminal's settings did not end within {} s; restoring them "
                             "now, and again when it ends", self.CHANGE_WAIT)
            self._put_back()
            self._restored = True

    def _put_back(self) -> None:
        if self.saved is None:
            return
        import termios

        try:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
        except (termios.error, OSError) as exc:
            from monoagent._kernel.log import logger

            logger.debug("the terminal's settings could not be restored (it went away?): {}", exc)


@contextlib.contextmanager
def kept_terminal_state(stream: IO[str]) -> Iterator[KeptTerminal]:
    """Put ``stream``'s terminal settings back as they were on every way out of the block.

    The settings (echo, canonical input, signal keys, control characters: all of ``termios``)
    are read on entry and written back on exit, whatever ends the block: a return, an exception,
    ``KeyboardInterrupt``, ``SystemExit``. The :class:`KeptTerminal` yielded is the gate through
    which any other thread changes the settings meanwhile (:func:`edited_input` does), so that no
    change lands after the restore. Nothing is written when ``stream`` is not a terminal or the
    platform has no ``termios``; a terminal that went away meanwhile (a hang-up) is logged.
    """
    kept = KeptTerminal()
    try:
        import termios

        fd = stream.fileno()
        if os.isatty(fd):
            kept = KeptTerminal(fd, termios.tcgetattr(fd))
    except (ImportError, AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass  # not a terminal (a pipe, a StringIO), or no termios on this platform
    try:
        yield kept
    finally:
        kept.restore()


def edited_input(prompt: str, kept: KeptTerminal | None = None) -> str | None:
    """``input(prompt)`` with readline's line editing where the platform has it; None once ``kept`` is being left.

    readline prepares the terminal (echo and canonical input off) on the thread that calls
    ``input()``, as that call starts. Were it to start after ``kept`` restored the settings, the
    shell would be left as readline set it. So, when ``input()`` will use readline (standard input
    and output are the process's terminal), the preparation is a change through ``kept``'s gate:
    begun before ``input()`` (refused, and None returned, when the chat is leaving) and ended by
    readline's pre-input hook, which readline calls once the terminal is prepared. The hook is
    readline's one per process: it is set for this call and cleared after it. When the line ends,
    readline puts back the settings it found as it prepared the terminal, which (prepared before
    the restore) are the kept ones. Raises ``EOFError`` at the end of input, as ``input()`` does.
    """
    try:
        import readline
    except ImportError:
        readline = None  # type: ignore[assignment]
    set_hook = getattr(readline, "set_pre_input_hook", None)
    if kept is None or set_hook is None or not _input_uses_readline():
        if kept is not None and kept.left:
            return None
        return input(prompt)
    if not kept.begin_change():
        return None
    ended = False

    def prepared() -> None:
        nonlocal ended
        if not ended:
            ended = True
            kept.end_change()

    set_hook(prepared)
    try:
        return input(prompt)
    finally:
        set_hook(None)
        prepared()


def _input_uses_readline() -> bool:
    """Whether ``input()`` reads through readline: ``sys.stdin`` and ``sys.stdout`` are file descriptors 0 and 1, both terminals."""
    try:
        return (sys.stdin.fileno() == 0 and os.isatty(0)) and (sys.stdout.fileno() == 1 and os.isatty(1))
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
