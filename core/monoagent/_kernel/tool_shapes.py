"""What a typed tool's arguments may be: shapes built from type hints, each with its JSON Schema and its check.

:func:`shape_of` turns one Python annotation into a shape; a shape knows the JSON Schema the model
is shown (:meth:`Shape.schema`, the draft 2020-12 subset the providers accept) and how to check a
JSON value the model sent against it (:meth:`Shape.check`), reporting every problem with its path
(``city``, ``place.lat``, ``tags[2]``). Schema and check come from the same object, so what the
model is told and what is enforced cannot drift apart.

The supported annotations are the :data:`SUPPORTED` ones; anything else (a ``set``, a bare
``dict``, a union of two types, a class that is not an attrs class) raises
:class:`~monoagent._kernel.errors.ToolDefinitionError` naming where it was found. A value that
passed its check is then built into the annotated Python type by cattrs
(:mod:`monoagent._kernel.typed_tool`); the check is what makes that build safe (no bool where an
int belongs, no ``None`` where nothing optional is).
"""

from __future__ import annotations

import enum
import json
import math
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal, Protocol, Union

import attrs

from monoagent._kernel.errors import ToolDefinitionError
from monoagent._kernel.tool_constraints import constrained

SUPPORTED = (
    "str, int, float, bool, an enum.Enum subclass, Literal[...], list[X], tuple[X, ...], X | None, "
    "dict[str, X], or an attrs class whose fields are of these types, each optionally Annotated[X, bounds]"
)
"""What :func:`shape_of` accepts, as error messages say it."""

SHOWN_VALUE_MAX = 60
"""Characters of a bad value quoted in a problem; the rest is elided."""

_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
    (list, "array"), (tuple, "array"), (dict, "object"), (type(None), "null"),
)


def json_type(value: Any) -> str:
    """The JSON type name of ``value`` (``boolean`` before ``integer``: a bool is an int in Python)."""
    for python, name in _JSON_TYPES:
        if isinstance(value, python):
            return name
    return type(value).__name__


def shown(value: Any) -> str:
    """``value`` as JSON for a problem message, at most :data:`SHOWN_VALUE_MAX` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_VALUE_MAX else text[: SHOWN_VALUE_MAX - 1] + "…"


class _NoDefault(enum.Enum):
    NO_DEFAULT = "no default"


NO_DEFAULT = _NoDefault.NO_DEFAULT
"""A :class:`Member` without a default shown to the model (``attrs.NOTHING`` would mean "no default" to attrs itself)."""


def _got(value: Any) -> str:
    return f"got {shown(value)} ({json_type(value)})"


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Shape(Protocol):
    """One annotation as the model sees it (``schema``) and as its values are checked (``check``)."""

    @property
    def expected(self) -> str:
        """What a value must be, for a problem message: ``a string``, ``one of 'a', 'b'``."""

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the annotation."""

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        """Append one line per problem of ``value`` (found at ``path``) to ``problems``."""


@attrs.frozen
class Scalar:
    """``str``, ``int``, ``float`` or ``bool``: an integer is never a bool, a number may be an integer."""

    json: Literal["string", "integer", "number", "boolean"]

    @property
    def expected(self) -> str:
        return {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean"}[self.json]

    def schema(self) -> dict[str, Any]:
        return {"type": self.json}

    def accepts(self, value: Any) -> bool:
        if self.json == "string":
            return isinstance(value, str)
        if self.json == "boolean":
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if isinstance(value, float):
            return math.isfinite(value) and (self.json == "number" or value.is_integer())
        return isinstance(value, int) and (self.json == "integer" or _exact_float(value))

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        if self.json == "number" and isinstance(value, int) and not isinstance(value, bool) and not _exact_float(value):
            problems.append(f"{path}: expected a number a float holds exactly, got the integer {shown(value)}, "
                            "which a float would round (integers up to 2**53 are exact)")
        elif not self.accepts(value):
            problems.append(f"{path}: expected {self.expected}, {_got(value)}")


def _exact_float(value: int) -> bool:
    """Whether a float holds the integer ``value`` exactly (a float argument receives it unchanged)."""
    try:
        return int(float(value)) == value
    except OverflowError:  # beyond the largest float
        return False


@attrs.frozen
class Choice:
    """An ``enum.Enum`` subclass (its members' values) or a ``Literal[...]``: one of fixed JSON scalars."""

    values: tuple[Any, ...]

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(shown(v) for v in self.values)

    def schema(self) -> dict[str, Any]:
        kinds = {json_type(v) for v in self.values}
        if kinds == {"integer", "number"}:
            kinds = {"number"}
        return {"type": kinds.pop(), "enum": list(self.values)} if len(kinds) == 1 else {"enum": list(self.values)}

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        if not any(type(v) is type(value) and v == value for v in self.values):
            problems.append(f"{path}: expected {self.expected}, {_got(value)}")


@attrs.frozen
class ArrayOf:
    """``list[X]`` or ``tuple[X, ...]``: a JSON array whose every element is checked."""

    item: Shape

    @property
    def expected(self) -> str:
        return "an array"

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema()}

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        if not isinstance(value, list):
            problems.append(f"{path}: expected an array, {_got(value)}")
            return
        for index, element in enumerate(value):
            self.item.check(element, f"{path}[{index}]", problems)


@attrs.frozen
class MapOf:
    """``dict[str, X]``: a JSON object with any keys, every value checked."""

    value: Shape

    @property
    def expected(self) -> str:
        return "an object"

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": self.value.schema()}

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected an object, {_got(value)}")
            return
        for key, item in value.items():
            self.value.check(item, f"{path}[{shown(key)}]", problems)


@attrs.frozen
class Nullable:
    """``X | None`` (``Optional[X]``): ``null`` or an ``X``."""

    inner: Shape

    @property
    def expected(self) -> str:
        return f"{self.inner.expected} or null"

    def schema(self) -> dict[str, Any]:
        schema = dict(self.inner.schema())
        if "type" in schema:
            schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        if value is not None:
            self.inner.check(value, path, problems)


@attrs.frozen
class Member:
    """One argument of a tool, or one field of an attrs class: its name, annotation and shape.

    ``default`` is the JSON form of the Python default shown to the model (absent when there is
    none, or when it is a factory); ``required`` is true exactly when there is no default.
    """

    name: str
    annotation: Any
    shape: Shape
    required: bool
    description: str = ""
    default: Any = NO_DEFAULT

    def schema(self) -> dict[str, Any]:
        schema = self.shape.schema()
        if self.description:
            schema["description"] = self.description
        if self.default is not NO_DEFAULT:
            schema["default"] = self.default
        return schema


@attrs.frozen
class Record:
    """A JSON object of named members: a tool's arguments (``noun`` ``argument``) or an attrs class (``field``).

    Unknown keys are refused, missing required members reported, present members checked.
    """

    members: tuple[Member, ...]
    noun: str = "field"

    @property
    def expected(self) -> str:
        return "an object"

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": {m.name: m.schema() for m in self.members}}
        required = [m.name for m in self.members if m.required]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        if not isinstance(value, dict):
            problems.append(f"{path or 'arguments'}: expected an object, {_got(value)}")
            return
        names = {m.name for m in self.members}
        allowed = ", ".join(m.name for m in self.members) or "none"
        for key in value:
            if key not in names:
                problems.append(f"{_at(path, key if key.isidentifier() and len(key) <= SHOWN_VALUE_MAX else shown(key))}: unknown {self.noun}; allowed: {allowed}")
        for member in self.members:
            if member.name in value:
                member.shape.check(value[member.name], _at(path, member.name), problems)
            elif member.required:
                problems.append(f"{_at(path, member.name)}: missing; this {self.noun} is required ({member.shape.expected})")


def type_name(annotation: Any) -> str:
    """``annotation`` as an error message shows it: ``set[str]``, ``Place``, ``int | str``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _refuse(where: str, annotation: Any, why: str = "") -> ToolDefinitionError:
    return ToolDefinitionError(f"{where}: {type_name(annotation)} is not supported{why}; use {SUPPORTED}")


def _json_leaf(value: Any) -> Any:
    if attrs.has(type(value)):
        return {field.name: getattr(value, field.name) for field in attrs.fields(type(value))}
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def to_json(value: Any) -> str:
    """``value`` as JSON text: attrs instances as objects of their fields, enum members as their values.

    Dispatched on the values' runtime types, so an attrs class whose annotations cannot be resolved
    (defined in a function, or under ``TYPE_CHECKING`` imports) still serialises. Raises
    ``TypeError`` or ``ValueError`` for anything JSON has no form for (a set, NaN).
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_leaf)


def json_default(value: Any, shape: Shape, where: str) -> Any:
    """The JSON form of a Python default, checked against its own annotation (a default the model
    could not send back is a definition error)."""
    try:
        data = json.loads(to_json(value))
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{where}: the default {value!r} cannot be shown as JSON ({exc})") from None
    problems: list[str] = []
    shape.check(data, "default", problems)
    if problems:
        raise ToolDefinitionError(
            f"{where}: the default {value!r} does not match the annotation ({problems[0]}); a None default needs X | None"
        )
    return data


def _choice(values: Iterable[Any], where: str, annotation: Any) -> Choice:
    values = tuple(values)
    if not values or any(not isinstance(v, (str, int, float)) or (isinstance(v, float) and not math.isfinite(v)) for v in values):
        raise _refuse(where, annotation, " (its values must be strings, numbers or booleans)")
    return Choice(values)


def shape_of(annotation: Any, where: str, building: tuple[type, ...] = ()) -> Shape:
    """The shape of ``annotation`` (a resolved type hint) found at ``where`` (for error messages).

    ``building`` holds the attrs classes being built, so a class that contains itself is refused
    rather than recursing forever.
    """
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:  # bounds and a description (tool_constraints); never dropped silently
        inner = shape_of(annotation.__origin__, where, building)
        return constrained(inner, annotation.__metadata__, where, type_name(annotation.__origin__))
    scalars: dict[object, Literal["string", "integer", "number", "boolean"]] = {
        str: "string", bool: "boolean", int: "integer", float: "number",
    }
    if annotation in scalars:
        return Scalar(scalars[annotation])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _choice((member.value for member in annotation), where, annotation)
    if origin is Literal:
        return _choice(arguments, where, annotation)
    if origin in (Union, types.UnionType):
        others = [a for a in arguments if a is not type(None)]
        if len(others) != 1 or len(others) == len(arguments):
            raise _refuse(where, annotation, " (a union is only supported as X | None)")
        return Nullable(shape_of(others[0], where, building))
    if origin is list and len(arguments) == 1:
        return ArrayOf(shape_of(arguments[0], f"{where}[]", building))
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return ArrayOf(shape_of(arguments[0], f"{where}[]", building))
    if origin is dict and len(arguments) == 2:
        if arguments[0] is not str:
            raise _refuse(where, annotation, " (JSON object keys are strings: use dict[str, X])")
        return MapOf(shape_of(arguments[1], f"{where}[]", building))
    if isinstance(annotation, type) and attrs.has(annotation):
        if annotation in building:
            raise _refuse(where, annotation, " (an attrs class that contains itself has no finite schema)")
        return record_of(annotation, where, (*building, annotation))
    raise _refuse(where, annotation)


def record_of(cls: type, where: str, building: tuple[type, ...]) -> Record:
    """The shape of an attrs class: its ``init`` fields, described by its docstring's attribute or parameter text."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)  # Annotated bounds are kept, not stripped
    except Exception as exc:  # NameError for a name only imported under TYPE_CHECKING, and the like
        raise ToolDefinitionError(f"{where}: the annotations of attrs class {cls.__qualname__} cannot be resolved ({exc})") from None
    texts = argument_texts(cls.__doc__)
    members = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        at = f"{where} (attrs class {cls.__qualname__}, field {field.name!r})"
        if field.name not in hints:
            raise ToolDefinitionError(f"{at}: the field has no type annotation; annotate it with {SUPPORTED}")
        shape = shape_of(hints[field.name], at, building)
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # attrs' stubs declare Factory a function; it is a class
            members.append(Member(field.name, hints[field.name], shape, False, texts.get(field.name, "")))
            continue
        required = default is attrs.NOTHING
        shown_default = NO_DEFAULT if required else json_default(default, shape, at)
        members.append(Member(field.name, hints[field.name], shape, required, texts.get(field.name, ""), shown_default))
    return Record(tuple(members))


def argument_texts(docstring: str | None) -> dict[str, str]:
    """Per-argument (or per-attribute) text of a Google, NumPy or Sphinx (reST) docstring, by name."""
    if not docstring:
        return {}
    import docstring_parser  # imported where used: the registrar loads this module on every command line

    parsed = docstring_parser.parse(docstring)
    return {p.arg_name: " ".join((p.description or "").split()) for p in parsed.params}


def summary(docstring: str | None) -> str:
    """The prose of a docstring without its argument, return and raises sections."""
    if not docstring:
        return ""
    import docstring_parser  # imported where used: the registrar loads this module on every command line

    parsed = docstring_parser.parse(docstring)
    return "\n\n".join(part.strip() for part in (parsed.short_description, parsed.long_description) if part and part.strip())
