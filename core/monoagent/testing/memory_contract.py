"""Conformance suites for memory tiers and embedders: what any tier or embedder plugin must prove.

A tier plugin (the bundled ``lite`` and ``journal``, a vector database, PostgreSQL) runs the
suite unchanged against itself by subclassing :class:`MemoryTierContract` in its own tests::

    from monoagent.testing import MemoryTierContract

    class TestVectorTier(MemoryTierContract):
        def make_tier(self, agent, tmp_path):
            return VectorTier(path=tmp_path / "vectors", dimensions=agent.embedder("hashed-ngrams").dimensions)

``make_tier`` receives the Agent the tier is built for (as the registry's factory does) and
pytest's ``tmp_path``; two calls with the same ``tmp_path`` must return two handles on the same
stored data. The suite checks the protocol itself (add, search, forget, limits, bounds, odd
queries, persistence, and ``list``/``stats`` when the tier is browsable) and then, through a
real Agent with the bundled ``memory`` plugin, the behaviour around it: recall gated to 5 hits
and 8 KB behind the documented delimiter, nothing at all when nothing matches, capture
attributed to the speaker, and nothing captured from failed or cancelled turns, recalled memory
or preceding messages. A tier with ``automatic_recall = False`` (like ``journal``) must instead never be
injected.

:class:`EmbedderContract` does the same for embedders: fixed dimensions, one finite vector per
text, determinism across instances, and that related texts score closer than unrelated ones.

The suites need pytest only when they run (imported lazily), and run coroutines with
``asyncio.run``, so no asyncio plugin is required.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monoagent.boundary.fences import RECALL_DELIMITER
from monoagent.kernel.hookspecs import hookimpl
from monoagent.kernel.interfaces import Embedder, MemoryTier
from monoagent.kernel.model import MemoryHit, PrecedingMessage, Speaker
from monoagent.text import utf8_len

__all__ = ["RECALL_DELIMITER", "EmbedderContract", "MemoryTierContract"]

CONTRACT_TIER = "contract-tier"
ODD_QUERIES = (
    '"unbalanced quote',
    "NEAR(a b) AND OR NOT",
    "col:umn * ^ - + ()",
    "'; DROP TABLE memories; --",
    "\x00 nul and \u2028 separators",
    "🎉 会议 ünïcødé",
    "x" * 5000,
)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if na == 0 or nb == 0:
        return 0.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


class MemoryTierContract:
    """Subclass with a ``Test`` name and implement :meth:`make_tier`; pytest collects the rest."""

    #: The longest hit text (UTF-8 bytes) the tier may return for a 1 MB add.
    max_hit_bytes = 64 * 1024

    # ------------------------------------------------------------------ what a tier provides

    def make_tier(self, agent: Any, tmp_path: Path) -> MemoryTier:
        raise NotImplementedError("subclasses of MemoryTierContract implement make_tier(agent, tmp_path)")

    # ------------------------------------------------------------------ helpers

    def _plugin(self, tmp_path: Path) -> Any:
        contract = self

        class ContractTierPlugin:
            @hookimpl
            def register_memory_tiers(self, register: Any) -> None:
                register(CONTRACT_TIER, lambda agent, options: contract.make_tier(agent, tmp_path / "tier"))

        return ContractTierPlugin()

    def agent(self, tmp_path: Path, steps: Sequence[dict[str, Any]] | None = None, **config: Any) -> Any:
        """A fresh Agent whose only memory tier is this one (``offline:scripted`` when ``steps``)."""
        from monoagent.testing import fresh_agent, scripted_agent

        data = {"memory": {"tiers": [CONTRACT_TIER]}, **config}
        (tmp_path / "agent").mkdir(parents=True, exist_ok=True)
        if steps is None:
            return fresh_agent(tmp_path / "agent", config=data, plugins=[self._plugin(tmp_path)])
        return scripted_agent(tmp_path / "agent", steps, config=data, plugins=[self._plugin(tmp_path)])

    def tier(self, tmp_path: Path) -> MemoryTier:
        """A tier on its own (built for a fresh Agent, as the registry would)."""
        from monoagent.testing import fresh_agent

        return self.make_tier(fresh_agent(tmp_path / "standalone"), tmp_path / "tier")

    @staticmethod
    def close(tier: MemoryTier) -> None:
        close = getattr(tier, "close", None)
        if close is not None:
            value = close()
            if asyncio.iscoroutine(value):
                _run(value)

    @staticmethod
    def automatic(tier: MemoryTier) -> bool:
        return bool(getattr(tier, "automatic_recall", True))

    @staticmethod
    def search(tier: MemoryTier, query: str, limit: int = 10) -> list[MemoryHit]:
        return list(_run(tier.search(query, limit=limit)))

    # ------------------------------------------------------------------ the protocol

    def test_contract_empty_store_finds_nothing(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        assert self.search(tier, "anything at all") == []
        self.close(tier)

    def test_contract_add_then_search_finds_it(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        memory_id = _run(tier.add("Alice prefers metric units in the quarterly reports."))
        assert isinstance(memory_id, str) and memory_id
        for text in ("The build server lives in Frankfurt.", "Bob's cat is called Miso.", "Lunch is at noon on Fridays."):
            _run(tier.add(text))
        hits = self.search(tier, "metric units reports")
        assert hits, "a stored memory was not found by its own words"
        best = hits[0]
        assert isinstance(best, MemoryHit)
        assert "metric units" in best.text
        assert best.source == tier.name
        assert best.id == memory_id
        assert 0.0 <= best.score <= 1.0
        self.close(tier)

    def test_contract_limit_is_respected_and_scores_descend(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        for i in range(12):
            _run(tier.add(f"Note {i}: the quokka enclosure needs {'fresh water ' * (i % 4 + 1)}today."))
        hits = self.search(tier, "quokka enclosure water", limit=3)
        assert 1 <= len(hits) <= 3
        scores = [hit.score for hit in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(0.0 <= s <= 1.0 for s in scores)
        self.close(tier)

    def test_contract_limit_below_one_is_an_error(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path)
        with pytest.raises(ValueError, match="limit"):
            _run(tier.search("anything", limit=0))
        self.close(tier)

    def test_contract_blank_text_is_an_error(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path)
        for blank in ("", "   \n\t"):
            with pytest.raises(ValueError):
                _run(tier.add(blank))
        self.close(tier)

    def test_contract_forget_removes_one_entry(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        keep = _run(tier.add("The staging database is called heron."))
        drop = _run(tier.add("The production database is called falcon."))
        assert _run(tier.forget(drop)) is True
        assert _run(tier.forget(drop)) is False
        assert _run(tier.forget("no-such-id")) is False
        texts = " ".join(hit.text for hit in self.search(tier, "database called heron falcon"))
        assert "heron" in texts and "falcon" not in texts
        assert keep != drop
        self.close(tier)

    def test_contract_unicode_round_trips(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        text = "Zoë's café in Zürich hosts the 会议 on Thursdays 🎉"
        _run(tier.add(text))
        hits = self.search(tier, "café Zürich")
        assert hits and text in hits[0].text
        self.close(tier)

    def test_contract_query_syntax_is_plain_text(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        _run(tier.add("A perfectly ordinary memory about drop tables and columns."))
        for query in ODD_QUERIES:
            hits = self.search(tier, query)
            assert isinstance(hits, list)
        self.close(tier)

    def test_contract_large_text_is_bounded(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        _run(tier.add("wombat " + "filler text " * 90_000))
        hits = self.search(tier, "wombat")
        assert all(utf8_len(hit.text) <= self.max_hit_bytes for hit in hits)
        self.close(tier)

    def test_contract_data_survives_a_new_handle(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        _run(tier.add("The release train leaves on Tuesdays."))
        self.close(tier)
        again = self.tier(tmp_path)
        hits = self.search(again, "release train Tuesdays")
        assert hits and "release train" in hits[0].text
        self.close(again)

    def test_contract_list_and_stats_when_browsable(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path)
        if not (hasattr(tier, "list") and hasattr(tier, "stats")):
            self.close(tier)
            pytest.skip(f"tier {tier.name!r} does not implement BrowsableMemoryTier (list, stats)")
        first = _run(tier.add("First memory: the printer is on floor two."))
        second = _run(tier.add("Second memory: the kettle is broken again."))
        records = list(_run(tier.list(limit=10)))
        assert [r.id for r in records][:2] == [second, first]
        assert list(_run(tier.list(limit=1, offset=1)))[0].id == first
        stats = _run(tier.stats())
        assert stats.tier == tier.name and stats.entries == 2
        assert stats.bytes >= utf8_len("First memory: the printer is on floor two.")
        self.close(tier)

    # ------------------------------------------------------------------ recall through an Agent

    def _seed(self, agent: Any, texts: Sequence[str]) -> None:
        tier = agent.memory_tiers()[CONTRACT_TIER]
        for text in texts:
            _run(tier.add(text))

    def test_contract_recall_is_gated_and_bounded(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path)
        self._seed(agent, [f"Quokka fact {i}: " + f"quokkas hop around Rottnest island {i} " * 45 for i in range(12)])
        events: list[Any] = []
        from monoagent.testing import collect_events

        result = agent.run_sync("What do you know about quokkas on Rottnest island?", conversation_id="c", on_event=collect_events(events))
        recalled = [e for e in events if e.type == "memory_recalled"]
        if not self.automatic(agent.memory_tiers()[CONTRACT_TIER]):
            assert recalled == []
            assert RECALL_DELIMITER not in result.text
        else:
            assert len(recalled) == 1
            data = recalled[0].data
            assert set(data) == {"hits", "bytes"}
            assert 1 <= len(data["hits"]) <= 5
            assert all(set(h) == {"source", "bytes"} for h in data["hits"])
            assert data["bytes"] <= 8 * 1024
            assert RECALL_DELIMITER in result.text  # offline:echo repeats the user message
        _run(agent.aclose())

    def test_contract_nothing_recalled_injects_nothing(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path)
        self._seed(agent, ["The heating engineer comes on Monday."])
        events: list[Any] = []
        from monoagent.testing import collect_events

        result = agent.run_sync("Zebra crossings near the harbour?", conversation_id="c", on_event=collect_events(events))
        assert [e for e in events if e.type == "memory_recalled"] == []
        assert RECALL_DELIMITER not in result.text
        assert "Recalled" not in result.text
        _run(agent.aclose())

    # ------------------------------------------------------------------ capture through an Agent

    def _captured(self, agent: Any, word: str) -> list[str]:
        tier = agent.memory_tiers()[CONTRACT_TIER]
        return [hit.text for hit in self.search(tier, word) if word in hit.text.casefold()]

    def test_contract_capture_is_attributed_to_the_speaker(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path, steps=[{"text": "Noted: the marmot report is due Friday."}, {"text": "Fine."}])
        agent.run_sync("The marmot report is due Friday.", conversation_id="c", sender=Speaker("Alice Chen", "alice", user_id="U123SECRET"))
        [entry] = self._captured(agent, "marmot")
        assert "User (Alice Chen (@alice)): The marmot report is due Friday." in entry
        assert "Assistant: Noted: the marmot report is due Friday." in entry
        assert "U123SECRET" not in entry
        agent.run_sync("Another note about the ibex survey.", conversation_id="c")
        [plain] = self._captured(agent, "ibex")
        assert "User: Another note about the ibex survey." in plain
        _run(agent.aclose())

    def test_contract_failed_turn_is_not_captured(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.kernel.errors import MonoagentError

        agent = self.agent(tmp_path, steps=[{"error": "the provider fell over", "retryable": False}])
        with pytest.raises(MonoagentError):
            agent.run_sync("Please remember the narwhal password hint.", conversation_id="c")
        assert self._captured(agent, "narwhal") == []
        _run(agent.aclose())

    def test_contract_cancelled_turn_is_not_captured(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.kernel.model import TurnRequest

        agent = self.agent(tmp_path, steps=[{"text": "one two three four five six seven eight"}])

        async def cancelled_mid_answer() -> None:
            task: asyncio.Task[Any] | None = None

            def on_event(event: Any) -> None:
                if event.type == "text_delta" and task is not None:
                    task.cancel()

            task = asyncio.ensure_future(agent.respond(TurnRequest("Remember the tapir's name is Pim.", conversation_id="c"), on_event=on_event))
            with pytest.raises(asyncio.CancelledError):
                await task

        _run(cancelled_mid_answer())
        assert self._captured(agent, "tapir") == []
        _run(agent.aclose())

    def test_contract_recalled_and_preceding_text_is_not_captured(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path, steps=[{"text": "Here is what I know about the capybara."}])
        self._seed(agent, ["SEEDED-FACT the capybara sanctuary opens at nine."])
        preceding = (PrecedingMessage(Speaker("Bob"), "PRECEDING-CHATTER capybara gossip", 1_700_000_000.0),)
        agent.run_sync("Tell me about the capybara sanctuary.", conversation_id="c", preceding_messages=preceding)
        captured = [t for t in self._captured(agent, "capybara") if "Tell me about the capybara" in t]
        assert len(captured) == 1
        assert "SEEDED-FACT" not in captured[0]
        assert "PRECEDING-CHATTER" not in captured[0]
        _run(agent.aclose())


class EmbedderContract:
    """Subclass with a ``Test`` name and implement :meth:`make_embedder`."""

    related = ("the deployment to staging failed last night", "deploying to staging failed again tonight")
    unrelated = "a recipe for banana bread with walnuts and cinnamon"

    def make_embedder(self) -> Embedder:
        raise NotImplementedError("subclasses of EmbedderContract implement make_embedder()")

    def test_contract_dimensions_are_fixed(self) -> None:
        embedder = self.make_embedder()
        assert isinstance(embedder.dimensions, int) and embedder.dimensions > 0
        assert isinstance(embedder.name, str) and embedder.name
        vectors = embedder.embed(["one", "two words", "a somewhat longer sentence of several words"])
        assert len(vectors) == 3
        assert all(len(v) == embedder.dimensions for v in vectors)

    def test_contract_vectors_are_finite_floats(self) -> None:
        embedder = self.make_embedder()
        for vector in embedder.embed(["ünïcødé 会议 🎉", "", "x" * 20_000]):
            assert len(vector) == embedder.dimensions
            assert all(isinstance(float(x), float) and math.isfinite(x) for x in vector)

    def test_contract_empty_batch(self) -> None:
        assert list(self.make_embedder().embed([])) == []

    def test_contract_deterministic_across_instances(self) -> None:
        texts = [self.related[0], self.unrelated]
        first = [list(map(float, v)) for v in self.make_embedder().embed(texts)]
        second = [list(map(float, v)) for v in self.make_embedder().embed(texts)]
        for a, b in zip(first, second, strict=True):
            assert all(math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(a, b, strict=True))

    def test_contract_batch_equals_single(self) -> None:
        embedder = self.make_embedder()
        batch = embedder.embed([self.related[0], self.unrelated])
        single = embedder.embed([self.unrelated])[0]
        assert all(math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5) for x, y in zip(batch[1], single, strict=True))

    def test_contract_related_texts_are_closer(self) -> None:
        a, b, c = self.make_embedder().embed([*self.related, self.unrelated])
        assert _cos(a, b) > _cos(a, c) + 0.1
        assert math.isclose(_cos(a, a), 1.0, rel_tol=1e-4)
