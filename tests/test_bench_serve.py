"""bench/serve.py runs end to end with tiny numbers, and its null server answers pipelined requests."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench_serve():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("serve")
    finally:
        sys.path.remove(str(BENCH))


def test_a_quick_run_measures_every_scenario_without_errors(tmp_path):
    run = subprocess.run([sys.executable, str(BENCH / "serve.py"), "--quick", "--json", "--requests", "32", "--warmup", "1",
                          "--clients", "4", "--tmp-root", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert set(report["scenarios"]) == {"null", "bare", "distinct", "one", "inprocess"}
    for name, row in report["scenarios"].items():
        assert row["requests"] == 32 and row["latency_ms"]["n"] == 32, name
        assert row["errors"] == 0, (name, row["error_kinds"])
    assert report["exit_codes"] == {"distinct": 0, "one": 0, "bare": 0, "null": 0}  # each server drained on SIGTERM
    assert report["record_bytes"] > report["response_bytes"] > 0  # the floor was measured on the history record's size
    assert report["commit_floor_ms"]["n"] == 30
    assert report["verdict"].startswith("VERDICT serve: " + ("PASS" if report["pass"] else "FAIL"))
    assert not list(tmp_path.iterdir()), "the state directory is removed"


def test_the_null_server_answers_each_pipelined_request_once(bench_serve):
    written: list[bytes] = []

    class Transport:
        def write(self, data: bytes) -> None:
            written.append(data)

    protocol = bench_serve.CannedAnswer(b"ANSWER")
    protocol.connection_made(Transport())
    stream = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
              b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
              b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc")
    for i in range(0, len(stream), 7):  # split across reads at arbitrary points, bodies included
        protocol.data_received(stream[i:i + 7])
    assert written == [b"ANSWER"] * 3 and protocol.buffer == b""
