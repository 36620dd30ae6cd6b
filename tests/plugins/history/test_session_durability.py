"""Durable session transcripts and fences under a power cut, in the manner of the ALICE study.

The history store's crash-state enumeration (:mod:`monoagent.testing.durability.filesystem`)
applied to the ``files`` session backend (:mod:`monoagent_plugins.history.transcript_files`,
:mod:`monoagent_plugins.history.durable_sessions`): the file operations are recorded, every state a
power cut could leave is rebuilt, and each is judged.

* Each :class:`TranscriptRoot` operation keeps its documented promise once it returns: the
  conversation directory made, the fence written (whole), the fence removed, the turn appended,
  the transcripts retired, the sessions purged (``restart --clear-sessions``).
* Whole turns through the backend, on a real ``files`` history store: once the history record holds
  the turn, the next turn resumes its transcript (no boundary); a turn cut off after its fence was
  written makes the next one ``cold``/``dirty_fence``; after a turn committed without its session,
  or a purge, the next turn goes as it would without the power cut. What the provider is sent is
  always the history, each turn once.

Every fsync of those modules (file or directory) is needed by one of these: without it a state
breaks a promise.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from monoagent._kernel.model import Message
from monoagent._kernel.sessions import WarmSession
from monoagent._kernel.turn import SessionInfo
from monoagent._kernel.turn_request import TurnRequest
from monoagent._pipeline.sessions import history_tail
from monoagent._pipeline.turn_run import TurnRun
from monoagent.testing import fresh_agent
from monoagent.testing.durability.filesystem import FileSystemTap, available, crash_states, materialise
from monoagent_plugins.history.durable_sessions import DurableSessionBackend
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.transcript_files import Fence, Transcript, TranscriptRoot

pytestmark = pytest.mark.skipif(not available(), reason="the file-system tap needs /proc/self/fd (Linux)")

MODEL = "offline:echo"
EPOCH = "ab" * 16
PER_PREFIX = 48


def states(tap: FileSystemTap, scratch: Path, *, only_final: bool = False):
    """Each distinct crash state of the recorded operations, materialised: (k, root); removed after use."""
    seen: set[tuple[int, frozenset[tuple[str, bytes]]]] = set()
    final = len(tap.operations)
    for n, (k, files) in enumerate(crash_states(tap.initial, tap.operations, per_prefix=PER_PREFIX)):
        if only_final and k != final:
            continue
        key = (k if k == final else -1, frozenset((name, content) for name, (content, _) in files.items()))
        if key in seen:
            continue
        seen.add(key)
        root = materialise(files, tap.modes, tap.directories, scratch / f"state-{n}")
        try:
            yield k, root
        finally:
            shutil.rmtree(root)


def log(tap: FileSystemTap) -> str:
    return "\n  ".join(op.describe() for op in tap.operations)


# --------------------------------------------------------------------------- each operation's promise


def message(text: str) -> Message:
    return Message("user", text)


def with_conversation(files: TranscriptRoot, act: Callable[..., object]) -> object:
    with files.conversation("c1", create=True) as conversation:
        return act(conversation)


def read_back(files: TranscriptRoot, act: Callable[..., object]) -> object:
    with files.conversation("c1", create=False) as conversation:
        return "no conversation directory" if conversation is None else act(conversation)


def transcript_of(revision: int) -> Callable[..., object]:
    def read(files, conversation):
        found = files.read(conversation, EPOCH, MODEL, revision)
        return [m.content for m in found.messages] if isinstance(found, Transcript) else found

    return read


def on(files: TranscriptRoot, act: Callable[..., object]) -> Callable[..., object]:
    return lambda conversation: act(files, conversation)


def two_transcripts(files: TranscriptRoot) -> None:
    def make(files, conversation):
        files.append(conversation, EPOCH, MODEL, 1, [message("kept")], "t")
        files.append(conversation, "cd" * 16, MODEL, 1, [message("stale")], "t")

    with_conversation(files, on(files, make))


OPERATIONS = {
    # name: (prepare the durable state before, the operation, what must read back after it returned, expected)
    "the conversation directory made": (
        lambda files: None,
        lambda files: with_conversation(files, lambda c: None),
        lambda files: read_back(files, lambda c: "there"),
        "there",
    ),
    "the fence written": (
        lambda files: with_conversation(files, on(files, lambda f, c: f.write_fence(c, Fence(None, None)))),
        lambda files: with_conversation(files, on(files, lambda f, c: f.write_fence(c, Fence(EPOCH, 3)))),
        lambda files: read_back(files, on(files, lambda f, c: f.read_fence(c))),
        Fence(EPOCH, 3),
    ),
    "the fence written in a new conversation directory": (
        lambda files: None,
        lambda files: with_conversation(files, on(files, lambda f, c: f.write_fence(c, Fence(EPOCH, 0)))),
        lambda files: read_back(files, on(files, lambda f, c: f.read_fence(c))),
        Fence(EPOCH, 0),
    ),
    "the fence removed": (
        lambda files: with_conversation(files, on(files, lambda f, c: f.write_fence(c, Fence(EPOCH, 3)))),
        lambda files: with_conversation(files, on(files, lambda f, c: f.clear_fence(c, sync=True))),
        lambda files: read_back(files, on(files, lambda f, c: f.read_fence(c))),
        None,
    ),
    "a transcript made with its first turn": (
        lambda files: with_conversation(files, lambda c: None),
        lambda files: with_conversation(files, on(files, lambda f, c: f.append(c, EPOCH, MODEL, 1, [message("one")], "t"))),
        lambda files: read_back(files, on(files, transcript_of(1))),
        ["one"],
    ),
    "a turn appended": (
        lambda files: with_conversation(files, on(files, lambda f, c: f.append(c, EPOCH, MODEL, 1, [message("one")], "t"))),
        lambda files: with_conversation(files, on(files, lambda f, c: f.append(c, EPOCH, MODEL, 2, [message("two")], "t"))),
        lambda files: read_back(files, on(files, transcript_of(2))),
        ["one", "two"],
    ),
    "the transcripts retired": (
        two_transcripts,
        lambda files: with_conversation(files, on(files, lambda f, c: f.retire(c, EPOCH))),
        lambda files: read_back(files, on(files, lambda f, c: sorted(f.transcripts(c)))),
        [f"{EPOCH}.jsonl"],
    ),
    "the sessions purged": (
        two_transcripts,
        lambda files: files.purge(),
        lambda files: read_back(files, on(files, lambda f, c: sorted(f.transcripts(c)))),
        ("no conversation directory", []),
    ),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_each_transcript_operation_keeps_its_promise_through_a_power_cut(tmp_path, name):
    prepare, act, check, expected = OPERATIONS[name]
    base = tmp_path / "base"
    files = TranscriptRoot(base / "sessions")
    files.ensure()
    prepare(files)
    with FileSystemTap(base) as tap:
        act(files)
    assert check(files) in (expected if isinstance(expected, tuple) else (expected,)), "the operation itself"
    broken = []
    for _, root in states(tap, tmp_path / "states", only_final=True):
        found = check(TranscriptRoot(root / "sessions"))
        if found not in (expected if isinstance(expected, tuple) else (expected,)):
            broken.append(found)
    assert not broken, (f"{name}: after it returned, {len(broken)} power-cut state(s) read back {broken[:4]}, not "
                        f"{expected!r}\noperations:\n  {log(tap)}")


def test_a_fence_written_in_a_transcript_root_made_by_that_write_survives_a_power_cut(tmp_path):
    """The root (and its lock directory) made on first use is fsynced into its parent, or the fence goes with it."""
    base = tmp_path / "base"
    base.mkdir()
    files = TranscriptRoot(base / "sessions")  # not ensured: the first write makes it
    with FileSystemTap(base) as tap:
        with_conversation(files, on(files, lambda f, c: f.write_fence(c, Fence(EPOCH, 0))))
    broken = []
    for _, root in states(tap, tmp_path / "states", only_final=True):
        if not (root / "sessions").is_dir():
            broken.append("no transcript root")
            continue
        found = read_back(TranscriptRoot(root / "sessions"), on(files, lambda f, c: f.read_fence(c)))
        if found != Fence(EPOCH, 0):
            broken.append(found)
    assert not broken, (f"after the write returned, {len(broken)} power-cut state(s) read back {broken[:4]}\n"
                        f"operations:\n  {log(tap)}")


# --------------------------------------------------------------------------- whole turns


class Driver:
    """Turns through a backend the way the harness does (load history, open, check the tail, publish)."""

    def __init__(self, base: Path, agent) -> None:
        self.agent = agent
        self.store = FilesHistoryStore(base / "history")
        self.backend = DurableSessionBackend(self.store, base / "sessions", 0)
        self.marks: dict[str, int] = {}

    async def turn(self, text: str, *, tap: FileSystemTap | None = None, meddle: Callable[[], object] | None = None):
        """One turn; returns (warm?, session boundaries, what the provider is sent, history before the turn)."""
        events: list = []
        session_info = SessionInfo(delivery="request", mode="continuous", logical_conversation_id="c1", conversation_id="c1")
        turn = TurnRun(agent=self.agent, request=TurnRequest(text=text, conversation_id="c1"), run_id="run", model=MODEL,
                       session=session_info, emitter=lambda kind, data: events.append((kind, data)))
        turn.history = tuple(await self.store.load("c1"))
        opened = await self.backend.open(turn.view)
        if opened.history is not None:
            turn.history = opened.history
        if tap is not None:
            self.marks["fenced"] = len(tap.operations)
        bounds = [opened.boundary] if opened.boundary is not None else []
        session = opened.session
        if session is not None and session.history_tail != history_tail(turn.history):
            await self.backend.retire(turn.view, "history_changed")
            bounds.append(("cold", "history_changed"))
            session = None
        sent = [m.content for m in (session.transcript if session is not None else turn.history)]
        user, answer = Message("user", text), Message("assistant", f"answer to {text}")
        appended = [user, answer]
        if session is None:
            session = WarmSession.start("c1", MODEL)
            appended[:0] = turn.history
        session.history_tail = history_tail([*turn.history, user, answer])
        if meddle is not None:
            await meddle()

        async def commit(state):
            return await self.store.commit("c1", [user, answer], provider_session=state)

        await self.backend.publish(turn.view, session, appended, commit)
        return opened.session is not None, bounds, sent, [m.content for m in turn.history]

    async def close(self) -> None:
        await self.backend.close()
        await self.store.close()


def probe(root: Path, agent) -> tuple[bool, list, list[str], list[str]]:
    """The next turn, by a new process, on a crash state."""
    async def go():
        driver = Driver(root, agent)
        try:
            return await driver.turn("probe")
        finally:
            await driver.close()

    return asyncio.run(go())


def record_turn(tmp_path: Path, before: int, **turn) -> tuple[FileSystemTap, Driver, object]:
    base = tmp_path / "base"
    agent = fresh_agent(tmp_path, config={"runtime": {"model": MODEL}})

    async def go():
        driver = Driver(base, agent)
        for i in range(before):
            await driver.turn(f"t{i}")
        await driver.close()
        driver = Driver(base, agent)
        await driver.store.load("c1")  # the store's directories exist before the recording
        driver.backend.files.ensure()
        with FileSystemTap(base) as tap:
            await driver.turn(f"t{before}", tap=tap, **turn)
        await driver.close()
        return tap, driver

    tap, driver = asyncio.run(go())
    return tap, driver, agent


def judge_turns(tmp_path: Path, tap: FileSystemTap, driver: Driver, agent, recorded: str, *,
                committed_warm: bool = True) -> list[str]:
    """The broken promises of the crash states of a recorded turn (``recorded`` is its text)."""
    problems = []
    fenced, final = driver.marks["fenced"], len(tap.operations)
    shutil.copytree(tmp_path / "base", tmp_path / "final")
    expected_after = probe(tmp_path / "final", agent)
    for k, root in states(tap, tmp_path / "states"):
        where = f"after operation {k} of {final}"
        try:
            warm, bounds, sent, history = probe(root, agent)
        except Exception as exc:  # any error on a crash state is a broken promise, reported with its message
            problems.append(f"{where}: {type(exc).__name__}: {exc}")
            continue
        if sent != history:
            problems.append(f"{where}: the provider is sent {sent[-4:]}, not the history {history[-4:]}")
        elif k == final and (warm, bounds, sent) != expected_after[:3]:
            problems.append(f"{where} (the turn returned): the next turn is warm={warm} with boundaries {bounds}, not "
                            f"warm={expected_after[0]} with {expected_after[1]} as without the power cut")
        elif recorded in history and committed_warm and (not warm or bounds):
            problems.append(f"{where}: the record holds the turn but the next one is not resumed (boundaries {bounds})")
        elif recorded not in history and k >= fenced and bounds != [("cold", "dirty_fence")]:
            problems.append(f"{where}: the turn was cut off after its fence was written, but the next one reports {bounds}, "
                            f"not cold/dirty_fence")
    return problems


@pytest.mark.parametrize("before", [0, 2], ids=["first turn", "third turn"])
def test_a_turn_cut_off_by_a_power_cut_is_resumed_once_committed_and_fenced_before(tmp_path, before):
    tap, driver, agent = record_turn(tmp_path, before)
    problems = judge_turns(tmp_path, tap, driver, agent, f"t{before}")
    assert not problems, "\n".join(problems[:8]) + f"\noperations:\n  {log(tap)}"


def test_a_turn_committed_without_its_session_stays_so_through_a_power_cut(tmp_path):
    """A commit lands without the lock during the turn: the turn is committed unbound, its transcripts retired."""
    async def meddle():
        store = FilesHistoryStore(tmp_path / "base" / "history")
        try:
            await store.commit("c1", [Message("user", "host-only")])
        finally:
            await store.close()

    tap, driver, agent = record_turn(tmp_path, 2, meddle=meddle)
    problems = judge_turns(tmp_path, tap, driver, agent, "t2", committed_warm=False)
    assert not problems, "\n".join(problems[:8]) + f"\noperations:\n  {log(tap)}"


def test_sessions_cleared_stay_cleared_through_a_power_cut(tmp_path):
    base = tmp_path / "base"
    agent = fresh_agent(tmp_path, config={"runtime": {"model": MODEL}})

    async def go():
        driver = Driver(base, agent)
        for i in range(2):
            await driver.turn(f"t{i}")
        with FileSystemTap(base) as tap:
            report = await driver.backend.clear_all()
        await driver.close()
        return tap, report

    tap, report = asyncio.run(go())
    assert report.transcripts == 1
    shutil.copytree(base, tmp_path / "final")
    expected = probe(tmp_path / "final", agent)
    assert expected[:2] == (False, [("cold", "revision_mismatch")])
    broken = [found[:2] for _, root in states(tap, tmp_path / "states", only_final=True)
              if (found := probe(root, agent))[:3] != expected[:3]]
    assert not broken, f"after clear-sessions returned, the next turn went {broken[:4]}\noperations:\n  {log(tap)}"
