"""UTF-8-safe truncation, as a property over all text and all caps."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from monoagent._boundary.text import LazyPattern, utf8_len, utf8_prefix


@given(st.text(), st.integers(min_value=0, max_value=400))
def test_prefix_is_valid_utf8_within_the_cap_and_maximal(text, cap):
    result = utf8_prefix(text, cap)
    data = result.text.encode("utf-8")  # strict: raises if not valid UTF-8
    assert len(data) == result.kept_bytes <= max(cap, 0) or not result.truncated
    assert result.original_bytes == utf8_len(text)
    safe = text.encode("utf-8", "replace").decode("utf-8")
    assert safe.startswith(result.text)
    if result.truncated:
        next_char = safe[len(result.text)]
        assert len(data) + len(next_char.encode("utf-8")) > cap  # no further whole character fits
    else:
        assert result.text == safe


@given(st.text(alphabet="é🎉a\u0800", min_size=1), st.integers(min_value=1, max_value=64))
def test_multibyte_boundaries(text, cap):
    result = utf8_prefix(text, cap)
    assert len(result.text.encode("utf-8")) <= cap
    assert text.startswith(result.text)


def test_lazy_pattern_compiles_on_first_use_and_answers_as_the_compiled_pattern():
    words = LazyPattern(r"(\w)(\w*)", re.ASCII)
    assert words._compiled is None  # importing a module that defines one compiles nothing
    compiled = re.compile(r"(\w)(\w*)", re.ASCII)
    text = "ab cd éf gh"
    for method, args in [
        ("search", (text, 4, 5)),
        ("match", (text, 3)),
        ("fullmatch", (text, 0, 2)),
        ("findall", (text, 1, 9)),
        ("split", (text, 2)),
        ("sub", (r"\2\1", text, 3)),
        ("subn", (lambda m: m.group(0).upper(), text)),
    ]:
        got, want = getattr(words, method)(*args), getattr(compiled, method)(*args)
        assert (got.span() if isinstance(got, re.Match) else got) == (want.span() if isinstance(want, re.Match) else want), method
    assert [m.span() for m in words.finditer(text, 1, 9)] == [m.span() for m in compiled.finditer(text, 1, 9)]
    assert words.compiled.pattern == compiled.pattern and words.compiled.flags == compiled.flags
    line_ends = LazyPattern(rb"\r\n?|\n")
    assert line_ends.compiled.search(bytearray(b"a\r\nb")).span() == (1, 3)


def _by_encoding(text: str, cap: int, suffix: bool) -> tuple[str, int, int]:
    """What utf8_prefix / utf8_suffix answer, worked out from the UTF-8 encoding alone."""
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return data.decode("utf-8"), len(data), len(data)
    if suffix:
        start = len(data) - max(cap, 0)
        while start < len(data) and (data[start] & 0xC0) == 0x80:
            start += 1
        return data[start:].decode("utf-8"), len(data), len(data) - start
    cut = max(cap, 0)
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut].decode("utf-8"), len(data), cut


@given(st.one_of(st.text(alphabet=st.characters(max_codepoint=127)), st.text()), st.integers(min_value=-3, max_value=300))
def test_the_ascii_shortcut_answers_what_the_encoding_does(text, cap):
    """ASCII text is measured and cut without encoding it: the answers are the encoding's, for ASCII
    and other text alike (a negative cap keeps nothing)."""
    from monoagent._boundary.text import utf8_suffix
    from monoagent_plugins.providers.tokens import estimate

    assert utf8_len(text) == len(text.encode("utf-8", "replace"))
    assert estimate(text) == -(-len(text.encode("utf-8", "surrogatepass")) // 4)
    for cut, suffix in ((utf8_prefix, False), (utf8_suffix, True)):
        result = cut(text, cap)
        assert (result.text, result.original_bytes, result.kept_bytes) == _by_encoding(text, cap, suffix)


def test_a_tuple_of_model_values_reports_a_replacement_in_any_of_them():
    """A model built over a tuple of model values (a history) records a replacement made in any of
    them, whether the tuple holds only model values or other values too."""
    from monoagent import Message
    from monoagent._kernel.valid_text import _any_replaced

    clean = tuple(Message("user", f"m{i}") for i in range(50))
    dirty = (*clean, Message("user", "lone \ud800"))
    assert not _any_replaced(clean)
    assert _any_replaced(dirty)
    assert _any_replaced((*dirty, "not a model value"))
    assert not _any_replaced((*clean, "not a model value"))
