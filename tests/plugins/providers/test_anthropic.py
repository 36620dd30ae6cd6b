"""The anthropic provider against a local server speaking the Messages API stream byte for byte."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from monoagent import TurnRequest, hookimpl
from monoagent._kernel.errors import ContextLimitError, ProviderError
from monoagent._kernel.model import Message, ProviderRequest, Section, ToolCall, ToolSpec, Usage
from monoagent._pipeline.assembly import BOUNDARY, compile_prompt
from monoagent.testing import AnthropicWireServer, fresh_agent
from monoagent.testing.provider_contract import LOOKUP, Reply, ScriptedToolCall, collect, contract_request

MODEL = "anthropic:claude-x"


@pytest.fixture
def server():
    with AnthropicWireServer() as server:
        yield server


def agent_for(tmp_path, server, **config):
    base = {"runtime": {"model": MODEL}, "providers": {"anthropic": {"baseUrl": server.url}}}
    for key, value in config.items():
        base[key] = {**base.get(key, {}), **value}
    return fresh_agent(tmp_path, config=base, env={"ANTHROPIC_API_KEY": "test-key"})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- the request


def test_request_json_is_exact(tmp_path, server):
    server.enqueue(Reply(text_pieces=("ok",)))
    runtime = agent_for(tmp_path, server).provider(MODEL)
    messages = [
        Message("user", "What does café mean?"),
        Message("assistant", "Let me look.", tool_calls=[ToolCall("toolu_1", "lookup", {"word": "café"})]),
        Message("tool", "a coffee house", name="lookup", tool_call_id="toolu_1"),
        Message("tool", "French", name="lookup", tool_call_id="toolu_2"),
    ]
    asyncio.run(collect(runtime, contract_request(messages, [LOOKUP], model="claude-x")))
    sent = server.last_request
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "test-key"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json == {
        "model": "claude-x",
        "max_tokens": 4096,
        "system": [
            {"type": "text", "text": "You are a careful assistant. This stable text is cached.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Current time: 2026-01-01 12:00 UTC. This dynamic text changes per turn."},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What does café mean?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "café"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a coffee house"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "French"},
                ],
            },
        ],
        "tools": [{"name": "lookup", "description": LOOKUP.description, "input_schema": LOOKUP.input_schema}],
        "stream": True,
    }
    assert BOUNDARY.encode() not in sent.body


def test_blank_text_before_a_tool_call_is_not_sent_as_a_text_block(tmp_path, server):
    server.enqueue(Reply(text_pieces=("ok",)))
    runtime = agent_for(tmp_path, server).provider(MODEL)
    messages = [
        Message("user", "Look it up."),
        Message("assistant", "\n\n", tool_calls=[ToolCall("toolu_1", "lookup", {"word": "x"})]),
        Message("tool", "unknown", name="lookup", tool_call_id="toolu_1"),
    ]
    asyncio.run(collect(runtime, contract_request(messages, [LOOKUP], model="claude-x")))
    assistant = server.last_request.json["messages"][1]
    assert assistant == {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "x"}}]}


def test_history_that_starts_with_an_answer_opens_with_a_user_turn(tmp_path, server):
    # History sent as leading messages can start with an assistant message (its question was
    # compacted away or fell out of the retained window); the Messages API requires user first.
    server.enqueue(Reply(text_pieces=("ok",)))
    runtime = agent_for(tmp_path, server).provider(MODEL)
    messages = [Message("assistant", "Paris."), Message("user", "And Spain?")]
    asyncio.run(collect(runtime, contract_request(messages, [], model="claude-x")))
    sent = server.last_request.json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == [{"type": "text", "text": "[Earlier conversation omitted.]"}]


def test_stable_only_prompt_sends_one_cached_block(tmp_path, server):
    server.enqueue(Reply(text_pieces=("ok",)))
    runtime = agent_for(tmp_path, server, providers={"anthropic": {"baseUrl": server.url, "maxOutputTokens": 99}}).provider(MODEL)
    prompt = compile_prompt([Section("core_guardrails", "Only stable.", 100)], [Message("user", "hi")])
    asyncio.run(collect(runtime, ProviderRequest("claude-x", prompt, prompt.messages)))
    body = server.last_request.json
    assert body["system"] == [{"type": "text", "text": "Only stable.", "cache_control": {"type": "ephemeral"}}]
    assert body["max_tokens"] == 99
    assert "tools" not in body


# --------------------------------------------------------------------------- the stream


def test_usage_maps_cache_tokens(tmp_path, server):
    server.enqueue(Reply(text_pieces=("ok",), usage=Usage(input_tokens=21, output_tokens=8, cache_read_tokens=1800, cache_write_tokens=300)))
    events = asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert events[-1].usage == Usage(input_tokens=21, output_tokens=8, cache_read_tokens=1800, cache_write_tokens=300)


def test_stop_reason_passes_through(tmp_path, server):
    server.enqueue(Reply(text_pieces=("cut",), stop_reason="max_tokens"))
    events = asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert events[-1].stop_reason == "max_tokens"


def test_error_event_overloaded_is_retryable_529(tmp_path, server):
    server.enqueue(Reply(text_pieces=("Part",), stream_error="overloaded"))
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert caught.value.retryable and caught.value.status == 529
    assert "overloaded_error" in str(caught.value)


def test_529_overloaded_status(tmp_path, server):
    server.enqueue(Reply(status=529, error_message="Overloaded"))
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    error = caught.value
    assert (error.retryable, error.status, error.provider) == (True, 529, "anthropic")
    assert str(error) == f"anthropic: HTTP 529 overloaded_error: Overloaded (POST {server.url}/v1/messages)"


def test_429_retry_after_as_http_date(tmp_path, server):
    server.enqueue(Reply(status=429, headers={"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}))
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert caught.value.retryable and caught.value.retry_after == 0.0  # a date in the past: retry now


def test_prompt_too_long_is_a_context_limit(tmp_path, server):
    server.enqueue(Reply(status=400, context_limit=True))
    with pytest.raises(ContextLimitError) as caught:
        asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert "prompt is too long" in str(caught.value)


def test_input_plus_max_tokens_over_the_window_is_a_context_limit(tmp_path, server):
    message = "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"
    server.enqueue(Reply(status=400, error_message=message))
    with pytest.raises(ContextLimitError) as caught:
        asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert "exceed context limit" in str(caught.value) and not caught.value.retryable


def test_401_names_the_key_variable(tmp_path, server):
    server.enqueue(Reply(status=401, error_message="invalid x-api-key"))
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(agent_for(tmp_path, server).provider(MODEL), contract_request()))
    assert not caught.value.retryable
    assert "ANTHROPIC_API_KEY" in str(caught.value) and "\n" not in str(caught.value)


def test_stream_ending_without_message_stop_is_retryable(tmp_path, server):
    class Truncated(AnthropicWireServer):
        def frames(self, reply):
            for frame in super().frames(reply):
                if b"message_stop" not in frame:
                    yield frame

    with Truncated() as truncated:
        truncated.enqueue(Reply(text_pieces=("half",)))
        runtime = agent_for(tmp_path, truncated).provider(MODEL)
        with pytest.raises(ProviderError) as caught:
            asyncio.run(collect(runtime, contract_request()))
    assert caught.value.retryable and "message_stop" in str(caught.value)


# --------------------------------------------------------------------------- whole turns


class Dictionary:
    """A tool plugin: ``lookup`` answers from a small dictionary."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    @hookimpl
    def register_tools(self, register):
        def lookup(context):
            self.calls.append(context.arguments)
            return {"café": "a coffee house"}.get(context.arguments["word"], "unknown")

        register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lookup)


def test_full_turn_streams_text_and_marks_only_the_stable_block(tmp_path, server):
    server.enqueue(Reply(text_pieces=("Hello", " from ", "Claude."), usage=Usage(30, 4, 1000, 0)))
    agent = agent_for(tmp_path, server, runtime={"session": {"mode": "per-message"}})  # history in the system prompt
    deltas: list[str] = []
    result = agent.run_sync("hi", on_event=lambda e: e.type == "text_delta" and deltas.append(e.data["text"]))
    assert result.text == "Hello from Claude."
    assert "".join(deltas) == "Hello from Claude."
    assert result.model == MODEL
    assert result.usage.cache_read_tokens == 1000
    body = server.last_request.json
    assert body["model"] == "claude-x"
    blocks = body["system"]
    assert [("cache_control" in block) for block in blocks] == [True, False]  # a first turn: only the runtime facts are dynamic
    assert "# Runtime facts" in blocks[1]["text"] and "# Runtime facts" not in blocks[0]["text"]
    assert BOUNDARY.encode() not in server.last_request.body
    assert body["messages"][-1]["role"] == "user"
    assert "hi" in body["messages"][-1]["content"][0]["text"]
    server.enqueue(Reply(text_pieces=("Again.",)))
    agent.run_sync("and again")  # the earlier exchange is now dynamic text: a second, unmarked block
    second = server.last_request.json["system"]
    assert [("cache_control" in block) for block in second] == [True, False]
    assert second[0]["text"] == blocks[0]["text"]  # the cached prefix stayed byte-identical
    assert "Hello from Claude." in second[1]["text"] and "Hello from Claude." not in second[0]["text"]
    assert BOUNDARY.encode() not in server.last_request.body


def test_tool_loop_end_to_end(tmp_path, server):
    tool = Dictionary()
    call = ScriptedToolCall("toolu_01A", "lookup", ('{"wo', 'rd": "ca', 'fé"}'))
    server.enqueue(
        Reply(text_pieces=("Let me look that up.",), tool_calls=(call,)),
        Reply(text_pieces=("It means ", "a coffee house.")),
    )
    agent = fresh_agent(
        tmp_path,
        config={"runtime": {"model": MODEL}, "providers": {"anthropic": {"baseUrl": server.url}}},
        env={"ANTHROPIC_API_KEY": "test-key"},
        plugins=[tool],
    )
    result = agent.run_sync("What does café mean?")
    assert result.text == "It means a coffee house."
    assert tool.calls == [{"word": "café"}]
    assert [a.call.name for a in result.tool_activity] == ["lookup"]
    first, second = (r.json for r in server.requests)
    assert "lookup" in [t["name"] for t in first["tools"]]
    assert LOOKUP.description not in json.dumps(first["system"])
    assistant, results = second["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"][-1] == {"type": "tool_use", "id": "toolu_01A", "name": "lookup", "input": {"word": "café"}}
    assert results["role"] == "user" and len(results["content"]) == 1
    assert results["content"][0]["type"] == "tool_result" and results["content"][0]["tool_use_id"] == "toolu_01A"
    assert "a coffee house" in results["content"][0]["content"]


def test_a_failed_tool_call_reaches_claude_with_is_error(tmp_path, server):
    class Tools:
        @hookimpl
        def register_tools(self, register):
            def lookup(context):
                if context.arguments["word"] == "boom":
                    raise LookupError("no entry for 'boom'")
                return "a coffee house"

            register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lookup)

    calls = (ScriptedToolCall("toolu_ok", "lookup", ('{"word": "café"}',)), ScriptedToolCall("toolu_bad", "lookup", ('{"word": "boom"}',)))
    server.enqueue(Reply(tool_calls=calls), Reply(text_pieces=("Done.",)))
    agent = fresh_agent(
        tmp_path,
        config={"runtime": {"model": MODEL}, "providers": {"anthropic": {"baseUrl": server.url}}},
        env={"ANTHROPIC_API_KEY": "test-key"},
        plugins=[Tools()],
    )
    agent.run_sync("Look both up.")
    ok, bad = server.requests[1].json["messages"][-1]["content"]
    assert ok == {"type": "tool_result", "tool_use_id": "toolu_ok", "content": "a coffee house"}  # no flag on a success
    assert bad["tool_use_id"] == "toolu_bad" and bad["is_error"] is True and "LookupError: no entry" in bad["content"]


# --------------------------------------------------------------------------- configuration errors


def test_missing_key_is_one_line_naming_the_variable(tmp_path, server):
    agent = fresh_agent(tmp_path, config={"runtime": {"model": MODEL}, "providers": {"anthropic": {"baseUrl": server.url}}})
    with pytest.raises(ProviderError) as caught:
        agent.run_sync("hi")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("anthropic: no API key") and "ANTHROPIC_API_KEY" in message and "providers.anthropic.apiKey" in message
    assert server.requests == []


def test_unreachable_server_is_one_line_naming_the_url(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    agent = fresh_agent(tmp_path, config={"runtime": {"model": MODEL}}, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url})
    with pytest.raises(ProviderError) as caught:
        agent.run_sync("hi")
    message = str(caught.value)
    assert "\n" not in message and not caught.value.retryable
    assert f"cannot reach {url}/v1/messages" in message
    assert "providers.anthropic.baseUrl (or ANTHROPIC_BASE_URL) points at it" in message


def test_plugin_import_stays_light():
    code = "import sys, monoagent_plugins.providers.anthropic, monoagent_plugins.providers.openai; print('httpx' in sys.modules, 'httpx_sse' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# --------------------------------------------------------------------------- the CLI


def _cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_"))}
    env.update({"MONO_AGENT_HOME": str(tmp_path / "home"), "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD": "1"}, **extra)
    return env


def _monoagent(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monoagent", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)


def test_cli_run_against_the_local_server(tmp_path, server):
    server.enqueue(Reply(text_pieces=("Streamed ", "over ", "SSE.")))
    env = _cli_env(tmp_path, ANTHROPIC_API_KEY="cli-key", ANTHROPIC_BASE_URL=server.url, MONO_AGENT_MODEL=MODEL)
    done = _monoagent("run", "hello", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Streamed over SSE."
    assert server.last_request.headers["x-api-key"] == "cli-key"


def test_cli_missing_key_is_one_line(tmp_path):
    done = _monoagent("run", "hello", env=_cli_env(tmp_path, MONO_AGENT_MODEL=MODEL), cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ANTHROPIC_API_KEY" in lines[0]


def test_cli_unreachable_server_is_one_line(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    env = _cli_env(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=url, MONO_AGENT_MODEL=MODEL)
    done = _monoagent("run", "hello", env=env, cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "ANTHROPIC_BASE_URL" in lines[0]


def test_consecutive_event_loops_each_get_a_working_client(tmp_path, server, recwarn):
    server.enqueue(Reply(text_pieces=("one",)), Reply(text_pieces=("two",)))
    agent = agent_for(tmp_path, server)
    assert agent.run_sync("first").text == "one"
    assert agent.run_sync("second").text == "two"
    import gc

    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


def test_finished_event_loops_are_not_kept_alive_by_the_shared_client(tmp_path, server):
    from monoagent_plugins.providers import http as provider_http

    agent = agent_for(tmp_path, server)
    for _ in range(3):
        server.enqueue(Reply(text_pieces=("ok",)))
        assert agent.run_sync("hi").text == "ok"
    import gc

    gc.collect()
    assert [loop for loop in provider_http._CLIENTS if loop.is_closed()] == []  # forgotten at each loop's shutdown


def test_config_show_never_prints_the_key(tmp_path):
    env = _cli_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-very-secret-value")
    done = _monoagent("config", "show", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sk-ant-very-secret-value" not in done.stdout
    assert 'providers.anthropic.apiKey = "<set, not shown>"  # env ANTHROPIC_API_KEY' in done.stdout


def test_read_timeout_is_retryable_and_closes_the_connection(tmp_path, server):
    server.enqueue(Reply(text_pieces=("slow",), stall_after=1))
    runtime = agent_for(tmp_path, server, providers={"anthropic": {"baseUrl": server.url, "timeoutSeconds": 0.2}}).provider(MODEL)
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(runtime, contract_request()))
    assert caught.value.retryable and caught.value.status is None
    assert "read timeout" in str(caught.value)
    assert server.disconnected.wait(10)


def test_steps_of_one_loop_reuse_the_connection(tmp_path, server):
    server.enqueue(Reply(text_pieces=("one",)), Reply(tool_calls=(ScriptedToolCall("t1", "lookup", ('{"word": "x"}',)),)), Reply(text_pieces=("three",)))
    runtime = agent_for(tmp_path, server).provider(MODEL)

    async def three_steps() -> None:
        for _ in range(3):
            await collect(runtime, contract_request())

    asyncio.run(three_steps())
    assert len({request.peer for request in server.requests}) == 1


@pytest.mark.parametrize(("choice", "wire"), [
    ("required", {"type": "any"}), ("lookup", {"type": "tool", "name": "lookup"}), ("none", None), (None, None),
])
def test_tool_choice_in_the_messages_wire(tmp_path, server, choice, wire):
    call = ScriptedToolCall("toolu_1", "lookup", ('{"word": "x"}',))
    server.enqueue(Reply(tool_calls=(call,)) if choice not in ("none",) else Reply(text_pieces=("plain",)),
                   Reply(text_pieces=("done",)))
    agent = fresh_agent(tmp_path, config={"runtime": {"model": MODEL}, "providers": {"anthropic": {"baseUrl": server.url}}},
                        env={"ANTHROPIC_API_KEY": "test-key"}, plugins=[Dictionary()])
    agent.run_sync(TurnRequest("x", tool_choice=choice))
    first = server.requests[0].json
    assert first.get("tool_choice") == wire
    assert ("tools" in first) == (choice != "none")  # "none" offers no tool at all
