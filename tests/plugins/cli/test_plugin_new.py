"""``monoagent plugin new NAME`` (plugin ``plugin-cli``): the distribution it writes, and the names it refuses.

The test that matters installs what it writes into a throwaway venv (:mod:`throwaway_venv`) and
runs the generated tests there, then breaks the generated plugin and sees them fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from cli_isolation import isolate_cli
from click.testing import CliRunner, Result
from throwaway_venv import clean_env, make_venv, pip_install

import monoagent._cli as cli_module
from monoagent._kernel.host import PluginHost

ROOT = Path(__file__).resolve().parents[3]
GENERATED_FILES = {
    ".gitignore", "README.md", "pyproject.toml",
    "src/monoagent_weather_notes/__init__.py", "tests/test_weather_notes.py",
}


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    return tmp_path


def invoke(*args: str) -> Result:
    host = PluginHost()
    host.load_entry_points()
    return CliRunner().invoke(cli_module.build_cli(host), list(args))


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def test_new_writes_the_distribution_in_the_current_folder(cwd: Path) -> None:
    result = invoke("plugin", "new", "weather-notes", "--description", 'Say "hi" \\ with """quotes"""')
    assert result.exit_code == 0, result.output
    target = cwd / "monoagent-weather-notes"
    assert files_under(target) == GENERATED_FILES
    assert str(target.name) in result.stdout and "pip install -e" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        "note: once installed, 'weather-notes' loads in every monoagent run of this Python environment, in every "
        "project that uses it; a project keeps it out with plugins.block = ['weather-notes']"
    )

    project = tomllib.loads((target / "pyproject.toml").read_text())
    major_minor = ".".join(metadata.version("monoagent").split(".")[:2])
    assert project["project"]["name"] == "monoagent-weather-notes"
    assert project["project"]["description"] == 'Say "hi" \\ with """quotes"""', "the description is TOML-escaped"
    assert project["project"]["dependencies"] == [f"monoagent>={major_minor}"]
    assert project["project"]["optional-dependencies"]["test"] == ["pytest>=8"]
    assert project["project"]["entry-points"]["monoagent"] == {"weather-notes": "monoagent_weather_notes"}
    assert project["project"]["entry-points"]["monoagent.config_sections"] == {"weatherNotes": "monoagent_weather_notes"}
    assert project["build-system"]["build-backend"] == "hatchling.build"
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/monoagent_weather_notes"]
    readme = (target / "README.md").read_text()
    assert "pip install -e '.[test]'" in readme and "python -m pytest" in readme and "[weatherNotes]" in readme

    package = (target / "src/monoagent_weather_notes/__init__.py").read_text()
    assert "def weather_notes_repeat(text: str, times: int, context: ToolContext)" in package
    assert "class WeatherNotesConfig" in package and 'CONFIG_SECTION = "weatherNotes"' in package
    tests = (target / "tests/test_weather_notes.py").read_text()
    for fixture in ("monoagent_agent", "scripted_agent", "function_provider", "hook_recorder"):
        assert re.search(rf"def test_\w+\([^)]*\b{fixture}\b", tests), f"no generated test takes {fixture}"

    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(target)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_dir_chooses_the_parent_folder(cwd: Path) -> None:
    parent = cwd / "elsewhere"
    parent.mkdir()
    result = invoke("plugin", "new", "notes", "--dir", str(parent))
    assert result.exit_code == 0, result.output
    assert (parent / "monoagent-notes" / "pyproject.toml").is_file()
    assert not (cwd / "monoagent-notes").exists()

    missing = invoke("plugin", "new", "notes", "--dir", str(cwd / "missing"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    assert not (cwd / "missing").exists()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../evil", "is a path, not a name"),
        ("a/b", "is a path, not a name"),
        ("..", "is a path, not a name"),
        (".", "is a path, not a name"),
        ("/tmp/x", "is a path, not a name"),
        ("a\\b", "is a path, not a name"),
        ("", "the plugin name is empty"),
        ("my lab", "did you mean 'my-lab'?"),
        ("Weather", "did you mean 'weather'?"),
        ("my_lab", "did you mean 'my-lab'?"),
        ("-lab", "did you mean 'lab'?"),
        ("lab-", "not a valid plugin name"),
        ("a--b", "not a valid plugin name"),
        ("2fa", "not a valid plugin name"),
        ("x" * 41, "not a valid plugin name"),
        ("l\x1bab", "not a valid plugin name"),
        ("lab\n", "not a valid plugin name"),
        ("monoagent-lab", "give the plugin's own name, 'lab'"),
        ("identity", "is the name of a bundled plugin"),
        ("mcp", "is the name of a bundled plugin"),
        ("plugins", "the import package monoagent_plugins, which already exists"),
        ("runtime", "the configuration table [runtime]"),
        ("tool-history", "is the name of a bundled plugin"),
        ("openai-api", "is the name of a bundled plugin"),
        ("context", "the configuration table [context]"),
    ],
)
def test_a_name_that_cannot_be_a_plugin_is_refused_and_nothing_is_written(cwd: Path, name: str, says: str) -> None:
    before = files_under(cwd)
    result = invoke("plugin", "new", "--", name)
    assert result.exit_code == 2, result.output
    assert "Invalid value for NAME" in result.stderr and says in result.stderr
    if "is a path" in says or "valid" in says or "empty" in says:
        assert "lower-case letters and digits, words joined by single '-'" in result.stderr
    assert files_under(cwd) == before
    assert not (cwd.parent / "evil").exists() and not (cwd.parent / "monoagent-evil").exists()


def test_a_python_keyword_is_a_good_name_because_every_identifier_has_a_prefix(cwd: Path) -> None:
    assert invoke("plugin", "new", "class").exit_code == 0
    target = cwd / "monoagent-class"
    imported = subprocess.run(
        [sys.executable, "-c", "import monoagent_class as p; print(p.class_repeat.spec.name, p.ClassConfig.__name__)"],
        capture_output=True, text=True, env={**clean_env(), "PYTHONPATH": str(target / "src")},
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == ["class_repeat", "ClassConfig"]


@pytest.mark.parametrize("kind", ["folder", "file", "dangling link"])
def test_an_existing_target_is_refused_and_left_alone(cwd: Path, kind: str) -> None:
    target = cwd / "monoagent-notes"
    if kind == "folder":
        target.mkdir()
        (target / "mine.txt").write_text("keep me")
    elif kind == "file":
        target.write_text("keep me")
    else:
        target.symlink_to(cwd / "nowhere")
    before = files_under(cwd)
    result = invoke("plugin", "new", "notes")
    assert result.exit_code == 1, result.output
    assert "exists already; nothing was written" in result.stderr
    assert files_under(cwd) == before
    assert not (cwd / "nowhere").exists(), "a link is never followed"


@pytest.mark.parametrize("description", ["two\nlines", "a\ttab", "bidi \u202e override", "x" * 201])
def test_a_description_that_is_not_one_printable_line_is_refused(cwd: Path, description: str) -> None:
    result = invoke("plugin", "new", "notes", "--description", description)
    assert result.exit_code == 1, result.output
    assert "description" in result.stderr
    assert not (cwd / "monoagent-notes").exists()


# ---------------------------------------------------------------------- installed, in a throwaway venv


def run(python: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env=clean_env(MONO_AGENT_HOME=str(cwd / "home"), **env),
    )


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the generated distribution, the python of a venv it is installed in, editable)."""
    parent = tmp_path_factory.mktemp("generated")
    made = subprocess.run(
        [sys.executable, "-m", "monoagent", "plugin", "new", "weather-notes", "--dir", str(parent)],
        capture_output=True, text=True, env=clean_env(MONO_AGENT_HOME=str(parent / "home")), timeout=60,
    )
    assert made.returncode == 0, made.stderr
    python = make_venv(tmp_path_factory.mktemp("venv"))
    pip_install(python, "-e", str(parent / "monoagent-weather-notes"))
    return parent / "monoagent-weather-notes", python


@pytest.mark.slow
@pytest.mark.timeout(300)  # four pytest runs in a subprocess: the suite's slowest test (about 45 s under load)
def test_the_generated_tests_pass_installed_and_fail_when_the_plugin_breaks(generated: tuple[Path, Path], tmp_path: Path) -> None:
    target, python = generated
    passed = run(python, tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target / "tests"))
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
    assert "12 passed" in passed.stdout

    module = target / "src" / "monoagent_weather_notes" / "__init__.py"
    source = module.read_text()
    breakages = {
        'text = f"Motto: {settings.motto}"': 'text = f"Slogan: {settings.motto}"',
        'return "\\n".join([text] * times)': 'return " ".join([text] * times)',
        "min=1,\n        max=10,": "min=1,\n        max=100,",
    }
    try:
        for good, bad in breakages.items():
            assert good in source
            module.write_text(source.replace(good, bad))
            failed = run(python, tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target / "tests"))
            assert failed.returncode == 1, f"breaking {good!r} went unnoticed:\n{failed.stdout[-3000:]}"
            assert "failed" in failed.stdout
    finally:
        module.write_text(source)


@pytest.mark.slow
def test_installed_the_plugin_is_listed_and_works_in_monoagent(generated: tuple[Path, Path], tmp_path: Path) -> None:
    _, python = generated
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "offline:echo"\n[weatherNotes]\nmotto = "Tests first."\n')
    listed = run(python, tmp_path, "-m", "monoagent", "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [row for row in json.loads(listed.stdout) if row["name"] == "weather-notes"]
    assert (row["source"], row["status"], row["version"]) == ("entrypoint", "active", "0.1.0")
    assert {"extra_sections", "register_config_sections", "register_tools"} <= set(row["hooks"])

    prompt = run(python, tmp_path, "-m", "monoagent", "prompt", "hi", "--json")
    assert prompt.returncode == 0, prompt.stderr
    data = json.loads(prompt.stdout)
    assert "Motto: Tests first." in data["stable"]
    assert {s["id"]: s["source"] for s in data["manifest"]["sections"]}["weather_notes"] == "weather-notes"

    tools = run(python, tmp_path, "-m", "monoagent", "tools", "--json")
    assert tools.returncode == 0, tools.stderr
    assert {"name": "weather_notes_repeat", "source": "weather-notes"}.items() <= next(
        t for t in json.loads(tools.stdout)["tools"] if t["name"] == "weather_notes_repeat"
    ).items()

    again = run(python, tmp_path, "-m", "monoagent", "plugin", "new", "weather-notes")
    assert again.returncode == 2
    assert "'weather-notes' is the name of a plugin already installed, from the distribution monoagent-weather-notes" in again.stderr
    assert not (tmp_path / "monoagent-weather-notes").exists()

    (tmp_path / "monoagent.toml").write_text('[weatherNotes]\nmaxRepeat = 11\n')
    refused = run(python, tmp_path, "-m", "monoagent", "prompt", "hi")
    assert refused.returncode == 2
    assert "weatherNotes.maxRepeat = 11" in refused.stderr


@pytest.mark.slow
def test_the_templates_ship_in_monoagents_wheel(tmp_path: Path) -> None:
    """A non-editable install has the templates too: they are package data of monoagent_plugins."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, env=clean_env(), timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("monoagent-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    templates = {p.name for p in (ROOT / "plugins/monoagent_plugins/cli/plugin_template").iterdir()}
    assert {f"monoagent_plugins/cli/plugin_template/{name}" for name in templates} <= shipped
