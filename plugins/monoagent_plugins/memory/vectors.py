"""The vector index of the bundled memory tiers: embeddings stored in SQLite, searched three ways.

:class:`VectorIndex` searches with the sqlite-vec extension when it loads, else with a numpy
scan over an in-memory matrix, else with a pure-Python scan (``VectorBackend``).
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from monoagent import logger
from monoagent_plugins.memory.database import data_version, tolerate_read_only

if TYPE_CHECKING:
    import sqlite3

VectorBackend = Literal["auto", "sqlite-vec", "numpy", "python"]
VECTOR_BACKENDS = ("auto", "sqlite-vec", "numpy", "python")


def pack(vector: Sequence[float]) -> bytes:
    return array.array("f", vector).tobytes()


def unpack(blob: bytes) -> array.array[float]:
    values = array.array("f")
    values.frombytes(blob)
    return values


def _load_sqlite_vec(conn: sqlite3.Connection) -> str | None:
    """Load sqlite-vec into ``conn``; None on success, else why it did not load."""
    import sqlite3

    try:
        import sqlite_vec
    except ImportError as exc:
        from monoagent import missing_extra

        return missing_extra("memory", "the sqlite-vec vector backend", exc)
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
        self.well_formed = "typeof(embedding) = 'blob' AND length(embedding) = ?"
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
            from monoagent import missing_extra

            raise RuntimeError(f"vector backend 'numpy' was requested, but {missing_extra('memory', 'it')}")
        self.backend: str = chosen
        self._matrix: Any = None
        self._ids: Any = None
        self._version: int | None = None
        if chosen == "sqlite-vec":
            self._vec_table = f"{table}_vec0"

            def mirror() -> None:
                self._create_vec_table()
                conn.execute(
                    f"INSERT INTO {self._vec_table}(rowid, embedding) SELECT id, embedding FROM {table} "
                    f"WHERE {self.well_formed} AND id NOT IN (SELECT rowid FROM {self._vec_table})",
                    (4 * dimensions,),
                )

            tolerate_read_only(f"mirroring the vectors of {table} into sqlite-vec", mirror)
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
        if len(vector) != self.dimensions:
            raise ValueError(f"a vector of {len(vector)} numbers cannot go into an index of {self.dimensions} dimensions")
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
        rows = self.conn.execute(
            f"SELECT id, embedding FROM {self.table} WHERE {self.well_formed} ORDER BY id", (4 * self.dimensions,)
        ).fetchall()
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
        for entry_id, blob in self.conn.execute(f"SELECT id, embedding FROM {self.table} WHERE {self.well_formed}", (4 * self.dimensions,)):
            if allowed is not None and entry_id not in allowed:
                continue
            vector = unpack(blob)
            scored.append((sum(a * b for a, b in zip(query, vector, strict=True)), entry_id))
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [(entry_id, score) for score, entry_id in scored[:k]]
