"""``monoagent chat`` as the child of a real pseudo-terminal, for the Ctrl-C and terminal-restoration tests.

A plain module, not a test module: :mod:`test_cancellation` and :mod:`test_terminal_state` share it.
"""

from __future__ import annotations

import time

import pytest
from plugin_sources import SLOW_PROVIDER


class Terminal:
    """``monoagent chat`` (or ``args``) as the child of a real pseudo-terminal (its controlling terminal, so ``\\x03`` is SIGINT)."""

    def __init__(self, tmp_path, args=("chat",), plugin=SLOW_PROVIDER, config='[runtime]\nmodel = "slow:x"\n'):
        import os
        import pty
        import sys
        import termios

        (tmp_path / "plugins").mkdir()
        (tmp_path / "plugins" / "slow_provider.py").write_text(plugin, encoding="utf-8")
        (tmp_path / "monoagent.toml").write_text(config, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
        env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), TERM="xterm")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(tmp_path)
            os.execve(sys.executable, [sys.executable, "-m", "monoagent", "--plugins-dir", "plugins", *args], env)
        self.found = termios.tcgetattr(self.fd)  # the terminal as the chat finds it (the child has not started yet)
        self.output = b""
        self.transcript = b""
        self.status = None

    def read(self, data):
        self.output += data
        self.transcript += data

    def wait_for(self, marker, limit=30.0):  # a bound on failure, not synchronisation
        import os
        import select

        deadline = time.monotonic() + limit
        while marker not in self.output and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self.read(os.read(self.fd, 4096))
                except OSError:
                    break
        assert marker in self.output, f"{marker!r} not seen; the terminal showed {self.transcript!r}"
        self.output = self.output[self.output.index(marker) + len(marker):]  # what follows it is awaited next

    def send(self, data):
        import os

        os.write(self.fd, data)

    def exit_code(self, limit=30.0):
        import os

        deadline = time.monotonic() + limit
        while self.status is None and time.monotonic() < deadline:
            finished, status = os.waitpid(self.pid, os.WNOHANG)
            if finished:
                self.status = os.waitstatus_to_exitcode(status)
                break
            self.wait_for_anything(0.1)
        assert self.status is not None, f"chat still running: {self.transcript!r}"
        return self.status

    def wait_for_anything(self, limit):
        import os
        import select

        if select.select([self.fd], [], [], limit)[0]:
            try:
                self.read(os.read(self.fd, 4096))
            except OSError:
                pass

    def drain(self):
        """Read what the terminal still holds once the chat has ended (its last writes)."""
        import os
        import select

        while select.select([self.fd], [], [], 0)[0]:
            try:
                data = os.read(self.fd, 4096)
            except OSError:  # the child's side is closed and everything was read
                break
            if not data:
                break
            self.read(data)

    def flags(self):
        import termios

        return termios.tcgetattr(self.fd)  # Linux answers for the terminal's slave side

    def close(self):
        import os
        import signal

        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


needs_pty = pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs a pseudo-terminal")
