"""The SIGKILL harness of the durability contract: a writer process killed at a random moment.

A *zygote* interpreter (started once per test, with the parent's ``sys.path`` as ``PYTHONPATH``
so that it imports exactly the code under test, mutated modules included) imports the store's
factory, then forks one writer per round. A writer builds the store from the factory and commits
turns in a loop, writing ``begin i`` before and ``ack i`` after each commit on stdout. The
parent SIGKILLs it right after reading a chosen ``begin``; when the writer's last line is a
``begin`` without its ``ack``, the kill is known to have landed inside a commit (the
interleaving the test is about), which the contract counts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

ZYGOTE = textwrap.dedent(
    r"""
    import asyncio, importlib, os, sys
    from monoagent.kernel.model import Message

    module, _, attribute = sys.argv[1].partition(":")
    factory = getattr(importlib.import_module(module), attribute)

    async def write(directory, conversation, start):
        store = factory(directory)
        i = start
        while True:
            os.write(1, f"begin {i}\n".encode())
            await store.commit(conversation, [Message("user", f"u{i}"), Message("assistant", f"a{i}")])
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
        directory, conversation, start = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(write(directory, conversation, int(start)))
            except BaseException as exc:
                message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
                os.write(1, f"failed {message}\n".encode())
            os._exit(1)
        os.write(1, f"pid {pid}\n".encode())
        children.append(pid)
    """
)


class WriterZygote:
    """One interpreter that forks writers on request and reaps them (they are its children)."""

    def __init__(self, factory: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, factory], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
        )
        self.pending: list[str] = []

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            error = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"the writer process died before it could be killed: {error.strip()[-2000:]}")
        return line

    def start(self, directory: str, conversation: str, start: int) -> int:
        """Fork a writer committing turns ``start``, ``start + 1``, ... to ``conversation``; its pid."""
        self._send(f"{directory}\t{conversation}\t{start}")
        while not (line := self._line()).startswith("pid "):
            self.pending.append(line)
        return int(line.split()[1])

    def readline(self) -> str:
        line = self.pending.pop(0) if self.pending else self._line()
        if line.startswith("failed "):
            raise AssertionError(f"the writer process failed before it was killed: {line[7:].strip()}")
        return line

    def kill_after_begin(self, pid: int, nth: int) -> tuple[list[int], bool, int]:
        """SIGKILL ``pid`` right after its ``nth`` ``begin`` line (1-based).

        Returns (the acknowledged turn numbers, whether the kill landed inside a commit, the
        exit status the zygote reaped).
        """
        acked: list[int] = []
        begun = 0
        last = ""
        while begun < nth:
            last = self.readline()
            kind, number = last.split()
            if kind == "begin":
                begun += 1
            else:
                acked.append(int(number))
        os.kill(pid, signal.SIGKILL)
        self._send("wait")
        status = -1
        while (line := self.readline()) != "done\n":
            if line.startswith("exit "):
                status = int(line.split()[2])
                continue
            last = line
            kind, number = line.split()
            if kind == "ack":
                acked.append(int(number))
        return acked, last.startswith("begin "), status

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
