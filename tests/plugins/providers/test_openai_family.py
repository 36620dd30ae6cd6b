"""openai, ollama, lmstudio and openai-compatible against a local Chat Completions stream."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys

import pytest

from monoagent import TurnRequest, hookimpl
from monoagent._kernel.errors import ContextLimitError, ProviderError
from monoagent._kernel.model import Message, ToolCall, ToolSpec, Usage
from monoagent._pipeline.assembly import BOUNDARY
from monoagent.testing import OpenAIWireServer, fresh_agent
from monoagent.testing.provider_contract import LOOKUP, Reply, ScriptedToolCall, collect, contract_request
from monoagent_plugins.providers.http import parse_retry_after
from monoagent_plugins.providers.openai_wire import TOOL_ERROR_PREFIX


@pytest.fixture
def server():
    with OpenAIWireServer() as server:
        yield server


def openai_agent(tmp_path, server, **openai):
    return fresh_agent(
        tmp_path,
        config={"runtime": {"model": "openai:gpt-x"}, "providers": {"openai": {"baseUrl": f"{server.url}/v1", **openai}}},
        env={"OPENAI_API_KEY": "sk-test"},
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- the request


def test_openai_request_json_is_exact(tmp_path, server):
    server.enqueue(Reply(text_pieces=("ok",)))
    runtime = openai_agent(tmp_path, server, maxOutputTokens=256).provider("openai:gpt-x")
    messages = [
        Message("user", "What does café mean?"),
        Message("assistant", "", tool_calls=[ToolCall("call_1", "lookup", {"word": "café"})]),
        Message("tool", "a coffee house", name="lookup", tool_call_id="call_1"),
    ]
    request = contract_request(messages, [LOOKUP], model="gpt-x")
    asyncio.run(collect(runtime, request))
    sent = server.last_request
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json == {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": f"{request.prompt.stable_text}\n\n{request.prompt.dynamic_text}"},
            {"role": "user", "content": "What does café mean?"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "café"}'}}],
            },
            {"role": "tool", "content": "a coffee house", "tool_call_id": "call_1"},
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "description": LOOKUP.description, "parameters": LOOKUP.input_schema}}],
        "max_completion_tokens": 256,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert BOUNDARY.encode() not in sent.body


def test_ollama_host_without_scheme_and_no_key(tmp_path, server):
    server.enqueue(Reply(text_pieces=("hi",)))
    host = server.url.removeprefix("http://")
    agent = fresh_agent(tmp_path, config={"providers": {"ollama": {"maxOutputTokens": 64}}}, env={"OLLAMA_HOST": host})
    runtime = agent.provider("ollama:llama3.2")
    asyncio.run(collect(runtime, contract_request(model="llama3.2")))
    sent = server.last_request
    assert sent.path == "/v1/chat/completions"
    assert "authorization" not in sent.headers
    assert sent.json["max_tokens"] == 64 and "max_completion_tokens" not in sent.json


def test_documented_default_endpoints(tmp_path):
    agent = fresh_agent(tmp_path, env={"MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:8000/v1/", "OPENAI_API_KEY": "k"})
    assert agent.provider("ollama:m").endpoint.url == "http://127.0.0.1:11434/v1/chat/completions"
    assert agent.provider("lmstudio:m").endpoint.url == "http://127.0.0.1:1234/v1/chat/completions"
    assert agent.provider("openai:m").endpoint.url == "https://api.openai.com/v1/chat/completions"
    assert agent.provider("openai-compatible:m").endpoint.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert agent.provider("openai-compatible:m").endpoint.headers == {}
    listen_all = fresh_agent(tmp_path, env={"OLLAMA_HOST": "0.0.0.0:11434"})
    assert listen_all.provider("ollama:m").endpoint.url == "http://127.0.0.1:11434/v1/chat/completions"


def test_ollama_host_without_a_port_uses_11434_as_ollama_does(tmp_path):
    for host, url in [
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("localhost", "http://localhost:11434"),
        ("gpu-box.local/", "http://gpu-box.local:11434"),
        ("[::1]", "http://[::1]:11434"),
        ("http://gpu-box.local", "http://gpu-box.local"),  # a scheme: its own default port, as in ollama
        ("", "http://127.0.0.1:11434"),
    ]:
        agent = fresh_agent(tmp_path, config={"providers": {"ollama": {"host": host}}})
        assert agent.provider("ollama:m").endpoint.url == f"{url}/v1/chat/completions", host


def test_openai_compatible_optional_key(tmp_path, server):
    server.enqueue(Reply(text_pieces=("hi",)))
    env = {"MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL": f"{server.url}/v1", "MONO_AGENT_OPENAI_COMPATIBLE_API_KEY": "vllm-key"}
    runtime = fresh_agent(tmp_path, env=env).provider("openai-compatible:qwen")
    asyncio.run(collect(runtime, contract_request()))
    assert server.last_request.headers["authorization"] == "Bearer vllm-key"


# --------------------------------------------------------------------------- the stream


def test_parallel_tool_calls_that_all_say_index_0_stay_apart(tmp_path):
    class OllamaParallel(OpenAIWireServer):
        """Ollama's stream of a parallel set: one chunk per call, every one with ``index: 0``."""

        def frames(self, reply):
            for call in reply.tool_calls:
                piece = {"id": call.id, "index": 0, "type": "function", "function": {"name": call.name, "arguments": "".join(call.argument_pieces)}}
                yield self.chunk(reply, [{"index": 0, "delta": {"role": "assistant", "content": "", "tool_calls": [piece]}, "finish_reason": None}])
            yield self.chunk(reply, [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": "tool_calls"}])
            yield b"data: [DONE]\n\n"

    calls = (ScriptedToolCall("call_a1", "lookup", ('{"word": "a"}',)), ScriptedToolCall("call_b2", "lookup", ('{"word": "b"}',)))
    with OllamaParallel() as server:
        server.enqueue(Reply(tool_calls=calls))
        runtime = fresh_agent(tmp_path, env={"OLLAMA_HOST": server.url}).provider("ollama:qwen2.5-coder")
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
    got = [(e.call.id, e.call.arguments) for e in events if hasattr(e, "call")]
    assert got == [("call_a1", {"word": "a"}), ("call_b2", {"word": "b"})]
    assert events[-1].stop_reason == "tool_use"


def test_tool_call_pieces_without_an_index_are_separate_calls(tmp_path):
    class NoIndex(OpenAIWireServer):
        def frames(self, reply):
            pieces = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "".join(c.argument_pieces)}} for c in reply.tool_calls]
            yield self.chunk(reply, [{"index": 0, "delta": {"tool_calls": pieces}, "finish_reason": "tool_calls"}])
            yield b"data: [DONE]\n\n"

    calls = (ScriptedToolCall("x1", "lookup", ('{"word": "a"}',)), ScriptedToolCall("x2", "lookup", ('{"word": "b"}',)))
    with NoIndex() as server:
        server.enqueue(Reply(tool_calls=calls))
        runtime = fresh_agent(tmp_path, env={"OLLAMA_HOST": server.url}).provider("ollama:m")
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
    assert [(e.call.id, e.call.arguments) for e in events if hasattr(e, "call")] == [("x1", {"word": "a"}), ("x2", {"word": "b"})]


def test_usage_with_cached_tokens(tmp_path, server):
    server.enqueue(Reply(text_pieces=("ok",), usage=Usage(input_tokens=40, output_tokens=9, cache_read_tokens=1024)))
    events = asyncio.run(collect(openai_agent(tmp_path, server).provider("openai:gpt-x"), contract_request()))
    assert events[-1].usage == Usage(input_tokens=40, output_tokens=9, cache_read_tokens=1024)
    assert b'"prompt_tokens":1064' in b"".join(server.frames(Reply(usage=Usage(40, 9, 1024))))  # what the wire said


def test_finish_reason_length_maps_to_max_tokens(tmp_path, server):
    server.enqueue(Reply(text_pieces=("cut",), stop_reason="max_tokens"))
    events = asyncio.run(collect(openai_agent(tmp_path, server).provider("openai:gpt-x"), contract_request()))
    assert events[-1].stop_reason == "max_tokens"


def test_context_length_exceeded(tmp_path, server):
    server.enqueue(Reply(status=400, context_limit=True))
    with pytest.raises(ContextLimitError) as caught:
        asyncio.run(collect(openai_agent(tmp_path, server).provider("openai:gpt-x"), contract_request()))
    assert "context_length_exceeded" in str(caught.value) or "maximum context length" in str(caught.value)


def test_missing_done_after_truncation_is_retryable(tmp_path):
    class Truncated(OpenAIWireServer):
        def frames(self, reply):
            for frame in super().frames(reply):
                if b"finish_reason\":\"stop" in frame:
                    return
                yield frame

    with Truncated() as server:
        server.enqueue(Reply(text_pieces=("half",)))
        with pytest.raises(ProviderError) as caught:
            asyncio.run(collect(openai_agent(tmp_path, server).provider("openai:gpt-x"), contract_request()))
    assert caught.value.retryable and "[DONE]" in str(caught.value)


def test_retry_after_forms():
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert parse_retry_after({"retry-after": "Thu, 01 Jan 2026 00:00:10 GMT"}, now=1767225600.0) == 10.0
    assert parse_retry_after({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}) == 360.0
    assert parse_retry_after({"x-ratelimit-reset-tokens": "20ms"}) == 0.02
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_retry_after_that_is_not_finite_is_ignored():
    assert parse_retry_after({"retry-after": "inf"}) is None
    assert parse_retry_after({"retry-after": "1e400"}) is None
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after-ms": "inf", "retry-after": "2"}) == 2.0


def test_rate_limit_reset_headers_are_no_retry_hint_for_a_server_error(tmp_path, server):
    headers = {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}
    server.enqueue(Reply(status=503, headers=headers, error_message="The server is overloaded"))
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(openai_agent(tmp_path, server).provider("openai:gpt-x"), contract_request()))
    assert caught.value.retryable and caught.value.status == 503
    assert caught.value.retry_after is None  # the backoff decides, not the token window's refill time


def test_429_reports_openai_reset_headers(tmp_path, server):
    server.enqueue(Reply(status=429, headers={"x-ratelimit-reset-requests": "2s"}, error_message="Rate limit reached"))
    with pytest.raises(ProviderError) as caught:
        asyncio.run(collect(openai_agent(tmp_path, server).provider("openai:gpt-x"), contract_request()))
    assert caught.value.retry_after == 2.0 and caught.value.retryable
    assert "rate_limit_exceeded" in str(caught.value)


# --------------------------------------------------------------------------- whole turns


class Dictionary:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    @hookimpl
    def register_tools(self, register):
        def lookup(context):
            self.calls.append(context.arguments)
            return "a coffee house"

        register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lookup)


@pytest.mark.parametrize("prefix", ["openai", "ollama", "lmstudio", "openai-compatible"])
def test_tool_loop_end_to_end(tmp_path, server, prefix):
    tool = Dictionary()
    call = ScriptedToolCall("call_Xy", "lookup", ('{"word"', ': "café"', "}"))
    server.enqueue(Reply(tool_calls=(call,)), Reply(text_pieces=("It means ", "a coffee house.")))
    config = {
        "openai": {"providers": {"openai": {"baseUrl": f"{server.url}/v1"}}},
        "ollama": {"providers": {"ollama": {"host": server.url}}},
        "lmstudio": {"providers": {"lmstudio": {"baseUrl": f"{server.url}/v1"}}},
        "openai-compatible": {"providers": {"openaiCompatible": {"baseUrl": f"{server.url}/v1"}}},
    }[prefix]
    config["runtime"] = {"model": f"{prefix}:model-x"}
    agent = fresh_agent(tmp_path, config=config, env={"OPENAI_API_KEY": "sk-test"}, plugins=[tool])
    deltas: list[str] = []
    result = agent.run_sync("What does café mean?", on_event=lambda e: e.type == "text_delta" and deltas.append(e.data["text"]))
    assert result.text == "It means a coffee house." == "".join(deltas)
    assert result.model == f"{prefix}:model-x"
    assert tool.calls == [{"word": "café"}]
    first, second = (r.json for r in server.requests)
    assert "lookup" in [t["function"]["name"] for t in first["tools"]]
    assert LOOKUP.description not in first["messages"][0]["content"]
    assistant, answer = second["messages"][-2:]
    assert assistant["tool_calls"] == [{"id": "call_Xy", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "café"}'}}]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_Xy" and "a coffee house" in answer["content"]


def test_a_failed_tool_call_says_so_in_the_openai_tool_message(tmp_path, server):
    class Tools:
        @hookimpl
        def register_tools(self, register):
            def lookup(context):
                if context.arguments["word"] == "boom":
                    raise LookupError("no entry for 'boom'")
                return "a coffee house"

            register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lookup)

    calls = (ScriptedToolCall("call_ok", "lookup", ('{"word": "café"}',)), ScriptedToolCall("call_bad", "lookup", ('{"word": "boom"}',)))
    server.enqueue(Reply(tool_calls=calls), Reply(text_pieces=("Done.",)))
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "openai:gpt-x"}, "providers": {"openai": {"baseUrl": f"{server.url}/v1"}}},
                        env={"OPENAI_API_KEY": "sk-test"}, plugins=[Tools()])
    agent.run_sync("Look both up.")
    ok, bad = server.requests[1].json["messages"][-2:]
    assert ok == {"role": "tool", "content": "a coffee house", "tool_call_id": "call_ok"}
    assert bad["tool_call_id"] == "call_bad" and bad["content"].startswith(TOOL_ERROR_PREFIX + "Tool 'lookup' failed: LookupError")


# --------------------------------------------------------------------------- configuration errors


def test_openai_missing_key_is_one_line(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "openai:gpt-x"}})
    with pytest.raises(ProviderError) as caught:
        agent.run_sync("hi")
    assert "\n" not in str(caught.value) and "OPENAI_API_KEY" in str(caught.value)


def test_openai_compatible_without_base_url_is_one_line(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "openai-compatible:qwen"}})
    with pytest.raises(ProviderError) as caught:
        agent.run_sync("hi")
    message = str(caught.value)
    assert "\n" not in message and "MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL" in message and "providers.openaiCompatible.baseUrl" in message


def test_unreachable_ollama_names_the_url_and_variable(tmp_path):
    host = f"127.0.0.1:{closed_port()}"
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "ollama:llama3.2"}}, env={"OLLAMA_HOST": host})
    with pytest.raises(ProviderError) as caught:
        agent.run_sync("hi")
    message = str(caught.value)
    assert "\n" not in message
    assert f"cannot reach http://{host}/v1/chat/completions" in message and "OLLAMA_HOST" in message


def test_cli_run_with_openai(tmp_path, server):
    server.enqueue(Reply(text_pieces=("Chat ", "completions."), usage=Usage(5, 2)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_"))}
    env.update(
        MONO_AGENT_HOME=str(tmp_path / "home"),
        MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1",
        MONO_AGENT_MODEL="openai:gpt-x",
        OPENAI_API_KEY="sk-cli",
        OPENAI_BASE_URL=f"{server.url}/v1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "monoagent", "run", "--json", "hello"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["text"] == "Chat completions."
    assert result["model"] == "openai:gpt-x"
    assert server.last_request.headers["authorization"] == "Bearer sk-cli"


def test_steps_of_one_loop_reuse_the_connection(tmp_path, server):
    server.enqueue(Reply(text_pieces=("one",)), Reply(text_pieces=("two",)))
    runtime = openai_agent(tmp_path, server).provider("openai:gpt-x")

    async def two_steps() -> None:
        for _ in range(2):
            await collect(runtime, contract_request())

    asyncio.run(two_steps())
    assert len({request.peer for request in server.requests}) == 1


@pytest.mark.parametrize(("choice", "wire"), [
    ("required", "required"), ("lookup", {"type": "function", "function": {"name": "lookup"}}), ("auto", None), (None, None),
])
def test_tool_choice_goes_on_the_first_request_only(tmp_path, server, choice, wire):
    tool = Dictionary()
    call = ScriptedToolCall("call_1", "lookup", ('{"word": "x"}',))
    server.enqueue(Reply(tool_calls=(call,)), Reply(text_pieces=("done",)))
    agent = fresh_agent(tmp_path, config={"runtime": {"model": "openai:model-x"},
                                          "providers": {"openai": {"baseUrl": f"{server.url}/v1"}}},
                        env={"OPENAI_API_KEY": "sk-test"}, plugins=[tool])
    agent.run_sync(TurnRequest("x", tool_choice=choice))
    first, second = (r.json for r in server.requests)
    assert first.get("tool_choice") == wire
    assert "tool_choice" not in second  # the forced call was made: the model decides again
