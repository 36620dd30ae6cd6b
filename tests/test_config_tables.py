"""Config keys that hold tables: a list of tables (``cron.jobs``) and a table of named tables (``webhook.hooks``).

Each table is checked against its attrs class with problems named by the item's path, secrets in
them are masked by ``config show``, and the reference docs list their keys.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import tomli_w

from devtools.docgen import _key_table
from monoagent._cli.starter import starter_toml
from monoagent._kernel.config import setting
from monoagent._kernel.config_keys import iter_keys, value_sources
from monoagent._kernel.config_loading import load_config
from monoagent._kernel.errors import ConfigError


@attrs.define
class Job:
    """One job."""

    schedule: str = setting("* * * * *", doc="When.")
    tries: int = setting(1, doc="How often.", min=1, max=5)


@attrs.define
class Hook:
    """One hook."""

    secret: str | None = setting(None, doc="Shared secret.", secret=True)
    notify: list[str] = setting(doc="Where to.", factory=list)


@attrs.define
class Tables:
    """tables: a section with tables in it."""

    jobs: list[Job] = setting(doc="Jobs.", factory=list)
    hooks: dict[str, Hook] = setting(doc="Hooks by name.", factory=dict)


SECTIONS = {"tables": Tables}


def load(tmp_path: Path, data: dict) -> object:
    file = tmp_path / "monoagent.toml"
    file.write_text(tomli_w.dumps(data))
    return load_config(file, env={}, plugin_sections=SECTIONS)


def test_tables_are_structured_into_their_classes(tmp_path: Path) -> None:
    config = load(tmp_path, {"tables": {"jobs": [{"schedule": "0 9 * * *"}, {"tries": 3}],
                                        "hooks": {"deploy": {"secret": "s3", "notify": ["ops"]}}}})
    section = config.section("tables")
    assert section.jobs == [Job("0 9 * * *", 1), Job("* * * * *", 3)]
    assert section.hooks == {"deploy": Hook("s3", ["ops"])}


def test_each_problem_names_the_item_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, {"tables": {"jobs": [{"schedule": "0 9 * * *"}, {"tries": 9, "scheduel": "x"}],
                                   "hooks": {"deploy": {"secret": 5}, "bad name!": {}}}})
    text = str(caught.value)
    assert "tables.jobs[1].tries = 9" in text and "from 1 to 5" in text
    assert "tables.jobs[1].scheduel: unknown key" in text and "did you mean 'schedule'" in text
    assert "tables.hooks.deploy.secret = 5" in text and "wrong type (int)" in text
    assert "tables.hooks.bad name!" in text and "not an allowed name" in text


@pytest.mark.parametrize("value", [{"schedule": "x"}, "x", 3])
def test_a_list_of_tables_must_be_a_list_of_tables(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match=r"tables\.jobs"):
        load(tmp_path, {"tables": {"jobs": value}})


@pytest.mark.parametrize("value", [[{"secret": "x"}], "x", 3])
def test_a_table_of_named_tables_must_be_a_table(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match=r"tables\.hooks"):
        load(tmp_path, {"tables": {"hooks": value}})


def test_config_show_masks_a_secret_inside_a_named_table(tmp_path: Path) -> None:
    config = load(tmp_path, {"tables": {"hooks": {"deploy": {"secret": "hunter2", "notify": ["ops"]}}}})
    rows = {path: value for path, value, _ in value_sources(config)}
    assert rows["tables.hooks"] == {"deploy": {"secret": "<set, not shown>", "notify": ["ops"]}}
    assert "hunter2" not in repr(rows)


def test_reference_docs_list_the_keys_of_each_table() -> None:
    text = "\n".join(_key_table(iter_keys(Tables, "tables.")))
    assert "`tables.jobs[].schedule`" in text and "`tables.hooks.<name>.secret`" in text
    assert "a list of tables (keys: schedule, tries)" in text


def test_starter_file_leaves_tables_to_the_docs() -> None:
    text = starter_toml(SECTIONS)
    assert "# jobs: tables of their own" in text
    import tomllib

    assert tomllib.loads(text)["tables"] == {}
