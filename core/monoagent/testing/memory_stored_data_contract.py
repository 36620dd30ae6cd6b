"""The part of :class:`~monoagent.testing.MemoryTierContract` about a tier's stored data, through the optional hooks.

Each hook lets the suite do to the stored data what a bad disk, another process, an operator or
an earlier release would: damage it (:meth:`StoredDataChecks.damage`, ``damage_index``,
``damage_rows``), hold its write lock (``lock``), make it read-only (``read_only``), plant what is
not a regular file (``stored_files``) or not the tier's data (``foreign_stores``), leave it as an
earlier release did (``earlier_stores``), or fill it in bulk (``add_many``). A test class that
does not implement a hook has the tests needing it skipped, each with a reason naming the hook.
Tier authors subclass ``MemoryTierContract`` (in :mod:`monoagent.testing.memory_contract`), not this.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from monoagent._kernel.interfaces import BrowsableMemoryTier
from monoagent.testing.memory_agent_contract import (
    CONTRACT_TIER,
    RECALL_DELIMITER,
    SALTS,
    TierHarness,
    _run,
    sized_text,
)


def one_line_naming(message: str, tier: str, under: Path) -> bool:
    """Whether ``message`` is one line naming ``tier`` outside the paths under ``under`` it holds.

    A tier's file is often named after it (``lite.sqlite``): a message that lost the tier's name but
    kept the path would otherwise pass. A path is taken to run to the next blank (``under`` holds none).
    """
    return len(message.splitlines()) == 1 and tier in re.sub(re.escape(str(under)) + r"\S*", "", message)


#: Where the error tests put the tier's files: a line break (the message must stay one line) and letters that are
#: not ASCII (the message must name the file as it is, not escaped) in the path.
AWKWARD_DIRECTORY = "line\nbreak-ünï"

#: What the error about a store a bad disk damaged must say (any of the words, any case).
DAMAGED_WORDS = ("damaged", "corrupt", "malformed", "not a database", "not an sqlite database")

#: What the ValueError for a blank text must say (the text is empty, blank or missing): one of these words, any case.
BLANK_TEXT_ERROR = r"(?i)text|blank|empty"

#: What a refusal of each kind of path planted among the tier's files must say is there (any of the words, any case).
PLANTED_KINDS = {"a directory": ("directory",), "a FIFO": ("fifo", "pipe"), "a dangling symbolic link": ("link",)}


def says(message: str, words: Sequence[str]) -> bool:
    """Whether ``message`` holds one of ``words``, ignoring case."""
    return any(word.casefold() in message.casefold() for word in words)


class StoredDataChecks(TierHarness):
    """The optional hooks and the tests that need them; see :class:`~monoagent.testing.MemoryTierContract`."""

    #: See :attr:`MemoryTierContract.merge_threshold` (the large store merges into one entry when it is set).
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
        fails (after the tier's own wait) with a one-line error naming the tier, that reading goes on (on an open
        handle and on one made meanwhile: opening the data must not need the write lock), and that
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
        never creating what the link names) with a one-line error naming the tier, that path and what is there, and works
        again on the same handle once the path is put back. The first path is the database: a symbolic link there to a
        regular file elsewhere (an operator's move to another disk) is followed; a link at any other path, which only
        the tier writes, is refused even when it leads to a regular file, and that file is left alone. Every error
        of the damaged, locked and read-only tests must then also name one of these files. Otherwise those checks
        and that test skip."""
        import pytest

        pytest.skip("the test class does not implement MemoryTierContract.stored_files (the paths of the tier's files)")

    def foreign_stores(self) -> dict[str, Callable[[Path], Sequence[str] | None]]:
        """Optional: ways to put data that is not this tier's where it keeps its own, by name (another program's
        database, one of a newer schema, a planted table of the tier's name with other columns...), each
        writing under the ``tier_path`` it is given and returning what the tier's refusal documents it names (the
        tables it found, the schema it expected: strings, each to appear in the message as it is), or None.
        Implemented, it has the suite check, for each, that the tier refuses it with a one-line error naming the
        tier, the file (with ``stored_files``) and those strings, and leaves every file there exactly as it was;
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

    def names_a_stored_file(self, message: str, tier_path: Path) -> bool:
        """Whether ``message`` names one of the tier's files under ``tier_path`` (true when ``stored_files`` is not
        implemented: then the suite does not know them). The part of its path after the last line break must stand in
        the message as it is (a line break before it may be escaped, the letters after it may not)."""
        if type(self).stored_files is StoredDataChecks.stored_files:
            return True
        return any(str(path).splitlines()[-1] in message for path in self.stored_files(tier_path))

    # ------------------------------------------------------------------ optional: damage and bulk import

    def test_contract_damaged_store_fails_the_tier_not_the_turn(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        root, tmp_path = tmp_path, tmp_path / AWKWARD_DIRECTORY  # a line break and letters not ASCII in the path
        tier = self.tier(tmp_path)
        _run(tier.add("The badger sett is under the oak."))
        name, automatic, captures = tier.name, self.automatic(tier), self.captures(tier)
        self.close(tier)
        self.damage(tmp_path / "tier")
        tier = self.tier(tmp_path)
        for call in (lambda: tier.search("badger sett", limit=3), lambda: tier.add("The fox den is by the river.")):
            with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                _run(call())
            message = str(caught.value)
            assert one_line_naming(message, name, root), f"not one line naming the tier {name!r} (not only in a path): {message!r}"
            assert self.names_a_stored_file(message, tmp_path / "tier"), f"the damaged store's error names no file of the tier: {message!r}"
            assert says(message, DAMAGED_WORDS), f"the damaged store's error does not say it is damaged: {message!r}"
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
                with pytest.raises(ValueError, match=BLANK_TEXT_ERROR):  # the error says what is wrong
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
            if not isinstance(tier, BrowsableMemoryTier):
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

        root, tmp_path = tmp_path, tmp_path / AWKWARD_DIRECTORY  # a line break and letters not ASCII in the path
        tier = self.tier(tmp_path)
        try:
            kept = _run(tier.add("The kingfisher nests in the clay bank."))
            with self.lock(tmp_path / "tier"):
                assert [hit.id for hit in self.search(tier, "kingfisher nests")] == [kept], "a read failed while a writer held the lock"
                newcomer = self.tier(tmp_path)  # opening the store, as a turn's first recall does, must not need the write lock
                try:
                    assert [hit.id for hit in self.search(newcomer, "kingfisher nests")] == [kept], "a handle made under the lock failed to read"
                finally:
                    self.close(newcomer)
                for write in (lambda: tier.add("The heron fishes at dawn."), lambda: tier.forget(kept)):
                    with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                        _run(write())
                    message = str(caught.value)
                    assert one_line_naming(message, tier.name, root), f"not one line naming the tier (not only in a path): {message!r}"
                    assert self.names_a_stored_file(message, tmp_path / "tier"), f"the locked store's error names no file: {message!r}"
                    assert says(message, ("lock", "busy")), f"the locked store's error does not say it is locked: {message!r}"
            later = _run(tier.add("The heron fishes at dawn."))
            assert [hit.id for hit in self.search(tier, "heron fishes dawn")] == [later], "the write after the lock went away was lost"
            assert [hit.id for hit in self.search(tier, "kingfisher nests")] == [kept], "a write refused under the lock removed an entry"
        finally:
            self.close(tier)

    def test_contract_read_only_store_is_read_and_recovers(self, tmp_path: Path) -> None:
        import pytest

        from monoagent.testing import collect_events

        root, tmp_path = tmp_path, tmp_path / AWKWARD_DIRECTORY  # a line break and letters not ASCII in the path
        tier = self.tier(tmp_path)
        kept = _run(tier.add("The kingfisher nests in the clay bank."))
        name, automatic, captures = tier.name, self.automatic(tier), self.captures(tier)
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
                    assert one_line_naming(message, name, root), f"not one line naming the tier {name!r} (not only in a path): {message!r}"
                    assert self.names_a_stored_file(message, tmp_path / "tier"), f"the read-only store's error names no file: {message!r}"
                    assert says(message, ("read-only", "read only")), f"the read-only store's error does not say it is read-only: {message!r}"
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
        plants: dict[str, Callable[[Path], None]] = {
            "a directory": lambda path: path.mkdir(),
            "a FIFO": lambda path: os.mkfifo(path),
            "a dangling symbolic link": lambda path: path.symlink_to(path.with_name("nowhere")),
        }
        assert set(plants) == set(PLANTED_KINDS)
        self._links_to_regular_files(tmp_path, stored_files, kept)
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
                    assert says(message, PLANTED_KINDS[kind]), f"{kind} at {stored}: the error does not say what is there: {message!r}"
                    assert not stored.with_name("nowhere").exists(), f"the tier created what a dangling link at {stored} names"
                    (stored.rmdir if kind == "a directory" else stored.unlink)()
                    if aside.exists():
                        aside.rename(stored)
                    assert [hit.id for hit in self.search(tier, "curlew estuary")] == [kept], f"after {kind} at {stored} was removed"
                finally:
                    self.close(tier)

    def _links_to_regular_files(self, tmp_path: Path, stored_files: Sequence[Path], kept: str) -> None:
        """The database (the first stored file) may be a symbolic link to a regular file elsewhere: it is followed. A link
        at a companion, which only the tier writes, is refused even when it leads to a regular file, which is left alone."""
        import pytest

        database, *companions = stored_files
        moved = database.with_name(database.name + ".moved")
        database.rename(moved)
        database.symlink_to(moved)
        tier = self.tier(tmp_path)
        try:
            assert [hit.id for hit in self.search(tier, "curlew estuary")] == [kept], f"the database behind a link at {database}"
            later = _run(tier.add("The redshank probes the mud."))
            assert [hit.id for hit in self.search(tier, "redshank probes mud")] == [later], "a write through the linked database"
            assert _run(tier.forget(later)) is True
        finally:
            self.close(tier)
        database.unlink()
        moved.rename(database)
        for companion in companions:
            if companion.exists():
                continue  # one SQLite keeps between uses (a WAL file): the planted FIFO and directory cover it
            target = companion.with_name(companion.name + ".target")
            target.write_bytes(b"")
            companion.symlink_to(target)
            tier = self.tier(tmp_path)
            try:
                with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                    _run(tier.add("The avocet wades in the shallows."))
                message = str(caught.value)
                assert len(message.splitlines()) == 1 and str(companion) in message and says(message, ("link",)), (
                    f"a symbolic link at {companion} to a regular file: not one line naming that path and the link: {message!r}"
                )
                assert target.read_bytes() == b"", f"the tier wrote through the link at {companion}"
                companion.unlink()
                target.unlink()
                assert [hit.id for hit in self.search(tier, "curlew estuary")] == [kept], f"after the link at {companion} was removed"
            finally:
                self.close(tier)

    def test_contract_earlier_store_is_read_and_kept(self, tmp_path: Path) -> None:
        texts = [f"Plover count {salt}: the {salt} shingle spit." for salt in SALTS[:4]]
        for name, plant in self.earlier_stores().items():
            base = tmp_path / name.replace(" ", "-")
            plant(base / "tier", texts)
            tier: Any = self.tier(base)
            try:
                found: dict[str, str] = {}
                for salt, text in zip(SALTS, texts, strict=False):
                    hits = self.search(tier, f"plover {salt} shingle")
                    assert hits and text in hits[0].text, f"{name}: {text!r} was not found first by its own words: {hits}"
                    found[salt] = str(hits[0].id)  # search() checked it is a non-empty string
                assert len(set(found.values())) == len(texts), f"{name}: four entries were found as {found}"
                if isinstance(tier, BrowsableMemoryTier):
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
            named = list(plant(base / "tier") or ())
            before = {path: path.read_bytes() for path in sorted((base / "tier").rglob("*")) if path.is_file()}
            tier = self.tier(base)
            try:
                for call in (functools.partial(tier.add, "The dipper bobs on the weir stone."), functools.partial(tier.search, "dipper weir", limit=3)):
                    with pytest.raises(Exception) as caught:  # any error: its message is what is checked
                        _run(call())
                    message = str(caught.value)
                    assert one_line_naming(message, tier.name, tmp_path), f"{name}: not one line naming the tier (not only in a path): {message!r}"
                    assert self.names_a_stored_file(message, base / "tier"), f"{name}: the refusal names no file of the tier: {message!r}"
                    missed = [word for word in named if word not in message]
                    assert not missed, f"{name}: the refusal does not name {missed}: {message!r}"
            finally:
                self.close(tier)
            after = {path: path.read_bytes() for path in sorted((base / "tier").rglob("*")) if path.is_file()}
            assert after == before, f"the tier wrote into {name}: {sorted(map(str, set(after) ^ set(before)))} or their bytes changed"
