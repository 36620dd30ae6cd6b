"""The provider conformance suite (monoagent.testing.ProviderContract) against every bundled provider,
and whole turns over HTTP: retries, fallback, the maxTurns cap, the bloat guard on the wire, cancellation."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import pytest

from monoagent import hookimpl
from monoagent._boundary.fences import TOOL_OUTPUT_BEGIN as BEGIN_MARKER
from monoagent._boundary.fences import TOOL_OUTPUT_END as END_MARKER
from monoagent._boundary.text import utf8_len
from monoagent._kernel.errors import TurnFailed
from monoagent._kernel.model import ToolSpec
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline import provider_call as reliability
from monoagent._pipeline.bloat import LIMIT_BYTES
from monoagent.testing import (
    AnthropicWireServer,
    LocalServerWire,
    OpenAIWireServer,
    ProviderContract,
    SentRequest,
    WholeCallsWire,
    fresh_agent,
)
from monoagent.testing.provider_contract import LOOKUP, Reply, ScriptedToolCall
from monoagent_plugins.providers import openai_wire


def _tool_names_anthropic(body: Any) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def _tool_names_openai(body: Any) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", []) if tool.get("type") == "function"]


def _blocks(body: Any, role: str, kind: str) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if m["role"] == role and isinstance(m["content"], list) for b in m["content"] if b["type"] == kind]


def _openai_tool_results(body: Any) -> list[tuple[str, str, bool]]:
    prefix = openai_wire.TOOL_ERROR_PREFIX
    return [
        (m["tool_call_id"], m["content"].removeprefix(prefix), m["content"].startswith(prefix))
        for m in body["messages"]
        if m["role"] == "tool"
    ]


class TestAnthropicContract(ProviderContract):
    @pytest.fixture
    def provider_server(self):
        with AnthropicWireServer() as server:
            yield server

    @pytest.fixture
    def runtime(self, provider_server, tmp_path):
        agent = fresh_agent(
            tmp_path,
            config={"runtime": {"model": "anthropic:model-x"}, "providers": {"anthropic": {"baseUrl": provider_server.url}}},
            env={"ANTHROPIC_API_KEY": "test-key"},
        )
        return agent.provider("anthropic:model-x")

    credential = "test-key"
    read_on_events = 16
    configured_output_cap = 4096
    request_path = "/v1/messages"
    credential_headers: ClassVar[dict[str, str]] = {"x-api-key": "test-key"}
    key_names = ("ANTHROPIC_API_KEY",)
    url_names = ("providers.anthropic.baseUrl", "ANTHROPIC_BASE_URL")
    context_window = 200_000
    field_paths: ClassVar[dict[str, str]] = {
        "text": "delta.text", "tool_id": "content_block.id", "tool_name": "content_block.name", "tool_arguments": "delta.partial_json",
    }

    def sent_tool_names(self, body):
        return _tool_names_anthropic(body)

    def sent_tool_calls(self, body):
        return [(b["id"], b["name"], b["input"]) for b in _blocks(body, "assistant", "tool_use")]

    def sent_tool_results(self, body):
        return [(b["tool_use_id"], b["content"], b.get("is_error", False)) for b in _blocks(body, "user", "tool_result")]

    def sent_request(self, body):
        system = "\n\n".join(block["text"] for block in body["system"]) if body.get("system") else None
        return SentRequest(body.get("model"), body.get("stream") is True, body.get("max_tokens"), system)

    def sent_assistant_messages(self, body):
        return [
            (
                "".join(b["text"] for b in m["content"] if b["type"] == "text"),
                [(b["id"], b["name"], b["input"]) for b in m["content"] if b["type"] == "tool_use"],
            )
            for m in body["messages"]
            if m["role"] == "assistant"
        ]


class _OpenAIFamily(ProviderContract):
    reports_cache_writes = False
    context_limit_messages = tuple(openai_wire.CONTEXT_LIMIT_PHRASES)
    field_paths: ClassVar[dict[str, str]] = {
        "text": "choices[0].delta.content",
        "tool_id": "choices[0].delta.tool_calls[0].id",
        "tool_name": "choices[0].delta.tool_calls[0].function.name",
        "tool_arguments": "choices[0].delta.tool_calls[0].function.arguments",
    }
    prefix = ""
    config: ClassVar[dict[str, dict[str, Any]]] = {}
    env: ClassVar[dict[str, str]] = {}
    read_on_events = 16
    generates_missing_ids = True
    carries_refusals = True
    malformed_events: ClassVar[dict[str, bytes]] = {
        says: b"data: " + json.dumps(chunk).encode() + b"\n\n"
        for says, chunk in {
            "choices is an object": {"choices": {}},
            "choices[0] is not an object": {"choices": [5]},
            "choices[0].delta is a string": {"choices": [{"index": 0, "delta": "hi"}]},
            "choices[0].finish_reason is a number": {"choices": [{"index": 0, "delta": {}, "finish_reason": 7}]},
            "choices[0].delta.tool_calls is an object": {"choices": [{"index": 0, "delta": {"tool_calls": {}}}]},
            "choices[0].delta.tool_calls[0] is not an object": {"choices": [{"index": 0, "delta": {"tool_calls": [5]}}]},
            "choices[0].delta.tool_calls[0].index is a string": {
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0", "id": "c", "function": {"name": "lookup"}}]}}]
            },
            "choices[0].delta.tool_calls[0].function is a string": {
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": "lookup"}]}}]
            },
        }.items()
    }
    detail_less_error_events = (b'data: {"error": true}\n\n', b'data: {"error": {"code": 500}}\n\n')
    output_cap_field = "max_tokens"  # the field each provider documents for maxOutputTokens
    request_path = "/v1/chat/completions"
    context_limit_bodies = (  # a code or type decides, whatever the message says (docs/providers.md#errors)
        json.dumps({"error": {"message": "Please shorten the messages.", "type": "invalid_request_error", "param": "messages",
                              "code": "context_length_exceeded"}}).encode(),
        json.dumps({"error": {"code": 400, "message": "the request does not fit: 9000 tokens, n_ctx 8192",
                              "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 8192}}).encode(),
    )

    @pytest.fixture
    def provider_server(self):
        with OpenAIWireServer() as server:
            yield server

    @pytest.fixture
    def runtime(self, provider_server, tmp_path):
        url = provider_server.url

        def at(value: Any) -> Any:
            return value.format(url=url) if isinstance(value, str) else value

        config = {"providers": {key: {field: at(value) for field, value in fields.items()} for key, fields in self.config.items()}}
        env = {name: value.format(url=url) for name, value in self.env.items()}
        agent = fresh_agent(tmp_path, config=config, env=env)
        return agent.provider(f"{self.prefix}:model-x")

    def sent_tool_names(self, body):
        return _tool_names_openai(body)

    def sent_tool_calls(self, body):
        calls = [c for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
        assert all(c["type"] == "function" for c in calls), calls
        return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]

    def sent_tool_results(self, body):
        return _openai_tool_results(body)

    def sent_request(self, body):
        other = {"max_tokens", "max_completion_tokens"} - {self.output_cap_field}
        assert not other & body.keys(), f"the cap travels in {self.output_cap_field} alone: {sorted(body)}"
        first = body["messages"][0] if body.get("messages") else {}
        streamed = body.get("stream") is True and body.get("stream_options") == {"include_usage": True}  # no usage without it
        system = first.get("content") if first.get("role") == "system" else None
        return SentRequest(body.get("model"), streamed, body.get(self.output_cap_field), system)

    def sent_assistant_messages(self, body):
        sent = []
        for m in body["messages"]:
            if m["role"] == "assistant":
                assert m.get("tool_calls", True), "an assistant message without calls sends no tool_calls (the API refuses [])"
                calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or ()]
                sent.append((m.get("content") or "", calls))
        return sent


class TestOpenAIContract(_OpenAIFamily):
    prefix = "openai"
    credential = "sk-test"
    output_cap_field = "max_completion_tokens"
    credential_headers: ClassVar[dict[str, str]] = {"authorization": "Bearer sk-test"}
    key_names = ("OPENAI_API_KEY",)
    url_names = ("providers.openai.baseUrl", "OPENAI_BASE_URL")
    context_window = 128_000
    config: ClassVar[dict[str, dict[str, Any]]] = {"openai": {"baseUrl": "{url}/v1"}}
    env: ClassVar[dict[str, str]] = {"OPENAI_API_KEY": "sk-test"}


class TestOllamaContract(_OpenAIFamily):
    prefix = "ollama"
    env: ClassVar[dict[str, str]] = {"OLLAMA_HOST": "{url}"}
    url_names = ("providers.ollama.host", "OLLAMA_HOST")


class TestLMStudioContract(_OpenAIFamily):
    prefix = "lmstudio"
    config: ClassVar[dict[str, dict[str, Any]]] = {"lmstudio": {"baseUrl": "{url}/v1"}}
    url_names = ("providers.lmstudio.baseUrl", "MONO_AGENT_LMSTUDIO_BASE_URL")


class TestOpenAICompatibleContract(_OpenAIFamily):
    """Configured off its defaults (a key, a short read timeout, a 1 MiB event cap, an output cap,
    a context window), so the contract proves each setting reaches the runtime."""

    prefix = "openai-compatible"
    credential = "sk-compatible-key"
    credential_headers: ClassVar[dict[str, str]] = {"authorization": "Bearer sk-compatible-key"}
    key_names = ("MONO_AGENT_OPENAI_COMPATIBLE_API_KEY", "providers.openaiCompatible.apiKey")
    url_names = ("providers.openaiCompatible.baseUrl", "MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL")
    read_timeout_seconds = 3.0
    max_event_bytes = 1024 * 1024
    configured_output_cap = 777
    context_window = 16_384
    env: ClassVar[dict[str, str]] = {"MONO_AGENT_OPENAI_COMPATIBLE_BASE_URL": "{url}/v1/"}
    config: ClassVar[dict[str, dict[str, Any]]] = {
        "openaiCompatible": {"apiKey": "sk-compatible-key", "timeoutSeconds": 3.0, "maxOutputTokens": 777, "contextWindow": 16_384},
        "client": {"maxStreamEventBytes": 1024 * 1024},
    }


class TestOpenAICompatibleLocalServerContract(TestOpenAICompatibleContract):
    """The same contract against a server with local servers' quirks (``LocalServerWire``)."""

    generates_missing_ids = False  # every call at index 0: only its id tells it apart

    @pytest.fixture
    def provider_server(self):
        with LocalServerWire() as server:
            yield server


class TestOpenAICompatibleWholeCallsContract(TestOpenAICompatibleContract):
    """The same contract against a server that sends each tool call whole, without ``index`` (Ollama before 0.4.7)."""

    read_on_events = None  # no final event to read on after
    credential = None  # configured without a key: no authorization header at all
    credential_headers: ClassVar[dict[str, str | None]] = {"authorization": None}
    config: ClassVar[dict[str, dict[str, Any]]] = {
        "openaiCompatible": {"timeoutSeconds": 3.0, "maxOutputTokens": 777, "contextWindow": 16_384},
        "client": {"maxStreamEventBytes": 1024 * 1024},
    }

    @pytest.fixture
    def provider_server(self):
        with WholeCallsWire() as server:
            yield server


# ============================================================================ whole turns over HTTP
# The harness's reliability rules (tests/test_reliability.py) against the real runtimes and a
# local server speaking their wire format: retries, fallback, the maxTurns cap, the bloat guard
# on the wire and cancelling a turn mid-stream.

WIRE = {
    "anthropic": (AnthropicWireServer, lambda url: {"anthropic": {"baseUrl": url}}, {"ANTHROPIC_API_KEY": "k"}),
    "openai": (OpenAIWireServer, lambda url: {"openai": {"baseUrl": f"{url}/v1"}}, {"OPENAI_API_KEY": "k"}),
    "ollama": (OpenAIWireServer, lambda url: {"ollama": {"host": url}}, {}),
}


@pytest.fixture
def delays(monkeypatch):
    waited: list[float] = []

    async def fake_sleep(seconds):
        waited.append(seconds)

    monkeypatch.setattr(reliability, "sleep", fake_sleep)
    monkeypatch.setattr(reliability, "jitter", lambda: 0.5)
    return waited


class Dump:
    """A tool plugin: ``lookup`` returns ``self.output``."""

    def __init__(self, output: str = "a coffee house") -> None:
        self.output = output
        self.calls = 0

    @hookimpl
    def register_tools(self, register):
        def lookup(context):
            self.calls += 1
            return self.output

        register(ToolSpec("lookup", LOOKUP.description, LOOKUP.input_schema), lookup)


def _turn_agent(tmp_path, prefix, server, *, runtime=None, plugins=(), providers=None, extra_env=None):
    _, section, env = WIRE[prefix]
    config: ClassVar[dict[str, dict[str, str]]] = {"runtime": {"model": f"{prefix}:model-x", **(runtime or {})}, "providers": {**section(server.url), **(providers or {})}}
    return fresh_agent(tmp_path, config=config, env={**env, **(extra_env or {})}, plugins=list(plugins))


def _tool_result_text(prefix, body) -> str:
    last = body["messages"][-1]
    if prefix == "anthropic":
        return last["content"][0]["content"]
    return last["content"]


@pytest.mark.parametrize("prefix", sorted(WIRE))
def test_turn_retries_429_and_overload_then_answers(tmp_path, prefix, delays):
    server_class = WIRE[prefix][0]
    with server_class() as server:
        server.enqueue(
            Reply(status=429, headers={"retry-after": "2"}, error_message="rate limited"),
            Reply(text_pieces=("Part",), stream_error="overloaded"),
            Reply(text_pieces=("Whole ", "answer.")),
        )
        events: list = []
        result = _turn_agent(tmp_path, prefix, server).run_sync("hi", on_event=events.append)
    assert result.text == "Whole answer." and result.attempt == 3 and result.model == f"{prefix}:model-x"
    assert delays == [2.0, 1.0]  # Retry-After as given, then the 2 s ceiling with jitter 0.5
    overload = "http_529" if prefix == "anthropic" else "provider_unavailable"  # Anthropic's overloaded_error is its 529
    assert [e.data["code"] for e in events if e.type == "provider_retry"] == ["http_429", overload]
    assert [e.data["text_chars"] for e in events if e.type == "provider_attempt_discarded"] == [4]
    assert len(server.requests) == 3


def test_fallback_from_one_provider_to_another_over_http(tmp_path, delays):
    with AnthropicWireServer() as primary, OpenAIWireServer() as backup:
        primary.enqueue(*[Reply(status=500, error_message="internal") for _ in range(3)])
        backup.enqueue(Reply(text_pieces=("From ", "the backup.")))
        agent = fresh_agent(
            tmp_path,
            config={
                "runtime": {"model": "anthropic:claude-x", "fallbacks": ["openai:gpt-x"]},
                "providers": {"anthropic": {"baseUrl": primary.url}, "openai": {"baseUrl": f"{backup.url}/v1"}},
            },
            env={"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"},
        )
        events: list = []
        result = agent.run_sync("hi", on_event=events.append)
    assert result.text == "From the backup." and result.model == "openai:gpt-x" and result.attempt == 4
    assert len(primary.requests) == 3 and len(backup.requests) == 1
    assert [e.data for e in events if e.type == "provider_fallback"] == [
        {"from": "anthropic:claude-x", "to": "openai:gpt-x", "reason": "retries_exhausted", "attempt": 4}
    ]
    assert backup.last_request.json["model"] == "gpt-x"


@pytest.mark.parametrize("prefix", sorted(WIRE))
def test_max_turns_caps_the_tool_loop_over_http(tmp_path, prefix):
    tool = Dump()
    with WIRE[prefix][0]() as server:
        call = ScriptedToolCall("call_1", "lookup", ('{"word": "x"}',))
        server.enqueue(Reply(tool_calls=(call,)), Reply(tool_calls=(call,)), Reply(text_pieces=("never",)))
        agent = _turn_agent(tmp_path, prefix, server, runtime={"maxTurns": 2}, plugins=[tool])
        with pytest.raises(TurnFailed, match=r"runtime.maxTurns = 2"):
            agent.run_sync("loop")
    assert len(server.requests) == 2


@pytest.mark.parametrize("prefix", sorted(WIRE))
def test_bloat_guard_on_the_wire_at_the_utf8_boundary(tmp_path, prefix):
    exact = "a" * (LIMIT_BYTES - 4) + "🎉"  # 262,144 bytes: passes unchanged
    over = "é" * (LIMIT_BYTES // 2) + "!"  # 262,145 bytes of 2-byte characters: guarded
    for name, output in (("exact", exact), ("over", over)):
        tool = Dump(output)
        with WIRE[prefix][0]() as server:
            server.enqueue(Reply(tool_calls=(ScriptedToolCall("call_1", "lookup", ('{"word": "x"}',)),)), Reply(text_pieces=("ok",)))
            agent = _turn_agent(tmp_path / name, prefix, server, plugins=[tool])
            assert agent.run_sync("dump").text == "ok"
            sent = _tool_result_text(prefix, server.requests[1].json)
        if name == "exact":
            assert sent == exact
        else:
            assert utf8_len(sent) <= LIMIT_BYTES and sent.count(BEGIN_MARKER) == 1 and sent.endswith(END_MARKER)
            body = sent.split(BEGIN_MARKER + "\n", 1)[1]
            assert body.startswith("éé") and "bytes omitted" in body and "\ufffd" not in sent


@pytest.mark.parametrize("prefix", sorted(WIRE))
def test_cancelling_a_turn_mid_stream_over_http(tmp_path, prefix):
    with WIRE[prefix][0]() as server:
        server.enqueue(Reply(text_pieces=("Partial ", "never sent"), stall_after=1))
        agent = _turn_agent(tmp_path, prefix, server)
        events: list = []

        async def scenario() -> None:
            first = asyncio.Event()

            def on_event(event):
                events.append(event)
                if event.type == "text_delta":
                    first.set()

            task = asyncio.create_task(agent.respond(TurnRequest("go", conversation_id="c"), on_event=on_event))
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        assert server.disconnected.wait(10), "the server never saw the client go away"
    cancelled = [e.data for e in events if e.type == "run_cancelled"]
    assert cancelled and cancelled[0]["partial_text_bytes"] == len("Partial ")
