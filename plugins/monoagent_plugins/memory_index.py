"""What the bundled memory tiers share: their SQLite files, FTS5 queries and the vector index.

Not a plugin (it has no entry point); ``memory_lite`` and ``memory_journal`` import it.

* :func:`open_database`: one owner-only SQLite file per tier under ``memory.path``, WAL journal,
  ``synchronous=NORMAL`` (a crash may lose the last captured turn, never corrupt the file).
* :func:`query_terms` / :func:`fts_match`: a user message becomes an FTS5 query of its content
  words, each quoted (so no FTS5 syntax in the text can change the query), joined by ``OR`` and
  ranked by ``bm25``. :func:`bm25_relevance` maps bm25 onto 0..1 for the recall gate.
* :class:`VectorIndex`: embeddings stored in SQLite, searched with the sqlite-vec extension when
  it loads, else with a numpy scan over an in-memory matrix, else with a pure-Python scan.
"""

from __future__ import annotations

import array
import contextlib
import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from monoagent.log import logger

if TYPE_CHECKING:
    import sqlite3

VectorBackend = Literal["auto", "sqlite-vec", "numpy", "python"]
VECTOR_BACKENDS = ("auto", "sqlite-vec", "numpy", "python")
MAX_QUERY_TERMS = 16

_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just let me more
    most my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves also get got please thanks thank ok okay yes hi hello hey
    """.split()
)


def query_terms(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The content words of ``text``: casefolded, stop words and single letters dropped, first ``max_terms``."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.casefold()):
        if word in STOPWORDS or (len(word) < 2 and not word.isdigit()) or word in seen:
            continue
        seen[word] = None
        if len(seen) == max_terms:
            break
    return list(seen)


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: every term quoted, joined by OR; None when there is no term."""
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def bm25_relevance(raw: float) -> float:
    """FTS5's ``bm25()`` (lower is better, usually negative) as a 0..1 relevance score."""
    x = -raw
    return x / (x + 1.0) if x > 0 else 0.0


def _found(term: str, words: set[str]) -> bool:
    if term in words:
        return True
    if len(term) < 5:
        return False
    stem = term[:5]
    return any(w.startswith(stem) for w in words)


def term_coverage(terms: Sequence[str], text: str) -> float:
    """The share of ``terms`` found in ``text`` (a word equal to it, or sharing its first 5 letters)."""
    if not terms:
        return 0.0
    words = set(_WORD.findall(text.casefold()))
    return sum(1 for term in terms if _found(term, words)) / len(terms)


def has_evidence(query: str, text: str) -> bool:
    """True when ``text`` contains at least one content word of ``query`` (prefix-tolerant)."""
    return term_coverage(query_terms(query), text) > 0.0


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating) an owner-only SQLite file for a tier: directory 0700, file 0600, WAL."""
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if the block raises (anything, cancellation included)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def data_version(conn: sqlite3.Connection) -> int:
    """SQLite's ``data_version``: changes when another connection commits to the file."""
    return conn.execute("PRAGMA data_version").fetchone()[0]


def pack(vector: Sequence[float]) -> bytes:
    return array.array("f", vector).tobytes()


def unpack(blob: bytes) -> array.array:
    values = array.array("f")
    values.frombytes(blob)
    return values


def normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm > 0 else [0.0] * len(vector)


def _load_sqlite_vec(conn: sqlite3.Connection) -> str | None:
    """Load sqlite-vec into ``conn``; None on success, else why it did not load."""
    import sqlite3

    try:
        import sqlite_vec  # type: ignore[import-not-found]
    except ImportError:
        return "the sqlite-vec package is not installed (pip install 'monoagent[memory]')"
    if not hasattr(conn, "enable_load_extension"):
        return "this Python's sqlite3 module was built without extension loading"
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except (sqlite3.OperationalError, AttributeError, OSError) as exc:
        return f"sqlite-vec failed to load: {exc}"
    return None


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


class VectorIndex:
    """Unit vectors of one embedder, keyed by the integer id of their entry, in table ``<name>``.

    The vectors live in an ordinary table (``id INTEGER PRIMARY KEY, embedding BLOB`` of float32),
    so the file stays readable without any extension. Searching uses, by ``backend``:

    * ``sqlite-vec``: a ``vec0`` virtual table mirrors the vectors; k-nearest-neighbour by cosine
      distance inside SQLite. Chosen by ``auto`` when the extension loads.
    * ``numpy``: the vectors as one float32 matrix in memory, reloaded when another connection
      changed the file (``PRAGMA data_version``); one matrix product per query.
    * ``python``: a scan in pure Python (no optional dependency; slow beyond a few thousand).

    ``similarity`` in results is cosine similarity (-1..1). Callers hold the tier's lock.
    """

    def __init__(self, conn: sqlite3.Connection, table: str, dimensions: int, backend: VectorBackend = "auto") -> None:
        if backend not in VECTOR_BACKENDS:
            raise ValueError(f"vector backend {backend!r} is not one of {', '.join(VECTOR_BACKENDS)}")
        self.conn = conn
        self.table = table
        self.dimensions = dimensions
        self.unavailable: str | None = None
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
        chosen = backend
        if backend in ("auto", "sqlite-vec"):
            why = _load_sqlite_vec(conn)
            if why is None:
                chosen = "sqlite-vec"
            elif backend == "sqlite-vec":
                raise RuntimeError(f"vector backend 'sqlite-vec' was requested but {why}")
            else:
                self.unavailable = why
                chosen = "numpy" if _numpy() is not None else "python"
        if chosen == "numpy" and _numpy() is None:
            raise RuntimeError("vector backend 'numpy' was requested but numpy is not installed (pip install numpy)")
        self.backend: str = chosen
        self._matrix: Any = None
        self._ids: Any = None
        self._version: int | None = None
        if chosen == "sqlite-vec":
            self._vec_table = f"{table}_vec0"
            self._create_vec_table()
            conn.execute(
                f"INSERT INTO {self._vec_table}(rowid, embedding) SELECT id, embedding FROM {table} "
                f"WHERE length(embedding) = ? AND id NOT IN (SELECT rowid FROM {self._vec_table})",
                (4 * dimensions,),
            )
        logger.bind(plugin="memory").debug("vector index {} uses {}", table, self.backend)

    def _create_vec_table(self) -> None:
        """The ``vec0`` mirror, (re)created when the stored dimensions are not this index's."""
        row = self.conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (self._vec_table,)).fetchone()
        if row is not None and f"float[{self.dimensions}]" not in row[0]:
            self.conn.execute(f"DROP TABLE {self._vec_table}")
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self._vec_table} USING vec0("
            f"embedding float[{self.dimensions}] distance_metric=cosine)"
        )

    # ------------------------------------------------------------------ writes (inside the caller's transaction)

    def put(self, entry_id: int, vector: Sequence[float]) -> None:
        blob = pack(vector)
        self.conn.execute(f"INSERT OR REPLACE INTO {self.table}(id, embedding) VALUES (?, ?)", (entry_id, blob))
        if self.backend == "sqlite-vec":
            self.conn.execute(f"DELETE FROM {self._vec_table} WHERE rowid = ?", (entry_id,))
            self.conn.execute(f"INSERT INTO {self._vec_table}(rowid, embedding) VALUES (?, ?)", (entry_id, blob))
        self._matrix = None

    def remove(self, entry_id: int) -> None:
        self.conn.execute(f"DELETE FROM {self.table} WHERE id = ?", (entry_id,))
        if self.backend == "sqlite-vec":
            self.conn.execute(f"DELETE FROM {self._vec_table} WHERE rowid = ?", (entry_id,))
        self._matrix = None

    def clear(self) -> None:
        self.conn.execute(f"DELETE FROM {self.table}")
        if self.backend == "sqlite-vec":
            self.conn.execute(f"DELETE FROM {self._vec_table}")
        self._matrix = None

    # ------------------------------------------------------------------ search

    def search(self, query: Sequence[float], k: int, only: Iterable[int] | None = None) -> list[tuple[int, float]]:
        """The ``k`` ids most similar to ``query`` (restricted to ``only`` when given), best first."""
        allowed = None if only is None else set(only)
        if allowed is not None and not allowed:
            return []
        if self.backend == "sqlite-vec":
            return self._search_vec(query, k, allowed)
        if self.backend == "numpy":
            return self._search_numpy(query, k, allowed)
        return self._search_python(query, k, allowed)

    def _search_vec(self, query: Sequence[float], k: int, allowed: set[int] | None) -> list[tuple[int, float]]:
        blob = pack(query)
        if allowed is None:
            rows = self.conn.execute(
                f"SELECT rowid, distance FROM {self._vec_table} WHERE embedding MATCH ? AND k = ? ORDER BY distance",
                (blob, k),
            ).fetchall()
        else:
            marks = ",".join("?" * len(allowed))
            rows = self.conn.execute(
                f"SELECT rowid, vec_distance_cosine(embedding, ?) AS d FROM {self._vec_table} "
                f"WHERE rowid IN ({marks}) ORDER BY d LIMIT ?",
                (blob, *sorted(allowed), k),
            ).fetchall()
        return [(int(rowid), 1.0 - float(distance)) for rowid, distance in rows]

    def _load_matrix(self) -> None:
        np = _numpy()
        version = data_version(self.conn)
        if self._matrix is not None and version == self._version:
            return
        rows = self.conn.execute(f"SELECT id, embedding FROM {self.table} ORDER BY id").fetchall()
        self._ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32) if rows else np.zeros(0, np.float32)
        self._matrix = matrix.reshape(len(rows), self.dimensions)
        self._version = version

    def _search_numpy(self, query: Sequence[float], k: int, allowed: set[int] | None) -> list[tuple[int, float]]:
        np = _numpy()
        self._load_matrix()
        if not len(self._ids):
            return []
        q = np.asarray(query, dtype=np.float32)
        if allowed is not None:
            mask = np.isin(self._ids, np.fromiter(allowed, dtype=np.int64))
            ids, matrix = self._ids[mask], self._matrix[mask]
        else:
            ids, matrix = self._ids, self._matrix
        if not len(ids):
            return []
        scores = matrix @ q
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((ids[top], -scores[top]))]
        return [(int(ids[i]), float(scores[i])) for i in top]

    def _search_python(self, query: Sequence[float], k: int, allowed: set[int] | None) -> list[tuple[int, float]]:
        scored: list[tuple[float, int]] = []
        for entry_id, blob in self.conn.execute(f"SELECT id, embedding FROM {self.table}"):
            if allowed is not None and entry_id not in allowed:
                continue
            vector = unpack(blob)
            scored.append((sum(a * b for a, b in zip(query, vector)), entry_id))
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [(entry_id, score) for score, entry_id in scored[:k]]



def memory_dir(config: Any) -> Path:
    """``memory.path`` resolved against the config file's directory, else ``<home>/memory``."""
    return config.resolve(config.memory.path) if config.memory.path else config.home / "memory"


def word_set(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.casefold()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def split_options(options: Any, cls: type, tier: str) -> dict[str, Any]:
    """Validate a tier factory's ``options`` against the attrs fields of its config class."""
    import attrs

    options = dict(options or {})
    known = {f.name for f in attrs.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"memory tier {tier!r} does not take the option(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    return options


class TierWorker:
    """The one worker thread a tier's SQLite work runs on.

    A dedicated thread rather than the loop's shared pool: the hand-off to a thread that is
    already warm costs about half as much, and it serialises the tier's use of its connection.
    """

    def __init__(self, name: str) -> None:
        import concurrent.futures

        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"monoagent-memory-{name}")

    async def run(self, function: Any, *args: Any) -> Any:
        import asyncio
        import functools

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(function, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
