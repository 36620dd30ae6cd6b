"""The typed component registry: one ComponentKind per kind, one registrar class, checked builds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from monoagent import hookimpl
from monoagent._agent import Agent
from monoagent._kernel.components import (
    COMPACTION_POLICIES,
    HISTORY_STORES,
    KINDS,
    MEMORY_TIERS,
    PROVIDERS,
    ComponentKind,
)
from monoagent._kernel.errors import ComponentError
from monoagent._kernel.interfaces import (
    BrowsableMemoryTier,
    ClosableMemoryTier,
    SelectiveMemoryTier,
    StoredCompaction,
    WindowedProviderRuntime,
)
from monoagent._kernel.model import MemoryHit, StepFinished, TextDelta
from monoagent._kernel.registrars import REGISTRARS
from monoagent._kernel.stores import (
    CommitReceipt,
    DurableHistoryStore,
    LogicalLookupStore,
    ManagedHistoryStore,
    ProviderSessionStore,
)
from monoagent.testing import fresh_agent


def test_every_kind_is_one_declaration_with_its_hook_and_registrar():
    from monoagent._kernel import hookspecs

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


# ---------------------------------------------------------------------------- capabilities: declared sub-protocols


class PlainStore:
    """A HistoryStore and nothing more."""

    name = "plain"

    async def load(self, conversation_id: str, *, on_warning: Any = None) -> list[Any]:
        return []

    async def commit(self, conversation_id: str, messages: Any) -> CommitReceipt:
        return CommitReceipt(conversation_id, len(messages), 0)

    async def reset(self, conversation_id: str) -> int:
        return 0

    async def conversations(self) -> list[Any]:
        return []

    async def close(self) -> None:
        pass


def store_agent(tmp_path: Path, store: object) -> Agent:
    class Plugin:
        @hookimpl
        def register_history_stores(self, register):
            register("made", lambda agent: store)

    return fresh_agent(tmp_path, plugins=[Plugin()], config={"history": {"store": "made"}})


def refusal(tmp_path: Path, store: object) -> str:
    agent = store_agent(tmp_path, store)
    with pytest.raises(ComponentError) as info:
        agent.history_store  # noqa: B018  (the property builds the store)
    return str(info.value)


def test_every_bundled_component_records_the_sub_protocols_it_implements(tmp_path):
    agent = fresh_agent(tmp_path, config={"memory": {"tiers": ["lite", "journal"]}})
    store = agent.history_store
    for capability in (ManagedHistoryStore, LogicalLookupStore, ProviderSessionStore, DurableHistoryStore):
        assert agent.components.supports(store, capability), capability
    lite, journal = agent.memory_tier("lite"), agent.memory_tier("journal")
    for capability in (SelectiveMemoryTier, BrowsableMemoryTier, ClosableMemoryTier):
        assert agent.components.supports(lite, capability) and agent.components.supports(journal, capability), capability
    assert agent.components.supports(agent.provider("offline:echo"), WindowedProviderRuntime)
    agent.close()


def test_a_plain_store_implements_no_sub_protocol_and_is_asked_for_none(tmp_path):
    store = PlainStore()
    agent = store_agent(tmp_path, store)
    assert agent.history_store is store
    for capability in (ManagedHistoryStore, LogicalLookupStore, ProviderSessionStore, DurableHistoryStore):
        assert not agent.components.supports(store, capability), capability
    result = agent.run_sync("hello", conversation_id="c")
    assert result.status == "completed"
    report, _ = asyncio.run(agent.reset_conversation("c"))
    assert (report.records, report.bytes) == (0, 0), "a store without totals reports no record and no bytes"
    agent.close()


def test_a_store_whose_load_cannot_take_on_warning_is_refused_naming_the_plugin_and_the_fix(tmp_path):
    class OldStore(PlainStore):
        async def load(self, conversation_id: str) -> list[Any]:
            return []

    message = refusal(tmp_path, OldStore())
    assert message.startswith("the history store 'made' of plugin 'Plugin' has a load() that cannot take on_warning (")
    assert "got an unexpected keyword argument 'on_warning'" in message
    assert "declare it as `async def load(self, conversation_id, *, on_warning=None)`" in message


def test_a_sub_protocol_implemented_in_part_is_refused_naming_what_it_lacks(tmp_path):
    class HalfManaged(PlainStore):
        async def stats(self) -> Any:
            return None

    assert refusal(tmp_path / "store", HalfManaged()) == (
        "the history store 'made' of plugin 'Plugin' implements ManagedHistoryStore only in part: HalfManaged has stats "
        "but no reset_logical, clear_all (implement all of them, or none)"
    )

    class HalfBrowsable:
        name = "half"

        async def search(self, query: str, *, limit: int) -> list[Any]:
            return []

        async def add(self, text: str, *, metadata: Any = None) -> str:
            return "1"

        async def forget(self, memory_id: str) -> bool:
            return False

        async def list(self, *, limit: int, offset: int = 0) -> list[Any]:
            return []

    class Tiers:
        @hookimpl
        def register_memory_tiers(self, register):
            register("half", lambda agent, options: HalfBrowsable())

    agent = fresh_agent(tmp_path / "tier", plugins=[Tiers()], config={"memory": {"tiers": ["half"]}})
    with pytest.raises(ComponentError, match=r"implements BrowsableMemoryTier only in part: HalfBrowsable has list but no stats"):
        agent.memory_tier("half")


def test_a_provider_session_store_whose_commit_cannot_take_the_session_is_refused(tmp_path):
    class Forgetful(PlainStore):
        async def load_provider_session(self, conversation_id: str) -> None:
            return None

    message = refusal(tmp_path, Forgetful())
    assert "has load_provider_session() but a commit() that cannot take provider_session" in message
    assert "a ProviderSessionStore's commit takes `*, provider_session=None`" in message


def test_durable_is_a_claim_of_true_or_false(tmp_path):
    class Vague(PlainStore):
        durable = "yes"

    assert refusal(tmp_path / "vague", Vague()).endswith("declares durable = 'yes': DurableHistoryStore.durable is True or False")

    class Honest(PlainStore):
        durable = False

    agent = store_agent(tmp_path / "honest", Honest())
    assert agent.components.supports(agent.history_store, DurableHistoryStore) and agent.history_store.durable is False
    agent.close()


def test_supports_checks_the_members_of_an_object_it_did_not_build(tmp_path):
    agent = fresh_agent(tmp_path)
    wrapper = PlainStore()
    assert not agent.components.supports(wrapper, ManagedHistoryStore)
    assert agent.components.supports(agent.history_store, ManagedHistoryStore)
    agent.close()


class Tier:
    """A minimal tier the test can make selective and closable."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.added: list[str] = []
        self.searched = 0

    async def search(self, query: str, *, limit: int) -> list[MemoryHit]:
        self.searched += 1
        return []

    async def add(self, text: str, *, metadata: Any = None) -> str:
        self.added.append(text)
        return str(len(self.added))

    async def forget(self, memory_id: str) -> bool:
        return False


class Selective(Tier):
    automatic_recall = False
    captures = False


class Closing(Tier):
    closed = 0

    async def close(self) -> None:
        self.closed += 1


def test_memory_tiers_are_recalled_captured_and_closed_as_their_sub_protocols_say(tmp_path):
    tiers = {"plain": Tier("plain"), "selective": Selective("selective"), "closing": Closing("closing")}

    class Plugin:
        @hookimpl
        def register_memory_tiers(self, register):
            for name, tier in tiers.items():
                register(name, lambda agent, options, tier=tier: tier)

    agent = fresh_agent(tmp_path, plugins=[Plugin()], config={"memory": {"tiers": list(tiers)}})
    assert agent.run_sync("where are the otters", conversation_id="c").status == "completed"
    assert (tiers["plain"].searched, tiers["selective"].searched, tiers["closing"].searched) == (1, 0, 1)
    assert [len(tier.added) for tier in tiers.values()] == [1, 0, 1]
    agent.close()
    assert tiers["closing"].closed == 1


class Runtime:
    """A provider runtime that answers "ok"; a WindowedProviderRuntime when given a window."""

    def __init__(self, name: str, window: int | None = None) -> None:
        self.name = name
        if window is not None:
            self.context_window = window

    async def stream(self, request: Any) -> Any:
        yield TextDelta("ok")
        yield StepFinished()


@pytest.mark.parametrize(("window", "budget"), [(50_000, 50_000 - 4096), (None, 200_000 - 4096)])
def test_the_history_budget_is_the_windowed_runtimes_window_else_the_default(tmp_path, window, budget):
    agent = fresh_agent(tmp_path, provider=Runtime("windowed:model", window))
    assert agent.components.supports(agent.provider("windowed:model"), WindowedProviderRuntime) is (window is not None)
    events: list[Any] = []
    agent.run_sync("hello", conversation_id="c", on_event=events.append)
    [report] = [event.data for event in events if event.type == "context_compaction_applied"]
    assert report["budget"] == budget
    agent.close()
