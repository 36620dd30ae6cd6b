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
        rarest, and a word in no entry is one of the two rarest. With ``earlier_stores``, each earlier form holding
        the ``least + 1`` texts is held to the same rule (the tier counts the words of data it did not write)."""
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
            owners = {"Kestrel perch noted": "kestrel", "Osprey perch noted": "osprey"}
            for word, count in counts.items():
                owners.update({f"Census {n} {_LEAD} {word}": word for n in range(count)})
            owners.update({f"Routine ledger line {n} for the quiet shelf": "" for n in range(size - len(owners))})
            tier = self.tier(tmp_path / str(size))
            try:
                ids = self.add_many(tier, list(owners))
                assert len(ids) == size, f"add_many of {size} texts returned {len(ids)} ids"
                self._check_the_rule(tier, owners, f"{size} entries", below=size < least)
            finally:
                self.close(tier)
        if type(self).earlier_stores is StoredDataChecks.earlier_stores:
            return
        for name, plant in self.earlier_stores().items():
            base = tmp_path / name.replace(" ", "-")
            plant(base / "tier", list(owners))
            tier = self.tier(base)
            try:
                self._check_the_rule(tier, owners, f"{name} of {least + 1} entries", below=False)
            finally:
                self.close(tier)

    def _check_the_rule(self, tier: Any, owners: dict[str, str], store: str, *, below: bool) -> None:
        """The queries of the common-word test against a store of ``owners`` (each text and the query word it holds)."""

        def found(query: str) -> set[str]:
            """The words of ``query`` some of whose entries were found."""
            hits = self.search(tier, query, limit=len(owners))
            return {owners.get(hit.text.strip(), "?") for hit in hits} & set(query.split())

        everything = "kestrel osprey weasel marten stoat"
        common = "polecat ferret badger stoat"  # rarest last: neither the query's order nor the alphabet gives the two rarest
        unknown = "wolverine ferret badger"  # a word in no entry: it and the rarest other word select
        if below:
            assert found(everything) == set(everything.split()), f"{store}, below the rule's size: not every word selected"
            assert found(common) == set(common.split()), f"{store}, below the rule's size: not every common word selected"
            return
        selected = found(everything)
        assert selected == {"kestrel", "osprey", "weasel", "marten"}, (
            f"{store}: the words in up to the rule's share of entries must select, the one in one entry more must not "
            f"(common_word_rule={self.common_word_rule}); the words whose entries were found: {sorted(selected)}"
        )
        assert found(common) == {"stoat", "badger"}, f"{store}, only common words: not the two rarest selected"
        assert found(unknown) == {"badger"}, f"{store}, a word in no entry: not it and the rarest other word"
