"""``permissions.profile = "ask"`` from the command line: ``monoagent chat`` on a real pseudo-terminal (the
person answers y, n and a) and ``monoagent run``, which has nobody to ask."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from test_cancellation import Terminal, needs_pty

NOTE_TOOL = '''
from pathlib import Path

from monoagent import hookimpl, tool


@tool(categories=["file_write"])
def write_note(text: str) -> str:
    """Append a line to notes.txt."""
    with Path("notes.txt").open("a", encoding="utf-8") as notes:
        notes.write(text + "\\n")
    return "written"


@hookimpl
def register_tools(register):
    register(write_note)
'''


def note_step(text: str) -> list[dict]:
    return [{"tool_calls": [{"name": "write_note", "arguments": {"text": text}}]}, {"text": f"done {text[:5]}"}]


ASK_CONFIG = ('[runtime]\nmodel = "offline:scripted"\n[providers.offline]\nscriptPath = "script.json"\n'
              '[permissions]\nprofile = "ask"\n')


def test_monoagent_run_has_nobody_to_ask_and_refuses(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "note_tool.py").write_text(NOTE_TOOL, encoding="utf-8")
    (tmp_path / "script.json").write_text(json.dumps({"steps": note_step("one")}), encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text(ASK_CONFIG, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    result = subprocess.run([sys.executable, "-m", "monoagent", "--plugins-dir", "plugins", "run", "go"], cwd=tmp_path,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "done one" in result.stdout and "allow write_note" not in result.stdout + result.stderr
    assert not (tmp_path / "notes.txt").exists()


@needs_pty
def test_ask_in_chat_prompts_the_person_for_y_n_and_a(tmp_path):
    steps = [*note_step("one\x1b[31m"), *note_step("two"), *note_step("three"), *note_step("four")]
    (tmp_path / "script.json").write_text(json.dumps({"steps": steps}), encoding="utf-8")
    terminal = Terminal(tmp_path, plugin=NOTE_TOOL, config=ASK_CONFIG)
    try:
        terminal.wait_for(b"you> ")
        terminal.send(b"first\r")
        terminal.wait_for(b"allow write_note (file_write) text='one")
        question = terminal.output[: terminal.output.index(b"[y/n/a]")]
        assert b"\x1b[31m" not in question, "model text reaches the terminal without its control characters"
        terminal.wait_for(b"[y/n/a] ")
        terminal.send(b"y\r")
        terminal.wait_for(b"done one")
        terminal.wait_for(b"you> ")
        terminal.send(b"second\r")
        terminal.wait_for(b"allow write_note (file_write) text='two'? [y/n/a] ")
        terminal.send(b"maybe\r")
        terminal.wait_for(b"answer y (allow once), n (refuse) or a")
        terminal.send(b"n\r")
        terminal.wait_for(b"done two")
        terminal.wait_for(b"you> ")
        terminal.send(b"third\r")
        terminal.wait_for(b"allow write_note (file_write) text='three'? [y/n/a] ")
        terminal.send(b"a\r")
        terminal.wait_for(b"done three")
        terminal.wait_for(b"you> ")
        terminal.send(b"fourth\r")
        terminal.wait_for(b"done four")
        assert b"allow write_note" not in terminal.transcript.split(b"fourth")[-1], "'a' is remembered for the chat"
        terminal.wait_for(b"you> ")
        terminal.send(b"/exit\r")
        assert terminal.exit_code() == 0
    finally:
        terminal.close()
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8").splitlines() == ["one\x1b[31m", "three", "four"]
    decisions = [json.loads(line)["data"] for path in (tmp_path / "home").rglob("*.jsonl") for line in path.read_text().splitlines()
                 if json.loads(line).get("type") == "permission_decision"]
    assert sorted((d["decision"], d["by"]) for d in decisions) == [
        ("asked-allowed", "person"), ("asked-allowed", "person"), ("asked-allowed", "remembered"), ("asked-denied", "person"),
    ]
