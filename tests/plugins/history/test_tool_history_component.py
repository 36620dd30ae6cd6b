"""Tool history as an ordinary component: ``toolHistory.store`` selects a registered store.

Selected, blocked, failed, unknown and duplicated like every other component; ``none`` (or
``toolHistory.enabled = false``) turns tool history off; the plugin's keys share the
``toolHistory`` table with the kernel's ``store``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import types

import attrs
import pytest
from click.testing import CliRunner

from monoagent import ComponentError, ConfigError, PluginError, ToolSpec, ToolStatus, hookimpl
from monoagent._kernel.stores import ToolHistoryClearReport, ToolHistoryStats
from monoagent.testing import fresh_agent, scripted_agent
from monoagent_plugins.history.tool_calls.sidecar import LOCKS, SIDECAR
from monoagent_plugins.history.tool_calls.store import SqliteToolHistory

# Waits for a write's confirmation long enough that "persisted" is not a race with the 250 ms
# default on a loaded machine (past it, a write is reported "deferred").
PATIENT = {"toolHistory": {"confirmTimeoutMs": 60_000}}
CLOCK_STEPS = [{"tool_calls": [{"name": "clock", "arguments": {}}]}, {"text": "noon"}]


class Clock:
    @hookimpl
    def register_tools(self, register):
        register(ToolSpec("clock", "The time."), lambda context: "12:00")


def store_plugin(name: str) -> types.SimpleNamespace:
    @hookimpl
    def register_tool_history_stores(register):
        register(name, lambda agent: SqliteToolHistory(agent.config.history_dir, agent.config.section("toolHistory"), agent.redact))

    return types.SimpleNamespace(register_tool_history_stores=register_tool_history_stores)


def tool_events(agent, text="what time is it?"):
    events = []
    agent.run_sync(text, conversation_id="c", on_event=events.append)
    return [e for e in events if e.type in ("tool_call", "tool_result")]


# ---------------------------------------------------------------------------- selection


def test_the_default_store_is_the_bundled_sqlite_sidecar(tmp_path):
    agent = scripted_agent(tmp_path, CLOCK_STEPS, plugins=[Clock()], config=PATIENT)
    store = agent.tool_history_store()
    assert isinstance(store, SqliteToolHistory) and agent.tool_history_store() is store
    assert [e.data["persistence"] for e in tool_events(agent)] == ["persisted", "persisted"]
    assert [r.tool for r in asyncio.run(store.records(conversation_id="c"))] == ["clock"]
    locks = agent.config.history_dir / LOCKS
    assert list(locks.glob("tool-writer-*.lock"))
    agent.close()
    assert not list(locks.glob("tool-writer-*.lock")), "closing the Agent closes the store it selected (its writer stops)"


@pytest.mark.parametrize("off", [{"store": "none"}, {"enabled": False}])
def test_none_turns_tool_history_off(tmp_path, off):
    agent = scripted_agent(tmp_path, CLOCK_STEPS + [{"tool_calls": [{"name": "SessionHistory", "arguments": {"action": "stats"}}]},
                                                    {"text": "ok"}], plugins=[Clock()], config={"toolHistory": off})
    assert agent.tool_history_store() is None
    assert all("persistence" not in e.data for e in tool_events(agent))
    result = agent.run_sync("and the history?", conversation_id="c")
    assert "tool_history" not in result.manifest.section_ids
    (activity,) = result.tool_activity
    assert activity.result.status is ToolStatus.ERROR and "not enabled" in activity.result.content
    assert not (agent.config.history_dir / SIDECAR).exists()
    agent.close()


def test_the_store_is_selected_from_the_environment(tmp_path):
    agent = scripted_agent(tmp_path, CLOCK_STEPS, plugins=[Clock()], env={"MONO_AGENT_TOOL_HISTORY_STORE": "none"})
    assert agent.config.tool_history.store == "none" and agent.tool_history_store() is None
    agent.close()


def test_a_store_of_another_plugin_replaces_the_bundled_one(tmp_path):
    agent = scripted_agent(tmp_path, CLOCK_STEPS, plugins=[Clock(), ("mirror", store_plugin("mirror"))],
                           config={"toolHistory": {"store": "mirror", "maxCalls": 7, **PATIENT["toolHistory"]}})
    store = agent.tool_history_store()
    assert isinstance(store, SqliteToolHistory) and store.settings.max_calls == 7
    assert [e.data["persistence"] for e in tool_events(agent)] == ["persisted", "persisted"]
    agent.close()


def test_the_kernel_keeps_no_tool_history_attribute_on_the_agent(tmp_path):
    agent = fresh_agent(tmp_path)
    assert not hasattr(agent, "tool_history"), "the store is a component: agent.tool_history_store()"
    agent.close()


class GatedStore:
    """An async third-party store whose writes wait for a gate the ``open_gate`` tool opens; it notes
    every write that completes and every one that is cancelled."""

    name = "gated"
    confirm_timeout = 0.01
    reconcile_timeout = 60.0

    def __init__(self):
        self.gate: asyncio.Event | None = None
        self.done: list[str] = []
        self.cancelled: list[str] = []
        self.closed = 0

    async def _write(self, what):
        if self.gate is None:
            self.gate = asyncio.Event()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.append(what)
            raise
        self.done.append(what)

    async def write_invocation(self, invocation):
        await self._write(f"invocation {invocation.call.name}")

    async def write_result(self, invocation, result, finished_at):
        await self._write(f"result {result.content}")

    async def records(self, *, conversation_id=None, logical_conversation_id=None):
        return ()

    async def flush(self):
        pass

    async def stats(self):
        return ToolHistoryStats(0, 0, 0)

    async def clear_logical(self, logical_conversation_id):
        return ToolHistoryClearReport(0, 0, 0)

    async def clear_conversation(self, conversation_id):
        return ToolHistoryClearReport(0, 0, 0)

    async def clear_all(self):
        return ToolHistoryClearReport(0, 0, 0)

    async def close(self):
        self.closed += 1


def test_a_write_past_the_foreground_wait_is_deferred_never_cancelled_and_reconciled(tmp_path):
    store = GatedStore()

    class Plugin:
        @hookimpl
        def register_tool_history_stores(self, register):
            register("gated", lambda agent: store)

        @hookimpl
        def register_tools(self, register):
            def open_gate(context):
                store.gate.set()  # only after the invocation's foreground wait ran out: it is still pending
                return "open"

            register(ToolSpec("open_gate", "Let the store's writes through."), open_gate)

    steps = [{"tool_calls": [{"name": "open_gate", "arguments": {}}]}, {"text": "done"}]
    agent = scripted_agent(tmp_path, steps, plugins=[Plugin()], config={"toolHistory": {"store": "gated"}})
    events, at_commit = [], []

    def on_event(event):
        events.append(event)
        if event.type == "run_committed":
            at_commit.extend(store.done)

    agent.run_sync("open it", conversation_id="c", on_event=on_event)
    persistence = [(e.type, e.data.get("persistence")) for e in events if e.type in ("tool_call", "tool_result")]
    assert persistence == [("tool_call", "deferred"), ("tool_result", "persisted")]
    assert store.cancelled == [], "the foreground wait ran out without cancelling the write"
    assert at_commit == ["invocation open_gate", "result open"], "the deferred write was reconciled before the run settled"
    assert not [e for e in events if e.type == "runtime_warning"]
    agent.close()
    assert store.closed == 1


# ---------------------------------------------------------------------------- errors naming the plugin


def test_selecting_the_store_of_a_blocked_plugin_names_it(tmp_path):
    agent = scripted_agent(tmp_path, CLOCK_STEPS, plugins=[Clock()], config={"plugins": {"block": ["tool-history"]}})
    with pytest.raises(ComponentError) as info:
        agent.run_sync("what time is it?", conversation_id="c")
    message = str(info.value)
    assert "tool history store 'sqlite' is selected" in message
    assert "'tool-history' blocked" in message and 'toolHistory.store = "none"' in message


def test_selecting_the_store_of_a_failed_plugin_names_it(tmp_path, capsys):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "pgtools.py").write_text("import monoagent_no_such_module_for_tests\n")
    agent = fresh_agent(tmp_path, config={"toolHistory": {"store": "pgtools"}}, plugins_dirs=[plugins],
                        env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    assert "'pgtools'" in capsys.readouterr().err
    with pytest.raises(ComponentError) as info:
        agent.tool_history_store()
    message = str(info.value)
    assert "tool history store 'pgtools'" in message and "plugin 'pgtools'" in message
    assert "failed to load" in message and "ModuleNotFoundError" in message


def test_an_unknown_store_lists_the_available_ones(tmp_path):
    agent = fresh_agent(tmp_path, config={"toolHistory": {"store": "sqlit"}})
    with pytest.raises(ComponentError, match=r"tool history store 'sqlit' .*available: sqlite"):
        agent.tool_history_store()


def test_one_store_name_from_two_plugins_names_both(tmp_path):
    agent = fresh_agent(tmp_path, plugins=[("rival", store_plugin("sqlite"))])
    with pytest.raises(ComponentError) as info:
        agent.tool_history_store()
    message = str(info.value)
    assert "tool history store 'sqlite' is registered by two plugins" in message
    assert "'tool-history' (bundled" in message and "'rival' (programmatic" in message


def test_none_cannot_be_registered(tmp_path):
    agent = fresh_agent(tmp_path, plugins=[("nothing", store_plugin("none"))])
    (record,) = [r for r in agent.host.records if r.name == "nothing"]  # refused when the plugin loads
    assert record.status == "failed"
    assert "plugin 'nothing' called register(name, factory, description='') in register_tool_history_stores wrongly" in record.reason
    assert "tool history store name 'none' selects no tool history store; rename it" in record.reason


# ---------------------------------------------------------------------------- one table, two owners


def test_the_plugin_keys_share_the_table_with_the_kernel_key(tmp_path):
    agent = fresh_agent(tmp_path, config={"toolHistory": {"store": "sqlite", "maxCalls": 5}})
    assert agent.config.tool_history.store == "sqlite" and agent.config.section("toolHistory").max_calls == 5
    with pytest.raises(ConfigError, match=r"toolHistory\.maxCall: unknown key .*did you mean 'maxCalls'.*store"):
        fresh_agent(tmp_path, config={"toolHistory": {"maxCall": 5}})
    with pytest.raises(ConfigError, match=r"toolHistory\.store = 5 .*wrong type"):
        fresh_agent(tmp_path, config={"toolHistory": {"store": 5}})


def test_without_the_plugin_its_keys_are_a_warning_and_the_kernel_key_still_works(tmp_path, capsys):
    agent = fresh_agent(tmp_path, config={"toolHistory": {"store": "none"}, "plugins": {"block": ["tool-history"]}})
    assert agent.tool_history_store() is None
    fresh_agent(tmp_path, config={"toolHistory": {"store": "none", "maxCalls": 5}, "plugins": {"block": ["tool-history"]}})
    assert "config section 'toolHistory.maxCalls' (in python) belongs to plugin 'tool-history', which is blocked" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"toolHistory\.maxCall: unknown key .*known keys here: store, enabled"):
        fresh_agent(tmp_path, config={"toolHistory": {"store": "none", "maxCall": 5}, "plugins": {"block": ["tool-history"]}})


def test_a_plugin_may_not_declare_a_key_of_a_kernel_table(tmp_path):
    @attrs.define
    class Sneaky:
        store: str = "mine"

    class Plugin:
        @hookimpl
        def register_config_sections(self, register):
            register("toolHistory", Sneaky)

    with pytest.raises(PluginError, match=r"'sneaky'.*config section 'toolHistory' declares toolHistory\.store, a key the kernel's table"):
        fresh_agent(tmp_path, plugins=[("sneaky", Plugin())], env={"MONO_AGENT_STRICT_PLUGINS": "1"})


def test_config_init_writes_one_tool_history_table_that_loads_back(tmp_path, monkeypatch):
    import tomllib

    import monoagent._cli as cli_module

    for name in list(os.environ):
        if name.startswith("MONO_AGENT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_module, "_configure_logging", lambda debug: None)
    host, _ = cli_module.load_plugins(None, [])
    result = CliRunner().invoke(cli_module.build_cli(host), ["config", "init", "starter.toml"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "starter.toml").read_text()
    assert text.count("\n[toolHistory]\n") == 1
    assert tomllib.loads(text)["toolHistory"] == {}, "config init writes every default commented out"
    table = text.split("\n[toolHistory]\n", 1)[1].split("\n[", 1)[0]
    assert '# store = "sqlite"' in table and "# maxCalls = 100000" in table
    agent = fresh_agent(tmp_path, config=tomllib.loads(text) | {"context": {"home": str(tmp_path / "home")}})
    assert isinstance(agent.tool_history_store(), SqliteToolHistory)
    agent.close()


# ---------------------------------------------------------------------------- reported like every component


def test_plugins_and_config_validate_report_the_store(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))

    def cli(*args, **extra):
        return subprocess.run([sys.executable, "-m", "monoagent", *args], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=60)

    listed = {row["name"]: row for row in json.loads(cli("plugins", "--json").stdout)}
    assert "register_tool_history_stores" in listed["tool-history"]["hooks"]
    assert cli("config", "validate").returncode == 0
    blocked = cli("config", "validate", MONO_AGENT_BLOCK_PLUGINS="tool-history")
    assert blocked.returncode == 2 and "tool history store 'sqlite'" in blocked.stderr and "'tool-history' blocked" in blocked.stderr
    assert cli("config", "validate", MONO_AGENT_BLOCK_PLUGINS="tool-history", MONO_AGENT_TOOL_HISTORY_STORE="none").returncode == 0
