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
