"""monoagent's pytest plugin: the fixtures, the entry point, assertion rewriting for the contracts, capability skips.

The runs in a subprocess (pytester) see the plugin as a plugin author's project does: loaded
from the ``pytest11`` entry point of the installed distribution.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from monoagent import ProviderRequest, hookimpl, tool
from monoagent.agent import Agent
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
    assert {record.source for record in monoagent_agent.host.records} == {"bundled"}, "no third-party, local or programmatic plugin"
    assert "you said: hello" in monoagent_agent.run_sync("hello", conversation_id="t").text


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
            state["agent"].hooks.count_tokens(text="x", model="offline:echo")
            assert len(state["calls"].calls) == count
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


# ------------------------------------------------------------------------------ assertion rewriting

REVERSING_STORE = """
from monoagent.testing import HistoryStoreContract
from monoagent_plugins.files_history import FilesHistoryStore


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
        (False, ["-p", "monoagent.pytest_plugin"], True),  # the plugin's own registration, not pytest's rewriting of the distribution
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
from monoagent_plugins.files_history import FilesHistoryStore


class PlainStore:
    '''A store written against the HistoryStore protocol alone: no capabilities, no totals.'''

    name = "plain"

    def __init__(self, inner):
        self.inner = inner

    async def load(self, conversation_id):
        return await self.inner.load(conversation_id)

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


def test_a_store_is_held_only_to_the_capabilities_it_declares(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain=textwrap.dedent(PLAIN_STORE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=13, skipped=13)
    out = result.stdout.str()
    for needed in (
        "capability 'logical_reset'",
        "capabilities 'logical_lookup', 'logical_reset'",
        "capability 'load_warnings'",
        "capabilities 'load_warnings', 'logical_reset'",
        "capability 'provider_sessions'",
    ):
        assert f"needs the store {needed}; this store declares none" in out, needed
    assert "needs the ManagedHistoryStore methods stats() and clear_all()" in out
    assert "needs HistoryStoreContract.pause_inside_commit (a way to hold one commit open)" in out
