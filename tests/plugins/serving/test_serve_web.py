"""The ``web`` channel (the web console's API) over real HTTP against ``monoagent serve`` on 127.0.0.1: sign-in and
its cookie, CSRF and Origin checks, the page's headers, threads, submissions and their receipts, one turn per
thread with a queue, live events, cancel, a browser disconnect, a SIGKILL and restart, reset, ``monoagent web``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from serving import Server, serve_env, serve_once
from waiting import wait_until

WEB_TOKEN = "web-token-1"

GATE_PROVIDER = '''
import asyncio
import json
import os
import re
from pathlib import Path

from monoagent import ProviderError, StepFinished, TextDelta, hookimpl

state = {"active": 0, "peak": 0, "calls": 0}


def record():
    Path("calls.json.tmp").write_text(json.dumps(state))
    os.replace("calls.json.tmp", "calls.json")  # whole, for a test that reads it meanwhile


class Gate:
    """Answers in two pieces; a message with "hold:<key>" first writes started-<key> and waits for release-<key>.
    Records its calls and the most turns it ran at once in calls.json, and the system prompt in system-prompt."""

    name = "gate"

    async def stream(self, request):
        text = request.messages[-1].content
        state["active"] += 1
        state["calls"] += 1
        state["peak"] = max(state["peak"], state["active"])
        record()
        Path("system-prompt").write_text(request.prompt.system_text)
        try:
            if "explode" in text:
                yield TextDelta("about to ")
                raise ProviderError("the gate model broke (no retry helps)")
            held = re.search(r"hold:(\\w+)", text)
            if held:
                Path(f"started-{held.group(1)}").write_text("1")
                while not Path(f"release-{held.group(1)}").exists():
                    await asyncio.sleep(0.01)
            yield TextDelta("part one, ")
            yield TextDelta("part two")
            yield StepFinished()
        finally:
            state["active"] -= 1
            record()


@hookimpl
def register_providers(register):
    register("gate", lambda agent, model: Gate())
'''


def web_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return serve_env(tmp_path, MONO_AGENT_WEB_ENABLED="1", MONO_AGENT_WEB_TOKENS=WEB_TOKEN,
                     MONO_AGENT_OPENAI_API_ENABLED="0", MONO_AGENT_WEB_KEEPALIVE_SECONDS="0.2", **extra)


def gate_server(tmp_path: Path, config: str = "", **env: str) -> Server:
    if not (tmp_path / "plugins").is_dir():
        (tmp_path / "plugins").mkdir()
        (tmp_path / "plugins" / "gate_provider.py").write_text(GATE_PROVIDER, encoding="utf-8")
        (tmp_path / "monoagent.toml").write_text(f'[runtime]\nmodel = "gate:x"\n{config}', encoding="utf-8")
    return Server(tmp_path, "--plugins-dir", "plugins", env=web_env(tmp_path, **env))


def sign_in(server: Server) -> dict[str, str]:
    """Sign the server's client in; the headers a mutating request needs (the CSRF token)."""
    answer = server.client.post("/web/api/session", json={"token": WEB_TOKEN})
    assert answer.status_code == 200, answer.text
    return {"X-CSRF-Token": answer.json()["csrf"]}


def carry_session(old: Server, cookies: httpx.Cookies, new: Server) -> None:
    """Give ``new``'s client the session cookie ``old`` set (a browser at the same origin; a test's restart takes
    another port, and the cookie's name carries the port)."""
    value = cookies[f"monoagent_web_{httpx.URL(old.url).port}"]
    new.client.cookies.set(f"monoagent_web_{httpx.URL(new.url).port}", value)


def new_thread(server: Server, headers: dict[str, str], title: str | None = None) -> str:
    answer = server.client.post("/web/api/threads", json={} if title is None else {"title": title}, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def send(server: Server, headers: dict[str, str], thread: str, text: str, submission: str | None = None) -> httpx.Response:
    return server.client.post(f"/web/api/threads/{thread}/submissions", headers=headers,
                              json={"submission_id": submission or str(uuid.uuid4()), "text": text})


def calls(tmp_path: Path) -> dict:
    path = tmp_path / "calls.json"
    return json.loads(path.read_text()) if path.exists() else {"calls": 0, "peak": 0, "active": 0}


def submission_state(server: Server, submission: str) -> str:
    return server.client.get(f"/web/api/submissions/{submission}").json()["state"]


class Events:
    """A thread's event stream read in a background thread: ``events`` (dicts of id, event, data) as they come."""

    def __init__(self, server: Server, thread: str) -> None:
        self.events: list[dict] = []
        self.keepalives = 0
        self.client = httpx.Client(base_url=server.url, cookies=server.client.cookies, timeout=30)
        self._response = self.client.send(self.client.build_request("GET", f"/web/api/threads/{thread}/events"),
                                          stream=True)
        assert self._response.status_code == 200, self._response.read()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        event: dict = {}
        try:
            for line in self._response.iter_lines():
                if line == ": keepalive":
                    self.keepalives += 1
                elif not line:
                    if event:
                        self.events.append(event)
                    event = {}
                else:
                    field, _, value = line.partition(": ")
                    event[field] = json.loads(value) if field == "data" else int(value) if field == "id" else value
        except httpx.HTTPError:
            pass

    def kinds(self) -> list[str]:
        return [event["event"] for event in self.events]

    def wait_for(self, kind: str, count: int = 1) -> list[dict]:
        wait_until(lambda: self.kinds().count(kind) >= count, f"{count} {kind} event(s); got {self.kinds()}")
        return [event for event in self.events if event["event"] == kind]

    def close(self) -> None:
        self._response.close()
        self.client.close()


@pytest.fixture
def server(tmp_path: Path):
    started = gate_server(tmp_path)
    yield started
    started.stop()


# ------------------------------------------------------------------ auth and the page


def test_sign_in_sets_a_strict_cookie_and_every_mutation_needs_csrf_and_the_own_origin(server: Server) -> None:
    page = server.client.get("/web/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["referrer-policy"] == "no-referrer"
    assert server.client.get("/web/../pyproject.toml").status_code == 404
    assert server.client.get("/web/.hidden").status_code == 404

    assert server.client.get("/web/api/threads").status_code == 401
    wrong = server.client.post("/web/api/session", json={"token": "nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "bad_token"
    signed = server.client.post("/web/api/session", json={"token": WEB_TOKEN})
    cookie = signed.headers["set-cookie"]
    port = httpx.URL(server.url).port
    assert cookie.startswith(f"monoagent_web_{port}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Path=/web" in cookie and "Secure" not in cookie  # plain http on loopback
    csrf = signed.json()["csrf"]
    session = server.client.get("/web/api/session").json()
    assert session["csrf"] == csrf and session["agent"]["model"] == "gate:x"

    missing = server.client.post("/web/api/threads", json={})
    assert missing.status_code == 403 and missing.json()["error"]["code"] == "bad_csrf"
    assert server.client.post("/web/api/threads", json={}, headers={"X-CSRF-Token": "0" * 64}).status_code == 403
    foreign = server.client.post("/web/api/threads", json={}, headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"})
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "bad_origin"
    own = server.client.post("/web/api/threads", json={}, headers={"X-CSRF-Token": csrf, "Origin": server.url})
    assert own.status_code == 201

    assert server.client.request("DELETE", "/web/api/session", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert server.client.get("/web/api/threads").status_code == 401


# ------------------------------------------------------------------ threads


def test_threads_are_created_listed_renamed_archived_and_deleted_and_bad_input_names_the_field(tmp_path: Path) -> None:
    server = gate_server(tmp_path, MONO_AGENT_SERVE_MAX_BODY_BYTES="2048")
    try:
        headers = sign_in(server)
        first = new_thread(server, headers)
        second = new_thread(server, headers, "Plans")
        assert re.fullmatch(r"web:[0-9a-f-]{36}", first) and uuid.UUID(first[4:]).version == 4
        listed = server.client.get("/web/api/threads").json()["threads"]
        assert [t["id"] for t in listed] == [second, first]
        assert listed[1]["title"] == "New thread" and listed[0]["state"] == "idle" and listed[0]["archived"] is False

        for body, field in (({"title": ""}, "title"), ({"title": "x" * 201}, "title"), ({"colour": "red"}, "colour")):
            refused = server.client.post("/web/api/threads", json=body, headers=headers)
            assert refused.status_code == 400 and field in refused.json()["error"]["message"], refused.text
        assert server.client.post("/web/api/threads", content=b"{not json", headers=headers).status_code == 400
        too_big = send(server, headers, first, "x" * 4000)
        assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "body_too_large"
        assert server.client.get("/web/api/threads?archived=maybe").status_code == 400

        renamed = server.client.patch(f"/web/api/threads/{first}", json={"title": "Renamed"}, headers=headers)
        assert renamed.status_code == 200 and renamed.json()["title"] == "Renamed"
        assert server.client.patch(f"/web/api/threads/{first}", json={"archived": "yes"}, headers=headers).status_code == 400
        server.client.patch(f"/web/api/threads/{first}", json={"archived": True}, headers=headers)
        assert [t["id"] for t in server.client.get("/web/api/threads").json()["threads"]] == [second]
        assert [t["id"] for t in server.client.get("/web/api/threads?archived=true").json()["threads"]] == [first]

        assert server.client.delete(f"/web/api/threads/{first}", headers=headers).status_code == 204
        gone = server.client.get(f"/web/api/threads/{first}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
        assert send(server, headers, first, "hello").status_code == 404
    finally:
        server.stop()


# ------------------------------------------------------------------ sending


def test_a_send_streams_its_events_in_order_and_stores_the_answer_with_the_console_session_block(
        server: Server, tmp_path: Path) -> None:
    headers = sign_in(server)
    thread = new_thread(server, headers)
    events = Events(server, thread)
    try:
        events.wait_for("snapshot")
        submission = str(uuid.uuid4())
        sent = send(server, headers, thread, "hello there", submission)
        assert sent.status_code == 202 and sent.json()["state"] == "running" and sent.json()["run_id"]
        finished = events.wait_for("turn_finished")[0]
        wait_until(lambda: events.keepalives > 0, "a keepalive comment")
    finally:
        events.close()
    kinds = [kind for kind in events.kinds() if kind != "thread"]
    assert kinds == ["snapshot", "turn_started", "text", "text", "turn_finished"], events.kinds()
    ids = [event["id"] for event in events.events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert "".join(e["data"]["text"] for e in events.events if e["event"] == "text") == "part one, part two"
    message = finished["data"]["message"]
    assert message["status"] == "completed" and message["text"] == "part one, part two"
    assert message["model"] == "gate:x" and message["usage"] is not None and message["run_id"] == sent.json()["run_id"]

    shown = server.client.get(f"/web/api/threads/{thread}").json()
    assert [(m["role"], m["text"]) for m in shown["messages"]] == [("user", "hello there"), ("assistant", "part one, part two")]
    assert shown["active"] is None and shown["queued"] == [] and shown["thread"]["state"] == "idle"
    receipt = server.client.get(f"/web/api/submissions/{submission}").json()
    assert receipt["state"] == "completed" and receipt["message_id"] == message["id"]

    prompt = (tmp_path / "system-prompt").read_text()
    assert "interactive console conversation on the web console" in prompt
    assert f"Conversation id: `{thread}`" in prompt and "Surface:" not in prompt


def test_the_same_submission_twice_runs_one_turn_and_another_payload_under_its_id_is_refused(
        server: Server, tmp_path: Path) -> None:
    headers = sign_in(server)
    thread = new_thread(server, headers)
    submission = str(uuid.uuid4())
    assert send(server, headers, thread, "once", submission).status_code == 202
    wait_until(lambda: submission_state(server, submission) == "completed", "the turn to complete")
    again = send(server, headers, thread, "once", submission)
    assert again.status_code == 200 and again.json()["state"] == "completed"
    assert calls(tmp_path)["calls"] == 1
    conflict = send(server, headers, thread, "twice", submission)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "submission_conflict"
    other = new_thread(server, headers)
    assert send(server, headers, other, "once", submission).status_code == 409  # the id is bound to its thread too
    assert calls(tmp_path)["calls"] == 1
    assert len(server.client.get(f"/web/api/threads/{thread}").json()["messages"]) == 2
    assert server.client.get(f"/web/api/submissions/{uuid.uuid4()}").status_code == 404
    bad = send(server, headers, thread, "x", "not-a-uuid")
    assert bad.status_code == 400 and "submission_id" in bad.json()["error"]["message"]
    assert send(server, headers, thread, "   ").status_code == 400


def test_a_follow_up_sent_while_a_turn_runs_is_queued_and_runs_next_never_two_turns_at_once_in_a_thread(
        server: Server, tmp_path: Path) -> None:
    headers = sign_in(server)
    thread = new_thread(server, headers)
    first = send(server, headers, thread, "hold:a first")
    wait_until((tmp_path / "started-a").exists, "the first turn to start")
    follow = str(uuid.uuid4())
    queued = send(server, headers, thread, "second", follow)
    assert queued.status_code == 202 and queued.json()["state"] == "queued" and queued.json()["run_id"] is None
    shown = server.client.get(f"/web/api/threads/{thread}").json()
    assert shown["thread"]["state"] == "running" and shown["active"]["submission_id"] == first.json()["submission_id"]
    assert [s["submission_id"] for s in shown["queued"]] == [follow]
    assert calls(tmp_path)["calls"] == 1  # the follow-up waits for the first turn

    (tmp_path / "release-a").write_text("1")
    wait_until(lambda: submission_state(server, follow) == "completed", "the queued follow-up to complete")
    assert calls(tmp_path) == {"calls": 2, "peak": 1, "active": 0}
    messages = server.client.get(f"/web/api/threads/{thread}").json()["messages"]
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "hold:a first"), ("assistant", "part one, part two"), ("user", "second"), ("assistant", "part one, part two")]


def test_different_threads_run_their_turns_at_once(server: Server, tmp_path: Path) -> None:
    headers = sign_in(server)
    one, two = new_thread(server, headers), new_thread(server, headers)
    send(server, headers, one, "hold:b")
    send(server, headers, two, "hold:c")
    wait_until(lambda: (tmp_path / "started-b").exists() and (tmp_path / "started-c").exists(), "both turns to run")
    assert calls(tmp_path)["active"] == 2
    (tmp_path / "release-b").write_text("1")
    (tmp_path / "release-c").write_text("1")
    wait_until(lambda: calls(tmp_path)["active"] == 0, "both turns to end")


def test_cancel_ends_the_turn_and_a_disconnected_browser_does_not(server: Server, tmp_path: Path) -> None:
    headers = sign_in(server)
    thread = new_thread(server, headers)
    assert server.client.post(f"/web/api/threads/{thread}/cancel", headers=headers).json() == {"cancelled": False}
    events = Events(server, thread)
    submission = send(server, headers, thread, "hold:x please").json()["submission_id"]
    events.wait_for("turn_started")
    events.close()  # the tab goes away mid-turn
    wait_until((tmp_path / "started-x").exists, "the turn to reach the model")
    again = Events(server, thread)  # a reload: the snapshot shows the turn still running
    try:
        snapshot = again.wait_for("snapshot")[0]["data"]
        assert snapshot["active"]["submission_id"] == submission and snapshot["thread"]["state"] == "running"
        assert submission_state(server, submission) == "running"
        cancelled = server.client.post(f"/web/api/threads/{thread}/cancel", headers=headers)
        assert cancelled.status_code == 202 and cancelled.json() == {"cancelled": True}
        finished = again.wait_for("turn_finished")[0]["data"]["message"]
    finally:
        again.close()
    assert finished["status"] == "cancelled" and finished["error"]
    assert submission_state(server, submission) == "cancelled"
    (tmp_path / "release-x").write_text("1")
    after = send(server, headers, thread, "and now").json()["submission_id"]
    wait_until(lambda: submission_state(server, after) == "completed", "the next turn to complete")


# ------------------------------------------------------------------ restart and reset


@pytest.mark.slow
def test_a_sigkill_mid_turn_then_a_restart_marks_the_turn_interrupted_runs_the_queued_one_and_keeps_the_session(
        tmp_path: Path) -> None:
    server = gate_server(tmp_path)
    try:
        headers = sign_in(server)
        thread = new_thread(server, headers)
        sent = send(server, headers, thread, "hold:k").json()
        running, run_id = sent["submission_id"], sent["run_id"]
        wait_until((tmp_path / "started-k").exists, "the turn to start")
        queued = send(server, headers, thread, "afterwards").json()["submission_id"]
        cookies = server.client.cookies
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
    finally:
        server.stop()
    restarted = gate_server(tmp_path)
    try:
        carry_session(server, cookies, restarted)  # the session outlives the process
        wait_until(lambda: submission_state(restarted, queued) == "completed", "the queued submission to run")
        interrupted = restarted.client.get(f"/web/api/submissions/{running}").json()
        assert interrupted["state"] == "interrupted" and interrupted["message_id"]
        messages = restarted.client.get(f"/web/api/threads/{thread}").json()["messages"]
        assert [(m["role"], m["status"]) for m in messages] == [
            ("user", "completed"), ("assistant", "interrupted"), ("user", "completed"), ("assistant", "completed")]
        assert messages[1]["error"]
        run_file = tmp_path / "home" / "artifacts" / "runs" / f"{run_id}.jsonl"
        wait_until(run_file.exists, "the interrupted run's artifact")  # reconciled at the start
        wait_until(lambda: '"run_cancelled"' in run_file.read_text(), "its terminal event")
        last = json.loads(run_file.read_text().splitlines()[-1])
        assert last["type"] == "run_cancelled" and last["data"]["reason"] == "interrupted"
        later = send(restarted, headers, thread, "still here?").json()["submission_id"]
        wait_until(lambda: submission_state(restarted, later) == "completed", "a new turn in the thread")
        assert calls(tmp_path)["calls"] == 2  # the restarted process: the queued turn and the new one, nothing rerun
    finally:
        assert restarted.terminate() == 0


def _monoagent(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return serve_once(tmp_path, "--plugins-dir", "plugins", *args, env=web_env(tmp_path))


def test_reset_is_refused_while_the_server_runs_and_removes_only_the_console_store(tmp_path: Path) -> None:
    server = gate_server(tmp_path)
    try:
        headers = sign_in(server)
        thread = new_thread(server, headers)
        submission = send(server, headers, thread, "remember me").json()["submission_id"]
        wait_until(lambda: submission_state(server, submission) == "completed", "the turn to complete")
        refused = _monoagent(tmp_path, "web", "reset", "--all", "--yes")
        assert refused.returncode == 1 and "in use by a running server" in refused.stderr, refused.stderr
        second = _monoagent(tmp_path, "web")  # a second server on the same store
        assert second.returncode == 1 and "one server per store" in second.stderr, second.stderr
    finally:
        assert server.terminate() == 0
    home = tmp_path / "home"
    assert (home / "web" / "console.sqlite3").is_file()
    unconfirmed = _monoagent(tmp_path, "web", "reset", "--all")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    kept = {path for path in home.rglob("*") if "web" not in path.relative_to(home).parts[:1]}
    done = _monoagent(tmp_path, "web", "reset", "--all", "--yes")
    assert done.returncode == 0, done.stderr
    assert not (home / "web").exists()
    assert {path for path in home.rglob("*")} == kept  # history, runs and the rest untouched
    shown = _monoagent(tmp_path, "history", "show", thread)
    assert "remember me" in shown.stdout, shown.stdout + shown.stderr


def test_a_console_thread_never_rolls_over_daily(tmp_path: Path) -> None:
    server = gate_server(tmp_path, '[runtime.session]\nrollover = "daily"\n')
    try:
        headers = sign_in(server)
        thread = new_thread(server, headers)
        submission = send(server, headers, thread, "hi").json()["submission_id"]
        wait_until(lambda: submission_state(server, submission) == "completed", "the turn to complete")
    finally:
        assert server.terminate() == 0
    listed = _monoagent(tmp_path, "history", "list")
    assert thread in listed.stdout and f"{thread}:2" not in listed.stdout, listed.stdout  # no dated bucket


def test_monoagent_web_serves_only_the_console_on_loopback_and_prints_the_url_with_a_token(tmp_path: Path) -> None:
    env = serve_env(tmp_path)  # the openai-api channel enabled in the environment: `monoagent web` serves only the console
    env.pop("MONO_AGENT_SERVE_PORT")
    process = subprocess.Popen([sys.executable, "-m", "monoagent", "web"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline(), process.stdout.readline()]
        found = re.search(r"Open (http://127\.0\.0\.1:(\d+)/web/)#token=(\S+)", lines[1])
        assert found, lines
        with httpx.Client(base_url=found.group(1).removesuffix("/web/"), timeout=30) as client:
            assert client.post("/web/api/session", json={"token": found.group(3)}).status_code == 200
            assert client.get("/web/api/threads").json() == {"threads": []}
            assert client.get("/v1/models").status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        process.stdout.close()
        process.stderr.close()


def test_serve_check_lists_the_web_routes_and_takes_the_web_new_destination(tmp_path: Path) -> None:
    (tmp_path / "monoagent.toml").write_text(
        '[webhook]\nenabled = true\n[webhook.hooks.deploy]\nsecret = "s"\nnotify = ["web:new"]\n', encoding="utf-8")
    checked = serve_once(tmp_path, "serve", "--check", env=web_env(tmp_path))
    assert checked.returncode == 0, checked.stderr
    assert "POST /web/api/threads/{thread_id}/submissions" in checked.stdout and "console store:" in checked.stdout
    unset = serve_once(tmp_path, "serve", "--check", env=serve_env(tmp_path, MONO_AGENT_OPENAI_API_ENABLED="0",
                                                                   MONO_AGENT_WEB_ENABLED="1"))
    assert unset.returncode == 1 and "web.tokens" in unset.stderr


def test_an_admission_overload_is_a_429_whose_submission_can_be_sent_again(tmp_path: Path) -> None:
    server = gate_server(tmp_path, MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS="1", MONO_AGENT_CONCURRENCY_MAX_PENDING_RUNS="0")
    try:
        headers = sign_in(server)
        busy, other = new_thread(server, headers), new_thread(server, headers)
        send(server, headers, busy, "hold:p")
        wait_until((tmp_path / "started-p").exists, "the first thread's turn to run")
        submission = str(uuid.uuid4())
        refused = send(server, headers, other, "me too", submission)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "overloaded", refused.text
        assert refused.headers["retry-after"] == "1"
        assert server.client.get(f"/web/api/submissions/{submission}").status_code == 404  # no receipt: send it again
        (tmp_path / "release-p").write_text("1")
        wait_until(lambda: calls(tmp_path)["active"] == 0, "the first turn to end")
        wait_until(lambda: server.client.get(f"/web/api/threads/{busy}").json()["thread"]["state"] == "idle",
                   "the first thread to be idle")
        assert send(server, headers, other, "me too", submission).status_code == 202
        wait_until(lambda: submission_state(server, submission) == "completed", "the resent turn to complete")
    finally:
        assert server.terminate() == 0


def test_tool_activity_is_streamed_and_stored_as_compact_tool_lines(tmp_path: Path) -> None:
    from plugin_sources import TOOL_CALLER

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "tool_caller.py").write_text(TOOL_CALLER, encoding="utf-8")
    (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "caller:x"\n', encoding="utf-8")
    server = Server(tmp_path, "--plugins-dir", "plugins", env=web_env(tmp_path))
    try:
        headers = sign_in(server)
        thread = new_thread(server, headers)
        events = Events(server, thread)
        try:
            send(server, headers, thread, "call clock")
            message = events.wait_for("turn_finished")[0]["data"]["message"]
        finally:
            events.close()
        tools = [event["data"]["tool"] for event in events.events if event["event"] == "tool"]
        assert [tool["status"] for tool in tools] == ["running", "success"]
        assert tools[0]["name"] == "clock" and tools[0]["line"] == 'clock(city="Oslo")'
        assert tools[1]["line"] == 'clock(city="Oslo") → ok' and tools[0]["id"] == tools[1]["id"]
        assert "persist" not in json.dumps(tools)  # the tool-history bookkeeping shows nothing
        assert message["tools"] == [tools[1]] and message["text"].startswith("Results: clock=12:00")
        stored = server.client.get(f"/web/api/threads/{thread}").json()["messages"][-1]
        assert stored["tools"] == [tools[1]]
    finally:
        assert server.terminate() == 0


def test_a_failed_turn_is_an_error_message_and_the_thread_goes_on(tmp_path: Path) -> None:
    server = gate_server(tmp_path, MONO_AGENT_PROVIDER_MAX_RETRIES="0")
    try:
        headers = sign_in(server)
        thread = new_thread(server, headers)
        failed = send(server, headers, thread, "explode").json()["submission_id"]
        wait_until(lambda: submission_state(server, failed) == "failed", "the turn to fail")
        message = server.client.get(f"/web/api/threads/{thread}").json()["messages"][-1]
        assert message["role"] == "assistant" and message["status"] == "failed"
        assert "the gate model broke" in message["error"] and message["model"] is None
        after = send(server, headers, thread, "fine now").json()["submission_id"]
        wait_until(lambda: submission_state(server, after) == "completed", "the next turn to complete")
    finally:
        assert server.terminate() == 0


def test_a_graceful_stop_past_its_grace_period_interrupts_the_turn_and_keeps_the_queued_one_for_the_next_start(
        tmp_path: Path) -> None:
    server = gate_server(tmp_path, MONO_AGENT_SERVE_SHUTDOWN_GRACE_MS="0")
    try:
        headers = sign_in(server)
        thread = new_thread(server, headers)
        running = send(server, headers, thread, "hold:g").json()["submission_id"]
        wait_until((tmp_path / "started-g").exists, "the turn to start")
        queued = send(server, headers, thread, "next one").json()["submission_id"]
        cookies = server.client.cookies
    finally:
        assert server.terminate() == 0
    restarted = gate_server(tmp_path)
    try:
        carry_session(server, cookies, restarted)
        assert submission_state(restarted, running) == "interrupted"
        wait_until(lambda: submission_state(restarted, queued) == "completed", "the queued submission to run at the start")
        messages = restarted.client.get(f"/web/api/threads/{thread}").json()["messages"]
        assert [(m["role"], m["status"]) for m in messages] == [
            ("user", "completed"), ("assistant", "interrupted"), ("user", "completed"), ("assistant", "completed")]
    finally:
        assert restarted.terminate() == 0
