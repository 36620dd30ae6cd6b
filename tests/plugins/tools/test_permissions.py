"""Permission profiles through the public API: enforcement before a handler runs, approvers, narrowing, events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monoagent import Approval, ApprovalRequest, ToolStatus, hookimpl, tool
from monoagent._kernel.errors import ConfigError
from monoagent.testing import fresh_agent, scripted_agent
from monoagent_plugins.tools.permissions import argument_summary


def file_tools(target: Path) -> Any:
    """A plugin with a real ``file_write`` tool, a ``read`` tool and a tool that declares no category."""

    @tool(categories=["file_write"])
    def write_note(text: str) -> str:
        """Write a note to disk."""
        target.write_text(text, encoding="utf-8")
        return "written"

    @tool(categories=["read"])
    def read_note() -> str:
        """Read the note."""
        return "the note"

    @tool
    def ping() -> str:
        """Ping something outside."""
        return "pong"

    class Tools:
        @hookimpl
        def register_tools(self, register):
            for each in (write_note, read_note, ping):
                register(each)

    return Tools()


def agent_calling(tmp_path: Path, calls: list[dict[str, Any]], config: dict[str, Any] | None = None) -> tuple[Any, Path]:
    target = tmp_path / "note.txt"
    agent = scripted_agent(tmp_path, [{"tool_calls": calls}, {"text": "done"}], config=config, plugins=[file_tools(target)])
    return agent, target


def run(agent: Any, **fields: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    result = agent.run_sync("go", conversation_id="c", on_event=events.append, **fields)
    return result, events


def decisions(events: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.data["tool"], e.data["decision"], e.data["by"]) for e in events if e.type == "permission_decision"]


WRITE = {"id": "w1", "name": "write_note", "arguments": {"text": "hello"}}


def test_read_only_refuses_a_file_write_tool_without_running_it(tmp_path):
    agent, target = agent_calling(tmp_path, [WRITE, {"id": "r1", "name": "read_note"}],
                                  {"permissions": {"profile": "read_only"}})
    result, events = run(agent)
    assert not target.exists()
    refused, read = result.tool_activity
    assert refused.result.status is ToolStatus.REJECTED and refused.result.is_error
    assert "file_write" in refused.result.content and "'read_only'" in refused.result.content
    assert read.result.status is ToolStatus.SUCCESS and read.result.content == "the note"
    assert decisions(events) == [("write_note", "denied", "profile"), ("read_note", "allowed", "profile")]
    (event,) = [e for e in events if e.type == "permission_decision" and e.data["tool"] == "write_note"]
    assert event.data["categories"] == ["file_write"] and event.data["profile"] == "read_only"


def test_full_access_runs_everything_and_emits_no_decisions(tmp_path):
    agent, target = agent_calling(tmp_path, [WRITE])
    result, events = run(agent)
    assert target.read_text() == "hello" and result.tool_activity[0].result.content == "written"
    assert decisions(events) == []


def test_a_tool_without_categories_counts_as_external(tmp_path):
    config = {"permissions": {"profile": "web", "profiles": {"web": {"allow": ["file_write"]}}}}
    agent, target = agent_calling(tmp_path, [{"id": "p", "name": "ping"}, WRITE], config)
    result, events = run(agent)
    assert "external" in result.tool_activity[0].result.content and result.tool_activity[0].result.is_error
    assert target.read_text() == "hello"
    assert decisions(events) == [("ping", "denied", "profile"), ("write_note", "allowed", "profile")]


def test_the_refusal_of_a_tool_without_categories_says_it_counts_as_external_and_names_pure(tmp_path):
    agent, _ = agent_calling(tmp_path, [{"id": "p", "name": "ping"}], {"permissions": {"profile": "read_only"}})
    result, _ = run(agent)
    content = result.tool_activity[0].result.content
    assert "declares no action category, so it counts as external" in content and "categories=['pure']" in content
    agent, _ = agent_calling(tmp_path, [WRITE], {"permissions": {"profile": "read_only"}})
    assert "declares no action category" not in run(agent)[0].tool_activity[0].result.content


def multi_category_tools(calls: list[str]) -> Any:
    """Tools of several categories, in both orders, each recording that it ran in ``calls``."""

    def recording(name: str, categories: list[str]) -> Any:
        @tool(name=name, description=f"A tool of the categories {categories}.", categories=categories)
        def ran() -> str:
            calls.append(name)
            return "ran"

        return ran

    kinds = {"read_then_write": ["read", "file_write"], "write_then_read": ["file_write", "read"],
             "read_network_shell": ["read", "network", "shell"], "harmless": ["pure", "read"]}
    tools = [recording(name, categories) for name, categories in kinds.items()]

    class Tools:
        @hookimpl
        def register_tools(self, register):
            for each in tools:
                register(each)

    return Tools()


def test_every_category_of_a_tool_is_decided_and_the_strictest_answer_wins(tmp_path):
    calls: list[str] = []
    names = ["read_then_write", "write_then_read", "read_network_shell", "harmless"]
    script = [{"tool_calls": [{"id": n, "name": n} for n in names]}, {"text": "done"}]
    config = {"permissions": {"profile": "mixed", "profiles": {"mixed": {"allow": ["file_write"], "ask": ["network"]}}}}
    agent = scripted_agent(tmp_path, script, config=config, plugins=[multi_category_tools(calls)])
    asked: list[ApprovalRequest] = []
    result, events = run(agent, approver=lambda request: asked.append(request) or True)
    # read + file_write: both allowed; read + network + shell: shell refused outranks network asked; pure + read: allowed
    assert calls == ["read_then_write", "write_then_read", "harmless"] and asked == []
    assert decisions(events) == [("read_then_write", "allowed", "profile"), ("write_then_read", "allowed", "profile"),
                                 ("read_network_shell", "denied", "profile"), ("harmless", "allowed", "profile")]
    refused = result.tool_activity[2].result
    assert refused.status is ToolStatus.REJECTED and "action category shell is refused" in refused.content

    calls.clear()
    agent = scripted_agent(tmp_path, script, config={"permissions": {"profile": "read_only"}}, plugins=[multi_category_tools(calls)])
    result, events = run(agent)
    assert calls == ["harmless"]  # a read category first or last never lets a file_write tool run under read_only
    assert [d[1] for d in decisions(events)] == ["denied", "denied", "denied", "allowed"]
    denied = [e.data["categories"] for e in events if e.type == "permission_decision" and e.data["decision"] == "denied"]
    assert denied == [["file_write"], ["file_write"], ["network", "shell"]]

    calls.clear()
    config = {"permissions": {"profile": "asking", "profiles": {"asking": {"ask": ["network"], "allow": ["shell"]}}}}
    agent = scripted_agent(tmp_path, script, config=config, plugins=[multi_category_tools(calls)])
    result, events = run(agent, approver=lambda request: asked.append(request) or False)
    assert "read_network_shell" not in calls and [r.categories for r in asked] == [("network",)]
    assert ("read_network_shell", "asked-denied", "approver") in decisions(events)


def test_a_pure_tool_runs_under_every_profile(tmp_path):
    @tool(categories=["pure"])
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class Tools:
        @hookimpl
        def register_tools(self, register):
            register(add)

    script = [{"tool_calls": [{"id": "a", "name": "add", "arguments": {"a": 2, "b": 3}}]}, {"text": "done"}]
    for profile in ("read_only", "ask", "nothing"):
        config = {"permissions": {"profile": profile, "profiles": {"nothing": {}}}}
        agent = scripted_agent(tmp_path, script, config=config, plugins=[Tools()])
        result, events = run(agent)
        assert result.tool_activity[0].result.content == "5", profile
        assert decisions(events) == [("add", "allowed", "profile")]


def test_ask_without_an_approver_refuses(tmp_path):
    agent, target = agent_calling(tmp_path, [WRITE], {"permissions": {"profile": "ask"}})
    result, events = run(agent)
    assert not target.exists()
    assert "needs approval" in result.tool_activity[0].result.content
    assert decisions(events) == [("write_note", "asked-denied", "no_approver")]


@pytest.mark.parametrize("answer, written, decision, by", [
    (True, True, "asked-allowed", "approver"),
    (False, False, "asked-denied", "approver"),
    (Approval(True, "policy-x"), True, "asked-allowed", "policy-x"),
    ("yes", False, "asked-denied", "approver_error"),
])
def test_an_approver_on_the_request_answers(tmp_path, answer, written, decision, by):
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> Any:
        asked.append(request)
        return answer

    agent, target = agent_calling(tmp_path, [WRITE], {"permissions": {"profile": "ask"}})
    _, events = run(agent, approver=approver)
    assert target.exists() is written
    assert decisions(events) == [("write_note", decision, by)]
    (request,) = asked
    assert (request.tool, request.categories, request.profile, request.summary) == ("write_note", ("file_write",), "ask", "text='hello'")


def test_a_failing_approver_refuses_the_call(tmp_path):
    def approver(request: ApprovalRequest) -> bool:
        raise RuntimeError("the approval service is down")

    agent, target = agent_calling(tmp_path, [WRITE], {"permissions": {"profile": "ask"}})
    _, events = run(agent, approver=approver)
    assert not target.exists() and decisions(events) == [("write_note", "asked-denied", "approver_error")]


def test_a_request_can_narrow_but_never_widen(tmp_path):
    agent, target = agent_calling(tmp_path, [WRITE], {"permissions": {"profile": "read_only"}})
    _, events = run(agent, permissions="full_access", approver=lambda request: True)
    assert not target.exists() and decisions(events) == [("write_note", "denied", "profile")]

    agent, target = agent_calling(tmp_path, [WRITE])
    _, events = run(agent, permissions="read_only")
    assert not target.exists() and decisions(events) == [("write_note", "denied", "profile")]

    agent, target = agent_calling(tmp_path, [WRITE], {"permissions": {"profile": "ask"}})
    _, events = run(agent, permissions="full_access", approver=lambda request: False)
    assert not target.exists() and decisions(events) == [("write_note", "asked-denied", "approver")]


def test_narrowing_two_custom_profiles_meets_them(tmp_path):
    config = {"permissions": {"profile": "a", "profiles": {"a": {"allow": ["file_write", "network"]},
                                                           "b": {"allow": ["network"], "ask": ["file_write"]}}}}
    agent, target = agent_calling(tmp_path, [WRITE], config)
    _, events = run(agent, permissions="b", approver=lambda request: Approval(True, "person"))
    assert target.read_text() == "hello" and decisions(events) == [("write_note", "asked-allowed", "person")]
    (event,) = [e for e in events if e.type == "permission_decision"]
    assert event.data["profile"] == "b"


def test_an_unknown_profile_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"permissions\.profile = 'nope'.*full_access, ask, read_only, mine"):
        fresh_agent(tmp_path, config={"permissions": {"profile": "nope", "profiles": {"mine": {"allow": []}}}})
    with pytest.raises(ConfigError, match=r"permissions\.profiles\.ask: a custom profile cannot be called 'ask'"):
        fresh_agent(tmp_path, config={"permissions": {"profiles": {"ask": {"allow": ["shell"]}}}})
    with pytest.raises(ConfigError, match=r"permissions\.profiles\.mine\.allow.*'bad name'"):
        fresh_agent(tmp_path, config={"permissions": {"profiles": {"mine": {"allow": ["bad name"]}}}})
    agent, target = agent_calling(tmp_path, [WRITE])
    with pytest.raises(ConfigError, match=r"permission profile 'nope' is not defined; use one of full_access, ask, read_only"):
        run(agent, permissions="nope")
    assert not target.exists()


def test_the_profile_comes_from_the_environment(tmp_path):
    target = tmp_path / "note.txt"
    agent = scripted_agent(tmp_path, [{"tool_calls": [WRITE]}, {"text": "done"}], plugins=[file_tools(target)],
                           env={"MONO_AGENT_PERMISSIONS_PROFILE": "read_only"})
    _, events = run(agent)
    assert not target.exists() and decisions(events) == [("write_note", "denied", "profile")]


def test_the_argument_summary_is_bounded_and_one_line():
    summary = argument_summary({"text": "line\nbreak " + "x" * 10_000, "nested": {"a": [1] * 100}})
    assert "\n" not in summary and len(summary) <= 200 and summary.startswith("text='line\\nbreak xxx")


# ---------------------------------------------------------------------------- the current_permissions section


def assemble(agent: Any, **fields: Any) -> Any:
    import asyncio

    from monoagent import TurnRequest

    return asyncio.run(agent.assemble(TurnRequest("hello", conversation_id="c", **fields)))


PER_MESSAGE = {"runtime": {"session": {"mode": "per-message"}}}


def test_current_permissions_is_present_exactly_when_restricted_and_keeps_the_stable_part(tmp_path):
    full = assemble(fresh_agent(tmp_path, config=PER_MESSAGE))
    assert "current_permissions" not in full.manifest.section_ids

    ask = assemble(fresh_agent(tmp_path, config={**PER_MESSAGE, "permissions": {"profile": "ask"}}), approver=lambda r: True)
    (section,) = [s for s in ask.manifest.sections if s.id == "current_permissions"]
    assert (section.stability, section.order, section.source) == ("dynamic", 610, "permissions")
    assert ("Permission profile: ask.\n- Run without asking: read, pure.\n- Need the person's approval first: file_write, shell, "
            "network, subagent, external.\n- Refused: none.\n") in ask.dynamic_text
    assert "Nobody can approve" not in ask.dynamic_text and "Permission profile" not in ask.stable_text
    assert ask.manifest.fingerprints.stable == full.manifest.fingerprints.stable

    unattended = assemble(fresh_agent(tmp_path, config={**PER_MESSAGE, "permissions": {"profile": "ask"}}))
    assert "Nobody can approve a call in this turn" in unattended.dynamic_text

    narrowed = assemble(fresh_agent(tmp_path, config=PER_MESSAGE), permissions="read_only")
    assert "Permission profile: read_only.\n- Run without asking: read, pure.\n- Need the person's approval first: none.\n" \
           "- Refused: file_write, shell, network, subagent, external." in narrowed.dynamic_text
    assert narrowed.manifest.fingerprints.stable == full.manifest.fingerprints.stable

    widened = assemble(fresh_agent(tmp_path, config=PER_MESSAGE), permissions="full_access")
    assert "current_permissions" not in widened.manifest.section_ids


def test_blocking_the_plugin_turns_enforcement_off_and_says_so(tmp_path):
    """Enforcement is the permissions plugin's before_tool_call: blocked, nothing is decided, every tool
    runs, and the configured profile is reported as the section of a blocked plugin."""
    target = tmp_path / "note.txt"
    agent = scripted_agent(tmp_path, [{"tool_calls": [WRITE]}, {"text": "done"}], plugins=[file_tools(target)],
                           config={"permissions": {"profile": "read_only"}, "plugins": {"block": ["permissions"]}})
    assert any("permissions" in warning and "blocked" in warning for warning in agent.config.warnings)
    assert "current_permissions" not in assemble(agent).manifest.section_ids
    _, events = run(agent)
    assert target.read_text() == "hello" and decisions(events) == []


class Cache:
    """A plugin that answers every call itself (a cache of tool results), before the tool runs."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl
    def before_tool_call(self, turn, call):
        self.asked.append(call.name)
        from monoagent import ToolResult

        return ToolResult(call.id, call.name, "from the cache")


def test_enforcement_runs_before_any_other_before_tool_call(tmp_path):
    """A refused call never reaches another plugin's before_tool_call; an approved one does, once approved."""
    cache = Cache()
    target = tmp_path / "note.txt"
    agent = scripted_agent(tmp_path, [{"tool_calls": [WRITE]}, {"text": "done"}], plugins=[file_tools(target), cache],
                           config={"permissions": {"profile": "read_only"}})
    result, events = run(agent)
    assert result.tool_activity[0].result.status is ToolStatus.REJECTED and cache.asked == []
    assert decisions(events) == [("write_note", "denied", "profile")]

    approved: list[str] = []

    async def approver(request: ApprovalRequest) -> bool:
        approved.append(request.tool)
        return True

    cache = Cache()
    agent = scripted_agent(tmp_path, [{"tool_calls": [WRITE]}, {"text": "done"}], plugins=[file_tools(target), cache],
                           config={"permissions": {"profile": "ask"}})
    result, events = run(agent, approver=approver)
    assert approved == ["write_note"] and cache.asked == ["write_note"]
    assert result.tool_activity[0].result.content == "from the cache" and not target.exists()
    assert decisions(events) == [("write_note", "asked-allowed", "approver")]
