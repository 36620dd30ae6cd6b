"""Byte-bounded text helpers shared by assembly, stores and guards."""

from __future__ import annotations

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

    Never splits a code point: the cut backs up to a character boundary. Surrogates that cannot
    be encoded are replaced, so the result is always valid UTF-8.
    """
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return Truncated(text, len(data), len(data))
    cut = max(max_bytes, 0)
    # Back up over continuation bytes (10xxxxxx) so the cut lands on a code-point boundary.
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    kept = data[:cut].decode("utf-8", "replace")
    return Truncated(kept, len(data), cut)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))
