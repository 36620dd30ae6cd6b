"""Configuration: the kernel's keys, and :func:`setting`, with which the kernel and plugins declare keys.

Keys are the documented camelCase keys (``context.identityPath``, ``runtime.maxTurns``,
``providers.client.maxRetries``) of attrs classes, one class per table; the Python
attributes are their snake_case spellings. Every field carries its documentation, its allowed
values and its environment variable in attrs metadata (:func:`setting`), which drives
validation, ``monoagent config init``, ``config show`` and the configuration reference in the
docs. Plugins declare their own keys the same way (the ``register_config_sections`` hook).

The rest of the machinery lives beside this module: :mod:`monoagent._kernel.config_keys`
describes, validates and structures keys; :mod:`monoagent._kernel.config_loading` finds the file,
overlays the ``MONO_AGENT_*`` variables (env > file > defaults) and builds the :class:`Config`.
Keys and variables that were renamed keep working under their old names for a while
(:data:`RENAMED_KEYS`, :data:`RENAMED_ENV`), each with a warning naming the new one.
"""

from __future__ import annotations

import functools
import os
import re
import typing
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

import attrs

CONFIG_FILENAME = "monoagent.toml"
ENV_PREFIX = "MONO_AGENT_"
STATE_DIRNAME = ".mono-agent"
MODEL_SPEC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:\S+$")
S = TypeVar("S")
"""A plugin's configuration section class (:meth:`Config.section`)."""


def setting(
    default: Any = attrs.NOTHING,
    *,
    doc: str,
    env: str | None = None,
    min: float | None = None,
    max: float | None = None,
    allowed: str | Collection[Any] | None = None,
    check: typing.Callable[[Any], str | None] | None = None,
    factory: typing.Callable[[], Any] | None = None,
    example: Any = None,
    secret: bool = False,
    home_default: str | None = None,
) -> Any:
    """An attrs field with the metadata the loader, the docs and ``config init`` read.

    ``min`` and ``max`` bound a number; ``check(value)`` returns why a value is wrong, or None.
    ``allowed`` is either the values the key may take (a tuple, list or set: enforced, and
    shown as "one of ..."; for a list key, each item), or a sentence that describes what
    ``min``/``max`` or ``check`` enforce, shown instead of the derived description. A sentence
    that nothing enforces is refused (``TypeError``): what the docs call allowed is what
    validation allows. ``secret`` marks a credential: ``config show`` says whether it is set,
    never its value. ``home_default`` marks a directory key of a plugin whose unset value points to
    ``<home>/<home_default>``: :meth:`Config.path` resolves it (set: against the config file's
    directory), and ``config show`` and ``monoagent info`` show where it points.

    The result is typed ``Any``, the convention of attrs' own stubs for a field whose type they
    cannot tell from its arguments: it is assigned to a field of any type (``port: int =
    setting(8080, doc=...)``), whose annotation is the type mypy knows. ``default``, ``example``
    and what ``check`` and ``factory`` take or give are values of that field's type, so they are
    ``Any`` too.
    """
    allowed_values: tuple[Any, ...] | None = None
    if isinstance(allowed, str):
        if min is None and max is None and check is None:
            raise TypeError(
                f"setting(allowed={allowed!r}) for {doc[:60]!r}: a description of what is allowed needs min, max or "
                f"check to enforce it; to allow a fixed set of values, pass them as a tuple (allowed=('a', 'b'))"
            )
    elif allowed is not None:
        allowed_values, allowed = tuple(allowed), None
    metadata = {
        "doc": doc, "env": env, "min": min, "max": max, "allowed": allowed, "allowed_values": allowed_values,
        "check": check, "example": example,
    }
    if secret:
        metadata["secret"] = True
    if home_default is not None:
        metadata["home_default"] = home_default
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def _check_timezone(value: str | None) -> str | None:
    if value is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        return "not a known IANA time zone (for example 'UTC' or 'Europe/Berlin')"
    return None


def check_model(value: str | None) -> str | None:
    if value is not None and not MODEL_SPEC.match(value):
        return "must be '<provider>:<model>', for example 'offline:echo' or 'anthropic:claude-sonnet-4-6'"
    return None


def check_models(value: list[str]) -> str | None:
    for item in value:
        problem = check_model(item)
        if problem:
            return f"{item!r} {problem}"
    return None


@attrs.define
class ContextConfig:
    """Inputs of prompt assembly: the agent home, and the bootstrap files with their budgets.
    The skill keys of this table (``context.skillsRoot``, ...) are declared by the plugin that reads them.
    """

    identity_path: Path | None = setting(
        None,
        doc="IDENTITY.md, the identity section of the system prompt. Unset: the agent home's IDENTITY.md, "
        "written with a default identity when missing.",
        env="MONO_AGENT_IDENTITY_PATH",
        example="IDENTITY.md",
    )
    soul_path: Path | None = setting(
        None,
        doc="SOUL.md, the core guardrails section that opens the system prompt. Unset: the agent home's SOUL.md, "
        "else the built-in default soul.",
        env="MONO_AGENT_SOUL_PATH",
        example="SOUL.md",
    )
    user_path: Path | None = setting(
        None,
        doc="Optional USER.md rendered as the user persona section. Unset: the agent home's USER.md if present.",
        env="MONO_AGENT_USER_PATH",
    )
    home: Path | None = setting(
        None,
        doc="Agent home: bootstrap files and default state. Unset: <config dir>/.mono-agent, or the platform data dir without a config file.",
        env="MONO_AGENT_HOME",
    )
    bootstrap_max_chars: int = setting(
        20000, doc="Cap on each bootstrap file (SOUL.md, IDENTITY.md, USER.md), in characters (a file larger than 4 bytes per character of this budget is not read).",
        env="MONO_AGENT_BOOTSTRAP_MAX_CHARS", min=64, max=1_000_000,
    )
    bootstrap_total_max_chars: int = setting(
        60000, doc="Cap on all bootstrap files together, in characters.",
        env="MONO_AGENT_BOOTSTRAP_TOTAL_MAX_CHARS", min=64, max=3_000_000,
    )
    profile: Literal["full", "minimal", "none"] = setting(
        "full",
        doc="Prompt profile: full renders every configured section; minimal only core guardrails, identity and the "
        "session block (subagents, cron jobs, narrow turns); none sends no system prompt. A request's profile overrides it.",
        env="MONO_AGENT_CONTEXT_PROFILE",
    )


@attrs.define
class SessionConfig:
    """Provider sessions: warmth, where sessions live and conversation bucketing (runtime.session).
    A session backend's own keys of this table (``runtime.session.transcriptsDir``, ...) are declared by its plugin.
    """

    mode: Literal["continuous", "per-message"] = setting(
        "continuous", doc="continuous keeps a warm provider session per conversation; per-message rebuilds context each turn.",
        env="MONO_AGENT_SESSION_MODE",
    )
    idle_timeout_ms: int = setting(
        1_800_000, doc="How long a warm session lingers before idle eviction (ms); 0 keeps none, so every turn starts cold.",
        env="MONO_AGENT_SESSION_IDLE_TIMEOUT_MS", min=0, max=7 * 24 * 3_600_000,
    )
    rollover: Literal["none", "daily"] = setting(
        "none", doc="Whether conversation ids are bucketed by local day (never on the console channel).",
        env="MONO_AGENT_SESSION_ROLLOVER",
    )
    rollover_timezone: str | None = setting(
        None, doc="IANA time zone of the daily bucket. Unset: the system's local time zone.",
        env="MONO_AGENT_SESSION_ROLLOVER_TIMEZONE", check=_check_timezone,
    )
    rollover_notice: bool = setting(
        False, doc="Prefix the first answer of a new daily bucket with 'New session bucket started: <bucket>.'",
        env="MONO_AGENT_SESSION_ROLLOVER_NOTICE",
    )
    isolate_proactive: bool = setting(
        False, doc="Proactive turns (TurnRequest.proactive, run --proactive) run isolated: outside the warm session, committing nothing to history.",
        env="MONO_AGENT_SESSION_ISOLATE_PROACTIVE",
    )
    backend: str = setting(
        "memory", doc="Registered session backend that keeps the warm sessions: memory (this process only, lost on "
        "restart) or files (durable transcripts under runtime.session.transcriptsDir, shared by processes). Left unset "
        "while runtime.session.transcriptsDir is set, it is files.",
        env="MONO_AGENT_SESSION_BACKEND",
    )


@attrs.define
class CompactionConfig:
    """History compaction (runtime.compaction): whether, which policy, and the history budget.
    The policies' own keys of this table (``runtime.compaction.triggerRatio``, ...) are declared by their plugin.
    """

    enabled: bool = setting(True, doc="Whether history is compacted when it nears the budget.", env="MONO_AGENT_COMPACTION_ENABLED")
    policy: str = setting("summary", doc="Registered compaction policy to use.", env="MONO_AGENT_COMPACTION_POLICY")
    context_window_override: int | None = setting(
        None, doc="The model's context window in tokens, overriding the provider's figure.",
        env="MONO_AGENT_COMPACTION_CONTEXT_WINDOW_OVERRIDE", min=1024, max=100_000_000,
    )
    response_reserve_tokens: int = setting(
        4096, doc="Tokens kept free for the answer: history budget = context window - reserve.",
        env="MONO_AGENT_COMPACTION_RESPONSE_RESERVE_TOKENS", min=0, max=10_000_000,
    )


@attrs.define
class RuntimeConfig:
    """The model and the shape of a run."""

    model: str | None = setting(
        None, doc="'<provider>:<model>'. Unset: offline:echo, announced on stderr by the CLI.",
        env="MONO_AGENT_MODEL", check=check_model, example="anthropic:claude-sonnet-4-6",
    )
    max_turns: int = setting(
        0, doc="Provider steps per run; 0 = unlimited, 1-100 caps it. When tool rounds have used all but the last "
        "step, that last step is sent without tools and with the final-answer instruction, so the run ends with an "
        "answer; a model that still calls tools then fails the run.", env="MONO_AGENT_MAX_TURNS",
        min=0, max=100, allowed="0 (unlimited) or 1 to 100",
    )
    fallbacks: list[str] = setting(
        doc="Ordered backup models tried on a retryable failure (env: comma-separated).",
        env="MONO_AGENT_FALLBACKS", check=check_models, factory=list,
    )
    run_timeout_ms: int = setting(
        3_600_000, doc="Deadline of one run's provider and tool loop (ms): steps, retries, fallbacks and tool calls "
        "together; a run still going then fails with settlement run_deadline.",
        env="MONO_AGENT_RUN_TIMEOUT_MS", min=10, max=7 * 24 * 3_600_000,
    )
    max_repeated_tool_calls: int = setting(
        5, doc="How many times in a row the model may call one tool with the same arguments, or repeat one cycle of "
        "up to 16 such calls (A, B, A, B, ...); the next identical call is not run and the run fails with settlement "
        "repeated_tool_call. 0 = no limit.",
        env="MONO_AGENT_MAX_REPEATED_TOOL_CALLS", min=0, max=1000,
    )
    max_continuations: int = setting(
        1, doc="How many more provider steps a run may spend continuing a reply that stopped at the output-token "
        "limit (stop reason max_tokens); the answer is the cut-off reply and its continuations joined. 0 = keep the "
        "cut-off reply as the answer.", env="MONO_AGENT_MAX_CONTINUATIONS", min=0, max=8,
    )
    session: SessionConfig = attrs.field(factory=SessionConfig)
    compaction: CompactionConfig = attrs.field(factory=CompactionConfig)


@attrs.define
class ConcurrencyConfig:
    """Admission and execution bounds, per harness (one harness per channel)."""

    max_concurrent_runs: int = setting(
        4, doc="Runs calling the provider at once (execution width).",
        env="MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS", min=1, max=1024,
    )
    max_pending_runs: int = setting(
        16, doc="Runs admitted and waiting for an execution slot before new work is rejected.",
        env="MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS", min=0, max=100_000,
    )


@attrs.define
class ProviderClientConfig:
    """How every provider route is called: the transport, retries and the bounds of one stream."""

    transport: Literal["auto", "sse", "websocket", "websocket-cached"] = setting(
        "auto", doc="Preferred transport; providers without several transports use their default.",
        env="MONO_AGENT_PROVIDER_TRANSPORT",
    )
    prompt_cache_diagnostics: bool = setting(
        False, doc="Metadata-only request fingerprints in the run's event file.",
        env="MONO_AGENT_PROMPT_CACHE_DIAGNOSTICS",
    )
    max_retries: int = setting(
        2, doc="Retries of transient provider failures.", env="MONO_AGENT_PROVIDER_MAX_RETRIES", min=0, max=8,
    )
    max_retry_delay_ms: int = setting(
        60_000, doc="Cap on the backoff between retries (ms).", env="MONO_AGENT_MAX_RETRY_DELAY_MS",
        min=0, max=3_600_000,
    )
    stream_idle_timeout_ms: int = setting(
        300_000, doc="Longest wait for progress in one provider stream (ms): text, tool-call arguments or the end; "
        "pings and keep-alives do not count. Retryable.",
        env="MONO_AGENT_PROVIDER_STREAM_IDLE_TIMEOUT_MS", min=10, max=3_600_000,
    )
    stream_timeout_ms: int = setting(
        1_800_000, doc="Deadline of one provider stream, from the request to its last event (ms). Not retryable.",
        env="MONO_AGENT_PROVIDER_STREAM_TIMEOUT_MS", min=10, max=24 * 3_600_000,
    )
    max_stream_bytes: int = setting(
        16 * 1024 * 1024, doc="Cap on the model output of one provider stream: text, tool-call arguments and "
        "reasoning, in UTF-8 bytes. Not retryable.",
        env="MONO_AGENT_PROVIDER_MAX_STREAM_BYTES", min=1024, max=1 << 30,
    )
    max_stream_event_bytes: int = setting(
        4 * 1024 * 1024, doc="Cap on one line, and one event, of a provider's HTTP stream in bytes, enforced while "
        "it is read. Not retryable.",
        env="MONO_AGENT_PROVIDER_MAX_STREAM_EVENT_BYTES", min=1024, max=256 * 1024 * 1024,
    )


@attrs.define
class ProvidersConfig:
    """Provider settings. Provider plugins add their own subsections (providers.<name>)."""

    client: ProviderClientConfig = attrs.field(factory=ProviderClientConfig)


#: Keys that were renamed, old path -> new path, still read under the old path with a warning
#: (:mod:`monoagent._kernel.config_loading`). A path may name a table: every key in it moves to
#: the same key of the new table, unless an entry of its own says otherwise.
RENAMED_KEYS: dict[str, str] = {
    "providers.piNative": "providers.client",
    "providers.piNative.piMaxRetries": "providers.client.maxRetries",
    "providers.piNative.piSessionsRoot": "runtime.session.transcriptsDir",
}

#: Keys that, set while another key is not, select a value for that one (key -> (implied key, value)):
#: what the key did before the implied key existed. Applied only while the key's owner is active
#: (:func:`monoagent._kernel.config_loading.build_config`); ``config show`` names the implying key as the source.
IMPLIED_KEYS: dict[str, tuple[str, Any]] = {
    "runtime.session.transcriptsDir": ("runtime.session.backend", "files"),
}

#: Environment variables that were renamed, old name -> new name, still read with a warning.
RENAMED_ENV: dict[str, str] = {
    "MONO_AGENT_PI_TRANSPORT": "MONO_AGENT_PROVIDER_TRANSPORT",
    "MONO_AGENT_PI_PROMPT_CACHE_DIAGNOSTICS": "MONO_AGENT_PROMPT_CACHE_DIAGNOSTICS",
    "MONO_AGENT_PI_MAX_RETRIES": "MONO_AGENT_PROVIDER_MAX_RETRIES",
    "MONO_AGENT_PI_SESSIONS_ROOT": "MONO_AGENT_SESSION_TRANSCRIPTS_DIR",
    "MONO_AGENT_PI_STREAM_IDLE_TIMEOUT_MS": "MONO_AGENT_PROVIDER_STREAM_IDLE_TIMEOUT_MS",
    "MONO_AGENT_PI_STREAM_TIMEOUT_MS": "MONO_AGENT_PROVIDER_STREAM_TIMEOUT_MS",
    "MONO_AGENT_PI_MAX_STREAM_BYTES": "MONO_AGENT_PROVIDER_MAX_STREAM_BYTES",
    "MONO_AGENT_PI_MAX_STREAM_EVENT_BYTES": "MONO_AGENT_PROVIDER_MAX_STREAM_EVENT_BYTES",
}


HISTORY_BESIDE = "artifacts.dir"
"""The path key ``history.dir`` defaults beside (``history/`` next to that directory): the ``artifacts``
plugin's, read through :meth:`Config.path`; ``<home>/artifacts`` when no active plugin declares it."""


@attrs.define
class HistoryConfig:
    """The conversation-history store: which one, and the history directory.
    The store's own limits (``history.maxMessages``, ...) are declared by the store's plugin.
    """

    store: str = setting("files", doc="Registered history store to use.", env="MONO_AGENT_HISTORY_STORE")
    dir: Path | None = setting(
        None, doc="Directory of the files store. Unset: history/ next to artifacts.dir.", env="MONO_AGENT_HISTORY_DIR",
    )


@attrs.define
class ToolHistoryStoreConfig:
    """Tool-call history: which registered store records every managed tool call.

    The store's own settings (``toolHistory.maxCalls``, ...) are declared by the store's plugin.
    """

    store: str = setting(
        "sqlite", doc="Registered tool-history store to use; \"none\" records no tool calls.",
        env="MONO_AGENT_TOOL_HISTORY_STORE",
    )
    enabled: bool = setting(
        True, doc="Record managed tool calls; false is the same as store = \"none\".", env="MONO_AGENT_TOOL_HISTORY_ENABLED",
    )


@attrs.define
class MemoryConfig:
    """Long-term memory tiers (selected by name from the memory-tier registry).
    Where the tiers keep their data (``memory.path``) is declared by the ``memory`` plugin.
    """

    tiers: list[str] = setting(doc="Memory tiers to use; empty = no memory.", env="MONO_AGENT_MEMORY_TIERS", factory=list)


@attrs.define
class PluginsConfig:
    """Which project-local plugins to load and which plugins to block."""

    paths: list[Path] = setting(
        doc="Plugin files, or directories of *.py files, loaded after entry points.", factory=list,
    )
    block: list[str] = setting(
        doc="Plugin names never imported, bundled ones included (e.g. ['identity']).",
        env="MONO_AGENT_BLOCK_PLUGINS", factory=list,
    )
    local_failures: Literal["fatal", "warn"] = setting(
        "fatal",
        doc="A project-local plugin file (monoagent_local.py, plugins.paths, --plugins-dir) that fails to load: "
        "fatal ends every command but `monoagent plugins` with exit 3 and makes Agent(...) raise LocalPluginError; "
        "warn records it as failed, warns and goes on without it, as for installed plugins.",
        env="MONO_AGENT_LOCAL_PLUGIN_FAILURES",
    )


@attrs.define
class Config:
    """The whole configuration. ``sections`` holds plugin-declared sections by key path.

    Each section is an instance of the attrs class its plugin registered, a different class per
    path: ``sections`` and the one-argument :meth:`section` are therefore typed ``Any`` (the
    plugins read their own section's attributes, or hand it to ``attrs.evolve``); pass the class
    to :meth:`section` for a typed, checked read.

    ``warnings`` lists what validation let through but a user should hear about (the sections
    of plugins that are blocked or failed to load, keys and variables set under an old name);
    the Agent prints them.
    """

    runtime: RuntimeConfig = attrs.field(factory=RuntimeConfig)
    context: ContextConfig = attrs.field(factory=ContextConfig)
    concurrency: ConcurrencyConfig = attrs.field(factory=ConcurrencyConfig)
    providers: ProvidersConfig = attrs.field(factory=ProvidersConfig)
    history: HistoryConfig = attrs.field(factory=HistoryConfig)
    tool_history: ToolHistoryStoreConfig = attrs.field(factory=ToolHistoryStoreConfig)
    memory: MemoryConfig = attrs.field(factory=MemoryConfig)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)

    source_file: Path | None = attrs.field(default=None, metadata={"internal": True})
    base_dir: Path = attrs.field(factory=Path.cwd, metadata={"internal": True})
    sources: dict[str, str] = attrs.field(factory=dict, metadata={"internal": True}, repr=False)
    sections: dict[str, Any] = attrs.field(factory=dict, metadata={"internal": True})
    warnings: list[str] = attrs.field(factory=list, metadata={"internal": True}, repr=False)

    @overload
    def section(self, path: str) -> Any: ...

    @overload
    def section(self, path: str, cls: type[S]) -> S: ...

    def section(self, path: str, cls: type[S] | None = None) -> Any:
        """A plugin's config section: the instance of the attrs class it registered for ``path``.

        Pass that class as ``cls`` and the section is typed (``config.section("greeter",
        GreeterConfig)`` is a ``GreeterConfig`` to mypy); a section of another class is then a
        ``TypeError`` naming both, rather than an attribute error later. A path no active plugin
        declared is a ``KeyError`` naming it.
        """
        try:
            found = self.sections[path]
        except KeyError:
            raise KeyError(f"no plugin declared the configuration section {path!r}") from None
        if cls is not None and not isinstance(found, cls):
            raise TypeError(f"the configuration section {path!r} is a {type(found).__name__}, not a {cls.__name__}")
        return found

    def resolve(self, path: Path | str) -> Path:
        """A configured path made absolute: relative paths are relative to the config file's dir.

        The answer is kept for the same directory and path: plugins resolve their files every turn."""
        return _configured_path(self.base_dir, path)

    @property
    def home(self) -> Path:
        return _home(self.base_dir, self.source_file, self.context.home) or _platform_home()

    @property
    def history_dir(self) -> Path:
        """``history.dir`` resolved, else ``history/`` next to :data:`HISTORY_BESIDE` (``artifacts.dir``)."""
        if self.history.dir:
            return _configured_path(self.base_dir, self.history.dir)
        try:
            beside = self.path(HISTORY_BESIDE)
        except KeyError:
            beside = _child(self.home, "artifacts")
        return _sibling(beside, "history")

    def path(self, key: str) -> Path:
        """Where the plugin path key ``key`` (``artifacts.dir``, ``memory.path``) points: its value resolved
        against the config file's directory, else ``<home>/<home_default>``.

        A plugin declares such a key in its section with ``setting(..., home_default=...)``; any
        plugin reads it by its documented path, without importing its owner. Raises ``KeyError``
        naming the key when no active plugin declares it (its plugin is blocked or not installed).
        """
        section_path, _, leaf = key.rpartition(".")
        section = self.sections.get(section_path)
        cls: type = type(section)
        name_and_default = _path_key(cls, leaf) if section is not None else None
        if name_and_default is None:
            raise KeyError(f"no active plugin declares the path key {key!r}")
        name, default = name_and_default
        value = getattr(section, name)
        return _configured_path(self.base_dir, value) if value else _child(self.home, default)

    def default_paths(self) -> dict[str, Path]:
        """Where each path key points, by key path: the kernel's, then the plugins' (each declared with
        ``home_default``); ``config show`` and ``info`` print them.

        A key that is set is still listed, resolved: these are the paths the agent uses.
        """
        home = self.home
        paths = {
            "context.home": home,
            "context.soulPath": self.resolve(self.context.soul_path) if self.context.soul_path else home / "SOUL.md",
            "context.identityPath": self.resolve(self.context.identity_path) if self.context.identity_path else home / "IDENTITY.md",
            "context.userPath": self.resolve(self.context.user_path) if self.context.user_path else home / "USER.md",
            "history.dir": self.history_dir,
        }
        for section_path, section in self.sections.items():
            cls: type = type(section)
            for leaf in _path_keys(cls):
                paths[f"{section_path}.{leaf}"] = self.path(f"{section_path}.{leaf}")
        return paths


# The path properties are read many times a turn (every run event asks for the artifacts
# directory); they are pure functions of a few settings, so they are memoised: pathlib's parsing
# and joining cost microseconds a call. Only the platform's data directory is worked out again
# each time, since it follows the environment (XDG_DATA_HOME).


@functools.lru_cache(maxsize=256)
def _path_keys(cls: type) -> dict[str, tuple[str, str]]:
    """The path keys of a section class declared with ``home_default``: camelCase key -> (attribute, default name)."""
    if not attrs.has(cls):
        return {}
    from monoagent._kernel.config_keys import camel

    return {camel(a.name): (a.name, a.metadata["home_default"]) for a in attrs.fields(cls) if "home_default" in a.metadata}


def _path_key(cls: type, leaf: str) -> tuple[str, str] | None:
    return _path_keys(cls).get(leaf)


def _resolve(base_dir: Path, path: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else base_dir / path


@functools.lru_cache(maxsize=256)
def _home(base_dir: Path, source_file: Path | None, home: Path | None) -> Path | None:
    """The configured agent home, or None when it is the platform's data directory."""
    if home is not None:
        return _resolve(base_dir, Path(home))
    if source_file is not None:
        return base_dir / STATE_DIRNAME
    return None


def _platform_home() -> Path:
    import platformdirs

    return platformdirs.user_data_path("monoagent")


def _configured_path(base_dir: Path, path: str | Path) -> Path:
    """:func:`_resolve` of a configured path, kept for the same directory and path (a plugin reads its
    path keys every turn); a path under ``~`` follows ``HOME`` and is worked out each time."""
    text = os.fspath(path)
    if text.startswith("~"):
        return _resolve(base_dir, Path(text))
    return _kept_path(base_dir, text)


@functools.lru_cache(maxsize=256)
def _kept_path(base_dir: Path, text: str) -> Path:
    return _resolve(base_dir, Path(text))


@functools.lru_cache(maxsize=256)
def _child(parent: Path, name: str) -> Path:
    return parent / name


@functools.lru_cache(maxsize=256)
def _sibling(path: Path, name: str) -> Path:
    return path.parent / name
