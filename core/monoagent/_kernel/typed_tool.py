"""``@monoagent.tool``: a typed Python function as a tool, its schema from its signature and docstring.

::

    @tool
    def weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
        \"\"\"The current weather in a city.

        Args:
            city: the city's name, in English.
            unit: the temperature unit.
        \"\"\"

and in the plugin, ``register(weather)`` in ``register_tools``. The decorator builds the
:class:`~monoagent._kernel.model.ToolSpec` at once (so an unsupported annotation fails the plugin's
load, naming the function and the argument, not the first turn that calls it): the name is the
function's, the description the docstring's prose, each argument a property whose schema comes
from its annotation (:mod:`monoagent._kernel.tool_shapes`), with its docstring text and default.
A parameter annotated :class:`~monoagent._kernel.tool_context.ToolContext` (under any name)
receives the call's context and is not shown to the model.

When the model calls the tool, the arguments are checked against the signature before anything
runs (:meth:`TypedTool.handle`): every problem (a wrong type, a value outside an enum, a missing
argument, an unknown key, ``null`` where nothing is optional) is listed in one ``error`` result,
which reaches the model as ``is_error``, and the function is not called. Valid arguments are built
into the annotated types by cattrs (enum members, attrs instances, tuples, floats from integers)
and passed by keyword. The function's return value becomes the result: a ``str`` as it is, a
:class:`~monoagent._kernel.model.ToolResult` as it is, ``None`` as empty text, anything else (an
attrs instance, a dict, a list, a number) as JSON. An exception is left to the tool loop, which
answers the call with an ``error`` result carrying the redacted message, as for any handler.

An async function is awaited; a sync function is called on the turn's event loop, as the tool
loop calls every sync handler (move blocking work to ``asyncio.to_thread`` in an async tool).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, cast, overload

import cattrs

from monoagent._kernel.errors import ToolDefinitionError
from monoagent._kernel.host import await_me_maybe
from monoagent._kernel.model import ToolResult, ToolSpec, ToolStatus
from monoagent._kernel.tool_context import ToolContext
from monoagent._kernel.tool_names import tool_name_problem
from monoagent._kernel.tool_shapes import (
    NO_DEFAULT,
    SUPPORTED,
    Member,
    Record,
    argument_texts,
    json_default,
    shape_of,
    summary,
    to_json,
)

PROBLEMS_SHOWN = 20
"""Problems one invalid call lists by line; the rest are counted."""

_converter = cattrs.Converter()

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)


class TypedTool(Generic[P, R_co]):
    """A function made a tool by :func:`tool`: its :attr:`spec` and the handler that checks and calls it.

    Calling the object calls the function (``func``) unchanged, so it stays testable as a plain
    function, with the function's own signature to a type checker (``TypedTool[P, R_co]`` is a tool
    made of a ``Callable[P, R_co]``). ``register(typed_tool)`` in ``register_tools`` registers ``(spec, handle)``.
    ``arguments`` is the shape the model's arguments are checked against, ``context_parameter``
    the name of the parameter that receives the ``ToolContext`` (None when none does).
    """

    def __init__(self, func: Callable[P, R_co], spec: ToolSpec, arguments: Record, context_parameter: str | None) -> None:
        self.func: Callable[P, R_co] = func
        self.spec: ToolSpec = spec
        self.arguments: Record = arguments
        self.context_parameter: str | None = context_parameter
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<monoagent tool {self.spec.name!r} of {getattr(self.func, '__qualname__', self.func)!r}>"

    async def handle(self, context: ToolContext) -> ToolResult | str:
        """Answer one call: refuse invalid arguments with one ``error`` result, else call the function."""
        problems: list[str] = []
        self.arguments.check(context.arguments, "", problems)
        keywords = {} if problems else self._structure(context.arguments, problems)
        if problems:  # the model's own values, quoted back to it: redacted as an exception's message is
            return context.result(context.turn.redact(self._refusal(problems), "error"), ToolStatus.ERROR)
        if self.context_parameter is not None:
            keywords[self.context_parameter] = context
        call = cast("Callable[..., object]", self.func)  # the keywords are its parameters, built from its signature
        value = await await_me_maybe(call(**keywords))
        return result_of(self.spec.name, value)

    def _structure(self, arguments: dict[str, Any], problems: list[str]) -> dict[str, Any]:
        """The checked arguments as the annotated Python values; what an attrs class still refuses
        (its own validators) is added to ``problems``."""
        keywords = {}
        for member in self.arguments.members:
            if member.name not in arguments:
                continue
            try:
                keywords[member.name] = _converter.structure(arguments[member.name], member.annotation)
            except cattrs.BaseValidationError as exc:  # an attrs class's own validators refused a value
                for line in cattrs.transform_error(exc, path=member.name, format_exception=lambda error, _: str(error)):
                    message, _, path = line.rpartition(" @ ")
                    problems.append(f"{path}: {message}")
            except (TypeError, ValueError) as exc:
                problems.append(f"{member.name}: {exc}")
        return keywords

    def _refusal(self, problems: list[str]) -> str:
        lines = problems[:PROBLEMS_SHOWN]
        if len(problems) > PROBLEMS_SHOWN:
            lines.append(f"(and {len(problems) - PROBLEMS_SHOWN} more)")
        listed = "\n".join(f"- {line}" for line in lines)
        return f"Invalid arguments for tool {self.spec.name!r}; it did not run:\n{listed}\nCall it again with corrected arguments."


def result_of(name: str, value: Any) -> ToolResult | str:
    """A typed tool's return value as the tool loop takes it (see the module docstring)."""
    if isinstance(value, (str, ToolResult)):
        return value
    if value is None:
        return ""
    try:
        return to_json(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"tool {name!r} returned {type(value).__name__}, which is not JSON ({exc}); return a str, a ToolResult, "
            f"None, an attrs instance, or dicts and lists of JSON values"
        ) from None


def _signature_of(function: Callable[..., Any], where: str) -> tuple[inspect.Signature, dict[str, Any]]:
    if not callable(function):
        raise ToolDefinitionError(f"@tool decorates a function, not {type(function).__name__} {function!r}")
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function, include_extras=True)  # Annotated bounds are kept, not stripped
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{where}: its signature cannot be read ({exc})") from None
    except Exception as exc:  # NameError for a name imported only under TYPE_CHECKING, and the like
        raise ToolDefinitionError(f"{where}: its annotations cannot be resolved ({type(exc).__name__}: {exc}); import every annotated type at run time") from None
    return signature, hints


def _build(
    function: Callable[P, R_co],
    name: str | None,
    description: str | None,
    categories: tuple[str, ...] = (),
    domain: str | None = None,
) -> TypedTool[P, R_co]:
    where = f"tool function {getattr(function, '__qualname__', function)!r}"
    signature, hints = _signature_of(function, where)
    texts = argument_texts(function.__doc__)
    members: list[Member] = []
    context_parameter = None
    for parameter in signature.parameters.values():
        at = f"{where}, argument {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise ToolDefinitionError(f"{at}: a tool's arguments are passed by name; *args, **kwargs and positional-only arguments cannot be")
        if parameter.name not in hints:
            raise ToolDefinitionError(f"{at}: the argument has no type annotation; annotate it with {SUPPORTED}, or ToolContext for the call's context")
        annotation = hints[parameter.name]
        bare = annotation.__origin__ if typing.get_origin(annotation) is typing.Annotated else annotation
        if isinstance(bare, type) and issubclass(bare, ToolContext):
            if context_parameter is not None:
                raise ToolDefinitionError(f"{at}: only one argument may take the ToolContext ({context_parameter!r} already does)")
            context_parameter = parameter.name
            continue
        shape = shape_of(annotation, at)
        required = parameter.default is parameter.empty
        default = NO_DEFAULT if required else json_default(parameter.default, shape, at)
        members.append(Member(parameter.name, annotation, shape, required, texts.get(parameter.name, ""), default))
    documented = set(texts) - {m.name for m in members} - {context_parameter}
    if documented:
        raise ToolDefinitionError(f"{where}: the docstring describes {', '.join(sorted(documented))}, which the function does not take")
    text = summary(function.__doc__) if description is None else description
    if not text:
        raise ToolDefinitionError(f"{where}: a tool needs a description for the model; write a docstring or pass @tool(description=...)")
    arguments = Record(tuple(members), noun="argument")
    problem = tool_name_problem(name or function.__name__)
    if problem:
        raise ToolDefinitionError(f"{where}: its {problem}; pass @tool(name=...) with a valid one" if name is None else f"{where}: {problem}")
    spec = ToolSpec(name or function.__name__, text, arguments.schema(), categories=categories, domain=domain)
    return TypedTool(function, spec, arguments, context_parameter)


@overload
def tool(function: Callable[P, R_co], /) -> TypedTool[P, R_co]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, categories: Sequence[str] = (), domain: str | None = None
) -> Callable[[Callable[P, R_co]], TypedTool[P, R_co]]: ...


def tool(
    function: Callable[P, R_co] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    categories: Sequence[str] = (),
    domain: str | None = None,
) -> TypedTool[P, R_co] | Callable[[Callable[P, R_co]], TypedTool[P, R_co]]:
    """Make a typed function a tool: ``@tool`` or ``@tool(name=..., description=..., categories=[...])``.

    Args:
        function: the sync or async function; every argument is annotated with a supported type
            (:data:`~monoagent._kernel.tool_shapes.SUPPORTED`) or with ``ToolContext``.
        name: the tool's name for the model (default: the function's name): 1 to 64 ASCII
            letters, digits, ``_`` or ``-``, the providers' rule.
        description: the tool's description (default: the docstring's prose).
        categories: the action categories a permission profile decides on (``read``, ``pure``,
            ``file_write``, ``shell``, ``network``, ``subagent``, ``external``); none counts as
            ``external`` under a restricted profile. ``["pure"]`` marks a tool without side effects
            (a calculator, a unit converter), which every profile allows, ``read_only`` included.
        domain: the tool domain that may be hidden until requested (``memory``, ``task``, ...);
            None for the always-visible core.

    Returns:
        A :class:`TypedTool`; pass it to ``register`` in ``register_tools``.

    Raises:
        ToolDefinitionError: an argument without an annotation or of an unsupported type, a
            docstring describing an argument the function does not take, no description, or a
            name outside the providers' tool-name rule.
    """
    if isinstance(categories, str) or not all(isinstance(c, str) for c in categories):
        raise ToolDefinitionError(f"@tool(categories=...) takes a list of category names, such as ['shell'], not {categories!r}")
    kinds = tuple(categories)
    if function is None:
        return lambda decorated: _build(decorated, name, description, kinds, domain)
    return _build(function, name, description, kinds, domain)
