"""Benchmark: one whole turn in-process at turns 10, 100 and 200 of one conversation.

An Agent from ``monoagent.testing.fresh_agent`` (offline:echo, the ``files`` history store with
its durable commit, run artifacts on) answers ``await agent.respond(TurnRequest(text,
conversation_id="bench"))`` with ~200-character user messages, turn after turn, up to the last
checkpoint window. Each turn is timed with time.perf_counter. At each checkpoint the median of
the window of W turns starting there (15; 5 with --quick: turns 10..24, 100..114, 200..214) is
reported, pooled over R conversations run one after the other on the same Agent (3; 1 with
--quick) to damp disk noise.

The floor, measured in the same run on the same disk and interleaved with the window's turns:
write a temporary file of the history record's size at that turn, fsync it, rename it over the
target, fsync the directory (what a durable commit cannot avoid), W repetitions, median.

Target: at each checkpoint, median <= floor + 1 ms, and flat: the overhead (median - floor) at
turns 100 and 200 (both with a full 64-message window) within 20 % + 0.2 ms of each other, and
no checkpoint's overhead more than 1 ms above turn 10's. Reference: a popular Python agent SDK
takes about 11 ms per turn at turn 200 on this machine with its scripted test model.

    .venv/bin/python bench/turn.py [--quick] [--json] [--window W] [--rounds R]
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time
from pathlib import Path
from typing import Any

from _benchlib import durable_write, emit_json, filesystem_of, machine, parser, scaled, state_dir, summary, verdict_line

from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import fresh_agent

CHECKPOINTS = (10, 100, 200)
CONVERSATION = "bench"
USER_CHARS = 200
ALLOWANCE_MS = 1.0
REFERENCE_MS_AT_200 = 11.0
REFERENCE = "a popular Python agent SDK takes about 11 ms per turn at turn 200 on this machine with its scripted test model"

WORDS = (
    "please summarise the latest build log and tell me which tests failed and why then suggest a "
    "fix for the flaky network test and check whether the cache directory is still growing after "
    "yesterday's change to the cleanup job on the staging machine"
).split()


def user_text(rng: random.Random, turn: int) -> str:
    words = [f"(turn {turn})"]
    size = len(words[0])
    while size < USER_CHARS:
        words.append(rng.choice(WORDS))
        size += len(words[-1]) + 1
    return " ".join(words)[:USER_CHARS]


def record_size(history_dir: Path, conversation_id: str) -> int:
    """Size of the conversation's record: ``<sha256(id)>.json`` (the files store's naming), else the newest."""
    path = history_dir / (hashlib.sha256(conversation_id.encode()).hexdigest() + ".json")
    if not path.exists():
        records = sorted(history_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        if not records:
            raise SystemExit(f"no history record in {history_dir}")
        path = records[-1]
    return path.stat().st_size


async def run(tmp: Path, window: int, rounds: int, block: list[str]) -> dict[str, Any]:
    """``rounds`` conversations of ``last`` turns each on one Agent; samples pooled per checkpoint."""
    rng = random.Random(20240601)
    agent = fresh_agent(tmp, config={"plugins": {"block": block}})
    floor_dir = tmp / "floor"
    floor_dir.mkdir()
    last = max(CHECKPOINTS) + window - 1
    in_window = {c + i: c for c in CHECKPOINTS for i in range(window)}
    turn_s: dict[int, list[float]] = {t: [] for t in range(1, last + 1)}
    sizes: dict[int, list[int]] = {c: [] for c in CHECKPOINTS}
    floor_s: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
    history_messages: dict[int, int] = {}
    for r in range(rounds):
        conversation = CONVERSATION if r == 0 else f"{CONVERSATION}-{r + 1}"
        for turn in range(1, last + 1):
            request = TurnRequest(user_text(rng, turn), conversation_id=conversation)
            start = time.perf_counter()
            result = await agent.respond(request)
            turn_s[turn].append(time.perf_counter() - start)
            checkpoint = in_window.get(turn)
            if checkpoint is not None:
                size = record_size(agent.config.history_dir, result.conversation_id)
                sizes[checkpoint].append(size)
                history_messages.setdefault(checkpoint, result.manifest.history_messages)
                data = os.urandom(size // 2 + 1).hex().encode()[:size]
                floor_s[checkpoint].append(durable_write(floor_dir, data))
    await agent.aclose()
    return {"turn_s": turn_s, "sizes": sizes, "floor_s": floor_s, "history_messages": history_messages, "last": last}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--window", type=int, default=None, help="turns measured at each checkpoint (default 15, quick 5)")
    p.add_argument("--rounds", type=int, default=None, help="conversations run one after the other, samples pooled (default 3, quick 1)")
    p.add_argument("--block", action="append", default=[], metavar="PLUGIN",
                   help="block a bundled plugin for the run, e.g. --block artifacts to see what run files cost")
    args = p.parse_args()
    window = args.window or (5 if args.quick else 15)
    rounds = args.rounds or (1 if args.quick else 3)
    with state_dir(args.tmp_root, args.keep) as tmp:
        fs = filesystem_of(tmp)
        started = time.perf_counter()
        out = asyncio.run(run(tmp, window, rounds, args.block))
        wall = time.perf_counter() - started

    rows: dict[int, dict[str, Any]] = {}
    for c in CHECKPOINTS:
        turns = [x for i in range(window) for x in out["turn_s"][c + i]]
        t = scaled(summary(turns), 1000)
        f = scaled(summary(out["floor_s"][c]), 1000)
        sizes = out["sizes"][c]
        rows[c] = {
            "turns": f"{c}..{c + window - 1}",
            "turn_ms": t,
            "floor_ms": f,
            "overhead_ms": t["median"] - f["median"],
            "ratio_to_floor": t["median"] / f["median"] if f["median"] else float("inf"),
            "record_bytes": int(sum(sizes) / len(sizes)),
            "history_messages_at_start": out["history_messages"][c],
            "within_target": t["median"] <= f["median"] + ALLOWANCE_MS,
        }
    o10, o100, o200 = (rows[c]["overhead_ms"] for c in CHECKPOINTS)
    flat_window = abs(o200 - o100) <= 0.2 * max(abs(o100), abs(o200)) + 0.2
    flat_growth = max(o100, o200) <= o10 + 1.0
    flat = flat_window and flat_growth
    within = all(r["within_target"] for r in rows.values())
    ok = within and flat
    at200 = rows[200]["turn_ms"]["median"]
    ref_ratio = at200 / REFERENCE_MS_AT_200
    worst = max(rows.values(), key=lambda r: r["overhead_ms"])
    detail = (
        f"worst overhead {worst['overhead_ms']:.2f} ms over the fsync floor at turns {worst['turns']} "
        f"(target <= {ALLOWANCE_MS:.0f} ms), {'flat' if flat else 'NOT flat'} across 10/100/200; "
        f"turn 200: {at200:.2f} ms = {ref_ratio:.2f}x the 11 ms reference"
    )
    all_turns = scaled(summary([x for t, xs in out["turn_s"].items() if t > 1 for x in xs]), 1000)
    first_turn_ms = out["turn_s"][1][0] * 1000

    if args.json:
        emit_json(
            {
                "benchmark": "turn",
                "quick": args.quick,
                "window": window,
                "rounds": rounds,
                "turns_run": out["last"],
                "wall_s": wall,
                "machine": machine(),
                "filesystem": fs,
                "checkpoints": {str(c): r for c, r in rows.items()},
                "all_turns_ms_excluding_turn_1": all_turns,
                "first_turn_ms": first_turn_ms,
                "flat": flat,
                "flat_detail": {"overheads_ms": [o10, o100, o200], "window_full_100_vs_200": flat_window, "growth_vs_10": flat_growth},
                "target": "median <= floor + 1 ms at each checkpoint, and flat",
                "reference": {"text": REFERENCE, "ms_at_200": REFERENCE_MS_AT_200, "ours_ms_at_200": at200, "ratio": ref_ratio},
                "pass": ok,
                "verdict": verdict_line("turn", ok, detail),
            }
        )
        return

    print(f"turn benchmark: {rounds} conversation(s) of {out['last']} turns on one Agent (offline:echo, files store, "
          f"durable commit), windows of {window} turns, {rounds * window} samples per checkpoint, {wall:.1f} s in all")
    print(f"state dir on {fs['device']} ({fs['fstype']}, mounted at {fs['mountpoint']}); "
          f"floor = write+fsync+rename+fsync(dir) of a record of the same size, interleaved")
    print()
    print(f"{'turns':<10} {'history':>7} {'record B':>9} {'median ms':>10} {'p90 ms':>8} {'floor ms':>9} "
          f"{'floor p90':>10} {'overhead':>9} {'x floor':>8}  target (<= floor + 1 ms)")
    for r in rows.values():
        t, f = r["turn_ms"], r["floor_ms"]
        print(f"{r['turns']:<10} {r['history_messages_at_start']:>7} {r['record_bytes']:>9} {t['median']:>10.2f} {t['p90']:>8.2f} "
              f"{f['median']:>9.2f} {f['p90']:>10.2f} {r['overhead_ms']:>9.2f} {r['ratio_to_floor']:>8.2f}  "
              f"{'ok' if r['within_target'] else 'MISSED'}")
    print()
    print(f"first turn of the process {first_turn_ms:.2f} ms; all turns after turn 1: median {all_turns['median']:.2f} ms, "
          f"p90 {all_turns['p90']:.2f} ms, max {all_turns['max']:.2f} ms")
    print(f"flat: {'yes' if flat else 'NO'} (overhead at 10/100/200: {o10:.2f} / {o100:.2f} / {o200:.2f} ms; "
          f"100 vs 200 {'within' if flat_window else 'outside'} 20% + 0.2 ms, growth over turn 10 "
          f"{'within' if flat_growth else 'above'} 1 ms)")
    print(f"reference: {REFERENCE}")
    print(f"  ours at turn 200: {at200:.2f} ms vs 11 ms -> ratio {ref_ratio:.2f} ({1 / ref_ratio:.1f}x faster)" if ref_ratio
          else "  ours at turn 200: n/a")
    print()
    print(verdict_line("turn", ok, detail))


if __name__ == "__main__":
    main()
