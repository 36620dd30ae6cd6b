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

``--survivors`` prints the diff of every surviving mutant, which is what to read when strengthening
a contract: each survivor is either a bug the contracts miss (add the test to the contract) or an
equivalent mutant (record why in docs/mutation-testing.md).

Equivalent mutants. A survivor no caller could tell from the original through the documented
interface is equivalent, by rule (recognised mechanically: log text, message wording, SQL case,
``sqlite3.Row`` key case, codec name case) or by review (an entry in
``bench/mutation_equivalent/<target>.toml``, pinned to the mutant's code by a digest); see
``bench/mutation_equivalence.py`` for both. The report gives the raw score (every survivor counted)
and the score over the mutants that are not equivalent; the verdict is on the latter, and both are
printed, with the equivalent ones counted by rule and review. A third, strict score counts as
survivors the equivalent mutants observable only through error text or a log line the docs promise
(see ``bench/mutation_equivalence.py``, "Strict"); it is reported, the verdict is not on it.

Re-running. ``--reuse`` keeps a previous run's ``mutants/`` (results of functions whose code did not
change stand; mutmut maps new tests), ``--mutants GLOB`` re-tests only the named mutants (how one
survivor is checked after a contract test is added), and ``--retest-survivors`` tests every
survivor of the previous run again (plus every mutant of changed code). Adding contract tests
cannot revive a killed mutant, so a fresh run followed by ``--retest-survivors`` gives the same
figure as a second fresh run, in a fraction of the time.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import fnmatch
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
from mutation_equivalence import (
    Review,
    ReviewError,
    digest,
    docs_text,
    equivalence_rule,
    load_reviews,
    promised_literal,
    review_entry,
    row_functions,
)

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
            (f"{PLUGINS}/history/files.py", f"{PLUGINS}/history/records.py", f"{PLUGINS}/history/directory.py"),
            ("tests/plugins/history/test_history_contract.py", "tests/plugins/history/test_history_durability_contract.py::TestFilesStoreDurabilityContract"),
        ),
        Target(
            "tool-history",
            "the bundled SQLite tool-history store",
            (f"{PLUGINS}/history/tool_calls/store.py", f"{PLUGINS}/history/tool_calls/sidecar.py"),
            ("tests/plugins/history/test_tool_history.py::TestSqliteToolHistoryContract",),
        ),
        Target(
            "memory-lite",
            "the bundled lite memory tier",
            (f"{PLUGINS}/memory/lite.py", f"{PLUGINS}/memory/database.py", f"{PLUGINS}/memory/index.py"),
            ("tests/plugins/memory/test_memory_contract.py::TestLiteContract",),
        ),
        Target(
            "offline",
            "the offline providers (offline:echo, offline:scripted)",
            (f"{PLUGINS}/providers/offline.py",),
            (
                "tests/test_provider_runtime_contract.py::TestOfflineScriptedRuntimeContract",
                "tests/test_provider_runtime_contract.py::TestOfflineEchoRuntimeContract",
            ),
        ),
        Target(
            "openai-compatible",
            "the OpenAI-compatible provider and its wire",
            (f"{PLUGINS}/providers/openai_compatible.py", f"{PLUGINS}/providers/openai_wire.py"),
            (
                "tests/test_provider_contract.py::TestOpenAICompatibleContract",
                "tests/test_provider_runtime_contract.py::TestOpenAICompatibleRuntimeContract",
                "tests/test_provider_contract.py::TestOpenAIContract::test_the_request_says_what_was_asked",  # max_completion_tokens
                *(
                    f"tests/test_provider_contract.py::TestOpenAICompatibleLocalServerContract::{test}"
                    for test in (
                        "test_text_deltas_arrive_in_order", "test_split_tool_call_arguments_assemble", "test_two_tool_calls_in_one_step",
                        "test_tool_calls_per_step_up_to_the_cap", "test_error_event_mid_stream_is_retryable",
                        "test_error_events_mid_stream_say_what_happened", "test_a_field_of_the_wrong_type_is_named",
                        "test_reasoning_is_progress_never_text", "test_tool_argument_bytes_count_as_progress",
                    )
                ),
                *(
                    f"tests/test_provider_contract.py::TestOpenAICompatibleWholeCallsContract::{test}"
                    for test in (
                        "test_split_tool_call_arguments_assemble", "test_two_tool_calls_in_one_step",
                        "test_tool_argument_bytes_count_as_progress", "test_a_field_of_the_wrong_type_is_named",
                        "test_text_deltas_arrive_in_order", "test_a_stream_that_ends_before_its_last_event_is_retryable",
                        "test_calls_without_an_id_get_ids_unique_in_the_run", "test_the_request_goes_where_the_configuration_says",
                    )
                ),
            ),
        ),
    )
}


@attrs.frozen
class Outcome:
    target: Target
    counts: dict[str, int]
    survivors: list[str]  # not equivalent by rule or review
    equivalent: dict[str, str]  # surviving mutant -> the rule that makes it equivalent
    seconds: float
    reviewed: dict[str, str] = attrs.field(factory=dict)  # surviving mutant -> the reviewed reason
    stale: list[str] = attrs.field(factory=list)  # review entries whose mutant's code changed since
    misjudged: list[str] = attrs.field(factory=list)  # review entries for mutants the contracts killed
    promised: dict[str, str] = attrs.field(factory=dict)  # equivalent mutant -> the docs' promise of the text it changes

    @property
    def killed(self) -> int:
        return sum(n for status, n in self.counts.items() if status in KILLED_CODES.values())

    @property
    def raw_scored(self) -> int:
        return self.killed + sum(n for status, n in self.counts.items() if status in SURVIVED_CODES.values())

    @property
    def raw_score(self) -> float:
        return self.killed / self.raw_scored if self.raw_scored else 0.0

    @property
    def scored(self) -> int:
        return self.raw_scored - len(self.equivalent) - len(self.reviewed)

    @property
    def score(self) -> float:
        return self.killed / self.scored if self.scored else 0.0

    @property
    def strict_scored(self) -> int:
        return self.scored + len(self.promised)

    @property
    def strict_score(self) -> float:
        return self.killed / self.strict_scored if self.strict_scored else 0.0


class MutantSources:
    """The original and mutated functions of one mutated module, read from mutmut's trampoline file."""

    def __init__(self, path: Path) -> None:
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        module = ast.parse(path.read_text(encoding="utf-8"))
        self.row_functions = row_functions(module)
        for node in ast.walk(module):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
                self.functions[node.name] = node

    def pair(self, mutant: str) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.FunctionDef | ast.AsyncFunctionDef]:
        name = mutant.rpartition(".")[2]
        return self.functions[name.rpartition("__mutmut_")[0] + "__mutmut_orig"], self.functions[name]

    def rule(self, mutant: str) -> str | None:
        return equivalence_rule(*self.pair(mutant), self.row_functions)

    def promised(self, mutant: str, docs: str) -> str | None:
        return promised_literal(*self.pair(mutant), docs)

    def digest(self, mutant: str) -> str:
        return digest(*self.pair(mutant))

    def diff(self, mutant: str) -> str:
        original, mutated = self.pair(mutant)
        mutated_text = ast.unparse(mutated).replace(mutated.name, original.name, 1)
        return "\n".join(difflib.unified_diff(ast.unparse(original).splitlines(), mutated_text.splitlines(),
                                              "original", mutant.rpartition(".")[2], n=2, lineterm=""))


def stage(target: Target, workdir: Path, *, reuse: bool = False) -> Path:
    """A fresh staging tree for ``target`` (the working tree itself is never mutated).

    With ``reuse``, a previous run's ``mutants/`` is kept (everything else is copied afresh), so
    mutmut keeps the results of functions whose code did not change.
    """
    root = workdir / target.name
    if root.exists():
        for child in root.iterdir():
            if not (reuse and child.name == "mutants"):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
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
                'pythonpath = ["tests"]',
                'markers = ["slow: long-running soak tests (run in CI)"]',
                'filterwarnings = ["error::pytest.PytestUnraisableExceptionWarning"]',
                "",
            ]
        ),
        encoding="utf-8",
    )
    return root


def forget_survivors(target: Target, root: Path) -> int:
    """Mark every surviving mutant of a previous run as not run, so the next run tests it again.

    mutmut's map from functions to the tests that reach them is dropped too, so it is collected
    afresh: a contract test changed since (not only one added) may now reach a survivor's function.
    """
    (root / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    forgotten = 0
    for module in target.modules:
        path = root / "mutants" / f"{module}.meta"
        if not path.is_file():
            continue
        meta = json.loads(path.read_text(encoding="utf-8"))
        for name, code in meta["exit_code_by_key"].items():
            if code in SURVIVED_CODES:
                meta["exit_code_by_key"][name] = None
                forgotten += 1
        path.write_text(json.dumps(meta), encoding="utf-8")
    return forgotten


MEMORY_LIMIT = 4 << 30  # address space per process: mutmut, its forked mutants and their children


def bounded_memory() -> None:
    """Bound the address space of mutmut and every mutant it forks (the limit is inherited).

    A mutant that turns a bound into a runaway allocation (a loop that never ends, a cap of ``None``)
    would otherwise fill the machine's memory until the kernel's OOM killer picks a victim; with the
    limit it gets ``MemoryError`` at once, its test fails and the mutant counts as killed.
    """
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_target(target: Target, workdir: Path, jobs: int, *, verbose: bool, reuse: bool = False,
               mutants: tuple[str, ...] = (), retest_survivors: bool = False) -> Outcome:
    root = stage(target, workdir, reuse=reuse or retest_survivors)
    if retest_survivors:
        forget_survivors(target, root)
    env = dict(os.environ)
    env["PYTEST_DEBUG_TEMPROOT"] = str(root / "tmp")  # numbered tmp dirs apart from any other pytest run
    (root / "tmp").mkdir()
    # No PYTHONPATH here: mutmut puts mutants/src first on sys.path itself, and a PYTHONPATH entry
    # naming it before it exists would be cached by the import system as "not a directory" and
    # then ignored. A contract that starts a child process hands the child its own sys.path.
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *mutants],
        cwd=root,
        env=env,
        preexec_fn=bounded_memory,
        stdout=None if verbose else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if run.returncode != 0:
        tail = (run.stdout or "")[-3000:]
        raise SystemExit(f"mutmut failed on target {target.name!r} (exit {run.returncode}):\n{tail}")
    return outcome(target, root, seconds)


def outcome(target: Target, root: Path, seconds: float, reviews: dict[str, Review] | None = None,
            docs: str | None = None) -> Outcome:
    """Count a staging tree's results; survivors are sorted into equivalent (by rule, by review) and the rest.

    ``docs`` is the text of the docs pages the strict score reads promises from (default: ``docs/``).
    """
    reviews = load_reviews(target.name) if reviews is None else reviews
    docs = docs_text() if docs is None else docs
    promised: dict[str, str] = {}
    counts: Counter[str] = Counter()
    survivors: list[str] = []
    equivalent: dict[str, str] = {}
    reviewed: dict[str, str] = {}
    stale: list[str] = []
    misjudged: list[str] = []
    for module in target.modules:
        meta = json.loads((root / "mutants" / f"{module}.meta").read_text(encoding="utf-8"))
        sources = MutantSources(root / "mutants" / module)
        for name, code in meta["exit_code_by_key"].items():
            status = KILLED_CODES.get(code) or SURVIVED_CODES.get(code) or ("not run" if code is None else
                                                                            "skipped" if code == 34 else "suspicious")
            counts[status] += 1
            review = reviews.get(name)
            if review is not None and code in KILLED_CODES:
                misjudged.append(name)
            if code not in SURVIVED_CODES:
                continue
            rule = sources.rule(name)
            if rule:
                equivalent[name] = rule
                quoted = sources.promised(name, docs) if rule in ("log text", "message wording") else None
                if quoted:
                    promised[name] = f"docs/ quote {quoted!r}"
            elif review is not None and review.digest == sources.digest(name):
                reviewed[name] = review.reason
                if review.promised:
                    promised[name] = review.promised
            else:
                survivors.append(name)
                if review is not None:
                    stale.append(name)
    return Outcome(target, dict(counts), sorted(survivors), dict(sorted(equivalent.items())), seconds,
                   dict(sorted(reviewed.items())), sorted(stale), sorted(misjudged), dict(sorted(promised.items())))


def show(target: Target, workdir: Path, mutant: str) -> str:
    """The diff of one mutant against the original function (read from mutmut's files, no subprocess)."""
    root = workdir / target.name
    module = next(m for m in target.modules if mutant.startswith(m.removeprefix("src/").removesuffix(".py").replace("/", ".") + "."))
    return MutantSources(root / "mutants" / module).diff(mutant)


def print_review_entries(targets: list[Target], workdir: Path, patterns: list[str]) -> int:
    """Print a review entry for each surviving, not-yet-equivalent mutant of the last run matching a pattern."""
    printed = 0
    for target in targets:
        found = outcome(target, workdir / target.name, 0.0, {})
        for mutant in found.survivors:
            if any(fnmatch.fnmatchcase(mutant, pattern) for pattern in patterns):
                module = next(m for m in target.modules
                              if mutant.startswith(m.removeprefix("src/").removesuffix(".py").replace("/", ".") + "."))
                sources = MutantSources(workdir / target.name / "mutants" / module)
                print(review_entry(mutant, sources.digest(mutant), sources.diff(mutant)))
                printed += 1
    if not printed:
        print(f"no surviving mutant of the last run matches {' or '.join(map(repr, patterns))} "
              "(equivalent-by-rule survivors need no entry)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("targets", nargs="*", metavar="TARGET", help=f"targets to run (default: all): {', '.join(TARGETS)}")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants tested at once (default: CPU count)")
    p.add_argument("--workdir", default=str(BENCH_DIR / ".mutation"), help="staging trees (default: bench/.mutation)")
    p.add_argument("--survivors", action="store_true", help="print the diff of each surviving mutant")
    p.add_argument("--equivalent", action="store_true", help="also list the survivors equivalent by rule")
    p.add_argument("--reuse", action="store_true", help="keep the previous run's mutants/ and results")
    p.add_argument("--mutants", action="append", default=[], metavar="GLOB",
                   help="re-test only these mutants (mutmut names, globs allowed; repeatable; implies --reuse)")
    p.add_argument("--retest-survivors", action="store_true",
                   help="keep the previous run's results but test its survivors again (after contract tests were added)")
    p.add_argument("--report", action="store_true", help="report the last run's results without running anything")
    p.add_argument("--review-entry", action="append", default=[], metavar="GLOB",
                   help="print review entries (digest filled in, reason to write) for these surviving mutants of the last run")
    p.add_argument("--verbose", action="store_true", help="show mutmut's own progress")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the report")
    args = p.parse_args(argv)
    unknown = [name for name in args.targets if name not in TARGETS]
    if unknown:
        p.error(f"unknown target {unknown[0]!r}; the targets are: {', '.join(TARGETS)}")
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, not {args.jobs}")
    workdir = Path(args.workdir).resolve()
    chosen = [TARGETS[name] for name in (args.targets or TARGETS)]
    try:
        reviews = {target.name: load_reviews(target.name) for target in chosen}
    except ReviewError as exc:
        print(f"bench/mutation.py: {exc}", file=sys.stderr)
        return 2
    if args.report or args.review_entry:
        missing = [t.name for t in chosen if not (workdir / t.name / "mutants").is_dir()]
        if missing:
            p.error(f"--{'report' if args.report else 'review-entry'}: no previous run of {', '.join(missing)} under {workdir}")
        if args.review_entry:
            return print_review_entries(chosen, workdir, args.review_entry)
        outcomes = [outcome(target, workdir / target.name, 0.0, reviews[target.name]) for target in chosen]
    else:
        try:
            import mutmut  # noqa: F401
        except ImportError:
            print("bench/mutation.py needs mutmut: pip install -e '.[mutation]'", file=sys.stderr)
            return 2
        workdir.mkdir(parents=True, exist_ok=True)
        outcomes = [run_target(target, workdir, args.jobs, verbose=args.verbose, reuse=args.reuse or bool(args.mutants),
                               mutants=tuple(args.mutants), retest_survivors=args.retest_survivors) for target in chosen]
    killed = sum(o.killed for o in outcomes)
    scored = sum(o.scored for o in outcomes)
    raw_scored = sum(o.raw_scored for o in outcomes)
    total = killed / scored if scored else 0.0
    raw_total = killed / raw_scored if raw_scored else 0.0
    strict_scored = sum(o.strict_scored for o in outcomes)
    strict_total = killed / strict_scored if strict_scored else 0.0
    passed = all(o.score >= TARGET_SCORE for o in outcomes) and total >= TARGET_SCORE
    if args.json:
        document: dict[str, Any] = {
            "targets": {
                o.target.name: {"modules": list(o.target.modules), "tests": list(o.target.tests), "counts": o.counts,
                                "killed": o.killed, "raw_scored": o.raw_scored, "raw_score": round(o.raw_score, 4),
                                "equivalent": o.equivalent, "reviewed": o.reviewed, "stale_reviews": o.stale,
                                "misjudged_reviews": o.misjudged, "scored": o.scored, "score": round(o.score, 4),
                                "promised": o.promised, "strict_scored": o.strict_scored,
                                "strict_score": round(o.strict_score, 4),
                                "survivors": o.survivors, "seconds": round(o.seconds, 1)}
                for o in outcomes
            },
            "killed": killed, "raw_scored": raw_scored, "raw_score": round(raw_total, 4), "scored": scored,
            "score": round(total, 4), "strict_scored": strict_scored, "strict_score": round(strict_total, 4),
            "target": TARGET_SCORE, "pass": passed,
        }
        print(json.dumps(document, indent=2))
        return 0 if passed else 1
    print(f"{'target':<18} {'mutants':>7} {'killed':>6} {'survived':>8} {'no tests':>8} {'raw':>6} {'equiv.':>6} {'score':>6} "
          f"{'strict':>6}  time")
    for o in outcomes:
        not_run = f"  ({o.counts['not run']} not run)" if o.counts.get("not run") else ""
        print(f"{o.target.name:<18} {sum(o.counts.values()):>7} {o.killed:>6} {o.counts.get('survived', 0):>8} "
              f"{o.counts.get('no tests', 0):>8} {o.raw_score:>6.1%} {len(o.equivalent):>6} {o.score:>6.1%} "
              f"{o.strict_score:>6.1%}  {o.seconds:.0f} s{not_run}")
    print(f"{'all':<18} {'':>7} {killed:>6} {'':>8} {'':>8} {raw_total:>6.1%} {raw_scored - scored:>6} {total:>6.1%} "
          f"{strict_total:>6.1%}")
    for o in outcomes:
        rules = Counter(o.equivalent.values())
        if rules:
            print(f"{o.target.name}: equivalent by rule: " + ", ".join(f"{n} {rule}" for rule, n in sorted(rules.items())))
        if o.reviewed:
            print(f"{o.target.name}: equivalent by review: {len(o.reviewed)} (bench/mutation_equivalent/{o.target.name}.toml)")
        if o.stale:
            print(f"{o.target.name}: {len(o.stale)} review entries are stale (the mutant's code changed; review again): "
                  + ", ".join(o.stale))
        if o.promised:
            print(f"{o.target.name}: strict: {len(o.promised)} equivalent mutants change text the docs promise and count "
                  f"as survivors there: " + ", ".join(o.promised))
        if o.misjudged:
            print(f"{o.target.name}: {len(o.misjudged)} mutants reviewed as equivalent were killed (remove the entries): "
                  + ", ".join(o.misjudged))
    if args.equivalent:
        for o in outcomes:
            for mutant, rule in o.equivalent.items():
                print(f"\n--- {o.target.name}: {mutant} (equivalent: {rule})\n{show(o.target, workdir, mutant)}")
            for mutant, reason in o.reviewed.items():
                print(f"\n--- {o.target.name}: {mutant} (equivalent by review: {reason})\n{show(o.target, workdir, mutant)}")
    if args.survivors:
        for o in outcomes:
            for mutant in o.survivors:
                print(f"\n--- {o.target.name}: {mutant}\n{show(o.target, workdir, mutant)}")
    verdict = "PASS" if passed else "FAIL"
    print(f"VERDICT mutation: {verdict} - {total:.1%} of {scored} mutants killed by the contracts alone, "
          f"{raw_total:.1%} of all {raw_scored}, strict {strict_total:.1%} of {strict_scored} (target >= {TARGET_SCORE:.0%} "
          f"per target and overall, mutants equivalent by rule or review set apart)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
