"""Hidden tool domains through the public API: tools.visible, request_tools, the hidden_tool_domains section."""

from __future__ import annotations

import asyncio
from typing import Any

from monoagent import ToolSpec, ToolStatus, TurnRequest, hookimpl
from monoagent.testing import fresh_agent, scripted_agent

VAULT = ToolSpec("vault_open", "Open the vault.", domain="vault")
VAULT_LIST = ToolSpec("vault_list", "List the vault.", domain="vault", categories=("read",))
NOTES = ToolSpec("notes_read", "Read notes.", domain="notes", categories=("read",))
CORE = ToolSpec("clock", "The time.", categories=("read",))


class DomainTools:
    """Tools in two domains and one core tool; records the tools of every provider request and every handler run."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.offered: list[list[str]] = []

    @hookimpl
    def register_tools(self, register):
        for spec in (VAULT, VAULT_LIST, NOTES, CORE):
            register(spec, self._handler(spec.name))

    def _handler(self, name: str) -> Any:
        def handle(context):
            self.ran.append(name)
            return f"{name} ran"

        return handle

    @hookimpl
    def after_provider_call(self, turn, request, outcome):
        mine = {"vault_open", "vault_list", "notes_read", "clock", "request_tools"}
        self.offered.append(sorted(spec.name for spec in request.tools if spec.name in mine))


def agent_with(tmp_path: Any, steps: list[dict[str, Any]], visible: list[str] | None = None) -> tuple[Any, DomainTools]:
    tools = DomainTools()
    config = {"tools": {"visible": visible}} if visible is not None else None
    return scripted_agent(tmp_path, steps, config=config, plugins=[tools]), tools


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def test_a_hidden_tool_called_by_name_is_rejected_without_running(tmp_path):
    agent, tools = agent_with(tmp_path, [{"tool_calls": [call("vault_open", "a")]}, {"text": "done"}])
    result = agent.run_sync("go", conversation_id="c")
    (activity,) = result.tool_activity
    assert activity.result.status is ToolStatus.REJECTED and "hidden" in activity.result.content and "'vault'" in activity.result.content
    assert tools.ran == []
    assert tools.offered[0] == ["clock", "request_tools"]


def test_request_tools_widens_the_set_for_the_rest_of_the_turn_only(tmp_path):
    steps = [
        {"tool_calls": [call("request_tools", "r", domain="vault")]},
        {"tool_calls": [call("vault_open", "v"), call("request_tools", "r2", domain="vault")]},
        {"text": "opened"},
        {"tool_calls": [call("vault_open", "again")]},
        {"text": "next turn"},
    ]
    agent, tools = agent_with(tmp_path, steps)
    events: list[Any] = []
    first = agent.run_sync("go", conversation_id="c", on_event=events.append)
    assert [a.result.status for a in first.tool_activity] == [ToolStatus.SUCCESS] * 3
    assert first.tool_activity[2].result.content == "The tool domain 'vault' is already visible in this turn."
    assert first.tool_activity[0].result.content == (
        "The tool domain 'vault' is visible for the rest of this turn: vault_open, vault_list. Call them directly."
    )
    assert tools.ran == ["vault_open"]
    assert tools.offered[:3] == [
        ["clock", "request_tools"],
        ["clock", "request_tools", "vault_list", "vault_open"],
        ["clock", "request_tools", "vault_list", "vault_open"],
    ]
    (revealed,) = [e.data for e in events if e.type == "tools_revealed"]
    assert revealed == {"domain": "vault", "tools": ["vault_open", "vault_list"]}

    second = agent.run_sync("again", conversation_id="c")
    assert second.tool_activity[0].result.status is ToolStatus.REJECTED and tools.ran == ["vault_open"]
    assert tools.offered[3] == ["clock", "request_tools"]


def test_an_unknown_domain_is_an_error_listing_the_hidden_ones(tmp_path):
    steps = [{"tool_calls": [call("request_tools", "r", domain="nope\x1b[31m")]}, {"text": "done"}]
    agent, _ = agent_with(tmp_path, steps)
    (activity,) = agent.run_sync("go", conversation_id="c").tool_activity
    assert activity.result.is_error
    assert activity.result.content.endswith("is not a hidden tool domain of this turn (hidden: notes, vault).")


def test_tools_visible_decides_what_starts_hidden(tmp_path):
    agent, tools = agent_with(tmp_path, [{"tool_calls": [call("vault_open", "v")]}, {"text": "done"}], visible=["v*"])
    assert agent.run_sync("go", conversation_id="c").tool_activity[0].result.status is ToolStatus.SUCCESS
    assert tools.offered[0] == ["clock", "request_tools", "vault_list", "vault_open"]

    agent, tools = agent_with(tmp_path, [{"text": "done"}], visible=["*"])
    agent.run_sync("go", conversation_id="c")
    assert tools.offered[0] == ["clock", "notes_read", "vault_list", "vault_open"], "nothing hidden: no request_tools"


def assemble(agent: Any, **fields: Any) -> Any:
    return asyncio.run(agent.assemble(TurnRequest("hello", conversation_id="c", **fields)))


def test_the_catalogue_is_present_exactly_when_something_is_hidden(tmp_path):
    per_message = {"runtime": {"session": {"mode": "per-message"}}}
    hidden = assemble(fresh_agent(tmp_path, config=per_message, plugins=[DomainTools()]))
    (section,) = [s for s in hidden.manifest.sections if s.id == "hidden_tool_domains"]
    assert (section.stability, section.order, section.source) == ("dynamic", 640, "tool-domains")
    assert "- notes: notes_read\n- vault: vault_open, vault_list" in hidden.dynamic_text
    assert "vault_open" not in hidden.stable_text

    shown = assemble(fresh_agent(tmp_path, config={**per_message, "tools": {"visible": ["*"]}}, plugins=[DomainTools()]))
    assert "hidden_tool_domains" not in shown.manifest.section_ids
    assert shown.manifest.fingerprints.stable == hidden.manifest.fingerprints.stable

    no_domains = assemble(fresh_agent(tmp_path, config=per_message))
    assert "hidden_tool_domains" not in no_domains.manifest.section_ids

    blocked = assemble(fresh_agent(tmp_path, config={**per_message, "plugins": {"block": ["tool-domains"]}}, plugins=[DomainTools()]))
    assert "hidden_tool_domains" not in blocked.manifest.section_ids


def test_the_catalogue_of_the_next_round_no_longer_lists_a_revealed_domain(tmp_path):
    """The per-round refresh of dynamic sections re-renders hidden_tool_domains after request_tools."""

    class Catalogues:
        def __init__(self) -> None:
            self.seen: list[str] = []

        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            text = "\n".join([request.prompt.dynamic_text, *(m.content for m in request.messages if m.role == "user")])
            start = text.index("Hidden tool domains")
            self.seen.append(text[start:text.index("\n#", start) if "\n#" in text[start:] else None])

    catalogues = Catalogues()
    agent, _ = agent_with(tmp_path, [{"tool_calls": [call("request_tools", "r", domain="vault")]}, {"text": "done"}])
    agent.register(catalogues)
    agent.run_sync("go", conversation_id="c")
    first, second = catalogues.seen
    assert "- vault: vault_open, vault_list" in first and "- notes: notes_read" in first
    assert "vault" not in second and "- notes: notes_read" in second
