"""Aggregate retention in the history-store conformance suite: ``history.maxConversations`` and ``history.maxBytes``.

:class:`~monoagent._kernel.stores.ManagedHistoryStore` promises that aggregate retention runs
after a successful publication and removes the oldest inactive conversations first (the least
recently committed), never the one just published. A store whose ``make_store`` takes the bound
as a keyword (``max_conversations=``, ``max_bytes=``) proves it at and either side of the boundary;
one that does not skips the test, naming the keyword. All commits go through one handle, which
is the case the documents make exact (a handle may learn of another process's records late).

``max_bytes`` is measured, not assumed: the records' sizes are read from ``stats()`` and the
bound set to their sum plus or minus :data:`~monoagent.testing.history_contract_support.SLACK`, since a record holds the text of its commit
time, which may be a few bytes longer or shorter from one commit to the next.
"""

from __future__ import annotations

from pathlib import Path

from monoagent._kernel.model import Message
from monoagent._kernel.stores import ManagedHistoryStore
from monoagent.testing.history_contract_support import SLACK, STAMP, HistoryContractBase, implementing


def bulky_turn(index: int) -> list[Message]:
    """A turn of about 40 KB, so that three records pass the smallest ``history.maxBytes`` the ``files`` store allows."""
    return [Message("user", f"q{index}:" + "q" * 20_000, timestamp=STAMP), Message("assistant", f"a{index}:" + "a" * 20_000, timestamp=STAMP)]


class HistoryRetentionContract(HistoryContractBase):
    """Retention by count and by bytes (mixed into :class:`~monoagent.testing.HistoryStoreContract`)."""

    def test_contract_retention_by_conversation_count(self, tmp_path: Path) -> None:
        """With ``max_conversations`` 3: two and three records are kept; a fourth prunes the least recently committed."""
        store = self.retaining(tmp_path, max_conversations=3)
        for cid, kept in (("c0", ["c0"]), ("c1", ["c0", "c1"]), ("c2", ["c0", "c1", "c2"])):
            self.run(store.commit(cid, [Message("user", cid)]))
            assert self.listed(store) == kept, f"{len(kept)} conversations under a bound of 3"
        self.run(store.commit("c0", [Message("user", "c0 again")]))  # c1 is now the least recently committed
        self.run(store.commit("c3", [Message("user", "c3")]))
        assert self.listed(self.make_store(tmp_path)) == ["c0", "c2", "c3"], "the fourth conversation must prune c1"
        assert [m.content for m in self.load(self.make_store(tmp_path), "c0")] == ["c0", "c0 again"]
        assert self.load(self.make_store(tmp_path), "c1") == []
        self.close(store)

    def test_contract_retention_by_bytes(self, tmp_path: Path) -> None:
        """With ``max_bytes`` just over three records, three are kept and a fourth prunes the oldest; just under, two."""
        measure = self.retaining(tmp_path / "measure", max_bytes=1 << 30)
        if not isinstance(measure, ManagedHistoryStore):
            import pytest

            self.close(measure)
            pytest.skip(f"needs a store that implements {implementing(ManagedHistoryStore)} to measure the records' bytes")
        for n in range(3):
            self.run(measure.commit(f"c{n}", bulky_turn(n)))
        three = self.run(measure.stats()).bytes
        self.close(measure)
        for bound, kept in ((three + SLACK, ["c0", "c1", "c2"]), (three - SLACK, ["c1", "c2"])):
            directory = tmp_path / f"bound-{bound}"
            store = self.retaining(directory, max_bytes=bound)
            for n in range(3):
                self.run(store.commit(f"c{n}", bulky_turn(n)))
            assert self.listed(store) == kept, f"records of {three} bytes under history.maxBytes = {bound}"
            self.run(store.commit("c3", bulky_turn(3)))
            assert self.listed(self.make_store(directory)) == kept[1:] + ["c3"], "a fourth record must prune the oldest"
            assert [m.content[:3] for m in self.load(self.make_store(directory), "c3")] == ["q3:", "a3:"]
            self.close(store)
