"""Stateless conversations on the ``openai-api`` channel (``openaiApi.conversations``), against a real
``monoagent serve`` subprocess with the official ``openai`` client.

A client that resends its chat without a conversation id (the ``openai`` client, Open WebUI, LibreChat,
``llm -c``, openai-agents' ``to_input_list()``) gets its earlier messages as the turn's history and
nothing is stored; a named conversation keeps the server's history canonical. The offline echo provider
answers ``history: N messages; you said: <text>``, so each test reads what the model was sent.
"""

from __future__ import annotations

import openai
import pytest
from serving import TOKEN, Server, rule_server, serve_once, stored

CHAT = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "the first answer"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": [{"type": "text", "text": "the second answer"}]},
        {"role": "user", "content": "third"}]


def client_of(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN)


def answer(server: Server, messages: list[dict], **options) -> str:
    done = client_of(server).chat.completions.create(model="offline:echo", messages=messages, **options)
    return done.choices[0].message.content


def test_auto_a_resent_chat_without_an_id_is_the_turns_history_and_nothing_is_stored(running):
    said = answer(running, CHAT)
    assert "history: 4 messages; you said: third" in said  # the two earlier exchanges, not the system message
    streamed = list(client_of(running).chat.completions.create(model="offline:echo", messages=CHAT, stream=True))
    assert "history: 4 messages" in "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    raw = running.client.post("/v1/chat/completions", json={"messages": CHAT}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert "history: 4 messages" in raw.json()["choices"][0]["message"]["content"]
    assert "X-Conversation-Id" not in raw.headers  # no made-up id that, sent back, would name an empty server conversation
    tools = [*CHAT[:-1], {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "found"}, {"role": "user", "content": "and now"}]
    assert "history: 6 messages; you said: and now" in answer(running, tools)
    assert "openai-api:" not in stored(running)


def test_auto_with_an_id_the_server_history_is_canonical_and_the_resent_chat_is_not_duplicated(running):
    headers = {"X-Conversation-Id": "named"}
    assert "history: 0 messages" in answer(running, CHAT[:2], extra_headers=headers)
    assert "history: 2 messages" in answer(running, CHAT, extra_headers=headers)  # the server's 2, not the 4 resent
    assert "history: 4 messages" in answer(running, [*CHAT, {"role": "assistant", "content": "x"},
                                                     {"role": "user", "content": "fourth"}], extra_headers=headers)
    assert "history: 0 messages" in answer(running, CHAT, user="someone")  # 'user' names a server conversation too
    assert "history: 2 messages" in answer(running, CHAT, user="someone")
    listed = stored(running)
    assert "openai-api:named" in listed and "openai-api:someone" in listed and listed.count("openai-api:") == 2


@pytest.mark.parametrize("running", ["server"], indirect=True)
def test_server_mode_keeps_todays_behaviour_every_request_stored(running):
    assert "history: 0 messages" in answer(running, CHAT)  # the resent chat is ignored
    assert stored(running).count("openai-api:") == 1


@pytest.mark.parametrize("running", ["client"], indirect=True)
def test_client_mode_reads_the_request_even_with_an_id_and_stores_nothing(running):
    assert "history: 4 messages" in answer(running, CHAT, extra_headers={"X-Conversation-Id": "named"})
    assert "history: 4 messages" in answer(running, CHAT, extra_headers={"X-Conversation-Id": "named"})
    assert "openai-api:" not in stored(running)


def test_ten_thousand_earlier_messages_or_a_huge_one_are_bounded_as_stored_history_is(tmp_path):
    toml = '[openaiApi]\nconversations = "auto"\n[history]\nmaxMessages = 6\nmaxMessageBytes = 2048\n[serve]\nmaxBodyBytes = 4000000\n'
    server = rule_server(tmp_path, toml=toml)
    try:
        many = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"} for n in range(10_000)]
        said = answer(server, [*many, {"role": "user", "content": "last"}])
        assert "history: 6 messages; you said: last" in said  # the newest history.maxMessages
        huge = [{"role": "user", "content": "x" * 3_000_000}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "after the huge one"}]
        said = answer(server, huge)
        assert "history: 2 messages; you said: after the huge one" in said
        assert "openai-api:" not in stored(server)
    finally:
        server.stop()


def test_a_bad_conversations_value_is_a_config_error_naming_the_allowed_values(tmp_path):
    (tmp_path / "monoagent.toml").write_text('[openaiApi]\nconversations = "sometimes"\n', encoding="utf-8")
    refused = serve_once(tmp_path, "serve", "--check")
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "openaiApi.conversations" in said
    assert all(value in said for value in ("auto", "server", "client")), said


def test_a_client_conversation_with_a_role_the_channel_does_not_know_is_refused_naming_it(running):
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.role is 'function'"):
        answer(running, [{"role": "function", "name": "f", "content": "x"}, {"role": "user", "content": "hi"}])


def test_client_history_keeps_the_newest_messages_each_cut_to_the_store_cap():
    from monoagent_plugins.serving.openai_requests import client_history

    many = [{"role": "user", "content": f"m{n}"} for n in range(10_000)] + [{"role": "user", "content": "now"}]
    kept = client_history(many, 5, 1024)
    assert [m.content for m in kept] == ["m9995", "m9996", "m9997", "m9998", "m9999"]
    huge = client_history([{"role": "user", "content": "y" * 1_000_000}, {"role": "user", "content": "now"}], 64, 1024)
    assert len(huge) == 1 and len(huge[0].content.encode()) < 1024 and "bytes" in huge[0].content
    calls = [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "found"}, {"role": "user", "content": "now"}]
    kept = client_history(calls, 64, 1024)
    assert kept[0].tool_calls[0].name == "lookup" and kept[0].tool_calls[0].arguments == {"q": "x"}
    assert kept[1].role == "tool" and kept[1].tool_call_id == "c1"
    assert [m.role for m in client_history(calls, 1, 1024)] == []  # a tool result whose call was cut goes too
    unanswered = [{"role": "assistant", "content": "let me see", "tool_calls": calls[0]["tool_calls"]},
                  {"role": "tool", "tool_call_id": "other", "content": "stray"}, {"role": "user", "content": "now"}]
    kept = client_history(unanswered, 64, 1024)  # a provider refuses a call with no result, or a result with no call
    assert [(m.role, m.content, m.tool_calls) for m in kept] == [("assistant", "let me see", ())]
