"""The server of ``monoagent serve`` itself: the auth default, admission events, the access log, ``--check``, readiness.

Each test runs the real command as a subprocess on 127.0.0.1 (port 0) and talks real HTTP to it.
"""

from __future__ import annotations

import json

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
        stderr = server.process.stderr.read()
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
        assert "WITHOUT credentials" not in server.process.stderr.read()
    finally:
        server.stop()


def run_events(tmp_path) -> list[list[dict]]:
    """Every run file the artifacts plugin wrote under MONO_AGENT_HOME, each as its list of events."""
    return [[json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted((tmp_path / "home" / "artifacts" / "runs").glob("*.jsonl"))]


def test_an_admission_overload_is_an_admission_rejected_event_and_nothing_else(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS="1", MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS="0",
                         MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="0")
    try:
        client, _ = ask_in_background(server, "slow please", "busy")
        refused = server.client.post("/v1/chat/completions", json=completion("quick"), headers={**auth(), "X-Conversation-Id": "other"})
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
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
        stderr = server.process.stderr.read()
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
        stderr = server.process.stderr.read()
    finally:
        server.stop()
    (line,) = [line for line in stderr.splitlines() if "GET /v1/models" in line]
    assert line.startswith("monoagent: INFO: GET /v1/models 200 ") and "(openai-api, 127.0.0.1, request " in line
    assert "x=1" not in stderr and TOKEN not in stderr
