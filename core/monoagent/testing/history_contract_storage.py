"""Foreign files in a store's storage, and the exact totals of ``stats()`` and ``clear_all()``.

:class:`~monoagent._kernel.stores.ManagedHistoryStore` promises that only the store's own
records are read, counted (by ``stats``, ``conversations`` and retention) or removed (by resets,
``clear_all`` and stage reclamation); anything else in its storage is left untouched. A store that
keeps files says where by overriding :meth:`HistoryStorageContract.storage_directory`; the suite
then plants files it never wrote in that directory and in every directory below it (names shaped
like a record's but upper-case or one digit short, a ``package.json``, a directory named like a
record, a symlink to a file outside) and checks that the totals, the listing, commits, resets
and ``clear_all`` neither count nor touch them. Without the hook the test is skipped, naming it.

The same hook lets the suite check that the store's files are owner-only (docs/history.md: the
directory 0700, files 0600), with the process umask at 0 so that a file whose mode comes from the
umask rather than from its creation shows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from monoagent._kernel.stores import HistoryStore
from monoagent.testing.history_contract_support import HistoryContractBase

FOREIGN_FILES = {
    "package.json": b'{"name": "not history"}',
    "NOTES.JSON": b"notes",
    "README": b"not a record",
    "0123456789ABCDEF." + "A" * 64 + ".json": b"{}",
    "0123456789abcde." + "a" * 64 + ".json": b"{}",
    "0123456789abcdef." + "a" * 64 + ".json.bak": b"{}",
    ".reset.not-a-journal": b"{}",
    "stage.stage": b"not a stage",
}
"""Files no store wrote, several named like the ``files`` store's own (docs/history.md, Layout)."""


class HistoryStorageContract(HistoryContractBase):
    """Foreign files and exact totals (mixed into :class:`~monoagent.testing.HistoryStoreContract`)."""

    def storage_directory(self, store: HistoryStore) -> Path:
        """The directory ``store`` keeps its files in (optional; a store without files has none)."""
        raise NotImplementedError

    def _storage(self, store: HistoryStore) -> Path:
        try:
            return Path(self.storage_directory(store))
        except NotImplementedError:
            import pytest

            self.close(store)
            pytest.skip("needs HistoryStoreContract.storage_directory (the directory the store keeps its files in) to plant "
                        "files the store never wrote there")

    @staticmethod
    def _plant(root: Path, outside: Path) -> dict[Path, bytes]:
        planted: dict[Path, bytes] = {}
        for directory in [root, *sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
            for name, data in FOREIGN_FILES.items():
                path = directory / name
                path.write_bytes(data)
                planted[path] = data
            inner = directory / ("f" * 16 + "." + "f" * 64 + ".json")
            inner.mkdir()
            (inner / "kept").write_bytes(b"inside a directory named like a record")
            planted[inner / "kept"] = b"inside a directory named like a record"
            os.symlink(outside, directory / ("e" * 16 + "." + "e" * 64 + ".json"))
        return planted

    def test_contract_stored_files_are_owner_only(self, tmp_path: Path) -> None:
        """Every file and directory the store creates under its storage grants nothing to group or others, whatever the umask."""
        import stat

        previous = os.umask(0)
        try:
            store = self.make_store(tmp_path)
            root = self._storage(store)
            self.commit_turns(store, "a", range(2))
            self.commit_turns(store, "b:2025-01-01", range(1))
            self.run(store.reset("b:2025-01-01"))
            self.commit_turns(store, "c", range(1))
        finally:
            os.umask(previous)
        created = [root, *root.rglob("*")]
        loose = [f"{p} ({stat.filemode(p.lstat().st_mode)})" for p in created if not p.is_symlink() and p.lstat().st_mode & 0o077]
        assert len(created) > 1 and not loose, f"files of the store open to group or others: {loose}"
        self.close(store)

    def test_contract_foreign_files_are_neither_counted_nor_touched(self, tmp_path: Path) -> None:
        """Files the store never wrote, in its directory and every one below it, survive every operation uncounted."""
        store = self.with_totals(tmp_path)
        root = self._storage(store)
        for n, cid in enumerate(("a", "b:2025-01-01", "c")):
            self.commit_turns(store, cid, range(n + 1))
        before = self.run(store.stats())
        listed = {info.conversation_id: info.message_count for info in self.run(store.conversations())}
        outside = tmp_path / "outside.txt"
        outside.write_bytes(b"the target of a symlink")
        planted = self._plant(root, outside)

        fresh: Any = self.make_store(tmp_path)
        after = self.run(fresh.stats())
        assert (after.records, after.bytes, after.stages, after.stage_bytes) == (before.records, before.bytes, 0, 0), (
            f"files the store never wrote were counted: {before} before they were planted, {after} after")
        assert {i.conversation_id: i.message_count for i in self.run(fresh.conversations())} == listed
        self.commit_turns(fresh, "a", range(1, 2))
        assert self.run(fresh.reset("c")) == 6
        assert self.run(fresh.reset_logical("b")).records == 1
        remaining = self.run(fresh.stats())
        assert remaining.records == 1 and remaining.stages == 0, remaining
        cleared = self.run(fresh.clear_all())
        assert (cleared.records, cleared.bytes) == (1, remaining.bytes), f"clear_all removed {cleared}, the store held {remaining}"
        assert (cleared.stages, cleared.stage_bytes) == (0, 0), f"clear_all reports stages that were never there: {cleared}"
        assert self.run(self.make_store(tmp_path).stats()).records == 0

        for path, data in planted.items():
            assert path.is_file() and not path.is_symlink() and path.read_bytes() == data, f"{path} was changed or removed"
        links = [p for p in root.rglob("*") if p.is_symlink()]
        assert links and all(p.resolve() == outside.resolve() for p in links), "a planted symlink was removed or replaced"
        assert outside.read_bytes() == b"the target of a symlink"
        self.close(store, fresh)
