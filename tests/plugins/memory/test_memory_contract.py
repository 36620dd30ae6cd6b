"""Both bundled tiers and the bundled embedder pass the reusable memory conformance suites."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import re
import sqlite3
import subprocess

import pytest
from sqlite_vec_required import need_sqlite_vec

from monoagent._kernel.model import MemoryHit
from monoagent.testing import EmbedderContract, MemoryTierContract, fresh_agent
from monoagent_plugins.memory.embedders import HashedNgramEmbedder, make_hashed_ngrams
from monoagent_plugins.memory.journal import JournalTier, agent_timezone
from monoagent_plugins.memory.lite import SCHEMA as LITE_SCHEMA
from monoagent_plugins.memory.lite import make_lite

LITE_ENTRY_BYTES = 2560  # not the default 4096: the contract sees that the factory passed the option on
LITE_BUSY_TIMEOUT_MS = 100  # how long a write waits for the contract's lock before it fails (only that test contends)


def garbage(size: int, seed: int = 8) -> bytes:
    """``size`` bytes of noise, the same on every run."""
    return random.Random(seed).randbytes(size)


def damage_file(path):
    path.write_bytes(garbage(3 * 4096 + 17))


def damage_rows(path, table):
    """Leave each of the first four entries holding a value of the wrong kind, as a hand edit or a bad disk would."""
    with sqlite3.connect(path) as conn:
        ids = [rowid for (rowid,) in conn.execute(f"SELECT id FROM {table} ORDER BY id LIMIT 4")]
        cells = (
            ("text = X'c3ff', metadata = '[1, 2]'"),
            ("created_at = 'yesterday', metadata = 'not json'"),
            ("updated_at = X'00', metadata = X'ff'"),
            ("merged = 'many', metadata = '{\"salt\": ' "),
        )
        for rowid, cell in zip(ids, cells, strict=True):
            conn.execute(f"UPDATE {table} SET {cell} WHERE id = ?", (rowid,))
    conn.close()


@contextlib.contextmanager
def write_locked(path):
    """Another connection mid-write on ``path`` for the duration: its transaction has written pages to the file (a
    cache of two pages spills them), as a large capture would; released by rolling back. A reader of a file in
    rollback-journal mode would wait for it; WAL's readers do not."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA cache_size=2")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO memories(text, created_at, updated_at) SELECT hex(randomblob(2000)), 0, 0 "
            "FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) SELECT i FROM n)"
        )
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


@contextlib.contextmanager
def read_only(path):
    """``path`` readable and not writable for a handle opened meanwhile: mode 0400 and, as root (whom modes do not
    bind), the immutable flag; a root that cannot set it skips the test. The file is first put in rollback-journal
    mode, as a store restored from a dump or a backup is: a read-only file keeps the journal it has."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    mode = path.stat().st_mode
    path.chmod(0o400)
    immutable = os.geteuid() == 0
    try:
        if immutable:
            try:
                subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True, text=True)
            except (OSError, subprocess.CalledProcessError) as exc:
                immutable = False
                pytest.skip(f"running as root, and chattr +i {path} failed ({exc}): nothing makes the file read-only")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(mode)


LITE_FTS = "fts5 (text, tokenize='porter unicode61 remove_diacritics 2')"

#: Data that is not lite's where lite.sqlite goes: each DDL written into a fresh file, and what lite's refusal names
#: (memory.md: "one line naming the tier, the file, what is wrong"): the first five tables it found (", ..." when
#: there are more), the table it lacks, the shapes found and expected, the schemas.
FOREIGN_LITE = {
    "another program's database of five tables": (
        "".join(f"CREATE TABLE t{n} (x);" for n in range(5)),
        ["the tables t0, t1, t2, t3, t4 and no table 'memories'"],
    ),
    "another program's database of six tables": (
        "".join(f"CREATE TABLE t{n} (x);" for n in range(6)),
        ["the tables t0, t1, t2, t3, t4, ... and no table 'memories'"],
    ),
    "a view among lite's tables": (f"{LITE_SCHEMA.ddl}; CREATE VIEW recent AS SELECT id FROM memories", ["view 'recent'"]),
    "a trigger among lite's tables": (
        f"{LITE_SCHEMA.ddl}; CREATE TRIGGER t AFTER INSERT ON memories BEGIN SELECT 1; END",
        ["trigger 't'"],
    ),
    "a memories table of other columns": (
        "CREATE TABLE memories (id INTEGER PRIMARY KEY, body TEXT)",
        ["'memories'", "table (id, body)", "table (id, text, created_at, updated_at, merged, metadata)"],
    ),
    "a full-text index of another tokeniser": (
        LITE_SCHEMA.ddl.replace("porter unicode61 remove_diacritics 2", "ascii"),
        ["'memories_fts'", "fts5 (text, tokenize='ascii')", LITE_FTS],
    ),
    "a newer schema": (f"{LITE_SCHEMA.ddl}; INSERT INTO meta VALUES ('schema', '2')", ["schema '2'", "schema '1'"]),
}


def foreign_lite(tier_path, ddl, names):
    tier_path.mkdir(parents=True)
    conn = sqlite3.connect(tier_path / "lite.sqlite")
    conn.executescript(ddl)
    conn.close()
    return names


def earlier_lite(tier_path, texts, *, drop, ddl=LITE_SCHEMA.ddl):
    """lite's store (of ``ddl``) holding ``texts``, then ``drop`` run on it: a part a release before it lacked, or that was
    removed."""
    tier_path.mkdir(parents=True)
    conn = sqlite3.connect(tier_path / "lite.sqlite")
    conn.executescript(f"{ddl}; INSERT INTO meta VALUES ('schema', '1')")
    for text in texts:
        rowid = conn.execute("INSERT INTO memories(text, created_at, updated_at) VALUES (?, 1.7e9, 1.7e9)", (text,)).lastrowid
        conn.execute("INSERT INTO memories_fts(rowid, text) VALUES (?, ?)", (rowid, text))
    conn.executescript(drop)
    conn.commit()
    conn.close()


#: lite's data as an earlier release, or a hand repair, left it: each a statement run on a store of lite's schema.
EARLIER_LITE = {
    "a store from before the terms table": "DROP TABLE terms",
    "a store whose full-text index was dropped": "DROP TABLE memories_fts",
}


def damage_fts(path, fts):
    """Overwrite every block of an FTS5 index (its structure record included) with noise; the entries stay."""
    with sqlite3.connect(path) as conn:
        blocks = conn.execute(f"SELECT id, length(block) FROM {fts}_data").fetchall()
        conn.executemany(f"UPDATE {fts}_data SET block = ? WHERE id = ?", [(garbage(size, row), row) for row, size in blocks])
        conn.execute(f"UPDATE {fts}_docsize SET sz = ?", (garbage(5),))
    conn.close()


class TestLiteContract(MemoryTierContract):
    """``lite`` built by its registry factory, from config (``memory.path``) and an option."""

    entry_bound = LITE_ENTRY_BYTES
    merge_threshold = 0.9  # memory.lite.mergeThreshold
    common_word_rule = (1000, 0.05)  # lite's COMMON_TERM_MIN_ENTRIES and COMMON_TERM_FRACTION

    def make_tier(self, agent, tmp_path):
        factory_agent = fresh_agent(tmp_path.parent / f"{tmp_path.name}-factory", config={"memory": {"path": str(tmp_path)}})
        return make_lite(factory_agent, {"max_entry_bytes": LITE_ENTRY_BYTES, "busy_timeout_ms": LITE_BUSY_TIMEOUT_MS})

    def damage(self, tier_path):
        damage_file(tier_path / "lite.sqlite")

    def damage_rows(self, tier_path):
        damage_rows(tier_path / "lite.sqlite", "memories")

    def lock(self, tier_path):
        return write_locked(tier_path / "lite.sqlite")

    def read_only(self, tier_path):
        return read_only(tier_path / "lite.sqlite")

    def stored_files(self, tier_path):
        return [tier_path / f"lite.sqlite{suffix}" for suffix in ("", "-wal", "-shm", "-journal")]

    def foreign_stores(self):
        return {name: functools.partial(foreign_lite, ddl=ddl, names=names) for name, (ddl, names) in FOREIGN_LITE.items()}

    def damage_index(self, tier_path):
        damage_fts(tier_path / "lite.sqlite", "memories_fts")

    def earlier_stores(self):
        forms = {name: functools.partial(earlier_lite, drop=drop) for name, drop in EARLIER_LITE.items()}
        forms["a store of lite's tables written in lower-case SQL"] = functools.partial(earlier_lite, drop="", ddl=LITE_SCHEMA.ddl.lower())
        return forms

    def add_many(self, tier, texts):
        return asyncio.run(tier.add_many(texts))


class TestJournalContract(MemoryTierContract):
    entry_bound = 4096  # memory.journal.maxEntryBytes

    def make_tier(self, agent, tmp_path):
        return JournalTier(tmp_path / "journal.sqlite", make_hashed_ngrams(agent), timezone=agent_timezone(agent))

    def damage(self, tier_path):
        damage_file(tier_path / "journal.sqlite")

    def damage_index(self, tier_path):
        damage_fts(tier_path / "journal.sqlite", "entries_fts")

    def stored_files(self, tier_path):
        return [tier_path / f"journal.sqlite{suffix}" for suffix in ("", "-wal", "-shm", "-journal")]

    def read_only(self, tier_path):
        return read_only(tier_path / "journal.sqlite")

    def add_many(self, tier, texts):
        return asyncio.run(tier.add_many([(text, "2026-01-15") for text in texts]))


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


class MinimalTier:
    """The MemoryTier protocol and nothing more, in a JSON file: what a small third-party tier can be."""

    STOP = frozenset("a an and the on of to in for".split())

    def __init__(self, path):
        self.name = "minimal"
        self.path = path

    def _load(self):
        return json.loads(self.path.read_text()) if self.path.exists() else {"next": 1, "entries": {}}

    def _save(self, data):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data))

    def _words(self, text):
        return [w for w in re.findall(r"\w+", text.casefold()) if w not in self.STOP]

    async def search(self, query, *, limit):
        if limit < 1:
            raise ValueError(f"limit must be at least 1 (got {limit})")
        terms = set(self._words(query))
        scored = []
        for memory_id, text in self._load()["entries"].items():
            score = len(terms & set(self._words(text))) / len(terms) if terms else 0.0
            if score > 0:
                scored.append(MemoryHit(self.name, text, score, memory_id))
        return sorted(scored, key=lambda hit: (-hit.score, int(hit.id)))[:limit]

    async def add(self, text, *, metadata=None):
        if not text.strip():
            raise ValueError("memory text must not be blank")
        data = self._load()
        memory_id = str(data["next"])
        data["next"] += 1
        data["entries"][memory_id] = text.strip()[:4000]
        self._save(data)
        return memory_id

    async def forget(self, memory_id):
        data = self._load()
        if data["entries"].pop(memory_id, None) is None:
            return False
        self._save(data)
        return True


class TestMinimalTierContract(MemoryTierContract):
    """A tier with none of the optional parts passes, each optional test skipping with its reason."""

    def make_tier(self, agent, tmp_path):
        return MinimalTier(tmp_path / "minimal.json")


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
    from monoagent._kernel.model import MemoryHit
    from monoagent.testing.memory_contract import RECALL_DELIMITER
    from monoagent_plugins.prompt.conversation import recall_block

    assert recall_block([MemoryHit("lite", "Alice likes tea", 1.0)]).splitlines()[0] == RECALL_DELIMITER
