"""Typed registrars: the ``register`` argument of every registry hook, and what it records.

A registry hook (``register_providers``, ``register_tools``, ``register_config_sections``, ...)
receives one registrar bound to the plugin whose implementation is called, when that plugin is
loaded. The registrar's ``__call__`` has exactly the documented signature (``register(prefix,
factory, description="")`` for providers, ``register(func)`` or ``register(spec, handler)`` for
tools, ``register(path, cls)`` for configuration sections) and checks every registration on the
spot: the argument types, a name valid for its registry, a callable factory that accepts the
keyword arguments the kernel will call it with. A bad registration is therefore found while the
plugin loads, naming it, and the plugin is recorded as failed like one that fails to import
(strict mode: fatal), instead of a ``TypeError`` from deep inside the kernel on the first turn.

What a registrar collected stays with the plugin's record (:class:`~monoagent.kernel.host.PluginRecord`):
the host builds each registry from the records of the active plugins, so a plugin that is
unregistered takes its components with it, and ``monoagent plugins`` lists every registration
with its description. Conflicts between plugins (two plugins registering one name) are the
host's business and are reported when the registry is used, naming both plugins.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Protocol

import attrs

from monoagent.kernel.errors import ComponentFactoryError, MonoagentError, PluginError
from monoagent.kernel.interfaces import Tool
from monoagent.kernel.model import ToolSpec

if TYPE_CHECKING:
    from monoagent.agent import Agent
    from monoagent.kernel.interfaces import (
        Channel,
        CompactionPolicy,
        Embedder,
        HistoryStore,
        MemoryTier,
        Notifier,
        ProviderRuntime,
        ToolHandler,
        ToolHistoryStore,
    )
    from monoagent.kernel.typed_tool import TypedTool

COMPONENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
COMPONENT_NAME_RULE = "letters, digits, '.', '_' or '-', starting with a letter or digit, at most 64 characters"
SECTION_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
TOOL_NAME_MAX = 128


class RegistrationError(PluginError):
    """A plugin's registry hook registered something the registry cannot take.

    Raised while the plugin loads; the host records the plugin as failed with this message
    (strict mode re-raises it as fatal).
    """


@attrs.frozen
class Registration:
    """One thing a plugin registered, as ``monoagent plugins`` lists it."""

    kind: str
    name: str
    description: str = ""


@attrs.frozen
class Component:
    """A named component a plugin registered in a registry; ``factory`` builds it on first use."""

    kind: str
    name: str
    factory: Any
    plugin: str
    description: str = ""
    models: tuple[str, ...] = ()
    """The model names a provider says it knows (``monoagent models`` lists them); empty when it offers no list."""

    def build(self, **kwargs: Any) -> Any:
        """``factory(**kwargs)``, the way the kernel builds every component: an exception that is not
        a :class:`~monoagent.kernel.errors.MonoagentError` becomes a
        :class:`~monoagent.kernel.errors.ComponentFactoryError` naming the component and its plugin."""
        try:
            return self.factory(**kwargs)
        except MonoagentError:
            raise
        except Exception as exc:
            hook = next((cls.hook for cls in COMPONENT_REGISTRARS if cls.kind == self.kind), "its registry hook")
            raise ComponentFactoryError(self.kind, self.name, hook, self.plugin, exc) from exc


@attrs.frozen
class ConfigSection:
    """A configuration section a plugin declared: its key path and the attrs class of its keys."""

    path: str
    cls: type
    plugin: str


# ---------------------------------------------------------------------------- factory shapes


class ProviderFactory(Protocol):
    """``factory(agent=agent, model="<model>")`` for ``runtime.model = "<prefix>:<model>"``."""

    def __call__(self, *, agent: Agent, model: str) -> ProviderRuntime: ...


class HistoryStoreFactory(Protocol):
    """``factory(agent=agent)`` for ``history.store = "<name>"``."""

    def __call__(self, *, agent: Agent) -> HistoryStore: ...


class ToolHistoryStoreFactory(Protocol):
    """``factory(agent=agent)`` for ``toolHistory.store = "<name>"``."""

    def __call__(self, *, agent: Agent) -> ToolHistoryStore: ...


class MemoryTierFactory(Protocol):
    """``factory(agent=agent, options={...})`` for a memory tier selected by name, with its options."""

    def __call__(self, *, agent: Agent, options: dict[str, Any]) -> MemoryTier: ...


class EmbedderFactory(Protocol):
    """``factory(agent=agent, options={...})`` for an embedder selected by name, with its options."""

    def __call__(self, *, agent: Agent, options: dict[str, Any]) -> Embedder: ...


class ChannelFactory(Protocol):
    """``factory(agent=agent)`` for a channel ``monoagent serve`` runs."""

    def __call__(self, *, agent: Agent) -> Channel: ...


class NotifierFactory(Protocol):
    """``factory(agent=agent, options={...})`` for a notify destination of this kind, with its table."""

    def __call__(self, *, agent: Agent, options: dict[str, Any]) -> Notifier: ...


class CompactionPolicyFactory(Protocol):
    """``factory(agent=agent)`` for the policy :func:`~monoagent.kernel.hookspecs.choose_compaction` names."""

    def __call__(self, *, agent: Agent) -> CompactionPolicy: ...


# ---------------------------------------------------------------------------- registrars


class Registrar:
    """Bound to one plugin for one registry hook; collects what that plugin registers.

    Subclasses define ``__call__`` with the documented signature of their registry.
    """

    hook: ClassVar[str]
    call_form: ClassVar[str]

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin

    def registrations(self) -> list[Registration]:
        """What was registered, for the plugin listing."""
        raise NotImplementedError

    def refuse(self, problem: str) -> NoReturn:
        """Raise the :class:`RegistrationError` for ``problem``, naming the plugin and the call form."""
        raise RegistrationError(f"plugin {self.plugin!r} called {self.call_form} in {self.hook} wrongly: {problem}")


def _cannot_call(function: Callable[..., Any], shown: str, *args: Any, **kwargs: Any) -> str | None:
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


class ComponentRegistrar(Registrar):
    """A registry of named components built by factories (providers, stores, tiers, ...)."""

    kind: ClassVar[str]
    factory_arguments: ClassVar[tuple[str, ...]]
    off: ClassVar[str | None] = None
    """The configured name that selects no component of this kind, so no plugin may register it."""

    def __init__(self, plugin: str) -> None:
        super().__init__(plugin)
        self.components: list[Component] = []

    def registrations(self) -> list[Registration]:
        return [Registration(c.kind, c.name, c.description) for c in self.components]

    def check_name(self, name: str) -> str | None:
        """Why ``name`` is not a valid name in this registry, or None."""
        if not COMPONENT_NAME.fullmatch(name):
            return f"{self.kind} name {name!r} is not valid: use {COMPONENT_NAME_RULE}"
        if name == self.off:
            return f"{self.kind} name {name!r} selects no {self.kind}; rename it"
        return None

    def add(self, name: object, factory: object, description: object, models: tuple[str, ...] = ()) -> None:
        """Check one registration and record it (the ``__call__`` of each subclass delegates here)."""
        if not isinstance(name, str):
            self.refuse(f"the {self.kind} name must be a string, not {type(name).__name__} {name!r}")
        problem = self.check_name(name)
        if problem:
            self.refuse(problem)
        if not callable(factory):
            self.refuse(f"the factory of {self.kind} {name!r} must be callable, not {type(factory).__name__} {factory!r}")
        if not isinstance(description, str):
            self.refuse(f"the description of {self.kind} {name!r} must be a string, not {type(description).__name__}")
        shown = f"factory({', '.join(f'{a}=...' for a in self.factory_arguments)})"
        problem = _cannot_call(factory, shown, **dict.fromkeys(self.factory_arguments))
        if problem:
            self.refuse(f"{self.kind} {name!r}: the factory {problem}")
        if any(c.name == name for c in self.components):
            self.refuse(f"{self.kind} {name!r} is registered twice")
        self.components.append(Component(self.kind, name, factory, self.plugin, description, models))


class ProviderRegistrar(ComponentRegistrar):
    """``register(prefix, factory, description="", models=())`` in :func:`~monoagent.kernel.hookspecs.register_providers`.

    ``models`` names the models the provider knows (``offline`` knows ``echo`` and ``scripted``),
    for ``monoagent models``; a provider whose models are whatever its server has leaves it empty.
    """

    hook = "register_providers"
    call_form = "register(prefix, factory, description='', models=())"
    kind = "provider"
    factory_arguments = ("agent", "model")

    def __call__(self, prefix: str, factory: ProviderFactory, description: str = "", models: Sequence[str] = ()) -> None:
        if isinstance(models, str) or not all(isinstance(m, str) and m and not any(c.isspace() for c in m) for m in models):
            self.refuse(f"the models of provider {prefix!r} must be a list of model names without whitespace, not {models!r}")
        self.add(prefix, factory, description, tuple(models))


class HistoryStoreRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_history_stores`."""

    hook = "register_history_stores"
    call_form = "register(name, factory, description='')"
    kind = "history store"
    factory_arguments = ("agent",)

    def __call__(self, name: str, factory: HistoryStoreFactory, description: str = "") -> None:
        self.add(name, factory, description)


class ToolHistoryStoreRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_tool_history_stores`.

    ``none`` is ``toolHistory.store``'s value for no tool history.
    """

    hook = "register_tool_history_stores"
    call_form = "register(name, factory, description='')"
    kind = "tool history store"
    factory_arguments = ("agent",)
    off = "none"

    def __call__(self, name: str, factory: ToolHistoryStoreFactory, description: str = "") -> None:
        self.add(name, factory, description)


class MemoryTierRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_memory_tiers`."""

    hook = "register_memory_tiers"
    call_form = "register(name, factory, description='')"
    kind = "memory tier"
    factory_arguments = ("agent", "options")

    def __call__(self, name: str, factory: MemoryTierFactory, description: str = "") -> None:
        self.add(name, factory, description)


class EmbedderRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_embedders`."""

    hook = "register_embedders"
    call_form = "register(name, factory, description='')"
    kind = "embedder"
    factory_arguments = ("agent", "options")

    def __call__(self, name: str, factory: EmbedderFactory, description: str = "") -> None:
        self.add(name, factory, description)


class ChannelRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_channels`."""

    hook = "register_channels"
    call_form = "register(name, factory, description='')"
    kind = "channel"
    factory_arguments = ("agent",)

    def __call__(self, name: str, factory: ChannelFactory, description: str = "") -> None:
        self.add(name, factory, description)


class NotifierRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_notifiers`."""

    hook = "register_notifiers"
    call_form = "register(name, factory, description='')"
    kind = "notifier"
    factory_arguments = ("agent", "options")

    def __call__(self, name: str, factory: NotifierFactory, description: str = "") -> None:
        self.add(name, factory, description)


class CompactionPolicyRegistrar(ComponentRegistrar):
    """``register(name, factory, description="")`` in :func:`~monoagent.kernel.hookspecs.register_compaction_policies`.

    ``none`` is what :func:`~monoagent.kernel.hookspecs.choose_compaction` returns to send the
    history as it is.
    """

    hook = "register_compaction_policies"
    call_form = "register(name, factory, description='')"
    kind = "compaction policy"
    factory_arguments = ("agent",)
    off = "none"

    def __call__(self, name: str, factory: CompactionPolicyFactory, description: str = "") -> None:
        self.add(name, factory, description)


#: The component registries, in the order ``monoagent plugins`` lists them.
COMPONENT_REGISTRARS: tuple[type[ComponentRegistrar], ...] = (
    ProviderRegistrar,
    HistoryStoreRegistrar,
    ToolHistoryStoreRegistrar,
    MemoryTierRegistrar,
    EmbedderRegistrar,
    ChannelRegistrar,
    NotifierRegistrar,
    CompactionPolicyRegistrar,
)


class ToolRegistrar(Registrar):
    """``register(func)`` or ``register(spec, handler)`` in :func:`~monoagent.kernel.hookspecs.register_tools`.

    ``func`` is a function decorated with :func:`monoagent.tool` (its spec and checked handler come
    from its signature and docstring). In the second form a tool name is any text of at most 128
    characters without whitespace or control characters (each provider's wire format may be
    stricter and says so when it is sent); the handler is called as ``handler(context)`` with a
    :class:`~monoagent.kernel.tool_context.ToolContext`. A decorated function passed as the
    handler of ``register(spec, handler)`` is registered under that spec.
    """

    hook = "register_tools"
    call_form = "register(func) or register(spec, handler)"

    def __init__(self, plugin: str) -> None:
        super().__init__(plugin)
        self.tools: list[Tool] = []

    def registrations(self) -> list[Registration]:
        return [Registration("tool", t.spec.name, t.spec.description) for t in self.tools]

    def __call__(self, spec: ToolSpec | TypedTool, handler: ToolHandler | TypedTool | None = None) -> None:
        from monoagent.kernel.typed_tool import TypedTool  # imported where used: it loads cattrs and docstring_parser

        if isinstance(spec, TypedTool):
            typed = spec
            if handler is not None:
                self.refuse(f"a decorated tool ({typed.spec.name!r}) is registered alone, as register(func), not with a handler")
            spec, handler = typed.spec, typed.handle
        elif isinstance(handler, TypedTool):
            handler = handler.handle
        if not isinstance(spec, ToolSpec):
            hint = "; decorate the function with @monoagent.tool to register it as register(func)" if callable(spec) else ""
            self.refuse(f"expected a function decorated with @monoagent.tool or a monoagent.ToolSpec, not {type(spec).__name__} {spec!r}{hint}")
        name = spec.name
        if not name or len(name) > TOOL_NAME_MAX or any(ch.isspace() or not ch.isprintable() for ch in name):
            self.refuse(f"tool name {name!r} is not valid: 1 to {TOOL_NAME_MAX} characters, no whitespace or control characters")
        if handler is None:
            self.refuse(f"tool {name!r} has no handler: call register(spec, handler)")
        if not callable(handler):
            self.refuse(f"the handler of tool {name!r} must be callable, not {type(handler).__name__} {handler!r}")
        problem = _cannot_call(handler, "handler(context)", None)
        if problem:
            self.refuse(f"the handler of tool {name!r} {problem}")
        if any(t.spec.name == name for t in self.tools):
            self.refuse(f"tool {name!r} is registered twice")
        self.tools.append(Tool(spec, handler, self.plugin))


class ConfigSectionRegistrar(Registrar):
    """``register(path, cls)`` in :func:`~monoagent.kernel.hookspecs.register_config_sections`.

    The path is dotted identifiers: a table of the plugin's own (``"greeter"``,
    ``"providers.mylab"``), or one of the kernel's tables (``"history"``) to which the plugin
    adds keys it alone reads; ``cls`` is an attrs class. A kernel key is never a plugin's, and
    neither is a key the kernel's table already has.
    """

    hook = "register_config_sections"
    call_form = "register(path, cls)"

    def __init__(self, plugin: str) -> None:
        super().__init__(plugin)
        self.sections: list[ConfigSection] = []

    def registrations(self) -> list[Registration]:
        """Each section with the first line of its class's docstring (without a leading ``path:``)."""
        return [
            Registration("config section", s.path, (s.cls.__doc__ or "").strip().split("\n")[0].removeprefix(f"{s.path}: "))
            for s in self.sections
        ]

    def __call__(self, path: str, cls: type) -> None:
        if not isinstance(path, str) or not SECTION_PATH.fullmatch(path):
            self.refuse(f"config section path {path!r} is not valid: dotted identifiers such as 'greeter' or 'providers.mylab'")
        if not attrs.has(cls):
            self.refuse(f"config section {path!r} needs an attrs class, not {cls!r}")
        from monoagent.kernel.config_keys import table_keys

        if path in kernel_keys():
            self.refuse(f"config section {path!r} is a key of the kernel's own configuration")
        table = kernel_tables().get(path)
        taken = sorted(table_keys(cls) & table_keys(table)) if table is not None else []
        if taken:
            self.refuse(f"config section {path!r} declares {path}.{taken[0]}, a key the kernel's table {path!r} owns")
        if any(s.path == path for s in self.sections):
            self.refuse(f"config section {path!r} is registered twice")
        self.sections.append(ConfigSection(path, cls, self.plugin))


#: Every registrar class, by the registry hook it serves.
_ALL: tuple[type[Registrar], ...] = (*COMPONENT_REGISTRARS, ToolRegistrar, ConfigSectionRegistrar)
REGISTRARS: dict[str, type[Registrar]] = {cls.hook: cls for cls in _ALL}


@functools.cache
def kernel_tables() -> dict[str, type]:
    """The kernel's configuration tables by path, worked out once (every plugin's sections are checked against them)."""
    from monoagent.kernel import config_keys

    return config_keys.kernel_tables()


@functools.cache
def kernel_keys() -> frozenset[str]:
    """Every key path of the kernel's own configuration (``runtime.maxTurns``, ...): the keys of the
    root and of its tables that are not tables themselves."""
    from monoagent.kernel.config import Config
    from monoagent.kernel.config_keys import table_keys

    tables = kernel_tables()
    keys = {f"{path}.{key}" if path else key for path, cls in {"": Config, **tables}.items() for key in table_keys(cls)}
    return frozenset(keys - tables.keys())


class LoadingPluginRegistrar:
    """The ``register`` argument of a registry hook: the registrar of the plugin being registered.

    Registry hooks are historic: pluggy runs each plugin's implementation when the plugin is
    registered, with the arguments of the one call the plugin host made at start-up. That call's
    ``register`` is this object, which hands each registration to the registrar the host bound to
    the plugin it is registering (``current()``), so what a plugin registers is recorded as its own.
    """

    def __init__(self, current: Callable[[], Registrar | None], hook: str) -> None:
        self._current = current
        self._hook = hook

    def _registrar(self) -> Registrar:
        registrar = self._current()
        if registrar is None:
            raise PluginError(f"{self._hook}'s register was called after its plugin was registered; register while the hook runs")
        return registrar

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._registrar()(*args, **kwargs)  # type: ignore[operator]  # every registrar class defines __call__

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registrar(), name)
