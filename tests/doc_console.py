"""The console blocks of the docs, run: what a page shows a command printing is what it prints.

The convention (tests/test_docs_console.py runs it on README.md and every page of docs/). Every
shell block (a fence marked ``console``, ``sh``, ``bash`` or ``shell``) has a marker on the line
before it:

``<!-- test: console -->`` before a ```` ```console ```` block
    Each line that starts with ``$ `` is a command; the lines after it, up to the next ``$ ``
    line, are what it prints (stdout and stderr as a terminal shows them, in order). The blocks
    of one page run in order in one fresh project directory, ``/home/me/project`` on the page,
    with the ``<!-- test: write NAME -->`` files of the page written before them as they come.
    ``HOME`` is ``/home/me`` (the platform data directory is ``/home/me/.local/share/monoagent``),
    no ``MONO_AGENT_*`` variable of the machine leaks in, third-party plugins are not loaded, and
    ``monoagent`` is the one of the test's interpreter.

    A ``monoagent ...`` command (optionally after ``NAME=value`` assignments) runs in-process
    (:func:`monoagent._cli.main` under click's ``CliRunner`` isolation), except ``monoagent chat``,
    which reads its stdin as a terminal session does, in a subprocess; ``export NAME=value``
    (``$PWD`` and ``$HOME`` expanded), ``unset NAME`` and ``cd DIR`` change the session; any other line runs in
    ``bash`` (a ``printf ... > file``, a pipe), with stdout and stderr in the order written. A command's exit status must be 0 unless its output
    ends with a line ``[exit N]``.

    Compared after normalising both sides: runs of spaces count as one, trailing spaces are
    dropped, and these volatile parts match any value of their kind: a run id (22 hex digits),
    a date-time (``2026-12-01 21:22:41``, ``2026-12-01T21:22:41``, seconds optional), a
    duration (``0.121 s``, ``27.9 ms``, ``(20 ms``), a SHA-256 (64 hex digits). A line ``...``
    matches any number of lines; ``...`` inside a line matches the rest of a line's text up to
    what follows it. A run id the page showed in an earlier output stands, in a later command,
    for the id the run really got (``monoagent logs RUN_ID``). ``you> TEXT`` lines of a ``monoagent chat`` are its input: fed to its stdin
    and, as a chat whose stdin is not a terminal prints no prompt, not part of its output.

``<!-- test: syntax REASON -->``
    The block cannot run offline or in a test (a real provider, the network, ``pip``, ``sudo``):
    every ``monoagent`` command in it (a line starting with ``monoagent`` or ``$ monoagent``, after
    assignments, comments dropped; a synopsis's ``[--option]`` taken as given) is parsed against the real command line, every option and
    argument checked, without running it. It must hold at least one such command.

``<!-- test: skip REASON -->``
    A block with no ``monoagent`` command at all (installing, serving behind systemd).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import click
from click.testing import CliRunner

SHELL_LANGS = {"console", "sh", "bash", "shell"}
MARKER = re.compile(r"^<!--\s*test:\s*(?P<action>console|syntax|skip|write|run)(?:\s+(?P<rest>.*?))?\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SHOWN_HOME = "/home/me"
RUN_ID = re.compile(r"\b[0-9a-f]{22}\b")
SHOWN_PROJECT = "/home/me/project"

VOLATILE = [
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\b[0-9a-f]{22}\b"), "<run-id>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)? ?(?:ms|s)\b"), "<duration>"),
]


@attrs.frozen
class Block:
    page: Path
    line: int  # of the fence's first content line, 1-based
    action: str  # console, syntax, skip, write, run, or "" (no marker)
    rest: str
    lang: str
    text: str


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with the marker on the line before it (if any), in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i].strip()) if lines[i].startswith("```") else None
        if not fence:
            i += 1
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = MARKER.match(lines[j].strip()) if j >= 0 else None
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        found.append(
            Block(page, i + 2, marker["action"] if marker else "", (marker["rest"] or "") if marker else "",
                  fence["lang"], "\n".join(lines[i + 1:end]) + "\n")
        )
        i = end + 1
    return found


# ---------------------------------------------------------------------------------------- matching


def normalise(text: str) -> str:
    for pattern, token in VOLATILE:
        text = pattern.sub(token, text)
    return "\n".join(re.sub(r" +", " ", line).rstrip() for line in text.splitlines())


def matches(expected: str, actual: str) -> bool:
    """``actual`` as ``expected`` shows it, ``...`` lines and ``...`` in a line as wildcards."""
    pattern = ""
    for line in normalise(expected).splitlines():
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += r"[^\n]*".join(re.escape(part) for part in line.split("...")) + r"\n"
    actual = normalise(actual)
    return re.fullmatch(pattern, actual + "\n" if actual else "") is not None


# ---------------------------------------------------------------------------------------- running


@attrs.frozen
class Command:
    line: str  # as shown, after "$ "
    expected: str
    stdin: str


def commands(block: Block) -> list[Command]:
    """The ``$`` commands of a console block with what each is shown printing."""
    found: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        else:
            assert found, f"{block.page.name}:{block.line}: a console block starts with a '$ ' command"
            found[-1][1].append(line)
    result = []
    for line, output in found:
        chat = line.split()[:2] == ["monoagent", "chat"]
        inputs = [o[len("you> "):] for o in output if chat and o.startswith("you> ")]
        shown = [o for o in output if not (chat and o.startswith("you> "))]
        result.append(Command(line, "\n".join(shown), "".join(f"{text}\n" for text in inputs)))
    return result


class Session:
    """One page's project directory and environment; runs its console commands."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.cwd = self.home / "project"
        self.cwd.mkdir(parents=True)
        self.ids: dict[str, str] = {}  # run ids as the page shows them -> as the runs got them
        self.env = {
            name: value for name, value in os.environ.items()
            if not name.startswith(("MONO_AGENT_", "XDG_")) and name not in {"NO_COLOR", "COLUMNS", "TERM"}
        }
        bindir = str(Path(sys.executable).parent)
        self.env.update(
            HOME=str(self.home), PWD=str(self.cwd), MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1", TERM="dumb",
            PATH=os.pathsep.join([bindir, self.env.get("PATH", "")]),
        )

    def shown(self, text: str) -> str:
        """Output with this session's real paths as the page shows them."""
        return text.replace(str(self.cwd), SHOWN_PROJECT).replace(str(self.home), SHOWN_HOME)

    def write(self, name: str, text: str) -> None:
        target = self.cwd / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def run(self, command: Command) -> tuple[int, str]:
        """Run one command: its exit status and what it printed (paths as the page shows them)."""
        line = RUN_ID.sub(lambda m: self.ids.get(m[0], m[0]), command.line)
        code, output = self._run(attrs.evolve(command, line=line))
        output = self.shown(output)
        shown, real = RUN_ID.findall(command.expected), RUN_ID.findall(output)
        if len(shown) == len(real):
            self.ids.update(zip(shown, real, strict=True))
        return code, output

    def _run(self, command: Command) -> tuple[int, str]:
        words = shlex.split(command.line, comments=True)
        assignments = {}
        while words and ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            assignments[name] = self.expand(value)
        if words[:1] == ["export"] and not assignments:
            for word in words[1:]:
                name, _, value = word.partition("=")
                self.env[name] = self.expand(value)
            return 0, ""
        if words[:1] == ["unset"] and not assignments:
            for word in words[1:]:
                self.env.pop(word, None)
            return 0, ""
        if words[:1] == ["cd"]:
            self.cwd = (self.cwd / self.expand(words[1])).resolve()
            self.env["PWD"] = str(self.cwd)
            return 0, ""
        if words[:1] == ["monoagent"] and words[1:2] != ["chat"] and not re.search(r"[|<>;&`]", command.line):
            return self.in_process(words[1:], {**self.env, **assignments}, command.stdin)
        done = subprocess.run(
            ["bash", "-c", command.line], cwd=self.cwd, env={**self.env, "PYTHONUNBUFFERED": "1"}, input=command.stdin,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False,
        )
        return done.returncode, done.stdout

    def expand(self, value: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.env.get(m[1], ""), value)

    def in_process(self, argv: list[str], env: dict[str, str], stdin: str) -> tuple[int, str]:
        import monoagent._cli as cli_module

        saved = os.environ.copy()
        previous = Path.cwd()
        os.environ.clear()
        os.environ.update(env)
        os.chdir(self.cwd)
        code = 0
        try:
            with CliRunner().isolation(input=stdin) as (_out, _err, output), _cli_logging():
                for stream in (sys.stdout, sys.stderr):  # as on a terminal: each write in order, none held back
                    stream.reconfigure(write_through=True)  # type: ignore[union-attr]
                try:
                    cli_module.main(argv)
                except SystemExit as exc:
                    code = int(exc.code or 0)
                sys.stdout.flush()
                sys.stderr.flush()
                text = output.getvalue().decode("utf-8", "replace")
        finally:
            os.chdir(previous)
            os.environ.clear()
            os.environ.update(saved)
        return code, text


@contextlib.contextmanager
def _cli_logging() -> Iterator[None]:
    """monoagent's log records on stderr at WARNING, as the CLI shows them, for one command.

    The CLI's own set-up removes every loguru handler of the process; here the test process's
    handlers and enabled packages are set aside for the command and put back after it (loguru
    has no public way to save and restore them)."""
    from loguru import logger

    import monoagent._cli as cli_module
    from monoagent._cli.terminal import terminal_text
    from monoagent._kernel import log

    packages = tuple(log._library_packages)

    def sink(message: object) -> None:
        sys.stderr.write(terminal_text(str(message), None))

    core = logger._core  # type: ignore[attr-defined]
    module_state = (log._cli_level, log._cli_redact, log._cli_json, log._LazyLogger._real)
    with core.lock:
        saved = (core.handlers, core.min_level, core.activation_list, core.enabled)
        core.handlers, core.min_level = {}, float("inf")
    configure = cli_module._configure_logging
    cli_module._configure_logging = lambda debug: None  # type: ignore[assignment]
    handler = logger.add(sink, level="WARNING", format="monoagent: {level}: {message}")
    for package in packages:
        logger.enable(package)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # a server's log set-up removes every handler, ours too
            logger.remove(handler)
        cli_module._configure_logging = configure  # type: ignore[assignment]
        log._cli_level, log._cli_redact, log._cli_json, log._LazyLogger._real = module_state
        with core.lock:
            core.handlers, core.min_level, core.activation_list, core.enabled = saved


# ---------------------------------------------------------------------------------------- syntax


def monoagent_argvs(block: Block) -> list[list[str]]:
    """The argument lists of the ``monoagent`` commands of a shell block (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", block.text)
    found = []
    for line in text.splitlines():
        line = line.strip().removeprefix("$ ")
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        segments: list[list[str]] = [[]]
        for word in words:  # the commands of a line: a && b, a | b, a; b
            if word in {"&&", "||", "|", ";"}:
                segments.append([])
            else:
                segments[-1].append(word)
        for segment in segments:
            while segment and ASSIGNMENT.match(segment[0]):
                segment.pop(0)
            if segment and Path(segment[0]).name == "monoagent":
                # a synopsis's optional part, [--json], is parsed as given
                found.append([w[1:-1] if w.startswith("[") and w.endswith("]") else w for w in segment[1:]])
    return found


def parse_only(argv: list[str]) -> None:
    """Parse ``argv`` against the real command line (the bundled plugins' commands included), down to
    the subcommand, converting every value, without invoking anything. Raises click's error."""
    from monoagent._cli import _prescan, build_cli, load_plugins

    host, config_error = load_plugins(*_prescan(argv))
    command: click.Command = build_cli(host, config_error)
    ctx = command.make_context("monoagent", list(argv), resilient_parsing=False)
    while isinstance(command, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            break
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        command = sub
        ctx = command.make_context(name, rest, parent=ctx, resilient_parsing=False)
