"""The bundled ``files`` history store (the walking-skeleton guarantees; issue 3 completes it)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat

import pytest

from monoagent.model import Message
from monoagent_plugins.files_history import FilesHistoryStore, HistoryRecordError


def commit(store, cid, *texts):
    return asyncio.run(store.commit(cid, [Message("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]))


def load(store, cid):
    return asyncio.run(store.load(cid))


@pytest.fixture
def store(tmp_path):
    return FilesHistoryStore(tmp_path / "history", max_messages=64)


def test_modes_and_sha256_names(store, tmp_path):
    old = os.umask(0)
    try:
        commit(store, "conv", "hi", "hello")
    finally:
        os.umask(old)
    directory = tmp_path / "history"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    name = hashlib.sha256(b"conv").hexdigest() + ".json"
    record = directory / name
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    data = json.loads(record.read_text())
    assert data["conversationId"] == "conv" and [m["content"] for m in data["messages"]] == ["hi", "hello"]
    assert not [p for p in directory.iterdir() if p.suffix == ".tmp"]


def test_keeps_the_newest_64_messages(store):
    for i in range(40):
        commit(store, "c", f"u{i}", f"a{i}")
    messages = load(store, "c")
    assert len(messages) == 64
    assert messages[0].content == "u8" and messages[-1].content == "a39"


@pytest.mark.parametrize("cid", ["../../etc/passwd", "/abs/path", "nul\x00byte", "ünïcødé 🎉", "x" * 10_000, ".", ""])
def test_hostile_conversation_ids_stay_inside_the_directory(store, tmp_path, cid):
    commit(store, cid, "q", "a")
    files = [p for p in (tmp_path / "history").iterdir() if p.suffix == ".json"]
    assert len(files) == 1 and files[0].parent == tmp_path / "history"
    assert [m.content for m in load(store, cid)] == ["q", "a"]
    assert sorted(os.listdir(tmp_path)) == ["history"]


def test_truncated_record_starts_cold_then_is_replaced(store, tmp_path):
    commit(store, "c", "one", "two")
    path = tmp_path / "history" / (hashlib.sha256(b"c").hexdigest() + ".json")
    path.write_bytes(path.read_bytes()[:20])
    fresh = FilesHistoryStore(tmp_path / "history")
    assert load(fresh, "c") == ()
    commit(fresh, "c", "three", "four")
    assert [m.content for m in load(FilesHistoryStore(tmp_path / "history"), "c")] == ["three", "four"]


def test_unsupported_shape_fails_closed(store, tmp_path):
    path = tmp_path / "history" / (hashlib.sha256(b"c").hexdigest() + ".json")
    commit(store, "c", "x", "y")
    path.write_text(json.dumps({"version": 99, "messages": []}))
    with pytest.raises(HistoryRecordError, match="unsupported shape"):
        load(FilesHistoryStore(tmp_path / "history"), "c")
    path.write_text(json.dumps({"version": 1, "conversationId": "other", "updatedAt": 0, "messages": []}))
    with pytest.raises(HistoryRecordError, match="another conversation"):
        load(FilesHistoryStore(tmp_path / "history"), "c")


def test_symlinked_directory_and_record_are_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "history").symlink_to(real)
    with pytest.raises(HistoryRecordError, match="symlink"):
        commit(FilesHistoryStore(tmp_path / "history"), "c", "x")
    store = FilesHistoryStore(tmp_path / "h2")
    commit(store, "other", "x")
    target = tmp_path / "outside.json"
    target.write_text("{}")
    (tmp_path / "h2" / (hashlib.sha256(b"c").hexdigest() + ".json")).symlink_to(target)
    with pytest.raises(HistoryRecordError, match="cannot be opened safely"):
        load(FilesHistoryStore(tmp_path / "h2"), "c")


def test_reset_and_listing(store):
    commit(store, "a", "1", "2")
    commit(store, "b", "3", "4")
    listed = asyncio.run(store.conversations())
    assert sorted(c.conversation_id for c in listed) == ["a", "b"]
    assert asyncio.run(store.reset("a")) == 2
    assert load(store, "a") == () and len(load(store, "b")) == 2


def test_a_second_store_sees_commits_of_the_first(store, tmp_path):
    other = FilesHistoryStore(tmp_path / "history")
    commit(store, "c", "1", "2")
    assert len(load(other, "c")) == 2
    commit(other, "c", "3", "4")
    assert [m.content for m in load(store, "c")] == ["1", "2", "3", "4"]
