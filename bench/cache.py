"""Benchmark: the share of each request the provider's prompt cache can serve, over a long conversation.

One conversation of N turns (40 and 100; 40 only with --quick): ~200-character questions,
800-character answers, against local servers speaking the Anthropic and the OpenAI streaming
wire formats (``monoagent.testing``'s stand-ins, the servers the provider tests use) that record every
request body. Three modes, selected by configuration only (the script knows nothing of how the
harness implements them):

* ``per-message`` (``runtime.session.mode = "per-message"``, one process): every turn fresh,
  history in the system prompt. This is "today".
* ``warm`` (``continuous``, the default, one process, one Agent for all turns).
* ``durable`` (``continuous`` with the ``files`` session backend, ``runtime.session.transcriptsDir``
  set, one process per turn, all on one state directory).

From the recorded JSON bodies, per request i >= 2:

* Anthropic: the cache holds, for each block carrying ``cache_control`` in request i-1, the
  prefix through that block (tools, then system blocks, then each message's content blocks, in
  that order; ``cache_control`` itself is not part of the key). Request i is served the longest
  such prefix that is also a prefix of request i and ends at or before one of request i's own
  breakpoints. Served bytes / request bytes (blocks as compact JSON) is the share.
* OpenAI (automatic prefix caching): the common prefix of the request's serialized tools and
  messages with request i-1's. The 1,024-token minimum and 128-token granularity of both vendors
  are ignored: the figure is what the request shape allows.

Printed per wire and mode: the share at turns 10, 30 and N, the byte-weighted share over turns
2..N, and the input tokens billed (bytes / 4, cached tokens at 0.1 of the uncached price, as both
vendors price cache reads; Anthropic's cache-write surcharge is ignored) relative to
``per-message``. Target: >= 90% over turns 2..40 in the ``warm`` and ``durable`` modes on both
wires (the ideal for this shape is about 95%); ``per-message`` is shown for comparison.

    .venv/bin/python bench/cache.py [--quick] [--json] [--turns N ...] [--modes per-message,warm,durable]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _benchlib import emit_json, machine, parser, state_dir, verdict_line

from monoagent._kernel.turn_request import TurnRequest
from monoagent.testing import AnthropicWireServer, OpenAIWireServer, fresh_agent
from monoagent.testing.provider_contract import Reply, WireServer

QUESTION_CHARS = 200
ANSWER_CHARS = 800
CONVERSATION = "bench-cache"
TARGET = 0.90
CACHED_PRICE = 0.1
BYTES_PER_TOKEN = 4
MODES = ("per-message", "warm", "durable")
WIRES = {
    "anthropic": (AnthropicWireServer, "anthropic:claude-bench"),
    "openai": (OpenAIWireServer, "openai:gpt-bench"),
}
WORDS = (
    "please look at the deployment notes from yesterday and tell me whether the rollback plan still "
    "holds now that the database migration has been split into two steps and the cache warmer runs later"
).split()

CHILD = """
import json, sys
from monoagent.testing import AnthropicWireServer, OpenAIWireServer, fresh_agent
state, config, text = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
agent = fresh_agent(state, config=config)
try:
    agent.run_sync(text, conversation_id=sys.argv[4])
finally:
    agent.close()
"""


def sentence(rng: random.Random, label: str, size: int) -> str:
    words = [label]
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:size]


def answer_reply(rng: random.Random, turn: int) -> Reply:
    text = sentence(rng, f"(answer {turn})", ANSWER_CHARS)
    return Reply(text_pieces=tuple(text[i : i + 100] for i in range(0, len(text), 100)))


def config_for(wire: str, url: str, mode: str, sessions_root: Path) -> dict[str, Any]:
    provider = {"apiKey": "bench-key", "baseUrl": url if wire == "anthropic" else f"{url}/v1"}
    session = {"mode": "per-message" if mode == "per-message" else "continuous"}
    config: dict[str, Any] = {
        "runtime": {"model": WIRES[wire][1], "session": session},
        "providers": {wire: provider},
    }
    if mode == "durable":
        session.update(backend="files", transcriptsDir=str(sessions_root))
    return config


def run_conversation(tmp: Path, wire: str, mode: str, turns: int) -> list[bytes]:
    """The request bodies of one conversation of ``turns`` turns in ``mode`` on ``wire``."""
    state = tmp / f"{wire}-{mode}-{turns}"
    state.mkdir()
    server: WireServer = WIRES[wire][0]()
    rng = random.Random(turns)
    with server:
        server.enqueue(*(answer_reply(rng, turn) for turn in range(1, turns + 1)))
        config = config_for(wire, server.url, mode, state / "sessions")
        questions = [sentence(rng, f"(turn {turn})", QUESTION_CHARS) for turn in range(1, turns + 1)]
        if mode == "durable":
            env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
            for text in questions:
                subprocess.run([sys.executable, "-c", CHILD, str(state), json.dumps(config), text, CONVERSATION],
                               check=True, env=env, cwd=state, timeout=120)
        else:
            agent = fresh_agent(state, config=config)

            async def talk() -> None:
                for text in questions:
                    await agent.respond(TurnRequest(text, conversation_id=CONVERSATION))

            try:
                asyncio.run(talk())
            finally:
                agent.close()
        return [request.body for request in server.requests]


# --------------------------------------------------------------------------- what the cache can serve


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def anthropic_blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The request as cache-ordered blocks: (compact JSON without cache_control, carries a breakpoint)."""
    blocks: list[tuple[str, bool]] = []

    def add(prefix: str, block: Any) -> None:
        if isinstance(block, dict):
            marked = "cache_control" in block
            block = {k: v for k, v in block.items() if k != "cache_control"}
        else:
            marked = False
        blocks.append((prefix + _compact(block), marked))

    for tool in body.get("tools") or ():
        add("tool:", tool)
    system = body.get("system") or ()
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        add("system:", block)
    for message in body.get("messages") or ():
        content = message.get("content")
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content or ():
            add(f"{message.get('role')}:", block)
    return blocks


def anthropic_served(previous: dict[str, Any], current: dict[str, Any]) -> tuple[int, int]:
    """(bytes served from the cache, request bytes) of ``current`` after ``previous``."""
    before, now = anthropic_blocks(previous), anthropic_blocks(current)
    total = sum(len(text.encode()) for text, _ in now)
    written = {i for i, (_, marked) in enumerate(before) if marked}
    last_breakpoint = max((i for i, (_, marked) in enumerate(now) if marked), default=-1)
    served = used = 0
    for i, ((text, _), (old, _)) in enumerate(zip(now, before, strict=False)):
        if text != old or i > last_breakpoint:
            break
        used += len(text.encode())
        if i in written:
            served = used
    return served, total


def openai_text(body: dict[str, Any]) -> bytes:
    return (_compact(body.get("tools") or []) + _compact(body.get("messages") or [])).encode()


def openai_served(previous: dict[str, Any], current: dict[str, Any]) -> tuple[int, int]:
    before, now = openai_text(previous), openai_text(current)
    common = 0
    for a, b in zip(before, now, strict=False):
        if a != b:
            break
        common += 1
    return common, len(now)


def measure(wire: str, bodies: Sequence[bytes]) -> dict[str, Any]:
    parsed = [json.loads(body) for body in bodies]
    served_of = anthropic_served if wire == "anthropic" else openai_served
    per_turn = [served_of(a, b) for a, b in itertools.pairwise(parsed)]  # turns 2..N
    served = sum(s for s, _ in per_turn)
    total = sum(t for _, t in per_turn) or 1
    first = len(openai_text(parsed[0])) if wire == "openai" else sum(len(t.encode()) for t, _ in anthropic_blocks(parsed[0]))
    billed = (first + sum((t - s) + CACHED_PRICE * s for s, t in per_turn)) / BYTES_PER_TOKEN

    def at(turn: int) -> float | None:
        return per_turn[turn - 2][0] / per_turn[turn - 2][1] if 2 <= turn <= len(per_turn) + 1 else None

    return {
        "requests": len(parsed),
        "share": served / total,
        "share_at": {str(t): at(t) for t in (10, 30, 35, len(parsed))},
        "request_bytes_last": per_turn[-1][1] if per_turn else first,
        "billed_input_tokens": billed,
    }


# --------------------------------------------------------------------------- report


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, nargs="+", default=None, help="conversation lengths (default 40 100; quick 40)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated modes to run (default all)")
    args = p.parse_args()
    lengths = args.turns or ([40] if args.quick else [40, 100])
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with state_dir(args.tmp_root, args.keep) as tmp:
        for turns in lengths:
            for wire in WIRES:
                for mode in modes:
                    t0 = time.perf_counter()
                    figures = measure(wire, run_conversation(tmp, wire, mode, turns))
                    rows.append({"wire": wire, "mode": mode, "turns": turns, "wall_s": time.perf_counter() - t0, **figures})
    wall = time.perf_counter() - started
    baseline = {(r["wire"], r["turns"]): r["billed_input_tokens"] for r in rows if r["mode"] == "per-message"}
    for row in rows:
        today = baseline.get((row["wire"], row["turns"]))
        row["billed_vs_per_message"] = row["billed_input_tokens"] / today if today else None
        row["meets_target"] = row["share"] >= TARGET
    judged = [r for r in rows if r["mode"] != "per-message" and r["turns"] == lengths[0]]
    ok = bool(judged) and all(r["meets_target"] for r in judged)
    worst = min(judged, key=lambda r: r["share"]) if judged else None
    detail = (
        f"worst cacheable share over turns 2..{lengths[0]}: {worst['share']:.0%} ({worst['wire']}, {worst['mode']}); "
        f"target >= {TARGET:.0%} in every continuous mode and wire" if worst else "no continuous mode was run"
    )
    if args.json:
        emit_json({"benchmark": "cache", "quick": args.quick, "wall_s": wall, "machine": machine(), "rows": rows,
                   "target": f"share >= {TARGET:.0%} over turns 2..{lengths[0]} (warm, durable)", "pass": ok,
                   "verdict": verdict_line("cache", ok, detail)})
        return
    print(f"cache benchmark: one conversation of {'/'.join(map(str, lengths))} turns ({QUESTION_CHARS}-char questions, "
          f"{ANSWER_CHARS}-char answers) per wire and mode, local wire-format servers, {wall:.1f} s in all")
    print("share = bytes of the request the prompt cache can serve from the previous request; billed = input tokens "
          f"(bytes/{BYTES_PER_TOKEN}) with cached ones at {CACHED_PRICE:g}x, relative to per-message")
    print()
    print(f"{'wire':<10} {'mode':<12} {'turns':>5} {'@10':>6} {'@30':>6} {'@35':>6} {'@last':>6} {'2..N':>6} "
          f"{'last req B':>10} {'billed tok':>11} {'vs today':>9}  target (>= {TARGET:.0%})")

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    for r in rows:
        at = r["share_at"]
        versus = "-" if r["billed_vs_per_message"] is None else f"{r['billed_vs_per_message']:.2f}x"
        goal = "today" if r["mode"] == "per-message" else ("PASS" if r["meets_target"] else "FAIL")
        print(f"{r['wire']:<10} {r['mode']:<12} {r['turns']:>5} {pct(at['10']):>6} {pct(at['30']):>6} {pct(at['35']):>6} "
              f"{pct(at[str(r['turns'])]):>6} {r['share']:>6.0%} {r['request_bytes_last']:>10} "
              f"{r['billed_input_tokens']:>11.0f} {versus:>9}  {goal}")
    print()
    print(verdict_line("cache", ok, detail))


if __name__ == "__main__":
    main()
