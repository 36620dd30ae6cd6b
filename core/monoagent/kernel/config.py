"""Configuration: attrs classes, loaded from TOML or JSON, overlaid by ``MONO_AGENT_*`` variables.

Precedence is env > file > defaults. Keys are the documented camelCase keys
(``context.identityPath``, ``runtime.maxTurns``, ``providers.piNative.piMaxRetries``); the
Python attributes are their snake_case spellings. Every field carries its documentation, its
allowed values and its environment variable in attrs metadata, which drives validation,
``monoagent config init``, ``config show`` and the configuration reference in the docs.

Validation happens on the raw data before it is structured, so that each problem names the key
path, the value, where the value came from (the file or the env var) and what is allowed.
cattrs then structures the checked data (and unstructures it for ``config show``).
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from monoagent.kernel.errors import ConfigError

CONFIG_FILENAME = "monoagent.toml"
ENV_PREFIX = "MONO_AGENT_"
STATE_DIRNAME = ".mono-agent"
SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MODEL_SPEC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:\S+$")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def setting(
    default: Any = attrs.NOTHING,
    *,
    doc: str,
    env: str | None = None,
    min: float | None = None,
    max: float | None = None,
    allowed: str | None = None,
    check: typing.Callable[[Any], str | None] | None = None,
    factory: typing.Callable[[], Any] | None = None,
    example: Any = None,
    secret: bool = False,
) -> Any:
    """An attrs field with the metadata the loader, the docs and ``config init`` read.

    ``secret`` marks a credential: ``config show`` says whether it is set, never its value.
    """
    metadata = {"doc": doc, "env": env, "min": min, "max": max, "allowed": allowed, "check": check, "example": example}
    if secret:
        metadata["secret"] = True
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


def _check_skills(value: list[str]) -> str | None:
    bad = [name for name in value if not SKILL_NAME.match(name)]
    if bad:
        return f"skill names must be directory names of letters, digits, '.', '_' or '-' (got {bad!r})"
    return None


def _check_model(value: str | None) -> str | None:
    if value is not None and not MODEL_SPEC.match(value):
        return "must be '<provider>:<model>', for example 'offline:echo' or 'anthropic:claude-sonnet-4-6'"
    return None


def _check_models(value: list[str]) -> str | None:
    for item in value:
        problem = _check_model(item)
        if problem:
            return f"{item!r} {problem}"
    return None


@attrs.define
class ContextConfig:
    """Inputs of prompt assembly: identity, soul, skills and their budgets."""

    identity_path: Path | None = setting(
        None,
        doc="IDENTITY.md for section 2. Unset: the agent home's IDENTITY.md, created from seed text when missing.",
        env="MONO_AGENT_IDENTITY_PATH",
        example="IDENTITY.md",
    )
    soul_path: Path | None = setting(
        None,
        doc="SOUL.md for section 1 (core guardrails). Unset: the agent home's SOUL.md, else the built-in default soul.",
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
    skills_root: Path | None = setting(
        None, doc="Directory holding <name>/SKILL.md. Unset: <home>/skills.", env="MONO_AGENT_SKILLS_ROOT"
    )
    selected_skills: list[str] = setting(
        doc="Skills to load, by directory name; there is no auto-selection (env: comma-separated).",
        env="MONO_AGENT_SELECTED_SKILLS",
        check=_check_skills,
        factory=list,
    )
    skill_max_bytes: int = setting(
        48000, doc="Cap on each skill's instruction body, in UTF-8 bytes (a SKILL.md over this + 64 KiB is not read).",
        env="MONO_AGENT_SKILL_MAX_BYTES",
        min=256, max=1_000_000,
    )
    bootstrap_max_chars: int = setting(
        20000, doc="Cap on each bootstrap file (SOUL.md, IDENTITY.md, USER.md), in characters (a file larger than 4 bytes per character of this budget is not read).",
        env="MONO_AGENT_BOOTSTRAP_MAX_CHARS", min=64, max=1_000_000,
    )
    bootstrap_total_max_chars: int = setting(
        60000, doc="Cap on all bootstrap files together, in characters.",
        env="MONO_AGENT_BOOTSTRAP_TOTAL_MAX_CHARS", min=64, max=3_000_000,
    )


@attrs.define
class SessionConfig:
    """Provider-session warmth and conversation bucketing (runtime.session)."""

    mode: Literal["continuous", "per-message"] = setting(
        "continuous", doc="continuous keeps a warm provider session per conversation; per-message rebuilds context each turn.",
        env="MONO_AGENT_SESSION_MODE",
    )
    idle_timeout_ms: int = setting(
        1_800_000, doc="How long a warm session lingers before idle eviction (ms).",
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
        False, doc="Proactive turns skip the conversation's warm provider session.",
        env="MONO_AGENT_SESSION_ISOLATE_PROACTIVE",
    )


@attrs.define
class CompactionConfig:
    """History compaction (runtime.compaction)."""

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
    trigger_ratio: float = setting(
        0.8, doc="Fraction of the history budget at which compaction starts.",
        env="MONO_AGENT_COMPACTION_TRIGGER_RATIO", min=0.05, max=1.0,
    )
    target_ratio: float = setting(
        0.1, doc="Fraction of the history budget the summary aims at.",
        env="MONO_AGENT_COMPACTION_TARGET_RATIO", min=0.01, max=0.9,
    )
    summary_model: str | None = setting(
        None, doc="Model that writes summaries. Unset: the turn's model.",
        env="MONO_AGENT_COMPACTION_SUMMARY_MODEL", check=_check_model,
    )


@attrs.define
class RuntimeConfig:
    """The model and the shape of a run."""

    model: str | None = setting(
        None, doc="'<provider>:<model>'. Unset: offline:echo, announced on stderr by the CLI.",
        env="MONO_AGENT_MODEL", check=_check_model, example="anthropic:claude-sonnet-4-6",
    )
    max_turns: int = setting(
        0, doc="Provider steps per run; 0 = unlimited, 1-100 caps it.", env="MONO_AGENT_MAX_TURNS",
        min=0, max=100, allowed="0 (unlimited) or 1 to 100",
    )
    fallbacks: list[str] = setting(
        doc="Ordered backup models tried on a retryable failure (env: comma-separated).",
        env="MONO_AGENT_FALLBACKS", check=_check_models, factory=list,
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
class PiNativeConfig:
    """Transport tuning for every provider route (providers.piNative)."""

    transport: Literal["auto", "sse", "websocket", "websocket-cached"] = setting(
        "auto", doc="Preferred transport; providers without several transports use their default.",
        env="MONO_AGENT_PI_TRANSPORT",
    )
    prompt_cache_diagnostics: bool = setting(
        False, doc="Metadata-only request fingerprints in the run's event file.",
        env="MONO_AGENT_PI_PROMPT_CACHE_DIAGNOSTICS",
    )
    pi_max_retries: int = setting(
        2, doc="Retries of transient provider failures.", env="MONO_AGENT_PI_MAX_RETRIES", min=0, max=8,
    )
    max_retry_delay_ms: int = setting(
        60_000, doc="Cap on the backoff between retries (ms).", env="MONO_AGENT_MAX_RETRY_DELAY_MS",
        min=0, max=3_600_000,
    )
    pi_sessions_root: Path | None = setting(
        None, doc="Durable provider-session store; unset = in-memory.", env="MONO_AGENT_PI_SESSIONS_ROOT",
    )
    stream_idle_timeout_ms: int = setting(
        300_000, doc="Longest wait for progress in one provider stream (ms): text, tool-call arguments or the end; "
        "pings and keep-alives do not count. Retryable.",
        env="MONO_AGENT_PI_STREAM_IDLE_TIMEOUT_MS", min=10, max=3_600_000,
    )
    stream_timeout_ms: int = setting(
        1_800_000, doc="Deadline of one provider stream, from the request to its last event (ms). Not retryable.",
        env="MONO_AGENT_PI_STREAM_TIMEOUT_MS", min=10, max=24 * 3_600_000,
    )
    max_stream_bytes: int = setting(
        16 * 1024 * 1024, doc="Cap on the model output of one provider stream: text, tool-call arguments and "
        "reasoning, in UTF-8 bytes. Not retryable.",
        env="MONO_AGENT_PI_MAX_STREAM_BYTES", min=1024, max=1 << 30,
    )
    max_stream_event_bytes: int = setting(
        4 * 1024 * 1024, doc="Cap on one line, and one event, of a provider's HTTP stream in bytes, enforced while "
        "it is read. Not retryable.",
        env="MONO_AGENT_PI_MAX_STREAM_EVENT_BYTES", min=1024, max=256 * 1024 * 1024,
    )


@attrs.define
class ProvidersConfig:
    """Provider settings. Provider plugins add their own subsections (providers.<name>)."""

    pi_native: PiNativeConfig = attrs.field(factory=PiNativeConfig)


@attrs.define
class HistoryConfig:
    """The conversation-history store."""

    store: str = setting("files", doc="Registered history store to use.", env="MONO_AGENT_HISTORY_STORE")
    dir: Path | None = setting(
        None, doc="Directory of the files store. Unset: history/ next to artifacts.dir.", env="MONO_AGENT_HISTORY_DIR",
    )
    max_messages: int = setting(
        64, doc="Messages retained per conversation (the newest).", env="MONO_AGENT_HISTORY_MAX_MESSAGES",
        min=1, max=10_000,
    )
    max_message_bytes: int = setting(
        64 * 1024, doc="Cap of one serialized message in bytes; longer content is cut UTF-8-safely with a marker and the original byte count.",
        env="MONO_AGENT_HISTORY_MAX_MESSAGE_BYTES", min=1024, max=16 * 1024 * 1024,
    )
    max_bytes: int = setting(
        256 * 1024 * 1024, doc="Aggregate bytes of all retained records; the oldest inactive conversations are pruned beyond it.",
        env="MONO_AGENT_HISTORY_MAX_BYTES", min=64 * 1024, max=1 << 40,
    )
    max_conversations: int = setting(
        10_000, doc="Retained conversations (records); the oldest inactive ones are pruned beyond it.",
        env="MONO_AGENT_HISTORY_MAX_CONVERSATIONS", min=1, max=10_000_000,
    )
    max_inactive_days: float = setting(
        365, doc="Days without a commit after which a conversation is pruned.",
        env="MONO_AGENT_HISTORY_MAX_INACTIVE_DAYS", min=0.001, max=36_500,
    )
    max_stage_bytes: int = setting(
        256 * 1024 * 1024, doc="Aggregate bytes of live unpublished stages (prepared or crash-abandoned turns).",
        env="MONO_AGENT_HISTORY_MAX_STAGE_BYTES", min=64 * 1024, max=1 << 40,
    )


@attrs.define
class ToolHistoryStoreConfig:
    """Tool-call history: which registered store records every managed tool call.

    The selected store's plugin may declare further keys in this table (the bundled ``sqlite``
    store's are listed under the plugin sections below).
    """

    store: str = setting(
        "sqlite", doc="Registered tool-history store to use; \"none\" records no tool calls.",
        env="MONO_AGENT_TOOL_HISTORY_STORE",
    )
    enabled: bool = setting(
        True, doc="Record managed tool calls; false is the same as store = \"none\".", env="MONO_AGENT_TOOL_HISTORY_ENABLED",
    )


@attrs.define
class ArtifactsConfig:
    """Run artifacts: the JSONL event file of every run."""

    dir: Path | None = setting(None, doc="Artifacts directory. Unset: <home>/artifacts.", env="MONO_AGENT_ARTIFACTS_DIR")


@attrs.define
class MemoryConfig:
    """Long-term memory tiers (selected by name from the memory-tier registry)."""

    tiers: list[str] = setting(doc="Memory tiers to use; empty = no memory.", env="MONO_AGENT_MEMORY_TIERS", factory=list)
    path: Path | None = setting(None, doc="Where tiers keep their data. Unset: <home>/memory.", env="MONO_AGENT_MEMORY_PATH")


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


@attrs.define
class Config:
    """The whole configuration. ``sections`` holds plugin-declared sections by key path."""

    runtime: RuntimeConfig = attrs.field(factory=RuntimeConfig)
    context: ContextConfig = attrs.field(factory=ContextConfig)
    concurrency: ConcurrencyConfig = attrs.field(factory=ConcurrencyConfig)
    providers: ProvidersConfig = attrs.field(factory=ProvidersConfig)
    history: HistoryConfig = attrs.field(factory=HistoryConfig)
    tool_history: ToolHistoryStoreConfig = attrs.field(factory=ToolHistoryStoreConfig)
    artifacts: ArtifactsConfig = attrs.field(factory=ArtifactsConfig)
    memory: MemoryConfig = attrs.field(factory=MemoryConfig)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)

    source_file: Path | None = attrs.field(default=None, metadata={"internal": True})
    base_dir: Path = attrs.field(factory=Path.cwd, metadata={"internal": True})
    sources: dict[str, str] = attrs.field(factory=dict, metadata={"internal": True}, repr=False)
    sections: dict[str, Any] = attrs.field(factory=dict, metadata={"internal": True})

    def section(self, path: str) -> Any:
        """A plugin's config section (an instance of the class it registered)."""
        try:
            return self.sections[path]
        except KeyError:
            raise KeyError(f"no plugin declared the configuration section {path!r}") from None

    def resolve(self, path: Path | str) -> Path:
        """A configured path made absolute: relative paths are relative to the config file's dir."""
        return _resolve(self.base_dir, Path(path))

    @property
    def home(self) -> Path:
        return _home(self.base_dir, self.source_file, self.context.home)

    @property
    def artifacts_dir(self) -> Path:
        return _resolve(self.base_dir, self.artifacts.dir) if self.artifacts.dir else self.home / "artifacts"

    @property
    def history_dir(self) -> Path:
        return _resolve(self.base_dir, self.history.dir) if self.history.dir else self.artifacts_dir.parent / "history"

    @property
    def skills_root(self) -> Path:
        return _resolve(self.base_dir, self.context.skills_root) if self.context.skills_root else self.home / "skills"


# The path properties are read on every turn; they are pure functions of a few settings, so they
# are memoised (pathlib joins are slow enough to show in a turn's profile).


@functools.lru_cache(maxsize=256)
def _resolve(base_dir: Path, path: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else base_dir / path


def _home(base_dir: Path, source_file: Path | None, home: Path | None) -> Path:
    if home is not None:
        return _resolve(base_dir, Path(home))
    if source_file is not None:
        return base_dir / STATE_DIRNAME
    import platformdirs

    return platformdirs.user_data_path("monoagent")


# ============================================================================ introspection


def public_fields(cls: type) -> list[attrs.Attribute]:
    return [f for f in attrs.fields(cls) if not f.metadata.get("internal")]


@attrs.frozen
class KeyInfo:
    """One leaf key of the configuration, for docs, env overlay and ``config init``."""

    path: str
    attribute: attrs.Attribute
    owner: type

    @property
    def env(self) -> str | None:
        return self.attribute.metadata.get("env")

    @property
    def doc(self) -> str:
        return self.attribute.metadata.get("doc", "")

    @property
    def default(self) -> Any:
        default = self.attribute.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            return default.factory()
        return default

    @property
    def example(self) -> Any:
        return self.attribute.metadata.get("example")

    @property
    def allowed(self) -> str:
        return describe_allowed(self.attribute, _field_type(self.owner, self.attribute))


def _field_type(owner: type, attribute: attrs.Attribute) -> Any:
    return typing.get_type_hints(owner)[attribute.name]


def iter_keys(cls: type = Config, prefix: str = "") -> list[KeyInfo]:
    """Every leaf key below ``cls``, depth first, in declaration order."""
    keys: list[KeyInfo] = []
    hints = typing.get_type_hints(cls)
    for field in public_fields(cls):
        path = f"{prefix}{_camel(field.name)}"
        hint = hints[field.name]
        if attrs.has(hint):
            keys.extend(iter_keys(hint, path + "."))
        else:
            keys.append(KeyInfo(path, field, cls))
    return keys


def table_keys(cls: type) -> list[str]:
    """The keys of one table (its leaf keys and sub-tables), camelCase, in declaration order."""
    return [_camel(f.name) for f in public_fields(cls)]


@functools.lru_cache(maxsize=None)
def kernel_tables(cls: type = Config, prefix: str = "") -> dict[str, type]:
    """Every table of the kernel's configuration below ``cls``: key path -> attrs class.

    A plugin may declare its section at one of these paths: its keys then join the kernel's in
    that table (``toolHistory.store`` is the kernel's, ``toolHistory.maxCalls`` the store
    plugin's), and neither may declare a key of the other.
    """
    tables: dict[str, type] = {}
    hints = typing.get_type_hints(cls)
    for field in public_fields(cls):
        hint = hints[field.name]
        if attrs.has(hint):
            path = f"{prefix}{_camel(field.name)}"
            tables[path] = hint
            tables.update(kernel_tables(hint, path + "."))
    return tables


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _fmt_num(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def describe_allowed(attribute: attrs.Attribute, hint: Any) -> str:
    meta = attribute.metadata
    if meta.get("allowed"):
        return meta["allowed"]
    base, optional = _unwrap_optional(hint)
    if typing.get_origin(base) is Literal:
        text = "one of " + ", ".join(repr(v) for v in typing.get_args(base))
    elif base is bool:
        text = "true or false"
    elif base in (int, float):
        kind = "an integer" if base is int else "a number"
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and hi is not None:
            text = f"{kind} from {_fmt_num(lo)} to {_fmt_num(hi)}"
        elif lo is not None:
            text = f"{kind} of at least {_fmt_num(lo)}"
        else:
            text = kind
    elif base is Path:
        text = "a path"
    elif base is str:
        text = "a string"
    elif typing.get_origin(base) is list:
        (item,) = typing.get_args(base)
        text = "a list of " + ("paths" if item is Path else "strings")
    else:
        text = str(base)
    return text + (" (or unset)" if optional else "")


# ============================================================================ validation of raw data


@attrs.define
class _Problems:
    sources: Mapping[str, str]
    items: list[str] = attrs.Factory(list)
    plugin_paths: frozenset[str] = frozenset()

    def add(self, path: str, value: Any, message: str) -> None:
        where = self.sources.get(path)
        origin = f" (from {where})" if where else ""
        shown = json.dumps(value, default=str) if not isinstance(value, Mapping) else "{...}"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        self.items.append(f"{path} = {shown}{origin}: {message}")

    def unknown(self, path: str, key: str, known: list[str]) -> None:
        full = f"{path}.{key}" if path else key
        where = self.sources.get(full)
        origin = f" (in {where})" if where else ""
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if not close:
            lowered = {k.lower(): k for k in known}
            if key.lower().replace("_", "") in {k.replace("_", "") for k in lowered}:
                close = [next(v for k, v in lowered.items() if k.replace("_", "") == key.lower().replace("_", ""))]
        hint = f"; did you mean {close[0]!r}?" if close else ""
        allowed = ", ".join(known) if known else "no keys"
        self.items.append(f"{full}: unknown key{origin}{hint} (known keys here: {allowed})")


def _check_value(path: str, value: Any, hint: Any, attribute: attrs.Attribute | None, problems: _Problems) -> None:
    base, optional = _unwrap_optional(hint)
    meta = attribute.metadata if attribute is not None else {}
    allowed = describe_allowed(attribute, hint) if attribute is not None else str(hint)
    if value is None:
        if not optional:
            problems.add(path, value, f"must be set; allowed: {allowed}")
        return
    origin = typing.get_origin(base)
    if origin is Literal:
        if value not in typing.get_args(base):
            problems.add(path, value, f"not an allowed value; allowed: {allowed}")
            return
    elif base is bool:
        if not isinstance(value, bool):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
    elif base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
    elif base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
        if value != value:  # NaN would pass every range check below
            problems.add(path, value, f"not a number; allowed: {allowed}")
            return
    elif base in (str, Path):
        if not isinstance(value, str):
            problems.add(path, value, f"wrong type ({type(value).__name__}); allowed: {allowed}")
            return
        if base is Path and "\x00" in value:
            problems.add(path, value, "a path cannot contain a NUL character")
            return
    elif origin is list:
        (item,) = typing.get_args(base)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.add(path, value, f"wrong type; allowed: {allowed}")
            return
    elif attrs.has(base):
        _check_mapping(path, value, base, problems)
        return
    lo, hi = meta.get("min"), meta.get("max")
    if base in (int, float) and ((lo is not None and value < lo) or (hi is not None and value > hi)):
        problems.add(path, value, f"out of range; allowed: {allowed}")
        return
    check = meta.get("check")
    if check is not None:
        message = check(value)
        if message:
            problems.add(path, value, message)


def _check_mapping(path: str, raw: Any, cls: type, problems: _Problems, shared_keys: Sequence[str] = ()) -> None:
    """Check one table against ``cls``; ``shared_keys`` are the kernel's keys of a table a plugin section extends."""
    if not isinstance(raw, Mapping):
        problems.add(path, raw, f"must be a table of keys ({', '.join(_camel(f.name) for f in public_fields(cls))})")
        return
    hints = typing.get_type_hints(cls)
    fields = {_camel(f.name): f for f in public_fields(cls)}
    prefix = f"{path}." if path else ""
    plugin_keys = sorted(
        p[len(prefix):] for p in problems.plugin_paths if p.startswith(prefix) and "." not in p[len(prefix):]
    )
    known = list(shared_keys) + list(fields) + plugin_keys
    for key, value in raw.items():
        full = f"{path}.{key}" if path else key
        if full in problems.plugin_paths:
            continue
        field = fields.get(key)
        if field is None:
            problems.unknown(path, key, known)
            continue
        _check_value(full, value, hints[field.name], field, problems)


# ============================================================================ structuring (cattrs)


def _make_converter() -> Any:
    import cattrs
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(Path, lambda value, _: Path(value))
    converter.register_unstructure_hook(Path, str)

    def renames(cls: type) -> dict[str, Any]:
        return {
            f.name: override(rename=_camel(f.name)) if not f.metadata.get("internal") else override(omit=True)
            for f in attrs.fields(cls)
        }

    converter.register_structure_hook_factory(
        attrs.has, lambda cls: make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **renames(cls))
    )
    converter.register_unstructure_hook_factory(
        attrs.has, lambda cls: make_dict_unstructure_fn(cls, converter, **renames(cls))
    )
    return converter


_converter: Any = None


def converter() -> Any:
    """The cattrs converter for configuration classes (camelCase keys, strict extra keys)."""
    global _converter
    if _converter is None:
        _converter = _make_converter()
    return _converter


# ============================================================================ env overlay


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


_ASCII_INTEGER = re.compile(r"-?[0-9]{1,30}")
_ASCII_DECIMAL = re.compile(r"-?[0-9]{1,30}(?:\.[0-9]{1,30})?")
_ASCII_SPACE = " \t\r\n"


def parse_ascii_number(text: str, kind: type, *, negative: bool) -> int | float:
    """``text`` as an int or float written in ASCII digits only, or ValueError saying what is allowed.

    ``int()`` and ``float()`` also take ``1_000``, fullwidth and other Unicode digits, ``+5``,
    ``1e3``, ``inf`` and ``nan``; a configuration value typed as text takes none of them: ASCII
    digits (at most 30, so no value reaches Python's digit limit), a ``.`` fraction for numbers,
    and a leading ``-`` only where ``negative`` allows it.
    """
    sign = "an optional leading '-' and " if negative else ""
    if kind is int:
        if _ASCII_INTEGER.fullmatch(text) and (negative or not text.startswith("-")):
            return int(text)
        raise ValueError(f"expected an integer: {sign}ASCII digits 0-9 only")
    if _ASCII_DECIMAL.fullmatch(text) and (negative or not text.startswith("-")):
        return float(text)
    raise ValueError(f"expected a number: {sign}ASCII digits 0-9 with an optional '.' fraction only")


def _parse_env(raw: str, hint: Any, *, negative: bool = True) -> Any:
    """Turn an env string into the raw value the key's type expects; return it or raise ValueError.

    ``negative`` is False for a key whose minimum is not below zero: its integer or number may
    not start with ``-``.
    """
    base, optional = _unwrap_optional(hint)
    text = raw.strip(_ASCII_SPACE)
    if optional and text == "":
        return None
    if base is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError("expected a boolean (1/0, true/false, yes/no, on/off)")
    if base in (int, float):
        return parse_ascii_number(text, base, negative=negative)
    if typing.get_origin(base) is list:
        return [part.strip() for part in text.split(",") if part.strip()]
    if base is Path:
        return str(Path(raw).expanduser().absolute())  # relative to the working directory, not the file
    return raw


def _set_path(tree: dict[str, Any], path: str, value: Any) -> bool:
    """Set ``path`` in ``tree``; False, setting nothing, when a parent holds a non-table value.

    That value came from the file and is left for validation to report, not silently replaced.
    """
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        if part not in node:
            node[part] = {}
        if not isinstance(node[part], dict):
            return False
        node = node[part]
    node[leaf] = value
    return True


def _record_sources(tree: Mapping[str, Any], prefix: str, label: str, sources: dict[str, str]) -> None:
    for key, value in tree.items():
        path = f"{prefix}{key}"
        sources[path] = label
        if isinstance(value, Mapping):
            _record_sources(value, path + ".", label, sources)


# ============================================================================ loading


def discover_config_file(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """``--config PATH``, then ``MONO_AGENT_CONFIG``, then ``./monoagent.toml``, then the user config dir."""
    env = os.environ if env is None else env
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"--config {explicit}: no such file")
        return path.resolve()
    if env.get("MONO_AGENT_CONFIG"):
        path = Path(env["MONO_AGENT_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"MONO_AGENT_CONFIG={env['MONO_AGENT_CONFIG']}: no such file")
        return path.resolve()
    local = Path.cwd() / CONFIG_FILENAME
    if local.is_file():
        return local.resolve()
    import platformdirs

    user = platformdirs.user_config_path("monoagent") / CONFIG_FILENAME
    if user.is_file():
        return user.resolve()
    return None


CONFIG_MAX_BYTES = 1024 * 1024


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a TOML (or, by ``.json`` suffix, JSON) file into a dict, or raise ConfigError.

    The file must be a regular file of at most :data:`CONFIG_MAX_BYTES` (1 MiB), nested at most
    :data:`~monoagent.boundary.documents.MAX_NESTING` levels deep (see :mod:`monoagent.boundary.documents`).
    """
    from monoagent.boundary.documents import DocumentError, load_document

    try:
        loaded = load_document(path, max_bytes=CONFIG_MAX_BYTES, what="config file")
    except DocumentError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object")
    return loaded


@attrs.define
class RawConfig:
    """File and env data merged but not yet validated, with the source of every key."""

    data: dict[str, Any]
    sources: dict[str, str]
    source_file: Path | None
    problems: list[str] = attrs.Factory(list)
    env: Mapping[str, str] = attrs.Factory(dict)


def load_raw(
    explicit: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
) -> RawConfig:
    """Merge defaults-free raw data: the file (or ``data``), then every ``MONO_AGENT_*`` variable."""
    env = os.environ if env is None else env
    sources: dict[str, str] = {}
    source_file: Path | None = None
    if data is not None:
        tree = json.loads(json.dumps(dict(data), default=str))
        _record_sources(tree, "", "python", sources)
    else:
        source_file = discover_config_file(explicit, env)
        tree = read_config_file(source_file) if source_file else {}
        if source_file:
            _record_sources(tree, "", f"file {source_file}", sources)
    raw = RawConfig(tree, sources, source_file, env=env)
    _overlay_env(raw, iter_keys())
    return raw


def _overlay_env(raw: RawConfig, keys: list[KeyInfo]) -> None:
    env, tree, sources = raw.env, raw.data, raw.sources
    for key in keys:
        if not key.env or key.env not in env:
            continue
        try:
            minimum = key.attribute.metadata.get("min")
            value = _parse_env(env[key.env], _field_type(key.owner, key.attribute), negative=minimum is None or minimum < 0)
        except ValueError as exc:
            raw.problems.append(f"{key.path} = {env[key.env]!r} (from env {key.env}): {exc}; allowed: {key.allowed}")
            continue
        if _set_path(tree, key.path, value):
            sources[key.path] = f"env {key.env}"


def build_config(raw: RawConfig, plugin_sections: Mapping[str, type] | None = None) -> Config:
    """Validate ``raw`` against the kernel's classes and the plugins' sections; structure it.

    Raises :class:`~monoagent.kernel.errors.ConfigError` listing every problem found, each naming the
    key path, the value, its source and what is allowed.
    """
    plugin_sections = dict(plugin_sections or {})
    for path, cls in plugin_sections.items():
        _overlay_env(raw, iter_keys(cls, path + "."))
    tables = kernel_tables()
    shared = {path: table_keys(tables[path]) for path in plugin_sections if path in tables}
    problems = _Problems(raw.sources, list(raw.problems), frozenset(plugin_sections) - frozenset(shared))
    data = json.loads(json.dumps(raw.data, default=str))  # a private deep copy
    extracted: dict[str, Any] = {}
    for path in sorted(plugin_sections, key=lambda p: -p.count(".")):
        *parents, leaf = path.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        if path not in shared:
            extracted[path] = node.pop(leaf)
        elif isinstance(node[leaf], dict):  # the plugin's keys of a kernel table; the kernel checks the rest
            table = node[leaf]
            extracted[path] = {key: table.pop(key) for key in list(table) if key not in shared[path]}
    _check_mapping("", data, Config, problems)
    for path, cls in plugin_sections.items():
        if path in extracted:
            _check_mapping(path, extracted[path], cls, problems, shared.get(path, ()))
    if problems.items:
        raise ConfigError(problems.items)
    config: Config = _structure(data, Config, "")
    for path, cls in plugin_sections.items():
        config.sections[path] = _structure(extracted.get(path, {}), cls, path)
    config.source_file = raw.source_file
    config.base_dir = raw.source_file.parent if raw.source_file else Path.cwd()
    config.sources = dict(raw.sources)
    return config


def _structure(data: Any, cls: type, path: str) -> Any:
    """Structure checked data; an attrs validator's own failure becomes a ConfigError naming the path."""
    import cattrs

    def leaves(exc: BaseException, where: str) -> list[str]:
        if isinstance(exc, BaseExceptionGroup):
            found: list[str] = []
            for sub in exc.exceptions:
                names = [note.name for note in getattr(sub, "__notes__", []) if hasattr(note, "name")]
                found.extend(leaves(sub, f"{where}.{_camel(names[0])}" if names and where else _camel(names[0]) if names else where))
            return found
        return [f"{where or 'configuration'}: {exc}"]

    try:
        return converter().structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError) as exc:
        raise ConfigError(leaves(exc, path)) from None


def plugins_settings(raw: RawConfig) -> PluginsConfig:
    """Validate and return just the ``plugins`` table: it is needed before any plugin loads."""
    problems = _Problems(raw.sources)
    section = raw.data.get("plugins", {})
    _check_mapping("plugins", section, PluginsConfig, problems)
    plugin_problems = [p for p in raw.problems if p.startswith("plugins.")]
    if problems.items or plugin_problems:
        raise ConfigError(plugin_problems + problems.items)
    # Two checked flat lists: built directly, so the CLI's early plugin load needs no cattrs.
    return PluginsConfig(paths=[Path(p) for p in section.get("paths", [])], block=list(section.get("block", [])))


def load_config(
    explicit: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    plugin_sections: Mapping[str, type] | None = None,
) -> Config:
    """Discover, read, overlay and validate in one call (no plugin sections unless given)."""
    return build_config(load_raw(explicit, env, data=data), plugin_sections)


def value_sources(config: Config) -> list[tuple[str, Any, str]]:
    """(key path, effective value, source) for every kernel and plugin key, for ``config show``."""
    conv = converter()
    rows: list[tuple[str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        for key, value in conv.unstructure(obj).items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and attrs.has(type(getattr(obj, _snake(key), None))):
                walk(getattr(obj, _snake(key)), path + ".")
            else:
                field = attrs.fields_dict(type(obj)).get(_snake(key))
                if field is not None and field.metadata.get("secret") and value is not None:
                    value = "<set, not shown>"
                rows.append((path, value, config.sources.get(path, "default")))

    walk(config, "")
    for path, section in sorted(config.sections.items()):
        walk(section, path + ".")
    return rows


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
