"""Text from outside the host (a file on disk, a caller's request) made safe to sit in a system section.

Shared by the ``agents-md`` and ``dynamic-context`` plugins: the text keeps its meaning, but no
host fence token (:func:`monoagent._boundary.fences.neutralise_fence_tokens`) and no cache
boundary marker (:data:`monoagent._pipeline.assembly.BOUNDARY`) survive in it, so it can neither
pose as host framing nor as the split between the stable and the dynamic prompt.
"""

from __future__ import annotations

from monoagent import neutralise_fence_tokens

BOUNDARY_MARKER = "<<MONOAGENT_PROMPT_CACHE_BOUNDARY>>"
"""Spelt as :data:`monoagent._pipeline.assembly.BOUNDARY` (a test keeps them equal)."""
QUOTED_MARKER = "<<MONOAGENT_PROMPT_CACHE_BOUNDARY (quoted)>>"


def quoted_text(text: str) -> str:
    """``text`` with fence tokens neutralised and every cache boundary marker quoted."""
    return neutralise_fence_tokens(text).replace(BOUNDARY_MARKER, QUOTED_MARKER)


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit], True)
