"""Benchmark: CLI start-up time (``monoagent --help``, ``monoagent plugins``) against bare Python.

Each command runs once as a warm-up, then N times (20; 5 with --quick); the wall time of each
child process is taken with time.perf_counter around subprocess.run. ``python -c pass`` with
the same interpreter is measured the same way in the same run as the reference.

Target: median <= 1.5 x median(python -c pass) + 150 ms, for each command.

The children get os.environ minus every MONO_AGENT_* variable, MONO_AGENT_HOME pointing at a
temporary directory, and that directory as their working directory (so no ./monoagent.toml is
picked up). Bytecode caching is on for the measured runs: PYTHONDONTWRITEBYTECODE is removed and
PYTHONPYCACHEPREFIX points into the temporary directory (the warm-up fills it; nothing is written
into the source tree), which is what an installed package sees. When PYTHONDONTWRITEBYTECODE is
set in the calling environment the same set is also measured as inherited, for information.
``python -X importtime`` of ``monoagent --help`` is parsed for the slowest imports.

    .venv/bin/python bench/startup.py [--quick] [--json] [-n N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _benchlib import clean_env, emit_json, filesystem_of, machine, parser, scaled, state_dir, summary, verdict_line

FACTOR = 1.5
ALLOWANCE_S = 0.150


def cli_command() -> tuple[list[str], str]:
    """The console script next to sys.executable, else ``python -m monoagent``."""
    script = Path(sys.executable).parent / "monoagent"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)], str(script)
    return [sys.executable, "-m", "monoagent"], f"{sys.executable} -m monoagent._cli"


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    return elapsed


def measure(argv: list[str], n: int, env: dict[str, str], cwd: Path) -> dict[str, float]:
    run_once(argv, env, cwd)  # warm-up (page cache, .pyc files)
    return summary([run_once(argv, env, cwd) for _ in range(n)])


def import_times(env: dict[str, str], cwd: Path, top: int = 10) -> dict[str, list[dict[str, Any]]]:
    """Parse ``python -X importtime -m monoagent._cli --help``: the slowest imports (microseconds)."""
    argv = [sys.executable, "-X", "importtime", "-m", "monoagent", "--help"]
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm-up
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows: list[dict[str, Any]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        fields = line[len("import time:"):].split("|")
        if len(fields) != 3:
            continue
        try:
            self_us, cumulative_us = int(fields[0]), int(fields[1])
        except ValueError:  # the header line
            continue
        name = fields[2]
        depth = (len(name) - len(name.lstrip(" "))) // 2
        rows.append({"module": name.strip(), "self_us": self_us, "cumulative_us": cumulative_us, "depth": depth})
    by_cumulative = sorted(rows, key=lambda r: -r["cumulative_us"])[:top]
    by_self = sorted(rows, key=lambda r: -r["self_us"])[:top]
    total_us = sum(r["cumulative_us"] for r in rows if r["depth"] == 0)
    return {"top_cumulative": by_cumulative, "top_self": by_self, "total_top_level_us": total_us, "modules": len(rows)}  # type: ignore[dict-item]


def cached_env(env: dict[str, str], tmp: Path) -> dict[str, str]:
    """``env`` with bytecode caching on, into a private PYTHONPYCACHEPREFIX (nothing lands in the tree)."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return out


def measure_set(cli: list[str], n: int, env: dict[str, str], cwd: Path) -> dict[str, dict[str, float]]:
    return {
        "python -c pass": measure([sys.executable, "-c", "pass"], n, env, cwd),
        "--help": measure(cli + ["--help"], n, env, cwd),
        "plugins": measure(cli + ["plugins"], n, env, cwd),
    }


def judge(results: dict[str, dict[str, float]]) -> tuple[dict[str, Any], float, bool]:
    python = results["python -c pass"]
    budget = FACTOR * python["median"] + ALLOWANCE_S
    commands: dict[str, Any] = {}
    for name, stats in results.items():
        if name == "python -c pass":
            continue
        commands[name] = {
            "ms": scaled(stats, 1000),
            "ratio_to_python": stats["median"] / python["median"],
            "budget_ms": budget * 1000,
            "pass": stats["median"] <= budget,
        }
    return commands, budget, all(c["pass"] for c in commands.values())


def print_table(title: str, python: dict[str, float], commands: dict[str, Any]) -> None:
    print(title)
    print(f"  {'command':<24} {'median ms':>10} {'p90 ms':>9} {'min ms':>8} {'x python':>9} {'budget ms':>10}  result")
    print(f"  {'python -c pass':<24} {python['median'] * 1000:>10.1f} {python['p90'] * 1000:>9.1f} {python['min'] * 1000:>8.1f} {1.0:>9.2f}")
    for name, c in commands.items():
        ms = c["ms"]
        print(
            f"  {'monoagent ' + name:<24} {ms['median']:>10.1f} {ms['p90']:>9.1f} {ms['min']:>8.1f} "
            f"{c['ratio_to_python']:>9.2f} {c['budget_ms']:>10.1f}  {'PASS' if c['pass'] else 'FAIL'}"
        )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("-n", "--repeat", type=int, default=None, help="runs per command (default 20, quick 5)")
    args = p.parse_args()
    n = args.repeat or (5 if args.quick else 20)
    cli, cli_label = cli_command()

    with state_dir(args.tmp_root, args.keep) as tmp:
        home = tmp / "home"
        home.mkdir()
        base_env = clean_env(home)
        fs = filesystem_of(tmp)
        env = cached_env(base_env, tmp)
        results = measure_set(cli, n, env, tmp)
        inherited = None
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            inherited = measure_set(cli, n, base_env, tmp)
        imports = import_times(env, tmp)

    commands, budget, ok = judge(results)
    python = results["python -c pass"]
    worst = max(commands.items(), key=lambda kv: kv[1]["ms"]["median"])
    detail = (
        f"slowest `monoagent {worst[0]}` median {worst[1]['ms']['median']:.1f} ms vs budget "
        f"{budget * 1000:.1f} ms (1.5 x python {python['median'] * 1000:.1f} ms + 150 ms), "
        f"{worst[1]['ratio_to_python']:.1f}x python"
    )
    inherited_judged = judge(inherited) if inherited else None

    if args.json:
        emit_json(
            {
                "benchmark": "startup",
                "quick": args.quick,
                "repeat": n,
                "command": cli_label,
                "machine": machine(),
                "filesystem": fs,
                "bytecode": "cached (PYTHONPYCACHEPREFIX in the temp dir, PYTHONDONTWRITEBYTECODE removed)",
                "python_ms": scaled(python, 1000),
                "commands": commands,
                "inherited_env": None if inherited_judged is None else {
                    "note": "PYTHONDONTWRITEBYTECODE inherited: modules without a __pycache__ are compiled on every start",
                    "python_ms": scaled(inherited["python -c pass"], 1000),  # type: ignore[index]
                    "commands": inherited_judged[0],
                    "pass": inherited_judged[2],
                },
                "target": "median <= 1.5 * python_median + 150 ms",
                "importtime": imports,
                "pass": ok,
                "verdict": verdict_line("startup", ok, detail),
            }
        )
        return

    print(f"startup benchmark: {n} runs each after one warm-up; command: {cli_label}")
    print(f"python {machine()['python']}, state dir on {fs['device']} ({fs['fstype']}, mounted at {fs['mountpoint']})")
    print()
    print_table("bytecode cached (private PYTHONPYCACHEPREFIX; what an installed package sees) - the verdict:", python, commands)
    if inherited_judged is not None:
        print()
        print_table(
            "as inherited (PYTHONDONTWRITEBYTECODE=1 is set here: sources without __pycache__ compile on every start), "
            "for information:",
            inherited["python -c pass"],  # type: ignore[index]
            inherited_judged[0],
        )
    print()
    print(f"python -X importtime -m monoagent._cli --help (bytecode cached): {imports['modules']} modules, "
          f"{imports['total_top_level_us'] / 1000:.1f} ms import time in all (importtime inflates it)")
    print("  (modules loaded through importlib.import_module, such as the bundled plugins loaded from entry")
    print("  points, are not reported by -X importtime; what they import is, at depth 0)")
    print("  top 10 by cumulative time:")
    for row in imports["top_cumulative"]:
        print(f"    {row['cumulative_us'] / 1000:8.1f} ms  (self {row['self_us'] / 1000:6.1f})  {'  ' * row['depth']}{row['module']}")
    print("  top 10 by self time:")
    for row in imports["top_self"]:
        print(f"    {row['self_us'] / 1000:8.1f} ms  {row['module']}")
    print()
    print(verdict_line("startup", ok, detail))


if __name__ == "__main__":
    main()
