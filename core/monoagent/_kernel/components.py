"""Component kinds: one declaration per kind, one typed registry for all of them.

A *component* is a named object a plugin registers and configuration selects: a provider
runtime, a history store, a memory tier, a channel, ... Each kind is one :class:`ComponentKind`
value below, which says everything the kernel needs to know about it: its name in messages, the
protocol its components implement, the registry hook plugins register it through, the keyword
arguments its factories are called with, the name that selects none, and the optional
sub-protocols (capabilities) a component may also implement. Adding a kind is one declaration
here and the registry hook's spec (with its reference docstring) in
:mod:`~monoagent._kernel.hookspecs`.

Every registry hook hands its implementation a :class:`ComponentRegistrar` of the kind (bound to
the plugin being registered), whose call ``register(name, factory, description="")`` checks the
registration on the spot. An Agent reaches the components through ``agent.components``
(:class:`AgentComponents`): ``agent.components.get(HISTORY_STORES, "files")`` builds the
component once (``factory(agent=agent, ...)``), checks it implements the kind's protocol and
records which of the kind's capabilities it implements, so the kernel asks
``agent.components.supports(store, ManagedHistoryStore)`` instead of probing attributes. An
optional member is always part of a declared capability: a component that implements a
capability only in part (``stats`` without ``clear_all``), or fails the kind's own ``check`` (a
history store's ``load`` that cannot take ``on_warning``), is refused when it is built, with a
:class:`~monoagent._kernel.errors.ComponentError` naming the plugin and what to fix.
"""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeGuard, TypeVar, cast

import attrs

from monoagent._kernel.errors import ComponentError, ComponentFactoryError, MonoagentError
from monoagent._kernel.interfaces import (
    BrowsableMemoryTier,
    Channel,
    CheckedChannel,
    ClosableMemoryTier,
    CompactionPolicy,
    Embedder,
    MemoryTier,
    Notifier,
    ProviderRuntime,
    SelectiveMemoryTier,
    ServedChannel,
    StoredCompaction,
    WindowedProviderRuntime,
)
from monoagent._kernel.sessions import ClearableSessionBackend, SessionBackend
from monoagent._kernel.stores import (
    DurableHistoryStore,
    HistoryStore,
    LogicalLookupStore,
    ManagedHistoryStore,
    ProviderSessionStore,
    ToolHistoryStore,
)

if TYPE_CHECKING:
    from monoagent._agent import Agent
    from monoagent._kernel.host import PluginHost

T = TypeVar("T")
C = TypeVar("C")


@attrs.frozen(eq=False)
class ComponentKind(Generic[T]):
    """One kind of component.

    ``name`` is how messages and ``monoagent plugins`` name it ("history store"); ``protocol`` the
    runtime-checkable protocol every component of the kind implements; ``hook`` the registry hook
    plugins register it through; ``arguments`` the keyword arguments its factories are called with
    (``agent`` always first); ``key`` the name of the registration's first argument in the
    documented call (``prefix`` for providers); ``off`` the configured name that selects no
    component (so no plugin may register it); ``models`` whether a registration may name the
    models the component knows (providers); ``capabilities`` the optional sub-protocols of
    ``protocol`` a component may also implement, recorded when it is built; ``check`` what a
    component must satisfy beyond the members a protocol lists (a method's keyword, a value's
    type), as one clause per problem, each saying how to fix it.
    """

    name: str
    protocol: type
    hook: str
    arguments: tuple[str, ...] = ("agent",)
    key: str = "name"
    off: str | None = None
    models: bool = False
    capabilities: tuple[type, ...] = ()
    check: Callable[[T], list[str]] | None = None

    @property
    def call_form(self) -> str:
        """The documented call of this kind's ``register``."""
        models = ", models=()" if self.models else ""
        return f"register({self.key}, factory, description=''{models})"

    def implemented(self, value: object) -> frozenset[type]:
        """The capabilities of this kind that ``value`` implements (all of each one's members)."""
        return frozenset(capability for capability in self.capabilities if not missing_members(value, capability))

    def problems(self, value: object) -> list[str]:
        """Why ``value`` is not a whole component of this kind, one clause each; empty when it is one.

        A value that lacks a member of :attr:`protocol` is that one problem. Otherwise a
        capability implemented only in part (some of the members it adds, not all of its members)
        is one, since a component that has ``stats`` but not ``clear_all`` almost always meant to
        implement both; and so is each clause of :attr:`check`.
        """
        missing = missing_members(value, self.protocol)
        if missing:
            return [f"does not implement {self.protocol.__name__}: its factory returned {type(value).__name__}, "
                    f"which has no {', '.join(missing)}"]
        found = []
        for capability in self.capabilities:
            own = _own_members(capability)
            present = [member for member in own if hasattr(value, member)]
            lacking = missing_members(value, capability)
            if present and lacking:
                found.append(
                    f"implements {capability.__name__} only in part: {type(value).__name__} has {', '.join(present)} "
                    f"but no {', '.join(lacking)} (implement all of them, or none)"
                )
        if self.check is not None:  # value has every member of protocol (checked above): a T to the check
            found.extend(self.check(cast(T, value)))
        return found

    def __repr__(self) -> str:
        return f"ComponentKind({self.name!r})"


@attrs.frozen
class Component(Generic[T]):
    """A component a plugin registered: ``factory(**arguments)`` builds it (see :meth:`build`)."""

    kind: ComponentKind[T]
    name: str
    factory: Callable[..., T] = attrs.field(repr=False)
    plugin: str
    description: str = ""
    models: tuple[str, ...] = ()
    """The model names a provider says it knows (``monoagent models`` lists them); empty when it offers no list."""

    def build(self, **arguments: Any) -> T:
        """``factory(**arguments)``, checked: an exception that is not a
        :class:`~monoagent._kernel.errors.MonoagentError` becomes a
        :class:`~monoagent._kernel.errors.ComponentFactoryError` naming the component and its plugin,
        and a result that does not implement the kind's protocol a
        :class:`~monoagent._kernel.errors.ComponentError` naming what it lacks."""
        try:
            built = self.factory(**arguments)
        except MonoagentError:
            raise
        except Exception as exc:
            raise ComponentFactoryError(self.kind.name, self.name, self.kind.hook, self.plugin, exc) from exc
        problems = self.kind.problems(built)
        if problems:
            raise ComponentError(f"the {self.kind.name} {self.name!r} of plugin {self.plugin!r} {'; it '.join(problems)}")
        return built


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The attributes and methods a runtime-checkable protocol requires, in declaration order
    (a base protocol's first)."""
    members: frozenset[str] | None = getattr(protocol, "__protocol_attrs__", None)
    if members is None:  # Python 3.11 computes them on demand
        from typing import _get_protocol_attrs  # type: ignore[attr-defined]  # private to typing, not in its stubs

        members = frozenset(_get_protocol_attrs(protocol))
    declared = [name for cls in reversed(protocol.__mro__) for name in (*getattr(cls, "__annotations__", {}), *vars(cls))]
    return tuple(name for name in dict.fromkeys(declared) if name in members)


def missing_members(value: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``value`` lacks (empty when it implements it)."""
    return [member for member in protocol_members(protocol) if not hasattr(value, member)]


def _own_members(protocol: type) -> tuple[str, ...]:
    """The members ``protocol`` adds to the protocols it extends."""
    inherited = {member for base in protocol.__bases__ if getattr(base, "_is_protocol", False) for member in protocol_members(base)}
    return tuple(member for member in protocol_members(protocol) if member not in inherited)


def cannot_call(function: Callable[..., Any], shown: str, *args: Any, **kwargs: Any) -> str | None:
    """Why ``function`` cannot be called as ``shown`` (with ``args`` and ``kwargs``), or None if it
    can, or if its signature cannot be read (a builtin: its first use will tell)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        name = getattr(function, "__qualname__", None) or type(function).__qualname__
        return f"{name}{signature} cannot be called as {shown}: {exc}"
    return None


# ---------------------------------------------------------------------------- an Agent's components


def _key(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, default=repr)


class AgentComponents:
    """``agent.components``: the components an Agent builds from the plugins' registries.

    :meth:`get` builds a component once per name and arguments and keeps it (a factory that
    raised is called again next time); :meth:`new` builds a fresh one each call (a channel's
    session backend). Each built component is checked (:meth:`ComponentKind.problems`), and the
    capabilities it implements are recorded for :meth:`supports`.
    """

    def __init__(self, agent: Agent, host: PluginHost) -> None:
        self._agent = agent
        self._host = host
        self._built: dict[tuple[ComponentKind[Any], str, str], Any] = {}
        self._capabilities: dict[int, tuple[Callable[[], object], frozenset[type]]] = {}

    def registered(self, kind: ComponentKind[T]) -> Mapping[str, Component[T]]:
        """Every component of ``kind`` the active plugins registered, by name; a name registered
        by two plugins is a :class:`ComponentError` naming both."""
        return self._host.registered(kind)

    def component(self, kind: ComponentKind[T], name: str) -> Component[T]:
        """The registration ``name`` of ``kind``, or a :class:`ComponentError` naming the plugins at fault."""
        return self._host.component(kind, name)

    def get(self, kind: ComponentKind[T], name: str, **arguments: Any) -> T:
        """The component ``name`` of ``kind`` built with ``factory(agent=agent, **arguments)``, once."""
        key = (kind, name, _key(arguments) if arguments else "")
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self.new(kind, name, **arguments)
        return built

    def new(self, kind: ComponentKind[T], name: str, **arguments: Any) -> T:
        """A new component ``name`` of ``kind``: ``factory(agent=agent, **arguments)``, checked."""
        built = self.component(kind, name).build(agent=self._agent, **arguments)
        if kind.capabilities:
            self._capabilities[id(built)] = (_reference(built), kind.implemented(built))
        return built

    def built(self, kind: ComponentKind[T]) -> Iterator[T]:
        """The components of ``kind`` :meth:`get` built so far, in the order it built them."""
        for (built_kind, _, _), component in self._built.items():
            if built_kind is kind:
                yield component

    def forget(self, kind: ComponentKind[T]) -> list[T]:
        """Drop the components of ``kind`` :meth:`get` built (the caller closes them); returns them."""
        dropped = [key for key in self._built if key[0] is kind]
        return [self._built.pop(key) for key in dropped]

    def supports(self, component: object, capability: Callable[..., C]) -> TypeGuard[C]:
        """Whether ``component`` implements the sub-protocol ``capability`` (a protocol class; typed as a callable
        because mypy accepts no protocol class where ``type[C]`` is expected, python/mypy#4717).

        For a component built here, what was recorded when it was built (one dictionary lookup);
        for another object (a store a test made directly, a wrapper around a built one), the
        protocol's members are checked.
        """
        recorded = self._capabilities.get(id(component))
        if recorded is not None and recorded[0]() is component:
            return capability in recorded[1]
        return not missing_members(component, cast(type, capability))


def _reference(value: object) -> Callable[[], object]:
    """A weak reference to ``value`` when it takes one, else a strong one: what :meth:`AgentComponents.supports`
    recorded under an id is only ever answered for the object it was recorded for."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


# ---------------------------------------------------------------------------- the kinds


def history_store_calls(store: HistoryStore) -> list[str]:
    """What a history store's methods must accept beyond their names: ``load`` takes ``on_warning``
    (every store's does, :class:`~monoagent._kernel.stores.HistoryStore`), a
    :class:`~monoagent._kernel.stores.ProviderSessionStore`'s ``commit`` takes
    ``provider_session``, and a :class:`~monoagent._kernel.stores.DurableHistoryStore`'s
    ``durable`` is a bool."""
    found = []
    why = cannot_call(store.load, "load(conversation_id, on_warning=...)", "conversation", on_warning=None)
    if why is not None:
        found.append(f"has a load() that cannot take on_warning ({why}): every history store's load takes "
                     f"on_warning (declare it as `async def load(self, conversation_id, *, on_warning=None)`; a store "
                     f"that never warns ignores it)")
    if hasattr(store, "load_provider_session"):
        why = cannot_call(store.commit, "commit(conversation_id, messages, provider_session=...)", "conversation", (),
                          provider_session=None)
        if why is not None:
            found.append(f"has load_provider_session() but a commit() that cannot take provider_session ({why}): a "
                         f"ProviderSessionStore's commit takes `*, provider_session=None`")
    if hasattr(store, "durable") and not isinstance(store.durable, bool):
        found.append(f"declares durable = {store.durable!r}: DurableHistoryStore.durable is True or False")
    return found


PROVIDERS: ComponentKind[ProviderRuntime] = ComponentKind(
    "provider", ProviderRuntime, "register_providers", ("agent", "model"), key="prefix", models=True,
    capabilities=(WindowedProviderRuntime,),
)
"""``runtime.model = "<prefix>:<model>"`` selects ``factory(agent=agent, model="<model>")``."""

HISTORY_STORES: ComponentKind[HistoryStore] = ComponentKind(
    "history store", HistoryStore, "register_history_stores",
    capabilities=(ManagedHistoryStore, LogicalLookupStore, ProviderSessionStore, DurableHistoryStore),
    check=history_store_calls,
)
"""``history.store = "<name>"`` selects ``factory(agent=agent)``."""

TOOL_HISTORY_STORES: ComponentKind[ToolHistoryStore] = ComponentKind(
    "tool history store", ToolHistoryStore, "register_tool_history_stores", off="none",
)
"""``toolHistory.store = "<name>"`` selects ``factory(agent=agent)``; ``none`` selects no store."""

MEMORY_TIERS: ComponentKind[MemoryTier] = ComponentKind(
    "memory tier", MemoryTier, "register_memory_tiers", ("agent", "options"),
    capabilities=(SelectiveMemoryTier, BrowsableMemoryTier, ClosableMemoryTier),
)
"""Each name in ``memory.tiers`` selects ``factory(agent=agent, options={...})``."""

EMBEDDERS: ComponentKind[Embedder] = ComponentKind("embedder", Embedder, "register_embedders", ("agent", "options"))
"""A memory tier selects its embedder by name: ``factory(agent=agent, options={...})``."""

CHANNELS: ComponentKind[Channel] = ComponentKind(
    "channel", Channel, "register_channels", capabilities=(ServedChannel, CheckedChannel),
)
"""``monoagent serve`` runs the enabled channels: ``factory(agent=agent)``."""

NOTIFIERS: ComponentKind[Notifier] = ComponentKind("notifier", Notifier, "register_notifiers", ("agent", "options"))
"""A notify destination of ``type = "<name>"``: ``factory(agent=agent, options={...})``."""

COMPACTION_POLICIES: ComponentKind[CompactionPolicy] = ComponentKind(
    "compaction policy", CompactionPolicy, "register_compaction_policies", off="none", capabilities=(StoredCompaction,),
)
"""``runtime.compaction.policy`` (or ``choose_compaction``) names one: ``factory(agent=agent)``; ``none`` sends history as it is."""

SESSION_BACKENDS: ComponentKind[SessionBackend] = ComponentKind(
    "session backend", SessionBackend, "register_session_backends", capabilities=(ClearableSessionBackend,),
)
"""``runtime.session.backend = "<name>"`` selects ``factory(agent=agent)``, built anew for each channel harness
(``agent.components.new``): each harness keeps its own sessions."""

KINDS: tuple[ComponentKind[Any], ...] = (
    PROVIDERS, HISTORY_STORES, TOOL_HISTORY_STORES, MEMORY_TIERS, EMBEDDERS, CHANNELS, NOTIFIERS,
    COMPACTION_POLICIES, SESSION_BACKENDS,
)
"""Every component kind, in the order ``monoagent plugins`` lists them."""
