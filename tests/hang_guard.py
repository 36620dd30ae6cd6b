"""The per-test timeout ends a hang: the test fails with the stacks, and the run goes on.

pytest-timeout's ``signal`` method (the one this suite uses: ``timeout_method`` in pyproject.toml)
raises ``Failed`` once, from SIGALRM, in the main thread. That ends a test blocked in Python code,
but not a test that hangs in ``asyncio.run``: the exception leaves the event loop, and
``asyncio.run`` then cancels every task and waits for them (and for its executor's threads) before
it returns. A task that never finishes cancelling (a run whose cancellation never releases its
execution slot, a runtime that swallows ``CancelledError``) makes that wait endless, and nothing
interrupts it again: the suite ran 260 to 394 s past a 150 s timeout until it was killed from
outside. The ``thread`` method would end it only by ending the whole run (``os._exit``).

So the timer set here (it replaces pytest-timeout's own through its ``pytest_timeout_set_timer``
hook, for the ``signal`` method in the main thread) goes on after the first alarm:

1. at ``timeout``: the stacks of every other thread, then ``Failed`` in the main thread, as
   pytest-timeout does (its own helpers print them);
2. every :func:`repeat_s` after that (5 s for the suite's 150 s), while the test (its teardown included) has not ended:
   ``Failed`` again, which ends the next step that waits on the hung work (``asyncio.run``'s
   task cancellation, its executor shutdown, a fixture's teardown). An alarm that lands in
   pytest's own code (it is writing the report) is let pass: the next one comes soon;
3. :data:`BACKSTOP_REPEATS` repeats after the timeout (a minute), should the test still not have ended (a C call that
   never returns to Python, where no signal handler can run): pytest-timeout's ``thread``
   method ends the process, after printing the captured output and every stack.

A worker thread a hung test leaves behind (``asyncio.to_thread`` blocked on a socket) would
keep the interpreter from exiting at the end of the run; when a test timed out,
:func:`pytest_unconfigure` ends the process with the session's exit status once pytest is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import _pytest
import pluggy
import pytest
import pytest_timeout

REPEATS_PER_TIMEOUT = 10
"""The timed-out test is interrupted again every tenth of its timeout (:func:`repeat_s`) until it ends."""
BACKSTOP_REPEATS = 12
"""After this many repeats (a minute for the suite's 150 s), a test that has not ended takes the run down."""


def repeat_s(timeout: float) -> float:
    """How often a timed-out test is interrupted again: a tenth of its timeout, from 0.5 to 5 seconds."""
    return min(max(timeout / REPEATS_PER_TIMEOUT, 0.5), 5.0)


_PYTEST_CODE = (*(str(Path(package.__path__[0])) + os.sep for package in (_pytest, pluggy)), str(pytest_timeout.__file__))
_timed_out: list[str] = []
_session: list[pytest.Session] = []


def _in_pytest(frame: FrameType | None) -> bool:
    """Whether the main thread was interrupted in pytest's or pluggy's own code (reporting, hook calls)."""
    return frame is not None and frame.f_code.co_filename.startswith(_PYTEST_CODE)


class _Backstop:
    """One daemon thread for the session: ends the run when the test it watches outlives its deadline."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._guard: _Guard | None = None
        self._deadline = 0.0
        self._thread: threading.Thread | None = None

    def watch(self, guard: _Guard, deadline: float) -> None:
        with self._changed:
            self._guard, self._deadline = guard, deadline
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hang backstop", daemon=True)
                self._thread.start()
            self._changed.notify()

    def stop(self, guard: _Guard) -> None:
        with self._changed:
            if self._guard is guard:
                self._guard = None
                self._changed.notify()

    def _run(self) -> None:
        with self._changed:
            while True:
                left = self._deadline - time.monotonic()
                if self._guard is not None and left <= 0:
                    guard = self._guard
                    break
                self._changed.wait(left if self._guard is not None else None)
        guard.end_the_run()


_backstop = _Backstop()


class _Guard:
    """The alarm of one test: first the timeout, then the repeats; the backstop watches it meanwhile."""

    def __init__(self, item: pytest.Item, settings: Any) -> None:
        self.item = item
        self.settings = settings
        self.alarms = 0
        self.repeat_s = repeat_s(settings.timeout)
        self.backstop_s = BACKSTOP_REPEATS * self.repeat_s

    def arm(self) -> None:
        signal.signal(signal.SIGALRM, self._alarm)
        signal.setitimer(signal.ITIMER_REAL, self.settings.timeout, self.repeat_s)
        _backstop.watch(self, time.monotonic() + self.settings.timeout + self.backstop_s)

    def cancel(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        _backstop.stop(self)

    def end_the_run(self) -> None:
        """pytest-timeout's ``thread`` method: the captured output and every stack, then ``os._exit(1)``."""
        if not self.settings.disable_debugger_detection and pytest_timeout.is_debugging():
            return
        sys.stderr.write(f"\n{self.item.nodeid} is still running {self.backstop_s:g} s after its timeout of "
                         f"{self.settings.timeout:g} s and cannot be interrupted (a call that never returns to Python): "
                         "ending the run\n")
        pytest_timeout.timeout_timer(self.item, self.settings)

    def _alarm(self, signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        self.alarms += 1
        if self.alarms == 1:
            if not self.settings.disable_debugger_detection and pytest_timeout.is_debugging():
                self.cancel()  # a debugger is attached: no timeout, as pytest-timeout does
                return
            _timed_out.append(self.item.nodeid)
            terminal = self.item.config.get_terminal_writer()
            terminal.sep("+", title="Timeout")
            pytest_timeout.dump_stacks(terminal)  # every other thread's; the main thread's is the failure's traceback
            terminal.sep("+", title="Timeout")
            pytest.fail(pytest_timeout.PYTEST_FAILURE_MESSAGE % self.settings.timeout)
        if _in_pytest(frame):
            return
        waited = self.settings.timeout + (self.alarms - 1) * self.repeat_s
        pytest.fail(f"Timeout (>{self.settings.timeout:g}s) from pytest-timeout: the test is still running after "
                    f"{waited:g} s, interrupted again to end the hang (the first failure above shows where it hung)")


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """The timer of :class:`_Guard` for the ``signal`` method in the main thread; pytest-timeout's otherwise."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None
    guard = _Guard(item, settings)
    item.cancel_timeout = guard.cancel  # type: ignore[attr-defined]  # what pytest_timeout_cancel_timer calls
    guard.arm()
    return True


def pytest_sessionstart(session: pytest.Session) -> None:
    _session[:] = [session]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After a timeout, leave without joining the threads the hung test left running."""
    if not _timed_out:
        return
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if not left:
        return
    status = int(_session[0].exitstatus) if _session else 1
    sys.stdout.write(f"\n{len(_timed_out)} test(s) timed out ({', '.join(_timed_out)}); leaving without waiting for "
                     f"the threads they left running: {', '.join(left)}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
