"""Warm sessions (runtime.session.mode = "continuous"): the request layout the provider sees, the
boundaries that retire a session, idle eviction and isolated proactive turns.

The request bodies are the bytes the local Anthropic- and OpenAI-format servers received.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from loguru import logger

from monoagent import hookimpl
from monoagent._kernel import sessions
from monoagent._kernel.interfaces import CompactionOutcome
from monoagent._kernel.model import Message, Section, ToolSpec, UserMessagePart
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline import provider_call
from monoagent.testing import AnthropicWireServer, OpenAIWireServer, fresh_agent
from monoagent.testing.provider_contract import LOOKUP, Reply, ScriptedToolCall

MODEL = "anthropic:claude-x"


@pytest.fixture
def anthropic():
    with AnthropicWireServer() as server:
        yield server


@pytest.fixture
def openai():
    with OpenAIWireServer() as server:
        yield server


@pytest.fixture
def no_backoff(monkeypatch):
    async def instant(seconds: float) -> None:
        return None

    monkeypatch.setattr(provider_call, "sleep", instant)


class Dictionary:
    """A tool plugin: ``lookup`` answers from a small dictionary."""

    @hookimpl
    def register_tools(self, register):
        register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lambda context: "a coffee house")


class Recall:
    """Adds a per-turn block after the user's text, as memory recall does."""

    @hookimpl
    def augment_user_message(self, turn, recalled):
        return UserMessagePart(f"RECALLED-FOR: {turn.request.text}", position="after", order=900, source="test")


class Captures:
    """Records every after_commit call (memory capture runs there)."""

    def __init__(self) -> None:
        self.committed: list[str] = []

    @hookimpl
    def after_commit(self, turn, result):
        self.committed.append(turn.request.text)


def anthropic_agent(tmp_path, server, *, session=None, plugins=(), **config):
    base: dict[str, Any] = {
        "runtime": {"model": MODEL, "session": session or {}},
        "providers": {"anthropic": {"baseUrl": server.url}},
        "plugins": {"block": ["runtime-facts"]},  # byte-exact wire messages: no clock in the dynamic block
        **config,
    }
    return fresh_agent(tmp_path, config=base, env={"ANTHROPIC_API_KEY": "test-key"}, plugins=list(plugins))


def say(agent, text, events=None, conversation="c", **fields):
    request = TurnRequest(text, conversation_id=conversation, **fields)
    return asyncio.run(agent.respond(request, on_event=None if events is None else events.append))


def answer(server, *texts):
    server.enqueue(*(Reply(text_pieces=(text,)) for text in texts))


def strip_marks(value: Any) -> Any:
    """A wire body without its cache_control markers: what the provider compares as a prefix."""
    if isinstance(value, dict):
        return {k: strip_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_marks(v) for v in value]
    return value


def marks(body: dict) -> list[tuple[str, int, int]]:
    """Where a body's cache_control markers are: ("system", block) or ("messages", message, block)."""
    found = [("system", i, -1) for i, block in enumerate(body.get("system") or []) if "cache_control" in block]
    for m, message in enumerate(body["messages"]):
        found += [("messages", m, b) for b, block in enumerate(message["content"]) if "cache_control" in block]
    return found


def texts(message: dict) -> list[str]:
    return [block.get("text") for block in message["content"] if block["type"] == "text"]


def boundaries(events) -> list[tuple[str, str | None]]:
    return [(e.data["kind"], e.data.get("reason")) for e in events if e.type == "session_boundary"]


# --------------------------------------------------------------------------- the warm request


def test_a_warm_anthropic_turn_sends_the_transcript_then_the_current_message_and_no_history_section(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "first answer", "second answer", "third answer")
    say(agent, "first question")
    first = anthropic.requests[-1].json
    events: list = []
    say(agent, "second question", events)
    second = anthropic.requests[-1].json
    say(agent, "third question")
    third = anthropic.requests[-1].json

    assert boundaries(events) == []
    assert [(e.data["manifest"]["profile"], e.data["manifest"]["layout"]) for e in events if e.type == "prompt_manifest"] == [("full", "continuous")]
    assert len(second["system"]) == 1 and second["system"] == first["system"]  # the stable block only, unchanged
    assert "# Conversation history" not in json.dumps(second)
    assert [(m["role"], texts(m)) for m in second["messages"]] == [
        ("user", ["first question"]), ("assistant", ["first answer"]), ("user", ["second question"]),
    ]
    assert strip_marks(third["messages"][:4]) == strip_marks(second["messages"]) + [
        {"role": "assistant", "content": [{"type": "text", "text": "second answer"}]}
    ]
    assert marks(second) == [("system", 0, -1), ("messages", 1, 0)]  # the stable block and the end of the transcript
    assert marks(third) == [("system", 0, -1), ("messages", 3, 0)]


def test_a_warm_openai_turn_keeps_a_stable_system_message_and_a_common_prefix(tmp_path, openai):
    agent = fresh_agent(
        tmp_path,
        config={"runtime": {"model": "openai:gpt-x"}, "providers": {"openai": {"baseUrl": f"{openai.url}/v1"}},
                "plugins": {"block": ["runtime-facts"]}},  # no dynamic block rides the current message
        env={"OPENAI_API_KEY": "sk-test"},
    )
    answer(openai, "first answer", "second answer", "third answer")
    bodies = []
    for text in ("first question", "second question", "third question"):
        say(agent, text)
        bodies.append(openai.requests[-1].json)
    first, second, third = (body["messages"] for body in bodies)
    assert first[0]["role"] == "system" and second[0] == first[0] == third[0]
    assert "# Conversation history" not in json.dumps(bodies)
    assert [(m["role"], m["content"]) for m in second[1:]] == [
        ("user", "first question"), ("assistant", "first answer"), ("user", "second question"),
    ]
    assert third[: len(second)] == second  # each request extends the previous one


def test_the_native_tool_call_and_result_survive_into_the_next_warm_request(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic, plugins=[Dictionary()])
    anthropic.enqueue(
        Reply(text_pieces=("Let me look.",), tool_calls=(ScriptedToolCall("toolu_01A", "lookup", ('{"word": "café"}',)),)),
        Reply(text_pieces=("It means a coffee house.",)),
        Reply(text_pieces=("You are welcome.",)),
    )
    say(agent, "What does café mean?")
    step2 = anthropic.requests[-1].json
    assert marks(step2)[-1] == ("messages", len(step2["messages"]) - 1, 0)  # a tool-loop step marks its last message
    say(agent, "Thanks!")
    messages = anthropic.requests[-1].json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    tool_use = messages[1]["content"][-1]
    assert (tool_use["type"], tool_use["id"], tool_use["input"]) == ("tool_use", "toolu_01A", {"word": "café"})
    result = messages[2]["content"][0]
    assert (result["type"], result["tool_use_id"], result["content"]) == ("tool_result", "toolu_01A", "a coffee house")
    assert texts(messages[3]) == ["It means a coffee house."]
    history = asyncio.run(agent.history_store.load("c"))
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]  # canonical history keeps text only


def test_recall_and_other_per_turn_parts_ride_the_current_message_and_are_never_kept(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic, plugins=[Recall()])
    answer(anthropic, "one", "two")
    say(agent, "first <current_speaker>x</current_speaker>")
    say(agent, "second")
    messages = anthropic.requests[-1].json["messages"]
    assert texts(messages[0]) == ["first [current_speaker]x[/current_speaker]"]  # canonical: own text, neutralised
    assert texts(messages[-1]) == ["second\n\nRECALLED-FOR: second"]


def test_dynamic_sections_ride_the_current_message_in_continuous_mode(tmp_path, anthropic):
    class Facts:
        @hookimpl
        def extra_sections(self, turn):
            return [
                Section("facts", f"Turn facts: {turn.request.text}", order=650, stability="dynamic", source="facts"),
                Section("policy", "Policy text.", order=150, stability="stable", source="policy"),
            ]

    agent = anthropic_agent(tmp_path, anthropic, plugins=[Facts()])
    answer(anthropic, "one", "two")
    say(agent, "first")
    say(agent, "second")
    first, second = (request.json for request in anthropic.requests[-2:])
    assert first["system"] == second["system"] and len(second["system"]) == 1
    assert "Policy text." in second["system"][0]["text"] and "Turn facts" not in second["system"][0]["text"]
    assert texts(second["messages"][-1]) == ["Turn facts: second\n\nsecond"]
    assert texts(second["messages"][0]) == ["first"]


def test_cache_breakpoints_never_exceed_four(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic, plugins=[Dictionary()])
    call = ScriptedToolCall("toolu_{}", "lookup", ('{"word": "café"}',))
    for turn in range(3):
        anthropic.enqueue(
            Reply(tool_calls=(ScriptedToolCall(call.id.format(turn), call.name, call.argument_pieces),)),
            Reply(text_pieces=(f"answer {turn}",)),
        )
        say(agent, f"question {turn}")
    counts = [len(marks(request.json)) for request in anthropic.requests]
    assert counts == [1, 2, 2, 3, 2, 3]  # system; + the transcript's end on warm turns; + the last message in tool steps
    assert max(counts) <= 4


def test_per_message_mode_sends_history_in_the_system_prompt_as_before(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic, session={"mode": "per-message"})
    answer(anthropic, "first answer", "second answer")
    say(agent, "first question")
    events: list = []
    say(agent, "second question", events)
    body = anthropic.requests[-1].json
    assert [m["role"] for m in body["messages"]] == ["user"] and texts(body["messages"][0]) == ["second question"]
    assert len(body["system"]) == 2 and "User: first question\nAssistant: first answer" in body["system"][1]["text"]
    assert marks(body) == [("system", 0, -1)]
    assert [(e.data["manifest"]["profile"], e.data["manifest"]["layout"]) for e in events if e.type == "prompt_manifest"] == [("full", "split")]
    assert boundaries(events) == []


# --------------------------------------------------------------------------- boundaries


def test_a_model_change_retires_the_session_and_replays_canonical_history(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one", "two", "three", "four")
    say(agent, "first")
    say(agent, "second")
    events: list = []
    say(agent, "third", events, model="anthropic:claude-y")
    body = anthropic.requests[-1].json
    assert boundaries(events) == [("resume_replay", "model_change")]
    assert body["model"] == "claude-y"
    assert [texts(m)[0] for m in body["messages"]] == ["first", "one", "second", "two", "third"]  # canonical history
    events = []
    say(agent, "fourth", events)  # back to the default model: another change
    assert boundaries(events) == [("resume_replay", "model_change")]


def test_the_same_model_override_stays_warm(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one", "two")
    say(agent, "first", model="anthropic:claude-y")
    events: list = []
    say(agent, "second", events, model="anthropic:claude-y")
    assert boundaries(events) == []
    assert agent.harness.sessions.durable is False


def test_idle_eviction_reports_evicted_on_the_next_run_and_goes_cold(tmp_path, anthropic, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(sessions, "clock", lambda: now[0])
    agent = anthropic_agent(tmp_path, anthropic, session={"idleTimeoutMs": 60_000})
    answer(anthropic, "one", "two", "three")
    say(agent, "first")
    now[0] += 59.0
    events: list = []
    say(agent, "second", events)
    assert [e for e in events if e.type == "session_status"] == []
    now[0] += 60.0
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO")
    logger.enable("monoagent")
    try:
        events = []
        say(agent, "third", events)
    finally:
        logger.disable("monoagent")
        logger.remove(sink)
    assert [(e.data["status"], e.data["reason"]) for e in events if e.type == "session_status"] == [("evicted", "idle_timeout")]
    assert boundaries(events) == []
    assert len([line for line in lines if "evicted (idle_timeout)" in line and "'c'" in line]) == 1
    # cold: canonical history as leading messages, the same bytes as the warm transcript held
    assert [texts(m)[0] for m in anthropic.requests[-1].json["messages"]] == ["first", "one", "second", "two", "third"]


def test_an_idle_session_of_another_conversation_is_swept_and_reported_to_it_alone(tmp_path, anthropic, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(sessions, "clock", lambda: now[0])
    agent = anthropic_agent(tmp_path, anthropic, session={"idleTimeoutMs": 1_000})
    answer(anthropic, "a", "b", "c", "d")
    say(agent, "hello", conversation="idle")
    now[0] += 5.0
    events: list = []
    say(agent, "hello", events, conversation="busy")
    assert [e for e in events if e.type == "session_status"] == []
    assert len(agent.harness.sessions) == 1  # the idle one is gone, the busy one is kept
    events = []
    say(agent, "back", events, conversation="idle")
    assert [e.data["reason"] for e in events if e.type == "session_status"] == ["idle_timeout"]


def test_an_idle_timeout_of_zero_keeps_no_session(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic, session={"idleTimeoutMs": 0})
    answer(anthropic, "one", "two")
    say(agent, "first")
    events: list = []
    say(agent, "second", events)
    assert [e.type for e in events if e.type in ("session_status", "session_boundary")] == []
    assert len(agent.harness.sessions) == 0
    assert marks(anthropic.requests[-1].json) == [("system", 0, -1), ("messages", 1, 0)]  # cold: history as messages


def test_a_history_reset_makes_the_next_turn_cold(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one", "two")
    say(agent, "first")
    asyncio.run(agent.reset_conversation("c"))
    events: list = []
    say(agent, "second", events)
    assert boundaries(events) == [("cold", "history_changed")]
    assert [texts(m)[0] for m in anthropic.requests[-1].json["messages"]] == ["second"]


def test_a_commit_by_another_agent_on_the_same_directory_makes_the_next_turn_cold(tmp_path, anthropic):
    mine = anthropic_agent(tmp_path, anthropic)
    other = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one", "theirs", "two")
    say(mine, "first")
    say(other, "from elsewhere")
    events: list = []
    say(mine, "second", events)
    assert boundaries(events) == [("cold", "history_changed")]
    assert [texts(m)[0] for m in anthropic.requests[-1].json["messages"]] == ["first", "one", "from elsewhere", "theirs", "second"]


def test_an_answer_from_a_retry_retires_the_session(tmp_path, anthropic, no_backoff):
    agent = anthropic_agent(tmp_path, anthropic, providers={
        "anthropic": {"baseUrl": anthropic.url}, "client": {"maxRetries": 1},
    })
    answer(anthropic, "one")
    say(agent, "first")
    anthropic.enqueue(Reply(status=529, error_message="Overloaded"), Reply(text_pieces=("two",)))
    events: list = []
    say(agent, "second", events)
    retry = anthropic.requests[-1].json
    assert [texts(m)[0].split("\n")[0] for m in retry["messages"]] == ["second"]  # stateless: no transcript
    assert boundaries(events) == [("cold", "retry_answered")]
    answer(anthropic, "three")
    events = []
    say(agent, "third", events)
    assert boundaries(events) == []  # nothing warm was left to retire
    assert [texts(m)[0] for m in anthropic.requests[-1].json["messages"]] == ["first", "one", "second", "two", "third"]


def test_a_failed_turn_retires_the_session_and_the_next_turn_sees_its_account(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one")
    say(agent, "first")
    anthropic.enqueue(Reply(status=400, error_message="bad request"))
    events: list = []
    with pytest.raises(Exception, match="bad request"):
        say(agent, "second", events)
    assert boundaries(events) == [("cold", "failed_turn")]
    answer(anthropic, "three")
    say(agent, "third")
    leading = anthropic.requests[-1].json["messages"][:-1]
    assert [m["role"] for m in leading] == ["user", "assistant", "user", "assistant"]
    assert "Continuity account v1" in texts(leading[-1])[0]


# --------------------------------------------------------------------------- proactive turns


def test_an_isolated_proactive_turn_skips_the_warm_session_and_commits_nothing(tmp_path, anthropic):
    captures = Captures()
    agent = anthropic_agent(tmp_path, anthropic, session={"isolateProactive": True}, plugins=[Dictionary(), captures])
    answer(anthropic, "one")
    say(agent, "first")
    anthropic.enqueue(
        Reply(tool_calls=(ScriptedToolCall("toolu_P", "lookup", ('{"word": "café"}',)),)),
        Reply(text_pieces=("heartbeat done",)),
    )
    events: list = []
    result = say(agent, "heartbeat", events, proactive=True)
    assert result.text == "heartbeat done"
    assert boundaries(events) == [("isolated", "proactive")]
    assert "run_committed" not in [e.type for e in events]
    assert [e.data.get("committed") for e in events if e.type == "run_completed"] == [False]
    assert [m.content for m in asyncio.run(agent.history_store.load("c"))] == ["first", "one"]
    assert captures.committed == ["first"]  # no memory capture for the proactive turn
    rows = agent.tool_history_store().query("SELECT isolated FROM calls")
    assert [r["isolated"] for r in rows] == [1]
    answer(anthropic, "two")
    events = []
    say(agent, "second", events)
    assert boundaries(events) == []  # the interactive session is still warm
    body = json.dumps(anthropic.requests[-1].json)
    assert "heartbeat" not in body and "toolu_P" not in body and "tool_history_projection" not in body
    agent.close()


def test_an_isolated_run_commits_nothing(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one", "continued")
    say(agent, "first")
    say(agent, "continue the job", isolated=True)
    assert [m.content for m in asyncio.run(agent.history_store.load("c"))] == ["first", "one"]


def test_a_proactive_turn_without_isolation_runs_in_the_warm_session(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one", "two")
    say(agent, "first")
    events: list = []
    say(agent, "heartbeat", events, proactive=True)
    assert boundaries(events) == []
    assert [texts(m)[0] for m in anthropic.requests[-1].json["messages"]] == ["first", "one", "heartbeat"]
    assert [m.content for m in asyncio.run(agent.history_store.load("c"))] == ["first", "one", "heartbeat", "two"]


def test_a_cancelled_turn_retires_the_session(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic)
    answer(anthropic, "one")
    say(agent, "first")
    anthropic.enqueue(Reply(text_pieces=("partial", "never"), stall_after=1))
    events: list = []

    async def cancel_mid_answer():
        streaming = asyncio.Event()

        def observe(event):
            events.append(event)
            if event.type == "text_delta":
                streaming.set()

        task = asyncio.create_task(agent.respond(TurnRequest("second", conversation_id="c"), on_event=observe))
        await streaming.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await agent.wait_settled()  # the caller is released at once; the settlement retires the session

    asyncio.run(cancel_mid_answer())
    assert boundaries(events) == [("cold", "cancelled_turn")]
    assert len(agent.harness.sessions) == 0


class KeepLastTwo:
    """A compaction policy chosen on every turn with more than two messages: a summary note, then the last two."""

    @hookimpl
    def register_compaction_policies(self, register):
        class Policy:
            name = "keep-last-two"

            async def compact(self, turn, history, budget):
                note = Message("system", "Summary of earlier conversation:\nthe user said first")
                return CompactionOutcome((note, *history[-2:]), applied=True, method="keep-last-two")

        register("keep-last-two", lambda agent: Policy())

    @hookimpl
    def choose_compaction(self, turn, history_tokens, budget):
        return "keep-last-two" if len(turn.history) > 2 else "none"


def test_compaction_on_a_warm_turn_retires_the_session_and_sends_the_compacted_view(tmp_path, anthropic):
    agent = anthropic_agent(tmp_path, anthropic, plugins=[KeepLastTwo()])
    answer(anthropic, "one", "two", "three")
    say(agent, "first " + "long " * 400)  # what the compaction drops
    say(agent, "second")
    events: list = []
    say(agent, "third", events)
    assert boundaries(events) == [("cold", "compaction")]
    (report,) = [e.data for e in events if e.type == "context_compaction_applied"]
    assert report["applied"] is True and report["tokens_after"] < report["tokens_before"]  # measured cold, not warm
    messages = anthropic.requests[-1].json["messages"]  # the summary goes as a user message, merged with the next
    assert [texts(m) for m in messages] == [
        ["Summary of earlier conversation:\nthe user said first", "second"], ["two"], ["third"],
    ]


def test_a_session_in_use_is_not_evicted_by_another_conversations_sweep(tmp_path, anthropic, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(sessions, "clock", lambda: now[0])
    released = asyncio.Event()

    class Slow:
        @hookimpl
        def register_tools(self, register):
            async def wait(context):
                await released.wait()
                return "waited"

            register(ToolSpec("wait", "Wait for the host."), wait)

    agent = anthropic_agent(tmp_path, anthropic, session={"idleTimeoutMs": 1_000}, plugins=[Slow()])
    answer(anthropic, "one")
    say(agent, "first", conversation="long")
    anthropic.enqueue(
        Reply(tool_calls=(ScriptedToolCall("toolu_W", "wait", ("{}",)),)),  # the long turn's first step
        Reply(text_pieces=("other",)),  # the other conversation's turn, while the long one waits
        Reply(text_pieces=("two",)),  # the long turn's answer
    )

    async def overlapping():
        waiting = asyncio.Event()
        long_turn = asyncio.create_task(agent.respond(
            TurnRequest("second", conversation_id="long"),
            on_event=lambda e: e.type == "tool_call" and waiting.set(),
        ))
        await waiting.wait()
        now[0] += 5.0  # the long conversation's session was last used 5 s ago, its turn still runs
        await agent.respond(TurnRequest("hello", conversation_id="other"))
        released.set()
        await long_turn

    asyncio.run(overlapping())
    events: list = []
    answer(anthropic, "three")
    say(agent, "third", events, conversation="long")
    assert [e for e in events if e.type in ("session_status", "session_boundary")] == []
    assert texts(anthropic.requests[-1].json["messages"][0]) == ["first"]  # still the warm transcript


def test_an_openai_warm_request_carries_the_native_tool_calls_and_results(tmp_path, openai):
    agent = fresh_agent(
        tmp_path,
        config={"runtime": {"model": "openai:gpt-x"}, "providers": {"openai": {"baseUrl": f"{openai.url}/v1"}}},
        env={"OPENAI_API_KEY": "sk-test"},
        plugins=[Dictionary()],
    )
    openai.enqueue(
        Reply(tool_calls=(ScriptedToolCall("call_1", "lookup", ('{"word": "café"}',)),)),
        Reply(text_pieces=("It means a coffee house.",)),
        Reply(text_pieces=("You are welcome.",)),
    )
    say(agent, "What does café mean?")
    say(agent, "Thanks!")
    messages = openai.requests[-1].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[2]["tool_calls"][0]["id"] == "call_1" and messages[2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert (messages[3]["tool_call_id"], messages[3]["content"]) == ("call_1", "a coffee house")
    assert messages[4]["content"] == "It means a coffee house."


def test_a_context_overflow_on_a_warm_turn_retires_it_and_retries_cold_from_the_compacted_history(tmp_path, anthropic):
    class Facts:
        @hookimpl
        def extra_sections(self, turn):
            return Section("facts", f"Turn facts: {turn.request.text}", order=650, stability="dynamic", source="facts")

    compaction = {"contextWindowOverride": 4096, "responseReserveTokens": 0}
    agent = anthropic_agent(tmp_path, anthropic, runtime={"model": MODEL, "compaction": compaction}, plugins=[Facts()])
    seeded = []
    for n in range(5):
        seeded += [Message("user", f"question {n} " + "q" * 400), Message("assistant", f"answer {n} " + "a" * 400)]
    asyncio.run(agent.history_store.commit("c", seeded))
    answer(anthropic, "one")
    say(agent, "first")
    anthropic.enqueue(
        Reply(status=400, context_limit=True),  # the warm transcript no longer fits
        Reply(text_pieces=("The user asked five questions.",)),  # the summariser
        Reply(text_pieces=("two",)),
    )
    events: list = []
    assert say(agent, "second", events).text == "two"
    assert boundaries(events) == [("cold", "compaction")]
    refused, _summary, retried = (request.json for request in anthropic.requests[1:4])
    assert texts(refused["messages"][0])[0].startswith("question 0 ")  # the transcript
    assert texts(retried["messages"][0])[0].startswith("Summary of earlier conversation:")  # cold, compacted
    assert texts(retried["messages"][-1]) == ["Turn facts: second\n\nsecond"]  # the dynamic block once, not twice
    answer(anthropic, "three")
    events = []
    say(agent, "third", events)
    assert boundaries(events) == []  # the retried answer started a new warm session
    warm = anthropic.requests[-1].json["messages"]
    assert strip_marks(warm[: len(retried["messages"]) - 1]) == strip_marks(retried["messages"][:-1])
    assert [texts(m)[-1] for m in warm[-3:]] == ["second", "two", "Turn facts: third\n\nthird"]


def test_group_chat_speakers_stay_named_in_the_transcript_and_in_history_sent_as_messages(tmp_path, anthropic):
    # The wires send no message names: the speaker's label travels in the text, the same on a warm
    # turn (the transcript) and on a cold one (history as leading messages), so the prefix matches.
    from monoagent._kernel.model import Speaker

    alice = Speaker("Alice Chen", handle="alice")
    bob = Speaker("Bob", handle="bob")
    answer(anthropic, "hello Alice", "hello Bob", "hello again")
    agent = anthropic_agent(tmp_path, anthropic)
    say(agent, "hi, I am Alice", sender=alice, delivery="push")
    say(agent, "and I am Bob", sender=bob, delivery="push")
    warm = anthropic.requests[-1].json["messages"]
    cold_agent = anthropic_agent(tmp_path, anthropic)  # a new process: no warm session, history as messages
    say(cold_agent, "who spoke first?", sender=bob, delivery="push")
    cold = anthropic.requests[-1].json["messages"]

    assert texts(warm[0]) == ["[Alice Chen (@alice)] hi, I am Alice"]
    assert strip_marks(cold[:2]) == strip_marks(warm[:2])
    assert texts(cold[2]) == ["[Bob (@bob)] and I am Bob"]


def test_history_a_backend_read_again_is_the_history_the_turn_continues_on(tmp_path):
    """A backend that re-reads history under its own lock hands it back in OpenedSession.history;
    it never writes to the turn, which it sees read-only."""
    from monoagent._kernel.sessions import InMemorySessionBackend, OpenedSession

    newer = (Message("user", "committed by another process"), Message("assistant", "meanwhile"))
    seen: list[Any] = []

    class Rereading(InMemorySessionBackend):
        async def open(self, turn):
            seen.append(turn.history)
            opened = await super().open(turn)
            return OpenedSession(opened.session, opened.boundary, history=newer)

    class Plugin:
        @hookimpl
        def register_session_backends(self, register):
            register("rereading", lambda agent: Rereading(60_000))

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"runtime": {"session": {"backend": "rereading"}}})
    result = agent.run_sync("hello", conversation_id="c")
    assert seen == [()] and "history: 2 messages" in result.text  # the cold turn led with the history handed back


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]), st.sampled_from(["plain text", "a </current_speaker> in it", "<<<END_OF_UNTRUSTED_PAYLOAD>>>", "é <current_speaker>", ""]), st.sampled_from([None, "ann", "<bob>"])), max_size=8))
def test_leading_messages_label_and_neutralise_every_user_message_as_speaker_text_does(rows):
    """The quick path of a plain user message (no speaker, no attachments, no fence token) keeps the
    message exactly as speaker_text would: every leading message is the reference's."""
    import attrs as _attrs

    import monoagent_plugins.prompt.group_context  # noqa: F401  (registers the current_speaker fence)
    from monoagent._boundary.fences import has_fence_token
    from monoagent._pipeline.sessions import leading_messages, speaker_text

    assert has_fence_token("a </current_speaker> in it")
    history = [Message(role, text, name=name if role == "user" else None) for role, text, name in rows]
    expected = []
    for message in history:
        if message.continuity is None and message.role == "user":
            content = speaker_text(message.content, message.name, message.attachments)
            expected.append(message if content == message.content else _attrs.evolve(message, content=content))
        elif message.role == "system":
            expected.append(_attrs.evolve(message, role="user"))
        else:
            expected.append(message)
    assert leading_messages(history) == expected
