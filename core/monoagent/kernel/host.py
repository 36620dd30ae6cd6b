"""The plugin host: one pluggy manager per Agent, the four load sources, records and registries.

Load order (later sources take precedence in firstresult hooks, because pluggy calls the most
recently registered implementation first):

1. bundled plugins: entry-point group ``monoagent`` of the ``monoagent`` distribution itself,
   sorted by name (a fixed order); their implementations are marked ``trylast``;
2. third-party entry points (group ``monoagent`` of every other distribution), sorted by name;
3. project-local plugins: ``monoagent_local.py`` next to the discovered config file, then the
   files and directories of ``plugins.paths``, then ``--plugins-dir`` directories;
4. plugins passed in Python (``Agent(..., plugins=[...])``).

Switches, in order of precedence:

* ``plugins.block`` (config; env ``MONO_AGENT_BLOCK_PLUGINS``) blocks any plugin by its one name,
  bundled ones included, before it is imported. It beats everything below.
* ``MONO_AGENT_LOAD_PLUGINS=a,b`` loads only those third-party entry points (empty: none); it
  takes precedence over ``MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD``. Bundled plugins are not
  affected (block them by name instead).
* ``MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD=1`` skips every third-party entry point.
* ``MONO_AGENT_STRICT_PLUGINS=1`` makes a plugin that fails to load fatal.
* ``MONO_AGENT_TRACE_HOOKS=1`` prints every hook call and its implementations to stderr.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import pluggy
from monoagent.kernel.log import logger

from monoagent.kernel import hookspecs
from monoagent.kernel.errors import ComponentError, HookError, MonoagentError, PluginError

ENTRY_POINT_GROUP = "monoagent"
BUNDLED_DISTRIBUTION = "monoagent"
LOCAL_PLUGIN_FILE = "monoagent_local.py"

Source = Literal["bundled", "entrypoint", "local", "programmatic"]
Status = Literal["active", "blocked", "failed"]

T = TypeVar("T")


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _stderr(line: str, redact: Callable[[str, str], str] | None = None) -> None:
    """One line to stderr through :func:`monoagent.boundary.terminal.terminal_text` (traces pass no redactor:
    redacting inside the hook-call monitor would trace itself)."""
    from monoagent.boundary.terminal import terminal_text

    sys.stderr.write(terminal_text(line, redact) + "\n")


async def await_me_maybe(value: T | Awaitable[T]) -> T:
    """Await ``value`` if it is awaitable, else return it: for hooks that may return awaitables."""
    if inspect.isawaitable(value):
        return await value
    return value  # type: ignore[return-value]


@attrs.define
class PluginRecord:
    """What ``monoagent plugins`` shows for one plugin."""

    name: str
    source: Source
    status: Status
    location: str
    version: str | None = None
    reason: str | None = None
    hooks: list[str] = attrs.Factory(list)
    plugin: Any = attrs.field(default=None, repr=False)


@attrs.frozen
class Component:
    """A named component a plugin registered in a registry."""

    kind: str
    name: str
    factory: Any
    plugin: str
    description: str = ""


REGISTRIES: dict[str, str] = {
    "provider": "register_providers",
    "history store": "register_history_stores",
    "tool history store": "register_tool_history_stores",
    "memory tier": "register_memory_tiers",
    "embedder": "register_embedders",
    "channel": "register_channels",
    "compaction policy": "register_compaction_policies",
}

OFF_NAMES: dict[str, str] = {"tool history store": "none"}
"""Per registry kind, the configured name that selects no component (never a registrable name)."""


class PluginHost:
    """Owns one :class:`pluggy.PluginManager` and everything known about its plugins."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []
        self.strict = _flag(self.env, "MONO_AGENT_STRICT_PLUGINS")
        self._components: dict[str, dict[str, Component]] | None = None
        self._code_owners: dict[str, dict[types.CodeType, str]] = {}
        self.tracing = _flag(self.env, "MONO_AGENT_TRACE_HOOKS")
        if self.tracing:
            self.pm.add_hookcall_monitoring(self._trace_before, self._trace_after)

    # ------------------------------------------------------------------ tracing

    @staticmethod
    def _trace_before(hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]) -> None:
        names = ", ".join(impl.plugin_name for impl in impls) or "(no implementation)"
        _stderr(f"monoagent trace: {hook_name}({', '.join(kwargs)}) -> [{names}]")

    @staticmethod
    def _trace_after(outcome: Any, hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        exc = outcome.exception
        if exc is not None:
            _stderr(f"monoagent trace: {hook_name} raised {type(exc).__name__}: {exc}")

    def _trace_registry(self, hook_name: str, impls: Sequence[pluggy.HookImpl]) -> None:
        """Trace a registry hook, which the kernel calls per implementation, outside pluggy's monitor."""
        if self.tracing:
            names = ", ".join(impl.plugin_name for impl in impls) or "(no implementation)"
            _stderr(f"monoagent trace: {hook_name}(register) -> [{names}]")

    def _redact_notice(self, text: str, kind: str) -> str:
        """The redaction chain registered so far, for the host's own notices on stderr.

        Plugins are still loading when these are printed, so a broken redactor must not take the
        load down: the notice is then printed with its controls stripped only, and logged.
        """
        try:
            value = self.call("redact", text=text, kind=kind)
        except Exception as exc:
            logger.opt(exception=exc).warning("the redaction chain failed on a plugin-loading notice; printed unredacted")
            return text
        return text if value is None else value

    # ------------------------------------------------------------------ loading

    def _record(self, record: PluginRecord) -> PluginRecord:
        self.records.append(record)
        return record

    def _fail(self, record: PluginRecord, exc: BaseException) -> None:
        record.status = "failed"
        record.reason = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever the message
        consequence = (
            "stopping (MONO_AGENT_STRICT_PLUGINS=1)" if self.strict
            else "continuing without it (MONO_AGENT_STRICT_PLUGINS=1 makes this fatal)"
        )
        _stderr(
            f"monoagent: plugin {record.name!r} ({record.source} {record.location}) failed to load: "
            f"{record.reason}; {consequence}",
            self._redact_notice,
        )
        logger.bind(plugin=record.name).opt(exception=exc).debug("plugin failed to load")
        if self.strict:
            raise PluginError(f"plugin {record.name!r} ({record.location}) failed to load: {record.reason}") from exc

    def _register(self, record: PluginRecord, plugin: Any) -> None:
        if self.pm.has_plugin(record.name):
            other = next(r for r in self.records if r.name == record.name and r.status == "active")
            raise PluginError(
                f"the name {record.name!r} is already taken by the {other.source} plugin from {other.location}; "
                f"rename one, or block the other with plugins.block"
            )
        self.pm.register(plugin, name=record.name)
        record.plugin = plugin
        record.status = "active"
        record.hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])
        if record.version is None:
            record.version = getattr(plugin, "__version__", None)
        self._warn_unknown_hooks(record, plugin)
        self._components = None
        self._code_owners.clear()

    def _warn_unknown_hooks(self, record: PluginRecord, plugin: Any) -> None:
        known = set(self.pm.hook.__dict__)
        spec_names = [name for name in known if getattr(self.pm.hook, name).spec is not None]
        for caller in self.pm.get_hookcallers(plugin) or []:
            if caller.spec is None:
                close = difflib.get_close_matches(caller.name, spec_names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                message = f"plugin {record.name!r} implements {caller.name!r}, which is not a monoagent hook{hint}"
                if self.strict:
                    raise PluginError(message)
                _stderr(f"monoagent: warning: {message}", self._redact_notice)

    def load_entry_points(self, block: Iterable[str] = ()) -> None:
        """Register bundled plugins, then third-party entry points sorted by name."""
        from importlib.metadata import entry_points

        blocked = set(block)
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
        bundled = sorted((ep for ep in eps if _dist_name(ep) == BUNDLED_DISTRIBUTION), key=lambda ep: ep.name)
        third = sorted((ep for ep in eps if _dist_name(ep) != BUNDLED_DISTRIBUTION), key=lambda ep: ep.name)
        only = self.env.get("MONO_AGENT_LOAD_PLUGINS")
        allowed = None if only is None else {n.strip() for n in only.split(",") if n.strip()}
        no_autoload = _flag(self.env, "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD")
        if allowed:
            unknown = sorted(allowed - {ep.name for ep in third})
            if unknown:
                _stderr(
                    f"monoagent: warning: MONO_AGENT_LOAD_PLUGINS names {', '.join(unknown)}, which no installed "
                    f"distribution provides (installed: {', '.join(ep.name for ep in third) or 'none'})",
                    self._redact_notice,
                )
        for ep in bundled + third:
            source: Source = "bundled" if ep in bundled else "entrypoint"
            info = _dist_info(ep)
            location = f"{info[0]} {info[1]}" if info else ep.value
            record = self._record(PluginRecord(ep.name, source, "blocked", location, info[1] if info else None))
            if ep.name in blocked:
                record.reason = "blocked by plugins.block"
                continue
            if source == "entrypoint":
                if allowed is not None and ep.name not in allowed:
                    record.reason = "not listed in MONO_AGENT_LOAD_PLUGINS"
                    continue
                if allowed is None and no_autoload:
                    record.reason = "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD=1"
                    continue
            try:
                self._register(record, ep.load())
            except Exception as exc:  # a broken plugin must never take the host down
                self._fail(record, exc)

    def load_local(self, paths: Iterable[Path], block: Iterable[str] = ()) -> None:
        """Register project-local plugin files (a directory contributes its ``*.py`` files, sorted).

        A path that does not exist is recorded as a failed plugin, like a file that fails to
        import, so one mistyped path never drops the other local plugins.
        """
        blocked = set(block)
        for given in map(Path, paths):
            if not given.exists():
                missing = self._record(PluginRecord(given.stem or str(given), "local", "blocked", str(given)))
                self._fail(missing, PluginError(f"plugin path {given} does not exist (from plugins.paths or --plugins-dir)"))
                continue
            for path in _expand_plugin_paths([given]):
                name = path.stem
                record = self._record(PluginRecord(name, "local", "blocked", str(path)))
                if name in blocked:
                    record.reason = "blocked by plugins.block"
                    continue
                try:
                    self._register(record, _import_file(path))
                except Exception as exc:
                    self._fail(record, exc)

    def register_programmatic(self, plugin: Any, name: str | None = None, block: Iterable[str] = ()) -> PluginRecord:
        """Register a plugin object passed in Python (a module, class or instance)."""
        name = name or _object_name(plugin)
        location = getattr(plugin, "__file__", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"
        record = self._record(PluginRecord(name, "programmatic", "blocked", location))
        if name in set(block):
            record.reason = "blocked by plugins.block"
            return record
        self._register(record, plugin)
        return record

    # ------------------------------------------------------------------ hook calls

    def hook(self, name: str) -> pluggy.HookCaller:
        return getattr(self.pm.hook, name)

    def call(self, name: str, **kwargs: Any) -> Any:
        """Call hook ``name``; an exception escaping an implementation becomes a :class:`HookError`."""
        try:
            return getattr(self.pm.hook, name)(**kwargs)
        except MonoagentError:
            raise
        except Exception as exc:
            raise HookError(name, self.culprit(name, exc), exc) from exc

    def culprit(self, hook_name: str, exc: BaseException) -> str:
        """The plugin whose implementation of ``hook_name`` raised ``exc`` (innermost frame wins)."""
        owners = self._code_owners.get(hook_name)
        if owners is None:
            owners = {}
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                code = getattr(impl.function, "__code__", None)
                if code is not None:
                    owners[code] = impl.plugin_name
            self._code_owners[hook_name] = owners
        found = "unknown plugin"
        tb = exc.__traceback__
        while tb is not None:
            owner = owners.get(tb.tb_frame.f_code)
            if owner is not None:
                found = owner
            tb = tb.tb_next
        return found

    def call_each(self, name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call every implementation of ``name`` separately, knowing which plugin answered.

        Used for registries, where the kernel must know who registered what. Implementations
        run in pluggy's order; each gets only the arguments it declares.
        """
        results: list[tuple[str, Any]] = []
        impls = getattr(self.pm.hook, name).get_hookimpls()
        if self.tracing:
            _stderr(f"monoagent trace: {name}({', '.join(kwargs)}) -> [{', '.join(i.plugin_name for i in impls)}]")
        for impl in reversed(impls):
            args = {key: kwargs[key] for key in impl.argnames if key in kwargs}
            try:
                results.append((impl.plugin_name, impl.function(**args)))
            except MonoagentError:
                raise
            except Exception as exc:
                raise HookError(name, impl.plugin_name, exc) from exc
        return results

    def call_isolated(self, name: str, **kwargs: Any) -> list[tuple[str, Any, BaseException | None]]:
        """Call each implementation of ``name`` on its own: one that raises does not stop the rest.

        For observer-like hooks (``after_commit``, ``on_run_event``) whose failures must be
        reported without undoing what already happened. Returns ``(plugin, result, error)``.
        """
        out: list[tuple[str, Any, BaseException | None]] = []
        impls = getattr(self.pm.hook, name).get_hookimpls()[::-1]
        if self.tracing:
            _stderr(f"monoagent trace: {name}({', '.join(kwargs)}) -> [{', '.join(i.plugin_name for i in impls)}]")
        for impl in impls:
            args = {key: kwargs[key] for key in impl.argnames if key in kwargs}
            try:
                out.append((impl.plugin_name, impl.function(**args), None))
            except Exception as exc:
                out.append((impl.plugin_name, None, exc))
        return out

    # ------------------------------------------------------------------ registries

    def _run_registry(self, hook_name: str, bind: Callable[[str], Callable[..., None]]) -> None:
        """Call each implementation of a registry hook with a ``register`` bound to its plugin.

        Bundled (``trylast``) implementations come first, so a conflict names them first.
        """
        impls = self.hook(hook_name).get_hookimpls()
        self._trace_registry(hook_name, impls)
        for impl in impls:
            try:
                impl.function(**{"register": bind(impl.plugin_name)} if "register" in impl.argnames else {})
            except MonoagentError:
                raise
            except Exception as exc:
                raise HookError(hook_name, impl.plugin_name, exc) from exc

    def _collect(self, hook_name: str, kind: str) -> dict[str, Component]:
        found: dict[str, Component] = {}

        def bind(plugin: str) -> Callable[..., None]:
            def register(name: str, factory: Any, *, description: str = "") -> None:
                if not isinstance(name, str) or not name:
                    raise ComponentError(f"plugin {plugin!r} registered a {kind} with an invalid name {name!r}")
                if name == OFF_NAMES.get(kind):
                    raise ComponentError(f"plugin {plugin!r} registered a {kind} named {name!r}, which selects no {kind}; rename it")
                if name in found:
                    raise ComponentError(self._duplicate(kind, name, found[name].plugin, plugin))
                found[name] = Component(kind, name, factory, plugin, description)

            return register

        self._run_registry(hook_name, bind)
        return found

    def _duplicate(self, kind: str, name: str, first: str, second: str) -> str:
        return (
            f"{kind} {name!r} is registered by two plugins: {self._describe(first)} and {self._describe(second)}; "
            f"block one of them with plugins.block"
        )

    def _describe(self, plugin_name: str) -> str:
        for record in self.records:
            if record.name == plugin_name:
                return f"{plugin_name!r} ({record.source} {record.location})"
        return repr(plugin_name)

    @property
    def components(self) -> dict[str, dict[str, Component]]:
        if self._components is None:
            self._components = {kind: self._collect(hook, kind) for kind, hook in REGISTRIES.items()}
        return self._components

    def component(self, kind: str, name: str) -> Component:
        """The component ``name`` of ``kind``, or a :class:`ComponentError` naming the plugins at fault."""
        registry = self.components[kind]
        if name in registry:
            return registry[name]
        inactive = [r for r in self.records if r.status != "active"]
        exact = [r for r in inactive if r.name == name]
        if exact:
            record = exact[0]
            why = f"failed to load ({record.reason})" if record.status == "failed" else f"blocked ({record.reason})"
            raise ComponentError(
                f"{kind} {name!r} is selected in the configuration, but its plugin {record.name!r} "
                f"({record.location}) is {why}"
            )
        available = ", ".join(sorted(registry)) or "none"
        message = f"{kind} {name!r} is selected in the configuration, but no active plugin registers it (available: {available})"
        if inactive:
            listed = "; ".join(
                f"{r.name!r} {'failed: ' + (r.reason or '') if r.status == 'failed' else 'blocked: ' + (r.reason or '')}"
                for r in inactive
            )
            message += f". Plugins not active, one of which may provide it: {listed}"
        raise ComponentError(message)

    def tools(self) -> dict[str, Any]:
        """Registered tools by name (a :class:`~monoagent.kernel.interfaces.Tool` each)."""
        from monoagent.kernel.interfaces import Tool
        from monoagent.kernel.model import ToolSpec

        found: dict[str, Tool] = {}

        def bind(plugin: str) -> Callable[..., None]:
            def register(spec: ToolSpec, handler: Any) -> None:
                if not isinstance(spec, ToolSpec):
                    raise ComponentError(f"plugin {plugin!r} registered a tool with {spec!r}; expected a ToolSpec")
                if spec.name in found:
                    raise ComponentError(self._duplicate("tool", spec.name, found[spec.name].plugin, plugin))
                found[spec.name] = Tool(spec, handler, plugin)

            return register

        self._run_registry("register_tools", bind)
        return found

    def config_sections(self) -> dict[str, type]:
        """Plugin-declared configuration sections, path -> attrs class.

        A section may be a table of its own (``providers.mylab``) or add keys to one of the
        kernel's tables (``history``): a plugin declares the keys it alone reads, keeping their
        documented paths. A kernel key is never a plugin's, and a path is one plugin's.
        """
        from monoagent.kernel.config_keys import iter_keys, kernel_tables, table_keys

        sections: dict[str, tuple[type, str]] = {}
        kernel_keys = {key.path for key in iter_keys()}
        tables = kernel_tables()

        def bind(plugin: str) -> Callable[..., None]:
            def register(path: str, cls: type) -> None:
                if not attrs.has(cls):
                    raise PluginError(f"plugin {plugin!r} registered config section {path!r} with {cls!r}, not an attrs class")
                if path in kernel_keys:
                    raise PluginError(f"plugin {plugin!r} cannot claim config section {path!r}: it is a kernel key")
                taken = sorted(table_keys(cls) & table_keys(tables[path])) if path in tables else []
                if taken:
                    raise PluginError(
                        f"plugin {plugin!r} cannot declare {path}.{taken[0]} in the kernel's table {path!r}: "
                        f"the kernel owns that key"
                    )
                if path in sections:
                    raise PluginError(
                        f"config section {path!r} is claimed by two plugins: "
                        f"{self._describe(sections[path][1])} and {self._describe(plugin)}"
                    )
                sections[path] = (cls, plugin)

            return register

        self._run_registry("register_config_sections", bind)
        return {path: cls for path, (cls, _) in sections.items()}


def local_plugin_paths(source_file: Path | None, paths: Iterable[Path], base_dir: Path | None = None) -> list[Path]:
    """Project-local plugin files: ``monoagent_local.py`` beside the config file, then ``plugins.paths``.

    Relative ``plugins.paths`` entries are relative to the config file's directory.
    """
    base = base_dir or (source_file.parent if source_file else Path.cwd())
    found: list[Path] = []
    if source_file is not None and (source_file.parent / LOCAL_PLUGIN_FILE).is_file():
        found.append(source_file.parent / LOCAL_PLUGIN_FILE)
    for path in paths:
        path = Path(path).expanduser()
        found.append(path if path.is_absolute() else base / path)
    return found


_dist_cache: dict[str, tuple[str, str]] = {}


def _dist_info(ep: Any) -> tuple[str, str] | None:
    """(normalised name, version) of an entry point's distribution, each METADATA parsed once."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None
    key = str(getattr(dist, "_path", id(dist)))
    info = _dist_cache.get(key)
    if info is None:
        metadata = dist.metadata
        info = _dist_cache[key] = (metadata["Name"].lower().replace("_", "-"), metadata["Version"])
    return info


def _dist_name(ep: Any) -> str:
    info = _dist_info(ep)
    return info[0] if info else ""


def _object_name(plugin: Any) -> str:
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    if isinstance(plugin, type):
        return plugin.__name__
    return getattr(plugin, "name", None) or type(plugin).__name__


def _expand_plugin_paths(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            out.extend(sorted(p for p in path.glob("*.py") if not p.name.startswith("_")))
        elif path.exists():  # a FIFO or a device too: the import refuses it by name, the rest loads
            out.append(path)
        else:
            raise PluginError(f"plugin path {path} does not exist (from plugins.paths or --plugins-dir)")
    return out


PLUGIN_FILE_MAX_BYTES = 16 * 1024 * 1024


class _BoundedSourceLoader(importlib.machinery.SourceFileLoader):
    """Reads a project-local plugin file, and its bytecode cache, as a regular file of at most
    :data:`PLUGIN_FILE_MAX_BYTES`: a FIFO named ``x.py`` in a plugins directory would otherwise
    hang the import, and ``/dev/zero`` would be read without end."""

    def get_data(self, path: str) -> bytes:
        from monoagent.boundary.files import read_regular_file

        return read_regular_file(path, PLUGIN_FILE_MAX_BYTES, what="plugin file")


def _import_file(path: Path) -> types.ModuleType:
    path = path.resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    module_name = f"monoagent_local_plugins.{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path, loader=_BoundedSourceLoader(module_name, str(path)))
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import plugin file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def bundled_impl(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``hookimpl`` for bundled plugins: always ``trylast``, so anything a user registers wins."""
    marker = hookspecs.hookimpl(trylast=True, **options)
    return marker(function) if function is not None else marker
