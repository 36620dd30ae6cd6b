"""The history-store conformance suite: what any :class:`~monoagent._kernel.stores.HistoryStore` must prove.

A store plugin (the bundled ``files`` store, a PostgreSQL store, ...) runs the suite unchanged
against itself by subclassing :class:`HistoryStoreContract` in its own tests::

    from monoagent.testing import HistoryStoreContract

    class TestPostgresHistory(HistoryStoreContract):
        def make_store(self, tmp_path, **bounds):
            return PostgresHistory(dsn=..., schema=f"t_{tmp_path.name}", **bounds)

``make_store`` receives pytest's ``tmp_path`` and the bounds a test needs (``max_messages``,
``max_message_bytes``; optionally ``max_stage_bytes``, ``max_conversations`` and ``max_bytes``:
a store whose ``make_store`` takes one proves that bound, see
:mod:`monoagent.testing.history_contract_stages` and :mod:`monoagent.testing.history_contract_retention`);
two calls with the same ``tmp_path`` must return two handles on the same stored data (as two
processes would see it). Override :meth:`HistoryStoreContract.corrupt` to let the suite truncate
a stored record into invalid JSON, and :meth:`HistoryStoreContract.replace_record` to let it
store any bytes as a record; without them, the corruption tests are skipped;
:meth:`HistoryStoreContract.storage_directory` names the directory a file-based store keeps its
files in (the foreign-files test plants files there); :meth:`HistoryStoreContract.newer_record`
gives the bytes a newer version of the store would write (the fail-closed test). Override
:meth:`HistoryStoreContract.pause_inside_commit` and :meth:`HistoryStoreContract.pause_inside_reset`
to let the suite hold a commit or a logical reset open while it reads, commits and resets through
other handles; without them, the tests that need a held commit or reset are skipped and the other
concurrency tests race threads, skipping when no overlap was observed. Every clause checked here is written down in
:class:`~monoagent._kernel.stores.ManagedHistoryStore`: ordering, bounds, atomicity, reset (exact
and logical), corruption handling and concurrency.

A store is held only to the sub-protocols of :class:`~monoagent._kernel.stores.HistoryStore`
it implements. Every store proves the :class:`~monoagent._kernel.stores.HistoryStore` clauses
(order, exact ids, bounds, atomic commits, reset, concurrent writers) and that it would be accepted
when built (no sub-protocol implemented in part, a ``load`` that takes ``on_warning``);
:class:`~monoagent._kernel.stores.ManagedHistoryStore` (logical reset, totals),
:class:`~monoagent._kernel.stores.LogicalLookupStore` and
:class:`~monoagent._kernel.stores.ProviderSessionStore` each add their tests, and a store whose
test module can damage a record (``corrupt``, ``replace_record``) proves the corruption clauses
(an unreadable record starts cold, is reported through ``on_warning`` and is replaced). A test
whose sub-protocol the store does not implement is skipped, and its reason names the
sub-protocol and its members.

The bounds live in :mod:`monoagent.testing.history_contract_bounds`, the stage quota in
:mod:`monoagent.testing.history_contract_stages`, foreign files and exact totals in
:mod:`monoagent.testing.history_contract_storage`, aggregate retention in
:mod:`monoagent.testing.history_contract_retention`, inactivity, exact retention, nesting, other
writers' records, stopped resets, diagnostics and refusals in
:mod:`monoagent.testing.history_contract_store` (with the optional ``set_clock`` hook), the concurrency clauses in
:mod:`monoagent.testing.history_contract_concurrency`, the hooks and helpers they share in
:mod:`monoagent.testing.history_contract_support`; :class:`HistoryStoreContract` gathers them.

The suite needs pytest only when it runs (it is imported lazily), and runs its coroutines with
``asyncio.run`` so no asyncio plugin is required.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from monoagent._kernel.components import HISTORY_STORES
from monoagent._kernel.errors import HistoryStoreError
from monoagent._kernel.model import Message, ToolCall
from monoagent._kernel.stores import (
    LogicalLookupStore,
    ManagedHistoryStore,
    ProviderSessionState,
    ProviderSessionStore,
    logical_conversation_id,
)
from monoagent.testing.history_contract_bounds import HistoryBoundsContract
from monoagent.testing.history_contract_concurrency import HistoryConcurrencyContract
from monoagent.testing.history_contract_records import HistoryRecordsContract
from monoagent.testing.history_contract_retention import HistoryRetentionContract
from monoagent.testing.history_contract_stages import HistoryStageContract
from monoagent.testing.history_contract_storage import HistoryStorageContract
from monoagent.testing.history_contract_store import HistoryLifecycleContract
from monoagent.testing.history_contract_support import contents, turn_messages, turns_text

__all__ = ["HOSTILE_IDS", "UNREADABLE_RECORDS", "HistoryStoreContract", "damaged_records", "turn_messages"]

HOSTILE_IDS = (
    "../../etc/passwd",
    "/absolute/path",
    "nul\x00byte",
    "ünïcødé 🎉 会话",
    "x" * 10_000,
    "lone \ud800 surrogate",
    "\udfff",
    ".",
    "",
    "a",
    "a ",
    "A",
    "con:2025-01-01",
)


UNREADABLE_RECORDS = (
    b"",
    b"\xff\xfe not UTF-8",
    b"[" * 100_000 + b"]" * 100_000,
    b"null",
    b"{}",
    b'{"version": 2}',
    b"[1, 2, 3]",
    b"1e999",
    b'{"a": 1, "a": 2}',
    b'{"version": 2, "conversationId": NaN}',
    b"\xef\xbb\xbf{}",
)
"""Bytes that are no store's record: each must be a cold start, replaced by the next commit."""


def damaged_records(conversation_id: str) -> list[bytes]:
    """Records of ``conversation_id`` in the ``files`` store's layout (docs/history.md), each with one defect.

    Whatever a store's own layout, none of these is a record it may read: a store of another
    layout finds them unreadable anyway, and one of this layout must refuse each defect (a
    number where text belongs, text where a number or a flag belongs, a missing field, a version
    it does not write, another conversation's id, a time that is no time (negative, or not before the
    year 10000, 253402300800.0, so that every listing can print it), a malformed provider session).
    """
    import json

    message = {"role": "user", "content": "q", "name": "A", "timestamp": 1.5, "tool_calls": [], "tool_call_id": None}
    good = {"version": 2, "conversationId": conversation_id, "logicalConversationId": logical_conversation_id(conversation_id),
            "updatedAt": 1_700_000_000.5, "messages": [message],
            "providerSession": {"epoch": "0123456789abcdef" * 2, "revision": 1, "model": None}}
    defects: list[dict[str, Any]] = [
        {"version": "2"}, {"version": 0}, {"version": True}, {"version": 2.0}, {"conversationId": conversation_id + "x"},
        {"conversationId": 7}, {"logicalConversationId": conversation_id + "x"}, {"updatedAt": "1700000000"},
        {"updatedAt": -1}, {"updatedAt": 1e300}, {"updatedAt": 253402300800.0}, {"messages": {}}, {"messages": None},
        {"providerSession": {"epoch": "xyz", "revision": 1}}, {"providerSession": {"epoch": "0" * 32, "revision": -1}},
        {"providerSession": {"epoch": "0" * 32, "revision": "1"}}, {"providerSession": {"epoch": "0" * 32, "revision": 2**53}},
    ]
    for field, value in (("content", 5), ("content", None), ("role", "robot"), ("role", "ro\nbot\x1b[2J"), ("name", 7),
                         ("timestamp", "now"), ("timestamp", True), ("tool_calls", "x"), ("tool_calls", ""),
                         ("is_error", 1), ("tool_call_id", 3)):
        defects.append({"messages": [{**message, field: value}]})
    defects.append({"messages": [{k: v for k, v in message.items() if k != "content"}]})
    records = [{**good, **defect} for defect in defects]
    records.append({k: v for k, v in good.items() if k != "messages"})
    return [json.dumps(record).encode() for record in records]


class HistoryStoreContract(
    HistoryBoundsContract, HistoryConcurrencyContract, HistoryStageContract, HistoryStorageContract, HistoryRetentionContract,
    HistoryLifecycleContract,
    HistoryRecordsContract,
):
    """Subclass with a ``Test`` name and implement :meth:`make_store`; pytest collects the rest."""

    # ------------------------------------------------------------------ ordering

    def test_contract_unknown_conversation_is_empty(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        assert self.load(store, "never-seen") == []
        self.close(store)

    def test_contract_order_and_fields_round_trip(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        call = ToolCall("call-1", "search", {"query": "weather", "nested": {"n": [1, 2]}})
        failed = ToolCall("call-2", "search", {"query": "Atlantis"})
        turn = [
            Message("user", "line one\nline two", name="Bob"),
            Message("assistant", "", tool_calls=(call, failed)),
            Message("tool", "sunny", name="search", tool_call_id="call-1"),
            Message("tool", "no such place", name="search", tool_call_id="call-2", is_error=True),
            Message("assistant", "It is sunny."),
        ]
        receipt = self.run(store.commit("c", turn))
        assert receipt.conversation_id == "c" and receipt.message_count == 5 and receipt.bytes_written > 0
        self.commit_turns(store, "c", range(1, 4))
        loaded = self.load(self.make_store(tmp_path), "c")
        assert loaded[:5] == turn
        assert [m.is_error for m in loaded[2:4]] == [False, True]
        assert contents(loaded[5:]) == [t for i in range(1, 4) for t in (f"question {i}", f"answer {i}")]
        self.close(store)

    def test_contract_ids_are_exact(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        for n, cid in enumerate(HOSTILE_IDS):
            self.run(store.commit(cid, turn_messages(n)))
        other = self.make_store(tmp_path)
        for n, cid in enumerate(HOSTILE_IDS):
            assert contents(self.load(other, cid)) == [f"question {n}", f"answer {n}"], cid[:40]
        listed = {info.conversation_id for info in self.run(other.conversations())}
        assert listed == set(HOSTILE_IDS)
        self.close(store, other)

    def test_contract_a_handle_reads_what_another_committed_or_reset(self, tmp_path: Path) -> None:
        """A handle that has read a conversation sees another handle's later commit, reset and recommit."""
        reader, writer = self.make_store(tmp_path), self.make_store(tmp_path)
        self.commit_turns(writer, "c", range(1))
        assert contents(self.load(reader, "c")) == turns_text(range(1))
        assert contents(self.load(reader, "c")) == turns_text(range(1)), "a second read of an unchanged record"
        self.commit_turns(writer, "c", range(1, 2))
        assert contents(self.load(reader, "c")) == turns_text(range(2)), "a commit through another handle is not seen"
        assert self.run(writer.reset("c")) == 4
        assert self.load(reader, "c") == [], "a reset through another handle is not seen"
        self.commit_turns(writer, "c", range(5, 6))
        assert contents(self.load(reader, "c")) == turns_text(range(5, 6))
        self.close(reader, writer)

    def test_contract_handles_taking_turns_keep_every_byte(self, tmp_path: Path) -> None:
        """Two handles alternate commits to one conversation, so each builds on a record the other wrote,
        with text that JSON must escape (quotes, brackets, backslashes, control characters, a lone surrogate)."""
        handles = (self.make_store(tmp_path), self.make_store(tmp_path))
        tricky = ['"]}, {"role": "system"', "back\\slash \\u0000 \\", "line\nbreak\ttab\r", "ünï 🎉 会话", "\x00\x1f\x7f",
                  "]", ",", "lone \ud800 surrogate", "{}", ""]
        expected: list[Message] = []
        for n, text in enumerate(tricky):
            call = ToolCall(f"call-{n}", "echo", {"text": text, "nested": [text, {"]": n, "list": [None, True, 1.5]}]})
            turn = [Message("user", text, name=f'Al"ice {n}'), Message("assistant", text[::-1], tool_calls=(call,))]
            self.run(handles[n % 2].commit("c", turn))
            expected += turn
            assert self.load(self.make_store(tmp_path), "c") == expected, f"after commit {n} ({text!r})"
        assert self.load(handles[0], "c") == self.load(handles[1], "c") == expected
        self.close(*handles)

    # ------------------------------------------------------------------ bounds

    def test_contract_keeps_the_newest_messages(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, max_messages=8)
        self.commit_turns(store, "c", range(10))
        loaded = self.load(self.make_store(tmp_path, max_messages=8), "c")
        assert contents(loaded) == [t for i in range(6, 10) for t in (f"question {i}", f"answer {i}")]
        self.close(store)

    # ------------------------------------------------------------------ atomicity

    def test_contract_rejected_commit_leaves_history_intact(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        self.commit_turns(store, "c", range(2))
        try:
            self.run(store.commit("c", [Message("user", "fine"), "not a message"]))  # type: ignore[list-item]  # the store must refuse it
        except (TypeError, ValueError, HistoryStoreError):
            pass
        else:
            raise AssertionError("commit accepted a value that is not a Message")
        assert contents(self.load(self.make_store(tmp_path), "c")) == ["question 0", "answer 0", "question 1", "answer 1"]
        self.close(store)

    # ------------------------------------------------------------------ what is checked when the store is built

    def test_contract_the_store_would_be_accepted_when_built(self, tmp_path: Path) -> None:
        """What ``agent.components`` checks when a plugin's factory returns the store: every member of ``HistoryStore``,
        a ``load`` that takes ``on_warning``, and each sub-protocol implemented whole or not at all."""
        store = self.make_store(tmp_path)
        problems = HISTORY_STORES.problems(store)
        self.close(store)
        assert not problems, f"the history store would be refused when built: it {'; it '.join(problems)}"

    # ------------------------------------------------------------------ reset

    def test_contract_reset_one_conversation(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        self.commit_turns(store, "a", range(2))
        self.commit_turns(store, "b", range(1))
        assert self.run(store.reset("a")) == 4
        assert self.load(store, "a") == [] and len(self.load(store, "b")) == 2
        assert self.run(store.reset("a")) == 0
        self.close(store)

    def test_contract_logical_reset_clears_every_daily_bucket(self, tmp_path: Path) -> None:
        store = self.declaring(tmp_path, ManagedHistoryStore)
        session = ["tg:42", "tg:42:2025-03-01", "tg:42:2025-03-02"]
        others = ["tg:420:2025-03-01", "tg:4", "other"]
        for n, cid in enumerate(session + others):
            self.run(store.commit(cid, turn_messages(n)))
        assert {logical_conversation_id(c) for c in session} == {"tg:42"}
        report = self.run(store.reset_logical("tg:42"))
        assert sorted(report.conversation_ids) == sorted(session)
        assert report.records == 3 and report.messages == 6 and report.bytes > 0
        fresh = self.make_store(tmp_path)
        for cid in session:
            assert self.load(fresh, cid) == []
        for cid in others:
            assert len(self.load(fresh, cid)) == 2
        again = self.run(fresh.reset_logical("tg:42"))
        assert again.records == 0
        self.close(store, fresh)

    def test_contract_logical_lookup_sees_other_buckets_only(self, tmp_path: Path) -> None:
        store = self.declaring(tmp_path, LogicalLookupStore, ManagedHistoryStore)
        today, earlier = "tg:42:2025-03-02", "tg:42:2025-03-01"
        assert not self.run(store.has_logical_records("tg:42", besides=today))
        self.run(store.commit("tg:420:2025-03-01", turn_messages(0)))
        self.run(store.commit(today, turn_messages(1)))
        assert not self.run(store.has_logical_records("tg:42", besides=today)), "the exact id itself does not count"
        self.run(store.commit(earlier, turn_messages(2)))
        assert self.run(store.has_logical_records("tg:42", besides=today))
        self.run(store.reset_logical("tg:42"))
        assert not self.run(store.has_logical_records("tg:42", besides=today))
        self.close(store)

    # ------------------------------------------------------------------ corruption

    def test_contract_unreadable_record_starts_cold_and_is_replaced(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        self.commit_turns(store, "c", range(2))
        self.corrupt(store, "c")
        warnings: list[tuple[str, str]] = []
        fresh = self.make_store(tmp_path)
        assert self.load(fresh, "c", on_warning=lambda code, message: warnings.append((code, message))) == []
        assert [code for code, _ in warnings] == ["history_record_unreadable"]
        self.commit_turns(fresh, "c", range(5, 6))
        assert contents(self.load(self.make_store(tmp_path), "c")) == ["question 5", "answer 5"]
        self.close(store, fresh)

    def test_contract_any_unreadable_record_starts_cold_and_resets(self, tmp_path: Path) -> None:
        """Every one of :data:`UNREADABLE_RECORDS` and :func:`damaged_records` is a cold start, replaced and reset."""
        self.close(self.declaring(tmp_path, ManagedHistoryStore))
        cases = [(f"damaged-{n}", data) for n, data in enumerate(UNREADABLE_RECORDS)]
        cases += [(f"defect-{n}:2025-01-01", damaged_records(f"defect-{n}:2025-01-01")[n]) for n in range(len(damaged_records("")))]
        self.commit_turns(self.make_store(tmp_path), "intact", range(1))
        for cid, data in cases:
            store = self.make_store(tmp_path)
            self.commit_turns(store, cid, range(1))
            self.replace_record(store, cid, data)
            warnings: list[tuple[str, str]] = []
            assert self.load(self.make_store(tmp_path), cid, on_warning=lambda *w: warnings.append(w)) == [], data[:40]  # noqa: B023  (called in this iteration)
            assert [code for code, _ in warnings] == ["history_record_unreadable"], data[:40]
            assert len(warnings[0][1].splitlines()) == 1, f"the warning is one line: {warnings[0][1]!r}"
            assert "intact" in {info.conversation_id for info in self.run(store.conversations())}, "one damaged record hid the others"
            self.commit_turns(store, cid, range(5, 6))
            assert contents(self.load(self.make_store(tmp_path), cid)) == ["question 5", "answer 5"]
            self.replace_record(store, cid, data)
            report = self.run(self.make_store(tmp_path).reset_logical(logical_conversation_id(cid)))
            assert report.records == 1, data[:40]
            assert self.load(self.make_store(tmp_path), cid) == []
            self.close(store)

    def test_contract_a_newer_record_fails_closed(self, tmp_path: Path) -> None:
        """A record of a newer version is neither read nor replaced (``HistoryStoreError``); a logical reset removes it."""
        store = self.declaring(tmp_path, ManagedHistoryStore)
        cid = "newer:2025-01-01"
        newer = self.newer_record(cid)
        self.commit_turns(store, cid, range(1))
        self.replace_record(store, cid, newer)
        fresh = self.make_store(tmp_path)
        for attempt in (lambda: fresh.load(cid), lambda: fresh.commit(cid, turn_messages(1)), lambda: fresh.load(cid)):
            try:
                self.run(attempt())
            except HistoryStoreError:
                pass
            else:
                raise AssertionError("a record of a newer version was read or replaced")
        assert self.run(self.make_store(tmp_path).reset_logical("newer")).records == 1
        assert self.load(self.make_store(tmp_path), cid) == []
        self.close(store, fresh)

    # ------------------------------------------------------------------ totals

    def test_contract_stats_and_clear_all(self, tmp_path: Path) -> None:
        store = self.with_totals(tmp_path)
        for cid in ("a", "b", "c:2025-01-01"):
            self.commit_turns(store, cid, range(2))
        stats = self.run(store.stats())
        assert stats.records == 3 and stats.bytes > 0
        cleared = self.run(store.clear_all())
        assert cleared.records == 3 and cleared.bytes == stats.bytes
        fresh = self.make_store(tmp_path)
        assert self.run(fresh.stats()).records == 0
        assert all(self.load(fresh, cid) == [] for cid in ("a", "b", "c:2025-01-01"))
        self.close(store, fresh)

    def test_contract_listing_and_totals_agree(self, tmp_path: Path) -> None:
        """``conversations()`` counts each one's retained messages; ``stats()`` sums their sizes and leaves no stage behind."""
        store = self.with_totals(tmp_path)
        self.commit_turns(store, "a", range(2))
        self.commit_turns(store, "b", range(1))
        self.commit_turns(store, "a", range(2, 3))
        listed = {info.conversation_id: info for info in self.run(self.make_store(tmp_path).conversations())}
        assert {cid: info.message_count for cid, info in listed.items()} == {"a": 6, "b": 2}
        assert listed["a"].updated_at >= listed["b"].updated_at > 0, "a was committed last"
        assert listed["a"].bytes > listed["b"].bytes > 0, "a holds more messages of the same sizes"
        stats = self.run(store.stats())
        assert (stats.records, stats.bytes) == (2, listed["a"].bytes + listed["b"].bytes)
        assert stats.messages in (None, 8)
        assert (stats.stages, stats.stage_bytes) == (0, 0), "no commit in flight, so no live stage"
        assert self.run(store.reset("b")) == 2
        assert [info.conversation_id for info in self.run(store.conversations())] == ["a"]
        assert self.run(store.stats()).bytes == listed["a"].bytes
        self.close(store)

    # ------------------------------------------------------------------ provider sessions (ProviderSessionStore)

    def provider_session_store(self, tmp_path: Path) -> ProviderSessionStore:
        """A :class:`~monoagent._kernel.stores.ProviderSessionStore`; the clauses below are skipped for another store."""
        return cast(ProviderSessionStore, self.declaring(tmp_path, ProviderSessionStore))  # declaring() skips any other

    def test_contract_provider_session_is_committed_with_the_turn(self, tmp_path: Path) -> None:
        store = self.provider_session_store(tmp_path)
        first = ProviderSessionState("0123456789abcdef" * 2, 0, "anthropic:claude-sonnet-4-6")  # 0: bound, nothing written yet
        second = ProviderSessionState(first.epoch, 1, first.model)

        async def go() -> None:
            assert await store.load_provider_session("c") is None
            await store.commit("c", turn_messages(1), provider_session=first)
            assert await store.load_provider_session("c") == first, "the committing handle reads its own session back"
            reader: Any = self.make_store(tmp_path)
            assert await reader.load_provider_session("c") == first, "a new handle reads revision 0 back"
            await reader.close()
            await store.commit("c", turn_messages(2), provider_session=second)
            assert await store.load_provider_session("c") == second
            fresh: Any = self.make_store(tmp_path)
            assert await fresh.load_provider_session("c") == second
            assert contents(await fresh.load("c")) == contents(turn_messages(1) + turn_messages(2))
            assert await fresh.load_provider_session("other") is None
            last = ProviderSessionState(first.epoch, 2**53 - 1, None)  # the largest revision JSON holds exactly
            await fresh.commit("c", turn_messages(3), provider_session=last)
            latest: Any = self.make_store(tmp_path)
            assert await latest.load_provider_session("c") == last
            await latest.close()
            await fresh.close()

        self.run(go())
        self.close(store)

    def test_contract_an_odd_provider_session_is_refused_or_read_back(self, tmp_path: Path) -> None:
        """A provider session a store may not be able to keep (a negative revision, one past 2**53, an epoch that is
        not 32 hex digits, a revision that is no int) is refused with the history intact, or read back exactly:
        a commit never writes what a load refuses."""
        store = self.provider_session_store(tmp_path)
        odd = [ProviderSessionState("ab" * 16, -1), ProviderSessionState("ab" * 16, 2**53), ProviderSessionState("xyz", 1),
               ProviderSessionState("ab" * 17, 1),
               ProviderSessionState("AB" * 16, 1), ProviderSessionState("ab" * 16, True), ProviderSessionState("ab" * 16, 1.5),  # type: ignore[arg-type]  # the values under test
               ProviderSessionState("ab" * 16, 1, 7)]  # type: ignore[arg-type]  # the value under test
        for n, state in enumerate(odd):
            cid = f"odd-{n}"
            self.commit_turns(store, cid, range(1))
            try:
                self.run(store.commit(cid, turn_messages(1), provider_session=state))
            except (TypeError, ValueError, HistoryStoreError):
                expected, bound = turns_text(range(1)), None
            else:
                expected, bound = turns_text(range(2)), state
            fresh: Any = self.make_store(tmp_path)
            assert contents(self.load(fresh, cid)) == expected, f"{state}: a commit wrote what a new handle does not read back"
            assert self.run(fresh.load_provider_session(cid)) == bound, f"{state}: the provider session read back"
            self.close(fresh)
        self.close(store)

    def test_contract_a_commit_without_provider_session_unbinds_the_record(self, tmp_path: Path) -> None:
        store = self.provider_session_store(tmp_path)
        bound = ProviderSessionState("fedcba9876543210" * 2, 3, None)

        async def go() -> None:
            await store.commit("c", turn_messages(1), provider_session=bound)
            await store.commit("c", turn_messages(2))  # a host-only append or a continuity account
            fresh: Any = self.make_store(tmp_path)
            assert await fresh.load_provider_session("c") is None
            assert len(await fresh.load("c")) == 4
            await fresh.close()

        self.run(go())
        self.close(store)

    def test_contract_a_reset_drops_the_provider_session(self, tmp_path: Path) -> None:
        store = self.provider_session_store(tmp_path)

        async def go() -> None:
            await store.commit("c", turn_messages(1), provider_session=ProviderSessionState("ab" * 16, 1, "m:x"))
            await store.reset("c")
            fresh: Any = self.make_store(tmp_path)
            assert await fresh.load_provider_session("c") is None
            await fresh.close()

        self.run(go())
        self.close(store)
