"""The tool-history conformance suite: what any :class:`~monoagent._kernel.stores.ToolHistoryStore` must prove.

The suite reaches the store the way the kernel does: it builds an Agent with the store's plugin
(bundled plugins load too; third-party entry points do not, so a distribution passes its own
plugin), selects the store with ``toolHistory.store`` and takes ``agent.tool_history_store()``.
A store plugin (the bundled ``sqlite`` sidecar, a PostgreSQL store, ...) runs it unchanged by
subclassing :class:`ToolHistoryStoreContract` in its own tests::

    import monoagent_postgres
    from monoagent.testing import ToolHistoryStoreContract

    class TestPostgresToolHistory(ToolHistoryStoreContract):
        store_name = "postgres"
        plugins = (monoagent_postgres,)

        def store_config(self, tmp_path, **bounds):
            return {"postgres": {"dsn": DSN, "schema": f"t_{tmp_path.name}", **bounds}}

``store_config`` receives pytest's ``tmp_path`` and the bounds a test needs (``max_calls``,
``max_age_days``, ``max_payload_bytes``, ``max_tombstones``, ``tombstone_days``, and the
``confirm_timeout_ms`` / ``reconcile_timeout_ms`` the store reports in seconds; the others keep
their documented defaults, among them the 8 KiB argument and 16 KiB result limits) and returns the
configuration that gives the store those bounds, merged over
``{"toolHistory": {"store": store_name}, "plugins": {"block": ["redaction"]}}``: the suite's own
redactor replaces the bundled one, so it can tell that the store applies the Agent's redaction
chain and that it never shows the chain a value it omitted. Two Agents built with the same
``tmp_path`` must reach the same stored data.

The store's methods are coroutines (:class:`~monoagent._kernel.stores.ToolHistoryStore`), and
so is every clause: each runs on an event loop of its own, on which it opens, uses and closes
(through the owning Agent's ``aclose()``) every store it needs, so a store may bind its
connections to the loop it first runs on. No asyncio plugin for pytest is needed. Writes are
submitted the way the harness submits them (tasks started in order, see "Submission order" in
the protocol), and the concurrency clause keeps several writes of one store in flight at once.

Optional hooks, each enabling tests that are skipped (with the reason) without it:
:meth:`ToolHistoryStoreContract.corrupt` damages the stored data (the fail-closed test),
:meth:`ToolHistoryStoreContract.private_paths` names the files it keeps (the owner-only test, and
the symlink test: each of them replaced by a symlink is refused), :meth:`ToolHistoryStoreContract.delete_stored_data`
deletes the data under the open store as a purge does (the next write must record afresh), and
:meth:`ToolHistoryStoreContract.set_clock` makes the store read the time retention compares
``maxAgeDays`` and ``tombstoneDays`` against from a clock the suite controls (the age-boundary
tests: a call exactly ``maxAgeDays`` old is kept, one second older is removed, and likewise a
tombstone ``tombstoneDays`` old). :meth:`~ToolHistoryStoreContract.set_lock_wait` bounds the store's wait
for a lock held elsewhere and :meth:`~ToolHistoryStoreContract.hold_lock` holds one (a write or a read
transaction of another holder: the lock clauses and a ``flush()`` bounded by ``asyncio.wait_for``),
:meth:`~ToolHistoryStoreContract.mark_unknown_version` makes the data claim a format version the store does
not read, and :meth:`~ToolHistoryStoreContract.empty_stored_data` leaves a fresh zero-byte data file
(:mod:`monoagent.testing.tool_history_contract_stored`). The suite needs pytest only when it runs.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path

from monoagent._boundary.text import utf8_len
from monoagent._kernel.errors import ToolHistoryError
from monoagent._kernel.model import ToolCall, ToolResult, ToolStatus
from monoagent._kernel.stores import ToolHistoryStore, ToolInvocation, record_id
from monoagent.testing.tool_history_contract_retention import ToolHistoryRetentionContract
from monoagent.testing.tool_history_contract_stored import ToolHistoryStoredDataContract
from monoagent.testing.tool_history_contract_support import (
    ARGUMENT_LIMIT,
    FAKE_SECRET,
    GROW,
    GROWN,
    JSON_TEXT_OVERHEAD,
    OVERSIZED,
    REDACTED,
    RESULT_LIMIT,
    ROUNDS,
    WRITERS,
    clause,
    compact,
    end_seq,
)

__all__ = ["ToolHistoryStoreContract"]

def _snapshot(path: Path) -> list[tuple[str, bytes]]:
    """What a file or a directory tree holds: (relative name, bytes) of every file, sorted."""
    if path.is_file():
        return [("", path.read_bytes())]
    return sorted((str(found.relative_to(path)), found.read_bytes()) for found in path.rglob("*") if found.is_file())


STARTED = 1_700_000_000.5
"""An invocation's ``started_at``: exact in binary, so a store that keeps the times given returns them unchanged
(a store that keeps no times reports both as None, as :class:`~monoagent._kernel.stores.ToolRecord` allows)."""


PROTOCOL_METHODS = (
    "write_invocation", "write_result", "records", "flush", "stats",
    "clear_logical", "clear_conversation", "clear_all", "close",
)


class ToolHistoryStoreContract(ToolHistoryRetentionContract, ToolHistoryStoredDataContract):
    """Subclass with a ``Test`` name, set :attr:`store_name` and implement :meth:`store_config`."""

    # ------------------------------------------------------------------ clauses

    @clause
    async def test_contract_the_registry_hands_out_one_store(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path)
        try:
            store = agent.tool_history_store()
            assert isinstance(store, ToolHistoryStore), f"{type(store).__name__} lacks part of the ToolHistoryStore protocol"
            assert agent.tool_history_store() is store  # created once per Agent
            plain = [name for name in PROTOCOL_METHODS if not inspect.iscoroutinefunction(getattr(store, name))]
            assert not plain, f"{type(store).__name__}: {', '.join(plain)} must be coroutine functions (async def), as the protocol declares"
        finally:
            await agent.aclose()

    @clause
    async def test_contract_invocation_then_result(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            assert await self.records(store) == [] and (await self.counts(store))[0] == 0
            invocation = ToolInvocation("conv", "logical", "run", ToolCall("c1", "probe", {"q": 1, "r": [2]}), STARTED, isolated=True)
            await store.write_invocation(invocation)
            (open_record,) = await self.records(store, conversation_id="conv")
            assert open_record.status is None and open_record.end_seq is None and open_record.result is None
            assert (open_record.started_at, open_record.finished_at) in ((STARTED, None), (None, None)), "its start, no end yet"
            assert open_record.invocation_id == record_id("conv", "run", "c1", "invocation")
            assert (open_record.conversation_id, open_record.logical_conversation_id, open_record.run_id) == ("conv", "logical", "run")
            assert (open_record.tool, open_record.arguments, open_record.isolated) == ("probe", '{"q":1,"r":[2]}', True)
            assert open_record.arguments_bytes == open_record.arguments_retained_bytes == 15, "compact JSON, measured as stored"
            assert await self.counts(store) == (1, 1), "an open call is one call of one record (its invocation)"
            finished = float(int(time.time())) + 0.25
            await store.write_result(invocation, ToolResult("c1", "probe", "answer", ToolStatus.EXIT_NONZERO), finished)
            (record,) = await self.records(store, conversation_id="conv")
            assert record.status == "exit_nonzero" and record.result == "answer" and record.result_bytes == 6
            assert (record.started_at, record.finished_at) in ((STARTED, finished), (None, None)), "the times given, or none kept"
            assert record.result_id == record_id("conv", "run", "c1", "result")
            assert record.end_seq is not None and record.end_seq > record.start_seq == open_record.start_seq
            assert await self.counts(store) == (1, 2)
            assert await self.records(store, logical_conversation_id="logical") == [record]
            assert await self.records(store, conversation_id="logical") == [] and await self.records(store, logical_conversation_id="conv") == []
            assert await self.records(store, conversation_id="conv", logical_conversation_id="logical") == [record], "both filters at once"
            assert await self.records(store, conversation_id="conv", logical_conversation_id="conv") == [], "both must match"
        finally:
            await self.close(store)

    @clause
    async def test_contract_every_documented_status_is_kept(self, tmp_path: Path) -> None:
        """A result's status is one of the documented eight, and is kept as its value."""
        store = self._store(tmp_path)
        try:
            for status in ToolStatus:
                invocation = ToolInvocation("conv", "conv", "run", ToolCall(status.value, "probe", {}), STARTED)
                await store.write_result(invocation, ToolResult(status.value, "probe", "x", status), time.time())
            assert [(r.call_id, r.status) for r in await self.records(store)] == [(s.value, s.value) for s in ToolStatus]
        finally:
            await self.close(store)

    @clause
    async def test_contract_records_survive_closing_and_reopening(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            await self.put(store, "conv", "run", "a", args={"k": "v"}, content="kept")
            before = await self.records(store)
        finally:
            await self.close(store)
        again = self._store(tmp_path)
        try:
            assert await self.records(again) == before and before[0].result == "kept"
            await self.put(again, "conv", "run", "a", content="changed")  # a retry after the reopen stores nothing twice
            await self.put(again, "conv", "run", "b")
            a, b = await self.records(again)
            assert (a.result, b.call_id) == ("kept", "b") and b.start_seq > end_seq(a), "the sequence goes on"
            assert await self.counts(again) == (2, 4)
        finally:
            await self.close(again)

    @clause
    async def test_contract_stored_files_are_owner_only(self, tmp_path: Path) -> None:
        """Whatever the umask: written with umask 0, no file or directory of the store grants group or others anything."""
        import os
        import stat

        store = self._store(tmp_path)
        previous = os.umask(0)
        try:
            await self.put(store, "conv", "run", "a")
        finally:
            os.umask(previous)
        try:
            paths = list(self.private_paths(store))
            assert paths, "private_paths() named nothing"
            for path in paths:
                mode = os.lstat(path).st_mode
                assert not stat.S_ISLNK(mode), f"{path} is a symlink"
                assert stat.S_IMODE(mode) & 0o077 == 0, f"{path} is {stat.S_IMODE(mode):04o}, not owner-only"
        finally:
            await self.close(store)

    @clause
    async def test_contract_a_symlink_in_place_of_a_stored_path_is_refused(self, tmp_path: Path) -> None:
        """Each path ``private_paths()`` names that outlives the store, moved aside and replaced (the store
        closed) by a symlink to it: the next write fails with a ``ToolHistoryError`` naming the path, and
        nothing is written through the link."""
        import os

        import pytest

        for index, relative in enumerate(await self._lasting_paths(tmp_path)):
            home = tmp_path / f"planted-{index}"
            held = await self._closed_with_one_call(home)
            path, aside = home / relative, home / relative.with_name(relative.name + ".aside")
            os.rename(path, aside)
            os.symlink(aside, path)
            before = _snapshot(aside)
            store = self._store(home)
            try:
                with pytest.raises(ToolHistoryError) as refused:
                    await self.put(store, "conv", "run", "b")
                assert relative.name in str(refused.value), f"the refusal names what it refused: {refused.value}"
                assert _snapshot(aside) == before, f"{relative} is a symlink: nothing may be written through it"
                try:
                    assert await self.records(store) == held, "a read shows what the store held, or fails closed"
                except ToolHistoryError as error:
                    assert " " in str(error), f"a refusal says what went wrong, not {str(error)!r}"
            finally:
                await self.close(store)

    @clause
    async def test_contract_a_result_for_an_unknown_invocation_creates_both(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            invocation = ToolInvocation("conv", "conv", "run", ToolCall("late", "probe", {"a": "b"}), STARTED)
            finished = float(int(time.time())) + 0.5
            await store.write_result(invocation, ToolResult("late", "probe", "done", ToolStatus.TIMEOUT), finished)
            (record,) = await self.records(store)
            assert (record.invocation_id, record.result_id) == (invocation.invocation_id, invocation.result_id)
            assert (record.started_at, record.finished_at) in ((STARTED, finished), (None, None))
            assert record.status == "timeout" and record.arguments == '{"a":"b"}' and end_seq(record) > record.start_seq
            assert await self.counts(store) == (1, 2)
        finally:
            await self.close(store)

    @clause
    async def test_contract_writes_are_idempotent_and_ordered(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            finished = float(int(time.time()))
            first = await self.put(store, "conv", "run", "a", finished=finished)
            await store.write_invocation(first)
            await store.write_result(first, ToolResult("a", "probe", "again", ToolStatus.ERROR), finished + 1)
            await self.put(store, "conv", "run", "b")
            records = await self.records(store, conversation_id="conv")
            assert [r.call_id for r in records] == ["a", "b"] and (records[0].result, records[0].status) == ("ok", "success")
            assert records[0].finished_at in (finished, None), "a retried result changes nothing, its time included"
            assert end_seq(records[0]) < records[1].start_seq < end_seq(records[1])
            assert await self.counts(store) == (2, 4), "a retried write stores nothing twice"
        finally:
            await self.close(store)

    @clause
    async def test_contract_argument_limit_at_and_either_side(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        room = ARGUMENT_LIMIT - JSON_TEXT_OVERHEAD
        cases = {
            "under": "a" * (room - 1),
            "at": "a" * room,
            "at-multibyte": "a" * (room - 2) + "é",  # the last character ends exactly at the limit
            "over": OVERSIZED + "a" * (room + 1 - len(OVERSIZED)),
            "over-multibyte": OVERSIZED + "a" * (room - 1 - len(OVERSIZED)) + "é",  # it straddles the limit
        }
        try:
            for call_id, text in cases.items():
                await self.put(store, "conv", "run", call_id, args={"text": text})
            for call_id in ("under", "at", "at-multibyte"):
                record, raw = await self.only(store, call_id), compact({"text": cases[call_id]})
                assert record.arguments == raw and not record.arguments_omitted and not record.arguments_truncated, call_id
                assert record.arguments_bytes == record.arguments_retained_bytes == utf8_len(raw) <= ARGUMENT_LIMIT, call_id
            assert (await self.only(store, "at")).arguments_bytes == ARGUMENT_LIMIT
            for call_id in ("over", "over-multibyte"):
                record = await self.only(store, call_id)
                assert utf8_len(compact({"text": cases[call_id]})) == ARGUMENT_LIMIT + 1
                assert record.arguments is None and record.arguments_omitted and not record.arguments_retained_bytes, call_id
                assert record.arguments_truncated, f"{call_id}: an omitted value is not whole, so it is truncated too"
                assert record.arguments_bytes == ARGUMENT_LIMIT + 1, f"{call_id}: the count saturates at limit + 1"
            assert not [kind for kind, text in self.redactor.seen if OVERSIZED in text], "an omitted value was shown to the chain"
        finally:
            await self.close(store)

    @clause
    async def test_contract_result_limit_at_and_either_side(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        cases = {
            "under": "r" * (RESULT_LIMIT - 1),
            "at": "ü" * (RESULT_LIMIT // 2),
            "over": OVERSIZED + "r" * (RESULT_LIMIT + 1 - len(OVERSIZED)),
            "over-multibyte": OVERSIZED + "r" * (RESULT_LIMIT - 1 - len(OVERSIZED)) + "ü",
            "far-over": OVERSIZED + "r" * (4 * RESULT_LIMIT),
        }
        try:
            for call_id, content in cases.items():
                await self.put(store, "conv", "run", call_id, content=content)
            for call_id in ("under", "at"):
                record = await self.only(store, call_id)
                assert record.result == cases[call_id] and not record.result_omitted and not record.result_truncated, call_id
                assert record.result_bytes == record.result_retained_bytes == utf8_len(cases[call_id]), call_id
            assert (await self.only(store, "at")).result_bytes == RESULT_LIMIT
            for call_id in ("over", "over-multibyte", "far-over"):
                record = await self.only(store, call_id)
                assert record.result is None and record.result_omitted and not record.result_retained_bytes, call_id
                assert record.result_truncated, f"{call_id}: an omitted value is not whole, so it is truncated too"
                assert record.result_bytes == RESULT_LIMIT + 1, f"{call_id}: the count saturates at limit + 1"
                assert record.status == "success", "an omitted result still settles its call"
            assert not [kind for kind, text in self.redactor.seen if OVERSIZED in text], "an omitted value was shown to the chain"
        finally:
            await self.close(store)

    @clause
    async def test_contract_kept_values_pass_the_agents_chain_and_stay_within_the_limits(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        grown_args = GROW + "é" * ((ARGUMENT_LIMIT - JSON_TEXT_OVERHEAD - len(GROW)) // 2)
        grown_result = GROW + "é" * ((RESULT_LIMIT - len(GROW)) // 2)
        try:
            await self.put(store, "conv", "run", "secret", args={"key": FAKE_SECRET, FAKE_SECRET: "v"},
                     content=f"token {FAKE_SECRET} " + "s" * (RESULT_LIMIT - 7 - len(FAKE_SECRET)))
            await self.put(store, "conv", "run", "grown", args={"text": grown_args}, content=grown_result)
            secret, grown = await self.records(store)
            assert FAKE_SECRET not in (secret.arguments or "") + (secret.result or "")
            assert secret.result is not None and secret.result.startswith(f"token {REDACTED} "), "the Agent's chain, not the store's own"
            assert REDACTED in (secret.arguments or "") and '"v"' in (secret.arguments or ""), "keys are redacted too"
            assert secret.result_bytes == RESULT_LIMIT and secret.result_retained_bytes == utf8_len(secret.result)
            assert secret.arguments_retained_bytes == utf8_len(secret.arguments or "") < secret.arguments_bytes
            assert not secret.result_truncated and not secret.result_omitted
            assert utf8_len(compact({"text": grown_args})) <= ARGUMENT_LIMIT and utf8_len(grown_result) <= RESULT_LIMIT
            for kept, retained, original, truncated, limit, full in (
                (grown.arguments, grown.arguments_retained_bytes, grown.arguments_bytes, grown.arguments_truncated,
                 ARGUMENT_LIMIT, compact({"text": grown_args.replace(GROW, GROWN)})),
                (grown.result, grown.result_retained_bytes, grown.result_bytes, grown.result_truncated,
                 RESULT_LIMIT, grown_result.replace(GROW, GROWN)),
            ):
                assert kept is not None and truncated, "a value that redaction made longer than its limit is cut, and says so"
                assert full.startswith(kept) and retained == utf8_len(kept), "the kept part is a prefix of the redacted value"
                assert limit - 4 < retained <= limit, "cut at the limit, on a character boundary"
                assert original == utf8_len(full.replace(GROWN, GROW)), "the original size is the size before redaction"
        finally:
            await self.close(store)

    @clause
    async def test_contract_the_chain_is_told_what_it_redacts(self, tmp_path: Path) -> None:
        """The ``redact`` hook's ``kind``: ``"tool_arguments"`` for arguments, ``"tool_result"`` for results."""
        store = self._store(tmp_path)
        try:
            await self.put(store, "conv", "run", "a", args={"ARGUMENT-KEY": "ARGUMENT-VALUE"}, content="RESULT-TEXT")
            for marker, kind in (("ARGUMENT-KEY", "tool_arguments"), ("ARGUMENT-VALUE", "tool_arguments"), ("RESULT-TEXT", "tool_result")):
                kinds = {seen_kind for seen_kind, text in self.redactor.seen if marker in text}
                assert kinds == {kind}, f"{marker} was redacted as {sorted(kinds) or 'nothing'}, not as {kind!r}"
        finally:
            await self.close(store)

    @clause
    async def test_contract_timeouts_are_the_configured_seconds(self, tmp_path: Path) -> None:
        """``confirm_timeout`` and ``reconcile_timeout`` are seconds: 250 ms to confirm by default, else as configured."""
        store = self._store(tmp_path / "default")
        try:
            assert store.confirm_timeout == 0.25, "the harness waits at most 250 ms for a write's confirmation by default"
        finally:
            await self.close(store)
        store = self._store(tmp_path / "configured", confirm_timeout_ms=400, reconcile_timeout_ms=3_000)
        try:
            assert (store.confirm_timeout, store.reconcile_timeout) == (0.4, 3.0), "configured in milliseconds, read in seconds"
        finally:
            await self.close(store)

    @clause
    async def test_contract_logical_clear_covers_every_daily_bucket(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            await self.put(store, "chat", "r", "1")
            await self.put(store, "chat:2026-07-01", "r", "2", logical="chat")
            await self.put(store, "chat:2026-07-02", "r", "3")  # a bucket-shaped id submitted as such (the console is exempt from rollover)
            await store.write_invocation(ToolInvocation("chat:2026-07-03", "chat", "r", ToolCall("4", "probe", {}), 1.0))
            others = ("chat:notes", "chatter", "chat:2026-07-01x", "chat:2026-07", "chat:2026-07-ab", "x:chat:2026-07-01", "other")
            for other in others:
                await self.put(store, other, "r", other)
            assert await self.counts(store) == (11, 21)
            assert await self.ids(store, logical_conversation_id="chat") == ["1", "2", "4"]
            before = int((await store.stats()).bytes)
            report = await store.clear_logical("chat")
            assert (report.calls, report.records) == (4, 7) and 0 <= report.bytes <= before
            assert sorted(await self.ids(store)) == sorted(others)
            nothing = await store.clear_logical("nobody")
            assert (nothing.calls, nothing.records, nothing.bytes) == (0, 0, 0) and len(await self.records(store)) == len(others)
            report = await store.clear_all()
            assert (report.calls, report.records) == (7, 14) and await self.counts(store) == (0, 0) and await self.records(store) == []
        finally:
            await self.close(store)

    @clause
    async def test_contract_exact_clear_covers_one_id(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            await self.put(store, "chat", "r", "1")
            await self.put(store, "chat:2026-07-01", "r", "2", logical="chat")
            await self.put(store, "chat:2026-07-01:2026-07-02", "r", "3", logical="chat:2026-07-01")
            report = await store.clear_conversation("chat:2026-07-01")
            assert (report.calls, report.records) == (1, 2)
            assert sorted(r.conversation_id for r in await self.records(store)) == ["chat", "chat:2026-07-01:2026-07-02"]
        finally:
            await self.close(store)

    @clause
    async def test_contract_maintenance_from_a_handle_that_never_wrote(self, tmp_path: Path) -> None:
        """The ``history`` commands open a store, never write through it, and read or clear what agents wrote."""
        empty = self._store(tmp_path / "empty")
        try:
            stats = await empty.stats()
            assert (stats.calls, stats.records) == (0, 0) and int(stats.bytes) >= 0 and await self.records(empty) == []
            for clear in (empty.clear_all, lambda: empty.clear_logical("a"), lambda: empty.clear_conversation("a")):
                report = await clear()
                assert (report.calls, report.records, report.bytes) == (0, 0, 0), "clearing an empty store removes nothing"
        finally:
            await self.close(empty)
        writer = self._store(tmp_path / "shared")
        try:
            for conversation, call_id in (("a", "1"), ("a:2026-07-01", "2"), ("b", "3")):
                await self.put(writer, conversation, "run", call_id)
            maintainer = self._store(tmp_path / "shared")
            try:
                assert await self.counts(maintainer) == (3, 6)
                report = await maintainer.clear_logical("a")
                assert (report.calls, report.records) == (2, 4) and await self.ids(writer) == ["3"]
                report = await maintainer.clear_conversation("b")
                assert (report.calls, report.records) == (1, 2) and await self.records(writer) == []
                await self.put(writer, "c", "run", "4")
                assert await self.ids(maintainer) == ["4"] and await self.counts(maintainer) == (1, 2)
            finally:
                await self.close(maintainer)
        finally:
            await self.close(writer)

    @clause
    async def test_contract_two_handles_see_the_same_data(self, tmp_path: Path) -> None:
        first = self._store(tmp_path)
        second = self._store(tmp_path)
        try:
            assert await self.records(second) == [], "the second handle is open and has read before anything is written"
            invocation = ToolInvocation("conv", "conv", "run", ToolCall("a", "probe", {}), 1.0)
            await first.write_invocation(invocation)
            assert [(r.call_id, r.status) for r in await self.records(second)] == [("a", None)], "a call in flight, written by the other handle"
            await first.write_result(invocation, ToolResult("a", "probe", "ok"), time.time())
            assert [(r.call_id, r.status) for r in await self.records(second)] == [("a", "success")]
            await self.put(second, "conv", "run", "b")
            a, b = await self.records(first, conversation_id="conv")
            assert (a.call_id, b.call_id) == ("a", "b") and end_seq(a) < b.start_seq, "one sequence across handles"
            assert await self.counts(first) == await self.counts(second) == (2, 4)
            assert int((await second.stats()).bytes) > 0, "data takes room"
        finally:
            await self.close(first)
            await self.close(second)

    @clause
    async def test_contract_concurrent_writers_lose_nothing(self, tmp_path: Path) -> None:
        """Writers run as tasks, each round's writes in flight at once; they meet between rounds, so each
        round's results were written before any of the next round's."""
        import pytest

        store = self._store(tmp_path)
        between = asyncio.Barrier(WRITERS)
        in_flight = [0, 0]  # now, most at once

        async def work(worker: int) -> None:
            for i in range(ROUNDS):
                in_flight[0] += 1
                in_flight[1] = max(in_flight)
                try:
                    await self.put(store, f"conv{worker % 2}", f"run{worker}", f"{worker}-{i}", content=f"{worker} {i}")
                finally:
                    in_flight[0] -= 1
                await between.wait()

        try:
            await asyncio.gather(*(work(w) for w in range(WRITERS)))
            if in_flight[1] < WRITERS:
                pytest.skip("the store finished each write before the next one started (it never yields to the event "
                            "loop), so the suite cannot observe concurrent writes")
            await store.flush()
            records = await self.records(store)
            assert await self.counts(store) == (WRITERS * ROUNDS, 2 * WRITERS * ROUNDS)
            assert all(r.result == r.call_id.replace("-", " ") for r in records), "results kept apart"
            seqs = [s for r in records for s in (r.start_seq, r.end_seq)]
            assert len(set(seqs)) == len(seqs), "sequence numbers are unique"
            rounds = sorted(records, key=end_seq)
            assert [int(r.call_id.split("-")[1]) for r in rounds] == [i for i in range(ROUNDS) for _ in range(WRITERS)], (
                "each round's results were all written before any of the next round's: sequence follows submission")
        finally:
            await self.close(store)

    @clause
    async def test_contract_sequence_follows_the_order_writes_start_in(self, tmp_path: Path) -> None:
        """Writes started as tasks, all before any is awaited (as the harness starts a run's writes): their
        sequence numbers follow the order the tasks were created in, however the writes then overlap, and
        a clear started after them covers every one."""
        store = self._store(tmp_path)
        calls = [ToolInvocation("conv", "conv", "run", ToolCall(f"{i:02d}", "probe", {}), 1.0) for i in range(12)]
        try:
            invocations = [asyncio.ensure_future(store.write_invocation(call)) for call in calls]
            results = [asyncio.ensure_future(store.write_result(call, ToolResult(call.call.id, "probe", "ok"), time.time()))
                       for call in reversed(calls)]
            await asyncio.gather(*invocations, *results)
            records = await self.records(store)
            assert [r.call_id for r in records] == [call.call.id for call in calls], "start_seq in the order the writes started"
            ends = [r.call_id for r in sorted(records, key=end_seq)]
            assert ends == [call.call.id for call in reversed(calls)], "end_seq in the order the result writes started"
            late = [asyncio.ensure_future(store.write_invocation(
                ToolInvocation("conv", "conv", "late", ToolCall(f"late-{i}", "probe", {}), 1.0))) for i in range(3)]
            report = await asyncio.ensure_future(store.clear_all())  # started after the three
            await asyncio.gather(*late)
            assert (report.calls, report.records) == (15, 27), "the clear covered the writes started before it"
            assert await self.records(store) == [], "a write started before the clear outlived it"
        finally:
            await self.close(store)

    @clause
    async def test_contract_data_deleted_under_an_open_store_is_recorded_afresh(self, tmp_path: Path) -> None:
        """A purge deletes the data while an Agent runs: its next write starts a fresh store, it does not fail for good."""
        store = self._store(tmp_path)
        try:
            await self.put(store, "conv", "run", "a")
            self.delete_stored_data(store)
            await self.put(store, "conv", "run", "b")
            assert await self.ids(store) == ["b"] and await self.counts(store) == (1, 2), "nothing of before the purge, nothing lost after it"
            await self.put(store, "conv", "run", "c")
            assert await self.ids(store) == ["b", "c"], "and it goes on recording"
        finally:
            await self.close(store)

    @clause
    async def test_contract_corrupt_data_fails_closed(self, tmp_path: Path) -> None:
        import pytest

        store = self._store(tmp_path)
        try:
            await self.put(store, "conv", "run", "a")
            self.corrupt(store)  # under the open store: its next write must fail, never succeed or hang
            with pytest.raises(ToolHistoryError) as failed:
                await self.put(store, "conv", "run", "b")
            await self.close(store)
            refusals = [failed]
            with pytest.raises(ToolHistoryError) as failed:
                await self.records(store)
            refusals.append(failed)
            with pytest.raises(ToolHistoryError) as failed:  # the history commands check this before they clear anything
                await store.stats()
            refusals.append(failed)
            maintainer = self._store(tmp_path)  # what `monoagent history reset` opens: a handle that never wrote
            try:
                with pytest.raises(ToolHistoryError) as failed:
                    await maintainer.clear_all()
                refusals.append(failed)
            finally:
                await self.close(maintainer)
            for refusal in refusals:
                assert " " in str(refusal.value), f"a refusal says what went wrong, not {str(refusal.value)!r}"
        finally:
            await self.close(store)
