"""The tool loop through the public API: what a handler receives, what its result answers, progress."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import attrs
import pytest

from monoagent import (
    Message,
    PluginError,
    ToolContext,
    ToolResult,
    ToolSpec,
    ToolStatus,
    TurnRequest,
    hookimpl,
)
from monoagent._kernel import serial
from monoagent._kernel.tool_context import PROGRESS_MAX_BYTES, PROGRESS_MAX_EVENTS
from monoagent.testing import scripted_agent, tool_context


def tool_agent(tmp_path: Any, handler: Any, calls: list[dict[str, Any]], *plugins: Any, **kwargs: Any) -> Any:
    class Tools:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("probe", "A probe.", {"type": "object"}), handler)

    return scripted_agent(tmp_path, [{"tool_calls": calls}, {"text": "done"}], plugins=[Tools(), *plugins], **kwargs)


def run(agent: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    result = agent.run_sync("go", conversation_id="c", on_event=events.append)
    return result, events


def test_a_handler_receives_its_call_and_its_turn(tmp_path):
    seen: list[ToolContext] = []

    def probe(context):
        seen.append(context)
        return context.result(f"got {context.arguments['q']}")

    agent = tool_agent(tmp_path, probe, [{"id": "call-a", "name": "probe", "arguments": {"q": 1}},
                                         {"id": "call-b", "name": "probe", "arguments": {"q": 2}}])
    result, _ = run(agent)
    assert [(c.call.id, c.call.name, c.arguments) for c in seen] == [("call-a", "probe", {"q": 1}), ("call-b", "probe", {"q": 2})]
    assert seen[0].turn.run_id == result.run_id and seen[0].turn.request.text == "go"
    assert [(a.result.call_id, a.result.content) for a in result.tool_activity] == [("call-a", "got 1"), ("call-b", "got 2")]


@pytest.mark.parametrize("returned", [ToolResult("", "", "text"), ToolResult("call-x", "other", "text", ToolStatus.ERROR)])
def test_a_returned_result_answers_the_call_it_was_returned_for(tmp_path, returned):
    agent = tool_agent(tmp_path, lambda context: returned, [{"id": "call-7", "name": "probe"}])
    result, events = run(agent)
    (activity,) = result.tool_activity
    assert (activity.result.call_id, activity.result.name, activity.result.status) == ("call-7", "probe", returned.status)
    assert [e.data["id"] for e in events if e.type == "tool_result"] == ["call-7"]


def test_an_exception_is_an_error_result_with_the_redacted_message(tmp_path):
    def probe(context):
        raise RuntimeError("token sk-ant-abcdefghijklmnopqrstuvwx was refused")

    result, _ = run(tool_agent(tmp_path, probe, [{"id": "c1", "name": "probe"}]))
    (activity,) = result.tool_activity
    assert activity.result.status is ToolStatus.ERROR and activity.result.call_id == "c1"
    assert activity.result.content == "Tool 'probe' failed: RuntimeError: token [REDACTED:anthropic_key] was refused"


def test_progress_is_an_event_redacted_bounded_and_counted(tmp_path):
    def probe(context):
        context.progress("using sk-ant-abcdefghijklmnopqrstuvwx")
        context.progress("é" * PROGRESS_MAX_BYTES)
        for n in range(PROGRESS_MAX_EVENTS + 3):
            context.progress(f"step {n}")
        return "ok"

    _, events = run(tool_agent(tmp_path, probe, [{"id": "c1", "name": "probe"}]))
    progress = [e.data for e in events if e.type == "tool_progress"]
    assert len(progress) == PROGRESS_MAX_EVENTS
    assert progress[0] == {"id": "c1", "name": "probe", "text": "using [REDACTED:anthropic_key]", "truncated": False}
    assert progress[1]["truncated"] and progress[1]["text"] == "é" * (PROGRESS_MAX_BYTES // 2)
    types = [e.type for e in events]
    assert types.index("tool_call") < types.index("tool_progress") < types.index("tool_result")
    (tool_result,) = [e.data for e in events if e.type == "tool_result"]
    assert tool_result["progress_dropped"] == 5


def test_progress_from_a_worker_thread_lands_on_the_turn_before_the_result(tmp_path):
    async def probe(context):
        def work():
            for n in range(3):
                context.progress(f"chunk {n}")
            return "worked"

        return await asyncio.to_thread(work)

    result, events = run(tool_agent(tmp_path, probe, [{"id": "c1", "name": "probe"}]))
    tail = [(e.type, e.data.get("text")) for e in events if e.type in ("tool_progress", "tool_result")]
    assert tail == [("tool_progress", "chunk 0"), ("tool_progress", "chunk 1"), ("tool_progress", "chunk 2"), ("tool_result", None)]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert result.tool_activity[0].result.content == "worked"


def test_progress_after_the_call_settled_is_dropped(tmp_path):
    kept: list[ToolContext] = []

    def probe(context):
        if kept:
            kept[0].progress("late")  # the first call's context, after that call settled
        kept.append(context)
        return "ok"

    _, events = run(tool_agent(tmp_path, probe, [{"id": "c1", "name": "probe"}, {"id": "c2", "name": "probe"}]))
    assert [e for e in events if e.type == "tool_progress"] == []
    assert kept[0].progress_dropped == 1
    with pytest.raises(TypeError, match="takes a str"):
        kept[1].progress(42)


def test_the_tool_messages_sent_back_carry_is_error(tmp_path):
    sent: list[Any] = []

    class Spy:
        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            sent.append([(m.tool_call_id, m.is_error) for m in request.messages if m.role == "tool"])

    def probe(context):
        if context.arguments.get("fail"):
            raise ValueError("bad input")
        return "fine"

    calls = [{"id": "ok", "name": "probe"}, {"id": "raised", "name": "probe", "arguments": {"fail": True}}, {"id": "unknown", "name": "nope"}]
    run(tool_agent(tmp_path, probe, calls, Spy()))
    assert sent[-1] == [("ok", False), ("raised", True), ("unknown", True)]


def test_a_tool_message_serialises_as_before_unless_it_is_an_error():
    ok = Message("tool", "sunny", name="search", timestamp=1.0, tool_call_id="call-1")
    assert serial.dumps(ok) == '{"role":"tool","content":"sunny","name":"search","timestamp":1.0,"tool_calls":[],"tool_call_id":"call-1"}'
    failed = attrs.evolve(ok, is_error=True)
    assert serial.dumps(failed) == serial.dumps(ok)[:-1] + ',"is_error":true}'
    assert serial.structure(json.loads(serial.dumps(failed)), Message) == failed


@pytest.mark.parametrize(("kept", "message"), [
    (["probe"], "returned a value of type str from filter_tools where a ToolSpec belongs; return the ToolSpecs to keep"),
    (42, "returned a value of type int from filter_tools where a ToolSpec belongs"),
    ([ToolSpec("invented", "Not registered.")], "returned tool(s) 'invented' from filter_tools, which are not registered"),
])
def test_filter_tools_only_narrows_and_an_error_names_the_plugin(tmp_path, kept, message):
    class Narrow:
        @hookimpl
        def filter_tools(self, turn, tools):
            return kept

    agent = tool_agent(tmp_path, lambda context: "ok", [{"name": "probe"}], Narrow())
    with pytest.raises(PluginError, match="plugin 'Narrow'") as caught:
        agent.run_sync("go")
    assert message in str(caught.value)


def test_filter_tools_lists_are_intersected_whatever_the_order(tmp_path):
    def withdraw(name):
        class Withdraw:
            @hookimpl
            def filter_tools(self, turn, tools):
                return [spec for spec in tools if spec.name != name]

            @hookimpl
            def after_provider_call(self, turn, request, outcome):
                sent.append([spec.name for spec in request.tools])

        Withdraw.__name__ = Withdraw.__qualname__ = f"Withdraw{name}"  # the plugin's name
        return Withdraw()

    for order, plugins in enumerate([(withdraw("probe"), withdraw("SessionHistory")), (withdraw("SessionHistory"), withdraw("probe"))]):
        sent: list[list[str]] = []
        (tmp_path / str(order)).mkdir()
        agent = tool_agent(tmp_path / str(order), lambda context: "ok", [{"name": "probe"}], plugins[0],
                           config={"plugins": {"block": ["artifacts"]}})  # no RunHistory either
        agent.register(plugins[1])
        result, _ = run(agent)
        assert sent[0] == []  # neither tool, nor the memory tools this agent has no tier for
        assert result.tool_activity[0].result.content == "Tool 'probe' is not available in this turn (available: none)."


def test_tool_context_lets_a_test_call_a_handler_directly(tmp_path):
    def probe(context):
        context.progress("half way")
        return context.result(f"{context.turn.session.logical_conversation_id}: {context.arguments['q']}")

    agent = tool_agent(tmp_path, probe, [])
    events: list[Any] = []
    context = tool_context(agent, "probe", {"q": 1}, request=TurnRequest("hi", conversation_id="chat:2026-07-03"), events=events)
    result = agent.tools["probe"].handler(context)
    assert (result.call_id, result.name, result.content) == ("call-1", "probe", "chat: 1")
    assert [(e.type, e.data["text"]) for e in events] == [("tool_progress", "half way")]



# ---------------------------------------------------------------------------- enabled= and hide_tools


def enabled_agent(tmp_path: Any, enabled: Any, sent: list[list[str]]) -> Any:
    class Tools:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("probe", "A probe.", {"type": "object"}), lambda context: "probed", enabled=enabled)

        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            sent.append(sorted(spec.name for spec in request.tools if spec.name == "probe"))

    return scripted_agent(tmp_path, [{"tool_calls": [{"name": "probe"}]}, {"text": "done"}] * 2, plugins=[Tools()])


def test_enabled_decides_per_turn_whether_a_registered_tool_is_offered(tmp_path):
    seen: list[Any] = []

    def enabled(turn):
        seen.append(turn)
        return turn.request.channel != "webhook"

    sent: list[list[str]] = []
    agent = enabled_agent(tmp_path, enabled, sent)
    offered = agent.run_sync("go", conversation_id="a")
    withdrawn = agent.run_sync("go", conversation_id="b", channel="webhook")
    assert offered.tool_activity[0].result.content == "probed" and sent[0] == ["probe"]
    assert withdrawn.tool_activity[0].result.status is ToolStatus.REJECTED and sent[2] == []
    assert "not available in this turn" in withdrawn.tool_activity[0].result.content
    assert len(seen) == 2 and "probe" in {spec.name for spec in seen[0].tools}  # once per turn, seeing what the turn may offer


@pytest.mark.parametrize(("enabled", "message"), [
    ("yes", "enabled= of tool 'probe' must be a callable enabled(turn) -> bool, not str 'yes'"),
    (lambda: True, "enabled= of tool 'probe': "),
    (lambda turn, other: True, "cannot be called as enabled(turn)"),
])
def test_a_bad_enabled_fails_the_plugin_at_registration(tmp_path, enabled, message):
    sent: list[list[str]] = []
    agent = enabled_agent(tmp_path, enabled, sent)
    (record,) = [r for r in agent.host.records if r.name == "Tools"]
    assert record.status == "failed" and message in (record.reason or "")
    assert "probe" not in agent.tools


@pytest.mark.parametrize(("enabled", "message"), [
    (lambda turn: "yes", "enabled= of tool 'probe' (plugin 'Tools') returned a value of type str; it answers True"),
    (lambda turn: 1 / 0, "enabled= of tool 'probe' (plugin 'Tools') raised ZeroDivisionError"),
])
def test_an_enabled_that_fails_on_a_turn_is_an_error_naming_the_plugin(tmp_path, enabled, message):
    agent = enabled_agent(tmp_path, enabled, [])
    with pytest.raises(PluginError) as caught:
        agent.run_sync("go")
    assert message in str(caught.value)


@pytest.mark.parametrize(("hidden", "message"), [
    (["probe"], "returned a value of type str from hide_tools where a ToolSpec belongs; return the ToolSpecs to hide"),
    ([ToolSpec("invented", "Not offered.")], "returned tool(s) 'invented' from hide_tools, which are not offered on this turn"),
])
def test_hide_tools_only_holds_back_offered_tools_and_an_error_names_the_plugin(tmp_path, hidden, message):
    class Hide:
        @hookimpl
        def hide_tools(self, turn, tools):
            return hidden

    agent = tool_agent(tmp_path, lambda context: "ok", [{"name": "probe"}], Hide())
    with pytest.raises(PluginError, match="plugin 'Hide'") as caught:
        agent.run_sync("go")
    assert message in str(caught.value)


def test_a_hidden_tool_is_revealed_by_another_tool_for_the_rest_of_the_run(tmp_path):
    """The kernel's hidden set without any domain: one plugin hides ``probe``, its ``unlock`` tool reveals it."""
    sent: list[list[str]] = []

    class Locked:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("unlock", "Unlock the probe."), lambda context: str([s.name for s in context.reveal_tools(["probe"])]))

        @hookimpl
        def hide_tools(self, turn, tools):
            return [spec for spec in tools if spec.name == "probe"]

        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            sent.append(sorted(spec.name for spec in request.tools if spec.name in ("probe", "unlock")))

    steps = [{"tool_calls": [{"id": "early", "name": "probe"}, {"id": "u", "name": "unlock"}]},
             {"tool_calls": [{"id": "late", "name": "probe"}, {"id": "u2", "name": "unlock"}]}, {"text": "done"}]
    agent = scripted_agent(tmp_path, steps, config={"plugins": {"block": ["tool-domains"]}},
                           plugins=[Locked(), _probe_tools()])
    result = agent.run_sync("go", conversation_id="c")
    early, unlock, late, again = (a.result for a in result.tool_activity)
    assert early.status is ToolStatus.REJECTED and early.content == "Tool 'probe' is hidden in this turn: it is not callable until it is revealed."
    assert unlock.content == "['probe']" and late.content == "probed" and again.content == "[]"
    assert sent == [["unlock"], ["probe", "unlock"], ["probe", "unlock"]]


def _probe_tools() -> Any:
    class Probe:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("probe", "A probe.", {"type": "object"}), lambda context: "probed")

    return Probe()


# ------------------------------------------------------------------ tool names (issue 24 item 20)

BAD_TOOL_NAMES = ["x" * 65, "read file", "météo", "files.read", "ns:tool", ""]


@pytest.mark.parametrize("name", BAD_TOOL_NAMES)
def test_a_registered_tool_name_outside_the_providers_rule_fails_the_plugin_naming_it(tmp_path, name):
    from monoagent.testing import fresh_agent

    class Tools:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec(name, "A tool."), lambda context: "ran")

    record = fresh_agent(tmp_path).register(Tools(), name="badly-named")
    assert record.status == "failed"
    assert f"tool name {name!r} is not valid: 1 to 64 ASCII letters, digits, '_' or '-'" in record.reason, record.reason


@pytest.mark.parametrize("name", BAD_TOOL_NAMES[:-1])
def test_a_decorated_tool_name_outside_the_providers_rule_is_a_definition_error(name):
    from monoagent import ToolDefinitionError, tool

    with pytest.raises(ToolDefinitionError, match=r"tool function '.*\.f': tool name .* is not valid: 1 to 64 ASCII letters"):
        @tool(name=name)
        def f() -> str:
            """A tool."""
            return ""


def test_a_function_name_outside_the_rule_needs_a_name():
    from monoagent import ToolDefinitionError, tool

    def météo() -> str:
        """The weather."""
        return "sun"

    with pytest.raises(ToolDefinitionError, match=r"'météo' is not valid.*pass @tool\(name=\.\.\.\)"):
        tool(météo)
    assert tool(name="meteo")(météo).spec.name == "meteo"


def test_a_provided_tool_name_outside_the_providers_rule_is_a_plugin_error(tmp_path):
    from monoagent import Tool

    class Catalogue:
        @hookimpl
        def provide_tools(self, agent, turn):
            return [Tool(ToolSpec("lab__" + "status" * 12, "The lab's status."), lambda context: "green")]

    agent = tool_agent(tmp_path, lambda context: "ok", [{"name": "probe"}], Catalogue())
    with pytest.raises(PluginError, match=r"plugin 'Catalogue' provided a tool whose tool name 'lab__status.*' is not valid: 1 to 64"):
        run(agent)


def test_a_tool_name_a_prepare_provider_request_implementation_adds_is_checked_before_the_provider(tmp_path):
    import attrs as attrs_

    class Renamer:
        @hookimpl
        def prepare_provider_request(self, turn, request):
            return attrs_.evolve(request, tools=tuple(attrs_.evolve(spec, name=spec.name + ".v2") for spec in request.tools))

    agent = tool_agent(tmp_path, lambda context: "ok", [{"name": "probe"}], Renamer())
    with pytest.raises(PluginError, match=r"prepare_provider_request implementation offered the provider a tool whose tool name '[A-Za-z]*\.v2'"):
        run(agent)
