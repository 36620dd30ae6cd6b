"""cattrs at the text boundaries of the data model: events, records, JSON output."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs

T = TypeVar("T")

converter = cattrs.Converter()


def unstructure(value: Any) -> Any:
    """A JSON-ready view of an attrs value (tuples become lists, enums their values)."""
    return converter.unstructure(value)


def structure(data: Any, cls: type[T]) -> T:
    return converter.structure(data, cls)


def dumps(value: Any) -> str:
    """Compact JSON of an attrs value or of JSON-ready data."""
    return json.dumps(unstructure(value), ensure_ascii=False, separators=(",", ":"), default=str)
