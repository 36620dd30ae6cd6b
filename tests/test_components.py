"""The typed component registry: one ComponentKind per kind, one registrar class, checked builds."""

from __future__ import annotations

from typing import Any

import pytest

from monoagent import hookimpl
from monoagent.kernel.components import (
    COMPACTION_POLICIES,
    HISTORY_STORES,
    KINDS,
    MEMORY_TIERS,
    PROVIDERS,
    ComponentKind,
)
from monoagent.kernel.errors import ComponentError
from monoagent.kernel.interfaces import BrowsableMemoryTier, ManagedHistoryStore, StoredCompaction
from monoagent.kernel.registrars import REGISTRARS
from monoagent.testing import fresh_agent


def test_every_kind_is_one_declaration_with_its_hook_and_registrar():
    from monoagent.kernel import hookspecs

    for kind in KINDS:
        assert isinstance(kind, ComponentKind)
        spec = getattr(hookspecs, kind.hook)
        assert spec.monoagent_spec["historic"], f"{kind.hook}: a registry hook runs once per plugin, at its registration"
        registrar = REGISTRARS[kind.hook]("someone")
        assert registrar.hook == kind.hook and registrar.call_form == kind.call_form
    assert PROVIDERS.call_form == "register(prefix, factory, description='', models=())"
    assert HISTORY_STORES.call_form == "register(name, factory, description='')"


class Incomplete:
    name = "half"

    async def load(self, conversation_id: str) -> list[Any]:
        return []


def test_a_component_that_does_not_implement_its_protocol_is_refused_naming_what_it_lacks(tmp_path):
    class Plugin:
        @hookimpl
        def register_history_stores(self, register):
            register("half", lambda agent: Incomplete())

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"history": {"store": "half"}})
    with pytest.raises(ComponentError) as info:
        agent.history_store  # noqa: B018  (the property builds the store)
    message = str(info.value)
    assert "the history store 'half' of plugin 'Plugin' does not implement HistoryStore" in message
    assert "which has no commit, reset, conversations, close" in message


def test_models_are_for_providers_only(tmp_path):
    class Plugin:
        @hookimpl
        def register_compaction_policies(self, register):
            register("keep", lambda agent: None, "keep all", models=["x"])

    record = fresh_agent(tmp_path).register(Plugin())
    assert record.status == "failed"
    assert "models= is for providers" in record.reason


def test_capabilities_are_recorded_when_a_component_is_built(tmp_path):
    agent = fresh_agent(tmp_path, config={"memory": {"tiers": ["lite"]}})
    store = agent.history_store
    assert agent.components.supports(store, ManagedHistoryStore)
    assert agent.components.supports(agent.memory_tier("lite"), BrowsableMemoryTier)
    summary = agent.compaction_policy("summary")
    assert agent.components.supports(summary, StoredCompaction)
    assert not agent.components.supports(agent.compaction_policy("truncate"), StoredCompaction)
    assert agent.components.get(MEMORY_TIERS, "lite", options={}) is agent.memory_tier("lite")
    assert agent.components.get(COMPACTION_POLICIES, "summary") is summary
    assert agent.components.new(COMPACTION_POLICIES, "summary") is not summary
    agent.close()
