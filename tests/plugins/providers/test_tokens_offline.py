"""tiktoken offline: its first use downloads the encoding; that fails once, in one line, and is remembered.

Each run is a real ``monoagent run`` subprocess whose HTTPS goes through a proxy on 127.0.0.1 that
accepts each connection and closes it (so the download fails at once, no network, and every
attempt is counted). tiktoken itself when installed (its encoding cache pointed at an empty
folder); otherwise a stand-in ``tiktoken`` that fetches the same URL with urllib, as tiktoken
fetches it with requests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

STAND_IN = '''
import urllib.request

def get_encoding(name):
    urllib.request.urlopen(f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken", timeout=30).read()
    raise AssertionError("the download cannot succeed in this test")
'''


class ClosingProxy:
    """A TCP listener on 127.0.0.1 that closes every connection it accepts, counting them."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self.socket.close()
        self.thread.join(timeout=10)


@pytest.fixture
def proxy() -> Iterator[ClosingProxy]:
    server = ClosingProxy()
    yield server
    server.close()


@pytest.fixture(params=["tiktoken", "stand-in"])
def tiktoken_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "tiktoken":
        if importlib.util.find_spec("tiktoken") is None:
            pytest.skip("tiktoken (the tokens extra) is not installed")
        return ""
    package = tmp_path / "stand-in" / "tiktoken"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    return str(package.parent)


def run(tmp_path: Path, proxy: ClosingProxy, extra_path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONO_AGENT_", "TIKTOKEN_")) and k.lower() not in (
        "https_proxy", "http_proxy", "all_proxy", "no_proxy")}
    env.update(
        MONO_AGENT_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_CACHE_HOME=str(tmp_path / "cache"),
        TIKTOKEN_CACHE_DIR=str(tmp_path / "tiktoken-cache"), HTTPS_PROXY=f"http://127.0.0.1:{proxy.port}",
        https_proxy=f"http://127.0.0.1:{proxy.port}", MONO_AGENT_MODEL="offline:echo",
    )
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra_path, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "monoagent", "run", "hi"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def tiktoken_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if "tiktoken" in line]


def test_an_offline_download_is_tried_once_said_in_one_line_and_remembered(tmp_path: Path, proxy: ClosingProxy, tiktoken_path: str) -> None:
    first = run(tmp_path, proxy, tiktoken_path)
    assert first.returncode == 0, first.stderr
    assert "you said: hi" in first.stdout
    [line] = tiktoken_lines(first)
    assert line.startswith("monoagent: WARNING: tiktoken could not load its cl100k_base encoding (")
    assert "token counts are estimated at 4 UTF-8 bytes a token, tried again after" in line and len(line) < 500
    assert "Traceback" not in first.stderr and len(first.stderr.splitlines()) <= 2, first.stderr
    remembered = tmp_path / "cache" / "monoagent" / "tiktoken-unavailable.json"
    assert f"(remembered in {remembered})" in line
    record = json.loads(remembered.read_text())
    assert record["encoding"] == "cl100k_base" and record["retryAt"] - record["failedAt"] == 3600
    tried = proxy.accepted
    assert tried >= 1

    second = run(tmp_path, proxy, tiktoken_path)
    assert second.returncode == 0 and tiktoken_lines(second) == [], second.stderr
    assert proxy.accepted == tried, "within the retry time no process tries the download again"

    record["retryAt"] = time.time() - 1  # the retry time has come
    remembered.write_text(json.dumps(record))
    third = run(tmp_path, proxy, tiktoken_path)
    assert len(tiktoken_lines(third)) == 1 and proxy.accepted > tried


def test_a_remembered_failure_from_the_future_beyond_the_retry_time_is_not_trusted(tmp_path: Path, proxy: ClosingProxy, tiktoken_path: str) -> None:
    remembered = tmp_path / "cache" / "monoagent" / "tiktoken-unavailable.json"
    remembered.parent.mkdir(parents=True)
    remembered.write_text(json.dumps({"encoding": "cl100k_base", "failedAt": 0, "retryAt": time.time() + 10 * 86400, "reason": "x"}))
    done = run(tmp_path, proxy, tiktoken_path)
    assert len(tiktoken_lines(done)) == 1 and proxy.accepted >= 1, done.stderr
