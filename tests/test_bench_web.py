"""bench/web.py runs end to end with tiny numbers (or says plainly that it skipped), and reads Server-Sent Events."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench_web():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("web")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.browser
def test_a_quick_run_measures_both_channels_and_the_page(tmp_path, bench_web):
    run = subprocess.run([sys.executable, str(BENCH / "web.py"), "--quick", "--json", "--turns", "2", "--cpu-turns", "2",
                          "--rounds", "1", "--loads", "1", "--tmp-root", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    if "skipped" in report:  # no Chromium or Playwright here: said so, nothing measured
        assert os.environ.get("MONOAGENT_REQUIRE_BROWSER") != "1", report["skipped"]
        assert bench_web.missing() is not None and report["verdict"].startswith("VERDICT web: SKIP - ")
        pytest.skip(report["skipped"])
    assert report["first_token_ms"]["web"]["n"] == 2 and report["first_token_ms"]["openai"]["n"] == 2
    assert report["first_token_ms"]["web"]["min"] > 0 and report["first_token_ms"]["openai"]["min"] > 0
    assert set(report["cpu_ms_per_turn"]) == {"web", "openai_stream", "openai", "ratio", "ratio_per_round"}
    assert len(report["cpu_ms_per_turn"]["ratio_per_round"]) == 1
    assert report["turn_wall_ms"]["web"]["n"] == 2
    page = report["page"]
    paths = [row["path"] for row in page["requests"]]
    assert "/web/" in paths and "/web/app.js" in paths and "/web/api/session" in paths
    assert page["bytes"] >= page["files_bytes_on_disk"] > 0  # headers on top of the files, nothing compressed
    assert 0 < page["dom_content_loaded_ms"]["median"] <= page["signin_ms"]["median"]
    assert page["threads_ms"]["n"] == 1
    assert report["exit_code"] == 0  # the server drained on SIGTERM
    assert report["verdict"].startswith("VERDICT web: " + ("PASS" if report["pass"] else "FAIL"))
    assert not list(tmp_path.iterdir()), "the state directory is removed"


def test_server_sent_events_are_read_event_by_event(bench_web):
    lines = ["id: 7", "event: snapshot", 'data: {"thread": 1}', "", ": keepalive", "", "event: text", 'data: {"text":',
             'data: "a"}', "", "event: turn_finished", 'data: {"submission_id": "s"}', ""]
    assert list(bench_web.sse(iter(lines))) == [("snapshot", {"thread": 1}), ("text", {"text": "a"}),
                                                ("turn_finished", {"submission_id": "s"})]


def test_without_chromium_it_skips_with_a_message(bench_web, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench_web, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setattr(sys, "argv", ["web.py", "--json", "--tmp-root", str(tmp_path)])
    bench_web.main()
    report = json.loads(capsys.readouterr().out)
    assert report["pass"] is None and "no-chromium is missing" in report["skipped"]
    assert report["verdict"] == f"VERDICT web: SKIP - {tmp_path / 'no-chromium'} is missing (apt-get install -y chromium)"
    assert not list(tmp_path.iterdir())
