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

    def __init__(self, cwd: Path, *args: str, **env: str) -> None:
        master, slave = os.openpty()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_") and k not in ("NO_COLOR", "TERM")}
        environ.update(MONO_AGENT_HOME=str(cwd / "home"), XDG_CONFIG_HOME=str(cwd / "xdg"), TERM="xterm-256color",
                       COLUMNS="100", LINES="40", **env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "monoagent.cli", *args], cwd=cwd, env=environ, stdin=slave, stdout=slave,
            stderr=subprocess.PIPE, start_new_session=True,
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
