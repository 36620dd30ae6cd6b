"""The ``tool-history`` plugin: the ``sqlite`` tool-history store, its cold projection and SessionHistory.

The hooks only; the implementation lives in :mod:`monoagent_plugins.history.tool_calls`, split by
job (sidecar files, writer, store, projection, SessionHistory) and imported on first use,
so CLI start-up never loads SQLite or the writer machinery.

* ``register_tool_history_stores``: ``sqlite``, the SQLite sidecar beside the message history
  (:class:`~monoagent_plugins.history.tool_calls.store.SqliteToolHistory`), which the default
  ``toolHistory.store = "sqlite"`` selects. The Agent creates it on first use and closes it.
* ``register_config_sections``: :class:`ToolHistoryConfig`, the store's keys in the
  ``toolHistory`` table beside the kernel's ``store`` (bounds, retention, durability, the
  projection's size, foreground waits).
* ``extra_sections``: the cold projection, a dynamic ``tool_history`` section after the
  conversation history, when the selected store is this plugin's.
* ``register_tools``: SessionHistory, which reads this plugin's store and fails closed without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from monoagent import (
    ComponentRegistrar,
    ConfigSectionRegistrar,
    Section,
    ToolHistoryStore,
    ToolRegistrar,
    hookimpl,
    setting,
)
from monoagent_plugins.history.tool_calls.spec import SESSION_HISTORY_SPEC

if TYPE_CHECKING:
    from monoagent import Agent, ToolContext, ToolResult, Turn
    from monoagent_plugins.history.tool_calls.store import SqliteToolHistory


@attrs.define
class ToolHistoryConfig:
    """toolHistory: the tool-call history sidecar (SQLite) of the ``tool-history`` plugin.

    These keys join the kernel's ``toolHistory.store`` and ``toolHistory.enabled`` in one table.
    """

    max_calls: int = setting(100_000, doc="Completed calls retained.", env="MONO_AGENT_TOOL_HISTORY_MAX_CALLS", min=1, max=10_000_000)
    max_age_days: int = setting(365, doc="Days a completed call is retained.", env="MONO_AGENT_TOOL_HISTORY_MAX_AGE_DAYS", min=1, max=36_500)
    max_payload_bytes: int = setting(
        256 * 1024 * 1024, doc="Retained argument and result bytes in all.", env="MONO_AGENT_TOOL_HISTORY_MAX_PAYLOAD_BYTES",
        min=64 * 1024, max=64 * 1024**3,
    )
    max_tombstones: int = setting(10_000, doc="Tombstones kept for removed records.", min=0, max=1_000_000)
    tombstone_days: int = setting(30, doc="Days a tombstone is kept.", min=0, max=3650)
    max_argument_bytes: int = setting(8 * 1024, doc="Retained bytes of a call's arguments.", min=256, max=1024 * 1024)
    max_result_bytes: int = setting(16 * 1024, doc="Retained bytes of a call's result.", min=256, max=4 * 1024 * 1024)
    projection_max_calls: int = setting(32, doc="Completed calls projected into a cold turn's prompt (0: none).", min=0, max=1000)
    projection_max_bytes: int = setting(64 * 1024, doc="Bytes of the cold tool-history projection.", min=1024, max=1024 * 1024)
    synchronous: str = setting(
        "EXTRA", doc="SQLite synchronous mode of the writer (EXTRA also fsyncs the directory after the journal is deleted).",
        allowed="FULL or EXTRA", check=lambda v: None if v in ("FULL", "EXTRA") else "must be 'FULL' or 'EXTRA'",
    )
    confirm_timeout_ms: int = setting(250, doc="Foreground wait for a write's confirmation before it is 'deferred'.", min=1, max=60_000)
    reconcile_timeout_ms: int = setting(10_000, doc="Wait for deferred writes before a run is finalised.", min=1, max=600_000)


def sqlite_store(agent: Agent) -> SqliteToolHistory:
    """The ``sqlite`` component: the sidecar under ``history.dir`` with this plugin's settings.

    Called once per Agent (``agent.tool_history_store()``), which owns the store and closes it.
    """
    from monoagent_plugins.history.tool_calls.store import SqliteToolHistory

    return SqliteToolHistory(agent.config.history_dir, agent.config.section("toolHistory", ToolHistoryConfig), agent.redact)


@hookimpl(trylast=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    register("toolHistory", ToolHistoryConfig)


@hookimpl(trylast=True)
def register_tool_history_stores(register: ComponentRegistrar[ToolHistoryStore]) -> None:
    register("sqlite", sqlite_store, description="SQLite sidecar beside the message history (bounded, redacted, retained)")


async def session_history(context: ToolContext) -> ToolResult:
    """The SessionHistory tool; the store behind it is imported on its first call, not at start-up."""
    from monoagent_plugins.history.tool_calls import session_history as tool

    return await tool.session_history(context)


@hookimpl(trylast=True)
def register_tools(register: ToolRegistrar) -> None:
    register(SESSION_HISTORY_SPEC, session_history)


@functools.cache
def _projection() -> tuple[type, Callable[..., Section | None]]:
    """The store class and the projection, imported once (on the first turn, not at start-up)."""
    from monoagent_plugins.history.tool_calls.projection import projection_section
    from monoagent_plugins.history.tool_calls.store import SqliteToolHistory

    return SqliteToolHistory, projection_section


@hookimpl(trylast=True)
def extra_sections(turn: Turn) -> Section | None:
    store_class, projection_section = _projection()
    store = turn.tool_history
    if not isinstance(store, store_class):
        return None
    return projection_section(turn, store)
