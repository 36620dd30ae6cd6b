"""Hostile files in the ``files`` history store's directory: foreign files, damaged records, huge files.

Issue 8, items 3, 4 and the history part of 6. Everything in the history directory that the store
did not write is hostile: a ``package.json`` dropped there, look-alike names, symlinks, FIFOs,
directories named like records, files of another owner, hand-edited or damaged records of any
bytes, and records too large to read. The store reads, counts and deletes only files that are
provably its own, turns every unreadable record into a ``history_record_unreadable`` cold start,
completes every reset, and never reads a record, journal or stage past its byte cap.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monoagent._kernel.model import Message, ToolCall
from monoagent.testing import collect_events, fresh_agent
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.records import (
    RESET_PREFIX,
    HistoryRecordError,
    HistoryWriteError,
    record_name,
)

UNREADABLE = "history_record_unreadable"


def turn(i: int) -> list[Message]:
    return [Message("user", f"u{i}", timestamp=1.0), Message("assistant", f"a{i}", timestamp=1.0)]


def commit(store: FilesHistoryStore, cid: str, i: int) -> Any:
    return asyncio.run(store.commit(cid, turn(i)))


def load(store: FilesHistoryStore, cid: str, warnings: list[tuple[str, str]] | None = None) -> list[str]:
    sink = warnings if warnings is not None else []
    return [m.content for m in asyncio.run(store.load(cid, on_warning=lambda code, message: sink.append((code, message))))]


def write_owned(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, mode 0600 (what a hand edit of a record leaves)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """The store's loguru records (WARNING and up) while the test runs."""
    from loguru import logger

    from monoagent._kernel.log import logger as lazy

    lazy._load()  # decide the library default first, so that the enable below is the last word
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="WARNING", format="{message}")
    logger.enable("monoagent_plugins")
    try:
        yield lines
    finally:
        logger.remove(sink)
        logger.disable("monoagent_plugins")


# ============================================================================ item 3: foreign files

FOREIGN_RECORD = {"version": 2, "conversationId": "planted", "logicalConversationId": "planted", "updatedAt": 1.0,
                  "messages": [{"role": "user", "content": "planted", "name": None, "timestamp": 1.0, "tool_calls": [],
                                "tool_call_id": None}]}


def plant_foreign(root: Path, outside: Path, prefix_of: str = "victim") -> dict[str, Any]:
    """Plant every kind of foreign entry; returns {relative path: how to recognise it later}.

    Each regular file holds a valid record of the conversation ``planted``, so a store that read
    one would list it, count it or load it. ``prefix_of`` names a conversation whose logical
    prefix the look-alikes share, so a logical reset of it meets them too.
    """
    real = record_name(prefix_of)
    l16, p64 = real[:16], real[17:-5]
    body = json.dumps(FOREIGN_RECORD).encode()
    outside.write_bytes(body)
    planted: dict[str, Any] = {}

    def regular(name: str) -> None:
        write_owned(root / name, body)
        planted[name] = body

    for name in [
        "package.json", "notes.json", ".hidden.json", "x.json",
        f"{l16.upper()}.{p64}.json",                 # upper-case hex
        f"{l16}.{p64.upper()}.json",
        f"{l16[:15]}.{p64}.json",                    # a digit short
        f"{l16}0.{p64}.json",                        # a digit long
        f"{l16}.{p64[:63]}.json",
        f"{l16}.{p64}0.json",
        f"{l16}.{p64}.JSON",
        f"{l16}.{p64}.json.bak",
        f"{l16}.{p64}.json~",
        f" {l16}.{p64}.json",
        f"{l16}_{p64}.json",
        f"{l16}.{'g' * 64}.json",                    # not hex
        f"{l16}.{p64[:62]}\u0660\u0661.json",        # Arabic-Indic digits
        f"{RESET_PREFIX}{l16.upper()}", f"{RESET_PREFIX}{l16}0", f"{RESET_PREFIX}notes", f"{RESET_PREFIX}{l16[:15]}",
    ]:
        regular(name)
    # shaped exactly like records of the prefix, but not regular files of this user
    link = f"{l16}.{hashlib.sha256(b'link').hexdigest()}.json"
    os.symlink(outside, root / link)
    planted[link] = "symlink"
    directory = f"{l16}.{hashlib.sha256(b'dir').hexdigest()}.json"
    (root / directory).mkdir()
    (root / directory / "inside").write_bytes(body)
    planted[directory] = "directory"
    fifo = f"{l16}.{hashlib.sha256(b'fifo').hexdigest()}.json"
    os.mkfifo(root / fifo, 0o600)
    planted[fifo] = "fifo"
    if os.geteuid() == 0:  # a record and a stage of exactly the right shape, but another user's
        for foreign in (f"{l16}.{hashlib.sha256(b'foreign owner').hexdigest()}.json", f".stages/{p64}.{'4' * 12}.stage"):
            regular(foreign)
            os.chown(root / foreign, 65534, 65534)
    # the stage directory: look-alikes of stages and non-regular entries shaped like stages
    for name in ["notes.stage", f"{p64}.stage", f"{p64}.{'A' * 12}.stage", f"{p64}.{'0' * 11}.stage", f"{p64.upper()}.{'0' * 12}.stage"]:
        regular(f".stages/{name}")
    stage_dir = f".stages/{p64}.{'1' * 12}.stage"
    (root / stage_dir).mkdir()
    planted[stage_dir] = "directory"
    stage_fifo = f".stages/{p64}.{'2' * 12}.stage"
    os.mkfifo(root / stage_fifo, 0o600)
    planted[stage_fifo] = "fifo"
    stage_link = f".stages/{p64}.{'3' * 12}.stage"
    os.symlink(outside, root / stage_link)
    planted[stage_link] = "symlink"
    old = 1_000_000_000  # 2001: far past any retention horizon, so retention would prune them if it saw them
    for name in planted:
        os.utime(root / name, (old, old), follow_symlinks=False)
    return planted


def assert_untouched(root: Path, outside: Path, planted: dict[str, Any]) -> None:
    for name, what in planted.items():
        path = root / name
        assert os.path.lexists(path), f"{name} ({what}) was deleted"
        if isinstance(what, bytes):
            assert path.read_bytes() == what, name
        elif what == "symlink":
            assert path.is_symlink()
        elif what == "directory":
            assert path.is_dir() and not path.is_symlink()
        elif what == "fifo":
            assert path.is_fifo()
    assert outside.read_bytes() == json.dumps(FOREIGN_RECORD).encode()


def own_records(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if re.fullmatch(r"[0-9a-f]{16}\.[0-9a-f]{64}\.json", p.name) and p.is_file()
            and not p.is_symlink() and p.lstat().st_uid == os.geteuid()}


def test_foreign_files_are_never_read_counted_or_deleted(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root, max_conversations=3, retention_every=1)
    commit(store, "victim", 0)
    planted = plant_foreign(root, tmp_path / "outside.json")
    fresh = FilesHistoryStore(root, max_conversations=3, retention_every=1)
    for i in range(6):  # retention runs after every commit and prunes: it must see only real records
        commit(fresh, f"c{i}", i)
    assert own_records(root) == {record_name(c) for c in ("c3", "c4", "c5")}
    stats = asyncio.run(fresh.stats())
    assert stats.records == 3 and stats.bytes == sum((root / n).stat().st_size for n in own_records(root))
    assert stats.stages == 0 and stats.stage_bytes == 0
    assert {c.conversation_id for c in asyncio.run(fresh.conversations())} == {"c3", "c4", "c5"}
    commit(fresh, "victim", 1)  # retention prunes c3
    report = asyncio.run(fresh.reset_logical("victim"))
    assert report.conversation_ids == ("victim",) and report.records == 1 and report.messages == 2
    assert not (root / (RESET_PREFIX + record_name("victim")[:16])).exists(), "the reset journal is gone"
    assert_untouched(root, tmp_path / "outside.json", planted)
    cleared = asyncio.run(fresh.clear_all())
    assert (cleared.records, cleared.stages, cleared.stage_bytes) == (2, 0, 0)
    assert own_records(root) == set()
    assert_untouched(root, tmp_path / "outside.json", planted)
    assert load(FilesHistoryStore(root), "planted") == []


def test_a_stray_json_file_never_fails_a_committed_turn(tmp_path):
    agent = fresh_agent(tmp_path, config={"plugins": {"block": ["artifacts"]}})
    agent.run_sync("first", conversation_id="t")
    root = Path(agent.history_store.directory)
    planted = plant_foreign(root, tmp_path / "outside.json")
    agent.history_store.retention_every = 1
    agent.history_store._estimate = None
    for i in range(3):
        events: list = []
        result = agent.run_sync(f"turn {i}", conversation_id=f"t{i}", on_event=collect_events(events))
        assert [e.type for e in events if e.type in ("run_failed", "run_completed")] == ["run_completed"], result
    assert_untouched(root, tmp_path / "outside.json", planted)


def test_foreign_files_are_reported_once(tmp_path, log_lines):
    root = tmp_path / "history"
    store = FilesHistoryStore(root, retention_every=1)
    commit(store, "a", 0)
    (root / "package.json").write_text("{}")
    os.mkfifo(root / f"{record_name('b')}", 0o600)
    fresh = FilesHistoryStore(root, retention_every=1)
    for i in range(4):
        commit(fresh, "a", i)
    asyncio.run(fresh.stats())
    reports = [line for line in log_lines if "package.json" in line]
    assert len(reports) == 1, log_lines
    assert "not the store's own" in reports[0] and record_name("b") in reports[0] and "left untouched" in reports[0]


def test_foreign_entries_in_the_stage_directory_never_block_the_store(tmp_path):
    root = tmp_path / "history"
    FilesHistoryStore(root)._ensure_dir()
    stage_like = root / ".stages" / f"{'a' * 64}.{'b' * 12}.stage"
    stage_like.mkdir()
    (root / ".stages" / f"{'c' * 64}.{'d' * 12}.stage").write_bytes(b"x" * 1000)  # a real abandoned stage
    store = FilesHistoryStore(root, max_stage_bytes=64 * 1024)
    commit(store, "c", 1)
    assert load(store, "c") == ["u1", "a1"]
    assert stage_like.is_dir()
    assert not (root / ".stages" / f"{'c' * 64}.{'d' * 12}.stage").exists(), "a real abandoned stage is still reclaimed"


# ============================================================================ item 4: damaged records


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> bytes:
    """The exact bytes the store writes for one tool-using turn of conversation ``c``."""
    root = tmp_path_factory.mktemp("template") / "history"
    asyncio.run(FilesHistoryStore(root).commit("c", [
        Message("user", "hello", name="Ann", timestamp=1.0),
        Message("assistant", "", tool_calls=(ToolCall("call-1", "search", {"q": "x", "n": [1, {"d": None}]}),), timestamp=2.0),
        Message("tool", "result", name="search", tool_call_id="call-1", timestamp=3.0),
    ]))
    return (root / record_name("c")).read_bytes()


def test_whitespace_inside_the_message_array_is_still_read(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c", 1)
    path = root / record_name("c")
    pretty = json.dumps(json.loads(path.read_bytes()), indent=2).encode()
    compact = path.read_bytes()
    variants = [pretty, compact.replace(b'"messages":[', b'"messages":[ '), compact.replace(b'"messages":[', b'"messages":[\n\t'),
                compact.replace(b'},{', b'} , {'), compact.replace(b']}', b'] }'), compact + b"\n"]
    for data in variants:
        write_owned(path, data)
        warnings: list = []
        assert load(FilesHistoryStore(root), "c", warnings) == ["u1", "a1"] and warnings == []
        again = FilesHistoryStore(root)
        commit(again, "c", 2)
        assert load(FilesHistoryStore(root), "c") == ["u1", "a1", "u2", "a2"]


def test_a_hand_edited_record_never_fails_a_turn(tmp_path):
    agent = fresh_agent(tmp_path, config={"plugins": {"block": ["artifacts"]}})
    agent.run_sync("first", conversation_id="t")
    path = Path(agent.history_store.directory) / record_name("t")
    for damage in (json.dumps(json.loads(path.read_bytes()), indent=1).encode(), b"[" * 100_000 + b"]" * 100_000):
        write_owned(path, damage)
        events: list = []
        agent.run_sync("again", conversation_id="t", on_event=collect_events(events))
        assert "run_failed" not in [e.type for e in events]
        assert path.read_bytes() != damage


def test_deep_nesting_is_a_cold_start_not_a_recursion_error(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c", 1)
    template = (root / record_name("c")).read_text()
    for depth in (300, 5_000, 100_000):
        for data in ("[" * depth + "]" * depth,
                     template.replace('"content":"u1"', '"content":' + "[" * depth + "]" * depth),
                     template.replace('"tool_calls":[]', '"tool_calls":[{"id":"i","name":"t","arguments":' + '{"k":' * depth
                                      + "1" + "}" * depth + "}]", 1)):
            write_owned(root / record_name("c"), data.encode())
            warnings: list = []
            assert load(FilesHistoryStore(root), "c", warnings) == []
            assert [code for code, _ in warnings] == [UNREADABLE], depth
            assert "nest" in warnings[0][1]


def test_a_deep_reset_completes_and_leaves_no_journal(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    for cid in ("s", "s:2025-01-01", "s:2025-01-02", "other"):
        commit(store, cid, 1)
    write_owned(root / record_name("s:2025-01-01"), b"[" * 100_000 + b"]" * 100_000)
    write_owned(root / record_name("s"), json.dumps({"version": 2, "conversationId": "else"}).encode())
    report = asyncio.run(FilesHistoryStore(root).reset_logical("s"))
    assert report.records == 3 and report.conversation_ids == ("s:2025-01-02",)
    assert sorted(os.listdir(root)) == sorted([".locks", ".stages", record_name("other")])
    assert load(FilesHistoryStore(root), "other") == ["u1", "a1"]


def test_a_journal_of_any_bytes_is_completed_and_removed(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    for cid in ("s:2025-01-01", "t"):
        commit(store, cid, 1)
    journal = root / (RESET_PREFIX + record_name("s")[:16])
    for data in (b"[" * 100_000, b"\xff\xfe", b'{"logicalConversationId": 5}', b"null", b'{"a":1,"a":2}'):
        write_owned(journal, data)
        other = FilesHistoryStore(root)
        assert load(other, "s:2025-01-01") == []
        commit(other, "s:2025-01-02", 2)
        assert not journal.exists()
        assert load(FilesHistoryStore(root), "s:2025-01-02") == ["u2", "a2"] and load(other, "t") == ["u1", "a1"]


# ------------------------------------------------------------------ generated damage (hypothesis)

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, prefix + (index,))
    return found


def _replace(value: Any, path: tuple, new: Any, delete: bool) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    if len(path) == 1 and delete:
        del copy[path[0]]
    else:
        copy[path[0]] = _replace(copy[path[0]], path[1:], new, delete)
    return copy


@st.composite
def damaged(draw: Any, template: bytes) -> bytes:
    """Bytes a damaged or hand-made record could hold, derived from a valid ``template``."""
    kind = draw(st.sampled_from(["truncate", "any-bytes", "any-json", "mutate", "nest", "number", "constant",
                                 "bad-utf8", "bom", "duplicate", "splice"]))
    text = template.decode()
    if kind == "truncate":
        return template[: draw(st.integers(0, len(template) - 1))]
    if kind == "any-bytes":
        return draw(st.binary(max_size=200))
    if kind == "any-json":
        return json.dumps(draw(JSON_VALUES)).encode()
    if kind == "mutate":  # a wrong type (or a missing key) at any level
        raw = json.loads(template)
        path = draw(st.sampled_from(_paths(raw)[1:]))
        delete = draw(st.booleans()) and isinstance(path[-1], str)
        return json.dumps(_replace(raw, path, draw(JSON_VALUES), delete)).encode()
    cut = draw(st.integers(0, len(text)))
    if kind == "nest":
        depth = draw(st.sampled_from([260, 1_000, 50_000]))
        value = "[" * depth + "]" * depth
        return template.replace(b'"content":"hello"', b'"content":' + value.encode()) if draw(st.booleans()) else value.encode()
    if kind == "number":
        number = draw(st.sampled_from(["1e999", "-1e999", "1" * 5000, "9" * 400, "1e308", "-0", "123456789" * 40 + ".5"]))
        field = draw(st.sampled_from(["updatedAt", "timestamp", "version"]))
        return re.sub(rf'"{field}":[^,}}]+', f'"{field}":{number}', text, count=1).encode()
    if kind == "constant":
        field = draw(st.sampled_from(["updatedAt", "timestamp"]))
        return re.sub(rf'"{field}":[^,}}]+', f'"{field}":{draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))}', text).encode()
    if kind == "bad-utf8":
        return template[:cut] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf"])) + template[cut:]
    if kind == "bom":
        return draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"])) + template
    if kind == "duplicate":
        key = draw(st.sampled_from(["version", "conversationId", "messages", "role", "content", "updatedAt", "arguments"]))
        return re.sub(rf'"{key}":', f'"{key}":null,"{key}":', text, count=1).encode()
    # splice: a valid prefix, junk, a valid suffix
    return template[:cut] + draw(st.binary(max_size=20)) + template[cut:]


def check_any_record(root: Path, data: bytes) -> None:
    """The outcome every record bytes must have: readable, a cold start, or one of the two refusals."""
    path = root / record_name("c")
    write_owned(path, data)
    warnings: list[tuple[str, str]] = []
    try:
        loaded = load(FilesHistoryStore(root), "c", warnings)
    except HistoryRecordError as exc:
        assert "newer" in str(exc), exc
        version = json.loads(data)["version"]
        assert type(version) is int and version > 2
    else:
        if warnings:
            assert loaded == [] and [code for code, _ in warnings] == [UNREADABLE]
            assert "\n" not in warnings[0][1] and "starts cold" in warnings[0][1]
            commit(FilesHistoryStore(root), "c", 7)
            assert load(FilesHistoryStore(root), "c") == ["u7", "a7"]
        else:  # still a record: a turn appends to it
            commit(FilesHistoryStore(root), "c", 7)
            assert load(FilesHistoryStore(root), "c") == loaded + ["u7", "a7"]
    listed = asyncio.run(FilesHistoryStore(root).conversations())
    assert all(isinstance(c.conversation_id, str) for c in listed)
    write_owned(path, data)
    report = asyncio.run(FilesHistoryStore(root).reset_logical("c"))
    assert report.records == 1
    assert sorted(os.listdir(root)) == [".locks", ".stages"], "the reset removed the record and its journal"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_property_any_damaged_record_starts_cold_and_resets(template, data):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "history"
        FilesHistoryStore(root)._ensure_dir()
        check_any_record(root, data.draw(damaged(template)))


@pytest.mark.parametrize("data", [
    b"", b"{}", b"null", b"[]", b'"text"', b"\xef\xbb\xbf{}", b'{"version": true, "conversationId": "c", "updatedAt": 1, "messages": []}',
    b'{"version": 2.0, "conversationId": "c", "updatedAt": 1, "messages": []}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1e400, "messages": []}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1e300, "messages": []}',
    b'{"version": 2, "conversationId": "c", "updatedAt": NaN, "messages": []}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [{"role": "user", "content": 12345}]}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [{"role": "user", "content": ["a"]}]}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [{"role": "user", "content": "x", "timestamp": "1"}]}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [{"role": "user", "content": "x", "timestamp": true}]}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [{"role": "user", "content": "x", "name": 5}]}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [{"role": "user", "content": "x", "tool_calls": "ab"}]}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": [], "messages": []}',
    b'{"version": 2, "conversationId": "c", "updatedAt": 1, "messages": "nope"}',
    b'{"version": 2, "conversationId": "other", "updatedAt": 1, "messages": []}',
    b'{"version": 2, "conversationId": 7, "updatedAt": 1, "messages": []}',
    b'{"version": 0, "conversationId": "c", "updatedAt": 1, "messages": []}',
    b'{"version": "2", "conversationId": "c", "updatedAt": 1, "messages": []}',
])
def test_examples_of_unreadable_records_start_cold(tmp_path, data):
    root = tmp_path / "history"
    FilesHistoryStore(root)._ensure_dir()
    write_owned(root / record_name("c"), data)
    warnings: list = []
    assert load(FilesHistoryStore(root), "c", warnings) == []
    assert [code for code, _ in warnings] == [UNREADABLE], data
    check_any_record(root, data)


def test_unknown_keys_are_ignored_so_a_downgrade_never_starts_cold(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c", 1)
    path = root / record_name("c")
    raw = json.loads(path.read_bytes())
    raw["addedLater"] = {"x": [1]}
    raw["messages"][0]["optionalField"] = "from a newer version"
    write_owned(path, json.dumps(raw).encode())
    warnings: list = []
    assert load(FilesHistoryStore(root), "c", warnings) == ["u1", "a1"] and warnings == []
    commit(FilesHistoryStore(root), "c", 2)
    assert load(FilesHistoryStore(root), "c") == ["u1", "a1", "u2", "a2"]


def test_a_record_of_a_newer_version_is_refused_not_replaced_and_reset_clears_it(tmp_path):
    root = tmp_path / "history"
    FilesHistoryStore(root)._ensure_dir()
    newer = json.dumps({"version": 3, "conversationId": "c", "future": True}).encode()
    write_owned(root / record_name("c"), newer)
    for attempt in (lambda: load(FilesHistoryStore(root), "c"), lambda: commit(FilesHistoryStore(root), "c", 1)):
        with pytest.raises(HistoryRecordError, match=r"written by a newer version .*version 3.*reads versions 1-2"):
            attempt()
    assert (root / record_name("c")).read_bytes() == newer
    assert asyncio.run(FilesHistoryStore(root).reset_logical("c")).records == 1
    assert load(FilesHistoryStore(root), "c") == []


TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\ a:,\n\u00e9\U0001f600'), max_size=12)
NESTED_JSON = st.recursive(st.none() | st.integers() | TRICKY_TEXT,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner, max_size=3), max_leaves=30)


def structural_depths(text: str) -> list[int]:
    """The nesting depth after each character, by a plain character-by-character JSON scanner."""
    depth, in_string, escaped, found = 0, False, False, []
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        found.append(depth)
    return found


@settings(max_examples=150, deadline=None)
@given(value=NESTED_JSON, limit=st.integers(0, 8), ascii_only=st.booleans(), indent=st.none() | st.integers(0, 2))
def test_property_the_nesting_bound_is_the_depth_a_parser_reaches(value, limit, ascii_only, indent):
    """Exact on whole documents; on every truncation, the depth reached so far (where a parser stops)."""
    from monoagent._boundary.strict_json import nesting_over

    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    depths = structural_depths(text)
    deepest = max(depths, default=0)
    assert nesting_over(text, limit) == (deepest if deepest > limit else 0)
    for cut in range(1, len(text)):
        assert nesting_over(text[:cut], 0) == max(depths[:cut])


@pytest.mark.parametrize("text, depth", [
    ('["]", [[]]]', 3), ('["[[[[", 1]', 1), ('{"a": "\\"[[", "b": [[]]}', 3), ('["\\\\", [[1]]]', 3), ('[[], [], [[[]]]]', 4),
    ('["\\u0022[[[", {}]', 2), ('[" \\\\\\" ]]] [[[ "]', 1),
])
def test_the_nesting_bound_never_mistakes_strings_for_structure(text, depth):
    from monoagent._boundary.strict_json import nesting_over

    assert [nesting_over(text, limit) for limit in range(depth + 1)] == [depth] * depth + [0]


# ------------------------------------------------------------------ the CLI


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    env.update(MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    return subprocess.run([sys.executable, "-m", "monoagent", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_history_commands_report_damaged_records_in_one_line_each(tmp_path):
    root = tmp_path / "home" / "history"
    store = FilesHistoryStore(root)
    for cid in ("good", "pretty", "deep", "newer", "trunc"):
        commit(store, cid, 1)
    pretty = json.dumps(json.loads((root / record_name("pretty")).read_bytes()), indent=1).encode()
    write_owned(root / record_name("pretty"), pretty)
    write_owned(root / record_name("deep"), b"[" * 100_000 + b"]" * 100_000)
    write_owned(root / record_name("newer"), json.dumps({"version": 9, "conversationId": "newer"}).encode())
    write_owned(root / record_name("trunc"), (root / record_name("good")).read_bytes()[:30])
    (root / "package.json").write_text("{}")

    listed = cli(tmp_path, "history", "list")
    assert listed.returncode == 0, listed.stderr
    assert '"good"' in listed.stdout and '"pretty"' in listed.stdout and "message history total: 2 file(s)" in listed.stdout
    problems = [line for line in listed.stderr.splitlines() if line.strip()]
    assert len(problems) == 4 and "Traceback" not in listed.stderr, listed.stderr
    assert sum("unreadable" in line for line in problems) == 2 and sum("newer" in line for line in problems) == 1
    assert sum("package.json" in line for line in problems) == 1

    shown = cli(tmp_path, "history", "show", "pretty")
    assert shown.returncode == 0 and "=== pretty (2 messages) ===" in shown.stdout, shown.stderr
    for cid, expected in (("deep", "unreadable"), ("trunc", "unreadable"), ("newer", "newer")):
        shown = cli(tmp_path, "history", "show", cid)
        lines = [line for line in shown.stderr.splitlines() if line.strip()]
        assert shown.returncode == 1 and len(lines) == 1 and expected in lines[0] and "Traceback" not in shown.stderr, shown.stderr

    reset = cli(tmp_path, "history", "reset", "deep")
    assert reset.returncode == 0 and "message history removed: 1 file(s)" in reset.stdout, reset.stdout + reset.stderr
    assert not any(name.startswith(RESET_PREFIX) for name in os.listdir(root))
    cleared = cli(tmp_path, "history", "clear", "--all", "--yes")
    assert cleared.returncode == 0 and "message history removed: 4 file(s)" in cleared.stdout, cleared.stdout + cleared.stderr
    assert set(os.listdir(root)) - {"tool-history"} == {".locks", ".stages", "package.json"}


# ============================================================================ item 6: bounded reads


READ_UNDER_A_MEMORY_LIMIT = textwrap.dedent(
    r"""
    import asyncio, json, resource, sys
    from monoagent_plugins.history.files import FilesHistoryStore
    root, what = sys.argv[1], sys.argv[2]
    store = FilesHistoryStore(root)
    store._ensure_dir()
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + 512 * 1024 * 1024, resource.RLIM_INFINITY))
    warnings = []
    out = {}
    try:
        if what == "load":
            out["messages"] = len(store._load("c", lambda code, message: warnings.append([code, message])))
        elif what == "commit":
            store._commit("c:2025-01-01", [])
            out["messages"] = len(store._load("c:2025-01-01", None))
        elif what == "list":
            out["listed"] = len(store._list())
        elif what == "reset":
            out["records"] = store._reset_logical("c").records
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["warnings"] = warnings
    print(json.dumps(out))
    """
)


def run_capped(root: Path, what: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", READ_UNDER_A_MEMORY_LIMIT, str(root), what], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_huge_record_is_never_read_whole(tmp_path):
    root = tmp_path / "history"
    FilesHistoryStore(root)._ensure_dir()
    path = root / record_name("c")
    write_owned(path, b"")
    os.truncate(path, 2 * 1024**3)  # sparse: 2 GiB that costs no disk
    loaded = run_capped(root, "load")
    assert loaded["messages"] == 0, loaded
    assert [code for code, _ in loaded["warnings"]] == [UNREADABLE]
    assert re.search(r"2,147,483,648 bytes, over the [\d,]+-byte cap", loaded["warnings"][0][1]), loaded
    assert run_capped(root, "list") == {"listed": 0, "warnings": []}
    assert run_capped(root, "reset") == {"records": 1, "warnings": []}
    assert not path.exists()


def test_a_huge_reset_journal_is_never_read_whole(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c:2025-01-01", 1)
    journal = root / (RESET_PREFIX + record_name("c")[:16])
    write_owned(journal, b"")
    os.truncate(journal, 2 * 1024**3)
    assert run_capped(root, "commit") == {"messages": 0, "warnings": []}
    assert not journal.exists()


def test_the_cap_never_refuses_what_the_store_writes(tmp_path):
    """A full window of messages at the per-message cap, under a long id, reads back whole."""
    root = tmp_path / "history"
    cid = "\x00" * 100_000 + "é" * 10_000  # JSON escaping makes the envelope ~1.2 MB, over the generic framing
    store = FilesHistoryStore(root, 8, max_message_bytes=64 * 1024)
    for _ in range(8):
        asyncio.run(store.commit(cid, [Message("user", "\x01" * 70_000, timestamp=1.0)]))
    size = (root / record_name(cid)).stat().st_size
    assert size > 8 * 60_000
    warnings: list = []
    assert len(load(FilesHistoryStore(root, 8), cid, warnings)) == 8 and warnings == []
    assert [c.message_count for c in asyncio.run(FilesHistoryStore(root, 8).conversations())] == [8]


def test_lowering_the_limits_never_makes_a_written_record_unreadable(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    asyncio.run(store.commit("c", [Message("user", "y" * 65_000, timestamp=1.0) for _ in range(64)]))
    assert (root / record_name("c")).stat().st_size > 64 * 65_000
    warnings: list = []
    assert len(load(FilesHistoryStore(root, 2, max_message_bytes=1024), "c", warnings)) == 64 and warnings == []


def test_a_record_that_grew_under_larger_limits_is_trimmed_to_fit_not_lost(tmp_path):
    root = tmp_path / "history"
    big = FilesHistoryStore(root, 64, max_message_bytes=2 * 1024 * 1024)
    asyncio.run(big.commit("c", [Message("user", "r" * 1_040_000, timestamp=1.0) for _ in range(5)]))
    small = FilesHistoryStore(root)
    warnings: list = []
    assert len(load(small, "c", warnings)) == 5 and warnings == []
    asyncio.run(small.commit("c", [Message("user", "s" * 70_000, timestamp=1.0)]))
    after = load(FilesHistoryStore(root), "c", warnings)
    assert warnings == [] and after[-1].startswith("sss") and len(after) == 5, "the oldest message made room"


def test_deep_tool_arguments_are_refused_at_commit_not_written_unreadable(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c", 1)

    def nested(depth: int) -> dict:
        value: dict = {}
        for _ in range(depth):
            value = {"k": value}
        return value

    asyncio.run(store.commit("c", [Message("assistant", "", tool_calls=(ToolCall("i", "t", nested(120)),), timestamp=1.0)]))
    assert len(load(FilesHistoryStore(root), "c")) == 3
    for depth in (130, 300, 5_000):
        with pytest.raises(HistoryWriteError, match=r"nests deeper than the \d+ levels a history record allows"):
            asyncio.run(store.commit("c", [Message("assistant", "", tool_calls=(ToolCall("i", "t", nested(depth)),))]))
    assert len(load(FilesHistoryStore(root), "c")) == 3


def test_a_fifo_or_directory_named_like_a_record_never_hangs_list_reset_or_clear(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c:2025-01-01", 1)
    os.mkfifo(root / record_name("c"), 0o600)
    (root / record_name("c:2025-01-02")).mkdir()
    script = textwrap.dedent(
        """
        import asyncio, json, sys
        from monoagent_plugins.history.files import FilesHistoryStore
        store = FilesHistoryStore(sys.argv[1])
        out = [len(asyncio.run(store.conversations())), asyncio.run(store.reset_logical("c")).records,
               asyncio.run(store.clear_all()).records]
        print(json.dumps(out))
        """
    )
    # a watchdog, not synchronisation: a store that opened the FIFO for reading would block forever
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [1, 1, 0]
    assert (root / record_name("c")).is_fifo() and (root / record_name("c:2025-01-02")).is_dir()
