"""How the kernel calls hooks: pluggy runs every call; the kernel types it, checks it and names plugins.

Every hook call goes through pluggy (its ``_multicall`` handles firstresult, historic hooks and
both kinds of wrappers in one loop), reached through one of the typed callers of :class:`Hooks`
(``agent.hooks``), each of which takes the hook's own spec function, so mypy checks the
arguments against the spec and types the answer::

    section = agent.hooks.first(spec.section_identity, turn=turn)       # firstresult: R | None
    parts = agent.hooks.collect(spec.augment_user_message, turn=turn, recalled=hits)  # list[R]
    answers = agent.hooks.each(spec.on_run_event, event=event, agent=agent)  # list[Answer[R]]

* :meth:`Hooks.first` and :meth:`Hooks.collect` return pluggy's result (one answer, or the list
  of non-None answers in call order: the most recently registered implementation first).
* :meth:`Hooks.first_awaited` calls a firstresult hook whose answer may be an awaitable
  (``before_tool_call``): it awaits it, and an awaited None passes the call on to the
  implementations after the one that answered.
* :meth:`Hooks.each` returns every answer attributed to its plugin, for hooks whose answers the
  kernel must attribute (``provide_tools``, ``filter_tools``) or isolate: an implementation of an
  observer hook (``after_commit``, ``on_run_event``) that raises is reported as its answer's
  ``error`` and the others still run.
* :meth:`Hooks.historic` calls a historic hook: ``configure``, and the registry hooks, which the
  plugin host calls once at start-up so that pluggy runs each plugin's implementation when the
  plugin is registered (:mod:`monoagent._kernel.host`).

Wrappers (``wrapper=True`` and old-style ``hookwrapper=True``) therefore run on every hook, once
per call, and what they return is what the caller sees, except on the historic hooks
(``configure`` and the registries, each called for one plugin at a time), where pluggy refuses a
wrapper when its plugin is registered; the host reports that naming the plugin and the hook.

Attribution without patching pluggy: :data:`~monoagent._kernel.hookspecs.hookimpl` (pluggy's
marker for the project ``monoagent``) wraps each plain implementation in a thin function that,
while the kernel has a call of that hook open on this thread, notes the implementation's answer
(or, for an observer hook, its exception) in the call's record. pluggy sees an ordinary function
(its signature is the implementation's, through ``__wrapped__``) and calls it as it calls any
implementation; an implementation marked another way is refused at registration. From those
notes the kernel names the plugin whose answer had the wrong type, the plugin whose result won a
firstresult call, and the plugin of each attributed answer. An answer that a wrapper put in the
result is blamed on the hook's wrappers. A call of :meth:`Hooks.first` or :meth:`Hooks.collect`
that nothing observes needs no record: the thin function checks its implementation's answer
itself (:data:`~monoagent._kernel.marker.CHECKS`) and a wrong one raises where it was answered,
naming its function, so the plain call costs pluggy's call and one check an answer.

An exception escaping a call becomes a :class:`~monoagent._kernel.errors.HookError` naming the
hook and the plugin whose code raised it (a registry's becomes a
:class:`~monoagent._kernel.registrars.RegistrationError`, which fails that plugin's load); a
:class:`~monoagent._kernel.errors.MonoagentError` passes unchanged. The answers the kernel builds
on (:data:`RESULT_TYPES`) are checked after the call: a value of the wrong type is a
:class:`~monoagent._kernel.errors.HookResultError` naming the hook and the plugin that returned it.

Tracing is pluggy's own seam, :meth:`pluggy.PluginManager.add_hookcall_monitoring`, installed
while anything observes: ``MONO_AGENT_TRACE_HOOKS=1`` prints each call, the implementations it
reaches and, for a firstresult hook, the plugin whose result won; a
:class:`~monoagent.testing.HookRecorder` sees the same calls. To add a hook, write its spec in
:mod:`~monoagent._kernel.hookspecs` and call it with the caller of its kind.
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast

import attrs
import pluggy

from monoagent._kernel.errors import HookError, HookResultError, MonoagentError, PluginError
from monoagent._kernel.hookspecs import SECTIONS
from monoagent._kernel.marker import CHECKS, FITS, CallRecord, WrongAnswer, answers_noted, calls
from monoagent._kernel.model import MemoryHit, Message, ProviderRequest, Section, ToolResult, UserMessagePart
from monoagent._kernel.permissions import PermissionProfile

P = ParamSpec("P")
R = TypeVar("R")

#: The observer hooks: each implementation runs whatever another one raised.
ISOLATED = frozenset({"after_commit", "on_run_event"})


#: The hooks whose answers the kernel checks: hook -> (the type(s) an answer must have, what the error
#: says belongs there). A collect-all hook may also answer with a list or tuple of them; one in
#: :data:`AWAITED_RESULTS` answers only with a list or tuple, or an awaitable checked once awaited.
RESULT_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    # every hook of the section catalogue, deprecated aliases included
    **{hook.__name__: (Section, "a monoagent.Section or None") for spec in SECTIONS for hook in spec.hooks},
    "extra_sections": (Section, "a monoagent.Section, a list of them or None"),
    "augment_user_message": (UserMessagePart, "a monoagent.UserMessagePart, a list of them or None"),
    "recall_memory": (MemoryHit, "a list of monoagent.MemoryHit (or an awaitable of one) or None"),
    "render_user_message": (Message, "a monoagent.Message or None"),
    "count_tokens": (int, "an int (the token count) or None"),
    "choose_compaction": (str, "a compaction policy name (str) or None"),
    "prepare_provider_request": (ProviderRequest, "a monoagent.ProviderRequest or None"),
    "before_tool_call": (ToolResult, "a monoagent.ToolResult (or an awaitable of one) or None"),
    "turn_permissions": (PermissionProfile, "a monoagent.PermissionProfile or None"),
    "save_tool_output": (str, "a reference to the saved output (str) or None"),
    "redact": (str, "the redacted text (str) or None"),
}
AWAITED_RESULTS = frozenset({"recall_memory"})


# ---------------------------------------------------------------------------- answers and observers


@attrs.frozen
class Answer(Generic[R]):
    """One implementation's answer to a hook whose answers the kernel attributes (:meth:`Hooks.each`).

    ``plugin`` is the implementing plugin (for a value a wrapper put in the result, the hook's
    wrappers, described); ``value`` its answer; ``error`` what it raised (observer hooks only).
    """

    plugin: str
    value: R | None = None
    error: BaseException | None = None


@attrs.frozen
class HookCall:
    """One hook call as observers see it.

    ``plugins`` are the implementations in call order (wrappers included). ``result`` is pluggy's
    result; ``error`` what the call raised (an exception that is not a monoagent error as the
    :class:`~monoagent._kernel.errors.HookError` the caller receives). ``winner`` is the plugin whose
    answer a firstresult hook returned (None when none answered).

    ``kwargs`` and ``result`` are typed ``Any``: they are whatever the hook named by ``name`` takes
    and answers, a different type per hook (its spec in :mod:`~monoagent._kernel.hookspecs` says which).
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


async def _checked_once_awaited(hook: str, plugin: str, awaitable: Awaitable[Any]) -> Any:
    """``awaitable``'s value, checked like a direct answer and blamed on ``plugin``."""
    value = await awaitable
    _check(hook, value, False, plugin)
    return value


def _misfit(name: str, answer: Any, firstresult: bool) -> Any:
    """The part of ``answer`` that does not have the type :data:`RESULT_TYPES` documents for ``name``, or ``FITS``."""
    if answer is None:
        return FITS
    expected, _ = RESULT_TYPES[name]
    if name in AWAITED_RESULTS and not isinstance(answer, (list, tuple)):
        return answer
    items = answer if not firstresult and isinstance(answer, (list, tuple)) else (answer,)
    for item in items:
        if not isinstance(item, expected) or (expected is int and isinstance(item, bool)):
            return item
    return FITS


def _check(name: str, answer: Any, firstresult: bool, plugin: str) -> None:
    """Raise the :class:`HookResultError` blaming ``plugin`` when ``answer`` does not fit ``name``."""
    misfit = _misfit(name, answer, firstresult)
    if misfit is not FITS:
        raise HookResultError(name, plugin, misfit, RESULT_TYPES[name][1])


MAY_AWAIT = AWAITED_RESULTS | {"before_tool_call"}
"""Hooks whose implementations may answer with an awaitable: checked once awaited, with the call's record."""


def _register_checks() -> None:
    """Let each marked implementation check its own answer (:data:`monoagent._kernel.marker.CHECKS`),
    so a plain call of a checked hook needs no record of the answers to blame a wrong one."""
    from monoagent._kernel import hookspecs

    for name, (expected, _) in RESULT_TYPES.items():
        if name in MAY_AWAIT:
            continue
        firstresult = bool(getattr(hookspecs, name).monoagent_spec.get("firstresult"))
        CHECKS[name] = _quick_check(name, expected, firstresult)


def _quick_check(name: str, expected: type | tuple[type, ...], firstresult: bool) -> Callable[[Any], Any]:
    """:func:`_misfit` for ``name``, answering a value of exactly the expected class at once (the
    usual answer: one class comparison, not a lookup of the hook's types)."""
    exact = expected if isinstance(expected, type) else None  # a bool's class is not int: it still goes to _misfit

    def check(answer: Any) -> Any:
        if answer.__class__ is exact:
            return FITS
        return _misfit(name, answer, firstresult)

    return check


_register_checks()


# ---------------------------------------------------------------------------- the callers


@attrs.frozen
class _Plan:
    """How a hook call nobody observes is run: pluggy's execution of it (``_multicall``, wrappers
    and all, through the plugin manager's ``_hookexec`` that call monitoring hooks into).

    :meth:`pluggy.HookCaller.__call__` is that execution after three run-time checks of the
    keyword arguments: a historic hook is refused, the spec's default values are filled in, and a
    missing argument warns. The typed callers make the last one at type-check time (the arguments
    are the spec's own ``ParamSpec``), no hook spec declares a default, and historic hooks go
    through :meth:`Hooks.historic`; so for every other hook the call goes straight to pluggy's
    execution, with the implementations copied as ``__call__`` copies them. A caller without those
    attributes (another pluggy) or with defaults is called the documented way.
    ``tests/test_hooks.py`` holds both ways to the same answers and wrappers.
    """

    execute: Callable[[str, list[Any], Mapping[str, object], bool], Any] | None
    """pluggy's execution, or None to call :attr:`caller` the documented way."""
    impls: list[Any]
    """The caller's implementations: the list pluggy changes in place as plugins come and go."""
    caller: pluggy.HookCaller
    firstresult: bool
    wrapped: bool
    """Whether a wrapper implements a hook whose answers are checked (a misfit left is the wrapper's)."""

    @classmethod
    def of(cls, caller: pluggy.HookCaller, wrapped: bool) -> _Plan:
        spec = caller.spec
        execute = getattr(caller, "_hookexec", None)
        impls = getattr(caller, "_hookimpls", None)
        direct = (
            execute is not None and isinstance(impls, list) and spec is not None
            and not spec.kwargdefaults and not caller.is_historic()
        )
        firstresult = bool(spec is not None and spec.opts.get("firstresult"))
        return cls(execute if direct else None, impls if isinstance(impls, list) else [], caller, firstresult, wrapped)


def _keywords_only(spec: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if args:
        raise TypeError(f"hook {spec.__name__!r} is called with keyword arguments only")


class Hooks:
    """The kernel's one way to call hooks: typed callers over pluggy (see the module docstring).

    pluggy's answers are untyped; each caller casts them to the type its spec declares, which is
    the contract every implementation is held to (the answers listed in :data:`RESULT_TYPES` are
    checked at run time as well).
    """

    def __init__(self, pm: pluggy.PluginManager, *, trace: Callable[[str], None] | None = None) -> None:
        self._pm = pm
        self._observers: list[HookObserver] = []
        self._stop_monitoring: Callable[[], None] | None = None
        self._order: dict[str, tuple[tuple[Any, str], ...]] = {}
        self._callers: dict[str, pluggy.HookCaller] = {}
        self._plans: dict[str, _Plan] = {}
        if trace is not None:
            self.observe(_Tracer(trace))

    def _caller(self, name: str) -> pluggy.HookCaller:
        """pluggy's caller of ``name`` (one per hook name for the plugin manager's life: kept)."""
        caller = self._callers.get(name)
        if caller is None:
            caller = self._callers[name] = getattr(self._pm.hook, name)
        return caller

    def _plan(self, name: str) -> _Plan:
        """How to run ``name`` (kept until a plugin is registered or unregistered)."""
        caller = self._caller(name)
        wrapped = name in RESULT_TYPES and any(impl.wrapper or impl.hookwrapper for impl in caller.get_hookimpls())
        plan = self._plans[name] = _Plan.of(caller, wrapped)
        return plan

    def _plain_call(self, name: str, kwargs: dict[str, Any], firstresult: bool) -> Any:
        """The call of a hook nobody observes and whose answers need no record: pluggy's, checked."""
        plan = self._plans.get(name) or self._plan(name)
        execute = plan.execute
        try:
            result = plan.caller(**kwargs) if execute is None else execute(name, plan.impls.copy(), kwargs, firstresult)
        except WrongAnswer as wrong:  # an implementation's own check: blame its plugin
            raise HookResultError(name, self._plugin_of(name, wrong.function), wrong.value, RESULT_TYPES[name][1]) from None
        except MonoagentError:
            raise
        except Exception as exc:
            raise self._hook_error(name, exc) from exc
        if plan.wrapped:  # every implementation's answer fitted: a misfit is a wrapper's
            for answer in (result,) if firstresult else result:
                if answer is not None and _misfit(name, answer, firstresult) is not FITS:
                    _check(name, answer, firstresult, self._wrappers(name))
        return result

    # ------------------------------------------------------------------ typed callers

    def first(self, spec: Callable[P, R | None], /, *args: P.args, **kwargs: P.kwargs) -> R | None:
        """Call a firstresult hook: the first non-None answer, or None."""
        if args:
            _keywords_only(spec, args)
        name = spec.__name__
        if self._observers or name in AWAITED_RESULTS:
            return cast("R | None", self._call(name, kwargs, firstresult=True))
        return self._plain_call(name, kwargs, True)  # type: ignore[no-any-return]  # the spec's type (each answer is checked where it is answered); no cast() call on the hot path

    def collect(self, spec: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """Call a collect-all hook: its non-None answers, in call order.

        Typed as the spec's return type (mypy cannot take ``None`` out of a union of several
        types), though pluggy never collects a None.
        """
        if args:
            _keywords_only(spec, args)
        name = spec.__name__
        if not self._observers and name not in AWAITED_RESULTS:
            return self._plain_call(name, kwargs, False)  # type: ignore[no-any-return]  # as in first()
        return cast("list[R]", self._call(name, kwargs, firstresult=False))

    async def first_awaited(self, spec: Callable[P, R | Awaitable[R | None] | None], /, *args: P.args, **kwargs: P.kwargs) -> R | None:
        """Call a firstresult hook whose implementations may answer with an awaitable (``before_tool_call``):
        the first answer that is not None once awaited, or None.

        An awaitable answer ends pluggy's call, as any answer does, and is awaited here. When it
        gives None, the implementation that returned it has nothing to say, and the call passes on:
        the hook is called again without that plugin (:meth:`pluggy.PluginManager.subset_hook_caller`),
        so the implementations after it still answer. Implementations before it and wrappers then run
        once per call made.
        """
        _keywords_only(spec, args)
        name = spec.__name__
        passed: list[object] = []
        while True:
            caller = self._caller(name) if not passed else self._pm.subset_hook_caller(name, passed)
            record = self._open(name, False)
            try:
                result = caller(**kwargs)
            except MonoagentError:
                raise
            except Exception as exc:
                raise self._hook_error(name, exc) from exc
            finally:
                self._close(record)
            plugins = self._implementers(name, record)
            for (_, value, _), plugin in zip(record.answers, plugins, strict=True):
                if value is not None and not inspect.isawaitable(value):
                    _check(name, value, True, plugin)
            plugin = next((p for (_, value, _), p in zip(record.answers, plugins, strict=True) if value is result), None) or self._wrappers(name)
            if not inspect.isawaitable(result):
                _check(name, result, True, plugin)
                return cast("R | None", result)
            value = await result
            _check(name, value, True, plugin)
            if value is not None:
                return cast("R", value)
            answered = self._pm.get_plugin(plugin)
            if answered is None or answered in passed:
                return None
            passed.append(answered)

    def each(self, spec: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> list[Answer[R]]:
        """Call a collect-all hook and attribute each non-None answer (and, for an observer hook, each
        failure) to its plugin, in call order."""
        if args:
            _keywords_only(spec, args)
        name = spec.__name__
        isolated = name in ISOLATED
        plan = self._plans.get(name) or self._plan(name)
        execute = plan.execute
        record = calls.record = CallRecord(name, isolated, calls.record)
        try:
            result = plan.caller(**kwargs) if execute is None else execute(name, plan.impls.copy(), kwargs, False)
        except MonoagentError:
            raise
        except Exception as exc:
            error = self._hook_error(name, exc)
            if not isolated:
                raise error from exc
            return [*self._attributed(name, record, []), Answer(error.plugin, None, exc)]
        finally:
            calls.record = record.outer
        if not result and not record.failed:
            return []  # an observer's usual call: every implementation answered None
        return self._attributed(name, record, result)

    def historic(self, spec: Callable[P, None], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Call a historic hook (``configure``): every plugin now, and each plugin registered later at its registration."""
        name = spec.__name__
        record = self._open(name, False) if self._observers else None
        try:
            self._caller(name).call_historic(kwargs=kwargs)
        except MonoagentError:
            raise
        except Exception as exc:
            raise self._hook_error(name, exc) from exc
        finally:
            if record is not None:
                self._close(record)

    def implemented(self, spec: Callable[..., Any], /, *, defaults: bool = True) -> bool:
        """Whether an active plugin implements the hook of ``spec`` (a wrapper counts); with
        ``defaults=False``, whether one answers it ahead of the defaults: a plain implementation
        without ``trylast``, the mark of every bundled default."""
        impls = self._caller(spec.__name__).get_hookimpls()
        if defaults:
            return bool(impls)
        return any(not (impl.wrapper or impl.hookwrapper or impl.trylast) for impl in impls)

    # ------------------------------------------------------------------ the call, its record and its checks

    def _open(self, name: str, isolated: bool) -> CallRecord:
        record = CallRecord(name, isolated, calls.record)
        calls.record = record
        return record

    @staticmethod
    def _close(record: CallRecord) -> None:
        calls.record = record.outer

    def _call(self, name: str, kwargs: dict[str, Any], *, firstresult: bool) -> Any:
        """The call with a record of every implementation's answer: while anything observes (the
        tracer wants the winner), and for a hook whose answers may be awaitables."""
        checked = name in RESULT_TYPES
        record = self._open(name, False)
        try:
            result = self._caller(name)(**kwargs)
        except MonoagentError:
            raise
        except Exception as exc:
            raise self._hook_error(name, exc) from exc
        finally:
            self._close(record)
        if checked:
            result = self._checked(name, record, result, firstresult)
        return result

    def _checked(self, name: str, record: CallRecord, result: Any, firstresult: bool) -> Any:
        """``result`` once every noted answer and the result itself are checked against :data:`RESULT_TYPES`.

        An implementation's answer of the wrong type is blamed on its plugin; a wrong value in the
        result that no implementation answered was put there by a wrapper. An awaitable answer of
        a hook in :data:`AWAITED_RESULTS` is wrapped so its value is checked once awaited. The
        plugins are looked up only for an answer that needs one (a wrong one, an awaitable).
        """
        awaited = name in AWAITED_RESULTS
        for index, (_, value, _) in enumerate(record.answers):
            if value is not None and not (awaited and inspect.isawaitable(value)) and _misfit(name, value, firstresult) is not FITS:
                _check(name, value, firstresult, self._implementers(name, record)[index])
        if firstresult:
            if result is not None and _misfit(name, result, True) is not FITS:
                _check(name, result, True, self._answered_by(name, record, result))
            return result
        checked = []
        for answer in result:
            if awaited and inspect.isawaitable(answer):
                checked.append(_checked_once_awaited(name, self._answered_by(name, record, answer), answer))
                continue
            if _misfit(name, answer, False) is not FITS:
                _check(name, answer, False, self._answered_by(name, record, answer))
            checked.append(answer)
        return checked

    def _plugin_of(self, name: str, function: Any) -> str:
        """The plugin of the implementation of ``name`` whose function is ``function``."""
        for impl in self._caller(name).get_hookimpls()[::-1]:
            if inspect.unwrap(impl.function) is function:
                return impl.plugin_name
        return "unknown plugin"

    def _answered_by(self, name: str, record: CallRecord, value: Any) -> str:
        """The plugin whose noted answer ``value`` is; a value no implementation answered is the wrappers'."""
        for (_, answer, _), plugin in zip(record.answers, self._implementers(name, record), strict=True):
            if answer is value:
                return plugin
        return self._wrappers(name)

    def _implementers(self, name: str, record: CallRecord) -> list[str]:
        """The plugin of each answer noted in ``record``, in order.

        pluggy calls the plain implementations in the reverse of their registration order (wrappers
        aside), and each notes its answer as it returns, so the n-th note is the n-th implementation
        called; its function confirms it (two instances of one class share their functions).
        """
        order = self._order.get(name)
        if order is None:
            impls = reversed(self._caller(name).get_hookimpls())
            order = self._order[name] = tuple(
                (inspect.unwrap(impl.function), impl.plugin_name) for impl in impls if not (impl.wrapper or impl.hookwrapper)
            )
        plugins: list[str] = []
        position = 0
        for function, _, _ in record.answers:
            while position < len(order) and order[position][0] is not function:
                position += 1
            plugins.append(order[position][1] if position < len(order) else "unknown plugin")
            position += 1
        return plugins

    def forget_order(self) -> None:
        """Forget what was worked out of the registered implementations: the plugin host calls it
        whenever a plugin is registered or unregistered."""
        self._order.clear()
        self._plans.clear()

    def _wrappers(self, name: str) -> str:
        wrappers = [impl.plugin_name for impl in self._caller(name).get_hookimpls()[::-1] if impl.wrapper or impl.hookwrapper]
        return "the wrappers of " + (", ".join(wrappers) if wrappers else name)

    def _attributed(self, name: str, record: CallRecord, result: Sequence[Any]) -> list[Answer[Any]]:
        """Each noted answer still in ``result`` and each noted failure of an observer, with its plugin,
        in call order; then any value a wrapper put in ``result``, blamed on the wrappers."""
        kept = collections.Counter(id(value) for value in result)
        answers: list[Answer[Any]] = []
        for (_, value, error), plugin in zip(record.answers, self._implementers(name, record), strict=True):
            if error is not None:
                answers.append(Answer(plugin, None, error))
            elif value is not None and kept[id(value)] > 0:
                kept[id(value)] -= 1
                answers.append(Answer(plugin, value))
        for value in result:
            if kept[id(value)] > 0:
                kept[id(value)] -= 1
                answers.append(Answer(self._wrappers(name), value))
        return answers

    def _hook_error(self, name: str, exc: Exception) -> HookError:
        """The :class:`HookError` for ``exc`` escaping ``name``: made once, so observers and the caller see the same one."""
        made = getattr(exc, "_monoagent_hook_error", None)
        if isinstance(made, HookError):
            return made
        error = HookError(name, self.culprit(name, exc), exc)
        try:
            exc._monoagent_hook_error = error  # type: ignore[attr-defined]  # a note on the exception, read back above
        except AttributeError:  # an exception class with __slots__
            pass
        return error

    def culprit(self, hook: str, exc: BaseException) -> str:
        """The plugin whose implementation (or wrapper) of ``hook`` raised ``exc`` (the innermost frame wins)."""
        owners: dict[Any, str] = {}
        for impl in self._caller(hook).get_hookimpls():
            code = getattr(inspect.unwrap(impl.function), "__code__", None)
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

    # ------------------------------------------------------------------ observers

    def observe(self, observer: HookObserver) -> Callable[[], None]:
        """Show every later hook call to ``observer``; returns the function that stops it.

        The first observer installs pluggy's call monitoring; the last one to stop removes it.
        """
        self._observers.append(observer)
        if self._stop_monitoring is None:
            self._stop_monitoring = self._pm.add_hookcall_monitoring(self._before, self._after)

        def stop() -> None:
            if observer in self._observers:
                self._observers.remove(observer)
            if not self._observers and self._stop_monitoring is not None:
                self._stop_monitoring()
                self._stop_monitoring = None

        return stop

    def _before(self, name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]) -> None:
        plugins = tuple(impl.plugin_name for impl in reversed(impls))
        for observer in list(self._observers):
            observer.started(name, kwargs, plugins)

    def _after(self, outcome: pluggy.Result[Any], name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]) -> None:
        plugins = tuple(impl.plugin_name for impl in reversed(impls))
        error = outcome.exception
        if error is not None and not isinstance(error, MonoagentError) and isinstance(error, Exception):
            error = self._hook_error(name, error)
        winner = None
        record = calls.record
        caller = self._caller(name)
        if error is None and caller.spec is not None and caller.spec.opts.get("firstresult") and record is not None and record.hook == name:
            answered = [index for index, (_, value, _) in enumerate(record.answers) if value is not None]
            if answered:
                winner = self._implementers(name, record)[answered[0]]
        call = HookCall(name, dict(kwargs), plugins, None if error is not None else outcome.get_result(), error, winner)
        for observer in list(self._observers):
            observer.finished(call)


def check_implementations(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    """Refuse ``plugin``'s plain implementations marked with another marker than
    :data:`~monoagent._kernel.hookspecs.hookimpl` (their answers could not be attributed, nor an
    observer's failure isolated), naming the plugin and the hook."""
    for caller in pm.get_hookcallers(plugin) or []:
        if caller.spec is None:
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and not (impl.wrapper or impl.hookwrapper) and not answers_noted(impl.function):
                raise PluginError(
                    f"plugin {name!r} implements {caller.name!r} with a marker other than monoagent.hookimpl; "
                    f"mark it with @monoagent.hookimpl (it takes pluggy's options)"
                )
