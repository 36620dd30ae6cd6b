"""What ``monoagent run`` prints: steps' text on lines of their own, tool lines on stderr, ``--json`` steps.

Real turns of ``offline:scripted`` (two provider steps with tool calls in between) through the
real CLI, with a real tool history and real redaction.
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

SECRET = "sk-abcdefghijklmnopqrstuvwxyz123456"
SCRIPT = f"""
[[steps]]
text = "Let me look."
tool_calls = [
  {{ name = "RunHistory", arguments = {{ action = "search", query = "token {SECRET} and a tail of words long enough to be elided" }} }},
  {{ name = "no\\u001b]0;owned\\u0007such\\n", arguments = {{ x = 1, nested = {{ deep = [1, 2] }}, items = [1, 2, 3], "k\\ny" = 2 }} }},
]

[[steps]]
text = "It is noon."
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    (tmp_path / "script.toml").write_text(SCRIPT)
    (tmp_path / "monoagent.toml").write_text(
        '[runtime]\nmodel = "offline:scripted"\n[providers.offline]\nscriptPath = "script.toml"\n'
    )
    return tmp_path


def invoke(*args: str) -> Result:
    host = PluginHost()
    host.load_entry_points()
    return CliRunner().invoke(cli_module.build_cli(host), list(args))


def test_two_steps_text_is_never_glued_together(project: Path) -> None:
    result = invoke("run", "what time is it")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Let me look.\nIt is noon.\n"


def test_tool_lines_show_each_call_with_its_outcome_on_stderr_bounded_redacted_and_clean(project: Path) -> None:
    result = invoke("run", "what time is it", "--tool-lines")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Let me look.\nIt is noon.\n", "stdout carries the answer alone"
    lines = [line for line in result.stderr.splitlines() if line.startswith("-> ")]
    assert len(lines) == 2, result.stderr
    first, second = lines
    assert first.startswith('-> RunHistory(action="search", query="token [REDACTED:openai…)')
    assert SECRET not in result.stderr
    assert first.endswith(" bytes)") and " ok (" in first and " ms, " in first
    summary = first[first.index("(") + 1 : first.index(") ok")]
    assert len(summary) <= 80
    assert second.startswith("-> nosuch(items=[3 items], k y=2, nested={…}, x=1) rejected: Tool 'no")
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr and "owned" not in second.split(")")[0]


def test_tool_lines_are_off_when_stderr_is_not_a_terminal_and_quiet_turns_them_off(project: Path) -> None:
    default = invoke("run", "what time is it")
    quiet = invoke("run", "what time is it", "-q")
    assert default.exit_code == quiet.exit_code == 0
    assert "->" not in default.stderr and "->" not in quiet.stderr
    assert quiet.stdout == default.stdout == "Let me look.\nIt is noon.\n"


def test_run_json_carries_each_provider_step_and_keeps_its_keys(project: Path) -> None:
    result = invoke("run", "what time is it", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"run_id", "conversation_id", "text", "model", "status", "usage", "tool_activity", "manifest", "steps",
            "attempt", "notice"} <= set(data)
    assert data["steps"] == 2 and data["text"] == "It is noon."
    steps: list[dict[str, Any]] = data["provider_steps"]
    assert [(s["step"], s["attempt"], s["text"], s["stop_reason"], s["discarded"]) for s in steps] == [
        (1, 1, "Let me look.", "tool_use", False),
        (2, 1, "It is noon.", "end_turn", False),
    ]
    first, second = steps[0]["tool_calls"]
    assert first["name"] == "RunHistory" and first["arguments"]["action"] == "search"
    assert "[REDACTED:openai_key]" in first["arguments"]["query"] and SECRET not in result.stdout
    assert (first["status"], first["is_error"]) == ("success", False) and first["result_bytes"] > 0
    assert (second["status"], second["is_error"], second["arguments"]["items"]) == ("rejected", True, [1, 2, 3])
    assert steps[1]["tool_calls"] == [] and steps[0]["usage"]["output_tokens"] > 0


def test_a_discarded_attempt_is_marked_in_the_json_steps(project: Path) -> None:
    (project / "script.toml").write_text(
        '[[steps]]\ntext = "Looking."\ntool_calls = [{ name = "RunHistory", arguments = { action = "search", query = "x" } }]\n\n'
        '[[steps]]\nerror = "overloaded"\nretryable = true\n\n[[steps]]\ntext = "whole answer"\n'
    )
    (project / "monoagent.toml").write_text(
        (project / "monoagent.toml").read_text() + "[providers.client]\nmaxRetryDelayMs = 0\n"
    )
    result = invoke("run", "hi", "--json")
    assert result.exit_code == 0, result.output
    steps = json.loads(result.stdout)["provider_steps"]
    assert [(s["attempt"], s["step"], s["text"], s["stop_reason"], s["discarded"]) for s in steps] == [
        (1, 1, "Looking.", "tool_use", True),
        (1, 2, "", None, True),
        (2, 2, "whole answer", "end_turn", False),
    ]
    assert steps[1]["usage"] is None and steps[0]["tool_calls"][0]["status"] == "success"
    plain = invoke("run", "hi", "--tool-lines")
    assert plain.exit_code == 0, plain.output
    assert plain.stdout == "Looking.\nwhole answer\n"
    assert "-> RunHistory(" in plain.stderr and "another attempt follows" in plain.stderr


def test_tool_call_events_carry_a_redacted_bounded_arguments_preview_and_failed_results_a_short_error(tmp_path: Path) -> None:
    from monoagent import ProviderRequest, hookimpl, tool
    from monoagent.testing import FunctionProvider, FunctionReply, fresh_agent

    @tool
    def explode(text: str) -> str:
        """Always fails.

        Args:
            text: anything.
        """
        raise ValueError(f"cannot handle {SECRET}\nsecond line")

    class Tools:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            register(explode)

    huge = SECRET + " " + "x" * 20000

    def model(request: ProviderRequest) -> Any:
        if request.step == 1:
            return FunctionReply(text="Trying.", tool_calls=[{"name": "explode", "arguments": {"text": huge}}])
        return "Done."

    agent = fresh_agent(tmp_path, provider=FunctionProvider(model), plugins=[Tools()])
    events: list[Any] = []
    agent.run_sync("go", conversation_id="t", on_event=events.append)
    agent.close()
    call = next(e.data for e in events if e.type == "tool_call")
    result = next(e.data for e in events if e.type == "tool_result")
    assert call["arguments"].startswith('{"text":"[REDACTED:openai_key] xxx') and call["arguments"].endswith("…")
    assert len(call["arguments"]) == 1001 and call["arguments_bytes"] == len(json.dumps({"text": huge}, separators=(",", ":")))
    assert result["status"] == "error" and SECRET not in result["error"] and "second line" not in result["error"]
    assert result["error"].startswith("Tool 'explode' failed: ValueError: cannot handle [REDACTED:openai_key]")
