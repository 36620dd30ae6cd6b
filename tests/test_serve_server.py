"""The server of ``monoagent serve`` itself: the auth default, admission events, the access log, ``--check``, readiness.

Each test runs the real command as a subprocess on 127.0.0.1 (port 0) and talks real HTTP to it.
"""

from __future__ import annotations

import json

from serving import Server, ask_in_background, auth, completion, history, serve_env, serve_once, slow_server


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
