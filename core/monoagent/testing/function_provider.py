"""A provider runtime driven by a Python function, for tests: ``FunctionProvider(fn)``.

A scripted provider (``offline:scripted``) replays answers fixed in advance; a test whose answer
depends on what the model was sent (the tool result of the previous step, the system prompt, the
tools on offer) needs the answer computed from the request. ``fn`` receives each step's
:class:`~monoagent._kernel.model.ProviderRequest` (``messages``, ``tools``, ``model``, ``step``,
``prompt``) and returns the reply, as pydantic-ai's ``FunctionModel`` does::

    from monoagent.testing import FunctionProvider, FunctionReply, fresh_agent

    def model(request):
        if request.step == 1:
            return FunctionReply(tool_calls=[{"name": "clock", "arguments": {}}])
        return f"The clock says {request.messages[-1].content}."

    agent = fresh_agent(tmp_path, provider=FunctionProvider(model))

``fn`` may be sync or async and returns a ``str`` (the answer text), a :class:`FunctionReply`
(text and/or tool calls, optionally usage and stop reason) or a list of tool calls (each a
:class:`~monoagent._kernel.model.ToolCall` or a mapping ``{"name", "arguments", "id"}``). An async
generator function streams instead: each ``str`` it yields is a text delta, each tool call a
tool call, a :class:`~monoagent._kernel.model.Usage` the step's usage, so a test can stall a stream
or cancel it half-way. Raising :class:`~monoagent._kernel.errors.ProviderError` rehearses a provider
failure (``retryable=True`` for a transient one); any other exception becomes a fatal
``ProviderError`` naming the function, with the original as its cause.

The stream is a real provider's: text in word-sized deltas with a cancellation point between
them, one :class:`~monoagent._kernel.model.ToolCallRequested` per call, then exactly one
:class:`~monoagent._kernel.model.StepFinished` with usage (estimated at four bytes a token unless
given). Every request is kept in :attr:`FunctionProvider.requests`. The runtime's ``name`` is
``function:<name>`` (``name`` defaults to the function's ``__name__``); that is also the model
id under which :func:`~monoagent.testing.fresh_agent` registers it.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import attrs

from monoagent._boundary.text import utf8_len
from monoagent._kernel.components import missing_members
from monoagent._kernel.errors import ConfigError, ProviderError
from monoagent._kernel.hookspecs import hookimpl
from monoagent._kernel.interfaces import ProviderRuntime
from monoagent._kernel.model import (
    ProviderEvent,
    ProviderRequest,
    StepFinished,
    TextDelta,
    ToolCall,
    ToolCallRequested,
    Usage,
)
from monoagent._kernel.registrars import ComponentRegistrar

__all__ = ["FunctionProvider", "FunctionReply", "InProcessProviders"]

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _tool_call(value: Any) -> ToolCall | Mapping[str, Any]:
    if isinstance(value, ToolCall):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("name"), str) and set(value) <= {"name", "arguments", "id"}:
        arguments = value.get("arguments", {})
        if isinstance(arguments, Mapping):
            return dict(value)
    raise TypeError(f"a tool call is a ToolCall or a mapping {{name, arguments, id}} with a str name and a mapping of arguments, not {value!r:.200}")


def _tool_calls(values: Sequence[Any]) -> tuple[ToolCall | Mapping[str, Any], ...]:
    return tuple(_tool_call(value) for value in values)


@attrs.frozen
class FunctionReply:
    """What a :class:`FunctionProvider`'s function answers for one step.

    ``tool_calls`` are :class:`~monoagent._kernel.model.ToolCall` values or mappings
    ``{"name": ..., "arguments": {...}, "id": ...}`` (``id`` optional: ``call_<r>_<n>`` is made
    up, ``r`` counting this provider's requests, so ids stay unique across turns). ``stop_reason`` defaults to ``tool_use`` when there are tool calls, else
    ``end_turn``; ``usage`` defaults to an estimate of four UTF-8 bytes a token.
    """

    text: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    tool_calls: tuple[ToolCall | Mapping[str, Any], ...] = attrs.field(default=(), converter=_tool_calls)
    usage: Usage | None = None
    stop_reason: str | None = None


def _tokens(text: str) -> int:
    return -(-utf8_len(text) // 4)


def _pieces(text: str) -> list[str]:
    """``text`` cut after whitespace into word-sized deltas, as a model streams it."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


class FunctionProvider:
    """A :class:`~monoagent._kernel.interfaces.ProviderRuntime` whose answers ``fn(request)`` computes.

    See the module documentation for what ``fn`` may return. ``requests`` lists every
    :class:`~monoagent._kernel.model.ProviderRequest` received, in order.
    """

    context_window = 200_000

    def __init__(self, fn: Callable[[ProviderRequest], Any], *, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionProvider needs a callable taking the ProviderRequest, not {fn!r:.100}")
        model = name if name is not None else getattr(fn, "__name__", "")
        if not _MODEL_NAME.fullmatch(model):
            raise ConfigError(
                f"FunctionProvider name {model!r} is not usable as a model name: pass name= of 1-64 letters, digits, '_', '.' or '-'"
            )
        self.fn: Callable[[ProviderRequest], Any] = fn
        self.name = f"function:{model}"
        self.requests: list[ProviderRequest] = []

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        if inspect.isasyncgenfunction(self.fn):
            async for event in self._streamed(request):
                yield event
            return
        reply = self._reply(await self._call(request), request.step)
        for piece in _pieces(reply.text) if reply.text else []:
            await asyncio.sleep(0)  # a cancellation point between deltas, as on a real stream
            yield TextDelta(piece)
        calls = [self._call_of(call, len(self.requests), n) for n, call in enumerate(reply.tool_calls, 1)]
        for call in calls:
            yield ToolCallRequested(call)
        stop = reply.stop_reason or ("tool_use" if calls else "end_turn")
        yield StepFinished(stop, reply.usage or self._usage(request, reply.text))

    async def _call(self, request: ProviderRequest) -> Any:
        try:
            answer = self.fn(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(f"{self.name}: the function raised {type(exc).__name__}: {exc}", provider="function") from exc
        return answer

    def _reply(self, answer: Any, step: int) -> FunctionReply:
        if isinstance(answer, FunctionReply):
            return answer
        if isinstance(answer, str):
            return FunctionReply(text=answer)
        if isinstance(answer, (list, tuple)):
            try:
                return FunctionReply(tool_calls=answer)
            except TypeError as exc:
                raise ProviderError(f"{self.name} step {step}: {exc}", provider="function") from None
        raise ProviderError(
            f"{self.name} step {step}: the function returned {type(answer).__name__}; "
            "return a str, a FunctionReply or a list of tool calls",
            provider="function",
        )

    async def _streamed(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        texts: list[str] = []
        usage: Usage | None = None
        calls = 0
        generator = self.fn(request)
        try:
            async for item in generator:
                if isinstance(item, str):
                    texts.append(item)
                    yield TextDelta(item)
                elif isinstance(item, Usage):
                    usage = item
                else:
                    try:
                        call = self._call_of(_tool_call(item), len(self.requests), calls + 1)
                    except TypeError as exc:
                        raise ProviderError(f"{self.name} step {request.step}: {exc}", provider="function") from None
                    calls += 1
                    yield ToolCallRequested(call)
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(f"{self.name}: the function raised {type(exc).__name__}: {exc}", provider="function") from exc
        finally:
            await generator.aclose()
        yield StepFinished("tool_use" if calls else "end_turn", usage or self._usage(request, "".join(texts)))

    @staticmethod
    def _call_of(call: ToolCall | Mapping[str, Any], request: int, n: int) -> ToolCall:
        """``call`` as a ToolCall; a call without an id gets ``call_<request>_<n>``, unique for this provider."""
        if isinstance(call, ToolCall):
            return call
        return ToolCall(str(call.get("id") or f"call_{request}_{n}"), call["name"], dict(call.get("arguments", {})))

    @staticmethod
    def _usage(request: ProviderRequest, text: str) -> Usage:
        prompt = request.prompt.system_text + "".join(message.content for message in request.messages)
        return Usage(input_tokens=_tokens(prompt), output_tokens=_tokens(text))


class InProcessProviders:
    """A plugin that registers in-process runtimes under their own model ids (``prefix:model``).

    :func:`~monoagent.testing.fresh_agent` registers one for its ``provider=`` argument; every
    runtime's ``name`` is its model id, and one provider prefix is registered per distinct prefix
    (``function`` for :class:`FunctionProvider`). A model id of that prefix that no runtime has is
    a :class:`~monoagent._kernel.errors.ConfigError` listing the ones there are.
    """

    def __init__(self, runtimes: Sequence[ProviderRuntime]) -> None:
        self.runtimes: dict[str, ProviderRuntime] = {}
        for runtime in runtimes:
            missing = missing_members(runtime, ProviderRuntime)
            if missing:
                raise ConfigError(f"an in-process provider is a ProviderRuntime: {type(runtime).__name__} has no {', '.join(missing)}")
            name = runtime.name
            if not isinstance(name, str) or ":" not in name or not name.partition(":")[2]:
                raise ConfigError(f"an in-process provider needs a name 'prefix:model' (its model id), not {name!r}")
            if name in self.runtimes:
                raise ConfigError(f"two in-process providers are named {name!r}; give each its own name")
            self.runtimes[name] = runtime

    @hookimpl
    def register_providers(self, register: ComponentRegistrar[ProviderRuntime]) -> None:
        for prefix in dict.fromkeys(name.partition(":")[0] for name in self.runtimes):
            register(prefix, self._factory(prefix), description="in-process runtimes of this test")

    def _factory(self, prefix: str) -> Callable[..., ProviderRuntime]:
        def make(agent: Any, model: str) -> ProviderRuntime:
            runtime = self.runtimes.get(f"{prefix}:{model}")
            if runtime is None:
                known = ", ".join(sorted(self.runtimes)) or "none"
                raise ConfigError(f"no in-process provider is named {prefix}:{model}; registered: {known}")
            return runtime

        return make
