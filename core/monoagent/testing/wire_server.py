"""The scripted wire server and the request helpers the provider contracts share (part of :mod:`monoagent.testing`).

:class:`WireServer` is a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 that answers each request
with the next queued :class:`Reply`, in the wire format its subclass writes (``frames`` and
``error_body``), and records every request. :func:`contract_request` builds a request with a real
assembled prompt, :func:`collect` reads one stream whole, :func:`expect_error` the
``ProviderError`` a stream ends with. Split from :mod:`monoagent.testing.provider_contract` so
that each contract module stays readable in one sitting; everything here is re-exported there.
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

from monoagent._kernel.errors import ProviderError
from monoagent._kernel.interfaces import ProviderRuntime
from monoagent._kernel.model import (
    Message,
    ProviderEvent,
    ProviderRequest,
    ReasoningBlock,
    Section,
    TextDelta,
    ToolSpec,
    Usage,
)
from monoagent._pipeline.assembly import compile_prompt

__all__ = [
    "DROP", "LOOKUP", "STALL", "RecordedRequest", "Reply", "ScriptedToolCall", "WireServer",
    "cancel_after_first_text", "collect", "collect_text", "contract_request", "expect_error",
]

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
    provider's mid-stream error event after the text, of one of three kinds the server says in its
    wire's words: ``"overloaded"`` and ``"rate_limited"`` (retryable), ``"invalid_request"`` (fatal),
    each with ``error_message`` as its message; ``drop_after`` closes the
    connection abruptly after that many text pieces; ``stall_after`` holds it open after that
    many pieces until the client disconnects. ``raw_frames``, when set, is sent as it is instead
    of :meth:`WireServer.frames` (any iterable of bytes; a generator for a huge stream): for
    hostile answers. ``error_payload``, when set, is the body of an HTTP error answer as it is,
    instead of :meth:`WireServer.error_body` (an error in the wire's words the contract cannot
    script otherwise, such as a context-length error decided by its code). ``refusal_pieces`` is
    a refusal streamed in a field of its own before the text, on wires that have one (Chat
    Completions' ``delta.refusal``).
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
    error_payload: bytes | None = None
    refusal_pieces: tuple[str, ...] = ()


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



async def collect_text(runtime: ProviderRuntime, seen: list[str]) -> None:
    """Consume ``runtime``'s stream of the contract request, appending each text delta to ``seen``.

    ``seen`` keeps what arrived before an error ends the stream, which the mid-stream error and
    stall tests compare.
    """
    async for event in runtime.stream(contract_request()):
        if isinstance(event, TextDelta):
            seen.append(event.text)


async def cancel_after_first_text(runtime: ProviderRuntime, seconds: float) -> tuple[list[str], str]:
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
        self.stalled = threading.Event()
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

    def __exit__(self, *exc: object) -> None:
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
            payload = self.error_body(reply) if reply.error_payload is None else reply.error_payload
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
        """Say the stream stalled with its connection open, block until the peer closes it (recv
        returns b"" or the connection resets), then say so; ``stall_timeout`` passing is no disconnect."""
        connection.settimeout(self.stall_timeout)
        self.stalled.set()
        try:
            while connection.recv(4096):
                pass
        except TimeoutError:
            return
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


async def collect(runtime: ProviderRuntime, request: ProviderRequest) -> list[ProviderEvent]:
    """Every event of one ``runtime.stream(request)``."""
    return [event async for event in runtime.stream(request)]


def expect_error(runtime: ProviderRuntime, request: ProviderRequest) -> ProviderError:
    """The ProviderError one ``runtime.stream(request)`` raises; an AssertionError when it answers instead."""
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
