"""The run-artifact writer holds a run's events until it settles and writes them in one go.

These pin what the batching must keep: a flush writes the events of runs still in flight (their
later events are appended), an event after a run settled reaches the file without a flush, and a
run directory removed under a running process is created again.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from waiting import wait_until

from monoagent._kernel.model import RunEvent
from monoagent_plugins.observability.artifacts import ArtifactWriter, run_file


def lines_of(root: Path, run_id: str) -> list[dict]:
    return [json.loads(line) for line in run_file(root, run_id).read_text(encoding="utf-8").splitlines()]


def test_a_flush_writes_a_run_in_flight_and_its_later_events_are_appended(tmp_path):
    own = ArtifactWriter()
    own.submit(tmp_path, RunEvent("run_started", "r1", "c", 1, 1.0, {"model": "m"}))
    own.submit(tmp_path, RunEvent("text_delta", "r1", "c", 2, 1.0, {"text": "hello"}))
    assert own.flush()
    assert [line["type"] for line in lines_of(tmp_path, "r1")] == ["run_started"]
    own.submit(tmp_path, RunEvent("run_committed", "r1", "c", 3, 1.0, {}))
    own.submit(tmp_path, RunEvent("run_completed", "r1", "c", 4, 1.0, {}))
    assert own.flush()
    lines = lines_of(tmp_path, "r1")
    assert [line["type"] for line in lines] == ["run_started", "run_committed", "run_text", "run_completed"]
    assert lines[2]["data"]["text"] == "hello"


def wait_for_lines(root: Path, run_id: str, count: int) -> list[dict]:
    """The run file's lines once it has ``count`` of them (a bounded wait: the deadline only ends a failing test)."""
    path = run_file(root, run_id)
    wait_until(lambda: path.exists() and path.read_bytes().count(b"\n") >= count, f"{count} lines in {path.name}")
    return lines_of(root, run_id)


def test_a_run_that_calls_a_tool_shows_how_it_got_there_before_it_ends(tmp_path):
    """A tool may run long or take the process down: the events up to the call are handed over without a flush."""
    own = ArtifactWriter()
    own.submit(tmp_path, RunEvent("run_started", "r1", "c", 1, 1.0, {}))
    own.submit(tmp_path, RunEvent("provider_request", "r1", "c", 2, 1.0, {}))
    own.submit(tmp_path, RunEvent("tool_call", "r1", "c", 3, 1.0, {"name": "shell"}))
    assert [line["type"] for line in wait_for_lines(tmp_path, "r1", 3)] == ["run_started", "provider_request", "tool_call"]


def test_a_long_run_hands_its_events_over_in_bounded_batches(tmp_path):
    from monoagent_plugins.observability.artifacts import HELD_EVENTS_MAX

    own = ArtifactWriter()
    for seq in range(HELD_EVENTS_MAX):
        own.submit(tmp_path, RunEvent("runtime_warning", "r1", "c", seq, 1.0, {"code": "x"}))
    assert len(wait_for_lines(tmp_path, "r1", HELD_EVENTS_MAX)) == HELD_EVENTS_MAX


def test_an_event_after_the_run_settled_is_written_without_a_flush(tmp_path):
    own = ArtifactWriter()
    own.submit(tmp_path, RunEvent("run_started", "r1", "c", 1, 1.0, {}))
    own.submit(tmp_path, RunEvent("run_completed", "r1", "c", 2, 1.0, {}))
    own.submit(tmp_path, RunEvent("notify_delivered", "r1", "c", 3, 1.0, {"destination": "ops"}))
    expected = ["run_started", "run_text", "run_completed", "notify_delivered"]
    path = run_file(tmp_path, "r1")
    wait_until(lambda: path.exists() and path.read_bytes().count(b"\n") >= len(expected), f"{len(expected)} lines in {path.name}")
    assert [line["type"] for line in lines_of(tmp_path, "r1")] == expected


def test_a_removed_run_directory_is_created_again_owner_only(tmp_path):
    own = ArtifactWriter()
    root = tmp_path / "artifacts"
    for run_id in ("r1", "r2"):
        own.submit(root, RunEvent("run_started", run_id, "c", 1, 1.0, {}))
        own.submit(root, RunEvent("run_completed", run_id, "c", 2, 1.0, {}))
        assert own.flush()
        assert [line["type"] for line in lines_of(root, run_id)] == ["run_started", "run_text", "run_completed"]
        assert stat.S_IMODE((root / "runs").stat().st_mode) == 0o700
        assert stat.S_IMODE(run_file(root, run_id).stat().st_mode) == 0o600
        for path in (root / "runs").iterdir():
            path.unlink()
        (root / "runs").rmdir()
        root.rmdir()


def test_an_event_line_is_what_cattrs_makes_of_it_whatever_the_data_holds():
    import enum

    from monoagent._kernel.model import Message, ToolCall
    from monoagent._kernel.serial import unstructure
    from monoagent_plugins.observability.artifacts import event_record

    class Colour(enum.Enum):
        RED = "red"

    class Name(str):
        pass

    deep: dict = {}
    for _ in range(5000):
        deep = {"d": deep}
    datas = [
        {},
        {"text": "héllo", "n": 1, "x": 1.5, "ok": True, "none": None, "list": [1, [2, {"k": "v"}]], "tuple": (1, ("a",))},
        {1: "int key", None: "none key"},
        {"call": ToolCall("c1", "lookup", {"q": "x"}), "messages": (Message("user", "hi"),)},
        {"colour": Colour.RED, "raw": b"\x00\xff", "name": Name("n"), "nested": [Colour.RED, {"b": b"x"}]},
        {Name("k"): 1},
        deep,
    ]
    for data in datas:
        event = RunEvent("tool_call", "r1", "c", 3, 1.25, data)
        try:
            expected = json.dumps(unstructure(event), ensure_ascii=False, separators=(",", ":"), default=str)
        except RecursionError:
            expected = "RecursionError"
        try:
            got = json.dumps(event_record(event), ensure_ascii=False, separators=(",", ":"), default=str)
        except RecursionError:
            got = "RecursionError"
        assert got == expected


def test_a_runs_directory_swapped_for_a_symlink_is_not_written_through(tmp_path):
    """``artifacts/runs`` becomes a symlink to another directory: the run's lines are not written there (a log line
    says why), the files already written stay; the tool-output sink refuses a symlinked directory the same way."""
    from monoagent import SymlinkedPath, TextBlock, ToolResult
    from monoagent._kernel.log import logger
    from monoagent_plugins.observability.artifacts import ToolOutputSink

    own = ArtifactWriter()
    root = tmp_path / "artifacts"
    own.submit(root, RunEvent("run_started", "r1", "c", 1, 1.0, {}))
    own.submit(root, RunEvent("run_completed", "r1", "c", 2, 1.0, {}))
    assert own.flush()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "runs").rename(root / "runs-moved")
    (root / "runs").symlink_to(elsewhere)
    warnings: list[str] = []
    sink = logger.add(lambda message: warnings.append(message.record["message"]), level="WARNING")
    logger.enable("monoagent_plugins")
    try:
        own.submit(root, RunEvent("run_started", "r2", "c", 1, 1.0, {}))
        own.submit(root, RunEvent("run_completed", "r2", "c", 2, 1.0, {}))
        own.flush()
    finally:
        logger.disable("monoagent_plugins")
        logger.remove(sink)
    assert list(elsewhere.iterdir()) == []
    assert any(f"{root / 'runs'} is a symlink; refused: below {root}" in line for line in warnings), warnings
    assert (root / "runs-moved" / "r1.jsonl").read_text().count("\n") == 3
    (root / "tool-output").symlink_to(elsewhere)
    try:
        ToolOutputSink(root, "r3").save(ToolResult("call-1", "t", "x"), TextBlock("x"))
    except SymlinkedPath as exc:
        assert f"{root / 'tool-output'} is a symlink" in str(exc)
    else:
        raise AssertionError("the tool-output sink wrote through a symlinked directory")
    assert list(elsewhere.iterdir()) == []


def test_a_stored_artifact_is_not_written_through_a_symlinked_directory(tmp_path):
    """The attachment store under the history directory: ``artifacts/`` a symlink to another directory is refused
    (the artifact written before stays), nothing is written through it."""
    from monoagent import SymlinkedPath
    from monoagent_plugins.observability.artifact_store import artifact_path, store_text

    history = tmp_path / "history"
    assert store_text(history, "art_" + "a" * 24, "first")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (history / "artifacts").rename(history / "artifacts-moved")
    (history / "artifacts").symlink_to(elsewhere)
    try:
        store_text(history, "art_" + "b" * 24, "second")
    except SymlinkedPath as exc:
        assert f"{history / 'artifacts'} is a symlink" in str(exc)
    else:
        raise AssertionError("the artifact was written through a symlinked directory")
    assert list(elsewhere.iterdir()) == []
    assert (history / "artifacts-moved" / artifact_path(history, "art_" + "a" * 24).name).read_text() == "first"
