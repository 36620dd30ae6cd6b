"""Parsing JSON that someone else may have written: nesting bounded before parsing, strict values.

Python's ``json`` recurses once per nesting level (a 100k-deep array is a ``RecursionError``),
accepts ``NaN`` and ``Infinity``, keeps the last of two equal keys, turns ``1e999`` into ``inf``
and refuses integers of more than 4300 digits with a ``ValueError`` that is not a
``JSONDecodeError``. :func:`loads` checks the nesting first, in linear time and without parsing
(:func:`nesting_over`), then parses strictly, so that every problem of the text is one
:class:`StrictJSONError` (a ``ValueError``) whose message is one line saying what is wrong.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

__all__ = ["StrictJSONError", "loads", "nesting_over"]

_ESCAPE = re.compile(rb"\\.", re.S)
_STRING = re.compile(rb'"[^"]*"?')
_ALL_BUT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class StrictJSONError(ValueError):
    """The text is not strict JSON within the nesting bound; the message says why, in one line."""


def nesting_over(text: str, limit: int) -> int:
    """How deep the arrays and objects of JSON ``text`` nest, if deeper than ``limit``; else 0.

    Brackets inside strings do not count (an unterminated string runs to the end of the text).
    Whatever the text, a JSON parser reaches at most this depth before it succeeds or fails, so
    checking it first bounds the parser's recursion. The work is a few passes in C over the
    text's quotes and brackets: usually one, because an opening bracket followed directly by a
    closing one (no quote between) cannot hold a deeper one, so the depth is at most one more
    than the other opening brackets, and when that is within ``limit`` nothing else is needed.
    """
    data = text.encode("utf-8", "surrogatepass")
    marks = data.translate(None, _ALL_BUT_STRUCTURE)  # quotes and brackets, in order
    if marks.count(b"[") + marks.count(b"{") - marks.count(b"[]") - marks.count(b"{}") < limit:
        return 0
    structure = _STRING.sub(b"", _ESCAPE.sub(b"", data).translate(None, _ALL_BUT_STRUCTURE))
    depth = max(itertools.accumulate(map(_NESTING.__getitem__, structure)), default=0)
    return depth if depth > limit else 0


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"the key {repr(key)[:80]} appears twice in one object")
            seen.add(key)
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number")


def loads(text: str, *, max_depth: int) -> Any:
    """``json.loads`` of ``text`` nested at most ``max_depth`` deep, with no ``NaN`` or
    ``Infinity``, no number out of float range or over Python's digit limit, and no key twice in
    one object. Raises :class:`StrictJSONError`.
    """
    depth = nesting_over(text, max_depth)
    if depth:
        raise StrictJSONError(f"it nests {depth:,} levels deep, over the {max_depth} levels allowed")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_float=_finite_float, parse_constant=_no_constant)
    except StrictJSONError:
        raise
    except ValueError as exc:  # JSONDecodeError, or an integer over the digit limit
        raise StrictJSONError(f"it is not valid JSON ({' '.join(str(exc).split())[:120]})") from None
