"""Hostile input for long-term memory: damaged, planted, locked and read-only files, broken
embedders, and replies that quote what was recalled (issue 8, items 5 and 18).

Everything is real: SQLite files under ``tmp_path`` damaged byte by byte, a second *process*
holding the lock, a forked child that has dropped to an unprivileged user for the read-only
file, whole turns through the harness (``offline:echo`` repeats the provider-facing message,
``offline:scripted`` replays a fixed answer), and the ``monoagent memory`` commands through
click and through the console script.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import monoagent._cli as cli_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the CLI test isolation helper
from cli_isolation import isolate_cli

from monoagent._boundary.fences import neutralise_fence_tokens
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.host import PluginHost
from monoagent._kernel.model import MemoryHit
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import collect_events, fresh_agent, scripted_agent
from monoagent_plugins.memory.database import MemoryTierError
from monoagent_plugins.memory.journal import JournalTier
from monoagent_plugins.memory.recall import capture_text
from monoagent_plugins.prompt.conversation import RECALL_DELIMITER, recall_block

TIERS = ("lite", "journal")
FILES = {"lite": "lite.sqlite", "journal": "journal.sqlite"}
QUESTION = "How do I deploy the billing api?"
FACT = "Deploy the billing api with make deploy-billing from the ops host."
NOBODY = 65534


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def memory_config(mem: Path, tiers: tuple[str, ...] = TIERS, **extra: Any) -> dict[str, Any]:
    """A memory section whose files live in ``mem``; locks are waited for 50 ms, not 10 s."""
    return {
        "memory": {
            "tiers": list(tiers),
            "path": str(mem),
            "lite": {"busyTimeoutMs": 50},
            "journal": {"busyTimeoutMs": 50},
            **extra,
        }
    }


def turn(agent: Any, text: str = QUESTION) -> tuple[Any, list[dict[str, Any]]]:
    """One turn; its result and the data of its runtime warnings."""
    events: list[Any] = []
    result = agent.run_sync(text, conversation_id="c", on_event=collect_events(events))
    return result, [e.data for e in events if e.type == "runtime_warning"]


def codes(warnings: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The memory warnings by tier: ``{"lite": {"memory_recall_failed", ...}}``."""
    found: dict[str, set[str]] = {}
    for warning in warnings:
        if warning.get("code", "").startswith("memory_"):
            found.setdefault(warning["tier"], set()).add(warning["code"])
    return found


def assert_one_line_naming(warnings: list[dict[str, Any]], tier: str, *words: str) -> None:
    mine = [w["error"] for w in warnings if w.get("tier") == tier]
    assert mine, warnings
    for error in mine:
        assert "\n" not in error and f"memory tier {tier!r}" in error, error
        for word in words:
            assert word in error, (word, error)


def healthy_store(mem: Path, texts: tuple[str, ...] = (FACT,)) -> None:
    """Both tiers' files in ``mem`` holding ``texts``, closed (so no -wal file is left)."""
    agent = fresh_agent(mem.parent / "seed", config=memory_config(mem))
    for tier in agent.memory_tiers().values():
        for text in texts:
            run(tier.add(text))
    agent.close()


def entries(mem: Path, tier: str) -> int:
    agent = fresh_agent(mem.parent / "count", config=memory_config(mem, (tier,)))
    try:
        return run(agent.memory_tiers()[tier].stats()).entries
    finally:
        agent.close()


# ------------------------------------------------------------------------------ damaged and planted files


def garbage(size: int, seed: int = 8) -> bytes:
    """``size`` bytes of noise, the same on every run."""
    return random.Random(seed).randbytes(size)


def _random_bytes(path: Path) -> None:
    path.write_bytes(garbage(3 * 4096 + 17))


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 100])


def _foreign(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (number INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 99.5)")
    conn.close()


def _planted_table(path: Path) -> None:
    main = "memories" if path.name == "lite.sqlite" else "entries"
    path.unlink()
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TABLE {main} (id INTEGER PRIMARY KEY, body TEXT, owner TEXT)")
        conn.execute(f"INSERT INTO {main} VALUES (1, 'not a memory', 'mallory')")
    conn.close()


def _plain_fts(path: Path) -> None:
    fts = "memories_fts" if path.name == "lite.sqlite" else "entries_fts"
    with sqlite3.connect(path) as conn:
        conn.execute(f"DROP TABLE {fts}")
        conn.execute(f"CREATE TABLE {fts} (text TEXT)")
    conn.close()


def _fts_options(options: str) -> Callable[[Path], None]:
    """An FTS5 index of the tier's name whose options are not the tier's: another tokeniser, or
    an external-content index reading another table (the module alone matches the tier's DDL)."""

    def plant(path: Path) -> None:
        fts = "memories_fts" if path.name == "lite.sqlite" else "entries_fts"
        with sqlite3.connect(path) as conn:
            conn.execute(f"DROP TABLE {fts}")
            conn.execute(f"CREATE VIRTUAL TABLE {fts} USING fts5({options})")
        conn.close()

    return plant


def _trigger(path: Path) -> None:
    main = "memories" if path.name == "lite.sqlite" else "entries"
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE TRIGGER wipe AFTER INSERT ON {main} BEGIN DELETE FROM {main}; END")
    conn.close()


def _future_schema(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', '99')")
    conn.close()


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _fifo_wal(path: Path) -> None:
    os.mkfifo(f"{path}-wal")


def _dangling_symlink(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "nowhere.sqlite")


def _wal_symlink(path: Path) -> None:
    victim = path.parent.parent / "victim.txt"
    victim.write_text("keep me")
    Path(f"{path}-wal").symlink_to(victim)


DAMAGE = {
    "random bytes": (_random_bytes, "not an SQLite database"),
    "truncated": (_truncated, "damaged"),
    "foreign schema": (_foreign, "holds the tables invoices"),
    "planted table of the same name": (_planted_table, "of another shape"),
    "plain table as the FTS index": (_plain_fts, "of another shape"),
    "FTS index with another tokeniser": (_fts_options("text, tokenize='ascii'"), "of another shape"),
    "FTS index over another table": (_fts_options("text, content='meta', content_rowid='rowid'"), "of another shape"),
    "planted trigger": (_trigger, "trigger 'wipe'"),
    "schema from the future": (_future_schema, "schema '99'"),
    "a directory": (_directory, "is a directory"),
    "a FIFO": (_fifo, "is a FIFO"),
    "a FIFO as its -wal file": (_fifo_wal, "is a FIFO"),
    "a symbolic link to nothing": (_dangling_symlink, "is a symbolic link"),
    "a symbolic link as its -wal file": (_wal_symlink, "is a symbolic link"),
}


@pytest.mark.parametrize("damaged", TIERS)
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_or_planted_tier_is_a_warning_and_the_other_tier_works(tmp_path: Path, kind: str, damaged: str) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    plant, words = DAMAGE[kind]
    path = mem / FILES[damaged]
    plant(path)
    before = path.read_bytes() if path.is_file() else None

    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem))
    result, warnings = turn(agent)
    again, later = turn(agent, "And deploy the billing api again?")
    agent.close()

    assert result.status == again.status == "completed"
    expected = {"memory_capture_failed"} | ({"memory_recall_failed"} if damaged == "lite" else set())
    assert codes(warnings) == {damaged: expected} and codes(later) == {damaged: expected}
    assert_one_line_naming(warnings, damaged, FILES[damaged], words)
    other = "journal" if damaged == "lite" else "lite"
    assert entries(mem, other) == 3  # the seed and both turns: the healthy tier captured everything
    if damaged == "journal":
        assert RECALL_DELIMITER in result.text and FACT in result.text  # lite still recalls
    if before is not None:
        assert path.read_bytes() == before  # refused, never written into
    assert not (mem / "nowhere.sqlite").exists()
    assert not (tmp_path / "victim.txt").exists() or (tmp_path / "victim.txt").read_text() == "keep me"


@pytest.mark.parametrize("tier", TIERS)
def test_a_store_left_half_made_is_completed_not_refused(tmp_path: Path, tier: str) -> None:
    """The strictness above must not brick a store of our own that a crash left with some tables only."""
    mem = tmp_path / "mem"
    mem.mkdir(mode=0o700)
    with sqlite3.connect(mem / FILES[tier]) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.close()
    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem, (tier,)))
    _, warnings = turn(agent)
    agent.close()
    assert codes(warnings) == {} and entries(mem, tier) == 1


def test_a_memory_path_that_is_a_file_fails_both_tiers_but_not_the_turn(tmp_path: Path) -> None:
    (tmp_path / "mem").write_text("not a directory")
    agent = fresh_agent(tmp_path / "agent", config=memory_config(tmp_path / "mem"))
    result, warnings = turn(agent)
    agent.close()
    assert result.status == "completed"
    assert codes(warnings) == {"lite": {"memory_recall_failed", "memory_capture_failed"}, "journal": {"memory_capture_failed"}}
    assert_one_line_naming(warnings, "lite", "mem")
    assert (tmp_path / "mem").read_text() == "not a directory"


@pytest.mark.parametrize("damaged", TIERS)
def test_a_file_put_back_recovers_without_a_restart(tmp_path: Path, damaged: str) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    path = mem / FILES[damaged]
    good = path.read_bytes()
    _random_bytes(path)
    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem))
    _, warnings = turn(agent)
    assert damaged in codes(warnings)
    path.write_bytes(good)
    result, warnings = turn(agent, "Deploy the billing api how?")
    agent.close()
    assert codes(warnings) == {}
    assert RECALL_DELIMITER in result.text
    assert entries(mem, damaged) == 2


def _damage(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, at, payload in edits:
        at %= max(len(out), 1)
        if kind == "truncate":
            del out[at:]
        elif kind == "overwrite":
            out[at : at + len(payload)] = payload
        else:
            out[at : at + len(payload)] = bytes(len(payload))
    return bytes(out)


_HEALTHY: dict[str, bytes] = {}


def _healthy_bytes(tier: str) -> bytes:
    if tier not in _HEALTHY:
        with tempfile.TemporaryDirectory() as scratch:
            mem = Path(scratch) / "mem"
            healthy_store(mem, tuple(f"{FACT} Note {i}: {'the ops host rotates keys ' * (i % 7)}" for i in range(60)))
            for name in TIERS:
                _HEALTHY[name] = (mem / FILES[name]).read_bytes()
    return _HEALTHY[tier]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tier=st.sampled_from(TIERS),
    edits=st.lists(
        st.tuples(st.sampled_from(["truncate", "overwrite", "zero"]), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=600)),
        min_size=1,
        max_size=4,
    ),
)
@example(tier="lite", edits=[("overwrite", 3190, b"\x80")])  # invalid UTF-8 in the schema reaches SQLite's error message
def test_generated_damage_never_breaks_a_turn(tier: str, edits: list[tuple[str, int, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        mem = Path(scratch) / "mem"
        mem.mkdir(mode=0o700)
        (mem / FILES[tier]).write_bytes(_damage(_healthy_bytes(tier), edits))
        agent = fresh_agent(Path(scratch) / "agent", config=memory_config(mem))
        result, warnings = turn(agent)
        try:
            run(agent.memory_tiers()[tier].stats())
        except MemoryTierError as exc:
            assert "\n" not in str(exc) and FILES[tier] in str(exc)
        agent.close()
    assert result.status == "completed"
    assert set(codes(warnings)) <= {tier}
    for warning in warnings:
        assert "\n" not in warning["error"]


# ------------------------------------------------------------------------------ hand-edited rows


@pytest.mark.parametrize("tier", TIERS)
def test_rows_of_the_wrong_type_are_read_not_raised(tmp_path: Path, tier: str) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    table = "memories" if tier == "lite" else "entries"
    with sqlite3.connect(mem / FILES[tier]) as conn:
        conn.execute(f"UPDATE {table} SET metadata = '{{not json', created_at = 'yesterday'")
        conn.execute(f"UPDATE {table} SET text = CAST(x'6465706c6f7920ff62696c6c696e6720617069' AS TEXT)")  # invalid UTF-8
        conn.execute("UPDATE entry_vectors SET embedding = x'00'" if tier == "journal" else "UPDATE memories SET merged = 'lots'")
    conn.close()
    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem, (tier,)))
    store = agent.memory_tiers()[tier]
    [record] = run(store.list(limit=5))
    assert record.metadata["metadata"] == "unreadable" and "\ufffd" in record.text
    hits = run(store.search("deploy billing api", limit=5))
    assert hits and "\ufffd" in hits[0].text
    _, warnings = turn(agent)
    agent.close()
    assert codes(warnings) == {}


# ------------------------------------------------------------------------------ the full-text index


@pytest.mark.parametrize("damage", [11, 1])
@pytest.mark.parametrize("tier", TIERS)
def test_a_damaged_full_text_index_is_rebuilt_from_the_stored_entries(tmp_path: Path, tier: str, damage: int) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem, tuple(f"{FACT} Entry {i}." for i in range(40)))
    fts = "memories_fts" if tier == "lite" else "entries_fts"
    with sqlite3.connect(mem / FILES[tier]) as conn:
        blocks = conn.execute(f"SELECT id, length(block) FROM {fts}_data WHERE id >= ?", (damage,)).fetchall()  # 10: the structure
        conn.executemany(f"UPDATE {fts}_data SET block = ? WHERE id = ?", [(garbage(size, row), row) for row, size in blocks])
        conn.execute(f"UPDATE {fts}_docsize SET sz = ?", (garbage(5),))
    conn.close()
    probe = sqlite3.connect(mem / FILES[tier])
    with pytest.raises(sqlite3.DatabaseError, match=r"malformed|vtable constructor failed"):
        probe.execute(f"SELECT rowid FROM {fts} WHERE {fts} MATCH 'billing'").fetchall()

    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem, (tier,)))
    hits = run(agent.memory_tiers()[tier].search("deploy billing api", limit=3))
    result, warnings = turn(agent)
    agent.close()

    assert len(hits) == 3 and all("billing api" in hit.text for hit in hits)
    assert codes(warnings) == {}
    assert tier == "journal" or RECALL_DELIMITER in result.text
    assert len(probe.execute(f"SELECT rowid FROM {fts} WHERE {fts} MATCH 'billing'").fetchall()) == 41  # and the turn's capture
    probe.close()


# ------------------------------------------------------------------------------ another process holds the lock

LOCK_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    if sys.argv[2] == "exclusive":
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
    else:
        conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO meta(key, value) VALUES ('held-by', 'another process')")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("ROLLBACK")
    """
)


@pytest.fixture
def lock_holder() -> Iterator[Any]:
    """Start a process that holds a write lock on a database until the test lets it go."""
    held: list[subprocess.Popen[str]] = []

    def hold(path: Path, mode: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        held.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        return proc

    yield hold
    for proc in held:
        release(proc)


def release(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)


@pytest.mark.parametrize("locked", TIERS)
def test_a_write_lock_held_by_another_process_fails_only_capture_and_recovers(tmp_path: Path, locked: str, lock_holder: Any) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem))
    holder = lock_holder(mem / FILES[locked], "immediate")
    result, warnings = turn(agent)
    assert result.status == "completed"
    assert RECALL_DELIMITER in result.text  # readers are not blocked by a writer (WAL)
    assert codes(warnings) == {locked: {"memory_capture_failed"}}
    assert_one_line_naming(warnings, locked, "is locked by another process", "50 ms")
    release(holder)
    _, warnings = turn(agent, "Deploy the billing api, once more?")
    agent.close()
    assert codes(warnings) == {}
    assert entries(mem, locked) == 2 and entries(mem, "journal" if locked == "lite" else "lite") == 3


def test_an_exclusive_lock_fails_recall_too_and_recovers(tmp_path: Path, lock_holder: Any) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem))
    holder = lock_holder(mem / "lite.sqlite", "exclusive")
    result, warnings = turn(agent)
    assert result.status == "completed" and RECALL_DELIMITER not in result.text
    assert codes(warnings) == {"lite": {"memory_recall_failed", "memory_capture_failed"}}
    release(holder)
    result, warnings = turn(agent, "Deploy the billing api, once more?")
    agent.close()
    assert codes(warnings) == {} and RECALL_DELIMITER in result.text


# ------------------------------------------------------------------------------ a read-only file


def _read_only_turn(root: Path) -> dict[str, Any]:
    # No artifacts: its one writer thread per process does not survive the fork of _as_nobody.
    agent = fresh_agent(root / "agent", config={**memory_config(root / "mem", ("lite",)), "plugins": {"block": ["artifacts"]}})
    result, warnings = turn(agent)
    journal = JournalTier(root / "mem" / "journal.sqlite", agent.embedder("hashed-ngrams"))
    hits = run(journal.search("billing api", limit=2))
    journal.close()
    agent.close()
    return {"recalled": RECALL_DELIMITER in result.text, "warnings": warnings, "journal_hits": len(hits)}


def _as_nobody(root: Path) -> dict[str, Any]:
    """``_read_only_turn`` in a forked child that dropped to uid/gid 65534 (root ignores file modes)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome = _read_only_turn(root)
        except BaseException as exc:  # reported to the parent, which fails the test with it
            outcome = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def test_a_read_only_file_still_recalls_and_capture_says_why_it_cannot(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="monoagent-ro-"))
    try:
        root.chmod(0o755)
        healthy_store(root / "mem")
        (root / "agent").mkdir()
        for name in FILES.values():
            (root / "mem" / name).chmod(0o444)
        before = {name: (root / "mem" / name).read_bytes() for name in FILES.values()}
        if os.geteuid() == 0:
            for path in (root / "agent", root / "mem"):
                os.chown(path, NOBODY, NOBODY)
            outcome = _as_nobody(root)
        else:
            outcome = _read_only_turn(root)
        after = {name: (root / "mem" / name).read_bytes() for name in FILES.values()}
    finally:
        shutil.rmtree(root)
    assert "error" not in outcome, outcome
    assert outcome["recalled"] and outcome["journal_hits"] >= 1
    assert codes(outcome["warnings"]) == {"lite": {"memory_capture_failed"}}
    assert_one_line_naming(outcome["warnings"], "lite", "is read-only")
    assert after == before


# ------------------------------------------------------------------------------ embedders and tier factories


class BrokenEmbedder:
    name = "broken"
    dimensions = 8

    def __init__(self, how: str) -> None:
        self.how = how

    def embed(self, texts: list[str]) -> list[Any]:
        if self.how == "raises":
            raise ConnectionError("the embedding server at 127.0.0.1:9 refused the connection")
        return {
            "wrong dimensions": [[0.5] * 3 for _ in texts],
            "wrong count": [[0.5] * 8 for _ in texts[:-1]],
            "not finite": [[float("nan")] * 8 for _ in texts],
            "not numbers": [["x"] * 8 for _ in texts],
        }[self.how]


EMBEDDER_FAILURES = {
    "raises": "ConnectionError",
    "wrong dimensions": "a vector of 3 numbers; it declares 8 dimensions",
    "wrong count": "returned 0 vectors for 1 texts",
    "not finite": "not a finite number",
    "not numbers": "TypeError",
}


@pytest.mark.parametrize("how", list(EMBEDDER_FAILURES))
def test_a_broken_embedder_fails_journal_capture_with_its_name_and_nothing_else(tmp_path: Path, how: str) -> None:
    class Plugin:
        @hookimpl
        def register_embedders(self, register: Any) -> None:
            register("broken", lambda agent, options: BrokenEmbedder(how))

    mem = tmp_path / "mem"
    healthy_store(mem)
    steps = [
        {"text": "Checking.", "tool_calls": [{"name": "MemoryRecall", "arguments": {"query": "billing api"}}]},
        {"text": "Use make deploy-billing."},
    ]
    config = memory_config(mem, journal={"embedder": "broken", "busyTimeoutMs": 50})
    (tmp_path / "agent").mkdir()
    agent = scripted_agent(tmp_path / "agent", steps, config=config, plugins=[Plugin()])
    result, warnings = turn(agent)
    journal = agent.memory_tiers()["journal"]
    by_date = run(journal.entries(days=[journal.today()]))
    agent.close()

    assert result.status == "completed"
    assert codes(warnings) == {"journal": {"memory_capture_failed", "memory_recall_failed"}}
    assert_one_line_naming(warnings, "journal", "the embedder 'broken'", EMBEDDER_FAILURES[how])
    [tool] = result.tool_activity
    assert tool.result.status.value == "success" and FACT in tool.result.content  # lite answered the tool
    assert "Not searched: memory tier(s) journal failed" in tool.result.content
    assert entries(mem, "lite") == 2
    assert [e.text for e in by_date] == [FACT]  # the journal opens, and reads by date, all the same


class _Fixed:
    """A trivial embedder under a fixed name; ``broken`` makes the same embedder fail."""

    name = "fixed"
    dimensions = 8

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self.broken:
            raise TimeoutError("the embedder timed out")
        return [[1.0] + [0.0] * 7 for _ in texts]


def test_a_damaged_vector_is_made_again_once_the_embedder_works(tmp_path: Path) -> None:
    path = tmp_path / "mem" / "journal.sqlite"
    text = "the billing api deploys from the ops host"
    first = JournalTier(path, _Fixed())
    run(first.add(text, metadata={"date": "2026-07-29"}))
    first.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entry_vectors SET embedding = x'0000'")
    conn.close()

    broken = JournalTier(path, _Fixed(broken=True))
    assert [e.text for e in run(broken.entries(days=["2026-07-29"]))] == [text]  # it opens, and reads by date
    assert [e.text for e in run(broken.entries(query="billing api", mode="keyword"))] == [text]
    with pytest.raises(MemoryTierError, match=r"the embedder 'fixed' failed \(TimeoutError"):
        run(broken.entries(query="billing api", mode="semantic"))
    broken.close()

    again = JournalTier(path, _Fixed())
    [hit] = run(again.entries(query="billing api deploys", mode="semantic"))
    again.close()
    assert hit.text == text


class UnreachableTier:
    """Registers the tier ``vectors``, whose factory cannot reach its server."""

    @staticmethod
    def unreachable(agent: Any, options: Any) -> Any:
        raise ConnectionError("vector database unreachable")

    @hookimpl
    def register_memory_tiers(self, register: Any) -> None:
        register("vectors", self.unreachable)


def test_a_tier_whose_factory_raises_stops_neither_the_turn_nor_the_other_tier(tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    agent = fresh_agent(tmp_path / "agent", config=memory_config(mem, ("vectors", "lite")), plugins=[UnreachableTier()])
    result, warnings = turn(agent)
    agent.close()
    assert result.status == "completed" and FACT in result.text
    assert codes(warnings) == {"vectors": {"memory_recall_failed", "memory_capture_failed"}}
    assert all("ConnectionError: vector database unreachable" in w["error"] for w in warnings if w["tier"] == "vectors")
    assert entries(mem, "lite") == 2


def test_the_journal_tool_works_when_another_tier_cannot_be_built(tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    healthy_store(mem)
    steps = [{"text": "Looking.", "tool_calls": [{"name": "MemoryJournal", "arguments": {"query": "billing api"}}]}, {"text": "Found."}]
    (tmp_path / "agent").mkdir()
    agent = scripted_agent(tmp_path / "agent", steps, config=memory_config(mem, ("vectors", "journal")), plugins=[UnreachableTier()])
    result, warnings = turn(agent)
    agent.close()
    [tool] = result.tool_activity
    assert tool.result.status.value == "success" and FACT in tool.result.content
    assert codes(warnings) == {"vectors": {"memory_recall_failed", "memory_capture_failed"}}


# ------------------------------------------------------------------------------ monoagent memory ...


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    host = PluginHost()
    host.load_entry_points()
    monkeypatch.setitem(ROOT, "cli", cli_module.build_cli(host))
    (tmp_path / "monoagent.toml").write_text('[memory]\ntiers = ["lite", "journal"]\npath = "mem"\n', encoding="utf-8")
    healthy_store(tmp_path / "mem")
    return tmp_path


ROOT: dict[str, Any] = {}
COMMANDS = [["stats"], ["stats", "--json"], ["list"], ["search", "billing api"], ["add", "a new fact"], ["forget", "1"]]


@pytest.mark.parametrize("kind", ["random bytes", "foreign schema", "a FIFO"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_memory_command_names_a_damaged_tier_in_one_line(project: Path, command: list[str], kind: str) -> None:
    DAMAGE[kind][0](project / "mem" / "lite.sqlite")
    result = CliRunner().invoke(ROOT["cli"], ["memory", *command])
    assert result.exit_code == 1, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)  # a ClickException, not a traceback
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: memory tier 'lite': ") and "lite.sqlite" in line and DAMAGE[kind][1] in line
    if command[0] in ("stats", "list", "search"):  # the healthy journal still answers
        assert "journal" in result.stdout or "billing" in result.stdout


def test_the_console_script_prints_no_traceback(project: Path) -> None:
    _random_bytes(project / "mem" / "lite.sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")} | {"MONO_AGENT_HOME": str(project / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "monoagent", "memory", "stats"], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert "memory tier 'lite'" in line and "not an SQLite database" in line
    assert "journal: 1 entries" in proc.stdout


# ------------------------------------------------------------------------------ item 18: what capture keeps


def captured(agent: Any, tier: str = "lite") -> list[str]:
    return [record.text for record in run(agent.memory_tiers()[tier].list(limit=20))]


def test_recalled_words_in_an_ordinary_reply_are_kept(tmp_path: Path) -> None:
    reply = "To deploy the api, run make deploy"
    agent = scripted_agent(tmp_path, [{"text": reply}], config={"memory": {"tiers": ["lite"]}})
    run(agent.memory_tiers()["lite"].add("deploy"))
    events: list[Any] = []
    agent.run_sync("How do I deploy the api?", conversation_id="c", on_event=collect_events(events))
    assert [e for e in events if e.type == "memory_recalled"], "the entry must have been recalled for this to test anything"
    assert "User: How do I deploy the api?\nAssistant: To deploy the api, run make deploy" in captured(agent)
    agent.close()


def test_an_echoed_block_is_cut_and_the_answer_around_it_kept(tmp_path: Path) -> None:
    reply = f"You asked before.\n\n> {RECALL_DELIMITER}\n> - {FACT}\n\nSo: {FACT}\nDone."
    agent = scripted_agent(tmp_path, [{"text": reply}], config={"memory": {"tiers": ["lite"]}})
    run(agent.memory_tiers()["lite"].add(FACT))
    result = agent.run_sync(QUESTION, conversation_id="c")
    assert result.text == reply
    [entry] = [text for text in captured(agent) if text.startswith("User:")]
    assert entry == f"User: {QUESTION}\nAssistant: You asked before.\n\n\nSo: {FACT}\nDone."
    agent.close()


def test_the_echo_provider_echo_is_cut_exactly(tmp_path: Path) -> None:
    agent = fresh_agent(tmp_path, config={"memory": {"tiers": ["lite"]}})
    run(agent.memory_tiers()["lite"].add(f"User: where?\nAssistant: {FACT}"))
    result = agent.run_sync(QUESTION, conversation_id="c")
    assert RECALL_DELIMITER in result.text
    [entry] = [text for text in captured(agent) if text.startswith(f"User: {QUESTION}")]
    assert RECALL_DELIMITER not in entry and FACT not in entry
    agent.close()


@pytest.mark.parametrize(
    "reply",
    [
        f"As noted: {FACT} That is all.",  # a recalled sentence inside a longer one
        f"{FACT}",  # a whole entry, but no delimiter: the model's own answer
        f"- {FACT}\nand more",
        f"The header reads {RECALL_DELIMITER} in the prompt.",  # the delimiter inline, not a line
        f"{RECALL_DELIMITER} and then {FACT}",
    ],
)
def test_replies_that_are_not_a_block_echo_are_captured_unchanged(reply: str) -> None:
    hits = [MemoryHit("lite", FACT, 1.0, "1"), MemoryHit("lite", "deploy", 0.9, "2")]
    assert capture_text(TurnRequest("q"), reply, hits) == neutralise_fence_tokens(f"User: q\nAssistant: {reply}")


def test_a_delimiter_line_alone_is_dropped_and_paraphrases_are_kept() -> None:
    hits = [MemoryHit("lite", FACT, 1.0, "1")]
    reply = f"Intro\n{RECALL_DELIMITER}\n- Deploy it with make, from the ops host.\nOutro"
    assert capture_text(TurnRequest("q"), reply, hits) == "User: q\nAssistant: Intro\n- Deploy it with make, from the ops host.\nOutro"


_WORDS = ["deploy", "billing", "api", "make", "ops", "host", "the", "a", "run", "-", ">", "*", "User:", "Assistant:", "✓", "日本"]
_entry = st.lists(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8).map(" ".join), min_size=1, max_size=3).map("\n".join)
_hits = st.lists(_entry, min_size=1, max_size=4).map(lambda texts: [MemoryHit("lite", t, 1.0, str(i)) for i, t in enumerate(texts)])


@st.composite
def _reply_from(draw: Any, hits: list[MemoryHit]) -> str:
    """Text made of what was recalled: entries whole, as rendered, bulleted, cut up, mixed with other words."""
    pieces = []
    for hit in hits:
        text = hit.text
        pieces += [text, f"- {text}", recall_block([hit]).split("\n", 1)[1], " ".join(text.split()[:2]), text.upper()]
    fragment = st.one_of(st.sampled_from(pieces), st.sampled_from(_WORDS), st.text(max_size=12))
    separators = st.sampled_from(["", " ", "\n", "\n\n", "\n> ", "  "])
    parts = draw(st.lists(st.tuples(separators, fragment), max_size=10))
    return "".join(sep + piece for sep, piece in parts)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), hits=_hits)
def test_a_reply_without_the_delimiter_is_captured_unchanged_whatever_was_recalled(data: Any, hits: list[MemoryHit]) -> None:
    reply = data.draw(_reply_from(hits))
    assume(RECALL_DELIMITER not in reply)
    request = TurnRequest("q")
    assert capture_text(request, reply, hits) == capture_text(request, reply, ())
    assume("<messages_since_your_last_turn>" not in reply)
    assert capture_text(request, reply, hits) == neutralise_fence_tokens(f"User: q\nAssistant: {reply.strip()}")


@settings(max_examples=150, deadline=None)
@given(data=st.data(), hits=_hits)
def test_an_echoed_block_is_removed_and_nothing_else(data: Any, hits: list[MemoryHit]) -> None:
    before = data.draw(_reply_from(hits))
    after = data.draw(_reply_from(hits))
    assume(RECALL_DELIMITER not in before + after)
    first_after = next((line.strip() for line in after.splitlines() if line.strip()), "")
    firsts = {re.sub(r"^[\s>]+", "", hit.text.strip().splitlines()[0]).rstrip() for hit in hits}
    assume(first_after not in firsts and not first_after.startswith((">", "-", "*", "•")))  # the answer goes on, not a further entry
    assume("<messages_since_your_last_turn>" not in before + after)
    block = recall_block(hits)
    reply = f"{before}\n{block}\n{after}"
    expected = f"{before}\n{after}".strip()
    assert capture_text(TurnRequest("q"), reply, hits) == neutralise_fence_tokens(f"User: q\nAssistant: {expected}")
