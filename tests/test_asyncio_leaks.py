"""The suite fails on an asyncio exception never retrieved (tests/asyncio_leaks.py), in a pytest run of its own."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
from asyncio_leaks import AsyncioLeaks

def pytest_configure(config):
    config.pluginmanager.register(AsyncioLeaks(), "asyncio-leaks")
"""

PLANTED = """
import asyncio
import gc

def leak():
    async def main():
        asyncio.get_running_loop().create_future().set_exception(RuntimeError("planted"))
    asyncio.run(main())

def test_a_future_left_with_its_exception():
    leak()
    gc.collect()

def test_a_task_that_failed_unawaited():
    async def main():
        async def fail():
            raise ValueError("planted in a task")
        task = asyncio.create_task(fail())
        await asyncio.sleep(0)
        del task
    asyncio.run(main())
    gc.collect()

def test_a_retrieved_exception_is_fine():
    async def main():
        future = asyncio.get_running_loop().create_future()
        future.set_exception(RuntimeError("read"))
        assert isinstance(future.exception(), RuntimeError)
    asyncio.run(main())
    gc.collect()
"""

CYCLE = """
import asyncio

class Holder:
    pass

def test_a_future_in_a_reference_cycle_is_caught_at_the_end():
    async def main():
        holder = Holder()
        holder.future = asyncio.get_running_loop().create_future()
        holder.future.set_exception(RuntimeError("held in a cycle"))
        holder.itself = holder
    asyncio.run(main())
"""


TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _plugin_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


def test_a_never_retrieved_exception_fails_the_test_it_is_reported_in(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_planted=textwrap.dedent(PLANTED))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*asyncio reported 1 exception(s) never retrieved during the call*",
        "*Future exception was never retrieved*", "*RuntimeError: planted*",
        "*Task exception was never retrieved*", "*ValueError: planted in a task*",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_one_collected_only_at_the_end_fails_the_session(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cycle=textwrap.dedent(CYCLE))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*asyncio exceptions never retrieved*", "*RuntimeError: held in a cycle*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------------------- what the check found in the code


def test_a_tool_history_job_that_fails_after_its_caller_was_cancelled_leaves_nothing_unretrieved() -> None:
    """The writer thread's job outlives a cancelled caller (the shield keeps it queued); its failure must still be read."""
    import asyncio
    import concurrent.futures
    import gc

    from monoagent_plugins.history.tool_calls.store import _outcome

    async def main() -> None:
        job: concurrent.futures.Future[int] = concurrent.futures.Future()
        waiting = asyncio.create_task(_outcome(job))
        await asyncio.sleep(0)  # the task awaits the shield now
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        settled = asyncio.Event()
        job.set_exception(OSError("disk full"))  # the writer thread fails the job after the caller left
        asyncio.get_running_loop().call_soon(settled.set)  # wrap_future copies the outcome over in a callback first
        await settled.wait()

    asyncio.run(main())
    gc.collect()  # a never-retrieved exception is reported now, and fails this test (tests/asyncio_leaks.py)


def test_a_continuity_publication_that_fails_with_nobody_waiting_leaves_nothing_unretrieved() -> None:
    """The failure is kept for the next turn of the conversation (which retries it); with no next turn it is not noise."""
    import asyncio
    import gc

    from monoagent._pipeline.continuity import PublicationBarrier

    async def main() -> str:
        barrier = PublicationBarrier()

        async def publish() -> None:
            raise OSError("the history store is read-only")

        task = barrier.start("c", publish)
        await asyncio.wait({task})  # nobody awaits it: the turn that started it was cancelled meanwhile
        return repr(barrier._pending["c"].error)

    assert asyncio.run(main()) == "OSError('the history store is read-only')"  # kept for the retry
    gc.collect()


def test_disk_work_of_a_durable_session_that_fails_after_a_cancel_leaves_nothing_unretrieved() -> None:
    """``_settled`` waits for the work through a cancellation and re-raises the cancellation; the work's failure is read."""
    import asyncio
    import gc

    from monoagent_plugins.history.durable_sessions import _settled

    async def main() -> None:
        started, fail = asyncio.Event(), asyncio.Event()

        async def work() -> None:
            started.set()
            await fail.wait()
            raise OSError("the fence could not be written")

        waiting = asyncio.create_task(_settled(work()))
        await started.wait()
        waiting.cancel()
        fail.set()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    gc.collect()


def test_the_settlement_of_an_isolated_run_that_fails_after_its_waiter_left_leaves_nothing_unretrieved() -> None:
    """An isolated run's settlement holds no barrier: when its reconcile fails after the waiting turn was cancelled, no one else reads it."""
    import asyncio
    import gc
    from types import SimpleNamespace

    from monoagent._pipeline.continuity import PublicationBarrier, await_settlement, begin_settlement

    async def main() -> None:
        fail = asyncio.Event()

        async def reconcile(turn: object) -> None:
            await fail.wait()
            raise OSError("the tool history is read-only")

        collector = SimpleNamespace(claimed=False, sealed=False, seal=lambda: None)
        record = SimpleNamespace(collector=collector, ledger=SimpleNamespace(close_open=lambda *args: None), reconcile=reconcile)
        turn = SimpleNamespace(continuity=record, request=SimpleNamespace(isolated=True, text="hi"), agent=None)
        task = begin_settlement(turn, PublicationBarrier(), "cancelled", None)  # type: ignore[arg-type]
        assert task is not None
        waiting = asyncio.create_task(await_settlement(turn, task))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the waiter awaits the shield now
        waiting.cancel()
        await waiting  # await_settlement returns when cancelled while waiting
        fail.set()
        await asyncio.wait({task})
        assert task.done() and not task.cancelled()  # failed; reading its exception here would hide the flaw

    asyncio.run(main())
    gc.collect()  # a never-retrieved exception is reported now, and fails this test (tests/asyncio_leaks.py)
