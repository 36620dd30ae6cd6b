"""A hostile or broken provider (issue 8, items 7 and 8), against real HTTP servers on 127.0.0.1.

Item 7: no type or size checks on provider events. Each finding of the review is a test here:
an endless text stream, endless pings and keep-alives, one giant SSE line (and one giant event
made of many lines), a giant error body, a compression bomb, wrong JSON types at every field
the parsers read, deep nesting, lone surrogates; then hypothesis-generated malformed events
over the wire and through the parsers alone. The same bounds hold in the harness for a
third-party runtime that never touches HTTP. Every case ends the turn with a one-line
``ProviderError`` carrying a ``code`` (never another exception type), that the retry/fallback
chain sees, that ``run_failed`` and the continuity account record, and memory stays bounded
(``tracemalloc`` peak while the turn runs).

Item 8: with ``runtime.maxTurns = 0`` a model that always calls a tool ends by the run deadline
(``runtime.runTimeoutMs``) or the repeated-identical-call guard (``runtime.maxRepeatedToolCalls``)
with a settlement code, both with ``offline:scripted`` and with a wire server that always
answers with a tool call.

Timers are short configured timeouts against streams that never end, so they cannot pass by
luck, and no test sleeps.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import sys
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the vendor wire servers
from monoagent import hookimpl
from monoagent._kernel.errors import ProviderError, RepeatedToolCall, RunDeadlineExceeded
from monoagent._kernel.model import (
    StepFinished,
    StreamProgress,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    ToolSpec,
    Usage,
)
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import AnthropicWireServer, OpenAIWireServer, fresh_agent, scripted_agent
from monoagent.testing.provider_contract import Reply, ScriptedToolCall, WireServer, collect, contract_request

MiB = 1024 * 1024
PROVIDERS = ("anthropic", "openai")


# =========================================================================== servers and agents


class HostileServer(WireServer):
    """Answers every request with ``script(n)`` (n = 0, 1, ...): ``(status, headers, frames)``.

    Frames are bytes sent as HTTP chunks as the iterable produces them, so an endless generator
    is an endless stream and memory on the server side stays one frame.
    """

    def __init__(self, script: Callable[[int], tuple[int, dict[str, str], Iterable[bytes]]]) -> None:
        super().__init__()
        self.script = script
        self.sent = 0

    def _serve(self, handler: Any) -> None:
        length = int(handler.headers.get("content-length") or 0)
        handler.rfile.read(length)
        number = len(self.requests)
        self.requests.append(number)  # type: ignore[arg-type]
        status, headers, frames = self.script(number)
        handler.send_response(status)
        headers = {"content-type": "text/event-stream", **headers}
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        for frame in frames:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.sent += len(frame)
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()


def stream_of(*frames: bytes | Iterable[bytes]) -> Callable[[int], tuple[int, dict[str, str], Iterable[bytes]]]:
    """A script answering every request with 200 and these frames (iterables are chained, lazily)."""

    def script(number: int) -> tuple[int, dict[str, str], Iterable[bytes]]:
        parts = [iter([f]) if isinstance(f, bytes) else f for f in frames]
        return 200, {}, itertools.chain.from_iterable(parts)

    return script


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


# Anthropic frames


def a_event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {data if isinstance(data, str) else dumps(data)}\n\n".encode()


A_START = a_event("message_start", {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
                                                                        "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}})
A_TEXT_BLOCK = a_event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
A_END = a_event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}) + a_event(
    "message_stop", {"type": "message_stop"}
)


def a_text(text: str) -> bytes:
    return a_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})


def a_tool(index: int, call_id: str, name: str, arguments: str) -> bytes:
    return (
        a_event("content_block_start", {"type": "content_block_start", "index": index,
                                        "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}})
        + a_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "input_json_delta", "partial_json": arguments}})
        + a_event("content_block_stop", {"type": "content_block_stop", "index": index})
    )


# Chat Completions frames


def o_chunk(delta: Any = None, finish: Any = None, usage: Any = None, choices: Any = None) -> bytes:
    if choices is None:
        choices = [] if delta is None and finish is None else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    data: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "choices": choices}
    if usage is not None:
        data["usage"] = usage
    return f"data: {dumps(data)}\n\n".encode()


O_END = o_chunk({}, "stop") + o_chunk(usage={"prompt_tokens": 3, "completion_tokens": 2}) + b"data: [DONE]\n\n"


def o_text(text: str) -> bytes:
    return o_chunk({"content": text})


def o_tool(index: int, call_id: str, name: str, arguments: str) -> bytes:
    return o_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]})


FORMAT = {
    "anthropic": {"start": A_START + A_TEXT_BLOCK, "text": a_text, "end": A_END, "tool": a_tool},
    "openai": {"start": o_chunk({"role": "assistant", "content": ""}), "text": o_text, "end": O_END, "tool": o_tool},
}


def agent_for(tmp_path: Path, provider: str, url: str, *, client: dict[str, Any] | None = None, runtime: dict[str, Any] | None = None,
              plugins: Iterable[Any] = ()) -> Any:
    """An agent on ``<provider>:model-x`` at ``url``, no retries unless ``client`` says so."""
    if provider == "anthropic":
        providers: dict[str, Any] = {"anthropic": {"baseUrl": url}}
        env = {"ANTHROPIC_API_KEY": "test-key"}
    else:
        providers = {"openai": {"baseUrl": f"{url}/v1"}}
        env = {"OPENAI_API_KEY": "sk-test"}
    providers["client"] = {"maxRetries": 0, "maxRetryDelayMs": 0, **(client or {})}
    config = {"runtime": {"model": f"{provider}:model-x", **(runtime or {})}, "providers": providers}
    return fresh_agent(tmp_path, config=config, env=env, plugins=list(plugins))


def turn(agent: Any, text: str = "hello", conversation_id: str = "c") -> tuple[Any, list[Any]]:
    """Run one turn; returns (result or the exception it raised, events)."""
    events: list[Any] = []
    try:
        result = asyncio.run(agent.respond(TurnRequest(text, conversation_id=conversation_id), on_event=events.append))
    except Exception as exc:  # the test inspects what ended the turn
        return exc, events
    return result, events


def of(events: list[Any], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == kind]


def assert_provider_failure(outcome: Any, events: list[Any], code: str) -> ProviderError:
    """The turn ended with a one-line ProviderError of ``code``, announced by ``run_failed``."""
    assert isinstance(outcome, ProviderError), f"expected a ProviderError, got {type(outcome).__name__}: {outcome}"
    assert outcome.code == code, (outcome.code, str(outcome))
    assert "\n" not in str(outcome) and len(str(outcome)) < 1200
    failed = of(events, "run_failed")
    assert len(failed) == 1 and failed[0]["settlement"] == "thrown_error"
    assert "Traceback" not in failed[0]["error"]
    return outcome


def account_of(agent: Any, conversation_id: str = "c") -> str:
    messages = asyncio.run(agent.history_store.load(conversation_id))
    assert messages[-1].content.startswith("[Continuity account v1"), messages[-1].content[:200]
    return messages[-1].content


class Peak:
    """The peak of Python memory allocated while the block runs (tracemalloc), in bytes."""

    def __enter__(self) -> Peak:
        import httpx  # noqa: F401  (imported before measuring: import costs are not the stream's)
        import httpx_sse  # noqa: F401

        import monoagent_plugins.providers.anthropic_wire
        import monoagent_plugins.providers.openai_wire  # noqa: F401

        tracemalloc.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


@pytest.fixture
def serve():
    """``serve(script)`` starts a HostileServer for the test; all are stopped at the end."""
    servers: list[HostileServer] = []

    def start(script: Callable[[int], tuple[int, dict[str, str], Iterable[bytes]]]) -> HostileServer:
        server = HostileServer(script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def endless(frame: bytes) -> Iterator[bytes]:
    return itertools.repeat(frame)


# =========================================================================== item 7: sizes and time


@pytest.mark.parametrize("provider", PROVIDERS)
def test_endless_text_stream_stops_at_max_stream_bytes_with_bounded_memory(tmp_path, serve, provider):
    wire = FORMAT[provider]
    server = serve(stream_of(wire["start"], endless(wire["text"]("x" * 1000))))
    agent = agent_for(tmp_path, provider, server.url, client={"maxStreamBytes": 256 * 1024})
    with Peak() as peak:
        outcome, events = turn(agent)
    error = assert_provider_failure(outcome, events, "stream_too_large")
    assert not error.retryable and len(server.requests) == 1
    assert "maxStreamBytes = 262144" in str(error)
    streamed = sum(len(d["text"].encode()) for d in of(events, "text_delta"))
    assert 256 * 1024 - 1000 <= streamed <= 256 * 1024 + 1000
    assert peak.bytes < 24 * MiB, peak.bytes


@pytest.mark.parametrize("provider", PROVIDERS)
def test_endless_keep_alives_end_with_an_idle_timeout_that_is_retried(tmp_path, serve, provider):
    keep_alive = a_event("ping", {"type": "ping"}) if provider == "anthropic" else b": keep-alive\n\n" + o_chunk(choices=[])
    server = serve(stream_of(FORMAT[provider]["start"], endless(keep_alive)))
    agent = agent_for(tmp_path, provider, server.url, client={"streamIdleTimeoutMs": 200, "maxRetries": 1})
    outcome, events = turn(agent)
    error = assert_provider_failure(outcome, events, "stream_idle_timeout")
    assert error.retryable
    assert len(server.requests) == 2
    retry = of(events, "provider_retry")
    assert [r["code"] for r in retry] == ["stream_idle_timeout"]
    assert "streamIdleTimeoutMs = 200 ms" in str(error)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_empty_deltas_are_no_progress(tmp_path, serve, provider):
    nothing = FORMAT[provider]["text"]("")
    server = serve(stream_of(FORMAT[provider]["start"], endless(nothing)))
    agent = agent_for(tmp_path, provider, server.url, client={"streamIdleTimeoutMs": 200})
    outcome, events = turn(agent)
    assert_provider_failure(outcome, events, "stream_idle_timeout")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_that_keeps_making_progress_meets_its_deadline(tmp_path, serve, provider):
    server = serve(stream_of(FORMAT[provider]["start"], endless(FORMAT[provider]["text"]("tick "))))
    agent = agent_for(tmp_path, provider, server.url,
                      client={"streamTimeoutMs": 300, "streamIdleTimeoutMs": 60_000, "maxStreamBytes": 1 << 30})
    outcome, events = turn(agent)
    error = assert_provider_failure(outcome, events, "stream_timeout")
    assert not error.retryable and of(events, "text_delta")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_giant_line_is_refused_while_it_is_read(tmp_path, serve, provider):
    """The review's 200 MB SSE line took 787 MB; here 64 MiB against the default 4 MiB cap."""
    giant = itertools.chain([b"data: {\"type\": \"content_block_delta\", \"text\": \""], itertools.repeat(b"A" * 65536, 1024))
    server = serve(stream_of(FORMAT[provider]["start"], giant))
    agent = agent_for(tmp_path, provider, server.url)
    with Peak() as peak:
        outcome, events = turn(agent)
    error = assert_provider_failure(outcome, events, "event_too_large")
    assert "maxStreamEventBytes = 4194304" in str(error)
    assert peak.bytes < 40 * MiB, peak.bytes


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_giant_event_of_many_short_lines_is_refused(tmp_path, serve, provider):
    lines = itertools.repeat(b"data: " + b"B" * 1000 + b"\n", 100_000)  # ~100 MB, never an empty line
    server = serve(stream_of(FORMAT[provider]["start"], lines))
    agent = agent_for(tmp_path, provider, server.url, client={"maxStreamEventBytes": 64 * 1024})
    with Peak() as peak:
        outcome, events = turn(agent)
    assert_provider_failure(outcome, events, "event_too_large")
    assert peak.bytes < 16 * MiB, peak.bytes


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
def test_line_endings_and_a_cr_split_across_chunks(tmp_path, serve, line_end):
    frames = [A_START.replace(b"\n", line_end), A_TEXT_BLOCK.replace(b"\n", line_end)]
    for piece in ("Hel", "lo"):
        event = a_text(piece).replace(b"\n", line_end)
        frames += [event[: len(event) - 1], event[len(event) - 1:]]  # the last line end arrives alone
    frames.append(A_END.replace(b"\n", line_end))
    server = serve(stream_of(*frames))
    result, _ = turn(agent_for(tmp_path, "anthropic", server.url))
    assert not isinstance(result, Exception), result
    assert result.text == "Hello"


def test_a_giant_error_body_is_read_only_in_part(tmp_path, serve):
    body = itertools.chain([b'{"error": {"type": "api_error", "message": "'], itertools.repeat(b"E" * 65536, 1600))  # 100 MiB

    def script(number: int) -> tuple[int, dict[str, str], Iterable[bytes]]:
        return 500, {"content-type": "application/json"}, body

    server = serve(script)
    agent = agent_for(tmp_path, "anthropic", server.url)
    with Peak() as peak:
        outcome, _events = turn(agent)
    assert isinstance(outcome, ProviderError) and outcome.status == 500 and outcome.retryable
    assert "\n" not in str(outcome) and len(str(outcome)) < 1200
    assert peak.bytes < 24 * MiB, peak.bytes


def test_a_compressed_stream_is_refused_so_a_bomb_cannot_inflate(tmp_path, serve):
    bomb = gzip.compress(A_START + b"data: " + b"Z" * (128 * MiB) + b"\n\n", compresslevel=9)  # ~128 KiB on the wire

    def script(number: int) -> tuple[int, dict[str, str], Iterable[bytes]]:
        return 200, {"content-encoding": "gzip"}, [bomb[i : i + 65536] for i in range(0, len(bomb), 65536)]

    server = serve(script)
    agent = agent_for(tmp_path, "anthropic", server.url)
    with Peak() as peak:
        outcome, events = turn(agent)
    assert_provider_failure(outcome, events, "malformed_event")
    assert "compressed" in str(outcome)
    assert peak.bytes < 24 * MiB, peak.bytes


# =========================================================================== item 7: shapes


A_TOOL_START = {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}}

ANTHROPIC_MALFORMED: dict[str, list[Any]] = {
    "text_is_a_number": [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 12345}}],
    "text_is_null": [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": None}}],
    "tool_name_is_a_list": [{**A_TOOL_START, "content_block": {**A_TOOL_START["content_block"], "name": ["lookup"]}}],
    "tool_id_is_an_object": [{**A_TOOL_START, "content_block": {**A_TOOL_START["content_block"], "id": {"a": 1}}}],
    "block_type_is_a_number": [{**A_TOOL_START, "content_block": {"type": 7}}],
    "index_is_a_string": [{"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta", "text": "x"}}],
    "index_is_a_boolean": [{"type": "content_block_stop", "index": True}],
    "delta_is_a_list": [{"type": "content_block_delta", "index": 0, "delta": ["text_delta"]}],
    "delta_type_missing": [{"type": "content_block_delta", "index": 0, "delta": {"text": "x"}}],
    "event_type_missing": [{"index": 0}],
    "event_type_is_an_object": [{"type": {"content_block_delta": 1}}],
    "event_is_an_array": [[1, 2, 3]],
    "event_is_a_string": ["content_block_delta"],
    "event_is_not_json": ["{not json"],
    "event_has_nan": ['{"type": "message_delta", "delta": {"stop_reason": NaN}}'],
    "message_is_a_string": [{"type": "message_start", "message": "hello"}],
    "usage_is_a_string": [{"type": "message_delta", "delta": {}, "usage": "lots"}],
    "stop_reason_is_a_number": [{"type": "message_delta", "delta": {"stop_reason": 3}}],
    "partial_json_is_a_number": [A_TOOL_START, {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 5}}],
    "json_delta_for_no_open_block": [{"type": "content_block_delta", "index": 9, "delta": {"type": "input_json_delta", "partial_json": "{}"}}],
    "block_started_twice": [A_TOOL_START, A_TOOL_START],
    "arguments_are_an_array": [A_TOOL_START, {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "[1, 2]"}},
                               {"type": "content_block_stop", "index": 1}],
    "arguments_are_not_json": [A_TOOL_START, {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}},
                               {"type": "content_block_stop", "index": 1}],
    "arguments_have_infinity": [A_TOOL_START, {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\": Infinity}"}},
                                {"type": "content_block_stop", "index": 1}],
    "arguments_nest_too_deep": [A_TOOL_START, {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                "partial_json": "{\"a\": " + "[" * 100 + "]" * 100 + "}"}}, {"type": "content_block_stop", "index": 1}],
    "event_nests_200k_deep": ['{"type": "content_block_delta", "index": 0, "delta": ' + "[" * 200_000 + "]" * 200_000 + "}"],
}

O_CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}

OPENAI_MALFORMED: dict[str, list[Any]] = {
    "content_is_a_number": [{"choices": [{"index": 0, "delta": {"content": 12345}}]}],
    "content_is_an_object": [{"choices": [{"index": 0, "delta": {"content": {"text": "x"}}}]}],
    "choices_is_an_object": [{"choices": {"0": {}}}],
    "choices_is_a_string": [{"choices": "many"}],
    "choice_is_a_number": [{"choices": [1]}],
    "delta_is_a_list": [{"choices": [{"index": 0, "delta": ["content"]}]}],
    "finish_reason_is_a_number": [{"choices": [{"index": 0, "delta": {}, "finish_reason": 1}]}],
    "tool_calls_is_an_object": [{"choices": [{"index": 0, "delta": {"tool_calls": O_CALL}}]}],
    "tool_call_is_a_string": [{"choices": [{"index": 0, "delta": {"tool_calls": ["call"]}}]}],
    "tool_name_is_a_list": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "function": {"name": ["lookup"], "arguments": "{}"}}]}}]}],
    "tool_id_is_an_object": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "id": {"a": 1}}]}}]}],
    "tool_index_is_a_string": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "index": "0"}]}}]}],
    "function_is_a_string": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "function": "lookup"}]}}]}],
    "arguments_are_a_number": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "function": {"name": "lookup", "arguments": 7}}]}}]}],
    "arguments_are_an_array": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "function": {"name": "lookup", "arguments": "[1]"}}]}}]}],
    "arguments_are_not_json": [{"choices": [{"index": 0, "delta": {"tool_calls": [{**O_CALL, "function": {"name": "lookup", "arguments": "{\"a\""}}]}}]}],
    "usage_is_a_list": [{"choices": [], "usage": [1, 2]}],
    "chunk_is_an_array": [[{"choices": []}]],
    "chunk_is_a_number": [42],
    "chunk_is_not_json": ["{\"choices\": ["],
    "chunk_nests_200k_deep": ['{"choices": ' + "[" * 200_000 + "]" * 200_000 + "}"],
}


def malformed_stream(provider: str, events: list[Any]) -> bytes:
    """The events (JSON values, or raw ``data`` text) inside an otherwise well-formed stream."""
    def data(value: Any) -> str:
        return value if isinstance(value, str) else dumps(value)

    if provider == "anthropic":
        body = b"".join(a_event("content_block_delta", data(event)) for event in events)
        return A_START + A_TEXT_BLOCK + body + A_END
    body = b"".join(f"data: {data(event)}\n\n".encode() for event in events)
    return FORMAT["openai"]["start"] + body + O_END


MALFORMED_CASES = [("anthropic", name) for name in ANTHROPIC_MALFORMED] + [("openai", name) for name in OPENAI_MALFORMED]


@pytest.mark.parametrize(("provider", "case"), MALFORMED_CASES, ids=[f"{p}-{c}" for p, c in MALFORMED_CASES])
def test_wrong_json_types_end_the_turn_with_one_line(tmp_path, serve, provider, case):
    events = (ANTHROPIC_MALFORMED if provider == "anthropic" else OPENAI_MALFORMED)[case]
    server = serve(stream_of(malformed_stream(provider, events)))
    agent = agent_for(tmp_path, provider, server.url, client={"maxRetries": 2})
    outcome, run_events = turn(agent)
    error = assert_provider_failure(outcome, run_events, "malformed_event")
    assert not error.retryable and len(server.requests) == 1  # a malformed event is not retried
    assert error.provider == provider


def test_the_continuity_account_records_the_violation(tmp_path, serve):
    server = serve(stream_of(malformed_stream("anthropic", [a for a in ANTHROPIC_MALFORMED["tool_name_is_a_list"]])))
    agent = agent_for(tmp_path, "anthropic", server.url)
    outcome, events = turn(agent)
    assert_provider_failure(outcome, events, "malformed_event")
    account = account_of(agent)
    assert "Status: failed (settlement: thrown_error)" in account
    assert "ProviderError:anthropic:malformed_event" in account
    assert "content_block.name is an array, expected a string" in account


@pytest.mark.parametrize("provider", PROVIDERS)
def test_lone_surrogates_become_replacement_characters(tmp_path, serve, provider):
    wire = FORMAT[provider]
    arguments = json.dumps({"q": "\udc00 tail", "\ud800key": ["\udbff"]})  # ASCII escapes of lone surrogates
    tool_step = (wire["start"] + wire["text"]("\ud800 half ") + wire["tool"](1, "call_\udc01", "look\ud800up", "{}")
                 + wire["tool"](2, "call_2", "lookup", arguments))  # a tool's own name is never outside the providers' rule
    if provider == "anthropic":
        tool_step += a_event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}) + a_event("message_stop", {"type": "message_stop"})
    else:
        tool_step += o_chunk({}, "tool_calls") + b"data: [DONE]\n\n"
    answer = wire["start"] + wire["text"]("done \udfff") + wire["end"]

    def script(number: int) -> tuple[int, dict[str, str], Iterable[bytes]]:
        return 200, {}, [tool_step if number == 0 else answer]

    seen: list[ToolCall] = []

    class Tools:
        @hookimpl
        def register_tools(self, register):
            spec = ToolSpec("lookup", "look a word up", {"type": "object"})
            register(spec, lambda context: seen.append(context.arguments) or "found")

    server = serve(script)
    agent = agent_for(tmp_path, provider, server.url, plugins=[Tools()])
    result, events = turn(agent)
    assert not isinstance(result, Exception), result
    assert result.text == "done \ufffd"
    assert seen == [{"q": "\ufffd tail", "\ufffdkey": ["\ufffd"]}]
    assert [(call["id"], call["name"]) for call in of(events, "tool_call")] == [("call_\ufffd", "look\ufffdup"), ("call_2", "lookup")]
    follow_up, _ = turn(agent, "again")  # the stored conversation goes over the wire again
    assert not isinstance(follow_up, Exception), follow_up


# =========================================================================== item 7: generated


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)

ANTHROPIC_TEMPLATES = [
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
    A_TOOL_START,
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"q\": 1}"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
]
OPENAI_TEMPLATES = [
    {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [O_CALL]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\": 1}"}}]}, "finish_reason": "tool_calls"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 1}}},
    {"error": {"type": "server_error", "message": "busy"}},
]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return copy


@st.composite
def mutated_events(draw: Any, templates: list[Any]) -> list[Any]:
    """A few events: each a template with one field (at any depth) replaced by random JSON,
    or random JSON, or a random text, or a template unchanged."""
    events = []
    for _ in range(draw(st.integers(1, 4))):
        template = draw(st.sampled_from(templates))
        kind = draw(st.sampled_from(["mutate", "mutate", "mutate", "json", "text", "same"]))
        if kind == "mutate":
            for _ in range(draw(st.integers(1, 2))):
                template = replaced(template, draw(st.sampled_from(paths(template))), draw(JSON))
            events.append(template)
        elif kind == "json":
            events.append(draw(JSON))
        elif kind == "text":
            events.append(draw(st.text(max_size=30)).replace("\n", " ").replace("\r", " "))
        else:
            events.append(template)
    return events


def check_events(events: list[Any]) -> None:
    """What a runtime yields is well typed whatever the server sent."""
    for event in events:
        if isinstance(event, TextDelta):
            assert type(event.text) is str and event.text
            event.text.encode("utf-8")
        elif isinstance(event, ToolCallRequested):
            call = event.call
            assert type(call.id) is str and type(call.name) is str and type(call.arguments) is dict
            json.dumps(call.arguments, allow_nan=False).encode("utf-8")
        elif isinstance(event, StreamProgress):
            assert type(event.bytes) is int and event.bytes > 0
        else:
            assert isinstance(event, StepFinished) and type(event.stop_reason) is str
            assert all(type(v) is int and v >= 0 for v in (event.usage.input_tokens, event.usage.output_tokens,
                                                          event.usage.cache_read_tokens, event.usage.cache_write_tokens))


@pytest.fixture(scope="module")
def generated_servers():
    """One server per wire format answering each request with the stream the test put in ``next``."""
    servers = {}
    for provider in PROVIDERS:
        server = HostileServer(lambda number, provider=provider: (200, {}, [servers[provider].next]))
        server.start()
        servers[provider] = server
    yield servers
    for server in servers.values():
        server.stop()


def runtime_for(tmp_path_factory: Any, provider: str, url: str) -> Any:
    agent = agent_for(tmp_path_factory.mktemp("gen"), provider, url)
    return agent.provider(f"{provider}:model-x")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_generated_malformed_events_over_the_wire(generated_servers, tmp_path_factory, provider):
    server = generated_servers[provider]
    runtime = runtime_for(tmp_path_factory, provider, server.url)
    templates = ANTHROPIC_TEMPLATES if provider == "anthropic" else OPENAI_TEMPLATES

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(events=mutated_events(templates))
    def check(events: list[Any]) -> None:
        server.next = malformed_stream(provider, events)
        try:
            got = asyncio.run(collect(runtime, contract_request()))
        except ProviderError as exc:
            assert "\n" not in str(exc)
            return
        check_events(got)

    check()


@pytest.mark.parametrize("provider", PROVIDERS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_generated_events_through_the_parser(provider, data):
    """The same, many more examples, through the parser alone (no HTTP): Malformed or well typed."""
    from monoagent_plugins.providers.anthropic_wire import MessageStream
    from monoagent_plugins.providers.events import Malformed, event_json
    from monoagent_plugins.providers.http import Endpoint
    from monoagent_plugins.providers.openai_wire import ChunkStream, OpenAIChatRuntime

    endpoint = Endpoint(provider, "http://127.0.0.1:9/x", {}, "providers.x.baseUrl", None, 1.0, 1.0)
    templates = ANTHROPIC_TEMPLATES if provider == "anthropic" else OPENAI_TEMPLATES
    events = data.draw(mutated_events(templates))
    if provider == "anthropic":
        stream: Any = MessageStream(endpoint)
    else:
        stream = ChunkStream(OpenAIChatRuntime(provider, "m", endpoint, max_output_tokens=None, context_window=8192), endpoint)
    got: list[Any] = []
    try:
        for event in events:
            text = event if isinstance(event, str) else dumps(event)
            found = stream.apply(event_json(endpoint, text), len(text)) if provider == "anthropic" else stream.apply(event_json(endpoint, text))
            got += [found] if not isinstance(found, list) and found is not None else (found or [])
    except (Malformed, ProviderError) as exc:
        assert "\n" not in str(exc)
        return
    check_events(got)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=40) | st.sampled_from([b"\r", b"\n", b"\r\n", b"data: x", b":", b"event: e", b"\xff"]),
                       max_size=40), limit=st.integers(1024, 2048))
def test_generated_bytes_through_the_sse_reader(chunks, limit):
    """Any bytes in any chunking: events of str data, or a one-line ProviderError; never more
    buffered than the cap plus one chunk."""
    from monoagent_plugins.providers.events import SSEReader
    from monoagent_plugins.providers.http import Endpoint

    reader = SSEReader(Endpoint("p", "http://127.0.0.1:9/x", {}, "providers.x.baseUrl", None, 1.0, 1.0, max_event_bytes=limit))
    try:
        for chunk in chunks:
            for event in reader.feed(chunk):
                assert isinstance(event.data, str) and isinstance(event.event, str)
            assert len(reader.buffer) <= limit
        reader.finish()
    except ProviderError as exc:
        assert exc.code == "event_too_large"


LINE_TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from(["", "ping", "message_start"]), st.lists(LINE_TEXT, min_size=1, max_size=3),
                                 st.sampled_from([b"\n", b"\r\n", b"\r"])), max_size=6),
       cuts=st.lists(st.integers(0, 400), max_size=12))
def test_the_sse_reader_reads_the_same_events_however_the_bytes_are_cut(events, cuts):
    """Events with several data lines, names, comments and any (mixed) line ends, cut anywhere."""
    from monoagent_plugins.providers.events import SSEReader
    from monoagent_plugins.providers.http import Endpoint

    body = b"".join(
        (f"event: {name}".encode() + line_end if name else b"")
        + b"".join(b"data: " + line.encode() + line_end for line in lines)
        + b": keep-alive" + line_end + line_end
        for name, lines, line_end in events
    )

    def read(chunks: list[bytes]) -> list[tuple[str, str]]:
        reader = SSEReader(Endpoint("p", "http://127.0.0.1:9/x", {}, "providers.x.baseUrl", None, 1.0, 1.0))
        found = [event for chunk in chunks for event in reader.feed(chunk)] + reader.finish()
        return [(event.event, event.data) for event in found]

    points = sorted({min(c, len(body)) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert read(pieces) == [(name or "message", "\n".join(lines)) for name, lines, _ in events]


# =========================================================================== item 7: the harness bounds any runtime


class Misbehaving:
    """A third-party runtime (no HTTP) doing whatever ``behave`` does."""

    def __init__(self, behave: Callable[[], Any]) -> None:
        self.name = "h:model"
        self.behave = behave
        self.context_window = 100_000
        self.closed = 0

    async def stream(self, request: Any) -> Any:
        try:
            async for event in self.behave():
                yield event
        finally:
            self.closed += 1


def harness_agent(tmp_path: Path, behave: Callable[[], Any], **client: Any) -> tuple[Any, Misbehaving]:
    runtime = Misbehaving(behave)

    class Plugin:
        @hookimpl
        def register_providers(self, register):
            register("h", lambda agent, model: runtime)

    config = {"runtime": {"model": "h:model"}, "providers": {"client": {"maxRetries": 0, **client}}}
    return fresh_agent(tmp_path, config=config, plugins=[Plugin()]), runtime


async def never_awaits_empty():
    while True:
        yield TextDelta("")


async def never_awaits_text():
    while True:
        yield TextDelta("y" * 100)


async def waits_forever():
    yield TextDelta("I will think about it")
    await asyncio.Event().wait()


async def progress_forever():
    while True:
        await asyncio.sleep(0)
        yield StreamProgress(10, "reasoning")


async def text_is_a_number():
    yield TextDelta(12345)  # type: ignore[arg-type]


async def not_an_event():
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("repr bomb")

    yield Hostile()


async def deep_arguments():
    deep: Any = {}
    for _ in range(100):
        deep = {"a": deep}
    yield ToolCallRequested(ToolCall("c", "lookup", deep))


async def set_arguments():
    yield ToolCallRequested(ToolCall("c", "lookup", {"a": {1, 2}}))


async def name_is_a_list():
    yield ToolCallRequested(ToolCall("c", ["lookup"], {}))  # type: ignore[arg-type]


async def thousands_of_calls():
    for n in range(5000):
        yield ToolCallRequested(ToolCall(f"c{n}", "lookup", {}))


async def usage_of_strings():
    yield TextDelta("ok")
    yield StepFinished("end_turn", Usage(input_tokens="12"))  # type: ignore[arg-type]


async def negative_progress():
    yield StreamProgress(-5)


HARNESS_CASES = {
    "empty_deltas_that_never_await": (never_awaits_empty, "stream_idle_timeout", {"streamIdleTimeoutMs": 100}),
    "text_that_never_awaits": (never_awaits_text, "stream_too_large", {"maxStreamBytes": 64 * 1024}),
    "a_stream_that_hangs": (waits_forever, "stream_idle_timeout", {"streamIdleTimeoutMs": 100}),
    "progress_forever": (progress_forever, "stream_timeout", {"streamTimeoutMs": 200, "maxStreamBytes": 1 << 30}),
    "text_is_a_number": (text_is_a_number, "malformed_event", {}),
    "not_an_event_with_a_hostile_repr": (not_an_event, "malformed_event", {}),
    "arguments_nested_100_deep": (deep_arguments, "malformed_event", {}),
    "arguments_that_are_not_json": (set_arguments, "malformed_event", {}),
    "tool_name_is_a_list": (name_is_a_list, "malformed_event", {}),
    "thousands_of_tool_calls": (thousands_of_calls, "too_many_tool_calls", {}),
    "usage_of_strings": (usage_of_strings, "malformed_event", {}),
    "negative_progress": (negative_progress, "malformed_event", {}),
}


@pytest.mark.parametrize("case", list(HARNESS_CASES))
def test_the_harness_bounds_a_third_party_runtime(tmp_path, case):
    behave, code, client = HARNESS_CASES[case]
    agent, runtime = harness_agent(tmp_path, behave, **client)
    outcome, events = turn(agent)
    assert_provider_failure(outcome, events, code)
    assert runtime.closed == 1  # the runtime's stream was closed


def test_a_summary_call_is_bounded_too_and_compaction_falls_back_to_truncation(tmp_path):
    """The ``summary`` compaction policy calls the provider outside the tool loop: same bounds."""
    calls = itertools.count()

    async def summary_forever_then_answer():
        if next(calls) == 0:  # the summary request
            while True:
                await asyncio.sleep(0)
                yield TextDelta("summary " * 100)
        yield TextDelta("answered")
        yield StepFinished("end_turn", Usage(1, 1))

    agent, _ = harness_agent(tmp_path, summary_forever_then_answer, maxStreamBytes=64 * 1024)
    agent.config.runtime.compaction.context_window_override = 1024
    agent.config.runtime.compaction.response_reserve_tokens = 0
    from monoagent._kernel.model import Message

    asyncio.run(agent.history_store.commit("c", [Message("user", "old words " * 400), Message("assistant", "old answer " * 400)]))
    result, events = turn(agent)
    assert not isinstance(result, Exception), result
    assert result.text == "answered"
    compaction = of(events, "context_compaction_applied")[0]
    assert compaction["method"] == "truncate" and compaction["applied"] is True


def test_an_idle_timeout_moves_down_the_fallback_chain(tmp_path, serve):
    server = serve(stream_of(A_START, endless(a_event("ping", {"type": "ping"}))))
    agent = agent_for(tmp_path, "anthropic", server.url, client={"streamIdleTimeoutMs": 100, "maxRetries": 1},
                      runtime={"fallbacks": ["offline:echo"]})
    result, events = turn(agent)
    assert not isinstance(result, Exception), result
    assert result.model == "offline:echo"
    assert [f["reason"] for f in of(events, "provider_fallback")] == ["retries_exhausted"]
    assert [d["code"] for d in of(events, "provider_attempt_discarded")] in ([], ["stream_idle_timeout"])
    assert len(server.requests) == 2


def test_a_well_behaved_stream_is_unchanged(tmp_path):
    """The bounds do not touch an ordinary answer: text, a split tool call, usage."""
    with AnthropicWireServer() as server:
        call = ScriptedToolCall("toolu_1", "lookup", ('{"wo', 'rd": "caf', 'é"}'))
        server.enqueue(Reply(text_pieces=("Let me look.",), tool_calls=(call,)), Reply(text_pieces=("Found ", "it.")))

        class Tools:
            @hookimpl
            def register_tools(self, register):
                register(ToolSpec("lookup", "look a word up", {"type": "object"}), lambda context: "a coffee house")

        result, _events = turn(agent_for(tmp_path, "anthropic", server.url, plugins=[Tools()]))
    assert not isinstance(result, Exception), result
    assert result.text == "Found it."
    assert [a.call.arguments for a in result.tool_activity] == [{"word": "café"}]


# =========================================================================== item 8: runaway tool loops


def loop_tools(calls: list[Any], *, block: asyncio.Event | None = None) -> Any:
    class Tools:
        @hookimpl
        def register_tools(self, register):
            async def clock(context):
                calls.append(context.arguments)
                if block is not None:
                    await block.wait()
                return "12:00"

            register(ToolSpec("clock", "tell the time", {"type": "object"}), clock)

    return Tools()


def test_scripted_identical_tool_calls_end_with_repeated_tool_call(tmp_path):
    calls: list[Any] = []
    steps = [{"text": "", "tool_calls": [{"name": "clock", "arguments": {"tz": "UTC"}}]}] * 50
    agent = scripted_agent(tmp_path, steps, config={"runtime": {"maxTurns": 0}}, plugins=[loop_tools(calls)])
    outcome, events = turn(agent)
    assert isinstance(outcome, RepeatedToolCall), outcome
    assert len(calls) == 5  # the default: five identical calls run, the sixth is refused
    assert of(events, "run_failed")[0]["settlement"] == "repeated_tool_call"
    assert "runtime.maxRepeatedToolCalls = 5" in str(outcome) and "\n" not in str(outcome)
    account = account_of(agent)
    assert "Status: failed (settlement: repeated_tool_call)" in account
    assert account.count("- clock (success)") == 5


def test_the_repeated_call_guard_is_configurable_and_counts_only_a_row(tmp_path):
    calls: list[Any] = []
    args = [{"n": 1}, {"n": 1}, {"n": 2}, {"n": 2}, {"n": 2}]
    steps = [{"tool_calls": [{"name": "clock", "arguments": a}]} for a in args] + [{"text": "done"}]
    agent = scripted_agent(tmp_path, steps, config={"runtime": {"maxRepeatedToolCalls": 3}}, plugins=[loop_tools(calls)])
    result, _ = turn(agent)
    assert not isinstance(result, Exception), result
    assert result.text == "done" and len(calls) == 5

    calls.clear()
    (tmp_path / "2").mkdir()
    agent = scripted_agent(tmp_path / "2", steps, config={"runtime": {"maxRepeatedToolCalls": 2}}, plugins=[loop_tools(calls)])
    outcome, _ = turn(agent)
    assert isinstance(outcome, RepeatedToolCall) and len(calls) == 4


def test_max_turns_zero_still_means_unlimited(tmp_path):
    calls: list[Any] = []
    steps = [{"tool_calls": [{"name": "clock", "arguments": {"n": n}}]} for n in range(30)] + [{"text": "done"}]
    agent = scripted_agent(tmp_path, steps, config={"runtime": {"maxTurns": 0}}, plugins=[loop_tools(calls)])
    result, _ = turn(agent)
    assert not isinstance(result, Exception), result
    assert result.text == "done" and result.steps == 31 and len(calls) == 30


def test_scripted_run_deadline_ends_a_tool_that_never_returns(tmp_path):
    calls: list[Any] = []
    steps = [{"tool_calls": [{"name": "clock", "arguments": {}}]}, {"text": "never"}]
    agent = scripted_agent(tmp_path, steps, config={"runtime": {"runTimeoutMs": 200}}, plugins=[loop_tools(calls, block=asyncio.Event())])
    outcome, events = turn(agent)
    assert isinstance(outcome, RunDeadlineExceeded), outcome
    assert "runtime.runTimeoutMs = 200 ms" in str(outcome)
    assert of(events, "run_failed")[0]["settlement"] == "run_deadline"
    account = account_of(agent)
    assert "Status: failed (settlement: run_deadline)" in account
    assert "Work in flight, outcome unconfirmed (1):\n- clock invocation" in account


class AlwaysCallsATool(AnthropicWireServer):
    """Answers every request with a tool call, forever, its arguments numbered when ``vary``."""

    def __init__(self, vary: bool) -> None:
        super().__init__()
        self.vary = vary
        self.count = itertools.count()

    def next_reply(self) -> Reply:
        n = next(self.count) if self.vary else 0
        return Reply(tool_calls=(ScriptedToolCall(f"toolu_{len(self.requests)}", "clock", (json.dumps({"n": n}),)),))


class AlwaysCallsATool_OpenAI(OpenAIWireServer):
    def __init__(self, vary: bool) -> None:
        super().__init__()
        self.vary = vary
        self.count = itertools.count()

    def next_reply(self) -> Reply:
        n = next(self.count) if self.vary else 0
        return Reply(tool_calls=(ScriptedToolCall(f"call_{len(self.requests)}", "clock", (json.dumps({"n": n}),)),))


SERVERS = {"anthropic": AlwaysCallsATool, "openai": AlwaysCallsATool_OpenAI}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_that_always_calls_a_tool_meets_the_run_deadline(tmp_path, provider):
    calls: list[Any] = []
    with SERVERS[provider](vary=True) as server:
        agent = agent_for(tmp_path, provider, server.url, runtime={"maxTurns": 0, "runTimeoutMs": 1500}, plugins=[loop_tools(calls)])
        outcome, events = turn(agent)
    assert isinstance(outcome, RunDeadlineExceeded), outcome
    assert of(events, "run_failed")[0]["settlement"] == "run_deadline"
    assert len(server.requests) > 1 and len(calls) >= len(server.requests) - 1
    assert "Status: failed (settlement: run_deadline)" in account_of(agent)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_server_that_always_calls_the_same_tool_meets_the_guard(tmp_path, provider):
    calls: list[Any] = []
    with SERVERS[provider](vary=False) as server:
        agent = agent_for(tmp_path, provider, server.url, runtime={"maxTurns": 0}, plugins=[loop_tools(calls)])
        outcome, events = turn(agent)
    assert isinstance(outcome, RepeatedToolCall), outcome
    assert len(server.requests) == 6 and len(calls) == 5
    assert of(events, "run_failed")[0]["settlement"] == "repeated_tool_call"


def test_the_new_keys_are_validated(tmp_path):
    from monoagent._kernel.errors import ConfigError

    config = fresh_agent(tmp_path, config={"runtime": {"runTimeoutMs": 1000, "maxRepeatedToolCalls": 0},
                                           "providers": {"client": {"streamIdleTimeoutMs": 50, "maxStreamBytes": 4096}}}).config
    assert (config.runtime.run_timeout_ms, config.runtime.max_repeated_tool_calls) == (1000, 0)
    assert (config.providers.client.stream_idle_timeout_ms, config.providers.client.max_stream_bytes) == (50, 4096)
    for key, value in (("runTimeoutMs", 0), ("maxRepeatedToolCalls", -1)):
        with pytest.raises(ConfigError, match=f"runtime.{key}"):
            fresh_agent(tmp_path, config={"runtime": {key: value}}).config  # noqa: B018
    for key, value in (("streamIdleTimeoutMs", 0), ("maxStreamEventBytes", 10), ("maxStreamBytes", "big")):
        with pytest.raises(ConfigError, match=f"providers.client.{key}"):
            fresh_agent(tmp_path, config={"providers": {"client": {key: value}}}).config  # noqa: B018


def test_a_cycle_of_identical_calls_is_a_repeat_too(tmp_path):
    """A, B, A, B, ... (and any cycle of up to 16 calls) is the same runaway loop as A, A, A."""
    calls: list[Any] = []
    cycle = [{"name": "clock", "arguments": {"tz": "UTC"}}, {"name": "clock", "arguments": {"tz": "CET"}}]
    steps = [{"tool_calls": [call]} for call in cycle] * 25 + [{"text": "done"}]
    agent = scripted_agent(tmp_path, steps, config={"runtime": {"maxTurns": 0}}, plugins=[loop_tools(calls)])
    outcome, events = turn(agent)
    assert isinstance(outcome, RepeatedToolCall), outcome
    assert len(calls) == 10  # each call of the cycle ran five times; the sixth round was refused
    assert "cycle of 2 tool calls" in str(outcome) and "\n" not in str(outcome)
    assert of(events, "run_failed")[0]["settlement"] == "repeated_tool_call"

    calls.clear()
    (tmp_path / "2").mkdir()
    three = [{"name": "clock", "arguments": {"n": n}} for n in range(3)]
    steps = [{"tool_calls": three}] * 10 + [{"text": "done"}]  # the cycle within one step, repeated every step
    agent = scripted_agent(tmp_path / "2", steps, config={"runtime": {"maxTurns": 0}}, plugins=[loop_tools(calls)])
    outcome, _ = turn(agent)
    assert isinstance(outcome, RepeatedToolCall) and len(calls) == 15


def test_a_tool_that_swallows_the_deadline_does_not_outlive_it(tmp_path):
    """The deadline cancels the tool; a tool that catches the cancellation still ends the run."""
    calls: list[Any] = []
    gate = asyncio.Event()

    class Tools:
        @hookimpl
        def register_tools(self, register):
            async def stubborn(context):
                calls.append(context.arguments)
                if len(calls) == 1:
                    try:
                        await gate.wait()
                    except asyncio.CancelledError:
                        pass  # a misbehaving tool: it keeps going
                return "ok"

            register(ToolSpec("clock", "tell the time", {"type": "object"}), stubborn)

    steps = [{"tool_calls": [{"name": "clock", "arguments": {"n": n}}]} for n in range(20)] + [{"text": "done"}]
    agent = scripted_agent(tmp_path, steps, config={"runtime": {"maxTurns": 0, "runTimeoutMs": 200}}, plugins=[Tools()])
    outcome, events = turn(agent)
    assert isinstance(outcome, RunDeadlineExceeded), outcome
    assert len(calls) == 1
    assert of(events, "run_failed")[0]["settlement"] == "run_deadline"


def test_a_reused_tool_call_id_runs_nothing_unrecorded(tmp_path):
    """Tool-history record ids derive from the provider's call id: a second call reusing an id,
    in the same step or a later one, ran with no record of its own. Reused ids get a suffix."""
    for case, steps in {
        "same step": [{"tool_calls": [{"name": "clock", "id": "t1", "arguments": {"n": 1}},
                                      {"name": "clock", "id": "t1", "arguments": {"n": 2}}]}, {"text": "done"}],
        "later step": [{"tool_calls": [{"name": "clock", "id": "t1", "arguments": {"n": 1}}]},
                       {"tool_calls": [{"name": "clock", "id": "t1", "arguments": {"n": 2}},
                                       {"name": "clock", "id": "t1_2", "arguments": {"n": 3}}]}, {"text": "done"}],
    }.items():
        calls: list[Any] = []
        (tmp_path / case).mkdir()
        agent = scripted_agent(tmp_path / case, steps, plugins=[loop_tools(calls)])
        result, events = turn(agent)
        assert not isinstance(result, Exception), result
        rows = agent.tool_history_store().query("SELECT call_id, arguments FROM calls ORDER BY start_seq")
        assert [json.loads(row["arguments"]) for row in rows] == calls, case  # every call that ran has its record
        assert [a.call.id for a in result.tool_activity] == [row["call_id"] for row in rows]
        assert len({row["call_id"] for row in rows}) == len(calls) == len(of(events, "tool_result"))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_calls_without_ids_get_ids_unique_in_the_run(tmp_path, serve, provider):
    """A server that sends no (or empty) tool-call ids gets a record per call, step after step."""
    def script(number: int) -> tuple[int, dict[str, str], Iterable[bytes]]:
        fmt = FORMAT[provider]
        if number >= 2:
            return 200, {}, [fmt["start"], fmt["text"]("done"), fmt["end"]]
        if provider == "openai":
            tool = o_chunk({"tool_calls": [{"index": 0, "type": "function", "function": {"name": "clock", "arguments": "{}"}}]})
            return 200, {}, [fmt["start"], tool, o_chunk({}, "tool_calls"), O_END]
        return 200, {}, [A_START, a_tool(0, "", "clock", "{}"), A_END]

    calls: list[Any] = []
    server = serve(script)
    agent = agent_for(tmp_path, provider, server.url, plugins=[loop_tools(calls)])
    result, _events = turn(agent)
    assert not isinstance(result, Exception), result
    assert result.text == "done" and len(calls) == 2
    assert len({row["call_id"] for row in agent.tool_history_store().query("SELECT call_id FROM calls")}) == 2


# =========================================================================== item 13: cuts of provider text before redaction

DSN = "postgres://admin:S3cr3tDbP4ssw0rdX@db.internal:5432/app"


def _straddling(limit: int, before: str = "upstream said: ") -> str:
    """Text whose credential crosses character ``limit`` (where a raw cut would leave ``...S3cr3tDbP4``)."""
    pad = "x " * ((limit - len(before) - 28) // 2)
    return f"{before}{pad}{DSN} and more text after it"


STRADDLING_CASES = {
    "status body": lambda: (502, {"content-type": "text/plain"}, [_straddling(300).encode()]),
    "not an event stream": lambda: (200, {"content-type": "text/html"}, [_straddling(200).encode()]),
    "stream error event": lambda: (200, {}, [A_START, a_event("error", {"type": "error", "error": {
        "type": "invalid_request_error", "message": _straddling(500)}})]),
    "malformed event": lambda: (200, {}, [A_START, a_event("content_block_delta", {"x": _straddling(200 - len('{"x":"')),
                                                           "type": "content_block_delta", "index": 0,
                                                           "delta": {"type": "text_delta", "text": 5}})]),
    "unreadable arguments": lambda: (200, {}, [A_START, a_tool(1, "toolu_1", "clock", _straddling(200, "{"))]),
    "openai stream error": lambda: (200, {}, [f"data: {dumps({'error': {'type': 'invalid_request_error', 'message': _straddling(500)}})}\n\n".encode()]),
}


@pytest.mark.parametrize("case", STRADDLING_CASES)
def test_provider_text_is_never_cut_inside_a_credential_before_redaction(tmp_path, serve, case):
    """Excerpts of what a server sent (error bodies, error events, bad events) are cut at a word
    boundary: a credential crossing the excerpt's end is left out whole, not cut to a part that
    redaction no longer recognises, in the error, ``run_failed`` and the continuity account."""
    answer = STRADDLING_CASES[case]()
    server = serve(lambda number: answer)
    agent = agent_for(tmp_path, case.split()[0] if case.startswith("openai") else "anthropic", server.url, plugins=[loop_tools([])])
    outcome, events = turn(agent)
    assert isinstance(outcome, ProviderError), outcome
    for shown in (agent.redact(str(outcome), "error"), of(events, "run_failed")[0]["error"], account_of(agent)):
        assert "S3cr3tDb" not in shown, shown
