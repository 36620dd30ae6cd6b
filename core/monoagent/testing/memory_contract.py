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

import contextlib
import datetime
import functools
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from monoagent.boundary.fences import RECALL_DELIMITER
from monoagent.testing.embedder_contract import EmbedderContract
from monoagent.testing.memory_agent_contract import (
    CONTRACT_TIER,
    SALTS,
    TierThroughAgentChecks,
    _run,
    sized_text,
)
from monoagent.text import utf8_len

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


class MemoryTierContract(TierThroughAgentChecks):
    """Subclass with a ``Test`` name and implement :meth:`make_tier`; pytest collects the rest."""

    #: The longest hit text (UTF-8 bytes) the tier may return for a 1 MB add.
    max_hit_bytes = 64 * 1024
    #: The tier's documented near-duplicate merging (Jaccard overlap of word sets at which ``add``
    #: merges into an existing entry and returns its id), or ``None`` when it never merges: a text
    #: differing from an entry in one short word merges, the newer wording winning, and one
    #: differing in four words is stored apart (the test checks both lie either side of it).
    merge_threshold: float | None = None

    # ------------------------------------------------------------------ what a tier may let the suite do

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

    def damage_rows(self, tier_path: Path) -> None:
        """Optional: leave the stored entries under ``tier_path`` holding values of the wrong kind, as a hand edit
        or a bad disk would (bytes that are not UTF-8 where text goes, text where a time goes, metadata that is
        not a JSON object), their count unchanged. Implemented, it has the suite check that search, ``list`` and
        ``stats`` still answer with values of the documented types; otherwise that test skips."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.damage_rows (entries holding values of the wrong kind)")

    def lock(self, tier_path: Path) -> contextlib.AbstractContextManager[object]:
        """Optional: a context manager holding, for its duration, the write lock another process takes on the
        stored data under ``tier_path``, in the middle of a write that has reached the files (as a large capture
        would). Implemented, it has the suite check that a write while it is held
        fails (after the tier's own wait) with a one-line error naming the tier, that reading goes on, and that
        the same handle writes again once it is released; otherwise that test skips."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.lock (another process's write lock on the tier)")

    def read_only(self, tier_path: Path) -> contextlib.AbstractContextManager[object]:
        """Optional: a context manager during which the stored data under ``tier_path`` may be read but not written
        by a handle made inside it (as a read-only file or disk does), writable again when it ends. Implemented, it
        has the suite check that a handle made under it finds what is stored, fails ``add`` and ``forget`` with a
        one-line error naming the tier and removes nothing, that a turn still recalls from it (capture failing with
        a warning), and that the same handle writes again once the data is writable; otherwise that test skips."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.read_only (stored data the tier may only read)")

    def stored_files(self, tier_path: Path) -> list[Path]:
        """Optional: the paths of the files the tier keeps under ``tier_path`` (its database and the companions it
        writes beside it, whether they exist yet or not). Implemented, it has the suite check that those that exist,
        and the directory holding them, are the owner's alone (memory holds what users said), then plant a directory, a FIFO
        and a dangling symbolic link at each, and check that the tier refuses it (never hanging on the FIFO,
        never creating what the link names) with a one-line error naming the tier and that path, and works
        again on the same handle once the path is put back; otherwise that test skips."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.stored_files (the paths of the tier's files)")

    def foreign_stores(self) -> dict[str, Callable[[Path], None]]:
        """Optional: ways to put data that is not this tier's where it keeps its own, by name (another program's
        database, one of a newer schema, a planted table of the tier's name with other columns...), each
        writing under the ``tier_path`` it is given. Implemented, it has the suite check, for each, that the tier
        refuses it with a one-line error naming the tier and leaves every file there exactly as it was;
        otherwise that test skips."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.foreign_stores (data that is not the tier's)")

    def earlier_stores(self) -> dict[str, Callable[[Path, Sequence[str]], None]]:
        """Optional: ways to write, by name, this tier's own data in a form it must still read (as an earlier release
        left it, or with a part the tier rebuilds missing), each writing under the ``tier_path`` it is given a store
        holding the texts it is given, one entry each. Implemented, it has the suite check, for each, that every text
        is found by its own words, listed and counted (when browsable) and forgotten, and that a new one is stored
        and found; otherwise that test skips."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.earlier_stores (the tier's data in an earlier form)")

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
        merged = _run(tier.add(" ".join(near), metadata={"when": datetime.date(2026, 1, 15)}))
        assert merged == original, "a near-duplicate was not merged into the entry"
        [hit] = self.search(tier, "quarterly planning warehouse", limit=10)
        assert " ".join(near) in hit.text, "the newer wording did not replace the older one"
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
        if not (hasattr(tier, "list") and hasattr(tier, "stats")):
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
            with pytest.raises(ValueError):
                _run(tier.list(**bad))
        stats = _run(tier.stats())
        assert stats.tier == tier.name and stats.entries == 2
        assert stats.location is None or isinstance(stats.location, str), f"stats().location {stats.location!r} is not a str or None"
        assert isinstance(stats.details, dict), f"stats().details {stats.details!r} is not a dict"
        assert stats.bytes == sum(utf8_len(text) for text in texts)
        assert _run(tier.forget(first)) is True
        assert _run(tier.stats()).entries == 1
        assert [r.id for r in _run(tier.list(limit=10))] == [second]
        self.close(tier)

    # ------------------------------------------------------------------ optional: damage and bulk import

    def test_contract_damaged_store_fails_the_tier_not_the_turn(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        tmp_path = tmp_path / "line\nbreak"  # the tier's files under a path holding a line break: still one line
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
        try:  # add_many may skip: the tier is closed all the same
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
        finally:
            self.close(tier)

    def test_contract_large_store_keeps_every_word_findable(self, tmp_path: Path) -> None:
        """The entry holding every word of a query is found (``limit=5``) in a store of 1,100, when 20 shorter ones hold two
        of the words: after the 60 entries holding the third word were forgotten, and (a tier that merges) after
        an entry holding it was merged into 60 times.

        A tier that keeps per-word statistics (to skip common words) must keep them in step with ``forget``
        and merging: a forgotten or replaced wording must not make a rare word look common.
        """
        tier = self.tier(tmp_path)
        try:  # add_many may skip: the tier is closed all the same
            texts = [f"Routine stock record {n} for the quiet shelf" for n in range(1020)]
            texts += [f"Ember stock record {n} checked" for n in range(60)]
            texts += [f"Lantern quartz record {n}" for n in range(20)]
            ids = self.add_many(tier, texts)
            assert len(ids) == len(texts)
            for memory_id in ids[1020:1080]:
                assert _run(tier.forget(memory_id)) is True
            words = ["ember"]
            if self.merge_threshold is not None:  # 60 merges into one entry holding "cinder"
                merged = {_run(tier.add("Cinder delivery arrived with the crate and docket for the northern yard")) for _ in range(60)}
                assert len(merged) == 1, f"one text added 60 times was stored as {len(merged)} entries"
                words.append("cinder")
            tail = " ".join(f"padding{n}" for n in range(7))  # longer than the 20: only its third word ranks it above them
            for word in words:
                target = _run(tier.add(f"{word.title()} lantern quartz {tail}"))
                hits = self.search(tier, f"{word} lantern quartz", limit=5)
                assert target in [hit.id for hit in hits], f"the one entry holding {word!r} and both other words was not found: {hits}"
        finally:
            self.close(tier)

    def test_contract_damaged_rows_are_read_not_raised(self, tmp_path: Path) -> None:
        import pytest

        tier: Any = self.tier(tmp_path)
        ids = [_run(tier.add(f"Heron count {salt}: the {salt} reed bed.", metadata={"salt": salt})) for salt in SALTS[:4]]
        self.close(tier)
        self.damage_rows(tmp_path / "tier")
        tier = self.tier(tmp_path)
        try:
            for hit in self.search(tier, "heron count reed bed", limit=10):
                assert isinstance(hit.text, str), f"a damaged entry's hit text is {hit.text!r}, not a string"
            if not (hasattr(tier, "list") and hasattr(tier, "stats")):
                pytest.skip(f"tier {tier.name!r} does not implement BrowsableMemoryTier (list, stats)")
            records = list(_run(tier.list(limit=10)))
            assert sorted(r.id for r in records) == sorted(ids), "a damaged entry was not listed"
            for record in records:
                assert isinstance(record.text, str), record
                for when in (record.created_at, record.updated_at):
                    assert isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when), record
                assert isinstance(record.metadata, dict), f"a damaged metadata cell came back as {record.metadata!r}, not a dict"
            stats = _run(tier.stats())
            assert stats.entries == len(ids) and isinstance(stats.bytes, int) and stats.bytes >= 0, stats
        finally:
            self.close(tier)

    def test_contract_locked_store_fails_the_write_and_recovers(self, tmp_path: Path) -> None:
        import pytest

        tmp_path = tmp_path / "line\nbreak"  # the tier's files under a path holding a line break: still one line
        tier = self.tier(tmp_path)
        try:
            kept = _run(tier.add("The kingfisher nests in the clay bank."))
            with self.lock(tmp_path / "tier"):
                assert [hit.id for hit in self.search(tier, "kingfisher nests")] == [kept], "a read failed while a writer held the lock"
                for write in (lambda: tier.add("The heron fishes at dawn."), lambda: tier.forget(kept)):
                    with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                        _run(write())
                    message = str(caught.value)
                    assert len(message.splitlines()) == 1 and tier.name in message, f"not one line naming the tier: {message!r}"
            later = _run(tier.add("The heron fishes at dawn."))
            assert [hit.id for hit in self.search(tier, "heron fishes dawn")] == [later], "the write after the lock went away was lost"
            assert [hit.id for hit in self.search(tier, "kingfisher nests")] == [kept], "a write refused under the lock removed an entry"
        finally:
            self.close(tier)

    def test_contract_read_only_store_is_read_and_recovers(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        tmp_path = tmp_path / "line\nbreak"  # the tier's files under a path holding a line break: still one line
        tier = self.tier(tmp_path)
        kept = _run(tier.add("The kingfisher nests in the clay bank."))
        name, automatic, captures = tier.name, self.automatic(tier), bool(getattr(tier, "captures", True))
        self.close(tier)
        with self.read_only(tmp_path / "tier"):
            agent = self.agent(tmp_path)
            events: list[Any] = []
            result = agent.run_sync("Which kingfisher nests in the clay bank?", conversation_id="c", on_event=collect_events(events))
            _run(agent.aclose())
            tier = self.tier(tmp_path)
            try:
                assert [hit.id for hit in self.search(tier, "kingfisher nests")] == [kept], "a read-only store was not read"
                for write in (lambda: tier.add("The heron fishes at dawn."), lambda: tier.forget(kept)):
                    with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                        _run(write())
                    message = str(caught.value)
                    assert len(message.splitlines()) == 1 and name in message, f"not one line naming the tier {name!r}: {message!r}"
                assert [hit.id for hit in self.search(tier, "kingfisher nests")] == [kept], "a refused forget removed the entry"
            except BaseException:
                self.close(tier)
                raise
        try:
            assert result.status == "completed"
            warned = {(e.data.get("code"), e.data.get("tier")) for e in events if e.type == "runtime_warning"}
            assert warned == ({("memory_capture_failed", CONTRACT_TIER)} if captures else set()), warned
            recalled = [e for e in events if e.type == "memory_recalled"]
            assert len(recalled) == int(automatic) and (RECALL_DELIMITER in result.text) == automatic, "recall did not read the store"
            later = _run(tier.add("The heron fishes at dawn."))  # the same handle, the data writable again
            assert later in [hit.id for hit in self.search(tier, "heron fishes dawn")], "the write after the store became writable was lost"
            assert _run(tier.forget(kept)) is True
        finally:
            self.close(tier)

    def test_contract_stored_files_must_be_regular_files(self, tmp_path: Path) -> None:
        import os

        import pytest

        tier = self.tier(tmp_path)
        kept = _run(tier.add("The curlew calls over the estuary."))
        stored_files = self.stored_files(tmp_path / "tier")
        for path in {stored_files[0].parent, *(path for path in stored_files if path.exists())}:
            assert path.stat().st_mode & 0o077 == 0, f"{path} is open to others: mode {path.stat().st_mode & 0o777:o}"
        self.close(tier)
        plants = {
            "a directory": lambda path: path.mkdir(),
            "a FIFO": lambda path: os.mkfifo(path),
            "a dangling symbolic link": lambda path: path.symlink_to(path.with_name("nowhere")),
        }
        for stored in stored_files:
            for kind, plant in plants.items():
                aside = stored.with_name(stored.name + ".aside")
                if stored.exists():
                    stored.rename(aside)
                plant(stored)
                tier = self.tier(tmp_path)
                try:
                    with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                        _run(tier.add("The avocet wades in the shallows."))
                    message = str(caught.value)
                    assert len(message.splitlines()) == 1 and tier.name in message and str(stored) in message, (
                        f"{kind} at {stored}: not one line naming the tier {tier.name!r} and that path: {message!r}"
                    )
                    assert not stored.with_name("nowhere").exists(), f"the tier created what a dangling link at {stored} names"
                    (stored.rmdir if kind == "a directory" else stored.unlink)()
                    if aside.exists():
                        aside.rename(stored)
                    assert [hit.id for hit in self.search(tier, "curlew estuary")] == [kept], f"after {kind} at {stored} was removed"
                finally:
                    self.close(tier)

    def test_contract_earlier_store_is_read_and_kept(self, tmp_path: Path) -> None:
        texts = [f"Plover count {salt}: the {salt} shingle spit." for salt in SALTS[:4]]
        for name, plant in self.earlier_stores().items():
            base = tmp_path / name.replace(" ", "-")
            plant(base / "tier", texts)
            tier: Any = self.tier(base)
            try:
                found = {}
                for salt, text in zip(SALTS, texts, strict=False):
                    hits = self.search(tier, f"plover {salt} shingle")
                    assert hits and text in hits[0].text, f"{name}: {text!r} was not found first by its own words: {hits}"
                    found[salt] = hits[0].id
                assert len(set(found.values())) == len(texts), f"{name}: four entries were found as {found}"
                if hasattr(tier, "list") and hasattr(tier, "stats"):
                    assert sorted(r.id for r in _run(tier.list(limit=10))) == sorted(found.values()), f"{name}: not every entry listed"
                    assert _run(tier.stats()).entries == len(texts), f"{name}: the entries were not counted"
                later = _run(tier.add("Plover count kilo: a new nest on the spit."))
                assert [hit.id for hit in self.search(tier, "kilo nest")] == [later], f"{name}: a new entry was not found"
                assert _run(tier.forget(found["alpha"])) is True, f"{name}: an entry of the earlier store could not be forgotten"
                assert self.search(tier, "plover alpha shingle", limit=10)[0].id != found["alpha"], f"{name}: a forgotten entry was found"
            finally:
                self.close(tier)

    def test_contract_foreign_store_is_refused_and_left_alone(self, tmp_path: Path) -> None:
        import pytest

        for name, plant in self.foreign_stores().items():
            base = tmp_path / name.replace(" ", "-")
            plant(base / "tier")
            before = {path: path.read_bytes() for path in sorted((base / "tier").rglob("*")) if path.is_file()}
            tier = self.tier(base)
            try:
                for call in (functools.partial(tier.add, "The dipper bobs on the weir stone."), functools.partial(tier.search, "dipper weir", limit=3)):
                    with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                        _run(call())
                    message = str(caught.value)
                    assert len(message.splitlines()) == 1 and tier.name in message, f"{name}: not one line naming the tier: {message!r}"
            finally:
                self.close(tier)
            after = {path: path.read_bytes() for path in sorted((base / "tier").rglob("*")) if path.is_file()}
            assert after == before, f"the tier wrote into {name}: {sorted(map(str, set(after) ^ set(before)))} or their bytes changed"
