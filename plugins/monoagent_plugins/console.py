"""The ``console`` channel: interactive terminal turns behind ``monoagent chat``.

Each line typed is one console turn in the same conversation (``delivery = "console"``,
``console = "terminal"``); the answer streams as it arrives. Line editing and history come
from the standard ``readline`` module where the platform has it. ``/exit`` or end of input
(Ctrl-D) leaves; ``/reset`` clears the conversation's message and tool history.

Ctrl-C while a turn runs cancels that turn (its continuity account is published, as for any
cancelled turn), says so, and asks for the next line; Ctrl-C at the prompt, or a second one
within the same turn, leaves the chat (``KeyboardInterrupt``, exit status 130 from the CLI), as
does SIGTERM. Whichever way the chat ends, the terminal's settings are put back as the chat
found them (:func:`~monoagent.boundary.terminal.kept_terminal_state`) and cancelled turns'
accounts are published first. Signals are watched only where the event loop can
(``loop.add_signal_handler``: the main thread, not Windows); elsewhere Ctrl-C keeps Python's
default behaviour.

Under a permission profile that asks (``permissions.profile = "ask"``), each tool call that needs
approval is put to the person first (:class:`ConsoleApprover`): ``allow <tool> (<category>)
<arguments>? [y/n/a]``, where ``y`` runs it once, ``n`` refuses it and ``a`` allows that tool for
the rest of this chat (remembered in memory, never written anywhere).

Lines are read as text (bytes that are not UTF-8 become U+FFFD, with a notice) and everything
written passes :mod:`monoagent.boundary.terminal`: the streamed answer line by line through a
:class:`~monoagent.boundary.terminal.AnswerPrinter` (shared with ``monoagent run``), the rest through ``terminal_text``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from monoagent.boundary.terminal import (
    AnswerPrinter,
    accept_undecodable,
    input_text,
    kept_terminal_state,
    read_capped,
    terminal_text,
)
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.log import logger
from monoagent.kernel.model import TurnRequest
from monoagent.kernel.permissions import Approval, ApprovalRequest
from monoagent.kernel.registrars import ChannelRegistrar

if TYPE_CHECKING:
    import asyncio
    import signal

T = TypeVar("T")
CANCEL_REASON = "user_cancelled"


class Interrupts:
    """Ctrl-C and SIGTERM while a chat runs: the first Ctrl-C within a turn cancels it, any other leaves.

    asyncio and signal are imported where used: this module loads at CLI start-up.
    """

    def __init__(self) -> None:
        import asyncio

        self.turn: Any = None
        self.cancelled_turn = False
        self.leave = asyncio.Event()
        self._watched: list[signal.Signals] = []

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._signalled, sig)
            except (NotImplementedError, RuntimeError, ValueError) as exc:  # not the main thread, or Windows
                logger.debug("chat: {} keeps its default behaviour ({})", sig.name, exc)
            else:
                self._watched.append(sig)

    def unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._watched:
            loop.remove_signal_handler(self._watched.pop())

    def _signalled(self, sig: signal.Signals) -> None:
        import signal

        if sig == signal.SIGINT and self.turn is not None and not self.turn.done() and not self.cancelled_turn:
            self.cancelled_turn = True
            self.turn.cancel(CANCEL_REASON)
        else:
            self.leave.set()

    async def unless_leaving(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``'s outcome, or ``KeyboardInterrupt`` as soon as the chat is to be left."""
        import asyncio

        work = asyncio.ensure_future(awaitable)
        leaving = asyncio.ensure_future(self.leave.wait())
        try:
            await asyncio.wait((work, leaving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if not work.done():
            work.cancel()
            raise KeyboardInterrupt
        return work.result()


_ANSWERS = {"y": True, "yes": True, "n": False, "no": False, "a": True, "always": True}


class ConsoleApprover:
    """Asks the person at the terminal whether a tool call may run: ``y`` once, ``n`` refuse, ``a`` always.

    ``a`` allows that tool for the rest of the chat (this object lives as long as the chat's
    conversation; nothing is persisted). The question shows model text (the tool's arguments),
    so it passes :func:`~monoagent.boundary.terminal.terminal_text` and the summary is bounded
    (:func:`~monoagent.kernel.permissions.argument_summary`). End of input refuses.
    """

    def __init__(self, channel: ConsoleChannel) -> None:
        self.channel = channel
        self.always: set[str] = set()

    async def __call__(self, request: ApprovalRequest) -> Approval:
        if request.tool in self.always:
            return Approval(True, "remembered")
        channel = self.channel
        channel.stdout.write(channel._printed.end())
        channel._write(f"\nallow {request.tool} ({', '.join(request.categories)}) {request.summary}? [y/n/a] ")
        channel.stdout.flush()
        while True:
            line = await channel._read_line(prompt="")
            answer = (line or "n").strip().lower()
            if answer in _ANSWERS:
                break
            channel._write("answer y (allow once), n (refuse) or a (always allow this tool in this chat) [y/n/a] ")
            channel.stdout.flush()
        if answer in ("a", "always"):
            self.always.add(request.tool)
        return Approval(_ANSWERS[answer], "person")


class ConsoleChannel:
    name = "console"

    def __init__(self, agent: Any, conversation_id: str = "cli:chat", model: str | None = None,
                 stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.agent = agent
        self.conversation_id = conversation_id
        self.model = model
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self._printed = AnswerPrinter(self.stdout, agent.redact)
        self.approver = ConsoleApprover(self)
        self._pending_read: Any = None

    def _read(self, prompt: str = "you> ") -> str | None:
        if self.stdin is sys.stdin:
            accept_undecodable(sys.stdin)
        if self.stdin is sys.stdin and sys.stdin.isatty():
            try:
                import readline  # noqa: F401  (enables line editing for input())
            except ImportError:
                pass
            try:
                line = input(prompt)
            except EOFError:
                return None
        else:
            line = read_capped(self.stdin.readline, "the input line")
            if line == "":
                return None
        return input_text(line.rstrip("\n"), "the input line")

    def _write(self, text: str) -> None:
        self.stdout.write(terminal_text(text, self.agent.redact))

    async def _read_line(self, prompt: str = "you> ") -> str | None:
        """:meth:`_read` on a daemon thread of its own, not the loop's default executor.

        ``asyncio.run`` joins the default executor when it ends, so a read blocked in
        ``input()`` there would keep Ctrl-C from ending the chat until the next Enter. A read
        still waiting (an approval question whose turn was cancelled) is awaited again rather
        than raced by a second reader, so no typed line is lost.
        """
        import asyncio

        if self._pending_read is None or self._pending_read.done():
            self._pending_read = self._start_read(prompt)
        return await asyncio.shield(self._pending_read)

    def _start_read(self, prompt: str) -> Any:
        import asyncio
        import threading

        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()

        def settle(value: str | None, error: BaseException | None) -> None:
            if not future.done():
                future.set_exception(error) if error is not None else future.set_result(value)

        def read() -> None:
            value, error = None, None
            try:
                value = self._read(prompt)
            except BaseException as exc:  # handed to the awaiting coroutine
                error = exc
            try:
                loop.call_soon_threadsafe(settle, value, error)
            except RuntimeError:  # the loop is closed: the chat already ended
                pass

        threading.Thread(target=read, name="monoagent-console-input", daemon=True).start()
        return future

    async def serve(self, agent: Any = None) -> None:
        """Chat until ``/exit`` or end of input; raises ``KeyboardInterrupt`` when left by Ctrl-C or SIGTERM."""
        import asyncio

        agent = agent or self.agent
        loop = asyncio.get_running_loop()
        interrupts = Interrupts()
        with kept_terminal_state(self.stdin):
            interrupts.watch(loop)
            try:
                await self._chat(agent, interrupts)
            finally:
                interrupts.unwatch(loop)
                await agent.wait_settled()  # a cancelled turn's account is published before the chat ends

    async def _chat(self, agent: Any, interrupts: Interrupts) -> None:
        import asyncio

        while True:
            line = await interrupts.unless_leaving(self._read_line())
            if line is None or line.strip() in {"/exit", "/quit"}:
                return
            if not line.strip():
                continue
            if line.strip() == "/reset":
                try:
                    report, tool = await agent.reset_conversation(self.conversation_id)
                except Exception as exc:  # nothing was cleared; say why and keep chatting
                    self._write(f"(reset failed, nothing was cleared: {exc})\n")
                    continue
                calls = f", {tool.calls} tool calls" if tool is not None else ""
                self._write(f"(history of {self.conversation_id} cleared: {report.messages} messages{calls})\n")
                continue
            request = TurnRequest(line, conversation_id=self.conversation_id, channel="console",
                                  delivery="console", console="terminal", model=self.model, approver=self.approver)
            self.stdout.write("agent> ")
            interrupts.turn, interrupts.cancelled_turn = agent.submit(request, on_event=self._printed), False
            try:
                await interrupts.unless_leaving(interrupts.turn)
            except asyncio.CancelledError:
                if not interrupts.cancelled_turn:
                    raise
                self.stdout.write(self._printed.end())
                self._write("\n(turn cancelled; Ctrl-C at the prompt leaves the chat)")
            except Exception as exc:  # one failed turn does not end the session
                self.stdout.write(self._printed.end())
                self._write(f"\n(error: {exc})")
            finally:
                interrupts.turn = None
            self.stdout.write(self._printed.end() + "\n")
            self.stdout.flush()


@bundled_impl
def register_channels(register: ChannelRegistrar) -> None:
    register("console", ConsoleChannel, description="interactive terminal chat (monoagent chat)")
