"""Mutation score of the conformance suites: how many planted bugs the contracts alone catch.

For each target (a bundled component and the contract test classes that exercise it), mutmut
plants one small bug at a time in the component's modules (a flipped comparison, an off-by-one
constant, a dropped argument, a swapped boolean...) and runs only the contract tests against
it. A mutant is *killed* when a contract test fails (or hangs past mutmut's timeout); it
*survives* when every contract test still passes, and has *no tests* when no contract test even
reaches the mutated function. The score is killed / (killed + survived + no tests): a mutant
that no contract reaches counts against the contracts, as it should.

Target: at least 85 % killed for each target and over all targets (issue 14). The project's own
tests are never run here: the figure is what a third party's component would be held to.

Each target runs in a staging copy (``<workdir>/<target>``): ``core/monoagent`` and
``plugins/monoagent_plugins`` copied under ``src/`` (mutmut imports the mutated modules from
``mutants/src``, ahead of the editable install), ``tests/`` copied whole, and a generated
``pyproject.toml`` holding the target's ``[tool.mutmut]`` table. The working tree is never
modified. Needs the ``mutation`` extra (``pip install -e '.[mutation]'``); not run by CI.

    .venv/bin/python bench/mutation.py [TARGET ...] [--jobs N] [--workdir DIR] [--survivors] [--json]

``--survivors`` prints the diff of every surviving mutant (``mutmut show``), which is what to read
when strengthening a contract: each survivor is either a bug the contracts miss (add the test to
the contract) or an equivalent mutant (record why in docs/testing.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PLUGINS = "src/monoagent_plugins"
TARGET_SCORE = 0.85

# mutmut's exit codes per mutant (mutmut.stats.status_by_exit_code), grouped for the score.
KILLED_CODES = {1: "killed", 3: "killed", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
                37: "caught by type check", -11: "segfault", -9: "segfault"}
SURVIVED_CODES = {0: "survived", 5: "no tests", 33: "no tests"}


@attrs.frozen
class Target:
    """One component: the modules mutated and the contract tests that must catch the mutants."""

    name: str
    description: str
    modules: tuple[str, ...]  # paths under the staging tree's src/
    tests: tuple[str, ...]  # pytest node ids (files or classes) of contract suites only


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            "files",
            "the bundled files history store",
            (f"{PLUGINS}/files_history.py", f"{PLUGINS}/lib/history_records.py", f"{PLUGINS}/lib/history_directory.py"),
            ("tests/test_history_contract.py", "tests/test_history_durability_contract.py::TestFilesStoreDurabilityContract"),
        ),
        Target(
            "tool-history",
            "the bundled SQLite tool-history store",
            (f"{PLUGINS}/lib/tool_history/store.py",),
            ("tests/test_tool_history.py::TestSqliteToolHistoryContract",),
        ),
        Target(
            "memory-lite",
            "the bundled lite memory tier",
            (f"{PLUGINS}/memory_lite.py", f"{PLUGINS}/lib/memory_database.py", f"{PLUGINS}/lib/memory_index.py"),
            ("tests/test_memory_contract.py::TestLiteContract",),
        ),
        Target(
            "offline",
            "the offline providers (offline:echo, offline:scripted)",
            (f"{PLUGINS}/offline.py",),
            (
                "tests/test_provider_runtime_contract.py::TestOfflineScriptedRuntimeContract",
                "tests/test_provider_runtime_contract.py::TestOfflineEchoRuntimeContract",
            ),
        ),
        Target(
            "openai-compatible",
            "the OpenAI-compatible provider and its wire",
            (f"{PLUGINS}/openai_compatible.py", f"{PLUGINS}/lib/openai_wire.py"),
            ("tests/test_provider_contract.py::TestOpenAICompatibleContract",),
        ),
    )
}


@attrs.frozen
class Outcome:
    target: Target
    counts: dict[str, int]
    survivors: list[str]
    seconds: float

    @property
    def killed(self) -> int:
        return sum(n for status, n in self.counts.items() if status in KILLED_CODES.values())

    @property
    def scored(self) -> int:
        return self.killed + sum(n for status, n in self.counts.items() if status in SURVIVED_CODES.values())

    @property
    def score(self) -> float:
        return self.killed / self.scored if self.scored else 0.0


def stage(target: Target, workdir: Path) -> Path:
    """A fresh staging tree for ``target`` (the working tree itself is never mutated)."""
    root = workdir / target.name
    if root.exists():
        shutil.rmtree(root)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "core" / "monoagent", root / "src" / "monoagent", ignore=ignore)
    shutil.copytree(REPO / "plugins" / "monoagent_plugins", root / "src" / "monoagent_plugins", ignore=ignore)
    shutil.copytree(REPO / "tests", root / "tests", ignore=ignore)
    for module in target.modules:
        if not (root / module).is_file():
            raise SystemExit(f"mutation target {target.name!r}: no module {module} (paths are under src/)")
    (root / "pyproject.toml").write_text(
        "\n".join(
            [
                "[tool.mutmut]",
                'source_paths = ["src"]',
                f"only_mutate = {json.dumps(list(target.modules))}",
                f"pytest_add_cli_args_test_selection = {json.dumps(list(target.tests))}",
                'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:randomly", "-q"]',
                "",
                "[tool.pytest.ini_options]",
                'addopts = "-ra --strict-markers"',
                'markers = ["slow: long-running soak tests (run in CI)"]',
                'filterwarnings = ["error::pytest.PytestUnraisableExceptionWarning"]',
                "",
            ]
        ),
        encoding="utf-8",
    )
    return root


def run_target(target: Target, workdir: Path, jobs: int, *, verbose: bool) -> Outcome:
    root = stage(target, workdir)
    env = dict(os.environ)
    env["PYTEST_DEBUG_TEMPROOT"] = str(root / "tmp")  # numbered tmp dirs apart from any other pytest run
    (root / "tmp").mkdir()
    # No PYTHONPATH here: mutmut puts mutants/src first on sys.path itself, and a PYTHONPATH entry
    # naming it before it exists would be cached by the import system as "not a directory" and
    # then ignored. A contract that starts a child process hands the child its own sys.path.
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)],
        cwd=root,
        env=env,
        stdout=None if verbose else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if run.returncode != 0:
        tail = (run.stdout or "")[-3000:]
        raise SystemExit(f"mutmut failed on target {target.name!r} (exit {run.returncode}):\n{tail}")
    counts: Counter[str] = Counter()
    survivors: list[str] = []
    for module in target.modules:
        meta = json.loads((root / "mutants" / f"{module}.meta").read_text(encoding="utf-8"))
        for name, code in meta["exit_code_by_key"].items():
            status = KILLED_CODES.get(code) or SURVIVED_CODES.get(code) or ("skipped" if code == 34 else "suspicious")
            counts[status] += 1
            if code in SURVIVED_CODES:
                survivors.append(name)
    return Outcome(target, dict(counts), sorted(survivors), seconds)


def show(target: Target, workdir: Path, mutant: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", mutant],
        cwd=workdir / target.name,
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout.strip() or shown.stderr.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("targets", nargs="*", metavar="TARGET", help=f"targets to run (default: all): {', '.join(TARGETS)}")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants tested at once (default: CPU count)")
    p.add_argument("--workdir", default=str(BENCH_DIR / ".mutation"), help="staging trees (default: bench/.mutation)")
    p.add_argument("--survivors", action="store_true", help="print the diff of each surviving mutant")
    p.add_argument("--verbose", action="store_true", help="show mutmut's own progress")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the report")
    args = p.parse_args(argv)
    unknown = [name for name in args.targets if name not in TARGETS]
    if unknown:
        p.error(f"unknown target {unknown[0]!r}; the targets are: {', '.join(TARGETS)}")
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, not {args.jobs}")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        print("bench/mutation.py needs mutmut: pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    chosen = [TARGETS[name] for name in (args.targets or TARGETS)]
    outcomes = [run_target(target, workdir, args.jobs, verbose=args.verbose) for target in chosen]
    killed = sum(o.killed for o in outcomes)
    scored = sum(o.scored for o in outcomes)
    total = killed / scored if scored else 0.0
    passed = all(o.score >= TARGET_SCORE for o in outcomes) and total >= TARGET_SCORE
    if args.json:
        document: dict[str, Any] = {
            "targets": {
                o.target.name: {"modules": list(o.target.modules), "tests": list(o.target.tests), "counts": o.counts,
                                "killed": o.killed, "scored": o.scored, "score": round(o.score, 4),
                                "survivors": o.survivors, "seconds": round(o.seconds, 1)}
                for o in outcomes
            },
            "killed": killed, "scored": scored, "score": round(total, 4), "target": TARGET_SCORE, "pass": passed,
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"{'target':<18} {'mutants':>7} {'killed':>6} {'survived':>8} {'no tests':>8} {'score':>6}  time")
        for o in outcomes:
            print(f"{o.target.name:<18} {sum(o.counts.values()):>7} {o.killed:>6} {o.counts.get('survived', 0):>8} "
                  f"{o.counts.get('no tests', 0):>8} {o.score:>6.1%}  {o.seconds:.0f} s")
        print(f"{'all':<18} {'':>7} {killed:>6} {'':>8} {'':>8} {total:>6.1%}")
        if args.survivors:
            for o in outcomes:
                for mutant in o.survivors:
                    print(f"\n--- {o.target.name}: {mutant}\n{show(o.target, workdir, mutant)}")
        verdict = "PASS" if passed else "FAIL"
        print(f"VERDICT mutation: {verdict} - {total:.1%} of {scored} mutants killed by the contracts alone "
              f"(target >= {TARGET_SCORE:.0%} per target and overall)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
