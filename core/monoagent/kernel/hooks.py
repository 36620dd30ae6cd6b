"""The typed facade for hook calls: one method per hook of :mod:`monoagent.kernel.hookspecs`.

The kernel calls hooks only through a :class:`Hooks` object (one per Agent: ``agent.hooks``, the
plugin host's ``host.hooks``), never through pluggy's ``pm.hook`` and never by a hook's name in
a string. Each method takes the hook's arguments by keyword with their types and returns what
the hook's kind returns, so mypy checks every call site:

* a **firstresult** hook ("First non-None result wins") returns that result or None;
* a **collect-all** hook ("Results are collected") returns the list of non-None results, in
  pluggy's call order (the most recently registered implementation first);
* an **observer** hook (``after_commit``, ``on_run_event``) calls each implementation on its
  own and returns one ``(plugin, result, error)`` per implementation, so a failing observer
  is reported without silencing the others;
* a collect-all hook whose answers the kernel must attribute (``filter_tools``, to name the
  plugin that returned a wrong value) returns one ``(plugin, result)`` per implementation;
* a **registry** hook is called for one plugin at a time, with a registrar bound to it
  (:mod:`monoagent.kernel.registrars`), when that plugin is loaded;
* ``configure`` is historic: a plugin registered later still receives the call.

An exception escaping an implementation becomes a :class:`~monoagent.kernel.errors.HookError`
naming the hook and the plugin (a registry's becomes a
:class:`~monoagent.kernel.registrars.RegistrationError`, which fails that plugin's load). The
answers the kernel builds on are checked where each implementation returns them
(:data:`RESULT_TYPES`): a value of the wrong type is a
:class:`~monoagent.kernel.errors.HookResultError` naming the hook and the plugin that returned it.
For that, such a hook's plain implementations are called one by one here (as pluggy would: most
recently registered first, a firstresult hook stopping at the first answer); a hook that has a
wrapper, or a call that observers watch, goes through pluggy and its result is checked at the end.

Every call path is observable in one place: ``MONO_AGENT_TRACE_HOOKS=1`` prints each call, the
implementations it reaches and, for a firstresult hook, the plugin whose result won; a
:class:`~monoagent.testing.HookRecorder` sees the same calls, registries included.

To add a hook: write its spec in :mod:`~monoagent.kernel.hookspecs`, then one method here with
the same parameters (keyword-only) and the return type of its kind; ``tests/test_hooks.py``
checks that the two agree.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import attrs
import pluggy

from monoagent.kernel.errors import HookError, HookResultError, MonoagentError
from monoagent.kernel.model import MemoryHit, Message, ProviderRequest, Section, ToolResult, UserMessagePart
from monoagent.kernel.registrars import (
    ChannelRegistrar,
    CompactionPolicyRegistrar,
    ConfigSectionRegistrar,
    EmbedderRegistrar,
    HistoryStoreRegistrar,
    MemoryTierRegistrar,
    NotifierRegistrar,
    ProviderRegistrar,
    Registrar,
    RegistrationError,
    ToolHistoryStoreRegistrar,
    ToolRegistrar,
)

if TYPE_CHECKING:
    import click

    from monoagent.agent import Agent
    from monoagent.kernel.model import (
        ContentBlock,
        MemoryHit,
        Message,
        ProviderRequest,
        RunEvent,
        Section,
        ToolCall,
        ToolResult,
        ToolSpec,
        TurnResult,
        UserMessagePart,
    )
    from monoagent.kernel.turn import StepOutcome, Turn

#: One observer implementation's answer: the plugin, its result (None if it raised) and its error.
IsolatedAnswer: TypeAlias = "tuple[str, Any, BaseException | None]"

#: One implementation's answer to a hook whose answers are attributed: the plugin and its result.
PluginAnswer: TypeAlias = "tuple[str, Any]"

def _section_hooks() -> tuple[str, ...]:
    from monoagent.kernel import hookspecs

    return tuple(name for name in vars(hookspecs) if name.startswith("section_"))


#: The hooks whose answers the kernel checks: hook -> (the type(s) an answer must have, what the error
#: says belongs there). A collect-all hook may also answer with a list or tuple of them; one in
#: :data:`AWAITED_RESULTS` answers only with a list or tuple, or an awaitable checked once awaited.
RESULT_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    # every section producer of the catalogue (``section_*``), and the history renderer
    **{hook: (Section, "a monoagent.Section or None") for hook in (*_section_hooks(), "render_history")},
    "extra_sections": (Section, "a monoagent.Section, a list of them or None"),
    "augment_user_message": (UserMessagePart, "a monoagent.UserMessagePart, a list of them or None"),
    "recall_memory": (MemoryHit, "a list of monoagent.MemoryHit (or an awaitable of one) or None"),
    "render_user_message": (Message, "a monoagent.Message or None"),
    "count_tokens": (int, "an int (the token count) or None"),
    "choose_compaction": (str, "a compaction policy name (str) or None"),
    "prepare_provider_request": (ProviderRequest, "a monoagent.ProviderRequest or None"),
    "before_tool_call": (ToolResult, "a monoagent.ToolResult or None"),
    "save_tool_output": (str, "a reference to the saved output (str) or None"),
    "redact": (str, "the redacted text (str) or None"),
}
AWAITED_RESULTS = frozenset({"recall_memory"})


async def _checked_once_awaited(hook: str, plugin: str, awaitable: Awaitable[Any]) -> Any:
    """``awaitable``'s value, checked like a direct answer and blamed on ``plugin``."""
    value = await awaitable
    Hooks._check(hook, value, False, plugin)
    return value


@attrs.frozen
class HookCall:
    """One hook call as observers see it.

    ``plugins`` are the implementations in call order. ``result`` is what the facade returned
    (for an observer hook, the list of ``(plugin, result, error)``); ``error`` what it raised.
    ``winner`` is the plugin whose result a firstresult hook returned (None when none answered).
    """

    name: str
    kwargs: dict[str, Any]
    plugins: tuple[str, ...]
    result: Any = None
    error: BaseException | None = None
    winner: str | None = None


class HookObserver(Protocol):
    """Something that watches every hook call (the tracer, :class:`~monoagent.testing.HookRecorder`)."""

    def started(self, name: str, kwargs: Mapping[str, Any], plugins: tuple[str, ...]) -> None: ...

    def finished(self, call: HookCall) -> None: ...


class _Tracer:
    """``MONO_AGENT_TRACE_HOOKS=1``: one line per call, one per winner or error."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write

    def started(self, name: str, kwargs: Mapping[str, Any], plugins: tuple[str, ...]) -> None:
        self.write(f"monoagent trace: {name}({', '.join(kwargs)}) -> [{', '.join(plugins) or '(no implementation)'}]")

    def finished(self, call: HookCall) -> None:
        if call.error is not None:
            self.write(f"monoagent trace: {call.name} raised {type(call.error).__name__}: {call.error}")
        elif call.winner is not None:
            self.write(f"monoagent trace: {call.name} answered by {call.winner}")


class _Frame:
    """A firstresult call in progress on this thread, and the first implementation that answered it."""

    __slots__ = ("name", "winner")

    def __init__(self, name: str) -> None:
        self.name = name
        self.winner: str | None = None


class Hooks:
    """The kernel's one way to call hooks: a typed method per hook (see the module docstring)."""

    def __init__(self, pm: pluggy.PluginManager, *, trace: Callable[[str], None] | None = None) -> None:
        self._pm = pm
        self._callers: dict[str, pluggy.HookCaller] = {
            name: caller for name, caller in vars(pm.hook).items() if isinstance(caller, pluggy.HookCaller) and caller.spec
        }
        self._observers: list[HookObserver] = []
        self._frames = threading.local()
        self._watching = False
        if trace is not None:
            self.observe(_Tracer(trace))

    # ------------------------------------------------------------------ observers

    def observe(self, observer: HookObserver) -> Callable[[], None]:
        """Show every later hook call to ``observer``; returns the function that stops it."""
        self._observers.append(observer)
        if not self._watching:
            self._watching = True
            for plugin in self._pm.get_plugins():
                self.watch(plugin)

        def stop() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return stop

    def watch(self, plugin: object) -> None:
        """Let observers see which of ``plugin``'s implementations answers a firstresult hook.

        pluggy reports a call and its outcome, not which implementation produced the result, so
        once anything observes (tracing on, a recorder attached) each plain implementation of a
        firstresult hook is wrapped to note its answer. Called by the host for every plugin it
        registers; a no-op until the first observer arrives.
        """
        if not self._watching:
            return
        for caller in self._pm.get_hookcallers(plugin) or []:
            if caller.spec is None or not caller.spec.opts.get("firstresult"):
                continue
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not (impl.wrapper or impl.hookwrapper) and not hasattr(impl.function, "_monoagent_answers"):
                    # HookImpl.function is typed Final; this is the one place monoagent replaces it
                    setattr(impl, "function", self._noting_answers(caller.name, impl.plugin_name, impl.function))  # noqa: B010

    def _noting_answers(self, hook: str, plugin: str, function: Callable[..., Any]) -> Callable[..., Any]:
        frames = self._frames

        @functools.wraps(function)
        def answer(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            stack: list[_Frame] | None = getattr(frames, "stack", None)
            if result is not None and stack and stack[-1].name == hook and stack[-1].winner is None:
                stack[-1].winner = plugin
            return result

        answer._monoagent_answers = function  # type: ignore[attr-defined]  # a function takes attributes; culprit() reads it back
        return answer

    def _plugins(self, name: str) -> tuple[str, ...]:
        return tuple(impl.plugin_name for impl in reversed(self._callers[name].get_hookimpls()))

    def _started(self, name: str, kwargs: dict[str, Any], plugins: tuple[str, ...]) -> _Frame:
        """Tell the observers a call starts; its frame collects the winner of a firstresult hook."""
        for observer in self._observers:
            observer.started(name, kwargs, plugins)
        frame = _Frame(name)
        self._frames.__dict__.setdefault("stack", []).append(frame)
        return frame

    def _finished(self, frame: _Frame, kwargs: dict[str, Any], plugins: tuple[str, ...], result: Any, error: BaseException | None) -> None:
        self._frames.stack.pop()
        call = HookCall(frame.name, dict(kwargs), plugins, result, error, frame.winner)
        for observer in list(self._observers):
            observer.finished(call)

    # ------------------------------------------------------------------ call paths

    def _call(self, name: str, kwargs: dict[str, Any]) -> Any:
        """A plain call through pluggy: firstresult or collect-all, wrappers included."""
        caller = self._callers[name]
        if self._observers:
            return self._observed(name, caller, kwargs)
        try:
            return caller(**kwargs)
        except MonoagentError:
            raise
        except Exception as exc:
            raise HookError(name, self.culprit(name, exc), exc) from exc

    def _observed(self, name: str, caller: pluggy.HookCaller, kwargs: dict[str, Any]) -> Any:
        plugins = self._plugins(name)
        frame = self._started(name, kwargs, plugins)
        result: Any = None
        error: BaseException | None = None
        try:
            result = caller(**kwargs)
            return result
        except MonoagentError as exc:
            error = exc
            raise
        except Exception as exc:
            error = HookError(name, self.culprit(name, exc), exc)
            raise error from exc
        finally:
            self._finished(frame, kwargs, plugins, result, error)

    def _checked(self, name: str, kwargs: dict[str, Any]) -> Any:
        """A call whose answers are checked against :data:`RESULT_TYPES`, each blamed on its plugin."""
        caller = self._callers[name]
        impls = caller.get_hookimpls()
        firstresult = bool(caller.spec and caller.spec.opts.get("firstresult"))
        if self._observers or any(impl.wrapper or impl.hookwrapper for impl in impls):
            result = self._call(name, kwargs)
            blamed = "the implementations and wrappers of " + ", ".join(self._plugins(name))
            if firstresult:
                return self._checked_answer(name, result, True, blamed)
            return [self._checked_answer(name, answer, False, blamed) for answer in result]
        answers: list[Any] = []
        for impl in reversed(impls):
            try:
                answer = impl.function(*[kwargs[arg] for arg in impl.argnames])
            except MonoagentError:
                raise
            except Exception as exc:
                raise HookError(name, impl.plugin_name, exc) from exc
            if answer is not None:
                answer = self._checked_answer(name, answer, firstresult, impl.plugin_name)
                if firstresult:
                    return answer
                answers.append(answer)
        return None if firstresult else answers

    @classmethod
    def _checked_answer(cls, name: str, answer: Any, firstresult: bool, plugin: str) -> Any:
        """``answer`` once checked; an awaitable answer of a hook in :data:`AWAITED_RESULTS` is
        wrapped so that its value is checked when the caller awaits it."""
        if name in AWAITED_RESULTS and inspect.isawaitable(answer):
            return _checked_once_awaited(name, plugin, answer)
        cls._check(name, answer, firstresult, plugin)
        return answer

    @staticmethod
    def _check(name: str, answer: Any, firstresult: bool, plugin: str) -> None:
        if answer is None:
            return
        expected, what = RESULT_TYPES[name]
        if name in AWAITED_RESULTS and not isinstance(answer, (list, tuple)):
            raise HookResultError(name, plugin, answer, what)
        items = answer if not firstresult and isinstance(answer, (list, tuple)) else (answer,)
        for item in items:
            if not isinstance(item, expected) or (expected is int and isinstance(item, bool)):
                raise HookResultError(name, plugin, item, what)

    def _isolated(self, name: str, kwargs: dict[str, Any]) -> list[IsolatedAnswer]:
        """Each implementation on its own: one that raises does not stop the others."""
        impls = self._callers[name].get_hookimpls()[::-1]
        plugins = tuple(impl.plugin_name for impl in impls) if self._observers else ()
        frame = self._started(name, kwargs, plugins) if self._observers else None  # on_run_event: hot, keep it bare
        answers: list[IsolatedAnswer] = []
        for impl in impls:
            args = {key: kwargs[key] for key in impl.argnames if key in kwargs}
            try:
                answers.append((impl.plugin_name, impl.function(**args), None))
            except Exception as exc:
                answers.append((impl.plugin_name, None, exc))
        if frame is not None:
            self._finished(frame, kwargs, plugins, answers, None)
        return answers

    def _each(self, name: str, kwargs: dict[str, Any]) -> list[PluginAnswer]:
        """Each implementation in call order, its answer attributed; an exception is a HookError naming it."""
        impls = self._callers[name].get_hookimpls()[::-1]
        plugins = tuple(impl.plugin_name for impl in impls) if self._observers else ()
        frame = self._started(name, kwargs, plugins) if self._observers else None  # once per turn: keep it bare
        answers: list[PluginAnswer] = []
        error: BaseException | None = None
        try:
            for impl in impls:
                args = {key: kwargs[key] for key in impl.argnames if key in kwargs}
                try:
                    answers.append((impl.plugin_name, impl.function(**args)))
                except MonoagentError:
                    raise
                except Exception as exc:
                    raise HookError(name, impl.plugin_name, exc) from exc
        except BaseException as exc:
            error = exc
            raise
        finally:
            if frame is not None:
                self._finished(frame, kwargs, plugins, answers, error)
        return answers

    def _registry(self, registrar: Registrar) -> None:
        """The implementation of ``registrar.plugin`` of one registry hook, given ``registrar``."""
        name = registrar.hook
        impls = [impl for impl in self._callers[name].get_hookimpls() if impl.plugin_name == registrar.plugin]
        kwargs: dict[str, Any] = {"register": registrar}
        plugins = tuple(impl.plugin_name for impl in impls)
        frame = self._started(name, kwargs, plugins)
        error: BaseException | None = None
        try:
            for impl in impls:
                try:
                    impl.function(**(kwargs if "register" in impl.argnames else {}))
                except MonoagentError:
                    raise
                except Exception as exc:
                    hint = f" (the call is {registrar.call_form})" if isinstance(exc, TypeError) else ""
                    raise RegistrationError(
                        f"plugin {registrar.plugin!r} failed in {name}: {type(exc).__name__}: {exc}{hint}"
                    ) from exc
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._finished(frame, kwargs, plugins, None, error)

    def culprit(self, hook: str, exc: BaseException) -> str:
        """The plugin whose implementation of ``hook`` raised ``exc`` (the innermost frame wins)."""
        owners: dict[Any, str] = {}
        for impl in self._callers[hook].get_hookimpls():
            function = getattr(impl.function, "_monoagent_answers", impl.function)
            code = getattr(function, "__code__", None)
            if code is not None:
                owners[code] = impl.plugin_name
        found = "unknown plugin"
        tb = exc.__traceback__
        while tb is not None:
            owner = owners.get(tb.tb_frame.f_code)
            if owner is not None:
                found = owner
            tb = tb.tb_next
        return found

    # ============================================================== registries

    def register_providers(self, *, register: ProviderRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_history_stores(self, *, register: HistoryStoreRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_tool_history_stores(self, *, register: ToolHistoryStoreRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_memory_tiers(self, *, register: MemoryTierRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_embedders(self, *, register: EmbedderRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_channels(self, *, register: ChannelRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_notifiers(self, *, register: NotifierRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_compaction_policies(self, *, register: CompactionPolicyRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_tools(self, *, register: ToolRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    def register_commands(self, *, cli: click.Group) -> None:
        """Let every plugin add its commands to ``cli`` (a fresh root group per command line)."""
        self._call("register_commands", {"cli": cli})

    def register_config_sections(self, *, register: ConfigSectionRegistrar) -> None:
        """Call ``register.plugin``'s implementation; what it registers stays on the registrar."""
        self._registry(register)

    # ============================================================== lifecycle

    def configure(self, *, agent: Agent) -> None:
        """Historic: every plugin now, and each plugin registered later at its registration."""
        kwargs: dict[str, Any] = {"agent": agent}
        plugins = self._plugins("configure")
        frame = self._started("configure", kwargs, plugins)
        error: BaseException | None = None
        try:
            self._callers["configure"].call_historic(kwargs=kwargs)
        except MonoagentError as exc:
            error = exc
            raise
        except Exception as exc:
            error = HookError("configure", self.culprit("configure", exc), exc)
            raise error from exc
        finally:
            self._finished(frame, kwargs, plugins, None, error)

    def shutdown(self, *, agent: Agent) -> list[Any]:
        """The implementations' results; the caller awaits each one that is awaitable."""
        return self._call("shutdown", {"agent": agent})

    def after_history_reset(self, *, agent: Agent, logical_conversation_id: str | None) -> list[Any]:
        """The implementations' results; the caller awaits each one that is awaitable."""
        return self._call("after_history_reset", {"agent": agent, "logical_conversation_id": logical_conversation_id})

    # ============================================================== section producers

    def section_core_guardrails(self, *, turn: Turn) -> Section | None:
        return self._checked("section_core_guardrails", {"turn": turn})

    def section_identity(self, *, turn: Turn) -> Section | None:
        return self._checked("section_identity", {"turn": turn})

    def section_session(self, *, turn: Turn) -> Section | None:
        return self._checked("section_session", {"turn": turn})

    def section_skill_index(self, *, turn: Turn) -> Section | None:
        return self._checked("section_skill_index", {"turn": turn})

    def section_skill_instructions(self, *, turn: Turn) -> Section | None:
        return self._checked("section_skill_instructions", {"turn": turn})

    def section_tool_recovery_policy(self, *, turn: Turn) -> Section | None:
        return self._checked("section_tool_recovery_policy", {"turn": turn})

    def section_current_permissions(self, *, turn: Turn) -> Section | None:
        return self._checked("section_current_permissions", {"turn": turn})

    def section_task_orchestration(self, *, turn: Turn) -> Section | None:
        return self._checked("section_task_orchestration", {"turn": turn})

    def section_artifact_references(self, *, turn: Turn) -> Section | None:
        return self._checked("section_artifact_references", {"turn": turn})

    def section_hidden_tool_domains(self, *, turn: Turn) -> Section | None:
        return self._checked("section_hidden_tool_domains", {"turn": turn})

    def section_agents_md(self, *, turn: Turn) -> Section | None:
        return self._checked("section_agents_md", {"turn": turn})

    def section_recovery_continuation(self, *, turn: Turn) -> Section | None:
        return self._checked("section_recovery_continuation", {"turn": turn})

    def section_retry_instruction(self, *, turn: Turn) -> Section | None:
        return self._checked("section_retry_instruction", {"turn": turn})

    def section_dynamic_context(self, *, turn: Turn) -> Section | None:
        return self._checked("section_dynamic_context", {"turn": turn})

    def section_extra_system(self, *, turn: Turn) -> Section | None:
        return self._checked("section_extra_system", {"turn": turn})

    def extra_sections(self, *, turn: Turn) -> list[Section | Sequence[Section]]:
        return self._checked("extra_sections", {"turn": turn})

    def render_history(self, *, turn: Turn, messages: Sequence[Message]) -> Section | None:
        return self._checked("render_history", {"turn": turn, "messages": messages})

    def render_user_message(self, *, turn: Turn, parts: Sequence[UserMessagePart]) -> Message | None:
        return self._checked("render_user_message", {"turn": turn, "parts": parts})

    # ============================================================== turn steps

    def provide_tools(self, *, agent: Agent, turn: Turn | None) -> list[PluginAnswer]:
        """Each implementation's answer (maybe an awaitable) with its plugin, to attribute the tools and blame a wrong value."""
        return self._each("provide_tools", {"agent": agent, "turn": turn})

    def filter_tools(self, *, turn: Turn, tools: Sequence[ToolSpec]) -> list[PluginAnswer]:
        """Each implementation's answer with its plugin, so a wrong value can be blamed on it."""
        return self._each("filter_tools", {"turn": turn, "tools": tools})

    def recall_memory(self, *, turn: Turn) -> list[Sequence[MemoryHit] | Awaitable[Sequence[MemoryHit]]]:
        return self._checked("recall_memory", {"turn": turn})

    def augment_user_message(
        self, *, turn: Turn, recalled: Sequence[MemoryHit]
    ) -> list[UserMessagePart | Sequence[UserMessagePart]]:
        return self._checked("augment_user_message", {"turn": turn, "recalled": recalled})

    def count_tokens(self, *, text: str, model: str) -> int | None:
        return self._checked("count_tokens", {"text": text, "model": model})

    def choose_compaction(self, *, turn: Turn, history_tokens: int, budget: int) -> str | None:
        kwargs = {"turn": turn, "history_tokens": history_tokens, "budget": budget}
        return self._checked("choose_compaction", kwargs)

    def prepare_provider_request(self, *, turn: Turn, request: ProviderRequest) -> ProviderRequest | None:
        return self._checked("prepare_provider_request", {"turn": turn, "request": request})

    def after_provider_call(self, *, turn: Turn, request: ProviderRequest, outcome: StepOutcome) -> None:
        self._call("after_provider_call", {"turn": turn, "request": request, "outcome": outcome})

    def before_tool_call(self, *, turn: Turn, call: ToolCall) -> ToolResult | None:
        return self._checked("before_tool_call", {"turn": turn, "call": call})

    def save_tool_output(self, *, turn: Turn, result: ToolResult, block: ContentBlock) -> str | None:
        return self._checked("save_tool_output", {"turn": turn, "result": result, "block": block})

    def after_tool_call(self, *, turn: Turn, call: ToolCall, result: ToolResult) -> None:
        self._call("after_tool_call", {"turn": turn, "call": call, "result": result})

    def redact(self, *, text: str, kind: str) -> str | None:
        return self._checked("redact", {"text": text, "kind": kind})

    def after_commit(self, *, turn: Turn, result: TurnResult) -> list[IsolatedAnswer]:
        """Each implementation on its own; a result may be an awaitable the caller awaits."""
        return self._isolated("after_commit", {"turn": turn, "result": result})

    def on_run_event(self, *, event: RunEvent, agent: Agent) -> list[IsolatedAnswer]:
        """Each implementation on its own, synchronously, in ``seq`` order of the events."""
        return self._isolated("on_run_event", {"event": event, "agent": agent})
