"""The ``openai-api`` channel against a real ``monoagent serve`` subprocess: the official ``openai`` client,
streaming, concurrency, shutdown and the request fields, over real HTTP on 127.0.0.1.

The ``gated`` provider (a project-local plugin) answers ``answer to '<text>'; history: N messages``. A message
holding ``gate:<name>`` first writes ``started-<name>`` and answers only once the test creates ``release-<name>``,
so a test knows when a turn is in flight and decides when it ends. ``toolround`` streams a sentence, calls the
SessionHistory tool, then answers; ``retry`` streams part of an answer, fails retryably, and answers on the retry.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import httpx
import openai
import pytest
from serving import TOKEN, Server, ask_in_background, auth, completion, history, serve_env, slow_server
from waiting import wait_until

GATED_PROVIDER = '''
import asyncio
import time
from pathlib import Path

from monoagent._kernel.errors import ProviderError
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.model import StepFinished, TextDelta, ToolCall, ToolCallRequested


class Gated:
    name = "gated"

    def __init__(self):
        self.failed_once = False

    async def stream(self, request):
        said = request.messages[-1].content
        if request.step == 1 and "toolround" in said:
            with open("tool-calls", "a") as calls:  # the tests count the tool rounds a request ran
                calls.write("SessionHistory\\n")
            yield TextDelta("Let me look that up. ")
            yield ToolCallRequested(ToolCall("call_1", "SessionHistory", {"action": "search", "query": "x"}))
            yield StepFinished("tool_use")
            return
        if request.step > 1:
            yield TextDelta("found nothing")
            yield StepFinished()
            return
        if "break-model" in said:
            raise ProviderError("the model is unavailable", provider="gated")
        if "retry" in said:
            if not self.failed_once:
                self.failed_once = True
                yield TextDelta("partial ")
                raise ProviderError("connection dropped", retryable=True, retry_after=0, provider="gated")
            yield TextDelta("the retried answer")
            yield StepFinished()
            return
        if "gate:" in said:
            gate = said.partition("gate:")[2].split()[0]
            Path(f"started-{gate}").write_text("1")
            deadline = time.monotonic() + 60  # the test creates the file; the deadline only bounds a failing test
            while not Path(f"release-{gate}").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        text = said.split("\\n")[-1]
        yield TextDelta(f"answer to {text!r}; ")
        yield TextDelta(f"history: {request.prompt.manifest.history_messages} messages")
        yield StepFinished()


@hookimpl
def register_providers(register):
    register("gated", lambda agent, model: Gated())
'''


@pytest.fixture
def server(tmp_path):
    running = Server(tmp_path)
    yield running
    running.stop()


def gated_server(tmp_path: Path, *args: str, **env: str) -> Server:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "gated_provider.py").write_text(GATED_PROVIDER, encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "gated:x"\n', encoding="utf-8")
    return Server(tmp_path, "--plugins-dir", "plugins", *args, env=serve_env(tmp_path, **env))


@pytest.fixture
def gated(tmp_path):
    running = gated_server(tmp_path)
    yield running
    running.stop()


def client_of(server: Server, token: str = TOKEN, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, **options)


def in_background(call) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # the test asserts on it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def streamed(response: httpx.Response) -> list[dict | str]:
    """The ``data:`` payloads of an SSE body, JSON-decoded (``[DONE]`` kept as the string)."""
    events = [block for block in response.text.split("\n\n") if block]
    assert all(block.startswith("data: ") and "\n" not in block for block in events), events
    return [block[6:] if block == "data: [DONE]" else json.loads(block[6:]) for block in events]


# --------------------------------------------------------------------------- the official client


def test_the_openai_client_completes_and_keeps_the_conversation_by_header_and_by_user(server):
    client = client_of(server)
    first = client.chat.completions.create(model="offline:echo", messages=[{"role": "user", "content": "hello"}],
                                           extra_headers={"X-Conversation-Id": "oc1"})
    assert first.object == "chat.completion" and first.model == "offline:echo"
    assert first.choices[0].message.role == "assistant" and first.choices[0].finish_reason == "stop"
    assert "you said: hello" in first.choices[0].message.content and "history: 0 messages" in first.choices[0].message.content
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens > 0
    again = client.chat.completions.create(model="offline:echo", messages=[{"role": "user", "content": "again"}],
                                           extra_headers={"X-Conversation-Id": "oc1"})
    assert "history: 2 messages" in again.choices[0].message.content
    by_user = [client.chat.completions.create(messages=[{"role": "user", "content": text}], model="offline:echo", user="u1")
               for text in ("one", "two")]
    assert "history: 2 messages" in by_user[1].choices[0].message.content


def test_the_openai_client_streams_chunks_that_join_to_the_non_streamed_answer(server):
    client = client_of(server)
    ask = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "stream me"}]
    chunks = list(client.chat.completions.create(model="offline:echo", messages=ask, stream=True,
                                                 stream_options={"include_usage": True},
                                                 extra_headers={"X-Conversation-Id": "streamed"}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert len(texts) > 1 and all(texts)  # one chunk per text_delta, not the answer in one piece
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-2].choices[0].delta.content is None
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    plain = client.chat.completions.create(model="offline:echo", messages=ask, extra_headers={"X-Conversation-Id": "plain"})
    assert "".join(texts) == plain.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    after = client.chat.completions.create(model="offline:echo", messages=ask, extra_headers={"X-Conversation-Id": "streamed"})
    assert "history: 2 messages" in after.choices[0].message.content  # the streamed turn was committed


def test_the_openai_client_lists_the_agent_as_its_model(server):
    assert [model.id for model in client_of(server).models.list()] == ["offline:echo"]


def test_the_openai_client_raises_its_typed_errors_with_our_message(server):
    with pytest.raises(openai.AuthenticationError, match="bearer token"):
        client_of(server, "wrong-key").chat.completions.create(model="offline:echo", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        client_of(server, "wrong-key").models.list()
    with pytest.raises(openai.NotFoundError) as missing:
        client_of(server).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found" and "offline:echo" in missing.value.message
    with pytest.raises(openai.BadRequestError, match="must be 1 to 64 ASCII letters") as tools:
        client_of(server).chat.completions.create(model="offline:echo", messages=[{"role": "user", "content": "hi"}],
                                                  tools=[{"type": "function", "function": {"name": "f g", "parameters": {}}}])
    assert tools.value.param == "tools"


def test_overload_raises_rate_limit_error_in_the_client_without_retries(tmp_path):
    """The client retries 429 (twice by default, honouring Retry-After); ``max_retries=0`` shows the first answer."""
    server = slow_server(tmp_path, MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS="1", MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS="0",
                         MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="0")
    try:
        client, _ = ask_in_background(server, "slow please", "busy")
        with pytest.raises(openai.RateLimitError, match="maxPendingRuns") as refused:
            client_of(server, max_retries=0).chat.completions.create(model="slow:x", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.response.headers["Retry-After"] == "1"
        with pytest.raises(openai.RateLimitError):  # a streamed request is refused before its first byte, the same way
            client_of(server, max_retries=0).chat.completions.create(model="slow:x", messages=[{"role": "user", "content": "hi"}],
                                                                     stream=True)
        assert server.terminate() == 0
        client.join(timeout=30)
    finally:
        server.stop()


# --------------------------------------------------------------------------- streaming: errors, disconnects, tool rounds


def test_a_stream_cut_by_shutdown_ends_with_an_error_chunk_the_client_raises(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="0")
    try:
        stream = client_of(server).chat.completions.create(model="slow:x", messages=[{"role": "user", "content": "slow please"}],
                                                           stream=True, extra_headers={"X-Conversation-Id": "cut"})
        first = [next(stream), next(stream)]
        assert first[1].choices[0].delta.content == "thinking\n"
        server.process.send_signal(subprocess.signal.SIGTERM)
        with pytest.raises(openai.APIError, match="shutting down"):
            list(stream)
        assert server.process.wait(timeout=30) == 0
        assert "Status: cancelled (reason: server_shutdown)" in history(tmp_path, "openai-api:cut")
    finally:
        server.stop()


def test_a_client_that_goes_away_mid_stream_cancels_its_run_and_the_account_is_published(tmp_path):
    server = slow_server(tmp_path)
    try:
        with server.client.stream("POST", "/v1/chat/completions", json=completion("slow please", stream=True),
                                  headers={**auth(), "X-Conversation-Id": "gone"}) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert '"role":"assistant"' in next(lines)
            assert "thinking" in next(line for line in lines if line)
        # the connection is closed: the server cancels the run, whose account then reaches the history
        wait_until(lambda: "reason: client_disconnected" in history(tmp_path, "openai-api:gone"), "the continuity account")
        assert "Status: cancelled (reason: client_disconnected)" in history(tmp_path, "openai-api:gone")
        assert server.terminate() == 0
    finally:
        server.stop()


def test_streamed_text_on_a_tool_round_and_on_a_provider_retry_is_what_docs_serving_says(gated):
    """Text already streamed is not taken back: the stream shows it, the committed answer is the last step's text."""
    tool_round = streamed(gated.client.post("/v1/chat/completions", json=completion("toolround", stream=True),
                                            headers={**auth(), "X-Conversation-Id": "tools"}))
    assert tool_round[-1] == "[DONE]"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in tool_round[1:-2]) == "Let me look that up. found nothing"
    retried = streamed(gated.client.post("/v1/chat/completions", json=completion("retry me", stream=True),
                                         headers={**auth(), "X-Conversation-Id": "retried"}))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in retried[1:-2]) == "partial the retried answer"
    for conversation, answer in (("tools", "found nothing"), ("retried", "the retried answer")):
        shown = history(gated.cwd, f"openai-api:{conversation}")
        assert answer in shown and "Let me look" not in shown and "partial" not in shown


def test_a_failed_turn_is_a_500_in_openai_shape_before_the_stream_and_an_error_event_after(gated):
    with pytest.raises(openai.InternalServerError, match="the model is unavailable"):
        client_of(gated, max_retries=0).chat.completions.create(model="gated:x", messages=[{"role": "user", "content": "break-model"}])
    answer = streamed(gated.client.post("/v1/chat/completions", json=completion("break-model now", stream=True), headers=auth()))
    assert answer[0]["choices"][0]["delta"]["role"] == "assistant" and "[DONE]" not in answer
    assert answer[-1]["error"]["type"] == "server_error" and "the model is unavailable" in answer[-1]["error"]["message"]


def test_a_streamed_body_is_sse_framed_with_usage_last_and_done(server):
    answer = server.client.post("/v1/chat/completions", headers=auth(),
                                json=completion("framing", stream=True, stream_options={"include_usage": True}))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    assert "X-Conversation-Id" not in answer.headers  # no id named: a client conversation, nothing stored to name
    events = streamed(answer)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["total_tokens"] > 0
    assert events[-1] == "[DONE]"
    without = streamed(server.client.post("/v1/chat/completions", headers=auth(), json=completion("framing", stream=True)))
    assert all("usage" not in e for e in without[:-1]) and without[-2]["choices"][0]["finish_reason"] == "stop"


# --------------------------------------------------------------------------- concurrency and shutdown


def test_two_conversations_run_at_once_each_with_its_own_history(gated):
    asks = {name: in_background(lambda name=name: gated.client.post(
        "/v1/chat/completions", json=completion(f"gate:{name} hi"), headers={**auth(), "X-Conversation-Id": name}))
        for name in ("a", "b")}
    wait_until(lambda: all((gated.cwd / f"started-{name}").exists() for name in asks), "both turns in flight at once")
    for name in asks:
        (gated.cwd / f"release-{name}").write_text("1")
    for name, (thread, outcome) in asks.items():
        thread.join(timeout=30)
        assert outcome[0].status_code == 200, outcome
        assert outcome[0].json()["choices"][0]["message"]["content"] == f"answer to 'gate:{name} hi'; history: 0 messages"
    follow_up = gated.client.post("/v1/chat/completions", json=completion("next"), headers={**auth(), "X-Conversation-Id": "a"})
    assert "history: 2 messages" in follow_up.json()["choices"][0]["message"]["content"]
    assert "gate:b" not in history(gated.cwd, "openai-api:a")


def test_two_requests_on_one_conversation_are_serialised(tmp_path):
    """The second request is submitted while the first is in flight (the server's debug log says so), and sees its answer."""
    server = gated_server(tmp_path, "--debug")
    try:
        first = in_background(lambda: server.client.post("/v1/chat/completions", json=completion("gate:one first"),
                                                         headers={**auth(), "X-Conversation-Id": "same"}))
        wait_until(lambda: (tmp_path / "started-one").exists(), "the first turn in flight")
        second = in_background(lambda: server.client.post("/v1/chat/completions", json=completion("second"),
                                                          headers={**auth(), "X-Conversation-Id": "same"}))
        wait_until(lambda: sum("submitted for openai-api:same" in line for line in server.lines_so_far()) == 2, "the second submission")
        assert not second[1]  # still waiting behind the first
        (tmp_path / "release-one").write_text("1")
        for thread, _ in (first, second):
            thread.join(timeout=30)
        assert first[1][0].json()["choices"][0]["message"]["content"] == "answer to 'gate:one first'; history: 0 messages"
        assert second[1][0].json()["choices"][0]["message"]["content"] == "answer to 'second'; history: 2 messages"
    finally:
        server.stop()


def test_a_turn_finishing_within_the_grace_period_gets_its_answer_after_sigterm(tmp_path):
    server = gated_server(tmp_path, MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="30000")
    try:
        thread, outcome = in_background(lambda: server.client.post("/v1/chat/completions", json=completion("gate:late hi"),
                                                                   headers={**auth(), "X-Conversation-Id": "late"}))
        wait_until(lambda: (tmp_path / "started-late").exists(), "the turn in flight")
        server.process.send_signal(subprocess.signal.SIGTERM)

        def refusing() -> bool:
            try:
                httpx.get(f"{server.url}/healthz", timeout=5)
            except httpx.TransportError:
                return True
            return False

        wait_until(refusing, "the server to stop accepting connections")  # the signal was handled
        (tmp_path / "release-late").write_text("1")
        thread.join(timeout=30)
        assert outcome[0].status_code == 200, outcome
        assert outcome[0].json()["choices"][0]["message"]["content"] == "answer to 'gate:late hi'; history: 0 messages"
        assert server.process.wait(timeout=30) == 0
        assert "answer to 'gate:late hi'" in history(tmp_path, "openai-api:late")
    finally:
        server.stop()


# --------------------------------------------------------------------------- request fields


def test_fields_openai_clients_send_are_accepted_and_ignored(server):
    answer = server.client.post("/v1/chat/completions", headers=auth(), json=completion(
        "fields", model="offline:echo", temperature=0.2, max_tokens=5, max_completion_tokens=5, top_p=0.5, n=1,
        stop=["x"], presence_penalty=0, frequency_penalty=0, seed=1, stream=False, tools=None, tool_choice=None))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"].endswith("you said: fields")  # max_tokens did not cut it


@pytest.mark.parametrize("extra, status, named, param", [
    ({"n": 2}, 400, "'n' must be 1", "n"),
    ({"n": True}, 400, "'n' must be 1", "n"),
    ({"tool_choice": "sometimes"}, 400, "'tool_choice' must be", "tool_choice"),
    ({"functions": [{"name": "f"}]}, 400, "send the functions as 'tools'", "functions"),
    ({"tools": [{"type": "code_interpreter"}]}, 400, "only function tools are supported", "tools"),
    ({"tools": {"type": "function"}}, 400, "'tools' must be an array", "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, 400, "JSON Schema object", "tools"),
    ({"tool_choice": {"type": "function", "function": {"name": "nowhere"}}}, 400, "does not offer", None),
    ({"tools": [{"type": "function", "function": {"name": "f"}}] * 2}, 400, "repeats the name 'f'", "tools"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "1"},
                   {"role": "tool", "tool_call_id": "x", "content": "2"}]}, 400, "answers tool call 'x' a second time", "messages"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "4"}]}, 400, "tool_call_id must name", "messages"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "4"}]},
     400, "no tool call waiting", None),
    ({"model": "gpt-4o"}, 404, "The model `gpt-4o` does not exist", "model"),
    ({"model": 7}, 400, "'model' must be a string", "model"),
    ({"stream": "yes"}, 400, "'stream' must be true or false", "stream"),
    ({"stream_options": {"include_usage": True}}, 400, "only allowed when 'stream' is true", "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, 400, "'include_usage' is true or false", "stream_options"),
    ({"user": 42}, 400, "'user' must be a string", "user"),
    ({"user": "x" * 257}, 400, "1 to 256 printable characters", "user"),
    ({"user": "tab\there"}, 400, "1 to 256 printable characters", "user"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "look"},
                                                {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}}]}]},
     400, "messages[0].content[1] is of type 'image_url'", "messages"),
])
def test_a_field_the_channel_does_not_honour_is_refused_naming_it_and_runs_nothing(server, extra, status, named, param):
    answer = server.client.post("/v1/chat/completions", json=completion("refused", **extra),
                                headers={**auth(), "X-Conversation-Id": "refusals"})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert named in error["message"] and error["type"] == "invalid_request_error" and error["param"] == param
    assert error["code"] == ("model_not_found" if status == 404 else None)
    assert "no history" in history(server.cwd, "openai-api:refusals")


def test_a_conversation_id_header_is_checked_and_text_parts_are_joined(server):
    long = server.client.post("/v1/chat/completions", json=completion("x"), headers={**auth(), "X-Conversation-Id": "c" * 300})
    assert long.status_code == 400 and "X-Conversation-Id header" in long.json()["error"]["message"]
    parts = server.client.post("/v1/chat/completions", headers={**auth(), "X-Conversation-Id": "with space"}, json={
        "messages": [{"role": "user", "content": [{"type": "text", "text": "two "}, {"type": "text", "text": "parts"}]}]})
    assert parts.json()["choices"][0]["message"]["content"].endswith("you said: two parts")
    assert parts.headers["X-Conversation-Id"] == "with space"


def test_system_messages_are_the_turns_context_and_never_stored(server):
    ask = {"messages": [{"role": "system", "content": "Answer in haiku."},
                        {"role": "developer", "content": [{"type": "text", "text": "Tenant: acme."}]},
                        {"role": "user", "content": "hello"}]}
    headers = {**auth(), "X-Conversation-Id": "ctx"}
    first = server.client.post("/v1/chat/completions", headers=headers, json=ask).json()["choices"][0]["message"]["content"]
    assert "dynamic_context" in first.partition("; history")[0]  # the sections the offline echo was sent
    plain = server.client.post("/v1/chat/completions", headers=headers, json={"messages": [{"role": "user", "content": "again"}]}).json()
    answer = plain["choices"][0]["message"]["content"]
    assert "dynamic_context" not in answer.partition("; history")[0] and "haiku" not in answer and "acme" not in answer
    image = {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                          {"role": "user", "content": "hi"}]}
    refused = server.client.post("/v1/chat/completions", headers=headers, json=image)
    assert refused.status_code == 400 and "messages[0].content[0] is of type 'image_url'" in refused.json()["error"]["message"]


# --------------------------------------------------------------------------- after the commit: no 5xx, idempotency


def tool_rounds(server: Server) -> int:
    """How many times the ``gated`` provider called the SessionHistory tool (a ``toolround`` turn calls it once)."""
    calls = server.cwd / "tool-calls"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def turns_in(server: Server, conversation: str, answer: str) -> int:
    """How many committed turns of ``conversation`` answered ``answer`` (each is one assistant message in history)."""
    return history(server.cwd, conversation).count(answer)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_user_outside_latin1_runs_one_turn_and_gets_its_answer_with_the_id_percent_encoded(gated, stream):
    """The header echo was built after the commit and failed (500); the client retried twice: three turns."""
    ask = {"model": "gated:x", "messages": [{"role": "user", "content": "toolround"}], "user": "用户"}
    raw = client_of(gated).chat.completions.with_raw_response.create(**ask, stream=stream)
    assert raw.headers["X-Conversation-Id"] == "%E7%94%A8%E6%88%B7"
    answer = raw.parse()
    text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices) if stream else answer.choices[0].message.content
    assert text.endswith("found nothing")
    assert turns_in(gated, "openai-api:用户", "found nothing") == 1 and tool_rounds(gated) == 1
    again = gated.client.post("/v1/chat/completions", json=completion("next"),
                              headers={**auth(), "X-Conversation-Id": raw.headers["X-Conversation-Id"]})
    assert again.json()["choices"][0]["message"]["content"] == "answer to 'next'; history: 4 messages"  # the same conversation


def test_a_conversation_id_header_outside_ascii_or_badly_encoded_is_refused_naming_the_rule(server):
    for value, named in ((b"caf\xc3\xa9", "must be ASCII: write other characters percent-encoded as UTF-8"),
                         (b"%FF%FE", "percent-encoded bytes are not UTF-8")):
        refused = server.client.post("/v1/chat/completions", json=completion("x"), headers={**auth(), "X-Conversation-Id": value})
        assert refused.status_code == 400 and named in refused.json()["error"]["message"], refused.text
    assert "no history" in history(server.cwd, "openai-api:café")
    echoed = server.client.post("/v1/chat/completions", json=completion("x"), headers={**auth(), "X-Conversation-Id": "50%25 off"})
    assert echoed.status_code == 200 and echoed.headers["X-Conversation-Id"] == "50%25 off"
    assert "you said: x" in history(server.cwd, "openai-api:50% off")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_retried_idempotency_key_returns_the_first_answer_and_runs_the_tools_once(gated, stream):
    client = client_of(gated)
    ask = {"model": "gated:x", "messages": [{"role": "user", "content": "toolround"}], "stream": stream,
           "extra_headers": {"Idempotency-Key": "order-7", "X-Conversation-Id": "keyed"}}
    if stream:
        ask["stream_options"] = {"include_usage": True}
    first, second = (client.chat.completions.with_raw_response.create(**ask) for _ in range(2))
    assert "Idempotent-Replayed" not in first.headers and second.headers["Idempotent-Replayed"] == "true"
    answers = [raw.parse() for raw in (first, second)]
    if stream:
        chunks = [list(answer) for answer in answers]
        texts = ["".join(c.choices[0].delta.content or "" for c in each if c.choices) for each in chunks]
        assert texts[0] == "Let me look that up. found nothing" and texts[1] == "found nothing"  # the committed answer
        assert chunks[0][0].id == chunks[1][0].id and chunks[1][-1].usage.total_tokens == chunks[0][-1].usage.total_tokens
    else:
        assert answers[1].model_dump() == answers[0].model_dump()
        assert answers[0].choices[0].message.content == "found nothing"
    assert turns_in(gated, "openai-api:keyed", "found nothing") == 1 and tool_rounds(gated) == 1


def test_an_idempotency_key_reused_with_another_request_or_still_running_is_refused_as_the_webhook_does(gated):
    client = client_of(gated, max_retries=0)
    key = {"Idempotency-Key": "k-1", "X-Conversation-Id": "busy"}
    thread, outcome = in_background(lambda: client.chat.completions.create(
        model="gated:x", messages=[{"role": "user", "content": "gate:k first"}], extra_headers=key))
    wait_until(lambda: (gated.cwd / "started-k").exists(), "the keyed turn in flight")
    with pytest.raises(openai.ConflictError, match="is in progress, retry later") as running:
        client.chat.completions.create(model="gated:x", messages=[{"role": "user", "content": "gate:k first"}], extra_headers=key)
    assert running.value.code == "idempotency_in_progress" and running.value.response.headers["Retry-After"] == "1"
    (gated.cwd / "release-k").write_text("1")
    thread.join(timeout=30)
    assert outcome[0].choices[0].message.content == "answer to 'gate:k first'; history: 0 messages"
    for changed in ({"messages": [{"role": "user", "content": "another"}]},
                    {"messages": [{"role": "user", "content": "gate:k first"}], "extra_headers": {**key, "X-Conversation-Id": "x"}}):
        with pytest.raises(openai.UnprocessableEntityError, match="first used with a different request") as conflict:
            client.chat.completions.create(model="gated:x", **{"extra_headers": key, **changed})
        assert conflict.value.code == "idempotency_conflict"
    with pytest.raises(openai.BadRequestError, match="Idempotency-Key must be one header"):
        client.chat.completions.create(model="gated:x", messages=[{"role": "user", "content": "x"}],
                                       extra_headers={"Idempotency-Key": ""})
    other = client_of(gated, "other-token", max_retries=0)  # another client's keys are its own
    mine = other.chat.completions.create(model="gated:x", messages=[{"role": "user", "content": "gate:k first"}], extra_headers=key)
    assert mine.choices[0].message.content == "answer to 'gate:k first'; history: 2 messages"
    assert turns_in(gated, "openai-api:busy", "answer to 'gate:k first'") == 2
