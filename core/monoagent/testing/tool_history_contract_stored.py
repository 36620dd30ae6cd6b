"""The tool-history clauses about the stored data itself: held by another holder, of another version, or empty.

Mixed into :class:`~monoagent.testing.ToolHistoryStoreContract`. Each clause needs an optional
hook of the store's test class and is skipped, naming it, without: ``set_lock_wait`` and
``hold_lock`` (a lock another process holds: writes fail as unavailable, never half-written,
and are recorded again once it is released; a ``flush()`` bounded by ``asyncio.wait_for`` gives up
and withdraws nothing; a clear covers a write submitted before it that the lock still holds up),
``mark_unknown_version`` (data of a format version the store does not read is refused by every
read, write and clear), ``empty_stored_data`` (a fresh zero-byte data file reads as empty) and
``private_paths`` (a FIFO in place of a stored file is refused, never waited on).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from monoagent._kernel.errors import ToolHistoryError, ToolHistoryUnavailable
from monoagent._kernel.model import ToolCall, ToolResult
from monoagent._kernel.stores import ToolHistoryStore, ToolInvocation
from monoagent.testing.tool_history_contract_support import ToolHistoryContractBase, clause

_T = TypeVar("_T")

WAIT = 120.0
"""The bound on every wait of these clauses (a write, a flush, recovery after a lock): a store that
hangs fails the clause instead of the suite hanging."""

SHORT_LOCK_WAIT_MS = 50
LONG_LOCK_WAIT_MS = 600_000


def _invocation(call_id: str) -> ToolInvocation:
    return ToolInvocation("conv", "conv", "run", ToolCall(call_id, "probe", {}), 1.0)


class ToolHistoryStoredDataContract(ToolHistoryContractBase):
    """Locks held elsewhere, a bounded ``flush()``, a clear after a held-up write, data of an unknown version,
    a zero-byte data file, a FIFO in a stored file's place (mixed into the contract)."""

    @staticmethod
    async def _write(store: ToolHistoryStore, call_id: str) -> None:
        """One call, invocation and result, each waited for (bounded by :data:`WAIT`)."""
        invocation = _invocation(call_id)
        await asyncio.wait_for(store.write_invocation(invocation), WAIT)
        await asyncio.wait_for(store.write_result(invocation, ToolResult(call_id, "probe", "ok"), time.time()), WAIT)

    async def _recorded_again(self, store: ToolHistoryStore, call_id: str) -> None:
        """Write ``call_id`` until the store takes it: while it reports itself unavailable, a bounded wait."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                await self._write(store, call_id)
                return
            except ToolHistoryUnavailable as exc:
                assert time.monotonic() < deadline, f"the lock was released, yet writes were still refused after {WAIT:g} s: {exc}"
                await asyncio.sleep(0.01)  # the store's back-off, not synchronisation: it refuses until its next attempt

    @clause
    async def test_contract_a_lock_held_past_the_wait_fails_writes_as_unavailable(self, tmp_path: Path) -> None:
        """Another holder keeps a write transaction open longer than the store waits: a write fails with
        ``ToolHistoryUnavailable`` (the store cannot be reached, not a definitive rejection) and writes
        nothing, a clear from a handle that never wrote fails saying why and removes nothing; once the
        lock is released the store records and clears again (nothing stays failed)."""
        import pytest

        store = self._store(tmp_path)
        maintainer = self._store(tmp_path)  # what the history commands open: a handle that never writes
        try:
            self.set_lock_wait(store, SHORT_LOCK_WAIT_MS)
            self.set_lock_wait(maintainer, SHORT_LOCK_WAIT_MS)
            await self._write(store, "a")
            with self.hold_lock(store, write=True):
                with pytest.raises(ToolHistoryError) as refused:
                    await asyncio.wait_for(store.write_invocation(_invocation("b")), WAIT)
                assert isinstance(refused.value, ToolHistoryUnavailable), (
                    f"a lock held elsewhere makes the store unavailable, not {type(refused.value).__name__}: {refused.value}")
                with pytest.raises(ToolHistoryError) as uncleared:
                    await asyncio.wait_for(maintainer.clear_all(), WAIT)
                for error in (refused.value, uncleared.value):
                    assert " " in str(error), f"a refusal says what went wrong, not {str(error)!r}"
            await self._recorded_again(store, "c")
            assert await self.ids(store) == ["a", "c"], "the refused write left nothing behind, the refused clear removed nothing"
            assert await self.counts(maintainer) == (2, 4)
            report = await maintainer.clear_all()
            assert (report.calls, report.records) == (2, 4) and await self.records(store) == [], "once the lock is gone, a clear goes through"
        finally:
            await self.close(maintainer)
            await self.close(store)

    @clause
    async def test_contract_a_reader_holding_the_data_never_half_writes(self, tmp_path: Path) -> None:
        """A reader keeps a read transaction open: a write either is recorded or fails as unavailable
        without a trace; once the reader is done the store records again."""
        import pytest

        store = self._store(tmp_path)
        try:
            self.set_lock_wait(store, SHORT_LOCK_WAIT_MS)
            await self._write(store, "a")
            with self.hold_lock(store, write=False):
                try:
                    await asyncio.wait_for(store.write_invocation(_invocation("b")), WAIT)
                    waited = False
                except ToolHistoryUnavailable:
                    waited = True
            if not waited:
                pytest.skip("the store's writes do not wait for a reader, so there is no refused write to observe")
            await self._recorded_again(store, "c")
            assert await self.ids(store) == ["a", "c"], "the write that met the reader left nothing behind, the next one was recorded"
            assert await self.counts(store) == (2, 4)
        finally:
            await self.close(store)

    @clause
    async def test_contract_a_bounded_flush_gives_up_and_withdraws_nothing(self, tmp_path: Path) -> None:
        """``asyncio.wait_for(flush(), timeout)`` raises ``TimeoutError`` while a write it waits for is held up
        (here by a lock held elsewhere), without cancelling that write: it completes once the lock is released."""
        import pytest

        store = self._store(tmp_path)
        try:
            self.set_lock_wait(store, LONG_LOCK_WAIT_MS)
            await self._write(store, "a")
            with self.hold_lock(store, write=True):
                pending = asyncio.ensure_future(store.write_invocation(_invocation("b")))
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(store.flush(), 0.05)
                assert not pending.done(), "the write went through a lock held elsewhere"
            await asyncio.wait_for(pending, WAIT)
            await asyncio.wait_for(store.flush(), WAIT)
            assert await self.ids(store) == ["a", "b"] and (await self.only(store, "b")).status is None
        finally:
            await self.close(store)

    async def _refuses_everything(self, store: ToolHistoryStore, version: str | None) -> None:
        import pytest

        actions: dict[str, Callable[[], Awaitable[Any]]] = {
            "records": store.records,
            "stats": store.stats,
            "clear_all": store.clear_all,
            "write": lambda: self._write(store, "b"),
        }
        for name, action in actions.items():
            with pytest.raises(ToolHistoryError) as refused:
                await asyncio.wait_for(action(), WAIT)
            assert " " in str(refused.value), f"{version}: {name} refused without saying why: {str(refused.value)!r}"

    @clause
    async def test_contract_a_clear_covers_the_writes_submitted_before_it(self, tmp_path: Path) -> None:
        """A clear through a store covers every write submitted through it before the clear, even one still
        held up (here by a lock held elsewhere): a reset never leaves behind a record submitted before it."""
        store = self._store(tmp_path)
        try:
            self.set_lock_wait(store, LONG_LOCK_WAIT_MS)
            await self._write(store, "a")
            with self.hold_lock(store, write=True):
                pending = asyncio.ensure_future(store.write_invocation(_invocation("b")))
                await asyncio.sleep(0)  # the write starts (and is submitted) before the clear does
                clearing = asyncio.ensure_future(store.clear_all())
                await asyncio.sleep(0)
                assert not pending.done(), "the write was settled before the clear began: nothing was observed"
            await asyncio.wait_for(pending, WAIT)
            report = await asyncio.wait_for(clearing, WAIT)
            assert await self.records(store) == [], "a record submitted before the clear outlived it"
            assert (report.calls, report.records) == (2, 3), "it cleared the call written before it and the one held up"
        finally:
            await self.close(store)

    @clause
    async def test_contract_data_of_an_unknown_version_is_refused(self, tmp_path: Path) -> None:
        """Data claiming a format version the store does not read (a newer release's), or none: every read,
        clear and write fails with a ``ToolHistoryError`` that says why."""
        for version in ("999", None):
            home = tmp_path / (version or "unmarked")
            store = self._store(home)
            try:
                await self._write(store, "a")
            finally:
                await self.close(store)
            self.mark_unknown_version(store, version)
            again = self._store(home)
            try:
                await self._refuses_everything(again, version)
            finally:
                await self.close(again)

    @clause
    async def test_contract_a_zero_byte_data_file_reads_as_empty(self, tmp_path: Path) -> None:
        """A fresh zero-byte data file is an empty store, not a corrupt one: nothing to read, count or clear,
        and the next write records afresh."""
        store = self._store(tmp_path)
        try:
            await self._write(store, "a")
        finally:
            await self.close(store)
        self.empty_stored_data(store)
        again = self._store(tmp_path)
        try:
            assert await self.records(again) == [] and await self.records(again, conversation_id="conv") == []
            stats = await again.stats()
            assert (stats.calls, stats.records, stats.bytes) == (0, 0, 0), "an empty file holds nothing"
            for clear in (again.clear_all, lambda: again.clear_logical("conv"), lambda: again.clear_conversation("conv")):
                report = await clear()
                assert (report.calls, report.records, report.bytes) == (0, 0, 0), "clearing an empty store removes nothing"
            await self._write(again, "b")
            assert await self.ids(again) == ["b"] and await self.counts(again) == (1, 2)
        finally:
            await self.close(again)

    @clause
    async def test_contract_a_fifo_in_place_of_a_stored_file_is_refused(self, tmp_path: Path) -> None:
        """Each regular file ``private_paths()`` names that outlives the store, replaced (the store closed) by a
        FIFO: the next write fails with a ``ToolHistoryError`` naming it, and a read shows what the store held
        or fails closed. Neither may open the FIFO: that blocks until someone writes into it."""
        import pytest

        for index, relative in enumerate(await self._lasting_paths(tmp_path, regular=True)):
            home = tmp_path / f"fifo-{index}"
            held = await self._closed_with_one_call(home)
            fifo = home / relative
            fifo.unlink()
            os.mkfifo(fifo, 0o600)
            store = self._store(home)
            try:
                with pytest.raises(ToolHistoryError) as refused:
                    await self._bounded(fifo, lambda: self._write(store, "b"))  # noqa: B023  (called in this iteration)
                assert relative.name in str(refused.value), f"the refusal names what it refused: {refused.value}"
                try:
                    assert await self._bounded(fifo, store.records) == held, "a read shows what the store held, or fails closed"
                except ToolHistoryError as error:
                    assert " " in str(error), f"a refusal says what went wrong, not {str(error)!r}"
            finally:
                self._release(fifo)
                await self.close(store)

    @staticmethod
    def _release(fifo: Path) -> None:
        """Feed a FIFO whatever waits on it, so that a store that opened it gets garbage instead of blocking for good."""
        with contextlib.suppress(OSError):
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, b"not a store " * 1024)
            finally:
                os.close(fd)

    async def _bounded(self, fifo: Path, action: Callable[[], Awaitable[_T]]) -> _T:
        """``await action()``, its value or its exception; a store still blocked on the FIFO after :data:`WAIT`
        fails the clause. A watchdog thread feeds the FIFO then, which frees a store blocked opening it,
        whether on a thread of its own or (wrongly) on the event loop's."""
        fed = threading.Event()

        def feed() -> None:
            fed.set()
            self._release(fifo)

        watchdog = threading.Timer(WAIT, feed)
        watchdog.daemon = True
        watchdog.start()
        try:
            value = await action()
        except BaseException as exc:
            if fed.is_set():
                raise AssertionError(f"the store waited on the FIFO at {fifo} for {WAIT:g} s instead of refusing it") from exc
            raise
        finally:
            watchdog.cancel()
        if fed.is_set():
            raise AssertionError(f"the store waited on the FIFO at {fifo} for {WAIT:g} s instead of refusing it")
        return value
