"""The web console's store (threads, messages, submission receipts, sessions, ownership) and its tool lines, in-process."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from monoagent import Notification, ProcessIdentity
from monoagent_plugins.serving.web.live import record_failure_line, tool_line
from monoagent_plugins.serving.web.notifier import WebNotifier
from monoagent_plugins.serving.web.store import ConsoleStore, StoreInUse, remove_store, store_owner, store_path


@pytest.fixture
def store(tmp_path: Path):
    opened = ConsoleStore(tmp_path)
    yield opened
    opened.close()


def test_a_known_submission_returns_its_receipt_and_another_payload_under_its_id_conflicts(store: ConsoleStore) -> None:
    thread = store.create_thread("t")["id"]
    sid = str(uuid.uuid4())
    first = store.submit(sid, thread, "hello")
    assert first.outcome == "new" and first.submission["state"] == "queued"
    assert store.submit(sid, thread, "hello").outcome == "known"
    assert store.submit(sid, thread, "other").outcome == "conflict"
    assert store.submit(str(uuid.uuid4()), "web:nope", "x").outcome == "no_thread"
    user = store.start(sid)
    assert user["role"] == "user" and user["text"] == "hello" and store.submission(sid)["state"] == "running"
    store.started(sid, "run-1")
    answer = store.finish(sid, "completed", {"text": "hi", "model": "m", "usage": {"input_tokens": 1, "output_tokens": 2},
                                             "tools": [{"id": "c", "name": "n", "status": "success", "line": "n() → ok"}]})
    assert store.submission(sid) | {"created_at": 0} == {
        "submission_id": sid, "thread_id": thread, "state": "completed", "run_id": "run-1", "message_id": answer["id"],
        "created_at": 0, "text": "hello"}
    assert [(m["role"], m["status"], m["run_id"]) for m in store.messages(thread)] == [
        ("user", "completed", "run-1"), ("assistant", "completed", "run-1")]
    assert store.messages(thread)[1]["tools"][0]["line"] == "n() → ok"
    refused = str(uuid.uuid4())
    store.submit(refused, thread, "refused")
    store.start(refused)
    store.unstart(refused)  # admission refused it: no receipt, no message, sending it again runs it
    assert store.submission(refused) is None and len(store.messages(thread)) == 2


def test_a_running_submission_of_a_gone_process_becomes_interrupted_and_a_live_ones_does_not(
        store: ConsoleStore, tmp_path: Path) -> None:
    thread = store.create_thread("t")["id"]
    gone, alive, queued = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    for sid in (gone, alive, queued):
        store.submit(sid, thread, sid)
    store.start(gone)
    store.start(alive)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process that was and is no more
    db = sqlite3.connect(store_path(tmp_path))
    db.execute("UPDATE submissions SET owner_process = ? WHERE submission_id = ?", (ProcessIdentity(child.pid).token(), gone))
    db.execute("UPDATE submissions SET owner_process = ? WHERE submission_id = ?",
               (ProcessIdentity.of(os.getppid()).token(), alive))
    db.commit()
    db.close()
    assert store.interrupt_orphans() == [(thread, gone, None)]
    assert store.submission(gone)["state"] == "interrupted" and store.submission(alive)["state"] == "running"
    assert store.message(store.submission(gone)["message_id"])["status"] == "interrupted"
    assert store.queued_threads() == [thread] and [s["submission_id"] for s in store.queued(thread)] == [queued]


def test_sessions_expire_and_are_kept_hashed(tmp_path: Path) -> None:
    now = [1000.0]
    store = ConsoleStore(tmp_path, clock=lambda: now[0])
    try:
        store.create_session("secret-session", "csrf-1", 60)
        assert store.session_csrf("secret-session") == "csrf-1" and store.session_csrf("other") is None
        now[0] += 61
        assert store.session_csrf("secret-session") is None
    finally:
        store.close()
    assert b"secret-session" not in store_path(tmp_path).read_bytes()


def test_the_store_has_one_owner_and_is_not_removed_while_that_owner_lives(tmp_path: Path) -> None:
    store = ConsoleStore(tmp_path)
    store.claim()
    assert store_owner(tmp_path) == ProcessIdentity.current()
    with pytest.raises(StoreInUse):
        remove_store(tmp_path)
    other = ConsoleStore(tmp_path)
    db = sqlite3.connect(store_path(tmp_path))
    db.execute("UPDATE meta SET value = ? WHERE key = 'owner'", (ProcessIdentity.of(os.getppid()).token(),))
    db.commit()
    db.close()
    with pytest.raises(StoreInUse):
        other.claim()
    other.close()
    store.release()  # not the owner any more: nothing released
    assert store_owner(tmp_path) is not None
    db = sqlite3.connect(store_path(tmp_path))
    db.execute("DELETE FROM meta")
    db.commit()
    db.close()
    store.close()
    (tmp_path / "history").mkdir()
    assert remove_store(tmp_path) is True
    assert not (tmp_path / "web").exists() and (tmp_path / "history").is_dir()
    assert remove_store(tmp_path) is False


def test_tool_lines_show_no_bookkeeping_and_a_definitive_failure_as_one_plain_line_with_its_code() -> None:
    opened = tool_line("tool_call", {"id": "c1", "name": "read_file", "arguments": '{"path": "a.txt", "n": 3}',
                                     "persistence": "deferred"})
    assert opened == {"id": "c1", "name": "read_file", "status": "running", "line": 'read_file(path="a.txt", n=3)'}
    assert record_failure_line("tool_call", {"id": "c1", "name": "read_file", "persistence": "deferred"}) is None
    done = tool_line("tool_result", {"id": "c1", "name": "read_file", "status": "success", "persistence": "persisted"}, opened)
    assert done["line"] == 'read_file(path="a.txt", n=3) → ok'
    assert record_failure_line("tool_result", {"id": "c1", "name": "read_file", "persistence": "persisted"}) is None
    data = {"id": "c1", "name": "read_file", "status": "error", "error": "no such file", "persistence": "failed",
            "persistence_error": "ToolHistoryRejected: disk full"}
    failed = tool_line("tool_result", data, opened)
    assert failed == {"id": "c1", "name": "read_file", "status": "error",
                      "line": 'read_file(path="a.txt", n=3) → error: no such file'}  # the tool's own state, as usual
    assert record_failure_line("tool_result", data) == {
        "id": "c1/result-record", "name": "read_file", "status": "failed",
        "line": "read_file: the result was not recorded in tool history (ToolHistoryRejected: disk full)"}


def test_the_web_notifier_delivers_an_answer_into_a_new_console_thread(tmp_path: Path) -> None:
    notifier = WebNotifier(tmp_path)
    attempts = asyncio.run(notifier.notify(Notification("The deploy went fine.", "webhook", "deploy", "web:new", "webhook:x",
                                                  "run-9", 0.0)))
    assert attempts == 1
    store = ConsoleStore(tmp_path)
    try:
        (thread,) = store.threads(archived=False)
        assert thread["title"] == "webhook deploy"
        (message,) = store.messages(thread["id"])
        assert (message["role"], message["text"], message["run_id"]) == ("assistant", "The deploy went fine.", "run-9")
    finally:
        store.close()


def test_a_queued_follow_up_the_harness_has_no_room_for_waits_queued_and_runs_when_there_is(tmp_path: Path, monkeypatch) -> None:
    """A follow-up queued behind a turn is the person's message: when its turn comes and the channel's harness
    refuses it (admission overload), it stays queued and is tried again, never ends as a failed answer."""
    from monoagent import AdmissionRejected
    from monoagent.testing import FunctionProvider, fresh_agent
    from monoagent_plugins.serving.web import channel as web_channel

    agent = fresh_agent(tmp_path, provider=FunctionProvider(lambda request: "answered", name="m"),
                        config={"web": {"enabled": True, "tokens": ["t"]}})
    channel = web_channel.WebChannel(agent)
    monkeypatch.setattr(web_channel, "RETRY_AFTER_S", 0)
    submitted = []
    real_submit = channel.runs.submit

    def full_once(request, **kwargs):  # the harness as it answers when maxPendingRuns are waiting
        submitted.append(request.text)
        if len(submitted) == 1:
            raise AdmissionRejected("1 runs already wait for an execution slot (concurrency.maxPendingRuns = 0)")
        return real_submit(request, **kwargs)

    monkeypatch.setattr(channel.runs, "submit", full_once)

    async def scenario() -> tuple[dict, list]:
        await channel.start()
        try:
            thread = channel.store.create_thread("t")
            queued = channel.store.submit(str(uuid.uuid4()), thread["id"], "follow-up").submission
            channel._enqueue(thread["id"], queued, wait=False)
            await channel.live[thread["id"]].worker
            return channel.store.submission(queued["submission_id"]), channel.store.messages(thread["id"])
        finally:
            await channel.shutdown()

    submission, messages = asyncio.run(scenario())
    assert submitted == ["follow-up", "follow-up"]  # refused once, then run
    assert submission["state"] == "completed"
    assert [(m["role"], m["text"], m["status"]) for m in messages] == [("user", "follow-up", "completed"),
                                                                     ("assistant", "answered", "completed")]
