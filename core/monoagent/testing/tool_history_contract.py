"""The tool-history conformance suite: what any :class:`~monoagent.pipeline.tool_lifecycle.ManagedToolHistoryStore` must prove.

A store plugin (the bundled SQLite sidecar, a PostgreSQL store, ...) runs the suite unchanged
against itself by subclassing :class:`ToolHistoryStoreContract` in its own tests::

    from monoagent.testing import ToolHistoryStoreContract

    class TestPostgresToolHistory(ToolHistoryStoreContract):
        def make_store(self, tmp_path, *, clock, redact, **bounds):
            return PostgresToolHistory(dsn=..., schema=f"t_{tmp_path.name}", clock=clock, redact=redact, **bounds)

``make_store`` receives pytest's ``tmp_path``, a ``clock`` (a callable returning seconds, which
the suite advances to test age retention), a ``redact(text, kind)`` function the store must
apply to everything it keeps, and the bounds a test needs (``max_calls``, ``max_age_days``,
``max_payload_bytes``, ``max_tombstones``, ``tombstone_days``; defaults are the documented
ones); two calls with the same ``tmp_path`` return two handles on the same stored data.
Override :meth:`ToolHistoryStoreContract.corrupt` to let the suite damage the stored data;
without it the corruption test is skipped. The suite needs pytest only when it runs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from monoagent.kernel.model import ToolCall, ToolResult, ToolStatus
from monoagent.text import utf8_len
from monoagent.pipeline.tool_lifecycle import ManagedToolHistoryStore, ToolHistoryError, ToolInvocation, record_id

__all__ = ["ToolHistoryStoreContract", "ContractClock"]

ARGUMENT_LIMIT = 8 * 1024
RESULT_LIMIT = 16 * 1024
DAY = 86_400.0
FAKE_SECRET = "sk-ant-api03-CONTRACTfakeFAKEfake0123456789"
NOW = 1_800_000_000.0


class ContractClock:
    """A settable clock: ``clock()`` returns ``clock.now``."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def contract_redact(text: str, kind: str) -> str:
    """The suite's redactor: removes :data:`FAKE_SECRET` (stores must apply the one they are given)."""
    return text.replace(FAKE_SECRET, "[REDACTED:contract]")


class ToolHistoryStoreContract:
    """Subclass with a ``Test`` name and implement :meth:`make_store`; pytest collects the rest."""

    def make_store(self, tmp_path: Path, *, clock: Any, redact: Any, **bounds: Any) -> ManagedToolHistoryStore:
        raise NotImplementedError("subclasses of ToolHistoryStoreContract implement make_store(tmp_path, clock=, redact=, **bounds)")

    def close(self, store: ManagedToolHistoryStore) -> None:
        close = getattr(store, "close", None)
        if close is not None:
            close()

    def corrupt(self, store: ManagedToolHistoryStore) -> None:
        """Damage the stored data so that it cannot be read (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement corrupt()")

    # ------------------------------------------------------------------ helpers

    def _store(self, tmp_path: Path, clock: ContractClock | None = None, **bounds: Any) -> ManagedToolHistoryStore:
        return self.make_store(tmp_path, clock=clock or ContractClock(), redact=contract_redact, **bounds)

    @staticmethod
    def put(store: ManagedToolHistoryStore, conversation: str, run: str, call_id: str, *, args: dict[str, Any] | None = None,
            content: str = "ok", finished: float | None = None, logical: str | None = None) -> ToolInvocation:
        invocation = ToolInvocation(conversation, logical or conversation, run, ToolCall(call_id, "probe", args or {}), 1.0)
        store.submit_invocation(invocation).result()
        store.submit_result(invocation, ToolResult(call_id, "probe", content), NOW if finished is None else finished).result()
        return invocation

    # ------------------------------------------------------------------ clauses

    def test_contract_invocation_then_result(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            invocation = ToolInvocation("conv", "conv", "run", ToolCall("c1", "probe", {"q": 1}), 1.0)
            store.submit_invocation(invocation).result()
            (open_record,) = store.records(conversation_id="conv")
            assert open_record.status is None and open_record.end_seq is None
            assert open_record.invocation_id == record_id("conv", "run", "c1", "invocation")
            store.submit_result(invocation, ToolResult("c1", "probe", "answer", ToolStatus.EXIT_NONZERO), NOW).result()
            (record,) = store.records(conversation_id="conv")
            assert record.status == "exit_nonzero" and record.result == "answer"
            assert record.result_id == record_id("conv", "run", "c1", "result")
            assert record.end_seq is not None and record.end_seq > record.start_seq
        finally:
            self.close(store)

    def test_contract_writes_are_idempotent_and_ordered(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            first = self.put(store, "conv", "run", "a")
            store.submit_invocation(first).result()
            store.submit_result(first, ToolResult("a", "probe", "again"), NOW).result()
            self.put(store, "conv", "run", "b")
            records = store.records(conversation_id="conv")
            assert [r.call_id for r in records] == ["a", "b"] and records[0].result == "ok"
            assert records[0].end_seq < records[1].start_seq
        finally:
            self.close(store)

    def test_contract_bounds_and_omission_before_redaction(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            args = {"text": "é" * 4000}
            raw = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
            self.put(store, "conv", "run", "fits", args=args, content="ü" * (RESULT_LIMIT // 2))
            self.put(store, "conv", "run", "over", args={"text": FAKE_SECRET + "x" * ARGUMENT_LIMIT},
                     content=FAKE_SECRET + "y" * RESULT_LIMIT)
            self.put(store, "conv", "run", "secret", args={"key": FAKE_SECRET}, content=f"token {FAKE_SECRET}")
            fits, over, secret = store.records(conversation_id="conv")
            assert fits.arguments_bytes == utf8_len(raw) and not fits.arguments_omitted
            assert fits.result_bytes == RESULT_LIMIT and fits.result_retained_bytes == RESULT_LIMIT and not fits.result_truncated
            assert over.arguments is None and over.arguments_omitted and over.arguments_bytes == ARGUMENT_LIMIT + 1
            assert over.result is None and over.result_omitted and over.result_bytes == RESULT_LIMIT + 1
            assert FAKE_SECRET not in (secret.arguments or "") + (secret.result or "")
        finally:
            self.close(store)

    def test_contract_retention_by_count_age_and_bytes(self, tmp_path: Path) -> None:
        clock = ContractClock()
        store = self._store(tmp_path / "count", clock, max_calls=2)
        try:
            for i in range(4):
                self.put(store, "conv", "run", str(i), finished=clock.now)
            assert [r.call_id for r in store.records()] == ["2", "3"]
        finally:
            self.close(store)
        store = self._store(tmp_path / "age", clock, max_age_days=10)
        try:
            self.put(store, "conv", "run", "old", finished=clock.now - 11 * DAY)
            self.put(store, "conv", "run", "new", finished=clock.now)
            assert [r.call_id for r in store.records()] == ["new"]
        finally:
            self.close(store)
        store = self._store(tmp_path / "bytes", clock, max_payload_bytes=2500)
        try:
            for i in range(4):
                self.put(store, "conv", "run", str(i), content="p" * 1000, finished=clock.now)
            assert [r.call_id for r in store.records()] == ["2", "3"]
        finally:
            self.close(store)

    def test_contract_calls_in_flight_are_never_pruned(self, tmp_path: Path) -> None:
        store = self._store(tmp_path, max_calls=1)
        try:
            store.submit_invocation(ToolInvocation("conv", "conv", "run", ToolCall("open", "probe", {}), 1.0)).result()
            for i in range(3):
                self.put(store, "conv", "run", str(i))
            assert "open" in [r.call_id for r in store.records()]
        finally:
            self.close(store)

    def test_contract_logical_clear_covers_every_daily_bucket(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            self.put(store, "chat", "r", "1")
            self.put(store, "chat:2026-07-01", "r", "2", logical="chat")
            self.put(store, "chat:notes", "r", "3", logical="chat:notes")
            self.put(store, "other", "r", "4")
            assert store.stats().calls == 4
            report = store.clear_logical("chat")
            assert report.calls == 2
            assert sorted(r.conversation_id for r in store.records()) == ["chat:notes", "other"]
            assert store.clear_all().calls == 2 and store.stats().calls == 0
        finally:
            self.close(store)

    def test_contract_two_handles_see_the_same_data(self, tmp_path: Path) -> None:
        first = self._store(tmp_path)
        second = self._store(tmp_path)
        try:
            self.put(first, "conv", "run", "a")
            assert [r.call_id for r in second.records(conversation_id="conv")] == ["a"]
        finally:
            self.close(first)
            self.close(second)

    def test_contract_concurrent_writers_lose_nothing(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            start = threading.Barrier(4)

            def work(worker: int) -> None:
                start.wait()
                for i in range(10):
                    self.put(store, f"conv{worker % 2}", f"run{worker}", str(i))

            threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            store.flush()
            assert store.stats().calls == 40
        finally:
            self.close(store)

    def test_contract_corrupt_data_fails_closed(self, tmp_path: Path) -> None:
        import pytest

        store = self._store(tmp_path)
        try:
            self.put(store, "conv", "run", "a")
            self.close(store)
            self.corrupt(store)
            with pytest.raises(ToolHistoryError):
                store.records()
        finally:
            self.close(store)
