"""Durable warm sessions: the ``files`` session backend under ``runtime.session.transcriptsDir``
(:mod:`monoagent_plugins.history.session_files`).

The store's transaction (the provider session committed with the record), choosing the backend
(``runtime.session.backend``, the compatible ``transcriptsDir`` alone, the factory's checks), the
backend through its public protocol (open, publish, retire, on the read-only turn) on a real
``files`` store and real files, crashes and two processes as real subprocesses, hostile ids and
planted files, and clear-sessions.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from waiting import until

from monoagent import hookimpl
from monoagent._kernel.errors import ComponentError
from monoagent._kernel.model import Message
from monoagent._kernel.sessions import InMemorySessionBackend, OpenedSession, WarmSession
from monoagent._kernel.stores import CommitReceipt, ProviderSessionState, ProviderSessionStore
from monoagent._kernel.turn import SessionInfo
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.sessions import history_tail, session_backend
from monoagent._pipeline.turn_run import TurnRun
from monoagent.testing import AnthropicWireServer, fresh_agent
from monoagent.testing.provider_contract import Reply
from monoagent_plugins.history.durable_sessions import DurableSessionBackend
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.transcript_files import conversation_digest

MODEL = "offline:echo"


def agent_with_sessions(tmp_path: Path, **config):
    base = {"runtime": {"model": MODEL, "session": {"transcriptsDir": str(tmp_path / "sessions")}}}
    for key, value in config.items():
        for name, inner in value.items():
            if isinstance(inner, dict) and isinstance(base.get(key, {}).get(name), dict):
                base[key][name].update(inner)
            else:
                base.setdefault(key, {})[name] = inner
    return fresh_agent(tmp_path, config=base)


def make_turn(agent, conversation_id: str = "c1", *, model: str = MODEL, events: list | None = None) -> TurnRun:
    events = [] if events is None else events
    session = SessionInfo(delivery="request", mode="continuous", logical_conversation_id=conversation_id,
                          conversation_id=conversation_id)
    return TurnRun(agent=agent, request=TurnRequest(text="q", conversation_id=conversation_id), run_id="run", model=model,
                session=session, emitter=lambda kind, data: events.append((kind, data)))


async def open_turn(backend, turn: TurnRun) -> OpenedSession:
    """``backend.open`` on the turn as the pipeline calls it: the read-only view, and the history it read again kept."""
    opened = await backend.open(turn.view)
    if opened.history is not None:
        turn.history = opened.history
    return opened


def boundaries(events: list) -> list[tuple[str, str]]:
    return [(d["kind"], d["reason"]) for kind, d in events if kind == "session_boundary"]


class Driver:
    """Runs turns through a backend the way the harness does: load history, open, check the history tail, publish."""

    def __init__(self, agent, backend) -> None:
        self.agent, self.backend = agent, backend
        self.store = agent.history_store

    async def turn(self, text: str, conversation_id: str = "c1", *, model: str = MODEL, events: list | None = None):
        turn = make_turn(self.agent, conversation_id, model=model, events=events)
        turn.history = tuple(await self.store.load(conversation_id))
        opened = await open_turn(self.backend, turn)
        if opened.boundary is not None:
            turn.emit("session_boundary", kind=opened.boundary[0], reason=opened.boundary[1])
        session = opened.session
        if session is not None and session.history_tail != history_tail(turn.history):  # as the harness checks
            await self.backend.retire(turn.view, "history_changed")
            turn.emit("session_boundary", kind="cold", reason="history_changed")
            session = None
        seen = list(session.transcript) if session is not None else list(turn.history)
        user, answer = Message("user", text), Message("assistant", f"answer to {text}")
        appended = [user, answer]
        if session is None:
            session = WarmSession.start(conversation_id, model)
            appended[:0] = turn.history
        session.history_tail = history_tail([*turn.history, user, answer])

        async def commit(state):
            return await self.store.commit(conversation_id, [user, answer], provider_session=state)

        await self.backend.publish(turn.view, session, appended, commit)
        return opened, seen


def run(coro):
    return asyncio.run(coro)


# --------------------------------------------------------------------------- the store's transaction


def test_the_files_store_commits_the_provider_session_with_the_record(tmp_path):
    store = FilesHistoryStore(tmp_path / "history")
    assert isinstance(store, ProviderSessionStore)
    state = ProviderSessionState("ab" * 16, 3, "anthropic:claude")

    async def go():
        assert await store.load_provider_session("c") is None
        await store.commit("c", [Message("user", "hi")], provider_session=state)
        fresh = FilesHistoryStore(tmp_path / "history")
        assert await fresh.load_provider_session("c") == state
        assert [m.content for m in await fresh.load("c")] == ["hi"]
        await fresh.commit("c", [Message("assistant", "host-only")])  # a commit without a session unbinds the record
        assert await FilesHistoryStore(tmp_path / "history").load_provider_session("c") is None
        assert [m.content for m in await FilesHistoryStore(tmp_path / "history").load("c")] == ["hi", "host-only"]

    run(go())


def test_a_record_without_a_provider_session_loads_as_before(tmp_path):
    store = FilesHistoryStore(tmp_path / "history")
    run(store.commit("c", [Message("user", "old")]))
    path = next((tmp_path / "history").glob("*.json"))
    assert "providerSession" not in path.read_text()
    assert run(FilesHistoryStore(tmp_path / "history").load_provider_session("c")) is None


@pytest.mark.parametrize("session", [
    {"epoch": "not-hex", "revision": 1, "model": None},
    {"epoch": "ab" * 16, "revision": -1, "model": None},
    {"epoch": "ab" * 16, "revision": "1", "model": None},
    {"epoch": "ab" * 16, "revision": 1, "model": 7},
    "a string",
])
def test_a_malformed_provider_session_makes_the_record_unreadable(tmp_path, session):
    store = FilesHistoryStore(tmp_path / "history")
    run(store.commit("c", [Message("user", "hi")], provider_session=ProviderSessionState("ab" * 16, 1, None)))
    path = next((tmp_path / "history").glob("*.json"))
    record = json.loads(path.read_text())
    record["providerSession"] = session
    path.write_text(json.dumps(record))
    warnings: list = []
    fresh = FilesHistoryStore(tmp_path / "history")
    assert run(fresh.load("c", on_warning=lambda code, message: warnings.append(code))) == ()
    assert warnings == ["history_record_unreadable"]
    assert run(fresh.load_provider_session("c")) is None


def test_commit_refuses_a_provider_session_that_is_not_one(tmp_path):
    store = FilesHistoryStore(tmp_path / "history")
    with pytest.raises(TypeError, match="provider_session"):
        run(store.commit("c", [Message("user", "hi")], provider_session=ProviderSessionState("../../etc", 1, None)))
    assert run(store.load("c")) == ()


# --------------------------------------------------------------------------- choosing the backend


class PlainStore:  # a HistoryStore and no more: not a ProviderSessionStore
    name = "plain"

    async def load(self, conversation_id, *, on_warning=None):
        return []

    async def commit(self, conversation_id, messages):
        return CommitReceipt(conversation_id, len(messages), 0)

    async def reset(self, conversation_id):
        return 0

    async def conversations(self):
        return []

    async def close(self):
        pass


class PlainStorePlugin:
    @hookimpl
    def register_history_stores(self, register):
        register("plain", lambda agent: PlainStore())


def test_the_configured_backend_is_built_memory_by_default(tmp_path):
    default = fresh_agent(tmp_path / "a", config={"runtime": {"model": MODEL}})
    assert default.config.runtime.session.backend == "memory"
    assert type(session_backend(default)) is InMemorySessionBackend
    chosen = agent_with_sessions(tmp_path / "b", runtime={"session": {"backend": "files"}})
    durable = session_backend(chosen)
    assert isinstance(durable, DurableSessionBackend) and durable.durable
    assert durable.files.root == str(tmp_path / "b" / "sessions")
    assert session_backend(chosen) is not durable, "each harness builds its own"
    kept = agent_with_sessions(tmp_path / "c", runtime={"session": {"backend": "memory"}})
    assert type(session_backend(kept)) is InMemorySessionBackend, "a backend chosen explicitly wins over transcriptsDir"


def test_transcripts_dir_alone_still_selects_the_files_backend(tmp_path):
    """The way before session backends: the directory alone makes sessions durable; ``config show`` says why."""
    agent = agent_with_sessions(tmp_path / "a")
    assert agent.config.runtime.session.backend == "files"
    assert agent.config.sources["runtime.session.backend"] == "implied by runtime.session.transcriptsDir (python)"
    assert isinstance(session_backend(agent), DurableSessionBackend)
    from_env = fresh_agent(tmp_path / "b", config={"runtime": {"model": MODEL}},
                           env={"MONO_AGENT_SESSION_TRANSCRIPTS_DIR": str(tmp_path / "b" / "sessions")})
    assert from_env.config.sources["runtime.session.backend"] == (
        "implied by runtime.session.transcriptsDir (env MONO_AGENT_SESSION_TRANSCRIPTS_DIR)")
    assert isinstance(session_backend(from_env), DurableSessionBackend)
    old = fresh_agent(tmp_path / "c", config={"runtime": {"model": MODEL}, "providers": {"piNative": {"piSessionsRoot": "s"}}})
    assert old.config.runtime.session.backend == "files" and old.config.section("runtime.session").transcripts_dir == Path("s")
    old_env = fresh_agent(tmp_path / "d", config={"runtime": {"model": MODEL}}, env={"MONO_AGENT_PI_SESSIONS_ROOT": "s"})
    assert old_env.config.runtime.session.backend == "files"
    unset = fresh_agent(tmp_path / "e", config={"runtime": {"model": MODEL}}, env={"MONO_AGENT_SESSION_TRANSCRIPTS_DIR": ""})
    assert unset.config.runtime.session.backend == "memory" and "runtime.session.backend" not in unset.config.sources


def test_a_blocked_files_plugin_ignores_the_directory_and_keeps_sessions_in_memory(tmp_path, capsys):
    agent = agent_with_sessions(tmp_path, plugins={"block": ["session-files"]})
    assert agent.config.runtime.session.backend == "memory"
    assert type(session_backend(agent)) is InMemorySessionBackend
    assert "runtime.session.transcriptsDir" in capsys.readouterr().err
    explicit = agent_with_sessions(tmp_path / "b", runtime={"session": {"backend": "files"}}, plugins={"block": ["session-files"]})
    with pytest.raises(ComponentError, match="session backend 'files' is selected in the configuration"):
        session_backend(explicit)


@pytest.mark.parametrize("backend", [{}, {"backend": "files"}])
def test_the_files_backend_refuses_a_history_store_that_keeps_no_provider_session(tmp_path, backend):
    agent = fresh_agent(tmp_path, plugins=[PlainStorePlugin()], config={
        "runtime": {"model": MODEL, "session": {"transcriptsDir": str(tmp_path / "sessions"), **backend}},
        "history": {"store": "plain"},
    })
    with pytest.raises(ComponentError) as info:
        session_backend(agent)
    message = str(info.value)
    assert "history store 'plain' keeps no provider session (it is not a ProviderSessionStore" in message
    assert 'runtime.session.backend = "memory"' in message
    assert not (tmp_path / "sessions").exists()


def test_the_files_backend_needs_its_directory_set_and_usable(tmp_path):
    unset = fresh_agent(tmp_path / "a", config={"runtime": {"model": MODEL, "session": {"backend": "files"}}})
    with pytest.raises(ComponentError, match=r"runtime\.session\.transcriptsDir, which is unset"):
        session_backend(unset)
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    with pytest.raises(ComponentError, match=r"has mode 0755; it must be owner-only \(0700\)"):
        session_backend(agent_with_sessions(tmp_path / "b", runtime={"session": {"transcriptsDir": str(loose)}}))
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(ComponentError, match=r"cannot be created: .*a-file is not a directory"):
        session_backend(agent_with_sessions(tmp_path / "c", runtime={"session": {"transcriptsDir": str(tmp_path / "a-file" / "s")}}))
    fine = agent_with_sessions(tmp_path / "d", runtime={"session": {"transcriptsDir": str(tmp_path / "d" / "new" / "s")}})
    session_backend(fine)
    assert not (tmp_path / "d" / "new").exists(), "building the backend creates nothing; its first turn does"


def test_a_backend_no_plugin_registers_is_an_error_naming_the_ones_there_are(tmp_path):
    agent = fresh_agent(tmp_path, config={"runtime": {"model": MODEL, "session": {"backend": "postgres"}}})
    with pytest.raises(ComponentError, match=r"session backend 'postgres' is selected in the configuration, but no "
                                             r"active plugin registers it \(available: files, memory\)"):
        session_backend(agent)
    per_message = fresh_agent(tmp_path / "b", config={"runtime": {"model": MODEL, "session": {"backend": "postgres",
                                                                                              "mode": "per-message"}}})
    assert per_message.run_sync("hello", conversation_id="c").text, "per-message turns open no session"


# --------------------------------------------------------------------------- the backend through its protocol


def conversation_dir(tmp_path: Path, conversation_id: str = "c1") -> Path:
    return tmp_path / "sessions" / conversation_digest(conversation_id)


def shard_file(tmp_path: Path, conversation_id: str = "c1") -> Path:
    return tmp_path / "sessions" / ".locks" / f"shard-{int(conversation_digest(conversation_id)[:8], 16) % 16:02d}.lock"


def lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def waiters_on(path: Path) -> int:
    """How many flock waiters block on ``path`` (Linux ``/proc/locks``: blocked requests are marked ``->``)."""
    inode = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


def backend_of(agent, **kwargs) -> DurableSessionBackend:
    root = agent.config.resolve(agent.config.section("runtime.session").transcripts_dir)
    return DurableSessionBackend(agent.history_store, root, agent.config.runtime.session.idle_timeout_ms, **kwargs)


def contents(messages) -> list[str]:
    return [m.content for m in messages]


def test_a_new_process_resumes_the_transcript_and_sees_each_turn_once(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        first = Driver(agent, backend_of(agent))
        opened, seen = await first.turn("one")
        assert opened.session is None and opened.boundary is None and seen == []
        _, seen = await first.turn("two")  # warm, in memory
        assert contents(seen) == ["one", "answer to one"]
        events: list = []
        opened, seen = await Driver(agent, backend_of(agent)).turn("three", events=events)  # a fresh backend: disk only
        assert opened.session is not None and boundaries(events) == []
        assert contents(seen) == ["one", "answer to one", "two", "answer to two"]
        state = await agent.history_store.load_provider_session("c1")
        assert state.revision == 3 and state.model == MODEL and state.epoch == opened.session.epoch

    run(go())
    directory = conversation_dir(tmp_path)
    assert stat.S_IMODE((tmp_path / "sessions").stat().st_mode) == 0o700
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    [transcript] = directory.iterdir()
    assert transcript.suffix == ".jsonl" and stat.S_IMODE(transcript.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["header", "turn", "turn", "turn"]


def test_the_lock_is_held_from_open_to_publish(tmp_path):
    agent = agent_with_sessions(tmp_path)
    backend = backend_of(agent)

    async def go():
        turn = make_turn(agent)
        opened = await open_turn(backend, turn)
        assert not lock_is_free(shard_file(tmp_path)) and (conversation_dir(tmp_path) / "fence").exists()
        session = WarmSession.start("c1", MODEL)

        async def commit(state):
            assert not lock_is_free(shard_file(tmp_path)) and (conversation_dir(tmp_path) / "fence").exists()
            return await agent.history_store.commit("c1", [Message("user", "q")], provider_session=state)

        await backend.publish(turn.view, session, [Message("user", "q")], commit)
        assert opened.session is None
        assert lock_is_free(shard_file(tmp_path)) and not (conversation_dir(tmp_path) / "fence").exists()

    run(go())


@pytest.mark.parametrize("reason", ["failed_turn", "cancelled_turn", "retry_answered"])
def test_a_turn_that_ends_without_publishing_retires_its_transcripts_and_releases_the_lock(tmp_path, reason):
    agent = agent_with_sessions(tmp_path)

    async def go():
        await Driver(agent, backend_of(agent)).turn("one")
        backend = backend_of(agent)
        turn = make_turn(agent)
        assert (await open_turn(backend, turn)).session is not None
        await backend.retire(turn.view, reason)
        assert lock_is_free(shard_file(tmp_path)) and list(conversation_dir(tmp_path).iterdir()) == []
        await agent.history_store.commit("c1", [Message("assistant", "continuity account")])
        events: list = []
        opened, seen = await Driver(agent, backend_of(agent)).turn("two", events=events)
        assert opened.session is None and boundaries(events) == []  # the harness reported the retirement already
        assert contents(seen) == ["one", "answer to one", "continuity account"]

    run(go())


def test_a_retirement_within_the_turn_keeps_the_lock_and_fence_until_it_publishes(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        await Driver(agent, backend_of(agent)).turn("one")
        backend = backend_of(agent)
        turn = make_turn(agent, model="offline:other")
        assert (await open_turn(backend, turn)).session is not None
        await backend.retire(turn.view, "model_change")
        assert not lock_is_free(shard_file(tmp_path)) and [p.name for p in conversation_dir(tmp_path).iterdir()] == ["fence"]
        session = WarmSession.start("c1", "offline:other")

        async def commit(state):
            return await agent.history_store.commit("c1", [Message("user", "q")], provider_session=state)

        await backend.publish(turn.view, session, [Message("user", "q")], commit)
        assert lock_is_free(shard_file(tmp_path))
        assert (await agent.history_store.load_provider_session("c1")).model == "offline:other"

    run(go())


def test_another_process_committing_makes_the_stale_copy_reopen_the_transcript(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        mine, theirs = Driver(agent, backend_of(agent)), Driver(agent, backend_of(agent))
        await mine.turn("one")
        await theirs.turn("two")  # resumes from disk, commits revision 2
        events: list = []
        _, seen = await mine.turn("three", events=events)  # holds revision 1 in memory: stale
        assert contents(seen) == ["one", "answer to one", "two", "answer to two"] and boundaries(events) == []
        assert (await agent.history_store.load_provider_session("c1")).revision == 3

    run(go())


def test_a_turn_that_waited_for_the_lock_reads_the_history_committed_meanwhile(tmp_path):
    """The harness loads history before it opens the session; the backend reads it again under the lock."""
    agent = agent_with_sessions(tmp_path)

    async def go():
        await Driver(agent, backend_of(agent)).turn("one")
        holder = backend_of(agent)
        turn = make_turn(agent)
        opened = await open_turn(holder, turn)
        waiting = asyncio.ensure_future(Driver(agent, backend_of(agent)).turn("three"))  # loads history now: stale
        await until(lambda: waiters_on(shard_file(tmp_path)) == 1, "a second process blocked on the shard lock", interval=0.01)
        user, reply = Message("user", "two"), Message("assistant", "answer to two")
        opened.session.history_tail = history_tail([*turn.history, user, reply])

        async def commit(state):
            return await agent.history_store.commit("c1", [user, reply], provider_session=state)

        await holder.publish(turn.view, opened.session, [user, reply], commit)
        reopened, seen = await waiting
        assert reopened.session is not None
        assert contents(seen) == ["one", "answer to one", "two", "answer to two"]

    run(go())


def test_a_commit_without_the_lock_during_the_provider_call_is_never_covered_by_a_stale_transcript(tmp_path):
    """Continuity accounts and host-only appends take no session lock: one landing mid-turn unbinds the turn."""
    agent = agent_with_sessions(tmp_path)

    async def go():
        await Driver(agent, backend_of(agent)).turn("one")
        backend = backend_of(agent)
        turn = make_turn(agent)
        turn.history = tuple(await agent.history_store.load("c1"))
        opened = await open_turn(backend, turn)
        await agent.history_store.commit("c1", [Message("assistant", "another process's account")])  # mid-call
        user, reply = Message("user", "two"), Message("assistant", "answer to two")
        opened.session.history_tail = history_tail([user, reply])

        async def commit(state):
            return await agent.history_store.commit("c1", [user, reply], provider_session=state)

        await backend.publish(turn.view, opened.session, [user, reply], commit)
        assert await agent.history_store.load_provider_session("c1") is None
        assert lock_is_free(shard_file(tmp_path)) and list(conversation_dir(tmp_path).iterdir()) == []
        reopened, seen = await Driver(agent, backend_of(agent)).turn("three")
        assert reopened.session is None
        assert contents(seen) == ["one", "answer to one", "another process's account", "two", "answer to two"]

    run(go())


def test_idle_eviction_drops_the_copy_in_memory_and_the_next_turn_resumes_from_disk(tmp_path, monkeypatch):
    from monoagent._kernel import sessions

    now = [1000.0]
    monkeypatch.setattr(sessions, "clock", lambda: now[0])
    agent = agent_with_sessions(tmp_path, runtime={"session": {"idleTimeoutMs": 60_000}})
    driver = Driver(agent, backend_of(agent))

    async def go():
        await driver.turn("one")
        assert len(driver.backend) == 1
        now[0] += 61
        events: list = []
        opened, seen = await driver.turn("two", events=events)
        assert [(d["status"], d["reason"]) for kind, d in events if kind == "session_status"] == [("evicted", "idle_timeout")]
        assert opened.session is not None and boundaries(events) == []
        assert contents(seen) == ["one", "answer to one"]

    run(go())


def test_a_host_only_append_retires_the_transcript(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        driver = Driver(agent, backend_of(agent))
        await driver.turn("one")
        await agent.history_store.commit("c1", [Message("assistant", "delivered by the host")])
        events: list = []
        opened, seen = await driver.turn("two", events=events)
        assert opened.session is None and boundaries(events) == [("cold", "history_changed")]
        assert contents(seen) == ["one", "answer to one", "delivered by the host"]

    run(go())


def test_a_legacy_record_takes_one_cold_reseed(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        await agent.history_store.commit("c1", [Message("user", "old"), Message("assistant", "older")])
        driver = Driver(agent, backend_of(agent))
        events: list = []
        opened, seen = await driver.turn("new", events=events)
        assert opened.session is None and boundaries(events) == [("resume_replay", "legacy_unbound_model")]
        assert contents(seen) == ["old", "older"]
        events.clear()
        opened, _ = await driver.turn("newer", events=events)
        assert opened.session is not None and boundaries(events) == []

    run(go())


def test_a_transcript_over_the_cap_retires_to_cold(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        driver = Driver(agent, backend_of(agent, max_transcript_bytes=2048))
        await driver.turn("one")
        events: list = []
        await driver.turn("x" * 4096, events=events)
        assert [d["code"] for kind, d in events if kind == "runtime_warning"] == ["session_transcript_too_large"]
        assert list(conversation_dir(tmp_path).iterdir()) == []
        events.clear()
        opened, seen = await driver.turn("three", events=events)
        assert opened.session is None and contents(seen)[-1] == "answer to " + "x" * 4096
        assert lock_is_free(shard_file(tmp_path))

    run(go())


def test_a_transcript_that_cannot_be_written_does_not_cost_the_answer(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        await Driver(agent, backend_of(agent)).turn("one")
        backend = backend_of(agent)
        turn = make_turn(agent)
        turn.history = tuple(await agent.history_store.load("c1"))
        opened = await open_turn(backend, turn)
        _swap_for_symlink(tmp_path, _transcript(tmp_path))  # O_NOFOLLOW refuses to append through it
        user, reply = Message("user", "two"), Message("assistant", "answer to two")
        opened.session.history_tail = history_tail([*turn.history, user, reply])
        events: list = []
        turn.emitter = lambda kind, data: events.append((kind, data))

        async def commit(state):
            return await agent.history_store.commit("c1", [user, reply], provider_session=state)

        await backend.publish(turn.view, opened.session, [user, reply], commit)
        assert [d["code"] for kind, d in events if kind == "runtime_warning"] == ["session_transcript_not_written"]
        assert await agent.history_store.load_provider_session("c1") is None and lock_is_free(shard_file(tmp_path))
        reopened, seen = await Driver(agent, backend_of(agent)).turn("three")
        assert reopened.session is None and contents(seen) == ["one", "answer to one", "two", "answer to two"]

    run(go())


def _age(directory: Path, seconds: float) -> None:
    for path in [*directory.iterdir(), directory]:
        then = path.stat(follow_symlinks=False).st_mtime - seconds
        os.utime(path, (then, then), follow_symlinks=False)


def test_transcripts_of_conversations_idle_for_30_days_are_swept(tmp_path):
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one", "old"))
    run(Driver(agent, backend_of(agent)).turn("one", "recent"))
    _age(conversation_dir(tmp_path, "old"), 31 * 86400)
    _age(conversation_dir(tmp_path, "recent"), 29 * 86400)
    assert shard_file(tmp_path, "old") != shard_file(tmp_path, "another")  # the running turn's shard is skipped

    async def go():
        backend = backend_of(agent)
        await Driver(agent, backend).turn("one", "another")  # the first open starts the sweep
        await backend.close()

    run(go())
    assert not conversation_dir(tmp_path, "old").exists() and conversation_dir(tmp_path, "recent").exists()
    events: list = []
    opened, seen = run(Driver(agent, backend_of(agent)).turn("two", "old", events=events))
    assert opened.session is None and boundaries(events) == [("cold", "revision_mismatch")]
    assert contents(seen) == ["one", "answer to one"]


def test_the_sweep_skips_a_conversation_whose_shard_is_in_use(tmp_path):
    from monoagent_plugins.history.transcript_files import IDLE_SWEEP_SECONDS, TranscriptRoot

    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    _age(conversation_dir(tmp_path), 31 * 86400)
    root = TranscriptRoot(tmp_path / "sessions")
    held = root.lock("c1")
    try:
        assert root.sweep(time.time(), IDLE_SWEEP_SECONDS) == (0, 0) and conversation_dir(tmp_path).exists()
    finally:
        os.close(held)
    removed, freed = root.sweep(time.time(), IDLE_SWEEP_SECONDS)
    assert removed == 1 and freed > 0 and not conversation_dir(tmp_path).exists()


def test_a_cancelled_wait_for_the_lock_releases_it_when_it_comes(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        holder = backend_of(agent)
        turn = make_turn(agent)
        await open_turn(holder, turn)
        waiter = backend_of(agent)
        waiting = asyncio.ensure_future(waiter.open(make_turn(agent).view))
        await until(lambda: waiters_on(shard_file(tmp_path)) == 1, "a second process blocked on the shard lock", interval=0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await holder.retire(turn.view, "failed_turn")
        await waiter.close()  # the pool's thread finishes its wait and gives the lock back
        third = backend_of(agent)
        await asyncio.wait_for(third.open(make_turn(agent).view), 30)
        await third.retire(make_turn(agent).view, "failed_turn")

    run(go())


# --------------------------------------------------------------------------- hostile ids, planted and damaged files


@pytest.mark.parametrize("conversation_id", ["../../escape", "/etc/passwd", "nul\x00byte", "ünïcødé 🎉 会话", "", "a/b/../c", ".", "..", "x" * 5000, "fence",
                                             "con:2025-01-01", "line\nbreak", ".locks/shard-00.lock"])
def test_hostile_conversation_ids_stay_inside_their_digest_directory(tmp_path, conversation_id):
    agent = agent_with_sessions(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())

    async def go():
        await Driver(agent, backend_of(agent)).turn("one", conversation_id)
        _, seen = await Driver(agent, backend_of(agent)).turn("two", conversation_id)
        assert contents(seen) == ["one", "answer to one"]

    run(go())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*before, "sessions"})
    root = tmp_path / "sessions"
    assert sorted(p.name for p in root.iterdir()) == sorted([".locks", conversation_digest(conversation_id)])
    assert all(len(p.name) == 38 and p.name.endswith(".jsonl") for p in conversation_dir(tmp_path, conversation_id).iterdir())


def _transcript(tmp_path: Path) -> Path:
    [path] = [p for p in conversation_dir(tmp_path).iterdir() if p.suffix == ".jsonl"]
    return path


def _rewrite_line(path: Path, number: int, change) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    change(lines[number])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _swap_for_symlink(tmp_path: Path, path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


def _copy_from_another_conversation(tmp_path: Path, path: Path) -> None:
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("elsewhere", "other"))
    [other] = conversation_dir(tmp_path, "other").iterdir()
    path.write_bytes(other.read_bytes().replace(other.stem.encode(), path.stem.encode()))


DAMAGES = {
    "truncated": lambda tmp_path, path: path.write_bytes(path.read_bytes()[:-7]),
    "not json": lambda tmp_path, path: path.write_bytes(path.read_bytes() + b"{not json\n"),
    "a turn missing": lambda tmp_path, path: path.write_text(path.read_text().splitlines()[0] + "\n"),
    "a turn too many": lambda tmp_path, path: path.write_text(path.read_text() + path.read_text().splitlines()[-1].replace(
        '"revision": 1', '"revision": 2').replace('"revision":1', '"revision":2') + "\n"),
    "another model": lambda tmp_path, path: _rewrite_line(path, 0, lambda line: line.update(model="offline:other")),
    "a message of the wrong types": lambda tmp_path, path: _rewrite_line(
        path, 1, lambda line: line["messages"][0].update(content=5)),
    "a symlink": _swap_for_symlink,
    "another conversation's": _copy_from_another_conversation,
    "over the cap": lambda tmp_path, path: path.write_bytes(path.read_bytes() + b" " * 4096 + b"\n"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_or_planted_transcript_is_retired_never_trusted(tmp_path, damage):
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    path = _transcript(tmp_path)
    DAMAGES[damage](tmp_path, path)
    events: list = []
    opened, seen = run(Driver(agent, backend_of(agent, max_transcript_bytes=4096)).turn("two", events=events))
    assert opened.session is None and boundaries(events) == [("cold", "revision_mismatch")]
    assert contents(seen) == ["one", "answer to one"]
    assert not path.is_symlink() and _transcript(tmp_path) != path  # a new epoch, created from history
    if damage == "a symlink":
        assert (tmp_path / "outside.jsonl").exists()


def test_a_transcript_of_another_epoch_is_removed(tmp_path):
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    kept = _transcript(tmp_path)
    planted = conversation_dir(tmp_path) / ("0" * 32 + ".jsonl")
    planted.write_bytes(kept.read_bytes())
    _, seen = run(Driver(agent, backend_of(agent)).turn("two"))
    assert contents(seen) == ["one", "answer to one"]
    assert not planted.exists() and _transcript(tmp_path) == kept


def _fence(tmp_path: Path) -> Path:
    return conversation_dir(tmp_path) / "fence"


FENCES = {
    "garbage": lambda tmp_path, state: _fence(tmp_path).write_bytes(b"\x00\xff garbage"),
    "too large": lambda tmp_path, state: _fence(tmp_path).write_bytes(b" " * 10_000),
    "the crashed turn's": lambda tmp_path, state: _fence(tmp_path).write_text(json.dumps(
        {"kind": "fence", "version": 1, "epoch": state.epoch, "revision": state.revision, "pid": 1})),
    "a symlink": lambda tmp_path, state: _fence(tmp_path).symlink_to(tmp_path / "outside"),
    "a fifo": lambda tmp_path, state: os.mkfifo(_fence(tmp_path)),
    "another version": lambda tmp_path, state: _fence(tmp_path).write_text(json.dumps(
        {"kind": "fence", "version": 99, "epoch": None, "revision": None})),
}


@pytest.mark.parametrize("fence", sorted(FENCES))
def test_a_dirty_damaged_or_planted_fence_retires_the_transcripts(tmp_path, fence):
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    (tmp_path / "outside").write_text("not the store's")
    FENCES[fence](tmp_path, run(agent.history_store.load_provider_session("c1")))
    old = _transcript(tmp_path)
    events: list = []
    opened, seen = run(Driver(agent, backend_of(agent)).turn("two", events=events))
    assert opened.session is None and boundaries(events) == [("cold", "dirty_fence")]
    assert contents(seen) == ["one", "answer to one"] and _transcript(tmp_path) != old
    assert (tmp_path / "outside").read_text() == "not the store's" and not _fence(tmp_path).exists()


def test_a_fence_left_after_a_durable_commit_is_removed_and_the_transcript_kept(tmp_path):
    """The commit landed, only the fence's removal was lost: the record has moved past the fence."""
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    _fence(tmp_path).write_text(json.dumps({"kind": "fence", "version": 1, "epoch": None, "revision": None, "pid": 1}))
    events: list = []
    opened, seen = run(Driver(agent, backend_of(agent)).turn("two", events=events))
    assert opened.session is not None and boundaries(events) == []
    assert contents(seen) == ["one", "answer to one"]


def test_a_directory_planted_where_the_fence_goes_fails_closed(tmp_path):
    from monoagent_plugins.history.transcript_files import TranscriptStoreError

    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    _fence(tmp_path).mkdir()
    backend = backend_of(agent)
    with pytest.raises(TranscriptStoreError, match="directory"):
        run(backend.open(make_turn(agent).view))
    assert lock_is_free(shard_file(tmp_path))


@pytest.mark.parametrize("plant", ["symlink", "loose mode"])
def test_an_unsafe_conversation_directory_fails_closed(tmp_path, plant):
    from monoagent_plugins.history.transcript_files import TranscriptStoreError

    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    directory = conversation_dir(tmp_path)
    if plant == "symlink":
        elsewhere = tmp_path / "elsewhere"
        directory.rename(elsewhere)
        directory.symlink_to(elsewhere)
    else:
        directory.chmod(0o755)
    with pytest.raises(TranscriptStoreError, match="session directory"):
        run(backend_of(agent).open(make_turn(agent).view))
    assert lock_is_free(shard_file(tmp_path))


def test_a_lock_directory_swapped_for_a_symlink_while_serving_is_refused(tmp_path):
    """``<transcriptsDir>/.locks`` becomes a symlink after the store checked it: the next turn's lock is refused
    naming it, no lock file is created through it, the committed transcript stays (a guard: ensure() checks it too)."""
    from monoagent_plugins.history.transcript_files import TranscriptStoreError

    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    kept = sorted(p.name for p in conversation_dir(tmp_path).iterdir())
    locks = tmp_path / "sessions" / ".locks"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    locks.rename(tmp_path / "sessions" / "locks-moved")
    locks.symlink_to(elsewhere)
    with pytest.raises(TranscriptStoreError, match=f"{locks} is a symlink"):
        run(backend_of(agent).open(make_turn(agent).view))
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in conversation_dir(tmp_path).iterdir()) == kept


# --------------------------------------------------------------------------- restart --clear-sessions


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "ANTHROPIC_", "OPENAI_"))}
    env.update({"MONO_AGENT_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
                "MONO_AGENT_SESSION_TRANSCRIPTS_DIR": str(tmp_path / "sessions")}, **extra)
    return env


def monoagent(tmp_path: Path, *args: str, env: dict[str, str] | None = None, **kwargs):
    return subprocess.run([sys.executable, "-m", "monoagent", *args], cwd=tmp_path, env=env or cli_env(tmp_path),
                          capture_output=True, text=True, timeout=120, **kwargs)


def test_restart_clear_sessions_purges_the_transcripts_and_reports_them(tmp_path):
    agent = agent_with_sessions(tmp_path)

    async def go():
        for conversation_id in ("a", "b"):
            await Driver(agent, backend_of(agent)).turn("one", conversation_id)

    run(go())
    sizes = sum(p.stat().st_size for c in ("a", "b") for p in conversation_dir(tmp_path, c).iterdir())
    (tmp_path / "sessions" / "keep.txt").write_text("not a transcript")
    done = monoagent(tmp_path, "restart", "--clear-sessions", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["provider_sessions"] == {"transcripts": 2, "bytes": sizes}
    assert report["message_history"]["files"] == 2
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == [".locks", "keep.txt"]
    again = monoagent(tmp_path, "restart", "--clear-sessions", "--yes")
    assert "provider sessions removed: 0 transcript(s), 0 bytes" in again.stdout
    unset = monoagent(tmp_path, "restart", "--clear-sessions", "--yes", "--json",
                      env={k: v for k, v in cli_env(tmp_path).items() if k != "MONO_AGENT_SESSION_TRANSCRIPTS_DIR"})
    assert json.loads(unset.stdout)["provider_sessions"] is None


# --------------------------------------------------------------------------- crashes and two processes (real subprocesses)

OPEN_AND_WAIT = r"""
import asyncio, sys
from monoagent._kernel.turn_request import TurnRequest
from monoagent._kernel.turn import SessionInfo
from monoagent._pipeline.turn_run import TurnRun
from monoagent._pipeline.sessions import session_backend
from monoagent.testing import fresh_agent

tmp, conversation_id = sys.argv[1], sys.argv[2]
agent = fresh_agent(tmp, config={"runtime": {"model": "offline:echo", "session": {"transcriptsDir": tmp + "/sessions"}}})

async def main():
    session = SessionInfo(delivery="request", mode="continuous", logical_conversation_id=conversation_id,
                          conversation_id=conversation_id)
    turn = TurnRun(agent=agent, request=TurnRequest(text="q", conversation_id=conversation_id), run_id="r",
                model="offline:echo", session=session, emitter=lambda kind, data: None)
    turn.history = tuple(await agent.history_store.load(conversation_id))
    await session_backend(agent).open(turn.view)  # the lock is taken and the fence is on disk
    print("fenced", flush=True)
    sys.stdin.readline()  # the provider call, as long as the test wants

asyncio.run(main())
"""


def test_sigkill_between_fence_and_commit_reseeds_and_the_provider_sees_each_turn_once(tmp_path):
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    old = _transcript(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", OPEN_AND_WAIT, str(tmp_path), "c1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "fenced\n"
        assert not lock_is_free(shard_file(tmp_path))
    finally:
        child.kill()  # SIGKILL: no unwinding, the fence stays
        child.wait(30)
    assert _fence(tmp_path).exists() and lock_is_free(shard_file(tmp_path))
    events: list = []
    opened, seen = run(Driver(agent, backend_of(agent)).turn("two", events=events))
    assert opened.session is None and boundaries(events) == [("cold", "dirty_fence")]
    assert contents(seen) == ["one", "answer to one"] and not old.exists()
    _, seen = run(Driver(agent, backend_of(agent)).turn("three"))
    assert contents(seen) == ["one", "answer to one", "two", "answer to two"]


def test_a_second_process_waits_for_the_first_and_never_resumes_a_stale_transcript(tmp_path):
    agent = agent_with_sessions(tmp_path)
    run(Driver(agent, backend_of(agent)).turn("one"))
    child = subprocess.Popen([sys.executable, "-c", OPEN_AND_WAIT, str(tmp_path), "c1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "fenced\n"

        async def go():
            waiting = asyncio.ensure_future(Driver(agent, backend_of(agent)).turn("two", events=events))
            await until(lambda: waiters_on(shard_file(tmp_path)) == 1, "a second process blocked on the shard lock", interval=0.01)
            assert not waiting.done()
            child.kill()  # the first process dies mid-turn; its lock goes with it
            return await waiting

        events: list = []
        opened, seen = run(go())
    finally:
        child.kill()
        child.wait(30)
    assert opened.session is None and boundaries(events) == [("cold", "dirty_fence")]
    assert contents(seen) == ["one", "answer to one"]


# --------------------------------------------------------------------------- one process per turn: `monoagent run`

WIRE_MODEL = "anthropic:claude-x"


class AnthropicServer(AnthropicWireServer):
    """The local Anthropic-format server; ``arrived`` is released once per request received."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Semaphore(0)

    def next_reply(self) -> Reply:
        self.arrived.release()
        return super().next_reply()

    def bodies(self) -> list[dict]:
        return [json.loads(r.body) for r in self.requests]


def answer(text: str) -> Reply:
    return Reply(text_pieces=(text,))


def held_answer(server: AnthropicServer, text: str, release: threading.Event) -> Reply:
    """An answer the server sends only once ``release`` is set (the provider call lasts as long as the test wants)."""

    def frames():
        assert release.wait(60)
        yield from server.frames(answer(text))

    return Reply(raw_frames=frames())


def texts(message: dict) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)


def transcript_of(body: dict) -> list[tuple[str, str]]:
    return [(m["role"], texts(m)) for m in body["messages"]]


def system_of(body: dict) -> str:
    system = body.get("system", "")
    return system if isinstance(system, str) else "".join(block.get("text", "") for block in system)


def count(body: dict, text: str) -> int:
    return sum(texts(m).count(text) for m in body["messages"]) + system_of(body).count(text)


def turn_process(tmp_path: Path, server: AnthropicServer, text: str) -> subprocess.Popen:
    """``monoagent run --json -c wire TEXT`` in a process of its own, against ``server``, with runtime.session.transcriptsDir set."""
    env = cli_env(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=server.url, MONO_AGENT_MODEL=WIRE_MODEL,
                  MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.Popen([sys.executable, "-m", "monoagent", "run", "--json", "-c", "wire", text], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return json.loads(out)


def events_of(tmp_path: Path, result: dict) -> list[dict]:
    path = tmp_path / "home" / "artifacts" / "runs" / f"{result['run_id']}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def boundary_events(tmp_path: Path, result: dict) -> list[tuple[str, str]]:
    return [(e["data"]["kind"], e["data"].get("reason")) for e in events_of(tmp_path, result) if e["type"] == "session_boundary"]


@pytest.fixture
def wire():
    with AnthropicServer() as server:
        yield server


def test_each_process_resumes_the_transcript_instead_of_the_history_section(tmp_path, wire):
    wire.enqueue(answer("answer one"), answer("answer two"), answer("answer three"))
    results = [finished(turn_process(tmp_path, wire, f"question {n}")) for n in ("one", "two", "three")]
    assert [r["text"] for r in results] == ["answer one", "answer two", "answer three"]
    first, second, third = wire.bodies()
    assert [role for role, _ in transcript_of(first)] == ["user"]
    assert transcript_of(second)[:2] == [("user", "question one"), ("assistant", "answer one")]
    assert [role for role, _ in transcript_of(third)] == ["user", "assistant", "user", "assistant", "user"]
    for body, earlier in ((second, ["question one", "answer one"]),
                          (third, ["question one", "answer one", "question two", "answer two"])):
        assert all(count(body, text) == 1 for text in earlier), "each earlier turn reaches the provider exactly once"
        assert all(text not in system_of(body) for text in earlier), "no history section on a resumed turn"
    assert all(boundary_events(tmp_path, r) == [] for r in results)


def test_sigkill_of_monoagent_run_between_fence_and_commit_reseeds_each_turn_once(tmp_path, wire):
    wire.enqueue(answer("answer one"), Reply(text_pieces=("never",), stall_after=0), answer("answer three"))
    finished(turn_process(tmp_path, wire, "question one"))
    victim = turn_process(tmp_path, wire, "question two")
    try:
        assert wire.arrived.acquire(timeout=120) and wire.arrived.acquire(timeout=120)  # turn 2 is at the provider
        assert (conversation_dir(tmp_path, "wire") / "fence").exists()
    finally:
        victim.kill()
        victim.wait(30)
    third = finished(turn_process(tmp_path, wire, "question three"))
    body = wire.bodies()[2]
    assert boundary_events(tmp_path, third) == [("cold", "dirty_fence")]
    assert count(body, "question one") == 1 and count(body, "answer one") == 1 and count(body, "question two") == 0
    assert not (conversation_dir(tmp_path, "wire") / "fence").exists()


def test_two_processes_on_one_conversation_never_resume_a_stale_transcript(tmp_path, wire):
    release = threading.Event()
    wire.enqueue(answer("answer one"), held_answer(wire, "answer two", release), answer("answer three"))
    finished(turn_process(tmp_path, wire, "question one"))
    first = turn_process(tmp_path, wire, "question two")
    second = None
    try:
        assert wire.arrived.acquire(timeout=120) and wire.arrived.acquire(timeout=120)  # the first holds the lock
        second = turn_process(tmp_path, wire, "question three")
        run(until(lambda: waiters_on(shard_file(tmp_path, "wire")) == 1, "the second process blocked on the shard lock",
                  timeout=120, interval=0.01))
        assert len(wire.requests) == 2, "the second process waits for the first before it reads the session"
        release.set()
        finished(first)
        result = finished(second)
    finally:
        release.set()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
    body = wire.bodies()[2]
    assert all(count(body, text) == 1 for text in ("question one", "answer one", "question two", "answer two"))
    assert boundary_events(tmp_path, result) == []
