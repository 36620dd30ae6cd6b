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
    assert (root / "src" / "monoagent" / "_kernel" / "hookspecs.py").is_file()
    assert (root / "src" / "monoagent_plugins" / "providers" / "offline.py").is_file()
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
    assert (again / "src" / "monoagent_plugins" / "providers" / "offline.py").is_file()


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
    meta = root / "mutants" / "src" / "monoagent_plugins" / "providers" / "offline.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": {"a": 1, "b": 0, "c": 33, "d": 36, "e": None}}), encoding="utf-8")
    (root / "mutants" / "mutmut-stats.json").write_text("{}", encoding="utf-8")
    assert mutation.forget_survivors(target, root) == 2
    assert not (root / "mutants" / "mutmut-stats.json").exists()  # which tests reach which function: collected afresh
    assert json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"] == {"a": 1, "b": None, "c": None, "d": 36, "e": None}


ROWS_MODULE = '''
class Store:
    def query(self, sql) -> list[sqlite3.Row]:
        return []

def f(self, conn, clauses, table, path):
    rows = self.query("SELECT * FROM calls WHERE " + " AND ".join(clauses))
    found = [r["call_id"] for r in rows]
    n = self.query("SELECT COUNT(*) AS n FROM calls")[0]["n"]
    first = rows[0]["tool"]
    plain = table["kind"]
    clauses.append("logical_id = ?")
    text = conn.decode("utf-8", "surrogatepass")
    data = open(path, encoding="latin-1", errors="strict")
    return found, n, first, plain, text, data
'''


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ('r["call_id"]', 'r["CALL_ID"]', "Row key case"),  # a row of a list from a function returning sqlite3.Row
        ('[0]["n"]', '[0]["N"]', "Row key case"),
        ('rows[0]["tool"]', 'rows[0]["TOOL"]', "Row key case"),
        ('table["kind"]', 'table["KIND"]', None),  # anything else may be a dict: its keys are case-sensitive
        ('r["call_id"]', 'r["XXcall_idXX"]', None),
        ('"logical_id = ?"', '"LOGICAL_ID = ?"', "SQL case"),  # a clause by its bound parameter
        ('" AND "', '" and "', "SQL case"),
        ('"utf-8", "surrogatepass"', '"UTF-8", "surrogatepass"', "codec case"),
        ('"surrogatepass"', '"SURROGATEPASS"', None),  # error handler names are case-sensitive
        ('encoding="latin-1"', 'encoding="LATIN-1"', "codec case"),
        ('errors="strict"', 'errors="STRICT"', None),
    ],
)
def test_row_keys_sql_fragments_and_codec_names_differ_only_in_a_case_nothing_reads(mutation, old, new, rule):
    import ast

    module = ast.parse(ROWS_MODULE)
    function = next(node for node in module.body if isinstance(node, ast.FunctionDef))
    assert ROWS_MODULE.count(old) == 1
    mutant = next(node for node in ast.parse(ROWS_MODULE.replace(old, new)).body if isinstance(node, ast.FunctionDef))
    producers = mutation.row_functions(module)
    assert producers == {"query"}
    assert mutation.equivalence_rule(function, mutant, producers) == rule
    if rule == "Row key case":  # without a function declared to return rows, a key is any mapping's
        assert mutation.equivalence_rule(function, mutant, frozenset()) is None


def _staged_survivors(mutation, tmp_path, codes):
    """A staging tree of the offline target whose module holds f and three mutants of it, with these results."""
    import json

    target = mutation.TARGETS["offline"]
    root = tmp_path / target.name
    module = root / "mutants" / target.modules[0]
    module.parent.mkdir(parents=True)
    module.write_text("\n".join(
        f"def x_f__mutmut_{suffix}(x):\n    return x {op} 1\n" for suffix, op in (("orig", ">"), ("1", ">="), ("2", "<"), ("3", "=="))),
        encoding="utf-8")
    name = "monoagent_plugins.providers.offline.x_f__mutmut_"
    (root / "mutants" / f"{target.modules[0]}.meta").write_text(
        json.dumps({"exit_code_by_key": {f"{name}{n}": code for n, code in codes.items()}}), encoding="utf-8")
    return target, root, name, mutation.MutantSources(module)


def test_a_review_entry_applies_while_the_mutants_code_is_what_was_reviewed(mutation, tmp_path):
    target, root, name, sources = _staged_survivors(mutation, tmp_path, {1: 0, 2: 0, 3: 1})
    reviews = {
        f"{name}1": mutation.Review(f"{name}1", sources.digest(f"{name}1"), "x is never 1 here"),
        f"{name}2": mutation.Review(f"{name}2", sources.digest(f"{name}1"), "reviewed against other code"),
        f"{name}3": mutation.Review(f"{name}3", sources.digest(f"{name}3"), "a wrong review: it was killed"),
    }
    found = mutation.outcome(target, root, 0.0, reviews)
    assert found.reviewed == {f"{name}1": "x is never 1 here"}
    assert found.survivors == [f"{name}2"] and found.stale == [f"{name}2"]
    assert found.misjudged == [f"{name}3"]
    assert (found.killed, found.raw_scored, found.scored) == (1, 3, 2)
    assert sources.digest(f"{name}1") != sources.digest(f"{name}2")


def test_review_entry_prints_entries_that_load_once_a_reason_is_written(mutation, tmp_path):
    _, _, name, _ = _staged_survivors(mutation, tmp_path, {1: 0, 2: 0, 3: 1})
    run = subprocess.run([sys.executable, str(BENCH / "mutation.py"), "offline", "--workdir", str(tmp_path),
                          "--review-entry", "*__mutmut_[13]"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert f'mutant = "{name}1"' in run.stdout and f"{name}3" not in run.stdout  # 3 was killed
    assert "# +    return x >= 1" in run.stdout  # the diff, as comments
    (tmp_path / "offline.toml").write_text(run.stdout.replace('reason = ""', 'reason = "x is never 1 here"'), encoding="utf-8")
    assert list(mutation.load_reviews("offline", tmp_path)) == [f"{name}1"]
    with pytest.raises(mutation.ReviewError, match="reason is empty"):
        (tmp_path / "offline.toml").write_text(run.stdout, encoding="utf-8")
        mutation.load_reviews("offline", tmp_path)
    nothing = subprocess.run([sys.executable, str(BENCH / "mutation.py"), "offline", "--workdir", str(tmp_path),
                              "--review-entry", "nosuch*"], capture_output=True, text=True, check=False)
    assert nothing.returncode == 1 and "no surviving mutant of the last run matches 'nosuch*'" in nothing.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[equivalent]\n", "not valid TOML"),
        ('[other]\nx = 1\n', "unknown table 'other'"),
        ('[[equivalent]]\nmutant = "m.f__mutmut_1"\ndigest = "' + "a" * 64 + '"\n', "exactly mutant, digest and reason"),
        ('[[equivalent]]\nmutant = "m.f"\ndigest = "' + "a" * 64 + '"\nreason = "a long enough reason"\n', "not a mutmut mutant name"),
        ('[[equivalent]]\nmutant = "m.f__mutmut_1"\ndigest = "abc"\nreason = "a long enough reason"\n', "64 hex digits"),
        (('[[equivalent]]\nmutant = "m.f__mutmut_1"\ndigest = "' + "a" * 64 + '"\nreason = "a long enough reason"\n') * 2,
         "reviewed twice"),
    ],
)
def test_a_bad_review_file_names_the_file_the_entry_and_what_is_allowed(mutation, tmp_path, text, message):
    (tmp_path / "files.toml").write_text(text, encoding="utf-8")
    with pytest.raises(mutation.ReviewError, match=message) as caught:
        mutation.load_reviews("files", tmp_path)
    assert str(tmp_path / "files.toml") in str(caught.value)


def test_the_checked_in_review_files_load_and_name_targets_that_exist(mutation):
    directory = BENCH / "mutation_equivalent"
    for path in sorted(directory.glob("*.toml")) if directory.is_dir() else []:
        assert path.stem in mutation.TARGETS, f"{path.name}: no mutation target {path.stem!r}"
        for mutant in mutation.load_reviews(path.stem, directory):
            modules = [m.removeprefix("src/").removesuffix(".py").replace("/", ".") for m in mutation.TARGETS[path.stem].modules]
            assert any(mutant.startswith(m + ".") for m in modules), f"{path.name}: {mutant} is in none of the target's modules"


def test_a_literal_the_docs_quote_is_promised_and_a_short_or_unquoted_one_is_not(mutation):
    text = "store is busy, retrying every second"
    original = ORIGINAL.replace('"store is busy, retrying"', f'"{text}"')
    mutant = original.replace(f'"{text}"', f'"XX{text}XX"')
    docs = f"The store logs `{text}` once per wait."
    assert mutation.promised_literal(_function(original), _function(mutant), docs) == text
    assert mutation.promised_literal(_function(original), _function(mutant), "the docs quote nothing") is None
    short = ORIGINAL.replace('"store is busy, retrying"', '"XXstore is busy, retryingXX"')  # 23 characters
    assert mutation.promised_literal(_function(ORIGINAL), _function(short), "store is busy, retrying") is None
    twice = mutant.replace("x > 1", "x >= 1")
    assert mutation.promised_literal(_function(original), _function(twice), docs) is None


def test_the_strict_score_counts_equivalents_whose_text_the_docs_promise_as_survivors(mutation, tmp_path):
    target, root, name, sources = _staged_survivors(mutation, tmp_path, {1: 0, 2: 0, 3: 1})
    promise = "docs/history.md: the error names the conversation"
    reviews = {
        f"{name}1": mutation.Review(f"{name}1", sources.digest(f"{name}1"), "only the error's text", promise),
        f"{name}2": mutation.Review(f"{name}2", sources.digest(f"{name}2"), "x is never below 1 here"),
    }
    found = mutation.outcome(target, root, 0.0, reviews, docs="")
    assert found.promised == {f"{name}1": promise}
    assert (found.killed, found.scored, found.strict_scored) == (1, 1, 2)
    assert (found.score, found.strict_score) == (1.0, 0.5)
    report = subprocess.run([sys.executable, str(BENCH / "mutation.py"), "offline", "--workdir", str(tmp_path), "--report", "--json"],
                            capture_output=True, text=True, check=False)
    document = __import__("json").loads(report.stdout)
    assert {"strict_scored", "strict_score", "promised"} <= set(document["targets"]["offline"]) and "strict_score" in document


def test_a_review_entrys_promise_names_the_page_and_what_it_promises(mutation, tmp_path):
    entry = '[[equivalent]]\nmutant = "m.f__mutmut_1"\ndigest = "' + "a" * 64 + '"\nreason = "a long enough reason"\n'
    (tmp_path / "files.toml").write_text(entry + 'promised = "docs/history.md: the message names the conversation"\n', encoding="utf-8")
    assert mutation.load_reviews("files", tmp_path)["m.f__mutmut_1"].promised == "docs/history.md: the message names the conversation"
    (tmp_path / "files.toml").write_text(entry + 'promised = "somewhere"\n', encoding="utf-8")
    with pytest.raises(mutation.ReviewError, match=r"promised names the page and what it promises, as 'docs/<page>\.md: "):
        mutation.load_reviews("files", tmp_path)


def test_the_documented_counts_of_reviewed_equivalents_match_the_review_files(mutation):
    """Each target's row of the mutation-score table says how many mutants are equivalent by review: the file's count."""
    import re

    pages = [BENCH.parent / "docs" / name for name in ("testing.md", "mutation-testing.md")]
    rows = [line for page in pages if page.is_file() for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `") and "strict" in line]  # the rows of the score table (raw, verdict and strict)
    for target in mutation.TARGETS:
        entries = len(mutation.load_reviews(target))
        [row] = [line for line in rows if line.startswith(f"| `{target}` |")]
        said = [int(n.replace(",", "")) for n in re.findall(r"(\d[\d,]*) (?:survivors )?(?:equivalent )?by review", row)]
        assert said == ([entries] if entries else []), f"docs: the {target} row says {said} by review; the file holds {entries}"


def test_example_code_in_the_docs_promises_nothing(mutation, tmp_path):
    (tmp_path / "page.md").write_text('Prose: "the sidecar is unavailable for writes".\n\n```python\nraise ValueError('
                                      '"memory text must be a non-empty string")\n```\n\n```text\nprovider sessions removed: 2\n```\n',
                                      encoding="utf-8")
    text = mutation.docs_text(tmp_path)
    assert "the sidecar is unavailable for writes" in text and "provider sessions removed" in text
    assert "memory text must be a non-empty string" not in text
