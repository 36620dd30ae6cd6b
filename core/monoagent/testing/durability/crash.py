"""The SIGKILL harness of the durability contract: a writer process killed at a random moment.

A *zygote* interpreter (started once per test, with the parent's ``sys.path`` as ``PYTHONPATH``
so that it imports exactly the code under test, mutated modules included) imports the store's
factory, then forks one writer per round. A writer builds the store from the factory and commits
turns in a loop, writing ``begin i`` before and ``ack i`` after each commit on stdout, and after
a chosen number of commits arms a timer that SIGKILLs it a chosen fraction of its mean commit
time later (the parent draws both from its seed): a kill point, not synchronisation, as nothing
waits for the writer to reach a state. When the writer's last line is a ``begin`` without its
``ack``, the kill is known to have landed inside a commit (the interleaving the test is about),
which the contract counts.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

ZYGOTE = textwrap.dedent(
    r"""
    import asyncio, importlib, os, signal, sys, threading, time
    from monoagent._kernel.model import Message

    module, _, attribute = sys.argv[1].partition(":")
    factory = getattr(importlib.import_module(module), attribute)

    async def write(directory, conversation, start, turns, fraction):
        store = factory(directory)
        i, spent = start, 0.0
        while True:
            if i == start + turns:
                delay = fraction * spent / turns
                threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
            os.write(1, f"begin {i}\n".encode())
            began = time.monotonic()
            await store.commit(conversation, [Message("user", f"u{i}"), Message("assistant", f"a{i}")])
            spent += time.monotonic() - began
            os.write(1, f"ack {i}\n".encode())
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
        directory, conversation, start, turns, fraction = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(write(directory, conversation, int(start), int(turns), float(fraction)))
            except BaseException as exc:
                message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
                os.write(1, f"failed {message}\n".encode())
            os._exit(1)
        os.write(1, f"pid {pid}\n".encode())
        children.append(pid)
    """
)


def same_code_env() -> dict[str, str]:
    """The environment of a child interpreter that imports exactly the code this one does (mutated modules
    included): this process's ``sys.path`` as ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    return env


class WriterZygote:
    """One interpreter that forks writers on request and reaps them (they are its children)."""

    def __init__(self, factory: str, *, deadline: float = 120.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, factory], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=same_code_env(),
        )
        self.deadline = deadline
        self.pending: list[str] = []
        self._buffer = b""

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def _line(self) -> str:
        """The next line of output, waiting at most :attr:`deadline` seconds for it (a bound, so a hung commit fails)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ends = time.monotonic() + self.deadline
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, ends - time.monotonic()))
            if not ready:
                raise AssertionError(
                    f"the writer process printed nothing for {self.deadline:.0f} s: a commit hangs (a lock that a killed "
                    f"writer never released?)"
                )
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.kill()
                error = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise AssertionError(f"the writer process died before it could be killed: {error.strip()[-2000:]}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace") + "\n"

    def start(self, directory: str, conversation: str, start: int, turns: int, fraction: float) -> int:
        """Fork a writer committing turns ``start``, ``start + 1``, ... to ``conversation``; its pid.

        After ``turns`` commits (``turns`` >= 1) the writer arms a timer that SIGKILLs it
        ``fraction`` of its mean commit time later, so the kill lands at that point of the next
        commit (early, mid-stage, after the publication) whatever the machine's speed.
        """
        self._send(f"{directory}\t{conversation}\t{start}\t{turns}\t{fraction!r}")
        while not (line := self._line()).startswith("pid "):
            self.pending.append(line)
        return int(line.split()[1])

    def readline(self) -> str:
        line = self.pending.pop(0) if self.pending else self._line()
        if line.startswith("failed "):
            raise AssertionError(f"the writer process failed before it was killed: {line[7:].strip()}")
        return line

    def reap(self, pid: int) -> tuple[list[int], bool, int]:
        """Wait for the writer ``pid`` to be killed; (its acknowledged turns, whether it died inside a commit, its status).

        It died inside a commit when its last line is a ``begin`` without the ``ack``. Should
        the writer outlive the wait for its output, it is killed here, so it never outlives the test.
        """
        acked: list[int] = []
        last = ""
        status = -1
        try:
            self._send("wait")
            while (line := self.readline()) != "done\n":
                if line.startswith("exit "):
                    status = int(line.split()[2])
                elif (step := _step(line)) is not None:
                    last = line
                    if step[0] == "ack":
                        acked.append(step[1])
        finally:
            if status == -1:
                os.kill(pid, signal.SIGKILL)
        return acked, last.startswith("begin "), status

    def close(self) -> None:
        """End the zygote (closing its input ends its loop); kill it if it does not end."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=self.deadline)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


def _step(line: str) -> tuple[str, int] | None:
    """``("begin" | "ack", turn)`` for a line of the writer protocol; None for anything else the store printed."""
    kind, _, number = line.strip().partition(" ")
    if kind in ("begin", "ack") and number.isdigit():
        return kind, int(number)
    return None
