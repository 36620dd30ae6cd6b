"""The tool-history conformance suite: what any :class:`~monoagent.kernel.interfaces.ToolHistoryStore` must prove.

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

``store_config`` receives pytest's ``tmp_path`` and the retention bounds a test needs
(``max_calls``, ``max_age_days``, ``max_payload_bytes``; the others keep their documented
defaults) and returns the configuration that gives the store those bounds, merged over
``{"toolHistory": {"store": store_name}, "plugins": {"block": ["redaction"]}}``: the suite's own
redactor replaces the bundled one, so it can tell that the store applies the Agent's redaction
chain. Two Agents built with the same ``tmp_path`` must reach the same stored data. Override
:meth:`ToolHistoryStoreContract.corrupt` to let the suite damage the stored data; without it the
corruption test is skipped. The suite needs pytest only when it runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from monoagent.agent import Agent
from monoagent.kernel.errors import ToolHistoryError
from monoagent.kernel.hookspecs import hookimpl
from monoagent.kernel.interfaces import ToolHistoryStore, ToolInvocation, record_id
from monoagent.kernel.model import ToolCall, ToolResult, ToolStatus
from monoagent.text import utf8_len

__all__ = ["ToolHistoryStoreContract"]

ARGUMENT_LIMIT = 8 * 1024
RESULT_LIMIT = 16 * 1024
DAY = 86_400.0
FAKE_SECRET = "sk-ant-api03-CONTRACTfakeFAKEfake0123456789"
REDACTED = "[REDACTED:contract]"


class ContractRedactor:
    """The suite's redaction chain: removes :data:`FAKE_SECRET` (stores must apply the Agent's chain)."""

    @hookimpl
    def redact(self, text: str, kind: str) -> str:
        return text.replace(FAKE_SECRET, REDACTED)


class ToolHistoryStoreContract:
    """Subclass with a ``Test`` name, set :attr:`store_name` and implement :meth:`store_config`."""

    store_name: str = ""
    """The name the store's plugin registers with ``register_tool_history_stores``."""

    plugins: Sequence[Any] = ()
    """Plugin objects to register (the store's own, unless it is bundled)."""

    def store_config(self, tmp_path: Path, **bounds: Any) -> Mapping[str, Any]:
        """The configuration that gives the store ``bounds`` (snake_case names, see the module docstring)."""
        raise NotImplementedError("subclasses of ToolHistoryStoreContract implement store_config(tmp_path, **bounds)")

    def corrupt(self, store: Any) -> None:
        """Damage the stored data so that it cannot be read (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement corrupt()")

    # ------------------------------------------------------------------ helpers

    def agent(self, tmp_path: Path, **bounds: Any) -> Agent:
        """An Agent whose selected tool-history store is the one under test (state under ``tmp_path``)."""
        from monoagent.testing import _merge, fresh_agent

        base = {"toolHistory": {"store": self.store_name}, "plugins": {"block": ["redaction"]}}
        config = _merge(base, self.store_config(tmp_path, **bounds))
        return fresh_agent(tmp_path, config=config, plugins=[*self.plugins, ContractRedactor()])

    def _store(self, tmp_path: Path, **bounds: Any) -> Any:
        agent = self.agent(tmp_path, **bounds)
        store = agent.tool_history_store()
        assert store is not None, f"toolHistory.store = {self.store_name!r} selected no store"
        self._agents()[id(store)] = agent
        return store

    def _agents(self) -> dict[int, Agent]:
        """The Agents behind the stores a test opened (pytest makes one instance per test)."""
        return self.__dict__.setdefault("_open_agents", {})

    def close(self, store: Any) -> None:
        """Close the Agent that owns ``store`` (which closes the store); a second call does nothing."""
        agent = self._agents().pop(id(store), None)
        if agent is not None:
            agent.close()

    @staticmethod
    def settled(value: Any) -> Any:
        """A maintenance method's result, awaited when the store returned an awaitable."""
        import asyncio
        import inspect

        if not inspect.isawaitable(value):
            return value

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())

    @staticmethod
    def put(store: Any, conversation: str, run: str, call_id: str, *, args: dict[str, Any] | None = None,
            content: str = "ok", finished: float | None = None, logical: str | None = None) -> ToolInvocation:
        invocation = ToolInvocation(conversation, logical or conversation, run, ToolCall(call_id, "probe", args or {}), 1.0)
        store.submit_invocation(invocation).result()
        store.submit_result(invocation, ToolResult(call_id, "probe", content), time.time() if finished is None else finished).result()
        return invocation

    # ------------------------------------------------------------------ clauses

    def test_contract_the_registry_hands_out_one_store(self, tmp_path: Path) -> None:
        agent = self.agent(tmp_path)
        try:
            store = agent.tool_history_store()
            assert isinstance(store, ToolHistoryStore), f"{type(store).__name__} lacks part of the ToolHistoryStore protocol"
            assert agent.tool_history_store() is store  # created once per Agent
        finally:
            agent.close()

    def test_contract_invocation_then_result(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            invocation = ToolInvocation("conv", "conv", "run", ToolCall("c1", "probe", {"q": 1}), 1.0)
            store.submit_invocation(invocation).result()
            (open_record,) = store.records(conversation_id="conv")
            assert open_record.status is None and open_record.end_seq is None
            assert open_record.invocation_id == record_id("conv", "run", "c1", "invocation")
            store.submit_result(invocation, ToolResult("c1", "probe", "answer", ToolStatus.EXIT_NONZERO), time.time()).result()
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
            store.submit_result(first, ToolResult("a", "probe", "again"), time.time()).result()
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
            assert secret.result == f"token {REDACTED}"  # the Agent's redaction chain, not a redactor of the store's own
        finally:
            self.close(store)

    def test_contract_retention_by_count_age_and_bytes(self, tmp_path: Path) -> None:
        store = self._store(tmp_path / "count", max_calls=2)
        try:
            for i in range(4):
                self.put(store, "conv", "run", str(i))
            assert [r.call_id for r in store.records()] == ["2", "3"]
        finally:
            self.close(store)
        store = self._store(tmp_path / "age", max_age_days=10)
        try:
            self.put(store, "conv", "run", "old", finished=time.time() - 11 * DAY)
            self.put(store, "conv", "run", "new")
            assert [r.call_id for r in store.records()] == ["new"]
        finally:
            self.close(store)
        store = self._store(tmp_path / "bytes", max_payload_bytes=64 * 1024)
        try:
            for i in range(6):
                self.put(store, "conv", "run", str(i), content="p" * 16_000)
            assert [r.call_id for r in store.records()] == ["2", "3", "4", "5"]
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
            assert self.settled(store.stats()).calls == 4
            report = self.settled(store.clear_logical("chat"))
            assert report.calls == 2
            assert sorted(r.conversation_id for r in store.records()) == ["chat:notes", "other"]
            assert self.settled(store.clear_all()).calls == 2 and self.settled(store.stats()).calls == 0
        finally:
            self.close(store)

    def test_contract_exact_clear_covers_one_id(self, tmp_path: Path) -> None:
        store = self._store(tmp_path)
        try:
            self.put(store, "chat", "r", "1")
            self.put(store, "chat:2026-07-01", "r", "2", logical="chat")
            self.put(store, "chat:2026-07-01:2026-07-02", "r", "3", logical="chat:2026-07-01")
            report = self.settled(store.clear_conversation("chat:2026-07-01"))
            assert report.calls == 1
            assert sorted(r.conversation_id for r in store.records()) == ["chat", "chat:2026-07-01:2026-07-02"]
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
            assert self.settled(store.stats()).calls == 40
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
