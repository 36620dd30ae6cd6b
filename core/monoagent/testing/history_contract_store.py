"""Inactivity, exact retention, nesting, other writers' records, stopped resets, diagnostics and refusals.

The parts of the history-store suite written against the survivors of the ``files`` store's mutation
run (docs/mutation-testing.md, "Mutation score: history/files.py"); each checks a documented clause of
:class:`~monoagent._kernel.stores.ManagedHistoryStore`:

- ``history.maxInactiveDays`` (365 by default: "365 days of inactivity") at and either
  side of its boundary, on a clock the suite controls (:meth:`HistoryLifecycleContract.set_clock`,
  with ``make_store(tmp_path, max_inactive_days=...)``): exactly the bound without a commit is kept,
  one second more is pruned by the next publication, never the conversation just published, which
  keeps the history it had. On the same clock a record's size is reproducible, so ``max_bytes`` is
  checked to the byte; a record alone over ``max_bytes`` is kept.
- Tool-call arguments: the deepest a commit accepts (found by bisection) read back and one level
  deeper is refused; arguments JSON would change read back alike from every handle.
- A record the store did not write itself (with
  :meth:`~monoagent.testing.history_contract_support.HistoryContractBase.replace_record`): the
  records of :func:`hand_written_records`, in the ``files`` layout of docs/history.md but laid out
  by another JSON writer. A store reads each as a history or as a cold start; either way the next
  commit appends to exactly what a load returned, and every handle then reads the same history.
- A logical reset stopped part-way (``pause_inside_reset`` raising :class:`AbandonedReset`) is
  never half seen, and nothing is written outside ``storage_directory``, whatever the working
  directory.
- Diagnostics never break an operation: the damaged-record paths (a load without ``on_warning``,
  ``conversations()``, a commit replacing an unreadable record, a reset) run with the store
  package's log records shown, as the CLI and ``serve`` show them, on conversation ids holding
  ``{0}`` and ``{x}``, so a log call that cannot format its record (or formats an id) fails the
  operation here rather than in production.
- A refusal says what it refused: a commit of a value that is not a ``Message`` names the value's
  type, a refused provider session names the provider session.

Each part skips, naming what it needs, when the store lacks the hook, keyword or capability.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message, ToolCall
from monoagent._kernel.stores import (
    HistoryStore,
    ManagedHistoryStore,
    ProviderSessionState,
    ProviderSessionStore,
    logical_conversation_id,
)
from monoagent.testing.history_contract_support import (
    HistoryContractBase,
    contents,
    implementing,
    turn_messages,
    turns_text,
)

DAY = 86_400.0
START = 1_900_000_000.0
"""The suite's clock at the first commit of the inactivity test: whole seconds, so every time it sets is exact."""


def hand_written_records(conversation_id: str) -> dict[str, bytes]:
    """Records of ``conversation_id`` in the ``files`` layout (docs/history.md), each laid out by another writer.

    Every one is a valid record of that layout (two messages, ``hand 0`` and ``hand 1``): a store of
    the layout reads it, a store of another layout may find it unreadable, and neither may let the
    layout decide what the next commit builds on.
    """
    message: dict[str, Any] = {"role": "user", "content": "hand 0 ünï 🎉", "name": "Alice", "timestamp": 1.5,
                               "tool_calls": [], "tool_call_id": None}
    answer: dict[str, Any] = {"role": "assistant", "content": "hand 1 \"quoted\" \\ ]}", "name": None, "timestamp": 2.5,
                              "tool_calls": [], "tool_call_id": None}
    record: dict[str, Any] = {"version": 2, "conversationId": conversation_id,
                              "logicalConversationId": logical_conversation_id(conversation_id),
                              "updatedAt": 1_700_000_000.5, "messages": [message, answer]}
    reordered = {"messages": record["messages"], **{k: v for k, v in record.items() if k != "messages"}}
    version_1 = {k: v for k, v in record.items() if k != "logicalConversationId"} | {"version": 1}
    return {
        "indented": json.dumps(record, indent=2, ensure_ascii=False).encode(),
        "keys reordered": json.dumps(reordered, ensure_ascii=False, separators=(",", ":")).encode(),
        "ASCII escapes": json.dumps(record).encode(),
        "version 1": json.dumps(version_1, ensure_ascii=False).encode(),
        "spaces inside the array": json.dumps(record, ensure_ascii=False).replace('"messages": [', '"messages": [ ').encode(),
    }


@contextlib.contextmanager
def diagnostics_shown(store: Any) -> Iterator[None]:
    """The log records of the package defining ``store``'s class (and monoagent's) shown while inside, as the CLI shows them.

    loguru formats a record only when some sink will take it; a library's records are disabled by
    default, so a log call whose format and arguments do not fit each other passes unnoticed until
    a user runs the CLI. Inside this block every record is formatted (and dropped).
    """
    from loguru import logger

    packages = sorted({type(store).__module__.partition(".")[0], "monoagent"})
    for package in packages:
        logger.enable(package)
    sink = logger.add(lambda message: None, level=0, format="{message}")
    try:
        yield
    finally:
        logger.remove(sink)
        for package in packages:
            logger.disable(package)


class AbandonedReset(Exception):
    """Raised from ``pause_inside_reset`` to stop a logical reset part-way, as a crash or a failing disk stops it."""


class NotAMessage:
    """What a commit is given instead of a :class:`~monoagent._kernel.model.Message`; its refusal must name it."""


class HistoryLifecycleContract(HistoryContractBase):
    """Mixed into :class:`~monoagent.testing.HistoryStoreContract`; see the module docstring."""

    def set_clock(self, store: HistoryStore, clock: Callable[[], float]) -> None:
        """Make ``store`` read the current time (epoch seconds) from ``clock``: the time of a commit, and the time
        ``maxInactiveDays`` is measured against (optional; without it the inactivity test is skipped, naming it)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ maxInactiveDays

    def test_contract_retention_by_inactivity_at_its_boundary(self, tmp_path: Path) -> None:
        """``max_inactive_days`` = 2 on the suite's clock: exactly 2 days without a commit is kept, 2 days and a second
        is pruned by the next publication, and the conversation just published is never pruned."""
        now = [START]
        store = self.clocked(tmp_path, now, max_inactive_days=2)

        def commit_at(when: float, cid: str) -> list[str]:
            now[0] = when
            self.run(store.commit(cid, [Message("user", f"{cid} at {when - START:.0f}")]))
            return self.listed(store)

        assert commit_at(START, "old") == ["old"]
        assert commit_at(START + DAY, "recent") == ["old", "recent"]
        assert commit_at(START + 2 * DAY, "at-bound") == ["at-bound", "old", "recent"], (
            "a conversation exactly history.maxInactiveDays (2) without a commit was pruned")
        assert commit_at(START + 2 * DAY + 1, "past") == ["at-bound", "past", "recent"], (
            "a conversation 2 days and 1 second without a commit outlived history.maxInactiveDays = 2")
        assert self.load(self.make_store(tmp_path), "old") == []
        assert commit_at(START + 4 * DAY + 1, "recent") == ["past", "recent"], (
            "after 3 days without a commit, the commit to 'recent' must keep it and prune 'at-bound' (4 days)")
        assert contents(self.load(self.make_store(tmp_path), "recent")) == [f"recent at {DAY:.0f}", f"recent at {4 * DAY + 1:.0f}"], (
            "pruning runs only after the publication, which builds on the conversation's history")
        self.close(store)

    def clocked(self, directory: Path, now: list[float], **bound: Any) -> Any:
        """A store with ``bound`` reading the time from ``now[0]``, or a skip naming the keyword or hook it lacks."""
        import pytest

        store = self.retaining(directory, **bound)
        try:
            self.set_clock(store, lambda: now[0])
        except NotImplementedError:
            self.close(store)
            pytest.skip("needs HistoryStoreContract.set_clock(store, clock) (the time a record holds and retention "
                        "measures against); this store's test module does not provide it")
        return store

    def test_contract_retention_by_bytes_to_the_byte(self, tmp_path: Path) -> None:
        """On the suite's clock a record's size is reproducible, so ``max_bytes`` is checked to the byte: three records
        of T bytes in all are kept under T + 1 and T, and T - 1 prunes the oldest."""
        from monoagent.testing.history_contract_retention import bulky_turn

        def three(directory: Path, bound: int) -> Any:
            now = [START]
            store = self.clocked(directory, now, max_bytes=bound)
            for n in range(3):
                now[0] = START + n
                self.run(store.commit(f"c{n}", bulky_turn(n)))
            return store

        measure = three(tmp_path / "measure", 1 << 30)
        if not isinstance(measure, ManagedHistoryStore):
            import pytest

            self.close(measure)
            pytest.skip(f"needs a store that implements {implementing(ManagedHistoryStore)} to measure the records' bytes")
        total = self.run(measure.stats()).bytes
        self.close(measure)
        for bound, kept in ((total + 1, ["c0", "c1", "c2"]), (total, ["c0", "c1", "c2"]), (total - 1, ["c1", "c2"])):
            store = three(tmp_path / f"bound-{bound}", bound)
            listed = self.listed(self.make_store(tmp_path / f"bound-{bound}"))
            assert listed == kept, f"records of {total} bytes in all under history.maxBytes = {bound} (the oldest is c0)"
            self.close(store)

    def test_contract_a_record_alone_over_max_bytes_is_kept(self, tmp_path: Path) -> None:
        """A turn whose record alone passes ``max_bytes`` prunes every other conversation, never the one just published."""
        store = self.retaining(tmp_path, max_bytes=64 * 1024)
        self.commit_turns(store, "small-0", range(1))
        self.commit_turns(store, "small-1", range(1))
        big = [Message("user", "u" * 40_000), Message("assistant", "a" * 40_000)]
        self.run(store.commit("big", big))
        fresh = self.make_store(tmp_path)
        assert self.listed(fresh) == ["big"]
        assert self.load(fresh, "big") == big, "the record just published was pruned"
        self.close(store, fresh)

    # ------------------------------------------------------------------ nesting

    def test_contract_the_deepest_accepted_arguments_read_back(self, tmp_path: Path) -> None:
        """Between 100 and 1,000 levels of tool-call arguments, the deepest a commit accepts (found by bisection) reads
        back from a new handle, as does every depth tried on the way; one level deeper is refused with the history intact."""
        store = self.make_store(tmp_path)

        def nested(depth: int) -> dict[str, object]:
            value: dict[str, object] = {"leaf": depth}
            for _ in range(depth - 1):
                value = {"n": value}
            return value

        probes = [0]

        def accepted(depth: int) -> bool:
            probes[0] += 1
            cid = f"nest-{depth}-{probes[0]}"
            turn = [Message("assistant", "", tool_calls=(ToolCall("call-1", "deep", nested(depth)),))]
            try:
                self.run(store.commit(cid, turn))
            except HistoryStoreError:
                assert self.load(self.make_store(tmp_path), cid) == [], f"a refused commit of {depth} levels left history"
                return False
            assert self.load(self.make_store(tmp_path), cid) == turn, f"{depth} levels were committed, not read back"
            return True

        low, high = 100, 1000
        assert accepted(low), "tool-call arguments 100 levels deep must be kept"
        if not accepted(high):
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if accepted(middle) else (low, middle)
            assert accepted(low) and not accepted(low + 1), f"{low} levels are accepted and {low + 1} refused, again"
        self.close(store)

    def test_contract_every_handle_reads_the_same_arguments(self, tmp_path: Path) -> None:
        """Tool-call arguments JSON would change (a tuple, an int key) read back alike from the committing handle and a
        new one: as given, or as JSON gives them back."""
        store = self.make_store(tmp_path)
        arguments: dict[Any, Any] = {"pair": (1, 2), 7: "an int key", "nested": [{"single": (3,)}]}
        self.run(store.commit("c", [Message("assistant", "", tool_calls=(ToolCall("call-1", "odd", arguments),))]))
        mine, theirs = self.load(store, "c"), self.load(self.make_store(tmp_path), "c")
        assert mine == theirs, f"the committing handle reads {mine[0].tool_calls}, a new handle {theirs[0].tool_calls}"
        assert theirs[0].tool_calls[0].arguments in (arguments, json.loads(json.dumps(arguments)))
        self.close(store)

    # ------------------------------------------------------------------ records written by another writer

    def test_contract_a_commit_builds_on_what_a_load_returned(self, tmp_path: Path) -> None:
        """Whatever record another writer left (:func:`hand_written_records`), the next commit appends to exactly what a
        load returned, and the writing handle, a new handle and the listing agree on the result."""
        store = self.make_store(tmp_path)
        for n, layout in enumerate(hand_written_records("placeholder")):
            cid = f"hand-{n}:2025-01-01"
            self.commit_turns(store, cid, range(1))
            self.replace_record(store, cid, hand_written_records(cid)[layout])
            reader: Any = self.make_store(tmp_path)
            loaded = self.load(reader, cid, on_warning=lambda *_: None)
            assert contents(loaded) in ([], ["hand 0 ünï 🎉", 'hand 1 "quoted" \\ ]}']), f"{layout}: read as {contents(loaded)}"
            writer = self.make_store(tmp_path)
            receipt = self.run(writer.commit(cid, turn_messages(7)))
            expected = contents(loaded) + turns_text([7])
            assert receipt.message_count == len(expected), f"{layout}: the receipt counts {receipt.message_count} messages"
            assert contents(self.load(self.make_store(tmp_path), cid)) == expected, f"{layout}: the commit did not append"
            assert self.load(writer, cid) == self.load(self.make_store(tmp_path), cid), f"{layout}: the writing handle differs"
            self.commit_turns(writer, cid, range(8, 9))
            assert contents(self.load(self.make_store(tmp_path), cid)) == expected + turns_text([8]), f"{layout}: a second commit"
            listed = {info.conversation_id: info.message_count for info in self.run(writer.conversations())}
            assert listed[cid] == len(expected) + 2, f"{layout}: conversations() counts {listed[cid]} messages"
            self.close(writer)
        self.close(store)

    # ------------------------------------------------------------------ a reset stopped part-way

    def test_contract_a_reset_stopped_part_way_is_never_half_seen(self, tmp_path: Path) -> None:
        """A logical reset stopped part-way (``pause_inside_reset`` raises at its second call, or its only one) leaves
        the session wholly as before or wholly reset for the stopped handle and new ones, and the next commit to one of
        its buckets lands on what was read, the other buckets as they were read."""
        import pytest

        buckets = ["tg:7", "tg:7:2025-03-01", "tg:7:2025-03-02"]

        def session(directory: Path, stop_at: int | None) -> tuple[Any, list[int]]:
            store = self.declaring(directory, ManagedHistoryStore)
            for n, cid in enumerate(buckets):
                self.run(store.commit(cid, turn_messages(n)))
            self.commit_turns(store, "tg:70", range(1))
            calls = [0]

            def pause() -> None:
                calls[0] += 1
                if calls[0] == stop_at:
                    raise AbandonedReset(f"the contract stops the reset at its pause {stop_at}")

            try:
                self.pause_inside_reset(store, pause)
            except NotImplementedError:
                self.close(store)
                pytest.skip("needs HistoryStoreContract.pause_inside_reset (a point inside a logical reset) to stop a reset "
                            "part-way; this store's test module does not provide it")
            return store, calls

        counting, calls = session(tmp_path / "count", None)
        self.run(counting.reset_logical("tg:7"))
        self.close(counting)
        assert calls[0] >= 1, "pause_inside_reset was installed but a logical reset never called it"
        store, _ = session(tmp_path / "stop", min(2, calls[0]))
        try:
            self.run(store.reset_logical("tg:7"))
        except AbandonedReset:
            pass
        else:
            raise AssertionError("the reset went on after pause_inside_reset raised")
        before = [turns_text([n]) for n in range(len(buckets))]
        for handle, which in ((store, "the stopped handle"), (self.make_store(tmp_path / "stop"), "a new handle")):
            seen = [contents(self.load(handle, cid)) for cid in buckets]
            assert seen in (before, [[]] * len(buckets)), f"{which} reads a half-reset session: {seen}"
        assert contents(self.load(self.make_store(tmp_path / "stop"), "tg:70")) == turns_text([0]), "another session was reset"
        self.commit_turns(self.make_store(tmp_path / "stop"), buckets[1], range(9, 10))
        after = [contents(self.load(self.make_store(tmp_path / "stop"), cid)) for cid in buckets]
        expected = [seen[0], seen[1] + turns_text([9]), seen[2]]
        assert after == expected, f"the commit after a stopped reset: {after}, not {expected}"
        self.close(store)

    # ------------------------------------------------------------------ where a store writes

    def test_contract_nothing_is_written_outside_the_storage(self, tmp_path: Path) -> None:
        """Commits, loads, resets (exact and logical), the listing and the totals write nothing outside
        ``storage_directory``, whatever the working directory (a relative path would land in it)."""
        import pytest

        store = self.make_store(tmp_path)
        try:
            root = Path(getattr(self, "storage_directory")(store)).resolve()  # noqa: B009  (mixed in beside this class)
        except (NotImplementedError, AttributeError):
            self.close(store)
            pytest.skip("needs HistoryStoreContract.storage_directory (the directory the store keeps its files in) to check "
                        "that nothing is written outside it")
        cwd = tmp_path / "working-directory"
        cwd.mkdir()
        previous = os.getcwd()
        os.chdir(cwd)
        try:
            self.commit_turns(store, "a:2025-01-01", range(2))
            self.commit_turns(self.make_store(tmp_path), "b", range(1))
            self.load(self.make_store(tmp_path), "a:2025-01-01")
            self.run(store.conversations())
            self.run(store.reset("b"))
            if isinstance(store, ManagedHistoryStore):
                self.run(store.reset_logical("a"))
                self.run(store.stats())
                self.run(store.clear_all())
        finally:
            os.chdir(previous)
            self.close(store)
        assert not any(cwd.iterdir()), f"the store wrote into the working directory: {sorted(p.name for p in cwd.iterdir())}"
        outside = [p for p in tmp_path.rglob("*")
                   if p != cwd and root not in (p.resolve(), *p.resolve().parents) and p.resolve() not in root.parents]
        assert not outside, f"the store wrote outside its storage directory {root}: {outside[:8]}"

    # ------------------------------------------------------------------ diagnostics

    def test_contract_diagnostics_never_break_an_operation(self, tmp_path: Path) -> None:
        """With the store's log records shown, every damaged-record path still does what the contract says."""
        import pytest

        from monoagent.testing.history_contract import UNREADABLE_RECORDS, damaged_records

        store = self.make_store(tmp_path)
        self.commit_turns(store, "intact", range(1))
        cases = [("truncated", UNREADABLE_RECORDS[1]), ("no record", UNREADABLE_RECORDS[4]),
                 ("another conversation", damaged_records("damaged:2025-01-01")[4])]
        with diagnostics_shown(store):
            for n, (what, data) in enumerate(cases):
                cid = "damaged:2025-01-01" if what == "another conversation" else f"damaged-{{{n}}}-{{x}}"  # braces: format fields
                self.commit_turns(store, cid, range(1))
                self.replace_record(store, cid, data)
                assert self.load(self.make_store(tmp_path), cid) == [], f"{what}: a load without on_warning"
                listed = {info.conversation_id for info in self.run(self.make_store(tmp_path).conversations())}
                assert "intact" in listed, f"{what}: conversations() lists {sorted(listed)}"
                self.commit_turns(self.make_store(tmp_path), cid, range(3, 4))
                assert contents(self.load(self.make_store(tmp_path), cid)) == turns_text([3]), f"{what}: the replacing commit"
                self.replace_record(store, cid, data)
                self.run(self.make_store(tmp_path).reset(cid))
                assert self.load(self.make_store(tmp_path), cid) == [], f"{what}: a reset of an unreadable record"
            try:
                newer: bytes | None = self.newer_record("newer")
            except pytest.skip.Exception:  # the store gives no newer record; the damaged ones were checked
                newer = None
            if newer is not None:
                self.commit_turns(store, "newer", range(1))
                self.replace_record(store, "newer", newer)
                listed = {info.conversation_id for info in self.run(self.make_store(tmp_path).conversations())}
                assert "intact" in listed, "conversations() with a record of a newer version"
        self.close(store)

    # ------------------------------------------------------------------ refusals

    def test_contract_a_refusal_names_what_it_refused(self, tmp_path: Path) -> None:
        """A commit of a value that is not a Message names the value's type; a refused provider session names it."""
        store = self.make_store(tmp_path)
        self.commit_turns(store, "c", range(1))
        try:
            self.run(store.commit("c", [Message("user", "fine"), NotAMessage()]))  # type: ignore[list-item]  # the value under test
        except (TypeError, ValueError, HistoryStoreError) as exc:
            assert "NotAMessage" in str(exc), f"the refusal does not name the type of the value it refused: {exc}"
        else:
            raise AssertionError("commit accepted a value that is not a Message")
        assert contents(self.load(self.make_store(tmp_path), "c")) == turns_text([0])
        if not isinstance(store, ProviderSessionStore):
            self.close(store)
            return
        for state in (ProviderSessionState("xyz", 1), ProviderSessionState("ab" * 16, -1)):
            try:
                self.run(store.commit("c", turn_messages(1), provider_session=state))
            except (TypeError, ValueError, HistoryStoreError) as exc:
                text = str(exc).lower()
                assert "provider_session" in text or "provider session" in text, (
                    f"the refusal of the provider session {state!r} does not name the provider session: {exc}")
            else:
                assert self.run(self.make_store(tmp_path).load_provider_session("c")) == state  # type: ignore[attr-defined]  # the factory of store, a ProviderSessionStore
                self.commit_turns(store, "c", range(1, 2))  # unbinds it again
        self.close(store)
