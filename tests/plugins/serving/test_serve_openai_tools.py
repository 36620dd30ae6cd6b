"""Client-side tools on the served chat completions API, driven by the official ``openai`` client.

The model (``caller:x``) calls the tools the user names and then answers with the results it was
sent, so each test sees what reached it: a call handed to the client ends the request with
``finish_reason: "tool_calls"``, and the client's next request with the ``tool`` results continues
the same turn, stateless or in a server conversation.
"""

from __future__ import annotations

import json

import openai
import pytest
from serving import TOKEN, auth, history, tool_caller_server

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture
def server(tmp_path):
    running = tool_caller_server(tmp_path)
    yield running
    running.stop()


def client_of(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0)


def test_a_stateless_chat_hands_the_call_over_and_continues_with_its_result(server):
    client = client_of(server)
    messages = [{"role": "user", "content": "call get_weather for Oslo"}]
    raw = client.chat.completions.with_raw_response.create(model="caller:x", messages=messages, tools=[WEATHER])
    assert "X-Conversation-Id" not in raw.headers  # a client conversation: nothing stored, no id to continue
    first = raw.parse()
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Calling."
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Oslo"}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 3 °C"}]
    second = client.chat.completions.create(model="caller:x", messages=messages, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "Results: get_weather=sunny, 3 °C (messages: 3)"


def test_a_server_conversation_keeps_the_call_and_its_result_in_history(server):
    client = client_of(server)
    headers = {"X-Conversation-Id": "tools-1"}
    first = client.chat.completions.create(model="caller:x", messages=[{"role": "user", "content": "call clock get_weather"}],
                                           tools=[WEATHER], extra_headers=headers)
    (call,) = first.choices[0].message.tool_calls  # the server's clock ran on the server: only the client's call is handed over
    assert call.function.name == "get_weather"
    second = client.chat.completions.create(
        model="caller:x", tools=[WEATHER], extra_headers=headers,
        messages=[{"role": "user", "content": "call clock get_weather"}, first.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "rain"}])
    assert second.choices[0].message.content == "Results: clock=12:00; get_weather=rain (messages: 4)"
    stored = history(server.cwd, "openai-api:tools-1")
    assert "rain" in stored and "12:00" in stored and "Results: clock=12:00; get_weather=rain" in stored
    third = client.chat.completions.create(model="caller:x", messages=[{"role": "user", "content": "thanks"}],
                                           extra_headers=headers)
    assert "messages: 6" in third.choices[0].message.content  # user, call step, two results, answer, and this one


def test_a_streamed_call_arrives_as_tool_call_deltas(server):
    client = client_of(server)
    stream = client.chat.completions.create(model="caller:x", messages=[{"role": "user", "content": "call get_weather"}],
                                            tools=[WEATHER], stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == "Calling." and finish == ["tool_calls"]
    assert [(d.index, d.function.name) for d in calls] == [(0, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo"}


def test_a_retried_key_replays_the_tool_calls_streamed_and_runs_nothing(server):
    body = {"messages": [{"role": "user", "content": "call get_weather"}], "tools": [WEATHER], "stream": True}
    headers = {**auth(), "Idempotency-Key": "k-tools"}
    first = server.client.post("/v1/chat/completions", json=body, headers=headers).text
    again = server.client.post("/v1/chat/completions", json=body, headers=headers)
    assert again.headers["Idempotent-Replayed"] == "true"
    events = [json.loads(line[6:]) for line in again.text.splitlines() if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if "tool_calls" in d] == ["get_weather"]
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert first.count("get_weather") == 1


def test_a_client_tool_named_like_the_agents_is_refused_before_any_turn(server):
    clock = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError, match="'clock' are taken by the agent's own tools"):
        client_of(server).chat.completions.create(model="caller:x", messages=[{"role": "user", "content": "call clock"}],
                                                  tools=[clock], extra_headers={"X-Conversation-Id": "clash"})
    assert "no history" in history(server.cwd, "openai-api:clash")


def test_tool_choice_reaches_the_model(server):
    answer = client_of(server).chat.completions.create(
        model="caller:x", messages=[{"role": "user", "content": "hello"}], tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert "choice: get_weather" in answer.choices[0].message.content
    none = client_of(server).chat.completions.create(model="caller:x", messages=[{"role": "user", "content": "hello"}],
                                                     tools=[WEATHER], tool_choice="none")
    assert "tools: ," in none.choices[0].message.content and "choice: None" in none.choices[0].message.content
