"""The concurrency clauses of the history-store conformance suite: readers, writers and resets racing commits.

Each test runs every store handle on a thread of its own (:class:`~monoagent.testing.history_contract_support.StoreThread`),
so a store whose commit never yields to the event loop is raced all the same, and each asserts that
the interleaving it is about really happened before it trusts what it found:

- a reader saw every state between the empty conversation and the final one (the writer waits,
  boundedly, for a read after each commit), and, through
  :meth:`~monoagent.testing.history_contract_support.HistoryContractBase.pause_inside_commit`, a read
  made while a commit is held open;
- writers to one conversation had commits in flight at the same time;
- a logical reset ran with commits acknowledged before it, started after it, and in flight during it.

A store that gives the suite no way to observe an interleaving (no ``pause_inside_commit`` and no
overlap seen on threads) skips the test with a reason naming what it needs; none passes having
checked nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from monoagent._kernel.stores import HistoryStore, ManagedHistoryStore
from monoagent.testing.history_contract_support import (
    DEADLINE,
    CommitHold,
    HistoryContractBase,
    StoreThread,
    contents,
    turn_indices,
    turn_messages,
    turns_text,
    wait_for,
)


class InFlight:
    """Counts the commits in flight per conversation, and the most ever in flight at once."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.changed = threading.Condition()

    async def commit(self, store: HistoryStore, conversation_id: str, index: int) -> None:
        with self.changed:
            self.now[conversation_id] = self.now.get(conversation_id, 0) + 1
            self.most[conversation_id] = max(self.most.get(conversation_id, 0), self.now[conversation_id])
            self.changed.notify_all()
        try:
            await store.commit(conversation_id, turn_messages(index))
        finally:
            with self.changed:
                self.now[conversation_id] -= 1

    def wait_until(self, conversation_id: str, count: int) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.now.get(conversation_id, 0) >= count, DEADLINE):
                raise AssertionError(f"gave up waiting for {count} commits to {conversation_id!r} to be in flight at once")


class HistoryConcurrencyContract(HistoryContractBase):
    """Readers, writers and resets racing commits (mixed into :class:`~monoagent.testing.HistoryStoreContract`)."""

    concurrency_writers = 4
    concurrency_turns = 10

    def test_contract_readers_see_whole_turns(self, tmp_path: Path) -> None:
        """A reader on another handle and thread sees only whole turns, and every one acknowledged before it read."""
        turns = 12
        writer = self.make_store(tmp_path, max_messages=1000)
        reader = self.make_store(tmp_path, max_messages=1000)
        acked = [0]  # commits returned so far
        read_after = [threading.Event() for _ in range(turns + 1)]  # [k]: a read begun after k commits returned has ended
        done = threading.Event()
        observed: set[int] = set()  # how many turns the reads saw
        wrong: list[str] = []

        async def write() -> None:
            try:
                for i in range(turns):
                    await writer.commit("c", turn_messages(i))
                    acked[0] = i + 1
                    wait_for(read_after[i + 1], f"a read of the conversation after commit {i + 1}")
            finally:
                done.set()  # the reader stops too when a commit failed; result() then raises the failure

        async def read() -> None:
            try:
                while not done.is_set() and not wrong:
                    began = acked[0]
                    seen = contents(await reader.load("c"))
                    count = len(seen) // 2
                    if seen != turns_text(range(count)):
                        wrong.append(f"a reader saw part of a turn or turns out of order: {seen}")
                    elif not began <= count <= acked[0] + 1:
                        wrong.append(f"a read begun after {began} acknowledged commits saw {count} turns")
                    observed.add(count)
                    read_after[began].set()
            finally:
                for event in read_after:  # a reader that stopped early must not leave the writer waiting
                    event.set()

        threads = [StoreThread(read, "reader"), StoreThread(write, "writer")]
        for thread in threads:
            thread.start()
        threads[0].result()
        assert not wrong, wrong[0]
        threads[1].result()
        assert acked[0] == turns
        assert observed >= set(range(1, turns + 1)), f"the reader never saw the states {sorted(set(range(1, turns + 1)) - observed)}"
        self.close(writer, reader)

    def test_contract_a_read_during_a_commit_sees_a_whole_record(self, tmp_path: Path) -> None:
        """With one commit held open, other handles read the whole old record or the whole new one."""
        writer = self.make_store(tmp_path, max_messages=1000)
        hold = CommitHold(at=2)
        self.holding(writer, hold)
        reader = self.make_store(tmp_path, max_messages=1000)
        assert self.load(reader, "c") == []

        async def write() -> None:
            for i in range(4):
                await writer.commit("c", turn_messages(i))

        thread = StoreThread(write, "writer")
        thread.start()
        try:
            wait_for(hold.held, "the third commit to reach pause_inside_commit", thread)
            fresh = self.make_store(tmp_path, max_messages=1000)
            whole = (turns_text(range(2)), turns_text(range(3)))
            for handle in (reader, fresh):
                assert contents(self.load(handle, "c")) in whole, "a read during a commit saw part of a turn"
                listed = {info.conversation_id: info.message_count for info in self.run(handle.conversations())}
                assert listed in ({"c": 4}, {"c": 6})
                if isinstance(handle, ManagedHistoryStore):  # a store may stage a commit or not, but counts it consistently
                    stats = self.run(handle.stats())
                    assert stats.records == 1 and (stats.stages == 0) == (stats.stage_bytes == 0), stats
        finally:
            hold.release.set()
        thread.result()
        assert contents(self.load(reader, "c")) == turns_text(range(4))
        self.close(writer, reader, fresh)

    def test_contract_concurrent_writers_lose_nothing(self, tmp_path: Path) -> None:
        """Writers on their own handles and threads: one conversation's commits serialise, none is lost."""
        writers = [self.make_store(tmp_path, max_messages=10_000) for _ in range(self.concurrency_writers)]
        turns = self.concurrency_turns
        flight = InFlight()
        hold = CommitHold(at=0)
        try:
            for store in writers:
                self.pause_inside_commit(store, hold)
            holding = True
        except NotImplementedError:
            holding = False
        start = threading.Barrier(len(writers), timeout=DEADLINE)

        def writing(w: int, store: HistoryStore) -> StoreThread:
            async def write() -> None:
                start.wait()
                for i in range(turns):
                    await flight.commit(store, "shared", w * 1000 + i)
                    await flight.commit(store, f"own-{w}", w * 1000 + i)

            return StoreThread(write, f"writer-{w}")

        threads = [writing(w, store) for w, store in enumerate(writers)]
        for thread in threads:
            thread.start()
        if holding:
            try:
                wait_for(hold.held, "a commit to reach pause_inside_commit", *threads)
                flight.wait_until("shared", 2)  # another writer's commit to the same conversation began meanwhile
            finally:
                hold.release.set()
        for thread in threads:
            thread.result()
        if flight.most["shared"] < 2:
            import pytest

            pytest.skip("no two commits to one conversation were ever in flight at once, so nothing was raced; "
                        "provide HistoryStoreContract.pause_inside_commit to let the suite hold a commit open")
        check = self.make_store(tmp_path, max_messages=10_000)
        shared = contents(self.load(check, "shared"))
        assert len(shared) == 2 * turns * len(writers)
        assert shared == turns_text(turn_indices(shared)), "a turn was split by another writer's"
        for w in range(len(writers)):
            mine = [i for i in turn_indices(shared) if i // 1000 == w]
            assert mine == [w * 1000 + i for i in range(turns)], "each writer's turns in its order"
            assert contents(self.load(check, f"own-{w}")) == turns_text([w * 1000 + i for i in range(turns)])
        self.close(check, *writers)

    def test_contract_logical_reset_is_atomic_with_commits(self, tmp_path: Path) -> None:
        """A commit acknowledged before the reset is gone, one begun after it survives, one during it is either, wholly."""
        resetter = self.declaring(tmp_path, ManagedHistoryStore, max_messages=1000)
        buckets = [f"s:2025-01-0{d}" for d in range(1, 4)]
        writers = [self.make_store(tmp_path, max_messages=1000) for _ in buckets]
        hold = CommitHold(at=None)
        try:
            self.pause_inside_commit(writers[0], hold)
            holding = True
        except NotImplementedError:
            holding = False
        phase = [0]  # 0: before the reset is called, 1: while it runs, 2: after it returned
        commits: dict[str, list[tuple[int, int, int]]] = {b: [] for b in buckets}  # (turn, phase called, phase returned)
        warm = [threading.Event() for _ in buckets]  # each writer has two commits acknowledged before the reset
        self.run(self._precommit(resetter, buckets))

        def writing(n: int, bucket: str, store: HistoryStore) -> StoreThread:
            async def write() -> None:
                i = late = 0
                while late < 2:  # two commits begun after the reset returned
                    assert i < 400, "the reset never returned while commits went on"
                    called = phase[0]
                    await store.commit(bucket, turn_messages(i))
                    commits[bucket].append((i, called, phase[0]))
                    i += 1
                    if i == 2:
                        warm[n].set()
                    late += called == 2

            return StoreThread(write, f"writer-{bucket}")

        threads = [writing(n, b, s) for n, (b, s) in enumerate(zip(buckets, writers, strict=True))]
        for thread in threads:
            thread.start()
        try:
            for n, event in enumerate(warm):
                wait_for(event, f"two acknowledged commits to {buckets[n]}", threads[n])
            if holding:
                hold.arm()
                wait_for(hold.held, "a commit to reach pause_inside_commit", threads[0])
            phase[0] = 1
            resetting = StoreThread(lambda: resetter.reset_logical("s"), "reset")
            resetting.start()
        finally:
            hold.release.set()
        report = resetting.result()
        phase[0] = 2
        for thread in threads:
            thread.result()
        overlapped = [c for b in buckets for c in commits[b] if c[1] < 2 and c[2] >= 1]
        if not overlapped:
            import pytest

            pytest.skip("no commit was in flight while the reset ran, so nothing was raced; provide "
                        "HistoryStoreContract.pause_inside_commit to let the suite hold a commit open")
        fresh = self.make_store(tmp_path, max_messages=1000)
        surviving = 0
        for bucket in buckets:
            survived = contents(self.load(fresh, bucket))
            indices = turn_indices(survived)
            assert survived == turns_text(indices)
            order = [i for i, _, _ in commits[bucket]]
            assert indices == order[len(order) - len(indices):], "only a suffix of a bucket's turns survives a reset"
            for i, called, returned in commits[bucket]:
                assert returned > 0 or i not in indices, f"turn {i} of {bucket}, acknowledged before the reset, survived it"
                assert called < 2 or i in indices, f"turn {i} of {bucket}, committed after the reset returned, was lost"
            surviving += len(survived)
        assert report.logical_conversation_id == "s" and sorted(report.conversation_ids) == buckets
        committed = sum(len(commits[b]) + 1 for b in buckets) * 2
        assert report.messages + surviving == committed, "every message was either reset or survived, none lost twice"
        self.close(resetter, fresh, *writers)

    def test_contract_a_half_reset_session_is_never_seen(self, tmp_path: Path) -> None:
        """While a logical reset is held open, every bucket reads as reset or every one as before, and a commit waits or lands after."""
        resetter = self.declaring(tmp_path, ManagedHistoryStore)
        hold = CommitHold(at=1)
        self.holding(resetter, hold, inside="reset")
        session = ["s", "s:2025-01-01", "s:2025-01-02", "s:2025-01-03"]
        warm = self.make_store(tmp_path)
        for n, cid in enumerate(session):
            self.run(warm.commit(cid, turn_messages(n)))
        before = {cid: contents(self.load(warm, cid)) for cid in session}
        reset: dict[str, list[str]] = {cid: [] for cid in session}
        resetting = StoreThread(lambda: resetter.reset_logical("s"), "reset")
        resetting.start()
        try:
            wait_for(hold.held, "the reset to reach pause_inside_reset a second time", resetting)
            for handle in (warm, self.make_store(tmp_path)):
                seen = {cid: contents(self.load(handle, cid)) for cid in session}
                assert seen in (before, reset), f"a reader saw a half-reset session: {seen}"
            committer = self.make_store(tmp_path)
            committing = StoreThread(lambda: committer.commit("s:2025-01-02", turn_messages(7)), "commit")
            committing.start()
        finally:
            hold.release.set()
        report = resetting.result()
        committing.result()
        after = {cid: contents(self.load(self.make_store(tmp_path), cid)) for cid in session}
        landed_after = after == {**reset, "s:2025-01-02": turns_text([7])}
        assert landed_after or after == reset, f"the commit made during the reset: {after}"
        assert sorted(report.conversation_ids) == sorted(session)
        assert report.messages == (8 if landed_after else 10), "the reset's report counts what it removed"
        self.close(resetter, warm, committer)

    @staticmethod
    async def _precommit(store: Any, buckets: list[str]) -> None:
        for bucket in buckets:  # committed before the reset starts: the reset must remove these
            await store.commit(bucket, turn_messages(99))
