"""The bundled memory tier ``journal`` and its tool MemoryJournal: dated entries, hybrid search.

Select it with ``memory.tiers = ["journal"]`` (or next to ``lite``). Each committed turn that
post-turn capture hands it becomes an entry dated by the agent's *local* date: the time zone of
``runtime.session.rolloverTimezone``, else the system's. Entries live in
``<memory.path>/journal.sqlite``.

* **Search** fuses two rankings with reciprocal rank fusion (``score = sum 1 / (k + rank)``,
  ``k = memory.journal.rrfK``): keyword (FTS5, bm25, Porter stemming) and semantic (cosine
  similarity of embeddings from the embedder ``memory.journal.embedder``, stored in SQLite and
  searched with sqlite-vec when it loads, else numpy, else pure Python). Semantic candidates
  below ``memory.journal.minSimilarity`` are dropped so an unrelated entry cannot ride in on
  rank alone. Fused scores are scaled onto 0..1 (1 = first in both rankings). **Coverage comes
  first**: the entries holding every word of the query (an FTS5 ``AND`` of its terms, Porter
  stemmed) rank ahead of those holding only some, in fused order within each group, and the
  scores are kept non-increasing down the list. So an entry that says everything asked for is
  never buried under shorter or semantically closer partial matches (the ``MemoryTier`` protocol:
  every entry holding all the query's words is found).
* **Never injected automatically**: the tier sets ``automatic_recall = False``, so the per-turn
  recall skips it. Entries reach the model only when it calls the MemoryJournal tool (explicit
  local dates, a date range, and/or a query) or MemoryRecall; the tool's output is bounded and
  labelled as untrusted curated summaries, not exact execution evidence.
* **Embedder changes**: the embedder's name and dimensions are recorded; opening the journal
  with another embedder re-embeds every entry once, and an entry without a usable vector (a
  damaged row, an embedding that failed) is embedded again on the next open.
* **A broken embedder** (it raises, or returns the wrong number of vectors, vectors of another
  size, or values that are not finite numbers) is a :class:`~.memory_database.MemoryTierError`
  naming it: capture and query search fail with a warning, nothing malformed is stored, and
  reading by date still works. The file itself is checked as ``lite``'s is.
"""

from __future__ import annotations

import array
import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import attrs

from monoagent import (
    ComponentRegistrar,
    ConfigSectionRegistrar,
    Embedder,
    MemoryHit,
    MemoryRecord,
    MemoryStats,
    MemoryTier,
    ToolRegistrar,
    hookimpl,
    logger,
    setting,
)
from monoagent_plugins.memory.database import (
    STORED_TEXT as TEXT,
)
from monoagent_plugins.memory.database import (
    MemoryTierError,
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
    bm25_relevance,
    fts_match,
    fts_term,
    memory_dir,
    query_terms,
    split_options,
)
from monoagent_plugins.memory.journal_entries import (
    TOOL_DEFAULT_ENTRIES,
    TOOL_SPEC,
    JournalEntry,
    parse_day,
    render_entries,
    tool_arguments,
)
from monoagent_plugins.memory.lite import TOKENISER, bound_text
from monoagent_plugins.memory.vectors import VectorBackend, VectorIndex

if TYPE_CHECKING:
    import sqlite3

    from monoagent import Agent, ToolContext, Turn

NAME = "journal"
FILENAME = "journal.sqlite"
Mode = Literal["hybrid", "keyword", "semantic"]
VECTOR_TABLE = "entry_vectors"
SCHEMA = TierSchema(
    f"""
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS entries (
        id INTEGER PRIMARY KEY,
        day TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at REAL NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{{}}'
    );
    CREATE INDEX IF NOT EXISTS entries_day ON entries(day, id);
    CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(text, tokenize='{TOKENISER}');
    CREATE TABLE IF NOT EXISTS {VECTOR_TABLE} (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
    """,
    main="entries",
    version="1",
    fts={"entries_fts": f"INSERT INTO entries_fts(rowid, text) SELECT id, {TEXT} FROM entries"},
)
#: An entry's columns as JournalEntry reads them, whatever a damaged or hand-edited row holds.
ENTRY = f"id, CAST(day AS TEXT), {TEXT}, {number('created_at')}"
@attrs.define
class JournalConfig:
    """memory.journal: the dated, hybrid-search tier."""

    embedder: str = setting(
        "hashed-ngrams", doc="Registered embedder for semantic search (hashed-ngrams is lexical; see the embedders docs).",
        env="MONO_AGENT_MEMORY_JOURNAL_EMBEDDER",
    )
    embedder_dimensions: int | None = setting(
        None, doc="Vector size passed to an embedder that takes one (hashed-ngrams). Unset: the embedder's default.",
        env="MONO_AGENT_MEMORY_JOURNAL_EMBEDDER_DIMENSIONS", min=16, max=4096,
    )
    vector_backend: Literal["auto", "sqlite-vec", "numpy", "python"] = setting(
        "auto", doc="Vector search: auto picks sqlite-vec when the extension loads, else numpy, else pure Python.",
        env="MONO_AGENT_MEMORY_JOURNAL_VECTOR_BACKEND",
    )
    rrf_k: int = setting(
        60, doc="The k of reciprocal rank fusion: larger flattens the difference between ranks.",
        env="MONO_AGENT_MEMORY_JOURNAL_RRF_K", min=1, max=1000,
    )
    candidates: int = setting(
        50, doc="How deep each ranking (keyword, semantic) goes before fusion.",
        env="MONO_AGENT_MEMORY_JOURNAL_CANDIDATES", min=5, max=1000,
    )
    min_similarity: float = setting(
        0.12, doc="Cosine similarity below which a semantic candidate is dropped before fusion.",
        env="MONO_AGENT_MEMORY_JOURNAL_MIN_SIMILARITY", min=-1.0, max=1.0,
    )
    max_entry_bytes: int = setting(
        4096, doc="Longest entry kept, in UTF-8 bytes; longer text is cut at a character boundary.",
        env="MONO_AGENT_MEMORY_JOURNAL_MAX_ENTRY_BYTES", min=256, max=65536,
    )
    busy_timeout_ms: int = setting(
        10_000, doc="How long capture or a journal search waits for a journal.sqlite that another process holds locked before it gives up with a warning.",
        env="MONO_AGENT_MEMORY_JOURNAL_BUSY_TIMEOUT_MS", min=0, max=600_000,
    )


class JournalTier:
    """Dated entries with keyword + semantic search fused by RRF; see the module docstring."""

    automatic_recall = False
    captures = True

    def __init__(
        self,
        path: Path,
        embedder: Embedder,
        *,
        timezone: tzinfo | None = None,
        vector_backend: VectorBackend = "auto",
        rrf_k: int = 60,
        candidates: int = 50,
        min_similarity: float = 0.12,
        max_entry_bytes: int = 4096,
        busy_timeout_ms: int = 10_000,
        name: str = NAME,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.embedder = embedder
        self.timezone = timezone
        self.vector_backend = vector_backend
        self.rrf_k = rrf_k
        self.candidates = candidates
        self.min_similarity = min_similarity
        self.max_entry_bytes = max_entry_bytes
        self.index: VectorIndex | None = None
        self._lock = threading.Lock()
        self._db = TierDatabase(name, self.path, SCHEMA, busy_timeout_ms=busy_timeout_ms, prepare=self._prepare)
        self._worker = TierWorker(name, self._db)

    def _connection(self) -> tuple[sqlite3.Connection, VectorIndex]:
        """The open database and its vector index (call with the lock held, in the worker)."""
        conn = self._db.connection()
        return conn, cast(VectorIndex, self.index)  # _prepare built it for this connection

    def _prepare(self, conn: sqlite3.Connection) -> None:
        try:
            self.index = VectorIndex(conn, VECTOR_TABLE, self.embedder.dimensions, self.vector_backend)
        except (RuntimeError, ValueError) as exc:
            raise MemoryTierError(self.name, f"{exc}; set memory.journal.vectorBackend to one that is available") from None
        self._sync_vectors(conn, self.index)

    def _sync_vectors(self, conn: sqlite3.Connection, index: VectorIndex) -> None:
        """Give every entry a vector of the current embedder (all of them after an embedder change).

        Entries without a usable vector (an interrupted re-embedding, a damaged row) are embedded
        again. If the embedder fails, the journal still opens: those entries are found by keyword
        and by date, and are embedded on a later open; a log line says how many wait.
        """
        signature = f"{self.embedder.name}:{self.embedder.dimensions}"
        row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        if row is None or row[0] != signature:
            if row is not None:
                logger.bind(plugin="memory-journal").info("journal {} was embedded with {}; re-embedding it with {}", self.path, row[0], signature)

            def switch() -> None:
                with immediate(conn):
                    index.clear()
                    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('embedder', ?)", (signature,))

            tolerate_read_only(f"re-embedding {self.path}", switch)
        missing = conn.execute(
            f"SELECT id, {TEXT} FROM entries WHERE id NOT IN (SELECT id FROM {VECTOR_TABLE} WHERE {index.well_formed}) ORDER BY id",
            (4 * index.dimensions,),
        ).fetchall()

        def embed_missing() -> None:
            for start in range(0, len(missing), 256):
                chunk = missing[start : start + 256]
                vectors = self._embed([text for _, text in chunk])
                with immediate(conn):
                    for (entry_id, _), vector in zip(chunk, vectors, strict=True):
                        index.put(entry_id, vector)

        if missing:
            try:
                tolerate_read_only(f"embedding {len(missing)} entries of {self.path}", embed_missing)
            except MemoryTierError as exc:
                logger.bind(plugin="memory-journal").warning(
                    "{} journal entries have no vector yet and are found by keyword and date only: {}", len(missing), exc
                )

    def _embed(self, texts: list[str]) -> list[array.array[float]]:
        """The embedder's vectors for ``texts``: one per text, each of its declared dimensions, every number finite.

        Anything else (an exception, a wrong count, a wrong size, NaN) is a :class:`MemoryTierError`
        naming the embedder, so a broken embedder never writes a vector that would break search later.
        """
        name = self.embedder.name
        try:
            vectors = [array.array("d", vector) for vector in self.embedder.embed(texts)]
        except Exception as exc:  # a third-party embedder: whatever it raises is reported, with the tier and its name
            raise MemoryTierError(self.name, f"the embedder {name!r} failed ({type(exc).__name__}: {exc})") from exc
        if len(vectors) != len(texts):
            raise MemoryTierError(self.name, f"the embedder {name!r} returned {len(vectors)} vectors for {len(texts)} texts")
        dimensions = self.embedder.dimensions
        for vector in vectors:
            if len(vector) != dimensions:
                raise MemoryTierError(
                    self.name, f"the embedder {name!r} returned a vector of {len(vector)} numbers; it declares {dimensions} dimensions"
                )
            if not all(map(math.isfinite, vector)):
                raise MemoryTierError(self.name, f"the embedder {name!r} returned a vector holding a value that is not a finite number")
        return vectors

    def today(self) -> date:
        """The journal's local date now."""
        return datetime.now(self.timezone).astimezone(self.timezone).date()

    # ------------------------------------------------------------------ MemoryTier

    async def search(self, query: str, *, limit: int) -> Sequence[MemoryHit]:
        """Hybrid search over every date; each hit's text starts with its ``[YYYY-MM-DD]``."""
        entries = await self.entries(query=query, limit=limit)
        return [MemoryHit(self.name, f"[{e.day}] {e.text}", e.score, e.id) for e in entries]

    async def add(self, text: str, *, metadata: Mapping[str, Any] | None = None) -> str:
        """Store ``text`` dated ``metadata["date"]`` (``YYYY-MM-DD``) or today's local date."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("memory text must be a non-empty string")
        metadata = dict(metadata or {})
        day = parse_day(metadata["date"], "metadata date") if metadata.get("date") else self.today()
        metadata["date"] = day.isoformat()
        return await self._worker.run(self._add, bound_text(text, self.max_entry_bytes), day.isoformat(), metadata)

    def _add(self, text: str, day: str, metadata: dict[str, Any]) -> str:
        [vector] = self._embed([text])
        with self._lock:
            conn, index = self._connection()
            with immediate(conn):
                cursor = conn.execute(
                    "INSERT INTO entries(day, text, created_at, metadata) VALUES (?, ?, ?, ?)",
                    (day, text, time.time(), json.dumps(metadata, default=str)),
                )
                entry_id = cursor.lastrowid
                assert entry_id is not None, "an INSERT sets lastrowid"
                conn.execute("INSERT INTO entries_fts(rowid, text) VALUES (?, ?)", (entry_id, text))
                index.put(entry_id, vector)
        return str(entry_id)

    async def add_many(self, items: Sequence[tuple[str, date | str]]) -> list[str]:
        """Bulk import of ``(text, local date)`` pairs in one transaction, embedded in batches."""
        rows = []
        for text, day in items:
            if not isinstance(text, str) or not text.strip():
                raise ValueError("memory text must be a non-empty string")
            day = day if isinstance(day, date) else parse_day(day, "date")
            rows.append((bound_text(text, self.max_entry_bytes), day.isoformat()))
        return await self._worker.run(self._add_many, rows)

    def _add_many(self, rows: list[tuple[str, str]]) -> list[str]:
        vectors = self._embed([text for text, _ in rows])
        now = time.time()
        ids: list[str] = []
        with self._lock:
            conn, index = self._connection()
            with immediate(conn):
                for (text, day), vector in zip(rows, vectors, strict=True):
                    cursor = conn.execute(
                        "INSERT INTO entries(day, text, created_at, metadata) VALUES (?, ?, ?, ?)",
                        (day, text, now, json.dumps({"date": day})),
                    )
                    entry_id = cursor.lastrowid
                    assert entry_id is not None, "an INSERT sets lastrowid"
                    conn.execute("INSERT INTO entries_fts(rowid, text) VALUES (?, ?)", (entry_id, text))
                    index.put(entry_id, vector)
                    ids.append(str(entry_id))
        return ids

    async def forget(self, memory_id: str) -> bool:
        rowid = entry_rowid(memory_id)
        return rowid is not None and await self._worker.run(self._forget, rowid)

    def _forget(self, rowid: int) -> bool:
        with self._lock:
            conn, index = self._connection()
            with immediate(conn):
                removed = conn.execute("DELETE FROM entries WHERE id = ?", (rowid,)).rowcount
                conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (rowid,))
                index.remove(rowid)
        return removed > 0

    # ------------------------------------------------------------------ dated queries

    async def entries(
        self,
        *,
        query: str | None = None,
        days: Sequence[date | str] | None = None,
        start: date | str | None = None,
        end: date | str | None = None,
        limit: int = TOOL_DEFAULT_ENTRIES,
        mode: Mode = "hybrid",
    ) -> list[JournalEntry]:
        """Entries on ``days`` and/or from ``start`` to ``end`` (inclusive, local dates), best first.

        With a ``query`` they are ranked by ``mode`` (``hybrid`` = RRF of ``keyword`` and
        ``semantic``); without one, every entry of the dates comes back oldest first (a date
        filter is then required). ``limit`` bounds the count.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1 (got {limit})")
        if mode not in ("hybrid", "keyword", "semantic"):
            raise ValueError(f"mode must be hybrid, keyword or semantic (got {mode!r})")
        day_list = sorted({(d if isinstance(d, date) else parse_day(d, "date")).isoformat() for d in days or ()})
        lo = (start if isinstance(start, date) else parse_day(start, "from date")).isoformat() if start else None
        hi = (end if isinstance(end, date) else parse_day(end, "to date")).isoformat() if end else None
        if lo and hi and lo > hi:
            raise ValueError(f"the from date {lo} is after the to date {hi}")
        query = (query or "").strip()
        filtered = bool(day_list or lo or hi)
        if not query and not filtered:
            raise ValueError("give local dates, a date range or a query")
        return await self._worker.run(self._entries, query, day_list, lo, hi, filtered, limit, mode)

    def _date_clause(self, day_list: list[str], lo: str | None, hi: str | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if day_list:
            clauses.append(f"day IN ({','.join('?' * len(day_list))})")
            params.extend(day_list)
        if lo:
            clauses.append("day >= ?")
            params.append(lo)
        if hi:
            clauses.append("day <= ?")
            params.append(hi)
        return (" AND ".join(clauses) or "1"), params

    def _entries(
        self, query: str, day_list: list[str], lo: str | None, hi: str | None, filtered: bool, limit: int, mode: Mode
    ) -> list[JournalEntry]:
        where, params = self._date_clause(day_list, lo, hi)
        qvec = self._embed([query])[0] if query and mode != "keyword" else None
        with self._lock:
            conn, index = self._connection()
            if not query:
                rows = conn.execute(f"SELECT {ENTRY} FROM entries WHERE {where} ORDER BY day, id LIMIT ?", (*params, limit)).fetchall()
                return [JournalEntry(str(i), d, t, 1.0, c) for i, d, t, c in rows]
            keyword: list[int] = []
            keyword_scores: dict[int, float] = {}
            complete: list[int] = []  # entries holding every term, best bm25 first
            terms = query_terms(query)
            match = fts_match(terms)
            if mode != "semantic" and match is not None:
                sql = (
                    "SELECT entries_fts.rowid, bm25(entries_fts) FROM entries_fts "
                    + (f"JOIN entries ON entries.id = entries_fts.rowid WHERE entries_fts MATCH ? AND {where} " if filtered else "WHERE entries_fts MATCH ? ")
                    + "ORDER BY bm25(entries_fts) LIMIT ?"
                )
                for rowid, rank in conn.execute(sql, (match, *params, self.candidates) if filtered else (match, self.candidates)):
                    keyword.append(rowid)
                    keyword_scores[rowid] = bm25_relevance(rank)
                every = " AND ".join(fts_term(term) for term in terms)
                for rowid, rank in conn.execute(sql, (every, *params, limit) if filtered else (every, limit)):
                    complete.append(rowid)
                    if rowid not in keyword_scores:  # past the candidate depth: a keyword candidate all the same
                        keyword.append(rowid)
                        keyword_scores[rowid] = bm25_relevance(rank)
            semantic: list[int] = []
            if qvec is not None and any(qvec):
                only = [r[0] for r in conn.execute(f"SELECT id FROM entries WHERE {where}", params)] if filtered else None
                for rowid, similarity in index.search(qvec, self.candidates, only):
                    if similarity >= self.min_similarity:
                        semantic.append(rowid)
            if mode == "keyword":
                ranked = [(rowid, keyword_scores[rowid]) for rowid in keyword]
            else:
                ranked = self._fuse(keyword, semantic) if mode == "hybrid" else self._fuse([], semantic)
            ranked = covered_first(ranked, set(complete))[:limit]
            if not ranked:
                return []
            ids = [rowid for rowid, _ in ranked]
            found = {
                r[0]: r
                for r in conn.execute(f"SELECT {ENTRY} FROM entries WHERE id IN ({','.join('?' * len(ids))})", ids)
            }
        return [JournalEntry(str(i), found[i][1], found[i][2], score, found[i][3]) for i, score in ranked if i in found]

    def _fuse(self, keyword: list[int], semantic: list[int]) -> list[tuple[int, float]]:
        """Reciprocal rank fusion, scaled so that first place in both rankings scores 1.0."""
        k = self.rrf_k
        scores: dict[int, float] = {}
        for ranking in (keyword, semantic):
            for rank, rowid in enumerate(ranking, start=1):
                scores[rowid] = scores.get(rowid, 0.0) + 1.0 / (k + rank)
        best = 2.0 / (k + 1)
        return sorted(((rowid, s / best) for rowid, s in scores.items()), key=lambda item: (-item[1], item[0]))

    # ------------------------------------------------------------------ BrowsableMemoryTier

    async def list(self, *, limit: int, offset: int = 0) -> Sequence[MemoryRecord]:
        if limit < 1 or offset < 0:
            raise ValueError(f"limit must be at least 1 and offset at least 0 (got limit={limit}, offset={offset})")
        return await self._worker.run(self._list, limit, offset)

    def _list(self, limit: int, offset: int) -> Sequence[MemoryRecord]:  # `list` is the method above
        with self._lock:
            rows = self._db.connection().execute(
                f"SELECT {ENTRY}, metadata FROM entries ORDER BY day DESC, id DESC LIMIT ? OFFSET ?", (limit, offset)
            ).fetchall()
        return [MemoryRecord(str(i), t, c, c, {**read_metadata(m), "date": d}) for i, d, t, c, m in rows]

    async def stats(self) -> MemoryStats:
        return await self._worker.run(self._stats)

    def _stats(self) -> MemoryStats:
        with self._lock:
            conn, index = self._connection()
            count, size, first, last = conn.execute(
                "SELECT count(*), coalesce(sum(length(CAST(text AS BLOB))), 0), min(CAST(day AS TEXT)), max(CAST(day AS TEXT)) FROM entries"
            ).fetchone()
        file_bytes = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return MemoryStats(
            self.name,
            count,
            size,
            str(self.path),
            {
                "first_date": first,
                "last_date": last,
                "embedder": self.embedder.name,
                "dimensions": self.embedder.dimensions,
                "vector_backend": index.backend,
                "vector_backend_note": index.unavailable,
                "file_bytes": file_bytes,
            },
        )

    def close(self) -> None:
        """Finish the work already queued on the worker, then close the database."""
        self._worker.close()
        with self._lock:
            self._db.reset()


def covered_first(ranked: Sequence[tuple[int, float]], complete: set[int]) -> list[tuple[int, float]]:
    """``ranked`` with the entries holding every query word first (each group in its order), scores non-increasing.

    A partial match after a complete one keeps its place in the list but never a higher score than
    the hit above it, so "best first" and "higher is more relevant" stay true together.
    """
    ordered = sorted(ranked, key=lambda item: item[0] not in complete)  # stable: fused order within each group
    capped: list[tuple[int, float]] = []
    for rowid, score in ordered:
        capped.append((rowid, min(score, capped[-1][1]) if capped else score))
    return capped


def agent_timezone(agent: Agent) -> tzinfo | None:
    """The agent's local time zone: ``runtime.session.rolloverTimezone``, else None (the system's)."""
    name = agent.config.runtime.session.rollover_timezone
    if not name:
        return None
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def make_journal(agent: Agent, options: Mapping[str, Any] | None = None) -> JournalTier:
    """The factory the registry calls: ``memory.journal`` settings, overridden by ``options``."""
    config = agent.config.section("memory.journal", JournalConfig)
    settings = {**attrs.asdict(config), **split_options(options, JournalConfig, NAME)}
    embedder_name = settings.pop("embedder")
    dimensions = settings.pop("embedder_dimensions")
    embedder = agent.embedder(embedder_name, {"dimensions": dimensions} if dimensions else {})
    return JournalTier(memory_dir(agent.config) / FILENAME, embedder, timezone=agent_timezone(agent), **settings)


def journal_tier(turn: Turn) -> JournalTier:
    """The configured journal tier of ``turn``'s agent, or a ValueError saying why there is none.

    Each tier is built on its own, so another tier that cannot be built (reported by the
    turn's recall and capture warnings) does not take the journal down with it.
    """
    problems: list[str] = []
    for name in turn.config.memory.tiers:
        try:
            tier = turn.memory_tier(name)
        except Exception as exc:  # named in the error below if no journal is found
            problems.append(f"tier {name!r} could not be built ({type(exc).__name__}: {exc})")
            continue
        if isinstance(tier, JournalTier):
            return tier
    if problems:
        raise ValueError(f"no journal tier could be used: {'; '.join(problems)}")
    raise ValueError("no journal tier is configured (add 'journal' to memory.tiers)")


async def memory_journal_tool(context: ToolContext) -> str:
    """The MemoryJournal handler: validate, query the journal, render a bounded answer."""
    turn = context.turn
    args = tool_arguments(dict(context.arguments))
    tier = journal_tier(turn)
    entries = await tier.entries(**args)
    zone = turn.config.runtime.session.rollover_timezone or "the system time zone"
    return render_entries(entries, zone)


@hookimpl(trylast=True)
def register_memory_tiers(register: ComponentRegistrar[MemoryTier]) -> None:
    register(NAME, make_journal, description="dated entries, keyword (FTS5) + semantic search fused by RRF; tool-only")


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("memory.journal", JournalConfig)


@hookimpl(trylast=True)
def register_tools(register: ToolRegistrar) -> None:
    register(TOOL_SPEC, memory_journal_tool, enabled=_journal_configured)


def _journal_configured(turn: Turn) -> bool:
    """MemoryJournal is offered on turns whose ``memory.tiers`` has a journal tier."""
    return NAME in turn.config.memory.tiers
