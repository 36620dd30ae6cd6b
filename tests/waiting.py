"""Bounded waits for the suite: a condition polled until it holds, or a failure naming what never came.

A test that waits for something another thread, task or process does (a run to reach the queue, a
receiver to see a request, a writer to append a line) polls an observable condition. Polling with
no bound turns a bug into a hang: a broken admission check once made the suite wait for a private
counter for 15 minutes instead of failing. Every such wait goes through :func:`wait_until` or
:func:`until`, whose deadline only ends a failing test (it is never a timing guess a passing test
depends on) and whose failure says what was awaited.

``DEFAULT_BOUND_S`` is generous because it only matters when the test is already failing; the
per-test timeout (``timeout`` in pyproject.toml's pytest options) stays above it, so the message
below, not pytest-timeout's stack dump, is what a failing wait reports.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEFAULT_BOUND_S = 30.0
"""How long a wait may take before the test fails (the condition normally holds in milliseconds)."""


class WaitedTooLong(AssertionError):
    """A bounded wait's condition never held; the message names what was awaited and for how long."""


def _failure(what: str, timeout: float) -> WaitedTooLong:
    return WaitedTooLong(f"timed out after {timeout:g} s waiting for {what}")


def wait_until(condition: Callable[[], object], what: str, *, timeout: float = DEFAULT_BOUND_S,
               interval: float = 0.01) -> None:
    """Block until ``condition()`` is true; raise :class:`WaitedTooLong` naming ``what`` after ``timeout`` s.

    For waits in a test's own thread on work done elsewhere (a thread, a subprocess, a server).
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise _failure(what, timeout)
        time.sleep(interval)


async def until(condition: Callable[[], object], what: str, *, timeout: float = DEFAULT_BOUND_S,
                interval: float = 0.0) -> None:
    """Yield to the event loop until ``condition()`` is true; raise :class:`WaitedTooLong` after ``timeout`` s.

    ``interval`` 0 yields one loop iteration at a time, so a condition set by another task on the
    same loop is seen at the first step it holds (the interleaving a test is about is not skipped).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            raise _failure(what, timeout)
        await asyncio.sleep(interval)
