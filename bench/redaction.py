"""Benchmark: the bundled redactor's recall, precision and cost, next to detect-secrets.

Corpora: ``tests/data/redaction_recall.json`` (FAKE secrets of 40+ kinds, each in the syntax it is
written in) and ``tests/data/redaction_precision.json`` (prose, code, logs, hashes, ids, JSON with
escapes that must come back unchanged); the scoring is :mod:`monoagent.testing.redaction_measure`
(a secret is caught when no 8-character run of it survives; an ordinary entry that changes at all
is a false positive).

Redactors measured on the same corpora in the same run:

* ``monoagent``: the bundled ``redaction`` plugin (``redact_text``);
* ``detect-secrets``: Yelp's detect-secrets, every default plugin and filter (``scan_line`` on
  each line, each reported secret value replaced), when it is installed;
* ``detect-secrets (formats)``: the same without its entropy and keyword plugins (the token
  formats only, the part a redactor could borrow);
* ``monoagent + detect-secrets (formats)``: both, to see what the library would add.

Costs: the wall time of ``import`` plus the first call (the patterns compile on first use) in a
fresh interpreter that has already loaded the monoagent kernel, median of N runs (20; 5 with --quick), and the median microseconds per call
over the corpus entries and on one 16 KiB text (the tool-result limit) made of them.

    .venv/bin/python bench/redaction.py [--quick] [--json]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _benchlib import REPO, emit_json, machine, parser, summary, verdict_line

from monoagent.testing.redaction_measure import measure_redactor
from monoagent_plugins.observability.redaction import redact_text

DATA = REPO / "tests" / "data"
TOOL_RESULT_BYTES = 16 * 1024

# (already loaded before the clock starts, timed): the kernel is loaded by every CLI command anyway.
IMPORTS = {
    "monoagent": (
        "import monoagent._kernel.host",
        "import monoagent_plugins.observability.redaction as r; r.redact_text('password=x /home/a/b sk-ant-api03-FAKEFAKEFAKEFAKEFAKE')",
    ),
    "detect-secrets": (
        "pass",
        "from detect_secrets.core.scan import scan_line; from detect_secrets.settings import default_settings\n"
        "with default_settings(): list(scan_line('password=x'))",
    ),
}


def detect_secrets_redactor(formats_only: bool) -> Callable[[str], str] | None:
    try:
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings, get_settings
    except ImportError:
        return None
    skipped = {"Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector"} if formats_only else set()

    def redact(text: str) -> str:
        with default_settings():
            for name in skipped:
                get_settings().disable_plugins(name)
            lines = []
            for line in text.split("\n"):
                for secret in list(scan_line(line)):
                    if secret.secret_value:
                        line = line.replace(secret.secret_value, "[REDACTED:detect-secrets]")
                lines.append(line)
        return "\n".join(lines)

    return redact


def per_call_us(redact: Callable[[str], str], texts: list[str], repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            redact(text)
        samples.append((time.perf_counter() - start) / len(texts) * 1e6)
    return summary(samples)


def import_ms(setup: str, code: str, n: int) -> dict[str, float] | None:
    argv = [sys.executable, "-c", f"import time\n{setup}\nt = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"]
    samples = []
    for _ in range(n + 1):
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            return None
        samples.append(float(proc.stdout.strip()) * 1000)
    return summary(samples[1:])  # the first run warms the page cache


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    n = 5 if args.quick else 20
    recall = json.loads((DATA / "redaction_recall.json").read_text(encoding="utf-8"))["entries"]
    precision = json.loads((DATA / "redaction_precision.json").read_text(encoding="utf-8"))["entries"]
    texts = [row["text"] for row in recall + precision]
    big = ""
    while len(big.encode()) < TOOL_RESULT_BYTES:
        big += "\n".join(texts)
    big = big.encode()[:TOOL_RESULT_BYTES].decode("utf-8", "ignore")

    redactors: dict[str, Callable[[str], str]] = {"monoagent": redact_text}
    full, formats = detect_secrets_redactor(False), detect_secrets_redactor(True)
    if full is not None and formats is not None:
        redactors["detect-secrets"] = full
        redactors["detect-secrets (formats)"] = formats
        redactors["monoagent + detect-secrets (formats)"] = lambda text: redact_text(formats(text))

    results: dict[str, Any] = {}
    for name, redact in redactors.items():
        measure = measure_redactor(redact, recall, precision)
        results[name] = {
            "caught": measure.caught,
            "secrets": measure.secrets,
            "recall": measure.recall,
            "false_positives": measure.false_positives,
            "ordinary": measure.ordinary,
            "false_positive_rate": measure.false_positive_rate,
            "precision": measure.precision,
            "missed_kinds": sorted({row["kind"] for row in measure.missed}),
            "us_per_entry": per_call_us(redact, texts, max(n // 4, 2)),
            "us_per_16k": per_call_us(redact, [big], n),
        }
    for name, (setup, code) in IMPORTS.items():
        if name in results:
            results[name]["import_and_first_call_ms"] = import_ms(setup, code, n)

    ours = results["monoagent"]
    theirs = results.get("detect-secrets")
    ok = theirs is None or (ours["recall"] >= theirs["recall"] and ours["false_positive_rate"] <= theirs["false_positive_rate"])
    detail = f"monoagent recall {ours['caught']}/{ours['secrets']}, {ours['false_positives']}/{ours['ordinary']} ordinary texts changed"
    if theirs is not None:
        detail += f"; detect-secrets {theirs['caught']}/{theirs['secrets']}, {theirs['false_positives']}/{theirs['ordinary']}"

    if args.json:
        emit_json({"benchmark": "redaction", "quick": args.quick, "machine": machine(), "results": results, "pass": ok,
                   "verdict": verdict_line("redaction", ok, detail)})
        return
    print(f"redaction benchmark: {len(recall)} secrets of {len({r['kind'] for r in recall})} kinds, {len(precision)} ordinary texts")
    print(f"python {machine()['python']}; cost medians over {n} runs")
    print()
    print(f"  {'redactor':<38} {'recall':>12} {'changed':>9} {'precision':>9} {'us/entry':>9} {'us/16KiB':>9} {'import ms':>9}")
    for name, r in results.items():
        imported = r.get("import_and_first_call_ms")
        print(
            f"  {name:<38} {r['caught']:>4}/{r['secrets']:<3} {r['recall']:>4.0%} {r['false_positives']:>3}/{r['ordinary']:<5}"
            f"{r['precision']:>9.1%} {r['us_per_entry']['median']:>9.1f} {r['us_per_16k']['median']:>9.0f}"
            f" {'' if imported is None else format(imported['median'], '.1f'):>9}"
        )
    for name, r in results.items():
        if r["missed_kinds"]:
            print(f"  {name} missed: {', '.join(r['missed_kinds'])}")
    print()
    print(verdict_line("redaction", ok, detail))


if __name__ == "__main__":
    main()
