"""Whether the sqlite-vec vector backend can run here, and what a test that needs it does when it cannot.

This machine's pyenv Python is built without ``sqlite3.Connection.enable_load_extension``, so
the sqlite-vec tests skip in the main venv. CI runs the memory suites a second time in
``.venv-vec`` (Debian's ``/usr/bin/python3``, which can load extensions, with the ``memory``
extra) and sets ``MONOAGENT_REQUIRE_SQLITE_VEC=1`` there: every such skip then becomes a
failure, so a CI run that passes proves the backend ran (see ``.ci/run`` and docs/testing.md).
"""

from __future__ import annotations

import os
import sqlite3

import pytest

from monoagent_plugins.memory.vectors import VectorIndex

REQUIRE_SQLITE_VEC = "MONOAGENT_REQUIRE_SQLITE_VEC"


def sqlite_vec_unavailable() -> str | None:
    """Why sqlite-vec cannot be used in this Python, or None when it loads."""
    conn = sqlite3.connect(":memory:")
    try:
        index = VectorIndex(conn, "probe", 8, "auto")
        return None if index.backend == "sqlite-vec" else index.unavailable or f"the backend chosen is {index.backend}"
    finally:
        conn.close()


def need_sqlite_vec(why: str | None = None) -> None:
    """Skip the calling test when sqlite-vec cannot load (``why``, else probed); fail instead under ``MONOAGENT_REQUIRE_SQLITE_VEC=1``."""
    why = why if why is not None else sqlite_vec_unavailable()
    if why is None:
        return
    if os.environ.get(REQUIRE_SQLITE_VEC) == "1":
        pytest.fail(f"{REQUIRE_SQLITE_VEC}=1 but sqlite-vec is not usable in this Python: {why}")
    pytest.skip(f"sqlite-vec is not usable here: {why} (CI runs it in .venv-vec with {REQUIRE_SQLITE_VEC}=1)")
