"""The provider contract as a reusable conformance suite (also importable from :mod:`monoagent.testing`).

A provider runtime proves it honours :class:`~monoagent.kernel.interfaces.ProviderRuntime` by running
these tests against a scripted local server that speaks its wire format. A third-party provider's
test module subclasses :class:`ProviderContract` and supplies two fixtures and one method::

    import pytest
    from monoagent.testing import ProviderContract, WireServer

    class MyLabServer(WireServer):
        def frames(self, reply): ...          # the SSE bytes of a successful answer
        def error_body(self, reply): ...      # the JSON body of an HTTP error answer

    class TestMyLabContract(ProviderContract):
        @pytest.fixture
        def provider_server(self):
            with MyLabServer() as server:
                yield server

        @pytest.fixture
        def runtime(self, provider_server):
            return MyLabRuntime("model-x", base_url=provider_server.url)

        def sent_tool_names(self, body):
            return [tool["name"] for tool in body.get("tools", [])]

The server (:class:`WireServer`, stdlib ``ThreadingHTTPServer`` on 127.0.0.1, port 0) answers
each request with the next queued :class:`Reply`: streamed text pieces, tool calls whose argument
JSON arrives in pieces, usage, an HTTP error status with headers, an error event mid-stream, a
connection dropped mid-stream, or a stream that stalls until the client goes away (which sets
``server.disconnected``). It records every request (:class:`RecordedRequest`).

What the contract checks: text deltas arrive in order and join to the full text; split tool-call
arguments assemble into one call; usage is reported; 429 (with ``Retry-After``), 500, 503, 529,
an error event mid-stream and a dropped connection are retryable ``ProviderError`` values, 400
and 401 are fatal, a context-length error is a ``ContextLimitError``; cancelling the consuming
task mid-stream propagates ``CancelledError`` and closes the connection (the server sees it); the
request carries the tools in the provider's tool interface, exactly once, and never the cache
boundary marker; an event that is not JSON is a one-line ``ProviderError``, and so is a 64 MiB
line, refused while it is read (the runtime's memory stays under 32 MiB). Nothing sleeps: the
tests synchronise on events.
"""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from monoagent.kernel.errors import ContextLimitError, ProviderError
from monoagent.kernel.model import (
    Message,
    ProviderEvent,
    ProviderRequest,
    ReasoningBlock,
    Section,
    StepFinished,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
    Usage,
)
from monoagent.pipeline.assembly import compile_prompt

__all__ = ["DROP", "STALL", "ProviderContract", "RecordedRequest", "Reply", "ScriptedToolCall", "WireServer", "collect", "contract_request"]

DROP = object()
"""A frame marker: close the connection abruptly here (no end of the chunked body)."""

STALL = object()
"""A frame marker: stop sending and hold the connection until the client closes it."""

STABLE_TEXT = "You are a careful assistant. This stable text is cached."
DYNAMIC_TEXT = "Current time: 2026-01-01 12:00 UTC. This dynamic text changes per turn."
TOOL_DESCRIPTION = "Look a word up in the contract dictionary (a distinctive description)."


@attrs.frozen
class ScriptedToolCall:
    """A tool call the server streams: its argument JSON is sent in ``argument_pieces``."""

    id: str
    name: str
    argument_pieces: tuple[str, ...]


@attrs.frozen
class Reply:
    """What the scripted server answers to one request.

    A successful answer streams ``reasoning`` (on wires that carry it), then ``text_pieces``, then
    ``tool_calls``, then ``usage``. ``status``
    of 400 or more answers with that status, ``headers`` and :meth:`WireServer.error_body` instead
    (``context_limit`` makes it the provider's context-length error). ``stream_error`` sends the
    provider's mid-stream error event (``"overloaded"``) after the text; ``drop_after`` closes the
    connection abruptly after that many text pieces; ``stall_after`` holds it open after that
    many pieces until the client disconnects. ``raw_frames``, when set, is sent as it is instead
    of :meth:`WireServer.frames` (any iterable of bytes; a generator for a huge stream): for
    hostile answers.
    """

    text_pieces: tuple[str, ...] = ()
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    usage: Usage = Usage(input_tokens=12, output_tokens=5)
    stop_reason: str | None = None
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)
    error_message: str = "scripted error"
    context_limit: bool = False
    stream_error: str | None = None
    drop_after: int | None = None
    stall_after: int | None = None
    model: str = "model-x"
    raw_frames: Iterable[bytes] | None = None
    reasoning: tuple[ReasoningBlock, ...] = ()


@attrs.frozen
class RecordedRequest:
    """One request the server received: method, path, lower-cased headers, raw body, client address."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    peer: tuple[str, int] | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.body)



async def cancel_after_first_text(runtime: Any, seconds: float) -> tuple[list[str], str]:
    """Consume ``runtime``'s stream in a task, cancel it once the first text arrived; the texts seen and the outcome.

    The outcome is ``"cancelled"`` when the cancellation came out of the stream as ``CancelledError``
    within ``seconds``, else a sentence saying what happened instead (it ended normally, it raised,
    it was still running). Shared by the wire contract and the runtime contract.
    """
    seen: list[str] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for event in runtime.stream(contract_request()):
            if isinstance(event, TextDelta):
                seen.append(event.text)
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), seconds)
    task.cancel()
    outcome = "ended normally"
    try:
        await asyncio.wait_for(asyncio.shield(task), seconds)
    except asyncio.CancelledError:
        outcome = "cancelled"
    except TimeoutError:
        outcome = f"still running {seconds} s after the cancel"
    except Exception as exc:
        outcome = f"raised {type(exc).__name__}: {exc}"
    return seen, outcome

class WireServer:
    """A scripted HTTP server on 127.0.0.1 speaking one provider's streaming wire format.

    Subclasses implement :meth:`frames` (the SSE byte frames of a successful answer, with
    :data:`DROP` or :data:`STALL` markers where the reply asks for them; :meth:`cut` places
    them) and :meth:`error_body`. Use it as a context manager, or call :meth:`start` and
    :meth:`stop`. ``url`` is ``http://127.0.0.1:<port>``.
    """

    content_type = "text/event-stream"

    def __init__(self) -> None:
        self.replies: queue.Queue[Reply] = queue.Queue()
        self.requests: list[RecordedRequest] = []
        self.disconnected = threading.Event()
        self.errors: list[BaseException | None] = []
        self.stall_timeout = 30.0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ what subclasses write

    def frames(self, reply: Reply) -> Iterator[bytes | object]:
        raise NotImplementedError

    def error_body(self, reply: Reply) -> bytes:
        raise NotImplementedError

    def cut(self, reply: Reply, sent_pieces: int) -> list[object]:
        """``[DROP]`` or ``[STALL]`` when the reply cuts the stream after ``sent_pieces`` pieces."""
        if reply.drop_after == sent_pieces:
            return [DROP]
        if reply.stall_after == sent_pieces:
            return [STALL]
        return []

    # ------------------------------------------------------------------ control

    def enqueue(self, *replies: Reply) -> None:
        for reply in replies:
            self.replies.put(reply)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def last_request(self) -> RecordedRequest:
        return self.requests[-1]

    def start(self) -> WireServer:
        from http.server import ThreadingHTTPServer

        errors = self.errors

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                errors.append(sys.exc_info()[1])  # kept for inspection, not printed: clients here go away on purpose

        self._server = Server(("127.0.0.1", 0), _handler_class(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="wire-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ serving

    def next_reply(self) -> Reply:
        """The reply to the request just recorded: the next queued one, else an HTTP 500.

        Override it to answer every request alike (a server that always calls a tool).
        """
        try:
            return self.replies.get_nowait()
        except queue.Empty:
            return Reply(status=500, error_message="the scripted server has no reply queued")

    def _serve(self, handler: Any) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        self.requests.append(RecordedRequest(handler.command, handler.path, headers, body, tuple(handler.client_address[:2])))
        reply = self.next_reply()
        if reply.status >= 400:
            payload = self.error_body(reply)
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
            handler.wfile.flush()
            return
        handler.send_response(200)
        handler.send_header("content-type", self.content_type)
        handler.send_header("cache-control", "no-cache")
        handler.send_header("transfer-encoding", "chunked")
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        for frame in self.frames(reply) if reply.raw_frames is None else reply.raw_frames:
            if frame is DROP:
                handler.close_connection = True
                handler.wfile.flush()
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            if frame is STALL:
                handler.close_connection = True
                handler.wfile.flush()
                self._await_disconnect(handler.connection)
                return
            assert isinstance(frame, bytes)
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _await_disconnect(self, connection: socket.socket) -> None:
        """Block until the peer closes the connection (recv returns b"" or fails), then say so."""
        connection.settimeout(self.stall_timeout)
        try:
            while connection.recv(4096):
                pass
        except OSError:
            pass
        self.disconnected.set()


def _handler_class(server: WireServer) -> type:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            try:
                server._serve(self)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


# ============================================================================ helpers


def contract_request(
    messages: Sequence[Message] = (Message("user", "Hello there"),),
    tools: Sequence[ToolSpec] = (),
    model: str = "model-x",
) -> ProviderRequest:
    """A ProviderRequest with a real assembled prompt: stable and dynamic text around the boundary."""
    sections = [
        Section("core_guardrails", STABLE_TEXT, 100, "stable", "contract"),
        Section("runtime_facts", DYNAMIC_TEXT, 800, "dynamic", "contract"),
    ]
    prompt = compile_prompt(sections, list(messages))
    return ProviderRequest(model=model, prompt=prompt, messages=tuple(messages), tools=tuple(tools))


async def collect(runtime: Any, request: ProviderRequest) -> list[ProviderEvent]:
    """Every event of one ``runtime.stream(request)``."""
    return [event async for event in runtime.stream(request)]


def _error(runtime: Any, request: ProviderRequest) -> ProviderError:
    try:
        asyncio.run(collect(runtime, request))
    except ProviderError as exc:
        return exc
    raise AssertionError("the runtime answered where the scripted server sent an error")


LOOKUP = ToolSpec(
    "lookup",
    TOOL_DESCRIPTION,
    {"type": "object", "properties": {"word": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["word"]},
)


# ============================================================================ the contract


class ProviderContract:
    """The conformance tests. Subclass it as ``Test<Name>Contract`` and supply:

    - a ``provider_server`` fixture: a started :class:`WireServer` for the provider's wire format;
    - a ``runtime`` fixture: the runtime under test, pointed at ``provider_server.url``;
    - :meth:`sent_tool_names`: the tool names found in a request body's tool interface.

    ``reports_cache_writes`` says whether the wire format reports cache writes (Anthropic does,
    Chat Completions does not); ``reports_cache_reads`` likewise for cache reads.
    """

    reports_cache_writes = True
    reports_cache_reads = True

    def sent_tool_names(self, body: Any) -> list[str]:
        raise NotImplementedError

    # ------------------------------------------------------------------ streaming

    def test_text_deltas_arrive_in_order(self, provider_server: WireServer, runtime: Any) -> None:
        pieces = ("Hel", "lo, ", "wörld", " — ", "done.")
        provider_server.enqueue(Reply(text_pieces=pieces))
        events = asyncio.run(collect(runtime, contract_request()))
        texts = [e.text for e in events if isinstance(e, TextDelta)]
        assert texts == list(pieces)
        assert "".join(texts) == "Hello, wörld — done."
        assert isinstance(events[-1], StepFinished)
        assert sum(isinstance(e, StepFinished) for e in events) == 1
        assert events[-1].stop_reason == "end_turn"

    def test_split_tool_call_arguments_assemble(self, provider_server: WireServer, runtime: Any) -> None:
        call = ScriptedToolCall("call_01", "lookup", ('{"wo', 'rd": "caf', 'é", "li', 'mit": 3}'))
        provider_server.enqueue(Reply(text_pieces=("Let me check.",), tool_calls=(call,)))
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
        calls = [e.call for e in events if isinstance(e, ToolCallRequested)]
        assert len(calls) == 1
        assert (calls[0].id, calls[0].name, calls[0].arguments) == ("call_01", "lookup", {"word": "café", "limit": 3})
        assert isinstance(events[-1], StepFinished) and events[-1].stop_reason == "tool_use"

    def test_two_tool_calls_in_one_step(self, provider_server: WireServer, runtime: Any) -> None:
        calls = (
            ScriptedToolCall("call_a", "lookup", ('{"word":', ' "a"}')),
            ScriptedToolCall("call_b", "lookup", ('{"word": "b"', "}")),
        )
        provider_server.enqueue(Reply(tool_calls=calls))
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
        got = [(e.call.id, e.call.arguments) for e in events if isinstance(e, ToolCallRequested)]
        assert got == [("call_a", {"word": "a"}), ("call_b", {"word": "b"})]

    def test_usage_is_reported(self, provider_server: WireServer, runtime: Any) -> None:
        usage = Usage(input_tokens=120, output_tokens=31, cache_read_tokens=900, cache_write_tokens=64)
        provider_server.enqueue(Reply(text_pieces=("ok",), usage=usage))
        finished = asyncio.run(collect(runtime, contract_request()))[-1]
        assert isinstance(finished, StepFinished)
        got = finished.usage
        assert (got.input_tokens, got.output_tokens) == (120, 31)
        assert got.cache_read_tokens == (900 if self.reports_cache_reads else 0)
        assert got.cache_write_tokens == (64 if self.reports_cache_writes else 0)

    # ------------------------------------------------------------------ errors

    def test_429_is_retryable_with_retry_after(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(status=429, headers={"retry-after": "7"}, error_message="slow down"))
        error = _error(runtime, contract_request())
        assert error.retryable and error.status == 429 and error.retry_after == 7.0
        assert not isinstance(error, ContextLimitError)
        assert "slow down" in str(error) and "\n" not in str(error)

    def test_server_errors_are_retryable(self, provider_server: WireServer, runtime: Any) -> None:
        for status in (500, 503, 529):
            provider_server.enqueue(Reply(status=status))
            error = _error(runtime, contract_request())
            assert error.retryable, status
            assert error.status == status

    def test_client_errors_are_fatal(self, provider_server: WireServer, runtime: Any) -> None:
        for status in (400, 401, 404):
            provider_server.enqueue(Reply(status=status, error_message=f"bad request {status}"))
            error = _error(runtime, contract_request())
            assert not error.retryable, status
            assert error.status == status
            assert not isinstance(error, ContextLimitError)
            assert f"bad request {status}" in str(error)

    def test_context_limit_error(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(status=400, context_limit=True))
        error = _error(runtime, contract_request())
        assert isinstance(error, ContextLimitError)
        assert not error.retryable

    def test_error_event_mid_stream_is_retryable(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(text_pieces=("Partial",), stream_error="overloaded"))
        seen: list[str] = []

        async def consume() -> None:
            async for event in runtime.stream(contract_request()):
                if isinstance(event, TextDelta):
                    seen.append(event.text)

        try:
            asyncio.run(consume())
        except ProviderError as exc:
            assert exc.retryable
        else:
            raise AssertionError("an error event mid-stream did not raise ProviderError")
        assert seen == ["Partial"]

    def test_dropped_connection_is_retryable(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(text_pieces=("one", "two", "three"), drop_after=1))
        error = _error(runtime, contract_request())
        assert error.retryable
        assert error.status is None

    def test_refused_connection_is_one_line(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.stop()
        error = _error(runtime, contract_request())
        assert isinstance(error, ProviderError), error
        assert "\n" not in str(error)
        assert "127.0.0.1" in str(error)  # the URL to check
        assert error.provider and error.provider in str(error)  # and the provider, by name

    # ------------------------------------------------------------------ hostile answers

    def test_an_event_that_is_not_json_is_a_provider_error(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(raw_frames=(b"data: {not json\n\n",)))
        error = _error(runtime, contract_request())
        assert "\n" not in str(error)

    def test_a_giant_line_is_refused_while_it_is_read(self, provider_server: WireServer, runtime: Any) -> None:
        import itertools
        import tracemalloc

        provider_server.enqueue(Reply(text_pieces=("warm",)))
        asyncio.run(collect(runtime, contract_request()))  # first-use imports are not the line's cost
        line = itertools.chain([b'data: {"text": "'], itertools.repeat(b"A" * 65536, 1024))  # 64 MiB, no line end
        provider_server.enqueue(Reply(raw_frames=line))
        tracemalloc.start()
        try:
            error = _error(runtime, contract_request())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert "\n" not in str(error)
        assert peak < 32 * 1024 * 1024, f"reading one 64 MiB line took {peak:,} bytes of memory"

    # ------------------------------------------------------------------ cancellation

    def test_cancellation_closes_the_connection(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(text_pieces=("first", "never sent"), stall_after=1))

        seen, outcome = asyncio.run(cancel_after_first_text(runtime, 10))
        assert seen == ["first"]
        assert outcome == "cancelled", "the stream swallowed the cancellation"
        assert provider_server.disconnected.wait(10), "the server never saw the client disconnect"

    # ------------------------------------------------------------------ the request

    def test_request_carries_tools_and_never_the_boundary(self, provider_server: WireServer, runtime: Any) -> None:
        provider_server.enqueue(Reply(text_pieces=("ok",)))
        request = contract_request(tools=[LOOKUP])
        asyncio.run(collect(runtime, request))
        sent = provider_server.last_request
        text = sent.body.decode("utf-8")
        assert request.prompt.boundary not in text
        assert self.sent_tool_names(sent.json) == ["lookup"]
        assert text.count(json.dumps(TOOL_DESCRIPTION)[1:-1]) == 1, "the tool description must travel once, in the tool interface"
        assert json.dumps(STABLE_TEXT)[1:-1] in text and json.dumps(DYNAMIC_TEXT)[1:-1] in text
        assert "Hello there" in text
