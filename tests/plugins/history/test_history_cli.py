"""``monoagent history list|show|reset|clear`` and ``monoagent restart --clear-sessions`` (plugin ``history-cli``).

The tool-history parts run against the real bundled SQLite sidecar, filled by real turns of
``monoagent run`` (offline:scripted calling a project-local ``echo`` / ``big`` tool), and assert
the numbers the sidecar really holds. One fake store stays: a third-party store whose maintenance
methods return awaitables, which the sync bundled store cannot be.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import monoagent._cli as cli_module
from monoagent._kernel.config_loading import load_raw, plugins_settings
from monoagent._kernel.host import PluginHost, local_plugin_paths
from monoagent._kernel.model import Message
from monoagent_plugins.history.files import FilesHistoryStore

# A third-party tool-history store: the commands reach it only through the protocol's coroutines
# and typed reports, and only through the Agent, which creates it once and closes it once.
FAKE_TOOL_HISTORY = textwrap.dedent(
    """
    import json, os
    from monoagent import hookimpl
    from monoagent._kernel.stores import ToolHistoryClearReport, ToolHistoryStats

    LOG = os.environ["FAKE_TOOL_LOG"]

    def log(*entry):
        with open(LOG, "a") as handle:
            handle.write(json.dumps(entry) + "\\n")

    class FakeToolHistory:
        name = "fake"
        confirm_timeout = reconcile_timeout = 1.0

        async def write_invocation(self, invocation):
            log("write_invocation")

        async def write_result(self, invocation, result, finished_at):
            log("write_result")

        async def records(self, *, conversation_id=None, logical_conversation_id=None):
            return ()

        async def flush(self):
            pass

        async def stats(self):
            return ToolHistoryStats(calls=3, records=5, bytes=4096)

        async def clear_logical(self, logical):
            log("clear_logical", logical)
            return ToolHistoryClearReport(calls=2, records=3, bytes=1024)

        async def clear_conversation(self, conversation_id):
            log("clear_conversation", conversation_id)
            return ToolHistoryClearReport(calls=1, records=2, bytes=512)

        async def clear_all(self):
            log("clear_all")
            return ToolHistoryClearReport(calls=3, records=5, bytes=4096)

        async def close(self):
            log("close")

    @hookimpl
    def register_tool_history_stores(register):
        def create(agent):
            log("created")
            return FakeToolHistory()

        register("fake", create)
    """
)

TOOLS = textwrap.dedent(
    """
    from monoagent import hookimpl
    from monoagent._kernel.model import ToolSpec

    @hookimpl
    def register_tools(register):
        register(ToolSpec("echo", "Echo text back."), lambda context: str(context.arguments.get("text", "")))
        register(ToolSpec("big", "Return n bytes."), lambda context: "x" * int(context.arguments["n"]))
    """
)

# Every run replays the script: one step with two tool calls, then the answer.
TWO_ECHOES = """
[[steps]]
tool_calls = [{ name = "echo", arguments = { text = "alpha" } }, { name = "echo", arguments = { text = "beta" } }]

[[steps]]
text = "done"
"""
# Arguments of 9,011 bytes (over the 8 KiB limit) and a result of 20,000 bytes (over 16 KiB): both omitted.
OVERSIZED = f"""
[[steps]]
tool_calls = [{{ name = "echo", arguments = {{ text = "{'é' * 4500}" }} }}, {{ name = "big", arguments = {{ n = 20000 }} }}]

[[steps]]
text = "done"
"""
REAL = '[runtime]\nmodel = "offline:scripted"\n[providers.offline]\nscriptPath = "script.toml"\n[plugins]\npaths = ["plugins"]\n'

PLAIN_STORE = textwrap.dedent(
    """
    from monoagent import hookimpl
    from monoagent._kernel.stores import CommitReceipt

    class PlainStore:
        name = "plain"
        async def load(self, conversation_id, *, on_warning=None): return []
        async def commit(self, conversation_id, messages): return CommitReceipt(conversation_id, 0, 0)
        async def reset(self, conversation_id): return 0
        async def conversations(self): return []
        async def close(self): pass

    @hookimpl
    def register_history_stores(register):
        register("plain", lambda agent: PlainStore())
    """
)


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "tool-log.jsonl"

    @property
    def history(self) -> Path:
        return self.root / "home" / "history"

    def store(self) -> FilesHistoryStore:
        return FilesHistoryStore(self.history)

    def commit(self, *conversations: str) -> None:
        store = self.store()
        for cid in conversations:
            asyncio.run(store.commit(cid, [Message("user", f"hello {cid}"), Message("assistant", f"hi {cid}")]))

    def stored(self) -> list[str]:
        return sorted(c.conversation_id for c in asyncio.run(self.store().conversations()))

    def tool_calls(self) -> list[list[str]]:
        """What the fake store was asked to do."""
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    @property
    def sidecar(self) -> Path:
        return self.history / "tool-history" / "tool-lifecycles.sqlite"

    def turn(self, conversation: str, script: str = "script.toml") -> None:
        """One real turn through ``monoagent run``: its tool calls land in the real sidecar."""
        result = self.invoke("run", f"question in {conversation}", "-c", conversation, env={"MONO_AGENT_OFFLINE_SCRIPT": script})
        assert result.exit_code == 0, result.output

    def calls(self) -> list[tuple[str, str, str | None]]:
        """(conversation id, tool, status) of every call the sidecar holds, read with sqlite3 itself."""
        if not self.sidecar.exists():
            return []
        db = sqlite3.connect(f"file:{self.sidecar}?mode=ro", uri=True)
        try:
            return list(db.execute("SELECT conversation_id, tool, status FROM calls ORDER BY start_seq"))
        finally:
            db.close()

    def tombstones(self) -> int:
        db = sqlite3.connect(f"file:{self.sidecar}?mode=ro", uri=True)
        try:
            return int(db.execute("SELECT COUNT(*) FROM tombstones").fetchone()[0])
        finally:
            db.close()

    def sidecar_bytes(self) -> int:
        return self.sidecar.stat().st_size if self.sidecar.exists() else 0

    def config(self, text: str) -> None:
        (self.root / "monoagent.toml").write_text(text)

    def invoke(self, *args: str, input: str | None = None, env: dict[str, str] | None = None):
        return CliRunner().invoke(_group(), list(args), input=input, env=env, catch_exceptions=False)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    for name in list(os.environ):
        if name.startswith("MONO_AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MONO_AGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FAKE_TOOL_LOG", str(tmp_path / "tool-log.jsonl"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_module, "_configure_logging", lambda debug: None)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fake_tool_history.py").write_text(FAKE_TOOL_HISTORY)
    (plugins / "plain_store.py").write_text(PLAIN_STORE)
    (plugins / "tools.py").write_text(TOOLS)
    (tmp_path / "script.toml").write_text(TWO_ECHOES)
    (tmp_path / "oversized.toml").write_text(OVERSIZED)
    (tmp_path / "monoagent.toml").write_text(REAL)
    (tmp_path / "home").mkdir()
    return Project(tmp_path)


def without_tool_history(project: Project) -> None:
    project.config('[toolHistory]\nstore = "none"\n[plugins]\nblock = ["tool-history", "fake_tool_history"]\npaths = ["plugins"]\n')


def test_list_reports_the_calls_records_and_bytes_the_sidecar_holds(project):
    project.config(REAL + "[toolHistory]\nmaxCalls = 5\n")
    project.turn("a")
    project.turn("a")
    project.turn("b:2025-01-01")
    assert [call[1:] for call in project.calls()] == [("echo", "success")] * 5, "6 real calls, the oldest retained out"
    assert project.tombstones() == 1
    result = project.invoke("history", "list")
    assert result.exit_code == 0, result.output
    assert '"a"' in result.output and '"b:2025-01-01"' in result.output
    assert "message history total: 2 file(s)" in result.output
    size = project.sidecar_bytes()
    assert size > 0 and f"tool history total: 5 call(s), 11 record(s), {size} bytes" in result.output
    data = json.loads(project.invoke("history", "list", "--json").output)
    assert data["message_history"]["files"] == 2 and data["tool_history"] == {"calls": 5, "records": 11, "bytes": size}
    assert {c["logical_conversation_id"] for c in data["message_history"]["conversations"]} == {"a", "b"}


def test_list_before_any_tool_call_reports_an_empty_sidecar(project):
    project.commit("a")
    assert "tool history total: 0 call(s), 0 record(s), 0 bytes" in project.invoke("history", "list").output
    assert not project.sidecar.exists(), "listing creates no sidecar"


def test_without_a_sidecar_tool_history_is_not_configured(project):
    without_tool_history(project)
    project.commit("a")
    assert "tool history total: not configured" in project.invoke("history", "list").output
    result = project.invoke("history", "reset", "a")
    assert "tool history removed: not configured" in result.output and project.stored() == []


def test_show_prints_messages_or_each_daily_bucket(project):
    project.commit("a", "s:2025-01-01", "s:2025-01-02")
    exact = project.invoke("history", "show", "a")
    assert "=== a (2 messages) ===" in exact.output and "hello a" in exact.output
    buckets = project.invoke("history", "show", "s")
    assert buckets.output.index("s:2025-01-01") < buckets.output.index("s:2025-01-02")
    as_json = json.loads(project.invoke("history", "show", "a", "--json").output)
    assert as_json[0]["messages"][1]["content"] == "hi a"
    missing = project.invoke("history", "show", "nope")
    assert missing.exit_code != 0 and "no history for conversation 'nope'" in missing.output


def test_show_tools_reports_each_stored_call_with_its_real_bounds(project):
    project.turn("a", script="oversized.toml")
    project.turn("b")
    text = project.invoke("history", "show", "a", "--tools").output
    assert "=== a (2 messages, 2 tool calls) ===" in text
    assert text.index("question in a") < text.index("--- tool call echo [") < text.index("--- tool call big [") < text.index("--- assistant ---")
    assert "arguments (8193 bytes, cut): not kept" in text, "arguments over 8 KiB: omitted, the count saturated at limit + 1"
    assert f"result (9000 bytes): {'é' * 4500}" in text
    assert 'arguments (11 bytes): {"n":20000}' in text and "result (16385 bytes, cut): not kept" in text
    items = json.loads(project.invoke("history", "show", "a", "--tools", "--json").output)[0]["items"]
    echo, big = (item["tool_call"] for item in items if "tool_call" in item)
    assert (echo["conversation_id"], echo["status"], echo["arguments_omitted"], echo["result_bytes"]) == ("a", "success", True, 9000)
    assert (big["result"], big["result_omitted"], big["result_bytes"], big["arguments"]) == (None, True, 16385, '{"n":20000}')
    assert echo["end_seq"] < big["end_seq"] and echo["run_id"] == big["run_id"]
    assert "=== b (2 messages, 2 tool calls) ===" in project.invoke("history", "show", "b", "--tools").output


def test_reset_clears_every_bucket_of_the_logical_session_in_both_stores(project):
    project.config(REAL + '[runtime.session]\nrollover = "daily"\n')
    for conversation in ("tg:1", "tg:1:2025-01-01", "tg:10", "tg:1x:2025-01-01"):
        project.turn(conversation)  # `monoagent run` is exempt from rollover: each id is stored as given
    before = project.sidecar_bytes()
    result = project.invoke("history", "reset", "tg:1:2025-01-02")
    assert result.exit_code == 0, result.output
    assert "reset 'tg:1'" in result.output and "message history removed: 2 file(s)" in result.output
    assert f"tool history removed: 4 call(s), 8 record(s), {before - project.sidecar_bytes()} bytes" in result.output
    assert [cid for cid, _, _ in project.calls()] == ["tg:10", "tg:10", "tg:1x:2025-01-01", "tg:1x:2025-01-01"]
    assert project.stored() == ["tg:10", "tg:1x:2025-01-01"]


def test_reset_with_rollover_off_clears_only_the_exact_id(project):
    project.turn("tg:1")
    project.turn("tg:1:2025-01-02")
    project.turn("tg:1:2025-01-02")
    result = project.invoke("history", "reset", "tg:1:2025-01-02")
    assert result.exit_code == 0, result.output
    assert "reset 'tg:1:2025-01-02'" in result.output and "(4 messages)" in result.output
    assert "tool history removed: 4 call(s), 8 record(s)" in result.output
    assert project.stored() == ["tg:1"] and [cid for cid, _, _ in project.calls()] == ["tg:1", "tg:1"]


def test_a_third_party_tool_history_store_is_used_through_the_protocol_and_owned_by_the_agent(project):
    project.config('[runtime.session]\nrollover = "daily"\n[toolHistory]\nstore = "fake"\n[plugins]\npaths = ["plugins"]\n')
    project.commit("tg:1", "tg:1:2025-01-01")
    assert "tool history total: 3 call(s), 5 record(s), 4096 bytes" in project.invoke("history", "list").output
    assert "tool history removed: 2 call(s), 3 record(s), 1024 bytes" in project.invoke("history", "reset", "tg:1").output
    project.config('[toolHistory]\nstore = "fake"\n[plugins]\npaths = ["plugins"]\n')
    assert "tool history removed: 1 call(s), 2 record(s), 512 bytes" in project.invoke("history", "reset", "tg:1").output
    cleared = project.invoke("history", "clear", "--all", "--yes").output
    assert "tool history removed: 3 call(s), 5 record(s), 4096 bytes" in cleared
    assert project.tool_calls() == [
        ["created"], ["close"],  # one store per command's Agent, closed by the Agent when the command ends
        ["created"], ["clear_logical", "tg:1"], ["close"],
        ["created"], ["clear_conversation", "tg:1"], ["close"],
        ["created"], ["clear_all"], ["close"],
    ]


def test_reset_fails_closed_on_a_store_without_logical_reset(project):
    project.turn("x")
    held = project.calls()
    project.config('[runtime.session]\nrollover = "daily"\n[history]\nstore = "plain"\n[plugins]\npaths = ["plugins"]\n')
    result = CliRunner().invoke(_group(), ["history", "reset", "x"])
    assert result.exit_code != 0
    assert "does not implement reset_logical()" in result.output and "nothing was cleared" in result.output
    assert project.calls() == held == [("x", "echo", "success")] * 2, "tool history is not cleared when message history cannot be"


def _group() -> click.Group:
    """The root command ``main()`` would build for the project's configuration, history commands included."""
    raw = load_raw(None)
    settings = plugins_settings(raw)
    host = PluginHost()
    host.load_entry_points(settings.block)
    host.load_local(local_plugin_paths(raw.source_file, settings.paths), settings.block)
    return cli_module.build_cli(host)


def _untouchable(project: Project) -> list[Path]:
    memory = project.root / "home" / "memory" / "lite.sqlite"
    artifact = project.root / "home" / "artifacts" / "runs" / "run.jsonl"
    for path in (memory, artifact):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("keep me")
    return [memory, artifact]


def test_clear_all_asks_first_and_leaves_memory_and_artifacts(project):
    project.turn("a")
    project.turn("b")
    keep = _untouchable(project)
    refused = project.invoke("history", "clear", "--all", input="n\n")
    assert refused.exit_code != 0 and project.stored() == ["a", "b"] and len(project.calls()) == 4
    before = project.sidecar_bytes()
    result = project.invoke("history", "clear", "--all", input="y\n")
    assert result.exit_code == 0, result.output
    assert "message history removed: 2 file(s)" in result.output
    assert f"tool history removed: 4 call(s), 8 record(s), {before - project.sidecar_bytes()} bytes" in result.output
    assert project.stored() == [] and project.calls() == []
    assert "tool history total: 0 call(s), 0 record(s)" in project.invoke("history", "list").output
    assert all(p.read_text() == "keep me" for p in keep)
    bare = CliRunner().invoke(_group(), ["history", "clear", "--yes"])
    assert bare.exit_code == 2 and "history clear needs --all" in bare.output


def test_restart_clear_sessions_clears_both_stores_and_reports_them_apart(project):
    project.turn("a")
    project.turn("b:2025-01-01")
    keep = _untouchable(project)
    plain = project.invoke("restart")
    assert "nothing to restart" in plain.output and project.stored() == ["a", "b:2025-01-01"] and len(project.calls()) == 4
    before = project.sidecar_bytes()
    result = project.invoke("restart", "--clear-sessions", "--yes", "--json")
    data = json.loads(result.output)
    assert data["message_history"]["files"] == 2 and data["message_history"]["bytes"] > 0
    assert data["tool_history"] == {"calls": 4, "records": 8, "bytes": before - project.sidecar_bytes()}
    assert project.stored() == [] and project.calls() == [] and all(p.read_text() == "keep me" for p in keep)
    text = project.invoke("restart", "--clear-sessions", "--yes")
    assert "message history removed: 0 file(s), 0 bytes" in text.output and "tool history removed: 0 call(s), 0 record(s)" in text.output
    assert "ACP session authorizations" in text.output


def test_the_commands_are_registered_through_the_entry_point(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    run = subprocess.run([sys.executable, "-m", "monoagent", "history", "list", "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["message_history"]["files"] == 0
    plugins = subprocess.run([sys.executable, "-m", "monoagent", "plugins", "--json"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    listed = {row["name"]: row for row in json.loads(plugins.stdout)}
    assert listed["history-cli"]["status"] == "active" and "register_commands" in listed["history-cli"]["hooks"]


def test_reset_fails_closed_before_either_store_when_the_sidecar_is_corrupt(project):
    project.config('[plugins]\nblock = ["fake_tool_history"]\npaths = ["plugins"]\n')
    project.commit("a", "a:2025-01-01")
    sidecar = project.history / "tool-history" / "tool-lifecycles.sqlite"
    sidecar.parent.mkdir(mode=0o700)
    sidecar.write_bytes(b"this is not an SQLite database" * 40)
    result = CliRunner().invoke(_group(), ["history", "reset", "a"])
    assert result.exit_code != 0
    assert "tool history" in result.output and "nothing was cleared" in result.output
    assert project.stored() == ["a", "a:2025-01-01"], "message history is kept when tool history cannot be reset"


def test_clear_all_fails_closed_before_either_store_when_the_sidecar_is_corrupt(project):
    project.config('[plugins]\nblock = ["fake_tool_history"]\npaths = ["plugins"]\n')
    project.commit("a", "b")
    sidecar = project.history / "tool-history" / "tool-lifecycles.sqlite"
    sidecar.parent.mkdir(mode=0o700)
    sidecar.write_bytes(b"this is not an SQLite database" * 40)
    for command in (["history", "clear", "--all", "--yes"], ["restart", "--clear-sessions", "--yes"]):
        result = CliRunner().invoke(_group(), command)
        assert result.exit_code != 0
        assert "nothing was cleared" in result.output and "delete the file" in result.output
        assert project.stored() == ["a", "b"]


@pytest.mark.parametrize("command", [["history", "clear", "--all", "--yes"], ["restart", "--clear-sessions", "--yes"],
                                     ["history", "reset", "a"]])
def test_clearing_and_resetting_history_removes_stored_summaries(project, command):
    from monoagent_plugins.history.compaction_summaries import SummaryFiles, SummaryRecord

    project.commit("a", "a:2026-01-02", "b")
    summaries = SummaryFiles(project.history)
    for cid in ("a", "a:2026-01-02", "b"):
        summaries.save(SummaryRecord(1, cid, f"summary of {cid}", "x", "", "offline:echo", 0.0))
    result = project.invoke(*command)
    assert result.exit_code == 0, result.output
    left = {cid for cid in ("a", "a:2026-01-02", "b") if summaries.path(cid).exists()}
    assert left == ({"b"} if command[1] == "reset" else set())
