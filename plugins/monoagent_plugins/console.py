"""The ``console`` channel: interactive terminal turns behind ``monoagent chat``.

Each line typed is one console turn in the same conversation (``delivery = "console"``,
``console = "terminal"``); the answer streams as it arrives. Line editing and history come
from the standard ``readline`` module where the platform has it. ``/exit`` or end of input
(Ctrl-D) leaves; ``/reset`` clears the conversation's message and tool history.

Lines are read as text (bytes that are not UTF-8 become U+FFFD, with a notice) and everything
written passes :mod:`monoagent.boundary.terminal`: the streamed answer line by line through a
:class:`~monoagent.boundary.terminal.AnswerPrinter` (shared with ``monoagent run``), the rest through ``terminal_text``.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from monoagent.boundary.terminal import AnswerPrinter, accept_undecodable, input_text, read_capped, terminal_text
from monoagent.kernel.host import bundled_impl
from monoagent.kernel.model import TurnRequest
from monoagent.kernel.registrars import ChannelRegistrar


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

    def _read(self) -> str | None:
        if self.stdin is sys.stdin:
            accept_undecodable(sys.stdin)
        if self.stdin is sys.stdin and sys.stdin.isatty():
            try:
                import readline  # noqa: F401  (enables line editing for input())
            except ImportError:
                pass
            try:
                line = input("you> ")
            except EOFError:
                return None
        else:
            line = read_capped(self.stdin.readline, "the input line")
            if line == "":
                return None
        return input_text(line.rstrip("\n"), "the input line")

    def _write(self, text: str) -> None:
        self.stdout.write(terminal_text(text, self.agent.redact))

    async def _read_line(self) -> str | None:
        """:meth:`_read` on a daemon thread of its own, not the loop's default executor.

        ``asyncio.run`` joins the default executor when it ends, so a read blocked in
        ``input()`` there would keep Ctrl-C from ending the chat until the next Enter.
        """
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
                value = self._read()
            except BaseException as exc:  # handed to the awaiting coroutine
                error = exc
            try:
                loop.call_soon_threadsafe(settle, value, error)
            except RuntimeError:  # the loop is closed: the chat already ended
                pass

        threading.Thread(target=read, name="monoagent-console-input", daemon=True).start()
        return await future

    async def serve(self, agent: Any = None) -> None:
        agent = agent or self.agent
        while True:
            line = await self._read_line()
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
                                  delivery="console", console="terminal", model=self.model)
            self.stdout.write("agent> ")
            try:
                await agent.respond(request, on_event=self._printed)
            except Exception as exc:  # one failed turn does not end the session
                self.stdout.write(self._printed.end())
                self._write(f"\n(error: {exc})")
            self.stdout.write(self._printed.end() + "\n")
            self.stdout.flush()


@bundled_impl
def register_channels(register: ChannelRegistrar) -> None:
    register("console", ConsoleChannel, description="interactive terminal chat (monoagent chat)")
