"""bench/mutation.py stages what it says and refuses what it cannot run (mutmut itself is not run here)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def mutation():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("mutation")
    finally:
        sys.path.remove(str(BENCH))


def test_every_target_names_modules_and_contract_tests_that_exist(mutation):
    repo = BENCH.parent
    for target in mutation.TARGETS.values():
        for module in target.modules:
            assert module.startswith("src/")
            source = repo / ("core" if module.startswith("src/monoagent/") else "plugins") / module.removeprefix("src/")
            assert source.is_file(), f"{target.name}: {module} is gone; update bench/mutation.py"
        for node in target.tests:
            path, _, cls = node.partition("::")
            cls = cls.partition("::")[0]  # a node id may name one test of the class
            text = (repo / path).read_text(encoding="utf-8")
            assert "Contract" in (cls or text), f"{target.name}: {node} is not a contract suite"
            if cls:
                assert f"class {cls}(" in text, f"{target.name}: no class {cls} in {path}"


def test_a_staging_tree_holds_the_code_the_tests_and_the_target_alone(mutation, tmp_path):
    target = mutation.TARGETS["offline"]
    root = mutation.stage(target, tmp_path)
    assert (root / "src" / "monoagent" / "kernel" / "hookspecs.py").is_file()
    assert (root / "src" / "monoagent_plugins" / "offline.py").is_file()
    assert (root / "tests" / "test_provider_runtime_contract.py").is_file()
    assert not list(root.rglob("__pycache__"))
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    assert config["only_mutate"] == list(target.modules)
    assert config["pytest_add_cli_args_test_selection"] == list(target.tests)
    # staging again starts from a clean copy (a previous run's mutants never leak into the next)
    (root / "mutants").mkdir()
    assert not (mutation.stage(target, tmp_path) / "mutants").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["nosuch"], "unknown target 'nosuch'; the targets are: files, "), (["--jobs", "0"], "--jobs must be at least 1, not 0")],
)
def test_bad_arguments_name_what_is_allowed(argv, message):
    run = subprocess.run([sys.executable, str(BENCH / "mutation.py"), *argv], capture_output=True, text=True, check=False)
    assert run.returncode == 2
    assert message in run.stderr


def test_reuse_keeps_the_previous_runs_mutants_and_nothing_else(mutation, tmp_path):
    target = mutation.TARGETS["offline"]
    root = mutation.stage(target, tmp_path)
    (root / "mutants").mkdir()
    (root / "mutants" / "mutmut-stats.json").write_text("{}", encoding="utf-8")
    (root / "tests" / "stray.py").write_text("", encoding="utf-8")
    again = mutation.stage(target, tmp_path, reuse=True)
    assert (again / "mutants" / "mutmut-stats.json").read_text(encoding="utf-8") == "{}"
    assert not (again / "tests" / "stray.py").exists()  # the rest is copied afresh
    assert (again / "src" / "monoagent_plugins" / "offline.py").is_file()


def _function(source):
    import ast

    return ast.parse(source).body[0]


ORIGINAL = '''
def f(conn, x):
    if x > 1:
        logger.bind(n=x).warning("store is busy, retrying")
        raise StoreError("the store is busy")
    conn.execute("DELETE FROM calls WHERE id < ?", (x,))
    conn.execute("UPDATE calls SET kind = 'done' WHERE id = ?", (x,))
    raise StoreError(code="too_many_calls")
'''


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ('"store is busy, retrying"', '"XXstore is busy, retryingXX"', "log text"),
        ('"store is busy, retrying"', '"STORE IS BUSY, RETRYING"', "log text"),
        ('"the store is busy"', '"XXthe store is busyXX"', "message wording"),
        ('"DELETE FROM calls WHERE id < ?"', '"delete from calls where id < ?"', "SQL case"),
        # not equivalent: SQL text changed beyond its case, a quoted SQL string's case, a machine-read code,
        # a changed comparison, and two changes at once
        ('"DELETE FROM calls WHERE id < ?"', '"XXDELETE FROM calls WHERE id < ?XX"', None),
        ("\"UPDATE calls SET kind = 'done' WHERE id = ?\"", "\"update calls set kind = 'done' where id = ?\"", "SQL case"),
        ("\"UPDATE calls SET kind = 'done' WHERE id = ?\"", "\"UPDATE CALLS SET KIND = 'DONE' WHERE ID = ?\"", None),
        ('code="too_many_calls"', 'code="XXtoo_many_callsXX"', None),
        ("x > 1", "x >= 1", None),
    ],
)
def test_equivalence_rules_recognise_only_text_that_no_contract_may_demand(mutation, old, new, rule):
    assert ORIGINAL.count(old) == 1
    assert mutation.equivalence_rule(_function(ORIGINAL), _function(ORIGINAL.replace(old, new))) == rule


def test_a_mutant_with_two_changes_is_never_equivalent_by_rule(mutation):
    mutant = ORIGINAL.replace('"the store is busy"', '"XXthe store is busyXX"').replace("x > 1", "x >= 1")
    assert mutation.equivalence_rule(_function(ORIGINAL), _function(mutant)) is None
    assert mutation.equivalence_rule(_function(ORIGINAL), _function(ORIGINAL)) is None


def test_retesting_survivors_forgets_their_results_and_keeps_the_rest(mutation, tmp_path):
    import json

    target = mutation.TARGETS["offline"]
    root = mutation.stage(target, tmp_path)
    meta = root / "mutants" / "src" / "monoagent_plugins" / "offline.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": {"a": 1, "b": 0, "c": 33, "d": 36, "e": None}}), encoding="utf-8")
    (root / "mutants" / "mutmut-stats.json").write_text("{}", encoding="utf-8")
    assert mutation.forget_survivors(target, root) == 2
    assert not (root / "mutants" / "mutmut-stats.json").exists()  # which tests reach which function: collected afresh
    assert json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"] == {"a": 1, "b": None, "c": None, "d": 36, "e": None}
