"""``monoagent tools``: what a turn offers at its start, holds back or leaves out (and why), and each tool's schema.

In-process through ``monoagent._cli.main`` (as the console script runs it), with a local plugin
(``--plugins-dir``) whose tools land in each state: offered, hidden by a tool domain, withdrawn by
its own ``enabled=``, withdrawn by another plugin's ``filter_tools``. What the listing says is
checked against ``monoagent prompt --json``, which carries the tools the first provider round is
offered, and against a real turn's provider request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_isolation import isolate_cli, run_main

PLUGIN = '''
from typing import Annotated

from annotated_types import Ge

from monoagent import ToolSpec, hookimpl, tool


@tool(categories=["pure"])
def add(a: int, b: Annotated[int, Ge(0)] = 1) -> int:
    """Add two integers."""
    return a + b


@tool(domain="billing")
def invoice(customer: str) -> str:
    """Draft an invoice."""
    return "drafted"


def only_when_asked(turn):
    """lab_probe is offered on turns of the probe channel."""
    return turn.request.channel == "probe"


@tool
def lab_probe() -> str:
    """Probe the lab."""
    return "probed"


@tool
def shell_like(command: str) -> str:
    """Run something."""
    return "ran"


@hookimpl
def register_tools(register):
    register(add)
    register(invoice)
    register(lab_probe, enabled=only_when_asked)
    register(shell_like)


@hookimpl
def filter_tools(turn, tools):
    return [spec for spec in tools if spec.name != "shell_like"]
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "lab_tools.py").write_text(PLUGIN, encoding="utf-8")
    return tmp_path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_main("--plugins-dir", "lab", *args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_each_tool_is_listed_as_offered_hidden_or_inactive_with_why(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "tools", "--json")
    assert code == 0, err
    rows = {row["name"]: row for row in json.loads(out)["tools"]}
    assert (rows["add"]["status"], rows["add"]["why"], rows["add"]["source"]) == ("offered", "", "lab_tools")
    assert rows["invoice"]["status"] == "hidden" and rows["invoice"]["domain"] == "billing"
    assert rows["invoice"]["why"] == "tool domain 'billing', hidden by plugin 'tool-domains' until it is revealed (request_tools)"
    assert rows["lab_probe"] == {**rows["lab_probe"], "status": "inactive",
                                 "why": "enabled= of plugin 'lab_tools' is false on this turn: lab_probe is offered on turns of the probe channel."}
    assert (rows["shell_like"]["status"], rows["shell_like"]["why"]) == ("inactive", "withdrawn by filter_tools of plugin 'lab_tools'")
    # the bundled tools no turn offers without their configuration are said to be inactive, with the condition
    assert rows["MemoryJournal"]["status"] == "inactive" and "memory.tiers has a journal tier" in rows["MemoryJournal"]["why"]
    assert rows["read_skill"]["status"] == "inactive" and "skillsMode is on_demand" in rows["read_skill"]["why"]
    assert rows["request_tools"]["status"] == "offered"  # something (invoice) is hidden, so request_tools is offered

    code, out, _ = cli(capsys, "tools")
    lines = out.splitlines()
    (add_line,) = [line for line in lines if line.startswith("add ")]
    assert add_line.split()[:3] == ["add", "lab_tools", "offered"] and add_line.endswith("Add two integers.")
    probe_at = next(i for i, line in enumerate(lines) if line.startswith("lab_probe "))
    assert lines[probe_at].split()[2] == "inactive"
    assert lines[probe_at + 1].strip() == "(enabled= of plugin 'lab_tools' is false on this turn: lab_probe is offered on turns of the probe channel.)"

    code, out, _ = cli(capsys, "tools", "invoice")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["invoice", "lab_tools", "hidden"] and len(out.splitlines()) == 2


def test_the_listing_is_what_the_first_provider_round_is_offered(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "tools", "--json")
    assert code == 0, err
    listing = json.loads(out)["tools"]
    code, out, err = cli(capsys, "prompt", "--json", "hello")
    assert code == 0, err
    prompt = json.loads(out)
    assert [t["name"] for t in prompt["tools"]] == [row["name"] for row in listing if row["status"] == "offered"]
    assert prompt["hidden_tools"] == [{"name": row["name"], "domain": row["domain"]} for row in listing if row["status"] == "hidden"]
    add = next(t for t in prompt["tools"] if t["name"] == "add")
    assert add == {"name": "add", "description": "Add two integers.", "input_schema": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0, "default": 1}},
        "required": ["a"], "additionalProperties": False}}


def test_schema_prints_the_json_schema_exactly_as_offered(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "prompt", "--json", "hello")
    offered = {t["name"]: t["input_schema"] for t in json.loads(out)["tools"]}
    code, out, err = cli(capsys, "tools", "--schema", "add")
    assert code == 0, err
    assert json.loads(out) == offered["add"]
    code, out, err = cli(capsys, "tools", "--schema")
    schemas = json.loads(out)
    assert {name: schemas[name] for name in offered} == offered and "invoice" in schemas and "lab_probe" in schemas
    code, out, err = cli(capsys, "tools", "--schema", "nope")
    assert code == 2 and "no tool is called 'nope'; the tools are: " in err and "add" in err


def test_a_real_turn_offers_what_the_listing_says(tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from monoagent import hookimpl
    from monoagent.testing import scripted_agent

    code, out, err = cli(capsys, "tools", "--json")
    assert code == 0, err
    offered = [row["name"] for row in json.loads(out)["tools"] if row["status"] == "offered"]
    sent: list[list[str]] = []

    class Seen:
        @hookimpl
        def prepare_provider_request(self, turn: Any, request: Any) -> None:
            sent.append([spec.name for spec in request.tools])

    (tmp_path / "turn").mkdir()
    agent = scripted_agent(tmp_path / "turn", [{"text": "done"}], plugins=[Seen()], plugins_dirs=[project / "lab"])
    agent.run_sync("hello", conversation_id="cli:default", channel="cli")
    assert sent == [offered]
