"""Helpers for the ``monoagent serve`` tests: the server as a real subprocess on 127.0.0.1, and requests to it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from asyncio_leaks import NEVER_RETRIEVED
from plugin_sources import SLOW_PROVIDER, TOOL_CALLER
from waiting import wait_until

TOKEN = "test-token-1"



def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_"))}
    env.update({"MONO_AGENT_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
                "MONO_AGENT_OPENAI_API_ENABLED": "1", "MONO_AGENT_OPENAI_API_TOKENS": f"other-token,{TOKEN}",
                "MONO_AGENT_SERVE_PORT": "0"}, **extra)
    return env


class Server:
    """``monoagent <args> serve <serve_args>`` as a child process; ``url`` once it printed where it listens.

    Its standard error (the log: an access line per request) is read as it comes, so a test that
    sends many requests never blocks the server on a full pipe; :meth:`log` returns it once the
    process has ended.
    """

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None, serve_args: tuple[str, ...] = ()) -> None:
        self.cwd = tmp_path
        self.process = subprocess.Popen([sys.executable, "-m", "monoagent", *args, "serve", *serve_args], cwd=tmp_path,
                                        env=env or serve_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._log: list[str] = []
        self._drain = threading.Thread(target=self._log.extend, args=(self.process.stderr,), daemon=True)
        self._drain.start()
        line = self.process.stdout.readline()  # blocks until the server listens, or the process ends
        found = re.search(r"listening on (http://\S+)", line)
        if found is None:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"serve did not start: {line!r} {self.log()}")
        self.url = found.group(1)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def lines_so_far(self) -> list[str]:
        """The lines the server has written to standard error so far (the reader thread appends them as they come)."""
        return list(self._log)

    def log(self) -> str:
        """Everything the server wrote to standard error; call it once the process has ended."""
        self._drain.join(timeout=30)
        return "".join(self._log)

    def terminate(self) -> int:
        """SIGTERM, and the exit code once the server ended; an asyncio exception never retrieved in its log fails the test."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        finally:
            self.client.close()
        assert NEVER_RETRIEVED not in self.log(), self.log()  # the suite's own check (asyncio_leaks) for the server's process
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.client.close()


def serve_once(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``monoagent <args>`` run to its end (a refused start-up, ``serve --check``): its exit code and output."""
    return subprocess.run([sys.executable, "-m", "monoagent", *args], cwd=tmp_path, env=env or serve_env(tmp_path),
                          capture_output=True, text=True, timeout=60)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def completion(text: str, **extra) -> dict:
    """A chat completion body without ``model`` (which, when sent, must be the served agent's model id)."""
    return {"messages": [{"role": "system", "content": "ignored"}, {"role": "user", "content": text}], **extra}


def slow_server(tmp_path: Path, **env: str) -> Server:
    """A server whose model answers a message containing "slow" only when cancelled (it writes ``turn-started`` first)."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow_provider.py").write_text(SLOW_PROVIDER, encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "slow:x"\n', encoding="utf-8")
    return Server(tmp_path, "--plugins-dir", "plugins", env=serve_env(tmp_path, **env))


def rule_server(tmp_path: Path, rule: str | None = None, *, toml: str = "") -> Server:
    """A server whose openai-api channel takes the conversation rule ``rule`` (``openaiApi.conversations``; None: its
    default), with ``toml`` as its project configuration when given."""
    if toml:
        (tmp_path / "monoagent.toml").write_text(toml, encoding="utf-8")
    extra = {} if rule is None else {"MONO_AGENT_OPENAI_API_CONVERSATIONS": rule}
    return Server(tmp_path, env=serve_env(tmp_path, **extra))


def tool_caller_server(tmp_path: Path, **env: str) -> Server:
    """A server whose model (``caller:x``, :data:`plugin_sources.TOOL_CALLER`) calls the tools a message names
    ("call get_weather") and then answers with the results it was sent; the agent has one tool, ``clock``."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "tool_caller.py").write_text(TOOL_CALLER, encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "caller:x"\n', encoding="utf-8")
    return Server(tmp_path, "--plugins-dir", "plugins", env=serve_env(tmp_path, **env))


def ask_in_background(server: Server, text: str, conversation: str) -> tuple[threading.Thread, list[object]]:
    answers: list[object] = []

    def ask() -> None:
        try:
            answers.append(server.client.post("/v1/chat/completions", json=completion(text),
                                              headers={**auth(), "X-Conversation-Id": conversation}))
        except httpx.HTTPError as exc:
            answers.append(exc)

    client = threading.Thread(target=ask)
    client.start()
    wait_until((server.cwd / "turn-started").exists, "the provider to write turn-started (the turn is in flight)")
    return client, answers


def stored(server: Server) -> str:
    """What ``monoagent history list`` shows of ``server``'s history directory (with its project's plugins, if any)."""
    plugins = ["--plugins-dir", "plugins"] if (server.cwd / "plugins").is_dir() else []
    listed = subprocess.run([sys.executable, "-m", "monoagent", *plugins, "history", "list"], cwd=server.cwd,
                            env=serve_env(server.cwd), capture_output=True, text=True, timeout=60)
    return listed.stdout + listed.stderr


def history(tmp_path: Path, conversation: str) -> str:
    plugins = ["--plugins-dir", "plugins"] if (tmp_path / "plugins").is_dir() else []
    shown = subprocess.run([sys.executable, "-m", "monoagent", *plugins, "history", "show", conversation],
                           cwd=tmp_path, env=serve_env(tmp_path), capture_output=True, text=True, timeout=60)
    return shown.stdout + shown.stderr
