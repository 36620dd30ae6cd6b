"""Both bundled tiers and the bundled embedder pass the reusable memory conformance suites."""

from __future__ import annotations

import asyncio

import pytest
from sqlite_vec_required import need_sqlite_vec

from monoagent.testing import EmbedderContract, MemoryTierContract
from monoagent_plugins.embedders import HashedNgramEmbedder, make_hashed_ngrams
from monoagent_plugins.memory_journal import JournalTier, agent_timezone
from monoagent_plugins.memory_lite import LiteTier


class TestLiteContract(MemoryTierContract):
    entry_bound = 4096  # memory.lite.maxEntryBytes

    def make_tier(self, agent, tmp_path):
        return LiteTier(tmp_path / "lite.sqlite")


class TestJournalContract(MemoryTierContract):
    entry_bound = 4096  # memory.journal.maxEntryBytes

    def make_tier(self, agent, tmp_path):
        return JournalTier(tmp_path / "journal.sqlite", make_hashed_ngrams(agent), timezone=agent_timezone(agent))


class TestJournalPurePythonVectorsContract(TestJournalContract):
    def make_tier(self, agent, tmp_path):
        return JournalTier(tmp_path / "journal.sqlite", HashedNgramEmbedder(64), vector_backend="python")


class TestJournalSqliteVecContract(TestJournalContract):
    """The journal's contract on the sqlite-vec backend, pinned: skips where sqlite-vec cannot load
    (fails there under MONOAGENT_REQUIRE_SQLITE_VEC=1, as CI's .venv-vec step sets)."""

    vector_backend = "sqlite-vec"

    @pytest.fixture(autouse=True)
    def _sqlite_vec_loads(self):
        need_sqlite_vec()

    def make_tier(self, agent, tmp_path):
        return JournalTier(
            tmp_path / "journal.sqlite", make_hashed_ngrams(agent), timezone=agent_timezone(agent), vector_backend=self.vector_backend
        )

    def test_the_backend_is_sqlite_vec(self, tmp_path):
        tier = self.tier(tmp_path)
        asyncio.run(tier.add("The otters moved to the lower pond."))
        assert asyncio.run(tier.stats()).details["vector_backend"] == "sqlite-vec"
        self.close(tier)


class TestHashedNgramsContract(EmbedderContract):
    def make_embedder(self):
        return HashedNgramEmbedder()


def test_contracts_are_exported_from_testing():
    import monoagent.testing as testing
    import monoagent.testing.memory_contract as contract

    assert testing.MemoryTierContract is contract.MemoryTierContract
    assert testing.EmbedderContract is contract.EmbedderContract
    assert {"MemoryTierContract", "EmbedderContract"} <= set(testing.__all__)


def test_recall_delimiter_matches_the_rendered_one():
    from monoagent.kernel.model import MemoryHit
    from monoagent.testing.memory_contract import RECALL_DELIMITER
    from monoagent_plugins.conversation import recall_block

    assert recall_block([MemoryHit("lite", "Alice likes tea", 1.0)]).splitlines()[0] == RECALL_DELIMITER
