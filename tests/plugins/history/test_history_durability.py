"""Durability of the ``files`` store: SIGKILL, power loss (ALICE-style), faults, permissions, many processes.

* Crash: a zygote process imports the store once and forks one writer per round; the writer
  commits turns in a tight loop and acknowledges each on stdout; the test SIGKILLs it right after
  reading the k-th acknowledgement (k drawn at random), 100 times, then checks that every
  acknowledged turn is present and every record parses.
* Power loss: a recording :class:`FsOps` captures the publish protocol's operations; every
  on-disk state a power cut could leave (each prefix of the operations, with un-fsynced data
  writes lost or half-written and un-fsynced directory operations lost, in the manner of the
  ALICE study) is materialised and read back with a real store.
* Faults: the k-th I/O operation of a commit fails, for every k; a subprocess whose file-size
  limit (RLIMIT_FSIZE) is smaller than the record, as a disk that fills.
* Permissions: a forked child drops to ``nobody`` (root ignores directory modes).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message
from monoagent_plugins.history.directory import FsOps
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.records import record_name

KILLS = 100

ZYGOTE = textwrap.dedent(
    r"""
    import os, sys
    from monoagent._kernel.model import Message
    from monoagent_plugins.history.files import FilesHistoryStore

    def writer(root, conversation, start, count):
        store = FilesHistoryStore(root, max_messages=1_000_000)
        i = start
        while count < 0 or i < start + count:
            store._commit(conversation, [Message("user", f"u{i}"), Message("assistant", f"a{i}")])
            os.write(1, f"ack {conversation} {i}\n".encode())
            i += 1

    children = []
    for line in sys.stdin:
        if line.strip() == "wait":
            for pid in children:
                _, status = os.waitpid(pid, 0)
                os.write(1, f"exit {pid} {status}\n".encode())
            children = []
            os.write(1, b"done\n")
            continue
        root, conversation, start, count = line.split("\t")
        pid = os.fork()
        if pid == 0:
            try:
                writer(root, conversation, int(start), int(count))
                code = 0
            except BaseException as exc:
                os.write(2, f"writer failed: {type(exc).__name__}: {exc}\n".encode())
                code = 1
            os._exit(code)
        os.write(1, f"pid {pid}\n".encode())
        children.append(pid)
    """
)


class Zygote:
    """One interpreter that forks writers on request; ``wait`` reaps them (they are its children)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1,
        )
        self.pending: list[str] = []

    def _send(self, line: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _line(self) -> str:
        assert self.proc.stdout
        line = self.proc.stdout.readline()
        assert line, "the zygote died: " + (self.proc.stderr.read() if self.proc.stderr else "")
        return line

    def start(self, root: Path, conversation: str, start: int, count: int = -1) -> int:
        self._send(f"{root}\t{conversation}\t{start}\t{count}")
        while not (line := self._line()).startswith("pid "):
            self.pending.append(line)
        return int(line.split()[1])

    def readline(self) -> str:
        return self.pending.pop(0) if self.pending else self._line()

    def wait(self) -> tuple[list[str], dict[int, int]]:
        """Reap every writer: (acknowledgement lines read meanwhile, exit status by pid)."""
        self._send("wait")
        acks, statuses = [], {}
        while (line := self.readline()) != "done\n":
            if line.startswith("exit "):
                _, pid, status = line.split()
                statuses[int(pid)] = int(status)
            else:
                acks.append(line)
        return acks, statuses

    def close(self) -> str:
        _, err = self.proc.communicate(timeout=60)
        return err


def contents(root: Path, conversation: str) -> list[str]:
    return [m.content for m in asyncio.run(FilesHistoryStore(root, max_messages=1_000_000).load(conversation))]


def all_records_parse(root: Path) -> int:
    count = 0
    if not root.exists():
        return 0
    for path in root.iterdir():
        if path.name.endswith(".json"):
            data = json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))
            assert data["version"] == 2 and isinstance(data["messages"], list), path.name
            count += 1
    return count


# ---------------------------------------------------------------------------- SIGKILL


def test_sigkill_at_random_moments_never_loses_an_acknowledged_turn(tmp_path):
    root = tmp_path / "history"
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    zygote = Zygote()
    conversations = [f"crash-{n}" for n in range(4)]
    acked: dict[str, list[int]] = {c: [] for c in conversations}
    try:
        for round_ in range(KILLS):
            conversation = conversations[round_ % len(conversations)]
            present = contents(root, conversation)
            start = len(present) // 2
            k = rng.randint(0, 12)
            pid = zygote.start(root, conversation, start)
            for _ in range(k):
                line = zygote.readline().split()
                assert line[:2] == ["ack", conversation], (line, seed)
                acked[conversation].append(int(line[2]))
            os.kill(pid, signal.SIGKILL)
            late, statuses = zygote.wait()
            assert statuses == {pid: signal.SIGKILL}, (statuses, seed)
            acked[conversation] += [int(line.split()[2]) for line in late]
            stored = contents(root, conversation)
            indices = [int(t[1:]) for t in stored[::2]]
            assert stored == [x for i in indices for x in (f"u{i}", f"a{i}")], f"seed {seed}, round {round_}"
            assert indices[: len(acked[conversation])] == acked[conversation], f"acknowledged turn lost (seed {seed})"
            assert len(indices) <= len(acked[conversation]) + 1, f"only the in-flight turn may be unacknowledged (seed {seed})"
            acked[conversation] = indices
            assert all_records_parse(root) >= sum(1 for c in conversations if acked[c]), f"seed {seed}"
    finally:
        zygote.close()
    store = FilesHistoryStore(root)
    asyncio.run(store.commit("after", [Message("user", "x")]))
    assert not list((root / ".stages").iterdir()), "crash-abandoned stages are reclaimed"
    assert sum(len(v) for v in acked.values()) > 0


def test_several_processes_same_and_different_conversations_lose_nothing(tmp_path):
    root = tmp_path / "history"
    zygote = Zygote()
    turns, writers = 25, 4
    pids = []
    for w in range(writers):
        pids.append(zygote.start(root, "shared", w * 1000, turns))
        pids.append(zygote.start(root, f"own-{w}", 0, turns))
    _, statuses = zygote.wait()
    err = zygote.close()
    assert statuses == dict.fromkeys(pids, 0), err
    assert err == "", err
    shared = contents(root, "shared")
    assert len(shared) == 2 * turns * writers
    for w in range(writers):
        mine = [int(t[1:]) for t in shared[::2] if int(t[1:]) // 1000 == w]
        assert mine == [w * 1000 + i for i in range(turns)]
        assert contents(root, f"own-{w}") == [x for i in range(turns) for x in (f"u{i}", f"a{i}")]
    assert len(list((root / ".locks").iterdir())) <= 17, "a fixed table of lock files, not one per conversation"


# ---------------------------------------------------------------------------- power loss (ALICE-style)


class RecordingFs(FsOps):
    """Performs the operations and records them with inode numbers, for the crash-state model."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.ops: list[tuple] = []
        self._fds: dict[int, list[int]] = {}

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def open(self, path, flags, mode=0o600):
        existed = os.path.lexists(path)
        fd = super().open(path, flags, mode)
        ino = os.fstat(fd).st_ino
        self._fds[fd] = [ino, 0]
        if not existed:
            self.ops.append(("create", self._rel(path), ino))
        if flags & os.O_TRUNC:
            self.ops.append(("truncate", ino))
        return fd

    def write(self, fd, data):
        written = super().write(fd, data)
        ino, offset = self._fds[fd]
        self.ops.append(("write", ino, offset, bytes(data[:written])))
        self._fds[fd][1] += written
        return written

    def fsync(self, fd):
        super().fsync(fd)
        self.ops.append(("fsync", self._fds[fd][0]))

    def replace(self, src, dst):
        ino = os.lstat(src).st_ino
        super().replace(src, dst)
        self.ops.append(("rename", self._rel(src), self._rel(dst), ino))

    def unlink(self, path):
        super().unlink(path)
        self.ops.append(("unlink", self._rel(path)))

    def fsync_dir(self, path):
        super().fsync_dir(path)
        self.ops.append(("fsync_dir", self._rel(path)))


class NoFsyncBeforeRename(RecordingFs):
    """A broken protocol (no fsync of the data before the rename): the model must catch it."""

    def fsync(self, fd):
        pass


def _dir_of(op: tuple) -> str:
    path = op[2] if op[0] == "rename" else op[1]
    return os.path.dirname(path) or "."


def crash_states(initial: dict[str, bytes], ops: list[tuple]):
    """Yield (k, files) for every state a power cut after ``ops[:k]`` could leave.

    Durable: data writes followed (in the prefix) by an fsync of their inode, and directory
    operations followed by an fsync of their directory. Anything else may be lost; a lost-or-kept
    choice is made independently per operation (so later operations may persist while earlier
    ones do not), and a kept data write may be only half persisted.
    """
    init_ino = {name: -(n + 1) for n, name in enumerate(initial)}
    for k in range(len(ops) + 1):
        prefix = ops[:k]
        last_fsync: dict[int, int] = {}
        last_dsync: dict[str, int] = {}
        for i, op in enumerate(prefix):
            if op[0] == "fsync":
                last_fsync[op[1]] = i
            elif op[0] == "fsync_dir":
                last_dsync[op[1]] = i
        optional = []
        for i, op in enumerate(prefix):
            if (op[0] in ("write", "truncate") and last_fsync.get(op[1], -1) < i) or (
                op[0] in ("create", "rename", "unlink") and last_dsync.get(_dir_of(op), -1) < i
            ):
                optional.append(i)
        choices_per_op = [("drop", "keep", "half") if prefix[i][0] == "write" else ("drop", "keep") for i in optional]
        for choice in itertools.product(*choices_per_op):
            chosen = dict(zip(optional, choice, strict=True))
            names = dict(init_ino)
            data: dict[int, bytearray] = {init_ino[n]: bytearray(c) for n, c in initial.items()}
            for i, op in enumerate(prefix):
                mode = chosen.get(i, "keep")
                if mode == "drop" or op[0] in ("fsync", "fsync_dir"):
                    continue
                if op[0] == "create":
                    names[op[1]] = op[2]
                    data.setdefault(op[2], bytearray())
                elif op[0] == "truncate":
                    data[op[1]] = bytearray()
                elif op[0] == "write":
                    _, ino, offset, payload = op
                    if mode == "half":
                        payload = payload[: len(payload) // 2]
                    buffer = data.setdefault(ino, bytearray())
                    buffer[offset: offset + len(payload)] = payload
                elif op[0] == "rename":
                    _, src, dst, ino = op
                    if names.get(src) == ino:
                        del names[src]
                    names[dst] = ino
                    data.setdefault(ino, bytearray())
                elif op[0] == "unlink":
                    names.pop(op[1], None)
            yield k, {name: bytes(data.get(ino, b"")) for name, ino in names.items()}


def materialise(files: dict[str, bytes], into: Path) -> Path:
    root = into / "history"
    for sub in (root, root / ".stages", root / ".locks"):
        sub.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, content in files.items():
        fd = os.open(root / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, content)
        os.close(fd)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts}


def check_publish(tmp_path: Path, fs_class: type[RecordingFs], turns_before: int) -> list[str]:
    """Violations over every crash state of one commit on top of ``turns_before`` committed turns."""
    base = tmp_path / "base"
    store = FilesHistoryStore(base / "history")
    for i in range(turns_before):
        asyncio.run(store.commit("c", [Message("user", f"u{i}", timestamp=1.0), Message("assistant", f"a{i}", timestamp=1.0)]))
    initial = snapshot(base / "history")
    recording = fs_class(base / "history")
    store.fs = recording
    asyncio.run(store.commit("c", [Message("user", "new", timestamp=1.0), Message("assistant", "turn", timestamp=1.0)]))
    old = [x for i in range(turns_before) for x in (f"u{i}", f"a{i}")]
    new = old + ["new", "turn"]
    acked_at = max(i for i, op in enumerate(recording.ops) if op[0] == "fsync_dir") + 1
    problems = []
    for n, (k, files) in enumerate(crash_states(initial, recording.ops)):
        root = materialise(files, tmp_path / f"state-{n}")
        try:
            seen = [m.content for m in asyncio.run(FilesHistoryStore(root).load("c", on_warning=lambda *a: problems.append(f"k={k}: unreadable record {a[0]}")))]  # noqa: B023  (called in this iteration)
        except HistoryStoreError as exc:
            problems.append(f"k={k}: {exc}")
            continue
        finally:
            shutil.rmtree(tmp_path / f"state-{n}")
        allowed = [new] if k >= acked_at else [old, new]
        if seen not in allowed:
            problems.append(f"k={k}: history {seen} is neither the old nor the new record")
    assert any(op[0] == "rename" for op in recording.ops)
    return problems


@pytest.mark.parametrize("turns_before", [0, 1, 5])
def test_every_power_cut_state_holds_the_old_or_the_new_record(tmp_path, turns_before):
    assert check_publish(tmp_path, RecordingFs, turns_before) == []


def test_the_power_cut_model_catches_a_protocol_without_fsync(tmp_path):
    problems = check_publish(tmp_path, NoFsyncBeforeRename, 1)
    assert problems and any("unreadable" in p or "neither" in p for p in problems)


def test_every_power_cut_state_of_a_logical_reset_is_all_or_nothing(tmp_path):
    base = tmp_path / "base"
    store = FilesHistoryStore(base / "history")
    buckets = ["s:2025-01-01", "s:2025-01-02", "s:2025-01-03"]
    for cid in buckets + ["other"]:
        asyncio.run(store.commit(cid, [Message("user", cid, timestamp=1.0)]))
    initial = snapshot(base / "history")
    recording = RecordingFs(base / "history")
    store.fs = recording
    asyncio.run(store.reset_logical("s"))
    acked_at = len(recording.ops)
    for n, (k, files) in enumerate(crash_states(initial, recording.ops)):
        root = materialise(files, tmp_path / f"state-{n}")
        reader = FilesHistoryStore(root)
        seen = [len(asyncio.run(reader.load(cid))) for cid in buckets]
        assert seen in ([1, 1, 1], [0, 0, 0]), (k, seen)
        if k >= acked_at:
            assert seen == [0, 0, 0]
        assert [m.content for m in asyncio.run(reader.load("other"))] == ["other"]
        asyncio.run(reader.commit("s:2025-01-02", [Message("user", "after")]))
        after = [len(asyncio.run(FilesHistoryStore(root).load(cid))) for cid in buckets]
        assert after in ([1, 2, 1], [0, 1, 0]), (k, after)
        shutil.rmtree(tmp_path / f"state-{n}")


# ---------------------------------------------------------------------------- faults


class FailAt(FsOps):
    """Fails the k-th file-system operation (0-based) with EIO; counts operations otherwise."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.calls = 0

    def _tick(self, name: str) -> None:
        n, self.calls = self.calls, self.calls + 1
        if n == self.k:
            raise OSError(5, f"Input/output error (injected at operation {n}: {name})")

    def open(self, path, flags, mode=0o600):
        self._tick("open")
        return super().open(path, flags, mode)

    def write(self, fd, data):
        self._tick("write")
        return super().write(fd, data)

    def fsync(self, fd):
        self._tick("fsync")
        super().fsync(fd)

    def set_mtime(self, fd, ns):
        self._tick("set_mtime")
        super().set_mtime(fd, ns)

    def replace(self, src, dst):
        self._tick("replace")
        super().replace(src, dst)

    def unlink(self, path):
        self._tick("unlink")
        super().unlink(path)

    def fsync_dir(self, path):
        self._tick("fsync_dir")
        super().fsync_dir(path)


def test_a_failure_at_each_io_operation_is_clear_and_keeps_the_record(tmp_path):
    counting = FailAt(-1)
    probe = FilesHistoryStore(tmp_path / "probe", fs=counting)
    asyncio.run(probe.commit("c", [Message("user", "u0")]))
    counting.calls = 0
    asyncio.run(probe.commit("c", [Message("user", "u1")]))
    total = counting.calls
    assert total >= 5
    for k in range(total):
        root = tmp_path / f"k{k}" / "history"
        asyncio.run(FilesHistoryStore(root).commit("c", [Message("user", "u0")]))
        store = FilesHistoryStore(root, fs=FailAt(k))
        with pytest.raises(HistoryStoreError) as info:
            asyncio.run(store.commit("c", [Message("user", "u1")]))
        message = str(info.value)
        assert "conversation 'c'" in message and "Input/output error" in message, message
        seen = [m.content for m in asyncio.run(FilesHistoryStore(root).load("c"))]
        assert seen in (["u0"], ["u0", "u1"]), (k, seen)
        if seen == ["u0", "u1"]:
            assert "may not survive a power cut" in message
        else:
            assert "intact" in message
        assert not list((root / ".stages").iterdir()), f"operation {k}: the failed stage is removed or reclaimed"
        asyncio.run(FilesHistoryStore(root).commit("c", [Message("user", "u2")]))
        assert [m.content for m in asyncio.run(FilesHistoryStore(root).load("c"))][-1] == "u2"


DISK_FULL = textwrap.dedent(
    r"""
    import asyncio, json, resource, signal, sys
    from monoagent._kernel.model import Message
    from monoagent_plugins.history.files import FilesHistoryStore
    store = FilesHistoryStore(sys.argv[1])
    asyncio.run(store.commit("c", [Message("user", "small"), Message("assistant", "ok")]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    try:
        asyncio.run(store.commit("c", [Message("user", "x" * 20000)]))
    except Exception as exc:
        print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
    else:
        print(json.dumps({"type": None}))
    """
)


def test_a_full_disk_is_a_clear_error_and_keeps_the_record(tmp_path):
    root = tmp_path / "history"
    proc = subprocess.run([sys.executable, "-c", DISK_FULL, str(root)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["type"] == "HistoryWriteError", outcome
    assert "File too large" in outcome["message"] and "previously committed history is intact" in outcome["message"]
    assert [m.content for m in asyncio.run(FilesHistoryStore(root).load("c"))] == ["small", "ok"]
    assert not list((root / ".stages").iterdir())


# ---------------------------------------------------------------------------- permissions as an unprivileged user

NOBODY = 65534


def _as_nobody(check) -> dict:
    """Run ``check()`` in a forked child that has dropped to uid/gid 65534; returns its JSON result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = check()
        except BaseException as exc:  # reported to the parent, which fails the test with it
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


@pytest.fixture
def nobody_dir():
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root; as a normal user the other tests already run unprivileged")
    outer = Path(tempfile.mkdtemp(prefix="monoagent-perm-"))
    outer.chmod(0o755)
    inner = outer / "home"
    inner.mkdir()
    os.chown(inner, NOBODY, NOBODY)
    yield inner
    shutil.rmtree(outer)


def test_modes_as_an_unprivileged_user(nobody_dir):
    def check():
        found = {}
        for umask in (0o000, 0o077):
            os.umask(umask)
            root = nobody_dir / f"history-{umask:o}"
            store = FilesHistoryStore(root)
            asyncio.run(store.commit("c", [Message("user", "x")]))
            found[f"{umask:o}"] = sorted(
                (str(p.relative_to(root)), oct(stat.S_IMODE(p.lstat().st_mode)), p.lstat().st_uid)
                for p in [root, *root.rglob("*")]
            )
        return found

    result = _as_nobody(check)
    assert "error" not in result, result
    for umask, entries in result.items():
        for name, mode, uid in entries:
            assert uid == NOBODY
            assert mode == ("0o700" if name in (".", ".stages", ".locks") else "0o600"), (umask, name, mode)


def test_foreign_files_and_directories_are_refused_as_an_unprivileged_user(nobody_dir):
    root = nobody_dir / "history"
    root.mkdir(mode=0o700)
    os.chown(root, NOBODY, NOBODY)
    for sub in (".stages", ".locks"):
        (root / sub).mkdir(mode=0o700)
        os.chown(root / sub, NOBODY, NOBODY)
    planted = root / record_name("c")
    planted.write_text(json.dumps({"version": 2, "conversationId": "c", "updatedAt": 0, "messages": []}))
    planted.chmod(0o644)
    foreign = nobody_dir / "roots-history"
    asyncio.run(FilesHistoryStore(foreign).commit("secret", [Message("user", "private")]))
    os.chmod(nobody_dir, 0o777)

    def check():
        out = {}
        try:
            asyncio.run(FilesHistoryStore(root).load("c"))
            out["planted"] = "accepted"
        except HistoryStoreError as exc:
            out["planted"] = str(exc)
        try:
            asyncio.run(FilesHistoryStore(foreign).load("secret"))
            out["foreign"] = "read"
        except (HistoryStoreError, PermissionError) as exc:
            out["foreign"] = f"{type(exc).__name__}: {exc}"
        try:
            (foreign / record_name("secret")).read_bytes()
            out["raw"] = "read"
        except PermissionError:
            out["raw"] = "denied"
        return out

    result = _as_nobody(check)
    assert "belongs to uid 0" in result["planted"]
    assert "belongs to uid 0" in result["foreign"] or "PermissionError" in result["foreign"]
    assert result["raw"] == "denied", "the 0700 directory keeps other users out"


# ---------------------------------------------------------------------------- locks

HOLD_LOCK = textwrap.dedent(
    r"""
    import fcntl, os, sys, signal
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    signal.pause()
    """
)


def _shard_of(conversation_id: str) -> str:
    return f"shard-{int(record_name(conversation_id)[:8], 16) % 16:02d}.lock"


def test_a_dead_lock_owner_is_recovered_at_once_and_other_shards_never_wait(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path / "history"
    store = FilesHistoryStore(root)
    asyncio.run(store.commit("mine", [Message("user", "before")]))
    other = next(c for c in (f"other-{i}" for i in range(100)) if _shard_of(c) != _shard_of("mine"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(root / ".locks" / _shard_of("mine"))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout and holder.stdout.readline() == "locked\n"
        with ThreadPoolExecutor(2) as pool:
            blocked = pool.submit(store._commit, "mine", [Message("user", "after")])
            free = pool.submit(FilesHistoryStore(root)._commit, other, [Message("user", "unrelated")])
            assert free.result(timeout=30).message_count == 1, "another shard does not wait for a held lock"
            assert not blocked.done()
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            assert blocked.result(timeout=30).message_count == 2, "the dead owner's lock is released by the kernel"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert [m.content for m in asyncio.run(FilesHistoryStore(root).load("mine"))] == ["before", "after"]
