"""What the ``openai-api`` channel takes from a ``POST /v1/responses`` body, and its response store: pure functions
and the SQLite store, without a server."""

from __future__ import annotations

import re

import pytest

from monoagent import ToolCall
from monoagent_plugins.serving.openai_requests import CompletionRefused
from monoagent_plugins.serving.response_store import ResponseStore
from monoagent_plugins.serving.responses_requests import (
    checked_metadata,
    function_tools,
    responses_request,
    tool_choice,
)


def parse(body: dict, headers: dict | None = None, bounds: tuple[int, int] = (64, 65536)):
    return responses_request(body, headers or {}, "offline:echo", bounds)


def refused(body: dict) -> CompletionRefused:
    with pytest.raises(CompletionRefused) as caught:
        parse(body)
    return caught.value


def test_a_string_input_is_the_turn_and_instructions_and_system_items_the_context():
    asked = parse({"input": "hi", "instructions": "Be brief."})
    assert (asked.text, asked.context, asked.earlier, asked.store, asked.stream) == ("hi", "Be brief.", (), True, False)
    items = parse({"instructions": "A.", "input": [
        {"role": "developer", "content": "B."}, {"type": "message", "role": "user", "content": "one"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "two"}]}, {"role": "system", "content": "C."},
        {"role": "user", "content": [{"type": "input_text", "text": "thr"}, {"type": "input_text", "text": "ee"}]}]})
    assert items.text == "three" and items.context == "A.\n\nB.\n\nC."
    assert [(m.role, m.content) for m in items.earlier] == [("user", "one"), ("assistant", "two")]


def test_function_calls_join_the_assistant_step_before_them_and_outputs_answer_them():
    asked = parse({"input": [
        {"role": "user", "content": "weather?"}, {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": ""},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
        {"type": "reasoning", "summary": []}, {"role": "user", "content": "thanks"}]})
    assert asked.text == "thanks" and asked.tool_results == ()
    step = asked.earlier[1]
    assert (step.role, step.content, step.tool_calls) == ("assistant", "Let me look.", (
        ToolCall("c1", "get_weather", {"city": "Oslo"}), ToolCall("c2", "get_time", {})))
    assert [(m.role, m.tool_call_id, m.content) for m in asked.earlier[2:]] == [("tool", "c1", "sunny"), ("tool", "c2", "noon")]


def test_trailing_function_call_outputs_are_a_continuation_with_the_open_step_kept_in_the_history():
    asked = parse({"input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]})
    assert asked.text == "" and [(r.call_id, r.name, r.content) for r in asked.tool_results] == [("c1", "get_weather", "sunny")]
    assert [(m.role, [c.id for c in m.tool_calls]) for m in asked.earlier] == [("user", []), ("assistant", ["c1"])]
    server = parse({"previous_response_id": "resp_1", "input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]})
    assert server.earlier == () and [(r.call_id, r.name) for r in server.tool_results] == [("c9", "")]


def test_earlier_items_are_bounded_as_stored_history_and_unanswered_calls_dropped():
    many = [{"role": "user", "content": f"m{n}"} for n in range(1000)] + [{"role": "user", "content": "now"}]
    assert [m.content for m in parse({"input": many}, bounds=(3, 1024)).earlier] == ["m997", "m998", "m999"]
    huge = parse({"input": [{"role": "user", "content": "y" * 100_000}, {"role": "user", "content": "now"}]}, bounds=(8, 1024))
    assert len(huge.earlier[0].content.encode()) < 1024
    dangling = parse({"input": [{"role": "assistant", "content": "calling"},
                                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                                {"role": "user", "content": "never mind"}]})
    assert [(m.content, m.tool_calls) for m in dangling.earlier] == [("calling", ())]


@pytest.mark.parametrize(("body", "said", "param"), [
    ({"input": ""}, "non-empty text", "input"),
    ({"input": [{"role": "tool", "content": "x"}]}, r"input\[0\]\.role is 'tool'", "input"),
    ({"input": [{"type": "image_generation_call"}]}, "is of type 'image_generation_call'", "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "is of type 'input_file'", "input"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}, {"role": "user", "content": "x"}]},
     "arguments must be a JSON object", "input"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "needs the 'call_id'", "input"),
    ({"input": [{"role": "assistant", "content": "x"}]}, "must be a user message", "input"),
    ({"input": "x", "store": "yes"}, "'store' must be true or false", "store"),
    ({"input": "x", "stream": 1}, "'stream' must be true or false", "stream"),
    ({"input": "x", "instructions": 3}, "'instructions' must be a string", "instructions"),
    ({"input": "x", "previous_response_id": ""}, "must be a response id", "previous_response_id"),
    ({"input": "x", "conversation": "conv_1"}, "Conversations API is not supported", "conversation"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "a"},
                {"type": "function_call_output", "call_id": "c", "output": "b"}]}, "answer call 'c' a second time", "input"),
])
def test_bad_input_is_refused_naming_the_field_and_what_is_allowed(body, said, param):
    error = refused(body)
    assert error.status == 400 and error.param == param
    assert re.search(said, error.message), error.message


def test_what_the_turn_itself_refuses_is_a_400_too():
    error = refused({"input": "x", "tool_choice": {"type": "function", "name": "not a name"}})
    assert error.status == 400 and "TurnRequest.tool_choice must be" in error.message


def test_another_model_is_a_404_model_not_found():
    error = refused({"model": "gpt-4o", "input": "x"})
    assert (error.status, error.code) == (404, "model_not_found")


def test_the_conversation_is_named_by_the_header_then_user():
    assert parse({"input": "x", "user": "u"}).named == "u"
    assert parse({"input": "x", "user": "u"}, {"x-conversation-id": "h"}).named == "h"
    assert parse({"input": "x"}).named is None


def test_function_tools_and_tool_choice_become_the_engines_names():
    specs = function_tools([{"type": "function", "name": "get_weather", "description": "d",
                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": True},
                            {"type": "function", "name": "bare"}])
    assert [(s.name, s.description, s.input_schema["type"]) for s in specs] == [("get_weather", "d", "object"), ("bare", "", "object")]
    assert [tool_choice(c) for c in (None, "auto", "none", "required", {"type": "function", "name": "f"})] == [
        None, "auto", "none", "required", "f"]
    for tools, said in (([{"type": "file_search"}], "of type 'file_search'"), ([{"type": "function", "name": "a b"}], "name must be 1 to 64"),
                        ([{"type": "function", "name": "a"}, {"type": "function", "name": "a"}], "given twice"),
                        ({"type": "function"}, "must be a list")):
        with pytest.raises(CompletionRefused, match=said):
            function_tools(tools)
    with pytest.raises(CompletionRefused, match=r"'tool_choice' must be .auto., .none., .required. or \{'type': 'function', 'name'"):
        tool_choice({"type": "web_search"})


def test_metadata_is_kept_within_openais_limits():
    fine = {f"k{n}": "v" * 512 for n in range(16)}
    assert checked_metadata(fine) == fine and checked_metadata(None) == {}
    for metadata, said in (({f"k{n}": "v" for n in range(17)}, "17 pairs"), ({"k" * 65: "v"}, "65 characters"),
                           ({"k": "v" * 513}, "513 characters"), ({"k": None}, "must be a string"), (["k"], "must be an object")):
        with pytest.raises(CompletionRefused, match=said):
            checked_metadata(metadata)


def test_the_store_keeps_where_a_response_sits_and_only_its_conversations_latest_continues(tmp_path):
    now = [1000.0]
    store = ResponseStore(tmp_path, retention_s=100, max_rows=3, clock=lambda: now[0])
    try:
        assert store.reserve("r1", "c", None, "{}").outcome == "reserved"
        store.finish("r1", "completed", '{"id": "r1"}', history_messages=2)
        now[0] += 1
        assert store.reserve("r2", "c", "r1", "{}").outcome == "reserved"
        assert store.reserve("r3", "c", "r1", "{}").latest == "r2"  # r2 is in progress: r1 is no longer the latest
        store.finish("r2", "failed", "{}")
        assert store.latest("c") == "r1"  # a failed response does not move the conversation on
        assert store.reserve("r3", "c", "r1", "{}").outcome == "reserved"
        kept = store.get("r1")
        assert (kept.conversation_id, kept.position, kept.history_messages, kept.state) == ("c", 1, 2, "completed")
        assert store.get("r3").position == 3
        now[0] += 1
        store.reserve("other", None, None, "{}")  # the fourth row: the oldest goes
        assert store.get("r1") is None and store.get("other").conversation_id is None
        now[0] += 101
        assert store.get("r3") is None and store.purge() == 3
    finally:
        store.close()


def test_responses_left_in_progress_by_a_process_that_is_gone_are_failed_at_start(tmp_path):
    store = ResponseStore(tmp_path, 1000, 100)
    store.reserve("r1", "c", None, "{}")
    store._db.execute("UPDATE responses SET owner_process = 'gone'")
    store.close()
    reopened = ResponseStore(tmp_path, 1000, 100)
    try:
        assert reopened.get("r1").state == "failed" and reopened.latest("c") is None
    finally:
        reopened.close()


def test_the_response_object_and_its_events_validate_as_the_official_clients_types():
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    from monoagent import Usage
    from monoagent_plugins.serving.openai_responses import replayed_events, response_object, response_usage

    asked = parse({"input": "hi", "metadata": {"k": "v"}, "instructions": "Be brief.",
                   "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}]})
    done = response_object("resp_1", 1, "offline:echo", asked, status="completed", text="Let me look.",
                           calls=(ToolCall("c1", "get_weather", {"city": "Oslo"}),), usage=Usage(10, 5, 100, 20))
    parsed = Response.model_validate(done)  # strict: every field the client's type requires, of its type
    assert parsed.output_text == "Let me look." and parsed.output[1].call_id == "c1" and parsed.metadata == {"k": "v"}
    assert (parsed.usage.input_tokens, parsed.usage.input_tokens_details.cached_tokens, parsed.usage.total_tokens) == (130, 100, 135)
    assert response_usage(Usage(3, 4)) == {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens": 4,
                                           "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}
    events = TypeAdapter(ResponseStreamEvent)
    sent = [event.decode().split("\n") for event in replayed_events(done)]
    kinds = [lines[0].removeprefix("event: ") for lines in sent]
    payloads = [events.validate_json(lines[1].removeprefix("data: ")) for lines in sent]
    assert [p.type for p in payloads] == kinds and [p.sequence_number for p in payloads] == list(range(len(kinds)))
    assert kinds[-5:] == ["response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", "response.output_item.done", "response.completed"]


@pytest.mark.parametrize("planted", ["directory", "database"])
def test_a_symlinked_responses_directory_or_database_is_refused_and_nothing_is_written_through_it(tmp_path, planted):
    from monoagent_plugins.serving.response_store import ResponseStoreError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "responses.sqlite3").write_bytes(b"")
    home = tmp_path / "home"
    ResponseStore(home, 1000, 100).close()
    if planted == "directory":
        (home / "openai-api").rename(home / "moved")
        (home / "openai-api").symlink_to(elsewhere)
        named = home / "openai-api"
    else:
        (home / "openai-api" / "responses.sqlite3").unlink()
        (home / "openai-api" / "responses.sqlite3").symlink_to(elsewhere / "responses.sqlite3")
        named = home / "openai-api" / "responses.sqlite3"
    with pytest.raises(ResponseStoreError, match="symlink") as refused:
        ResponseStore(home, 1000, 100)
    assert str(named) in str(refused.value) and (elsewhere / "responses.sqlite3").read_bytes() == b""


def test_forgetting_a_conversation_removes_its_responses_and_creates_nothing_where_none_are(tmp_path):
    from monoagent_plugins.serving.response_store import forget_conversation

    assert forget_conversation(tmp_path / "empty", None) == 0 and not (tmp_path / "empty").exists()
    store = ResponseStore(tmp_path, 1000, 100)
    for response, conversation in (("r1", "a"), ("r2", "a"), ("r3", "b"), ("r4", None)):
        store.reserve(response, conversation, None, "{}")
    store.close()
    assert forget_conversation(tmp_path, "a") == 2 and forget_conversation(tmp_path, None) == 1
    store = ResponseStore(tmp_path, 1000, 100)
    try:
        assert [store.get(r) is not None for r in ("r1", "r3", "r4")] == [False, False, True]
    finally:
        store.close()


def test_a_seed_keeps_the_newest_messages_within_its_bound_from_a_user_message():
    from monoagent import Message
    from monoagent_plugins.serving.openai_responses import SEED_MAX_BYTES, decode_seed, encode_seed

    turns = [Message(role, f"{role} {n} " + "x" * 10_000) for n in range(60) for role in ("user", "assistant")]
    seed = encode_seed(turns)
    kept = decode_seed(seed)
    assert len(seed.encode()) <= SEED_MAX_BYTES and kept[0].role == "user" and kept[-1] == turns[-1]
    assert kept == turns[len(turns) - len(kept):] and 0 < len(kept) < len(turns)
    call = ToolCall("c1", "get_weather", {"city": "Oslo"})
    open_step = [Message("user", "weather?"), Message("assistant", "", tool_calls=(call,))]
    assert decode_seed(encode_seed(open_step)) == open_step  # an open step keeps its calls


def test_a_seeded_response_is_adopted_by_one_conversation_only(tmp_path):
    store = ResponseStore(tmp_path, 1000, 100)
    store.reserve("resp_a", None, None, "{}")
    store.finish("resp_a", "completed", "{}", None, seed="[]")
    assert store.get("resp_a").seed == "[]"
    assert store.adopt("resp_a", "openai-api:conv_1") == "openai-api:conv_1"
    assert store.adopt("resp_a", "openai-api:conv_2") == "openai-api:conv_1"  # a concurrent request made it first
    adopted = store.get("resp_a")
    assert adopted.conversation_id == "openai-api:conv_1" and adopted.seed is None
    assert store.adopt("resp_gone", "openai-api:conv_3") is None
    store.close()
