"""Conformance suites for memory tiers and embedders: what any tier or embedder plugin must prove.

A tier plugin (the bundled ``lite`` and ``journal``, a vector database, PostgreSQL) runs the
suite unchanged against itself by subclassing :class:`MemoryTierContract` in its own tests::

    from monoagent.testing import MemoryTierContract

    class TestVectorTier(MemoryTierContract):
        entry_bound = 8192  # the documented bound of what it keeps, if it has one

        def make_tier(self, agent, tmp_path):
            return VectorTier(path=tmp_path / "vectors", dimensions=agent.embedder("hashed-ngrams").dimensions)

``make_tier`` receives the Agent the tier is built for (as the registry's factory does) and
pytest's ``tmp_path``; two calls with the same ``tmp_path`` must return two handles on the same
stored data. Every limit is checked at and either side of its boundary, with data that makes
that limit the one that binds:

* the protocol: every search result is a :class:`MemoryHit` of this tier with a string id and a
  score in 0..1, best first; ``limit`` 1, 5, 6 and 7 over six matching entries return exactly
  1, 5, 6 and 6 hits, and ``limit`` 0 or -1 is a ``ValueError``; blank text (also Unicode
  spaces) is a ``ValueError`` while ``" yak "`` is stored; ``forget`` of an unknown id is False
  and removes nothing; query syntax is plain text (each odd query still finds the entry holding
  its words); a tier with :attr:`~MemoryTierContract.entry_bound` keeps a text of that many
  UTF-8 bytes whole and cuts one byte more at a character boundary; ``list``/``stats`` when the
  tier is browsable;
* through a real Agent with the bundled ``memory`` plugin: the kernel's recall gate keeps at
  most 5 hits (4, 5 and 6 small candidates recall 4, 5 and 5) and at most 8 KB of hit text
  (four multi-byte entries totalling 8191 and 8192 bytes are all recalled, 8193 bytes recall
  three), behind the documented delimiter; nothing at all when nothing matches; a tier with
  ``automatic_recall = False`` (like ``journal``) is never injected; capture attributed to the
  speaker, and nothing captured from failed or cancelled turns, recalled memory or preceding
  messages.

:class:`EmbedderContract` (:mod:`monoagent.testing.embedder_contract`) does the same for embedders.

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
from monoagent.kernel.interfaces import MemoryTier
from monoagent.kernel.model import MemoryHit, PrecedingMessage, Speaker
from monoagent.testing.embedder_contract import EmbedderContract
from monoagent.text import utf8_len

__all__ = ["RECALL_DELIMITER", "EmbedderContract", "MemoryTierContract", "sized_text"]

CONTRACT_TIER = "contract-tier"
#: The documented recall gate (hookspec ``recall_memory``): at most 5 hits and 8 KB of hit text.
RECALL_MAX_HITS = 5
RECALL_MAX_BYTES = 8 * 1024
#: The user message of the recall tests; every seeded entry holds each of its words.
RECALL_QUESTION = "Quokkas on Rottnest island?"
#: Words that make seeded entries distinct (no tier may take them for near-duplicates).
SALTS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
#: An entry holding a word of each odd query but the last, which matches nothing.
ODD_MEMORY = "An ordinary memory: drop tables, col:umn NEAR the unbalanced quote, nul separators, 🎉 会议 ünïcødé."
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


def sized_text(head: str, size: int, salt: str) -> str:
    """``head`` and words of multi-byte filler unique to ``salt``: exactly ``size`` UTF-8 bytes, no blank at either end."""
    words = [head]
    used = utf8_len(head)
    n = 0
    while True:
        word = f"ünï{salt}会{n}"
        if used + 1 + utf8_len(word) > size - 9:
            break
        words.append(word)
        used += 1 + utf8_len(word)
        n += 1
    if size - used - 1 < 1:
        raise ValueError(f"{size} bytes cannot hold {head!r} and a filler word")
    return " ".join(words) + " " + "z" * (size - used - 1)


class MemoryTierContract:
    """Subclass with a ``Test`` name and implement :meth:`make_tier`; pytest collects the rest."""

    #: The longest hit text (UTF-8 bytes) the tier may return for a 1 MB add.
    max_hit_bytes = 64 * 1024
    #: The documented bound of what the tier keeps, in UTF-8 bytes (``None``: it declares none,
    #: and the boundary test skips): a text of exactly this many bytes is kept whole, one byte
    #: more is cut to no more than that, at a character boundary.
    entry_bound: int | None = None

    # ------------------------------------------------------------------ what a tier provides

    def make_tier(self, agent: Any, tmp_path: Path) -> MemoryTier:
        raise NotImplementedError("subclasses of MemoryTierContract implement make_tier(agent, tmp_path)")

    def damage(self, tier_path: Path) -> None:
        """Optional: damage the stored data under ``tier_path`` (the ``tmp_path`` given to :meth:`make_tier`), as a bad
        disk would. Implemented, it has the suite check that the damaged tier fails with a one-line error
        naming it and that a turn goes on with warnings naming it; otherwise those tests skip."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.damage (damaging the tier's stored data)")

    def damage_index(self, tier_path: Path) -> None:
        """Optional: damage the tier's search index under ``tier_path`` and leave its stored entries as they are.
        Implemented, it has the suite check that every entry is still found (the index rebuilt from them)."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.damage_index (a search index apart from the entries)")

    def add_many(self, tier: Any, texts: Sequence[str]) -> list[str]:
        """Optional: the tier's bulk import of ``texts``, one entry each (no merging), one transaction.
        Implemented, it has the suite check its ids, that nothing merges, and that a blank text stores nothing."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.add_many (a bulk import)")

    # ------------------------------------------------------------------ helpers

    def _plugin(self, tmp_path: Path) -> Any:
        contract = self

        class ContractTierPlugin:
            @hookimpl
            def register_memory_tiers(self, register: Any) -> None:
                register(CONTRACT_TIER, lambda agent, options: contract.make_tier(agent, tmp_path / "tier"))

        return ContractTierPlugin()

    def agent(self, tmp_path: Path, steps: Sequence[dict[str, Any]] | None = None, **config: Any) -> Any:
        """A fresh Agent whose only memory tier is this one (``offline:scripted`` when ``steps``).

        ``config`` is merged over it; a ``memory`` mapping is merged into the memory section.
        """
        from monoagent.testing import fresh_agent, scripted_agent

        data = {**config, "memory": {"tiers": [CONTRACT_TIER], **dict(config.get("memory", {}))}}
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
        """``tier.search``, checked against the protocol: at most ``limit`` hits of this tier, best first."""
        hits = list(_run(tier.search(query, limit=limit)))
        assert len(hits) <= limit, f"search(limit={limit}) returned {len(hits)} hits"
        for hit in hits:
            assert isinstance(hit, MemoryHit), f"search returned {hit!r}, not a MemoryHit"
            assert hit.source == tier.name, f"a hit's source is {hit.source!r}, not the tier's name {tier.name!r}"
            assert isinstance(hit.id, str) and hit.id, f"a hit's id is {hit.id!r}, not a non-empty string"
            score = hit.score
            assert isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score), score
            assert 0.0 <= score <= 1.0, f"a hit's score {score} is outside 0..1"
        scores = [hit.score for hit in hits]
        assert scores == sorted(scores, reverse=True), f"hits are not best first: scores {scores}"
        return hits

    # ------------------------------------------------------------------ the protocol

    def test_contract_empty_store_finds_nothing(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        assert self.search(tier, "anything at all") == []
        memory_id = _run(tier.add("The heating engineer comes on Monday."))
        assert self.search(tier, "zebra crossings harbour") == []
        assert [hit.id for hit in self.search(tier, "heating engineer")] == [memory_id]
        self.close(tier)

    def test_contract_add_then_search_finds_it(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        memory_id = _run(tier.add("Alice prefers metric units in the quarterly reports."))
        assert isinstance(memory_id, str) and memory_id
        ids = [memory_id]
        for text in ("The build server lives in Frankfurt.", "Bob's cat is called Miso.", "Lunch is at noon on Fridays."):
            ids.append(_run(tier.add(text)))
        assert len(set(ids)) == 4, f"four different texts got the ids {ids}"
        hits = self.search(tier, "metric units reports")
        assert hits, "a stored memory was not found by its own words"
        best = hits[0]
        assert "metric units" in best.text
        assert best.id == memory_id
        self.close(tier)

    def test_contract_limit_binds_exactly(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        ids = {_run(tier.add(sized_text(f"Quokka enclosure note {salt}:", 160, salt))) for salt in SALTS[:6]}
        assert len(ids) == 6, "six distinct entries were merged"
        for limit, expected in ((1, 1), (5, 5), (6, 6), (7, 6)):
            hits = self.search(tier, "quokka enclosure", limit=limit)
            assert len(hits) == expected, f"limit={limit} over six matching entries returned {len(hits)} hits, not {expected}"
        assert {hit.id for hit in self.search(tier, "quokka enclosure", limit=7)} == ids
        self.close(tier)

    def test_contract_limit_below_one_is_an_error(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path)
        _run(tier.add("The otter holt is by the weir."))
        for limit in (0, -1):
            with pytest.raises(ValueError, match="limit"):
                _run(tier.search("otter holt", limit=limit))
        assert len(self.search(tier, "otter holt", limit=1)) == 1
        self.close(tier)

    def test_contract_blank_text_is_an_error(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path)
        for blank in ("", "   \n\t", "\u3000\u00a0"):
            with pytest.raises(ValueError):
                _run(tier.add(blank))
        memory_id = _run(tier.add(" yak "))
        [hit] = self.search(tier, "yak")
        assert hit.id == memory_id and "yak" in hit.text
        self.close(tier)

    def test_contract_forget_removes_one_entry(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        keep = _run(tier.add("The staging database is called heron."))
        drop = _run(tier.add("The production database is called falcon."))
        assert keep != drop
        for unknown in ("no-such-id", "", "0", "-1", keep + "0", str(2**63 - 1), str(2**63), "9" * 30):
            assert _run(tier.forget(unknown)) is False, f"forget({unknown!r}) of an id never issued"
        assert _run(tier.forget(drop)) is True
        assert _run(tier.forget(drop)) is False
        hits = self.search(tier, "database called heron falcon")
        assert [hit.id for hit in hits] == [keep]
        assert "heron" in hits[0].text
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
        memory_id = _run(tier.add(ODD_MEMORY))
        for query in ODD_QUERIES[:-1]:
            assert [hit.id for hit in self.search(tier, query)] == [memory_id], f"{query!r} did not find the entry holding its words"
        self.search(tier, ODD_QUERIES[-1])
        [hit] = self.search(tier, "ordinary memory")
        assert ODD_MEMORY in hit.text
        self.close(tier)

    def test_contract_large_text_is_bounded(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        _run(tier.add("wombat " + "filler text " * 90_000))
        hits = self.search(tier, "wombat")
        assert hits, "a 1 MB text was not found by its first word"
        assert all(utf8_len(hit.text) <= self.max_hit_bytes for hit in hits)
        self.close(tier)

    def test_contract_entry_bound_at_and_either_side(self, tmp_path: Path) -> None:
        import pytest

        bound = self.entry_bound
        if bound is None:
            pytest.skip("the tier declares no entry_bound (MemoryTierContract.entry_bound), so no boundary to check")
        texts = {size: sized_text("Wombat burrow survey:", size, "wombat") for size in (bound - 1, bound, bound + 1)}
        kept: dict[int, str] = {}
        for size, text in texts.items():
            tier = self.tier(tmp_path / str(size))
            _run(tier.add(text))
            [hit] = self.search(tier, "wombat burrow survey", limit=1)
            kept[size] = hit.text
            self.close(tier)
        assert texts[bound - 1] in kept[bound - 1], f"a text of {bound - 1} bytes was not kept whole"
        assert texts[bound] in kept[bound], f"a text of exactly entry_bound={bound} bytes was not kept whole"
        over = kept[bound + 1]
        assert texts[bound + 1] not in over, f"a text of {bound + 1} bytes was kept whole, over entry_bound={bound}"
        assert utf8_len(over) <= utf8_len(kept[bound]), "a text over the bound came back longer than one at the bound"
        assert "Wombat burrow survey:" in over and "\ufffd" not in over, "the cut is not at a character boundary"

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

        tier: Any = self.tier(tmp_path)
        if not (hasattr(tier, "list") and hasattr(tier, "stats")):
            self.close(tier)
            pytest.skip(f"tier {tier.name!r} does not implement BrowsableMemoryTier (list, stats)")
        texts = ("First memory: the printer is on floor two.", "Second memory: the kettle is broken again.")
        first = _run(tier.add(texts[0]))
        second = _run(tier.add(texts[1]))
        records = list(_run(tier.list(limit=10)))
        assert [r.id for r in records] == [second, first]
        assert texts[1] in records[0].text and texts[0] in records[1].text
        assert [r.id for r in _run(tier.list(limit=1))] == [second]
        assert [r.id for r in _run(tier.list(limit=1, offset=1))] == [first]
        assert list(_run(tier.list(limit=10, offset=2))) == []
        for bad in ({"limit": 0}, {"limit": 1, "offset": -1}):
            with pytest.raises(ValueError):
                _run(tier.list(**bad))
        stats = _run(tier.stats())
        assert stats.tier == tier.name and stats.entries == 2
        assert stats.bytes == sum(utf8_len(text) for text in texts)
        assert _run(tier.forget(first)) is True
        assert _run(tier.stats()).entries == 1
        assert [r.id for r in _run(tier.list(limit=10))] == [second]
        self.close(tier)

    # ------------------------------------------------------------------ optional: damage and bulk import

    def test_contract_damaged_store_fails_the_tier_not_the_turn(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        tier = self.tier(tmp_path)
        _run(tier.add("The badger sett is under the oak."))
        name, automatic, captures = tier.name, self.automatic(tier), bool(getattr(tier, "captures", True))
        self.close(tier)
        self.damage(tmp_path / "tier")
        tier = self.tier(tmp_path)
        for call in (lambda: tier.search("badger sett", limit=3), lambda: tier.add("The fox den is by the river.")):
            with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                _run(call())
            message = str(caught.value)
            assert len(message.splitlines()) == 1 and name in message, f"not one line naming the tier {name!r}: {message!r}"
        self.close(tier)
        agent = self.agent(tmp_path)
        events: list[Any] = []
        result = agent.run_sync("Where is the badger sett?", conversation_id="c", on_event=collect_events(events))
        _run(agent.aclose())
        assert result.status == "completed"
        warned = {(e.data.get("code"), e.data.get("tier")) for e in events if e.type == "runtime_warning"}
        expected = {("memory_recall_failed", CONTRACT_TIER)} if automatic else set()
        expected |= {("memory_capture_failed", CONTRACT_TIER)} if captures else set()
        assert warned == expected
        assert RECALL_DELIMITER not in result.text

    def test_contract_damaged_index_is_rebuilt_from_the_entries(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        ids = {_run(tier.add(sized_text(f"Badger sett note {salt}:", 300, salt))) for salt in SALTS}
        self.close(tier)
        self.damage_index(tmp_path / "tier")
        tier = self.tier(tmp_path)
        assert {hit.id for hit in self.search(tier, "badger sett", limit=10)} == ids
        later = _run(tier.add(sized_text("Badger sett note india:", 300, "india")))
        assert later in {hit.id for hit in self.search(tier, "badger sett india", limit=10)}
        self.close(tier)

    def test_contract_bulk_import_keeps_each_text(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path)
        texts = [sized_text(f"Heron survey note {salt}:", 200, salt) for salt in SALTS[:4]]
        ids = self.add_many(tier, [*texts, texts[0]])
        assert len(ids) == 5 and len(set(ids)) == 5, f"five texts (one repeated) got the ids {ids}"
        hits = self.search(tier, "heron survey", limit=10)
        assert {hit.id for hit in hits} == set(ids)
        for memory_id, text in zip(ids, texts, strict=False):
            assert text in next(hit.text for hit in hits if hit.id == memory_id)
        for blank in ("", " \n "):
            with pytest.raises(ValueError):
                self.add_many(tier, ["Heron survey note kilo: the reeds are high.", blank])
        assert len(self.search(tier, "heron survey", limit=10)) == 5, "a refused batch stored some of its texts"
        self.close(tier)

    # ------------------------------------------------------------------ recall through an Agent

    def _seed(self, agent: Any, texts: Sequence[str]) -> None:
        tier = agent.memory_tiers()[CONTRACT_TIER]
        for text in texts:
            _run(tier.add(text))

    def _automatic_or_skip(self, tmp_path: Path) -> None:
        import pytest

        tier = self.tier(tmp_path / "probe")
        automatic = self.automatic(tier)
        self.close(tier)
        if not automatic:
            pytest.skip("the tier sets automatic_recall = False: it is never injected (test_contract_not_automatic_is_never_injected)")

    def _recall(self, tmp_path: Path, texts: Sequence[str]) -> tuple[dict[str, Any], str]:
        """Seed ``texts`` (each holding every word of the question), ask it on offline:echo: the event data and the reply.

        The score gate is opened (``minScore = 0``) so that only the count and byte caps can bind.
        """
        from monoagent.testing import collect_events

        agent = self.agent(tmp_path, memory={"recall": {"minScore": 0.0}})
        tier = agent.memory_tiers()[CONTRACT_TIER]
        self._seed(agent, texts)
        found = self.search(tier, RECALL_QUESTION, limit=10)
        assert len(found) == len(texts), f"the tier found {len(found)} of {len(texts)} entries holding every word of the query"
        events: list[Any] = []
        result = agent.run_sync(RECALL_QUESTION, conversation_id="c", on_event=collect_events(events))
        _run(agent.aclose())
        recalled = [e.data for e in events if e.type == "memory_recalled"]
        assert len(recalled) == 1, f"{len(recalled)} memory_recalled events for one turn"
        assert set(recalled[0]) == {"hits", "bytes"} and all(set(h) == {"source", "bytes"} for h in recalled[0]["hits"])
        assert RECALL_DELIMITER in result.text  # offline:echo repeats the user message
        return recalled[0], result.text

    def test_contract_recall_keeps_at_most_five_hits(self, tmp_path: Path) -> None:
        self._automatic_or_skip(tmp_path)
        for candidates in (4, 5, 6):
            texts = [sized_text(f"Quokka note {salt}: quokkas hop on Rottnest island.", 200, salt) for salt in SALTS[:candidates]]
            data, reply = self._recall(tmp_path / f"hits-{candidates}", texts)
            expected = min(candidates, RECALL_MAX_HITS)
            assert len(data["hits"]) == expected, f"{candidates} candidates recalled {len(data['hits'])} hits, not {expected}"
            assert sum(f"ünï{salt}会0" in reply for salt in SALTS[:candidates]) == expected
            assert data["bytes"] == 200 * expected

    def _hit_overhead(self, tmp_path: Path) -> int:
        """How many bytes the tier's hit adds around a stored text (0 for a tier that returns it as stored)."""
        import pytest

        tier = self.tier(tmp_path)
        text = sized_text("Quokka probe note:", 300, "probe")
        memory_id = _run(tier.add(text))
        hits = [hit for hit in self.search(tier, "quokka probe note") if hit.id == memory_id]
        self.close(tier)
        if not hits or text not in hits[0].text:
            pytest.skip("the tier's hits do not hold a 300-byte text whole, so no recall can be sized to the exact byte cap")
        return utf8_len(hits[0].text) - utf8_len(text)

    def test_contract_recall_keeps_at_most_8_kib(self, tmp_path: Path) -> None:
        import pytest

        self._automatic_or_skip(tmp_path)
        entry = RECALL_MAX_BYTES // 4
        if self.entry_bound is not None and self.entry_bound < entry + 1:
            pytest.skip(f"the tier's entry_bound {self.entry_bound} cannot hold the {entry + 1}-byte entries of this test")
        overhead = self._hit_overhead(tmp_path / "probe-size")
        for total, expected in ((RECALL_MAX_BYTES - 1, 4), (RECALL_MAX_BYTES, 4), (RECALL_MAX_BYTES + 1, 3)):
            sizes = [entry, entry, entry, entry + total - RECALL_MAX_BYTES]
            texts = [
                sized_text(f"Quokka note {salt}: quokkas hop on Rottnest island.", size - overhead, salt)
                for salt, size in zip(SALTS, sizes, strict=False)
            ]
            data, reply = self._recall(tmp_path / f"bytes-{total}", texts)
            assert len(data["hits"]) == expected, f"hits of {total} bytes in all recalled {len(data['hits'])}, not {expected}"
            assert sum(f"ünï{salt}会0" in reply for salt in SALTS[:4]) == expected
            assert data["bytes"] == sum(hit["bytes"] for hit in data["hits"]) <= RECALL_MAX_BYTES
            if expected == 4:
                assert data["bytes"] == total
            else:  # the hit that did not fit was skipped, whichever it was
                assert data["bytes"] in {3 * entry, 2 * entry + sizes[-1]}

    def test_contract_not_automatic_is_never_injected(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        agent = self.agent(tmp_path)
        if self.automatic(agent.memory_tiers()[CONTRACT_TIER]):
            _run(agent.aclose())
            pytest.skip("the tier recalls automatically (automatic_recall is not False): the recall cap tests cover it")
        self._seed(agent, [f"Quokka note {salt}: quokkas hop on Rottnest island." for salt in SALTS[:3]])
        events: list[Any] = []
        result = agent.run_sync(RECALL_QUESTION, conversation_id="c", on_event=collect_events(events))
        assert [e for e in events if e.type == "memory_recalled"] == []
        assert RECALL_DELIMITER not in result.text
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
