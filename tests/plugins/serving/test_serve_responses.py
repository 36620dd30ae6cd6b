"""The Responses API of the ``openai-api`` channel (``POST /v1/responses``, ``GET /v1/responses/{id}``) against a
real ``monoagent serve`` subprocess with the official ``openai`` client.

The offline echo provider answers ``sections: ...; history: N messages; you said: <text>``, so each test reads
what the model was sent: the earlier messages it saw, and ``dynamic_context`` when the request gave context.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import httpx
import openai
import pytest
from serving import TOKEN, Server, auth, history, serve_env, slow_server, stored
from waiting import wait_until


def client_of(server: Server, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, **options)


ITEMS = [{"role": "system", "content": "Be brief."},
         {"role": "user", "content": "first"},
         {"role": "assistant", "content": [{"type": "output_text", "text": "the first answer"}]},
         {"role": "user", "content": [{"type": "input_text", "text": "second"}]}]


def test_a_plain_response_is_parsed_by_the_client_stored_and_retrievable(running):
    client = client_of(running)
    done = client.responses.create(model="offline:echo", input="hello", instructions="Answer in French.",
                                   metadata={"ticket": "42"})
    assert done.id.startswith("resp_") and done.status == "completed" and done.object == "response"
    assert "history: 0 messages; you said: hello" in done.output_text
    assert "dynamic_context" in done.output_text  # the instructions were the turn's context
    assert done.metadata == {"ticket": "42"} and done.instructions == "Answer in French."
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens > 0
    assert done.usage.input_tokens_details.cached_tokens == 0
    again = client.responses.retrieve(done.id)
    assert again.model_dump() == done.model_dump()
    with pytest.raises(openai.NotFoundError, match="not found") as missing:
        client.responses.retrieve("resp_unknown")
    assert missing.value.code == "response_not_found"


def test_a_streamed_response_sends_the_documented_events_in_order(running):
    client = client_of(running)
    events = list(client.responses.create(model="offline:echo", input="stream me", stream=True))
    kinds = [event.type for event in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 1
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * deltas, "response.output_text.done",
                     "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == events[-4].text == events[-1].response.output_text and "you said: stream me" in text
    assert client.responses.retrieve(events[0].response.id).output_text == text
    with client.responses.stream(model="offline:echo", input="helper", previous_response_id=events[0].response.id) as stream:
        final = stream.get_final_response()
    assert "history: 2 messages; you said: helper" in final.output_text


def test_previous_response_id_chains_see_the_earlier_turns_and_only_the_latest_continues(running):
    client = client_of(running)
    first = client.responses.create(input="one")
    second = client.responses.create(input=[{"role": "user", "content": "ignored resent"}, {"role": "user", "content": "two"}],
                                     previous_response_id=first.id)
    assert "history: 2 messages; you said: two" in second.output_text  # the server conversation, not the resent item
    third = client.responses.create(input="three", previous_response_id=second.id)
    assert "history: 4 messages; you said: three" in third.output_text
    with pytest.raises(openai.ConflictError, match=f"not the latest response of its conversation .the latest is '{third.id}'") as old:
        client.responses.create(input="branch", previous_response_id=first.id)
    assert old.value.code == "response_not_latest"
    with pytest.raises(openai.NotFoundError, match="not found") as unknown:
        client.responses.create(input="x", previous_response_id="resp_nothing")
    assert unknown.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError, match="X-Conversation-Id"):
        client.responses.create(input="x", previous_response_id=third.id, extra_headers={"X-Conversation-Id": "another"})
    assert stored(running).count("openai-api:conv_") == 1


def test_input_items_seed_a_new_conversation_that_a_later_response_continues(running):
    client = client_of(running)
    raw = client.responses.with_raw_response.create(input=ITEMS)
    first = raw.parse()
    assert "dynamic_context" in first.output_text and "history: 2 messages; you said: second" in first.output_text
    assert "X-Conversation-Id" not in raw.headers and "openai-api:" not in stored(running)  # kept as the response's seed
    raw = client.responses.with_raw_response.create(input="third", previous_response_id=first.id)
    later, conversation = raw.parse(), raw.headers["X-Conversation-Id"]
    assert conversation.startswith("conv_") and "history: 4 messages; you said: third" in later.output_text
    shown = history(running.cwd, f"openai-api:{conversation}")
    assert "the first answer" in shown and "you said: third" in shown and "Be brief" not in shown
    named = client.responses.create(input=ITEMS, extra_headers={"X-Conversation-Id": "named"})
    assert "history: 0 messages" in named.output_text  # a named conversation is canonical: the items are ignored
    assert "history: 2 messages" in client.responses.create(input="again", user="named").output_text


def test_store_false_keeps_nothing_and_cannot_be_continued_or_retrieved(running):
    client = client_of(running)
    isolated = client.responses.create(input=ITEMS, store=False)
    assert "history: 2 messages; you said: second" in isolated.output_text and isolated.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(isolated.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(input="more", previous_response_id=isolated.id)
    kept = client.responses.create(input="kept")
    peek = client.responses.create(input="peek", previous_response_id=kept.id, store=False)
    assert "history: 2 messages; you said: peek" in peek.output_text  # reads the conversation, adds nothing to it
    raw = client.responses.with_raw_response.create(input="after", previous_response_id=kept.id)
    after, conversation = raw.parse(), raw.headers["X-Conversation-Id"]
    assert "history: 2 messages; you said: after" in after.output_text
    assert stored(running).count("openai-api:") == 1
    shown = history(running.cwd, f"openai-api:{conversation}")
    assert "you said: after" in shown and "peek" not in shown


def test_metadata_beyond_openais_limits_is_refused_naming_the_limit(running):
    client = client_of(running)
    fine = {f"k{n}": "v" * 512 for n in range(16)}
    assert client.responses.create(input="x", metadata=fine).metadata == fine
    for metadata, said in (({f"k{n}": "v" for n in range(17)}, "has 17 pairs: at most 16"),
                           ({"k" * 65: "v"}, "is 65 characters: at most 64"),
                           ({"k": "v" * 513}, "is 513 characters: at most 512"),
                           ({"k": 1}, "must be a string")):
        with pytest.raises(openai.BadRequestError, match=said) as refused:
            client.responses.create(input="x", metadata=metadata)
        assert refused.value.param == "metadata"


def test_a_bad_request_is_refused_in_openais_shape_before_any_turn(running):
    client = client_of(running)
    with pytest.raises(openai.NotFoundError, match="does not exist") as model:
        client.responses.create(model="gpt-4o", input="x")
    assert model.value.code == "model_not_found"
    for ask, said in (({"input": []}, "non-empty list"),
                      ({"input": [{"role": "assistant", "content": "last"}]}, "must be a user message"),
                      ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
                       r"input\[0\]\.content\[0\] is of type 'input_image'"),
                      ({"input": "x", "tools": [{"type": "web_search"}]}, r"tools\[0\] is of type 'web_search'"),
                      ({"input": "x", "tool_choice": "sometimes"}, "'tool_choice' must be .auto., .none., .required. or \\{'type': 'function', 'name'"),
                      ({"input": "x", "background": True}, "background responses are not supported")):
        with pytest.raises(openai.BadRequestError, match=said):
            client.responses.create(**ask)
    assert "openai-api:" not in stored(running)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_retried_idempotency_key_returns_the_first_response_and_runs_the_turn_once(running, stream):
    client = client_of(running)
    ask = {"input": "only once", "stream": stream, "extra_headers": {"Idempotency-Key": "order-9", "X-Conversation-Id": "keyed"}}
    first, second = (client.responses.with_raw_response.create(**ask) for _ in range(2))
    assert "Idempotent-Replayed" not in first.headers and second.headers["Idempotent-Replayed"] == "true"
    if stream:
        events = [list(raw.parse()) for raw in (first, second)]
        assert events[1][-1].type == "response.completed" and events[1][-1].response == events[0][-1].response
        assert [event.sequence_number for event in events[1]] == list(range(len(events[1])))
    else:
        assert second.parse().model_dump() == first.parse().model_dump()
    assert history(running.cwd, "openai-api:keyed").count("you said: only once") == 1
    with pytest.raises(openai.UnprocessableEntityError, match="first used with a different request"):
        client.responses.create(input="another", extra_headers=ask["extra_headers"])
    both = {"input": "x", "messages": [{"role": "user", "content": "x"}]}  # the same bytes, valid on both endpoints
    keyed = {**auth(), "Idempotency-Key": f"both-{stream}"}
    assert running.client.post("/v1/chat/completions", json=both, headers=keyed).status_code == 200
    crossed = running.client.post("/v1/responses", json=both, headers=keyed)
    assert crossed.status_code == 422 and crossed.json()["error"]["code"] == "idempotency_conflict"


@pytest.mark.parametrize("running", ["server"], indirect=True)
def test_server_mode_ignores_the_input_items_as_chat_completions_does(running):
    done = client_of(running).responses.create(input=ITEMS)
    assert "history: 0 messages; you said: second" in done.output_text


@pytest.mark.parametrize("running", ["client"], indirect=True)
def test_client_mode_reads_the_input_and_refuses_previous_response_id(running):
    client = client_of(running)
    done = client.responses.create(input=ITEMS, extra_headers={"X-Conversation-Id": "named"})
    assert "history: 2 messages" in done.output_text and client.responses.retrieve(done.id).id == done.id
    with pytest.raises(openai.BadRequestError, match=r"openaiApi\.conversations is \"client\""):
        client.responses.create(input="x", previous_response_id=done.id)
    assert "openai-api:" not in stored(running)


def test_a_raw_request_without_a_token_or_with_a_bad_body_gets_openais_error_shape(running):
    unauthorised = running.client.post("/v1/responses", json={"input": "x"})
    assert unauthorised.status_code == 401 and unauthorised.json()["error"]["type"] == "authentication_error"
    bad = running.client.post("/v1/responses", content=b"{", headers=auth())
    assert bad.status_code == 400 and "error" in bad.json()
    ok = running.client.post("/v1/responses", json={"input": "raw"}, headers=auth())
    assert json.loads(ok.content)["output"][0]["content"][0]["type"] == "output_text"


# --------------------------------------------------------------------------- client tools and failures (offline:scripted)

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SCRIPT = {"steps": [
    {"text": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "c1"}]},
    {"text": "Oslo is sunny."},
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}, "id": "c2"}]},
    {"text": "Rome is warm."},
]}


@pytest.fixture
def scripted(request, tmp_path):
    (tmp_path / "script.json").write_text(json.dumps(getattr(request, "param", SCRIPT)), encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "offline:scripted"\n[providers.offline]\n'
                                             'scriptPath = "script.json"\n', encoding="utf-8")
    server = Server(tmp_path)
    yield server
    server.stop()


def test_a_client_tool_call_ends_the_response_and_its_output_continues_the_conversation(scripted):
    client = client_of(scripted)
    with pytest.raises(openai.BadRequestError, match="'SessionHistory' are taken by the agent's own tools"):
        client.responses.create(input="x", tools=[{**WEATHER, "name": "SessionHistory"}])  # refused before any step
    asked = client.responses.create(input="weather in Oslo?", tools=[WEATHER], tool_choice="auto")
    assert asked.output_text == "Let me check."
    calls = [item for item in asked.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [("c1", "get_weather", {"city": "Oslo"})]
    with pytest.raises(openai.BadRequestError, match="answer no waiting call"):
        client.responses.create(previous_response_id=asked.id, tools=[WEATHER],
                                input=[{"type": "function_call_output", "call_id": "other", "output": "x"}])
    raw = client.responses.with_raw_response.create(previous_response_id=asked.id, tools=[WEATHER],
                                                    input=[{"type": "function_call_output", "call_id": "c1", "output": "sunny, 21 C"}])
    done, conversation = raw.parse(), raw.headers["X-Conversation-Id"]
    assert done.output_text == "Oslo is sunny." and [item.type for item in done.output] == ["message"]
    shown = history(scripted.cwd, f"openai-api:{conversation}")
    assert shown.index("weather in Oslo?") < shown.index("sunny, 21 C") < shown.index("Oslo is sunny.")

    events = list(client.responses.create(input="weather in Rome?", tools=[WEATHER], store=False, stream=True))
    call = events[-1].response.output[1]
    assert call.type == "function_call" and call.call_id == "c2" and "response.function_call_arguments.done" in [
        event.type for event in events]
    stateless = client.responses.create(store=False, tools=[WEATHER], input=[
        {"role": "user", "content": "weather in Rome?"}, call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": "c2", "output": "warm"}])
    assert stateless.output_text == "Rome is warm."


@pytest.mark.parametrize("scripted", [{"steps": [{"text": "partial "}, {"error": "the model is unavailable"}]}], indirect=True)
def test_a_run_that_fails_mid_stream_ends_with_response_failed_and_is_kept_as_failed(scripted):
    client = client_of(scripted, max_retries=0)
    first = client.responses.create(input="first")
    events = list(client.responses.create(input="this one fails", stream=True))
    assert [event.type for event in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.failed" and "the model is unavailable" in events[-1].response.error.message
    kept = client.responses.retrieve(events[0].response.id)
    assert kept.status == "failed" and "the model is unavailable" in kept.error.message
    with pytest.raises(openai.InternalServerError, match="no step left"):  # a failed response is not the latest:
        client.responses.create(input="again", previous_response_id=first.id)  # the one before it continues


def test_a_response_being_continued_cannot_be_continued_twice_and_a_crash_leaves_it_failed(tmp_path):
    server = slow_server(tmp_path)
    client = client_of(server, max_retries=0)
    first = client.responses.create(input="quick")
    answers: list[object] = []

    def continue_slowly() -> None:
        try:
            answers.append(client.responses.create(input="slow one", previous_response_id=first.id))
        except (openai.APIError, httpx.HTTPError) as exc:
            answers.append(exc)

    thread = threading.Thread(target=continue_slowly)
    thread.start()
    try:
        wait_until((tmp_path / "turn-started").exists, "the continuing turn in flight")
        with pytest.raises(openai.ConflictError, match="is not the latest response") as twice:
            client.responses.create(input="again", previous_response_id=first.id)
        running = re.search(r"the latest is '(resp_\w+)'", twice.value.message).group(1)
        assert client.responses.retrieve(running).status == "in_progress"
    finally:
        server.stop()  # SIGKILL: the running response is never finished
        thread.join(timeout=30)
    restarted = Server(tmp_path, "--plugins-dir", "plugins", env=serve_env(tmp_path))
    try:
        client = client_of(restarted, max_retries=0)
        assert client.responses.retrieve(running).status == "failed"
        assert client.responses.create(input="resumed", previous_response_id=first.id).output_text.startswith("quick answer")
    finally:
        restarted.stop()


def test_a_history_reset_takes_the_conversations_stored_responses_with_it(running):
    client = client_of(running)
    first = client.responses.create(input="remember me")
    raw = client.responses.with_raw_response.create(input="and you?", previous_response_id=first.id)
    second, conversation = raw.parse(), raw.headers["X-Conversation-Id"]
    other = client.responses.create(input="another conversation")
    reset = subprocess.run([sys.executable, "-m", "monoagent", "history", "reset", f"openai-api:{conversation}"],
                           cwd=running.cwd, env=serve_env(running.cwd), capture_output=True, text=True, timeout=60)
    assert reset.returncode == 0, reset.stderr
    with pytest.raises(openai.NotFoundError):  # not a continuation of an emptied conversation
        client.responses.create(input="and now?", previous_response_id=second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    assert client.responses.retrieve(other.id).id == other.id


def test_a_client_that_resends_its_conversation_stores_no_conversation_per_request(running):
    """openai-agents' default: the whole conversation as input, store left true, no previous_response_id."""
    client = client_of(running)
    items: list = []
    for n in range(4):
        items.append({"role": "user", "content": f"turn {n}"})
        answer = client.responses.create(input=items)
        assert f"history: {2 * n} messages; you said: turn {n}" in answer.output_text
        items += [item.model_dump(exclude_none=True) for item in answer.output]
    assert "openai-api:" not in stored(running)  # each response keeps its seed; no conversation was made
    assert client.responses.retrieve(answer.id).output_text == answer.output_text
    continued = client.responses.create(input="and on the server?", previous_response_id=answer.id)
    assert "history: 8 messages; you said: and on the server?" in continued.output_text
    assert stored(running).count("openai-api:") == 1
