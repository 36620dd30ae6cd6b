"""The stage quota of the history-store conformance suite: ``history.maxStageBytes`` at and either side of its boundary.

A store that stages a turn before publishing it bounds the bytes of its live unpublished stages
(docs/history.md, "Stages"): a commit whose stage would take the live stages over the quota is
refused with :class:`~monoagent._kernel.errors.HistoryStoreError`, committed history is never
touched to make room, and the quota counts live stages only, so the same commit succeeds once
the other turn is published.

The test needs three things a store may not have, and skips naming the one that is missing:
``make_store(tmp_path, max_stage_bytes=...)`` (the quota as a keyword), ``stats()`` (which reports
``stage_bytes``, how the suite measures a stage without knowing the store's serialisation) and
:meth:`~monoagent.testing.history_contract_support.HistoryContractBase.pause_inside_commit` (to keep
one stage live while another commit stages).

The boundary is found, not assumed: the suite holds each of the two turns' commits open on its own
and reads the live ``stage_bytes`` from ``stats()``, then builds stores whose quota is their sum
plus or minus :data:`~monoagent.testing.history_contract_support.SLACK` bytes. The slack is there because a stage holds the time of its commit,
whose text may be a few bytes longer or shorter from one commit to the next; the contract cannot
pin a store's serialisation to the byte.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message
from monoagent._kernel.stores import ManagedHistoryStore
from monoagent.testing.history_contract_support import (
    SLACK,
    STAMP,
    CommitHold,
    HistoryContractBase,
    StoreThread,
    implementing,
    wait_for,
)

_T = TypeVar("_T")


def quota_turn(letter: str) -> list[Message]:
    """Two messages of 40,000 bytes each: a stage of about 80 KB, whatever the store's framing."""
    return [Message("user", letter * 40_000, timestamp=STAMP), Message("assistant", letter.upper() * 40_000, timestamp=STAMP)]


class HistoryStageContract(HistoryContractBase):
    """``history.maxStageBytes`` (mixed into :class:`~monoagent.testing.HistoryStoreContract`)."""

    def staging(self, directory: Path, quota: int) -> Any:
        """A store on ``directory`` with the stage quota ``quota``, or a skip naming what the store lacks."""
        import pytest

        try:
            store = self.make_store(directory, max_stage_bytes=quota)  # type: ignore[call-arg]  # the optional keyword
        except TypeError:
            pytest.skip("needs make_store(tmp_path, max_stage_bytes=...) (the history.maxStageBytes quota of live "
                        "unpublished stages); this store's make_store does not take it")
        if not isinstance(store, ManagedHistoryStore):
            self.close(store)
            pytest.skip(f"needs a store that implements {implementing(ManagedHistoryStore)} (its stage_bytes) to measure a live stage")
        return store

    def _while_held(self, directory: Path, quota: int, cid: str, turn: list[Message], during: Callable[[], _T]) -> _T:
        """Commit ``turn`` to ``cid`` with the commit held open; return ``during()``, called while it is held."""
        store = self.staging(directory, quota)
        hold = CommitHold(at=None)
        self.holding(store, hold)
        hold.arm()
        thread = StoreThread(lambda: store.commit(cid, turn), f"held-{cid}")
        thread.start()
        try:
            wait_for(hold.held, f"the commit of {cid!r} to reach pause_inside_commit", thread)
            return during()
        finally:
            hold.release.set()
            thread.result()
            self.close(store)

    def _live_stage_bytes(self, directory: Path, cid: str, turn: list[Message]) -> int:
        def measure() -> int:
            reader = self.staging(directory, 1 << 30)
            stats = self.run(reader.stats())
            self.close(reader)
            assert stats.stages == 1 and stats.stage_bytes > 0, f"one commit held open, but stats() reports {stats}"
            return int(stats.stage_bytes)

        return self._while_held(directory, 1 << 30, cid, turn, measure)

    def test_contract_stage_quota_at_its_boundary(self, tmp_path: Path) -> None:
        """With one turn's stage live, another turn stages under a quota just over both, and is refused just under it."""
        first, second = quota_turn("a"), quota_turn("b")
        measured = tmp_path / "measure"
        total = self._live_stage_bytes(measured, "held", first) + self._live_stage_bytes(measured, "next", second)
        for quota, fits in ((total + SLACK, True), (total - SLACK, False)):
            directory = tmp_path / f"quota-{quota}"
            other = self.staging(directory, quota)

            def stage_the_second(other: Any = other) -> BaseException | None:
                try:
                    self.run(other.commit("next", second))
                except HistoryStoreError as exc:
                    return exc
                return None

            refused = self._while_held(directory, quota, "held", first, stage_the_second)
            fresh = self.staging(directory, quota)
            assert self.load(fresh, "held") == first, "the held commit was lost"
            if fits:
                assert refused is None, f"a stage within history.maxStageBytes ({total} of {quota} bytes) was refused: {refused}"
                assert self.load(fresh, "next") == second
            else:
                assert refused is not None, f"live stages of {total} bytes passed history.maxStageBytes = {quota}"
                assert "maxStageBytes" in str(refused), f"the quota error names the limit it hit: {refused}"
                assert self.load(fresh, "next") == [], "a refused commit left history behind"
                self.run(other.commit("next", second))  # the held stage is published: the quota counts live stages only
                assert self.load(self.staging(directory, quota), "next") == second
            self.close(other, fresh)

    def test_contract_a_turn_over_the_whole_stage_quota_is_refused(self, tmp_path: Path) -> None:
        """A turn whose stage alone passes the quota is refused, with committed history intact; a small one fits."""
        alone = self._live_stage_bytes(tmp_path / "measure", "next", quota_turn("b"))
        store = self.staging(tmp_path / "store", alone - SLACK)
        self.run(store.commit("next", [Message("user", "small", timestamp=STAMP)]))
        try:
            self.run(store.commit("next", quota_turn("b")))
        except HistoryStoreError:
            pass
        else:
            raise AssertionError(f"a stage of about {alone} bytes passed history.maxStageBytes = {alone - SLACK}")
        assert [m.content for m in self.load(self.staging(tmp_path / "store", alone - SLACK), "next")] == ["small"]
        stats = self.run(store.stats())
        assert (stats.stages, stats.stage_bytes) == (0, 0), f"a refused stage was left behind: {stats}"
        self.close(store)
