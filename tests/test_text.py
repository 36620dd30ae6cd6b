"""UTF-8-safe truncation, as a property over all text and all caps."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monoagent.text import utf8_len, utf8_prefix


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
