"""Notify destinations: the ``file`` and ``webhook`` notifiers, NotifyDispatch and the silent sentinel.

The webhook notifier is tested against a real HTTP receiver on 127.0.0.1 (``http.server`` in a
thread) that answers what each test scripts; the file notifier against real files, written
from several threads and processes at once. Waits between webhook attempts are injected, so
no test sleeps through a backoff.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from waiting import until, wait_until

from monoagent import hookimpl
from monoagent._agent import Agent
from monoagent._kernel.errors import ConfigError, NotifyFailed
from monoagent._kernel.interfaces import Notification
from monoagent._kernel.turn_request import TurnRequest, TurnResult
from monoagent.testing import fresh_agent, scripted_agent
from monoagent_plugins.serving.notifiers import FileNotifier, WebhookNotifier
from monoagent_plugins.serving.notify_dispatch import NotifyDispatch
from monoagent_plugins.serving.signatures import SIGNATURE_HEADER, verify

SECRET = "notify-secret-1"


class Events:
    """A plugin recording every run event."""

    def __init__(self) -> None:
        self.seen: list = []

    @hookimpl
    def on_run_event(self, event):
        self.seen.append(event)

    def of(self, *types: str) -> list:
        return [e for e in self.seen if e.type in types]


class Receiver:
    """An HTTP server on 127.0.0.1 answering each POST with the next scripted reply; the last one repeats.

    A reply is ``(status, headers)``, ``"reset"`` (close the connection without answering) or
    ``"hang"`` (answer once :attr:`release` is set), ``"endless"`` (200, then a body that never comes).
    """

    def __init__(self, *replies) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                reply = receiver.replies[min(len(receiver.requests), len(receiver.replies)) - 1]
                if reply == "reset":
                    self.close_connection = True
                    self.connection.close()
                    return
                if reply == "hang":
                    receiver.release.wait(30)
                    reply = (200, {})
                if reply == "endless":  # 200 with a body that never ends
                    self.send_response(200)
                    self.send_header("Content-Length", str(10**9))
                    self.end_headers()
                    self.wfile.flush()
                    receiver.release.wait(30)
                    return
                status, headers = reply
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(*replies) -> Receiver:
        made.append(Receiver(*replies))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def notification(text: str = "the answer", run_id: str = "run-1", destination: str = "ops") -> Notification:
    return Notification(text, "cron", "daily", destination, "cron:daily", run_id, 1_800_000_000.0)


def result(text: str, run_id: str = "r-silent") -> TurnResult:
    return TurnResult(run_id=run_id, conversation_id="cron:daily", text=text, model="offline:echo")


def agent_with(tmp_path: Path, destinations: dict, env: dict | None = None) -> tuple[Agent, Events]:
    events = Events()
    return fresh_agent(tmp_path, config={"notify": {"destinations": destinations}}, plugins=[events], env=env), events


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ============================================================================ file


def test_the_file_notifier_appends_one_json_line_per_answer_to_an_owner_only_file(tmp_path):
    (tmp_path / "monoagent.toml").write_text('[notify.destinations.log]\ntype = "file"\npath = "out/answers.jsonl"\n',
                                             encoding="utf-8")
    (tmp_path / "out").mkdir()
    events = Events()
    agent = Agent(config_path=tmp_path / "monoagent.toml", plugins=[events], env={"MONO_AGENT_HOME": str(tmp_path / "home")})
    dispatch = NotifyDispatch(agent)
    dispatch.check(["log"], "cron.jobs[0].notify")

    async def two_turns() -> list[TurnResult]:
        done = []
        for text in ("first", "second\nline"):
            turn = await agent.respond(TurnRequest(text, conversation_id="cron:daily", channel="cron", delivery="request", notify=True))
            await dispatch.deliver(["log"], turn, channel="cron", source="daily")
            done.append(turn)
        return done

    turns = asyncio.run(two_turns())
    path = tmp_path / "out" / "answers.jsonl"  # relative to the config file's directory
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = lines(path)
    assert [r["text"] for r in written] == [t.text for t in turns] and "second\nline" in written[1]["text"]
    assert [r["run_id"] for r in written] == [t.run_id for t in turns]
    first = written[0]
    assert set(first) == {"time", "channel", "source", "destination", "conversation_id", "run_id", "text"}
    assert (first["channel"], first["source"], first["destination"], first["conversation_id"]) == ("cron", "daily", "log", "cron:daily")
    assert datetime.fromisoformat(first["time"]).utcoffset().total_seconds() == 0 and first["time"].endswith("Z")
    delivered = events.of("notify_delivered")
    assert [(e.run_id, e.conversation_id, e.data["destination"], e.data["attempts"]) for e in delivered] == [
        (t.run_id, "cron:daily", "log", 1) for t in turns]
    run_file = tmp_path / "home" / "artifacts" / "runs" / f"{turns[0].run_id}.jsonl"
    wait_until(lambda: "notify_delivered" in (run_file.read_text() if run_file.exists() else ""),
               "the writer thread to append notify_delivered to the run's file")
    recorded = [json.loads(line)["type"] for line in run_file.read_text().splitlines()]
    assert recorded[-2:] == ["run_completed", "notify_delivered"]  # in the run's file while the agent still runs
    agent.close()


def test_a_symlink_or_a_directory_is_refused_at_start_up_and_at_delivery(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    (tmp_path / "link.jsonl").symlink_to(target)
    (tmp_path / "adir").mkdir()
    agent, events = agent_with(tmp_path, {
        "link": {"type": "file", "path": str(tmp_path / "link.jsonl")},
        "dir": {"type": "file", "path": str(tmp_path / "adir")},
        "nodir": {"type": "file", "path": str(tmp_path / "missing" / "a.jsonl")},
        "later": {"type": "file", "path": str(tmp_path / "later.jsonl")},
    })
    dispatch = NotifyDispatch(agent)
    for name, named in (("link", "symlink"), ("dir", "not a regular file"), ("nodir", "does not exist")):
        with pytest.raises(ConfigError, match=named) as refused:
            dispatch.check([name], "webhook.hooks.deploy.notify")
        assert f"notify.destinations.{name}.path" in str(refused.value) and "webhook.hooks.deploy.notify" in str(refused.value)
    dispatch.check(["later"], "cron.jobs[0].notify")
    (tmp_path / "later.jsonl").symlink_to(target)  # swapped in after the check
    asyncio.run(dispatch.deliver(["later"], result("hello"), channel="cron", source="daily"))
    assert target.read_text() == ""
    (failed,) = events.of("notify_failed")
    assert failed.data["destination"] == "later" and "symlink" in failed.data["error"]
    assert failed.run_id == "r-silent" and not events.of("notify_delivered")
    agent.close()


def test_a_symlinked_directory_on_the_way_is_refused_at_start_up_and_at_delivery(tmp_path):
    """The finding: ``notify/`` a symlink to another directory; the file below it was appended to through it.
    Refused at the check and, swapped in after it, at delivery; nothing is written through it and what the real
    file holds stays. The config file's folder itself may be reached through a symlink the operator set up."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "answers.jsonl").write_text('{"kept": 1}\n')
    (tmp_path / "notify").symlink_to(elsewhere)
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "answers.jsonl").write_text('{"committed": 1}\n')
    (tmp_path / "monoagent.toml").write_text(
        '[notify.destinations.linked]\ntype = "file"\npath = "notify/answers.jsonl"\n'
        f'[notify.destinations.deep]\ntype = "file"\npath = "{tmp_path / "notify" / "answers.jsonl"}"\n'
        '[notify.destinations.later]\ntype = "file"\npath = "real/answers.jsonl"\n', encoding="utf-8")
    events = Events()
    agent = Agent(config_path=tmp_path / "monoagent.toml", plugins=[events], env={"MONO_AGENT_HOME": str(tmp_path / "home")})
    dispatch = NotifyDispatch(agent)
    for name in ("linked", "deep"):
        with pytest.raises(ConfigError) as refused:
            dispatch.check([name], "cron.jobs[0].notify")
        message = str(refused.value)
        assert f"notify.destinations.{name}.path" in message and f"{tmp_path / 'notify'} is a symlink" in message
        assert "every directory is opened without following a symlink" in message
    dispatch.check(["later"], "cron.jobs[0].notify")
    (tmp_path / "real").rename(tmp_path / "moved")
    (tmp_path / "real").symlink_to(elsewhere)  # swapped in after the check
    asyncio.run(dispatch.deliver(["later"], result("hello"), channel="cron", source="daily"))
    (failed,) = events.of("notify_failed")
    assert f"{tmp_path / 'real'} is a symlink" in failed.data["error"] and not events.of("notify_delivered")
    assert (elsewhere / "answers.jsonl").read_text() == '{"kept": 1}\n'
    assert (tmp_path / "moved" / "answers.jsonl").read_text() == '{"committed": 1}\n'
    agent.close()
    linked_root = tmp_path / "project-link"
    linked_root.symlink_to(tmp_path)  # the root itself through a symlink: followed
    notifier = FileNotifier.from_options({"path": "moved/answers.jsonl"}, lambda raw: linked_root / raw)
    notifier.append(b'{"second": 2}\n')
    assert (tmp_path / "moved" / "answers.jsonl").read_text() == '{"committed": 1}\n{"second": 2}\n'



APPENDER = """
import asyncio, sys
from pathlib import Path
from monoagent._kernel.interfaces import Notification
from monoagent_plugins.serving.notifiers import FileNotifier

notifier = FileNotifier(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    text = sys.argv[2] * 40_000 + str(i)
    asyncio.run(notifier.notify(Notification(text, "cron", sys.argv[2], "log", "cron:x", f"{sys.argv[2]}-{i}", 0.0)))
"""


def test_concurrent_appends_from_threads_and_processes_never_interleave(tmp_path):
    path = tmp_path / "answers.jsonl"
    processes = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), letter, "25"]) for letter in "abc"]
    notifier = FileNotifier(path)

    def append(letter: str) -> None:
        for i in range(25):
            asyncio.run(notifier.notify(Notification(letter * 40_000 + str(i), "cron", letter, "log", "cron:x", f"{letter}-{i}", 0.0)))

    threads = [threading.Thread(target=append, args=(letter,)) for letter in "xyz"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(p.wait(timeout=120) == 0 for p in processes)
    written = lines(path)  # every line parses whole: none was cut by another writer's bytes
    assert len(written) == 150
    for record in written:
        letter, index = record["run_id"].split("-")
        assert record["text"] == letter * 40_000 + index
    assert sorted(r["run_id"] for r in written) == sorted(f"{c}-{i}" for c in "abcxyz" for i in range(25))


# ============================================================================ webhook


@pytest.mark.parametrize("second", ["reset", (503, {"Retry-After": "7"})], ids=["connection-reset", "503-retry-after"])
def test_the_webhook_notifier_retries_a_failing_receiver_signing_each_attempt(receivers, second):
    receiver = receivers((500, {}), second, (204, {}))
    waits: list[float] = []
    ticks = iter(range(1_800_000_000, 1_800_000_100))

    async def wait(seconds: float) -> None:
        waits.append(seconds)

    notifier = WebhookNotifier(receiver.url, SECRET, sleep=wait, clock=lambda: float(next(ticks)))
    assert asyncio.run(notifier.notify(notification(run_id="run-42"))) == 3
    assert len(receiver.requests) == 3
    stamps = []
    for headers, body in receiver.requests:
        signed = int(headers[SIGNATURE_HEADER].split(",")[0].removeprefix("t="))
        stamps.append(verify([SECRET], headers[SIGNATURE_HEADER], body, now=signed))
        assert headers["Idempotency-Key"] == "run-42" and headers["Content-Type"] == "application/json"
        assert json.loads(body) == json.loads(receiver.requests[0][1])
        assert json.loads(body)["text"] == "the answer"
    assert len(set(stamps)) == 3  # signed afresh for each attempt
    assert len(waits) == 2 and 0.5 <= waits[0] <= 1.0  # exponential backoff with jitter after the 500
    if second == "reset":
        assert 1.0 <= waits[1] <= 1.5
    else:
        assert waits[1] == 7  # the receiver's Retry-After


def test_the_receivers_answer_body_is_not_read(receivers):
    receiver = receivers("endless")

    async def no_wait(seconds: float) -> None:
        raise AssertionError(f"retried after {seconds} s: the 200 was not taken as delivered")

    notifier = WebhookNotifier(receiver.url, SECRET, timeout_s=2, sleep=no_wait)
    assert asyncio.run(notifier.notify(notification())) == 1


def test_the_receiver_snippet_in_the_docs_verifies_a_delivery(receivers):
    page = (Path(__file__).resolve().parents[3] / "docs" / "serving.md").read_text(encoding="utf-8")
    snippet = next(block for block in page.split("```python")[1:] if "def verify(secret: str" in block).split("```")[0]
    namespace: dict = {}
    exec(snippet, namespace)
    receiver = receivers((200, {}))
    asyncio.run(WebhookNotifier(receiver.url, SECRET).notify(notification()))
    (headers, body), = receiver.requests
    assert namespace["verify"](SECRET, headers[SIGNATURE_HEADER], body)
    assert not namespace["verify"]("another secret", headers[SIGNATURE_HEADER], body)
    assert not namespace["verify"](SECRET, headers[SIGNATURE_HEADER], body + b" ")


def test_retry_after_is_capped(receivers):
    receiver = receivers((429, {"Retry-After": "86400"}), (200, {}))
    waits: list[float] = []

    async def wait(seconds: float) -> None:
        waits.append(seconds)

    assert asyncio.run(WebhookNotifier(receiver.url, SECRET, sleep=wait).notify(notification())) == 2
    assert waits == [60.0]


def test_a_4xx_receiver_is_not_retried(receivers):
    receiver = receivers((400, {}))
    waits: list[float] = []

    async def wait(seconds: float) -> None:
        waits.append(seconds)

    with pytest.raises(NotifyFailed) as failed:
        asyncio.run(WebhookNotifier(receiver.url, SECRET, sleep=wait).notify(notification()))
    assert len(receiver.requests) == 1 and waits == []
    assert "'ops'" in str(failed.value) and "1 attempt" in str(failed.value) and "HTTP 400" in str(failed.value)


def test_max_attempts_exhausted_is_a_notify_failed_event(tmp_path, receivers):
    receiver = receivers((503, {"Retry-After": "0"}))
    agent, events = agent_with(tmp_path, {"ops": {"type": "webhook", "url": receiver.url, "secret": SECRET, "maxAttempts": 3}})
    dispatch = NotifyDispatch(agent)
    dispatch.check(["ops"], "cron.jobs[0].notify")
    asyncio.run(dispatch.deliver(["ops"], result("report", run_id="r-7"), channel="cron", source="daily"))
    assert len(receiver.requests) == 3
    (failed,) = events.of("notify_failed", "notify_delivered")
    assert failed.type == "notify_failed" and failed.run_id == "r-7" and failed.conversation_id == "cron:daily"
    assert failed.data["destination"] == "ops" and (failed.data["channel"], failed.data["source"]) == ("cron", "daily")
    assert "3 attempt(s)" in failed.data["error"] and "HTTP 503" in failed.data["error"] and receiver.url in failed.data["error"]
    agent.close()


def test_the_secret_comes_from_the_environment_and_wins_over_the_file(tmp_path, receivers):
    receiver = receivers((200, {}))
    agent, events = agent_with(tmp_path, {"ops-2": {"type": "webhook", "url": receiver.url, "secret": "from-file"}},
                               env={"MONO_AGENT_NOTIFY_SECRET_OPS_2": SECRET})
    asyncio.run(NotifyDispatch(agent).deliver(["ops-2"], result("hi"), channel="webhook", source="deploy"))
    (headers, body), = receiver.requests
    verify([SECRET], headers[SIGNATURE_HEADER], body, now=time.time())
    assert [e.data["attempts"] for e in events.of("notify_delivered")] == [1]
    agent.close()


def test_drain_cancels_a_delivery_still_running_at_shutdown(tmp_path, receivers):
    receiver = receivers("hang")
    agent, events = agent_with(tmp_path, {"slow": {"type": "webhook", "url": receiver.url, "secret": SECRET}})
    dispatch = NotifyDispatch(agent)

    async def shutdown_mid_delivery() -> int:
        task = dispatch.start(["slow"], result("late"), channel="cron", source="daily")
        await until(lambda: receiver.requests, "the delivery to reach the receiver", interval=0.01)
        cancelled = await dispatch.drain(0.05)
        assert task.cancelled()
        return cancelled

    assert asyncio.run(shutdown_mid_delivery()) == 1
    (failed,) = events.of("notify_failed")
    assert failed.data["destination"] == "slow" and "shutdown" in failed.data["error"]
    agent.close()


# ============================================================================ the silent sentinel


def test_the_silent_sentinel_delivers_nothing_and_emits_notify_skipped(tmp_path):
    agent = scripted_agent(tmp_path, [{"text": "  NO_REPLY\n"}], config={
        "notify": {"destinations": {"log": {"type": "file", "path": str(tmp_path / "answers.jsonl")}}}})
    events = Events()
    agent.register(events)
    dispatch = NotifyDispatch(agent)

    async def silent_turn() -> TurnResult:
        turn = await agent.respond(TurnRequest("anything new?", conversation_id="cron:watch", channel="cron",
                                               delivery="request", notify=True))
        await dispatch.deliver(["log"], turn, channel="cron", source="watch")
        return turn

    turn = asyncio.run(silent_turn())
    assert not (tmp_path / "answers.jsonl").exists()
    (skipped,) = events.of("notify_skipped", "notify_delivered", "notify_failed")
    assert skipped.type == "notify_skipped" and skipped.run_id == turn.run_id
    assert skipped.data == {"destination": "log", "reason": "silent", "channel": "cron", "source": "watch"}
    agent.close()


@pytest.mark.parametrize("text", ["NO_REPLY.", "no_reply", "NO_REPLY because nothing changed", "NO REPLY"])
def test_only_the_exact_sentinel_is_silent(tmp_path, text):
    agent, events = agent_with(tmp_path, {"log": {"type": "file", "path": str(tmp_path / "answers.jsonl")}})
    asyncio.run(NotifyDispatch(agent).deliver(["log"], result(text), channel="cron", source="watch"))
    assert [r["text"] for r in lines(tmp_path / "answers.jsonl")] == [text]
    assert not events.of("notify_skipped")
    agent.close()


# ============================================================================ configuration


@pytest.mark.parametrize("destination, names", [
    ({"type": "pager"}, ["notify.destinations.ops.type", "'pager' is not a registered notifier", "file, web, webhook"]),
    ({"type": "webhook", "url": "ftp://example.org/x", "secret": SECRET}, ["notify.destinations.ops.url", "http:// or https://"]),
    ({"type": "webhook", "url": "not a url", "secret": SECRET}, ["notify.destinations.ops.url"]),
    ({"type": "webhook", "url": "https://example.org/x"}, ["notify.destinations.ops.secret", "MONO_AGENT_NOTIFY_SECRET_"]),
    ({"type": "file", "path": "x.jsonl", "url": "https://example.org"}, ["notify.destinations.ops.url", "allowed: path"]),
])
def test_check_names_the_key_that_is_wrong(tmp_path, destination, names):
    agent, _ = agent_with(tmp_path, {"ops": destination})
    with pytest.raises(ConfigError) as refused:
        NotifyDispatch(agent).check(["ops"], "cron.jobs[2].notify")
    for name in names + ["cron.jobs[2].notify"]:
        assert name in str(refused.value)
    agent.close()


def test_check_refuses_a_destination_that_is_not_configured(tmp_path):
    agent, _ = agent_with(tmp_path, {"log": {"type": "file", "path": str(tmp_path / "a.jsonl")}})
    with pytest.raises(ConfigError, match=r"webhook.hooks.deploy.notify: 'nope' is not a notify destination.*\(log\)"):
        NotifyDispatch(agent).check(["log", "nope"], "webhook.hooks.deploy.notify")
    agent.close()


def test_a_destination_without_a_type_or_with_a_bad_attempt_count_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as refused:
        fresh_agent(tmp_path, config={"notify": {"destinations": {"a": {"url": "https://example.org"},
                                                                  "b": {"type": "webhook", "maxAttempts": 21}}}})
    assert "notify.destinations.a.type: missing" in str(refused.value)
    assert "notify.destinations.b.maxAttempts" in str(refused.value) and "20" in str(refused.value)


def test_config_show_masks_the_secret(tmp_path):
    (tmp_path / "monoagent.toml").write_text(
        f'[notify.destinations.ops]\ntype = "webhook"\nurl = "https://example.org/hook"\nsecret = "{SECRET}"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")}
    shown = subprocess.run([sys.executable, "-m", "monoagent", "config", "show"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60, env={**env, "MONO_AGENT_HOME": str(tmp_path / "home")})
    assert shown.returncode == 0, shown.stderr
    assert SECRET not in shown.stdout
    line = next(row for row in shown.stdout.splitlines() if row.startswith("notify.destinations"))
    assert '"secret": "<set, not shown>"' in line and "https://example.org/hook" in line


def test_monoagent_help_does_not_import_httpx_or_tenacity():
    probe = "import sys; from monoagent._cli import main; sys.argv = ['monoagent', '--help']\n" \
            "try:\n    main()\nexcept SystemExit:\n    pass\n" \
            "print(sorted(m for m in ('httpx', 'tenacity') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MONO_AGENT_")})
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_web_new_needs_no_table_and_delivers_into_a_new_console_thread(tmp_path):
    from monoagent_plugins.serving.web.store import ConsoleStore

    agent, events = agent_with(tmp_path, {})
    dispatch = NotifyDispatch(agent)
    dispatch.check(["web:new"], "cron.jobs[0].notify")
    asyncio.run(dispatch.deliver(["web:new"], result("All green.", "r-web"), channel="cron", source="morning"))
    (delivered,) = events.of("notify_delivered", "notify_failed")
    assert delivered.type == "notify_delivered" and delivered.data["destination"] == "web:new"
    store = ConsoleStore(agent.config.home)
    try:
        (thread,) = store.threads(archived=False)
        assert thread["title"] == "cron morning" and thread["id"].startswith("web:")
        assert [(m["role"], m["text"], m["run_id"]) for m in store.messages(thread["id"])] == [("assistant", "All green.", "r-web")]
    finally:
        store.close()
    with pytest.raises(ConfigError, match="'web:old' is not a notify destination"):
        dispatch.check(["web:old"], "cron.jobs[0].notify")
    agent.close()
