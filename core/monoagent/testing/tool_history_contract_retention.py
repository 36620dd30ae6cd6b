"""The retention clauses of the tool-history conformance suite, each bound at and either side of its boundary.

Mixed into :class:`~monoagent.testing.ToolHistoryStoreContract`: ``maxCalls``, ``maxAgeDays`` (on
the suite's clock when the store offers ``set_clock``), ``maxPayloadBytes``, the tombstone bounds
``maxTombstones`` and ``tombstoneDays``, and calls in flight, which no bound removes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monoagent._kernel.model import ToolCall, ToolResult
from monoagent._kernel.stores import ToolHistoryStore, ToolInvocation
from monoagent.testing.tool_history_contract_support import (
    ARGUMENT_LIMIT,
    DAY,
    EMPTY_ARGUMENTS,
    JSON_TEXT_OVERHEAD,
    PAYLOAD_FLOOR,
    RESULT_LIMIT,
    ToolHistoryContractBase,
    clause,
)


class ToolHistoryRetentionContract(ToolHistoryContractBase):
    """Retention by count, age and payload, the tombstone bounds, calls in flight (mixed into the contract)."""

    @clause
    async def test_contract_retention_by_count_at_and_either_side(self, tmp_path: Path) -> None:
        store = self._store(tmp_path, max_calls=3)
        try:
            for expected in (["0"], ["0", "1"], ["0", "1", "2"]):  # up to N: nothing removed
                await self.put(store, "conv", "run", expected[-1])
                assert await self.ids(store) == expected
            await self.put(store, "conv", "run", "3")  # N + 1: the oldest goes, leaving a tombstone
            assert await self.ids(store) == ["1", "2", "3"] and await self.counts(store) == (3, 7)
            await self.extra_counts(store, 3 * EMPTY_ARGUMENTS + 3 * len("ok"), 1)
            await self.put(store, "conv", "run", "4")
            assert await self.ids(store) == ["2", "3", "4"] and await self.counts(store) == (3, 8)
            await self.extra_counts(store, 3 * EMPTY_ARGUMENTS + 3 * len("ok"), 2)
            report = await store.clear_all()
            assert (report.calls, report.records) == (3, 8), "a clear counts the tombstones it removes"
        finally:
            await self.close(store)

    @clause
    async def test_contract_retention_by_age_without_a_clock(self, tmp_path: Path) -> None:
        store = self._store(tmp_path, max_age_days=10)
        try:
            await self.put(store, "conv", "run", "old", finished=time.time() - 10 * DAY - 1)  # older than 10 days whenever checked
            await self.put(store, "conv", "run", "new")
            assert await self.ids(store) == ["new"] and await self.counts(store) == (1, 3)
        finally:
            await self.close(store)

    @clause
    async def test_contract_retention_by_age_at_and_either_side(self, tmp_path: Path) -> None:
        store = self._store(tmp_path, max_age_days=10)
        now = 1_900_000_000.0
        try:
            self.set_clock(store, lambda: now)
            horizon = now - 10 * DAY
            for call_id, finished in (("outside", horizon - 1), ("at", horizon), ("inside", horizon + 1), ("new", now)):
                await self.put(store, "conv", "run", call_id, finished=finished)
            assert await self.ids(store) == ["at", "inside", "new"], "exactly maxAgeDays old is kept, one second older is removed"
            assert await self.counts(store) == (3, 7)
        finally:
            await self.close(store)

    async def _payload_store(self, tmp_path: Path, sizes: Sequence[int], **bounds: Any) -> ToolHistoryStore:
        """A store bounded to :data:`PAYLOAD_FLOOR` bytes holding calls of the given retained payloads, oldest first."""
        store = self._store(tmp_path, **{"max_payload_bytes": PAYLOAD_FLOOR, "max_calls": 1000, **bounds})
        for i, size in enumerate(sizes):
            await self.put(store, "conv", "run", str(i), content="p" * (size - EMPTY_ARGUMENTS))
        return store

    @clause
    async def test_contract_retention_by_payload_bytes_at_and_either_side(self, tmp_path: Path) -> None:
        quarter = PAYLOAD_FLOOR // 4  # arguments "{}" (2 bytes) plus 16,382 bytes of result
        for name, last, kept in (("under", quarter - 1, 4), ("at", quarter, 4), ("over", quarter + 1, 3)):
            store = await self._payload_store(tmp_path / name, [quarter, quarter, quarter, last])
            try:
                assert await self.ids(store) == [str(i) for i in range(4 - kept, 4)], f"{name}: arguments and results both count"
            finally:
                await self.close(store)
        store = await self._payload_store(tmp_path / "back-to-at", [quarter] * 5)
        try:
            assert await self.ids(store) == ["1", "2", "3", "4"], "removal stops once the payload is back at the bound"
            assert await self.counts(store) == (4, 9)
            await self.extra_counts(store, PAYLOAD_FLOOR, 1)
            before = int((await store.stats()).bytes)
            report = await store.clear_all()
            assert (report.calls, report.records) == (4, 9) and 0 <= report.bytes <= before, "a clear frees at most what stats() counted"
        finally:
            await self.close(store)
        store = await self._payload_store(tmp_path / "two-go", [quarter] * 4)  # at the bound, then a call of 24 KiB
        try:
            await self.put(store, "conv", "run", "heavy", args={"text": "h" * (ARGUMENT_LIMIT - JSON_TEXT_OVERHEAD)}, content="p" * RESULT_LIMIT)
            assert await self.ids(store) == ["2", "3", "heavy"], "one removal is not enough: the oldest go until the payload fits"
        finally:
            await self.close(store)

    @clause
    async def test_contract_a_call_removed_by_one_bound_frees_its_payload(self, tmp_path: Path) -> None:
        """The bounds combine: what ``maxPayloadBytes`` measures is the payload left after the count and age
        bounds removed their calls, so a call those removals brought back under the bound stays."""
        over = PAYLOAD_FLOOR // 4 + 1  # four of them are 4 bytes over the bound, three are well under it
        store = await self._payload_store(tmp_path / "count", [over] * 4, max_calls=3)
        try:
            assert await self.ids(store) == ["1", "2", "3"], "the count bound removed the oldest; the other three fit the payload bound"
            assert await self.counts(store) == (3, 7)
        finally:
            await self.close(store)
        store = await self._payload_store(tmp_path / "count-then-bytes", [EMPTY_ARGUMENTS + 2] + [over] * 4, max_calls=4)
        try:
            assert await self.ids(store) == ["2", "3", "4"], "the count bound removed a tiny call; the rest is still over: one more goes"
        finally:
            await self.close(store)
        store = await self._payload_store(tmp_path / "age", [], max_age_days=10)
        try:
            stale = ToolInvocation("conv", "conv", "run", ToolCall("stale", "probe", {}), 1.0)
            await store.write_invocation(stale)
            for i in range(3):
                await self.put(store, "conv", "run", str(i), content="p" * (over - EMPTY_ARGUMENTS))
            old = time.time() - 10 * DAY - 1  # its result settles it 10 days + 1 s ago: the age bound removes it
            await store.write_result(stale, ToolResult("stale", "probe", "p" * (over - EMPTY_ARGUMENTS)), old)
            assert await self.ids(store) == ["0", "1", "2"], "the age bound removed the stale call; the other three fit the payload bound"
            assert await self.counts(store) == (3, 7)
        finally:
            await self.close(store)

    @clause
    async def test_contract_calls_in_flight_are_never_pruned(self, tmp_path: Path) -> None:
        store = self._store(tmp_path, max_calls=1, max_age_days=1, max_payload_bytes=PAYLOAD_FLOOR)
        try:
            heavy = {"text": "h" * (ARGUMENT_LIMIT - JSON_TEXT_OVERHEAD)}
            opened = ToolInvocation("conv", "conv", "run", ToolCall("open", "probe", heavy), 1.0)  # started in 1970
            await store.write_invocation(opened)
            await self.put(store, "conv", "run", "old", finished=time.time() - 2 * DAY)
            for i in range(3):
                await self.put(store, "conv", "run", str(i), content="p" * RESULT_LIMIT)
            assert await self.ids(store) == ["open", "2"] and (await self.only(store, "open")).status is None
            await store.write_result(opened, ToolResult("open", "probe", "late"), time.time())
            assert len(await self.records(store)) == 1, "once it completes, the call is retained like any other"
        finally:
            await self.close(store)

    @clause
    async def test_contract_tombstones_by_count_at_and_either_side(self, tmp_path: Path) -> None:
        """``maxTombstones`` N = 2: each removed call leaves one, up to N; past N the oldest tombstone goes."""
        store = self._store(tmp_path, max_calls=1, max_tombstones=2)
        try:
            for i, tombstones in enumerate((0, 1, 2, 2, 2)):  # none, under, at, then one over twice
                await self.put(store, f"c{i}", "run", str(i))
                assert await self.counts(store) == (1, 2 + tombstones), f"after call {i}: one call, {tombstones} tombstones"
            for conversation, records in (("c0", 0), ("c1", 0), ("c2", 1), ("c3", 1)):
                report = await store.clear_logical(conversation)
                assert (report.calls, report.records) == (0, records), f"{conversation}: the oldest tombstones went first"
        finally:
            await self.close(store)

    @clause
    async def test_contract_tombstones_by_age_at_and_either_side(self, tmp_path: Path) -> None:
        """``tombstoneDays`` = 2 on the suite's clock: a tombstone exactly 2 days old is kept, one second older goes."""
        store = self._store(tmp_path, max_calls=1, tombstone_days=2)
        start = 1_900_000_000.0
        now = [start]
        try:
            self.set_clock(store, lambda: now[0])
            await self.put(store, "a", "run", "a", finished=start)
            await self.put(store, "b", "run", "b", finished=start)  # "a" removed at start: its tombstone is the one that ages
            for call_id, at, tombstones in (("c", start + 2 * DAY - 1, 2), ("d", start + 2 * DAY, 3), ("e", start + 2 * DAY + 1, 3)):
                now[0] = at
                await self.put(store, call_id, "run", call_id, finished=at)
                assert await self.counts(store) == (1, 2 + tombstones), f"at {at - start:.0f} s: {tombstones} tombstones"
            gone, kept = await store.clear_logical("a"), await store.clear_logical("b")
            assert (gone.records, kept.records) == (0, 1), "the tombstone 2 days + 1 s old went, the younger ones stay"
        finally:
            await self.close(store)

