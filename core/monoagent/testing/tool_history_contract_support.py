"""What the tool-history conformance suite is built from: its limits, its redaction chain, the hooks and helpers.

:class:`ToolHistoryContractBase` holds what a store's test class supplies (``store_name``,
``plugins``, ``store_config`` and the optional hooks) and the helpers every clause uses; the
clauses are in :mod:`monoagent.testing.tool_history_contract` and
:mod:`monoagent.testing.tool_history_contract_retention`.

The store's methods are coroutines, so each clause is a coroutine too, run by :func:`clause` on
an event loop of its own (``asyncio.run``): every store a clause opens lives, is used and is
closed (by its Agent's ``aclose()``) on that one loop, as it is in an Agent, so a store may bind
connections to the loop it first runs on. The optional hooks are plain functions, called on that
loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from monoagent._agent import Agent
from monoagent._boundary.text import utf8_len
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.model import ToolCall, ToolResult
from monoagent._kernel.stores import ToolHistoryStore, ToolInvocation, ToolRecord

_Contract = TypeVar("_Contract", bound="ToolHistoryContractBase")


def clause(test: Callable[[_Contract, Path], Coroutine[Any, Any, None]]) -> Callable[[_Contract, Path], None]:
    """A clause written as a coroutine, as pytest runs it: on an event loop of its own, without an asyncio plugin."""

    @functools.wraps(test)
    def run(self: _Contract, tmp_path: Path) -> None:
        asyncio.run(test(self, tmp_path))

    return run


ARGUMENT_LIMIT = 8 * 1024
RESULT_LIMIT = 16 * 1024
PAYLOAD_FLOOR = 64 * 1024  # the smallest toolHistory.maxPayloadBytes
DAY = 86_400.0
FAKE_SECRET = "sk-ant-api03-CONTRACTfakeFAKEfake0123456789"
REDACTED = "[REDACTED:contract]"
GROW = "<grow>"  # the suite's redactor makes it longer: redacted text can exceed a limit its original met
GROWN = "[REDACTED:contract-grown:" + "é" * 24 + "]"
OVERSIZED = "OVERSIZED-CONTRACT-VALUE"  # only in values over their limit: the chain must never see it
WRITERS = 4
ROUNDS = 10
EMPTY_ARGUMENTS = 2  # "{}", the retained payload of a call without arguments
JSON_TEXT_OVERHEAD = utf8_len('{"text":""}')


def compact(arguments: Mapping[str, Any]) -> str:
    """Arguments as the protocol measures them: compact JSON, non-ASCII kept as UTF-8."""
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def end_seq(record: ToolRecord) -> int:
    """The ``end_seq`` of a completed call (failing the clause when it has none)."""
    assert record.end_seq is not None, f"call {record.call_id!r} was completed, yet it has no end_seq"
    return record.end_seq


class ContractRedactor:
    """The suite's redaction chain: removes :data:`FAKE_SECRET`, grows :data:`GROW`, remembers what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def redact(self, text: str, kind: str) -> str:
        self.seen.append((kind, text))
        return text.replace(FAKE_SECRET, REDACTED).replace(GROW, GROWN)


class ToolHistoryContractBase:
    """The hooks a store's test class supplies and the helpers of the clauses (see :class:`~monoagent.testing.ToolHistoryStoreContract`)."""

    store_name: str = ""
    """The name the store's plugin registers with ``register_tool_history_stores``."""

    plugins: Sequence[Any] = ()
    """Plugin objects to register (the store's own, unless it is bundled)."""

    def store_config(self, tmp_path: Path, **bounds: Any) -> Mapping[str, Any]:
        """The configuration that gives the store ``bounds`` (snake_case names, see the module docstring)."""
        raise NotImplementedError("subclasses of ToolHistoryStoreContract implement store_config(tmp_path, **bounds)")

    def corrupt(self, store: Any) -> None:
        """Damage the stored data so that it cannot be read or written (optional; called while ``store`` is open)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement corrupt()")

    def set_clock(self, store: Any, clock: Callable[[], float]) -> None:
        """Make ``store``'s retention read the current time (epoch seconds) from ``clock`` (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement set_clock(): the maxAgeDays boundary needs a clock the suite controls")

    def private_paths(self, store: Any) -> Sequence[Path]:
        """The files and directories ``store`` keeps on this machine, each of which must be owner-only (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement private_paths(): the store keeps no files the suite can check")

    def delete_stored_data(self, store: Any) -> None:
        """Delete the stored data from under the open ``store``, as a purge by another process does (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement delete_stored_data(): the suite cannot purge the data under the store")

    def set_lock_wait(self, store: Any, wait_ms: int) -> None:
        """Make ``store`` (before its first write) wait at most ``wait_ms`` for a lock another holder has (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement set_lock_wait(): the suite cannot bound the store's wait for a lock")

    def hold_lock(self, store: Any, *, write: bool) -> contextlib.AbstractContextManager[None]:
        """A context manager holding the stored data from outside, as another process's open transaction
        does: a write transaction (``write``), else a read transaction that has read the records (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement hold_lock(): the suite cannot hold the stored data locked")

    def mark_unknown_version(self, store: Any, version: str | None) -> None:
        """Make the data of the closed ``store`` claim the format version ``version``, one the store does not
        read (None: claim no version at all), as a newer release or another program would leave it (optional)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement mark_unknown_version(): the suite cannot plant data of another version")

    def empty_stored_data(self, store: Any) -> None:
        """Leave, in place of the data of the closed ``store``, the fresh zero-byte file that a store created
        but never written leaves (optional; a store that keeps no such file does not implement it)."""
        import pytest

        pytest.skip(f"{type(self).__name__} does not implement empty_stored_data(): the store keeps no data file that can be empty")

    # ------------------------------------------------------------------ helpers

    @property
    def redactor(self) -> ContractRedactor:
        """This test's redaction chain (pytest makes one instance per test)."""
        found = self.__dict__.get("_redactor")
        if found is None:
            found = self.__dict__["_redactor"] = ContractRedactor()
        return found

    def agent(self, tmp_path: Path, **bounds: Any) -> Agent:
        """An Agent whose selected tool-history store is the one under test (state under ``tmp_path``)."""
        from monoagent.testing import _merge, fresh_agent

        base = {"toolHistory": {"store": self.store_name}, "plugins": {"block": ["redaction"]}}
        config = _merge(base, self.store_config(tmp_path, **bounds))
        return fresh_agent(tmp_path, config=config, plugins=[*self.plugins, self.redactor])

    def _store(self, tmp_path: Path, **bounds: Any) -> ToolHistoryStore:
        """The store of a new Agent (its one owner, which :meth:`close` closes)."""
        agent = self.agent(tmp_path, **bounds)
        store = agent.tool_history_store()
        assert store is not None, f"toolHistory.store = {self.store_name!r} selected no store"
        self._agents()[id(store)] = agent
        return store

    async def _lasting_paths(self, tmp_path: Path, *, regular: bool = False) -> list[Path]:
        """The paths ``private_paths()`` names that outlive a closed store holding one call, relative to its
        directory (only regular files with ``regular``); the test is skipped when there are none."""
        import pytest

        base = tmp_path / "probe"
        probe = self._store(base)
        try:
            await self.put(probe, "conv", "run", "a")
            named = [Path(path) for path in self.private_paths(probe)]
        finally:
            await self.close(probe)
        lasting = [path.relative_to(base) for path in named if path.is_relative_to(base)
                   and (path.is_file() and not path.is_symlink() if regular else path.exists())]
        if not lasting:
            pytest.skip(f"private_paths() names no {'regular file' if regular else 'path'} under tmp_path that outlives the store")
        return lasting

    async def _closed_with_one_call(self, home: Path) -> list[ToolRecord]:
        """Records of a store under ``home`` that took one call, read before it was closed."""
        store = self._store(home)
        try:
            await self.put(store, "conv", "run", "a")
            return list(await store.records())
        finally:
            await self.close(store)

    def _agents(self) -> dict[int, Agent]:
        """The Agents behind the stores a test opened (pytest makes one instance per test)."""
        return cast("dict[int, Agent]", self.__dict__.setdefault("_open_agents", {}))  # set by this method alone

    async def close(self, store: ToolHistoryStore) -> None:
        """Close the Agent that owns ``store`` (which closes the store); a second call does nothing."""
        agent = self._agents().pop(id(store), None)
        if agent is not None:
            await agent.aclose()

    @staticmethod
    async def put(store: ToolHistoryStore, conversation: str, run: str, call_id: str, *, args: dict[str, Any] | None = None,
                  content: str = "ok", finished: float | None = None, logical: str | None = None) -> ToolInvocation:
        """One call, its invocation then its result, each awaited until durable."""
        invocation = ToolInvocation(conversation, logical or conversation, run, ToolCall(call_id, "probe", args or {}), 1.0)
        await store.write_invocation(invocation)
        await store.write_result(invocation, ToolResult(call_id, "probe", content), time.time() if finished is None else finished)
        return invocation

    @staticmethod
    async def records(store: ToolHistoryStore, **where: str) -> list[ToolRecord]:
        """``store.records(**where)`` as a list (the protocol returns a sequence of any kind)."""
        return list(await store.records(**where))

    async def ids(self, store: ToolHistoryStore, **where: str) -> list[str]:
        return [r.call_id for r in await self.records(store, **where)]

    @staticmethod
    async def counts(store: ToolHistoryStore) -> tuple[int, int]:
        """``stats()``'s calls and records (invocations + results + tombstones)."""
        stats = await store.stats()
        return stats.calls, stats.records

    @staticmethod
    async def extra_counts(store: ToolHistoryStore, payload_bytes: int, tombstones: int) -> None:
        """Check ``stats()``'s optional ``payload_bytes`` and ``tombstones``: None (not reported), or exactly these."""
        stats = await store.stats()
        for name, expected in (("payload_bytes", payload_bytes), ("tombstones", tombstones)):
            found = getattr(stats, name)
            assert found in (None, expected), f"stats().{name} is {found!r}, not {expected} (a store that reports it reports it exactly)"

    async def only(self, store: ToolHistoryStore, call_id: str) -> ToolRecord:
        (record,) = [r for r in await self.records(store) if r.call_id == call_id]
        return record
