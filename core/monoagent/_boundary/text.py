"""Byte-bounded text helpers shared by assembly, stores and guards."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, AnyStr, Generic

import attrs


@attrs.frozen
class Truncated:
    text: str
    original_bytes: int
    kept_bytes: int

    @property
    def truncated(self) -> bool:
        return self.kept_bytes < self.original_bytes


def utf8_prefix(text: str, max_bytes: int) -> Truncated:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``max_bytes``.

    Never splits a code point: the cut backs up to a character boundary. Lone surrogates, which
    UTF-8 cannot encode, are replaced by ``?`` first, so the result is always valid UTF-8 and
    byte counts are of that valid encoding. ASCII text (a flag CPython keeps on the string: no
    scan) is its own UTF-8, one byte a character, and is cut without encoding it.
    """
    if text.isascii():
        size = len(text)
        if size <= max_bytes:
            return Truncated(text, size, size)
        cut = max(max_bytes, 0)
        return Truncated(text[:cut], size, cut)
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return Truncated(data.decode("utf-8"), len(data), len(data))
    cut = max(max_bytes, 0)
    # Back up over continuation bytes (10xxxxxx) so the cut lands on a code-point boundary.
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return Truncated(data[:cut].decode("utf-8"), len(data), cut)


def utf8_len(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a lone surrogate counts as the one byte of its replacement).

    ASCII text, the usual case, is counted without encoding it (``str.isascii`` reads a flag
    CPython keeps on the string): its length is its size.
    """
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "replace"))


def utf8_suffix(text: str, max_bytes: int) -> Truncated:
    """The longest suffix of ``text`` whose UTF-8 encoding fits ``max_bytes``.

    The mirror of :func:`utf8_prefix`: the cut moves forward over continuation bytes so it lands
    on a code-point boundary, lone surrogates become ``?``, and the result is valid UTF-8.
    """
    if text.isascii():
        size = len(text)
        if size <= max_bytes:
            return Truncated(text, size, size)
        keep = max(max_bytes, 0)
        return Truncated(text[size - keep :], size, keep)
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return Truncated(data.decode("utf-8"), len(data), len(data))
    start = len(data) - max(max_bytes, 0)
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return Truncated(data[start:].decode("utf-8"), len(data), len(data) - start)


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character :meth:`str.splitlines` ends a line at (LF, CR, VT, FF, the file, group and record
separators, NEL, U+2028, U+2029): what quoting treats as a line break, never LF alone, since a model,
a terminal or a later reader may break a line at any of them (:mod:`monoagent._boundary.fences`)."""
_JSON_RAW_LINE_BREAKS = {ord(char): f"\\u{ord(char):04x}" for char in LINE_BREAKS if ord(char) >= 0x20}


def quote_json(value: object, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)`` with no line break inside a string.

    JSON escapes the line breaks below U+0020 but leaves NEL, U+2028 and U+2029 raw, and each of
    them starts a line for :meth:`str.splitlines` (and for a model): they are escaped as
    ``\\u0085``, ``\\u2028``, ``\\u2029``, which parse back to the same value. The only line
    breaks left are those ``indent`` puts between members, so no text of the data starts a line.
    """
    return json.dumps(value, ensure_ascii=False, **options).translate(_JSON_RAW_LINE_BREAKS)


REPLACEMENT_CHARACTER = "\ufffd"


def scrub_unicode(text: str) -> tuple[str, int]:
    """``text`` as valid Unicode: every surrogate code point replaced by U+FFFD, and how many were.

    The one decision for text that is not valid Unicode, taken where text enters (the CLI's
    arguments and input, :class:`~monoagent._kernel.model.TurnRequest` and the other model classes,
    provider events, tool results, files): a surrogate code point (what Python's
    ``surrogateescape`` makes of a byte that is not UTF-8, or a lone ``\\ud800`` from JSON) cannot
    be encoded, so it becomes the replacement character and the caller reports the count. Valid
    text comes back as the very same object with a count of 0.
    """
    if text.isascii():
        return text, 0
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        count = 0

        def replace(match: re.Match[str]) -> str:
            nonlocal count
            count += len(match.group())
            return REPLACEMENT_CHARACTER * len(match.group())

        return _SURROGATES.sub(replace, text), count
    return text, 0


def valid_unicode(text: str) -> str:
    """:func:`scrub_unicode` without the count, for converters and places that report elsewhere."""
    return scrub_unicode(text)[0]


class LazyPattern(Generic[AnyStr]):
    """A regular expression compiled on first use.

    Module-level patterns are compiled when a module is imported, and ``monoagent --help``
    imports every bundled plugin; these wait until a pattern is first used. The methods are the
    compiled pattern's, with its types (a ``LazyPattern[str]`` matches text, a
    ``LazyPattern[bytes]`` matches bytes).
    """

    def __init__(self, pattern: AnyStr, flags: int = 0) -> None:
        self._args: tuple[AnyStr, int] = (pattern, flags)
        self._compiled: re.Pattern[AnyStr] | None = None

    @property
    def compiled(self) -> re.Pattern[AnyStr]:
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return self._compiled

    def search(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.search(string, pos, endpos)

    def match(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def finditer(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[AnyStr]]:
        return self.compiled.finditer(string, pos, endpos)

    def findall(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled.findall(string, pos, endpos)

    def split(self, string: AnyStr, maxsplit: int = 0) -> list[AnyStr | Any]:
        return self.compiled.split(string, maxsplit)

    def sub(self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr, count: int = 0) -> AnyStr:
        return self.compiled.sub(repl, string, count)

    def subn(
        self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr, count: int = 0
    ) -> tuple[AnyStr, int]:
        return self.compiled.subn(repl, string, count)


_SURROGATES = LazyPattern("[\ud800-\udfff]+")
