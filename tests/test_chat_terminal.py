"""``monoagent chat`` and ``run`` on a real pseudo-terminal: the start-up hint, Ctrl-D, Markdown answers.

The command's standard input and output are a pty (so ``isatty`` is true), its standard error a
pipe, so what goes to which stream can be told apart.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

needs_pty = pytest.mark.skipif(not hasattr(os, "openpty") or sys.platform == "win32", reason="needs a pseudo-terminal")


class PtyCommand:
    """``monoagent ARGS`` with stdin and stdout on a pty and stderr on a pipe, in ``cwd``."""

    def __init__(self, cwd: Path, *args: str, stderr_on_terminal: bool = False, **env: str) -> None:
        master, slave = os.openpty()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_") and k not in ("NO_COLOR", "TERM")}
        environ.update(MONO_AGENT_HOME=str(cwd / "home"), XDG_CONFIG_HOME=str(cwd / "xdg"), TERM="xterm-256color",
                       COLUMNS="100", LINES="40")
        environ.update(env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "monoagent", *args], cwd=cwd, env=environ, stdin=slave, stdout=slave,
            stderr=slave if stderr_on_terminal else subprocess.PIPE, start_new_session=True,
        )
        os.close(slave)
        self.fd = master
        self.output = b""

    def wait_for(self, marker: bytes, limit: float = 30.0) -> None:  # a bound on failure, not synchronisation
        import select

        deadline = time.monotonic() + limit
        while marker not in self.output and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self.output += os.read(self.fd, 4096)
                except OSError:
                    break
        assert marker in self.output, f"{marker!r} not seen; the terminal showed {self.output!r}"

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def finish(self, limit: float = 30.0) -> tuple[int, bytes, str]:
        """Exit status, everything the terminal showed, and stderr."""
        import select

        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if chunk:
                    self.output += chunk
                    continue
            if self.process.poll() is not None:
                break
        try:
            _, err = self.process.communicate(timeout=max(deadline - time.monotonic(), 1))
            err = err or b""
        finally:
            if self.process.poll() is None:
                self.process.kill()
            os.close(self.fd)
        return self.process.returncode, self.output, err.decode()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "offline:echo"\n')
    return tmp_path


@needs_pty
def test_chat_on_a_terminal_prints_a_start_up_hint_on_stderr_and_ends_with_a_newline_on_ctrl_d(project: Path) -> None:
    chat = PtyCommand(project, "chat", "-c", "t:1")
    chat.wait_for(b"you> ")
    chat.send(b"\x04")  # Ctrl-D at the prompt: end of input
    status, shown, err = chat.finish()
    assert status == 0, (shown, err)
    assert shown.endswith(b"you> \r\n"), f"the shell's prompt starts on a line of its own: {shown!r}"
    hints = [line for line in err.splitlines() if "/help for commands" in line]
    assert hints == ["monoagent chat: model offline:echo, conversation t:1; /help for commands, Ctrl-D to leave"]
    assert b"/help for commands" not in shown, "the hint is on stderr, not stdout"


MARKDOWN = (
    "Some **bold** words, [bold red]not markup[/] [link=http://evil.example]x[/link]\\u001b]0;pwned\\u0007 "
    "and [a link](http://example.com).\\n\\n- one\\n- two\\n"
)


@pytest.fixture
def scripted(project: Path) -> Path:
    (project / "script.toml").write_text(f'[[steps]]\ntext = "{MARKDOWN}"\n')
    (project / "monoagent.toml").write_text(
        '[runtime]\nmodel = "offline:scripted"\n[providers.offline]\nscriptPath = "script.toml"\n'
    )
    return project


def rendered_as_markdown(shown: bytes) -> None:
    assert b"\x1b[1mbold\x1b[0m" in shown and b"**bold**" not in shown, shown
    assert b"[bold red]not markup[/]" in shown and b"[link=http://evil.example]x[/link]" in shown, "console markup stays literal"
    assert b"pwned" not in shown and b"\x1b]" not in shown and b"\x07" not in shown, "controls are stripped before rich"
    assert b"http://example.com" in shown and b"\x1b]8;" not in shown, "a link shows its address, never a hidden hyperlink"


@needs_pty
def test_run_on_a_terminal_renders_the_answer_as_markdown_with_hostile_text_shown_literally(scripted: Path) -> None:
    status, shown, err = PtyCommand(scripted, "run", "hi").finish()
    assert status == 0, (shown, err)
    rendered_as_markdown(shown)


@needs_pty
@pytest.mark.parametrize(("args", "env"), [(("--plain",), {}), ((), {"NO_COLOR": "1"}), ((), {"TERM": "dumb"})])
def test_run_prints_plain_text_with_plain_no_color_or_a_dumb_terminal(scripted: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
    status, shown, err = PtyCommand(scripted, "run", "hi", *args, **env).finish()
    assert status == 0, (shown, err)
    assert b"Some **bold** words, [bold red]not markup[/]" in shown and b"\x1b[" not in shown


def test_run_prints_plain_text_exactly_as_before_when_piped(scripted: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    environ.update(MONO_AGENT_HOME=str(scripted / "home"), XDG_CONFIG_HOME=str(scripted / "xdg"), TERM="xterm-256color")
    result = subprocess.run([sys.executable, "-m", "monoagent", "run", "hi"], cwd=scripted, env=environ,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("Some **bold** words, [bold red]not markup[/] [link=http://evil.example]x[/link] and")
    assert b"\x1b" not in result.stdout


@needs_pty
def test_chat_on_a_terminal_renders_answers_as_markdown(scripted: Path) -> None:
    chat = PtyCommand(scripted, "chat")
    chat.wait_for(b"you> ")
    chat.send(b"hi\r")
    chat.wait_for(b"two")
    chat.wait_for(b"you> ")
    chat.send(b"/quit\r")
    status, shown, err = chat.finish()
    assert status == 0, (shown, err)
    rendered_as_markdown(shown)


@needs_pty
def test_tool_lines_show_by_default_when_stderr_is_a_terminal(project: Path) -> None:
    (project / "script.toml").write_text(
        '[[steps]]\ntext = "Looking."\ntool_calls = [{ name = "RunHistory", arguments = { action = "search", query = "x" } }]\n\n'
        '[[steps]]\ntext = "Found."\n'
    )
    (project / "monoagent.toml").write_text(
        '[runtime]\nmodel = "offline:scripted"\n[providers.offline]\nscriptPath = "script.toml"\n'
    )
    status, shown, _ = PtyCommand(project, "run", "hi", "--plain", stderr_on_terminal=True).finish()
    assert status == 0, shown
    assert b'Looking.\r\n-> RunHistory(action="search", query="x") ok (' in shown and b"\r\nFound.\r\n" in shown
    status, quiet, _ = PtyCommand(project, "run", "hi", "--plain", "-q", stderr_on_terminal=True).finish()
    assert status == 0 and b"->" not in quiet and quiet.endswith(b"Looking.\r\nFound.\r\n"), quiet
