"""The Agent: configuration, one plugin manager, the selected components and the harness.

Python and the CLI drive the same object::

    agent = Agent.from_config("monoagent.toml")
    result = await agent.respond(TurnRequest("hello", conversation_id="demo"))
    result = agent.run_sync("hello again", conversation_id="demo")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from monoagent._kernel import hookspecs
from monoagent._kernel.components import (
    COMPACTION_POLICIES,
    EMBEDDERS,
    HISTORY_STORES,
    MEMORY_TIERS,
    PROVIDERS,
    SESSION_BACKENDS,
    TOOL_HISTORY_STORES,
    AgentComponents,
)
from monoagent._kernel.config import Config
from monoagent._kernel.config_loading import RawConfig, add_plugin_sections, build_config, load_raw, plugins_settings
from monoagent._kernel.errors import ComponentError, ConfigError
from monoagent._kernel.hooks import Hooks
from monoagent._kernel.host import PluginHost, PluginRecord, await_me_maybe, local_plugin_paths
from monoagent._kernel.interfaces import (
    ClosableMemoryTier,
    CompactionPolicy,
    Embedder,
    MemoryTier,
    ProviderRuntime,
    Tool,
)
from monoagent._kernel.log import failure_text, logger
from monoagent._kernel.model import AssembledPrompt, RunEvent
from monoagent._kernel.stores import (
    HistoryResetReport,
    HistoryStore,
    ManagedHistoryStore,
    ToolHistoryClearReport,
    ToolHistoryStore,
)
from monoagent._kernel.subagents import SubagentSpec, checked_subagents
from monoagent._kernel.turn_request import TurnRequest, TurnResult
from monoagent._pipeline.harness import EventCallback, Harness
from monoagent._pipeline.run_handle import DEFAULT_SETTLE_WINDOW_MS, RunHandle
from monoagent._pipeline.tool_loop import ToolOffer
from monoagent._pipeline.turn_run import TurnRun

DEFAULT_MODEL = "offline:echo"

_REQUEST_TEXT_FIELDS = ("text", "conversation_id", "channel")
_REQUEST_OPTIONAL_TEXT_FIELDS = ("model", "console", "context")
_REQUEST_FLAGS = ("isolated", "proactive", "notify")


def _type_name(value: object) -> str:
    """``a str``, ``an int``: the type of ``value`` with its article, for the messages below."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def checked_request(request: object, where: str) -> TurnRequest:
    """``request`` when it is a :class:`TurnRequest` whose plain fields have their types, else a
    ``TypeError`` naming the entry point, what was passed and what is allowed.

    Every public entry point of :class:`Agent` that takes a request checks it here, before the
    harness sees it, so a wrong argument is refused up front instead of failing deep in a turn
    (an ``AttributeError`` in the continuity settlement). ``sender``, ``preceding_messages``,
    ``surface`` and the other structured fields are checked by the plugins that read them.
    """
    if not isinstance(request, TurnRequest):
        hint = "; for a message's text use run_sync(text) or TurnRequest(text, ...)" if isinstance(request, str) else ""
        raise TypeError(f"{where} takes a TurnRequest, not {_type_name(request)}{hint}")
    for name in _REQUEST_TEXT_FIELDS:
        value = getattr(request, name)
        if not isinstance(value, str):
            raise TypeError(f"{where}: TurnRequest.{name} is {_type_name(value)}; allowed: a str")
    for name in _REQUEST_OPTIONAL_TEXT_FIELDS:
        value = getattr(request, name)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where}: TurnRequest.{name} is {_type_name(value)}; allowed: a str or None")
    for name in _REQUEST_FLAGS:
        value = getattr(request, name)
        if not isinstance(value, bool):
            raise TypeError(f"{where}: TurnRequest.{name} is {_type_name(value)}; allowed: True or False")
    if not isinstance(request.metadata, dict):
        raise TypeError(f"{where}: TurnRequest.metadata is {_type_name(request.metadata)}; allowed: a dict")
    return request


def _checked_arguments(config: object, plugins: object, config_path: object, plugins_dirs: object, env: object) -> None:
    """``Agent(...)``'s arguments by type: a ``TypeError`` naming the one that is wrong and what is allowed."""
    where = "Agent()"
    if config is not None and not isinstance(config, (Config, Mapping)):
        raise TypeError(f"{where}: config is {_type_name(config)}; allowed: a Config, a mapping of settings or None "
                        "(for a config file, use Agent.from_config(path) or config_path=)")
    for name, value in (("plugins", plugins), ("plugins_dirs", plugins_dirs)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise TypeError(f"{where}: {name} is {_type_name(value)}; allowed: a list of "
                            f"{'plugin objects (or (name, plugin) pairs)' if name == 'plugins' else 'folder paths'}")
    if config_path is not None and not isinstance(config_path, (str, os.PathLike)):
        raise TypeError(f"{where}: config_path is {_type_name(config_path)}; allowed: a path (str or os.PathLike) or None")
    if env is not None and not isinstance(env, Mapping):
        raise TypeError(f"{where}: env is {_type_name(env)}; allowed: a mapping of str to str, or None")


def checked_on_event(on_event: object, where: str) -> EventCallback | None:
    """``on_event`` when it is None or callable, else a ``TypeError`` saying so."""
    if on_event is not None and not callable(on_event):
        raise TypeError(f"{where}: on_event is {_type_name(on_event)}; allowed: a callable taking a RunEvent, or None")
    return on_event


def checked_text(value: object, where: str, what: str) -> str:
    """``value`` when it is a str, else a ``TypeError`` naming ``what`` and its type."""
    if not isinstance(value, str):
        raise TypeError(f"{where}: {what} is {_type_name(value)}; allowed: a str")
    return value


class Agent:
    """An agent: config + plugins + components + harness. One plugin manager per Agent.

    ``agent.hooks`` (:class:`~monoagent._kernel.hooks.Hooks`) is how the kernel calls every hook.

    Args:
        config: a :class:`~monoagent._kernel.config.Config`, a mapping shaped like ``monoagent.toml``,
            or None to discover the config file (``config_path``, ``MONO_AGENT_CONFIG``,
            ``./monoagent.toml``, the user config dir).
        plugins: plugin objects (modules, classes, instances) or ``(name, plugin)`` pairs,
            registered last, so they win every firstresult hook.
        config_path: an explicit config file (like ``--config``).
        plugins_dirs: directories of ``*.py`` plugin files (like ``--plugins-dir``).
        env: the environment to read ``MONO_AGENT_*`` from (default ``os.environ``).
        autoload: False skips third-party entry points (bundled plugins still load).
        host: a :class:`~monoagent._kernel.host.PluginHost` whose entry-point and local plugins are
            already loaded for this configuration (the CLI loads them early so plugins can add
            commands); programmatic ``plugins`` are still registered on it.
        terminal_recovery_settlement_ms: the settle window, a positive whole number of
            milliseconds (default 1,000): how long a cancelled run's continuity account waits for
            its provider call to stop before it is published anyway (the caller is released at
            once regardless). A host option, not a configuration key; tests may lengthen it.
        subagents: named :class:`~monoagent._kernel.subagents.SubagentSpec` records the ``task``
            tool may delegate to, beside those of ``[agents.named.<name>]`` in config (a name in
            both is an error); see docs/subagents.md. Read back as :attr:`subagents`.

    Raises:
        LocalPluginError: a project-local plugin file (``monoagent_local.py``, ``plugins.paths``,
            ``plugins_dirs``) failed to load and ``plugins.localFailures`` is ``"fatal"`` (the default).
        ConfigError: the configuration is invalid (a bad ``subagents`` mapping included).
    """

    def __init__(
        self,
        config: Config | Mapping[str, Any] | None = None,
        *,
        plugins: Iterable[object] = (),
        config_path: str | os.PathLike[str] | None = None,
        plugins_dirs: Iterable[str | os.PathLike[str]] = (),
        env: Mapping[str, str] | None = None,
        autoload: bool = True,
        host: PluginHost | None = None,
        terminal_recovery_settlement_ms: int = DEFAULT_SETTLE_WINDOW_MS,
        subagents: Mapping[str, SubagentSpec] | None = None,
    ) -> None:
        _checked_arguments(config, plugins, config_path, plugins_dirs, env)
        self.subagents: Mapping[str, SubagentSpec] = checked_subagents(subagents)
        self.subagent: SubagentSpec | None = None
        """The subagent this Agent runs as when :meth:`derive` made it for one; None for an Agent a user built."""
        env = dict(os.environ if env is None else env)
        if not autoload:
            env["MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        self.env: dict[str, str] = env
        if isinstance(config, Config):
            raw: RawConfig | None = None
            block = list(config.plugins.block)
            local_paths = local_plugin_paths(config.source_file, config.plugins.paths, config.base_dir)
            local_failures = config.plugins.local_failures
        else:
            raw = load_raw(config_path, env, data=config)
            settings = plugins_settings(raw)
            block = list(settings.block)
            local_paths = local_plugin_paths(raw.source_file, settings.paths)
            local_failures = settings.local_failures
        if host is None:
            host = PluginHost(env)
            host.load_entry_points(block)
            host.load_local(local_paths + [Path(p) for p in plugins_dirs], block, local_failures)
            host.check_local()
        self.host: PluginHost = host
        self.hooks: Hooks = host.hooks
        for plugin in plugins:
            name, obj = plugin if isinstance(plugin, tuple) else (None, plugin)
            self.host.register_programmatic(obj, name, block)
        sections = self.host.config_sections()
        if raw is not None:
            self.config: Config = build_config(raw, sections, inactive_owner=self.host.inactive_section_owner, strict=self.host.strict)
            for warning in self.config.warnings:
                self.host.notice(warning)
        else:
            assert isinstance(config, Config)
            self.config = config
            add_plugin_sections(self.config, sections, env)
        self.components: AgentComponents = AgentComponents(self, host)
        self.harness: Harness = Harness(self, terminal_recovery_settlement_ms=terminal_recovery_settlement_ms)
        self._providers: dict[str, ProviderRuntime] = {}
        self._store: HistoryStore | None = None
        self._tools: dict[str, Tool] | None = None
        self.hooks.historic(hookspecs.configure, agent=self)

    def derive(self, config: Config, *, subagent: SubagentSpec | None = None) -> Agent:
        """An Agent that runs turns on ``config`` with this Agent's plugins, providers and stores.

        The composition a subagent runs as: the same plugin host (no second plugin load, and no
        second ``configure``), the same provider runtimes, history store, tool-history store,
        memory tiers and compaction policies, but its own configuration (an overlay of this one)
        and its own harness (its own lanes and limits, so a child turn never waits for the
        execution slot its parent holds). History stays apart by conversation id: a child's turns
        use conversation ids of their own. Closing the derived Agent is the parent's job.
        ``subagent`` is the spec the derived Agent runs as (:attr:`subagent`; its turns' ``turn.subagent``).
        """
        if not isinstance(config, Config):
            raise TypeError(f"Agent.derive: config is {_type_name(config)}; allowed: a Config")
        if subagent is not None and not isinstance(subagent, SubagentSpec):
            raise TypeError(f"Agent.derive: subagent is {_type_name(subagent)}; allowed: a SubagentSpec or None")
        self.history_store  # noqa: B018 - created now, so that both Agents share the one store
        self.tool_history_store()
        child = copy.copy(self)
        child.config = config
        child.subagent = subagent
        child.harness = Harness(child, terminal_recovery_settlement_ms=self.harness.settle_window_ms)
        child.harness.clock = self.harness.clock  # the child's turns start on the parent's clock
        return child

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> Agent:
        """An Agent from a config file (or the discovered one when ``path`` is None)."""
        return cls(None, config_path=path, **kwargs)

    # ------------------------------------------------------------------ plugins and components

    def register(self, plugin: object, name: str | None = None) -> PluginRecord:
        """Register one more plugin on a running Agent (it still receives ``configure``).

        Its config section, if it declares one, is built now: its defaults overlaid by its
        environment variables, validated as at start-up (a table for it in the configuration was
        already refused as unknown when the Agent was built).

        Its registrations are checked now: a refused one leaves the plugin failed (the returned
        record says why), or raises :class:`~monoagent._kernel.errors.PluginError` in strict mode,
        as at start-up.
        """
        if name is not None:
            checked_text(name, "Agent.register", "name")
        record = self.host.register_programmatic(plugin, name, self.config.plugins.block)
        add_plugin_sections(self.config, self.host.config_sections(), self.env)
        self._tools = None
        return record

    @property
    def model(self) -> str:
        """The configured ``provider:model``, or ``offline:echo`` when none is configured."""
        return self.config.runtime.model or DEFAULT_MODEL

    @property
    def model_is_default(self) -> bool:
        return self.config.runtime.model is None

    def provider(self, model: str) -> ProviderRuntime:
        """The runtime for ``provider:model`` (created once per model string).

        A model that is not ``<provider>:<model>``, and one whose provider prefix no active plugin
        registers, are the same :class:`ConfigError`: what was given and the registered prefixes.
        """
        runtime = self._providers.get(model)
        if runtime is None:
            checked_text(model, "Agent.provider", "model")
            prefix, sep, name = model.partition(":")
            if not sep or not name or prefix not in self.components.registered(PROVIDERS):
                raise ConfigError(self._unknown_model(model, prefix if sep and name else None))
            runtime = self._providers[model] = self.components.get(PROVIDERS, prefix, model=name)
        return runtime

    def _unknown_model(self, model: str, prefix: str | None) -> str:
        prefixes = ", ".join(sorted(self.components.registered(PROVIDERS))) or "none"
        shape = f"a model is '<provider>:<model>' with one of the registered provider prefixes: {prefixes}"
        if prefix is None:
            return f"model {model!r} has no provider prefix; {shape} (for example 'offline:echo')"
        inactive = next((r for r in self.host.records if r.name == prefix and r.status != "active"), None)
        why = f" (plugin {prefix!r} is {inactive.status}: {inactive.reason})" if inactive else ""
        return f"model {model!r} names the provider prefix {prefix!r}, which no active plugin registers{why}; {shape}"

    @property
    def history_store(self) -> HistoryStore:
        """The history store ``history.store`` selects, created once."""
        if self._store is None:
            self._store = self.components.get(HISTORY_STORES, self.config.history.store)
        return self._store

    def tool_history_store(self) -> ToolHistoryStore | None:
        """The tool-history store ``toolHistory.store`` selects, created once; None when tool history is off.

        This Agent is the store's one owner: it creates it here, on first use, and closes it in
        :meth:`aclose`. The harness, the ``history`` commands and the tools all take this one and
        never construct or close another (an Agent from :meth:`derive` shares it). Off means ``toolHistory.store = "none"`` or ``toolHistory.enabled = false``. A selected
        store whose plugin is blocked, failed or missing is a :class:`ComponentError` naming it;
        a factory that raised is called again next time.
        """
        settings = self.config.tool_history
        if not settings.enabled or settings.store == TOOL_HISTORY_STORES.off:
            return None
        try:
            self.components.component(TOOL_HISTORY_STORES, settings.store)
        except ComponentError as exc:
            raise ComponentError(f'{exc}; or set toolHistory.store = "none" to record no tool calls') from None
        return self.components.get(TOOL_HISTORY_STORES, settings.store)

    def memory_tiers(self) -> dict[str, MemoryTier]:
        """The tiers named in ``memory.tiers``, created once each, in configured order."""
        return {name: self.memory_tier(name) for name in self.config.memory.tiers}

    def memory_tier(self, name: str) -> MemoryTier:
        """One configured tier, created once; a factory that raised is called again next time.

        Recall and capture build each tier through this, so a tier that cannot be built is
        reported by name and never stops the others.
        """
        checked_text(name, "Agent.memory_tier", "name")
        if name not in self.config.memory.tiers:
            raise ComponentError(f"memory tier {name!r} is not configured; memory.tiers = {list(self.config.memory.tiers)!r}")
        return self.components.get(MEMORY_TIERS, name, options={})

    def check_selections(self, model: str | None = None) -> None:
        """Raise the error of the first component the configuration selects by name that cannot be had.

        ``model`` (default :attr:`model`) and every fallback (a provider prefix), ``history.store``,
        ``toolHistory.store``, ``runtime.compaction.policy`` (when compaction is on),
        ``runtime.session.backend`` and ``memory.tiers`` with the embedders the tiers select: what
        ``monoagent config validate`` checks, and what ``prompt``, ``chat`` and ``serve`` check
        before their first turn. A turn meets the same errors where it uses each (exit 2 on the
        command line): a :class:`ComponentError` or a :class:`ConfigError`.
        """
        self.provider(model or self.model)
        for model in self.config.runtime.fallbacks:
            self.provider(model)
        self.history_store  # noqa: B018  (the property builds the store, or raises)
        self.tool_history_store()
        if self.config.runtime.compaction.enabled:
            self.compaction_policy(self.config.runtime.compaction.policy)
        self.components.component(SESSION_BACKENDS, self.config.runtime.session.backend)
        self._check_turn_selections()

    def _check_turn_selections(self) -> None:
        """Raise the error of a selection a turn would otherwise meet only in passing, or never.

        A subagent's ``model`` (``[agents.named.<name>]`` or ``Agent(subagents=...)``) that no
        provider registers, a name in ``memory.tiers`` or an embedder a tier selects that no active
        plugin registers: a selection error fails the turn (exit 2 on the command line), as an
        unknown history store or provider does, with the message ``config validate`` prints.

        Each tier is built here (once, as recall and capture build it); a tier whose factory fails
        for another reason is left to those steps, which report it by name and go on without it.
        """
        named = getattr(self.config.sections.get("agents"), "named", None)
        subagents = [(f"subagent {name!r} (Agent(subagents=...))", spec.model) for name, spec in self.subagents.items()]
        if isinstance(named, Mapping):
            subagents += [(f"agents.named.{name}.model", getattr(spec, "model", None)) for name, spec in named.items()]
        registered = self.components.registered(PROVIDERS)
        for where, model in subagents:  # the prefix only: a subagent's runtime (its API key) is built when it is used
            prefix, sep, name = (model or "").partition(":")
            if model and (not sep or not name or prefix not in registered):
                raise ConfigError(f"{where}: {self._unknown_model(model, prefix if sep and name else None)}")
        for name in self.config.memory.tiers:
            try:
                self.memory_tier(name)
            except ComponentError:
                raise
            except Exception:  # reported by name where the tier is used (recall, capture)
                continue

    def embedder(self, name: str, options: Mapping[str, Any] | None = None) -> Embedder:
        """A registered embedder, by name (memory tiers ask for theirs), built for ``options``."""
        checked_text(name, "Agent.embedder", "name")
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"Agent.embedder: options is {_type_name(options)}; allowed: a mapping or None")
        return self.components.new(EMBEDDERS, name, options=dict(options or {}))

    def compaction_policy(self, name: str) -> CompactionPolicy:
        """The compaction policy ``name``, created once."""
        checked_text(name, "Agent.compaction_policy", "name")
        return self.components.get(COMPACTION_POLICIES, name)

    @property
    def tools(self) -> dict[str, Tool]:
        if self._tools is None:
            self._tools = self.host.tools()
        return self._tools

    def count_tokens(self, text: str, model: str) -> int:
        checked_text(text, "Agent.count_tokens", "text")
        checked_text(model, "Agent.count_tokens", "model")
        value = self.hooks.first(hookspecs.count_tokens, text=text, model=model)
        if value is None:
            raise ComponentError("no plugin implements count_tokens (is the plugin providing it blocked? `monoagent plugins` lists them)")
        return value

    def redact(self, text: str, kind: str) -> str:
        """Run the redaction chain (the ``redact`` hook); the text unchanged if nothing answers."""
        checked_text(text, "Agent.redact", "text")
        checked_text(kind, "Agent.redact", "kind")
        value = self.hooks.first(hookspecs.redact, text=text, kind=kind)
        return text if value is None else value

    def publish_event(self, event: RunEvent) -> None:
        """Show ``event`` to every ``on_run_event`` observer, synchronously.

        For events outside a turn's own stream (a channel's delivery outcome, a scheduler's missed
        tick); a turn's events reach the observers through :meth:`Turn.emit`. An observer that
        raises is logged with its plugin, and the others still see the event.
        """
        if not isinstance(event, RunEvent):
            raise TypeError(f"Agent.publish_event takes a RunEvent, not {_type_name(event)}")
        for answer in self.hooks.each(hookspecs.on_run_event, event=event, agent=self):
            if answer.error is not None:
                logger.bind(plugin=answer.plugin).opt(exception=answer.error).warning(
                    "run-event observer in plugin {} failed on {}: {}", answer.plugin, event.type, failure_text(answer.error)
                )

    @staticmethod
    def unstructure(value: Any) -> Any:
        from monoagent._kernel.serial import unstructure

        return unstructure(value)

    # ------------------------------------------------------------------ turns

    async def respond(self, request: TurnRequest, *, on_event: EventCallback | None = None) -> TurnResult:
        """Run one turn; ``on_event`` receives every RunEvent (``text_delta`` for streaming).

        Cancelling the awaiting task cancels the turn and releases the caller at once (see :meth:`submit`).
        A ``request`` that is not a :class:`TurnRequest` (or whose text fields are not strings) is a
        ``TypeError`` before anything runs.
        """
        request = checked_request(request, "Agent.respond")
        return await self.harness.run(request, on_event=checked_on_event(on_event, "Agent.respond"))

    def submit(self, request: TurnRequest, *, on_event: EventCallback | None = None) -> RunHandle:
        """Start one turn and return its :class:`~monoagent._pipeline.run_handle.RunHandle` (call inside the loop).

        ``await handle`` gives the :class:`TurnResult` (or raises the turn's error);
        ``handle.cancel()`` releases whoever awaits it at once with ``CancelledError``, even when
        the provider ignores cancellation; ``handle.run_id`` is the id its events carry. A
        configuration error found before any provider request (an unknown model prefix, a
        provider without its API key) is raised here, before admission: no events, no account, and
        so is a ``TypeError`` for a ``request`` that is not a :class:`TurnRequest`.
        """
        request = checked_request(request, "Agent.submit")
        return self.harness.submit(request, on_event=checked_on_event(on_event, "Agent.submit"))

    def cancel(self, conversation_id: str, reason: str | None = None) -> int:
        """Cancel every unfinished run of ``conversation_id``, queued ones included; returns how many.

        Each caller is released at once; each admitted run publishes its continuity account
        (``reason`` is recorded in it when it is a short identifier such as ``user_cancelled``)
        within the settle window. Safe to call from another thread than the one running the
        turns (a sync caller of :meth:`run_sync`, a signal-watching thread): it then waits until
        the runs are cancelled on their loop.
        """
        checked_text(conversation_id, "Agent.cancel", "conversation_id")
        if reason is not None:
            checked_text(reason, "Agent.cancel", "reason")
        loop = self.harness.loop
        if loop is None or loop.is_closed():
            return 0
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return self.harness.cancel(conversation_id, reason)

        cancelled: concurrent.futures.Future[int] = concurrent.futures.Future()

        def on_loop() -> None:
            try:
                cancelled.set_result(self.harness.cancel(conversation_id, reason))
            except BaseException as exc:  # handed to the calling thread
                cancelled.set_exception(exc)

        try:
            loop.call_soon_threadsafe(on_loop)
        except RuntimeError:  # the loop closed meanwhile: nothing runs there
            return 0
        while True:
            try:
                return cancelled.result(timeout=0.05)
            except TimeoutError:
                if loop.is_closed():
                    return 0

    async def wait_settled(self) -> None:
        """Wait until every cancelled run has published its continuity account (``aclose`` does this too)."""
        await self.harness.wait_settled()

    def run_sync(
        self,
        text: str | TurnRequest,
        *,
        conversation_id: str | None = None,
        on_event: EventCallback | None = None,
        **request_fields: Any,
    ) -> TurnResult:
        """Run one turn from synchronous code (for scripts); do not call inside a running loop.

        ``text`` is the message's text, with ``conversation_id`` (default ``cli:default``) and
        the other :class:`TurnRequest` fields as keywords, or a whole :class:`TurnRequest`, which
        then takes no ``conversation_id`` or other fields. Anything else is a ``TypeError`` before
        a turn starts. Interrupted (Ctrl-C, or :meth:`cancel` from another thread), the turn is
        cancelled and its continuity account published before this returns or raises.
        """
        where = "Agent.run_sync"
        if isinstance(text, TurnRequest):
            given = sorted([*(["conversation_id"] if conversation_id is not None else []), *request_fields])
            if given:
                raise TypeError(f"{where} got a TurnRequest and {', '.join(given)}: set those fields on the TurnRequest, "
                                "or pass the text with its fields as keywords")
            request = checked_request(text, where)
        else:
            if not isinstance(text, str):
                raise TypeError(f"{where} takes the message text (a str) or a TurnRequest, not {_type_name(text)}")
            if conversation_id is not None:
                checked_text(conversation_id, where, "conversation_id")
            request = checked_request(TurnRequest(text, conversation_id=conversation_id or "cli:default", **request_fields), where)
        checked_on_event(on_event, where)

        async def turn() -> TurnResult:
            try:
                return await self.respond(request, on_event=on_event)
            finally:
                await self.harness.wait_settled()

        return asyncio.run(turn())

    async def assemble(self, request: TurnRequest) -> AssembledPrompt:
        """Build the prompt of ``request`` without calling a provider or committing anything."""
        from monoagent._pipeline.harness import new_run_id

        request = checked_request(request, "Agent.assemble")
        started = self.harness.clock()
        session = self.harness._session(request, started)
        turn = TurnRun(
            agent=self,
            request=request,
            run_id=new_run_id(),
            model=request.model or self.model,
            session=session,
            emitter=lambda type, data: None,
            started_at=started,
        )
        return await self.harness.prepare(turn)

    def _preview_turn(self, request: TurnRequest) -> TurnRun:
        """A turn of ``request`` that is only looked at (``assemble``, ``tool_offer``, ``monoagent prompt``): no events, nothing committed."""
        from monoagent._pipeline.harness import new_run_id

        started = self.harness.clock()
        return TurnRun(
            agent=self, request=request, run_id=new_run_id(), model=request.model or self.model,
            session=self.harness._session(request, started), emitter=lambda type, data: None, started_at=started,
        )

    async def tool_offer(self, request: TurnRequest | None = None) -> ToolOffer:
        """The tools a turn of ``request`` would offer at its start, hold back and leave out, and why.

        Worked out by the same steps a turn takes before its first provider call (its history
        loaded, ``provide_tools``, each tool's ``enabled``, ``filter_tools``, ``hide_tools``), on
        a turn that is only looked at: no provider is called and nothing is committed. Without a
        request, a ``monoagent run`` turn's (channel ``cli``, conversation ``cli:default``).
        ``monoagent tools`` shows it.
        """
        if request is None:
            request = TurnRequest("", conversation_id="cli:default", channel="cli", delivery="console", console="terminal")
        elif not isinstance(request, TurnRequest):
            raise TypeError(f"Agent.tool_offer takes a TurnRequest or None, not {type(request).__name__}")
        return await self.harness.tool_offer(self._preview_turn(request))

    async def reset_conversation(self, conversation_id: str) -> tuple[HistoryResetReport, ToolHistoryClearReport | None]:
        """Clear a logical session's message and tool history across all its daily buckets.

        ``conversation_id`` may be a logical id or one of its ``<id>:<YYYY-MM-DD>`` buckets. The
        tool-history store is read first, so an unreadable one fails the reset before either
        store is touched. Returns the message store's ``HistoryResetReport`` and the tool
        history's clear report (None when tool history is off); the ``after_history_reset`` hook
        then tells plugins (stored summaries go with it). Other conversations are untouched.
        The id is made valid Unicode first, as a turn's is, so that it names the same conversation.
        With ``runtime.session.rollover`` other than ``daily`` there are no buckets: exactly
        ``conversation_id`` is cleared (:meth:`_reset_exact`), never an id it merely looks like.
        """
        from monoagent._boundary.text import valid_unicode
        from monoagent._kernel.errors import HistoryStoreError
        from monoagent._kernel.stores import logical_conversation_id

        checked_text(conversation_id, "Agent.reset_conversation", "conversation_id")
        if self.config.runtime.session.rollover != "daily":
            return await self._reset_exact(valid_unicode(conversation_id))
        logical = logical_conversation_id(valid_unicode(conversation_id))
        store = self.history_store
        if not self.components.supports(store, ManagedHistoryStore):
            raise HistoryStoreError(
                f"history store {store.name!r} has no reset_logical(), so {logical!r} cannot be reset "
                f"across its daily buckets; nothing was cleared (see monoagent._kernel.stores.ManagedHistoryStore)"
            )
        tool_history = self.tool_history_store()
        if tool_history is not None:
            await tool_history.stats()
        report = await store.reset_logical(logical)
        tool = await tool_history.clear_logical(logical) if tool_history is not None else None
        await self.after_history_reset(logical)
        return report, tool

    async def after_history_reset(self, logical_conversation_id: str | None) -> None:
        """Tell every plugin that a logical session's history (None: all history) was reset or cleared."""
        for value in self.hooks.collect(hookspecs.after_history_reset, agent=self, logical_conversation_id=logical_conversation_id):
            await await_me_maybe(value)

    async def _reset_exact(self, conversation_id: str) -> tuple[HistoryResetReport, ToolHistoryClearReport | None]:
        """The reset with rollover off: the one exact id in both stores, as a ``HistoryResetReport`` and a clear report.

        ``HistoryStore.reset`` returns only the messages removed (0 for an unreadable record it
        removes all the same), so a :class:`~monoagent._kernel.stores.ManagedHistoryStore` is
        asked for its totals before and after to report the record and its bytes; concurrent
        commits elsewhere can blur those two figures, never the reset itself.
        """
        tool_history = self.tool_history_store()
        if tool_history is not None:
            await tool_history.stats()
        store = self.history_store
        managed = store if self.components.supports(store, ManagedHistoryStore) else None
        before = await managed.stats() if managed is not None else None
        messages = await store.reset(conversation_id)
        after = await managed.stats() if managed is not None else None
        records = min(max(before.records - after.records, 0), 1) if before and after else int(messages > 0)
        freed = max(before.bytes - after.bytes, 0) if before and after and records else 0
        report = HistoryResetReport(conversation_id, (conversation_id,) if records else (), messages, records, freed)
        tool = await tool_history.clear_conversation(conversation_id) if tool_history is not None else None
        await self.after_history_reset(conversation_id)
        return report, tool

    async def aclose(self) -> None:
        """Release resources: pending continuity accounts, the ``shutdown`` hook, the warm sessions, then the stores and the memory tiers."""
        await self.harness.wait_settled()
        for value in self.hooks.collect(hookspecs.shutdown, agent=self):
            await await_me_maybe(value)
        await self.harness.close()
        for tool_history in self.components.forget(TOOL_HISTORY_STORES):
            await tool_history.close()
        self._store = None
        for store in self.components.forget(HISTORY_STORES):
            await store.close()
        for tier in self.components.forget(MEMORY_TIERS):
            if self.components.supports(tier, ClosableMemoryTier):
                await await_me_maybe(tier.close())

    def close(self) -> None:
        asyncio.run(self.aclose())
