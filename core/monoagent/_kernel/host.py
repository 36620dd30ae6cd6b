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
* ``plugins.localFailures`` (env ``MONO_AGENT_LOCAL_PLUGIN_FAILURES``): a project-local plugin file
  that fails to load is fatal by default (``"fatal"``: the user wrote it for this project, so
  running without it would be wrong in a way nobody notices); ``"warn"`` treats it like a
  third-party plugin, which is recorded as failed, warned about, and left out.
* ``MONO_AGENT_TRACE_HOOKS=1`` prints every hook call and its implementations to stderr, and
  for a firstresult hook the plugin whose result won.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import pluggy

from monoagent._kernel import hookspecs
from monoagent._kernel.components import KINDS, Component, ComponentKind
from monoagent._kernel.errors import ComponentError, LocalPluginError, MonoagentError, PluginError
from monoagent._kernel.hooks import Hooks, check_implementations
from monoagent._kernel.interfaces import Tool
from monoagent._kernel.log import logger
from monoagent._kernel.registrars import (
    CALL_FORMS,
    REGISTRARS,
    ComponentRegistrar,
    ConfigSection,
    ConfigSectionRegistrar,
    LoadingPluginRegistrar,
    Registrar,
    Registration,
    RegistrationError,
    ToolRegistrar,
)

ENTRY_POINT_GROUP = "monoagent"
SECTIONS_GROUP = "monoagent.config_sections"
BUNDLED_DISTRIBUTION = "monoagent"
LOCAL_PLUGIN_FILE = "monoagent_local.py"

Source = Literal["bundled", "entrypoint", "local", "programmatic"]
Status = Literal["active", "blocked", "failed"]
LocalFailures = Literal["fatal", "warn"]

T = TypeVar("T")


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _stderr(line: str, redact: Callable[[str, str], str] | None = None) -> None:
    """One line to stderr through :func:`monoagent._cli.terminal.terminal_text` (traces pass no redactor:
    redacting inside the hook-call tracer would trace itself)."""
    from monoagent._cli.terminal import terminal_text

    sys.stderr.write(terminal_text(line, redact) + "\n")


async def await_me_maybe(value: T | Awaitable[T]) -> T:
    """Await ``value`` if it is awaitable, else return it: for hooks that may return awaitables."""
    if inspect.isawaitable(value):
        return await value
    return value


@attrs.define
class PluginRecord:
    """What ``monoagent plugins`` shows for one plugin.

    ``registrars`` hold what the plugin registered in the registries when it loaded; the
    host's registries are built from the records of the active plugins.
    """

    name: str
    source: Source
    status: Status
    location: str
    version: str | None = None
    reason: str | None = None
    hooks: list[str] = attrs.Factory(list)
    plugin: object = attrs.field(default=None, repr=False)
    registrars: list[Registrar] = attrs.field(factory=list, repr=False)

    @property
    def registrations(self) -> list[Registration]:
        """Every component, tool and config section the plugin registered, with its description."""
        return [entry for registrar in self.registrars for entry in registrar.registrations()]



class PluginHost:
    """Owns one :class:`pluggy.PluginManager`, its typed :class:`~monoagent._kernel.hooks.Hooks` and
    everything known about its plugins."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []
        self.strict = _flag(self.env, "MONO_AGENT_STRICT_PLUGINS")
        self.tracing = _flag(self.env, "MONO_AGENT_TRACE_HOOKS")
        self.hooks = Hooks(self.pm, trace=_stderr if self.tracing else None)
        self.blocked: set[str] = set()
        self._components: dict[ComponentKind[Any], dict[str, Component[Any]]] | None = None
        self._reported_unknown: set[tuple[str, str]] = set()
        self._declared: dict[str, str] | None = None
        self._fatal_local: list[PluginRecord] = []
        self._loading: dict[str, Registrar] = {}
        for hook in REGISTRARS:  # historic: each plugin's implementation runs when it is registered
            self.hooks.historic(getattr(hookspecs, hook), register=LoadingPluginRegistrar(functools.partial(self._loading_registrar, hook), hook))

    def _loading_registrar(self, hook: str) -> Registrar | None:
        """The registrar of ``hook`` bound to the plugin being registered, if one is."""
        return self._loading.get(hook)

    def _redact_notice(self, text: str, kind: str) -> str:
        """The redaction chain registered so far, for the host's own notices on stderr.

        Plugins are still loading when these are printed, so a broken redactor must not take the
        load down: the notice is then printed with its controls stripped only, and logged.
        """
        try:
            value = self.hooks.first(hookspecs.redact, text=text, kind=kind)
        except Exception as exc:
            logger.opt(exception=exc).warning("the redaction chain failed on a plugin-loading notice; printed unredacted")
            return text
        return text if value is None else value

    def notice(self, line: str) -> None:
        """One ``monoagent: warning: ...`` line on stderr, redacted by the plugins loaded so far."""
        _stderr(f"monoagent: warning: {line}", self._redact_notice)

    # ------------------------------------------------------------------ loading

    def block(self, names: Iterable[str]) -> None:
        """Block plugins by name (pluggy's ``set_blocked``): they are never imported or registered.

        Blocking is decided before a plugin loads; a plugin already registered under one of the
        names stays (pluggy would unregister it behind its record's back).
        """
        for name in names:
            if not self.pm.has_plugin(name):
                self.blocked.add(name)
                self.pm.set_blocked(name)

    def _record(self, record: PluginRecord) -> PluginRecord:
        self.records.append(record)
        return record

    def _fail(self, record: PluginRecord, exc: BaseException, *, fatal_later: bool = False) -> None:
        """Record ``record`` as failed. A third-party plugin is warned about and left out (strict mode:
        :class:`PluginError` now); with ``fatal_later`` (a local plugin file under
        ``plugins.localFailures = "fatal"``) it waits for :meth:`check_local`, so that every local
        failure is recorded and ``monoagent plugins`` can list them before the command line ends."""
        record.status = "failed"
        record.reason = _failure_reason(exc, record.location if record.source == "local" else None)
        if fatal_later:
            self._fatal_local.append(record)
            logger.bind(plugin=record.name).opt(exception=exc).debug("local plugin failed to load")
            if self.strict:
                self.check_local()
            return
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

    def check_local(self) -> None:
        """Raise :class:`LocalPluginError` if a local plugin file failed to load under
        ``plugins.localFailures = "fatal"`` (the message names every such file and its error)."""
        if not self._fatal_local:
            return
        first = self._fatal_local[0]
        remedy = (
            'fix it, or set plugins.localFailures = "warn" (env MONO_AGENT_LOCAL_PLUGIN_FAILURES=warn) '
            "to go on without it; `monoagent plugins` lists every plugin and its status"
        )
        if len(self._fatal_local) == 1:
            message = f"local plugin {first.name!r} ({first.location}) failed to load: {first.reason}; {remedy}"
        else:
            listed = "".join(f"\n  - {r.name!r} ({r.location}): {r.reason}" for r in self._fatal_local)
            message = f"{len(self._fatal_local)} local plugin files failed to load:{listed}\n{remedy}"
        raise LocalPluginError(message, plugin=first.name, path=first.location)

    def _register(self, record: PluginRecord, plugin: object) -> None:
        """Register ``plugin``, check its hooks and collect its registrations; undone if either fails."""
        self._check_name_free(record.name)
        loading = {hook: registrar_class(record.name) for hook, registrar_class in REGISTRARS.items()}
        outer, self._loading = self._loading, loading
        try:
            try:
                self._register_warning_where_implemented(plugin, record.name)
            except pluggy.PluginValidationError as exc:  # a wrapper on a historic hook, an argument the hook has not
                raise PluginError(f"plugin {record.name!r} cannot be registered: {' '.join(str(exc).split())}") from exc
            except MonoagentError:
                raise
            except Exception as exc:
                raise self._registration_failed(record.name, plugin, exc) from exc
            check_implementations(self.pm, plugin, record.name)
            self._check_unknown_hooks()
        except BaseException:
            if self.pm.is_registered(plugin):  # pluggy may leave a plugin half-registered
                self.pm.unregister(plugin)
                self.hooks.forget_order()
            raise
        finally:
            self._loading = outer
        implemented = {caller.name for caller in self.pm.get_hookcallers(plugin) or []}
        registrars = [registrar for hook, registrar in loading.items() if hook in implemented]
        record.plugin = plugin
        record.status = "active"
        record.registrars = registrars
        record.hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])
        if record.version is None:
            record.version = getattr(plugin, "__version__", None)
        self._components = None

    def _register_warning_where_implemented(self, plugin: object, name: str) -> None:
        """``pm.register``, with each deprecation warning pluggy gives pointing at the implementing function.

        pluggy points a ``warn_on_impl`` warning at the function it registered, which for an
        implementation marked with :data:`~monoagent._kernel.hookspecs.hookimpl` is the thin wrapper
        that notes its answers (:mod:`monoagent._kernel.marker`); the warning is given again at the
        implementation's own file and line, under the filters in force (an error filter fails the plugin).
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self.pm.register(plugin, name=name)
            finally:
                self.hooks.forget_order()
        for warning in caught:
            filename, lineno = warning.filename, warning.lineno
            for caller in self.pm.get_hookcallers(plugin) or []:
                if caller.spec is None:
                    continue
                opts = caller.spec.opts
                deprecations = [opts.get("warn_on_impl"), *(opts.get("warn_on_impl_args") or {}).values()]
                if any(warning.message is deprecation for deprecation in deprecations):
                    for impl in caller.get_hookimpls():
                        code = getattr(inspect.unwrap(impl.function), "__code__", None)
                        if impl.plugin is plugin and code is not None:
                            filename, lineno = code.co_filename, code.co_firstlineno
            warnings.warn_explicit(warning.message, warning.category, filename, lineno)

    def _check_name_free(self, name: str) -> None:
        if self.pm.has_plugin(name):
            other = next(r for r in self.records if r.name == name and r.status == "active")
            raise PluginError(
                f"the name {name!r} is already taken by the {other.source} plugin from {other.location}; "
                f"rename one, or block the other with plugins.block"
            )

    def _registration_failed(self, name: str, plugin: object, exc: Exception) -> RegistrationError:
        """The :class:`RegistrationError` for ``exc``, raised while ``plugin``'s registry hooks ran at its registration.

        Names the registry hook whose implementation raised it (found in the traceback) and, for a
        ``TypeError``, the documented call form of its ``register``.
        """
        codes: dict[Any, str] = {}
        for attribute in dir(plugin):  # pluggy adds an implementation after its history ran: not listed yet
            opts = self.pm.parse_hookimpl_opts(plugin, attribute)
            implemented = (opts["specname"] if opts is not None else None) or attribute
            if opts is not None and implemented in REGISTRARS:
                code = getattr(inspect.unwrap(getattr(plugin, attribute)), "__code__", None)
                if code is not None:
                    codes[code] = implemented
        hook: str | None = None
        tb = exc.__traceback__
        while tb is not None:
            hook = codes.get(tb.tb_frame.f_code, hook)
            tb = tb.tb_next
        if hook is None:
            return RegistrationError(f"plugin {name!r} failed while it was registered: {type(exc).__name__}: {exc}")
        hint = f" (the call is {CALL_FORMS[hook]})" if isinstance(exc, TypeError) else ""
        return RegistrationError(f"plugin {name!r} failed in {hook}: {type(exc).__name__}: {exc}{hint}")

    def _check_unknown_hooks(self) -> None:
        """pluggy's ``check_pending`` decides; an unknown hook is then a warning with a did-you-mean.

        An implementation marked ``optionalhook=True`` passes ``check_pending`` and is never
        reported: it is meant for a hook that may not exist in this version. Each unknown
        implementation is reported once; strict mode makes it an error.
        """
        try:
            self.pm.check_pending()
            return
        except pluggy.PluginValidationError:
            pass
        callers = [(name, caller) for name, caller in vars(self.pm.hook).items() if isinstance(caller, pluggy.HookCaller)]
        spec_names = [name for name, caller in callers if caller.spec is not None]
        for name, caller in callers:
            if caller.spec is not None or name.startswith("_"):
                continue
            for impl in caller.get_hookimpls():
                if impl.optionalhook or (impl.plugin_name, name) in self._reported_unknown:
                    continue
                close = difflib.get_close_matches(name, spec_names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                message = f"plugin {impl.plugin_name!r} implements {name!r}, which is not a monoagent hook{hint}"
                if self.strict:
                    raise PluginError(message)
                self._reported_unknown.add((impl.plugin_name, name))
                self.notice(message)

    def load_entry_points(self, block: Iterable[str] = ()) -> None:
        """Register bundled plugins, then third-party entry points sorted by name."""
        from importlib.metadata import entry_points

        self.block(block)
        eps = list(entry_points(group=ENTRY_POINT_GROUP))
        bundled = sorted((ep for ep in eps if _dist_name(ep) == BUNDLED_DISTRIBUTION), key=lambda ep: ep.name)
        third = sorted((ep for ep in eps if _dist_name(ep) != BUNDLED_DISTRIBUTION), key=lambda ep: ep.name)
        only = self.env.get("MONO_AGENT_LOAD_PLUGINS")
        allowed = None if only is None else {n.strip() for n in only.split(",") if n.strip()}
        no_autoload = _flag(self.env, "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD")
        if allowed:
            unknown = sorted(allowed - {ep.name for ep in third})
            if unknown:
                self.notice(
                    f"MONO_AGENT_LOAD_PLUGINS names {', '.join(unknown)}, which no installed "
                    f"distribution provides (installed: {', '.join(ep.name for ep in third) or 'none'})"
                )
        for ep in bundled + third:
            source: Source = "bundled" if ep in bundled else "entrypoint"
            info = _dist_info(ep)
            location = f"{info[0]} {info[1]}" if info else ep.value
            record = self._record(PluginRecord(ep.name, source, "blocked", location, info[1] if info else None))
            if self.pm.is_blocked(ep.name):
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

    def load_local(self, paths: Iterable[Path], block: Iterable[str] = (), failures: LocalFailures = "fatal") -> None:
        """Register project-local plugin files (a directory contributes its ``*.py`` files, sorted).

        A path that does not exist is recorded as a failed plugin, like a file that fails to
        import (a syntax error, an import error, an exception at import, a registration refused),
        and loading goes on, so every failure is recorded. With ``failures="fatal"``
        (``plugins.localFailures``, the default) the caller then calls :meth:`check_local`, which
        raises :class:`LocalPluginError` naming the files; ``"warn"`` only warns, as for
        installed plugins.
        """
        self.block(block)
        fatal_later = failures == "fatal"
        for given in map(Path, paths):
            if not given.exists():
                missing = self._record(PluginRecord(given.stem or str(given), "local", "blocked", str(given)))
                self._fail(
                    missing, PluginError(f"plugin path {given} does not exist (from plugins.paths or --plugins-dir)"),
                    fatal_later=fatal_later,
                )
                continue
            for path in _expand_plugin_paths([given]):
                name = path.stem
                record = self._record(PluginRecord(name, "local", "blocked", str(path)))
                if self.pm.is_blocked(name):
                    record.reason = "blocked by plugins.block"
                    continue
                try:
                    self._register(record, _import_file(path))
                except Exception as exc:
                    self._fail(record, exc, fatal_later=fatal_later)

    def register_programmatic(self, plugin: object, name: str | None = None, block: Iterable[str] = ()) -> PluginRecord:
        """Register a plugin object passed in Python (a module, class or instance).

        A plugin whose registrations are refused (or that implements a deprecated hook while
        :class:`~monoagent._kernel.errors.HookDeprecationWarning` is made an error) is recorded as
        failed, like a plugin file that fails to import (strict mode: :class:`PluginError`); a
        name that is already taken is always a :class:`PluginError`.
        """
        self.block(block)
        name = name or _object_name(plugin)
        location = getattr(plugin, "__file__", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"
        record = self._record(PluginRecord(name, "programmatic", "blocked", location))
        if self.pm.is_blocked(name):
            record.reason = "blocked by plugins.block"
            return record
        self._check_name_free(name)
        try:
            self._register(record, plugin)
        except (PluginError, Warning) as exc:  # a refused registration, a deprecation made an error
            self._fail(record, exc)
        return record

    def unregister(self, plugin: object) -> None:
        """Remove a registered plugin, its record and what it registered."""
        self.pm.unregister(plugin)
        self.hooks.forget_order()
        self.records = [r for r in self.records if r.plugin is not plugin]
        self._components = None

    # ------------------------------------------------------------------ registries

    def _active(self) -> list[PluginRecord]:
        return [r for r in self.records if r.status == "active"]

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

    def registered(self, kind: ComponentKind[T]) -> dict[str, Component[T]]:
        """Every component of ``kind`` the active plugins registered, by name; a name registered
        twice (in any kind) is a :class:`ComponentError` naming both plugins."""
        if self._components is None:
            registries: dict[ComponentKind[Any], dict[str, Component[Any]]] = {kind: {} for kind in KINDS}
            for record in self._active():
                for registrar in record.registrars:
                    if isinstance(registrar, ComponentRegistrar):
                        found = registries[registrar.kind]
                        for component in registrar.components:
                            if component.name in found:
                                first = found[component.name].plugin
                                raise ComponentError(self._duplicate(component.kind.name, component.name, first, component.plugin))
                            found[component.name] = component
            self._components = registries
        return self._components[kind]

    def component(self, kind: ComponentKind[T], name: str) -> Component[T]:
        """The component ``name`` of ``kind``, or a :class:`ComponentError` naming the plugins at fault."""
        registry = self.registered(kind)
        if name in registry:
            return registry[name]
        inactive = [r for r in self.records if r.status != "active"]
        exact = [r for r in inactive if r.name == name]
        if exact:
            record = exact[0]
            why = f"failed to load ({record.reason})" if record.status == "failed" else f"blocked ({record.reason})"
            raise ComponentError(
                f"{kind.name} {name!r} is selected in the configuration, but its plugin {record.name!r} "
                f"({record.location}) is {why}"
            )
        available = ", ".join(sorted(registry)) or "none"
        message = f"{kind.name} {name!r} is selected in the configuration, but no active plugin registers it (available: {available})"
        if inactive:
            listed = "; ".join(
                f"{r.name!r} {'failed: ' + (r.reason or '') if r.status == 'failed' else 'blocked: ' + (r.reason or '')}"
                for r in inactive
            )
            message += f". Plugins not active, one of which may provide it: {listed}"
        raise ComponentError(message)

    def tools(self) -> dict[str, Tool]:
        """Registered tools by name; one name from two plugins is a :class:`ComponentError` naming both."""
        found: dict[str, Tool] = {}
        for record in self._active():
            for registrar in record.registrars:
                if isinstance(registrar, ToolRegistrar):
                    for tool in registrar.tools:
                        if tool.spec.name in found:
                            raise ComponentError(self._duplicate("tool", tool.spec.name, found[tool.spec.name].plugin, tool.plugin))
                        found[tool.spec.name] = tool
        return found

    def config_sections(self) -> dict[str, type]:
        """Plugin-declared configuration sections, path -> attrs class; one path from two plugins is a
        :class:`PluginError` naming both."""
        sections: dict[str, ConfigSection] = {}
        for record in self._active():
            for registrar in record.registrars:
                if isinstance(registrar, ConfigSectionRegistrar):
                    for section in registrar.sections:
                        if section.path in sections:
                            raise PluginError(
                                f"config section {section.path!r} is claimed by two plugins: "
                                f"{self._describe(sections[section.path].plugin)} and {self._describe(section.plugin)}"
                            )
                        sections[section.path] = section
        return {path: section.cls for path, section in sections.items()}

    # ------------------------------------------------------------------ sections of inactive plugins

    def inactive_section_owner(self, path: str) -> str | None:
        """The plugin a configuration section belongs to, described, if that plugin is not active.

        A distribution declares its plugins' sections in the entry-point group
        ``monoagent.config_sections`` (section path = the plugin's module, as in group
        ``monoagent``), which names the owner of a blocked plugin's section without importing
        it; the bundled plugins declare theirs there. Without a declaration, a plugin that is
        blocked, failed to load or is blocked but not installed owns the top-level section or
        kernel subsection named like it (``slack`` or ``providers.slack`` for plugin ``slack``;
        case, ``-`` and ``_`` ignored). None when the section is nobody's, or its plugin is
        active (then the section is an unknown key).
        """
        for section, plugin in self._declared_sections().items():
            if path == section or path.startswith(section + "."):
                return self._inactive(plugin)
        from monoagent._kernel.registrars import kernel_tables

        parent, _, leaf = path.rpartition(".")
        if parent and parent not in kernel_tables():
            return None  # a key inside a plugin's own section is that section's business
        spellings = {_loose(path), _loose(leaf)}
        names = {r.name for r in self.records if r.status != "active"} | self.blocked
        for name in sorted(names):
            if _loose(name) in spellings:
                return self._inactive(name)
        return None

    def _inactive(self, name: str) -> str | None:
        records = [r for r in self.records if r.name == name]
        if any(r.status == "active" for r in records):
            return None
        if not records:
            return f"plugin {name!r}, which is blocked by plugins.block and not installed" if name in self.blocked else None
        record = records[-1]
        return f"plugin {name!r}, which is {record.status} ({record.reason})"

    def _declared_sections(self) -> dict[str, str]:
        """Section path -> plugin name, from the ``monoagent.config_sections`` entry points (read once)."""
        if self._declared is None:
            from importlib.metadata import entry_points

            plugins = {(_dist_name(ep), ep.value): ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
            self._declared = {}
            for ep in entry_points(group=SECTIONS_GROUP):
                owner = plugins.get((_dist_name(ep), ep.value))
                if owner is not None:
                    self._declared[ep.name] = owner
        return self._declared


def _failure_reason(exc: BaseException, path: str | None) -> str:
    """One line: the error's type and message, and for an error raised while a plugin file ran, the
    line of that file it came from (a SyntaxError's message already names its line)."""
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever the message
    if path is None or isinstance(exc, SyntaxError):
        return reason
    line = None
    tb = exc.__traceback__
    resolved = str(Path(path).resolve())
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == resolved:
            line = tb.tb_lineno
        tb = tb.tb_next
    return reason if line is None else f"{reason} (line {line})"


def _loose(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


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


def _object_name(plugin: object) -> str:
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
        from monoagent._boundary.files import read_regular_file

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

