"""The per-test timeout ends a hang: the hung test fails with the stacks and the run goes on (issue 24, item 21).

Each case runs pytest in a subprocess with a timeout of a second or two and a hang planted in a
test, then a test after it: the run must end on its own, well within :data:`BOUND_S`, with the
hung test failed, its stacks printed and the next test run. Before ``tests/hang_guard.py`` a
cancellation that never released its slot held ``asyncio.run`` in its task cancellation after
pytest-timeout's one ``Failed``, and the run had to be killed from outside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BOUND_S = 120.0
"""How long a subprocess run may take before this test calls it hung (it ends in seconds when the guard works)."""

NEVER_RELEASE_THE_SLOT = """
import pytest
from monoagent._pipeline import run_control


@pytest.fixture(autouse=True)
def _a_cancellation_that_never_releases_its_slot(monkeypatch):
    monkeypatch.setattr(run_control.RunControl, "_release_slot", lambda self, run: None)
"""


def run_pytest(cwd: Path, *args: str, python_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m pytest args`` in ``cwd``; fails the test, after killing it, if it runs past :data:`BOUND_S`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (python_path, REPO / "tests") if p)}
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "faulthandler_timeout=0", *args]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail(f"the pytest run did not end within {BOUND_S:g} s: the per-test timeout did not end the hang\n{out[-4000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, "")


def test_a_cancellation_that_never_releases_its_slot_fails_its_test_and_the_run_goes_on(tmp_path):
    (tmp_path / "plant_never_release.py").write_text(NEVER_RELEASE_THE_SLOT, encoding="utf-8")
    hung = "tests/test_cancellation.py::test_a_cancel_frees_the_execution_slot_for_other_conversations"
    after = "tests/test_cancellation.py::test_awaiting_a_handle_gives_the_result_and_its_run_id_is_the_events"
    done = run_pytest(REPO, "-p", "plant_never_release", "-o", "timeout=2", f"--basetemp={tmp_path / 'run'}", hung, after,
                      python_path=tmp_path)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert f"FAILED {hung}" in done.stdout
    assert "Failed: Timeout (>2.0s) from pytest-timeout." in done.stdout
    assert "interrupted again to end the hang" in done.stdout  # asyncio.run's task cancellation hung too, and was ended
    assert "+ Timeout +" in done.stdout and "~ Stack of " in done.stdout  # the other threads' stacks
    assert "_cancel_all_tasks" in done.stdout


def write_tests(folder: Path, body: str) -> None:
    folder.mkdir()
    (folder / "conftest.py").write_text('pytest_plugins = ["hang_guard"]\n', encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\ntimeout = 1\n", encoding="utf-8")
    (folder / "test_planted.py").write_text(textwrap.dedent(body), encoding="utf-8")


def test_a_worker_thread_left_blocked_neither_holds_the_test_nor_the_end_of_the_run(tmp_path):
    write_tests(tmp_path / "case", """
        import asyncio
        import threading


        def test_hangs_in_a_worker_thread():
            asyncio.run(asyncio.to_thread(threading.Event().wait))  # the loop's executor never shuts down


        def test_after_it():
            assert True
    """)
    done = run_pytest(tmp_path / "case", "-p", "no:randomly", f"--basetemp={tmp_path / 'run'}")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert "Failed: Timeout (>1.0s) from pytest-timeout." in done.stdout
    assert "leaving without waiting for the threads they left running: asyncio_0" in done.stdout


def test_a_hang_no_signal_can_interrupt_ends_the_run_with_the_stacks(tmp_path):
    write_tests(tmp_path / "case", """
        import signal
        import threading


        def test_blocks_the_alarm_and_waits_forever():
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            threading.Event().wait()


        def test_after_it():
            assert True
    """)
    done = run_pytest(tmp_path / "case", "-p", "no:randomly", f"--basetemp={tmp_path / 'run'}")
    assert done.returncode == 1, done.stdout
    assert "cannot be interrupted (a call that never returns to Python): ending the run" in done.stdout
    assert "Stack of MainThread" in done.stdout and "test_blocks_the_alarm_and_waits_forever" in done.stdout
    assert "passed" not in done.stdout  # the run ended there: nothing else can stop such a hang
