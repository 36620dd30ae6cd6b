"""``monoagent logs`` (plugin ``logs-cli``): real runs of offline:scripted write real event files and a
real SQLite tool history; the command lists and shows them, and skips hostile files with a warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_isolation import isolate_cli
from click.testing import CliRunner, Result

import monoagent._cli as cli_module
from monoagent._kernel.host import PluginHost

SCRIPT = """
[[steps]]
text = "Let me look."
tool_calls = [{ name = "RunHistory", arguments = { action = "search", query = "token sk-abcdefghijklmnopqrstuvwxyz123456" } }]

[[steps]]
text = "It is noon.\\nSecond line.\\nThird line.\\nFourth line."
"""
FAILING = '[[steps]]\nerror = "the provider is down"\n'



@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    (tmp_path / "script.toml").write_text(SCRIPT)
    (tmp_path / "failing.toml").write_text(FAILING)
    (tmp_path / "monoagent.toml").write_text(
        '[runtime]\nmodel = "offline:scripted"\n[providers.offline]\nscriptPath = "script.toml"\n'
        '[providers.client]\nmaxRetries = 0\n'
    )
    return tmp_path


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    host = PluginHost()
    host.load_entry_points()
    return CliRunner().invoke(cli_module.build_cli(host), list(args), env=env)


def runs(project: Path) -> Path:
    return project / "home" / "artifacts" / "runs"


def run_turns(project: Path) -> list[dict[str, Any]]:
    """Two runs: one with a tool call that completes (conversation tg:1), one that fails (tg:2)."""
    assert invoke("run", "what time is it", "-c", "tg:1").exit_code == 0
    assert invoke("run", "and now", "-c", "tg:2", env={"MONO_AGENT_OFFLINE_SCRIPT": "failing.toml"}).exit_code != 0
    listed = invoke("logs", "--json")
    assert listed.exit_code == 0, listed.output
    return json.loads(listed.stdout)


def test_logs_lists_runs_newest_first_with_status_tokens_and_duration(project: Path) -> None:
    listed = run_turns(project)
    assert [(r["conversation_id"], r["status"]) for r in listed] == [("tg:2", "failed"), ("tg:1", "completed")]
    done = listed[1]
    assert done["model"] == "offline:scripted" and done["tool_calls"] == 1
    assert done["input_tokens"] > 0 and done["output_tokens"] > 0 and done["duration_s"] > 0
    text = invoke("logs").stdout.splitlines()
    assert text[0].split()[2:4] == [listed[0]["run_id"], "failed"] and "'tg:1'" in text[1] and "1 tool(s)" in text[1]


def test_logs_filters_by_conversation_status_and_limit(project: Path) -> None:
    listed = run_turns(project)
    assert [r["run_id"] for r in json.loads(invoke("logs", "--json", "--status", "failed").stdout)] == [listed[0]["run_id"]]
    assert [r["conversation_id"] for r in json.loads(invoke("logs", "--json", "-c", "tg:1").stdout)] == ["tg:1"]
    assert len(json.loads(invoke("logs", "--json", "--limit", "1").stdout)) == 1
    assert "match the filters" in invoke("logs", "--status", "cancelled").stdout
    bad = invoke("logs", "--status", "exploded")
    assert bad.exit_code == 2 and "'exploded' is not one of" in bad.output and "refused" in bad.output


def test_one_run_is_a_timeline_with_sections_tool_call_arguments_and_the_answer(project: Path) -> None:
    completed = run_turns(project)[1]["run_id"]
    shown = invoke("logs", completed)
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert out.startswith(f"run {completed}  completed  'tg:1'  offline:scripted")
    assert "section core_guardrails (stable):" in out and "compaction not needed" in out
    call = next(line for line in out.splitlines() if "tool call RunHistory" in line)
    assert '"action":"search"' in call and "[REDACTED" in call and "sk-abcdef" not in out, "arguments come redacted from the tool history"
    assert "tool result RunHistory [call_1_1]: success," in out
    answer = [line.strip() for line in out.splitlines() if line.strip().startswith("|")]
    assert answer == ["| Let me look.", "| It is noon.", "| Second line."], "each step's text on a line of its own"
    assert "Third line" not in out and "2 more line(s)" in out
    assert all(line.startswith(("+", " ", "run ")) for line in out.splitlines())
    data = json.loads(invoke("logs", completed, "--json").stdout)
    assert data["run"]["status"] == "completed" and data["events"][0]["offset_ms"] == 0
    tool_call = next(e for e in data["events"] if e["type"] == "tool_call")
    assert '"action":"search"' in tool_call["data"]["arguments"]


def test_a_failed_run_shows_its_error(project: Path) -> None:
    failed = run_turns(project)[0]["run_id"]
    out = invoke("logs", failed).stdout
    assert "failed: settlement" in out and "the provider is down" in out


def test_an_unknown_or_malformed_run_id_is_a_clear_error(project: Path) -> None:
    run_turns(project)
    for run_id in ("0" * 22, "../../etc/passwd"):
        result = invoke("logs", run_id)
        assert result.exit_code == 1 and f"no readable run {run_id!r}" in result.output and "22 hex digits" in result.output


def test_hostile_run_files_are_skipped_with_a_warning_naming_them(project: Path) -> None:
    listed = run_turns(project)
    directory = runs(project)
    good = directory / f"{listed[1]['run_id']}.jsonl"
    with good.open("a") as handle:  # a truncated line and a huge line in a real file: left out, the rest shown
        handle.write('{"type": "run_text", "run_id": \n' + '{"x": "' + "y" * (2 * 1024 * 1024) + '"}\n')
    (directory / "notes.txt").write_text("planted")
    (directory / ("f" * 22 + ".jsonl")).symlink_to(good)
    open_to_all = directory / ("e" * 22 + ".jsonl")
    open_to_all.write_text(good.read_text().splitlines()[0] + "\n")
    open_to_all.chmod(0o644)
    first_line_too_long = directory / ("d" * 22 + ".jsonl")
    first_line_too_long.write_text("z" * 100_000)
    first_line_too_long.chmod(0o600)
    result = invoke("logs")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 2, "only the writer's two runs are listed"
    warning = result.stderr
    assert "monoagent: warning:" in warning and "2 line(s) left out" in warning
    for name in ("notes.txt", "f" * 22 + ".jsonl", "e" * 22 + ".jsonl", "d" * 22 + ".jsonl", good.name):
        assert repr(name) in warning
    shown = invoke("logs", listed[1]["run_id"])
    assert shown.exit_code == 0 and "It is noon." in shown.stdout and good.name in shown.stderr


def test_a_runs_directory_open_to_others_is_refused(project: Path) -> None:
    run_turns(project)
    runs(project).chmod(0o755)
    result = invoke("logs")
    assert result.exit_code == 1 and "the run files cannot be read" in result.output


def test_no_runs_yet(project: Path) -> None:
    result = invoke("logs")
    assert result.exit_code == 0 and "no runs recorded in" in result.stdout
    assert json.loads(invoke("logs", "--json").stdout) == []


# ---------------------------------------------------------------------------- history show --tools


def test_history_show_tools_interleaves_each_runs_calls_before_its_answer(project: Path) -> None:
    for text in ("first question", "second question"):
        assert invoke("run", text, "-c", "tg:1").exit_code == 0
    data = json.loads(invoke("history", "show", "tg:1", "--tools", "--json").stdout)
    items = data[0]["items"]
    kinds = [next(iter(item)) for item in items]
    assert kinds == ["message", "tool_call", "message", "message", "tool_call", "message"]
    first, second = items[1]["tool_call"], items[4]["tool_call"]
    assert items[0]["message"]["content"] == "first question" and items[3]["message"]["content"] == "second question"
    assert first["run_id"] != second["run_id"] and first["tool"] == "RunHistory" and first["status"] == "success"
    assert "[REDACTED" in first["arguments"] and first["result"].startswith("Untrusted run records")
    assert [m["role"] for m in data[0]["messages"]] == ["user", "assistant", "user", "assistant"], "messages stay as they were"
    text = invoke("history", "show", "tg:1", "--tools").stdout
    assert "=== tg:1 (4 messages, 2 tool calls) ===" in text
    assert text.index("first question") < text.index("--- tool call RunHistory [call_1_1]") < text.index("--- assistant ---")
    assert 'arguments (' in text and "result (" in text and "sk-abcdef" not in text
    plain = invoke("history", "show", "tg:1").stdout
    assert "tool call" not in plain and "=== tg:1 (4 messages) ===" in plain


def test_history_show_tools_without_tool_history_shows_the_messages(project: Path) -> None:
    assert invoke("run", "first question", "-c", "tg:1").exit_code == 0
    with (project / "monoagent.toml").open("a") as handle:
        handle.write('[toolHistory]\nstore = "none"\n')
    result = invoke("history", "show", "tg:1", "--tools")
    assert result.exit_code == 0 and "(2 messages, 0 tool calls)" in result.stdout and "tool call" not in result.stdout.split("===")[-1]


def test_a_channel_event_file_is_listed_as_such_not_as_an_unsettled_run(project: Path) -> None:
    run_turns(project)
    run_id = "0" * 12 + "a" * 10
    line = {"type": "cron_tick_skipped", "run_id": run_id, "conversation_id": "cron:nightly", "seq": 1, "at": 1.0,
            "data": {"job": "nightly", "reason": "overlap", "channel": "cron"}}
    path = runs(project) / f"{run_id}.jsonl"
    path.write_text(json.dumps(line) + "\n")
    path.chmod(0o600)
    listed = json.loads(invoke("logs", "--json", "--status", "channel_event").stdout)
    assert [(r["run_id"], r["conversation_id"]) for r in listed] == [(run_id, "cron:nightly")]
    assert len(json.loads(invoke("logs", "--json", "--status", "unsettled").stdout)) == 0
    assert "cron_tick_skipped:" in invoke("logs", run_id).stdout
