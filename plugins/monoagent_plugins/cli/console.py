"""The ``console`` channel: interactive terminal turns behind ``monoagent chat``.

Each line typed is one console turn in the same conversation (``delivery = "console"``,
``console = "terminal"``); the answer streams as it arrives. Line editing and history come
from the standard ``readline`` module where the platform has it.

A line starting with ``/`` is a chat command (:data:`COMMANDS`, listed by ``/help``), answered
locally: never sent to the model, never saved to history. An unknown one (``/foo``) is answered
"unknown command /foo; /help lists them"; a line meant for the model that starts with ``/``
is typed with the slash doubled (``//etc/hosts?`` sends ``/etc/hosts?``). End of input (Ctrl-D)
leaves like ``/exit``, ending the prompt's line first so the shell's prompt starts on its own.
When standard input is a terminal, one hint line on stderr names the model and the conversation
at start-up.

Ctrl-C while a turn runs cancels that turn (its continuity account is published, as for any
cancelled turn), says so, and asks for the next line; Ctrl-C at the prompt, or a second one
within the same turn, leaves the chat (``KeyboardInterrupt``, exit status 130 from the CLI), as
does SIGTERM. Whichever way the chat ends, the terminal's settings are put back as the chat
found them (:func:`~monoagent._cli.terminal.kept_terminal_state`), nothing changes them after
that (the reader thread's readline prepares the terminal only through the kept state's gate,
:func:`~monoagent._cli.terminal.edited_input`), and cancelled turns' accounts are published
first. Signals are watched only where the event loop can (``loop.add_signal_handler``: the main
thread, not Windows); elsewhere Ctrl-C keeps Python's default behaviour.

Under a permission profile that asks (``permissions.profile = "ask"``), each tool call that needs
approval is put to the person first (:class:`ConsoleApprover`): ``allow <tool> (<category>)
<arguments>? [y/n/a]``, where ``y`` runs it once, ``n`` refuses it and ``a`` allows that tool for
the rest of this chat (remembered in memory, never written anywhere).

Lines are read as text (bytes that are not UTF-8 become U+FFFD, with a notice) and everything
written passes :mod:`monoagent._cli.terminal`: the streamed answer line by line through a
:class:`~monoagent._cli.terminal.AnswerPrinter` (shared with ``monoagent run``), the rest through ``terminal_text``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from monoagent import (
    AnswerPrinter,
    Approval,
    ApprovalRequest,
    Channel,
    ComponentRegistrar,
    KeptTerminal,
    TurnRequest,
    accept_undecodable,
    edited_input,
    hookimpl,
    input_text,
    kept_terminal_state,
    logger,
    read_capped,
    terminal_text,
)

if TYPE_CHECKING:
    import asyncio
    import signal

    from monoagent import Agent, RunHandle

T = TypeVar("T")
CANCEL_REASON = "user_cancelled"

COMMANDS = {
    "/help": "list these commands",
    "/new": "start a new conversation (a new id; the current one's history is kept)",
    "/reset": "clear this conversation's message and tool history",
    "/cancel": "cancel the running turn (Ctrl-C does it while an answer streams)",
    "/quit, /exit": "leave the chat (Ctrl-D too)",
    "//text": "send /text to the model (a line for the model that starts with a slash)",
}
"""The chat commands as ``/help`` lists them, each with its one line."""


class Interrupts:
    """Ctrl-C and SIGTERM while a chat runs: the first Ctrl-C within a turn cancels it, any other leaves.

    asyncio and signal are imported where used: this module loads at CLI start-up.
    """

    def __init__(self) -> None:
        import asyncio

        self.turn: RunHandle | None = None
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

    ``a`` allows that tool for the rest of the chat's conversation (``/new`` starts asking again;
    nothing is persisted). The question shows model text (the tool's arguments),
    so it passes :func:`~monoagent._cli.terminal.terminal_text` and the summary is bounded
    (:func:`monoagent_plugins.tools.permissions.argument_summary`). End of input refuses.
    """

    def __init__(self, channel: ConsoleChannel) -> None:
        self.channel = channel
        self.always: set[tuple[str, str]] = set()

    async def __call__(self, request: ApprovalRequest) -> Approval:
        if (request.conversation_id, request.tool) in self.always:
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
            self.always.add((request.conversation_id, request.tool))
        return Approval(_ANSWERS[answer], "person")


class ConsoleChannel:
    name = "console"

    def __init__(self, agent: Agent, conversation_id: str = "cli:chat", model: str | None = None,
                 stdin: TextIO | None = None, stdout: TextIO | None = None, tool_lines: TextIO | None = None) -> None:
        self.agent = agent
        self.conversation_id = conversation_id
        self.model = model
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.tool_lines = tool_lines
        """Where tool calls are shown as compact lines (:mod:`monoagent._cli.tool_lines`); None shows none."""
        self.markdown: bool | None = None
        """Answers as Markdown: True, False (plain), None when stdout is a capable terminal (:mod:`monoagent._cli.markdown`)."""
        self._prefix = "agent> "
        self._printed = AnswerPrinter(self.stdout, agent.redact)
        self._used_ids: set[str] = set()
        self._first_conversation_id = conversation_id
        self.approver = ConsoleApprover(self)
        self._pending_read: Any = None
        self._kept: KeptTerminal | None = None
        """The terminal's settings while :meth:`serve` runs: a read refuses to prepare the terminal once the chat leaves."""

    def _read(self, prompt: str = "you> ") -> str | None:
        if self.stdin is sys.stdin:
            accept_undecodable(sys.stdin)
        if self.stdin is sys.stdin and sys.stdin.isatty():
            try:
                edited = edited_input(prompt, self._kept)
            except EOFError:
                self.stdout.write("\n")  # the prompt's line ends, so the shell's prompt starts on its own
                self.stdout.flush()
                return None
            if edited is None:  # the chat is leaving: nobody awaits this line, and the terminal is being restored
                return None
            line = edited
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

    async def serve(self, agent: Agent | None = None) -> None:
        """Chat until ``/exit`` or end of input; raises ``KeyboardInterrupt`` when left by Ctrl-C or SIGTERM."""
        import asyncio

        agent = agent or self.agent
        self._first_conversation_id = self.conversation_id
        tool_lines: Any = None
        if self.tool_lines is not None:
            from monoagent import ToolLines

            tool_lines = ToolLines(self.tool_lines, agent.redact)
        console = None
        if self.markdown is not False:
            from monoagent import markdown_console

            console = markdown_console(self.stdout, self.markdown)
        self._printed = AnswerPrinter(self.stdout, agent.redact, tool_lines=tool_lines, markdown=console)
        self._prefix = "agent>\n" if console is not None else "agent> "  # a rendered answer starts at the line's start
        if self.stdin is sys.stdin and sys.stdin.isatty():
            model = self.model or agent.model
            self._note(f"monoagent chat: model {model}, conversation {self.conversation_id}; /help for commands, Ctrl-D to leave")
        loop = asyncio.get_running_loop()
        interrupts = Interrupts()
        with kept_terminal_state(self.stdin) as self._kept:
            interrupts.watch(loop)
            try:
                await self._chat(agent, interrupts)
            finally:
                interrupts.unwatch(loop)
                await agent.wait_settled()  # a cancelled turn's account is published before the chat ends

    def _note(self, text: str) -> None:
        """One line on stderr (the start-up hint), through the terminal boundary."""
        sys.stderr.write(terminal_text(text, self.agent.redact) + "\n")
        sys.stderr.flush()

    async def _chat(self, agent: Agent, interrupts: Interrupts) -> None:
        while True:
            line = await interrupts.unless_leaving(self._read_line())
            if line is None:
                return
            text = line.strip()
            if not text:
                continue
            if text.startswith("/") and not text.startswith("//"):
                if not await self._command(agent, text.split()[0]):
                    return
                continue
            if text.startswith("//"):
                line = line.replace("/", "", 1)
            await self._turn(agent, interrupts, line)

    async def _command(self, agent: Agent, name: str) -> bool:
        """Answer the chat command ``name`` locally; False when it leaves the chat."""
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            width = max(map(len, COMMANDS))
            self._write("".join(f"  {command:<{width}}  {line}\n" for command, line in COMMANDS.items()))
        elif name == "/cancel":
            self._write("(no turn is running; Ctrl-C cancels a turn while its answer streams)\n")
        elif name == "/new":
            previous, self.conversation_id = self.conversation_id, self._new_conversation_id()
            import shlex

            self._write(f"(new conversation {self.conversation_id}; {previous} is kept: "
                        f"monoagent chat -c {shlex.quote(previous)} resumes it)\n")
        elif name == "/reset":
            try:
                report, tool = await agent.reset_conversation(self.conversation_id)
            except Exception as exc:  # nothing was cleared; say why and keep chatting
                self._write(f"(reset failed, nothing was cleared: {exc})\n")
                return True
            calls = f", {tool.calls} tool calls" if tool is not None else ""
            self._write(f"(history of {self.conversation_id} cleared: {report.messages} messages{calls})\n")
        else:
            self._write(f"(unknown command {name[:64]}; /help lists them)\n")
        return True

    def _new_conversation_id(self) -> str:
        """A fresh id under the chat's first one: ``<id>:<YYYYmmdd-HHMMSS>``, with a ``-2``, ``-3`` ... in the same second."""
        from datetime import datetime

        stamp = f"{self._first_conversation_id}:{datetime.now():%Y%m%d-%H%M%S}"
        candidate, n = stamp, 1
        while candidate == self.conversation_id or candidate in self._used_ids:
            n += 1
            candidate = f"{stamp}-{n}"
        self._used_ids.add(candidate)
        return candidate

    async def _turn(self, agent: Agent, interrupts: Interrupts, line: str) -> None:
        import asyncio

        request = TurnRequest(line, conversation_id=self.conversation_id, channel="console",
                              delivery="console", console="terminal", model=self.model, approver=self.approver)
        self.stdout.write(self._prefix)
        self.stdout.flush()
        handle = agent.submit(request, on_event=self._printed)
        interrupts.turn, interrupts.cancelled_turn = handle, False
        try:
            await interrupts.unless_leaving(handle)
        except asyncio.CancelledError:
            if not interrupts.cancelled_turn:
                raise
            self.stdout.write(self._printed.end())
            self._write("\n(turn cancelled; Ctrl-C at the prompt leaves the chat)")
        except KeyboardInterrupt:  # the chat is left mid-answer: the answer's line (or Markdown area) ends first
            self.stdout.write(self._printed.end() + "\n")
            self.stdout.flush()
            raise
        except Exception as exc:  # one failed turn does not end the session
            self.stdout.write(self._printed.end())
            self._write(f"\n(error: {exc})")
        finally:
            interrupts.turn = None
        self.stdout.write(self._printed.end() + "\n")
        self.stdout.flush()


@hookimpl(trylast=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    register("console", ConsoleChannel, description="interactive terminal chat (monoagent chat)")
