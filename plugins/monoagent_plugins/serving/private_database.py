"""The SQLite files the served channels keep under the agent home: the webhook's receipts, the stored responses.

:func:`open_private_database` opens ``<home>/<directory>/<database>`` as each of them needs it: the
directory owner-only and reached from the home without following a symlink
(:func:`monoagent.private_directory_under`), the file opened by the memory tier's
:func:`~monoagent_plugins.memory.database.open_database` (WAL, no symlinks), ``synchronous=FULL``,
the schema applied, and the columns a database of an older release lacks added. Every failure is
the caller's error type with a message naming the path and why.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

from monoagent import MonoagentError, SymlinkedPath, private_directory_under
from monoagent_plugins.memory.database import open_database


def open_private_database(
    home: Path, directory: str, database: str, *, what: str, error: type[MonoagentError], schema: str,
    added_columns: Mapping[str, Mapping[str, str]] | None = None,
) -> sqlite3.Connection:
    """``<home>/<directory>/<database>`` open, its ``schema`` applied; ``added_columns`` (table -> column -> type)
    are added when an older database lacks them. Raises ``error`` naming ``what`` and why it cannot be used."""
    path = Path(home) / directory
    try:
        problem = private_directory_under(home, directory, create=True, what=f"the {what} directory")
    except SymlinkedPath as exc:
        raise error(str(exc)) from None
    except OSError as exc:
        raise error(f"cannot create the {what} directory {path}: {exc}") from exc
    if problem is not None:
        raise error(problem)
    try:
        db = open_database(path / database, root=Path(home))
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(schema)
        for table, columns in (added_columns or {}).items():
            present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            for column, kind in columns.items():
                if column not in present:  # a database of an older release
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    except (OSError, sqlite3.Error, MonoagentError) as exc:
        raise error(f"cannot open the {what} database {path / database}: {exc}") from exc
    return db
