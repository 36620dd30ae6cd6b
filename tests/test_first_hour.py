"""Small first-hour surprises (issue 24, item 19), through the real command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_exit_codes import monoagent, write

from monoagent import ExitCode


@pytest.mark.parametrize(("toml", "pointed"), [
    ('[agents.helper]\nmodel = "offline:echo"\n', "agents.helper: unknown key (in file {file}); did you mean [agents.named.helper]?"),
    ('[mcp.files]\ncommand = "x"\n', "mcp.files: unknown key (in file {file}); did you mean [mcp.servers.files]?"),
    ('[notify.ops]\ntype = "file"\n', "notify.ops: unknown key (in file {file}); did you mean [notify.destinations.ops]?"),
], ids=["agents", "mcp", "notify"])
def test_a_named_table_one_level_too_high_points_to_where_it_belongs(tmp_path: Path, toml: str, pointed: str) -> None:
    file = write(tmp_path, "monoagent.toml", toml)
    done = monoagent(tmp_path, "run", "hi")
    assert done.returncode == ExitCode.USAGE
    assert pointed.format(file=file) in done.stderr


def test_a_misspelt_key_still_gets_the_close_one_not_a_table(tmp_path: Path) -> None:
    file = write(tmp_path, "monoagent.toml", "[agents]\nmaxDept = 2\n")
    done = monoagent(tmp_path, "run", "hi")
    assert f"agents.maxDept: unknown key (in file {file}); did you mean 'maxDepth'?" in done.stderr
