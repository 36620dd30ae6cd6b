"""The bundled memory tier ``lite``: SQLite FTS5 ranked by bm25, in ``<memory.path>/lite.sqlite``.

Select it with ``memory.tiers = ["lite"]``. It answers the per-turn recall (the ``memory``
plugin asks it with the user's message) and the MemoryRecall tool, and stores every committed
turn that post-turn capture hands it.

* **Search**: the query's content words (stop words dropped, at most 16), each quoted so no FTS5
  syntax in a message can change the query, joined by ``OR``, ranked by ``bm25``; the Porter
  stemmer folds ``deploy``/``deployed``/``deploying``. In a store of 1,000 entries or more, a
  word found in more than 5% of them (counted per entry in the ``terms`` table) does not select
  candidates unless it is one of the query's two rarest: such words barely move bm25, and
  their long posting lists are what makes an FTS5 query slow. A hit's score is its *term coverage*,
  the share of the query's content words the entry contains (0..1), which means the same in a
  store of ten entries and of a million (bm25 itself is near zero while a store is small, since
  a word in most entries carries no weight); bm25 decides the order among equal scores.
* **Capture and add**: text is bounded to ``memory.lite.maxEntryBytes`` (UTF-8-safe). A new
  text whose word set overlaps an existing entry's by at least ``memory.lite.mergeThreshold``
  (Jaccard; candidates are the newest entries holding its four longest content words) is a
  near-duplicate: it replaces that entry's text (the newer wording wins), the
  entry's merge count goes up, and its id is returned.
* **Files**: the directory is created 0700 and the database 0600; WAL journal,
  ``synchronous=NORMAL``. Several processes (an agent and ``monoagent memory``) may share it.
  The file is opened on first use and checked (see :class:`~.memory_database.TierDatabase`): a
  damaged, foreign, locked or read-only file is a one-line :class:`~.memory_database.MemoryTierError`
  (the turn goes on with a warning), a lock is waited for ``memory.lite.busyTimeoutMs``, and a
  row a hand edit or a bad disk left with the wrong types is read, not raised.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from monoagent import (
    ComponentRegistrar,
    ConfigSectionRegistrar,
    MemoryHit,
    MemoryRecord,
    MemoryStats,
    MemoryTier,
    hookimpl,
    setting,
    utf8_len,
    utf8_prefix,
)
from monoagent_plugins.memory.database import (
    STORED_TEXT as TEXT,
)
from monoagent_plugins.memory.database import (
    TierDatabase,
    TierSchema,
    TierWorker,
    entry_rowid,
    immediate,
    number,
    read_metadata,
    tolerate_read_only,
)
from monoagent_plugins.memory.index import (
    fts_match,
    jaccard,
    memory_dir,
    query_terms,
    split_options,
    term_coverage,
    word_set,
)

if TYPE_CHECKING:
    import sqlite3

    from monoagent import Agent

NAME = "lite"
FILENAME = "lite.sqlite"
SCHEMA_VERSION = "1"
TOKENISER = "porter unicode61 remove_diacritics 2"
DUPLICATE_CANDIDATES = 5
DUPLICATE_PROBE_TERMS = 4
COMMON_TERM_FRACTION = 0.05
COMMON_TERM_MIN_ENTRIES = 1000
SCHEMA = TierSchema(
    f"""
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS memories (
        id INTEGER PRIMARY KEY,
        text TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        merged INTEGER NOT NULL DEFAULT 0,
        metadata TEXT NOT NULL DEFAULT '{{}}'
    );
    CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(text, tokenize='{TOKENISER}');
    CREATE TABLE IF NOT EXISTS terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
    """,
    main="memories",
    version=SCHEMA_VERSION,
    fts={"memories_fts": f"INSERT INTO memories_fts(rowid, text) SELECT id, {TEXT} FROM memories"},
)


@attrs.define
class LiteConfig:
    """memory.lite: the SQLite FTS5 tier."""

    merge_threshold: float = setting(
        0.9, doc="Word-set overlap (Jaccard) at which a captured text merges into an existing entry instead of adding one.",
        env="MONO_AGENT_MEMORY_LITE_MERGE_THRESHOLD", min=0.5, max=1.0,
    )
    max_entry_bytes: int = setting(
        4096, doc="Longest entry kept, in UTF-8 bytes; longer text is cut at a character boundary.",
        env="MONO_AGENT_MEMORY_LITE_MAX_ENTRY_BYTES", min=256, max=65536,
    )
    busy_timeout_ms: int = setting(
        10_000, doc="How long recall or capture waits for a lite.sqlite that another process holds locked before it gives up with a warning.",
        env="MONO_AGENT_MEMORY_LITE_BUSY_TIMEOUT_MS", min=0, max=600_000,
    )


def duplicate_probe(text: str) -> str | None:
    """An FTS5 query for near-duplicate candidates of ``text``: its longest content words, all required.

    A near-duplicate shares almost every word, so requiring the few longest (usually the rarest)
    finds it with one cheap posting-list intersection; a duplicate that differs in exactly one of
    those words is missed and stored as a new entry (merging is best effort).
    """
    terms = sorted(query_terms(text, max_terms=64), key=lambda t: (-len(t), t))[:DUPLICATE_PROBE_TERMS]
    if not terms:
        return None
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def bound_text(text: str, max_bytes: int) -> str:
    """``text`` stripped and cut to ``max_bytes`` UTF-8 bytes (an ellipsis marks a cut)."""
    text = text.strip()
    if utf8_len(text) <= max_bytes:
        return text
    return utf8_prefix(text, max_bytes - 3).text.rstrip() + "…"


class LiteTier:
    """SQLite FTS5 memory; see the module docstring. Every method is a coroutine run in a worker thread."""

    automatic_recall = True
    captures = True

    def __init__(
        self, path: Path, *, merge_threshold: float = 0.9, max_entry_bytes: int = 4096, busy_timeout_ms: int = 10_000, name: str = NAME
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.merge_threshold = merge_threshold
        self.max_entry_bytes = max_entry_bytes
        self._lock = threading.Lock()
        self._db = TierDatabase(name, self.path, SCHEMA, busy_timeout_ms=busy_timeout_ms, prepare=self._prepare)
        self._worker = TierWorker(name, self._db)

    def _prepare(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT value FROM meta WHERE key = 'terms'").fetchone() is None:
            tolerate_read_only(f"counting the terms of {self.path}", lambda: self._rebuild_terms(conn))

    def _rebuild_terms(self, conn: sqlite3.Connection) -> None:
        """(Re)count document frequencies from the stored texts (a store from before the table)."""
        with immediate(conn):
            conn.execute("DELETE FROM terms")
            self._count_terms(conn, (text for (text,) in conn.execute(f"SELECT {TEXT} FROM memories").fetchall()), 1)
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('terms', 'counted')")

    @staticmethod
    def _count_terms(conn: sqlite3.Connection, texts: Iterable[str], sign: int) -> None:
        """Add ``sign`` to the document frequency of every content word of ``texts`` (in a transaction)."""
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(query_terms(text, max_terms=1 << 30))
        if sign > 0:
            conn.executemany(
                "INSERT INTO terms(term, df) VALUES (?, ?) ON CONFLICT(term) DO UPDATE SET df = df + excluded.df",
                counts.items(),
            )
        else:
            conn.executemany("UPDATE terms SET df = max(df - ?, 0) WHERE term = ?", [(c, t) for t, c in counts.items()])

    # ------------------------------------------------------------------ MemoryTier

    async def search(self, query: str, *, limit: int) -> Sequence[MemoryHit]:
        """At most ``limit`` entries matching ``query``'s content words, best bm25 first."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1 (got {limit})")
        terms = query_terms(query)
        if not terms:
            return []
        return await self._worker.run(self._search, terms, limit)

    def _selective(self, conn: sqlite3.Connection, terms: list[str]) -> list[str]:
        """The terms that select candidates: those in at most 5% of entries (at least the two rarest)."""
        entries = conn.execute("SELECT coalesce(max(id), 0) FROM memories").fetchone()[0]
        if entries < COMMON_TERM_MIN_ENTRIES:
            return terms
        df = dict(conn.execute(f"SELECT term, df FROM terms WHERE term IN ({','.join('?' * len(terms))})", terms))
        kept = [t for t in terms if df.get(t, 0) <= COMMON_TERM_FRACTION * entries]
        if len(kept) < 2:
            kept = sorted(terms, key=lambda t: (df.get(t, 0), terms.index(t)))[:2]
        return kept

    def _search(self, terms: list[str], limit: int) -> list[MemoryHit]:
        # Rank first, read text after: selecting the text in the ranking query would carry every
        # matching row's text through SQLite's sorter.
        with self._lock:
            conn = self._db.connection()
            match = fts_match(self._selective(conn, terms))
            ranked = [
                rowid
                for (rowid,) in conn.execute(
                    "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts) LIMIT ?",
                    (match, limit),
                )
            ]
            if not ranked:
                return []
            texts = dict(conn.execute(f"SELECT id, {TEXT} FROM memories WHERE id IN ({','.join('?' * len(ranked))})", ranked))
        hits = [MemoryHit(self.name, texts[rowid], term_coverage(terms, texts[rowid]), str(rowid)) for rowid in ranked if rowid in texts]
        return sorted(hits, key=lambda hit: -hit.score)

    async def add(self, text: str, *, metadata: Mapping[str, Any] | None = None) -> str:
        """Store ``text`` (bounded), merging it into a near-duplicate; returns the entry's id."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("memory text must be a non-empty string")
        return await self._worker.run(self._add, bound_text(text, self.max_entry_bytes), dict(metadata or {}))

    def _add(self, text: str, metadata: dict[str, Any]) -> str:
        now = time.time()
        words = word_set(text)
        probe = duplicate_probe(text)
        with self._lock:
            conn = self._db.connection()
            with immediate(conn):
                duplicate = None
                if probe is not None:
                    for rowid, existing in conn.execute(
                        f"SELECT m.id, {TEXT} FROM memories AS m WHERE m.id IN "
                        "(SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid DESC LIMIT ?)",
                        (probe, DUPLICATE_CANDIDATES),
                    ).fetchall():
                        if jaccard(words, word_set(existing)) >= self.merge_threshold:
                            duplicate = rowid
                            break
                if duplicate is not None:
                    [(previous,)] = conn.execute(f"SELECT {TEXT} FROM memories WHERE id = ?", (duplicate,)).fetchall()
                    self._count_terms(conn, [previous], -1)
                    conn.execute(
                        "UPDATE memories SET text = ?, updated_at = ?, merged = merged + 1, metadata = ? WHERE id = ?",
                        (text, now, json.dumps(metadata, default=str), duplicate),
                    )
                    conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (duplicate,))
                    conn.execute("INSERT INTO memories_fts(rowid, text) VALUES (?, ?)", (duplicate, text))
                    entry_id = duplicate
                else:
                    cursor = conn.execute(
                        "INSERT INTO memories(text, created_at, updated_at, metadata) VALUES (?, ?, ?, ?)",
                        (text, now, now, json.dumps(metadata, default=str)),
                    )
                    entry_id = cursor.lastrowid
                    conn.execute("INSERT INTO memories_fts(rowid, text) VALUES (?, ?)", (entry_id, text))
                self._count_terms(conn, [text], 1)
        return str(entry_id)

    async def add_many(self, texts: Sequence[str], *, metadata: Mapping[str, Any] | None = None) -> list[str]:
        """Bulk import: every text (bounded) in one transaction, *without* near-duplicate merging."""
        bounded = [bound_text(t, self.max_entry_bytes) for t in texts]
        if any(not t for t in bounded):
            raise ValueError("memory text must be a non-empty string")
        return await self._worker.run(self._add_many, bounded, json.dumps(dict(metadata or {}), default=str))

    def _add_many(self, texts: list[str], metadata: str) -> list[str]:
        now = time.time()
        ids: list[str] = []
        with self._lock:
            conn = self._db.connection()
            with immediate(conn):
                for text in texts:
                    cursor = conn.execute(
                        "INSERT INTO memories(text, created_at, updated_at, metadata) VALUES (?, ?, ?, ?)", (text, now, now, metadata)
                    )
                    conn.execute("INSERT INTO memories_fts(rowid, text) VALUES (?, ?)", (cursor.lastrowid, text))
                    ids.append(str(cursor.lastrowid))
                self._count_terms(conn, texts, 1)
        return ids

    async def forget(self, memory_id: str) -> bool:
        """Remove one entry by id; False when there is no such entry."""
        rowid = entry_rowid(memory_id)
        return rowid is not None and await self._worker.run(self._forget, rowid)

    def _forget(self, rowid: int) -> bool:
        with self._lock:
            conn = self._db.connection()
            with immediate(conn):
                gone = conn.execute(f"SELECT {TEXT} FROM memories WHERE id = ?", (rowid,)).fetchall()
                removed = conn.execute("DELETE FROM memories WHERE id = ?", (rowid,)).rowcount
                conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))
                self._count_terms(conn, [text for (text,) in gone], -1)
        return removed > 0

    # ------------------------------------------------------------------ BrowsableMemoryTier

    async def list(self, *, limit: int, offset: int = 0) -> Sequence[MemoryRecord]:
        """At most ``limit`` entries, most recently updated first."""
        if limit < 1 or offset < 0:
            raise ValueError(f"limit must be at least 1 and offset at least 0 (got limit={limit}, offset={offset})")
        return await self._worker.run(self._list, limit, offset)

    def _list(self, limit: int, offset: int) -> Sequence[MemoryRecord]:  # `list` is the method above
        with self._lock:
            rows = self._db.connection().execute(
                f"SELECT id, {TEXT}, {number('created_at')}, {number('updated_at')}, CAST(merged AS INTEGER), metadata "
                "FROM memories ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
                (limit, offset),
            ).fetchall()
        return [
            MemoryRecord(str(i), text, created, updated, {**read_metadata(meta), "merged": merged})
            for i, text, created, updated, merged, meta in rows
        ]

    async def stats(self) -> MemoryStats:
        return await self._worker.run(self._stats)

    def _stats(self) -> MemoryStats:
        with self._lock:
            count, size, merged = self._db.connection().execute(
                "SELECT count(*), coalesce(sum(length(CAST(text AS BLOB))), 0), coalesce(sum(merged), 0) FROM memories"
            ).fetchone()
        file_bytes = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return MemoryStats(self.name, count, size, str(self.path), {"merged": merged, "file_bytes": file_bytes, "search": "fts5 bm25"})

    def close(self) -> None:
        """Finish the work already queued on the worker, then close the database."""
        self._worker.close()
        with self._lock:
            self._db.reset()


def make_lite(agent: Agent, options: Mapping[str, Any] | None = None) -> LiteTier:
    """The factory the registry calls: ``memory.lite`` settings, overridden by ``options``."""
    config = agent.config.section("memory.lite", LiteConfig)
    settings = {**attrs.asdict(config), **split_options(options, LiteConfig, NAME)}
    return LiteTier(memory_dir(agent.config) / FILENAME, **settings)


@hookimpl(trylast=True)
def register_memory_tiers(register: ComponentRegistrar[MemoryTier]) -> None:
    register(NAME, make_lite, description="SQLite FTS5 (bm25) memory with near-duplicate merging")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("memory.lite", LiteConfig)
