"""Signed reasoning blocks (Anthropic extended thinking) in the warm transcript.

Against the local Anthropic-format server: the stream's ``thinking`` and ``redacted_thinking``
blocks are parsed, sent back verbatim in the next warm request and in the next step of a tool
loop, round-trip through the durable transcript into a second Agent, and never reach canonical
history, the history section, events or artifacts. ``providers.anthropic.thinkingBudgetTokens``
turns thinking on and is validated; the stream limits count reasoning bytes, once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from monoagent import hookimpl
from monoagent._kernel.errors import ConfigError, ProviderError
from monoagent._kernel.model import Message, ReasoningBlock, ToolSpec
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import AnthropicWireServer, fresh_agent
from monoagent.testing.provider_contract import LOOKUP, Reply, ScriptedToolCall, contract_request
from monoagent_plugins.providers import openai_wire

MODEL = "anthropic:claude-x"
SECRET_THOUGHT = "PRIVATE-THOUGHT: the user wants the café, épée ünïcode"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/w==\n"  # verbatim, newline and all
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP=="
THINKING = ReasoningBlock("thinking", SECRET_THOUGHT, SIGNATURE)
OPAQUE = ReasoningBlock("redacted", data=REDACTED)


@pytest.fixture
def server():
    with AnthropicWireServer() as running:
        yield running


class Dictionary:
    """A tool plugin: ``lookup`` answers from a small dictionary."""

    @hookimpl
    def register_tools(self, register):
        register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lambda context: "a coffee house")


def agent_for(tmp_path: Path, server: AnthropicWireServer, *, anthropic: dict | None = None, plugins=(), **config: Any):
    base: dict[str, Any] = {
        "runtime": {"model": MODEL},
        "providers": {"anthropic": {"baseUrl": server.url, **(anthropic or {})}},
    }
    for key, value in config.items():
        base.setdefault(key, {}).update(value)
    return fresh_agent(tmp_path, config=base, env={"ANTHROPIC_API_KEY": "test-key"}, plugins=list(plugins))


def say(agent, text: str, events: list | None = None):
    sink = None if events is None else events.append
    return asyncio.run(agent.respond(TurnRequest(text, conversation_id="c"), on_event=sink))


def bodies(server: AnthropicWireServer) -> list[dict]:
    return [request.json for request in server.requests]


def assistant_turns(body: dict) -> list[list[dict]]:
    """The content blocks of each assistant message, without cache markers."""
    return [
        [{k: v for k, v in block.items() if k != "cache_control"} for block in message["content"]]
        for message in body["messages"]
        if message["role"] == "assistant"
    ]


WIRE_THINKING = {"type": "thinking", "thinking": SECRET_THOUGHT, "signature": SIGNATURE}
WIRE_REDACTED = {"type": "redacted_thinking", "data": REDACTED}


# --------------------------------------------------------------------------- the warm transcript


def test_reasoning_blocks_are_parsed_and_sent_back_verbatim_before_the_text_on_the_next_warm_turn(tmp_path, server):
    server.enqueue(Reply(reasoning=(THINKING, OPAQUE), text_pieces=("The Blue Door.",)), Reply(text_pieces=("Yes.",)))
    agent = agent_for(tmp_path, server)
    events: list = []
    assert say(agent, "Where do we meet?", events).text == "The Blue Door."
    say(agent, "Is it open?")
    [response] = [e.data for e in events if e.type == "provider_response"]
    assert response["reasoning_blocks"] == 2
    assert response["reasoning_bytes"] == THINKING.size + OPAQUE.size
    second = bodies(server)[1]
    assert assistant_turns(second) == [[WIRE_THINKING, WIRE_REDACTED, {"type": "text", "text": "The Blue Door."}]]


def test_each_step_of_a_tool_loop_sends_back_the_reasoning_of_the_step_before(tmp_path, server):
    call = ScriptedToolCall("toolu_01", "lookup", ('{"term": ', '"blue door"}'))
    server.enqueue(
        Reply(reasoning=(THINKING,), tool_calls=(call,)),
        Reply(reasoning=(OPAQUE,), text_pieces=("A coffee house.",)),
        Reply(text_pieces=("Noted.",)),
    )
    agent = agent_for(tmp_path, server, plugins=[Dictionary()])
    assert say(agent, "What is the blue door?").text == "A coffee house."
    say(agent, "Thanks.")
    step_two, next_turn = bodies(server)[1:]
    tool_use = {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"term": "blue door"}}
    assert assistant_turns(step_two) == [[WIRE_THINKING, tool_use]]
    assert assistant_turns(next_turn) == [
        [WIRE_THINKING, tool_use],
        [WIRE_REDACTED, {"type": "text", "text": "A coffee house."}],
    ]


def test_the_durable_transcript_round_trips_the_blocks_into_another_agent(tmp_path, server):
    sessions = {"session": {"transcriptsDir": str(tmp_path / "sessions")}}
    server.enqueue(Reply(reasoning=(THINKING, OPAQUE), text_pieces=("The Blue Door.",)), Reply(text_pieces=("Yes.",)))
    say(agent_for(tmp_path, server, runtime=sessions), "Where do we meet?")
    [transcript] = (tmp_path / "sessions").glob("*/*.jsonl")
    assert SIGNATURE.strip() in transcript.read_text()
    events: list = []
    say(agent_for(tmp_path, server, runtime=sessions), "Is it open?", events)  # a new Agent reads the file
    assert not [e for e in events if e.type == "session_boundary"], "resumed warm from disk"
    assert assistant_turns(bodies(server)[1]) == [[WIRE_THINKING, WIRE_REDACTED, {"type": "text", "text": "The Blue Door."}]]


def test_reasoning_never_reaches_canonical_history_the_history_section_events_or_artifacts(tmp_path, server):
    server.enqueue(Reply(reasoning=(THINKING, OPAQUE), text_pieces=("The Blue Door.",)), Reply(text_pieces=("Yes.",)))
    agent = agent_for(tmp_path, server, runtime={"session": {"mode": "per-message"}})
    events: list = []
    say(agent, "Where do we meet?", events)
    say(agent, "Is it open?", events)
    history = asyncio.run(agent.history_store.load("c"))
    assert [m.content for m in history][-1] == "Yes."
    assert all(m.reasoning == () for m in history)
    second = bodies(server)[1]
    assert "The Blue Door." in json.dumps(second)  # history travels (per-message mode), its reasoning does not
    for secret in ("PRIVATE-THOUGHT", "EqQBCgIYAhIM", "EmwKAhgBEgy3va3p"):
        assert secret not in json.dumps(second)
        assert secret not in json.dumps([e.data for e in events], ensure_ascii=False)
        written = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert written and not [p for p in written if secret.encode() in p.read_bytes()]


def test_an_answer_from_a_retry_leaves_no_reasoning_for_the_next_turn(tmp_path, server, monkeypatch):
    from monoagent._pipeline import provider_call

    async def instant(seconds: float) -> None:
        return None

    monkeypatch.setattr(provider_call, "sleep", instant)
    server.enqueue(
        Reply(status=529), Reply(reasoning=(THINKING,), text_pieces=("The Blue Door.",)), Reply(text_pieces=("Yes.",))
    )
    agent = agent_for(tmp_path, server)
    say(agent, "Where do we meet?")
    say(agent, "Is it open?")
    assert "PRIVATE-THOUGHT" not in json.dumps(bodies(server)[2])
    assert assistant_turns(bodies(server)[2]) == [[{"type": "text", "text": "The Blue Door."}]]


def test_the_openai_wire_never_sends_reasoning():
    answer = Message("assistant", "The Blue Door.", reasoning=(THINKING, OPAQUE))
    request = contract_request((Message("user", "Where?"), answer, Message("user", "Open?")))
    body = openai_wire.request_body(request, None, "max_tokens").decode()
    assert "The Blue Door." in body
    assert "PRIVATE" not in body and "EqQBCgIY" not in body and REDACTED[:12] not in body


# --------------------------------------------------------------------------- turning thinking on


def test_thinking_is_off_unless_its_budget_is_set(tmp_path, server):
    server.enqueue(Reply(text_pieces=("a",)), Reply(text_pieces=("b",)))
    say(agent_for(tmp_path / "off", server), "q")
    say(agent_for(tmp_path / "on", server, anthropic={"thinkingBudgetTokens": 2048}), "q")
    off, on = bodies(server)
    assert "thinking" not in off
    assert on["thinking"] == {"type": "enabled", "budget_tokens": 2048}


class CapsTheAnswer:
    """Lowers one request's answer cap below the thinking budget, as a compaction summary does."""

    @hookimpl
    def prepare_provider_request(self, turn, request):
        return attrs.evolve(request, max_output_tokens=1024)


def test_a_request_that_caps_its_answer_below_the_budget_runs_without_thinking(tmp_path, server):
    server.enqueue(Reply(text_pieces=("a",)))
    say(agent_for(tmp_path, server, anthropic={"thinkingBudgetTokens": 2048}, plugins=[CapsTheAnswer()]), "q")
    [body] = bodies(server)
    assert body["max_tokens"] == 1024 and "thinking" not in body


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"thinkingBudgetTokens": 1000}, "thinkingBudgetTokens"),
        ({"thinkingBudgetTokens": 4096}, "must be below maxOutputTokens = 4096"),
        ({"thinkingBudgetTokens": 8000, "maxOutputTokens": 2048}, "must be below maxOutputTokens = 2048"),
    ],
)
def test_a_thinking_budget_out_of_range_is_a_configuration_error(tmp_path, server, settings, problem):
    with pytest.raises(ConfigError, match=problem) as raised:
        agent_for(tmp_path, server, anthropic=settings)
    assert "providers.anthropic" in str(raised.value)


# --------------------------------------------------------------------------- stream limits


def test_reasoning_bytes_count_towards_max_stream_bytes(tmp_path, server):
    huge = ReasoningBlock("thinking", "x" * 4096, SIGNATURE)
    server.enqueue(Reply(reasoning=(huge,), text_pieces=("a",)))
    agent = agent_for(tmp_path, server, providers={"client": {"maxStreamBytes": 4096}})
    with pytest.raises(ProviderError, match="maxStreamBytes") as raised:
        say(agent, "q")
    assert raised.value.code == "stream_too_large"


def test_a_reasoning_block_is_counted_once_not_again_when_it_completes(tmp_path, server):
    block = ReasoningBlock("thinking", "x" * 3000, "s" * 100)  # 3,100 bytes: twice that would pass the cap
    server.enqueue(Reply(reasoning=(block,), text_pieces=("a" * 900,)))
    agent = agent_for(tmp_path, server, providers={"client": {"maxStreamBytes": 4096}})
    assert say(agent, "q").text == "a" * 900


def test_a_thinking_delta_for_a_block_that_is_not_open_is_malformed(tmp_path, server):
    frames = [
        b'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 1}}}\n\n',
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "signature_delta", "signature": "abc"}}\n\n',
    ]
    server.enqueue(Reply(raw_frames=frames))
    with pytest.raises(ProviderError, match="no open thinking block") as raised:
        say(agent_for(tmp_path, server), "q")
    assert raised.value.code == "malformed_event"
