"""What the history-store conformance suite is built on: the hooks a store's test module supplies,
the helpers every part of the suite shares, and the threads and holds its concurrency tests use.

:class:`HistoryContractBase` is the base of :class:`~monoagent.testing.history_contract.HistoryStoreContract`;
a store's test module subclasses that and overrides :meth:`~HistoryContractBase.make_store` and,
optionally, :meth:`~HistoryContractBase.corrupt`, :meth:`~HistoryContractBase.replace_record` and
:meth:`~HistoryContractBase.pause_inside_commit`.

The concurrency tests run each store handle on a thread of its own (:class:`StoreThread`, one event
loop per thread), so a store whose commit never yields to the event loop is still raced against
readers and other writers. Every wait on another thread is bounded by :data:`DEADLINE` seconds: a
deadline only ever turns a hang into a failure naming what never happened; no test passes or
fails on how long something took.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from monoagent._kernel.components import HISTORY_STORES, protocol_members
from monoagent._kernel.model import Message
from monoagent._kernel.stores import HistoryStore, ManagedHistoryStore

_T = TypeVar("_T")

DEADLINE = 120.0
"""Seconds a concurrency test waits for another thread before it fails as hung (never a measure of speed)."""
STAMP = 1_700_000_000.25
"""The timestamp of the messages whose size matters: a timestamp is part of a serialised message."""
SLACK = 64
"""Bytes either side of a measured size boundary: a stage or record holds the text of its commit time,
which may be a few bytes longer or shorter from one commit to the next."""


def turn_messages(index: int, user: str | None = None, answer: str | None = None) -> list[Message]:
    """One turn: a user message and the assistant's answer, numbered so order can be checked."""
    return [
        Message("user", user if user is not None else f"question {index}", name="Alice (@alice)"),
        Message("assistant", answer if answer is not None else f"answer {index}"),
    ]


def turns_text(indices: Sequence[int]) -> list[str]:
    """The contents :func:`turn_messages` gives for the turns ``indices``, in order."""
    return [text for i in indices for text in (f"question {i}", f"answer {i}")]


def contents(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages]


def turn_indices(texts: Sequence[str]) -> list[int]:
    """The turn numbers of a history made of :func:`turn_messages` turns (each question's number)."""
    return [int(text.split()[1]) for text in texts[::2]]


def wait_for(event: threading.Event, what: str, *workers: StoreThread) -> None:
    """Wait for ``event``; fail naming ``what`` if it does not happen within :data:`DEADLINE`.

    When one of ``workers`` (the threads that would set it) ends first, its error is raised at
    once (or the failure says it ended without ``what``), rather than waiting out the deadline.
    """
    deadline = time.monotonic() + DEADLINE
    while not event.wait(0.05):
        for worker in workers:
            if not worker.is_alive() and not event.is_set():
                worker.result()
                raise AssertionError(f"{worker.name} ended without {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {DEADLINE:.0f} s waiting for {what}")


class StoreThread(threading.Thread):
    """``work()`` (a coroutine function) run by ``asyncio.run`` on a thread of its own; :meth:`result` joins it."""

    def __init__(self, work: Callable[[], Awaitable[Any]], name: str) -> None:
        super().__init__(name=f"history-contract-{name}", daemon=True)
        self.work = work
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        async def main() -> Any:
            return await self.work()

        try:
            self.value = asyncio.run(main())
        except BaseException as exc:  # handed to the test thread by result()
            self.error = exc

    def result(self) -> Any:
        self.join(DEADLINE)
        if self.is_alive():
            raise AssertionError(f"{self.name} did not finish within {DEADLINE:.0f} s (a hung commit, load or reset?)")
        if self.error is not None:
            raise self.error
        return self.value


class CommitHold:
    """The ``pause`` a test installs with :meth:`HistoryContractBase.pause_inside_commit`.

    Calls are counted; the call numbered ``at`` (0-based; :meth:`arm` makes it the next one, None
    holds none) sets :attr:`held` and blocks its commit until the test sets :attr:`release`, so
    the test acts while that commit is provably in progress. Every other call returns at once.
    """

    def __init__(self, at: int | None = 0) -> None:
        self.at = at
        self.calls = 0
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def arm(self) -> None:
        """Hold the next call."""
        with self._lock:
            self.at = self.calls

    def __call__(self) -> None:
        with self._lock:
            number, self.calls = self.calls, self.calls + 1
        if number == self.at:
            self.held.set()
            wait_for(self.release, "the contract to release the commit it holds")


def implementing(capability: type) -> str:
    """``ManagedHistoryStore (reset_logical, stats, clear_all)``: a sub-protocol and the members it adds, for a skip."""
    own = [member for member in protocol_members(capability) if member not in protocol_members(HistoryStore)]
    return f"{capability.__name__} ({', '.join(own)})"


class HistoryContractBase:
    """The hooks a store's test module overrides, and the helpers the suite's tests share."""

    # ------------------------------------------------------------------ what a store provides

    def make_store(self, tmp_path: Path, *, max_messages: int = 64, max_message_bytes: int = 64 * 1024) -> ManagedHistoryStore:
        raise NotImplementedError("subclasses of HistoryStoreContract implement make_store(tmp_path, **bounds)")

    def corrupt(self, store: HistoryStore, conversation_id: str) -> None:
        """Truncate the stored record of ``conversation_id`` into invalid JSON (optional)."""
        import pytest

        pytest.skip("this store does not provide HistoryStoreContract.corrupt")

    def replace_record(self, store: HistoryStore, conversation_id: str, data: bytes) -> None:
        """Store ``data`` as the record of ``conversation_id``, as a hand edit or a damaged disk would (optional)."""
        import pytest

        pytest.skip("this store does not provide HistoryStoreContract.replace_record")

    def newer_record(self, conversation_id: str) -> bytes:
        """A record of ``conversation_id`` as a newer version of the store would write it (optional; with :meth:`replace_record`)."""
        import pytest

        pytest.skip("this store does not provide HistoryStoreContract.newer_record")

    def pause_inside_commit(self, store: HistoryStore, pause: Callable[[], None]) -> None:
        """Make every commit of ``store`` call ``pause()`` once, after it began writing the turn and before it returns (optional).

        ``pause`` may block (the suite holds one commit open with it, then reads, commits or resets
        through other handles on other threads); it is called on whatever thread does the commit's
        work, once per commit. The natural place is just before the new record is published (the
        ``files`` store's test module wraps the rename). Without it, the tests that must hold a
        commit open are skipped, naming this method; the others race commits on threads.
        """
        raise NotImplementedError

    def pause_inside_reset(self, store: HistoryStore, pause: Callable[[], None]) -> None:
        """Make every ``reset_logical`` of ``store`` call ``pause()`` while it is removing the session's records (optional).

        Called on the thread doing the reset's work, at least once after it began and before it
        returns; ideally between the removal of one record and the next (the ``files`` store's
        test module pauses before each record's unlink), where a half-reset session would show.
        Without it, the test of reads and commits during a reset is skipped, naming this method.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def run(coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run(coroutine)

    def commit_turns(self, store: HistoryStore, conversation_id: str, turns: range) -> None:
        async def go() -> None:
            for i in turns:
                await store.commit(conversation_id, turn_messages(i))

        self.run(go())

    def declaring(self, tmp_path: Path, *capabilities: type, **bounds: Any) -> Any:
        """A store from :meth:`make_store`, or a skip when it does not implement every one of the sub-protocols
        ``capabilities`` (:class:`~monoagent._kernel.stores.ManagedHistoryStore`, ...); the skip names them."""
        store = self.make_store(tmp_path, **bounds)
        missing = [capability for capability in capabilities if not isinstance(store, capability)]
        if missing:
            import pytest

            self.close(store)
            implemented = sorted(capability.__name__ for capability in HISTORY_STORES.implemented(store))
            pytest.skip(
                f"needs a store that implements {' and '.join(map(implementing, missing))}; "
                f"this store implements {', '.join(implemented) or 'no sub-protocol of HistoryStore'}"
            )
        return store

    def retaining(self, directory: Path, **bound: Any) -> Any:
        """A store with the retention ``bound`` keywords, or a skip naming the keywords its ``make_store`` does not take."""
        import pytest

        try:
            return self.make_store(directory, **bound)
        except TypeError:
            pytest.skip(f"needs make_store(tmp_path, {', '.join(f'{k}=...' for k in bound)}) (aggregate retention); "
                        f"this store's make_store does not take it")

    def listed(self, store: Any) -> list[str]:
        """The ids of the conversations ``store`` lists, sorted."""
        return sorted(info.conversation_id for info in self.run(store.conversations()))

    def with_totals(self, tmp_path: Path) -> Any:
        """A store from :meth:`make_store`, or a skip when it is not a ``ManagedHistoryStore`` (``stats()``, ``clear_all()``)."""
        return self.declaring(tmp_path, ManagedHistoryStore)

    def holding(self, store: HistoryStore, hold: CommitHold, *, inside: str = "commit") -> None:
        """Install ``hold`` in ``store``'s commits (or resets), or skip naming the hook when the store gives no way."""
        try:
            getattr(self, f"pause_inside_{inside}")(store, hold)
        except NotImplementedError:
            import pytest

            self.close(store)
            pytest.skip(
                f"needs HistoryStoreContract.pause_inside_{inside} (a way to hold one {inside} open) to observe reads, commits "
                f"or resets while a {inside} is in progress; this store's test module does not provide it"
            )

    def load(self, store: HistoryStore, conversation_id: str, **kwargs: Any) -> list[Message]:
        return list(self.run(store.load(conversation_id, **kwargs)))

    def close(self, *stores: HistoryStore) -> None:
        for store in stores:
            self.run(store.close())
