"""Recall and precision of a redactor, measured on labelled corpora.

A redactor is any ``Callable[[str], str]`` (``lambda text: agent.redact(text, "tool_result")``
measures the whole ``redact`` chain). Two corpora feed it:

* **secrets**: entries ``{"kind", "text", "secret"}``. An entry is *caught* when no run of
  :data:`LEAK_RUN` characters of ``secret`` (the whole secret when it is shorter) survives in the
  output, apart from runs that also occur in ``text`` outside the secret. So a redactor that
  removes only the first word of a pass phrase, or leaves the tail of a key, has not caught it.
* **ordinary text**: entries ``{"kind", "text"}`` that hold no secret and must come back byte for
  byte unchanged; an entry that changes is a *false positive*.

Recall is caught / secrets. Precision is caught / (caught + false positives): of the entries the
redactor changed, the share that held a secret (a corpus-level figure; it depends on the mix of
the two corpora, so the false-positive rate, false positives / ordinary entries, is reported too).

The bundled corpora are ``tests/data/redaction_recall.json`` and
``tests/data/redaction_precision.json``; a plugin that replaces the redactor can measure itself
on them, or on its own, with :func:`measure_redactor`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import attrs

LEAK_RUN = 8


def leaks(secret: str, text: str, output: str) -> bool:
    """Whether ``output`` (``text`` redacted) still holds part of ``secret`` (see the module docstring).

    ``[REDACTED:<kind>]`` markers are left out first: a kind name is not a leak.
    """
    run = min(LEAK_RUN, len(secret))
    context = text.replace(secret, "\0")
    output = re.sub(r"\[REDACTED:[a-z0-9_]+\]", "\0", output)
    return any(
        secret[i : i + run] in output and secret[i : i + run] not in context for i in range(len(secret) - run + 1)
    )


@attrs.frozen
class RedactionMeasure:
    """What :func:`measure_redactor` found: counts, and the entries that went wrong (for the report)."""

    secrets: int
    caught: int
    ordinary: int
    false_positives: int
    missed: tuple[Mapping[str, str], ...]
    changed: tuple[tuple[Mapping[str, str], str], ...]

    @property
    def recall(self) -> float:
        return self.caught / self.secrets if self.secrets else 1.0

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / self.ordinary if self.ordinary else 0.0

    @property
    def precision(self) -> float:
        flagged = self.caught + self.false_positives
        return self.caught / flagged if flagged else 1.0


def measure_redactor(
    redact: Callable[[str], str],
    secrets: Iterable[Mapping[str, str]],
    ordinary: Iterable[Mapping[str, str]],
) -> RedactionMeasure:
    """Run ``redact`` over both corpora and count (see the module docstring for the definitions)."""
    secret_rows, ordinary_rows = list(secrets), list(ordinary)
    missed = tuple(row for row in secret_rows if leaks(row["secret"], row["text"], redact(row["text"])))
    changed = tuple((row, out) for row in ordinary_rows if (out := redact(row["text"])) != row["text"])
    return RedactionMeasure(
        secrets=len(secret_rows),
        caught=len(secret_rows) - len(missed),
        ordinary=len(ordinary_rows),
        false_positives=len(changed),
        missed=missed,
        changed=changed,
    )
