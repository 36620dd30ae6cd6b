"""``monoagent.hookimpl``: pluggy's implementation marker, with the note that lets the kernel attribute answers.

See :mod:`monoagent._kernel.hooks` for why: pluggy runs every hook call, and a plain implementation
marked here notes its answer (or, for an observer hook, its exception) in the record of the call
the kernel has open on this thread, so the kernel can name the plugin behind each answer.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

import pluggy

F = TypeVar("F", bound=Callable[..., Any])

PROJECT = "monoagent"


class CallRecord:
    """The answers of one hook call in progress on this thread, in call order."""

    __slots__ = ("answers", "failed", "hook", "isolated", "outer")

    def __init__(self, hook: str, isolated: bool, outer: CallRecord | None) -> None:
        self.hook = hook
        self.isolated = isolated
        self.outer = outer
        self.failed = False
        """Whether an implementation failed (an isolated call notes the failure and goes on)."""
        self.answers: list[tuple[Callable[..., Any], Any, BaseException | None]] = []


class _Open(threading.local):
    record: CallRecord | None = None


calls = _Open()

CHECKS: dict[str, Callable[[Any], Any]] = {}
"""Hook -> the check of one implementation's answer: the part of it of the wrong type, or :data:`FITS`.
Filled by :mod:`monoagent._kernel.hooks` for the hooks whose answers the kernel builds on."""

FITS = object()


class WrongAnswer(Exception):
    """An implementation answered ``hook`` with a value of the wrong type: raised where it answered,
    so the kernel can name its plugin (from ``function``) without noting every answer."""

    def __init__(self, hook: str, function: Callable[..., Any], value: Any) -> None:
        super().__init__(f"hook {hook!r} got a value of type {type(value).__name__}")
        self.hook = hook
        self.function = function
        self.value = value


def _answering(function: F, hook: str) -> F:
    """``function``, checking its answer, and noting it in the record of the call of ``hook`` open on this thread."""

    @functools.wraps(function)
    def answering(*args: Any, **kwargs: Any) -> Any:
        record = calls.record
        if record is None or record.hook != hook:
            value = function(*args, **kwargs)
            check = CHECKS.get(hook)
            if value is not None and check is not None:
                misfit = check(value)
                if misfit is not FITS:
                    raise WrongAnswer(hook, function, misfit)
            return value
        try:
            value = function(*args, **kwargs)
        except Exception as exc:
            if not record.isolated:
                raise
            record.answers.append((function, None, exc))
            record.failed = True
            return None
        record.answers.append((function, value, None))
        return value

    answering.__monoagent_hook__ = hook  # type: ignore[attr-defined]  # read by answers_noted()
    return answering  # type: ignore[return-value]  # same signature, through __wrapped__


def answers_noted(function: object) -> bool:
    """Whether a hook implementation was marked with :data:`~monoagent._kernel.hookspecs.hookimpl`
    (its answers can be attributed), for a function or a bound method."""
    return hasattr(getattr(function, "__func__", function), "__monoagent_hook__")


class HookimplMarker:
    """``monoagent.hookimpl``: pluggy's implementation marker for the project ``monoagent``.

    Takes pluggy's options (``tryfirst``, ``trylast``, ``wrapper``, ``hookwrapper``,
    ``optionalhook``, ``specname``) and marks the function exactly as pluggy does; a plain
    implementation (not a wrapper) is also wrapped so the kernel can attribute its answer (see the
    module docstring). Use it bare (``@hookimpl``) or with options (``@hookimpl(trylast=True)``).
    """

    def __init__(self, project: str = PROJECT) -> None:
        self._mark = pluggy.HookimplMarker(project)

    @overload
    def __call__(
        self, function: F, *, hookwrapper: bool = ..., optionalhook: bool = ..., tryfirst: bool = ...,
        trylast: bool = ..., specname: str | None = ..., wrapper: bool = ...,
    ) -> F: ...

    @overload
    def __call__(
        self, function: None = ..., *, hookwrapper: bool = ..., optionalhook: bool = ..., tryfirst: bool = ...,
        trylast: bool = ..., specname: str | None = ..., wrapper: bool = ...,
    ) -> Callable[[F], F]: ...

    def __call__(
        self,
        function: F | None = None,
        *,
        hookwrapper: bool = False,
        optionalhook: bool = False,
        tryfirst: bool = False,
        trylast: bool = False,
        specname: str | None = None,
        wrapper: bool = False,
    ) -> F | Callable[[F], F]:
        def mark(func: F) -> F:
            marked = self._mark(
                func, hookwrapper=hookwrapper, optionalhook=optionalhook, tryfirst=tryfirst, trylast=trylast,
                specname=specname, wrapper=wrapper,
            )
            if wrapper or hookwrapper or not inspect.isfunction(marked):
                return marked
            return _answering(marked, specname or marked.__name__)

        return mark if function is None else mark(function)
