"""One test per hook: each calls the hook through a real Agent and checks its effect.

tests/test_docs.py checks that every hookspec has a ``test_hook_<name>`` here (datasette's
meta-test), so a new hook cannot land without a test.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import click
import pytest
from click.testing import CliRunner

from monoagent import hookimpl
from monoagent._kernel.components import CHANNELS, NOTIFIERS, PROVIDERS
from monoagent._kernel.errors import ComponentError, HookError, PluginError, TurnFailed
from monoagent._kernel.interfaces import CompactionOutcome, Notifier, Tool, ToolSourceFailure
from monoagent._kernel.model import (
    MemoryHit,
    Message,
    Section,
    StepFinished,
    TextDelta,
    ToolResult,
    ToolSpec,
    ToolStatus,
    UserMessagePart,
)
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.assembly import current_user_message
from monoagent._pipeline.tool_loop import provided_tools
from monoagent.testing import HookRecorder, fresh_agent, write_script


def run(agent: Any, text: str = "hello", conversation: str = "t", **fields: Any) -> Any:
    return asyncio.run(agent.respond(TurnRequest(text, conversation_id=conversation, **fields)))


def assemble(agent: Any, text: str = "hello", conversation: str = "t", **fields: Any) -> Any:
    return asyncio.run(agent.assemble(TurnRequest(text, conversation_id=conversation, **fields)))


# ---------------------------------------------------------------------------- registries


class FixedRuntime:
    name = "fixed"
    context_window = 10_000

    def __init__(self, reply: str) -> None:
        self.reply = reply

    async def stream(self, request: Any) -> Any:
        yield TextDelta(self.reply)
        yield StepFinished()


def test_hook_register_providers(tmp_path):
    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("fixed", lambda agent, model: FixedRuntime(f"fixed {model}"))

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"model": "fixed:m1"}})
    assert run(agent).text == "fixed m1"
    assert agent.components.registered(PROVIDERS)["fixed"].plugin == "Plugin"


def test_hook_register_history_stores(tmp_path):
    class MemoryStore:
        name = "memory"

        def __init__(self):
            self.records: dict[str, list[Message]] = {}

        async def load(self, conversation_id, *, on_warning=None):
            return list(self.records.get(conversation_id, []))

        async def commit(self, conversation_id, messages):
            from monoagent._kernel.stores import CommitReceipt

            self.records.setdefault(conversation_id, []).extend(messages)
            return CommitReceipt(conversation_id, len(self.records[conversation_id]), 0)

        async def reset(self, conversation_id):
            return len(self.records.pop(conversation_id, []))

        async def conversations(self):
            return []

        async def close(self):
            pass

    store = MemoryStore()

    class Plugin:
        @hookimpl
        def register_history_stores(self, register):
            register("memory", lambda agent: store)

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"history": {"store": "memory"}})
    run(agent, "one")
    second = run(agent, "two")
    assert [m.content for m in store.records["t"]][::2] == ["one", "two"]
    assert "history: 2 messages" in second.text
    assert not (tmp_path / "home" / "history").exists()


def test_hook_register_tool_history_stores(tmp_path):
    from monoagent._kernel.stores import ToolHistoryClearReport, ToolHistoryStats

    class ListStore:
        name = "list"
        confirm_timeout = reconcile_timeout = 1.0

        def __init__(self):
            self.writes: list[tuple[str, str]] = []
            self.closed = 0

        async def write_invocation(self, invocation):
            self.writes.append(("invocation", invocation.call.name))

        async def write_result(self, invocation, result, finished_at):
            self.writes.append(("result", result.content))

        async def records(self, *, conversation_id=None, logical_conversation_id=None):
            return ()

        async def flush(self):
            pass

        async def stats(self):
            return ToolHistoryStats(len(self.writes) // 2, len(self.writes), 0)

        async def clear_logical(self, logical_conversation_id):
            return ToolHistoryClearReport(0, 0, 0)

        async def clear_conversation(self, conversation_id):
            return ToolHistoryClearReport(0, 0, 0)

        async def clear_all(self):
            return ToolHistoryClearReport(0, 0, 0)

        async def close(self):
            self.closed += 1

    store = ListStore()

    class Plugin:
        @hookimpl
        def register_tool_history_stores(self, register):
            register("list", lambda agent: store)

        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("clock", "The time."), lambda context: "noon")

    script = write_script(tmp_path / "s.json", [{"tool_calls": [{"name": "clock"}]}, {"text": "It is noon."}])
    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={
        "runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(script)}},
        "toolHistory": {"store": "list", "confirmTimeoutMs": 60_000},  # "persisted" is not a race on a loaded machine
    })
    events: list[Any] = []
    agent.run_sync("What time is it?", conversation_id="t", on_event=events.append)
    assert store.writes == [("invocation", "clock"), ("result", "noon")]
    assert [e.data["persistence"] for e in events if e.type in ("tool_call", "tool_result")] == ["persisted", "persisted"]
    assert agent.tool_history_store() is store
    agent.close()
    assert store.closed == 1, "the Agent that created the store closes it, once"
    assert not (tmp_path / "home" / "history" / "tool-history").exists()  # the bundled sqlite store was never opened


def test_hook_register_memory_tiers(tmp_path):
    class Tier:
        name = "notes"

        def __init__(self, options):
            self.options = options

        async def search(self, query, *, limit):
            return []

        async def add(self, text, *, metadata=None):
            return "1"

        async def forget(self, memory_id):
            return True

    class Plugin:
        @hookimpl
        def register_memory_tiers(self, register):
            register("notes", lambda agent, options: Tier(options))

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"memory": {"tiers": ["notes"]}})
    tiers = agent.memory_tiers()
    assert list(tiers) == ["notes"] and isinstance(tiers["notes"], Tier)
    bad = fresh_agent(tmp_path, config={"memory": {"tiers": ["vectors"]}})
    with pytest.raises(ComponentError, match="memory tier 'vectors'"):
        bad.memory_tiers()


def test_hook_register_embedders(tmp_path):
    class Embedder:
        name = "count"
        dimensions = 1

        def embed(self, texts):
            return [[float(len(t))] for t in texts]

    class Plugin:
        @hookimpl
        def register_embedders(self, register):
            register("count", lambda agent, options: Embedder())

    agent = fresh_agent(tmp_path, plugins=[Plugin()])
    assert agent.embedder("count").embed(["abc"]) == [[3.0]]


def test_hook_register_channels(tmp_path):
    class Plugin:
        @hookimpl
        def register_channels(self, register):
            register("irc", lambda agent: "irc-channel", description="IRC")

    agent = fresh_agent(tmp_path, plugins=[Plugin()])
    channels = agent.components.registered(CHANNELS)
    assert set(channels) >= {"console", "irc"}
    assert channels["irc"].factory(agent=agent) == "irc-channel"


def test_hook_register_notifiers(tmp_path):
    delivered = []
    built_with = []

    class Collect:
        name = "collect"

        def __init__(self, options):
            self.prefix = options["prefix"]

        async def notify(self, notification):
            delivered.append((self.prefix + notification.text, notification.destination, notification.run_id))

    class Plugin:
        @hookimpl
        def register_notifiers(self, register):
            def factory(agent, options):
                built_with.append(options)
                return Collect(options)

            register("collect", factory, description="in memory")

    destinations = {"mine": {"type": "collect", "maxAttempts": 2, "options": {"prefix": "> "}}}
    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"notify": {"destinations": destinations}})
    assert agent.components.registered(NOTIFIERS)["collect"].description == "in memory"
    assert {"webhook", "file"} <= set(agent.components.registered(NOTIFIERS))
    from monoagent_plugins.serving.notify_dispatch import NotifyDispatch

    dispatch = NotifyDispatch(agent)
    dispatch.check(["mine"], "cron.jobs[0].notify")
    result = agent.run_sync("hello", conversation_id="cron:daily")
    asyncio.run(dispatch.deliver(["mine"], result, channel="cron", source="daily"))
    assert delivered == [("> " + result.text, "mine", result.run_id)]
    assert built_with == [{"prefix": "> ", "maxAttempts": 2}]  # the keys set, camelCase, without type, options merged in
    assert isinstance(Collect({"prefix": ""}), Notifier)


def test_hook_register_compaction_policies(tmp_path):
    class KeepLast:
        name = "keep-last"

        async def compact(self, turn, messages, budget):
            return CompactionOutcome(tuple(messages[-2:]), applied=True, method="keep-last")

    class Plugin:
        @hookimpl
        def register_compaction_policies(self, register):
            register("keep-last", lambda agent: KeepLast())

        @hookimpl
        def choose_compaction(self, turn, history_tokens, budget):
            return "keep-last"

    agent = fresh_agent(tmp_path, plugins=[Plugin()])
    for text in ("a", "b", "c"):
        result = run(agent, text)
    assert "history: 2 messages" in result.text


def test_hook_register_session_backends(tmp_path):
    from monoagent._kernel.sessions import OpenedSession, SessionBackend

    class DictSessions:  # the protocol alone, as a third party writes it
        durable = False

        def __init__(self) -> None:
            self.sessions: dict[str, Any] = {}
            self.calls: list[tuple[Any, ...]] = []

        async def open(self, turn):
            self.calls.append(("open", turn.conversation_id, len(turn.history)))
            return OpenedSession(self.sessions.pop(turn.conversation_id, None))

        async def publish(self, turn, session, appended, commit):
            self.calls.append(("publish", session.revision, [m.role for m in appended]))
            receipt = await commit(None)
            session.transcript.extend(appended)
            session.revision += 1
            self.sessions[turn.conversation_id] = session
            return receipt

        async def retire(self, turn, reason):
            self.sessions.pop(turn.conversation_id, None)

        def evict_idle(self, now):
            return []

        async def close(self):
            self.calls.append(("close",))

    built: list[DictSessions] = []

    class Plugin:
        @hookimpl
        def register_session_backends(self, register):
            register("dict", lambda agent: built.append(DictSessions()) or built[-1], "sessions in a dict")

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"session": {"backend": "dict"}}})
    run(agent, "one")
    run(agent, "two")
    [backend] = built
    assert isinstance(backend, SessionBackend) and agent.harness.sessions is backend
    assert backend.calls == [
        ("open", "t", 0), ("publish", 0, ["user", "assistant"]),
        ("open", "t", 2), ("publish", 1, ["user", "assistant"]),  # the session open returned: the turn was warm
    ]
    asyncio.run(agent.aclose())
    assert backend.calls[-1] == ("close",)
    refused = fresh_agent(tmp_path / "b", plugins=[Plugin()], config={"runtime": {"session": {"backend": "nowhere"}}})
    with pytest.raises(ComponentError, match=r"session backend 'nowhere' .* \(available: dict, files, memory\)"):
        run(refused)


def test_hook_register_tools(tmp_path):
    from monoagent import tool

    @tool
    def weather(city: str) -> str:
        """The forecast.

        Args:
            city: the city's name.
        """
        return f"sunny in {city}"

    class Plugin:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("clock", "The time.", {"type": "object", "properties": {}}), lambda context: "noon")
            register(weather)

    calls = [{"name": "clock"}, {"name": "weather", "arguments": {"city": "Oslo"}}, {"name": "weather", "arguments": {"city": 1}}]
    script = write_script(tmp_path / "s.json", [{"tool_calls": calls}, {"text": "It is noon."}])
    agent = fresh_agent(
        tmp_path, plugins=[Plugin()],
        config={"runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(script)}}},
    )
    result = run(agent)
    assert result.text == "It is noon."
    assert [(a.call.name, a.result.content.split("\n")[-2:][0], a.result.status) for a in result.tool_activity] == [
        ("clock", "noon", ToolStatus.SUCCESS),
        ("weather", "sunny in Oslo", ToolStatus.SUCCESS),
        ("weather", "- city: expected a string, got 1 (integer)", ToolStatus.ERROR),
    ]
    assert agent.tools["weather"].spec.input_schema["properties"] == {"city": {"type": "string", "description": "the city's name."}}


def test_hook_register_commands(tmp_path, monkeypatch):
    from monoagent import _cli as cli_module

    class Plugin:
        @hookimpl
        def register_commands(self, cli):
            @cli.command(name="hello-test")
            def hello():
                click.echo("hello from a plugin")

    agent = fresh_agent(tmp_path, plugins=[Plugin()])
    group = cli_module.build_cli(agent.host)
    result = CliRunner().invoke(group, ["hello-test"])
    assert result.output == "hello from a plugin\n"
    assert "hello-test" not in cli_module.cli.commands


def test_hook_register_config_sections(tmp_path):
    @attrs.define
    class LabConfig:
        endpoint: str = "http://127.0.0.1:1"
        retries: int = 1

    class Plugin:
        @hookimpl
        def register_config_sections(self, register):
            register("lab", LabConfig)

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"lab": {"retries": 3}})
    assert agent.config.section("lab") == LabConfig(retries=3)
    from monoagent._kernel.errors import ConfigError

    with pytest.raises(ConfigError, match=r"lab\.retry: unknown key .*did you mean 'retries'"):
        fresh_agent(tmp_path, plugins=[Plugin()], config={"lab": {"retry": 3}})

    @attrs.define
    class Checked:
        retries: int = attrs.field(default=1, validator=attrs.validators.le(5))

    class Validating:
        @hookimpl
        def register_config_sections(self, register):
            register("checked", Checked)

    with pytest.raises(ConfigError, match=r"checked: 'retries' must be <= 5: 9"):
        fresh_agent(tmp_path, plugins=[Validating()], config={"checked": {"retries": 9}})


# ---------------------------------------------------------------------------- lifecycle


def test_hook_configure(tmp_path):
    seen = []

    class Early:
        @hookimpl
        def configure(self, agent):
            seen.append(("early", agent.config.runtime.max_turns))

    class Late:
        @hookimpl
        def configure(self, agent):
            seen.append(("late", agent.model))

    agent = fresh_agent(tmp_path, plugins=[Early()], config={"runtime": {"maxTurns": 7}})
    assert seen == [("early", 7)]
    agent.register(Late())  # historic: a late plugin still receives the call, once
    assert seen == [("early", 7), ("late", "offline:echo")]


def test_hook_shutdown(tmp_path):
    closed = []

    class Plugin:
        @hookimpl
        def shutdown(self, agent):
            async def close():
                closed.append(agent.model)

            return close()

    agent = fresh_agent(tmp_path, plugins=[Plugin()])
    agent.close()
    assert closed == ["offline:echo"]


def test_hook_after_history_reset(tmp_path):
    told = []

    class Plugin:
        @hookimpl
        def after_history_reset(self, agent, logical_conversation_id):
            async def forget():  # an awaitable result is awaited; the history is gone by now
                told.append((logical_conversation_id, len(await agent.history_store.load("chat:7"))))

            return forget()

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"session": {"rollover": "daily"}}})
    run(agent, conversation="chat:7")
    asyncio.run(agent.reset_conversation("chat:7:2026-01-02"))  # under daily rollover a bucket names its logical session
    assert told == [("chat:7", 0)]


# ---------------------------------------------------------------------------- section producers


def test_hook_section_core_guardrails(tmp_path):
    class Plugin:
        @hookimpl
        def section_core_guardrails(self, turn):
            return Section("core_guardrails", "Be terse.", order=100, source="test")

    prompt = assemble(fresh_agent(tmp_path, plugins=[Plugin()]))
    assert prompt.stable_text.startswith("Be terse.\n\n")
    assert prompt.manifest.sections[0].source == "test"


def test_hook_section_identity(tmp_path):
    class Plugin:
        @hookimpl
        def section_identity(self, turn):
            return Section("identity", "You are Ada.", order=200)

    prompt = assemble(fresh_agent(tmp_path, plugins=[Plugin()]))
    assert "You are Ada." in prompt.stable_text
    assert "IDENTITY.md" not in prompt.stable_text
    assert prompt.manifest.section_ids[:3] == ("core_guardrails", "identity", "session")


def test_hook_section_session(tmp_path):
    class Plugin:
        @hookimpl
        def section_session(self, turn):
            return Section("session", f"Batch job on {turn.request.channel}.", order=300)

    prompt = assemble(fresh_agent(tmp_path, plugins=[Plugin()]), channel="cron")
    assert "Batch job on cron." in prompt.stable_text


def _skill(tmp_path, name="research", body="Search first."):
    skill = tmp_path / "skills" / name
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\ndescription: Finds things\n---\n{body}\n", encoding="utf-8")
    return {"context": {"skillsRoot": str(tmp_path / "skills"), "selectedSkills": [name]}}


def test_hook_section_skill_index(tmp_path):
    config = _skill(tmp_path)
    assert "research: Finds things" in assemble(fresh_agent(tmp_path, config=config)).system_text

    class Hide:
        @hookimpl
        def section_skill_index(self, turn):
            return Section("skill_index", "", order=500)

    prompt = assemble(fresh_agent(tmp_path, config=config, plugins=[Hide()]))
    assert "skill_index" not in prompt.manifest.section_ids
    assert "skill_instructions" in prompt.manifest.section_ids


def test_hook_section_skill_instructions(tmp_path):
    config = _skill(tmp_path)

    class Plugin:
        @hookimpl
        def section_skill_instructions(self, turn):
            return Section("skill_instructions", "Custom skill text.", order=600)

    prompt = assemble(fresh_agent(tmp_path, config=config, plugins=[Plugin()]))
    assert "Custom skill text." in prompt.system_text
    assert "Search first." not in prompt.system_text


def _check_optional_section(tmp_path: Any, sid: str, hook: str | None = None) -> None:
    """An optional section hook (order 360 or 610 to 690): a project's implementation of ``hook`` (default: the
    catalogued hook of ``sid``) wins, is placed by the catalogued order and stability whatever it declares, is
    left out by empty text, and is never produced under ``minimal``."""
    from monoagent._kernel.hookspecs import SECTIONS

    (spec,) = [spec for spec in SECTIONS if spec.id == sid]
    hook, order, stability = hook or spec.name, spec.order, spec.stability
    calls: list[str] = []

    class Plugin:
        def __init__(self, text: str) -> None:
            self.text = text

        @hookimpl(specname=hook)
        def produce(self, turn):
            calls.append(turn.profile)
            return Section("wrong_id", self.text, order=1, stability="dynamic" if stability == "stable" else "stable", source="project")

    config = {"runtime": {"session": {"mode": "per-message"}}}  # the dynamic part stays in the system text
    prompt = assemble(fresh_agent(tmp_path, config=config, plugins=[Plugin(f"Project {sid} text.")]))
    placed = {s.id: s for s in prompt.manifest.sections}[sid]
    assert (placed.order, placed.stability, placed.source) == (order, stability, "project")
    assert placed.part == ("stable" if stability == "stable" else "dynamic")
    assert f"Project {sid} text." in (prompt.stable_text if stability == "stable" else prompt.dynamic_text)
    ids = prompt.manifest.section_ids
    assert ids.index("core_guardrails") < ids.index(sid)

    blocked = assemble(fresh_agent(tmp_path, config=config, plugins=[Plugin("")]))
    assert sid not in blocked.manifest.section_ids

    calls.clear()
    minimal = assemble(fresh_agent(tmp_path, config=config, plugins=[Plugin("text")]), profile="minimal")
    assert calls == [] and sid not in minimal.manifest.section_ids and minimal.manifest.profile == "minimal"


def test_hook_section_tool_recovery_policy(tmp_path):
    _check_optional_section(tmp_path, "tool_recovery_policy")
    from monoagent_plugins.prompt.recovery import TOOL_RECOVERY_POLICY

    class NoTools:
        @hookimpl
        def filter_tools(self, turn, tools):
            return []

    bundled = assemble(fresh_agent(tmp_path))  # the bundled tools are offered
    assert TOOL_RECOVERY_POLICY in bundled.stable_text
    assert "tool_recovery_policy" not in assemble(fresh_agent(tmp_path, plugins=[NoTools()])).manifest.section_ids


def _round_sections(tmp_path, fn, config=None):
    """The retry_instruction and recovery_continuation text of each provider request of one turn."""
    from monoagent.testing import FunctionProvider

    provider = FunctionProvider(fn, name="rounds")
    agent = fresh_agent(tmp_path, provider=provider, config={"runtime": {"session": {"mode": "per-message"}}, **(config or {})})
    agent.run_sync("go", conversation_id="t")
    ids = [{s.id: s.text for s in r.prompt.sections} for r in provider.requests]
    agent.close()
    return ids


def test_hook_section_current_permissions(tmp_path):
    _check_optional_section(tmp_path, "current_permissions")
    config = {"runtime": {"session": {"mode": "per-message"}}}
    assert "current_permissions" not in assemble(fresh_agent(tmp_path, config=config)).manifest.section_ids
    restricted = assemble(fresh_agent(tmp_path, config={**config, "permissions": {"profile": "read_only"}}))
    (section,) = [s for s in restricted.manifest.sections if s.id == "current_permissions"]
    assert section.source == "permissions" and "Permission profile: read_only." in restricted.dynamic_text


def test_hook_section_task_orchestration(tmp_path):
    _check_optional_section(tmp_path, "task_orchestration")
    # the bundled default (subagents): present exactly when the task tool is offered, listing the agents
    from monoagent import SubagentSpec

    config = {"runtime": {"session": {"mode": "per-message"}}}
    offered = assemble(fresh_agent(tmp_path, config=config, subagents={"critic": SubagentSpec("Criticises a draft.")}))
    assert "task_orchestration" in offered.manifest.section_ids and "- critic: Criticises a draft." in offered.dynamic_text
    none = assemble(fresh_agent(tmp_path, config=config))
    assert "task_orchestration" not in none.manifest.section_ids
    assert none.manifest.fingerprints.stable == offered.manifest.fingerprints.stable


def test_hook_section_artifact_references(tmp_path):
    _check_optional_section(tmp_path, "artifact_references")
    from monoagent._kernel.model import Attachment

    agent = fresh_agent(tmp_path / "bundled")  # artifact-refs: only when the retained history carries references
    run(agent, "plain")
    assert "artifact_references" not in assemble(agent).manifest.section_ids
    run(agent, "with a file", attachments=[Attachment("a.txt", "text/plain", "text")])
    assert "artifact_references" in assemble(agent).manifest.section_ids


def test_hook_section_hidden_tool_domains(tmp_path):
    _check_optional_section(tmp_path, "hidden_tool_domains")

    class Hidden:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("artifact_peek", "Peek.", domain="artifact"), lambda context: "")

    config = {"runtime": {"session": {"mode": "per-message"}}}
    assert "hidden_tool_domains" not in assemble(fresh_agent(tmp_path, config=config)).manifest.section_ids
    hidden = assemble(fresh_agent(tmp_path, config=config, plugins=[Hidden()]))
    (section,) = [s for s in hidden.manifest.sections if s.id == "hidden_tool_domains"]
    assert section.source == "tool-domains" and "- artifact: artifact_peek" in hidden.dynamic_text
    shown = assemble(fresh_agent(tmp_path, config={**config, "tools": {"visible": ["artifact"]}}, plugins=[Hidden()]))
    assert "hidden_tool_domains" not in shown.manifest.section_ids


def test_hook_section_agents_md(tmp_path):
    _check_optional_section(tmp_path, "agents_md")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "AGENTS.md").write_text("Folder rules.", encoding="utf-8")
    config = {"context": {"agentsMd": {"channels": {"webhook": str(folder)}}}}
    agent = fresh_agent(tmp_path / "bundled", config=config)  # agents-md: the channel's folder, when configured
    assert "agents_md" in assemble(agent, channel="webhook").manifest.section_ids
    assert "agents_md" not in assemble(agent, channel="cron").manifest.section_ids


def test_hook_section_recovery_continuation(tmp_path):
    _check_optional_section(tmp_path, "recovery_continuation")
    from monoagent.testing import FunctionReply
    from monoagent_plugins.prompt.recovery import CONTINUATION_HINT

    rounds = _round_sections(tmp_path, lambda r: FunctionReply("cut ", stop_reason="max_tokens") if r.step == 1 else "off")
    assert [r.get("recovery_continuation") for r in rounds] == [None, CONTINUATION_HINT]


def test_hook_section_retry_instruction(tmp_path):
    _check_optional_section(tmp_path, "retry_instruction")
    from monoagent_plugins.prompt.recovery import FINAL_ANSWER_INSTRUCTION

    def model(request):
        return [{"name": "no_such_tool", "arguments": {}}] if request.tools else "answer"

    rounds = _round_sections(tmp_path, model, {"runtime": {"maxTurns": 3, "session": {"mode": "per-message"}}})
    texts = [r.get("retry_instruction") for r in rounds]
    assert texts[0] is None and "the call of tool 'no_such_tool' (rejected)" in texts[1]
    assert texts[2] == FINAL_ANSWER_INSTRUCTION


def test_hook_section_dynamic_context(tmp_path):
    _check_optional_section(tmp_path, "dynamic_context")
    agent = fresh_agent(tmp_path / "bundled")  # dynamic-context: exactly when the request has context
    assert "dynamic_context" in assemble(agent, context="Today's focus: billing.").manifest.section_ids
    assert "dynamic_context" not in assemble(agent).manifest.section_ids


def test_hook_section_runtime_facts(tmp_path):
    _check_optional_section(tmp_path, "extra_system")
    prompt = assemble(fresh_agent(tmp_path / "bundled"))  # runtime-facts: on every full-profile turn
    assert {s.id: s.source for s in prompt.manifest.sections}["extra_system"] == "runtime-facts"
    assert "extra_system" not in assemble(fresh_agent(tmp_path / "bundled"), profile="minimal").manifest.section_ids


class OldFacts:
    """A project written before section_extra_system was renamed section_runtime_facts."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    @hookimpl
    def section_extra_system(self, turn):
        return None if self.text is None else Section("extra_system", self.text, order=690, stability="dynamic", source="old")


def test_hook_section_extra_system(tmp_path):
    """Deprecated since 0.2: implementing it warns, naming section_runtime_facts, and its answer still comes
    first (ahead of the bundled runtime-facts); an answer of None gives way to section_runtime_facts."""
    from monoagent import HookDeprecationWarning

    deprecated = "section_extra_system is deprecated since 0.2; implement section_runtime_facts"
    with pytest.warns(HookDeprecationWarning, match=deprecated):
        _check_optional_section(tmp_path, "extra_system", hook="section_extra_system")
    with pytest.warns(HookDeprecationWarning, match=deprecated) as caught:
        agent = fresh_agent(tmp_path, plugins=[OldFacts("Old facts.")])
    assert caught[0].filename == __file__
    (section,) = [s for s in assemble(agent).sections if s.id == "extra_system"]
    assert (section.text, section.source) == ("Old facts.", "old")

    with pytest.warns(HookDeprecationWarning):
        silent = fresh_agent(tmp_path, plugins=[OldFacts(None)])
    assert {s.id: s.source for s in assemble(silent).manifest.sections}["extra_system"] == "runtime-facts"


def test_section_extra_system_gives_way_to_an_implementation_of_section_runtime_facts(tmp_path):
    from monoagent import HookDeprecationWarning

    class NewFacts:
        @hookimpl
        def section_runtime_facts(self, turn):
            return Section("extra_system", "New facts.", order=690, source="new")

    for plugins in ([NewFacts(), OldFacts("Old facts.")], [OldFacts("Old facts."), NewFacts()]):
        with pytest.warns(HookDeprecationWarning):
            agent = fresh_agent(tmp_path, plugins=plugins)
        with HookRecorder(agent) as recorder:
            prompt = assemble(agent)
        assert {s.id: s.text for s in prompt.sections}["extra_system"] == "New facts."
        assert recorder.of("section_extra_system") == []  # the replacement answered: the alias is not asked

    plain = fresh_agent(tmp_path)
    with HookRecorder(plain) as recorder:
        assemble(plain)
    assert recorder.of("section_extra_system") == [] and len(recorder.of("section_runtime_facts")) == 1


def test_hook_extra_sections(tmp_path):
    class Plugin:
        @hookimpl
        def extra_sections(self, turn):
            return [
                Section("facts", "Today is a test.", order=650, stability="dynamic", source="facts"),
                Section("policy", "Policy text.", order=150, stability="stable", source="policy"),
            ]

    prompt = assemble(fresh_agent(tmp_path, config={"runtime": {"session": {"mode": "per-message"}}}, plugins=[Plugin()]))  # dynamic text in the system prompt
    ids = prompt.manifest.section_ids
    assert ids.index("policy") == 1 and ids[-2:] == ("facts", "extra_system")
    assert "Policy text." in prompt.stable_text and "Today is a test." in prompt.dynamic_text


def test_hook_render_history(tmp_path):
    class Plugin:
        @hookimpl
        def render_history(self, turn, messages):
            text = "\n".join(f"{m.role}> {m.content}" for m in messages)
            return Section("conversation_history", text, order=400, stability="dynamic")

    agent = fresh_agent(tmp_path, config={"runtime": {"session": {"mode": "per-message"}}}, plugins=[Plugin()])  # continuous mode passes no messages
    run(agent, "first")
    prompt = assemble(agent, "second")
    assert prompt.dynamic_text.startswith("user> first\nassistant> [offline:echo]")


def test_hook_render_user_message(tmp_path):
    class Plugin:
        @hookimpl
        def render_user_message(self, turn, parts):
            return Message("user", turn.request.text.upper())

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"session": {"mode": "per-message"}}})  # no dynamic block on it
    assert run(agent, "quiet please").text.endswith("you said: QUIET PLEASE")
    stored = asyncio.run(agent.history_store.load("t"))
    assert stored[0].content == "quiet please"


# ---------------------------------------------------------------------------- turn steps


def test_hook_recall_memory(tmp_path):
    """Each implementation bounds its own hits; the kernel passes on what they answered, concatenated in call order."""

    class Notes:
        @hookimpl
        def recall_memory(self, turn):
            async def hits():
                return [MemoryHit("notes", f"fact {i}", score=i / 10) for i in range(6)]

            return hits()

    class Diary:
        @hookimpl
        def recall_memory(self, turn):
            return [MemoryHit("diary", "entry 1", score=0.99), MemoryHit("diary", "entry 2", score=0.01)]

    agent = fresh_agent(tmp_path, plugins=[Notes()])
    agent.register(Diary())
    events: list = []
    result = asyncio.run(agent.respond(TurnRequest("hi", conversation_id="t"), on_event=events.append))
    (recalled,) = [e.data for e in events if e.type == "memory_recalled"]
    assert [h["source"] for h in recalled["hits"]] == ["diary"] * 2 + ["notes"] * 6  # no gate: all eight, in call order
    assert recalled["bytes"] == 2 * 7 + 6 * 6
    assert all(f"fact {i}" in result.text for i in range(6)) and "entry 2" in result.text
    assert "fact" not in str(recalled)


def test_hook_augment_user_message(tmp_path):
    class Plugin:
        @hookimpl
        def augment_user_message(self, turn, recalled):
            return [
                UserMessagePart("(reply in French)", position="after", order=950),
                UserMessagePart("<current_speaker>Alice</current_speaker>", position="before"),
            ]

    prompt = assemble(fresh_agent(tmp_path, plugins=[Plugin()]), "Bonjour")
    assert current_user_message(prompt).content == "<current_speaker>Alice</current_speaker>\n\nBonjour\n\n(reply in French)"
    assert "French" not in prompt.system_text


def test_hook_count_tokens(tmp_path):
    calls = []

    class Plugin:
        @hookimpl
        def count_tokens(self, text, model):
            calls.append(model)
            return 10**9

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"compaction": {"policy": "truncate"}}})
    run(agent, "one")
    events: list = []
    asyncio.run(agent.respond(TurnRequest("two", conversation_id="t"), on_event=events.append))
    compaction = next(e for e in events if e.type == "context_compaction_applied")
    assert calls and set(calls) == {"offline:echo"}
    assert compaction.data["applied"] is True and compaction.data["messages_after"] == 0


def test_hook_choose_compaction(tmp_path):
    chosen = []

    class Plugin:
        @hookimpl
        def choose_compaction(self, turn, history_tokens, budget):
            chosen.append((history_tokens > 0, budget))
            return "truncate"

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"compaction": {"contextWindowOverride": 5000, "responseReserveTokens": 1000}}})
    run(agent, "one")
    run(agent, "two")
    assert chosen == [(True, 4000)]


def test_hook_prepare_provider_request(tmp_path):
    seen = []

    class Replace:
        @hookimpl
        def prepare_provider_request(self, turn, request):
            return attrs.evolve(request, max_output_tokens=100)

    class Wrap:
        @hookimpl(wrapper=True)
        def prepare_provider_request(self, turn, request):
            request = yield
            seen.append(request.max_output_tokens)
            return attrs.evolve(request, max_output_tokens=request.max_output_tokens * 2)

    class Record:
        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            seen.append(request.max_output_tokens)

    run(fresh_agent(tmp_path, plugins=[Replace(), Wrap(), Record()]))
    assert seen == [100, 200]


def test_hook_after_provider_call(tmp_path):
    outcomes = []

    class Plugin:
        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            outcomes.append((request.step, outcome.stop_reason, outcome.usage.output_tokens > 0, outcome.text[:14]))

    run(fresh_agent(tmp_path, plugins=[Plugin()]))
    assert outcomes == [(1, "end_turn", True, "[offline:echo]")]


def _tool_agent(tmp_path, plugin, steps):
    class Tools:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("shell", "Run a command."), lambda context: f"ran {context.arguments.get('cmd')}")

    script = write_script(tmp_path / "script.json", steps)
    return fresh_agent(
        tmp_path, plugins=[Tools(), plugin],
        config={"runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(script)}}},
    )


def test_hook_before_tool_call(tmp_path):
    class Plugin:
        @hookimpl
        def before_tool_call(self, turn, call):
            if call.arguments.get("cmd") == "rm -rf /":
                return ToolResult(call.id, call.name, "refused", ToolStatus.REJECTED)
            return None

    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": "rm -rf /"}}, {"name": "shell", "arguments": {"cmd": "ls"}}]}, {"text": "done"}]
    result = run(_tool_agent(tmp_path, Plugin(), steps))
    assert [(a.result.content, a.result.status) for a in result.tool_activity] == [
        ("refused", ToolStatus.REJECTED), ("ran ls", ToolStatus.SUCCESS)
    ]


def test_before_tool_call_may_answer_with_an_awaitable_and_none_passes_the_call_on(tmp_path):
    """An awaited answer wins like a direct one; an awaited None lets the implementations after it answer."""
    order: list[str] = []

    class Waits:
        @hookimpl(tryfirst=True)
        def before_tool_call(self, turn, call):
            async def decide():
                await asyncio.sleep(0)
                order.append(f"waits:{call.arguments['cmd']}")
                if call.arguments["cmd"] == "rm":
                    return ToolResult(call.id, call.name, "refused after a wait", ToolStatus.REJECTED)
                return None

            return decide()

    class Answers:
        @hookimpl
        def before_tool_call(self, turn, call):
            order.append(f"answers:{call.arguments['cmd']}")
            return ToolResult(call.id, call.name, "cached") if call.arguments["cmd"] == "date" else None

    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": c}} for c in ("rm", "date", "ls")]}, {"text": "done"}]
    agent = _tool_agent(tmp_path, Waits(), steps)
    agent.register(Answers())
    result = run(agent)
    assert [a.result.content for a in result.tool_activity] == ["refused after a wait", "cached", "ran ls"]
    assert order == ["waits:rm", "waits:date", "answers:date", "waits:ls", "answers:ls"]


def test_hook_turn_permissions(tmp_path):
    from monoagent import permission_profile

    class Webhooks:
        @hookimpl
        def turn_permissions(self, turn):
            return permission_profile("webhooks", ["read"]) if turn.request.channel == "webhook" else None

    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}]}, {"text": "done"}] * 2
    agent = _tool_agent(tmp_path, Webhooks(), steps)
    events: list[Any] = []
    refused = asyncio.run(agent.respond(TurnRequest("hi", conversation_id="w", channel="webhook"), on_event=events.append))
    assert refused.tool_activity[0].result.status is ToolStatus.REJECTED and "'webhooks'" in refused.tool_activity[0].result.content
    assert [e.data["decision"] for e in events if e.type == "permission_decision"] == ["denied"]
    ran = run(agent, conversation="other")  # no answer of its own: the permissions plugin's, full_access
    assert ran.tool_activity[0].result.content == "ran ls"


def test_hook_hide_tools(tmp_path):
    class HideShell:
        @hookimpl
        def hide_tools(self, turn, tools):
            return [spec for spec in tools if spec.name == "shell"]

    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}]}, {"text": "done"}]
    result = run(_tool_agent(tmp_path, HideShell(), steps))
    assert result.tool_activity[0].result.status is ToolStatus.REJECTED
    assert result.tool_activity[0].result.content == "Tool 'shell' is hidden in this turn: it is not callable until it is revealed."


def test_hook_save_tool_output(tmp_path):
    kept = {}

    class Plugin:
        @hookimpl
        def save_tool_output(self, turn, result, block):
            kept[(turn.run_id, result.call_id)] = block.text
            return f"bucket://{result.name}/{len(kept)}"

        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("dump", "Dump a lot."), lambda context: "x" * 300_000)

    steps = [{"tool_calls": [{"name": "dump"}]}, {"text": "done"}]
    result = run(_tool_agent(tmp_path, Plugin(), steps))
    agent_artifacts = tmp_path / "home" / "artifacts"
    guarded = result.tool_activity[0].result.content
    assert "The original was saved to (untrusted raw output):\n- bucket://dump/1" in guarded
    assert list(kept.values()) == ["x" * 300_000]
    assert not (agent_artifacts / "tool-output").exists()  # the project's implementation won


def test_hook_after_tool_call(tmp_path):
    seen = []

    class Plugin:
        @hookimpl
        def after_tool_call(self, turn, call, result):
            seen.append((call.name, result.status.value))

    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}, {"name": "nope"}]}, {"text": "done"}]
    result = run(_tool_agent(tmp_path, Plugin(), steps))
    assert seen == [("shell", "success"), ("nope", "rejected")]
    assert "not available in this turn (available: RunHistory, SessionHistory, shell)" in result.tool_activity[1].result.content


def test_hook_provide_tools(tmp_path):
    seen: list[Any] = []

    class Catalogue:
        @hookimpl
        def provide_tools(self, agent, turn):
            seen.append(turn)

            async def offered():  # may return an awaitable
                return [Tool(ToolSpec("lab__status", "The lab's status."), lambda context: "all green", source="lab"),
                        ToolSourceFailure("lab-2", "did not answer")]

            return offered()

    class Dodgy:
        @hookimpl
        def provide_tools(self, agent, turn):
            return [Tool(ToolSpec("shell", "A second shell."), lambda context: "no")]

    steps = [{"tool_calls": [{"name": "lab__status"}]}, {"text": "done"}]
    agent = _tool_agent(tmp_path, Catalogue(), steps)
    events: list[Any] = []
    result = asyncio.run(agent.respond(TurnRequest("hello", conversation_id="t"), on_event=events.append))
    assert result.tool_activity[0].result.content == "all green" and result.text == "done"
    assert seen[0] is not None and seen[0].run_id == result.run_id  # the hook saw the run's (read-only) turn
    warning = [e.data for e in events if e.type == "runtime_warning"]
    assert warning == [{"code": "tool_source_unavailable", "source": "lab-2", "message": "did not answer"}]
    listed, failures = asyncio.run(provided_tools(agent, None))  # what `monoagent tools` lists
    assert list(listed) == ["lab__status"] and listed["lab__status"].source == "lab" and failures[0].source == "lab-2"
    assert listed["lab__status"].plugin == "Catalogue"  # stamped with the plugin that provided it
    agent.register(Dodgy(), name="dodgy")
    with pytest.raises(PluginError, match=r"tool 'shell' is offered by plugins .* and 'dodgy'"):
        asyncio.run(provided_tools(agent, None))


def test_hook_filter_tools(tmp_path):
    offered, sent = [], []

    class NoShellOnWebhooks:
        @hookimpl
        def filter_tools(self, turn, tools):
            offered.append([spec.name for spec in tools])
            if turn.request.channel == "webhook":
                return [spec for spec in tools if spec.name != "shell"]
            return None

    class KeepsEverything:
        @hookimpl
        def filter_tools(self, turn, tools):
            return list(tools)  # keeping all cannot re-admit what another plugin withdrew

        @hookimpl
        def after_provider_call(self, turn, request, outcome):
            sent.append([spec.name for spec in request.tools])

    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}]}, {"text": "done"}] * 2
    agent = _tool_agent(tmp_path, NoShellOnWebhooks(), steps)
    agent.register(KeepsEverything())
    webhook = run(agent, channel="webhook")
    assert webhook.tool_activity[0].result.status is ToolStatus.REJECTED
    assert sent[0] == ["RunHistory", "SessionHistory"]
    api = run(agent, conversation="other")
    assert api.tool_activity[0].result.content == "ran ls" and sent[2] == ["RunHistory", "SessionHistory", "shell"]
    assert len(offered) == 2  # each implementation sees every registered tool, those the memory plugins withdraw included
    assert all({"shell", "MemoryRecall", "MemoryJournal"} <= set(names) for names in offered)


def test_hook_redact(tmp_path):
    class Plugin:
        @hookimpl(wrapper=True)
        def redact(self, text, kind):
            text = yield
            return text.replace("ACME-INTERNAL", "[REDACTED:codename]")

    agent = fresh_agent(tmp_path, plugins=[Plugin()])
    out = agent.redact("ACME-INTERNAL key sk-ant-api03-abcdefghijklmnopqrstuv at /home/alice/work/src/app.py", "error")
    assert "ACME" not in out and "sk-ant" not in out and "/home/alice" not in out
    assert "[REDACTED:codename]" in out and "[REDACTED:anthropic_key]" in out and out.endswith("/src/app.py")
    assert agent.redact("see https://docs.python.org/3/library/json.html", "event") == "see https://docs.python.org/3/library/json.html"


def test_hook_after_commit(tmp_path):
    captured = []

    class Plugin:
        @hookimpl
        def after_commit(self, turn, result):
            captured.append((turn.request.text, result.text[:14]))

    class Broken:
        @hookimpl
        def after_commit(self, turn, result):
            raise RuntimeError("capture backend down")

    agent = fresh_agent(tmp_path, plugins=[Plugin(), Broken()])
    events: list = []
    result = asyncio.run(agent.respond(TurnRequest("hi", conversation_id="t"), on_event=events.append))
    assert captured == [("hi", "[offline:echo]")]
    warning = next(e for e in events if e.type == "runtime_warning")
    assert warning.data["code"] == "after_commit_failed" and result.status == "completed"
    assert len(asyncio.run(agent.history_store.load("t"))) == 2

    script = write_script(tmp_path / "fail.json", [{"error": "boom"}])
    failing = fresh_agent(tmp_path / "f", plugins=[Plugin()], config={"runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(script)}}})
    with pytest.raises(Exception, match="boom"):
        run(failing, "never captured")
    assert captured == [("hi", "[offline:echo]")]


def test_hook_on_run_event(tmp_path):
    seen = []

    class Plugin:
        @hookimpl
        def on_run_event(self, event, agent):
            seen.append(event.type)

    class Broken:
        @hookimpl
        def on_run_event(self, event, agent):
            raise RuntimeError("observer bug")

    run(fresh_agent(tmp_path, plugins=[Plugin(), Broken()]))
    assert seen[0] == "run_started" and seen[-1] == "run_completed"
    assert {"prompt_manifest", "provider_request", "text_delta", "provider_response", "run_committed"} <= set(seen)


def test_hook_recorder_sees_turn_steps(tmp_path):
    """Observer hooks (after_commit, on_run_event) run isolated per plugin and are not recorded."""
    agent = fresh_agent(tmp_path)
    with HookRecorder(agent) as recorder:
        run(agent)
    names = recorder.names()
    order = ["recall_memory", "augment_user_message", "render_user_message", "section_core_guardrails",
             "section_identity", "section_session", "render_history", "section_skill_index",
             "section_skill_instructions", "extra_sections", "prepare_provider_request", "after_provider_call"]
    assert [n for n in names if n in order] == order
    # subagents answers first (None: this Agent is no subagent with a system text), then identity
    assert recorder.of("section_identity")[0].plugins == ("subagents", "identity")


def test_max_turns_caps_the_tool_loop(tmp_path):
    steps = [{"tool_calls": [{"name": "shell", "arguments": {"cmd": "ls"}}]}] * 3 + [{"text": "done"}]

    class Nothing:
        pass

    agent = _tool_agent(tmp_path, Nothing(), steps)
    agent.config.runtime.max_turns = 2
    with pytest.raises(TurnFailed, match=r"runtime\.maxTurns = 2"):
        run(agent)
    history = asyncio.run(agent.history_store.load("t"))  # no answer: the request and its continuity account
    assert len(history) == 2 and history[1].content.startswith("[Continuity account v1")


# ---------------------------------------------------------------------------- the typed facade


def _hookspecs() -> dict[str, Any]:
    import inspect

    from monoagent._kernel import hookspecs

    return {
        name: function for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, "monoagent_spec")
    }


REGISTRY_HOOKS = frozenset(
    name for name in _hookspecs() if name.startswith("register_") and name != "register_commands"
)


def _wrapping_plugins(counts: dict[tuple[str, str], int], hooks: Any) -> tuple[object, object]:
    """Two plugins with a wrapper on each of ``hooks``: new-style (``wrapper=True``) and old-style
    (``hookwrapper=True``); each counts its runs in ``counts[(style, hook)]`` and hands the result on."""

    def new_style(name: str) -> Any:
        def wrap(**kwargs: Any) -> Any:
            counts[("new", name)] = counts.get(("new", name), 0) + 1
            return (yield)

        return hookimpl(wrapper=True, specname=name)(wrap)

    def old_style(name: str) -> Any:
        def wrap(**kwargs: Any) -> Any:
            counts[("old", name)] = counts.get(("old", name), 0) + 1
            outcome = yield
            outcome.get_result()

        return hookimpl(hookwrapper=True, specname=name)(wrap)

    new = type("NewStyleWrappers", (), {name: staticmethod(new_style(name)) for name in hooks})()
    old = type("OldStyleWrappers", (), {name: staticmethod(old_style(name)) for name in hooks})()
    return new, old


@pytest.mark.filterwarnings("ignore:section_extra_system is deprecated:monoagent._kernel.errors.HookDeprecationWarning")
def test_wrappers_of_both_styles_run_once_per_call_on_every_hook(tmp_path):
    """pluggy runs every hook call: a ``wrapper=True`` and a ``hookwrapper=True`` implementation of
    every hook (but the registries and ``configure``, refused below) run exactly once per call,
    over a run that reaches every hook: a tool call whose output is saved, two turns (compaction is
    considered once history exists), the command line, a reset and the close."""
    wrapped = sorted(set(_hookspecs()) - REGISTRY_HOOKS - {"configure"})
    counts: dict[tuple[str, str], int] = {}
    new, old = _wrapping_plugins(counts, wrapped)

    class Tools:
        @hookimpl
        def register_tools(self, register):
            register(ToolSpec("dump", "Dump a lot."), lambda context: "x" * 300_000)

    steps = [{"tool_calls": [{"name": "dump"}]}, {"text": "done"}, {"text": "again"}]
    script = write_script(tmp_path / "script.json", steps)
    agent = fresh_agent(
        tmp_path, plugins=[Tools(), new, old],
        config={"runtime": {"model": "offline:scripted"}, "providers": {"offline": {"scriptPath": str(script)}}},
    )
    assert [r.status for r in agent.host.records if r.name in ("NewStyleWrappers", "OldStyleWrappers")] == ["active", "active"]
    from monoagent import _cli as cli_module

    async def scenario() -> None:
        await agent.respond(TurnRequest("first", conversation_id="w"))
        await agent.respond(TurnRequest("second", conversation_id="w"))
        await agent.reset_conversation("w")
        await agent.aclose()

    with HookRecorder(agent) as recorder:
        asyncio.run(scenario())
        cli_module.build_cli(agent.host)
    called = {name: len(recorder.of(name)) for name in wrapped}
    assert all(called.values()), f"the scenario reaches every hook; not reached: {[n for n, c in called.items() if not c]}"
    assert {name: counts.get(("new", name), 0) for name in wrapped} == called
    assert {name: counts.get(("old", name), 0) for name in wrapped} == called


@pytest.mark.parametrize("style", ["wrapper", "hookwrapper"])
@pytest.mark.parametrize("hook", sorted(REGISTRY_HOOKS | {"configure"}))
def test_a_wrapper_on_a_registry_or_historic_hook_is_refused_naming_plugin_and_hook(tmp_path, hook, style):
    def wrap(**kwargs: Any) -> Any:
        yield

    plugin = type("Wrapping", (), {hook: staticmethod(hookimpl(specname=hook, **{style: True})(wrap))})()
    agent = fresh_agent(tmp_path)
    record = agent.register(plugin)
    assert record.status == "failed"
    assert "'Wrapping'" in record.reason and hook in record.reason, record.reason


def test_what_a_wrapper_returns_is_what_the_caller_sees(tmp_path):
    """A firstresult hook (a section), a collect-all hook (extra sections), an attributed one
    (``filter_tools``) and an observer (``after_commit``): each wrapper's answer reaches the turn."""
    committed = []

    class Wrappers:
        @hookimpl(wrapper=True)
        def section_identity(self, turn):
            section = yield
            return attrs.evolve(section, text=section.text + "\n\nWrapped.")

        @hookimpl(hookwrapper=True)
        def extra_sections(self, turn):
            outcome = yield
            outcome.force_result([*outcome.get_result(), Section("wrapped_extra", "From a wrapper.", order=695)])

        @hookimpl(wrapper=True)
        def filter_tools(self, turn, tools):
            answers = yield
            return [*answers, [spec for spec in tools if spec.name != "shell"]]

        @hookimpl(wrapper=True)
        def after_commit(self, turn, result):
            answers = yield

            async def note():
                committed.append(result.text)

            return [*answers, note()]

    agent = _tool_agent(tmp_path, Wrappers(), [{"text": "fine"}])
    prompt = assemble(agent)
    assert "Wrapped." in prompt.stable_text + prompt.dynamic_text
    assert "From a wrapper." in prompt.stable_text + prompt.dynamic_text
    run(agent)
    offered = asyncio.run(_offered(agent))
    assert "shell" not in offered
    assert committed == ["fine"]


async def _offered(agent: Any) -> list[str]:
    from monoagent._kernel.turn import SessionInfo
    from monoagent._pipeline.tool_loop import offered_tools
    from monoagent._pipeline.turn_run import TurnRun

    turn = TurnRun(agent=agent, request=TurnRequest("x", conversation_id="o"), run_id="r", model=agent.model,
                session=SessionInfo("request", "continuous", "o", "o"), emitter=lambda type, data: None)
    return [spec.name for spec in offered_tools(turn)]


class _Watching:
    """A hook observer: while one watches, every call takes the kernel's recorded path."""

    def started(self, name, kwargs, plugins):
        pass

    def finished(self, call):
        pass


def _maybe_observed(agent, observed):
    if observed:
        agent.hooks.observe(_Watching())
    return agent


@pytest.mark.parametrize("observed", [False, True], ids=["plain call", "observed call"])
def test_an_answer_of_the_wrong_type_is_blamed_on_its_plugin_or_on_the_wrappers(tmp_path, observed):
    from monoagent._kernel.errors import HookResultError

    class Wrong:
        @hookimpl
        def section_identity(self, turn):
            return "not a section"

    with pytest.raises(HookResultError, match=r"plugin 'Wrong' returned a value of type str from hook 'section_identity'"):
        assemble(_maybe_observed(fresh_agent(tmp_path / "a", plugins=[Wrong()]), observed))

    class WrongWrapper:
        @hookimpl(wrapper=True)
        def section_identity(self, turn):
            yield
            return 42

    with pytest.raises(HookResultError, match=r"plugin 'the wrappers of WrongWrapper' returned a value of type int"):
        assemble(_maybe_observed(fresh_agent(tmp_path / "b", plugins=[WrongWrapper()]), observed))

    class WrongItem:  # a collect-all hook: the wrong item of a list answer is blamed on its plugin
        @hookimpl
        def extra_sections(self, turn):
            return [Section("mine", "text", order=900), "not a section"]

    with pytest.raises(HookResultError, match=r"plugin 'WrongItem' returned a value of type str from hook 'extra_sections'"):
        assemble(_maybe_observed(fresh_agent(tmp_path / "c", plugins=[WrongItem()]), observed))

    class Right:
        @hookimpl
        def count_tokens(self, text, model):
            return 7

    class WrongCount:  # the plugin answering first is blamed, not the one behind it
        @hookimpl(tryfirst=True)
        def count_tokens(self, text, model):
            return "seven"

    agent = _maybe_observed(fresh_agent(tmp_path / "d", plugins=[Right(), WrongCount()]), observed)
    with pytest.raises(HookResultError, match=r"plugin 'WrongCount' returned a value of type str from hook 'count_tokens'"):
        agent.count_tokens("some text", "offline:echo")


def test_an_implementation_marked_with_another_marker_is_refused(tmp_path):
    import pluggy

    raw = pluggy.HookimplMarker("monoagent")

    class Raw:
        @raw
        def section_identity(self, turn):
            return None

    record = fresh_agent(tmp_path).register(Raw())
    assert record.status == "failed"
    assert "plugin 'Raw' implements 'section_identity' with a marker other than monoagent.hookimpl" in record.reason


def test_a_failing_observer_is_reported_and_the_others_still_run(tmp_path):
    seen = []

    class Failing:
        @hookimpl
        def on_run_event(self, event, agent):
            raise RuntimeError("observer down")

    class Watching:
        @hookimpl
        def on_run_event(self, event, agent):
            seen.append(event.type)

    agent = fresh_agent(tmp_path, plugins=[Watching(), Failing()])
    run(agent)
    assert "run_completed" in seen
    from monoagent import RunEvent
    from monoagent._kernel import hookspecs

    answers = agent.hooks.each(hookspecs.on_run_event, event=RunEvent("probe", "r", "c", 1, 0.0, {}), agent=agent)
    failed = [a for a in answers if a.error is not None]
    assert [(a.plugin, str(a.error)) for a in failed] == [("Failing", "observer down")]


def test_the_kernel_calls_hooks_only_through_the_facade():
    """No ``host.call("name")``, ``pm.hook.x`` or per-implementation loop outside kernel/hooks.py."""
    import re
    from pathlib import Path

    import monoagent
    import monoagent_plugins

    roots = [Path(monoagent.__file__).parent, Path(monoagent_plugins.__file__).parent]
    pattern = re.compile(
        r"\bpm\.hook\.\w|\.call_each\(|\.call_isolated\(|host\.call\(|\.function\("
        r"|\b(agent|host)\.hooks\.(?!first|collect|each|historic|registry|observe)\w+\("
    )
    offenders = [
        f"{path}:{number}: {line.strip()}"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        if path.name != "hooks.py" or path.parent.name != "kernel"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_hook_recorder_sees_registries_observers_and_configure(tmp_path):
    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("fixed", lambda agent, model: FixedRuntime(model), "a fixed answer")

        @hookimpl
        def configure(self, agent):
            pass

    agent = fresh_agent(tmp_path)
    with HookRecorder(agent) as recorder:
        record = agent.register(Plugin())
        run(agent)
    (registry,) = recorder.of("register_providers")
    assert registry.plugins == ("Plugin",) and registry.error is None  # the historic call, for this plugin alone
    assert [(r.kind, r.name) for r in record.registrations] == [("provider", "fixed")]
    (configured,) = recorder.of("configure")
    assert configured.plugins == ("Plugin",)
    events = recorder.of("on_run_event")
    assert events and all(call.plugins == ("artifacts",) for call in events)
    assert recorder.of("after_commit")
    (identity,) = recorder.of("section_identity")
    assert identity.winner == "identity"


def test_recorder_and_trace_name_the_implementation_whose_result_won(tmp_path, capsys):
    class Silent:
        @hookimpl
        def section_identity(self, turn):
            return None  # passes: the bundled identity answers

    class Loud:
        @hookimpl
        def section_session(self, turn):
            return Section("session", "Batch.", order=300)

    agent = fresh_agent(tmp_path, plugins=[Silent(), Loud()], env={"MONO_AGENT_TRACE_HOOKS": "1"})
    with HookRecorder(agent) as recorder:
        assemble(agent)
    assert recorder.of("section_identity")[0].plugins == ("Silent", "subagents", "identity")
    assert recorder.of("section_identity")[0].winner == "identity"
    assert recorder.of("section_session")[0].winner == "Loud"
    assert recorder.of("section_skill_index")[0].winner == "skills"
    err = capsys.readouterr().err
    assert "monoagent trace: section_identity(turn) -> [Silent, subagents, identity]" in err
    assert "monoagent trace: section_identity answered by identity" in err
    assert "monoagent trace: section_session answered by Loud" in err
    assert "monoagent trace: register_providers(register) -> [anthropic]" in err


def test_a_hook_error_names_the_plugin_while_observed(tmp_path):
    class Grumpy:
        @hookimpl
        def section_identity(self, turn):
            raise RuntimeError("no identity today")

    agent = fresh_agent(tmp_path, plugins=[Grumpy()])
    with HookRecorder(agent) as recorder, pytest.raises(HookError) as info:
        assemble(agent)
    assert (info.value.hook, info.value.plugin) == ("section_identity", "Grumpy")
    assert recorder.of("section_identity")[0].error is info.value


def test_a_plugin_registered_late_reads_its_config_section(tmp_path):
    """``agent.register`` after start-up builds the new plugin's section as start-up would (it raised KeyError)."""
    from monoagent._kernel.config import setting
    from monoagent._kernel.errors import ConfigError

    @attrs.define
    class LateConfig:
        retries: int = setting(1, doc="Retries.", env="MONO_AGENT_LATE_RETRIES", min=0, max=5)

    class Late:
        @hookimpl
        def register_config_sections(self, register):
            register("late", LateConfig)

    defaults = fresh_agent(tmp_path)
    defaults.register(Late())
    assert defaults.config.section("late") == LateConfig(retries=1)

    from monoagent._agent import Agent

    from_env = Agent({}, env={"MONO_AGENT_HOME": str(tmp_path), "MONO_AGENT_LATE_RETRIES": "3"}, autoload=False)
    from_env.register(Late())
    assert from_env.config.section("late") == LateConfig(retries=3)

    refused = Agent({}, env={"MONO_AGENT_HOME": str(tmp_path), "MONO_AGENT_LATE_RETRIES": "9"}, autoload=False)
    with pytest.raises(ConfigError, match=r"retries"):
        refused.register(Late())


def test_a_plain_call_goes_through_pluggys_execution_and_the_documented_call_agrees(tmp_path):
    """A call nobody observes runs through pluggy's execution (``_Plan``); with this pluggy that is
    the short way (a pluggy without it is called the documented way). Both ways give one answer,
    run each wrapper once and check answers alike."""
    import attrs as _attrs

    from monoagent._kernel import hookspecs

    counts: dict[tuple[str, str], int] = {}
    new, old = _wrapping_plugins(counts, ["section_identity", "augment_user_message"])

    class Parts:
        @hookimpl
        def augment_user_message(self, turn, recalled):
            return UserMessagePart("a part", source="parts")

    agent = fresh_agent(tmp_path, plugins=[new, old, Parts()])
    hooks = agent.hooks
    assert hooks._plan("section_identity").execute is not None, "pluggy's execution is not reachable: every call takes the slow way"
    turn = _view(agent)
    short = (hooks.first(hookspecs.section_identity, turn=turn), hooks.collect(hookspecs.augment_user_message, turn=turn, recalled=()))
    for name in ("section_identity", "augment_user_message"):
        hooks._plans[name] = _attrs.evolve(hooks._plan(name), execute=None)
    documented = (hooks.first(hookspecs.section_identity, turn=turn), hooks.collect(hookspecs.augment_user_message, turn=turn, recalled=()))
    assert short == documented and short[0] is not None and [p.text for p in short[1]] == ["a part"]
    assert counts == {(style, name): 2 for style in ("new", "old") for name in ("section_identity", "augment_user_message")}


def _view(agent: Any) -> Any:
    from monoagent._kernel.turn import SessionInfo
    from monoagent._pipeline.turn_run import TurnRun

    return TurnRun(agent=agent, request=TurnRequest("x", conversation_id="v"), run_id="r", model=agent.model,
                   session=SessionInfo("request", "continuous", "v", "v"), emitter=lambda type, data: None).view


def test_the_turn_snapshot_is_made_again_when_a_field_it_shows_changes_and_only_then(tmp_path):
    """Hooks see a snapshot of the run: a new value of a field the snapshot shows gives the next
    hook a new one; the pipeline's own state (continuity, the session lease) and a value set again
    leave the snapshot as it is."""
    import attrs as _attrs

    from monoagent._kernel.turn import Turn
    from monoagent._pipeline.turn_run import SNAPSHOT_FIELDS, TurnRun

    shown = {field.name for field in _attrs.fields(Turn)} - {"config", "_run"}
    assert shown <= SNAPSHOT_FIELDS, shown - SNAPSHOT_FIELDS
    agent = fresh_agent(tmp_path)
    run = _view(agent)._run
    assert isinstance(run, TurnRun)
    first = run.view
    run.history = run.history  # set again: the same snapshot
    run.continuity = None
    run.session_lease = None
    assert run.view is first
    history = (Message("user", "hi"),)
    run.history = history
    second = run.view
    assert second is not first and second.history is history and first.history == ()
    run.tools = (ToolSpec("t", "A tool."),)
    assert run.view is not second and run.view.tools[0].name == "t"
