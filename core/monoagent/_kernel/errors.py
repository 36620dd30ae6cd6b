"""Error types, and the exit code each one ends the command line with.

Each error carries a message a user can act on: what was wrong and what is allowed. Each class
has an ``exit_code`` (an :class:`ExitCode`, the same attribute name as click's exceptions), so a
plugin's command raises the error type that says what went wrong and ``monoagent`` exits with the
documented code (docs/cli.md, "Exit codes"). ``monoagent._cli.main`` prints every error on stderr
as one ``monoagent: error: ...`` message.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The exit codes of every ``monoagent`` command, core and plugins' alike (docs/cli.md)."""

    OK = 0
    """The command did what was asked."""
    FAILED = 1
    """The turn failed after it started (provider, tool, harness, history commit), or the command
    could not do what was asked (a conversation or run that does not exist, a store that cannot be
    read), or an unexpected internal error (its traceback is shown)."""
    USAGE = 2
    """Usage or configuration: a bad flag or argument, an invalid configuration value, a missing
    config file, a model that is not ``<provider>:<model>`` with a registered provider prefix, a
    selected component no active plugin provides."""
    PLUGIN = 3
    """A plugin failed: a local plugin file did not load, a hook raised or returned the wrong type,
    a plugin registered something the registry refuses."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT), as shells report it (128 + 2)."""


class MonoagentError(Exception):
    """Base class of every error monoagent raises on purpose; ends the command line with 1."""

    exit_code: ExitCode = ExitCode.FAILED


class UsageError(MonoagentError):
    """A command was given an argument it cannot use (an unknown name, an empty text, ...); exits 2.

    For a plugin's command: raise it, rather than ``sys.exit``, to end with the usage code.
    """

    exit_code = ExitCode.USAGE


class ConfigError(MonoagentError):
    """The configuration is invalid. ``problems`` lists one line per offending key."""

    exit_code = ExitCode.USAGE

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


class PluginError(MonoagentError):
    """A plugin could not be loaded (a local plugin file, or any plugin in strict mode) or
    misbehaved at registration; exits 3."""

    exit_code = ExitCode.PLUGIN


class LocalPluginError(PluginError):
    """A project-local plugin file (``monoagent_local.py``, ``plugins.paths``, ``--plugins-dir``)
    failed to load: fatal unless ``plugins.localFailures = "warn"``. ``path`` is the file (or the
    missing path) and ``plugin`` the name it is listed under in ``monoagent plugins``."""

    def __init__(self, message: str, *, plugin: str, path: str):
        self.plugin: str = plugin
        self.path: str = path
        super().__init__(message)


class ToolDefinitionError(PluginError):
    """A function decorated with ``@monoagent.tool`` cannot be a tool: an argument without a type
    annotation, or of a type the model cannot send (the message names the function, the argument and
    what is allowed). Raised when the decorator runs, so a plugin module that defines such a tool
    fails to load, naming the plugin."""


class HookError(PluginError):
    """An exception escaped a hook implementation; names the hook and the plugin (as ``monoagent
    plugins`` lists it). ``error`` is the implementation's exception."""

    def __init__(self, hook: str, plugin: str, error: BaseException):
        self.hook: str = hook
        self.plugin: str = plugin
        self.error: BaseException = error
        super().__init__(
            f"hook {hook!r} failed in plugin {plugin!r}: {type(error).__name__}: {error}"
        )


class ComponentFactoryError(HookError):
    """The factory a plugin registered for a component (a provider, a store, a memory tier, a
    channel, ...) raised while building it; names the component, the plugin and the registry hook
    it was registered through (``hook``)."""

    def __init__(self, kind: str, name: str, hook: str, plugin: str, error: BaseException):
        self.kind: str = kind
        self.name: str = name
        self.hook: str = hook
        self.plugin: str = plugin
        self.error: BaseException = error
        PluginError.__init__(
            self,
            f"the {kind} {name!r} of plugin {plugin!r} (registered through {hook}) failed to build: "
            f"{type(error).__name__}: {error}",
        )


class HookResultError(PluginError):
    """A hook implementation returned a value of the wrong type; names the hook, the plugin and
    what the hook's documentation says belongs there (``expected``)."""

    def __init__(self, hook: str, plugin: str, value: object, expected: str):
        self.hook: str = hook
        self.plugin: str = plugin
        self.expected: str = expected
        super().__init__(
            f"plugin {plugin!r} returned a value of type {type(value).__name__} from hook {hook!r}, "
            f"where {expected} belongs (see the hook's reference in docs/hooks.md)"
        )


class InputTooLarge(MonoagentError):
    """Standard input (``-``) or a ``chat`` line is longer than the command line reads."""


class ComponentError(MonoagentError):
    """A selected component (provider, store, tier, ...) is unknown, blocked, failed or duplicated:
    the configuration selects what no active plugin provides, so it exits 2."""

    exit_code = ExitCode.USAGE


class AdmissionRejected(MonoagentError):
    """The harness refused a turn because ``concurrency.maxPendingRuns`` runs already wait."""


class ClientToolsRefused(MonoagentError):
    """A request's client-side tools or tool results do not fit (``client_tools`` of
    :class:`~monoagent._kernel.turn_request.TurnRequest`): a client tool named like one of the
    agent's, results that answer no pending call of the conversation or leave one unanswered, a
    ``tool_choice`` naming no offered tool. Raised before any provider call; nothing is committed
    (channels answer it as a bad request: 400)."""


class ProviderError(MonoagentError):
    """A provider call failed. ``retryable`` marks transient failures (429, 5xx, resets).

    ``status`` is the HTTP status when the server answered one (None for a dropped connection or
    a timeout); ``retry_after`` is the delay in seconds the server asked for (``Retry-After``),
    None when it asked for none. ``code`` names a stream-limit or shape violation
    (``stream_idle_timeout``, ``stream_timeout``, ``stream_too_large``, ``event_too_large``,
    ``too_many_tool_calls``, ``malformed_event``; see docs/reliability.md), None otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        provider: str = "",
        status: int | None = None,
        retry_after: float | None = None,
        code: str | None = None,
    ):
        self.retryable: bool = retryable
        self.provider: str = provider
        self.status: int | None = status
        self.retry_after: float | None = retry_after
        self.code: str | None = code
        super().__init__(message)


class ContextLimitError(ProviderError):
    """The prompt does not fit the model's context window, even after compaction."""


class HistoryStoreError(MonoagentError):
    """A history store refused an unsafe or unsupported record, or could not publish a turn."""


class ToolHistoryError(MonoagentError):
    """The tool-history store is unavailable, corrupt or refused an operation."""


class ToolHistoryRejected(ToolHistoryError):
    """The writer definitively rejected a record (the only cause of ``persistence: "failed"``)."""


class ToolHistoryUnavailable(ToolHistoryRejected):
    """The store cannot be opened right now (locked by another process, unreadable); it rejects
    writes without waiting while it retries opening with back-off, and records again once it can."""


class TurnFailed(MonoagentError):
    """A turn ended without a committed answer; nothing previously committed was touched."""


class EmptyResponse(TurnFailed):
    """The model answered with no text and no tool call; settled as ``empty_response``."""

    settlement_code = "empty_response"


class CommitFailed(TurnFailed):
    """The history store did not commit the turn's answer (disk full, file too large, ...).

    Settled as ``commit_failed``: the run publishes a continuity account instead, like any other
    failed turn. ``__cause__`` is the store's own error.
    """

    settlement_code = "commit_failed"


class RunDeadlineExceeded(TurnFailed):
    """The run's provider and tool loop outlived ``runtime.runTimeoutMs``; settled as ``run_deadline``."""

    settlement_code = "run_deadline"


class RepeatedToolCall(TurnFailed):
    """The model called one tool with the same arguments more than ``runtime.maxRepeatedToolCalls``
    times in a row; settled as ``repeated_tool_call``."""

    settlement_code = "repeated_tool_call"


class HookDeprecationWarning(DeprecationWarning):
    """A plugin implements a hook (or a hook argument) that the kernel deprecated.

    Issued by pluggy when the plugin is registered, pointing at the implementing function, for
    every hookspec marked ``warn_on_impl=HookDeprecationWarning("...")`` (see
    :mod:`monoagent._kernel.hookspecs`). Like every ``DeprecationWarning`` it is shown by pytest
    and by ``python -W default``; ``-W error::monoagent.HookDeprecationWarning`` makes such a
    plugin fail to load.
    """


class NotifyFailed(MonoagentError):
    """A notifier gave up delivering a notification; the message names the destination and why."""
