"""``monoagent serve`` and the ``openai-api`` channel, over real HTTP against a real subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from serving import TOKEN, Server, ask_in_background, auth, completion, history, serve_env, slow_server

from monoagent_plugins.serving.http import bearer_ok, is_loopback


@pytest.fixture
def server(tmp_path):
    running = Server(tmp_path)
    yield running
    running.stop()


def test_health_and_readiness_need_no_token(server):
    assert server.client.get("/healthz").json() == {"status": "ok"}
    ready = server.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["channels"] == ["openai-api"]


def test_a_completion_round_trip_keeps_the_conversation(server):
    first = server.client.post("/v1/chat/completions", json=completion("hello"), headers={**auth(), "X-Conversation-Id": "c1"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["object"] == "chat.completion" and body["model"] == "offline:echo"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert "you said: hello" in body["choices"][0]["message"]["content"]
    assert "history: 0 messages" in body["choices"][0]["message"]["content"]  # the client's system message is not history
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] > 0
    second = server.client.post("/v1/chat/completions", json=completion("again", user="c1"), headers=auth())
    assert "history: 2 messages" in second.json()["choices"][0]["message"]["content"]  # `user` names the same conversation
    other = server.client.post("/v1/chat/completions", json=completion("elsewhere"), headers=auth("other-token"))
    assert "history: 0 messages" in other.json()["choices"][0]["message"]["content"]  # no id: a new conversation


def test_models_lists_the_composed_agent(server):
    models = server.client.get("/v1/models", headers=auth()).json()
    assert [m["id"] for m in models["data"]] == ["offline:echo"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": "Bearer"}])
def test_a_request_without_a_valid_bearer_token_is_401(server, headers):
    for answer in (server.client.post("/v1/chat/completions", json=completion("hi"), headers=headers),
                   server.client.get("/v1/models", headers=headers)):
        assert answer.status_code == 401
        assert answer.json()["error"]["type"] == "authentication_error"


def test_an_oversized_body_is_413_and_reaches_no_history(server):
    big = completion("x" * 1_100_000)
    answer = server.client.post("/v1/chat/completions", json=big, headers={**auth(), "X-Conversation-Id": "big"})
    assert answer.status_code == 413 and "serve.maxBodyBytes" in answer.json()["error"]["message"]
    after = server.client.post("/v1/chat/completions", json=completion("small"), headers={**auth(), "X-Conversation-Id": "big"})
    assert "history: 0 messages" in after.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("body, named", [
    (b'{"messages": [', "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[]", "JSON object"),
    (b'{"messages": []}', "'messages'"),
    (b'{"messages": [{"role": "assistant", "content": "hi"}]}', "role 'user'"),
    (b'{"messages": [{"role": "user", "content": ""}]}', "non-empty text"),
])
def test_a_malformed_request_is_400_naming_the_problem(server, body, named):
    answer = server.client.post("/v1/chat/completions", content=body, headers={**auth(), "Content-Type": "application/json"})
    assert answer.status_code == 400
    assert named in answer.json()["error"]["message"]
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_sigterm_when_idle_exits_0(server):
    assert server.client.get("/healthz").status_code == 200
    assert server.terminate() == 0


def test_sigterm_mid_turn_cancels_it_after_the_grace_period_and_exits_0(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="200")
    try:
        client, answers = ask_in_background(server, "slow please", "long")
        assert server.terminate() == 0
        client.join(timeout=30)
        answer = answers[0]
        assert isinstance(answer, httpx.Response) and answer.status_code == 503, answer
        assert "shutting down" in answer.json()["error"]["message"]
        assert "Status: cancelled (reason: server_shutdown)" in history(tmp_path, "openai-api:long")  # the account was published
    finally:
        server.stop()


def test_a_non_loopback_bind_without_tokens_is_a_startup_error_saying_how_to_set_them(tmp_path):
    env = serve_env(tmp_path)
    del env["MONO_AGENT_OPENAI_API_TOKENS"]
    done = subprocess.run([sys.executable, "-m", "monoagent", "serve", "--host", "0.0.0.0"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "MONO_AGENT_OPENAI_API_TOKENS" in done.stderr and "openaiApi.tokens" in done.stderr


def test_serve_without_an_enabled_channel_says_how_to_enable_one(tmp_path):
    env = serve_env(tmp_path)
    del env["MONO_AGENT_OPENAI_API_ENABLED"]
    done = subprocess.run([sys.executable, "-m", "monoagent", "serve"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "openaiApi.enabled" in done.stderr


def test_bearer_tokens_are_matched_exactly():
    assert bearer_ok("Bearer abc", ["x", "abc"]) and bearer_ok("bearer abc", ["abc"])
    assert not bearer_ok("Bearer abcd", ["abc"]) and not bearer_ok("Bearer ab", ["abc"])
    assert not bearer_ok(None, ["abc"]) and not bearer_ok("Bearer abc", [])
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")


def test_the_answer_bytes_of_a_committed_turn_cannot_fail_to_encode():
    """What answers a committed turn is built from parts that cannot raise: a lone surrogate (which UTF-8 cannot
    encode) turns the document into ASCII escapes; a header echo is percent-encoded ASCII and reads back."""
    from monoagent_plugins.serving.http import header_safe, header_text, json_bytes
    from monoagent_plugins.serving.openai_api import sse

    assert json.loads(json_bytes({"text": "ok \ud800 用"})) == {"text": "ok \ud800 用"}
    assert json_bytes({"text": "用"}) == '{"text":"用"}'.encode()
    assert sse({"t": "\udfff"}).startswith(b"data: {") and sse({"t": "\udfff"}).endswith(b"\n\n")
    for text in ("用户", "plain id", "50% off", "tab\tand é"):
        assert header_safe(text).isascii() and header_safe(text).isprintable()
        assert header_text(header_safe(text), "X-Conversation-Id") == text
    assert header_safe("plain id") == "plain id"
