"""monoagent's pytest plugin: the fixtures, the entry point, assertion rewriting for the contracts, capability skips.

The runs in a subprocess (pytester) see the plugin as a plugin author's project does: loaded
from the ``pytest11`` entry point of the installed distribution.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from throwaway_venv import clean_env, make_venv, pip_install

from monoagent import ProviderRequest, hookimpl, tool
from monoagent._agent import Agent
from monoagent.testing import FunctionReply, HookRecorder

pytest_plugins = ["pytester"]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


class AddTool:
    @hookimpl
    def register_tools(self, register: Any) -> None:
        register(add)


# ------------------------------------------------------------------------------------ the fixtures


def test_monoagent_agent_is_fresh_and_isolated(monoagent_agent: Agent, tmp_path: Any) -> None:
    assert monoagent_agent.model == "offline:echo"
    assert monoagent_agent.config.context.home.is_relative_to(tmp_path)
    loaded = {record.source for record in monoagent_agent.host.records if record.status != "blocked"}  # an installed plugin is listed, blocked
    assert loaded == {"bundled"}, "no third-party, local or programmatic plugin"
    assert "you said: hello" in monoagent_agent.run_sync("hello", conversation_id="t").text


LEAKY_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "monoagent-leaky"
version = "0.1.0"

[project.entry-points.monoagent]
leaky = "monoagent_leaky"

[tool.hatch.build.targets.wheel]
packages = ["monoagent_leaky"]
"""

LEAKY_PLUGIN = """
from monoagent import hookimpl
from monoagent._kernel.model import Section


@hookimpl
def extra_sections(turn):
    return Section("leaky", "LEAKED INTO THIS AGENT", order=650, stability="stable", source="leaky")
"""

LEAK_TESTS = """
import asyncio

from monoagent._agent import Agent
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent


def third_party(agent):  # loaded from anywhere but monoagent itself (an installed one not loaded is listed as blocked)
    return {r.name for r in agent.host.records if r.source != "bundled" and r.status != "blocked"}


def leaked(agent):
    return "LEAKED INTO THIS AGENT" in asyncio.run(agent.assemble(TurnRequest("hi"))).stable_text


def test_control_a_normal_agent_loads_the_installed_plugin(tmp_path):
    agent = Agent({"context": {"home": str(tmp_path / "home")}}, env={})
    assert third_party(agent) == {"leaky"} and leaked(agent)


def test_the_monoagent_agent_fixture_loads_none_of_it(monoagent_agent):
    assert third_party(monoagent_agent) == set() and not leaked(monoagent_agent)


def test_the_scripted_agent_fixture_loads_none_of_it(scripted_agent):
    agent = scripted_agent(["one"])
    assert third_party(agent) == set() and not leaked(agent)


def test_fresh_agent_loads_none_of_it(tmp_path):
    agent = fresh_agent(tmp_path)
    assert third_party(agent) == set() and not leaked(agent)
"""


@pytest.mark.slow
def test_a_really_installed_third_party_plugin_stays_out_of_a_fresh_agent(tmp_path: Path) -> None:
    """The test above cannot fail on a machine with no third-party plugin: here one is installed.

    A real distribution with a ``monoagent`` entry point goes into a throwaway venv (offline, over
    this environment's packages); in that venv a normal ``Agent()`` loads it (the control, so the
    check below is not vacuous) and ``monoagent_agent``, ``scripted_agent`` and ``fresh_agent``
    load none of it.
    """
    dist = tmp_path / "monoagent-leaky"
    (dist / "monoagent_leaky").mkdir(parents=True)
    (dist / "pyproject.toml").write_text(LEAKY_PYPROJECT)
    (dist / "monoagent_leaky" / "__init__.py").write_text(LEAKY_PLUGIN)
    python = make_venv(tmp_path / "venv")
    pip_install(python, str(dist))
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_no_leak.py").write_text(LEAK_TESTS)
    inner = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}", "test_no_leak.py"],
        cwd=project, capture_output=True, text=True, timeout=300, env=clean_env(MONO_AGENT_HOME=str(tmp_path / "home")),
    )
    assert inner.returncode == 0 and "4 passed" in inner.stdout, inner.stdout[-4000:] + inner.stderr[-2000:]


def test_scripted_agent_replays_replies_and_tool_calls(scripted_agent: Any) -> None:
    agent = scripted_agent([{"text": "adding", "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}, "It is 5."], plugins=[AddTool()])
    result = agent.run_sync("2 + 3?", conversation_id="t")
    assert result.text.endswith("It is 5.") and result.tool_activity[0].result.content == "5"
    with pytest.raises(TypeError, match="a list of steps"):
        scripted_agent("one step")


def test_function_provider_builds_an_agent_on_the_function(function_provider: Any) -> None:
    def model(request: ProviderRequest) -> Any:
        if request.step == 1:
            return FunctionReply(tool_calls=[{"name": "add", "arguments": {"a": 20, "b": 22}}])
        return f"The answer is {request.messages[-1].content}."

    agent = function_provider(model, plugins=[AddTool()])
    assert agent.run_sync("sum?", conversation_id="t").text.endswith("The answer is 42.")
    assert [r.step for r in agent.provider(agent.model).requests] == [1, 2]  # type: ignore[attr-defined]


def test_two_agents_of_one_test_share_no_history(scripted_agent: Any, monoagent_agent: Agent) -> None:
    import asyncio

    first = scripted_agent(["one"])
    first.run_sync("x", conversation_id="same")
    assert asyncio.run(monoagent_agent.history_store.load("same")) == ()


def test_hook_recorder_sees_every_call_path(hook_recorder: Any, scripted_agent: Any) -> None:
    agent = scripted_agent([{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}, "two"])
    calls: HookRecorder = hook_recorder(agent)
    agent.register(AddTool(), "add-tool")
    agent.run_sync("1 + 1?", conversation_id="t")
    names = set(calls.names())
    # pluggy's own add_hookcall_monitoring sees none of these: the facade calls them implementation by implementation
    assert {"register_tools", "filter_tools", "on_run_event", "after_commit"} <= names
    before = calls.of("before_tool_call")
    assert before and before[0].kwargs["call"].arguments == {"a": 1, "b": 1}
    identity = calls.of("section_identity")[0]
    assert identity.winner and identity.result is not None


def test_the_recorder_stops_when_the_test_ends(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_stops="""
        state = {}

        def test_record(hook_recorder, monoagent_agent):
            state["agent"], state["calls"] = monoagent_agent, hook_recorder(monoagent_agent)
            monoagent_agent.run_sync("a", conversation_id="t")

        def test_after():
            count = len(state["calls"].calls)
            assert count > 0
            state["agent"].count_tokens("x", "offline:echo")
            assert len(state["calls"].calls) == count
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


# ------------------------------------------------------------------------------ assertion rewriting

REVERSING_STORE = """
from monoagent.testing import HistoryStoreContract
from monoagent_plugins.history.files import FilesHistoryStore


class ReversingStore(FilesHistoryStore):
    async def load(self, conversation_id, **kwargs):
        return list(reversed(await super().load(conversation_id, **kwargs)))


class TestReversingStore(HistoryStoreContract):
    def make_store(self, tmp_path, *, max_messages=64, max_message_bytes=64 * 1024):
        return ReversingStore(tmp_path / "history", max_messages, max_message_bytes=max_message_bytes)
"""


@pytest.mark.parametrize(
    ("autoload", "arguments", "rewritten"),
    [
        (True, [], True),  # what a plugin author gets: the entry point, loaded by pytest itself
        (False, ["-p", "monoagent._pytest_plugin"], True),  # the plugin's own registration, not pytest's rewriting of the distribution
        (False, [], False),  # the control: without the plugin, a bare AssertionError
    ],
)
def test_a_failing_contract_shows_the_values_it_compared(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, autoload: bool, arguments: list[str], rewritten: bool
) -> None:
    if not autoload:
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_reversing=textwrap.dedent(REVERSING_STORE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *arguments, "-k", "keeps_the_newest_messages")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert ("AssertionError: assert ['answer 9', " in out) is rewritten, out[-3000:]
    assert ("At index 0 diff: 'answer 9' != 'question 6'" in out) is rewritten
    assert "Module already imported so cannot be rewritten" not in out


# ------------------------------------------------------------------------------ capabilities

PLAIN_STORE = """
from monoagent.testing import HistoryStoreContract
from monoagent_plugins.history.files import FilesHistoryStore


class PlainStore:
    '''A store written against the HistoryStore protocol alone: no sub-protocol, no totals.'''

    name = "plain"

    def __init__(self, inner):
        self.inner = inner

    async def load(self, conversation_id, *, on_warning=None):
        return await self.inner.load(conversation_id, on_warning=on_warning)

    async def commit(self, conversation_id, messages):
        return await self.inner.commit(conversation_id, messages)

    async def reset(self, conversation_id):
        return await self.inner.reset(conversation_id)

    async def conversations(self):
        return await self.inner.conversations()

    async def close(self):
        await self.inner.close()


class TestPlainStore(HistoryStoreContract):
    def make_store(self, tmp_path, *, max_messages=64, max_message_bytes=64 * 1024):
        return PlainStore(FilesHistoryStore(tmp_path / "history", max_messages, max_message_bytes=max_message_bytes))
"""


def test_a_store_is_held_only_to_the_sub_protocols_it_implements(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain=textwrap.dedent(PLAIN_STORE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=20, skipped=36)
    out = result.stdout.str()
    for needed in (
        "ManagedHistoryStore (reset_logical, stats, clear_all)",
        "LogicalLookupStore (has_logical_records) and ManagedHistoryStore (reset_logical, stats, clear_all)",
        "ProviderSessionStore (load_provider_session)",
    ):
        assert f"needs a store that implements {needed}; this store implements no sub-protocol of HistoryStore" in out, needed
    assert "this store does not provide HistoryStoreContract.corrupt" in out
    assert "this store does not provide HistoryStoreContract.replace_record" in out
    assert "needs HistoryStoreContract.pause_inside_commit (a way to hold one commit open)" in out
    assert "needs make_store(tmp_path, max_stage_bytes=...)" in out
    assert "needs make_store(tmp_path, max_conversations=...)" in out
    assert "needs make_store(tmp_path, max_inactive_days=...)" in out


HALF_MANAGED_STORE = PLAIN_STORE.replace("class TestPlainStore", '''
class HalfManagedStore(PlainStore):
    """Totals but no clear_all or reset_logical, and a load written before every load took on_warning."""

    async def load(self, conversation_id):
        return await self.inner.load(conversation_id)

    async def stats(self):
        return await self.inner.stats()


class TestPlainStore''').replace("return PlainStore(", "return HalfManagedStore(")


def test_a_store_that_would_be_refused_when_built_fails_the_contract_saying_why(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_half=textwrap.dedent(HALF_MANAGED_STORE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "accepted_when_built")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the history store would be refused when built: it implements ManagedHistoryStore only in part: " in out
    assert "HalfManagedStore has stats but no reset_logical, clear_all (implement all of them, or none)" in out
    assert "has a load() that cannot take on_warning" in out
