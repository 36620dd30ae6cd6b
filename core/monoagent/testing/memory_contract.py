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
  messages;
* through the optional hooks (:mod:`monoagent.testing.memory_stored_data_contract`), what a bad
  disk, another process, an operator or an earlier release does to the stored data: damaged,
  locked mid-write, read-only, not a regular file, not the tier's, left in an earlier form,
  filled in bulk. A test class that implements no hook has those tests skipped, each naming it.

:class:`EmbedderContract` (:mod:`monoagent.testing.embedder_contract`) does the same for embedders.

The suites need pytest only when they run (imported lazily), and run coroutines with
``asyncio.run``, so no asyncio plugin is required.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any

from monoagent._boundary.text import utf8_len
from monoagent._kernel.components import MEMORY_TIERS
from monoagent._kernel.interfaces import BrowsableMemoryTier
from monoagent.testing.embedder_contract import EmbedderContract
from monoagent.testing.memory_agent_contract import (
    RECALL_DELIMITER,
    SALTS,
    TierThroughAgentChecks,
    _run,
    sized_text,
)
from monoagent.testing.memory_common_words_contract import CommonWordChecks
from monoagent.testing.memory_stored_data_contract import BLANK_TEXT_ERROR, StoredDataChecks

__all__ = ["RECALL_DELIMITER", "EmbedderContract", "MemoryTierContract", "sized_text"]

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


class MemoryTierContract(CommonWordChecks, TierThroughAgentChecks):
    """Subclass with a ``Test`` name and implement :meth:`make_tier`; pytest collects the rest."""

    #: The longest hit text (UTF-8 bytes) the tier may return for a 1 MB add.
    max_hit_bytes = 64 * 1024
    #: The tier's documented near-duplicate merging (Jaccard overlap of word sets at which ``add``
    #: merges into an existing entry and returns its id), or ``None`` when it never merges: a text
    #: differing from an entry in one short word merges, the newer wording winning, and one
    #: differing in four words is stored apart (the test checks both lie either side of it).
    merge_threshold: float | None = None

    # ------------------------------------------------------------------ the protocol

    def test_contract_the_tier_would_be_accepted_when_built(self, tmp_path: Path) -> None:
        """What ``agent.components`` checks when a plugin's factory returns the tier: every member of ``MemoryTier``,
        and each sub-protocol (``SelectiveMemoryTier``, ``BrowsableMemoryTier``, ``ClosableMemoryTier``) whole or not at all."""
        tier = self.tier(tmp_path)
        problems = MEMORY_TIERS.problems(tier)
        self.close(tier)
        assert not problems, f"the memory tier would be refused when built: it {'; it '.join(problems)}"

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
        odd = {"when": datetime.date(2026, 1, 15), "where": Path("/srv/build"), "tags": {"infra"}}  # metadata is dict[str, Any]
        for text in ("The build server lives in Frankfurt.", "Bob's cat is called Miso.", "Lunch is at noon on Fridays."):
            ids.append(_run(tier.add(text, metadata=odd)))
        assert len(set(ids)) == 4, f"four different texts got the ids {ids}"
        hits = self.search(tier, "metric units reports")
        assert hits, "a stored memory was not found by its own words"
        best = hits[0]
        assert "metric units" in best.text
        assert best.id == memory_id
        self.close(tier)

    def test_contract_more_of_the_query_scores_higher(self, tmp_path: Path) -> None:
        tier = self.tier(tmp_path)
        pairs = (  # long words, and words of three letters (a tier may match those more strictly)
            ("lighthouse ferry island", "The lighthouse keeper retired last spring.", "The lighthouse keeper rows the green ferry to the island."),
            ("yak owl elk", "The yak grazed on the hill.", "The yak, the owl and the elk share the barn."),
        )
        for query, one_text, all_text in pairs:
            one, all_three = _run(tier.add(one_text)), _run(tier.add(all_text))
            hits = {hit.id: hit.score for hit in self.search(tier, query)}
            assert set(hits) == {one, all_three}, f"an entry holding words of {query!r} was not found"
            assert hits[all_three] > hits[one], f"{query!r}: an entry holding all three words scored {hits[all_three]}, one holding one {hits[one]}"
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
            with pytest.raises(ValueError, match=BLANK_TEXT_ERROR):  # the error says what is wrong
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
        for unknown in ("no-such-id", "", "0", "-1", keep + "0", keep + ".0", keep + ".5", str(2**63 - 1), str(2**63), "9" * 30):
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

    def test_contract_near_duplicates_merge_either_side_of_the_threshold(self, tmp_path: Path) -> None:
        import pytest

        threshold = self.merge_threshold
        if threshold is None:
            pytest.skip("the tier declares no merge_threshold (MemoryTierContract.merge_threshold): it never merges")
        words = (
            "the quarterly planning meeting for the northern warehouse team moves to room seven on thursday "
            "afternoon after lunch with coffee plus biscuits"  # no "and": a probe whose AND lost its case would need that word
        ).split()
        near = ["crew" if word == "team" else word for word in words]  # one short word swapped
        swaps = {"team": "crew", "room": "hall", "seven": "eight", "lunch": "tea"}
        far = [swaps.get(word, word) for word in words]  # four words swapped, its longest words kept
        overlap = {len(set(words) & set(other)) / len(set(words) | set(other)) for other in (near, far)}
        assert min(overlap) < threshold <= max(overlap), f"the data does not straddle merge_threshold={threshold}"
        tier = self.tier(tmp_path)
        original = _run(tier.add(" ".join(words)))
        merged = _run(tier.add(" ".join(near), metadata={"when": datetime.date(2026, 1, 15), "channel": "merge"}))
        assert merged == original, "a near-duplicate was not merged into the entry"
        [hit] = self.search(tier, "quarterly planning warehouse", limit=10)
        assert " ".join(near) in hit.text, "the newer wording did not replace the older one"
        if isinstance(tier, BrowsableMemoryTier):  # the merging add's metadata describes the newer wording: it is kept with it
            [record] = _run(tier.list(limit=10))
            assert record.metadata.get("channel") == "merge", f"the merging add's metadata was not kept: {record.metadata!r}"
        assert _run(tier.add(" ".join(far))) != original, "a text differing in four words was merged"
        assert len(self.search(tier, "quarterly planning warehouse", limit=10)) == 2
        self.close(tier)

    def test_contract_merge_threshold_at_and_either_side(self, tmp_path: Path) -> None:
        """Two texts of ``n`` distinct content words differing in one short word overlap by (n-1)/(n+1): the largest
        ``n`` below ``merge_threshold`` is stored apart, the smallest at or above it (exactly at it when one is) and
        the next merge."""
        import pytest

        threshold = self.merge_threshold
        if threshold is None:
            pytest.skip("the tier declares no merge_threshold (MemoryTierContract.merge_threshold): it never merges")
        sizes = [n for n in range(3, 200) if (n - 1) / (n + 1) >= threshold][:1]
        if not sizes:
            pytest.skip(f"merge_threshold={threshold}: no text differing in one word reaches it")
        at = sizes[0]
        consonants, vowels = "bdfgklmnprstvz", "aeiu"
        vocabulary = [  # six-letter made-up words, none a stem or stop word of another
            f"{consonants[n % 14]}{vowels[n // 14 % 4]}{consonants[n // 56 % 14]}{vowels[n % 4]}{consonants[(n + 5) % 14]}o" for n in range(200)
        ]
        for n, merges in ((at - 1, False), (at, True), (at + 1, True)):
            words = vocabulary[: n - 1]
            tier = self.tier(tmp_path / str(n))
            try:
                original = _run(tier.add(" ".join(["fig", *words])))
                again = _run(tier.add(" ".join(["elm", *words])))
                overlap = f"{n - 1}/{n + 1} = {(n - 1) / (n + 1):.4f} against merge_threshold={threshold}"
                assert (again == original) == merges, f"an overlap of {overlap} was {'stored apart' if merges else 'merged'}"
            finally:
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

        tier: Any = self.tier(tmp_path)
        if not isinstance(tier, BrowsableMemoryTier):
            self.close(tier)
            pytest.skip(f"tier {tier.name!r} does not implement BrowsableMemoryTier (list, stats)")
        texts = ("First memory: the printer is on floor two.", "Second memory: the kettle is broken again.")
        before = time.time()
        first = _run(tier.add(texts[0], metadata={"channel": "console", "speaker": "Alice"}))
        second = _run(tier.add(texts[1]))
        after = time.time()
        records = list(_run(tier.list(limit=10)))
        assert [r.id for r in records] == [second, first]
        assert texts[1] in records[0].text and texts[0] in records[1].text
        assert {"channel": "console", "speaker": "Alice"}.items() <= records[1].metadata.items(), "add()'s metadata is not listed"
        for record in records:  # Unix times in seconds, taken while the entry was added
            assert before - 1 <= record.created_at <= record.updated_at <= after + 1, (record.created_at, record.updated_at)
        assert [r.id for r in _run(tier.list(limit=1))] == [second]
        assert [r.id for r in _run(tier.list(limit=1, offset=1))] == [first]
        assert list(_run(tier.list(limit=10, offset=2))) == []
        for bad in ({"limit": 0}, {"limit": 1, "offset": -1}):
            with pytest.raises(ValueError, match="limit" if bad["limit"] < 1 else "offset"):  # the error names what is wrong
                _run(tier.list(**bad))
        stats = _run(tier.stats())
        assert stats.tier == tier.name and stats.entries == 2
        assert stats.location is None or isinstance(stats.location, str), f"stats().location {stats.location!r} is not a str or None"
        if type(self).stored_files is not StoredDataChecks.stored_files:  # a tier whose data is files says where they are
            stored = [str(path) for path in self.stored_files(tmp_path / "tier")]
            assert stats.location in stored, f"stats().location {stats.location!r} is none of the tier's files {stored}"
        assert isinstance(stats.details, dict), f"stats().details {stats.details!r} is not a dict"
        assert stats.bytes == sum(utf8_len(text) for text in texts)
        assert _run(tier.forget(first)) is True
        assert _run(tier.stats()).entries == 1
        assert [r.id for r in _run(tier.list(limit=10))] == [second]
        self.close(tier)
