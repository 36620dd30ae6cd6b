"""Every hook monoagent calls. This module is the table of contents of the system.

Hooks come in four families, under the banners below:

* **Registries**: ``historic`` hooks, so pluggy calls each plugin's implementation once, when the
  plugin is registered; ``register`` hands what it is given to a typed registrar bound to that
  plugin (:class:`monoagent.ComponentRegistrar`, :class:`monoagent.ToolRegistrar`, ...) whose call has the documented signature, and
  registers named components that configuration selects. A bad registration fails that plugin's
  load, naming it, like an import error. The kernel owns conflicts: two plugins registering one
  name is an error naming both.
* **Lifecycle**: ``configure`` once the Agent is built, ``shutdown`` when it closes.
* **Section producers**: called on every turn to build the system prompt. One firstresult hook
  per section, so a project overrides exactly one section by implementing one hook. Each
  carries its section's declaration (``@section(id, order=..., stability=..., ...)``, a
  :class:`~monoagent.SectionSpec`: id, order, stability, whether it is
  required, the prompt profiles that produce it, whether it is produced again between provider
  rounds); :data:`SECTIONS`, the section catalogue, is every declaration by order, and prompt
  assembly reads nothing else. Adding a section is one decorated spec.
* **Turn steps**: called on every turn around tool availability, recall, the user message,
  compaction, the provider call, tools, redaction, commit and events.

Conventions for every hook:

* Hooks are called with keyword arguments. An implementation may accept any subset of the
  arguments (pluggy matches by name), which is how hooks evolve: by adding arguments only.
* "First non-None result wins" marks ``firstresult`` hooks. pluggy calls the most recently
  registered implementation first, so the load order (bundled, third-party entry points sorted
  by name, project-local files, programmatic plugins) means later sources win. Bundled
  implementations are marked ``trylast`` so that anything a user registers runs before them,
  with one exception on purpose: the ``permissions`` plugin's ``before_tool_call`` is
  ``tryfirst``, so enforcement comes before any other plugin's answer.
* "Results are collected" marks hooks whose non-None results are all gathered in a list.
* pluggy features, each used for a reason: ``firstresult`` for hooks that need one answer (one
  per documented section, so a project replaces exactly one section with one function);
  collect-all plus an explicit ``order`` field for lists (extra sections, user-message parts);
  new-style ``wrapper=True`` for around-advice where every plugin's change must see the others'
  (``prepare_provider_request``, ``redact``); ``trylast`` on every bundled implementation so a
  user's implementation always runs first; ``historic`` for ``configure``, so a plugin
  registered after start-up still gets configured, and for the registries, so each plugin
  registers when it is registered. A plugin may mark its own implementation ``tryfirst`` to run
  before other plugins of the same hook.
* pluggy runs every call, so a wrapper (``@hookimpl(wrapper=True)``, or old-style
  ``hookwrapper=True``) works on every hook but the historic ones, runs once per call, and what it
  returns is what the kernel receives; pluggy refuses a wrapper on a historic hook when its plugin
  is registered. Mark implementations with ``monoagent.hookimpl`` (an implementation marked with
  pluggy's own marker is refused): it lets the kernel name the plugin behind each answer.
* Observer hooks (``after_commit``, ``on_run_event``): an implementation that raises is reported
  with its plugin, and the others still run.
* An implementation of a hook this version does not define is a warning with a did-you-mean
  (an error in strict mode), unless it is marked ``@hookimpl(optionalhook=True)``: that is for
  a plugin supporting several monoagent versions, one of which has the hook.
* The kernel calls every hook through a typed caller of :class:`~monoagent._kernel.hooks.Hooks`
  (``agent.hooks.first(spec.x, ...)``, ``collect``, ``each``, ``historic``), given the spec
  function itself, never by name; ``MONO_AGENT_TRACE_HOOKS=1`` traces the calls through pluggy's
  call monitoring.
* Deprecating a hook: its spec gets ``@hookspec(warn_on_impl=HookDeprecationWarning("..."))``
  (:class:`~monoagent.HookDeprecationWarning`; for one argument,
  ``warn_on_impl_args={"name": HookDeprecationWarning("...")}``), the message saying since when
  and what to implement instead, and CHANGELOG.md says so under "Plugin API".
  pluggy then warns, pointing at the implementing function, whenever a plugin implementing it
  is registered; the kernel keeps calling the hook until a later release removes it.
* Hooks are sync. Where a docstring says a hook "may return an awaitable", the kernel awaits it
  (see :func:`monoagent.await_me_maybe`); anything slow belongs on the objects the
  registries return, which are async.

The hook reference in ``docs/hooks.md`` is generated from these docstrings
(``python -m devtools.docgen``); a test fails when it is stale.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

import pluggy

from monoagent._kernel.errors import HookDeprecationWarning
from monoagent._kernel.marker import PROJECT, HookimplMarker
from monoagent._kernel.sections import SectionSpec, catalogue, section

if TYPE_CHECKING:
    import click

    from monoagent._agent import Agent
    from monoagent._kernel.interfaces import (
        Channel,
        CompactionPolicy,
        Embedder,
        MemoryTier,
        Notifier,
        ProviderRuntime,
        Tool,
        ToolSourceFailure,
    )
    from monoagent._kernel.model import (
        ContentBlock,
        MemoryHit,
        Message,
        ProviderRequest,
        RunEvent,
        Section,
        ToolCall,
        ToolResult,
        ToolSpec,
        UserMessagePart,
    )
    from monoagent._kernel.permissions import PermissionProfile
    from monoagent._kernel.registrars import ComponentRegistrar, ConfigSectionRegistrar, ToolRegistrar
    from monoagent._kernel.sessions import SessionBackend
    from monoagent._kernel.stores import HistoryStore, ToolHistoryStore
    from monoagent._kernel.turn import StepOutcome, Turn
    from monoagent._kernel.turn_request import TurnResult

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = HookimplMarker(PROJECT)


# ============================================================================ registries


@hookspec(historic=True)
def register_providers(register: ComponentRegistrar[ProviderRuntime]) -> None:
    """Register provider runtimes by model prefix.

    Call ``register(prefix, factory, description="", models=())`` once per prefix; ``models``
    names the models the provider knows, when it has a fixed list (``monoagent models`` shows
    them with the description). ``runtime.model =
    "<prefix>:<model>"`` selects ``factory(agent=agent, model="<model>")``, which returns a
    :class:`~monoagent.ProviderRuntime` (one that knows its model's context
    window also implements :class:`~monoagent.WindowedProviderRuntime`). Import
    heavy SDKs inside the factory, not at module level, so that ``monoagent --help`` stays fast.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``ProviderRuntime`` bound to this plugin. A
            bad registration (wrong arguments, a prefix that is not letters, digits, ``.``,
            ``_`` or ``-``, a factory that cannot be called as documented) fails this plugin's
            load, naming it; a prefix registered by two plugins is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded (before the first turn).

    Bundled default: ``offline`` (models ``echo`` and ``scripted``), ``anthropic``, ``openai``,
    ``ollama``, ``lmstudio`` and ``openai-compatible``, one plugin each.

    Example::

        @hookimpl
        def register_providers(register):
            register("mylab", lambda agent, model: MyLabRuntime(model))
    """


@hookspec(historic=True)
def register_history_stores(register: ComponentRegistrar[HistoryStore]) -> None:
    """Register conversation-history stores by name.

    Call ``register(name, factory, description="")``; ``history.store = "<name>"`` selects
    ``factory(agent=agent)``, which returns a :class:`~monoagent.HistoryStore`
    (its ``load`` takes ``on_warning``). What else the store can do is the sub-protocols it
    implements: :class:`~monoagent.ManagedHistoryStore` (logical-session reset,
    totals, clear-all), :class:`~monoagent.LogicalLookupStore`,
    :class:`~monoagent.ProviderSessionStore` (durable provider sessions) and
    :class:`~monoagent.DurableHistoryStore`; they are recorded when the store is
    built, and a store that implements one only in part is refused then, naming what it lacks.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``HistoryStore`` bound to this plugin; a bad
            registration fails this plugin's load, naming it; a name registered by two plugins
            is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``files`` plugin registers ``files`` (owner-only JSON records with
    SHA-256 file names, atomic replacement with fsync, the latest 64 messages).

    Example::

        @hookimpl
        def register_history_stores(register):
            register("postgres", lambda agent: PostgresHistory(agent.config.section("postgres")))
    """


@hookspec(historic=True)
def register_tool_history_stores(register: ComponentRegistrar[ToolHistoryStore]) -> None:
    """Register tool-history stores (where every managed tool call is recorded) by name.

    Call ``register(name, factory, description="")``; ``toolHistory.store = "<name>"`` selects
    ``factory(agent=agent)``, which returns a :class:`~monoagent.ToolHistoryStore`:
    every method a coroutine (``write_invocation``, ``write_result``, ``records``, ``flush``,
    ``stats``, ``clear_logical``, ``clear_conversation``, ``clear_all``, ``close``) with typed
    reports (``ToolHistoryStats``, ``ToolHistoryClearReport``); threads or an async driver are
    the store's own business. The Agent calls the factory once, on first use
    (``agent.tool_history_store()``), and is the store's one owner: it closes it in ``aclose()``.
    ``toolHistory.store = "none"`` selects no store, so ``none`` cannot be registered.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``ToolHistoryStore`` bound to this
            plugin; a bad registration (``none`` included) fails this plugin's load, naming it;
            a name registered by two plugins is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``tool-history`` plugin registers ``sqlite`` (the SQLite sidecar beside
    the message history: one writer thread per process behind the coroutines, DELETE journal with
    ``synchronous=EXTRA``, bounded and redacted records, retention with tombstones).

    Example::

        @hookimpl
        def register_tool_history_stores(register):
            register("postgres", lambda agent: PostgresToolHistory(agent.config.section("postgres"), agent.redact))
    """


@hookspec(historic=True)
def register_memory_tiers(register: ComponentRegistrar[MemoryTier]) -> None:
    """Register long-term memory tiers by name.

    Call ``register(name, factory, description="")``; each name listed in ``memory.tiers``
    selects ``factory(agent=agent, options=dict)``, which returns a
    :class:`~monoagent.MemoryTier`. What else the tier does is the sub-protocols
    it implements: :class:`~monoagent.SelectiveMemoryTier` (``automatic_recall``,
    ``captures``), :class:`~monoagent.BrowsableMemoryTier` (``list``, ``stats``)
    and :class:`~monoagent.ClosableMemoryTier` (``close``); a tier that
    implements one only in part is refused when it is built, naming what it lacks.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``MemoryTier`` bound to this plugin; a bad
            registration fails this plugin's load, naming it; a name registered by two plugins
            is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: ``memory-lite`` registers ``lite`` (SQLite FTS5, bm25, near-duplicate
    merging) and ``memory-journal`` registers ``journal`` (dated entries, keyword + semantic
    search fused by reciprocal rank fusion, reached only through tools).

    Example::

        @hookimpl
        def register_memory_tiers(register):
            register("vectors", lambda agent, options: VectorTier(**options))
    """


@hookspec(historic=True)
def register_embedders(register: ComponentRegistrar[Embedder]) -> None:
    """Register text embedders by name.

    Call ``register(name, factory, description="")``; memory tiers select an embedder by name
    and get ``factory(agent=agent, options=dict)``, an :class:`~monoagent.Embedder`.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``Embedder`` bound to this plugin; a bad
            registration fails this plugin's load, naming it; a name registered by two plugins
            is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``embedders`` plugin registers ``hashed-ngrams``, a dependency-free
    *lexical* embedder (hashed character 3- and 4-grams); the contrib distribution
    ``monoagent-minilm`` adds a real sentence-embedding model.

    Example::

        @hookimpl
        def register_embedders(register):
            register("minilm", lambda agent, options: MiniLM())
    """


@hookspec(historic=True)
def register_channels(register: ComponentRegistrar[Channel]) -> None:
    """Register channels (where turns come from) by name.

    Call ``register(name, factory, description="")``; ``factory(agent=agent)`` returns a
    :class:`~monoagent.Channel`.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``Channel`` bound to this plugin; a bad
            registration fails this plugin's load, naming it; a name registered by two plugins
            is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``console`` plugin registers ``console`` (the terminal chat behind
    ``monoagent chat``); the ``openai-api`` plugin registers ``openai-api``, an HTTP channel that
    ``monoagent serve`` mounts when ``openaiApi.enabled`` is set; the ``cron`` plugin registers
    ``cron``, which ``monoagent serve`` runs when a job of ``cron.jobs`` is enabled (no routes: its
    ``start()`` starts the scheduler); the ``webhook`` plugin registers ``webhook`` (``POST
    /hooks/<name>``, signed) when ``webhook.enabled`` is set. A channel is served by ``monoagent
    serve`` when it also has ``enabled``, ``has_credentials``, ``credential_hint``, ``routes()``,
    ``start()``, ``stop_accepting()``, ``cancel_in_flight()`` and ``shutdown()``
    (:class:`~monoagent.ServedChannel`, docs/serving.md), and ``monoagent serve
    --check`` asks one that has ``check()`` (:class:`~monoagent.CheckedChannel`)
    what it would do. A channel that has some of a sub-protocol's members but not all is refused
    when it is built, naming what it lacks.

    Example::

        @hookimpl
        def register_channels(register):
            register("irc", lambda agent: IrcChannel(agent))
    """


@hookspec(historic=True)
def register_notifiers(register: ComponentRegistrar[Notifier]) -> None:
    """Register notify destinations' kinds (where a request-driven turn's final answer is delivered) by name.

    Call ``register(name, factory, description="")``; ``factory(agent=agent, options=options)``
    returns a :class:`~monoagent.Notifier`. ``options`` is the destination's
    table from ``notify.destinations.<destination>``: the keys the user set, camelCase, without
    ``type``, with the free table ``options`` merged in (a third-party kind reads its own keys
    from there; the secret comes from ``MONO_AGENT_NOTIFY_SECRET_<NAME>`` when that is set). The
    factory validates them and raises :class:`~monoagent.ConfigError` naming the
    key and what is allowed; it is called at start-up (and by ``monoagent serve --check``) for
    every destination a channel names. ``notify(notification)`` returns the number of attempts
    it took and raises :class:`~monoagent.NotifyFailed` when it gives up. A cron
    job or webhook hook with ``notify`` naming a destination delivers its successful final
    answer there (in the background, through
    ``monoagent_plugins.serving.notify_dispatch.NotifyDispatch``), unless the answer is exactly the
    silent-result sentinel (docs/serving.md).

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``Notifier`` bound to this plugin; a bad
            registration fails this plugin's load, naming it; a name registered by two plugins
            is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``notify`` plugin registers ``webhook`` (POST the answer as JSON, signed
    with HMAC-SHA256, retried with backoff) and ``file`` (append one JSON line per answer).

    Example::

        @hookimpl
        def register_notifiers(register):
            # [notify.destinations.phone] type = "ntfy", options = {topic = "alerts"}
            register("ntfy", lambda agent, options: NtfyNotifier(options["topic"]))
    """


@hookspec(historic=True)
def register_compaction_policies(register: ComponentRegistrar[CompactionPolicy]) -> None:
    """Register history compaction policies by name.

    Call ``register(name, factory, description="")``; ``factory(agent=agent)`` returns a
    :class:`~monoagent.CompactionPolicy`. ``runtime.compaction.policy`` names the
    default; the :func:`choose_compaction` hook may pick another per turn.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``CompactionPolicy`` bound to this plugin; a bad
            registration fails this plugin's load, naming it; a name registered by two plugins
            is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    A policy may also store its work with the conversation and reuse it on later turns: see
    :class:`~monoagent.StoredCompaction` (``view``) and
    :attr:`CompactionOutcome.persist <monoagent.CompactionOutcome.persist>`.

    Bundled default: the ``compaction`` plugin registers ``summary`` (the documented policy:
    under 80% of the history budget send everything; at 80% summarise to about 10% of the
    budget as one "Summary of earlier conversation:" message, stored with the conversation and
    reused until the next compaction; on failure truncate to fit) and ``truncate`` (drop the
    oldest messages until the history fits). Neither cut separates a tool result from its call.

    Example::

        @hookimpl
        def register_compaction_policies(register):
            register("keep-last-10", lambda agent: KeepLast(10))
    """


@hookspec(historic=True)
def register_session_backends(register: ComponentRegistrar[SessionBackend]) -> None:
    """Register session backends (where warm provider sessions live) by name.

    Call ``register(name, factory, description="")``; ``runtime.session.backend = "<name>"``
    selects ``factory(agent=agent)``, which returns a
    :class:`~monoagent.SessionBackend` (``durable``, ``open``, ``publish``,
    ``retire``, ``evict_idle``, ``close``; each method gets the read-only turn, and ``open``
    returns an :class:`~monoagent.OpenedSession`). Each channel harness builds
    its own (``agent.components.new``) the first time a continuous turn opens a session; the
    harness closes it when the Agent closes. A backend whose sessions outlive the process can
    also be a :class:`~monoagent.ClearableSessionBackend` (``clear_all``), which
    ``monoagent restart --clear-sessions`` calls. A factory checks what its backend needs (a
    directory, a capability of the history store) and raises a
    :class:`~monoagent.ComponentError` saying what is wrong.

    Args:
        register: a :class:`~monoagent.ComponentRegistrar` of kind ``SessionBackend`` bound to this
            plugin; a bad registration fails this plugin's load, naming it; a name registered by
            two plugins is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``session-memory`` plugin registers ``memory`` (warm sessions in this
    process only, lost on restart; the default) and the ``session-files`` plugin ``files``
    (durable transcripts under ``runtime.session.transcriptsDir``, bound to the history record
    of a :class:`~monoagent.ProviderSessionStore`, with cross-process locks,
    fsynced fences and an idle sweep).

    Example::

        @hookimpl
        def register_session_backends(register):
            register("postgres", lambda agent: PostgresSessions(agent.config.section("postgres"), agent.history_store))
    """


@hookspec(historic=True)
def register_tools(register: ToolRegistrar) -> None:
    """Register tools the model may call.

    Call ``register(func)`` with a function decorated with :func:`monoagent.tool`: its name,
    description and JSON Schema come from its signature and docstring, and the model's arguments
    are checked against the signature before it runs (invalid ones go back to the model as an
    ``error`` result naming each bad argument, and the function is not called); a parameter
    annotated ``ToolContext`` receives the call's context. Or call ``register(spec, handler)``
    with a :class:`~monoagent.ToolSpec` and a handler
    ``handler(context) -> str | ToolResult`` (it may return an awaitable), which checks its
    arguments itself. The handler receives
    one :class:`~monoagent.ToolContext`: ``context.turn``, ``context.call``
    (the :class:`~monoagent.ToolCall`: provider call id, name, parsed arguments),
    ``context.arguments``, ``context.progress(text)`` (a ``tool_progress`` event) and
    ``context.result(content, status)`` (a result answering this call). A ``str`` becomes a
    ``success`` result; an exception an ``error`` result with the redacted message. Tool
    definitions travel in the provider's tool interface, never as prompt prose; the harness
    refuses calls to any name that is not offered on the turn (see ``filter_tools``).

    Either form takes ``enabled=``, a callable ``enabled(turn) -> bool`` asked on every turn with
    the read-only turn while its offered tools are worked out (``turn.tools`` then holds every
    registered and provided tool): false withdraws the tool from that turn, so a plugin offers
    its own tool only where it applies (a tier configured, a mode on) without a ``filter_tools``
    implementation. It runs on every turn: keep it a quick look at ``turn.config`` or
    ``turn.request``. An ``enabled`` that raises or answers other than a bool fails the turn
    with a :class:`~monoagent.PluginError` naming the tool and its plugin.

    Args:
        register: a :class:`~monoagent.ToolRegistrar` bound to this plugin; a bad
            registration (neither a decorated function nor a ``ToolSpec``, a handler that cannot
            be called as ``handler(context)``, an ``enabled`` that is not a callable of one
            argument, a name outside the providers' rule of 1 to 64 ASCII letters, digits, ``_``
            or ``-``) fails this plugin's load, naming it; a tool name registered by two plugins
            is an error naming both. (A decorated function with an
            unsupported annotation fails earlier, when its module is imported, with
            :class:`~monoagent.ToolDefinitionError`.)

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded.

    Bundled default: the ``memory`` plugin registers the read-only MemoryRecall (enabled on
    turns with a memory tier, unless ``memory.recallTool.enabled`` is false),
    ``memory-journal`` MemoryJournal (enabled when ``memory.tiers`` has ``journal``),
    ``skills`` read_skill (enabled in ``on_demand`` mode with skills selected),
    ``tool-domains`` request_tools (enabled when ``tools.visible`` hides a domain),
    ``tool-history`` SessionHistory and ``artifacts`` RunHistory.

    Example::

        @tool
        def weather(city: str, days: int = 1) -> str:
            '''The forecast for a city.

            Args:
                city: the city's name.
                days: how many days ahead.
            '''
            return forecast(city, days)

        @hookimpl
        def register_tools(register):
            register(weather)
            register(ToolSpec("clock", "The current UTC time."), lambda context: utcnow(),
                     enabled=lambda turn: turn.request.channel != "webhook")
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``monoagent`` command line.

    Args:
        cli: the root ``click.Group``; add commands or groups to it with ``cli.command()``
            or ``cli.add_command()``.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once when the CLI starts, after plugins are loaded (a blocked or failed plugin adds
    no command).

    Bundled default: ``history-cli`` adds ``history`` and ``restart``, ``memory-cli`` adds
    ``memory``; the core commands (run, chat, prompt, plugins, config) live in the kernel.

    Example::

        @hookimpl
        def register_commands(cli):
            @cli.command()
            def hello():
                click.echo("hello")
    """


@hookspec(historic=True)
def register_config_sections(register: ConfigSectionRegistrar) -> None:
    """Declare a plugin's own configuration section.

    Call ``register(path, cls)`` with a dotted key path (``"myplugin"`` or
    ``"providers.mylab"``) and an attrs class whose fields are the section's keys (snake_case in
    Python, camelCase in the file). The section is validated like the kernel's own: unknown keys
    with a did-you-mean, wrong types and attrs validator failures name the key path, the value
    and its source. Read it back with ``agent.config.section(path)``. The path may also be one
    of the kernel's tables (``"history"``, ``"toolHistory"``): the class's fields are then the plugin's keys of that
    table, at their documented paths (``history.maxMessages``), checked against the class while
    the table's other keys stay the kernel's.

    Args:
        register: a :class:`~monoagent.ConfigSectionRegistrar` bound to this
            plugin; a kernel key, a field that is a key of the kernel's table at that path, or a
            class that is not an attrs class fails this plugin's load; a path claimed by two
            plugins is an error naming both.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per plugin, when the plugin is loaded; the Agent validates the configuration
    against the sections of the active plugins.

    Bundled default: each provider plugin declares ``providers.<name>`` (``offline``:
    ``scriptPath``), the memory plugins ``memory.recall``, ``memory.recallTool``,
    ``memory.lite`` and ``memory.journal``, and ``tool-history`` the ``sqlite`` store's keys of
    the kernel's ``toolHistory`` table. The keys of a kernel table that only one plugin reads are that plugin's: ``files`` declares the
    store's limits in ``history``, ``skills`` the skill keys in ``context``, ``compaction`` its
    policies' ratios and summary model in ``runtime.compaction``.

    Example::

        @attrs.define
        class LabConfig:
            endpoint: str = "http://127.0.0.1:8080"

        @hookimpl
        def register_config_sections(register):
            register("providers.mylab", LabConfig)
    """


# ============================================================================ lifecycle


@hookspec(historic=True)
def configure(agent: Agent) -> None:
    """React to a configured Agent: read config, open resources, keep a reference.

    Args:
        agent: the Agent whose plugin manager this plugin is registered in.

    Returns:
        Nothing. Results are collected (and ignored).

    Called once per Agent after every plugin is registered and the configuration is
    validated. The hook is ``historic``: a plugin registered later with ``agent.register()``
    still receives the call, once, at registration, so late plugins need no special path.

    Bundled default: ``guardrails`` and ``identity`` write the agent home's SOUL.md and
    IDENTITY.md with their default text when their path is not configured and the file is missing
    (never overwriting one). Components such as the tool-history store come from registries, not from
    ``configure``.

    Example::

        @hookimpl
        def configure(agent):
            logger.info("model is {}", agent.config.runtime.model)
    """


@hookspec
def shutdown(agent: Agent) -> Awaitable[None] | None:
    """Release what ``configure`` acquired. May return an awaitable.

    Args:
        agent: the Agent being closed.

    Returns:
        Nothing (or an awaitable the kernel awaits). Results are collected.

    Called once from ``await agent.aclose()`` (and at the end of ``run_sync`` and every CLI
    command).

    Bundled default: ``artifacts`` waits until every pending run-event line is written. The
    selected components (history and tool-history stores, memory tiers) are closed by the Agent
    after this hook.

    Example::

        @hookimpl
        def shutdown(agent):
            return my_pool.close()
    """


@hookspec
def after_history_reset(agent: Agent, logical_conversation_id: str | None) -> Awaitable[None] | None:
    """Forget what a plugin keeps per conversation once its message history is reset or cleared.

    Args:
        agent: the Agent whose history was reset.
        logical_conversation_id: the logical session that was reset (its daily buckets with
            it; with ``runtime.session.rollover`` off, exactly the id that was reset), or None
            when every conversation was cleared.

    Returns:
        Nothing (or an awaitable the kernel awaits). Results are collected. An exception is
        raised to the caller after the history was reset: the reset stands.

    Called after the history store removed the conversation: by ``agent.reset_conversation()``
    (``monoagent history reset``, ``/reset`` in ``monoagent chat``) with its logical id, and by
    ``monoagent history clear --all`` and ``monoagent restart --clear-sessions`` with None.

    Bundled default: ``compaction`` removes the stored conversation summaries of that session
    (all of them after a clear), so a reset conversation starts without its old summary.

    Example::

        @hookimpl
        def after_history_reset(agent, logical_conversation_id):
            my_cache.drop(logical_conversation_id)  # None: drop everything
    """


# ============================================================================ section producers


@hookspec(firstresult=True)
@section("core_guardrails", order=100, stability="stable", required=True, profiles=("full", "minimal"), fixed_stability=False)
def section_core_guardrails(turn: Turn) -> Section | None:
    """Produce section 1, Core Guardrails (the soul).

    Args:
        turn: the turn being assembled (config, request, session, diagnostics).

    Returns:
        A :class:`~monoagent.Section`; assembly gives it the id and order of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, first of the section
    producers.

    Bundled default (``guardrails``): the text of ``context.soulPath`` (else the agent home's
    SOUL.md, else the built-in default soul), bounded by the bootstrap character budgets, with
    the "This file is yours to evolve" reminder; stable. A missing or truncated file becomes a
    manifest diagnostic.

    Example::

        @hookimpl
        def section_core_guardrails(turn):
            return Section("core_guardrails", "Be terse.", order=100, source="my-project")
    """


@hookspec(firstresult=True)
@section("identity", order=200, stability="stable", required=True, profiles=("full", "minimal"), fixed_stability=False)
def section_identity(turn: Turn) -> Section | None:
    """Produce section 2, Identity.

    Args:
        turn: the turn being assembled.

    Returns:
        A :class:`~monoagent.Section`; assembly gives it the id and order of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order.

    Bundled default (``identity``): the text of ``context.identityPath`` (else the agent home's
    IDENTITY.md, written with a default identity when missing and never overwritten), bounded by the
    bootstrap budgets; stable. The same plugin adds the optional USER.md as the ``user_persona``
    extra section.

    Example::

        @hookimpl
        def section_identity(turn):
            return Section("identity", "You are Ada, the build bot.", order=200)
    """


@hookspec(firstresult=True)
@section("session", order=300, stability="stable", required=True, profiles=("full", "minimal"), fixed_stability=False)
def section_session(turn: Turn) -> Section | None:
    """Produce section 3, the Session block.

    Args:
        turn: the turn being assembled; ``turn.request.delivery`` tells console, push or
            request-driven turns apart, ``turn.request.surface`` the chat surface.

    Returns:
        A :class:`~monoagent.Section`; assembly gives it the id and order of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order.

    Bundled default (``session``): the documented block. Console turns name their console and
    the conversation id verbatim (omitted if the id would need sanitising); push turns forbid
    copying, requesting or inferring a thread id, callback URL or delivery token;
    request-driven turns say no proactive follow-up is possible; a surface line with kind,
    sanitised name, id and message budget when the request has one; the host-owned persistence
    sentence when memory is configured. No route (thread id, callback URL, delivery token,
    user id) is ever rendered. Stable across the turns of a conversation.

    Example::

        @hookimpl
        def section_session(turn):
            return Section("session", "You run in a batch job.", order=300)
    """


@hookspec(firstresult=True)
@section("skill_index", order=500, stability="stable", fixed_stability=False)
def section_skill_index(turn: Turn) -> Section | None:
    """Produce section 5, the Skill Index.

    Args:
        turn: the turn being assembled.

    Returns:
        A :class:`~monoagent.Section`, or one with empty text when no skill is selected (the
        section is then skipped); assembly gives it the id and order of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order.

    Bundled default (``skills``): one line per entry of ``context.selectedSkills`` with the
    name and the description from SKILL.md's front matter. There is no auto-selection. With
    ``context.skillsMode = "on_demand"``: a note that the skills are loaded on demand with the
    ``read_skill`` tool, then one line per skill with its exact slug (the directory name) and
    description.

    Example::

        @hookimpl
        def section_skill_index(turn):
            return Section("skill_index", "", order=500)  # hide the index
    """


@hookspec(firstresult=True)
@section("skill_instructions", order=600, stability="stable", fixed_stability=False)
def section_skill_instructions(turn: Turn) -> Section | None:
    """Produce section 6, the Selected Skill Instructions.

    Args:
        turn: the turn being assembled.

    Returns:
        A :class:`~monoagent.Section`; assembly gives it the id and order of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order.

    Bundled default (``skills``): the body of ``<skillsRoot>/<name>/SKILL.md`` for each
    selected skill, each capped at ``context.skillMaxBytes`` (default 48000) without splitting a
    UTF-8 character, with a ``skill_truncated`` diagnostic; a missing skill is a
    ``skill_missing`` diagnostic. None under ``context.skillsMode = "on_demand"`` (the
    ``read_skill`` tool returns one body, capped the same way).

    Example::

        @hookimpl
        def section_skill_instructions(turn):
            return Section("skill_instructions", load_my_skills(), order=600)
    """


@hookspec(firstresult=True)
@section("tool_recovery_policy", order=360, stability="stable")
def section_tool_recovery_policy(turn: Turn) -> Section | None:
    """Produce the ``tool_recovery_policy`` section: how to recover from a failed tool call.

    Tool Recovery Policy: read the error, correct the arguments, try another way, say what
    failed. Rendered when the turn has tools.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default (plugin ``recovery``): when the turn offers tools (``turn.tools`` is not
    empty), fixed text on recovering from a failed tool call: read the error in the result,
    correct the arguments or try another way, never repeat the identical failing call, say
    plainly what failed, never invent a tool result. It depends on nothing that changes between
    turns or rounds, so the stable part and its fingerprint stay byte-identical. No config keys.

    Example::

        @hookimpl
        def section_tool_recovery_policy(turn):
            if turn.tools:
                return Section("tool_recovery_policy", "If a tool fails, tell the user which one.", order=360)
            return None
    """

@hookspec(firstresult=True)
@section("current_permissions", order=610, stability="dynamic", per_round=True)
def section_current_permissions(turn: Turn) -> Section | None:
    """Produce the ``current_permissions`` section: the permission profile in force and what it allows.

    Current Permissions: the permission profile in force (``turn.permissions``:
    ``permissions.profile`` narrowed by ``TurnRequest.permissions``) and which action categories run,
    need the person's approval, or are refused. Guidance only: enforcement happens in the tool loop
    before a handler runs, so blocking or overriding this section never changes what may run.

    Args:
        turn: the turn being assembled (``turn.permissions``, ``turn.tools``, ``turn.hidden_tools``,
            ``turn.request.approver``).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default (plugin ``permissions``): rendered only under a restricted profile (never
    ``full_access``): ``# Current permissions``, the profile's name, the categories (the documented
    ones and any other the turn's tools declare) that run without asking, need approval, and are
    refused, a line saying nobody can approve when the turn has no approver, and how to behave
    after a refusal. Config: ``permissions.profile``, ``permissions.profiles``.

    Example::

        @hookimpl
        def section_current_permissions(turn):
            if turn.permissions and turn.permissions.restricted:
                return Section("current_permissions", f"Profile {turn.permissions.name}: ask before writing.")
            return None
    """

@hookspec(firstresult=True)
@section("task_orchestration", order=620, stability="dynamic", per_round=True)
def section_task_orchestration(turn: Turn) -> Section | None:
    """Produce the ``task_orchestration`` section: when to delegate a job to a subagent.

    Task Orchestration: when to delegate a self-contained job to a subagent with the ``task``
    tool. Rendered only when the ``task`` tool is available to the turn.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default (``subagents``): when ``task`` is among ``turn.tools`` (the agent has a
    subagent in ``[agents.named.<name>]`` or ``Agent(subagents=...)``, its depth is below
    ``agents.maxDepth``, and no ``filter_tools`` withdrew it), a ``# Task orchestration`` block:
    delegate self-contained jobs; the subagent sees nothing of this conversation, so the task text
    must carry the goal, inputs, constraints and the answer wanted (or pass material in
    ``context``); its final answer comes back as the tool result; then ``Available agents:`` with
    one ``- <name>: <description>`` line per subagent, sorted by name. None otherwise. See
    docs/subagents.md.

    Example::

        @hookimpl
        def section_task_orchestration(turn):
            if any(spec.name == "task" for spec in turn.tools):
                return Section("task_orchestration", "Delegate only code reviews.", order=620, stability="dynamic")
            return None
    """

@hookspec(firstresult=True)
@section("artifact_references", order=630, stability="dynamic", per_round=True)
def section_artifact_references(turn: Turn) -> Section | None:
    """Produce the ``artifact_references`` section: how to treat the artifact references in the history.

    Artifact References: the policy for the artifact metadata blocks next to retained history
    messages (metadata only; read one with ``artifact_read`` when needed, never all). Rendered
    only when the prompt holds artifact references.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default: ``artifact-refs`` renders the policy when a message of the turn's retained
    history (``turn.history``) carries attachments, whose metadata blocks (id, name, media type,
    size: :func:`monoagent.artifact_refs_block`) sit next to their messages:
    references are metadata only, read one with ``artifact_read`` (or request the ``artifact``
    tool domain first, when ``request_tools`` is offered instead), never all, and answer from the
    history when the file is not needed. The same plugin offers the ``artifact_read`` tool
    (categories ``read``, domain ``artifact``) on those turns and stores each attachment's text
    under ``<history.dir>/artifacts`` after the turn commits.

    Example::

        @hookimpl
        def section_artifact_references(turn):
            if any(m.attachments for m in turn.history):
                return Section("artifact_references", "Files are listed by id; ask before reading one.",
                               order=630, stability="dynamic")
    """

@hookspec(firstresult=True)
@section("hidden_tool_domains", order=640, stability="dynamic", per_round=True)
def section_hidden_tool_domains(turn: Turn) -> Section | None:
    """Produce the ``hidden_tool_domains`` section: the tool domains ``request_tools`` can reveal.

    Hidden Tool Domains: the compact ``request_tools`` catalogue of the tool domains not visible yet,
    each with its exact tool names (never schemas). The catalogue does not make a tool callable:
    a hidden tool is neither offered to the provider nor run until ``request_tools`` reveals its domain.

    Args:
        turn: the turn being assembled (``turn.tools``, the visible tools; ``turn.hidden_tools``,
            the hidden ones, each with its ``domain``).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default (plugin ``tool-domains``): rendered only when ``tools.visible`` hides a domain
    and ``request_tools`` is offered: ``# Hidden tool domains``, how to request one, then one line
    per hidden domain in name order, ``- <domain>: <tool>, <tool>`` (at most 32 names, the rest
    counted). Config: ``tools.visible``.

    Example::

        @hookimpl
        def section_hidden_tool_domains(turn):
            return None  # block this section for the project (request_tools stays offered)
    """

@hookspec(firstresult=True)
@section("agents_md", order=650, stability="dynamic", per_round=True)
def section_agents_md(turn: Turn) -> Section | None:
    """Produce the ``agents_md`` section: the project instructions of the turn's AGENTS.md.

    AGENTS.md: the effective AGENTS.md of the turn (the nearest one up from the working directory
    for CLI and console turns; a configured folder per channel for channel turns), bounded by the
    bootstrap budgets. Nothing when there is none.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default: ``agents-md`` renders the effective AGENTS.md as project instructions whose
    heading names the file's path (the manifest's ``source``): the folder configured for the
    request's channel in ``context.agentsMd.channels.<channel>``, else on a console turn
    (``delivery = "console"``) the nearest AGENTS.md from the working directory up to the first
    directory holding ``monoagent.toml`` or ``.git``, never above the home directory; else none.
    Read like the bootstrap files (a regular file of at most ``context.bootstrapMaxChars`` x 4
    bytes, invalid UTF-8 replaced), cut to ``context.bootstrapMaxChars`` and to what the bootstrap
    files left of ``context.bootstrapTotalMaxChars`` (diagnostics ``agents_md_truncated``,
    ``agents_md_unreadable``, ``agents_md_missing`` for a configured folder without one).

    Example::

        @hookimpl
        def section_agents_md(turn):
            text = (Path(turn.config.home) / "TEAM.md").read_text()
            return Section("agents_md", text, order=650, stability="dynamic", source="TEAM.md")
    """

@hookspec(firstresult=True)
@section("recovery_continuation", order=660, stability="dynamic", per_round=True)
def section_recovery_continuation(turn: Turn) -> Section | None:
    """Produce the ``recovery_continuation`` section: the hint to continue a reply cut at the output-token limit.

    Recovery Continuation: the continuation hint for the provider round that follows a stop on
    the output-token limit.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default (plugin ``recovery``): in a round that continues a reply stopped at the
    output-token limit (``turn.provider_round.continuation`` > 0; stop reason ``max_tokens``,
    which the OpenAI formats report as ``length``), a hint to continue exactly where the reply
    stopped without repeating it; nothing otherwise. ``runtime.maxContinuations`` (default 1)
    bounds how many such rounds a run spends; the answer is the replies joined.

    Example::

        @hookimpl
        def section_recovery_continuation(turn):
            if turn.provider_round.continuation:
                return Section("recovery_continuation", "Continue mid-sentence; no recap.", order=660)
            return None
    """

@hookspec(firstresult=True)
@section("retry_instruction", order=670, stability="dynamic", per_round=True)
def section_retry_instruction(turn: Turn) -> Section | None:
    """Produce the ``retry_instruction`` section: what to do after a failed tool call, or answer now.

    Retry Instruction: after a recoverable tool failure, the instruction for the next provider
    round of the same turn; once the tool-loop budget is spent, the final-answer instruction
    instead.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default (plugin ``recovery``): in the final round ``runtime.maxTurns`` allows after
    tool rounds (``turn.provider_round.final``; that round is sent without tools), the
    final-answer instruction (no more tool calls, answer now with what you have). Otherwise, in
    the round after a recoverable tool failure (``turn.provider_round.failed_tools``: results
    with status ``error`` or ``rejected``: the handler raised, a typed tool refused its
    arguments, the tool is not offered), which tool calls failed (at most 8 named, each name cut
    to 64 characters) and that the model may retry with corrected arguments or choose another
    way. Nothing in any other round.

    Example::

        @hookimpl
        def section_retry_instruction(turn):
            failed = turn.provider_round.failed_tools
            if failed:
                return Section("retry_instruction", f"{failed[0].name} failed: fix its arguments.", order=670)
            return None
    """

@hookspec(firstresult=True)
@section("dynamic_context", order=680, stability="dynamic", per_round=True)
def section_dynamic_context(turn: Turn) -> Section | None:
    """Produce the ``dynamic_context`` section: context for this turn only.

    Dynamic Context: context the caller passed on the request or a plugin contributes for this
    turn.

    Args:
        turn: the turn being assembled (``turn.profile``, ``turn.request``, ``turn.tools``,
            ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`).

    Bundled default: ``dynamic-context`` renders the request's ``TurnRequest.context`` (``monoagent
    run --context``/``--context-file``) under a heading saying it applies to this turn only, cut to
    :data:`~monoagent.REQUEST_CONTEXT_MAX_CHARS` characters (diagnostic
    ``dynamic_context_truncated``); none when the request has no context. Never written to history.

    Example::

        @hookimpl
        def section_dynamic_context(turn):
            return Section("dynamic_context", f"Open tickets: {count_tickets()}", order=680,
                           stability="dynamic")
    """

@hookspec(
    firstresult=True,
    warn_on_impl=HookDeprecationWarning(
        "section_extra_system is deprecated since 0.2; implement section_runtime_facts (same argument, same section)"
    ),
)
def section_extra_system(turn: Turn) -> Section | None:
    """Deprecated since 0.2: implement :func:`section_runtime_facts`, which produces the same section.

    Args:
        turn: the turn being assembled.

    Returns:
        A :class:`~monoagent.Section`, or None. First non-None result wins.

    A plugin implementing it gets a :class:`~monoagent.HookDeprecationWarning`
    when it is registered. Until a later release removes it, assembly still asks it for the
    ``extra_system`` section while a plugin implements it: before :func:`section_runtime_facts`
    (so an implementation written before the rename keeps its place ahead of the bundled
    default), but after it when a plugin that is not a ``trylast`` default implements
    :func:`section_runtime_facts`. The first answer that is not None wins.

    Bundled default: none (``runtime-facts`` implements :func:`section_runtime_facts`).

    Example::

        @hookimpl
        def section_runtime_facts(turn):  # rename the implementation; nothing else changes
            return Section("extra_system", f"Today is {turn.now:%A %Y-%m-%d}.", order=690)
    """


@hookspec(firstresult=True)
@section("extra_system", order=690, stability="dynamic", per_round=True, aliases=(section_extra_system,))
def section_runtime_facts(turn: Turn) -> Section | None:
    """Produce the ``extra_system`` section: runtime facts, such as today's date.

    Runtime Facts: the local date and time with its zone and the operating system, so questions
    such as "what day is it" are answerable. The last system section, before the current user
    message; never in the stable part.

    Args:
        turn: the turn being assembled (``turn.now``, the turn's start; ``turn.profile``,
            ``turn.request``, ``turn.state`` for what earlier provider rounds of the turn left).

    Returns:
        A :class:`~monoagent.Section`, or None / empty text for no section; assembly
        gives it the id, order and stability of its catalogue entry.
        First non-None result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order; when
    the entry is per-round, also before every provider round after the run's first, with
    ``turn.provider_round`` describing the round
    (:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`). Replaces
    :func:`section_extra_system`, whose implementations still answer (see there).

    Bundled default: ``runtime-facts`` renders the turn's local date, weekday and time with its
    time zone (the IANA name of ``runtime.session.rolloverTimezone`` when set, else the system
    zone's name) and UTC offset, and the operating system (``platform``): read from
    ``turn.now``, so every round of a turn shows the same facts. Block the plugin to leave them out.

    Example::

        @hookimpl
        def section_runtime_facts(turn):
            return Section("extra_system", f"Today is {turn.now:%A %Y-%m-%d}.", order=690,
                           stability="dynamic")
    """


@hookspec
def extra_sections(turn: Turn) -> Section | Sequence[Section] | None:
    """Contribute additional system sections (user persona, permissions, AGENTS.md, facts).

    Args:
        turn: the turn being assembled.

    Returns:
        A :class:`~monoagent.Section`, a list of them, or None. Results are collected.
        Each section's ``order`` places it among the sections of the catalogue (the table
        above), below 700, where the current user message sits; its ``stability`` decides
        whether it may sit before the cache boundary. In ``runtime.session.mode = "continuous"``
        the system prompt holds only the stable sections, and the dynamic ones travel at the
        head of the current user message. A section with the id of a catalogued section, or two
        sections with one id, is an error naming both sources.

    Called on every turn of the ``full`` prompt profile, after the producers of the catalogue.

    Bundled default: ``identity`` adds the optional USER.md as ``user_persona`` (order 250,
    stable); ``memory`` adds the memory contract as ``memory`` (order 350, stable) when memory is
    configured; ``tool-history`` adds the cold tool-history projection as ``tool_history``
    (order 410, dynamic) when there are records to show and the turn is not warm
    (``turn.session.warm``).

    Example::

        @hookimpl
        def extra_sections(turn):
            return Section("on_call", f"On call today: {rota.today()}.", order=650,
                           stability="dynamic")
    """


@hookspec(firstresult=True)
@section("conversation_history", order=400, stability="dynamic", fixed_stability=False)
def render_history(turn: Turn, messages: Sequence[Message]) -> Section | None:
    """Render section 4, Conversation History, from the retained (and compacted) messages.

    Args:
        turn: the turn being assembled.
        messages: the history to show, oldest first, after compaction. Empty in
            ``runtime.session.mode = "continuous"``: there history travels as native messages
            (the warm session's transcript, or canonical history as leading messages on a cold
            turn), never in the system prompt; ``turn.session.warm`` tells a warm turn.

    Returns:
        A :class:`~monoagent.Section`, with empty text on a first turn (the section is then
        skipped); assembly gives it the id and order of its catalogue entry. First non-None
        result wins.

    Called on every turn of a prompt profile its catalogue entry lists, in catalogue order,
    when the agent has a history store.

    Bundled default (``conversation``): a framed transcript, one entry per message, speaker
    labels on user messages, tool calls summarised by name.

    Example::

        @hookimpl
        def render_history(turn, messages):
            text = "\\n".join(f"{m.role}: {m.content}" for m in messages)
            return Section("conversation_history", text, order=400, stability="dynamic")
    """


@hookspec(firstresult=True)
def render_user_message(turn: Turn, parts: Sequence[UserMessagePart]) -> Message | None:
    """Render section 7, the Current User Message, always last.

    Args:
        turn: the turn; ``turn.request.text`` is the user's own text and
            ``turn.request.attachments`` its attachments.
        parts: what :func:`augment_user_message` contributed, sorted by ``order``; ``before``
            parts go ahead of the user's text, ``prefix`` parts on the line directly above it,
            ``after`` parts after it and any attachment block.

    Returns:
        The provider-facing user :class:`~monoagent.Message`. First non-None result wins.
        It is never written to history: history keeps the user's own text and speaker name.

    Called on every turn, after recall and augmentation.

    Bundled default (``conversation``): the before parts, the prefix parts and the user's text
    (one line each), an attachment block, then the after parts, separated by blank lines. Fence
    tokens in the user's text and attachments are neutralised.

    Example::

        @hookimpl
        def render_user_message(turn, parts):
            return Message("user", turn.request.text.upper())
    """


# ============================================================================ turn steps


@hookspec
def provide_tools(agent: Agent, turn: Turn | None) -> Sequence[Tool | ToolSourceFailure] | Awaitable[Sequence[Tool | ToolSourceFailure]] | None:
    """Offer tools that are known only at run time (an MCP server's), beside the registered ones.
    May return an awaitable.

    ``register_tools`` runs once, when the plugin loads, before anything is connected; a plugin
    whose tools come from elsewhere (a server it starts, a catalogue it fetches) offers them here
    instead, on every turn and for ``monoagent tools``. The returned tools are offered like
    registered ones: ``filter_tools`` sees them, the model calls them by name, their handlers get
    a :class:`~monoagent.ToolContext` and their results go through the bloat
    guard. A plugin that caches its answer keeps this step cheap: it runs before every turn.

    Args:
        agent: the Agent.
        turn: the turn being prepared (for ``monoagent tools``, a ``monoagent run`` turn that is
            only looked at), or None when a caller lists them without a turn
            (``monoagent.provided_tools(agent, None)``).

    Returns:
        :class:`~monoagent.Tool` records (``spec``, ``handler``, optionally
        ``source`` such as ``mcp:<server>``; the kernel sets ``plugin``) and, for a source that
        could not list its tools, a :class:`~monoagent.ToolSourceFailure`
        (reported as a ``runtime_warning`` event with code ``tool_source_unavailable``; the turn
        goes on without those tools); or None; or an awaitable of either. Results are
        collected. Anything else in the list, a tool name outside the providers' rule
        (:data:`~monoagent.TOOL_NAME_PATTERN`), or a tool name that is registered or provided
        twice, is a :class:`~monoagent.PluginError` naming the plugins.

    Called once per turn when the harness prepares it, after the history is loaded and before
    ``filter_tools``, in the turn's event loop (``monoagent tools`` and ``Agent.tool_offer`` take
    the same steps on a turn that is only looked at).
    Every await in an implementation must be bounded: the turn waits for it.

    Bundled default (``mcp``): the tools of each configured ``mcp.servers.<name>``, named
    ``<name>__<tool>``, connecting to the servers on first need. ``artifact-refs`` offers
    ``artifact_read`` on the turns of a conversation whose retained history carries artifact
    references (never with ``turn=None``).

    Example::

        @hookimpl
        def provide_tools(agent, turn):
            return [Tool(ToolSpec("lab__status", "The lab's status."), lab_status, source="lab")]
    """


@hookspec
def filter_tools(turn: Turn, tools: Sequence[ToolSpec]) -> Sequence[ToolSpec] | None:
    """Narrow the tools offered on this turn: return the ones to keep.

    For narrowing across plugins (a policy over tools others registered). A plugin that only
    withdraws its own tool registers it with ``enabled=`` instead (``register_tools``).

    Args:
        turn: the turn (its request, session and configuration; ``turn.tools`` is not set yet).
        tools: every registered tool's :class:`~monoagent.ToolSpec`, in registration order,
            then the tools ``provide_tools`` offered on this turn.

    Returns:
        The specs to keep (a subset of ``tools``), or None to keep them all. Results are
        collected and intersected, with the tools' own ``enabled`` answers too: a tool is
        offered when it is enabled and every implementation that answered kept it.
        Availability is a veto, so every implementation sees the full list (tools not enabled
        on this turn included), the outcome does not depend on the load order, and no plugin
        re-admits a tool another withdrew. A spec that is not in ``tools`` is an error naming
        the plugin (this step withdraws tools; ``register_tools`` adds them).

    Called once per turn when the harness prepares it: after the history is loaded, before
    ``hide_tools``, ``recall_memory``, the sections and every provider step. What survives (less
    what ``hide_tools`` holds back) is ``turn.tools``: the tools sent to the provider, the only
    ones a call may reach (another name is answered ``rejected``).

    Bundled default (``subagents``): on a subagent's turn, keeps only the tools its ``tools``
    list names, by name or by domain (least privilege).

    Example::

        @hookimpl
        def filter_tools(turn, tools):
            if turn.request.channel == "webhook":
                return [spec for spec in tools if spec.name != "shell"]
    """


@hookspec
def hide_tools(turn: Turn, tools: Sequence[ToolSpec]) -> Sequence[ToolSpec] | None:
    """Hold back some of the offered tools until a tool reveals them: return the ones that start hidden.

    A hidden tool is offered but not yet callable: it is in ``turn.hidden_tools``, not in
    ``turn.tools``, so it is neither sent to the provider nor run (a call to it by name is
    answered ``rejected``, naming its tool domain if it has one). A tool's handler reveals hidden
    tools for the rest of the run with
    :meth:`ToolContext.reveal_tools <monoagent.ToolContext.reveal_tools>`;
    they are callable at once and offered to the provider from the next round. Which tools start
    hidden, and how the model asks for them, is the implementing plugin's policy: the kernel only
    keeps the two lists.

    Args:
        turn: the turn (its request, session and configuration; ``turn.tools`` is not set yet).
        tools: the tools offered on this turn (after ``enabled`` and ``filter_tools``), in order.

    Returns:
        The specs to hide (a subset of ``tools``), or None to hide none. Results are collected
        and joined: a tool starts hidden when any implementation hides it. A spec that is not in
        ``tools`` is an error naming the plugin.

    Called once per turn when the harness prepares it, right after ``filter_tools``.

    Bundled default (``tool-domains``): hides the tools of every tool domain ``tools.visible``
    does not list (a tool without a domain is never hidden); its ``request_tools`` tool reveals
    a domain, and the ``hidden_tool_domains`` section lists what is hidden.

    Example::

        @hookimpl
        def hide_tools(turn, tools):
            return [spec for spec in tools if spec.name.startswith("admin_")]
    """


@hookspec(firstresult=True)
def turn_permissions(turn: Turn) -> PermissionProfile | None:
    """Decide the turn's permission profile: which tool action categories run, need approval, or are refused.

    Args:
        turn: the turn (its request, with ``request.permissions`` and ``request.approver``; its
            configuration; ``turn.subagent``; ``turn.tools`` is set).

    Returns:
        A :class:`~monoagent.PermissionProfile`, or None. First non-None result
        wins. The answer is ``turn.permissions`` for the rest of the turn (the section producers,
        ``before_tool_call`` and a delegating ``task`` tool read it); None leaves it None, which
        the bundled plugins read as ``full_access``. Raise
        :class:`~monoagent.ConfigError` for a profile name nobody defined: the turn
        fails before the provider is called.

    Called once per turn when the harness prepares it, after the offered tools and before
    ``recall_memory``.

    Bundled default (``permissions``): ``permissions.profile`` narrowed by the request's
    ``permissions`` (a profile name, or a profile a delegating turn passes) and, on a subagent's
    turn, by the subagent's own ``permissions``; a request never widens it (docs/permissions.md).

    Example::

        @hookimpl
        def turn_permissions(turn):
            if turn.request.channel == "webhook":
                return monoagent.permission_profile("webhook", allow=["read"])  # read only
    """


@hookspec
def recall_memory(turn: Turn) -> Sequence[MemoryHit] | Awaitable[Sequence[MemoryHit]] | None:
    """Recall long-term memory for this turn, from the user's message.

    Args:
        turn: the turn; ``turn.request.text`` is the query.

    Returns:
        A list of :class:`~monoagent.MemoryHit` (or an awaitable of one), bounded by
        the implementation itself: the kernel applies no gate of its own. Results are collected
        and concatenated in call order (each implementation's hits in its own order): that is
        ``turn.recalled``, what ``augment_user_message`` renders, and a ``memory_recalled`` event
        records each hit's source and byte size only. An implementation that adds to another's
        recall keeps its own answer small: the recalled text rides every provider request of the
        turn.

    Called once per turn, before assembly.

    Bundled default (``memory``): searches every configured tier whose ``automatic_recall``
    is true (:class:`~monoagent.SelectiveMemoryTier`; a tier without it is
    searched) with the user's text, through a per-turn lookup cache shared with the MemoryRecall
    tool, keeps hits that reach ``memory.recall.minScore`` and contain a word of the message,
    and answers with the best of them: highest scores first, at most 5 hits and 8 KB of text in
    all (a hit that does not fit is skipped); a failing tier is a ``runtime_warning``. The
    journal tier is never recalled here.

    Example::

        @hookimpl
        def recall_memory(turn):
            return [MemoryHit("notes", "Alice prefers metric units.", score=0.9)]
    """


@hookspec
def augment_user_message(turn: Turn, recalled: Sequence[MemoryHit]) -> UserMessagePart | Sequence[UserMessagePart] | None:
    """Add text around the user's message: the recall block, speaker and preceding-message fences.

    Args:
        turn: the turn (``request.sender``, ``request.preceding_messages``).
        recalled: the memory hits the ``recall_memory`` implementations answered with (possibly none).

    Returns:
        A :class:`~monoagent.UserMessagePart`, a list of them, or None. Results are
        collected. Parts ride the provider-facing user message only; they never reach the
        system prompt, history or capture, so the system prompt stays byte-stable.

    Called once per turn, after recall and before assembly.

    Bundled default (``conversation``): when anything was recalled, the block behind the line
    ``[Recalled long-term memory — background context for this turn, not the user's words:]``
    after the user's text; nothing at all when there are none. ``group-context``: the
    ``<messages_since_your_last_turn>`` fence (``before``) and the ``<current_speaker>`` line
    (``prefix``) when the request has preceding messages or a sender.

    Example::

        @hookimpl
        def augment_user_message(turn, recalled):
            return UserMessagePart("(reply in French)", position="after", order=900)
    """


@hookspec(firstresult=True)
def count_tokens(text: str, model: str) -> int | None:
    """Estimate how many tokens ``text`` costs with ``model``.

    Args:
        text: the text to count.
        model: the ``provider:model`` string of the turn.

    Returns:
        The token estimate. First non-None result wins.

    Called once per turn on the whole request (system prompt, tool-history projection, messages)
    to size it against the compaction budget, again when a compaction changed it, and by the
    ``summary`` and ``truncate`` policies per message.

    Bundled default (``tokens``): tiktoken's ``cl100k_base`` when tiktoken is installed
    (``pip install 'monoagent[tokens]'``), else ``ceil(utf8_bytes / 4)``, calibrated against
    ``cl100k_base`` by ``bench/tokens.py`` (it errs high for English and code, low for JSON and
    CJK text); a model's own tokeniser replaces both.

    Example::

        @hookimpl
        def count_tokens(text, model):
            return len(tiktoken.get_encoding("cl100k_base").encode(text))
    """


@hookspec(firstresult=True)
def choose_compaction(turn: Turn, history_tokens: int, budget: int) -> str | None:
    """Choose the compaction policy for this turn, by registered name.

    Args:
        turn: the turn.
        history_tokens: the estimated tokens of the whole request built from the history (as the
            last stored summary left it): the system prompt with the tool-history projection, the
            history, the current user message.
        budget: the history budget (context window minus the response reserve).

    Returns:
        A policy name from the compaction registry, or ``"none"`` to send history as it is.
        First non-None result wins.

    Called once per turn with a non-empty history, after the request is assembled and before it
    is sent (a reactive compaction after a context overflow uses ``runtime.compaction.policy``
    without asking).

    Bundled default (``compaction``): ``"none"`` when compaction is disabled or the request is
    under ``runtime.compaction.triggerRatio`` (80%) of the budget, else
    ``runtime.compaction.policy`` (default ``summary``).

    Example::

        @hookimpl
        def choose_compaction(turn, history_tokens, budget):
            return "truncate" if turn.request.channel == "cron" else None
    """


@hookspec(firstresult=True)
def prepare_provider_request(turn: Turn, request: ProviderRequest) -> ProviderRequest | None:
    """Before each provider call: return the request to send (the same one, or a changed copy).

    Args:
        turn: the turn.
        request: the request the harness built for this model step.

    Returns:
        The :class:`~monoagent.ProviderRequest` to send. First non-None result wins.
        To adjust the request rather than replace it, implement this hook as a new-style
        wrapper (``@hookimpl(wrapper=True)``): ``request = yield`` receives the result of the
        inner implementations and you return your changed copy. Wrappers are the right tool
        here because each plugin's change must see the others' (around-advice).

    Called before every provider step of a turn (the first call and each tool-loop round).

    Bundled default (``conversation``, trylast): returns ``request`` unchanged, so wrappers
    always receive a request.

    Example::

        @hookimpl(wrapper=True)
        def prepare_provider_request(turn, request):
            request = yield
            return attrs.evolve(request, max_output_tokens=1024)
    """


@hookspec
def after_provider_call(turn: Turn, request: ProviderRequest, outcome: StepOutcome) -> None:
    """Observe one finished provider step: its text, tool calls, usage and stop reason.

    Args:
        turn: the turn.
        request: the request that was sent.
        outcome: the :class:`~monoagent.StepOutcome` (text, tool calls, usage,
            stop reason, model).

    Returns:
        Nothing. Results are collected (and ignored).

    Called after every provider step that returned (not after a failed one: that is a
    ``run_failed`` event).

    Bundled default: none.

    Example::

        @hookimpl
        def after_provider_call(turn, request, outcome):
            metrics.observe(outcome.usage.output_tokens)
    """


@hookspec(firstresult=True)
def before_tool_call(turn: Turn, call: ToolCall) -> ToolResult | Awaitable[ToolResult | None] | None:
    """Vet a tool call before it runs; return a result to answer it without running the tool.
    May return an awaitable.

    Args:
        turn: the turn.
        call: the call the model requested (always a tool callable on this turn: a call to a
            tool that is not offered, or is hidden, is refused by the tool loop before this hook).

    Returns:
        None to let the tool run, or a :class:`~monoagent.ToolResult` (for example with
        status ``rejected``) that answers the call instead, or an awaitable of either, for an
        answer that has to wait (a person's approval). First non-None result wins. An awaitable
        is awaited before anything else happens; when it gives None, the call passes on: the
        hook is called again without the plugin that returned it, so every implementation after
        it still has its say (implementations before it, and wrappers, run again).

    Called before every tool call, in the turn's event loop; an await in an implementation holds
    the call (and so the run) until it returns.

    Bundled default (``permissions``, ``tryfirst``, not ``trylast``): enforces the turn's
    permission profile (``turn.permissions``). It runs before any other plugin's implementation
    (unless another is also marked ``tryfirst`` and loaded later, or is a wrapper), so a plugin
    that answers calls itself (a cache, a mock) never answers a call the profile refuses: under a
    restricted profile it decides each call's action categories, records a
    ``permission_decision`` event, answers a refused call with a ``rejected`` result naming the
    categories and the profile, and puts a call that needs approval to the request's approver
    (an awaitable answer). Blocking the plugin turns enforcement off (docs/permissions.md).

    Example::

        @hookimpl
        def before_tool_call(turn, call):
            if call.name == "shell":
                return ToolResult(call.id, call.name, "shell is disabled", ToolStatus.REJECTED)
    """


@hookspec(firstresult=True)
def save_tool_output(turn: Turn, result: ToolResult, block: ContentBlock) -> str | None:
    """Keep the original of one block of a tool result the bloat guard is about to cut.

    Args:
        turn: the turn (``run_id`` groups a run's originals).
        result: the oversized result, as the tool returned it (``call_id``, ``name``).
        block: one of its blocks (:class:`~monoagent.TextBlock`,
            :class:`~monoagent.ImageBlock` or :class:`~monoagent.BinaryBlock`;
            a result without blocks is offered as one text block of its ``content``).

    Returns:
        Where the original went (a path or a URL, shown to the model in the guard's notice), or
        None to leave it to the next implementation. First non-None result wins. Raise when
        saving failed (``OSError`` for the file system): the notice then says the original could
        not be saved, and why. When no implementation answers, the notice says the original was
        not saved; the output is bounded either way.

    Called by the tool-output bloat guard for every block of a result over 256 KB, in order,
    before the guarded result reaches ``after_tool_call``, events or the model. Keep it quick:
    it runs in the turn.

    Bundled default (``artifacts``): an owner-only file per block under
    ``<artifacts.dir>/tool-output/<runId>/`` named ``<n>-<call id>.<ext>`` (directories 0700,
    files 0600, never following a symlink); returns its path.

    Example::

        @hookimpl
        def save_tool_output(turn, result, block):
            if isinstance(block, TextBlock):
                return bucket.put(f"{turn.run_id}/{result.call_id}.txt", block.text.encode())
    """


@hookspec
def after_tool_call(turn: Turn, call: ToolCall, result: ToolResult) -> None:
    """Observe a finished tool call and its result (before the result goes back to the model).

    Args:
        turn: the turn.
        call: the call.
        result: its result, after the bloat guard.

    Returns:
        Nothing. Results are collected (and ignored).

    Called after every tool call, refused and failed ones included.

    Bundled default: none.

    Example::

        @hookimpl
        def after_tool_call(turn, call, result):
            audit_log.write(call.name, result.status)
    """


@hookspec(firstresult=True)
def redact(text: str, kind: str) -> str | None:
    """Redact secrets and filesystem paths from text that leaves the run (history, events).

    Args:
        text: the text to redact.
        kind: what it is: ``"tool_arguments"``, ``"tool_result"``, ``"error"``, ``"event"``, or
            ``"terminal"`` for everything the command line prints to a terminal.

    Returns:
        The redacted text. First non-None result wins. Redaction is a chain: implement this
        hook as a new-style wrapper (``@hookimpl(wrapper=True)``) to add a step that sees the
        result of the default (``text = yield``) and returns it further redacted; a plain
        implementation replaces the default redactor.

    Called on error details and tool payloads before they are stored or emitted, and on all
    terminal output (the bundled default keeps filesystem paths readable there).

    Bundled default (``redaction``, trylast): replaces API keys of the common providers, cloud
    keys, bearer tokens, JWTs, private-key blocks and credentials in URLs with
    ``[REDACTED:<kind>]``, and absolute filesystem paths with an opaque host-root token keeping
    at most two trailing components. Ordinary web URLs stay readable.

    Example::

        @hookimpl(wrapper=True)
        def redact(text, kind):
            text = yield
            return text.replace("ACME-INTERNAL", "[REDACTED:codename]")
    """


@hookspec
def after_commit(turn: Turn, result: TurnResult) -> Awaitable[None] | None:
    """Act on a committed turn: capture memory, index, notify. May return an awaitable.

    Args:
        turn: the turn (its ``request``, the recalled hits it must not capture).
        result: the committed :class:`~monoagent.TurnResult`.

    Returns:
        Nothing (or an awaitable the kernel awaits). Results are collected. An exception here
        is logged as a ``runtime_warning`` event and does not undo the commit.

    Called once per turn, only after the history store published the turn durably, also when a
    cancellation arrived during that commit (the run completes before the caller sees it).
    Never for turns that end with a continuity account (cancelled or failed before the commit,
    or whose commit failed).

    Bundled default (``memory``): captures the turn into every configured tier whose ``captures``
    is true (:class:`~monoagent.SelectiveMemoryTier`; a tier without it
    captures), attributed to its speaker (``User (Alice Chen (@alice)): ...`` then ``Assistant: ...``), from the user's
    own text only: never the recalled block, never preceding messages.

    Example::

        @hookimpl
        def after_commit(turn, result):
            return my_memory.add(f"User: {turn.request.text}\\nAssistant: {result.text}")
    """


@hookspec
def on_run_event(event: RunEvent, agent: Agent) -> None:
    """Observe every :class:`~monoagent.RunEvent` of every run.

    Args:
        event: the event (``type``, ``run_id``, ``conversation_id``, ``seq``, ``at``, ``data``).
        agent: the Agent whose run emitted it (a plugin module may serve several Agents).

    Returns:
        Nothing. Results are collected (and ignored). An observer that raises is reported once
        on the log and does not stop the run.

    Called synchronously as each event is emitted, in ``seq`` order; keep it quick. A run the
    harness refused at admission (``concurrency.maxPendingRuns``) has one event,
    ``admission_rejected``, and no ``run_started``: it never started.

    Bundled default (``artifacts``): appends each event except ``text_delta`` to the run's
    JSONL file ``<artifacts.dir>/runs/<runId>.jsonl`` (the prompt manifest included).

    Example::

        @hookimpl
        def on_run_event(event):
            if event.type == "run_failed":
                pager.alert(event.data["error"])
    """


#: The section catalogue: the :class:`~monoagent.SectionSpec` of every section hook, by order.
SECTIONS: tuple[SectionSpec, ...] = catalogue(list(globals().values()))
