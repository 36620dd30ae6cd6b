"""Benchmark: memory recall latency for ``lite`` and ``journal`` at 10,000 and 100,000 memories.

For each size N, both tiers are filled (bulk import, outside the timing) with N synthetic but
realistic captured turns (``User (Name (@handle)): ...`` / ``Assistant: ...`` built from a
vocabulary of 20,000 words drawn with Zipf's law, a hundred common work words such as
``deployment`` or ``invoice`` first, seeded, so every run stores the same text). Then Q queries (short questions from the same vocabulary; 200, 50 with --quick) are timed
one after the other in one event loop (bare and lite interleaved, the journal in a pass of its own):

* **bare**: the reference, on its own connection to the lite file: ``SELECT rowid,
  bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts)
  LIMIT 5`` with the MATCH expression built beforehand (nothing but SQLite's FTS5 query);
* **lite recall**: what the ``memory`` plugin does per turn for the tier: the per-turn lookup
  cache (a fresh one per query), ``LiteTier.search`` (query terms, FTS5 in a worker thread,
  term coverage) and the score + evidence gate;
* **journal search**: ``JournalTier.entries(query=..., limit=5)``, the hybrid search behind the
  MemoryRecall and MemoryJournal tools: FTS5 + a vector scan (sqlite-vec when it loads, else
  numpy) fused by RRF. It has no target (the journal is never recalled automatically).

Also per turn: the capture cost (``tier.add`` of one captured turn into the full store, near
duplicate check included) for each tier, over C turns (100; 30 with --quick).

Targets: lite recall median within 2x the bare query's, and under 5 ms at 100,000.

    .venv/bin/python bench/memory.py [--quick] [--json] [--sizes 10000,100000] [--queries Q]
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from _benchlib import emit_json, filesystem_of, machine, p99, parser, scaled, state_dir, summary, verdict_line

from monoagent_plugins.memory.embedders import HashedNgramEmbedder
from monoagent_plugins.memory.index import fts_match, query_terms
from monoagent_plugins.memory.journal import JournalTier
from monoagent_plugins.memory.lite import LiteTier
from monoagent_plugins.memory.recall import LookupCache, passes_gate

SIZES = (10_000, 100_000)
RATIO_TARGET = 2.0
ABSOLUTE_TARGET_MS = 5.0
SEED = 20261129
VOCABULARY = 20_000

NAMES = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor Walter Yara Zoe Priya Omar Lena Kenji".split()
SUBJECTS = (
    "deployment release build pipeline cluster database migration index backup invoice refund payment customer "
    "ticket dashboard report forecast budget roadmap sprint retro meeting interview candidate contract vendor "
    "laptop printer network firewall certificate password login account permission role schema query cache "
    "queue worker scheduler cron timezone calendar holiday travel flight hotel dinner lunch office desk kitchen "
    "garden bicycle train station airport conference talk slides paper draft review comment feedback survey "
    "dataset model training evaluation metric experiment feature flag rollout rollback incident outage alert "
    "pager rotation handover runbook playbook wiki page document spreadsheet presentation newsletter campaign"
).split()
VERBS = (
    "failed broke moved changed started finished postponed cancelled approved rejected shipped merged reverted "
    "updated fixed deleted restored renamed scheduled booked paid refunded escalated closed reopened migrated "
    "upgraded downgraded tested measured reviewed drafted signed renewed expired rotated archived"
).split()
QUALIFIERS = (
    "again yesterday today tomorrow overnight twice quickly slowly finally unexpectedly before lunch after the "
    "standup on friday on monday last week next week in staging in production on the laptop for the team for "
    "the customer without notice with a workaround behind a flag under load at midnight"
).split(" ")
FILLER = (
    "we agreed to look at it later and keep an eye on the numbers; the notes are in the usual place and "
    "nobody objected to the plan although a few details are still open"
).split()


def _rare_words(rng: random.Random, count: int) -> list[str]:
    syllables = "ka lo mi ne ru sa ti vo we xi ya zu bra cle dro fli gru pla ste tri".split()
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(count)]


class Corpus:
    """Deterministic captured turns and questions over one vocabulary (Zipf-like word choice)."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.vocabulary = SUBJECTS + _rare_words(self.rng, VOCABULARY - len(SUBJECTS))
        self.cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(self.vocabulary))))

    def words(self, k: int) -> list[str]:
        return self.rng.choices(self.vocabulary, cum_weights=self.cumulative, k=k)

    def turn(self, i: int) -> str:
        rng = self.rng
        name = rng.choice(NAMES)
        subject = " and the ".join(self.words(rng.randint(1, 3)))
        user = f"The {subject} {rng.choice(VERBS)} {rng.choice(QUALIFIERS).strip()}; ticket {rng.randint(100, 99999)} has the details."
        filler = " ".join(rng.sample(FILLER, rng.randint(6, 14)))
        answer = f"Noted: the {' '.join(self.words(rng.randint(2, 4)))} {rng.choice(VERBS)}, {filler}."
        return f"User ({name} (@{name.lower()})): {user}\nAssistant: {answer}"

    def question(self) -> str:
        rng = self.rng
        return f"What happened with the {' '.join(self.words(rng.randint(2, 4)))} {rng.choice(QUALIFIERS).strip()}?"


def stats_ms(samples: list[float]) -> dict[str, float]:
    out = scaled(summary(samples), 1000)
    out["p99"] = p99(samples) * 1000
    return out


async def fill(lite: LiteTier, journal: JournalTier, corpus: Corpus, n: int, chunk: int = 5000) -> float:
    start = time.perf_counter()
    for base in range(0, n, chunk):
        texts = [corpus.turn(base + i) for i in range(min(chunk, n - base))]
        days = [f"2026-{1 + (base + i) % 12:02d}-{1 + (base + i) % 28:02d}" for i in range(len(texts))]
        await lite.add_many(texts)
        await journal.add_many(list(zip(texts, days, strict=True)))
    return time.perf_counter() - start


async def measure(tmp: Path, n: int, queries: int, captures: int) -> dict[str, Any]:
    corpus = Corpus()
    lite = LiteTier(tmp / f"lite-{n}.sqlite")
    journal = JournalTier(tmp / f"journal-{n}.sqlite", HashedNgramEmbedder())
    fill_s = await fill(lite, journal, corpus, n)
    bare = sqlite3.connect(tmp / f"lite-{n}.sqlite")
    questions = [corpus.question() for _ in range(queries)]
    matches = [fts_match(query_terms(q)) for q in questions]
    bare_sql = "SELECT rowid, bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts) LIMIT 5"
    for q, m in zip(questions[:10], matches[:10], strict=True):  # warm the page cache and the worker thread
        bare.execute(bare_sql, (m,)).fetchall()
        await lite.search(q, limit=10)
        await journal.entries(query=q, limit=5)
    bare_s, lite_s, journal_s, recalled = [], [], [], 0
    for q, m in zip(questions, matches, strict=True):  # bare and lite interleaved: same cache conditions
        start = time.perf_counter()
        bare.execute(bare_sql, (m,)).fetchall()
        bare_s.append(time.perf_counter() - start)

        start = time.perf_counter()
        hits = await LookupCache().search(lite, q)
        kept = [h for h in hits if passes_gate(q, h, 0.3, True)]
        lite_s.append(time.perf_counter() - start)
        recalled += bool(kept)
    for q in questions:  # a pass of its own: BLAS threads of the vector scan must not skew the others
        start = time.perf_counter()
        await journal.entries(query=q, limit=5)
        journal_s.append(time.perf_counter() - start)
    capture_lite, capture_journal = [], []
    for i in range(captures):
        text = corpus.turn(n + i)
        start = time.perf_counter()
        await lite.add(text)
        capture_lite.append(time.perf_counter() - start)
        start = time.perf_counter()
        await journal.add(text, metadata={"date": "2026-12-01"})
        capture_journal.append(time.perf_counter() - start)
    backend = journal.index.backend
    bare.close()
    lite.close()
    journal.close()
    b, li, j = stats_ms(bare_s), stats_ms(lite_s), stats_ms(journal_s)
    return {
        "memories": n,
        "fill_s": fill_s,
        "queries": queries,
        "queries_with_recall": recalled,
        "bare_ms": b,
        "lite_recall_ms": li,
        "journal_search_ms": j,
        "lite_ratio_to_bare": li["median"] / b["median"] if b["median"] else float("inf"),
        "journal_ratio_to_bare": j["median"] / b["median"] if b["median"] else float("inf"),
        "capture_lite_ms": stats_ms(capture_lite),
        "capture_journal_ms": stats_ms(capture_journal),
        "vector_backend": backend,
        "db_bytes": {
            "lite": sum(p.stat().st_size for p in tmp.glob(f"lite-{n}.sqlite*")),
            "journal": sum(p.stat().st_size for p in tmp.glob(f"journal-{n}.sqlite*")),
        },
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated store sizes (default 10000,100000)")
    p.add_argument("--queries", type=int, default=None, help="queries timed per size (default 200, quick 50)")
    p.add_argument("--captures", type=int, default=None, help="captured turns timed per size (default 100, quick 30)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    queries = args.queries or (50 if args.quick else 200)
    captures = args.captures or (30 if args.quick else 100)
    with state_dir(args.tmp_root, args.keep) as tmp:
        fs = filesystem_of(tmp)
        started = time.perf_counter()
        rows = [asyncio.run(measure(tmp, n, queries, captures)) for n in sizes]
        wall = time.perf_counter() - started

    largest = max(rows, key=lambda r: r["memories"])
    ratio_ok = all(r["lite_ratio_to_bare"] <= RATIO_TARGET for r in rows)
    absolute_ok = largest["lite_recall_ms"]["median"] < ABSOLUTE_TARGET_MS
    ok = ratio_ok and absolute_ok
    detail = (
        f"lite recall median {largest['lite_recall_ms']['median']:.2f} ms at {largest['memories']:,} memories "
        f"(target < {ABSOLUTE_TARGET_MS:.0f} ms), {largest['lite_ratio_to_bare']:.2f}x the bare FTS5 bm25 query "
        f"(target <= {RATIO_TARGET:.0f}x at every size: worst {max(r['lite_ratio_to_bare'] for r in rows):.2f}x)"
    )
    if args.json:
        emit_json(
            {
                "benchmark": "memory",
                "quick": args.quick,
                "wall_s": wall,
                "machine": machine(),
                "filesystem": fs,
                "sizes": {str(r["memories"]): r for r in rows},
                "target": f"lite recall median <= {RATIO_TARGET}x the bare FTS5 query and < {ABSOLUTE_TARGET_MS} ms at the largest size",
                "pass": ok,
                "verdict": verdict_line("memory", ok, detail),
            }
        )
        return

    print(f"memory benchmark: sizes {', '.join(f'{n:,}' for n in sizes)}; {queries} queries and {captures} captures per size; "
          f"{wall:.1f} s in all")
    print(f"state dir on {fs['device']} ({fs['fstype']}, mounted at {fs['mountpoint']}); vector backend: {rows[0]['vector_backend']}")
    print()
    print(f"{'memories':>9} {'what':<16} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} {'x bare':>7}")
    for r in rows:
        n = f"{r['memories']:,}"
        for label, key, ratio in (
            ("bare FTS5 top-5", "bare_ms", None),
            ("lite recall", "lite_recall_ms", r["lite_ratio_to_bare"]),
            ("journal search", "journal_search_ms", r["journal_ratio_to_bare"]),
            ("lite capture", "capture_lite_ms", None),
            ("journal capture", "capture_journal_ms", None),
        ):
            s = r[key]
            print(f"{n:>9} {label:<16} {s['median']:>10.3f} {s['p99']:>8.3f} {s['max']:>8.3f} {f'{ratio:.2f}' if ratio else '':>7}")
            n = ""
        print(f"{'':>9} filled in {r['fill_s']:.1f} s; recall fired on {r['queries_with_recall']}/{r['queries']} queries; "
              f"files: lite {r['db_bytes']['lite'] / 1e6:.1f} MB, journal {r['db_bytes']['journal'] / 1e6:.1f} MB")
    print()
    print(f"targets: lite recall <= {RATIO_TARGET:.0f}x the bare query at every size, and < {ABSOLUTE_TARGET_MS:.0f} ms at the largest")
    print(verdict_line("memory", ok, detail))


if __name__ == "__main__":
    main()
