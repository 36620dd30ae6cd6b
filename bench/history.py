"""Benchmark: the ``files`` history store's per-turn cost next to the fsync floor, and many writers.

Per turn (one process): ``await store.commit(cid, [user, assistant])`` with a ~200-character user
message and a ~800-character reply, then ``await store.load(cid)`` (the history the next turn
reads), timed together with time.perf_counter, turn after turn in one conversation. At turns 10,
100 and 200 the median of a window of W turns (15; 5 with --quick) is reported, pooled over R
conversations (3; 1 with --quick).

The floor, measured in the same run on the same disk and interleaved with the window's turns:
write a file of the record's size at that turn, fsync it, rename it over the target, fsync the
directory (what a durable commit cannot avoid), W repetitions, median.

Target: at each checkpoint, median <= 1.5 x the floor.

Many writers: 8 processes on 8 conversations, and 4 processes on one conversation, each committing
N turns (40; 10 with --quick) after a common start signal: turns per second (all turns / wall time
from the signal to the last exit) and lost messages (expected minus stored; must be 0).

    .venv/bin/python bench/history.py [--quick] [--json] [--window W] [--rounds R] [--turns N]
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _benchlib import durable_write, emit_json, filesystem_of, machine, parser, scaled, state_dir, summary, verdict_line

from monoagent._kernel.model import Message
from monoagent_plugins.history.files import FilesHistoryStore
from monoagent_plugins.history.records import record_name

CHECKPOINTS = (10, 100, 200)
USER_CHARS = 200
REPLY_CHARS = 800
TARGET_RATIO = 1.5
WORDS = (
    "please summarise the latest build log and tell me which tests failed and why then suggest a "
    "fix for the flaky network test and check whether the cache directory is still growing after "
    "yesterday's change to the cleanup job on the staging machine"
).split()


def text(rng: random.Random, chars: int, label: str) -> str:
    words = [label]
    size = len(label)
    while size < chars:
        words.append(rng.choice(WORDS))
        size += len(words[-1]) + 1
    return " ".join(words)[:chars]


def turn_messages(rng: random.Random, n: int) -> list[Message]:
    return [Message("user", text(rng, USER_CHARS, f"(turn {n})")), Message("assistant", text(rng, REPLY_CHARS, f"(reply {n})"))]


async def per_turn(tmp: Path, window: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(20240601)
    store = FilesHistoryStore(tmp / "history")
    floor_dir = tmp / "floor"
    floor_dir.mkdir()
    last = max(CHECKPOINTS) + window - 1
    in_window = {c + i: c for c in CHECKPOINTS for i in range(window)}
    turn_s: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
    floor_s: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
    sizes: dict[int, list[int]] = {c: [] for c in CHECKPOINTS}
    loaded: dict[int, int] = {}
    for r in range(rounds):
        conversation = f"bench-{r}"
        for n in range(1, last + 1):
            messages = turn_messages(rng, n)
            start = time.perf_counter()
            receipt = await store.commit(conversation, messages)
            history = await store.load(conversation)
            elapsed = time.perf_counter() - start
            checkpoint = in_window.get(n)
            if checkpoint is not None:
                turn_s[checkpoint].append(elapsed)
                sizes[checkpoint].append(receipt.bytes_written)
                loaded.setdefault(checkpoint, len(history))
                data = os.urandom(receipt.bytes_written // 2 + 1).hex().encode()[: receipt.bytes_written]
                floor_s[checkpoint].append(durable_write(floor_dir, data))
    await store.close()
    return {"turn_s": turn_s, "floor_s": floor_s, "sizes": sizes, "loaded": loaded, "last": last}


WORKER = "--worker"


def worker(root: str, conversation: str, turns: int, tag: str) -> None:
    """A writer process: wait for 'go' on stdin, commit ``turns`` turns, exit."""
    rng = random.Random(tag)
    store = FilesHistoryStore(root, max_messages=1_000_000)
    messages = [turn_messages(rng, n) for n in range(turns)]
    for pair in messages:
        pair[0] = Message("user", f"{tag}:{pair[0].content}")
    print("ready", flush=True)
    sys.stdin.readline()
    for pair in messages:
        store._commit(conversation, pair)


def many_writers(tmp: Path, processes: int, conversations: int, turns: int) -> dict[str, Any]:
    root = tmp / f"writers-{processes}-{conversations}"
    names = [f"conv-{i % conversations}" for i in range(processes)]
    children = [
        subprocess.Popen([sys.executable, __file__, WORKER, str(root), names[i], str(turns), f"w{i}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for i in range(processes)
    ]
    for child in children:
        assert child.stdout and child.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    for child in children:
        assert child.stdin
        child.stdin.write("go\n")
        child.stdin.flush()
    codes = [child.wait() for child in children]
    wall = time.perf_counter() - start
    store = FilesHistoryStore(root, max_messages=1_000_000)
    stored = sum(len(asyncio.run(store.load(name))) for name in set(names))
    expected = processes * turns * 2
    return {
        "processes": processes,
        "conversations": conversations,
        "turns_per_process": turns,
        "wall_s": wall,
        "turns_per_s": processes * turns / wall,
        "expected_messages": expected,
        "stored_messages": stored,
        "lost_messages": expected - stored,
        "worker_failures": sum(1 for c in codes if c != 0),
    }


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--window", type=int, default=None, help="turns measured at each checkpoint (default 15, quick 5)")
    p.add_argument("--rounds", type=int, default=None, help="conversations run one after the other (default 3, quick 1)")
    p.add_argument("--turns", type=int, default=None, help="turns per writer process (default 40, quick 10)")
    args = p.parse_args()
    window = args.window or (5 if args.quick else 15)
    rounds = args.rounds or (1 if args.quick else 3)
    turns = args.turns or (10 if args.quick else 40)
    with state_dir(args.tmp_root, args.keep) as tmp:
        fs = filesystem_of(tmp)
        started = time.perf_counter()
        out = asyncio.run(per_turn(tmp, window, rounds))
        writers = [many_writers(tmp, 8, 8, turns), many_writers(tmp, 4, 1, turns)]
        wall = time.perf_counter() - started

    rows: dict[int, dict[str, Any]] = {}
    for c in CHECKPOINTS:
        t = scaled(summary(out["turn_s"][c]), 1000)
        f = scaled(summary(out["floor_s"][c]), 1000)
        ratio = t["median"] / f["median"] if f["median"] else float("inf")
        rows[c] = {
            "turns": f"{c}..{c + window - 1}",
            "turn_ms": t,
            "floor_ms": f,
            "ratio_to_floor": ratio,
            "record_bytes": int(sum(out["sizes"][c]) / len(out["sizes"][c])),
            "history_messages": out["loaded"][c],
            "within_target": ratio <= TARGET_RATIO,
        }
    lost = sum(w["lost_messages"] for w in writers) + sum(w["worker_failures"] for w in writers)
    ok = all(r["within_target"] for r in rows.values()) and lost == 0
    worst = max(rows.values(), key=lambda r: r["ratio_to_floor"])
    detail = (
        f"worst {worst['ratio_to_floor']:.2f}x the fsync floor at turns {worst['turns']} (target <= {TARGET_RATIO}x); "
        f"8 procs/8 convs {writers[0]['turns_per_s']:.0f} turns/s, 4 procs/1 conv {writers[1]['turns_per_s']:.0f} turns/s, "
        f"{lost} lost"
    )
    if args.json:
        emit_json({
            "benchmark": "history",
            "quick": args.quick,
            "window": window,
            "rounds": rounds,
            "wall_s": wall,
            "machine": machine(),
            "filesystem": fs,
            "record_name_example": record_name("bench-0"),
            "checkpoints": {str(c): r for c, r in rows.items()},
            "writers": writers,
            "target": f"median <= {TARGET_RATIO} x floor at each checkpoint; 0 lost messages",
            "pass": ok,
            "verdict": verdict_line("history", ok, detail),
        })
        return
    print(f"history benchmark: files store, commit(~{USER_CHARS}+~{REPLY_CHARS} chars) + load per turn, {rounds} conversation(s) "
          f"of {out['last']} turns, windows of {window}, {wall:.1f} s in all")
    print(f"state dir on {fs['device']} ({fs['fstype']}, mounted at {fs['mountpoint']}); "
          f"floor = write+fsync+rename+fsync(dir) of a record of the same size, interleaved")
    print()
    print(f"{'turns':<10} {'history':>7} {'record B':>9} {'median ms':>10} {'p90 ms':>8} {'floor ms':>9} {'floor p90':>10} "
          f"{'x floor':>8}  target (<= {TARGET_RATIO}x)")
    for r in rows.values():
        t, f = r["turn_ms"], r["floor_ms"]
        print(f"{r['turns']:<10} {r['history_messages']:>7} {r['record_bytes']:>9} {t['median']:>10.3f} {t['p90']:>8.3f} "
              f"{f['median']:>9.3f} {f['p90']:>10.3f} {r['ratio_to_floor']:>8.2f}  {'ok' if r['within_target'] else 'MISSED'}")
    print()
    for w in writers:
        print(f"{w['processes']} processes on {w['conversations']} conversation(s), {w['turns_per_process']} turns each: "
              f"{w['turns_per_s']:.0f} turns/s ({w['wall_s']:.2f} s), lost messages {w['lost_messages']}"
              f"{', worker failures ' + str(w['worker_failures']) if w['worker_failures'] else ''}")
    print()
    print(verdict_line("history", ok, detail))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER:
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
