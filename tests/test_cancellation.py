"""Cancellation: run handles, Agent.cancel, the settle window, quarantine, config errors before admission.

The providers here ignore cancellation on purpose: an in-process runtime that swallows
``CancelledError`` and keeps waiting, and a runtime that waits, in a thread of its own, on a
real local HTTP server that never answers until the test releases it. The caller must be
released before the provider is; the figures printed (``-s``) are the measured release times.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request

import pytest
from chat_pty import Terminal, needs_pty
from waiting import until

from monoagent._kernel.errors import ConfigError, ProviderError
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.model import StepFinished, TextDelta, ToolCall, ToolCallRequested, ToolSpec
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.continuity_account import ACCOUNT_HEADER
from monoagent.testing import fresh_agent


class Stubborn:
    """A runtime that swallows every cancellation and streams on once released.

    A request whose user message contains ``quick`` is answered at once; any other streams
    ``partial``, then waits for ``release`` (catching and ignoring ``CancelledError``), then streams
    ``LATE`` and asks for a tool call.
    """

    name = "stubborn"
    context_window = 100_000

    def __init__(self):
        self.started = asyncio.Event()
        self.swallowed = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = asyncio.Event()
        self.prompts = []

    async def stream(self, request):
        self.prompts.append(request)
        if "quick" in request.messages[-1].content:
            yield TextDelta("quick answer")
            yield StepFinished()
            return
        yield TextDelta("partial ")
        self.started.set()
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.swallowed.set()
        yield TextDelta("LATE")
        yield ToolCallRequested(ToolCall("late1", "lookup", {"q": "x"}))
        self.finished.set()
        yield StepFinished()


class SilentServer:
    """A real HTTP server on 127.0.0.1 that reads a request and answers only once ``release`` is set."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.accepted = threading.Event()
        self.release = threading.Event()
        self.answered = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/"

    def _serve(self):
        connection, _ = self.listener.accept()
        with connection:
            connection.recv(65536)
            self.accepted.set()
            self.release.wait()
            connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\nlate reply")
            self.answered.set()

    def close(self):
        self.release.set()
        self.listener.close()


class ThreadBound:
    """A runtime that posts to a URL from a thread of its own and ignores cancellation while it waits."""

    name = "threadbound"
    context_window = 100_000

    def __init__(self, url):
        self.url = url
        self.ignored = 0

    async def stream(self, request):
        loop = asyncio.get_running_loop()
        if "quick" in request.messages[-1].content:
            yield TextDelta("quick answer")
            yield StepFinished()
            return
        reply = loop.create_future()

        def post():
            body = urllib.request.urlopen(self.url, data=b"{}", timeout=60).read().decode()
            loop.call_soon_threadsafe(lambda: reply.done() or reply.set_result(body))

        threading.Thread(target=post, daemon=True).start()
        while True:
            try:
                body = await asyncio.shield(reply)
                break
            except asyncio.CancelledError:
                self.ignored += 1
        yield TextDelta(body)
        yield StepFinished()


class Fixture:
    def __init__(self, runtime):
        self.runtime = runtime
        self.tool_runs = 0
        self.observed = []

    @hookimpl
    def register_providers(self, register):
        register(self.runtime.name, lambda agent, model: self.runtime)

    @hookimpl
    def register_tools(self, register):
        def lookup(context):
            self.tool_runs += 1
            return "found"

        register(ToolSpec("lookup", "Look something up."), lookup)

    @hookimpl
    def on_run_event(self, event, agent):
        self.observed.append(event)


def make_agent(tmp_path, runtime, *, window_ms=1000, config=None):
    fixture = Fixture(runtime)
    settings = {"runtime": {"model": f"{runtime.name}:x"}, "providers": {"client": {"maxRetries": 0}}}
    settings.update(config or {})
    agent = fresh_agent(tmp_path, config=settings, plugins=[fixture], terminal_recovery_settlement_ms=window_ms)
    return agent, fixture


def load(agent, conversation="c"):
    return asyncio.run(agent.history_store.load(conversation))


def report(what, seconds):
    print(f"\n{what}: caller released {seconds * 1000:.2f} ms after cancel()")


# --------------------------------------------------------------------------- the caller is released at once


def test_a_runtime_that_swallows_cancellation_releases_the_caller_before_it_stops(tmp_path):
    runtime = Stubborn()
    agent, fixture = make_agent(tmp_path, runtime, window_ms=60_000)

    async def main():
        events = []
        handle = agent.submit(TurnRequest("long job", conversation_id="c"), on_event=events.append)
        await runtime.started.wait()
        started = time.monotonic()
        assert handle.cancel("user_cancelled") is True
        with pytest.raises(asyncio.CancelledError):
            await handle
        released = time.monotonic() - started
        assert handle.done() and handle.cancelled() and not runtime.release.is_set()
        await runtime.swallowed.wait()  # the runtime did get the cancellation, and ignored it
        assert not handle.cancel()  # already settled for the caller
        runtime.release.set()  # now the runtime streams on: LATE text and a tool call
        await handle.settled()
        return events, released, handle.run_id

    events, released, run_id = asyncio.run(main())
    report("in-process runtime swallowing CancelledError", released)
    assert runtime.finished.is_set()
    user, account = load(agent)
    assert user.content == "long job" and account.content.startswith(ACCOUNT_HEADER)
    assert "partial" in account.content and "LATE" not in account.content
    assert "Status: cancelled (reason: user_cancelled)" in account.content
    assert fixture.tool_runs == 0  # the late tool call was never run
    for seen in (events, fixture.observed):
        assert all("LATE" not in str(e.data) for e in seen)
        assert [e.type for e in seen][-2:] == ["continuity_account", "run_cancelled"]
        assert {e.run_id for e in seen} == {run_id}
    agent.close()


def test_a_provider_waiting_on_a_server_that_never_answers_releases_the_caller(tmp_path):
    server = SilentServer()
    runtime = ThreadBound(server.url)
    agent, _fixture = make_agent(tmp_path, runtime, window_ms=60_000)

    async def main():
        handle = agent.submit(TurnRequest("ask the server", conversation_id="c"))
        await asyncio.to_thread(server.accepted.wait)
        started = time.monotonic()
        handle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handle
        released = time.monotonic() - started
        assert not server.release.is_set() and not server.answered.is_set()
        other = await agent.respond(TurnRequest("quick one", conversation_id="other"))  # another conversation runs
        assert other.text == "quick answer" and not server.answered.is_set()
        server.release.set()
        await handle.settled()  # the account waited for the provider, well within its 60 s window
        return released

    try:
        released = asyncio.run(main())
    finally:
        server.close()
    report("runtime blocked on a silent local server", released)
    assert runtime.ignored >= 1
    user, account = load(agent)
    assert user.content == "ask the server" and account.content.startswith(ACCOUNT_HEADER)
    assert "late reply" not in account.content
    agent.close()


def test_a_cancel_frees_the_execution_slot_for_other_conversations(tmp_path):
    runtime = Stubborn()
    agent, _fixture = make_agent(tmp_path, runtime, window_ms=60_000, config={"concurrency": {"maxConcurrentRuns": 1}})

    async def main():
        stuck = agent.submit(TurnRequest("long job", conversation_id="a"))
        await runtime.started.wait()
        waiting = agent.submit(TurnRequest("quick question", conversation_id="b"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()  # the only slot is held by the stuck run
        assert agent.cancel("a") == 1
        result = await waiting
        assert not runtime.release.is_set()  # b ran while a's runtime is still stuck
        runtime.release.set()
        await stuck.settled()
        return result

    assert asyncio.run(main()).text == "quick answer"
    agent.close()


# --------------------------------------------------------------------------- the settle window and the next turn


def test_the_next_turn_waits_for_the_provider_to_settle_and_sees_the_account(tmp_path):
    runtime = Stubborn()
    agent, _fixture = make_agent(tmp_path, runtime, window_ms=60_000)

    async def main():
        first = agent.submit(TurnRequest("long job", conversation_id="c"))
        await runtime.started.wait()
        first.cancel()
        second = agent.submit(TurnRequest("quick: where were we?", conversation_id="c"))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not second.done() and len(runtime.prompts) == 1  # held at the barrier while the provider settles
        runtime.release.set()
        return await second

    assert asyncio.run(main()).text == "quick answer"
    request = runtime.prompts[1]  # continuous mode: the history leads the messages, per-message: the system prompt
    seen = request.prompt.system_text + "".join(m.content for m in request.messages)
    assert "Continuity account v1" in seen and "partial" in seen and "LATE" not in seen
    contents = [m.content for m in load(agent)]
    assert contents[0] == "long job" and contents[1].startswith(ACCOUNT_HEADER)
    assert contents[2:] == ["quick: where were we?", "quick answer"]
    agent.close()


def test_the_settle_window_bounds_the_wait_for_a_provider_that_never_stops(tmp_path):
    runtime = Stubborn()
    agent, fixture = make_agent(tmp_path, runtime, window_ms=50)

    async def main():
        first = agent.submit(TurnRequest("long job", conversation_id="c"))
        await runtime.started.wait()
        first.cancel()
        result = await agent.respond(TurnRequest("quick: still there?", conversation_id="c"))
        assert not runtime.release.is_set()  # the account went out after the window, the provider never stopped
        await first.settled()
        runtime.release.set()
        await runtime.finished.wait()
        for _ in range(20):
            await asyncio.sleep(0)
        return result

    assert asyncio.run(main()).text == "quick answer"
    warnings = [e.data for e in fixture.observed if e.type == "runtime_warning"]
    assert {"code": "provider_unsettled", "settle_window_ms": 50} in warnings
    contents = [m.content for m in load(agent)]
    assert contents[1].startswith(ACCOUNT_HEADER) and contents[2:] == ["quick: still there?", "quick answer"]
    assert fixture.tool_runs == 0 and all("LATE" not in str(e.data) for e in fixture.observed)
    agent.close()


def test_the_settle_window_is_a_positive_whole_number_of_milliseconds(tmp_path):
    for bad in (0, -5, 1.5, True, "1000"):
        with pytest.raises(ValueError, match="terminal_recovery_settlement_ms must be a positive whole number"):
            fresh_agent(tmp_path, terminal_recovery_settlement_ms=bad)
    assert fresh_agent(tmp_path).harness.settle_window_ms == 1000


class ToolStubborn:
    """A runtime that asks for the ``stubborn_tool`` once, then answers."""

    name = "toolstub"
    context_window = 100_000

    async def stream(self, request):
        if request.step == 1:
            yield ToolCallRequested(ToolCall("t1", "stubborn_tool", {}))
        else:
            yield TextDelta("done")
        yield StepFinished()


def test_a_tool_that_ignores_the_cancel_is_closed_as_cancelled_and_its_late_result_dropped(tmp_path):
    entered, release = asyncio.Event(), asyncio.Event()
    late = []

    class StubbornTool:
        @hookimpl
        def register_providers(self, register):
            register("toolstub", lambda agent, model: ToolStubborn())

        @hookimpl
        def register_tools(self, register):
            async def stubborn_tool(context):
                entered.set()
                while not release.is_set():
                    try:
                        await release.wait()
                    except asyncio.CancelledError:
                        pass
                late.append("returned")
                return "late result"

            register(ToolSpec("stubborn_tool", "Never stops when told."), stubborn_tool)

    agent = fresh_agent(tmp_path, config={"runtime": {"model": "toolstub:x"}}, plugins=[StubbornTool()],
                        terminal_recovery_settlement_ms=50)

    async def main():
        handle = agent.submit(TurnRequest("use the tool", conversation_id="c"))
        await entered.wait()
        handle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handle
        await handle.settled()  # published after the 50 ms window, the tool still running
        release.set()
        await until(lambda: late, "the stubborn tool to return once released")
        for _ in range(20):
            await asyncio.sleep(0)

    asyncio.run(main())
    account = load(agent)[1].content
    assert "Work in flight, outcome unconfirmed (1):" in account and "late result" not in account
    rows = agent.tool_history_store().query("SELECT status FROM calls")
    assert [r["status"] for r in rows] == ["cancelled"]
    agent.close()


# --------------------------------------------------------------------------- handles, queued runs, threads


def test_cancel_counts_the_active_and_the_queued_runs_and_the_queued_one_leaves_no_trace(tmp_path):
    runtime = Stubborn()
    agent, fixture = make_agent(tmp_path, runtime, window_ms=60_000)

    async def main():
        active = agent.submit(TurnRequest("long job", conversation_id="c"))
        await runtime.started.wait()
        queued = agent.submit(TurnRequest("quick follow-up", conversation_id="c"))
        elsewhere = agent.submit(TurnRequest("quick elsewhere", conversation_id="d"))
        assert agent.cancel("c") == 2 and agent.cancel("c") == 0
        for handle in (active, queued):
            with pytest.raises(asyncio.CancelledError):
                await handle
        assert (await elsewhere).text == "quick answer"
        runtime.release.set()
        await agent.wait_settled()
        return queued.run_id

    queued_id = asyncio.run(main())
    assert queued_id not in {e.run_id for e in fixture.observed}  # never admitted: no events at all
    contents = [m.content for m in load(agent)]
    assert contents[0] == "long job" and len(contents) == 2  # one account, none for the queued request
    agent.close()


def test_lanes_are_dropped_after_cancels_and_under_daily_rollover(tmp_path):
    runtime = Stubborn()
    session = {"rollover": "daily", "rolloverTimezone": "UTC"}
    agent, _fixture = make_agent(tmp_path, runtime, window_ms=60_000,
                                 config={"runtime": {"model": "stubborn:x", "session": session}})

    async def main():
        await agent.respond(TurnRequest("quick", conversation_id="a"))  # its physical id is a:<date>
        active = agent.submit(TurnRequest("long job", conversation_id="b"))
        await runtime.started.wait()
        agent.submit(TurnRequest("quick follow-up", conversation_id="b"))
        agent.cancel("b")
        runtime.release.set()
        await active.settled()
        await agent.wait_settled()
        return dict(agent.harness._lanes)

    assert asyncio.run(main()) == {}
    agent.close()


def test_awaiting_a_handle_gives_the_result_and_its_run_id_is_the_events(tmp_path):
    runtime = Stubborn()
    agent, fixture = make_agent(tmp_path, runtime)

    async def main():
        handle = agent.submit(TurnRequest("quick", conversation_id="c"))
        assert not handle.done()
        with pytest.raises(asyncio.InvalidStateError):
            handle.result()
        result = await handle
        assert handle.done() and not handle.cancelled() and handle.result() is result
        return handle, result

    handle, result = asyncio.run(main())
    assert result.run_id == handle.run_id == fixture.observed[0].run_id
    assert repr(handle) == f"<RunHandle {handle.run_id} 'c' done>"
    agent.close()


def test_agent_cancel_from_another_thread_ends_a_run_sync_turn_with_its_account(tmp_path):
    runtime = Stubborn()
    agent, _fixture = make_agent(tmp_path, runtime, window_ms=50)
    outcome = {}
    started = threading.Event()

    def turn():
        try:
            agent.run_sync("long job", conversation_id="c", on_event=lambda e: e.type == "text_delta" and started.set())
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=turn)
    worker.start()
    assert started.wait(30)
    assert agent.cancel("c", "user_cancelled") == 1
    agent.harness.loop.call_soon_threadsafe(runtime.release.set)  # asyncio.run, at its end, waits for every task
    worker.join(30)
    assert isinstance(outcome.get("error"), asyncio.CancelledError)
    account = load(agent)[1].content  # run_sync published it before it raised
    assert account.startswith(ACCOUNT_HEADER) and "reason: user_cancelled" in account
    assert agent.cancel("c") == 0
    agent.close()


# --------------------------------------------------------------------------- configuration errors before admission


@pytest.mark.parametrize(
    "model, error, match",
    [
        ("nosuch:model", ConfigError, "nosuch"),
        ("no-colon", ConfigError, "no provider prefix; a model is .<provider>:<model>."),
        ("anthropic:claude-x", ProviderError, "no API key"),
    ],
)
def test_a_configuration_error_is_raised_before_admission_with_no_events_and_no_account(tmp_path, model, error, match):
    runtime = Stubborn()
    agent, fixture = make_agent(tmp_path, runtime)
    with pytest.raises(error, match=match):
        asyncio.run(agent.respond(TurnRequest("hi", conversation_id="c", model=model)))
    if ":" in model:  # a malformed fallback is refused with the configuration itself
        fallback = fresh_agent(
            tmp_path / "fallback", config={"runtime": {"model": "stubborn:x", "fallbacks": [model]}}, plugins=[fixture]
        )
        with pytest.raises(error, match=match):
            fallback.run_sync("hi", conversation_id="c")
        assert load(fallback) == ()
        fallback.close()
    assert fixture.observed == [] and load(agent) == ()
    assert agent.run_sync("quick", conversation_id="c").text == "quick answer"  # nothing was left half-admitted
    agent.close()


# --------------------------------------------------------------------------- monoagent chat on a real terminal



@needs_pty
def test_ctrl_c_in_chat_cancels_the_turn_keeps_the_chat_and_restores_the_terminal(tmp_path):
    import termios

    terminal = Terminal(tmp_path)
    try:
        terminal.wait_for(b"you> ")
        terminal.send(b"go slow\r")
        terminal.wait_for(b"thinking")
        terminal.send(b"\x03")  # cancels the turn ...
        terminal.wait_for(b"(turn cancelled")
        terminal.wait_for(b"you> ")  # ... and the chat asks again
        terminal.send(b"and now quick\r")
        terminal.wait_for(b"quick answer")
        terminal.wait_for(b"you> ")
        terminal.send(b"\x03")  # Ctrl-C at the prompt leaves
        assert terminal.exit_code() == 130
        found, now = terminal.found, terminal.flags()
        assert now[3] & (termios.ECHO | termios.ICANON | termios.ISIG) == termios.ECHO | termios.ICANON | termios.ISIG
        assert now == found  # every flag and control character as the chat found them
    finally:
        terminal.close()
    account = [p for p in (tmp_path / "home").rglob("*") if p.is_file() and b"Continuity account v1" in p.read_bytes()]
    assert account, "the cancelled turn's continuity account is in history"


@needs_pty
def test_a_second_ctrl_c_right_after_a_cancel_leaves_with_the_account_published_and_the_terminal_restored(tmp_path):
    terminal = Terminal(tmp_path)
    try:
        terminal.wait_for(b"you> ")
        terminal.send(b"go slow\r")
        terminal.wait_for(b"thinking")
        terminal.send(b"\x03")
        terminal.wait_for(b"(turn cancelled")  # handled: a second SIGINT sent earlier could merge with the first
        terminal.send(b"\x03")  # while the prompt comes back and the account may still be written
        assert terminal.exit_code() == 130
        assert terminal.flags() == terminal.found
    finally:
        terminal.close()
    assert any(b"Continuity account v1" in p.read_bytes() for p in (tmp_path / "home").rglob("*") if p.is_file())


@needs_pty
def test_ctrl_c_while_readline_waits_for_a_line_restores_echo_and_canonical_input(tmp_path):
    """Leaving while readline holds the terminal (echo and canonical input off) left the shell without echo."""
    terminal = Terminal(tmp_path)
    try:
        terminal.wait_for(b"you> ")
        terminal.send(b"\x03")
        assert terminal.exit_code() == 130
        assert terminal.flags() == terminal.found
    finally:
        terminal.close()


@needs_pty
def test_ctrl_c_during_monoagent_run_leaves_with_the_account_published(tmp_path):
    terminal = Terminal(tmp_path, ("run", "go slow"))
    try:
        terminal.wait_for(b"thinking")
        terminal.send(b"\x03")
        assert terminal.exit_code() == 130
        assert terminal.flags() == terminal.found
    finally:
        terminal.close()
    assert any(b"Continuity account v1" in p.read_bytes() for p in (tmp_path / "home").rglob("*") if p.is_file())
