"""The server of ``monoagent serve`` itself: the auth default, admission events, the access log, ``--check``, readiness.

Each test runs the real command as a subprocess on 127.0.0.1 (port 0) and talks real HTTP to it.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys

import httpx
from serving import TOKEN, Server, ask_in_background, auth, completion, history, serve_env, serve_once, slow_server


def without_tokens(tmp_path, **extra: str) -> dict[str, str]:
    env = serve_env(tmp_path, **extra)
    del env["MONO_AGENT_OPENAI_API_TOKENS"]
    return env


def test_a_channel_without_credentials_refuses_to_start_even_on_loopback_and_says_how(tmp_path):
    done = serve_once(tmp_path, "serve", env=without_tokens(tmp_path))
    assert done.returncode == 1
    assert "'openai-api' has no credentials" in done.stderr
    assert "openaiApi.tokens or MONO_AGENT_OPENAI_API_TOKENS=tok1,tok2" in done.stderr
    assert "serve.allowUnauthenticated" in done.stderr and "MONO_AGENT_SERVE_ALLOW_UNAUTHENTICATED" in done.stderr
    assert "listening" not in done.stdout


def test_the_opt_out_serves_a_channel_without_credentials_on_loopback_and_warns(tmp_path):
    server = Server(tmp_path, env=without_tokens(tmp_path, MONO_AGENT_SERVE_ALLOW_UNAUTHENTICATED="1"))
    try:
        answer = server.client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200, answer.text
        assert server.terminate() == 0
        stderr = server.log()
        assert "openai-api served WITHOUT credentials" in stderr
    finally:
        server.stop()


def test_the_opt_out_is_refused_on_a_non_loopback_address(tmp_path):
    env = without_tokens(tmp_path, MONO_AGENT_SERVE_ALLOW_UNAUTHENTICATED="1", MONO_AGENT_SERVE_HOST="0.0.0.0")
    done = serve_once(tmp_path, "serve", env=env)
    assert done.returncode == 1
    assert "'0.0.0.0' is not a loopback address" in done.stderr
    assert "MONO_AGENT_OPENAI_API_TOKENS" in done.stderr
    assert "listening" not in done.stdout


def test_a_channel_with_credentials_is_served_without_a_warning(tmp_path):
    server = Server(tmp_path)
    try:
        assert server.terminate() == 0
        assert "WITHOUT credentials" not in server.log()
    finally:
        server.stop()


def run_events(tmp_path) -> list[list[dict]]:
    """Every run file the artifacts plugin wrote under MONO_AGENT_HOME, each as its list of events."""
    return [[json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted((tmp_path / "home" / "artifacts" / "runs").glob("*.jsonl"))]


def test_an_admission_overload_is_429_with_retry_after_and_an_admission_rejected_event_and_nothing_else(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS="1", MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS="0",
                         MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="0")
    try:
        client, _ = ask_in_background(server, "slow please", "busy")
        refused = server.client.post("/v1/chat/completions", json=completion("quick"), headers={**auth(), "X-Conversation-Id": "other"})
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert "maxPendingRuns" in refused.json()["error"]["message"]
        assert server.terminate() == 0
        client.join(timeout=30)
    finally:
        server.stop()
    refused_runs = [events for events in run_events(tmp_path) if events[0]["conversation_id"] == "openai-api:other"]
    assert len(refused_runs) == 1
    (only,) = refused_runs[0]  # no run_started, no terminal event: the run never started
    assert only["type"] == "admission_rejected"
    assert only["data"] == {"channel": "openai-api", "conversation_id": "openai-api:other", "pending": 0, "running": 1,
                            "max_pending_runs": 0, "max_concurrent_runs": 1}
    assert "no history" in history(tmp_path, "openai-api:other")


def test_log_json_makes_every_line_json_and_logs_each_request_without_credentials_or_query(tmp_path):
    server = Server(tmp_path, serve_args=("--log-json",))
    try:
        answered = server.client.post("/v1/chat/completions?api_key=query-secret", json=completion("body-marker"),
                                      headers={**auth(), "X-Conversation-Id": "c1"})
        assert answered.status_code == 200
        refused = server.client.get("/v1/models", headers=auth("wrong-token"))
        assert refused.status_code == 401
        traced = server.client.get("/healthz", headers={"X-Request-Id": "proxy-trace.1"})
        hostile = server.client.get("/readyz", headers={"X-Request-Id": "bad id\u00e9".encode("latin-1")})
        assert traced.headers["X-Request-Id"] == "proxy-trace.1"
        assert len(hostile.headers["X-Request-Id"]) == 32  # not the client's: a new one
        assert server.terminate() == 0
        stderr = server.log()
    finally:
        server.stop()
    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    access = {(e["method"], e["path"]): e for e in entries if "request_id" in e}
    assert len(access) == 4
    chat = access["POST", "/v1/chat/completions"]
    assert chat["status"] == 200 and chat["channel"] == "openai-api" and chat["client"] == "127.0.0.1"
    assert chat["request_id"] == answered.headers["X-Request-Id"] and chat["level"] == "INFO"
    assert isinstance(chat["duration_ms"], float) and chat["duration_ms"] > 0
    assert access["GET", "/v1/models"]["status"] == 401
    assert access["GET", "/healthz"]["request_id"] == "proxy-trace.1" and access["GET", "/healthz"]["channel"] == "server"
    for secret in (TOKEN, "wrong-token", "query-secret", "api_key", "body-marker", "Bearer"):
        assert secret not in stderr


def test_without_log_json_the_access_log_is_text_on_stderr(tmp_path):
    server = Server(tmp_path)
    try:
        server.client.get("/v1/models?x=1", headers=auth())
        assert server.terminate() == 0
        stderr = server.log()
    finally:
        server.stop()
    (line,) = [line for line in stderr.splitlines() if "GET /v1/models" in line]
    assert line.startswith("monoagent: INFO: GET /v1/models 200 ") and "(openai-api, 127.0.0.1, request " in line
    assert "x=1" not in stderr and TOKEN not in stderr


GATE_CHANNEL = '''
import asyncio
import os

from starlette.responses import PlainTextResponse
from starlette.routing import Route

from monoagent._kernel.errors import ConfigError
from monoagent._kernel.hookspecs import hookimpl


class Gate:
    """A channel whose start() completes only once POST /gate/open arrives."""

    name = "gate"
    enabled = True
    has_credentials = True
    credential_hint = "nothing: the gate takes no credential"

    def __init__(self, agent):
        self.opened = asyncio.Event()

    def routes(self):
        return [Route("/gate/open", self.open, methods=["POST"])]

    async def open(self, request):
        self.opened.set()
        return PlainTextResponse("opened")

    async def start(self):
        await asyncio.wait_for(self.opened.wait(), 30)  # a bound on failure: the server then ends

    def check(self):
        if os.environ.get("GATE_CHECK") == "refuse":
            raise ConfigError("gate.schedule = 'never' is not a schedule (allowed: 'now')")
        return ["opens on POST /gate/open", "next opening: when asked"]

    def stop_accepting(self):
        pass

    def cancel_in_flight(self):
        return 0

    async def shutdown(self):
        pass


class Incomplete:
    name = "incomplete"
    enabled = True
    has_credentials = True

    def __init__(self, agent):
        pass

    def routes(self):
        return []


@hookimpl
def register_channels(register):
    register("gate", Gate, description="a test channel that starts when told")
    if os.environ.get("INCOMPLETE") == "1":  # refused when it is built, enabled or not
        register("incomplete", Incomplete, description="a channel missing ServedChannel members")
'''


def gate_plugins(tmp_path) -> tuple[str, str]:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "gate_channel.py").write_text(GATE_CHANNEL, encoding="utf-8")
    return "--plugins-dir", "plugins"


def test_readyz_is_503_until_every_channel_has_started_while_healthz_answers(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "monoagent", *gate_plugins(tmp_path), "serve"], cwd=tmp_path,
                               env=serve_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        bound = None
        for line in process.stderr:  # ends when the process does: a failed start cannot hang the test
            bound = re.search(r"serve: bound (http://\S+),", line)
            if bound:
                break
        assert bound, process.stderr.read()
        with httpx.Client(base_url=bound.group(1), timeout=30) as client:
            starting = client.get("/readyz")
            assert starting.status_code == 503 and starting.json() == {"status": "starting"}
            assert client.get("/healthz").status_code == 200
            assert client.post("/gate/open").text == "opened"
            assert "listening on" in process.stdout.readline()  # printed once every channel's start() completed
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["channels"] == ["gate", "openai-api"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_check_prints_what_would_listen_where_without_binding(tmp_path):
    with socket.socket() as taken:  # the port is in use: --check binds nothing, so it does not mind
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        done = serve_once(tmp_path, *gate_plugins(tmp_path), "serve", "--check", "--port", str(port))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "monoagent serve --check: the configuration is valid",
        f"would listen on http://127.0.0.1:{port}",
        "  server: GET /healthz, GET /readyz",
        "  gate",
        "    POST /gate/open",
        "    opens on POST /gate/open",
        "    next opening: when asked",
        "  openai-api",
        "    POST /v1/chat/completions",
        "    GET /v1/models",
        "    POST /v1/responses",
        "    GET /v1/responses/{response_id}",
    ]
    assert not (tmp_path / "home" / "artifacts").exists()  # no turn ran


def test_check_lists_every_problem_and_exits_1(tmp_path):
    env = without_tokens(tmp_path, GATE_CHECK="refuse", INCOMPLETE="1")
    done = serve_once(tmp_path, *gate_plugins(tmp_path), "serve", "--check", "--host", "0.0.0.0", env=env)
    assert done.returncode == 1 and done.stdout == ""
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) == 3, done.stderr
    assert "monoagent: error: serve --check: 3 problem(s)" in done.stderr
    assert ("the channel 'incomplete' of plugin 'gate_channel' implements ServedChannel only in part: Incomplete has enabled, "
            "has_credentials, routes but no credential_hint, start, stop_accepting, cancel_in_flight, shutdown") in done.stderr
    assert "channel 'openai-api' has no credentials" in done.stderr and "MONO_AGENT_OPENAI_API_TOKENS" in done.stderr
    assert "channel 'gate': gate.schedule = 'never' is not a schedule (allowed: 'now')" in done.stderr


def test_check_reports_an_invalid_configuration_and_exits_1(tmp_path):
    done = serve_once(tmp_path, "serve", "--check", env=serve_env(tmp_path, MONO_AGENT_SERVE_MAX_BODY_BYTES="12"))
    assert done.returncode == 1
    assert "serve.maxBodyBytes" in done.stderr and "1 problem(s)" in done.stderr


def test_check_without_an_enabled_channel_says_how_to_enable_one(tmp_path):
    env = serve_env(tmp_path)
    del env["MONO_AGENT_OPENAI_API_ENABLED"]
    done = serve_once(tmp_path, "serve", "--check", env=env)
    assert done.returncode == 1 and "openaiApi.enabled" in done.stderr


def access_clients(stderr: str) -> list[str]:
    return [json.loads(line)["client"] for line in stderr.splitlines() if '"request_id"' in line]


def test_x_forwarded_for_names_the_client_only_when_a_trusted_proxy_sent_it(tmp_path):
    forwarded = {"X-Forwarded-For": "203.0.113.7"}
    trusting = Server(tmp_path, serve_args=("--log-json",))  # default: a proxy on this machine is trusted
    try:
        trusting.client.get("/healthz", headers=forwarded)
        assert trusting.terminate() == 0
        assert access_clients(trusting.log()) == ["203.0.113.7"]
    finally:
        trusting.stop()
    (tmp_path / "monoagent.toml").write_text('[serve]\nforwardedAllowIps = ["10.0.0.0/8"]\n', encoding="utf-8")
    other = Server(tmp_path, serve_args=("--log-json",))
    try:
        other.client.get("/healthz", headers=forwarded)
        assert other.terminate() == 0
        assert access_clients(other.log()) == ["127.0.0.1"]  # the header of an untrusted peer is ignored
    finally:
        other.stop()


def test_forwarded_allow_ips_must_be_addresses_or_networks(tmp_path):
    done = serve_once(tmp_path, "serve", "--check", env=serve_env(tmp_path, MONO_AGENT_SERVE_FORWARDED_ALLOW_IPS="10.0.0.1,*"))
    assert done.returncode == 1
    assert "serve.forwardedAllowIps" in done.stderr and "'*' is not an IP address or network" in done.stderr


def test_with_log_json_a_refused_start_is_one_json_error_record(tmp_path):
    done = serve_once(tmp_path, "serve", "--log-json", env=without_tokens(tmp_path))
    assert done.returncode == 1
    (record,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert record["level"] == "ERROR" and "'openai-api' has no credentials" in record["message"]
