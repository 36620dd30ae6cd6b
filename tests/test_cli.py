"""The ``monoagent`` command line.

Most commands run in-process through :class:`click.testing.CliRunner` on the root command that
``main()`` would build (``monoagent._cli.build_cli``) on a fresh plugin host.
What only ``main()`` does (exit codes of configuration errors, ``--debug`` tracebacks, plugin
loading before ``--help``) and the end-to-end turn run as a few real subprocesses
(``python -m monoagent``), each with its own working directory and agent home.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path
from typing import Any

import pytest
from cli_isolation import isolate_cli, run_main
from click.testing import CliRunner, Result

import monoagent._cli as cli_module
from monoagent._kernel.config_keys import iter_keys
from monoagent._kernel.host import PluginHost
from monoagent._pipeline.assembly import BOUNDARY

ANNOUNCE = "monoagent: no runtime.model configured; using offline:echo"
BUNDLED = sorted(ep.name for ep in entry_points(group="monoagent") if ep.dist and ep.dist.name == "monoagent")


def clean_environ(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env["MONO_AGENT_HOME"] = str(tmp_path / "home")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # never the developer's user config file
    return env


# ---------------------------------------------------------------------------- in-process


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, a clean environment and a fresh early plugin host."""
    isolate_cli(tmp_path, monkeypatch)
    host = PluginHost()
    host.load_entry_points()
    monkeypatch.setitem(ROOT, "cli", cli_module.build_cli(host))
    return tmp_path


ROOT: dict[str, Any] = {}


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(ROOT["cli"], list(args), input=input)


def runs_dir(root: Path) -> Path:
    return root / "home" / "artifacts" / "runs"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_run_streams_the_answer_and_model_option_skips_the_announcement(project: Path) -> None:
    result = invoke("run", "hello", "-m", "offline:echo")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith("history: 0 messages; you said: hello")
    assert result.stderr == ""


def test_run_proactive_is_isolated_with_isolate_proactive_and_commits_nothing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert invoke("run", "hello").exit_code == 0
    history = snapshot(project / "home" / "history")
    monkeypatch.setenv("MONO_AGENT_SESSION_ISOLATE_PROACTIVE", "true")
    result = invoke("run", "--proactive", "--json", "heartbeat")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"].endswith("you said: heartbeat")
    assert snapshot(project / "home" / "history") == history  # nothing committed
    monkeypatch.delenv("MONO_AGENT_SESSION_ISOLATE_PROACTIVE")
    assert invoke("run", "--proactive", "heartbeat").exit_code == 0
    assert snapshot(project / "home" / "history") != history  # without the key it is an ordinary turn


def test_prompt_shows_the_boundary_only_with_a_dynamic_part(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONO_AGENT_SESSION_MODE", "per-message")  # history in the system prompt, after the boundary
    before = invoke("prompt", "first")
    assert before.exit_code == 0, before.output
    assert f"\n{BOUNDARY}\n# Runtime facts" in before.stdout  # the only dynamic part of a first turn
    for heading in ("=== system prompt ===", "=== messages ===", "=== manifest ==="):
        assert heading in before.stdout
    assert "--- user ---\nfirst\n" in before.stdout

    assert invoke("run", "hello").exit_code == 0
    after = invoke("prompt", "second")
    assert after.exit_code == 0, after.output
    system = after.stdout.split("=== system prompt ===\n", 1)[1].split("=== messages ===", 1)[0]
    assert f"\n{BOUNDARY}\n" in system
    stable, dynamic = system.split(f"\n{BOUNDARY}\n")
    assert "# Conversation history" in dynamic and "User: hello" in dynamic
    assert "# Conversation history" not in stable
    manifest = json.loads(after.stdout.split("=== manifest ===\n", 1)[1])
    assert manifest["history_messages"] == 2
    assert [s["id"] for s in manifest["sections"] if s["part"] == "dynamic"] == ["conversation_history", "extra_system"]


def test_prompt_json_calls_no_provider_and_commits_nothing(project: Path) -> None:
    assert invoke("run", "hello").exit_code == 0
    history, runs = snapshot(project / "home" / "history"), snapshot(runs_dir(project))
    result = invoke("prompt", "--json", "what now?")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"stable", "dynamic", "boundary", "messages", "manifest", "tools", "hidden_tools"}
    assert [t["name"] for t in data["tools"]] == ["RunHistory", "SessionHistory"] and data["hidden_tools"] == []
    assert data["boundary"] == BOUNDARY
    assert data["stable"].startswith("# Core guardrails")
    assert data["dynamic"] == ""  # continuous mode: history goes as leading messages, not system text
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "user"] and data["messages"][0]["content"] == "hello"
    last = data["messages"][-1]
    assert last["role"] == "user" and last["content"].endswith("\n\nwhat now?")
    assert last["content"].startswith("# Runtime facts")  # continuous mode: the dynamic sections lead the current message
    assert data["manifest"]["history_messages"] == 2
    assert snapshot(project / "home" / "history") == history
    assert snapshot(runs_dir(project)) == runs


def test_plugins_lists_the_bundled_plugins(project: Path) -> None:
    core = {"artifacts", "compaction", "console", "conversation", "files", "guardrails", "identity",
            "offline", "redaction", "session", "skills", "tokens"}
    assert core <= set(BUNDLED)
    result = invoke("plugins", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout) if row["source"] == "bundled"}
    assert sorted(rows) == BUNDLED
    for row in rows.values():
        assert row["status"] == "active" and row["reason"] is None
        assert row["version"] == version("monoagent")
        assert row["hooks"] and all(isinstance(h, str) for h in row["hooks"])
    assert "register_providers" in rows["offline"]["hooks"]

    text = invoke("plugins")
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    for name in BUNDLED:
        (line,) = [line for line in lines if line.startswith(f"{name} ")]
        assert "bundled" in line and "active" in line and version("monoagent") in line
    assert sum(line.strip().startswith("hooks: ") for line in lines) >= len(BUNDLED)


def test_config_init_writes_and_refuses_to_overwrite(project: Path) -> None:
    result = invoke("config", "init")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "wrote monoagent.toml"
    target = project / "monoagent.toml"
    text = target.read_text(encoding="utf-8")
    assert "[providers.offline]" in text and "MONO_AGENT_OFFLINE_SCRIPT" in text

    target.write_text("# mine\n", encoding="utf-8")
    again = invoke("config", "init")
    assert again.exit_code == 1
    assert "monoagent.toml exists; use --force to overwrite it" in again.stderr
    assert target.read_text(encoding="utf-8") == "# mine\n"

    forced = invoke("config", "init", "--force")
    assert forced.exit_code == 0, forced.output
    assert target.read_text(encoding="utf-8") == text

    valid = invoke("config", "validate")
    assert valid.exit_code == 0, valid.output
    assert valid.stdout.strip() == f"configuration is valid ({target})"


def test_config_show_prints_every_key_with_its_source(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = project / "monoagent.toml"
    file.write_text('[runtime]\nmaxTurns = 3\n[runtime.session]\nmode = "continuous"\n', encoding="utf-8")
    monkeypatch.setenv("MONO_AGENT_SESSION_MODE", "per-message")
    result = invoke("config", "show")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"# config file: {file}"
    assert f"runtime.maxTurns = 3  # file {file}" in lines
    assert 'runtime.session.mode = "per-message"  # env MONO_AGENT_SESSION_MODE' in lines
    assert "concurrency.maxConcurrentRuns = 4  # default" in lines
    assert "providers.anthropic.apiKey = null  # default" in lines  # an unset secret is not eaten by redaction
    assert f'context.home = {json.dumps(str(project / "home"))}  # env MONO_AGENT_HOME' in lines
    shown = {line.split(" = ", 1)[0] for line in lines[1:]}
    assert {key.path for key in iter_keys()} | {"providers.offline.scriptPath"} <= shown

    as_json = invoke("config", "show", "--json")
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert {key.path for key in iter_keys()} <= set(data)
    assert data["runtime.maxTurns"] == {"value": 3, "source": f"file {file}"}
    assert data["runtime.session.mode"] == {"value": "per-message", "source": "env MONO_AGENT_SESSION_MODE"}
    assert data["runtime.model"] == {"value": None, "source": "default"}
    assert data["providers.offline.scriptPath"] == {"value": None, "source": "default"}


def test_chat_reads_lines_until_end_of_input(project: Path) -> None:
    result = invoke("chat", input="hello\n/reset\nagain\n")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.count("agent> ") == 2
    assert "history: 0 messages; you said: hello" in out
    assert "(history of cli:chat cleared: 2 messages, 0 tool calls)" in out
    assert "history: 0 messages; you said: again" in out
    assert out.index("you said: hello") < out.index("cleared") < out.index("you said: again")
    assert result.stderr.count(ANNOUNCE) == 1


# ---------------------------------------------------------------------------- subprocesses


def monoagent(cwd: Path, *args: str, input: str | None = None, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monoagent", *args],
        cwd=cwd,
        env={**clean_environ(cwd), **extra_env},
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_run_end_to_end(tmp_path: Path) -> None:
    first = monoagent(tmp_path, "run", "hello")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().endswith("history: 0 messages; you said: hello")
    assert first.stderr.splitlines() == [
        f"{ANNOUNCE} (set runtime.model in monoagent.toml or MONO_AGENT_MODEL)"
    ]

    second = monoagent(tmp_path, "run", "--json", "again")
    assert second.returncode == 0, second.stderr
    result: dict[str, Any] = json.loads(second.stdout)
    assert "history: 2 messages; you said: again" in result["text"]
    assert result["model"] == "offline:echo"
    assert result["run_id"] and result["conversation_id"] == "cli:default"
    assert result["status"] == "completed"

    run_file = tmp_path / "home" / "artifacts" / "runs" / f"{result['run_id']}.jsonl"
    assert stat.S_IMODE(run_file.stat().st_mode) == 0o600
    types = [json.loads(line)["type"] for line in run_file.read_text(encoding="utf-8").splitlines()]
    assert "prompt_manifest" in types and "text_delta" not in types
    assert types[0] == "run_started" and types[-1] == "run_completed"

    piped = monoagent(tmp_path, "run", "-", input="from stdin\n")
    assert piped.returncode == 0, piped.stderr
    assert "history: 4 messages; you said: from stdin" in piped.stdout

    (tmp_path / "model.toml").write_text('[runtime]\nmodel = "offline:echo"\n', encoding="utf-8")
    configured = monoagent(tmp_path, "--config", "model.toml", "run", "quiet")
    assert configured.returncode == 0, configured.stderr
    assert configured.stderr == ""
    assert "you said: quiet" in configured.stdout


def test_configuration_errors_end_to_end(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[runtime]\nmaxTurns = 101\nmodle = "x:y"\n', encoding="utf-8")
    invalid = monoagent(tmp_path, "--config", "bad.toml", "config", "validate")
    assert invalid.returncode == 2
    assert invalid.stdout == ""
    assert invalid.stderr.splitlines() == [
        "monoagent: error: invalid configuration:",
        f"  - runtime.maxTurns = 101 (from file {bad}): out of range; allowed: 0 (unlimited) or 1 to 100",
        f"  - runtime.modle: unknown key (in file {bad}); did you mean 'model'? "
        "(known keys here: model, maxTurns, fallbacks, runTimeoutMs, maxRepeatedToolCalls, maxContinuations, session, compaction)",
    ]

    (tmp_path / "broken.toml").write_text("[runtime\n", encoding="utf-8")
    for broken in ("bad.toml", "broken.toml"):
        helped = monoagent(tmp_path, "--config", broken, "--help")
        assert helped.returncode == 0, helped.stderr
        assert "Usage: monoagent" in helped.stdout and "config" in helped.stdout
    syntax = monoagent(tmp_path, "--config", "broken.toml", "config", "validate")
    assert syntax.returncode == 2 and syntax.stdout == ""
    assert f"{tmp_path / 'broken.toml'}: not valid TOML" in syntax.stderr

    (tmp_path / "nope.toml").write_text('[runtime]\nmodel = "nope:x"\n', encoding="utf-8")
    unknown = monoagent(tmp_path, "--config", "nope.toml", "config", "validate")
    assert unknown.returncode == 2
    assert unknown.stdout == ""
    (first, line) = unknown.stderr.splitlines()
    assert first == "monoagent: error: invalid configuration:"
    assert line.startswith("  - model 'nope:x' names the provider prefix 'nope', which no active plugin registers")
    assert "registered provider prefixes: anthropic, lmstudio, offline, ollama, openai" in line

    plain = monoagent(tmp_path, "--config", "nope.toml", "run", "hi")
    assert plain.returncode == 2
    assert "Traceback" not in plain.stderr
    assert plain.stderr.splitlines() == [first, line]

    debug = monoagent(tmp_path, "--debug", "--config", "nope.toml", "run", "hi")
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert "monoagent._kernel.errors.ConfigError: invalid configuration:" in debug.stderr
    assert debug.stderr.rstrip("\n").endswith(line)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pseudo-terminal")
def test_ctrl_c_at_the_chat_prompt_ends_the_chat_at_once(tmp_path: Path) -> None:
    """Ctrl-C while ``chat`` waits for a line ends it; it used to hang until the next Enter."""
    import pty
    import select
    import signal
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: `monoagent chat` on the terminal
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-m", "monoagent", "chat"], clean_environ(tmp_path))
    output = b""
    exited: list[int] = []

    def wait_for(done: Any, limit: float = 30.0) -> bool:  # a bound on failure, not synchronisation
        nonlocal output
        deadline = time.monotonic() + limit
        while not done() and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    output += os.read(fd, 4096)
                except OSError:  # the terminal closed: the child is exiting, collect its status
                    exited.append(os.waitpid(pid, 0)[1])
                    break
        return done()

    def child_exited() -> bool:
        if not exited:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                exited.append(status)
        return bool(exited)

    try:
        assert wait_for(lambda: b"you> " in output), output
        os.write(fd, b"\x03")  # the terminal turns it into SIGINT
        assert wait_for(child_exited, 10.0), f"chat still running after Ctrl-C: {output!r}"
        assert os.waitstatus_to_exitcode(exited[0]) == 130
    finally:
        if not exited:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def test_early_load_forgets_the_config_error_of_an_earlier_call(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "bad.toml").write_text("[plugins]\nblock = 3\n", encoding="utf-8")
    _, error = cli_module.load_plugins("bad.toml", [])
    assert error is not None
    _, error = cli_module.load_plugins(None, [])
    assert error is None


HELLO_COMMAND = """
import click
from monoagent import hookimpl

@hookimpl
def register_commands(cli):
    @cli.command(name="hello-local")
    def hello():
        click.echo("hello from a local plugin")
"""



def test_plugin_commands_do_not_outlive_a_main_call(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = project / "extra"
    extra.mkdir()
    (extra / "hello_cmd.py").write_text(HELLO_COMMAND, encoding="utf-8")
    assert run_main("--plugins-dir", str(extra), "hello-local") == 0
    assert capsys.readouterr().out == "hello from a local plugin\n"
    assert run_main("hello-local") == 2, "without --plugins-dir the plugin, and its command, are gone"
    assert "No such command 'hello-local'" in capsys.readouterr().err

    assert run_main("history", "--help") == 0
    (project / "monoagent.toml").write_text('[plugins]\nblock = ["history-cli"]\n', encoding="utf-8")
    capsys.readouterr()
    assert run_main("history", "--help") == 2, "a blocked plugin's command is gone on the next call"
    assert "No such command 'history'" in capsys.readouterr().err
    assert "history" not in cli_module.cli.commands and "hello-local" not in cli_module.cli.commands


def test_loading_the_plugins_registers_everything_without_importing_the_backends(tmp_path: Path) -> None:
    """Registries run when plugins load, on every command line: registering a component or a
    tool must not import what it is built from (the SQLite stores, HTTP clients, numpy)."""
    code = (
        "import sys, monoagent._cli as cli\n"
        "host, _ = cli.load_plugins(None, [])\n"
        "cli.build_cli(host)\n"
        "assert host.tools() and host.registered(__import__('monoagent._kernel.components', fromlist=['x']).TOOL_HISTORY_STORES), 'nothing registered'\n"
        "heavy = ('sqlite3', 'httpx', 'numpy', 'monoagent_plugins.history.tool_calls.store', 'docstring_parser', 'cronsim', 'mcp', 'monoagent_plugins.tools.mcp_servers', 'rich')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=clean_environ(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
