"""What the bundled memory tiers share for search: query terms, FTS5 queries, and where tiers live.

Not a plugin (it has no entry point); ``memory_lite`` and ``memory_journal`` import it, with
:mod:`monoagent_plugins.memory.database` (a tier's SQLite file, checked, with its worker
thread) and :mod:`monoagent_plugins.memory.vectors` (the vector index).

* :func:`query_terms` / :func:`fts_match`: a user message becomes an FTS5 query of its content
  words, each quoted (so no FTS5 syntax in the text can change the query), joined by ``OR`` and
  ranked by ``bm25``. :func:`bm25_relevance` maps bm25 onto 0..1 for the recall gate.
* :func:`term_coverage` / :func:`has_evidence`: whether a text holds the query's words.
* :func:`memory_dir`: ``memory.path``, where every tier keeps its file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MAX_QUERY_TERMS = 16

_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just let me more
    most my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves also get got please thanks thank ok okay yes hi hello hey
    """.split()
)


def query_terms(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The content words of ``text``: casefolded, stop words and single letters dropped, first ``max_terms``."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.casefold()):
        if word in STOPWORDS or (len(word) < 2 and not word.isdigit()) or word in seen:
            continue
        seen[word] = None
        if len(seen) == max_terms:
            break
    return list(seen)


def fts_term(term: str) -> str:
    """One term as an FTS5 string (quoted, so no word is read as an operator or a column filter)."""
    return '"' + term.replace('"', '""') + '"'


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: every term quoted, joined by OR; None when there is no term."""
    if not terms:
        return None
    return " OR ".join(fts_term(term) for term in terms)


def bm25_relevance(raw: float) -> float:
    """FTS5's ``bm25()`` (lower is better, usually negative) as a 0..1 relevance score."""
    x = -raw
    return x / (x + 1.0) if x > 0 else 0.0


def _found(term: str, words: set[str]) -> bool:
    if term in words:
        return True
    if len(term) < 5:
        return False
    stem = term[:5]
    return any(w.startswith(stem) for w in words)


def term_coverage(terms: Sequence[str], text: str) -> float:
    """The share of ``terms`` found in ``text`` (a word equal to it, or sharing its first 5 letters)."""
    if not terms:
        return 0.0
    words = set(_WORD.findall(text.casefold()))
    return sum(1 for term in terms if _found(term, words)) / len(terms)


def has_evidence(query: str, text: str) -> bool:
    """True when ``text`` contains at least one content word of ``query`` (prefix-tolerant)."""
    return term_coverage(query_terms(query), text) > 0.0


def memory_dir(config: Any) -> Path:
    """``memory.path`` (the ``memory`` plugin's key) resolved against the config file's directory, else
    ``<home>/memory``; the same default when the ``memory`` plugin is blocked (its section is then ignored,
    with a warning), so the tiers still find their files."""
    try:
        return Path(config.path("memory.path"))
    except KeyError:
        return Path(config.home) / "memory"


def word_set(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.casefold()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def split_options(options: Mapping[str, Any] | None, cls: type, tier: str) -> dict[str, Any]:
    """Validate a tier factory's ``options`` against the attrs fields of its config class."""
    import attrs

    checked = dict(options or {})
    known = {f.name for f in attrs.fields(cls)}
    unknown = sorted(set(checked) - known)
    if unknown:
        raise ValueError(f"memory tier {tier!r} does not take the option(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    return checked
