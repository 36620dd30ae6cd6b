"""The tool-history clauses about the stored data itself: held by another holder, of another version, or empty.

Mixed into :class:`~monoagent.testing.ToolHistoryStoreContract`. Each clause needs an optional
hook of the store's test class and is skipped, naming it, without: ``set_lock_wait`` and
``hold_lock`` (a lock another process holds: writes fail as unavailable, never half-written,
and are recorded again once it is released; ``flush(timeout)`` gives up after ``timeout``; a
clear covers a write submitted before it that the lock still holds up),
``mark_unknown_version`` (data of a format version the store does not read is refused by every
read, write and clear), ``empty_stored_data`` (a fresh zero-byte data file reads as empty) and
``private_paths`` (a FIFO in place of a stored file is refused, never waited on).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monoagent.kernel.errors import ToolHistoryError, ToolHistoryUnavailable
from monoagent.kernel.interfaces import ToolInvocation
from monoagent.kernel.model import ToolCall, ToolResult
from monoagent.testing.tool_history_contract_support import ToolHistoryContractBase

WAIT = 120.0
"""The bound on every wait of these clauses (a write, a flush, recovery after a lock): a store that
hangs fails the clause instead of the suite hanging."""

SHORT_LOCK_WAIT_MS = 50
LONG_LOCK_WAIT_MS = 600_000


def _invocation(call_id: str) -> ToolInvocation:
    return ToolInvocation("conv", "conv", "run", ToolCall(call_id, "probe", {}), 1.0)


class ToolHistoryStoredDataContract(ToolHistoryContractBase):
    """Locks held elsewhere, ``flush(timeout)``, a clear after a held-up write, data of an unknown version,
    a zero-byte data file, a FIFO in a stored file's place (mixed into the contract)."""

    @staticmethod
    def _write(store: Any, call_id: str) -> None:
        """One call, invocation and result, each waited for (bounded); a refusal at submission counts as the write's."""
        invocation = _invocation(call_id)
        store.submit_invocation(invocation).result(WAIT)
        store.submit_result(invocation, ToolResult(call_id, "probe", "ok"), time.time()).result(WAIT)

    def _recorded_again(self, store: Any, call_id: str) -> None:
        """Write ``call_id`` until the store takes it: while it reports itself unavailable, a bounded wait."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                self._write(store, call_id)
                return
            except ToolHistoryUnavailable as exc:
                assert time.monotonic() < deadline, f"the lock was released, yet writes were still refused after {WAIT:g} s: {exc}"
                time.sleep(0.01)

    def test_contract_a_lock_held_past_the_wait_fails_writes_as_unavailable(self, tmp_path: Path) -> None:
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
            self._write(store, "a")
            with self.hold_lock(store, write=True):
                with pytest.raises(ToolHistoryError) as refused:
                    store.submit_invocation(_invocation("b")).result(WAIT)
                assert isinstance(refused.value, ToolHistoryUnavailable), (
                    f"a lock held elsewhere makes the store unavailable, not {type(refused.value).__name__}: {refused.value}")
                with pytest.raises(ToolHistoryError) as uncleared:
                    self.settled(maintainer.clear_all())
                for error in (refused.value, uncleared.value):
                    assert " " in str(error), f"a refusal says what went wrong, not {str(error)!r}"
            self._recorded_again(store, "c")
            assert self.ids(store) == ["a", "c"], "the refused write left nothing behind, the refused clear removed nothing"
            assert self.counts(maintainer) == (2, 4)
            report = self.settled(maintainer.clear_all())
            assert (report.calls, report.records) == (2, 4) and store.records() == [], "once the lock is gone, a clear goes through"
        finally:
            self.close(maintainer)
            self.close(store)

    def test_contract_a_reader_holding_the_data_never_half_writes(self, tmp_path: Path) -> None:
        """A reader keeps a read transaction open: a write either is recorded or fails as unavailable
        without a trace; once the reader is done the store records again."""
        import pytest

        store = self._store(tmp_path)
        try:
            self.set_lock_wait(store, SHORT_LOCK_WAIT_MS)
            self._write(store, "a")
            with self.hold_lock(store, write=False):
                try:
                    store.submit_invocation(_invocation("b")).result(WAIT)
                    waited = False
                except ToolHistoryUnavailable:
                    waited = True
            if not waited:
                pytest.skip("the store's writes do not wait for a reader, so there is no refused write to observe")
            self._recorded_again(store, "c")
            assert self.ids(store) == ["a", "c"], "the write that met the reader left nothing behind, the next one was recorded"
            assert self.counts(store) == (2, 4)
        finally:
            self.close(store)

    def test_contract_flush_gives_up_after_its_timeout(self, tmp_path: Path) -> None:
        """``flush(timeout)`` raises ``TimeoutError`` while a write it waits for is held up (here by a lock
        held elsewhere); the write itself completes once the lock is released."""
        store = self._store(tmp_path)
        try:
            self.set_lock_wait(store, LONG_LOCK_WAIT_MS)
            self._write(store, "a")
            outcome: list[object] = []

            def flush() -> None:
                try:
                    store.flush(timeout=0.05)
                    outcome.append("returned")
                except TimeoutError:
                    outcome.append("timed out")
                except BaseException as exc:  # reported below
                    outcome.append(exc)

            with self.hold_lock(store, write=True):
                pending = store.submit_invocation(_invocation("b"))
                flusher = threading.Thread(target=flush, daemon=True)
                flusher.start()
                flusher.join(WAIT)
                assert not flusher.is_alive(), f"flush(timeout=0.05) still waited after {WAIT:g} s"
                assert not pending.done(), "the write went through a lock held elsewhere"
            assert outcome == ["timed out"], f"flush(timeout) with a write held up: {outcome}"
            pending.result(WAIT)
            store.flush(WAIT)
            assert self.ids(store) == ["a", "b"] and self.only(store, "b").status is None
        finally:
            self.close(store)

    def _refuses_everything(self, store: Any, version: str | None) -> None:
        import pytest

        actions: dict[str, Callable[[], Any]] = {
            "records": store.records,
            "stats": lambda: self.settled(store.stats()),
            "clear_all": lambda: self.settled(store.clear_all()),
            "write": lambda: self._write(store, "b"),
        }
        for name, action in actions.items():
            with pytest.raises(ToolHistoryError) as refused:
                action()
            assert " " in str(refused.value), f"{version}: {name} refused without saying why: {str(refused.value)!r}"

    def test_contract_a_clear_covers_the_writes_submitted_before_it(self, tmp_path: Path) -> None:
        """A clear through a store covers every write submitted through it before the clear, even one still
        held up (here by a lock held elsewhere): a reset never leaves behind a record submitted before it."""
        store = self._store(tmp_path)
        try:
            self.set_lock_wait(store, LONG_LOCK_WAIT_MS)
            self._write(store, "a")
            started = threading.Event()
            outcome: list[Any] = []

            def clear() -> None:
                try:
                    outcome.append(pending.done())  # the clear begins while the write is still held up
                    started.set()
                    outcome.append(self.settled(store.clear_all()))
                except BaseException as exc:  # reported below
                    outcome.append(exc)
                finally:
                    started.set()

            with self.hold_lock(store, write=True):
                pending = store.submit_invocation(_invocation("b"))
                clearing = threading.Thread(target=clear, daemon=True)
                clearing.start()
                assert started.wait(WAIT), f"the clearing thread did not start within {WAIT:g} s"
            pending.result(WAIT)
            clearing.join(WAIT)
            assert not clearing.is_alive(), f"clear_all() still waited after {WAIT:g} s"
            assert outcome[0] is False, "the write was settled before the clear began: nothing was observed"
            report = outcome[1]
            assert not isinstance(report, BaseException), f"the clear failed: {report!r}"
            assert store.records() == [], "a record submitted before the clear outlived it"
            assert (report.calls, report.records) == (2, 3), "it cleared the call written before it and the one held up"
        finally:
            self.close(store)

    def test_contract_data_of_an_unknown_version_is_refused(self, tmp_path: Path) -> None:
        """Data claiming a format version the store does not read (a newer release's), or none: every read,
        clear and write fails with a ``ToolHistoryError`` that says why."""
        for version in ("999", None):
            home = tmp_path / (version or "unmarked")
            store = self._store(home)
            try:
                self._write(store, "a")
            finally:
                self.close(store)
            self.mark_unknown_version(store, version)
            again = self._store(home)
            try:
                self._refuses_everything(again, version)
            finally:
                self.close(again)

    def test_contract_a_zero_byte_data_file_reads_as_empty(self, tmp_path: Path) -> None:
        """A fresh zero-byte data file is an empty store, not a corrupt one: nothing to read, count or clear,
        and the next write records afresh."""
        store = self._store(tmp_path)
        try:
            self._write(store, "a")
        finally:
            self.close(store)
        self.empty_stored_data(store)
        again = self._store(tmp_path)
        try:
            assert again.records() == [] and again.records(conversation_id="conv") == []
            stats = self.settled(again.stats())
            assert (int(stats.calls), int(stats.records), int(stats.bytes)) == (0, 0, 0), "an empty file holds nothing"
            for clear in (again.clear_all, lambda: again.clear_logical("conv"), lambda: again.clear_conversation("conv")):
                report = self.settled(clear())
                assert (report.calls, report.records, report.bytes) == (0, 0, 0), "clearing an empty store removes nothing"
            self._write(again, "b")
            assert self.ids(again) == ["b"] and self.counts(again) == (1, 2)
        finally:
            self.close(again)

    def test_contract_a_fifo_in_place_of_a_stored_file_is_refused(self, tmp_path: Path) -> None:
        """Each regular file ``private_paths()`` names that outlives the store, replaced (the store closed) by a
        FIFO: the next write fails with a ``ToolHistoryError`` naming it, and a read shows what the store held
        or fails closed. Neither may open the FIFO: that blocks until someone writes into it."""
        import pytest

        for index, relative in enumerate(self._lasting_paths(tmp_path, regular=True)):
            home = tmp_path / f"fifo-{index}"
            held = self._closed_with_one_call(home)
            fifo = home / relative
            fifo.unlink()
            os.mkfifo(fifo, 0o600)
            store = self._store(home)
            try:
                with pytest.raises(ToolHistoryError) as refused:
                    self._bounded(fifo, lambda: self._write(store, "b"))  # noqa: B023  (called in this iteration)
                assert relative.name in str(refused.value), f"the refusal names what it refused: {refused.value}"
                try:
                    assert self._bounded(fifo, store.records) == held, "a read shows what the store held, or fails closed"
                except ToolHistoryError as error:
                    assert " " in str(error), f"a refusal says what went wrong, not {str(error)!r}"
            finally:
                self._release(fifo)
                self.close(store)

    @staticmethod
    def _release(fifo: Path) -> None:
        """Feed a FIFO whatever waits on it, so that a store that opened it gets garbage instead of blocking for good."""
        with contextlib.suppress(OSError):
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, b"not a store " * 1024)
            finally:
                os.close(fd)

    def _bounded(self, fifo: Path, action: Callable[[], Any]) -> Any:
        """``action()``'s value or exception; a call still blocked after :data:`WAIT` (on the FIFO) fails the clause."""
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append((True, action()))
            except BaseException as exc:  # re-raised on the caller's thread
                outcome.append((False, exc))

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(WAIT)
        if worker.is_alive():
            self._release(fifo)
            raise AssertionError(f"the store waited on the FIFO at {fifo} for {WAIT:g} s instead of refusing it")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value
