"""The bundled ``files`` history store: layout, modes, safety, retention, stages, resets, truncation."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monoagent._boundary.text import utf8_len
from monoagent._kernel.components import HISTORY_STORES
from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message, ToolCall
from monoagent._kernel.stores import (
    DurableHistoryStore,
    LogicalLookupStore,
    ManagedHistoryStore,
    ProviderSessionStore,
    logical_conversation_id,
)
from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import collect_events, fresh_agent
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.records import (
    HistoryRecordError,
    HistoryStageQuotaError,
    cap_message,
    record_name,
    serialise_message,
    truncation_marker,
)

DAY = 86400.0


def turn(i: int, size: int = 0) -> list[Message]:
    return [Message("user", f"u{i}" + "x" * size), Message("assistant", f"a{i}")]


def commit(store: FilesHistoryStore, cid: str, i: int, size: int = 0):
    return asyncio.run(store.commit(cid, turn(i, size)))


def load(store: FilesHistoryStore, cid: str, **kwargs) -> list[str]:
    return [m.content for m in asyncio.run(store.load(cid, **kwargs))]


def records(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(".json"))


class Clock:
    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> FilesHistoryStore:
    return FilesHistoryStore(tmp_path / "history")


# ---------------------------------------------------------------------------- layout and modes


def test_the_store_implements_every_history_store_sub_protocol(store):
    assert store.name == "files" and store.durable is True
    assert HISTORY_STORES.implemented(store) == {ManagedHistoryStore, LogicalLookupStore, ProviderSessionStore, DurableHistoryStore}
    assert HISTORY_STORES.problems(store) == []


@pytest.mark.parametrize("umask", [0o000, 0o077, 0o022])
def test_directories_0700_and_files_0600_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = FilesHistoryStore(tmp_path / "history")
        commit(store, "conv", 1)
        asyncio.run(store.reset_logical("other"))
    finally:
        os.umask(old)
    root = tmp_path / "history"
    for directory in (root, root / ".stages", root / ".locks"):
        assert stat.S_IMODE(directory.lstat().st_mode) == 0o700, directory
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files and all(stat.S_IMODE(p.lstat().st_mode) == 0o600 for p in files), [
        (p.name, oct(p.lstat().st_mode)) for p in files
    ]
    assert {p.name for p in (root / ".locks").iterdir()} <= {f"shard-{i:02d}.lock" for i in range(16)} | {"retention.lock"}


def test_file_names_are_sha256_derived_and_the_id_lives_inside(store, tmp_path):
    commit(store, "conv", 1)
    name = record_name("conv")
    digest = hashlib.sha256(b"conv").hexdigest()
    assert name == f"{digest[:16]}.{digest}.json"
    bucket = record_name("conv:2025-01-02")
    assert bucket.startswith(digest[:16] + ".") and bucket.endswith(hashlib.sha256(b"conv:2025-01-02").hexdigest() + ".json")
    data = json.loads((tmp_path / "history" / name).read_text())
    assert data["conversationId"] == "conv" and data["logicalConversationId"] == "conv" and data["version"] == 2
    assert [m["content"] for m in data["messages"]] == ["u1", "a1"]


@pytest.mark.parametrize("cid", ["../../etc/passwd", "/abs/path", "nul\x00byte", "ünïcødé 🎉", "x" * 10_000, ".", "", "\ud800lone"])
def test_hostile_conversation_ids_stay_inside_the_directory(store, tmp_path, cid):
    commit(store, cid, 1)
    files = records(tmp_path / "history")
    assert len(files) == 1 and files[0].parent == tmp_path / "history"
    assert load(FilesHistoryStore(tmp_path / "history"), cid) == ["u1", "a1"]
    assert sorted(os.listdir(tmp_path)) == ["history"]
    everything = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")]
    assert all(cid not in part for part in everything if cid not in ("", ".", "x" * 10_000)), everything


def test_non_string_ids_and_messages_are_clear_errors(store):
    with pytest.raises(TypeError, match="conversation ids are strings"):
        asyncio.run(store.load(42))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Message values, not dict"):
        asyncio.run(store.commit("c", [{"role": "user", "content": "x"}]))  # type: ignore[list-item]


# ---------------------------------------------------------------------------- safety: symlinks, owners, modes


def test_symlinked_directory_and_record_are_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "history").symlink_to(real)
    with pytest.raises(HistoryRecordError, match="symlink"):
        commit(FilesHistoryStore(tmp_path / "history"), "c", 1)
    store = FilesHistoryStore(tmp_path / "h2")
    commit(store, "other", 1)
    target = tmp_path / "outside.json"
    target.write_text("{}")
    (tmp_path / "h2" / record_name("c")).symlink_to(target)
    with pytest.raises(HistoryRecordError, match="cannot be opened safely: it is a symlink"):
        load(FilesHistoryStore(tmp_path / "h2"), "c")
    with pytest.raises(HistoryRecordError, match="symlink"):
        commit(FilesHistoryStore(tmp_path / "h2"), "c", 2)
    assert target.read_text() == "{}"


@pytest.mark.parametrize("inner", [".stages", ".locks"])
def test_symlinked_inner_directories_are_refused(tmp_path, inner):
    root = tmp_path / "history"
    root.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / inner).symlink_to(elsewhere)
    with pytest.raises(HistoryRecordError, match=f"{inner} is a symlink"):
        commit(FilesHistoryStore(root), "c", 1)


@pytest.mark.parametrize("inner", [".stages", ".locks"])
def test_an_inner_directory_swapped_for_a_symlink_while_the_store_is_open_is_refused(tmp_path, inner):
    """The store checked its directories at first use; ``.stages`` or ``.locks`` swapped for a symlink afterwards
    is refused at the next commit, naming it and the rule; nothing is written through it, committed history stays."""
    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    commit(store, "c", 1)
    committed = load(store, "c")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / inner).rename(root / f"{inner}-moved")
    (root / inner).symlink_to(elsewhere)
    with pytest.raises(HistoryRecordError, match=f"{root / inner} is a symlink; refused: below {root}"):
        commit(store, "c", 2)
    assert list(elsewhere.iterdir()) == [] and committed and load(store, "c") == committed


def test_symlinked_lock_file_is_refused(store, tmp_path):
    commit(store, "c", 1)
    lock = tmp_path / "history" / ".locks" / "shard-00.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(tmp_path / "victim")
    shard_zero = next(f"c{i}" for i in range(1000) if int(record_name(f"c{i}")[:8], 16) % 16 == 0)
    with pytest.raises(HistoryRecordError, match=r"lock file shard-00\.lock cannot be opened safely"):
        commit(FilesHistoryStore(tmp_path / "history"), shard_zero, 1)
    assert not (tmp_path / "victim").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_foreign_owned_record_and_directory_are_refused(store, tmp_path):
    commit(store, "c", 1)
    record = tmp_path / "history" / record_name("c")
    os.chown(record, 65534, 65534)
    with pytest.raises(HistoryRecordError, match="belongs to uid 65534"):
        load(FilesHistoryStore(tmp_path / "history"), "c")
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    with pytest.raises(HistoryRecordError, match="belongs to uid 65534"):
        commit(FilesHistoryStore(foreign), "c", 1)


def test_group_readable_directory_is_refused(tmp_path):
    loose = tmp_path / "history"
    loose.mkdir()
    loose.chmod(0o755)
    with pytest.raises(HistoryRecordError, match=r"mode 0755; it must be owner-only \(0700\)"):
        commit(FilesHistoryStore(loose), "c", 1)


# ---------------------------------------------------------------------------- corruption


def test_truncated_record_starts_cold_with_a_warning_then_is_replaced(store, tmp_path):
    commit(store, "c", 1)
    path = tmp_path / "history" / record_name("c")
    path.write_bytes(path.read_bytes()[:20])
    warnings: list[tuple[str, str]] = []
    fresh = FilesHistoryStore(tmp_path / "history")
    assert load(fresh, "c", on_warning=lambda code, message: warnings.append((code, message))) == []
    assert warnings and warnings[0][0] == "history_record_unreadable" and "starts cold" in warnings[0][1]
    commit(fresh, "c", 2)
    assert load(FilesHistoryStore(tmp_path / "history"), "c") == ["u2", "a2"]


@pytest.mark.parametrize("damage", [b"", b"\xff\xfe not utf-8", b'{"version": 2, "messa'])
def test_any_unreadable_bytes_start_cold(store, tmp_path, damage):
    commit(store, "c", 1)
    (tmp_path / "history" / record_name("c")).write_bytes(damage)
    assert load(FilesHistoryStore(tmp_path / "history"), "c") == []


def test_a_newer_version_fails_closed_and_any_other_shape_starts_cold(store, tmp_path):
    commit(store, "c", 1)
    path = tmp_path / "history" / record_name("c")
    path.write_text(json.dumps({"version": 99, "messages": []}))
    for attempt in (lambda: load(FilesHistoryStore(tmp_path / "history"), "c"), lambda: commit(FilesHistoryStore(tmp_path / "history"), "c", 2)):
        with pytest.raises(HistoryRecordError, match=r"newer version of monoagent \(record version 99; this one reads versions 1-2\)"):
            attempt()
    for shape, message in [
        ([1, 2, 3], "it holds a JSON list, not a record object"),
        ({"version": 2, "conversationId": "c", "updatedAt": 0, "messages": "nope"}, "not of the record shape"),
        ({"version": 2, "conversationId": "other", "updatedAt": 0, "messages": []}, "names another conversation"),
    ]:
        path.write_text(json.dumps(shape))
        warnings: list[tuple[str, str]] = []
        assert load(FilesHistoryStore(tmp_path / "history"), "c", on_warning=lambda *w: warnings.append(w)) == []  # noqa: B023  (called in this iteration)
        assert warnings[0][0] == "history_record_unreadable" and message in warnings[0][1]
        commit(FilesHistoryStore(tmp_path / "history"), "c", 2)
        assert load(FilesHistoryStore(tmp_path / "history"), "c") == ["u2", "a2"]
    assert issubclass(HistoryRecordError, HistoryStoreError)


def test_version_1_records_of_the_walking_skeleton_still_load(store, tmp_path):
    path = tmp_path / "history" / record_name("c")
    store._ensure_dir()
    old = {"version": 1, "conversationId": "c", "updatedAt": 1.0, "messages": [{"role": "user", "content": "old", "name": None,
           "timestamp": 1.0, "tool_calls": [], "tool_call_id": None}]}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps(old).encode())
    os.close(fd)
    commit(store, "c", 1)
    assert load(FilesHistoryStore(tmp_path / "history"), "c") == ["old", "u1", "a1"]


def test_harness_emits_a_runtime_warning_for_an_unreadable_record(tmp_path):
    agent = fresh_agent(tmp_path, config={"plugins": {"block": ["artifacts"]}})
    agent.run_sync("first", conversation_id="t")
    path = Path(agent.history_store.directory) / record_name("t")
    path.write_bytes(path.read_bytes()[:-7])
    events: list = []
    agent.run_sync("second", conversation_id="t", on_event=collect_events(events))
    warnings = [e for e in events if e.type == "runtime_warning"]
    assert [w.data["code"] for w in warnings] == ["history_record_unreadable"]
    stored = asyncio.run(FilesHistoryStore(path.parent).load("t"))
    assert [m.content for m in stored][0] == "second", "the unreadable record was replaced by the next turn"


# ---------------------------------------------------------------------------- retention


def test_keeps_the_newest_64_messages(store):
    for i in range(40):
        commit(store, "c", i)
    messages = load(store, "c")
    assert len(messages) == 64 and messages[0] == "u8" and messages[-1] == "a39"


def test_retention_by_conversation_count_prunes_the_oldest_inactive(tmp_path):
    clock = Clock()
    store = FilesHistoryStore(tmp_path / "history", max_conversations=3, clock=clock)
    for i, cid in enumerate(["a", "b", "c", "d", "e"]):
        clock.now += 60
        commit(store, cid, i)
    clock.now += 60
    commit(store, "b", 9)
    commit(store, "f", 10)
    remaining = {json.loads(p.read_text())["conversationId"] for p in records(tmp_path / "history")}
    assert remaining == {"b", "e", "f"}


def test_retention_by_bytes(tmp_path):
    clock = Clock()
    store = FilesHistoryStore(tmp_path / "history", max_bytes=64 * 1024, clock=clock)
    for i in range(12):
        clock.now += 1
        commit(store, f"c{i}", i, size=10_000)
    total = sum(p.stat().st_size for p in records(tmp_path / "history"))
    assert total <= 64 * 1024
    kept = sorted(json.loads(p.read_text())["conversationId"] for p in records(tmp_path / "history"))
    assert "c11" in kept and "c0" not in kept and len(kept) == 6


def test_retention_by_age_with_an_injected_clock(tmp_path):
    clock = Clock()
    store = FilesHistoryStore(tmp_path / "history", max_inactive_days=365, clock=clock)
    commit(store, "old", 1)
    clock.now += 200 * DAY
    commit(store, "middle", 2)
    clock.now += 166 * DAY
    commit(store, "new", 3)
    assert load(FilesHistoryStore(tmp_path / "history"), "old") == []
    assert load(store, "middle") == ["u2", "a2"]
    clock.now += 365 * DAY + 1
    commit(store, "newest", 4)
    names = {json.loads(p.read_text())["conversationId"] for p in records(tmp_path / "history")}
    assert names == {"newest"}


def test_retention_never_prunes_the_conversation_just_published(tmp_path):
    store = FilesHistoryStore(tmp_path / "history", max_bytes=64 * 1024)
    commit(store, "huge", 1, size=100_000 - 2000)
    assert load(store, "huge")[1] == "a1"


def test_failed_publication_evicts_nothing(tmp_path):
    clock = Clock()
    store = FilesHistoryStore(tmp_path / "history", max_conversations=2, clock=clock)
    commit(store, "a", 1)
    commit(store, "b", 2)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    store.fs.replace = refuse  # type: ignore[method-assign]
    with pytest.raises(HistoryStoreError, match=r"could not publish the turn of conversation 'c'.*No space left.*intact"):
        commit(store, "c", 3)
    assert {json.loads(p.read_text())["conversationId"] for p in records(tmp_path / "history")} == {"a", "b"}
    assert not list((tmp_path / "history" / ".stages").iterdir())


# ---------------------------------------------------------------------------- stages


def _abandoned_stage(root: Path, size: int) -> Path:
    path = root / ".stages" / f"{'0' * 64}.deadbeef0000.stage"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"x" * size)
    os.close(fd)
    return path


def test_crash_abandoned_stages_are_reclaimed_and_live_ones_kept(store, tmp_path):
    commit(store, "c", 1)
    root = tmp_path / "history"
    dead = _abandoned_stage(root, 100)
    live = root / ".stages" / f"{'1' * 64}.cafe00000000.stage"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        fresh = FilesHistoryStore(root)
        assert load(fresh, "c") == ["u1", "a1"]
        assert not dead.exists() and live.exists()
    finally:
        os.close(fd)
    assert FilesHistoryStore(root).reclaim_stages() == (1, 0)
    assert not live.exists()


def test_live_stages_have_their_own_cap_and_never_evict_history(tmp_path):
    root = tmp_path / "history"
    store = FilesHistoryStore(root, max_stage_bytes=64 * 1024, max_conversations=1)
    commit(store, "kept", 1)
    live = root / ".stages" / f"{'2' * 64}.cafe00000000.stage"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"y" * 60_000)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(HistoryStageQuotaError, match=r"hold 60000 bytes .* history.maxStageBytes = 65536; committed history is untouched"):
            commit(store, "new", 2, size=10_000)
        assert load(FilesHistoryStore(root), "kept") == ["u1", "a1"]
        assert [p.name for p in records(root)] == [record_name("kept")]
    finally:
        os.close(fd)
    commit(store, "new", 2, size=10_000)
    assert load(store, "new")[1] == "a2" and not live.exists()


# ---------------------------------------------------------------------------- logical sessions


def test_logical_id_of_daily_buckets():
    assert logical_conversation_id("tg:42:2025-03-01") == "tg:42"
    assert logical_conversation_id("tg:42") == "tg:42"
    assert logical_conversation_id("x:2025-3-1") == "x:2025-3-1"
    assert logical_conversation_id("a\n:2025-03-01") == "a\n"


def test_a_crash_during_logical_reset_is_completed_and_hidden(store, tmp_path):
    for cid in ("s:2025-01-01", "s:2025-01-02", "t"):
        commit(store, cid, 1)
    logical16 = record_name("s")[:16]
    journal = tmp_path / "history" / f".reset.{logical16}"
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps({"logicalConversationId": "s"}).encode())
    os.close(fd)
    other = FilesHistoryStore(tmp_path / "history")
    assert load(other, "s:2025-01-01") == [] and load(store, "s:2025-01-02") == [], "a half-done reset is never visible"
    assert load(other, "t") == ["u1", "a1"]
    commit(other, "s:2025-01-02", 2)
    assert not journal.exists()
    assert load(store, "s:2025-01-01") == [] and load(store, "s:2025-01-02") == ["u2", "a2"]


def test_harness_daily_buckets_are_reset_together(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"session": {"rollover": "daily", "rolloverTimezone": "UTC"}},
                                         "plugins": {"block": ["artifacts"]}})
    result = agent.run_sync("hi", conversation_id="tg:7", delivery="push")
    assert result.conversation_id.startswith("tg:7:")
    store = agent.history_store
    asyncio.run(store.commit("tg:7:2020-01-01", turn(0)))
    asyncio.run(store.commit("tg:70", turn(0)))
    report = asyncio.run(store.reset_logical("tg:7"))
    assert sorted(report.conversation_ids) == sorted(["tg:7:2020-01-01", result.conversation_id])
    assert load(store, result.conversation_id) == [] and load(store, "tg:70") == ["u0", "a0"]
    again = agent.run_sync("after", conversation_id="tg:7", delivery="push")
    assert "history: 0 messages" in again.text


# ---------------------------------------------------------------------------- the per-message cap


def test_a_message_over_the_cap_is_cut_with_a_marker(store, tmp_path):
    big = "€" * 30_000
    asyncio.run(store.commit("c", [Message("user", big), Message("assistant", "ok")]))
    stored = asyncio.run(FilesHistoryStore(tmp_path / "history").load("c"))
    assert len(serialise_message(stored[0])) <= 64 * 1024
    assert stored[0].content.endswith(truncation_marker(90_000, 64 * 1024))
    assert big.startswith(stored[0].content[: -len(truncation_marker(90_000, 64 * 1024))])
    assert stored[1].content == "ok"


def test_oversized_other_fields_are_cut_too():
    message = Message("assistant", "x", name="n" * 5000, tool_calls=(ToolCall("id", "t", {"a": "b" * 5000}),))
    capped, data = cap_message(message, 2048)
    assert len(data) <= 2048 and capped.tool_calls == () and utf8_len(capped.name or "") <= 256


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=3000)
    | st.text(alphabet=st.sampled_from("a€😀\n\"\\\x00é"), max_size=3000),
    cap=st.integers(min_value=1024, max_value=8192),
)
def test_property_utf8_safe_truncation_at_every_cap(text, cap):
    message = Message("user", text, timestamp=1.0)
    capped, data = cap_message(message, cap)
    assert len(data) <= cap
    assert data == serialise_message(capped)
    data.decode("utf-8")
    if capped is message:
        assert len(serialise_message(message)) <= cap
        return
    marker = truncation_marker(utf8_len(text), cap)
    assert capped.content.endswith(marker)
    head = capped.content[: -len(marker)]
    assert text.startswith(head), "a prefix of whole code points"
    one_more = Message("user", text[: len(head) + 1] + marker, timestamp=1.0)
    assert len(serialise_message(one_more)) > cap, "the longest prefix that fits"


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=2000), cap=st.integers(min_value=1024, max_value=4096))
def test_property_lone_surrogates_never_break_the_record(text, cap):
    capped, data = cap_message(Message("user", text, timestamp=1.0), cap)
    assert len(data) <= cap
    assert json.loads(data.decode("utf-8", "surrogatepass"))["content"] == capped.content


# ---------------------------------------------------------------------------- listing, stats, clear


def test_reset_listing_stats_clear(store):
    commit(store, "a", 1)
    commit(store, "b", 2)
    listed = asyncio.run(store.conversations())
    assert sorted(c.conversation_id for c in listed) == ["a", "b"]
    assert asyncio.run(store.reset("a")) == 2
    assert load(store, "a") == [] and len(load(store, "b")) == 2
    stats = asyncio.run(store.stats())
    assert stats.records == 1 and stats.bytes > 0 and stats.stages == 0
    cleared = asyncio.run(store.clear_all())
    assert (cleared.records, cleared.bytes) == (1, stats.bytes)


def test_a_second_store_sees_commits_of_the_first(store, tmp_path):
    other = FilesHistoryStore(tmp_path / "history")
    commit(store, "c", 1)
    assert len(load(other, "c")) == 2
    commit(other, "c", 2)
    assert load(store, "c") == ["u1", "a1", "u2", "a2"]


def test_config_keys_reach_the_store(tmp_path):
    agent = fresh_agent(tmp_path, config={"history": {"maxMessages": 10, "maxMessageBytes": 2048, "maxBytes": 1 << 20,
                                                       "maxConversations": 5, "maxInactiveDays": 30, "maxStageBytes": 1 << 20}})
    store = agent.history_store
    assert (store.max_messages, store.max_message_bytes, store.max_bytes, store.max_conversations, store.max_inactive_days,
            store.max_stage_bytes) == (10, 2048, 1 << 20, 5, 30, 1 << 20)
    with pytest.raises(Exception, match=r"history\.maxMessageBytes"):
        fresh_agent(tmp_path, config={"history": {"maxMessageBytes": 10}})


def test_turn_request_rollover_console_is_exempt(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"session": {"rollover": "daily"}}, "plugins": {"block": ["artifacts"]}})
    result = asyncio.run(agent.respond(TurnRequest("hi", conversation_id="web:1", delivery="console")))
    assert result.conversation_id == "web:1"


def test_a_fifo_in_place_of_a_record_or_stage_is_refused_not_waited_on(store, tmp_path):
    import subprocess
    import sys

    commit(store, "c", 1)
    directory = tmp_path / "history"
    os.mkfifo(directory / record_name("d"), 0o600)
    os.mkfifo(directory / ".stages" / f"{record_name('e')[17:-5]}.abcdef.stage", 0o600)
    script = (
        "import asyncio, sys\n"
        "from monoagent_plugins.history.files import FilesHistoryStore\n"
        "try:\n"
        "    asyncio.run(FilesHistoryStore(sys.argv[1]).load('d'))\n"
        "except Exception as exc:\n"
        "    print(exc)\n"
    )
    # a watchdog, not synchronisation: before the fix the open of the FIFO blocks forever
    done = subprocess.run([sys.executable, "-c", script, str(directory)], capture_output=True, text=True, timeout=60)
    assert "is not a regular file; refusing it" in done.stdout, done.stderr


def test_a_failed_rename_closes_the_stage_descriptor_exactly_once(tmp_path):
    from monoagent_plugins.history.directory import FsOps
    from monoagent_plugins.history.records import HistoryWriteError

    class FailingRename(FsOps):
        def __init__(self) -> None:
            self.closed: list[int] = []

        def replace(self, src, dst):
            raise OSError(5, "Input/output error (injected)")

        def close(self, fd):
            self.closed.append(fd)
            super().close(fd)

    store = FilesHistoryStore(tmp_path / "history")
    commit(store, "c", 1)
    store.fs = fs = FailingRename()
    with pytest.raises(HistoryWriteError, match="previously committed history is intact"):
        commit(store, "c", 2)
    assert len(fs.closed) == len(set(fs.closed)) == 1, "a second close could close a descriptor another thread reopened"
    assert load(FilesHistoryStore(tmp_path / "history"), "c") == ["u1", "a1"]
    assert list((tmp_path / "history" / ".stages").iterdir()) == []


def test_an_unreadable_shape_warning_names_the_field_that_is_wrong(store, tmp_path):
    commit(store, "c", 1)
    path = tmp_path / "history" / record_name("c")
    for shape, expected in [
        ({"version": 2, "conversationId": "c", "updatedAt": 0, "messages": [{"role": "wizard", "content": "x"}]},
         r"wizard.* @ messages\[0\]\.role"),
        ({"version": 2, "updatedAt": 0, "messages": []}, "required field missing @ conversationId"),
    ]:
        path.write_text(json.dumps(shape))
        warnings: list[tuple[str, str]] = []
        assert load(FilesHistoryStore(tmp_path / "history"), "c", on_warning=lambda *w: warnings.append(w)) == []  # noqa: B023  (called in this iteration)
        assert re.search(expected, warnings[0][1]), warnings


def test_a_symlinked_reset_journal_is_refused_by_load_commit_and_reset(store, tmp_path):
    from monoagent_plugins.history.records import RESET_PREFIX

    commit(store, "c", 1)
    journal = tmp_path / "history" / (RESET_PREFIX + record_name("c")[:16])
    journal.symlink_to(tmp_path / "victim")
    fresh = FilesHistoryStore(tmp_path / "history")
    for attempt in (lambda: load(fresh, "c"), lambda: commit(fresh, "c", 2), lambda: asyncio.run(fresh.reset_logical("c"))):
        with pytest.raises(HistoryRecordError, match=r"reset journal \.reset\.[0-9a-f]{16} .*symlink"):
            attempt()
    assert not (tmp_path / "victim").exists()
    journal.unlink()
    assert load(FilesHistoryStore(tmp_path / "history"), "c") == ["u1", "a1"]
