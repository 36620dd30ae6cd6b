"""Making third-party text safe to quote on the user message: fence tokens, lines, names.

The user message of a group-chat turn carries two documented fences, the
``<messages_since_your_last_turn>`` block of other people's messages and the
``<current_speaker>`` line. Their meaning rests on one promise: only the host writes them. Every
piece of text that someone else controls (message bodies, display names, handles, surface
names, and the user's own message) passes through :func:`neutralize_fence_tokens` first, so it
can neither close a fence nor open a new one.

What counts as a fence token is decided on a *normalised view* of the text (:func:`fence_view`):
HTML entities unescaped repeatedly (``&lt;``, ``&#60;``, ``&#x3c;``, ``&amp;lt;``), NFKD
compatibility decomposition (fullwidth ``＜``, mathematical letters), case folded, zero-width,
bidi, other format characters, combining marks, invisible controls (NUL, BEL, DEL, C1) and
filler letters (U+3164) removed, and look-alike characters mapped to what they imitate (``‹``
``〈`` for ``<``, Cyrillic ``с`` for ``c``). Whitespace, ``_`` and ``-``
may separate the words of the tag name and surround the slash. A token found in that view is
rewritten in the original text with square brackets (``[current_speaker]``,
``[/messages_since_your_last_turn]``), which keeps it readable and makes it inert. Whatever the
targeted rewrite misses (a ligature standing for two letters of the name, an exotic entity) is
caught by checking the view once more; a text still carrying a token then loses every character
that reads as ``<`` and every ``&``, which leaves nothing that can open a tag.

Only text containing a token (or, for :func:`neutralize_untrusted`, an entity-encoded line
break) is changed at all: ordinary text comes back as the very same string.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata

from .text import LazyPattern, utf8_prefix

__all__ = [
    "FENCE_NAMES",
    "fence_view",
    "has_fence_token",
    "neutralize_fence_tokens",
    "neutralize_untrusted",
    "one_line",
    "speaker_label",
    "indent_continuations",
    "capped",
    "NAME_MAX_CHARS",
    "HANDLE_MAX_CHARS",
    "UNKNOWN_SPEAKER",
]

FENCE_NAMES = ("messages_since_your_last_turn", "current_speaker")
NAME_MAX_CHARS = 80
HANDLE_MAX_CHARS = 64
UNKNOWN_SPEAKER = "unknown"

_IGNORED_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Cs"})
_DROPPED_NAME_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
_SEPARATOR = r"[\s_\-]*"
#: A fence tag in the normalised view: ``<``, an optional slash, one of the two names.
VIEW_TAG = LazyPattern(
    r"<\s*/?\s*(?:"
    + "|".join(_SEPARATOR.join(name.split("_")) for name in FENCE_NAMES)
    + ")"
)
#: Look-alikes the normalisation forms leave alone, mapped to the ASCII they imitate.
_LOOKALIKES = {
    "<": "‹〈〈⟨❮❬❰˂ᐸ⧼⟪《«≺⋖⊂",
    ">": "›〉〉⟩❯❭❱˃ᐳ⧽⟫》»≻⋗⊃",
    "/": "⁄∕⧸╱⟋",
    "_": "‗",
    "-": "‐‑‒–—―−﹣",
    "a": "аɑα",
    "c": "сϲⅽ",
    "e": "еҽε",
    "g": "ɡց",
    "i": "іıιӏ",
    "k": "кκ",
    "l": "ӏⅼ",
    "m": "мⅿ",
    "n": "пη",
    "o": "оοσ",
    "p": "рρ",
    "r": "г",
    "s": "ѕ",
    "t": "тτ",
    "u": "υս",
    "y": "уγ",
}
#: Characters that show as nothing yet are neither format characters nor marks: the C0/C1
#: controls that are not line breaks or other whitespace, and the Hangul filler letters.
_INVISIBLE = "[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u115f\u1160\u3164\uffa0]"
_INVISIBLE_CHARS = LazyPattern(_INVISIBLE)
_AMP = r"[&\uff06\ufe60](?:amp;?|#0*38;?|#x0*26;?)*"
_INVISIBLE_ENTITY = r"(?i:" + _AMP + r"(?:#0*(?:173|847|8203|8204|8205|8206|8207|8288|65279)(?:;|(?!\d))|#x0*(?:ad|34f|200[b-f]|2060|feff)(?:;|(?![0-9a-f]))|shy;|zwj;|zwnj;|lrm;|rlm;))"
_LINE_BREAK_ENTITY = LazyPattern(
    _AMP + r"(?:#0*(?:10|11|12|13|28|29|30|133|8232|8233)(?:;|(?!\d))|#x0*(?:a|b|c|d|1c|1d|1e|85|2028|2029)(?:;|(?![0-9a-f]))|newline;)",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=4096)
def _view_char(char: str) -> str:
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", char).casefold())
    text = "".join(c for c in text if unicodedata.category(c) not in _IGNORED_CATEGORIES)
    return text.translate(_confusables())


@functools.cache
def _confusables() -> dict[int, str]:
    return {ord(look): target for target, looks in _LOOKALIKES.items() for look in looks}


@functools.cache
def _ignorable_ranges() -> tuple[tuple[int, int], ...]:
    """Code-point ranges of format characters, combining marks and surrogates (planes 0-2, 14)."""
    ranges: list[tuple[int, int]] = []
    for cp in (*range(0x30000), *range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(cp)) in _IGNORED_CATEGORIES:
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return tuple(ranges)


@functools.cache
def _ignorable_class() -> str:
    """The same characters as a regex character class."""
    return "[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _ignorable_ranges()) + "]"


@functools.cache
def _view_table() -> dict[int, str | None]:
    """One :meth:`str.translate` table: ignorable characters dropped, look-alikes mapped."""
    table: dict[int, str | None] = dict(_confusables())
    for first, last in _ignorable_ranges():
        table.update(dict.fromkeys(range(first, last + 1)))
    return table


@functools.cache
def _spellings() -> dict[str, frozenset[str]]:
    """Every character (planes 0 and 1) whose view is exactly one of the characters tags use."""
    wanted = set("".join(FENCE_NAMES)) | set("<>/ ")
    found: dict[str, set[str]] = {c: {c, c.upper()} for c in wanted}
    for cp in range(0x20000):
        char = chr(cp)
        if unicodedata.category(char) in ("Cs", "Cn"):
            continue
        seen = _view_char.__wrapped__(char)
        if seen in found:
            found[seen].add(char)
    for target, looks in _LOOKALIKES.items():
        found.setdefault(target, {target}).update(looks)
    return {key: frozenset(value) for key, value in found.items()}


def _char_class(chars: frozenset[str]) -> str:
    return "[" + "".join(f"\\U{ord(c):08x}" for c in sorted(chars)) + "]"


def _entity(char: str) -> str:
    codes = sorted({ord(char), ord(char.upper())})
    decimal = "|".join(str(c) for c in codes)
    hexa = "|".join(f"{c:x}" for c in codes)
    named = "|lt;?" if char == "<" else "|gt;?" if char == ">" else "|sol;" if char == "/" else "|lowbar;|underbar;" if char == "_" else ""
    return f"(?i:{_AMP}(?:#0*(?:{decimal})(?:;|(?!\\d))|#x0*(?:{hexa})(?:;|(?![0-9a-f])){named}))"


@functools.cache
def _raw_tag() -> re.Pattern[str]:
    """A fence tag in the original text, spelled any way the view would read as one."""
    spellings = _spellings()
    ignore = f"(?:{_ignorable_class()}|{_INVISIBLE}|{_INVISIBLE_ENTITY})*"

    def one(char: str) -> str:
        return f"(?:{_char_class(spellings[char])}|{_entity(char)}){ignore}"

    space = f"(?:\\s|{_char_class(spellings[' '])}|{_entity(' ')}|(?i:&(?:nbsp|tab|emsp|ensp|thinsp);)){ignore}"
    separator = f"(?:{space}|{one('_')}|{one('-')})*"
    names = "|".join(
        f"(?P<n{i}>" + separator.join("".join(one(c) for c in word) for word in name.split("_")) + ")"
        for i, name in enumerate(FENCE_NAMES)
    )
    pattern = f"{one('<')}(?:{space})*(?P<slash>{one('/')})?(?:{space})*(?:{names})(?:(?:{space})*{one('>')})?"
    return re.compile(ignore + pattern)


def fence_view(text: str) -> str:
    """The normalised reading of ``text`` that fence tokens are looked for in (see module doc).

    Repeated until it no longer changes, so escaping at any depth and escapes hidden behind
    compatibility characters are undone too.
    """
    for _ in range(len(text) + 4):
        before = text
        text = unicodedata.normalize("NFKD", html.unescape(text)).casefold()
        text = _INVISIBLE_CHARS.sub("", unicodedata.normalize("NFKD", text))
        if not text.isascii():
            text = text.translate(_view_table())
        if text == before:
            break
    return text


@functools.cache
def _openers() -> re.Pattern[str]:
    """Characters that can read as ``<`` or start an entity: without one, no tag can form."""
    found = {"<", "&"}
    for cp in range(0x80, 0x20000):
        char = chr(cp)
        decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", char).casefold()).translate(_confusables())
        if "<" in decomposed or "&" in decomposed:
            found.add(char)
    found.update(_LOOKALIKES["<"])
    return re.compile(_char_class(frozenset(found)))


def _may_open(text: str) -> bool:
    return _openers().search(text) is not None


def has_fence_token(text: str) -> bool:
    """Whether the normalised view of ``text`` opens or closes a fence anywhere."""
    return _may_open(text) and VIEW_TAG.search(fence_view(text)) is not None


def _bracketed(match: re.Match[str]) -> str:
    name = FENCE_NAMES[0] if match.group("n0") is not None else FENCE_NAMES[1]
    return f"[{'/' if match.group('slash') else ''}{name}]"


def _strip_openers(text: str) -> str:
    return "".join("" if char == "&" or "<" in _view_char(char) or "&" in _view_char(char) else char for char in text)


def neutralize_fence_tokens(text: str) -> str:
    """``text`` with every fence token made inert; ``text`` itself when it holds none.

    A token becomes its square-bracketed form (``</current_speaker >`` reads
    ``[/current_speaker]``); attributes and the rest of the text stay as they were.
    """
    if not has_fence_token(text):
        return text
    text = _raw_tag().sub(_bracketed, text)
    if has_fence_token(text):
        text = _strip_openers(text)
    return text


def neutralize_untrusted(text: str) -> str:
    """:func:`neutralize_fence_tokens`, and entity-encoded line breaks (``&#10;``) made spaces.

    For text quoted inside a fence (bodies, names): a line break that only appears once the
    entities are decoded must not start a line of its own either.
    """
    if not _may_open(text):
        return text
    if _LINE_BREAK_ENTITY.search(text) is not None:
        text = _LINE_BREAK_ENTITY.sub(" ", text)
    if len(fence_view(text).splitlines()) > len(text.splitlines()):
        text = _strip_openers(text)
    return neutralize_fence_tokens(text)


def one_line(text: str, limit: int = NAME_MAX_CHARS) -> str:
    """A user-controlled name normalised to one safe line.

    Every kind of line break and whitespace (CR, LF, VT, FF, NEL, U+2028/U+2029, tabs) becomes
    one space and runs collapse; control, format (zero-width, bidi embedding and override) and
    surrogate characters are dropped; the result is cut to ``limit`` characters, ending in an
    ellipsis when cut.
    """
    kept = []
    for char in text:
        if char.isspace():
            kept.append(" ")
        elif unicodedata.category(char) not in _DROPPED_NAME_CATEGORIES:
            kept.append(char)
    cleaned = " ".join("".join(kept).split())
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned


def speaker_label(display_name: str | None, handle: str | None = None) -> str:
    """``Alice Chen (@alice)``: display name and handle, one line each, fence tokens neutralised.

    The display name is capped at :data:`NAME_MAX_CHARS` characters and the handle (without its
    leading ``@``) at :data:`HANDLE_MAX_CHARS`; a speaker with neither reads ``unknown``. The
    platform user id is never part of a label.
    """
    name = neutralize_untrusted(one_line(display_name or "", NAME_MAX_CHARS))
    tag = neutralize_untrusted(one_line((handle or "").strip().lstrip("@"), HANDLE_MAX_CHARS))
    name = one_line(name, NAME_MAX_CHARS)
    tag = one_line(tag, HANDLE_MAX_CHARS)
    if name and tag:
        return f"{name} (@{tag})"
    if tag:
        return f"@{tag}"
    return name or UNKNOWN_SPEAKER


def indent_continuations(text: str, prefix: str = "  ") -> str:
    """Every line after the first indented by ``prefix``, whatever separated it.

    :meth:`str.splitlines` splits on LF, CR, CRLF, VT, FF, the file/group/record separators,
    NEL (U+0085) and U+2028/U+2029; the lines are joined again with LF only.
    """
    lines = text.splitlines() or [""]
    return "\n".join([lines[0], *(prefix + line for line in lines[1:])])


def capped(text: str, max_bytes: int, marker: str) -> str:
    """``text`` cut UTF-8-safely so that it and ``marker`` fit ``max_bytes``; unchanged if it fits."""
    kept = utf8_prefix(text, max_bytes)
    if not kept.truncated:
        return kept.text
    return utf8_prefix(text, max_bytes - len(marker.encode("utf-8"))).text + marker
