"""The terminal as ``monoagent chat`` leaves it: the restore is the last change, whatever another thread does.

readline prepares the terminal (echo, canonical input and ICRNL off) on the chat's reader thread
as ``input()`` starts. When a second Ctrl-C ended the chat just before that thread got there, the
chat restored the settings first and readline changed them after, so the shell was left with
Return sending ``^M``: a flake under load. The tests here force each interleaving instead of
hoping for it: the chat's child process holds its reader (a plugin wraps ``ConsoleChannel._read``)
until the chat has restored the terminal, and :class:`~monoagent._cli.terminal.KeptTerminal`,
the gate every change passes, is driven step by step on a real pseudo-terminal.
"""

from __future__ import annotations

import os
import signal
import termios
import threading

from chat_pty import SLOW_PROVIDER, Terminal, needs_pty
from waiting import wait_until

from monoagent._cli.terminal import KeptTerminal, edited_input, kept_terminal_state

HELD_READ = SLOW_PROVIDER + '''
import atexit
import os
import termios
import threading

from monoagent_plugins.cli.console import ConsoleChannel

restored = threading.Event()  # the chat put the terminal's settings back (a tcsetattr on the main thread)
went_on = threading.Event()  # the held read went on: readline prepared the terminal, or the read gave up
reads = []
_read, _tcsetattr = ConsoleChannel._read, termios.tcsetattr


def held_read(self, prompt="you> "):
    reads.append(prompt)
    if len(reads) != 2:  # the first prompt reads as usual; the one after the cancelled turn is held
        return _read(self, prompt)
    os.write(1, b"[read held]")
    restored.wait(30)
    import readline

    readline.set_pre_input_hook(went_on.set)  # readline calls it once it has prepared the terminal
    try:
        return _read(self, prompt)
    finally:
        went_on.set()


def watched_tcsetattr(fd, when, settings):
    _tcsetattr(fd, when, settings)
    if len(reads) == 2 and threading.current_thread() is threading.main_thread():
        restored.set()


def exit_after_the_held_read():  # the process ends only once the held read has had its go
    if len(reads) == 2 and went_on.wait(30) and restored.is_set():
        os.write(1, b"[the read went on after the restore]")


ConsoleChannel._read = held_read
termios.tcsetattr = watched_tcsetattr
atexit.register(exit_after_the_held_read)
'''


@needs_pty
def test_a_read_that_goes_on_after_the_chat_restored_the_terminal_leaves_it_as_found(tmp_path):
    """The bad interleaving, forced: the reader starts ``input()`` after the restore (it was a 1-in-20 flake)."""
    terminal = Terminal(tmp_path, plugin=HELD_READ)
    try:
        terminal.wait_for(b"you> ")
        terminal.send(b"go slow\r")
        terminal.wait_for(b"thinking")
        terminal.send(b"\x03")  # cancels the turn; the read of the next line is held ...
        terminal.wait_for(b"[read held]")
        terminal.send(b"\x03")  # ... while this one leaves the chat, which restores the terminal
        assert terminal.exit_code() == 130
        terminal.drain()
        assert b"[the read went on after the restore]" in terminal.transcript  # the interleaving happened
        assert terminal.flags() == terminal.found
    finally:
        terminal.close()


@needs_pty
def test_leaving_in_the_middle_of_a_markdown_answer_shows_the_cursor_again(tmp_path):
    """The Markdown area hides the cursor and redraws from a thread of its own: it is ended before the restore."""
    terminal = Terminal(tmp_path, ("chat", "--markdown"))
    try:
        terminal.wait_for(b"you> ")
        terminal.send(b"go slow\r")
        terminal.wait_for(b"thinking")
        os.kill(terminal.pid, signal.SIGTERM)  # leaves at once, the turn still streaming
        assert terminal.exit_code() == 130
        terminal.drain()
        hidden = terminal.transcript.rfind(b"\x1b[?25l")
        assert hidden >= 0, f"the answer's area never hid the cursor: {terminal.transcript!r}"
        assert b"\x1b[?25h" in terminal.transcript[hidden:], f"the cursor stays hidden: {terminal.transcript!r}"
        assert terminal.flags() == terminal.found
    finally:
        terminal.close()


# --------------------------------------------------------------------------- the gate, step by step


class Pty:
    """A real pseudo-terminal's slave side, its settings as found, and the settings readline would set."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.found = termios.tcgetattr(self.slave)
        prepared = termios.tcgetattr(self.slave)
        prepared[0] &= ~termios.ICRNL
        prepared[3] &= ~(termios.ECHO | termios.ICANON)
        self.prepared = prepared

    def prepare(self) -> None:
        """What readline does as ``input()`` starts."""
        termios.tcsetattr(self.slave, termios.TCSANOW, self.prepared)

    def settings(self) -> list:
        return termios.tcgetattr(self.slave)

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


@needs_pty
def test_a_change_asked_for_once_the_block_is_left_is_refused_and_no_line_is_read():
    pty = Pty()
    try:
        with os.fdopen(os.dup(pty.slave), "r") as stream, kept_terminal_state(stream) as kept:
            assert kept.saved == pty.found and not kept.left
        assert kept.left
        assert kept.begin_change() is False
        assert edited_input("you> ", kept) is None  # reading standard input here would fail under pytest's capture
        assert pty.settings() == pty.found
    finally:
        pty.close()


@needs_pty
def test_the_restore_waits_for_a_change_under_way_and_is_the_last_write(monkeypatch):
    pty = Pty()
    kept = KeptTerminal(pty.slave, pty.found)
    writes = []
    tcsetattr = termios.tcsetattr

    def recorded(fd, when, settings):
        writes.append("found" if settings == pty.found else "prepared")
        tcsetattr(fd, when, settings)

    monkeypatch.setattr(termios, "tcsetattr", recorded)
    try:
        assert kept.begin_change()  # a reader about to let readline prepare the terminal
        leaving = threading.Thread(target=kept.restore, daemon=True)
        leaving.start()
        wait_until(lambda: kept.left, "the restore to begin while the change is under way")
        assert kept.begin_change() is False  # the gate is shut (and the restore has let go of it to wait)
        pty.prepare()  # the change lands after the restore began ...
        kept.end_change()
        leaving.join(30)
        assert not leaving.is_alive()
        assert writes == ["prepared", "found"]  # ... and the restore wrote once, after it
        assert pty.settings() == pty.found
    finally:
        pty.close()


@needs_pty
def test_a_change_that_ends_after_the_restore_gave_up_waiting_puts_the_settings_back_again():
    pty = Pty()
    kept = KeptTerminal(pty.slave, pty.found)
    kept.CHANGE_WAIT = 0  # the restore stops waiting at once, as it would for a change that never ends
    try:
        assert kept.begin_change()
        kept.restore()
        assert pty.settings() == pty.found
        pty.prepare()  # the late change ...
        kept.end_change()
        assert pty.settings() == pty.found  # ... is undone as it ends
    finally:
        pty.close()
