"""A bundled memory tier's SQLite file, as something that may be damaged, planted or busy.

Not a plugin (it has no entry point); ``memory_lite`` and ``memory_journal`` import it.

* :func:`open_database`: one owner-only SQLite file per tier under ``memory.path``, WAL journal,
  ``synchronous=NORMAL`` (a crash may lose the last captured turn, never corrupt the file).
* :class:`TierDatabase`: a tier's file, opened on first use in the tier's worker thread (so
  building a tier never fails and never blocks the event loop); it must be a regular file and
  must hold exactly the tables the tier's DDL declares (:class:`TierSchema`: a foreign database,
  or a planted table of the same name with other columns, is refused rather than written into).
  Any SQLite or OS failure becomes a one-line :class:`MemoryTierError` naming the tier, the
  file, what is wrong and what to do; a file that failed is opened again on the next use, so a
  lock that goes away or a file put back recovers without a restart. A damaged full-text index
  is rebuilt, once, from the tier's own table of entries (nothing stored is lost). The
  ``memory`` plugin reports these errors as warnings and the turn goes on; ``monoagent memory``
  prints them and exits non-zero.
* :class:`TierWorker`: the one thread a tier's SQLite work runs on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from monoagent import MonoagentError, logger, parse_ascii_number

if TYPE_CHECKING:
    import sqlite3

R = TypeVar("R")


class MemoryTierError(MonoagentError):
    """A memory tier could not do what was asked: its file is damaged, foreign, locked, read-only
    or not a regular file, or its embedder failed.

    The message is one line: the tier, the file, what is wrong and what to do. The ``memory``
    plugin reports it as a ``runtime_warning`` and the turn goes on; ``monoagent memory`` prints
    it and exits non-zero.
    """

    def __init__(self, tier: str, problem: str) -> None:
        self.tier = tier
        self.problem = problem
        super().__init__(f"memory tier {tier!r}: {single_line(problem)}")


def single_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so a message stays one line."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text)


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}

#: SQLite result codes (``sqlite3.Error.sqlite_errorname``, by prefix) as what they mean for a tier's file.
_SQLITE_PROBLEMS = (
    ("SQLITE_NOTADB", "is not an SQLite database (damaged, truncated or another kind of file)", "damaged"),
    ("SQLITE_CORRUPT_VTAB", "has a damaged full-text index that could not be rebuilt", "damaged"),
    ("SQLITE_CORRUPT", "is damaged", "damaged"),
    ("SQLITE_BUSY", "is locked by another process", "busy"),
    ("SQLITE_LOCKED", "is locked by another connection", "busy"),
    ("SQLITE_READONLY", "is read-only", "read-only"),
    ("SQLITE_CANTOPEN", "cannot be opened", None),
    ("SQLITE_IOERR", "could not be read or written", None),
    ("SQLITE_FULL", "cannot grow: the disk is full", None),
    ("SQLITE_PERM", "may not be accessed", None),
    ("SQLITE_AUTH", "may not be accessed", None),
)
_ADVICE = {
    "damaged": "restore it from a backup, or move it aside and an empty one is created on the next use",
    "busy": "it is tried again on the next use",
    "read-only": "recall still reads it; make it writable for capture and forget",
    "foreign": "point memory.path elsewhere, or move the file aside and an empty one is created on the next use",
}


def sqlite_code(exc: BaseException) -> str:
    """The SQLite result code name of ``exc`` (``SQLITE_BUSY``), or '' when it has none."""
    return getattr(exc, "sqlite_errorname", None) or ""


def file_problem(exc: BaseException, path: Path, busy_timeout_ms: int) -> str:
    """What ``exc`` (an SQLite or OS error on ``path``) means, and what to do about it, in one line."""
    if isinstance(exc, MonoagentError):  # already says what is wrong (a FIFO where the file goes)
        return str(exc)
    code = sqlite_code(exc)
    detail = f"{type(exc).__name__}: {exc}"
    for prefix, meaning, advice in _SQLITE_PROBLEMS:
        if code.startswith(prefix):
            waited = f" (waited {busy_timeout_ms} ms)" if advice == "busy" else ""
            tail = f"; {_ADVICE[advice]}" if advice else ""
            return f"{path} {meaning}{waited}: {detail}{tail}"
    return f"{path} could not be used: {detail}"


def _check_regular(path: Path) -> None:
    """Refuse a tier file that exists and is not a regular file, or a companion SQLite writes that is not one.

    The database may be a symbolic link to a regular file (an operator's choice); its ``-wal``,
    ``-shm`` and ``-journal`` companions, which only SQLite creates, may not be links at all, and
    neither may a link lead nowhere (SQLite would create whatever it names).
    """
    for candidate, follow in ((path, True), *((Path(f"{path}{suffix}"), False) for suffix in ("-wal", "-shm", "-journal"))):
        try:
            mode = (os.stat if follow else os.lstat)(candidate).st_mode
        except FileNotFoundError:
            if not os.path.islink(candidate):
                continue
            mode = stat.S_IFLNK
        if not stat.S_ISREG(mode):
            from monoagent import NotRegularFile

            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise NotRegularFile(
                f"{candidate} is {kind}, not a regular file; the tier's SQLite database needs a regular file there (or none)", candidate
            )


def connect(path: Path, busy_timeout_ms: int = 10_000) -> sqlite3.Connection:
    """Connect to (creating) an owner-only SQLite file for a tier: directory 0700, file 0600.

    The file and its companions must be regular files (a FIFO, a device or a directory is
    refused before SQLite opens it). A file this process may only read is opened all the same
    (searches work, writes fail with ``SQLITE_READONLY``). Text that is not valid UTF-8 reads
    as U+FFFD rather than failing the query it is in. An existing file is not written to, so one
    that turns out not to be the tier's is left exactly as it was.
    """
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_regular(path)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_ms / 1000)
    try:
        conn.text_factory = lambda data: data.decode("utf-8", "replace")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
    except BaseException:
        conn.close()
        raise
    return conn


def use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (it stays so); a read-only file keeps the journal it has."""
    import sqlite3

    try:
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError as exc:
        if not sqlite_code(exc).startswith("SQLITE_READONLY"):
            raise


def open_database(path: Path, busy_timeout_ms: int = 10_000, *, root: Path | None = None) -> sqlite3.Connection:
    """:func:`connect`, then WAL: for a file known to be the caller's own.

    ``root``: a directory ``path`` is below. The directories from it down are created (0700) and
    the file (0600) with :func:`monoagent.open_file_under` first, so none of them, the file's own
    name included, is followed through a symlink (:class:`~monoagent.SymlinkedPath`). SQLite then
    opens the path it was given: a directory swapped for a symlink between that check and
    SQLite's open is not seen.
    """
    if root is not None:
        from monoagent import open_file_under

        os.close(open_file_under(root, os.path.relpath(path, root), os.O_RDONLY | os.O_CREAT | os.O_NONBLOCK, 0o600,
                                 create_directories=True, what="database"))
    conn = connect(path, busy_timeout_ms)
    try:
        use_wal(conn)
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if the block raises (anything, cancellation included).

    SQLite may already have rolled the transaction back itself (a full disk, a damaged page);
    the original error is then the one raised, not the failed ``ROLLBACK``.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def tolerate_read_only(what: str, work: Callable[[], Any]) -> None:
    """Run optional upkeep ``work`` (a recount, a re-embedding) that a read-only file must skip, with a log line."""
    import sqlite3

    try:
        work()
    except sqlite3.OperationalError as exc:
        if not sqlite_code(exc).startswith("SQLITE_READONLY"):
            raise
        logger.bind(plugin="memory").warning("skipped {}: the memory file is read-only ({})", what, exc)


TableShape = tuple[str, tuple[tuple[str, str, int], ...]]


def _shape(conn: sqlite3.Connection, name: str, sql: str | None) -> TableShape:
    """A table's kind (``table`` or the virtual table module) and its columns (name, type, pk).

    A virtual table is known by its module and the arguments of its ``CREATE`` statement (its
    columns, tokeniser and content table, whitespace aside): reading its columns would construct
    it, and a damaged index must reach the query that can rebuild it rather than fail the check.
    """
    if (sql or "").upper().startswith("CREATE VIRTUAL"):
        module = re.search(r"\bUSING\s+(\w+)\s*(?:\((?P<arguments>.*)\))?\s*$", sql or "", re.IGNORECASE | re.DOTALL)
        if module is None:
            return ("?", ())
        return (module.group(1).lower(), ((" ".join((module.group("arguments") or "").split()), "", 0),))
    columns = tuple(
        (column, kind.upper(), pk) for column, kind, pk in conn.execute("SELECT name, type, pk FROM pragma_table_info(?)", (name,))
    )
    return ("table", columns)


class SchemaReference(NamedTuple):
    """What an empty database of a schema holds."""

    tables: dict[str, TableShape]  # every table, FTS5 shadow tables included
    indexes: frozenset[str]
    shadow_rows: dict[str, list[tuple[Any, ...]]]  # the rows of each FTS5 shadow table of an empty index


class TierSchema:
    """The tables a tier's file holds, read from the tier's own DDL (so the check cannot drift from it).

    ``main`` is the table whose presence makes a file this tier's; ``fts`` maps each FTS5 table
    to the statement that fills it from the main table (when it had to be created or rebuilt).
    """

    def __init__(self, ddl: str, *, main: str, version: str, fts: Mapping[str, str]) -> None:
        self.ddl = ddl
        self.main = main
        self.version = version
        self.fts = dict(fts)

    @functools.cached_property
    def reference(self) -> SchemaReference:
        """The DDL run on an empty in-memory database (once, on first use)."""
        import sqlite3

        reference = sqlite3.connect(":memory:")
        try:
            reference.executescript(self.ddl)
            rows = reference.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'index')").fetchall()
            tables = {name: _shape(reference, name, sql) for kind, name, sql in rows if kind == "table"}
            indexes = frozenset(name for kind, name, _ in rows if kind == "index" and not name.startswith("sqlite_"))
            shadows = {
                name: reference.execute(f"SELECT * FROM {name}").fetchall()
                for name in tables
                for fts in self.fts
                if name.startswith(f"{fts}_")
            }
            return SchemaReference(tables, indexes, shadows)
        finally:
            reference.close()

    def missing(self, conn: sqlite3.Connection, path: Path) -> set[str]:
        """The tables still to create; a foreign or planted file is a ValueError naming what is wrong."""
        import sqlite3

        objects = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").fetchall()
        strays = [f"{kind} {name!r}" for kind, name, _ in objects if kind in ("trigger", "view")]
        if strays:
            raise ValueError(f"{path} holds the {strays[0]}, which monoagent never creates")
        found = {name: sql for kind, name, sql in objects if kind == "table"}
        if self.main not in found and not set(found) <= set(self.reference.tables):  # ours, half made, is completed
            shown = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
            raise ValueError(f"{path} is not a memory database of this tier: it holds the tables {shown} and no table {self.main!r}")
        for name, expected in self.reference.tables.items():
            if name not in found:
                continue
            try:
                shape = _shape(conn, name, found[name])
            except sqlite3.OperationalError as exc:
                raise ValueError(f"{path} has a table {name!r} that cannot be read ({exc})") from None
            if shape != expected:
                have = f"{shape[0]} ({', '.join(c for c, _, _ in shape[1]) or '...'})"
                want = f"{expected[0]} ({', '.join(c for c, _, _ in expected[1]) or '...'})"
                raise ValueError(f"{path} has a table {name!r} of another shape: {have}, expected {want}")
        if "meta" in found:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is not None and row[0] != self.version:
                raise ValueError(f"{path} was written with memory schema {row[0]!r}; this monoagent reads schema {self.version!r}")
        indexes = {name for kind, name, _ in objects if kind == "index"}
        return {name for name in self.reference.tables if name not in found} | (self.reference.indexes - indexes)


class TierDatabase:
    """The SQLite file of one tier, opened on first use and again after a failure (see the module docstring).

    Call :meth:`connection` in the tier's worker thread with the tier's lock held; ``prepare``
    runs once per opened connection (after the schema is checked and completed) for the tier's
    own upkeep (counting terms, building the vector index).
    """

    def __init__(
        self,
        tier: str,
        path: Path,
        schema: TierSchema,
        *,
        busy_timeout_ms: int = 10_000,
        prepare: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.tier = tier
        self.path = Path(path)
        self.schema = schema
        self.busy_timeout_ms = busy_timeout_ms
        self.prepare = prepare
        self._conn: sqlite3.Connection | None = None

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        conn = connect(self.path, self.busy_timeout_ms)
        try:
            try:
                missing = self.schema.missing(conn, self.path)
            except ValueError as exc:
                raise MemoryTierError(self.tier, f"{exc}; {_ADVICE['foreign']}") from None
            use_wal(conn)
            if missing:
                with immediate(conn):
                    for statement in _statements(self.schema.ddl):
                        conn.execute(statement)
                    for table in missing & set(self.schema.fts):
                        conn.execute(self.schema.fts[table])
                    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (self.schema.version,))
            if self.prepare is not None:
                self.prepare(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def failure(self, exc: BaseException) -> MemoryTierError:
        """``exc`` as a :class:`MemoryTierError`; the connection is dropped unless the file was only busy."""
        if not sqlite_code(exc).startswith(("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY")):
            self.reset()
        return MemoryTierError(self.tier, file_problem(exc, self.path, self.busy_timeout_ms))

    def rebuild_fts(self) -> bool:
        """Rebuild every FTS5 index from the tier's own table; False when that failed too.

        The index's shadow tables are reset to what an empty index holds (whatever in them was
        damaged, its structure record included) and refilled from the main table, which is the
        tier's record of what it stores: nothing stored is lost.
        """
        import sqlite3

        try:
            self.reset()  # a connection caches the index's structure: work on a fresh one, leave a fresh one
            conn = self.connection()
            with immediate(conn):
                for shadow, rows in self.schema.reference.shadow_rows.items():
                    conn.execute(f"DELETE FROM {shadow}")
                    if rows:
                        conn.executemany(f"INSERT INTO {shadow} VALUES ({','.join('?' * len(rows[0]))})", rows)
                for populate in self.schema.fts.values():
                    conn.execute(populate)
            self.reset()
        except (sqlite3.Error, OSError, UnicodeDecodeError, MemoryTierError) as exc:
            logger.bind(plugin="memory").warning("could not rebuild the full-text index of {}: {}", self.path, exc)
            return False
        logger.bind(plugin="memory").warning("rebuilt the damaged full-text index of {} from its stored entries", self.path)
        return True

    def reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _statements(ddl: str) -> list[str]:
    """The statements of ``ddl`` (one per ``;``; the DDL holds no literal semicolons)."""
    return [statement.strip() for statement in ddl.split(";") if statement.strip()]


#: SQLite's largest rowid (a signed 64-bit integer).
MAX_ROWID = 2**63 - 1

#: A stored entry's text as a string whatever a damaged or hand-edited row holds (NULL, a number, a blob).
STORED_TEXT = "coalesce(CAST(text AS TEXT), '')"


def number(column: str) -> str:
    """SQL for ``column`` as a float whatever a damaged or hand-edited row holds."""
    return f"coalesce(CAST({column} AS REAL), 0.0)"


def read_metadata(raw: Any) -> dict[str, Any]:
    """A stored entry's metadata; a value that is not a JSON object is shown as unreadable, not raised."""
    import json

    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else None
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {"metadata": "unreadable"}


def entry_rowid(memory_id: str) -> int | None:
    """The SQLite rowid a tier's ``forget(memory_id)`` names, or None when it names none.

    Only ASCII digits count: ``"\u0663"``, ``"+3"`` or ``"0_3"`` is not the id 3; a number past
    SQLite's largest rowid names no entry (rather than overflowing the query).
    """
    try:
        rowid = int(parse_ascii_number(str(memory_id).strip(), int, negative=False))
    except ValueError:
        return None
    return rowid if rowid <= MAX_ROWID else None


def data_version(conn: sqlite3.Connection) -> int:
    """SQLite's ``data_version``: changes when another connection commits to the file."""
    version: int = conn.execute("PRAGMA data_version").fetchone()[0]  # the pragma always answers one integer row
    return version




class TierWorker:
    """The one worker thread a tier's SQLite work runs on.

    A dedicated thread rather than the loop's shared pool: the hand-off to a thread that is
    already warm costs about half as much, and it serialises the tier's use of its connection.
    With a ``database``, every SQLite or OS error of the work becomes that database's
    :class:`MemoryTierError`, and work that met a damaged full-text index runs once more after
    the index was rebuilt, as does a write refused as read-only (on a new connection: one opened
    while the file was read-only stays read-only after the file is made writable).
    """

    def __init__(self, name: str, database: TierDatabase | None = None) -> None:
        import concurrent.futures

        self.database = database
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"monoagent-memory-{name}")

    async def run(self, function: Callable[..., R], *args: Any) -> R:
        import asyncio
        import functools

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(self._call, function, args))

    def _call(self, function: Callable[..., R], args: tuple[Any, ...]) -> R:
        import sqlite3

        database = self.database
        if database is None:
            return function(*args)
        try:
            return function(*args)
        except (sqlite3.Error, OSError, UnicodeDecodeError) as exc:  # a damaged schema's text in SQLite's message
            if sqlite_code(exc).startswith("SQLITE_READONLY"):
                database.reset()  # opened while the file was read-only, the connection stays so: the file may be writable now
            elif sqlite_code(exc) != "SQLITE_CORRUPT_VTAB" or not database.rebuild_fts():
                raise database.failure(exc) from exc
        try:
            return function(*args)
        except (sqlite3.Error, OSError, UnicodeDecodeError) as exc:
            raise database.failure(exc) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=True)
