"""Bounds on a typed tool's arguments: ``Annotated[X, ...]`` metadata made JSON Schema and checks.

``Annotated[int, Ge(1), Le(10)]``, ``Annotated[str, MaxLen(80)]`` or ``Annotated[float,
Field(gt=0, description="...")]`` keep their meaning in a tool: :func:`constrained` reads the
metadata into a :class:`Constrained` shape whose schema carries the JSON Schema keywords (so the
model is told the bounds) and whose check refuses a value outside them (so the function never sees
one). What is understood:

* from `annotated-types <https://github.com/annotated-types/annotated-types>`_: ``Gt``, ``Ge``,
  ``Lt``, ``Le``, ``Interval`` and ``MultipleOf`` on ``int`` and ``float``; ``MinLen``,
  ``MaxLen`` and ``Len`` on ``str`` (characters), ``list``/``tuple`` (items) and ``dict``
  (entries);
* pydantic's ``Field(...)`` with those bounds (``gt``, ``ge``, ``lt``, ``le``, ``multiple_of``,
  ``min_length``, ``max_length``), ``pattern`` on ``str``, ``strict=True`` and
  ``allow_inf_nan=False`` (what every check here already is) and ``description``;
* a plain string, as the argument's description (when the docstring gives none).

Anything else (a ``Predicate`` and the other annotated-types predicates, which JSON Schema cannot
say, a bound on a type it does not apply to, another ``Field`` argument, any other object) is a
:class:`~monoagent._kernel.errors.ToolDefinitionError` naming the argument and the metadata: it is
never dropped silently. Neither annotated-types nor pydantic is a dependency: their classes are
recognised through the module the metadata comes from, which is loaded whenever such an object
exists.
"""

from __future__ import annotations

import math
import re
import sys
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._kernel.errors import ToolDefinitionError

if TYPE_CHECKING:
    from monoagent._kernel.tool_shapes import Shape

_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_LENGTHS = {"min_length": "at least", "max_length": "at most"}
_SCHEMA_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
_SCHEMA_LENGTHS = {
    "string": ("minLength", "maxLength", "characters"),
    "array": ("minItems", "maxItems", "items"),
    "object": ("minProperties", "maxProperties", "entries"),
}
_FIELD_KEEPS = {"description", "gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "pattern", "strict", "allow_inf_nan"}
"""``Field(...)`` arguments a tool argument takes: the description, and the constraints (which pydantic
keeps as metadata, read from there, whether or not its version also lists them as set)."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _module_class(meta: Any, module: str, name: str) -> bool:
    """Whether ``meta`` is an instance of ``module.name`` (the module is loaded when such an object exists)."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(meta, cls)


@attrs.frozen
class Constrained:
    """A shape with bounds: its inner shape's schema and check, then the bounds on a value of the right type."""

    inner: Shape
    kind: str  # "number", "string", "array" or "object": what the bounds measure
    bounds: tuple[tuple[str, Any], ...] = ()  # ("ge", 1), ("max_length", 80), ("multiple_of", 5), ("pattern", "^a")
    description: str = ""

    @property
    def expected(self) -> str:
        if not self.bounds:
            return str(self.inner.expected)
        return f"{self.inner.expected} ({', '.join(self._rule(name, value) for name, value in self.bounds)})"

    def _rule(self, name: str, value: Any) -> str:
        if name in _BOUNDS:
            return f"{_BOUNDS[name]} {value}"
        if name in _LENGTHS:
            return f"{_LENGTHS[name]} {value} {_SCHEMA_LENGTHS[self.kind][2]}"
        if name == "multiple_of":
            return f"a multiple of {value}"
        return f"matching the pattern {value!r}"

    def schema(self) -> dict[str, Any]:
        schema = dict(self.inner.schema())
        for name, value in self.bounds:
            if name in _SCHEMA_BOUNDS:
                schema[_SCHEMA_BOUNDS[name]] = value
            elif name in _LENGTHS:
                schema[_SCHEMA_LENGTHS[self.kind][0 if name == "min_length" else 1]] = value
            elif name == "multiple_of":
                schema["multipleOf"] = value
            else:
                schema["pattern"] = value
        if self.description:
            schema["description"] = self.description
        return schema

    def check(self, value: Any, path: str, problems: list[str]) -> None:
        before = len(problems)
        self.inner.check(value, path, problems)
        if len(problems) > before or value is None:  # a wrong type is reported once; null is the inner X | None's
            return
        for name, bound in self.bounds:
            if not self._holds(name, bound, value):
                problems.append(f"{path}: must be {self._rule(name, bound)}, got {_shown(value, self.kind)}")

    def _holds(self, name: str, bound: Any, value: Any) -> bool:
        if name == "gt":
            return bool(value > bound)
        if name == "ge":
            return bool(value >= bound)
        if name == "lt":
            return bool(value < bound)
        if name == "le":
            return bool(value <= bound)
        if name == "min_length":
            return bool(len(value) >= bound)
        if name == "max_length":
            return bool(len(value) <= bound)
        if name == "multiple_of":
            return _multiple(value, bound)
        return re.search(bound, value) is not None


def _multiple(value: float, of: float) -> bool:
    """Whether ``value`` is a whole multiple of ``of``: exact for integers, within float rounding otherwise."""
    if isinstance(value, int) and isinstance(of, int):
        return value % of == 0
    quotient = value / of
    return abs(quotient - round(quotient)) <= 1e-9 * max(1.0, abs(quotient))


def _shown(value: Any, kind: str) -> str:
    from monoagent._kernel.tool_shapes import shown

    if kind == "number":
        return shown(value)
    return f"{len(value)} {_SCHEMA_LENGTHS[kind][2]}" if kind != "string" or len(value) > 60 else f"{shown(value)} ({len(value)} characters)"


def _kind(shape: Any) -> str | None:
    """What bounds on ``shape`` measure: ``number``, ``string``, ``array``, ``object``; None when none apply."""
    from monoagent._kernel.tool_shapes import ArrayOf, MapOf, Nullable, Scalar

    while isinstance(shape, (Nullable, Constrained)):
        shape = shape.inner
    if isinstance(shape, Scalar):
        return {"integer": "number", "number": "number", "string": "string"}.get(shape.json)
    if isinstance(shape, ArrayOf):
        return "array"
    if isinstance(shape, MapOf):
        return "object"
    return None


def _described(meta: Any) -> str:
    return " ".join(repr(meta).split())[:120]


def _read(meta: Any, where: str, type_text: str) -> list[tuple[str, Any]] | str:
    """``meta`` as bounds (name, value), or a description (a str); a ToolDefinitionError when not understood."""
    if isinstance(meta, str):
        return " ".join(meta.split())
    if _module_class(meta, "annotated_types", "GroupedMetadata"):  # Interval, Len: their parts
        bounds: list[tuple[str, Any]] = []
        for part in meta:
            read = _read(part, where, type_text)
            if isinstance(read, list):
                bounds.extend(read)
        return bounds
    if _module_class(meta, "annotated_types", "Predicate") or _module_class(meta, "annotated_types", "Not"):
        raise ToolDefinitionError(
            f"{where}: Annotated[{type_text}, {_described(meta)}] cannot be a tool argument's bound: a predicate is a Python "
            f"function the model cannot be shown in JSON Schema; check it in the tool and return an error, or use "
            f"Ge, Gt, Le, Lt, Interval, MultipleOf, MinLen, MaxLen or Len"
        )
    for name, attribute in (("Gt", "gt"), ("Ge", "ge"), ("Lt", "lt"), ("Le", "le"), ("MultipleOf", "multiple_of"),
                            ("MinLen", "min_length"), ("MaxLen", "max_length")):
        if _module_class(meta, "annotated_types", name):
            return [(attribute, getattr(meta, attribute))]
    if _module_class(meta, "pydantic.fields", "FieldInfo"):
        return _field(meta, where, type_text)
    cls = type(meta)
    if cls.__module__.startswith("pydantic") and cls.__name__ == "_PydanticGeneralMetadata":
        return [(key, value) for key, value in vars(meta).items() if not _accepted_flag(key, value, meta, where, type_text)]
    if cls.__module__.startswith("pydantic") and cls.__name__ == "Strict" and getattr(meta, "strict", None) is True:
        return []  # every check here is strict already
    if _module_class(meta, "annotated_types", "BaseMetadata") and cls.__name__ == "AllowInfNan" and getattr(meta, "allow_inf_nan", None) is False:
        return []  # a number argument is finite already
    raise ToolDefinitionError(
        f"{where}: Annotated[{type_text}, {_described(meta)}]: this metadata is not understood, and a tool never drops a "
        f"constraint silently; use annotated-types' Ge, Gt, Le, Lt, Interval, MultipleOf, MinLen, MaxLen or Len, pydantic's "
        f"Field with those bounds, pattern or description, or a str as the description"
    )


def _accepted_flag(key: str, value: Any, meta: Any, where: str, type_text: str) -> bool:
    """Whether ``key`` of pydantic's general metadata is a flag every check here already honours; refuses what is not understood."""
    if key == "pattern":
        return False
    if (key, value) in (("strict", True), ("allow_inf_nan", False)):
        return True
    raise ToolDefinitionError(
        f"{where}: Annotated[{type_text}, {_described(meta)}]: {key}={value!r} is not understood; a tool argument takes "
        f"the bounds gt, ge, lt, le, multiple_of, min_length, max_length and pattern"
    )


def _field(info: Any, where: str, type_text: str) -> list[tuple[str, Any]] | str:
    """A pydantic ``FieldInfo``: its constraints (pydantic keeps them as metadata) and its description."""
    extra = sorted(set(getattr(info, "_attributes_set", {}) or {}) - _FIELD_KEEPS)
    if extra:
        raise ToolDefinitionError(
            f"{where}: Annotated[{type_text}, Field(...)] sets {', '.join(extra)}, which a tool argument does not take; "
            f"Field may give the bounds gt, ge, lt, le, multiple_of, min_length, max_length, pattern and a description "
            f"(a default is the parameter's own: x: Annotated[int, Field(ge=0)] = 1)"
        )
    bounds: list[tuple[str, Any]] = []
    for meta in info.metadata:
        read = _read(meta, where, type_text)
        if isinstance(read, list):
            bounds.extend(read)
    description = " ".join((info.description or "").split())
    return bounds + ([("description", description)] if description else [])


def constrained(inner: Shape, metadata: tuple[Any, ...], where: str, type_text: str) -> Shape:
    """``inner`` (the shape of ``Annotated``'s type) with the bounds and description of ``metadata``; ``inner``
    itself when the metadata says nothing. Raises ToolDefinitionError for what is not understood, a bound
    on a type it does not apply to, or a bound that is not a number (see the module docstring)."""
    bounds: list[tuple[str, Any]] = []
    description = ""
    for meta in metadata:
        read = _read(meta, where, type_text)
        if isinstance(read, str):
            description = read
            continue
        for name, value in read:
            if name == "description":
                description = value
            else:
                bounds.append((name, value))
    if not bounds:
        return Constrained(inner, "", (), description) if description else inner
    kind = _kind(inner)
    for name, value in bounds:
        _check_bound(name, value, kind, where, type_text)
    return Constrained(inner, kind or "", tuple(bounds), description)


def _check_bound(name: str, value: Any, kind: str | None, where: str, type_text: str) -> None:
    field = f"{where}: Annotated[{type_text}, ...] has {name}={value!r}"
    if name in _BOUNDS or name == "multiple_of":
        if kind != "number":
            raise ToolDefinitionError(f"{field}, a bound on a number; it applies to int and float, not {type_text}")
        if not _number(value) or (name == "multiple_of" and value <= 0):
            raise ToolDefinitionError(f"{field}; the bound must be a finite number{' above 0' if name == 'multiple_of' else ''}")
    elif name in _LENGTHS:
        if kind not in _SCHEMA_LENGTHS:
            raise ToolDefinitionError(f"{field}, a length; it applies to str, list[X], tuple[X, ...] and dict[str, X], not {type_text}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ToolDefinitionError(f"{field}; a length is an integer of 0 or more")
    elif name == "pattern":
        if kind != "string":
            raise ToolDefinitionError(f"{field}, a pattern; it applies to str, not {type_text}")
        try:
            re.compile(value)
        except (re.error, TypeError) as exc:
            raise ToolDefinitionError(f"{field}, which is not a regular expression ({exc})") from None
