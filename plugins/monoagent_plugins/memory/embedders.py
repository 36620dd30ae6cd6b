"""The bundled embedder ``hashed-ngrams``: dependency-free, offline, deterministic, and lexical.

It is honest about what it is: a *lexical* embedder. Each text is casefolded, cut into
character 3- and 4-grams of its words (with word-boundary padding), and every n-gram is hashed
(CRC-32, so the same text gives the same vector in every process) into one of ``dimensions``
buckets with a hashed sign; the counts are damped (``1 + log``) and the vector scaled to unit
length. Texts that share spelling (``deploy`` / ``deployment`` / ``deployed``, a typo, a
compound written apart) come out close; texts that mean the same in different words do not.
For semantic similarity install a real sentence-embedding model, for example the contrib
distribution ``monoagent-minilm``, and select it with ``memory.journal.embedder``.

Options (passed by the tier that asks for it, e.g. ``memory.journal.embedderDimensions``):
``dimensions``, 16 to 4096, default 512. A tier that finds stored vectors of another embedder or
size re-embeds its entries.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from monoagent import ComponentRegistrar, Embedder, hookimpl

if TYPE_CHECKING:
    from monoagent import Agent

NAME = "hashed-ngrams"
DESCRIPTION = "lexical: hashed character 3- and 4-grams (spelling, not meaning); offline, no dependencies"
_WORD = re.compile(r"\w+", re.UNICODE)


class HashedNgramEmbedder:
    """Hashed character n-grams into a fixed-size unit vector; see the module docstring."""

    name = NAME
    description = DESCRIPTION
    lexical = True

    def __init__(self, dimensions: int = 512, ngrams: tuple[int, ...] = (3, 4)) -> None:
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or not 16 <= dimensions <= 4096:
            raise ValueError(f"hashed-ngrams dimensions must be an integer from 16 to 4096 (got {dimensions!r})")
        self.dimensions = dimensions
        self.ngrams = ngrams

    def _features(self, text: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for word in _WORD.findall(text.casefold()):
            padded = f" {word} "
            for n in self.ngrams:
                if len(padded) < n:
                    continue
                for i in range(len(padded) - n + 1):
                    gram = padded[i : i + n]
                    counts[gram] = counts.get(gram, 0) + 1
        return counts

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for gram, count in self._features(text).items():
            h = zlib.crc32(gram.encode("utf-8"))
            weight = 1.0 + math.log(count)
            vector[h % self.dimensions] += weight if (h >> 31) & 1 else -weight
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm > 0 else vector

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector (or all zeros, for text without words) per text, in order."""
        return [self.embed_one(text) for text in texts]


def make_hashed_ngrams(agent: Agent, options: Mapping[str, Any] | None = None) -> HashedNgramEmbedder:
    options = dict(options or {})
    dimensions = options.pop("dimensions", None)
    if options:
        raise ValueError(f"hashed-ngrams takes only the option 'dimensions' (got {', '.join(sorted(options))})")
    return HashedNgramEmbedder(512 if dimensions is None else dimensions)


@hookimpl(trylast=True)
def register_embedders(register: ComponentRegistrar[Embedder]) -> None:
    register(NAME, make_hashed_ngrams, description=DESCRIPTION)

