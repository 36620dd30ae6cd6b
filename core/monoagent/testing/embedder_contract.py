"""The conformance suite for embedders: what any embedder plugin must prove.

An embedder plugin runs it unchanged by subclassing :class:`EmbedderContract` in its own tests
and implementing :meth:`~EmbedderContract.make_embedder` (``from monoagent.testing import
EmbedderContract``). What it checks, each through :meth:`~EmbedderContract.vectors` (one vector
per text, each exactly ``dimensions`` finite numbers):

* ``name`` is a non-blank string and ``dimensions`` a positive integer that embedding does not change;
* batches of 0, 1, 2 and 33 texts give exactly as many vectors, in order: each vector of a batch
  is the vector of its text embedded alone, and a text repeated in a batch gets the same vector;
* odd input (empty, blank, NUL, 20,000 characters, emoji and CJK) still gives finite vectors;
* two instances give the same vectors for the same texts (a journal embeds entries in one
  process and queries in another);
* related texts score closer (cosine) than unrelated ones, and a text is closest to itself.

Only the standard library is imported: third-party test suites import this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from monoagent._kernel.interfaces import Embedder

__all__ = ["EmbedderContract"]


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if na == 0 or nb == 0:
        return 0.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def _same(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(a, b, strict=True))


class EmbedderContract:
    """Subclass with a ``Test`` name and implement :meth:`make_embedder`; pytest collects the rest."""

    related = ("the deployment to staging failed last night", "deploying to staging failed again tonight")
    unrelated = "a recipe for banana bread with walnuts and cinnamon"
    #: Texts an embedder meets in stored memory and must still turn into finite vectors.
    odd_texts = ("ünïcødé 会议 🎉", "", "   \n\t", "\x00", "x" * 20_000, "one")
    #: The batch sizes checked: none, one, two, and more than a typical small batch.
    batch_sizes = (0, 1, 2, 33)

    def make_embedder(self) -> Embedder:
        raise NotImplementedError("subclasses of EmbedderContract implement make_embedder()")

    def vectors(self, embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
        """``embedder.embed(texts)``, checked: one vector per text, each ``dimensions`` finite numbers."""
        out = list(embedder.embed(list(texts)))
        assert len(out) == len(texts), f"embed() of {len(texts)} texts returned {len(out)} vectors"
        checked: list[list[float]] = []
        for text, vector in zip(texts, out, strict=True):
            values = list(vector)
            assert len(values) == embedder.dimensions, (
                f"the vector of {text[:40]!r} has {len(values)} numbers; the embedder declares {embedder.dimensions} dimensions"
            )
            wrong = [x for x in values if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)]
            assert not wrong, f"the vector of {text[:40]!r} holds values that are not finite numbers: {wrong[:3]!r}"
            checked.append([float(x) for x in values])
        return checked

    def test_contract_name_and_fixed_dimensions(self) -> None:
        embedder = self.make_embedder()
        assert isinstance(embedder.name, str) and embedder.name.strip()
        dimensions = embedder.dimensions
        assert isinstance(dimensions, int) and not isinstance(dimensions, bool) and dimensions >= 1
        self.vectors(embedder, ["one", "two words", "a somewhat longer sentence of several words"])
        assert embedder.dimensions == dimensions, "dimensions changed after embedding"

    def test_contract_one_vector_per_text_for_every_batch_size(self) -> None:
        embedder = self.make_embedder()
        texts = [f"note {i}: the {word} survey is due" for i, word in enumerate(["otter", "heron", "badger"] * 11)]
        for size in self.batch_sizes:
            assert len(self.vectors(embedder, texts[:size])) == size

    def test_contract_vectors_are_finite_numbers(self) -> None:
        self.vectors(self.make_embedder(), self.odd_texts)

    def test_contract_batch_equals_single_in_order(self) -> None:
        embedder = self.make_embedder()
        texts = [self.related[0], self.unrelated, self.related[1], self.related[0]]
        batch = self.vectors(embedder, texts)
        for text, vector in zip(texts, batch, strict=True):
            assert _same(vector, self.vectors(embedder, [text])[0]), f"the vector of {text!r} depends on its batch"
        assert _same(batch[0], batch[3]), "the same text twice in one batch got two vectors"
        assert all(_same(a, b) for a, b in zip(self.vectors(embedder, texts[::-1]), batch[::-1], strict=True))

    def test_contract_deterministic_across_instances(self) -> None:
        texts = [self.related[0], self.unrelated, *self.odd_texts]
        first = self.vectors(self.make_embedder(), texts)
        second = self.vectors(self.make_embedder(), texts)
        for text, a, b in zip(texts, first, second, strict=True):
            assert _same(a, b), f"two instances embed {text[:40]!r} differently"

    def test_contract_related_texts_are_closer(self) -> None:
        a, b, c = self.vectors(self.make_embedder(), [*self.related, self.unrelated])
        assert _cos(a, b) > _cos(a, c) + 0.1
        assert math.isclose(_cos(a, a), 1.0, rel_tol=1e-4)
