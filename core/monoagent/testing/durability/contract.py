"""The durability contract: an acknowledged commit survives a crash and a power cut; a torn one leaves the previous record.

:class:`~monoagent._kernel.stores.HistoryStore` promises that after ``commit`` returns the
turn survives a crash, and that when it raises the previously committed record is intact. A store
that claims it (a :class:`~monoagent._kernel.stores.DurableHistoryStore` whose ``durable`` is
``True``) proves it here, in its own tests::

    from monoagent.testing import HistoryDurabilityContract

    class TestMyStoreDurability(HistoryDurabilityContract):
        store_factory = "my_plugin.store:open_store"  # open_store(directory) -> the store

``store_factory`` names an importable ``module:function`` called with a directory (a ``str``):
two calls with the same directory are two handles on the same stored data, and a file-based store
keeps all its files under it. The contract calls it in this process and in forked writer
processes, which is why it is a name and not a callable. Four things are proven:

1. **A process crash** (:mod:`.crash`): a writer process commits turns in a loop and is
   SIGKILLed at a random moment, :attr:`crash_rounds` times (seeded; the seed is in every failure
   message); every acknowledged turn must be there, in order, at most the one in-flight turn more,
   and every record must load; a store with ``stats()`` counts no stage of a dead writer as live
   once it has committed again. At least one kill must be seen to land inside a commit.
2. **A power cut** (:mod:`.filesystem`): the file operations of one commit are recorded at the
   Python level and every state a power cut could leave (un-fsynced writes lost or half written,
   un-fsynced directory entries lost) is rebuilt in a copy of the directory and opened with a real
   store: each state at the acknowledgement holds the new turn, each earlier state the previous
   record or the new one, never an error, garbage or a lost history; and the store takes the next
   commit on it.
3. **A failed I/O operation**: the k-th mutating file operation of a commit fails with ``EIO``,
   for every k: ``commit`` raises :class:`~monoagent._kernel.errors.HistoryStoreError` whose
   message states the operating system's error (a failed unlink alone may be ignored), the stored
   history is the previous record or the new one, and the next commit succeeds. Then the same with
   every operation from the k-th on failing (a disk gone bad, so the clean-up fails too), on a new
   conversation and on one with history.
4. **Another process** (:mod:`.handoff`): a fresh interpreter loads exactly what this process
   committed (every field a history message keeps, hostile ids) and extends it; this process, and
   a second fresh interpreter, read back both exactly. A store whose parser is set up once per
   process is tested as a new process sets it up.

2 and 3 need the store's I/O to go through Python's ``os`` functions or ``open()``; when a commit
shows none (a store that writes in C, such as sqlite3, or to a server) they are skipped, saying
so: such a store's crash safety is proven by 1 alone, and its power-cut safety is its engine's
configuration (for SQLite, ``PRAGMA synchronous=FULL`` in rollback-journal or WAL mode:
``synchronous=NORMAL`` in WAL mode survives a process crash but may lose the last commits on a
power cut, so it does not make a store durable in this sense).
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import os
import random
import shutil
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message, ToolCall
from monoagent._kernel.stores import DurableHistoryStore, HistoryStore, ManagedHistoryStore
from monoagent.testing.durability.crash import WriterZygote
from monoagent.testing.durability.filesystem import FileSystemTap, available, crash_states, materialise
from monoagent.testing.durability.handoff import load_and_extend

_T = TypeVar("_T")

__all__ = ["HistoryDurabilityContract"]


def turn(index: int) -> list[Message]:
    """Turn ``index``: ``u<index>`` and ``a<index>``, so a history shows which turns it holds."""
    return [Message("user", f"u{index}"), Message("assistant", f"a{index}")]


def turns(count: int) -> list[str]:
    return [text for i in range(count) for text in (f"u{i}", f"a{i}")]


def rich_turn(index: int) -> list[Message]:
    """Turn ``index`` with every field a history message keeps, and text that JSON must escape."""
    text = f'turn {index}: "]}}, {{\\ \n\t\x00 ünï 🎉 \ud800'
    call = ToolCall(f"call-{index}", "search", {"query": text, "nested": [1, 2.5, None, True, {"]": [index]}]})
    stamp = 1_700_000_000.25 + index
    return [
        Message("user", text, name=f'Al"ice {index}', timestamp=stamp),
        Message("assistant", "", tool_calls=(call,), timestamp=stamp),
        Message("tool", f"result {index}", name="search", tool_call_id=call.id, is_error=index % 2 == 1, timestamp=stamp),
        Message("assistant", text[::-1], timestamp=stamp),
    ]


class HistoryDurabilityContract:
    """Subclass with a ``Test`` name and set :attr:`store_factory`; pytest collects the rest."""

    store_factory: str = ""
    """``"module:function"``: ``function(directory: str)`` returns a store keeping its data under ``directory``."""

    crash_rounds = 12
    """SIGKILL rounds (each forks a writer, kills it and reopens the store)."""

    crash_seed: int | None = None
    """Seed of the kill points; None draws one per run (it is reported in every failure)."""

    states_per_prefix = 256
    """Power-cut states tried per prefix of a commit's operations before sampling (seeded) instead."""

    # ------------------------------------------------------------------ what a store provides

    def make_store(self, directory: Path) -> HistoryStore:
        """A store on ``directory``, from :attr:`store_factory` (override to build it another way in this process)."""
        module, _, attribute = self.store_factory.partition(":")
        if not module or not attribute:
            raise TypeError(
                f"{type(self).__name__}.store_factory must name an importable 'module:function' taking a directory, "
                f"not {self.store_factory!r}"
            )
        store: HistoryStore = getattr(importlib.import_module(module), attribute)(str(directory))
        return store

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def run(coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run(coroutine)

    def durable_store(self, directory: Path) -> HistoryStore:
        """A store on ``directory``, or a skip naming :class:`DurableHistoryStore` when it does not claim durability."""
        store = self.make_store(directory)
        if not (isinstance(store, DurableHistoryStore) and store.durable is True):
            import pytest

            claim = f"durable = {store.durable!r}" if isinstance(store, DurableHistoryStore) else "no durable attribute"
            self.run(store.close())
            pytest.skip(f"needs a store that implements DurableHistoryStore with durable = True; this store has {claim}")
        return store

    def contents(self, directory: Path, conversation_id: str = "c") -> list[str]:
        """What a fresh store on ``directory`` loads for ``conversation_id``, after closing it."""
        store = self.make_store(directory)
        try:
            return [m.content for m in self.run(store.load(conversation_id))]
        finally:
            self.run(store.close())

    def commit(self, store: HistoryStore, indices: Sequence[int], conversation_id: str = "c") -> None:
        async def go() -> None:
            for i in indices:
                await store.commit(conversation_id, turn(i))

        self.run(go())

    def tapped_commit(self, directory: Path, before: int, **tap: Any) -> tuple[FileSystemTap, BaseException | None]:
        """Commit turn ``before`` on top of turns ``0 .. before-1`` under a :class:`FileSystemTap`."""
        store = self.durable_store(directory)
        self.commit(store, range(before))
        error: BaseException | None = None
        with FileSystemTap(directory, **tap) as recorder:
            try:
                self.commit(store, [before])
            except Exception as exc:  # judged by the caller, which knows which errors are allowed
                error = exc
        self.run(store.close())
        return recorder, error

    def require_python_io(self, recorder: FileSystemTap) -> None:
        if not recorder.operations and not recorder.mutations:
            import pytest

            pytest.skip(
                "the file-system layer observed no file operation during a commit: this store does its I/O outside "
                "Python's os functions and open() (in C, like sqlite3, or on a server), so the power-cut and I/O-fault "
                "tests cannot see it; its crash safety is proven by test_durability_sigkill_*, and its power-cut "
                "safety is its engine's configuration (SQLite: PRAGMA synchronous=FULL; see docs/testing.md)"
            )

    # ------------------------------------------------------------------ 1. process crash

    def test_durability_sigkill_never_loses_an_acknowledged_turn(self, tmp_path: Path) -> None:
        directory = tmp_path / "store"
        self.run(self.durable_store(directory).close())
        if not self.store_factory:
            import pytest

            pytest.skip("needs store_factory ('module:function') so that a writer process can build the store")
        seed = self.crash_seed if self.crash_seed is not None else random.randrange(1 << 30)
        rng = random.Random(seed)
        conversations = ("crash-a", "crash-b", "crash-c")
        stored = dict.fromkeys(conversations, 0)
        inside_commit = 0
        zygote = WriterZygote(self.store_factory)
        try:
            for round_ in range(self.crash_rounds):
                conversation = conversations[round_ % len(conversations)]
                start = stored[conversation]
                where = f"(seed {seed}, round {round_}, conversation {conversation!r})"
                pid = zygote.start(str(directory), conversation, start, rng.randint(1, 4), rng.random())
                acked, inside, status = zygote.reap(pid)
                assert status == 9, f"the writer was not killed by SIGKILL but ended with status {status} {where}"
                inside_commit += inside
                loaded = self.contents(directory, conversation)
                numbers = [int(text[1:]) for text in loaded[::2]]
                held = numbers[-1] + 1 if numbers else 0
                assert loaded == turns(held)[max(0, 2 * held - len(loaded)):] and held >= start, (
                    f"after a SIGKILL the history is not whole turns in order, the newest last {where}: {loaded[-6:]}"
                )
                last_acked = acked[-1] + 1 if acked else start
                assert held >= last_acked, (
                    f"an acknowledged turn was lost: turn {last_acked - 1} was acknowledged, the newest stored is {held - 1} {where}"
                )
                assert held <= last_acked + 1, f"the store holds turns nobody committed: {held} > {last_acked + 1} {where}"
                stored[conversation] = held
        finally:
            zygote.close()
        store = self.make_store(directory)
        listed = {info.conversation_id: info.message_count for info in self.run(store.conversations())}
        loads = {c: len(self.run(store.load(c))) for c in conversations if stored[c]}
        self.commit(store, [stored["crash-a"]], "crash-a")
        stages = self.run(store.stats()).stages if isinstance(store, ManagedHistoryStore) else 0
        self.run(store.close())
        assert listed == loads, f"conversations() lists every record with the messages load returns (seed {seed})"
        assert self.contents(directory, "crash-a")[-2:] == turns(stored["crash-a"] + 1)[-2:], (
            f"a commit after the crashes lands (seed {seed})"
        )
        assert stages == 0, (
            f"stats() counts {stages} live unpublished stage(s) after the killed writers' turns and a later commit: "
            f"a dead writer's stage is not live, it is reclaimed (seed {seed})"
        )
        assert inside_commit, (
            f"no kill of {self.crash_rounds} landed inside a commit (each writer's last line was an acknowledgement), "
            f"so the crash mid-commit was never exercised; raise crash_rounds (seed {seed})"
        )

    # ------------------------------------------------------------------ 2. power cut

    def test_durability_power_cut_keeps_the_acknowledged_turn_or_the_previous_record(self, tmp_path: Path) -> None:
        if not available():
            import pytest

            pytest.skip("the file-system layer needs /proc/self/fd (Linux)")
        for before in (0, 2):
            recorder, error = self.tapped_commit(tmp_path / f"base-{before}", before)
            self.require_python_io(recorder)
            assert error is None, f"the recorded commit failed: {error!r}"
            problems = self.power_cut_violations(tmp_path / f"states-{before}", recorder, before)
            log = "\n  ".join(op.describe() for op in recorder.operations)
            assert not problems, (
                f"{len(problems)} power-cut state(s) of a commit on {before} turn(s) break durability:\n  "
                + "\n  ".join(problems[:8]) + f"\noperations of the commit:\n  {log}"
            )

    def power_cut_violations(self, scratch: Path, recorder: FileSystemTap, before: int) -> list[str]:
        """How the states a power cut during the recorded commit could leave break durability (empty: none)."""
        old, new = turns(before), turns(before + 1)
        problems: list[str] = []
        acknowledged = len(recorder.operations)
        rng = random.Random(before)
        tried: set[tuple[bool, frozenset[tuple[str, bytes]]]] = set()
        for n, (k, files) in enumerate(crash_states(recorder.initial, recorder.operations,
                                                    per_prefix=self.states_per_prefix, rng=rng)):
            state = (k == acknowledged, frozenset((name, content) for name, (content, _) in files.items()))
            if state in tried:
                continue
            tried.add(state)
            root = materialise(files, recorder.modes, recorder.directories, scratch / f"state-{n}")
            after = "after the acknowledgement" if k == acknowledged else f"after operation {k} of {acknowledged}"
            try:
                seen, extended = self.run(self._reopen_and_extend(root, before + 1))
                allowed = [new] if k == acknowledged else [old, new]
                if seen not in allowed:
                    lost = "the acknowledged turn is lost" if k == acknowledged else "neither the previous record nor the new one"
                    problems.append(f"{after}: {lost}: the store holds {seen[-4:]} ({len(seen)} messages)")
                elif extended != seen + [f"u{before + 1}", f"a{before + 1}"]:
                    problems.append(f"{after}: the next commit does not land on the surviving history: {extended[-4:]}")
            except Exception as exc:  # any error opening a crash state is a violation to report, with its message
                problems.append(f"{after}: {type(exc).__name__}: {exc}")
            finally:
                shutil.rmtree(root)
        return problems

    async def _reopen_and_extend(self, root: Path, index: int) -> tuple[list[str], list[str]]:
        """(what a store reopened on ``root`` loads, what it loads after committing turn ``index``)."""
        store = self.make_store(root)
        try:
            seen = [m.content for m in await store.load("c")]
            await store.commit("c", turn(index))
        finally:
            await store.close()
        reopened = self.make_store(root)
        try:
            return seen, [m.content for m in await reopened.load("c")]
        finally:
            await reopened.close()

    # ------------------------------------------------------------------ 3. failed I/O

    def test_durability_a_failed_io_operation_raises_and_keeps_the_previous_record(self, tmp_path: Path) -> None:
        for k in self._mutating_operations(tmp_path / "probe", 1):
            self._commit_on_a_failing_disk(tmp_path / f"fail-{k}", 1, k, fail_at=k)

    def test_durability_a_disk_failing_for_good_raises_and_keeps_the_previous_record(self, tmp_path: Path) -> None:
        """From the k-th mutating file operation of a commit on, every one fails (a disk gone bad or read-only, so the
        commit's clean-up fails too), for every k, on a new conversation and on one with history."""
        for before in (0, 1):
            for k in self._mutating_operations(tmp_path / f"probe-{before}", before):
                self._commit_on_a_failing_disk(tmp_path / f"fail-{before}-{k}", before, k, fail_from=k)

    def _mutating_operations(self, directory: Path, before: int) -> range:
        """The indices of the mutating file operations of a commit on ``before`` turns (skips without Python I/O)."""
        if not available():
            import pytest

            pytest.skip("the file-system layer needs /proc/self/fd (Linux)")
        probe, error = self.tapped_commit(directory, before)
        self.require_python_io(probe)
        assert error is None, f"the probing commit failed: {error!r}"
        return range(probe.mutations)

    def _commit_on_a_failing_disk(self, directory: Path, before: int, k: int, **fault: int) -> None:
        """Commit turn ``before`` with file operation ``k`` failing (``fail_at``) or failing from then on (``fail_from``).

        ``commit`` raises a :class:`~monoagent._kernel.errors.HistoryStoreError` whose message states the operating
        system's error, the history is the previous record or the new one, and the next commit, on a disk that works
        again, lands. A single failed unlink may be ignored; so may, with ``fail_from``, failures after the
        publication (the store's upkeep after it, such as retention) when the turn is stored: a single failure of
        each operation before it already had to raise.
        """
        previous, new = turns(before), turns(before + 1)
        tap, error = self.tapped_commit(directory, before, **fault)
        where = f"when file operation {k} of the commit ({tap.failed}) fails{' and every later one' if 'fail_from' in fault else ''}"
        assert tap.failed is not None, (
            f"the commit made fewer than {k + 1} mutating file operations this time than before, on the "
            f"same history: the failure could not be injected ({error!r})"
        )
        if error is None:
            assert "fail_from" in fault or tap.failed.startswith(("unlink", "remove")), (
                f"commit returned success {where}: a failed write, fsync, open or rename must raise"
            )
        else:
            assert isinstance(error, HistoryStoreError), f"commit raised {error!r} {where}, not a HistoryStoreError"
            assert os.strerror(errno.EIO) in str(error), (
                f"the HistoryStoreError raised {where} does not say why (the operating system's {os.strerror(errno.EIO)!r}): "
                f"{str(error)!r}"
            )
        seen = self.contents(directory)
        assert seen in (previous, new), f"{where}, the history is neither the previous record nor the new one: {seen}"
        if error is None:
            assert seen == new, f"commit returned {where} but its turn is not stored: {seen}"
        store = self.make_store(directory)
        self.commit(store, [len(seen) // 2])
        self.run(store.close())
        assert self.contents(directory) == seen + turns(len(seen) // 2 + 1)[len(seen):], (
            f"{where}, the next commit does not land"
        )

    # ------------------------------------------------------------------ 4. another process

    def test_durability_another_process_reads_and_extends_every_record_exactly(self, tmp_path: Path) -> None:
        """Records this process wrote load exactly in a fresh process, which extends them; this process then reads
        back exactly what both wrote, and extends them again (a handle that had read a record before the other
        process replaced it included). Each message carries every field a history message keeps."""
        if not self.store_factory:
            import pytest

            pytest.skip("needs store_factory ('module:function') so that another process can build the store")
        directory = tmp_path / "store"
        conversations = ("handoff", "ünïcødé 🎉 会话", "lone \ud800 surrogate", "x" * 10_000, "tg:42:2025-03-01")
        mine = self.make_store(directory)
        expected: dict[str, list[Message]] = {}
        for n, conversation in enumerate(conversations):
            expected[conversation] = rich_turn(n) + rich_turn(n + 10)
            for messages in (rich_turn(n), rich_turn(n + 10)):
                self.run(mine.commit(conversation, messages))
        loaded = load_and_extend(self.store_factory, str(directory), [(c, rich_turn(n + 20)) for n, c in enumerate(conversations)])
        for conversation, seen in zip(conversations, loaded, strict=True):
            assert seen == expected[conversation], f"another process read {conversation[:40]!r} differently than it was written"
        for n, conversation in enumerate(conversations):
            expected[conversation] += rich_turn(n + 20)
            assert list(self.run(mine.load(conversation))) == expected[conversation], (
                f"this process does not read back what another process appended to {conversation[:40]!r}"
            )
            self.run(mine.commit(conversation, rich_turn(n + 30)))
            expected[conversation] += rich_turn(n + 30)
        self.run(mine.close())
        again = load_and_extend(self.store_factory, str(directory), [(c, ()) for c in conversations])
        assert again == [expected[c] for c in conversations], "another process does not read back the records extended in turn"
