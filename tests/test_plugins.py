"""The plugin system through real entry points, local files and programmatic plugins.

Nothing is installed: each test writes fake distributions (a ``*.dist-info`` directory with
``METADATA`` and ``entry_points.txt``, plus the plugin module) into ``<tmp>/site`` and runs the
real CLI (``python -m monoagent``) or a small probe script in a subprocess with
``PYTHONPATH=<tmp>/site``, so ``importlib.metadata`` discovers them exactly as it would an
installed plugin. In-process tests use :func:`monoagent.testing.fresh_agent`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from monoagent import ComponentError, ConfigError, HookError, PluginError, Section, ToolSpec, TurnRequest, hookimpl
from monoagent._kernel.components import PROVIDERS
from monoagent.testing import fresh_agent

# ---------------------------------------------------------------------------- helpers


def identity_plugin(label: str) -> str:
    """Source of a plugin module whose identity section says where it came from."""
    return textwrap.dedent(
        f"""
        from monoagent import Section, hookimpl

        @hookimpl
        def section_identity(turn):
            return Section("identity", "IDENTITY FROM {label}", order=200, source={label!r})
        """
    )


BROKEN_PLUGIN = "import monoagent_no_such_module_for_tests\n"


class Project:
    """A temporary project: a fake site directory, a working directory and an agent home."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.site = root / "site"
        self.cwd = root / "project"
        self.home = root / "home"
        for path in (self.site, self.cwd):
            path.mkdir()

    def distribution(self, dist: str, entry_points: dict[str, str], **modules: str) -> None:
        """A fake installed distribution: dist-info with entry points in group ``monoagent``."""
        info = self.site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        lines = "".join(f"{name} = {module}\n" for name, module in entry_points.items())
        (info / "entry_points.txt").write_text(f"[monoagent]\n{lines}")
        for module, source in modules.items():
            (self.site / f"{module}.py").write_text(source)

    def file(self, relative: str, text: str) -> Path:
        path = self.cwd / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
        env.update(PYTHONPATH=str(self.site), MONO_AGENT_HOME=str(self.home))
        env.update(extra)
        return env

    def cli(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "monoagent", *args],
            cwd=self.cwd, env=self.env(**env), capture_output=True, text=True, timeout=60,
        )
        if ok:
            assert result.returncode == 0, result.stderr
        return result

    def plugins(self, *args: str, **env: str) -> list[dict]:
        return json.loads(self.cli(*args, "plugins", "--json", **env).stdout)

    def listed(self, *args: str, **env: str) -> dict[str, dict]:
        return {row["name"]: row for row in self.plugins(*args, **env)}

    def sources(self, *args: str, **env: str) -> dict[str, str]:
        """Section id -> the source recorded in the manifest of ``monoagent prompt hi``."""
        data = json.loads(self.cli(*args, "prompt", "hi", "--json", **env).stdout)
        return {section["id"]: section["source"] for section in data["manifest"]["sections"]}

    def probe(self, *programmatic: str, plugins_dirs: tuple[str, ...] = (), **env: str) -> dict:
        """Build an Agent in a subprocess (config discovered from the cwd), assemble, report.

        ``programmatic`` names modules (on PYTHONPATH) passed as ``Agent(plugins=[...])``.
        """
        script = textwrap.dedent(
            """
            import asyncio, importlib, json, sys
            from monoagent import Agent, TurnRequest

            modules = [importlib.import_module(name) for name in json.loads(sys.argv[1])]
            agent = Agent(None, plugins=modules, plugins_dirs=json.loads(sys.argv[2]))
            assembled = asyncio.run(agent.assemble(TurnRequest("hi", conversation_id="t")))
            print(json.dumps({
                "records": [[r.name, r.source, r.status] for r in agent.host.records],
                "sections": {s.id: s.source for s in assembled.manifest.sections},
                "text": assembled.system_text,
                "modules": sorted(m for m in sys.modules if m.startswith("monoagent_plugins")),
            }))
            """
        )
        result = subprocess.run(
            [sys.executable, "-c", script, json.dumps(list(programmatic)), json.dumps(list(plugins_dirs))],
            cwd=self.cwd, env=self.env(**env), capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def assemble(agent):
    return asyncio.run(agent.assemble(TurnRequest("hi", conversation_id="t")))


def stderr_lines(result: subprocess.CompletedProcess[str], needle: str) -> list[str]:
    return [line for line in result.stderr.splitlines() if needle in line]


# ---------------------------------------------------------------------------- load order


def test_load_order_and_precedence_across_the_four_sources(project: Project) -> None:
    assert project.sources()["identity"] == "identity"

    # Entry points sort by entry-point name, not distribution name: 'beta' loads last and wins.
    project.distribution("zulu-dist", {"alpha": "ep_alpha"}, ep_alpha=identity_plugin("alpha"))
    project.distribution("able-dist", {"beta": "ep_beta"}, ep_beta=identity_plugin("beta"))
    assert project.sources()["identity"] == "beta"

    project.file("monoagent.toml", "")
    project.file("monoagent_local.py", identity_plugin("monoagent_local"))
    assert project.sources()["identity"] == "monoagent_local"

    project.file("monoagent.toml", '[plugins]\npaths = ["extra/paths_plugin.py"]\n')
    project.file("extra/paths_plugin.py", identity_plugin("paths_plugin"))
    assert project.sources()["identity"] == "paths_plugin"

    project.file("cli_dir/cli_plugin.py", identity_plugin("cli_plugin"))
    assert project.sources("--plugins-dir", "cli_dir")["identity"] == "cli_plugin"

    (project.site / "programmatic_plugin.py").write_text(identity_plugin("programmatic_plugin"))
    probe = project.probe("programmatic_plugin", plugins_dirs=("cli_dir",))
    assert probe["sections"]["identity"] == "programmatic_plugin"
    assert "IDENTITY FROM programmatic_plugin" in probe["text"]
    assert [r[:2] for r in probe["records"] if r[1] != "bundled"] == [
        ["alpha", "entrypoint"],
        ["beta", "entrypoint"],
        ["monoagent_local", "local"],
        ["paths_plugin", "local"],
        ["cli_plugin", "local"],
        ["programmatic_plugin", "programmatic"],
    ]

    rows = project.plugins("--plugins-dir", "cli_dir")
    rank = {"bundled": 0, "entrypoint": 1, "local": 2}
    assert [rank[row["source"]] for row in rows] == sorted(rank[row["source"]] for row in rows)
    bundled = [row["name"] for row in rows if row["source"] == "bundled"]
    assert bundled == sorted(bundled) and "identity" in bundled
    assert [row["name"] for row in rows if row["source"] != "bundled"] == [
        "alpha", "beta", "monoagent_local", "paths_plugin", "cli_plugin",
    ]
    assert all(row["status"] == "active" for row in rows)
    by_name = {row["name"]: row for row in rows}
    assert by_name["alpha"]["location"] == "zulu-dist 1.0"
    assert by_name["alpha"]["version"] == "1.0"
    assert by_name["paths_plugin"]["location"].endswith("paths_plugin.py")
    assert by_name["beta"]["hooks"] == ["section_identity"]


def test_local_file_overrides_one_section_only(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file("monoagent_local.py", identity_plugin("monoagent_local"))
    sources = project.sources()
    assert {sid: source for sid, source in sources.items() if source == "monoagent_local"} == {"identity": "monoagent_local"}
    assert (sources["core_guardrails"], sources["session"]) == ("guardrails", "session")
    row = project.listed()["monoagent_local"]
    assert (row["source"], row["status"]) == ("local", "active")


# ---------------------------------------------------------------------------- blocking and switches


def test_blocking_a_bundled_plugin_skips_its_import_and_a_replacement_takes_over(project: Project) -> None:
    project.file("monoagent.toml", '[plugins]\nblock = ["identity"]\n')
    project.file("monoagent_local.py", identity_plugin("monoagent_local"))
    row = project.listed()["identity"]
    assert (row["source"], row["status"], row["reason"]) == ("bundled", "blocked", "blocked by plugins.block")
    assert row["hooks"] == []

    probe = project.probe()
    assert "monoagent_plugins.prompt.identity" not in probe["modules"]
    assert "monoagent_plugins.prompt.guardrails" in probe["modules"]
    assert ["identity", "bundled", "blocked"] in probe["records"]
    assert probe["sections"]["identity"] == "monoagent_local"


def test_blocking_a_required_section_without_replacement_is_a_clear_error(project: Project) -> None:
    project.file("monoagent.toml", '[plugins]\nblock = ["identity"]\n')
    result = project.cli("prompt", "hi", ok=False)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "required section 'identity'" in result.stderr
    assert "section_identity" in result.stderr


def test_block_plugins_from_the_environment(project: Project) -> None:
    row = project.listed(MONO_AGENT_BLOCK_PLUGINS="skills,identity")["identity"]
    assert row["status"] == "blocked"


@pytest.fixture
def two_plugins(project: Project) -> Project:
    project.distribution("alpha-dist", {"alpha": "ep_alpha"}, ep_alpha=identity_plugin("alpha"))
    project.distribution("beta-dist", {"beta": "ep_beta"}, ep_beta=identity_plugin("beta"))
    return project


def statuses(rows: dict[str, dict]) -> dict[str, tuple[str, str | None]]:
    return {name: (rows[name]["status"], rows[name]["reason"]) for name in ("alpha", "beta")}


def test_load_plugins_lists_the_only_entry_points_loaded(two_plugins: Project) -> None:
    rows = two_plugins.listed(MONO_AGENT_LOAD_PLUGINS="alpha")
    assert statuses(rows) == {
        "alpha": ("active", None),
        "beta": ("blocked", "not listed in MONO_AGENT_LOAD_PLUGINS"),
    }
    assert rows["identity"]["status"] == "active", "bundled plugins are not affected"
    assert two_plugins.sources(MONO_AGENT_LOAD_PLUGINS="alpha")["identity"] == "alpha"


def test_load_plugins_empty_loads_no_entry_point(two_plugins: Project) -> None:
    rows = two_plugins.listed(MONO_AGENT_LOAD_PLUGINS="")
    assert statuses(rows) == {
        "alpha": ("blocked", "not listed in MONO_AGENT_LOAD_PLUGINS"),
        "beta": ("blocked", "not listed in MONO_AGENT_LOAD_PLUGINS"),
    }
    assert two_plugins.sources(MONO_AGENT_LOAD_PLUGINS="")["identity"] == "identity"


def test_disable_autoload_skips_every_entry_point(two_plugins: Project) -> None:
    rows = two_plugins.listed(MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1")
    assert statuses(rows) == {
        "alpha": ("blocked", "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD=1"),
        "beta": ("blocked", "MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD=1"),
    }
    assert rows["identity"]["status"] == "active"


def test_load_plugins_takes_precedence_over_disable_autoload(two_plugins: Project) -> None:
    rows = two_plugins.listed(MONO_AGENT_LOAD_PLUGINS="beta", MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD="1")
    assert statuses(rows) == {
        "alpha": ("blocked", "not listed in MONO_AGENT_LOAD_PLUGINS"),
        "beta": ("active", None),
    }


def test_block_beats_load_plugins(two_plugins: Project) -> None:
    two_plugins.file("monoagent.toml", '[plugins]\nblock = ["alpha"]\n')
    rows = two_plugins.listed(MONO_AGENT_LOAD_PLUGINS="alpha,beta")
    assert statuses(rows) == {
        "alpha": ("blocked", "blocked by plugins.block"),
        "beta": ("active", None),
    }


def test_load_plugins_naming_an_unknown_plugin_warns(two_plugins: Project) -> None:
    result = two_plugins.cli("plugins", "--json", MONO_AGENT_LOAD_PLUGINS="alpah")
    [line] = stderr_lines(result, "alpah")
    assert "no installed distribution provides" in line
    assert "alpha" in line and "beta" in line


# ---------------------------------------------------------------------------- broken plugins


@pytest.fixture
def broken(project: Project) -> Project:
    project.distribution("broken-dist", {"broken": "ep_broken"}, ep_broken=BROKEN_PLUGIN)
    return project


def test_plugin_that_fails_to_import_is_reported_and_skipped(broken: Project) -> None:
    result = broken.cli("run", "hi")
    assert "you said: hi" in result.stdout
    [line] = stderr_lines(result, "broken")
    assert "'broken'" in line and "broken-dist 1.0" in line
    assert "monoagent_no_such_module_for_tests" in line
    assert "MONO_AGENT_STRICT_PLUGINS=1" in line
    assert "Traceback" not in result.stderr

    row = broken.listed()["broken"]
    assert (row["source"], row["status"]) == ("entrypoint", "failed")
    assert row["reason"].startswith("ModuleNotFoundError")
    assert "monoagent_no_such_module_for_tests" in row["reason"]


def test_strict_plugins_makes_a_failed_import_fatal(broken: Project) -> None:
    result = broken.cli("run", "hi", ok=False, MONO_AGENT_STRICT_PLUGINS="1")
    assert result.returncode != 0
    assert "you said" not in result.stdout
    assert "'broken'" in result.stderr and "broken-dist" in result.stderr
    assert "Traceback" not in result.stderr


def test_local_plugin_that_fails_to_import_is_reported_and_skipped_with_local_failures_warn(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file("monoagent_local.py", BROKEN_PLUGIN)
    result = project.cli("run", "hi", MONO_AGENT_LOCAL_PLUGIN_FAILURES="warn")
    assert "you said: hi" in result.stdout
    [line] = stderr_lines(result, "monoagent_local")
    assert "failed to load" in line
    assert project.listed(MONO_AGENT_LOCAL_PLUGIN_FAILURES="warn")["monoagent_local"]["status"] == "failed"


def test_strict_plugins_makes_a_failed_local_plugin_fatal(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file("monoagent_local.py", BROKEN_PLUGIN)
    result = project.cli("run", "hi", ok=False, MONO_AGENT_STRICT_PLUGINS="1")
    assert result.returncode != 0
    assert "you said" not in result.stdout
    assert "monoagent_local" in result.stderr


def test_strict_plugins_makes_a_failed_local_plugin_fatal_in_python(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "broken_local.py").write_text(BROKEN_PLUGIN)
    with pytest.raises(PluginError, match="'broken_local'"):
        fresh_agent(tmp_path, plugins_dirs=[plugin_dir], env={"MONO_AGENT_STRICT_PLUGINS": "1"})


def test_missing_plugins_dir_is_a_failed_plugin_and_the_others_still_load(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file("monoagent_local.py", identity_plugin("monoagent_local"))
    result = project.cli("--plugins-dir", "no-such-dir", "prompt", "hi", "--json", MONO_AGENT_LOCAL_PLUGIN_FAILURES="warn")
    [line] = stderr_lines(result, "no-such-dir")
    assert "does not exist" in line
    sources = {s["id"]: s["source"] for s in json.loads(result.stdout)["manifest"]["sections"]}
    assert sources["identity"] == "monoagent_local"

    rows = project.listed("--plugins-dir", "no-such-dir", MONO_AGENT_LOCAL_PLUGIN_FAILURES="warn")
    assert rows["monoagent_local"]["status"] == "active"
    assert rows["no-such-dir"]["status"] == "failed"
    assert "does not exist" in rows["no-such-dir"]["reason"]


def test_missing_plugins_dir_is_fatal_in_strict_mode(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist"):
        fresh_agent(tmp_path, plugins_dirs=[tmp_path / "nowhere"], env={"MONO_AGENT_STRICT_PLUGINS": "1"})


# ---------------------------------------------------------------------------- hook errors


class RaisingIdentity:
    @hookimpl
    def section_identity(self, turn):
        raise RuntimeError("identity exploded")


class RaisingRedactWrapper:
    def __init__(self, before_yield: bool) -> None:
        self.before_yield = before_yield

    @hookimpl(wrapper=True)
    def redact(self, text, kind):
        if self.before_yield:
            raise ValueError("redactor exploded early")
        text = yield
        raise ValueError(f"redactor exploded on {text}")


def test_hook_error_names_the_hook_and_the_plugin(tmp_path: Path) -> None:
    agent = fresh_agent(tmp_path, plugins=[("exploding-identity", RaisingIdentity())])
    with pytest.raises(HookError) as info:
        assemble(agent)
    assert (info.value.hook, info.value.plugin) == ("section_identity", "exploding-identity")
    assert "'section_identity'" in str(info.value) and "'exploding-identity'" in str(info.value)
    assert "identity exploded" in str(info.value)
    assert isinstance(info.value.error, RuntimeError)


@pytest.mark.parametrize("before_yield", [True, False], ids=["before-yield", "after-yield"])
def test_hook_error_in_a_wrapper_names_the_wrapper(tmp_path: Path, before_yield: bool) -> None:
    agent = fresh_agent(tmp_path, plugins=[("exploding-redactor", RaisingRedactWrapper(before_yield))])
    with pytest.raises(HookError) as info:
        agent.redact("some text", "event")
    assert (info.value.hook, info.value.plugin) == ("redact", "exploding-redactor")
    assert "redactor exploded" in str(info.value)


# ---------------------------------------------------------------------------- component conflicts


def history_store_plugin(store_name: str) -> types.SimpleNamespace:
    @hookimpl
    def register_history_stores(register):
        register(store_name, lambda agent: None)

    return types.SimpleNamespace(register_history_stores=register_history_stores)


def test_same_history_store_name_from_two_plugins_names_both(tmp_path: Path) -> None:
    agent = fresh_agent(
        tmp_path,
        config={"history": {"store": "memdb"}},
        plugins=[("store-one", history_store_plugin("memdb")), ("store-two", history_store_plugin("memdb"))],
    )
    with pytest.raises(ComponentError) as info:
        agent.history_store  # noqa: B018  (the property raises)
    message = str(info.value)
    assert "history store 'memdb' is registered by two plugins" in message
    assert "'store-one' (programmatic" in message and "'store-two' (programmatic" in message


def test_provider_prefix_taken_from_a_bundled_plugin_names_both(project: Project) -> None:
    project.distribution(
        "rival-dist",
        {"rival": "ep_rival"},
        ep_rival=textwrap.dedent(
            """
            from monoagent import hookimpl

            @hookimpl
            def register_providers(register):
                register("offline", lambda agent, model: None)
            """
        ),
    )
    result = project.cli("run", "hi", ok=False)
    assert result.returncode != 0
    assert "provider 'offline' is registered by two plugins" in result.stderr
    assert "'offline' (bundled monoagent" in result.stderr
    assert "'rival' (entrypoint rival-dist 1.0)" in result.stderr
    assert project.listed()["rival"]["status"] == "active", "listing never needs the registries"


def test_selected_component_of_a_blocked_plugin(tmp_path: Path) -> None:
    agent = fresh_agent(tmp_path, config={"plugins": {"block": ["files"]}})
    with pytest.raises(ComponentError) as info:
        agent.history_store  # noqa: B018  (the property raises)
    message = str(info.value)
    assert "history store 'files'" in message
    assert "plugin 'files'" in message
    assert "blocked" in message


def test_selected_component_of_a_failed_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "pgstore.py").write_text(BROKEN_PLUGIN)
    agent = fresh_agent(tmp_path, config={"history": {"store": "pgstore"}}, plugins_dirs=[plugin_dir], env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    assert "'pgstore'" in capsys.readouterr().err
    with pytest.raises(ComponentError) as info:
        agent.history_store  # noqa: B018  (the property raises)
    message = str(info.value)
    assert "history store 'pgstore'" in message
    assert "plugin 'pgstore'" in message
    assert "failed to load" in message and "ModuleNotFoundError" in message


def test_selected_component_with_an_unrelated_failed_plugin_lists_it(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "pg_history.py").write_text(BROKEN_PLUGIN)
    agent = fresh_agent(tmp_path, config={"history": {"store": "postgres"}}, plugins_dirs=[plugin_dir], env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    with pytest.raises(ComponentError) as info:
        agent.history_store  # noqa: B018  (the property raises)
    message = str(info.value)
    assert "history store 'postgres'" in message
    assert "available: files" in message
    assert "'pg_history' failed" in message


# ---------------------------------------------------------------------------- diagnostics


def test_trace_hooks_prints_calls_and_implementations(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file("monoagent_local.py", identity_plugin("monoagent_local"))
    result = project.cli("prompt", "hi", MONO_AGENT_TRACE_HOOKS="1")
    traces = stderr_lines(result, "monoagent trace:")
    [identity] = [line for line in traces if line.startswith("monoagent trace: section_identity(turn) -> [")]
    assert sorted(identity.split("[", 1)[1].rstrip("]").split(", ")) == ["identity", "monoagent_local", "subagents"]
    assert "monoagent trace: section_core_guardrails(turn) -> [guardrails]" in traces
    assert any(line.startswith("monoagent trace: register_providers(") for line in traces)
    assert not stderr_lines(project.cli("prompt", "hi"), "monoagent trace:")


class MisspeltHook:
    @hookimpl
    def section_identiy(self, turn):
        return None


def test_misspelt_hook_name_warns_with_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fresh_agent(tmp_path, plugins=[("typo", MisspeltHook())])
    err = capsys.readouterr().err
    assert "plugin 'typo' implements 'section_identiy', which is not a monoagent hook" in err
    assert "did you mean 'section_identity'?" in err


def test_misspelt_hook_name_is_an_error_in_strict_mode(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="did you mean 'section_identity'"):
        fresh_agent(tmp_path, plugins=[("typo", MisspeltHook())], env={"MONO_AGENT_STRICT_PLUGINS": "1"})


def test_misspelt_hook_in_a_local_file_warns_through_the_cli(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file(
        "monoagent_local.py",
        "from monoagent import hookimpl\n\n@hookimpl\ndef redcat(text, kind):\n    return text\n",
    )
    [line] = stderr_lines(project.cli("plugins", "--json"), "redcat")
    assert "did you mean 'redact'?" in line


# ---------------------------------------------------------------------------- in-process helpers


def test_fresh_agent_ignores_installed_entry_points(tmp_path: Path) -> None:
    agent = fresh_agent(tmp_path)
    assert all(r.source == "bundled" or r.status != "active" for r in agent.host.records)
    assert all(r.source != "entrypoint" or r.reason for r in agent.host.records)


def test_programmatic_plugin_wins_in_process(tmp_path: Path) -> None:
    class Identity:
        @hookimpl
        def section_identity(self, turn):
            return Section("identity", "IDENTITY FROM python", order=200, source="python")

    assembled = assemble(fresh_agent(tmp_path, plugins=[Identity()]))
    assert "IDENTITY FROM python" in assembled.system_text
    assert {s.id: s.source for s in assembled.manifest.sections}["identity"] == "python"


def test_an_application_that_enables_monoagent_logs_before_the_first_record_sees_them():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from loguru import logger\n"
        "logger.remove(); logger.add(sys.stdout, format='{name}: {message}')\n"
        "logger.enable('monoagent')\n"
        "from monoagent._kernel.log import logger as lazy\n"
        "import monoagent_plugins\n"
        "scope = {'__name__': 'monoagent.example', 'lazy': lazy}\n"
        "exec('def emit():\\n    lazy.warning(\"kept\")\\n', scope)\n"
        "scope['emit']()\n"
        "other = {'__name__': 'monoagent_plugins.example', 'lazy': lazy}\n"
        "exec('def emit():\\n    lazy.warning(\"dropped\")\\n', other)\n"
        "other['emit']()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out == "monoagent.example: kept\n"


LIBRARY_RECORDS = """\
import sys
from loguru import logger
logger.remove(); logger.add(sys.stdout, format='{name}: {message}')
from monoagent._kernel.log import configure_cli, log_as_library, logger as lazy
def emit(module, text):
    scope = {'__name__': module, 'lazy': lazy}
    exec(f'def emit():\\n    lazy.warning({text!r})\\n', scope)
    scope['emit']()
"""


@pytest.mark.parametrize("first", ["register", "log"])
def test_a_plugin_package_that_logs_as_a_library_is_quiet_until_enabled_and_shown_by_the_cli(first: str) -> None:
    import subprocess
    import sys

    register = "log_as_library('acme_plugin')\n"
    before = register if first == "register" else "emit('monoagent.example', 'loads the logger')\n"
    after = "" if first == "register" else register
    script = (
        LIBRARY_RECORDS
        + before
        + after
        + "emit('acme_plugin.tools', 'quiet')\n"
        + "emit('other_package', 'not ours')\n"
        + "logger.enable('acme_plugin')\n"
        + "emit('acme_plugin.tools', 'enabled')\n"
        + "configure_cli(debug=False)\n"
        + "logger.disable('acme_plugin')\n"
        + "emit('acme_plugin.tools', 'on the cli')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout == "other_package: not ours\nacme_plugin.tools: enabled\n"
    assert run.stderr == "monoagent: WARNING: on the cli\n"


def test_registered_takes_the_components_of_the_plugin_away_again(tmp_path: Path) -> None:
    from monoagent._kernel.errors import ComponentError
    from monoagent.testing import registered

    class Extra:
        @hookimpl
        def register_providers(self, register):
            register("extra", lambda agent, model: None)

    agent = fresh_agent(tmp_path)
    with registered(agent, Extra()):
        assert agent.components.component(PROVIDERS, "extra").plugin == "Extra"
    with pytest.raises(ComponentError, match="provider 'extra' is selected"):
        agent.components.component(PROVIDERS, "extra")


def test_a_failed_plugin_with_a_multi_line_error_is_reported_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "chatty.py").write_text("raise RuntimeError('first line\\nsecond line')\n")
    agent = fresh_agent(tmp_path, plugins_dirs=[plugin_dir], env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1
    assert "'chatty'" in lines[0] and "RuntimeError: first line second line" in lines[0]
    [record] = [r for r in agent.host.records if r.name == "chatty"]
    assert record.status == "failed" and "\n" not in record.reason


# ---------------------------------------------------------------------------- typed registrars


def _provider_plugin(call):
    class Registering:
        @hookimpl
        def register_providers(self, register):
            call(register)

    return Registering()


def _runtime(agent, model):
    return None


def test_a_description_may_be_given_positionally_as_documented(tmp_path: Path) -> None:
    agent = fresh_agent(tmp_path, plugins=[("mylab", _provider_plugin(lambda register: register("mylab", _runtime, "My lab's models")))])
    assert agent.components.component(PROVIDERS, "mylab").description == "My lab's models"
    (record,) = [r for r in agent.host.records if r.name == "mylab"]
    assert [(e.kind, e.name, e.description) for e in record.registrations] == [("provider", "mylab", "My lab's models")]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda register: register("mylab"), "missing 1 required positional argument: 'factory'"),
        (lambda register: register("mylab", _runtime, "desc", (), "extra"), "takes from 3 to 5 positional arguments"),
        (lambda register: register(3, _runtime), "the provider name must be a string, not int 3"),
        (lambda register: register("my lab", _runtime), "provider name 'my lab' is not valid"),
        (lambda register: register("mylab:v2", _runtime), "provider name 'mylab:v2' is not valid"),
        (lambda register: register("mylab", "make_runtime"), "the factory of provider 'mylab' must be callable"),
        (lambda register: register("mylab", lambda: None), "cannot be called as factory(agent=..., model=...)"),
        (lambda register: register("mylab", _runtime, description=3), "the description of provider 'mylab' must be a string"),
        (lambda register: (register("mylab", _runtime), register("mylab", _runtime)), "provider 'mylab' is registered twice"),
        (lambda register: register("mylab", _runtime, models="echo"), "the models of provider 'mylab' must be a list of model names"),
    ],
    ids=["too-few", "too-many", "name-type", "name-space", "name-colon", "not-callable", "factory-arity", "description-type", "twice", "models-type"],
)
def test_a_bad_registration_fails_the_plugin_at_load_time_naming_it(tmp_path: Path, capsys, call, expected) -> None:
    agent = fresh_agent(tmp_path, plugins=[("mylab", _provider_plugin(call))])
    (record,) = [r for r in agent.host.records if r.name == "mylab"]
    assert record.status == "failed" and record.registrations == [] and record.hooks == []
    assert expected in record.reason and "plugin 'mylab'" in record.reason
    assert "register(prefix, factory, description='', models=())" in record.reason
    [line] = [line for line in capsys.readouterr().err.splitlines() if "mylab" in line]
    assert "failed to load" in line
    assert not agent.host.pm.has_plugin("mylab"), "a refused plugin is not left half-registered"
    assert agent.run_sync("the rest loads").text.startswith("[offline:echo]")
    with pytest.raises(ComponentError, match=r"its plugin 'mylab' .* is failed to load|plugin 'mylab'"):
        agent.components.component(PROVIDERS, "mylab")


def test_a_bad_registration_is_fatal_in_strict_mode(tmp_path: Path) -> None:
    plugin = _provider_plugin(lambda register: register("mylab", lambda: None))
    with pytest.raises(PluginError, match=r"'mylab'.*cannot be called as factory"):
        fresh_agent(tmp_path, plugins=[("mylab", plugin)], env={"MONO_AGENT_STRICT_PLUGINS": "1"})


class BadTools:
    @hookimpl
    def register_tools(self, register):
        register("clock", lambda context: "noon")


class BadSections:
    @hookimpl
    def register_config_sections(self, register):
        register("runtime", object)


class OldStyleHandler:
    @hookimpl
    def register_tools(self, register):
        register(ToolSpec("clock", "The time."), lambda turn, arguments: "noon")


class BadPolicy:
    @hookimpl
    def register_compaction_policies(self, register):
        register("none", lambda agent: None)


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (BadTools(), "register(func) or register(spec, handler) in register_tools wrongly: expected a function decorated with "
                    "@monoagent.tool or a monoagent.ToolSpec, not str 'clock'"),
        (BadSections(), "config section 'runtime' needs an attrs class"),
        (BadPolicy(), "compaction policy name 'none' selects no compaction policy; rename it"),
        (OldStyleHandler(), "<lambda>(turn, arguments) cannot be called as handler(context): missing a required argument"),
    ],
    ids=["tool-without-spec", "section-not-attrs", "reserved-policy", "handler-arity"],
)
def test_every_registry_checks_its_registrations_at_load_time(tmp_path: Path, plugin, expected) -> None:
    agent = fresh_agent(tmp_path, plugins=[("bad", plugin)])
    (record,) = [r for r in agent.host.records if r.name == "bad"]
    assert record.status == "failed" and expected in record.reason


def test_the_registrar_knows_every_kernel_key() -> None:
    from monoagent._kernel.config_keys import iter_keys
    from monoagent._kernel.registrars import kernel_keys

    assert kernel_keys() == {key.path for key in iter_keys()}


def test_a_config_section_the_kernel_owns_fails_only_its_plugin(tmp_path: Path) -> None:
    import attrs

    @attrs.define
    class Runtime:
        model: str = "x"

    class Claims:
        @hookimpl
        def register_config_sections(self, register):
            register("runtime", Runtime)

    agent = fresh_agent(tmp_path, plugins=[("claims", Claims())])
    (record,) = [r for r in agent.host.records if r.name == "claims"]
    assert record.status == "failed" and "config section 'runtime' declares runtime.model, a key the kernel's table 'runtime' owns" in record.reason


def test_plugins_lists_what_each_plugin_registers_with_its_description(project: Project) -> None:
    project.file("monoagent.toml", "")
    project.file(
        "monoagent_local.py",
        textwrap.dedent(
            """
            from monoagent import ToolSpec, hookimpl

            @hookimpl
            def register_providers(register):
                register("mylab", lambda agent, model: None, "My lab's models")

            @hookimpl
            def register_tools(register):
                register(ToolSpec("clock", "The current UTC time.\\nSecond line."), lambda context: "noon")
            """
        ),
    )
    row = project.listed()["monoagent_local"]
    assert row["registers"] == [
        {"kind": "provider", "name": "mylab", "description": "My lab's models"},
        {"kind": "tool", "name": "clock", "description": "The current UTC time.\nSecond line."},
    ]
    listed = project.listed()
    assert {"kind": "channel", "name": "console", "description": "interactive terminal chat (monoagent chat)"} in listed["console"]["registers"]
    assert {"kind": "config section", "name": "providers.anthropic", "description": "the Anthropic Messages API."} in listed["anthropic"]["registers"]
    text = project.cli("plugins").stdout
    assert "provider mylab: My lab's models" in text
    assert "tool clock: The current UTC time." in text and "Second line." not in text


# ---------------------------------------------------------------------------- pluggy's own machinery


class FutureHook:
    @hookimpl(optionalhook=True)
    def section_from_the_future(self, turn):
        return None


def test_an_optionalhook_for_a_hook_this_version_lacks_is_not_reported(tmp_path: Path, capsys) -> None:
    agent = fresh_agent(tmp_path, plugins=[("future", FutureHook())], env={"MONO_AGENT_STRICT_PLUGINS": "1"})
    assert "section_from_the_future" not in capsys.readouterr().err
    assert {r.name: r.status for r in agent.host.records}["future"] == "active"


def test_an_unknown_hook_is_reported_once_per_plugin(tmp_path: Path, capsys) -> None:
    agent = fresh_agent(tmp_path, plugins=[("typo", MisspeltHook())])
    agent.register(FutureHook(), "future")
    agent.register(Section, "another")  # any later registration runs pluggy's check_pending again
    assert capsys.readouterr().err.count("section_identiy") == 1


def test_blocking_uses_pluggys_set_blocked(tmp_path: Path) -> None:
    class Identity:
        @hookimpl
        def section_identity(self, turn):
            return Section("identity", "never", order=200)

    agent = fresh_agent(tmp_path, config={"plugins": {"block": ["identity", "late"]}})
    assert agent.host.pm.is_blocked("identity") and agent.host.pm.get_plugin("identity") is None
    agent.register(Identity(), "late")
    assert {r.name: (r.status, r.reason) for r in agent.host.records}["late"] == ("blocked", "blocked by plugins.block")
    assert not agent.host.pm.has_plugin("late")


def _deprecating_host(env: dict[str, str] | None = None):
    from monoagent import HookDeprecationWarning, hookspec
    from monoagent._kernel.host import PluginHost

    class Deprecated:
        @hookspec(warn_on_impl=HookDeprecationWarning("old_section is deprecated since 0.2; implement extra_sections"))
        def old_section(self, turn):
            """A hook the kernel deprecated."""

    host = PluginHost(env or {})
    host.pm.add_hookspecs(Deprecated)
    return host


class ImplementsOldSection:
    @hookimpl
    def old_section(self, turn):
        return None


def test_a_deprecated_hook_warns_its_implementers_where_they_implement_it() -> None:
    from monoagent import HookDeprecationWarning

    host = _deprecating_host()
    with pytest.warns(HookDeprecationWarning, match="old_section is deprecated since 0.2") as caught:
        record = host.register_programmatic(ImplementsOldSection(), "old")
    assert record.status == "active"
    assert caught[0].filename == __file__ and caught[0].lineno == inspect.unwrap(ImplementsOldSection.old_section).__code__.co_firstlineno


def test_a_deprecation_made_an_error_fails_the_plugin(capsys) -> None:
    import warnings

    from monoagent import HookDeprecationWarning

    host = _deprecating_host()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookDeprecationWarning)
        record = host.register_programmatic(ImplementsOldSection(), "old")
    assert record.status == "failed" and "HookDeprecationWarning: old_section is deprecated" in record.reason
    assert not host.pm.has_plugin("old")


# ---------------------------------------------------------------------------- sections of plugins that are not active


def warning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("monoagent: warning: config section")]


def test_the_section_of_a_blocked_bundled_plugin_is_a_warning_naming_it(tmp_path: Path, capsys) -> None:
    config = {"plugins": {"block": ["anthropic"]}, "providers": {"anthropic": {"maxOutputTokens": 5}}}
    agent = fresh_agent(tmp_path, config=config)
    assert warning_lines(capsys.readouterr().err) == [
        "monoagent: warning: config section 'providers.anthropic' (in python) belongs to plugin 'anthropic', "
        "which is blocked (blocked by plugins.block); it is ignored"
    ]
    assert "providers.anthropic" not in agent.config.sections
    assert agent.run_sync("still works").text

    with pytest.raises(ConfigError, match=r"providers\.anthropic: section of plugin 'anthropic', which is blocked .*MONO_AGENT_STRICT_PLUGINS=1"):
        fresh_agent(tmp_path, config=config, env={"MONO_AGENT_STRICT_PLUGINS": "1"})


def test_a_section_nobody_declares_is_still_an_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"providers\.antropic: unknown key .*did you mean 'anthropic'"):
        fresh_agent(tmp_path, config={"providers": {"antropic": {"apiKey": "x"}}})
    with pytest.raises(ConfigError, match=r"slack: unknown key"):
        fresh_agent(tmp_path, config={"slack": {"token": "x"}})


def test_the_section_of_a_failed_or_missing_plugin_is_a_warning_naming_it(tmp_path: Path, capsys) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "slack.py").write_text(BROKEN_PLUGIN)
    fresh_agent(tmp_path, config={"slack": {"token": "x"}}, plugins_dirs=[plugin_dir], env={"MONO_AGENT_LOCAL_PLUGIN_FAILURES": "warn"})
    [line] = warning_lines(capsys.readouterr().err)
    assert "config section 'slack' (in python) belongs to plugin 'slack', which is failed (ModuleNotFoundError" in line

    fresh_agent(tmp_path, config={"plugins": {"block": ["telegram"]}, "providers": {"telegram": {"token": "x"}}})
    [line] = warning_lines(capsys.readouterr().err)
    assert "'providers.telegram' (in python) belongs to plugin 'telegram', which is blocked by plugins.block and not installed" in line


def test_a_distribution_declares_its_sections_so_they_are_known_while_blocked(project: Project) -> None:
    project.distribution("lab-dist", {"lab": "ep_lab"}, ep_lab=textwrap.dedent(
        """
        import attrs
        from monoagent import hookimpl

        @attrs.define
        class LabConfig:
            endpoint: str = "http://127.0.0.1:1"

        @hookimpl
        def register_config_sections(register):
            register("providers.mylab", LabConfig)
        """
    ))
    info = next(project.site.glob("lab_dist-*.dist-info"))
    with (info / "entry_points.txt").open("a") as handle:
        handle.write('\n[monoagent.config_sections]\nproviders.mylab = ep_lab\n')
    project.file("monoagent.toml", '[providers.mylab]\nendpoint = "http://lab"\n')
    project.cli("config", "validate")
    project.file("monoagent.toml", '[plugins]\nblock = ["lab"]\n\n[providers.mylab]\nendpoint = "http://lab"\n')
    result = project.cli("prompt", "hi")
    [line] = warning_lines(result.stderr)
    assert "config section 'providers.mylab' (in file " in line
    assert "belongs to plugin 'lab', which is blocked (blocked by plugins.block); it is ignored" in line


def test_the_bundled_plugins_declare_exactly_the_sections_they_register() -> None:
    from importlib.metadata import entry_points

    from monoagent._kernel.config_keys import kernel_tables, table_keys
    from monoagent._kernel.host import PluginHost

    host = PluginHost({"MONO_AGENT_DISABLE_PLUGIN_AUTOLOAD": "1", "MONO_AGENT_STRICT_PLUGINS": "1"})
    host.load_entry_points()
    tables = kernel_tables()
    registered = {}
    for path, cls in host.config_sections().items():
        (owner,) = [r.name for r in host.records for e in r.registrations if e.kind == "config section" and e.name == path]
        for key in sorted(table_keys(cls)) if path in tables else [None]:
            registered[f"{path}.{key}" if key else path] = owner  # a kernel table's keys are declared one by one
    modules = {ep.value: ep.name for ep in entry_points(group="monoagent") if ep.dist and ep.dist.name == "monoagent"}
    declared = {
        ep.name: modules.get(ep.value, ep.value)
        for ep in entry_points(group="monoagent.config_sections") if ep.dist and ep.dist.name == "monoagent"
    }
    assert declared == registered, "pyproject.toml's [project.entry-points.\"monoagent.config_sections\"] is stale"


def test_keys_a_blocked_plugin_adds_to_a_kernel_table_are_a_warning_and_a_typo_still_an_error(tmp_path: Path, capsys) -> None:
    config = {"plugins": {"block": ["files"]}, "history": {"store": "files", "maxStageBytes": 65536}}
    fresh_agent(tmp_path, config=config)
    [line] = warning_lines(capsys.readouterr().err)
    assert "config section 'history.maxStageBytes' (in python) belongs to plugin 'files', which is blocked" in line
    with pytest.raises(ConfigError, match=r"history\.maxMesages: unknown key"):
        fresh_agent(tmp_path, config={"plugins": {"block": ["files"]}, "history": {"maxMesages": 8}})


def test_a_key_inside_an_active_plugins_section_is_not_taken_for_a_blocked_plugin(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"providers\.offline\.session: unknown key"):
        fresh_agent(tmp_path, config={"plugins": {"block": ["session"]}, "providers": {"offline": {"session": 1}}})
