"""The suite's own bounds: Hypothesis deadlines, and a temporary directory no other session deletes.

**Hypothesis.** The ``monoagent`` profile, loaded here before any test module is imported, sets
``deadline=None``: a property test's examples are bounded by its size strategies and by the
per-test timeout (``timeout`` in pyproject.toml), not by Hypothesis's 200 ms per example, which a
loaded two-core CI machine overruns on perfectly good code. Settings written on a test
(``@settings(max_examples=...)``) keep every value they give and take the rest from this profile;
``--hypothesis-profile NAME`` on the command line still wins. A property test whose deadline is
set below :data:`MIN_DEADLINE_MS` anyway is refused at collection, naming the test.

**Temporary directories.** pytest's default base temp is ``/tmp/pytest-of-<user>/pytest-<n>``,
shared by every session of the user, and a starting session deletes all but the newest three
``pytest-<n>``: two suites run at once (two worktrees, CI and a developer) delete each other's
``tmp_path`` mid-test. Unless ``--basetemp`` is given, each session gets a directory of its own
(``tempfile.mkdtemp``), removed when the session passes and kept, with its path printed, when it
fails.

**asyncio exceptions never retrieved.** A future or task whose exception nobody retrieved fails the
test during which asyncio reports it, or the session (:mod:`asyncio_leaks`), as an unraisable
exception does (``filterwarnings`` in pyproject.toml).
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta

import pytest
from asyncio_leaks import AsyncioLeaks
from hypothesis import settings

pytest_plugins = ["hang_guard"]  # the per-test timeout ends a hang and the run goes on (tests/hang_guard.py)

settings.register_profile("monoagent", deadline=None)
settings.load_profile("monoagent")

MIN_DEADLINE_MS = 1000
"""The shortest per-example Hypothesis deadline the suite accepts (None, no deadline, is the default)."""


def short_deadlines(items: list[pytest.Item]) -> list[str]:
    """The node ids of the property tests whose examples must finish in under :data:`MIN_DEADLINE_MS`."""
    short = []
    for item in items:
        test = getattr(item, "obj", None)
        if not getattr(test, "is_hypothesis_test", False):
            continue
        deadline = test._hypothesis_internal_use_settings.deadline
        if deadline is not None and deadline < timedelta(milliseconds=MIN_DEADLINE_MS):
            short.append(f"{item.nodeid} (deadline {deadline.total_seconds() * 1000:g} ms)")
    return short


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if short := short_deadlines(items):
        raise pytest.UsageError(
            f"property tests with a Hypothesis deadline under {MIN_DEADLINE_MS} ms (flaky on a loaded machine): "
            + "; ".join(short) + ". Give them settings(deadline=None) or a deadline of at least a second."
        )


_own_basetemp: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(AsyncioLeaks(), "asyncio-leaks")
    if config.option.basetemp is None:
        _own_basetemp.append(tempfile.mkdtemp(prefix="monoagent-pytest-"))
        config.option.basetemp = _own_basetemp[0]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _own_basetemp:
        return
    if exitstatus == 0:
        shutil.rmtree(_own_basetemp[0], ignore_errors=True)
    else:
        session.config.stash[_kept] = _own_basetemp[0]


_kept = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if kept := config.stash.get(_kept, None):
        terminalreporter.write_line(f"the failed session's temporary files are kept in {kept}")
