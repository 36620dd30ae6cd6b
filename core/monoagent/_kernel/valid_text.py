"""Valid Unicode in every model value: the base class :class:`ValidText` and what it runs.

Every class of the data model (:mod:`monoagent._kernel.model`) that carries text derives from
:class:`ValidText`: however it is built (a channel, a plugin, a provider runtime, a tool handler,
cattrs reading a record, ``attrs.evolve``), its strings are valid Unicode once built. A surrogate
code point (what Python makes of bytes that are not UTF-8, or a lone ``\\ud800`` from JSON)
becomes U+FFFD (:func:`monoagent._boundary.text.scrub_unicode`), so no store, wire request, event file or
terminal ever has to encode one, and the instance remembers where it replaced what
(:attr:`ValidText.invalid_unicode`) for the harness to report.

The check is made without copying for the usual, valid case (:func:`_is_valid`); only data
holding a surrogate is rebuilt (:func:`_valid_data`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import attrs

from monoagent._boundary.text import scrub_unicode

Replacements = tuple[tuple[str, int], ...]
"""Where a model instance replaced surrogates, and how many: ``(("text", 1), ("sender.handle", 2))``."""


_PLAIN = frozenset({int, float, bool, type(None)})


_SHALLOW = 32
"""Nesting checked by plain recursion (quick for the small dicts events hold); deeper data is walked iteratively."""


def _is_valid(value: Any, depth: int = 0) -> bool:
    """Whether every string in JSON-shaped ``value`` is valid Unicode: the usual case, checked without copying.

    ASCII strings and numbers, most of what events and arguments hold, are passed over inline.
    Beyond :data:`_SHALLOW` levels the walk goes on without recursion (:func:`_is_valid_deep`),
    so any depth is fine (bounding depth is the parsers' and stores' business) and a cycle ends it.
    """
    cls = value.__class__
    if cls is str:
        return value.isascii() or scrub_unicode(value)[1] == 0
    if cls in _PLAIN:
        return True
    if depth > _SHALLOW:
        return _is_valid_deep(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if not (key.__class__ is str and key.isascii()) and not _is_valid(key, depth + 1):
                return False
            if not ((item.__class__ is str and item.isascii()) or item.__class__ in _PLAIN) and not _is_valid(item, depth + 1):
                return False
        return True
    if isinstance(value, (list, tuple)):
        for item in value:
            if not ((item.__class__ is str and item.isascii()) or item.__class__ in _PLAIN) and not _is_valid(item, depth + 1):
                return False
        return True
    return not isinstance(value, str) or scrub_unicode(value)[1] == 0


def _is_valid_deep(value: Any) -> bool:
    """:func:`_is_valid` with an explicit stack, each container visited once."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and scrub_unicode(value)[1]:
                return False
        elif isinstance(value, (dict, list, tuple)) and id(value) not in seen:
            seen.add(id(value))
            stack.extend((*value.keys(), *value.values()) if isinstance(value, dict) else value)
    return True


_NO_KEY = object()


def _valid_data(value: Any) -> tuple[Any, int]:
    """JSON-shaped ``value`` (strings, dicts, lists, tuples) with valid strings, and the count replaced.

    Valid data comes back as the very same object. Otherwise the containers are rebuilt, without
    recursion: object keys are scrubbed too, and two keys that become equal keep both values
    (``key``, ``key#2``, ..., as redaction does). Values of other types, and a reference back
    to a container being rebuilt (a cycle), are kept as they are.
    """
    if _is_valid(value):
        return value, 0
    if isinstance(value, str):
        return scrub_unicode(value)
    total = 0
    # One frame per container being rebuilt: the container, its (key, item) pairs still to do, the pairs done.
    stack: list[tuple[Any, Any, list[tuple[Any, Any]]]] = [(value, _pairs(value), [])]
    active = {id(value)}
    while True:
        container, pairs, done = stack[-1]
        for key, item in pairs:
            if isinstance(key, str):
                key, n = scrub_unicode(key)
                total += n
            if isinstance(item, str):
                item, n = scrub_unicode(item)
                total += n
            elif isinstance(item, (dict, list, tuple)) and id(item) not in active:
                done.append((key, None))  # filled in when the inner container is rebuilt
                stack.append((item, _pairs(item), []))
                active.add(id(item))
                break
            done.append((key, item))
        else:
            stack.pop()
            active.discard(id(container))
            rebuilt = _assemble(container, done)
            if not stack:
                return rebuilt, total
            parent = stack[-1][2]
            parent[-1] = (parent[-1][0], rebuilt)


def _pairs(container: Any) -> Any:
    return iter(container.items()) if isinstance(container, dict) else ((_NO_KEY, item) for item in container)


def _assemble(container: Any, pairs: list[tuple[Any, Any]]) -> Any:
    if not isinstance(container, dict):
        items = [item for _, item in pairs]
        return items if isinstance(container, list) else tuple(items)
    out: dict[Any, Any] = {}
    for key, item in pairs:
        name, suffix = key, 1
        while name in out:
            suffix += 1
            name = f"{key}#{suffix}"
        out[name] = item
    return out


_FIELDS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _fields(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """The init fields of ``cls`` and one call that reads all of them (a tuple, whatever their number)."""
    names = tuple(field.name for field in attrs.fields(cls) if field.init)
    read = operator.attrgetter(*names) if len(names) > 1 else lambda instance: tuple(getattr(instance, n) for n in names)
    _FIELDS[cls] = names, read
    return names, read


_replaced_of = operator.attrgetter("invalid_unicode")


def _any_replaced(items: tuple[Any, ...]) -> bool:
    """Whether any model value of ``items`` (a history: hundreds of messages) had text replaced: one
    pass in C, or item by item when an item is not a model value."""
    try:
        return any(map(_replaced_of, items))
    except AttributeError:
        return any(getattr(item, "invalid_unicode", ()) for item in items)


def _all_valid(values: tuple[Any, ...]) -> bool:
    """Whether :func:`_replace_invalid_unicode` would find nothing in these field values.

    The usual case (ASCII strings, numbers, valid nested model values, JSON data without a
    surrogate), checked in one pass with no bookkeeping; any doubt leaves the full pass to decide.
    """
    for value in values:
        kind = value.__class__
        if kind is str:
            if value.isascii():
                continue
            return False
        if kind in _PLAIN:
            continue
        if kind is tuple:
            if not value:  # a model's empty default: nothing to check
                continue
            if isinstance(value[0], ValidText):
                if _any_replaced(value):
                    return False
                continue
            if not _is_valid(value):
                return False
        elif isinstance(value, ValidText):
            if value.invalid_unicode:
                return False
        elif not _is_valid(value):
            return False
    return True


def _replace_invalid_unicode(instance: ValidText) -> None:
    """Make every string of ``instance`` valid Unicode, recording what was replaced where.

    Runs for every model instance built (tens a turn), so valid instances, nearly all of them,
    take the quick check of :func:`_all_valid` and nothing else.
    """
    cls = type(instance)
    names, read = _FIELDS.get(cls) or _fields(cls)
    values = read(instance)
    if _all_valid(values):
        return
    found: list[tuple[str, int]] = []
    for name, value in zip(names, values, strict=True):
        kind = value.__class__
        if (kind is str and value.isascii()) or kind in _PLAIN:
            continue
        if isinstance(value, ValidText):
            found.extend((f"{name}.{path}", n) for path, n in value.invalid_unicode)
        elif kind is tuple and value and isinstance(value[0], ValidText):
            for index, item in enumerate(value):
                found.extend((f"{name}[{index}].{path}", n) for path, n in getattr(item, "invalid_unicode", ()))
        else:
            new, count = _valid_data(value)
            if count:
                object.__setattr__(instance, name, new)
                found.append((name, count))
    if found:
        object.__setattr__(instance, "invalid_unicode", tuple(found))


@attrs.frozen
class ValidText:
    """Base of every model class that carries text: its strings are valid Unicode once built.

    ``invalid_unicode`` lists the fields (dotted paths into nested model values, ``[i]`` for
    items of a tuple) in which surrogates were replaced by U+FFFD, with the count; it is empty
    for valid text, and it takes no part in equality, ``repr`` or (de)serialisation. The harness
    reports it as ``runtime_warning`` events with the code ``invalid_unicode_replaced``.
    """

    invalid_unicode: Replacements = attrs.field(default=(), init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        _replace_invalid_unicode(self)
