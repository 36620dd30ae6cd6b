"""The part of :class:`~monoagent.testing.MemoryTierContract` about a tier that skips common words in a large store.

A tier may document that, in a store of at least ``least`` entries, a word found in more than
``fraction`` of them selects no candidates (it may still count in the score), unless it is one of
the query's two rarest words: such words barely change a ranking and their long posting lists are
what makes a search slow. Lite does (1,000 entries, 5 %). Declared as
:attr:`CommonWordChecks.common_word_rule`, the rule is checked at and either side of both of its
boundaries; a tier that declares none skips the test. Tier authors subclass ``MemoryTierContract``
(in :mod:`monoagent.testing.memory_contract`), not this.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from monoagent.testing.memory_stored_data_contract import StoredDataChecks

#: Sixteen made-up content words written before the counted word of each seeded entry: a tier must count a word
#: wherever it stands in an entry, not only among the first words of a query's length.
_LEAD = "brev dolk fisk gamp harl jolt kemp lurn mosk norp pilk quell rusk sorn tolk vesp"


class CommonWordChecks(StoredDataChecks):
    """The common-word rule, when the tier declares one; see the module docstring."""

    #: ``(least, fraction)``: in a store of at least ``least`` entries, a word found in more than ``fraction`` of them
    #: selects no candidates unless it is one of the query's two rarest words; ``None`` when the tier has no such rule.
    common_word_rule: tuple[int, float] | None = None

    def test_contract_common_words_at_and_either_side_of_the_rule(self, tmp_path: Path) -> None:
        """Stores of ``least - 1``, ``least`` and ``least + 1`` entries (through ``add_many``), where the words of the
        queries are in ``at - 1``, ``at`` and ``at + 1`` entries (``at``, the most entries a word may be in and still
        select, at ``least``) and in more. Below ``least`` every word selects; from ``least`` on, the word in
        ``at + 1`` entries selects nothing beside two rarer ones, a query of common words only selects by its two
        rarest, and a word in no entry is one of the two rarest."""
        import pytest

        rule = self.common_word_rule
        if rule is None:
            pytest.skip("the tier declares no common_word_rule (MemoryTierContract.common_word_rule): it skips no common words")
        least, fraction = rule
        at = math.floor(fraction * least)
        counts = {"weasel": at - 1, "marten": at, "stoat": at + 1, "badger": at + 10, "ferret": at + 20, "polecat": at + 30}
        if at < 2 or sum(counts.values()) + 2 > least - 1:
            pytest.skip(f"common_word_rule={rule}: {at} entries for a word at the fraction leave no room for the test's data")
        for size in (least - 1, least, least + 1):
            tier = self.tier(tmp_path / str(size))
            try:
                texts = ["Kestrel perch noted", "Osprey perch noted"]
                owners = ["kestrel", "osprey"]
                for word, count in counts.items():
                    texts += [f"Census {n} {_LEAD} {word}" for n in range(count)]
                    owners += [word] * count
                texts += [f"Routine ledger line {n} for the quiet shelf" for n in range(size - len(texts))]
                owners += [""] * (size - len(owners))
                ids = self.add_many(tier, texts)
                assert len(ids) == size, f"add_many of {size} texts returned {len(ids)} ids"
                holders: dict[str, set[str]] = {}
                for memory_id, owner in zip(ids, owners, strict=True):
                    holders.setdefault(owner, set()).add(str(memory_id))

                def found(query: str, tier: Any = tier, holders: dict[str, set[str]] = holders, size: int = size) -> set[str]:
                    """The words of ``query`` some of whose entries were found."""
                    hits = {hit.id for hit in self.search(tier, query, limit=size)}
                    return {word for word in query.split() if holders.get(word, set()) & hits}

                everything = "kestrel osprey weasel marten stoat"
                common = "polecat ferret badger stoat"  # rarest last: neither the query's order nor the alphabet gives the two rarest
                unknown = "wolverine ferret badger"  # a word in no entry: it and the rarest other word select
                if size < least:
                    assert found(everything) == set(everything.split()), f"{size} entries, below {least}: not every word selected"
                    assert found(common) == set(common.split()), f"{size} entries, below {least}: not every common word selected"
                    continue
                assert found(everything) == {"kestrel", "osprey", "weasel", "marten"}, (
                    f"{size} entries: words in {at - 1} and {at} entries must select, one in {at + 1} must not "
                    f"(common_word_rule={rule}); the words whose entries were found: {sorted(found(everything))}"
                )
                assert found(common) == {"stoat", "badger"}, f"{size} entries, only common words: not the two rarest selected"
                assert found(unknown) == {"badger"}, f"{size} entries, a word in no entry: not it and the rarest other word"
            finally:
                self.close(tier)
