"""``monoagent chat``: its commands are answered locally, never sent to the model or saved.

Driven through its real input (standard input of the real CLI; a pseudo-terminal where the chat
must see a terminal), checked against the real history files through ``monoagent history``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_isolation import isolate_cli
from click.testing import CliRunner, Result

import monoagent._cli as cli_module
from monoagent._kernel.host import PluginHost


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "offline:echo"\n')
    return tmp_path


def invoke(*args: str, input: str | None = None) -> Result:
    host = PluginHost()
    host.load_entry_points()
    return CliRunner().invoke(cli_module.build_cli(host), list(args), input=input)


def conversations() -> dict[str, list[dict[str, Any]]]:
    listed = invoke("history", "list", "--json")
    assert listed.exit_code == 0, listed.output
    ids = [c["conversation_id"] for c in json.loads(listed.stdout)["message_history"]["conversations"]]
    shown = {}
    for conversation in ids:
        result = invoke("history", "show", conversation, "--json")
        assert result.exit_code == 0, result.output
        shown[conversation] = json.loads(result.stdout)[0]["messages"]
    return shown


def test_help_lists_every_command_with_one_line_each(project: Path) -> None:
    result = invoke("chat", input="/help\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for command in ("/help", "/new", "/reset", "/cancel", "/quit, /exit", "//text"):
        assert sum(line.strip().startswith(command + " ") for line in lines) == 1, (command, result.stdout)
    assert "agent>" not in result.stdout
    assert conversations() == {}, "a command is never sent to the model, nor saved"


def test_an_unknown_command_is_answered_locally_and_never_reaches_the_model_or_history(project: Path) -> None:
    result = invoke("chat", input="hello\n/foo bar\n/etc/passwd\n//etc/hosts please\n")
    assert result.exit_code == 0, result.output
    assert "(unknown command /foo; /help lists them)" in result.stdout
    assert "(unknown command /etc/passwd; /help lists them)" in result.stdout
    assert result.stdout.count("agent> ") == 2
    assert "you said: /etc/hosts please" in result.stdout, "a doubled slash sends one slash"
    contents = [m["content"] for m in conversations()["cli:chat"] if m["role"] == "user"]
    assert contents == ["hello", "/etc/hosts please"]


def test_cancel_at_the_prompt_says_no_turn_is_running(project: Path) -> None:
    result = invoke("chat", input="/cancel\n")
    assert result.exit_code == 0, result.output
    assert "(no turn is running; Ctrl-C cancels a turn while its answer streams)" in result.stdout


def test_new_starts_a_new_conversation_and_keeps_the_old_one(project: Path) -> None:
    result = invoke("chat", "-c", "t 1", input="first\n/new\nsecond\n/new\nthird\n")
    assert result.exit_code == 0, result.output
    assert "history: 0 messages; you said: second" in result.stdout, "the new conversation starts empty"
    assert "(new conversation t 1:" in result.stdout and "monoagent chat -c 't 1' resumes it" in result.stdout
    stored = conversations()
    assert len(stored) == 3 and [m["content"] for m in stored["t 1"] if m["role"] == "user"] == ["first"]
    others = sorted(k for k in stored if k != "t 1")
    assert all(k.startswith("t 1:") for k in others) and len(set(others)) == 2
    assert sorted(m["content"] for k in others for m in stored[k] if m["role"] == "user") == ["second", "third"]


def test_no_start_up_hint_when_input_is_not_a_terminal(project: Path) -> None:
    result = invoke("chat", input="hello\n")
    assert result.exit_code == 0, result.output
    assert "/help for commands" not in result.stderr + result.stdout
