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

What a registrar collected stays with the plugin's record (:class:`~monoagent._kernel.host.PluginRecord`):
the host builds each registry from the records of the active plugins, so a plugin that is
unregistered takes its components with it, and ``monoagent plugins`` lists every registration
with its description. Conflicts between plugins (two plugins registering one name) are the
host's business and are reported when the registry is used, naming both plugins.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import attrs

from monoagent._kernel.components import KINDS, Component, ComponentKind, cannot_call
from monoagent._kernel.errors import PluginError
from monoagent._kernel.interfaces import Tool
from monoagent._kernel.model import ToolSpec
from monoagent._kernel.tool_names import tool_name_problem

if TYPE_CHECKING:
    from monoagent._kernel.interfaces import ToolEnabled, ToolHandler
    from monoagent._kernel.typed_tool import TypedTool

T = TypeVar("T")

COMPONENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
COMPONENT_NAME_RULE = "letters, digits, '.', '_' or '-', starting with a letter or digit, at most 64 characters"
SECTION_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


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
class ConfigSection:
    """A configuration section a plugin declared: its key path and the attrs class of its keys."""

    path: str
    cls: type
    plugin: str


# ---------------------------------------------------------------------------- registrars


class Registrar:
    """Bound to one plugin for one registry hook; collects what that plugin registers.

    Subclasses define ``__call__`` with the documented signature of their registry.
    """

    hook: str
    call_form: str

    def __init__(self, plugin: str) -> None:
        self.plugin: str = plugin

    def registrations(self) -> list[Registration]:
        """What was registered, for the plugin listing."""
        raise NotImplementedError

    def refuse(self, problem: str) -> NoReturn:
        """Raise the :class:`RegistrationError` for ``problem``, naming the plugin and the call form."""
        raise RegistrationError(f"plugin {self.plugin!r} called {self.call_form} in {self.hook} wrongly: {problem}")


class ComponentRegistrar(Registrar, Generic[T]):
    """``register(name, factory, description="")`` in the registry hook of a component kind
    (:func:`~monoagent._kernel.hookspecs.register_providers`,
    :func:`~monoagent._kernel.hookspecs.register_history_stores`, ...).

    One class for every kind (:mod:`monoagent._kernel.components`): ``kind`` says the hook, the
    keyword arguments the factory is called with and the name that selects none. For providers
    the first argument is the model prefix and ``models=()`` names the models the provider knows
    (``offline`` knows ``echo`` and ``scripted``), for ``monoagent models``; a provider whose
    models are whatever its server has leaves it empty.
    """

    def __init__(self, kind: ComponentKind[T], plugin: str) -> None:
        super().__init__(plugin)
        self.kind: ComponentKind[T] = kind
        self.hook = kind.hook
        self.call_form = kind.call_form
        self.components: list[Component[T]] = []

    def registrations(self) -> list[Registration]:
        return [Registration(c.kind.name, c.name, c.description) for c in self.components]

    def check_name(self, name: str) -> str | None:
        """Why ``name`` is not a valid name in this registry, or None."""
        if not COMPONENT_NAME.fullmatch(name):
            return f"{self.kind.name} name {name!r} is not valid: use {COMPONENT_NAME_RULE}"
        if name == self.kind.off:
            return f"{self.kind.name} name {name!r} selects no {self.kind.name}; rename it"
        return None

    def __call__(self, name: str, factory: Callable[..., T], description: str = "", models: Sequence[str] = ()) -> None:
        kind = self.kind
        if not kind.models and models:
            self.refuse(f"models= is for providers; a {kind.name} takes register({kind.key}, factory, description='')")
        if isinstance(models, str) or not all(isinstance(m, str) and m and not any(c.isspace() for c in m) for m in models):
            self.refuse(f"the models of {kind.name} {name!r} must be a list of model names without whitespace, not {models!r}")
        if not isinstance(name, str):
            self.refuse(f"the {kind.name} name must be a string, not {type(name).__name__} {name!r}")
        problem = self.check_name(name)
        if problem:
            self.refuse(problem)
        if not callable(factory):
            self.refuse(f"the factory of {kind.name} {name!r} must be callable, not {type(factory).__name__} {factory!r}")
        if not isinstance(description, str):
            self.refuse(f"the description of {kind.name} {name!r} must be a string, not {type(description).__name__}")
        shown = f"factory({', '.join(f'{a}=...' for a in kind.arguments)})"
        problem = cannot_call(factory, shown, **dict.fromkeys(kind.arguments))
        if problem:
            self.refuse(f"{kind.name} {name!r}: the factory {problem}")
        if any(c.name == name for c in self.components):
            self.refuse(f"{kind.name} {name!r} is registered twice")
        self.components.append(Component(kind, name, factory, self.plugin, description, tuple(models)))


class ToolRegistrar(Registrar):
    """``register(func)`` or ``register(spec, handler)`` in :func:`~monoagent._kernel.hookspecs.register_tools`,
    either with ``enabled=``.

    ``func`` is a function decorated with :func:`monoagent.tool` (its spec and checked handler come
    from its signature and docstring). A tool name is 1 to 64 ASCII letters, digits, ``_`` or ``-``
    (:data:`~monoagent._kernel.tool_names.TOOL_NAME_PATTERN`, the providers' rule: any other name would
    be refused by the provider it is offered to); the handler is called as ``handler(context)`` with a
    :class:`~monoagent._kernel.tool_context.ToolContext`. A decorated function passed as the
    handler of ``register(spec, handler)`` is registered under that spec.

    ``enabled`` (keyword only; None: the tool is offered on every turn) is ``enabled(turn) -> bool``,
    asked on every turn with the read-only :class:`~monoagent._kernel.turn.Turn` when the tool loop
    builds the offered tools: false withdraws the tool from that turn (it is neither sent to the
    provider nor callable). It is how a plugin offers its own tool only where it applies (a memory
    tier configured, a mode on); ``filter_tools`` is for narrowing other plugins' tools. The first
    paragraph of its docstring, when it has one, is the condition ``monoagent tools`` shows for a
    tool it withdrew ("MemoryJournal is offered on turns whose memory.tiers has a journal tier.").
    """

    hook = "register_tools"
    call_form = "register(func) or register(spec, handler)"

    def __init__(self, plugin: str) -> None:
        super().__init__(plugin)
        self.tools: list[Tool] = []

    def registrations(self) -> list[Registration]:
        return [Registration("tool", t.spec.name, t.spec.description) for t in self.tools]

    def __call__(
        self, spec: ToolSpec | TypedTool[..., object], handler: ToolHandler | TypedTool[..., object] | None = None, *,
        enabled: ToolEnabled | None = None,
    ) -> None:
        from monoagent._kernel.typed_tool import TypedTool  # imported where used: it loads cattrs and docstring_parser

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
        problem = tool_name_problem(name)
        if problem:
            self.refuse(problem)
        if handler is None:
            self.refuse(f"tool {name!r} has no handler: call register(spec, handler)")
        if not callable(handler):
            self.refuse(f"the handler of tool {name!r} must be callable, not {type(handler).__name__} {handler!r}")
        problem = cannot_call(handler, "handler(context)", None)
        if problem:
            self.refuse(f"the handler of tool {name!r} {problem}")
        if enabled is not None:
            if not callable(enabled):
                self.refuse(f"enabled= of tool {name!r} must be a callable enabled(turn) -> bool, not {type(enabled).__name__} {enabled!r}")
            problem = cannot_call(enabled, "enabled(turn)", None)
            if problem:
                self.refuse(f"enabled= of tool {name!r}: {problem}")
        if any(t.spec.name == name for t in self.tools):
            self.refuse(f"tool {name!r} is registered twice")
        self.tools.append(Tool(spec, handler, self.plugin, enabled=enabled))


class ConfigSectionRegistrar(Registrar):
    """``register(path, cls)`` in :func:`~monoagent._kernel.hookspecs.register_config_sections`.

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
        from monoagent._kernel.config_keys import table_keys

        if path in kernel_keys():
            self.refuse(f"config section {path!r} is a key of the kernel's own configuration")
        table = kernel_tables().get(path)
        taken = sorted(table_keys(cls) & table_keys(table)) if table is not None else []
        if taken:
            self.refuse(f"config section {path!r} declares {path}.{taken[0]}, a key the kernel's table {path!r} owns")
        if any(s.path == path for s in self.sections):
            self.refuse(f"config section {path!r} is registered twice")
        self.sections.append(ConfigSection(path, cls, self.plugin))


#: How to make the registrar of each registry hook for a plugin (by its name): one per component
#: kind, then tools and configuration sections.
REGISTRARS: dict[str, Callable[[str], Registrar]] = {
    **{kind.hook: functools.partial(ComponentRegistrar, kind) for kind in KINDS},
    ToolRegistrar.hook: ToolRegistrar,
    ConfigSectionRegistrar.hook: ConfigSectionRegistrar,
}
CALL_FORMS: dict[str, str] = {
    **{kind.hook: kind.call_form for kind in KINDS},
    ToolRegistrar.hook: ToolRegistrar.call_form,
    ConfigSectionRegistrar.hook: ConfigSectionRegistrar.call_form,
}


@functools.cache
def kernel_tables() -> dict[str, type]:
    """The kernel's configuration tables by path, worked out once (every plugin's sections are checked against them)."""
    from monoagent._kernel import config_keys

    return config_keys.kernel_tables()


@functools.cache
def kernel_keys() -> frozenset[str]:
    """Every key path of the kernel's own configuration (``runtime.maxTurns``, ...): the keys of the
    root and of its tables that are not tables themselves."""
    from monoagent._kernel.config import Config
    from monoagent._kernel.config_keys import table_keys

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
