"""A pytest plugin that fails the run on an asyncio future or task whose exception was never retrieved.

asyncio reports such a future when it is garbage-collected, through the loop's exception handler,
which logs ``Future exception was never retrieved`` (or ``Task exception ...``) on the ``asyncio``
logger: a line on stderr for a user, never an error. pytest fails a test on an unraisable
exception (``filterwarnings`` in pyproject.toml) but knows nothing of this one, so this plugin
listens on the ``asyncio`` logger and turns every such report into a failure:

* reported while a test runs (set-up, call or tear-down), it fails that phase of that test;
* reported later (a future held in a reference cycle is collected whenever the collector runs,
  possibly during another test), it fails the test running then, and the message says it may
  come from an earlier one;
* at the end of the session the garbage collector is run once and whatever it reports fails the
  session (exit status 1), listed in the summary.

tests/conftest.py registers an :class:`AsyncioLeaks`; ``pytester`` runs register one in their own conftest.py.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Generator

import pytest

NEVER_RETRIEVED = "exception was never retrieved"
"""What asyncio's default exception handler says of a future or task nobody asked for its exception."""


class _Reports(logging.Handler):
    """The ``asyncio`` logger's reports of never-retrieved exceptions, formatted with their tracebacks."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.reports: list[str] = []
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if NEVER_RETRIEVED in record.getMessage():
            self.reports.append(self.format(record))

    def take(self) -> list[str]:
        taken, self.reports = self.reports, []
        return taken


class AsyncioLeaks:
    """The plugin: one per pytest run (registered by tests/conftest.py as ``asyncio-leaks``)."""

    def __init__(self) -> None:
        self.reports = _Reports()
        self.late: list[str] = []

    def pytest_configure(self, config: pytest.Config) -> None:
        logging.getLogger("asyncio").addHandler(self.reports)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        logging.getLogger("asyncio").removeHandler(self.reports)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        self.late.extend(self.reports.take())  # reported between tests: failed at the session's end, not blamed on this one
        return (yield from self._checked("set-up"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._checked("the call"))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from self._checked("tear-down"))

    def _checked(self, when: str) -> Generator[None, None, None]:
        try:
            result = yield
        except BaseException:  # the phase failed anyway: the reports are listed at the session's end
            self.late.extend(self.reports.take())
            raise
        if reports := self.reports.take():
            pytest.fail(
                f"asyncio reported {len(reports)} exception(s) never retrieved during {when} (it reports one when "
                "the future is garbage-collected, so it may come from an earlier test):\n\n" + "\n\n".join(reports),
                pytrace=False,
            )
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        gc.collect()  # a future held in a reference cycle is reported only when collected
        self.late.extend(self.reports.take())
        if self.late and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return (yield)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.late:
            terminalreporter.section("asyncio exceptions never retrieved", red=True)
            terminalreporter.write_line(
                f"{len(self.late)} future(s) or task(s) were reported outside a passing test phase with an exception "
                "nobody retrieved; the run fails:"
            )
            for report in self.late:
                terminalreporter.write_line(report)
