"""The provider contract as a reusable conformance suite (also importable from :mod:`monoagent.testing`).

A provider runtime proves it honours :class:`~monoagent._kernel.interfaces.ProviderRuntime` by running
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
connection dropped mid-stream, or a stream that stalls until the client goes away
(``server.stalled`` is set once the stream stalls with its connection open, ``server.disconnected``
once the client closed it). It records every request (:class:`RecordedRequest`); it lives in
:mod:`monoagent.testing.wire_server`.

What the contract checks: text deltas arrive in order and join to the full text; split tool-call
arguments assemble into one call; usage is reported; 429 (with ``Retry-After``), 500, 503, 529,
an error event mid-stream and a dropped connection are retryable ``ProviderError`` values, 400
and 401 are fatal, a context-length error is a ``ContextLimitError``; cancelling the consuming
task mid-stream propagates ``CancelledError`` and closes the connection (the server saw it open
mid-answer, then closed); the request carries the tools in the provider's tool interface, exactly
once, and never the cache boundary marker; an event that is not JSON is a one-line
``ProviderError``, and so is a 64 MiB line, refused while it is read (the runtime's memory stays
under 32 MiB). Every documented limit is checked at and either side of its boundary
(:mod:`monoagent.testing.provider_limits_contract`: the longest line, an event's data, an error
body, the retry hints, tool calls per step, argument depth, the retry cap and the bounded
``Retry-After``). Nothing sleeps: the tests synchronise on events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from monoagent._kernel.errors import ContextLimitError, ProviderError
from monoagent._kernel.interfaces import ProviderRuntime
from monoagent._kernel.model import (
    Message,
    ReasoningBlock,
    StepFinished,
    StreamProgress,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
)
from monoagent.testing.provider_limits_contract import ProviderLimitsContract
from monoagent.testing.provider_request_contract import ProviderRequestContract, SentRequest
from monoagent.testing.wire_server import (
    DROP,
    DYNAMIC_TEXT,
    LOOKUP,
    STABLE_TEXT,
    STALL,
    TOOL_DESCRIPTION,
    RecordedRequest,
    Reply,
    ScriptedToolCall,
    WireServer,
    cancel_after_first_text,
    collect,
    collect_text,
    contract_request,
    expect_error,
)

__all__ = [
    "DROP", "LOOKUP", "STALL", "ProviderContract", "RecordedRequest", "Reply", "ScriptedToolCall", "SentRequest", "WireServer",
    "cancel_after_first_text", "collect", "contract_request", "expect_error",
]

# ============================================================================ the contract


class ProviderContract(ProviderLimitsContract, ProviderRequestContract):
    """The conformance tests. Subclass it as ``Test<Name>Contract`` and supply:

    - a ``provider_server`` fixture: a started :class:`WireServer` for the provider's wire format;
    - a ``runtime`` fixture: the runtime under test, pointed at ``provider_server.url``;
    - :meth:`sent_tool_names`: the tool names found in a request body's tool interface.

    ``reports_cache_writes`` says whether the wire format reports cache writes (Anthropic does,
    Chat Completions does not); ``reports_cache_reads`` likewise for cache reads. ``stop_reasons``
    are the harness's stop reasons (Anthropic's words) the wire can say besides ``tool_use``: a
    ``Reply(stop_reason=...)`` the server sends in its own words comes back as that word.

    ``carries_reasoning`` says whether the wire streams reasoning (``Reply.reasoning``): it is
    reported as progress (``StreamProgress(kind="reasoning")``), never as text.

    Optional, each test skipping without it: ``context_limit_messages`` (error messages the
    provider reads as a context-length error on a 400 or 413, never on a 500);
    ``read_timeout_seconds`` (the read timeout the ``runtime`` fixture configured, short: a stall
    past it is a retryable error); ``field_paths`` (the paths an error names when a text piece or
    a tool call's id, name or argument piece has the wrong JSON type); ``malformed_events`` (what
    the error must say -> an event of the wrong shape, in the wire's words, as bytes);
    ``detail_less_error_events`` (error events that carry no message, as bytes);
    ``carries_refusals`` (the wire streams a refusal in a field of its own, ``Reply.refusal_pieces``:
    it reaches the harness as text or counts whole as ``StreamProgress(kind="other")``);
    ``read_on_events`` (how many events after the final one are read so that the connection is
    reused: one more closes it); ``generates_missing_ids`` (the wire may leave a tool call's id
    out: the runtime makes one, unique in the run); ``credential`` (the key the fixture configured: it travels in
    a header, never in the body); :meth:`sent_tool_calls` and :meth:`sent_tool_results` (a
    request body's assistant tool calls and tool results, error marks included). The limits are
    in :class:`~monoagent.testing.provider_limits_contract.ProviderLimitsContract`; what the
    request carries (:meth:`sent_request`, :meth:`sent_assistant_messages`, ``request_path``,
    ``credential_headers``, ``key_names``, ``url_names``, ``context_limit_bodies``,
    ``context_window``, ``configured_output_cap``) in
    :class:`~monoagent.testing.provider_request_contract.ProviderRequestContract`.
    """

    reports_cache_writes = True
    reports_cache_reads = True
    stop_reasons: tuple[str, ...] = ("end_turn", "max_tokens", "refusal")

    carries_reasoning = True
    carries_refusals = False
    field_paths: Mapping[str, str] = MappingProxyType({})
    malformed_events: Mapping[str, bytes] = MappingProxyType({})
    detail_less_error_events: tuple[bytes, ...] = ()
    read_on_events: int | None = None
    generates_missing_ids = False
    context_limit_messages: tuple[str, ...] = ()
    read_timeout_seconds: float | None = None
    credential: str | None = None

    def sent_tool_names(self, body: Any) -> list[str]:
        raise NotImplementedError

    def sent_tool_calls(self, body: Any) -> list[tuple[str, str, Any]]:
        """The assistant tool calls of a request body: ``(id, name, arguments as a dict)`` in order."""
        raise NotImplementedError

    def sent_tool_results(self, body: Any) -> list[tuple[str, str, bool]]:
        """The tool results of a request body: ``(tool call id, the text the model reads without
        any error marker, whether it is marked an error)`` in order."""
        raise NotImplementedError

    # ------------------------------------------------------------------ streaming

    def test_text_deltas_arrive_in_order(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        pieces = ("Hel", "lo, ", "wörld", " — ", "done.")
        provider_server.enqueue(Reply(text_pieces=pieces))
        events = asyncio.run(collect(runtime, contract_request()))
        texts = [e.text for e in events if isinstance(e, TextDelta)]
        assert texts == list(pieces)
        assert "".join(texts) == "Hello, wörld — done."
        assert isinstance(events[-1], StepFinished)
        assert sum(isinstance(e, StepFinished) for e in events) == 1
        assert events[-1].stop_reason == "end_turn"

    def test_split_tool_call_arguments_assemble(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        call = ScriptedToolCall("call_01", "lookup", ('{"wo', 'rd": "caf', 'é", "li', 'mit": 3}'))
        provider_server.enqueue(Reply(text_pieces=("Let me check.",), tool_calls=(call,)))
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
        calls = [e.call for e in events if isinstance(e, ToolCallRequested)]
        assert len(calls) == 1
        assert (calls[0].id, calls[0].name, calls[0].arguments) == ("call_01", "lookup", {"word": "café", "limit": 3})
        assert isinstance(events[-1], StepFinished) and events[-1].stop_reason == "tool_use"

    def test_two_tool_calls_in_one_step(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        calls = (
            ScriptedToolCall("call_a", "lookup", ('{"word":', ' "a"}')),
            ScriptedToolCall("call_b", "lookup", ('{"word": "b"', "}")),
        )
        provider_server.enqueue(Reply(tool_calls=calls))
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
        got = [(e.call.id, e.call.arguments) for e in events if isinstance(e, ToolCallRequested)]
        assert got == [("call_a", {"word": "a"}), ("call_b", {"word": "b"})]

    def test_stop_reasons_keep_their_meaning(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        for stop in self.stop_reasons:
            provider_server.enqueue(Reply(text_pieces=("cut",), stop_reason=stop))
            finished = asyncio.run(collect(runtime, contract_request()))[-1]
            assert isinstance(finished, StepFinished) and finished.stop_reason == stop, (stop, finished)

    def test_usage_is_reported(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        usage = Usage(input_tokens=120, output_tokens=31, cache_read_tokens=900, cache_write_tokens=64)
        provider_server.enqueue(Reply(text_pieces=("ok",), usage=usage))
        finished = asyncio.run(collect(runtime, contract_request()))[-1]
        assert isinstance(finished, StepFinished)
        got = finished.usage
        assert (got.input_tokens, got.output_tokens) == (120, 31)
        assert got.cache_read_tokens == (900 if self.reports_cache_reads else 0)
        assert got.cache_write_tokens == (64 if self.reports_cache_writes else 0)
        provider_server.enqueue(Reply(text_pieces=("ok",), usage=Usage(input_tokens=0, output_tokens=7, cache_read_tokens=50)))
        got = asyncio.run(collect(runtime, contract_request()))[-1].usage  # type: ignore[union-attr]
        assert (got.input_tokens, got.output_tokens) == (0, 7), "a prompt read whole from the cache leaves no input tokens"
        provider_server.enqueue(Reply(text_pieces=("ok",), usage=Usage(input_tokens=30, output_tokens=4)))
        got = asyncio.run(collect(runtime, contract_request()))[-1].usage  # type: ignore[union-attr]
        assert (got.input_tokens, got.output_tokens, got.cache_read_tokens) == (30, 4, 0), "no cache read: all input"

    # ------------------------------------------------------------------ errors

    def test_429_is_retryable_with_retry_after(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.enqueue(Reply(status=429, headers={"retry-after": "7"}, error_message="slow down"))
        error = expect_error(runtime, contract_request())
        assert error.retryable and error.status == 429 and error.retry_after == 7.0
        assert not isinstance(error, ContextLimitError)
        assert "slow down" in str(error) and "\n" not in str(error)

    def test_server_errors_are_retryable(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        for status in (500, 503, 529):
            provider_server.enqueue(Reply(status=status))
            error = expect_error(runtime, contract_request())
            assert error.retryable, status
            assert error.status == status

    def test_client_errors_are_fatal(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        for status in (400, 401, 404):
            provider_server.enqueue(Reply(status=status, error_message=f"bad request {status}"))
            error = expect_error(runtime, contract_request())
            assert not error.retryable, status
            assert error.status == status
            assert not isinstance(error, ContextLimitError)
            assert f"bad request {status}" in str(error)

    def test_context_limit_error(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.enqueue(Reply(status=400, context_limit=True))
        error = expect_error(runtime, contract_request())
        assert isinstance(error, ContextLimitError)
        assert not error.retryable

    def test_error_event_mid_stream_is_retryable(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.enqueue(Reply(text_pieces=("Partial",), stream_error="overloaded", error_message="busy: try again"))
        seen: list[str] = []
        try:
            asyncio.run(collect_text(runtime, seen))
        except ProviderError as exc:
            assert exc.retryable
            assert "busy: try again" in str(exc), f"the error says what the server said: {exc}"
            assert exc.provider and exc.provider in str(exc), f"the error names its provider: {exc}"
        else:
            raise AssertionError("an error event mid-stream did not raise ProviderError")
        assert seen == ["Partial"]

    def test_error_events_mid_stream_say_what_happened(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        for kind, retryable in (("rate_limited", True), ("invalid_request", False)):
            provider_server.enqueue(Reply(text_pieces=("Partial",), stream_error=kind, error_message=f"the {kind} detail"))
            error = expect_error(runtime, contract_request())
            assert error.retryable is retryable, (kind, str(error))
            assert f"the {kind} detail" in str(error) and "\n" not in str(error)
            assert error.provider and error.provider in str(error), f"the error names its provider: {error}"

    def test_tool_argument_bytes_count_as_progress(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        pieces, second = ('{"wo', 'rd": "caf', 'é", "li', 'mit": 3}'), ('{"word": "tea"}',)
        calls = (ScriptedToolCall("call_01", "lookup", pieces), ScriptedToolCall("call_02", "lookup", second))
        provider_server.enqueue(Reply(tool_calls=calls))
        events = asyncio.run(collect(runtime, contract_request(tools=[LOOKUP])))
        arguments = len("".join(pieces + second).encode())
        progress = [e for e in events if isinstance(e, StreamProgress)]
        reported = sum(e.bytes for e in progress if e.kind == "tool_arguments")
        assert arguments <= reported <= arguments + 2 * len("call_01" + "lookup"), f"{reported} bytes of progress for {arguments}"
        assert {e.kind for e in progress} == {"tool_arguments"}, "progress reports only what arrived"
        last_call = max(n for n, e in enumerate(events) if isinstance(e, ToolCallRequested))
        assert all(n < last_call for n, e in enumerate(events) if isinstance(e, StreamProgress)), "progress comes as the pieces do"

    def test_reasoning_is_progress_never_text(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        if not self.carries_reasoning:
            import pytest

            pytest.skip(f"{type(self).__name__}.carries_reasoning is False")
        thought = "Pondering the wörds before answering."
        provider_server.enqueue(Reply(reasoning=(ReasoningBlock("thinking", thought, signature="sig-01"),), text_pieces=("ok",)))
        events = asyncio.run(collect(runtime, contract_request()))
        assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"], "reasoning never arrives as text"
        reported = sum(e.bytes for e in events if isinstance(e, StreamProgress) and e.kind == "reasoning")
        assert reported >= len(thought.encode()), f"{reported} bytes of reasoning progress for {len(thought.encode())}"
        assert not [e for e in events if isinstance(e, StreamProgress) and e.kind != "reasoning"]

    def test_a_refusal_is_text_or_progress(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """A refusal in its own field is never dropped uncounted: it is the answer's text, or output
        not passed on that counts as ``StreamProgress(kind="other")``, every byte of it."""
        if not self.carries_refusals:
            import pytest

            pytest.skip(f"{type(self).__name__}.carries_refusals is False")
        pieces = ("Je ne peux pas aider ", "avec cette requête.")
        provider_server.enqueue(Reply(refusal_pieces=pieces, stop_reason="end_turn"))
        events = asyncio.run(collect(runtime, contract_request()))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        other = sum(e.bytes for e in events if isinstance(e, StreamProgress) and e.kind == "other")
        refusal = "".join(pieces)
        assert text == refusal or (text == "" and other >= len(refusal.encode())), (text, other)
        assert isinstance(events[-1], StepFinished)

    def test_dropped_connection_is_retryable(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.enqueue(Reply(text_pieces=("one", "two", "three"), drop_after=1))
        error = expect_error(runtime, contract_request())
        assert error.retryable
        assert error.status is None

    def test_refused_connection_is_one_line(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.stop()
        error = expect_error(runtime, contract_request())
        assert isinstance(error, ProviderError), error
        assert "\n" not in str(error)
        assert "127.0.0.1" in str(error)  # the URL to check
        assert error.provider and error.provider in str(error)  # and the provider, by name

    # ------------------------------------------------------------------ hostile answers

    def test_an_event_that_is_not_json_is_a_provider_error(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.enqueue(Reply(raw_frames=(b"data: {not json\n\n",)))
        error = expect_error(runtime, contract_request())
        assert "\n" not in str(error)
        assert error.code == "malformed_event" and not error.retryable, str(error)

    def test_a_field_of_the_wrong_type_is_named(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """The server's own frames with one value swapped for another JSON type (a text piece, a tool
        call's id, name or argument piece): the error is a ``malformed_event`` naming the field by
        its path in ``field_paths`` (keys ``text``, ``tool_id``, ``tool_name``, ``tool_arguments``;
        a key left out skips that case)."""
        call = ScriptedToolCall
        cases = {
            "text": (Reply(text_pieces=("MARKER",)), b"12345", "a number"),
            "tool_id": (Reply(tool_calls=(call("MARKER", "lookup", ("{}",)),)), b"12345", "a number"),
            "tool_name": (Reply(tool_calls=(call("call_1", "MARKER", ("{}",)),)), b'["lookup"]', "an array"),
            "tool_arguments": (Reply(tool_calls=(call("call_1", "lookup", ("MARKER",)),)), b'{"word": 1}', "an object"),
        }
        played = [(path, *cases[key]) for key, path in self.field_paths.items()]
        if not played:
            import pytest

            pytest.skip(f"{type(self).__name__}.field_paths names no field")
        for path, reply, swapped, kind in played:
            frames: list[Any] = [f.replace(b'"MARKER"', swapped) if isinstance(f, bytes) else f for f in provider_server.frames(reply)]
            provider_server.enqueue(Reply(raw_frames=frames))
            error = expect_error(runtime, contract_request(tools=[LOOKUP]))
            assert error.code == "malformed_event" and not error.retryable, str(error)
            assert f"{path} is {kind}" in str(error) and "\n" not in str(error), str(error)

    def test_malformed_events_name_what_is_wrong(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """Each event of ``malformed_events`` alone is a ``malformed_event`` error saying what its key says."""
        if not self.malformed_events:
            import pytest

            pytest.skip(f"{type(self).__name__}.malformed_events is empty")
        for says, event in self.malformed_events.items():
            provider_server.enqueue(Reply(raw_frames=(event,)))
            error = expect_error(runtime, contract_request(tools=[LOOKUP]))
            assert error.code == "malformed_event" and not error.retryable, str(error)
            assert says in str(error) and "\n" not in str(error), (says, str(error))

    def test_an_error_event_without_a_message_is_still_one_line(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        if not self.detail_less_error_events:
            import pytest

            pytest.skip(f"{type(self).__name__}.detail_less_error_events is empty")
        for event in self.detail_less_error_events:
            provider_server.enqueue(Reply(raw_frames=(event,)))
            error = expect_error(runtime, contract_request())
            assert "\n" not in str(error) and error.provider and error.provider in str(error), str(error)

    def test_a_stream_that_ends_before_its_last_event_is_retryable(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """The body ends cleanly after a text piece, with no final event: a retryable error (as a dropped connection is)."""
        frames = [f for f in provider_server.frames(Reply(text_pieces=("Partial", "never"))) if isinstance(f, bytes)]
        cut = next(n for n, frame in enumerate(frames) if b"Partial" in frame)
        provider_server.enqueue(Reply(raw_frames=frames[: cut + 1]))
        seen: list[str] = []
        try:
            asyncio.run(collect_text(runtime, seen))
        except ProviderError as exc:
            assert exc.retryable and exc.status is None and "\n" not in str(exc), str(exc)
        else:
            raise AssertionError("a stream that ended before its last event answered")
        assert seen == ["Partial"]

    def test_events_after_the_final_one_are_never_the_answer(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        """After the final event, ``read_on_events`` more are read (never as answer) so that the next
        request reuses the connection; one more and the connection is closed instead, the answer whole."""
        if self.read_on_events is None:
            import pytest

            pytest.skip(f"{type(self).__name__}.read_on_events is None")
        late = next(f for f in provider_server.frames(Reply(text_pieces=("LATE",))) if isinstance(f, bytes) and b"LATE" in f)
        answer = [f for f in provider_server.frames(Reply(text_pieces=("on time",))) if isinstance(f, bytes)]

        async def two_requests() -> tuple[list[Any], list[Any]]:  # one event loop: one connection pool
            return await collect(runtime, contract_request()), await collect(runtime, contract_request())

        for extra, reused in ((self.read_on_events, True), (self.read_on_events + 1, False)):
            provider_server.enqueue(Reply(raw_frames=[*answer, *[late] * extra]), Reply(text_pieces=("next",)))
            first, second = asyncio.run(two_requests())
            assert [e.text for e in first if isinstance(e, TextDelta)] == ["on time"], extra
            assert isinstance(first[-1], StepFinished) and first[-1].stop_reason == "end_turn", extra
            assert [e.text for e in second if isinstance(e, TextDelta)] == ["next"]
            before, after = provider_server.requests[-2:]
            assert (before.peer == after.peer) is reused, f"{extra} events after the final one: connection reused {not reused}"

    def test_calls_without_an_id_get_ids_unique_in_the_run(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        if not self.generates_missing_ids:
            import pytest

            pytest.skip(f"{type(self).__name__}.generates_missing_ids is False")
        calls = (ScriptedToolCall("", "lookup", ('{"word": "a"}',)), ScriptedToolCall("", "lookup", ('{"word": "b"}',)))
        ids: list[str] = []
        for step in (1, 2):
            provider_server.enqueue(Reply(tool_calls=calls))
            request = attrs.evolve(contract_request(tools=[LOOKUP]), step=step)
            found = [e.call for e in asyncio.run(collect(runtime, request)) if isinstance(e, ToolCallRequested)]
            assert [c.arguments for c in found] == [{"word": "a"}, {"word": "b"}]
            ids += [c.id for c in found]
        assert all(ids) and len(set(ids)) == 4, f"ids made for calls sent without one must differ across the run: {ids}"

    def test_a_giant_line_is_refused_while_it_is_read(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        import itertools
        import tracemalloc

        provider_server.enqueue(Reply(text_pieces=("warm",)))
        asyncio.run(collect(runtime, contract_request()))  # first-use imports are not the line's cost
        line = itertools.chain([b'data: {"text": "'], itertools.repeat(b"A" * 65536, 1024))  # 64 MiB, no line end
        provider_server.enqueue(Reply(raw_frames=line))
        tracemalloc.start()
        try:
            error = expect_error(runtime, contract_request())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert "\n" not in str(error)
        assert peak < 32 * 1024 * 1024, f"reading one 64 MiB line took {peak:,} bytes of memory"

    # ------------------------------------------------------------------ cancellation

    def test_cancellation_closes_the_connection(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        provider_server.enqueue(Reply(text_pieces=("first", "never sent"), stall_after=1))

        seen, outcome = asyncio.run(cancel_after_first_text(runtime, 10))
        assert seen == ["first"]
        assert outcome == "cancelled", "the stream swallowed the cancellation"
        assert provider_server.stalled.wait(10), "the server never held the stream open mid-answer"
        assert provider_server.disconnected.wait(10), "the server saw the stream open mid-answer, and never saw the client close it"

    def test_context_limit_messages_are_context_limits(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        if not self.context_limit_messages:
            import pytest

            pytest.skip(f"{type(self).__name__}.context_limit_messages is empty")
        for message in self.context_limit_messages:
            for status in (400, 413):
                provider_server.enqueue(Reply(status=status, error_message=message))
                error = expect_error(runtime, contract_request())
                assert isinstance(error, ContextLimitError) and not error.retryable, (status, message, error)
            provider_server.enqueue(Reply(status=500, error_message=message))
            error = expect_error(runtime, contract_request())
            assert not isinstance(error, ContextLimitError) and error.retryable, f"a 500 is a server error, whatever it says: {error}"

    def test_a_stall_past_the_read_timeout_is_retryable(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        if self.read_timeout_seconds is None:
            import pytest

            pytest.skip(f"{type(self).__name__}.read_timeout_seconds is None: the runtime's read timeout is not configured short")
        provider_server.stall_timeout = self.read_timeout_seconds * 40  # the server outlasts the wait: only the timeout ends it
        provider_server.enqueue(Reply(text_pieces=("first", "never sent"), stall_after=1))
        seen: list[str] = []
        try:
            asyncio.run(asyncio.wait_for(collect_text(runtime, seen), self.read_timeout_seconds * 20))
        except ProviderError as exc:
            assert exc.retryable and exc.status is None, str(exc)
        else:
            raise AssertionError("a stream that stalled answered")
        assert seen == ["first"] and provider_server.stalled.is_set()

    # ------------------------------------------------------------------ the request

    def test_the_credential_travels_in_a_header(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        if self.credential is None:
            import pytest

            pytest.skip(f"{type(self).__name__}.credential is None: the runtime is configured without one")
        provider_server.enqueue(Reply(text_pieces=("ok",)))
        asyncio.run(collect(runtime, contract_request()))
        sent = provider_server.last_request
        assert any(self.credential in value for value in sent.headers.values()), "the configured key is sent in a header"
        assert self.credential not in sent.body.decode("utf-8"), "and never in the body"

    def test_a_tool_exchange_travels_whole(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
        calls = (ToolCall("call_prev_1", "lookup", {"word": "café", "limit": 2}), ToolCall("call_prev_2", "lookup", {"word": "tea"}))
        messages = (
            Message("user", "Look two words up"),
            Message("assistant", "Looking.", tool_calls=calls),
            Message("tool", "a coffee house", tool_call_id="call_prev_1"),
            Message("tool", "lookup failed: no such word", tool_call_id="call_prev_2", is_error=True),
        )
        provider_server.enqueue(Reply(text_pieces=("ok",)))
        asyncio.run(collect(runtime, contract_request(messages=messages, tools=[LOOKUP])))
        body = provider_server.last_request.json
        try:
            sent_calls, sent_results = self.sent_tool_calls(body), self.sent_tool_results(body)
        except NotImplementedError:
            import pytest

            pytest.skip(f"{type(self).__name__} implements no sent_tool_calls / sent_tool_results")
        assert sent_calls == [(c.id, c.name, c.arguments) for c in calls]
        assert sent_results == [("call_prev_1", "a coffee house", False), ("call_prev_2", "lookup failed: no such word", True)]


    def test_request_carries_tools_and_never_the_boundary(self, provider_server: WireServer, runtime: ProviderRuntime) -> None:
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
