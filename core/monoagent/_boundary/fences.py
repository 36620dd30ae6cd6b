"""Making third-party text safe to quote in host-authored text: fence tokens, lines, names.

The host frames what it writes on the model's behalf: the continuity account's header, evidence
and envelope tags, the failed-attempt snapshot markers and the tool-output bloat guard's markers
(the pipeline's own, spelt here), and the fences of plugins: the group-chat fences
(``<messages_since_your_last_turn>``, ``<current_speaker>``: ``group-context``), the
recalled-memory delimiter (``conversation``) and the tool-history projection fence
(``tool-history``). Their meaning rests on one promise: only the host writes them. Every piece of text that someone else controls (the
user's message, other chat participants' messages and names, provider text, tool names,
arguments and results) passes through :func:`neutralise_fence_tokens` before it is quoted in
host-authored text, so it can neither close a fence nor open one nor pose as a host marker.

**One recogniser, one registry.** :func:`host_fences` lists every host fence by its canonical
spelling; its first characters give its shape: ``<name>`` is a *tag* (recognised opening or
closing), ``<<<WORDS>>>`` a *marker*, ``[Words`` a *label*. Each fence is spelt once, as a constant
of the module that writes it: the pipeline's here (:data:`KERNEL_FENCES`), a plugin's in the
plugin, which adds it to the registry when its module is imported
(:func:`register_host_fence`), so the recogniser guards it from then on, everywhere. A fence is
recognised once the module that spells it is imported: a blocked plugin's module is never
imported, and nobody writes its fence then. A token is looked for in the *reading* of a text (:func:`fence_view`):

1. HTML character references decoded (``&lt;``, ``&#60;``, ``&#x3c;``, ``&amp;lt;``), repeatedly;
2. NFKD compatibility decomposition (fullwidth ``＜``, mathematical letters, ligatures), case
   folded; format characters (zero-width, bidi), combining marks, surrogates, invisible
   controls (NUL, BEL, DEL, C1), filler letters (U+3164), the blank braille pattern and the
   reserved default-ignorable code points dropped (a text holding Unicode tag characters, which
   models read as the ASCII they encode, is read a second time with them decoded);
3. the UTS #39 confusable *skeleton*: every character replaced by the prototype Unicode's
   ``confusables.txt`` maps it to (Cyrillic ``с`` and small capital ``ᴄ`` read ``c``, ``‹``
   reads ``<``, ``m`` reads ``rn``), from the data that the ``confusable-homoglyphs`` package
   ships; plus, by their Unicode names, what that table leaves out but a reader still takes for
   the letter or bracket: small capitals (``ᴀ``, ``ʀ``, ``ᴛ`` read ``a``, ``r``, ``t``) and
   left or right angle or square brackets (``〈``, ``⟨``, ``«``, ``【``). An ASCII capital
   whose skeleton differs from its lower case's (``I``, which reads ``l`` as much as ``i``)
   matches either.

In that reading, whitespace, ``_`` and ``-`` may separate the words of a fence and surround the
slash. A token found there is rewritten in the original text, over exactly the characters it
was read from, as an inert, readable form: a tag becomes its name in square brackets
(``[current_speaker]``, ``[/messages_since_your_last_turn]``), a marker its words in square
brackets (``[END UNTRUSTED TOOL OUTPUT]``), a label ``[quoted: Recalled long-term memory]``.
Should a token survive that (it cannot, short of a bug), the text loses every character that
reads as an opening bracket and every ``&``.

**Line breaks** are all of :data:`~monoagent._boundary.text.LINE_BREAKS` (NEL, U+2028, ... too, never
LF alone): :func:`one_line` makes each a space, :func:`quote_block` and :func:`indent_continuations`
indent the line after each, :func:`~monoagent._boundary.text.quote_json` escapes those JSON leaves raw.

**Cost.** Text without a token comes back as the very same string. ASCII text without ``<``,
``[`` or ``&`` (most messages) is returned after one scan, and so is other text without a
character that reads as one of them; the rest is read through two translation tables filled one
character at a time as characters are first seen, and only an opener followed by the start of a
fence's first word is tried against the full pattern. The confusables data is loaded on first
need, never at import (CLI start-up does not pay for it).
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from collections.abc import Callable
from typing import Literal

import attrs

from monoagent._boundary.text import LINE_BREAKS, LazyPattern, quote_json, utf8_prefix

__all__ = [
    "ACCOUNT_HEADER",
    "ENVELOPE_CLOSE",
    "ENVELOPE_OPEN",
    "EVIDENCE_CLOSE",
    "EVIDENCE_OPEN",
    "HANDLE_MAX_CHARS",
    "KERNEL_FENCES",
    "LINE_BREAKS",
    "NAME_MAX_CHARS",
    "SNAPSHOT_BEGIN",
    "SNAPSHOT_END",
    "TOOL_OUTPUT_BEGIN",
    "TOOL_OUTPUT_END",
    "UNKNOWN_SPEAKER",
    "HostFence",
    "capped",
    "fence_view",
    "has_fence_token",
    "host_fences",
    "indent_continuations",
    "neutralise_fence_tokens",
    "neutralise_untrusted",
    "one_line",
    "quote_block",
    "quote_inline",
    "quote_json",
    "register_host_fence",
    "speaker_label",
]

# The pipeline's framing, each spelt once: the module that writes a fence imports it from here.
ACCOUNT_HEADER = "[Continuity account v1, written by the host"  # continuity accounts (monoagent._pipeline.continuity_account)
EVIDENCE_OPEN = "<untrusted_evidence>"
EVIDENCE_CLOSE = "</untrusted_evidence>"
ENVELOPE_OPEN = "<continuity_envelope>"
ENVELOPE_CLOSE = "</continuity_envelope>"
SNAPSHOT_BEGIN = "<<<BEGIN FAILED ATTEMPT SNAPSHOT>>>"  # stateless retries (monoagent._pipeline.stateless)
SNAPSHOT_END = "<<<END FAILED ATTEMPT SNAPSHOT>>>"
TOOL_OUTPUT_BEGIN = "<<<BEGIN UNTRUSTED TOOL OUTPUT>>>"  # the tool-output bloat guard (monoagent._pipeline.bloat)
TOOL_OUTPUT_END = "<<<END UNTRUSTED TOOL OUTPUT>>>"

#: The pipeline's own host framing, by canonical spelling (see the module doc); a label is
#: recognised by its first words. The plugins' fences join them through :func:`register_host_fence`.
KERNEL_FENCES: tuple[str, ...] = (
    "[Continuity account",  # ACCOUNT_HEADER
    EVIDENCE_OPEN,
    ENVELOPE_OPEN,
    SNAPSHOT_BEGIN,
    SNAPSHOT_END,
    TOOL_OUTPUT_BEGIN,
    TOOL_OUTPUT_END,
)

NAME_MAX_CHARS = 80
HANDLE_MAX_CHARS = 64
UNKNOWN_SPEAKER = "unknown"


@attrs.frozen
class HostFence:
    """One entry of :func:`host_fences`, parsed: its shape, its words and its inert form."""

    spelling: str

    @property
    def kind(self) -> Literal["tag", "marker", "label"]:
        if self.spelling.startswith("<<<"):
            return "marker"
        return "tag" if self.spelling.startswith("<") else "label"

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(re.findall(r"[A-Za-z0-9]+", self.spelling))

    @property
    def name(self) -> str:
        """``current_speaker``, ``BEGIN UNTRUSTED TOOL OUTPUT``, ``Recalled long-term memory``."""
        return self.spelling.strip("<>[]/")

    def inert(self, closing: bool = False) -> str:
        """The readable form a recognised token is rewritten to; no fence can be read in it."""
        if self.kind == "tag":
            return f"[{'/' if closing else ''}{self.name}]"
        if self.kind == "marker":
            return f"[{self.name}]"
        return f"[quoted: {self.name}]"


_FENCE_SHAPE = re.compile(r"<[a-z][a-z0-9_]*>|<<<[A-Z][A-Z0-9 ]*>>>|\[[A-Z][A-Za-z0-9 -]*")
_registered: list[HostFence] = [HostFence(spelling) for spelling in KERNEL_FENCES]


def register_host_fence(spelling: str) -> str:
    """Add a plugin's host fence to the recogniser; returns ``spelling``.

    ``spelling`` is the fence's canonical form, which gives its shape: ``"<name>"`` for a tag
    (lower-case name with ``_``; its closing ``</name>`` is recognised with it),
    ``"<<<WORDS>>>"`` for a marker (upper-case words), ``"[Words"`` for a label, by the words it
    starts with (``"[Recalled long-term memory"``). Call it where the plugin spells the fence,
    at import (``OPEN = register_host_fence("<my_fence>")``), so every text neutralised after
    that reads the fence inert. Registering a fence twice changes nothing; a spelling of another
    shape is a ``ValueError``.
    """
    if not isinstance(spelling, str) or not _FENCE_SHAPE.fullmatch(spelling):
        raise ValueError(
            f"host fence {spelling!r} is not '<name>' (lower case, '_'), '<<<WORDS>>>' (upper case) or '[Words' (a label's first words)"
        )
    fence = HostFence(spelling)
    if fence not in _registered:
        _registered.append(fence)
        _pattern.cache_clear()
        _candidates.cache_clear()
    return spelling


def host_fences() -> tuple[str, ...]:
    """Every host fence the recogniser guards, by canonical spelling: :data:`KERNEL_FENCES`, then the
    plugins' in the order their modules registered them."""
    return tuple(fence.spelling for fence in _registered)

_IGNORED_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Cs"})
_DROPPED_NAME_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
#: Characters that show as nothing yet are neither format characters nor marks: the C0/C1
#: controls that are not line breaks or other whitespace, the Hangul filler letters, the blank
#: braille pattern, and the code points Unicode reserves as default-ignorable (unassigned, so
#: rendered as nothing).
_INVISIBLE = frozenset(
    "".join(map(chr, [*range(0x00, 0x09), *range(0x0E, 0x1C), *range(0x7F, 0x85), *range(0x86, 0xA0)]))
    + "\u115f\u1160\u3164\uffa0\u2800\u2065"
    + "".join(map(chr, [*range(0xFFF0, 0xFFF9), 0xE0000, *range(0xE0002, 0xE0020), *range(0xE0080, 0xE0100), *range(0xE01F0, 0xE1000)]))
)
#: Unicode tag characters: invisible, yet models read them as the ASCII characters they encode.
_TAGS = LazyPattern("[\U000e0020-\U000e007e]")
_TAG_OPENERS = LazyPattern("[\U000e003c\U000e005b\U000e0026]")
#: The characters a fence starts with in the reading (a label may open with either).
_OPENERS = "<["
#: ASCII characters that can start a fence in the reading or an HTML reference.
_ASCII_OPENERS = LazyPattern(r"[<\[&]")
#: An HTML character reference, as :func:`html.unescape` finds them.
_REFERENCE = LazyPattern(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
_AMP = r"[&\uff06\ufe60](?:amp;?|#0*38;?|#x0*26;?)*"
_LINE_BREAK_ENTITY = LazyPattern(
    _AMP + r"(?:#0*(?:10|11|12|13|28|29|30|133|8232|8233)(?:;|(?!\d))|#x0*(?:a|b|c|d|1c|1d|1e|85|2028|2029)(?:;|(?![0-9a-f]))|newline;)",
    re.IGNORECASE,
)
#: Unicode names of brackets the confusables table does not map (category P* or S* only).
_BRACKET_NAMES = (
    (LazyPattern(r"\bLEFT\b.*\bANGLE\b|\bLESS-THAN\b"), "<"),
    (LazyPattern(r"\bRIGHT\b.*\bANGLE\b|\bGREATER-THAN\b"), ">"),
    (LazyPattern(r"\bLEFT\b.*\b(?:SQUARE|LENTICULAR) BRACKET\b"), "["),
    (LazyPattern(r"\bRIGHT\b.*\b(?:SQUARE|LENTICULAR) BRACKET\b"), "]"),
)
#: Small capitals read as their letter (the confusables table maps only those that look lower case).
_SMALL_CAPITAL = LazyPattern(r"\bSMALL CAPITAL (?:LETTER )?([A-Z])(?: WITH .*)?$")
_MAX_PASSES = 16


# --------------------------------------------------------------------------- the reading


def _ignorable(char: str) -> bool:
    return char in _INVISIBLE or unicodedata.category(char) in _IGNORED_CATEGORIES


def _settle(text: str, step: Callable[[str], str]) -> str:
    """``step`` applied until ``text`` stops changing (a cycle ends at its smallest state)."""
    seen: list[str] = []
    while text not in seen and len(seen) < _MAX_PASSES:
        seen.append(text)
        text = step(text)
    return text if text == seen[-1] else min(seen)


def _fold_step(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    return "".join(char for char in decomposed if not _ignorable(char))


def _fold_char(char: str) -> str:
    """Step 2 of the reading for one character: NFKD, case folded, invisible characters dropped."""
    return _settle(char, _fold_step)


def _glyph(text: str) -> str:
    """A glyph of the confusables data without the direction marks set around right-to-left ones."""
    return text.strip("\u200e\u200f") or text


@functools.cache
def _prototypes() -> dict[str, str]:
    """Each confusable character's UTS #39 prototype, from the ``confusable-homoglyphs`` data.

    The package ships Unicode's ``confusables.txt`` as JSON with every line (a single code point
    mapped to its prototype) stored both ways, so each set of mutually confusable glyphs is a
    star around its prototype: the one member linked to several, or a sequence of several code
    points (``rn`` for ``m``); of a pair linked only to each other either will do (the ASCII one
    is taken). The JSON file is read directly: the package's modules would import ``urllib``.
    """
    import importlib.resources
    import json

    source = importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json")
    data = json.loads(source.read_text(encoding="utf-8"))
    links = {_glyph(key): {_glyph(entry["c"]) for entry in entries} for key, entries in data.items()}
    prototypes: dict[str, str] = {}
    for glyph, linked in links.items():
        if len(glyph) > 1 or len(linked) > 1:
            continue  # a prototype
        (other,) = linked
        if len(other) > 1 or len(links.get(other, ())) > 1 or min(glyph, other, key=lambda g: (not g.isascii(), g)) == other:
            prototypes[glyph] = other
    return prototypes


def _bracket(char: str) -> str | None:
    """``<``, ``>``, ``[`` or ``]`` for a bracket the confusables table leaves out, by its Unicode name."""
    if not unicodedata.category(char).startswith(("P", "S")):
        return None
    name = unicodedata.name(char, "")
    for pattern, target in _BRACKET_NAMES:
        if pattern.search(name):
            return target
    return None


def _small_capital(char: str) -> str | None:
    """The letter a small capital stands for (``ᴀ`` reads ``a``), by its Unicode name."""
    found = _SMALL_CAPITAL.search(unicodedata.name(char, "")) if char.isalpha() else None
    return found.group(1).lower() if found else None


def _prototype(char: str) -> str:
    return _small_capital(char) or _prototypes().get(char) or _bracket(char) or char


def _skeleton_char(char: str) -> str:
    """Step 3 of the reading for one (folded) character: its prototype, read again until settled."""
    return _settle(char, lambda text: "".join(_prototype(c) for c in text).translate(_FOLD))


class _ReadingTable(dict[int, str]):
    """A :meth:`str.translate` table filled on demand: each character's reading, computed once."""

    def __init__(self, read: Callable[[str], str]) -> None:
        super().__init__()
        self._read = read

    def __missing__(self, codepoint: int) -> str:
        value = self[codepoint] = self._read(chr(codepoint))
        return value


_FOLD = _ReadingTable(_fold_char)
_SKELETON = _ReadingTable(_skeleton_char)


def _unescape(match: re.Match[str]) -> str:
    return html.unescape(match.group(0))


def fence_view(text: str) -> str:
    """The reading of ``text`` that fence tokens are looked for in (steps 1 to 3 of the module doc).

    References and folding are repeated until nothing changes, so escaping at any depth and
    escapes hidden behind compatibility characters (``＆lt;``) are undone too. ASCII text without
    ``&`` (most of what a turn renders) is read through a byte table instead (:func:`_ascii_reading`).
    """
    if text.isascii() and "&" not in text:
        reading = _ascii_reading()
        if reading is not None:
            table, drop, expand = reading
            view = text.encode("ascii").translate(table, drop).decode("ascii")
            for char, read in expand:
                if char in view:
                    view = view.replace(char, read)
            return view
    return _general_view(text)


@functools.cache
def _ascii_reading() -> tuple[bytes, bytes, tuple[tuple[str, str], ...]] | None:
    """The reading of each ASCII character as a ``bytes.translate`` table, the characters it drops,
    and the few read as several characters (``m`` reads ``rn``) as replacements made after it.

    Exactly :func:`_general_view` for ASCII text without ``&`` (nothing to unescape, one folding
    pass, then the skeleton), character by character; None, for the general path, should a
    replacement's reading hold a character that is replaced too.
    """
    table, drop, expand = bytearray(range(256)), bytearray(), []
    for code in range(128):
        read = "".join(_SKELETON[ord(char)] for char in _FOLD[code])
        if not read:
            drop.append(code)
        elif len(read) == 1 and read.isascii():
            table[code] = ord(read)
        else:
            expand.append((chr(code), read))
    outputs = "".join(chr(code) for code in table[:128]) + "".join(read for _, read in expand)
    if any(char in outputs.replace(char, "", 1) for char, _ in expand):
        return None
    return bytes(table), bytes(drop), tuple(expand)


def _general_view(text: str) -> str:
    """:func:`fence_view` for any text: references decoded and folded until settled, then the skeleton."""
    view = text
    for _ in range(len(text) + 4):
        folded = (_REFERENCE.sub(_unescape, view) if "&" in view else view).translate(_FOLD)
        done = folded == view or "&" not in folded
        view = folded
        if done:
            break
    return view.translate(_SKELETON)


def _view_with_spans(text: str) -> tuple[str, list[int], list[int]]:
    """:func:`fence_view`, and for each character of it the span of ``text`` it was read from."""
    chars, starts, ends = list(text), list(range(len(text))), list(range(1, len(text) + 1))

    def through(table: _ReadingTable) -> None:
        out: tuple[list[str], list[int], list[int]] = ([], [], [])
        for char, start, end in zip(chars, starts, ends, strict=True):
            for read in table[ord(char)]:
                out[0].append(read)
                out[1].append(start)
                out[2].append(end)
        chars[:], starts[:], ends[:] = out

    view = text
    for _ in range(len(text) + 4):
        if "&" in view:
            out: tuple[list[str], list[int], list[int]] = ([], [], [])
            last = 0
            for match in _REFERENCE.finditer(view):
                out[0].extend(chars[last : match.start()])
                out[1].extend(starts[last : match.start()])
                out[2].extend(ends[last : match.start()])
                decoded = _unescape(match)
                if decoded == match.group(0):
                    out[0].extend(chars[match.start() : match.end()])
                    out[1].extend(starts[match.start() : match.end()])
                    out[2].extend(ends[match.start() : match.end()])
                else:
                    span = (starts[match.start()], ends[match.end() - 1])
                    out[0].extend(decoded)
                    out[1].extend([span[0]] * len(decoded))
                    out[2].extend([span[1]] * len(decoded))
                last = match.end()
            out[0].extend(chars[last:])
            out[1].extend(starts[last:])
            out[2].extend(ends[last:])
            chars[:], starts[:], ends[:] = out
        through(_FOLD)
        folded = "".join(chars)
        done = folded == view or "&" not in folded
        view = folded
        if done:
            break
    through(_SKELETON)
    return "".join(chars), starts, ends


# --------------------------------------------------------------------------- the recogniser


@functools.cache
def _alternatives() -> dict[str, frozenset[str]]:
    """For a reading character, the others that may stand for it because of letter case.

    The reading folds case before taking the skeleton, so ``I`` reads ``i``; but ``I`` is a
    confusable of ``l`` too. For every ASCII capital whose two orders disagree, the
    skeleton-first reading accepts the fold-first one (``l`` accepts ``i``).
    """
    accept: dict[str, set[str]] = {}
    for char in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        fold_first = fence_view(char)
        unfolded = "".join(c for c in unicodedata.normalize("NFKD", char) if not _ignorable(c))
        skeleton_first = fence_view("".join(_prototype(c) for c in unfolded))
        if fold_first != skeleton_first and len(fold_first) == 1 and len(skeleton_first) == 1:
            accept.setdefault(skeleton_first, set()).add(fold_first)
    return {key: frozenset(value) for key, value in accept.items()}


def _letters(word: str, limit: int | None = None) -> str:
    """The reading of ``word`` as a pattern, each letter also accepting its case alternatives."""
    accept = _alternatives()
    parts = []
    for char in fence_view(word)[:limit]:
        options = sorted({char} | accept.get(char, frozenset()))
        parts.append(re.escape(char) if len(options) == 1 else "[" + "".join(map(re.escape, options)) + "]")
    return "".join(parts)


@functools.cache
def _pattern() -> re.Pattern[str]:
    """Every registered fence as it appears in a reading; group ``f<i>`` names the fence.

    Each fence starts with an opener, so the pattern does too (one character class), which lets
    the regular expression engine skip to the candidates.
    """
    letters = _letters
    sep = "[\\s" + re.escape(fence_view("_")) + re.escape(fence_view("-")) + "]*"
    lt, gt, slash = re.escape(fence_view("<")), re.escape(fence_view(">")), re.escape(fence_view("/"))
    openers = "".join(re.escape(fence_view(c)) for c in _OPENERS)
    alternatives = []
    for i, fence in enumerate(_registered):
        body = sep.join(letters(word) for word in fence.words)
        if fence.kind == "tag":
            shape = f"(?<={lt})\\s*(?P<s{i}>{slash})?\\s*{body}(?:\\s*{gt})?"
        elif fence.kind == "marker":
            shape = f"(?<={lt})(?:\\s*{lt})*\\s*{body}(?:\\s*{gt})*"
        else:
            shape = f"\\s*{body}"
        alternatives.append(f"{shape}(?P<f{i}>)")
    return re.compile(f"[{openers}](?:" + "|".join(alternatives) + ")")


@functools.cache
def _candidates() -> re.Pattern[str]:
    """An opener followed by the start of a fence's first word: where :func:`_pattern` is worth trying."""
    starts = "|".join(sorted({_letters(fence.words[0], 3) for fence in _registered}))
    openers = "".join(re.escape(fence_view(c)) for c in _OPENERS)
    sep = "".join(re.escape(fence_view(c)) for c in "/<")
    return re.compile(f"[{openers}](?=[\\s{sep}]*(?:{starts}))")


def _find(view: str, pos: int = 0) -> re.Match[str] | None:
    """The first fence token in ``view`` at or after ``pos``."""
    for candidate in _candidates().finditer(view, pos):
        found = _pattern().match(view, candidate.start())
        if found is not None:
            return found
    return None


@functools.cache
def _opener_chars() -> re.Pattern[str]:
    """Every character whose reading holds an opener or ``&``; text without one holds no fence.

    A character reads as something other than itself only through its compatibility
    decomposition, its case folding, its confusables prototype or a bracket's name, so the set
    is closed over those four (planes 0 to 2), with no character read in full (a test checks
    every character of those planes against the full reading).
    """
    prototypes = _prototypes()
    images: dict[str, str] = {}
    # Plane 2 holds ideographs only: none has a case or a bracket's name, and only the
    # compatibility ones (U+2F800 to U+2FA1F) decompose; the confusables data is read whole.
    codepoints = (*range(0x80, 0x20000), *range(0x2F800, 0x2FA20), *(ord(c) for c in prototypes if ord(c) >= 0x20000))
    for codepoint in codepoints:
        char = chr(codepoint)
        folded = char.casefold()
        image = prototypes.get(char, "") + (folded if folded != char else "")
        if unicodedata.decomposition(char) or folded != char:
            image += unicodedata.normalize("NFKD", char) + unicodedata.normalize("NFKD", folded)
        if unicodedata.category(char)[0] in "PS":
            image += _bracket(char) or ""
        if image:
            images[char] = image
    found = set(_OPENERS + "&")
    while True:
        more = {char for char, image in images.items() if char not in found and not found.isdisjoint(image)}
        if not more:
            break
        found |= more
    return re.compile("[" + "".join(f"\\U{ord(c):08x}" for c in sorted(found)) + "]")


def _may_hold_token(text: str) -> bool:
    """False for text without a character that reads as an opener or ``&``: no fence can be read in it."""
    if text.isascii():
        return _ASCII_OPENERS.search(text) is not None
    return _opener_chars().search(text) is not None or _TAG_OPENERS.search(text) is not None


def _decode_tags(text: str) -> str:
    """``text`` with each Unicode tag character replaced by the ASCII character it encodes."""
    return _TAGS.sub(lambda tag: chr(ord(tag.group(0)) - 0xE0000), text)


def has_fence_token(text: str) -> bool:
    """Whether the reading of ``text`` opens or closes a host fence anywhere.

    Tag characters are invisible, so the reading drops them; but a model may read them as the
    ASCII they encode, so a text holding some is also read with them decoded.
    """
    if not _may_hold_token(text):
        return False
    if _find(fence_view(text)) is not None:
        return True
    return not text.isascii() and _TAGS.search(text) is not None and _find(fence_view(_decode_tags(text))) is not None


def _inert(match: re.Match[str]) -> str:
    for i, fence in enumerate(_registered):
        if match.group(f"f{i}") is not None:
            return fence.inert(closing=fence.kind == "tag" and match.group(f"s{i}") is not None)
    raise AssertionError("a fence match names no fence")  # pragma: no cover


def _rewrite(text: str) -> str:
    """``text`` with each token found in its reading replaced, over the characters it was read from."""
    view, starts, ends = _view_with_spans(text)
    pieces: list[str] = []
    last = 0
    match = _find(view)
    while match is not None:
        start, end = starts[match.start()], ends[match.end() - 1]
        if start >= last:  # else read from characters already replaced; the next round sees the rest
            pieces += [text[last:start], _inert(match)]
            last = end
        match = _find(view, match.end())
    pieces.append(text[last:])
    return "".join(pieces)


def _opens(char: str) -> bool:
    read = fence_view(char)
    return "&" in read or any(fence_view(c) in read for c in _OPENERS)


def _strip_openers(text: str) -> str:
    return "".join(char for char in text if not _opens(char))


def neutralise_fence_tokens(text: str) -> str:
    """``text`` with every host fence token made inert; ``text`` itself when it holds none.

    A tag becomes its square-bracketed name (``</current_speaker >`` reads
    ``[/current_speaker]``; attributes and the rest of the text stay as they were), a marker its
    words in square brackets, a label ``[quoted: ...]``.
    """
    if not has_fence_token(text):
        return text
    text = _decode_tags(text)  # a fence spelled in tag characters becomes visible, then inert
    for _ in range(3):
        text = _rewrite(text)
        if not has_fence_token(text):
            return text
    return _strip_openers(text)


def neutralise_untrusted(text: str) -> str:
    """:func:`neutralise_fence_tokens`, and entity-encoded line breaks (``&#10;``) made spaces.

    For text quoted inside a fence (bodies, names): a line break that only appears once the
    entities are decoded must not start a line of its own either.
    """
    if not _may_hold_token(text):
        return text
    if _LINE_BREAK_ENTITY.search(text) is not None:
        text = _LINE_BREAK_ENTITY.sub(" ", text)
    if len(fence_view(text).splitlines()) > len(text.splitlines()):
        text = _strip_openers(text)
    return neutralise_fence_tokens(text)


def quote_inline(text: str, limit: int = NAME_MAX_CHARS) -> str:
    """Text someone else controls (a tool name, a model name), made safe for one host-written line.

    One line (:func:`one_line`), fence tokens and entity-encoded line breaks neutralised, at
    most ``limit`` characters.
    """
    return one_line(neutralise_untrusted(one_line(text, limit)), limit)


def quote_block(text: str, prefix: str = "    ") -> str:
    """Text someone else controls, quoted as a block: neutralised, every line indented by ``prefix``.

    No line of it can start at the host's own margin, so none can pose as a host line.
    """
    lines = neutralise_untrusted(text).splitlines() or [""]
    return "\n".join(prefix + line for line in lines)


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
    name = neutralise_untrusted(one_line(display_name or "", NAME_MAX_CHARS))
    tag = neutralise_untrusted(one_line((handle or "").strip().lstrip("@"), HANDLE_MAX_CHARS))
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
