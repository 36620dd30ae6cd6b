"""Benchmark: ``monoagent serve`` answering chat completions, next to a bare endpoint on the same stack.

Three servers, each a subprocess on 127.0.0.1 (port 0) with its state in the temporary directory:

* ``monoagent serve`` with the ``openai-api`` channel (bearer token, offline:echo, the ``files``
  history store with its durable commit, run artifacts on: the defaults);
* the *bare* endpoint: ``serve_channels`` (the same Starlette application builder, the same
  uvicorn configuration, loop and signal handling as ``monoagent serve``) mounting one channel
  whose ``POST /v1/chat/completions`` reads the body and returns the exact bytes of a response
  recorded from ``monoagent serve`` at start;
* a *null* server: a raw asyncio protocol answering every request with those bytes and a fixed
  HTTP head, no HTTP framework: what the load generator reaches when the server costs ~nothing.

One load generator (this process: C threads, each with its own keep-alive ``http.client``
connection per server, sending its next request when the last is answered) drives them in the
same run. Scenarios, in this order in each of R rounds: null, bare, ``monoagent serve`` with each
client on its own conversation, ``monoagent serve`` with every client on one conversation, and
the same turns in-process (``ChannelRuns.run`` on an Agent in this process, no HTTP: what HTTP
adds). Each is N requests of ~200 characters (non-streamed). Served and in-process conversations
are new in each round and warmed up with W turns (32: the durable 64-message window full), then
measured over their next N / C turns: a warm session's history grows two messages a turn, and
a turn's cost with it, so every round and scenario measures the same stretch of a conversation.

Reported per scenario: requests/s (median over rounds), p50/p90/p99/max latency (pooled), errors
(any answer other than 200, or a transport error), the server's CPU per request (``/proc``:
the server process; for in-process turns this process, split by thread) and the generator's.
The history commit floor (write + fsync + rename + fsync(dir) of a record of the size the server
wrote, ``_benchlib.durable_write``) is measured after each round on the same disk.

Target: on distinct conversations at least 50 % of the bare endpoint's requests/s (the
difference is the turn and its durable commit) and p99 under 50 ms, with no error. One
conversation is reported next to it: its turns run one at a time (one active turn per
conversation), so its p99 is about C turns long and its requests/s is bounded by one turn.

    .venv/bin/python bench/serve.py [--quick] [--json] [--clients C] [--requests N] [--rounds R] [--warmup W]
                                    [--profile DIR] [--env NAME=VALUE]

``--profile DIR`` runs ``monoagent serve`` under cProfile (``DIR/serve.prof``, top functions
printed); the figures of such a run are not the verdict's.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _benchlib import (
    clean_env,
    durable_write,
    emit_json,
    filesystem_of,
    machine,
    p99,
    parser,
    scaled,
    state_dir,
    summary,
    verdict_line,
)

PATH = "/v1/chat/completions"
TOKEN = "bench-token"
USER_CHARS = 200
TARGET_RATIO = 0.5
TARGET_P99_MS = 50.0
FLOOR_REPETITIONS = 30
SCENARIOS = ("null", "bare", "distinct", "one", "inprocess")
LABELS = {
    "null": "null server (generator ceiling)",
    "bare": "bare Starlette endpoint",
    "distinct": "monoagent serve, {clients} conversations",
    "one": "monoagent serve, 1 conversation",
    "inprocess": "same turns in-process, no HTTP",
}
BARE_SERVER = "--bare-server"
NULL_SERVER = "--null-server"
Conversation = Callable[[int, int], str]
"""The conversation id of request ``n`` sent by client ``i``."""


# --------------------------------------------------------------------------- the servers


def bare_server(recorded: Path) -> None:
    """The bare endpoint: ``serve_channels`` with one channel answering the recorded bytes.

    The server's log set up as ``monoagent serve`` sets it (INFO on stderr: one access line a
    request), without the command line's redaction chain.
    """
    from starlette.responses import Response
    from starlette.routing import Route

    from monoagent._kernel.log import configure_cli, configure_server_log
    from monoagent_plugins.serving.http import serve_channels

    configure_cli(debug=False)
    configure_server_log(json=False)
    answer = recorded.read_bytes()

    class RecordedAnswer:
        name = "bare"
        enabled = True
        has_credentials = True
        credential_hint = "none: the bench's bare endpoint takes any request"

        async def completion(self, request: Any) -> Any:
            await request.body()
            return Response(answer, media_type="application/json", headers={"X-Conversation-Id": "bench"})

        def routes(self) -> list[Any]:
            return [Route(PATH, self.completion, methods=["POST"])]

        async def start(self) -> None:
            """Nothing to start."""

        def stop_accepting(self) -> None:
            """Nothing runs turns."""

        def cancel_in_flight(self) -> int:
            return 0

        async def shutdown(self) -> None:
            """Nothing to release."""

    def on_listening(host: str, port: int) -> None:
        print(f"bare: listening on http://{host}:{port}", flush=True)

    asyncio.run(serve_channels([RecordedAnswer()], "127.0.0.1", 0, 0.0, on_listening))


class CannedAnswer(asyncio.Protocol):
    """Answers each HTTP/1.1 request on the connection (head, then Content-Length bytes) with ``answer``."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.buffer = b""
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = re.search(rb"(?im)^content-length:\s*(\d+)", self.buffer[:head_end])
            end = head_end + 4 + (int(length.group(1)) if length else 0)
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            self.transport.write(self.answer)


def null_server(recorded: Path) -> None:
    """The null server: the recorded bytes behind a fixed head, until SIGTERM."""
    body = recorded.read_bytes()
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: CannedAnswer(answer), "127.0.0.1", 0)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        host, port = server.sockets[0].getsockname()[:2]
        print(f"null: listening on http://{host}:{port}", flush=True)
        async with server:
            await stop.wait()

    asyncio.run(serve())


class Child:
    """A server subprocess; ``url`` once it printed ``listening on http://...`` on its first line.

    Its standard error goes to a file (``<name>.stderr`` in ``cwd``), never to a pipe nobody
    reads while the load runs, which would stall the server once the pipe is full.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.stderr = cwd / f"{name}.stderr"
        with self.stderr.open("w") as stderr:
            self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        if found is None:
            self.process.kill()
            self.process.wait()
            raise SystemExit(f"{argv[1:]} did not start: {line!r} {self.stderr.read_text()[-2000:]}")
        self.url = found.group(1)

    def cpu_s(self) -> float | None:
        """User + system CPU seconds of the process so far, from /proc (None where there is none)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed after 60 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


# --------------------------------------------------------------------------- the load generator


def request_body() -> bytes:
    words = "please summarise the latest build log and tell me which tests failed and why".split()
    text = " ".join(words[i % len(words)] for i in range(USER_CHARS))[:USER_CHARS]
    return json.dumps({"model": "offline:echo", "messages": [{"role": "user", "content": text}]}).encode()


class LoadGenerator:
    """C sender threads, each with a keep-alive ``http.client`` connection of its own.

    Threads with the standard library's client, not httpx's AsyncClient: on this machine httpx
    spends about 2.5 ms of CPU a request with 16 requests in flight (its ceiling was ~370 req/s,
    below the servers measured), ``http.client`` about 0.1 ms. Each scenario connects anew before
    its clock starts: uvicorn closes a connection idle for 5 s, as it is while other scenarios run.
    """

    def __init__(self, clients: int) -> None:
        self.clients = clients

    def drive(self, server: Child, requests: int, conversation: Conversation) -> dict[str, Any]:
        """``requests`` POSTs from the C senders, each sending its next when the last is answered."""
        body = request_body()
        latencies: list[float] = []
        errors: Counter[str] = Counter()
        remaining = iter(range(requests))
        connected, go = threading.Barrier(self.clients + 1), threading.Event()
        host, port = server.url.removeprefix("http://").rsplit(":", 1)

        def sender(i: int) -> None:
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                connection.connect()
            except OSError:
                connection.close()  # the first request connects again, and counts the error if it fails too
            connected.wait()
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            go.wait()
            for n in remaining:
                start = time.perf_counter()
                try:
                    connection.request("POST", PATH, body=body, headers={**headers, "X-Conversation-Id": conversation(i, n)})
                    answer = connection.getresponse()
                    answer.read()
                except (OSError, http.client.HTTPException) as exc:
                    errors[type(exc).__name__] += 1
                    connection.close()
                    continue
                latencies.append(time.perf_counter() - start)
                if answer.status != 200:
                    errors[f"HTTP {answer.status}"] += 1
            connection.close()

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(self.clients)]
        for thread in threads:
            thread.start()
        connected.wait()
        server_threads = thread_cpu_s(server.process.pid)
        server_cpu, own_cpu, start = server.cpu_s(), time.process_time(), time.perf_counter()
        go.set()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
        server_after = server.cpu_s()
        by_thread = cpu_spent(server_threads, thread_cpu_s(server.process.pid))
        return {
            "requests": requests,
            "wall_s": wall,
            "rps": requests / wall,
            "latencies": latencies,
            "errors": dict(errors),
            "generator_cpu_s": time.process_time() - own_cpu,
            "server_cpu_s": None if server_cpu is None or server_after is None else server_after - server_cpu,
            "thread_cpu_s": by_thread,
        }


def thread_cpu_s(pid: int, names: dict[int, str] | None = None) -> dict[str, float]:
    """CPU seconds of each live thread of process ``pid`` (Linux /proc), summed by thread name.

    ``names`` maps a thread id to its name; another thread is ``MainThread`` when its id is the
    process's, else ``other threads``. Empty where there is no /proc.
    """
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = (names or {}).get(int(tid)) or ("MainThread" if int(tid) == pid else "other threads")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def own_thread_cpu_s() -> dict[str, float]:
    """:func:`thread_cpu_s` of this process, by thread name without its number (``asyncio_3`` is ``asyncio``)."""
    return thread_cpu_s(os.getpid(), {t.native_id: t.name.rstrip("0123456789_-") for t in threading.enumerate() if t.native_id})


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: spent - before.get(name, 0.0) for name, spent in after.items()}


class InProcessTurns:
    """The same turns without HTTP: ``ChannelRuns.run`` of the openai-api channel's request, C at once.

    What the channel does once it has parsed the body, on an Agent from ``fresh_agent`` (the
    bundled plugins, offline:echo, the files store, run artifacts on), in this process on one
    loop kept across rounds. Its CPU per turn against the served one is what HTTP adds.
    """

    def __init__(self, tmp: Path, clients: int, env: dict[str, str]) -> None:
        self.clients = clients
        self.runner = asyncio.Runner()
        self.runner.run(self._open(tmp, env))

    async def _open(self, tmp: Path, env: dict[str, str]) -> None:
        from monoagent.testing import fresh_agent
        from monoagent_plugins.serving.channel_runs import ChannelRuns

        self.agent = fresh_agent(tmp, env=env)
        self.runs = ChannelRuns(self.agent)

    def drive(self, requests: int, conversation: Conversation) -> dict[str, Any]:
        return self.runner.run(self._drive(requests, conversation))

    async def _drive(self, requests: int, conversation: Conversation) -> dict[str, Any]:
        from monoagent._kernel.turn_request import TurnRequest

        text = json.loads(request_body())["messages"][-1]["content"]
        latencies: list[float] = []
        errors: Counter[str] = Counter()
        remaining = iter(range(requests))

        async def sender(i: int) -> None:
            for n in remaining:
                turn = TurnRequest(text, conversation_id=f"openai-api:{conversation(i, n)}", channel="openai-api", delivery="request")
                start = time.perf_counter()
                try:
                    await self.runs.run(turn)
                except Exception as exc:  # counted and named in the report
                    errors[type(exc).__name__] += 1
                    continue
                latencies.append(time.perf_counter() - start)

        threads, cpu, start = own_thread_cpu_s(), time.process_time(), time.perf_counter()
        await asyncio.gather(*(sender(i) for i in range(self.clients)))
        wall = time.perf_counter() - start
        used = time.process_time() - cpu
        by_thread = cpu_spent(threads, own_thread_cpu_s())
        return {"requests": requests, "wall_s": wall, "rps": requests / wall, "latencies": latencies, "errors": dict(errors),
                "generator_cpu_s": 0.0, "server_cpu_s": used, "thread_cpu_s": by_thread}

    def close(self) -> None:
        async def close() -> None:
            await self.runs.shutdown()
            await self.agent.aclose()

        self.runner.run(close())
        self.runner.close()


# --------------------------------------------------------------------------- the run


def serve_argv(profile: Path | None) -> list[str]:
    if profile is None:
        return [sys.executable, "-m", "monoagent", "serve"]
    return [sys.executable, "-m", "cProfile", "-o", str(profile / "serve.prof"), "-m", "monoagent", "serve"]


def round_plan(r: int, clients: int, turns: int) -> tuple[dict[str, Conversation], dict[str, Conversation]]:
    """Round ``r``'s conversations: those warmed up (``warmup`` turns each) and those measured.

    Every served and in-process conversation is new in the round, warmed up, then measured over
    the same ``turns`` turns (about requests / clients): on distinct conversations client i stays
    on its own, on one conversation all clients share one until it had ``turns`` turns, then the
    next. A warm session's history grows by two messages a turn, and a turn's cost with it, so
    each round and scenario measures the same stretch of a conversation's life.
    """
    warm: dict[str, Conversation] = {
        "distinct": lambda i, n: f"r{r}-c{n % clients}",
        "one": lambda i, n: f"r{r}-one{n % clients}",
        "inprocess": lambda i, n: f"r{r}-c{n % clients}",
    }
    measured: dict[str, Conversation] = {
        "null": lambda i, n: "bench",
        "bare": lambda i, n: "bench",
        "distinct": lambda i, n: f"r{r}-c{i}",
        "one": lambda i, n: f"r{r}-one{n // turns}",
        "inprocess": lambda i, n: f"r{r}-c{i}",
    }
    return warm, measured


def measure(tmp: Path, clients: int, requests: int, rounds: int, warmup: int, profile: Path | None,
            extra_env: dict[str, str]) -> dict[str, Any]:
    from monoagent_plugins.history.records import record_name

    home = tmp / "home"
    env = {**clean_env(home), "XDG_CONFIG_HOME": str(tmp / "xdg"), "MONO_AGENT_OPENAI_API_ENABLED": "1",
           "MONO_AGENT_OPENAI_API_TOKENS": TOKEN, "MONO_AGENT_SERVE_PORT": "0", **extra_env}
    floor_dir = tmp / "floor"
    floor_dir.mkdir()
    servers: dict[str, Child] = {}
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
    floor_s: list[float] = []
    record_bytes = 0
    turns = -(-requests // clients)
    load = LoadGenerator(clients)
    in_process: InProcessTurns | None = None
    try:
        servers["distinct"] = servers["one"] = Child("serve", serve_argv(profile), env, tmp)
        host, port = servers["distinct"].url.removeprefix("http://").rsplit(":", 1)
        first = http.client.HTTPConnection(host, int(port), timeout=60)
        first.request("POST", PATH, body=request_body(),
                      headers={"Authorization": f"Bearer {TOKEN}", "X-Conversation-Id": "bench-record"})
        answer = first.getresponse()
        recorded = answer.read()
        first.close()
        if answer.status != 200:
            raise SystemExit(f"monoagent serve answered {answer.status}: {recorded[:500]!r}")
        (tmp / "recorded.json").write_bytes(recorded)
        for kind, flag in (("bare", BARE_SERVER), ("null", NULL_SERVER)):
            servers[kind] = Child(kind, [sys.executable, __file__, flag, str(tmp / "recorded.json")], env, tmp)
        in_process = InProcessTurns(tmp / "inprocess", clients, extra_env)
        slots = in_process.agent.config.concurrency.max_concurrent_runs  # the same env as the server's

        def drive(scenario: str, n: int, conversation: Conversation) -> dict[str, Any]:
            if scenario == "inprocess":
                assert in_process is not None
                return in_process.drive(n, conversation)
            return load.drive(servers[scenario], n, conversation)

        for scenario in ("null", "bare"):
            drive(scenario, max(warmup, 1) * clients, round_plan(0, clients, turns)[1][scenario])
        for r in range(rounds):
            warm, measured = round_plan(r, clients, turns)
            for scenario, conversation in warm.items():
                drive(scenario, warmup * clients, conversation)
            for scenario in SCENARIOS:
                samples[scenario].append(drive(scenario, requests, measured[scenario]))
            record_bytes = (home / "history" / record_name(f"openai-api:r{r}-c0")).stat().st_size
            data = os.urandom(record_bytes // 2 + 1).hex().encode()[:record_bytes]
            floor_s.extend(durable_write(floor_dir, data) for _ in range(FLOOR_REPETITIONS))
    finally:
        if in_process is not None:
            in_process.close()
        exits = {kind: server.stop() for kind, server in servers.items()}
    return {"samples": samples, "floor_s": floor_s, "record_bytes": record_bytes, "response_bytes": len(recorded),
            "exit_codes": exits, "turns": turns, "slots": slots}


def scenario_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [x for run in runs for x in run["latencies"]]
    stats = scaled(summary(latencies), 1000)
    stats["p99"] = p99(latencies) * 1000
    total = sum(run["requests"] for run in runs)
    errors: Counter[str] = Counter()
    for run in runs:
        errors.update(run["errors"])
    server_cpu = [run["server_cpu_s"] for run in runs]
    generator_cpu = sum(run["generator_cpu_s"] for run in runs)
    wall = sum(run["wall_s"] for run in runs)
    rps = sorted(run["rps"] for run in runs)
    by_thread: Counter[str] = Counter()
    for run in runs:
        by_thread.update(run.get("thread_cpu_s", {}))
    return {
        "requests": total,
        "rps": rps[len(rps) // 2],
        "rps_per_round": [run["rps"] for run in runs],
        "latency_ms": stats,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "server_cpu_ms_per_request": None if None in server_cpu else 1000 * sum(server_cpu) / total,
        "generator_cpu_ms_per_request": 1000 * generator_cpu / total,
        "generator_core_share": generator_cpu / wall,
        "cpu_ms_per_request_by_thread": {name: 1000 * spent / total for name, spent in by_thread.most_common() if spent > 0},
    }


def profile_top(profile: Path, limit: int = 25) -> str:
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(str(profile / "serve.prof"), stream=out).sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=16, help="concurrent clients, each with its own connection (default 16)")
    p.add_argument("--requests", type=int, default=None, help="requests per scenario and round (default 1600, quick 320)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of every scenario, interleaved (default 3, quick 1)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up turns of each conversation before it is measured (default 32, quick 4)")
    p.add_argument("--profile", metavar="DIR", default=None, help="run monoagent serve under cProfile, DIR/serve.prof")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for monoagent serve, e.g. MONO_AGENT_CONCURRENCY_MAX_CONCURRENT_RUNS=16")
    args = p.parse_args()
    requests = args.requests or (320 if args.quick else 1600)
    rounds = args.rounds or (1 if args.quick else 3)
    warmup = args.warmup if args.warmup is not None else (4 if args.quick else 32)
    profile = Path(args.profile).resolve() if args.profile else None
    if any("=" not in item for item in args.env):
        p.error("--env takes NAME=VALUE")
    extra_env = dict(item.split("=", 1) for item in args.env)
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    with state_dir(args.tmp_root, args.keep) as tmp:
        fs = filesystem_of(tmp)
        load_before, started = os.getloadavg()[0], time.perf_counter()
        out = measure(tmp, args.clients, requests, rounds, warmup, profile, extra_env)
        wall, load_after = time.perf_counter() - started, os.getloadavg()[0]

    rows = {s: scenario_row(out["samples"][s]) for s in SCENARIOS}
    floor = scaled(summary(out["floor_s"]), 1000)
    bare, distinct, one, null = rows["bare"], rows["distinct"], rows["one"], rows["null"]
    ratio = distinct["rps"] / bare["rps"]
    errors = sum(r["errors"] for r in rows.values())
    clean_exit = all(code == 0 for code in out["exit_codes"].values())
    ok = ratio >= TARGET_RATIO and distinct["latency_ms"]["p99"] < TARGET_P99_MS and errors == 0 and clean_exit
    detail = (
        f"{args.clients} conversations {distinct['rps']:.0f} req/s = {ratio:.2f}x the bare endpoint's {bare['rps']:.0f} "
        f"(target >= {TARGET_RATIO}x), p99 {distinct['latency_ms']['p99']:.1f} ms (target < {TARGET_P99_MS:.0f} ms); "
        f"1 conversation {one['rps']:.0f} req/s, p99 {one['latency_ms']['p99']:.1f} ms; {errors} errors"
        f"{'' if clean_exit else '; a server did not exit 0: ' + str(out['exit_codes'])}"
        f"{'; PROFILED run' if profile else ''}{'; with ' + ' '.join(args.env) if args.env else ''}"
    )
    from importlib.util import find_spec

    import uvicorn

    stack = {"uvicorn": uvicorn.__version__, "http": "httptools" if find_spec("httptools") else "h11",
             "loop": "asyncio.run (default policy)", "processes": "one per server, one worker"}
    if args.json:
        emit_json({
            "benchmark": "serve", "quick": args.quick, "clients": args.clients, "requests": requests, "rounds": rounds,
            "warmup_turns": warmup, "measured_turns_per_conversation": out["turns"], "wall_s": wall,
            "load_average_1min": [load_before, load_after], "machine": machine(), "filesystem": fs, "stack": stack,
            "response_bytes": out["response_bytes"], "record_bytes": out["record_bytes"], "execution_slots": out["slots"],
            "scenarios": rows, "commit_floor_ms": floor, "ratio_to_bare": ratio, "exit_codes": out["exit_codes"],
            "profiled": profile is not None, "server_env": extra_env,
            "target": f"distinct conversations >= {TARGET_RATIO} x bare req/s and p99 < {TARGET_P99_MS:.0f} ms; 0 errors",
            "pass": ok, "verdict": verdict_line("serve", ok, detail),
        })
        return
    print(f"serve benchmark: {args.clients} clients (threads, keep-alive http.client), {requests} non-streamed chat completions per scenario "
          f"and round, {rounds} round(s), {wall:.1f} s in all; each conversation measured over its turns {warmup + 1}.."
          f"{warmup + out['turns']} (history {2 * warmup}..{2 * (warmup + out['turns'] - 1)} messages)")
    print(f"stack: uvicorn {stack['uvicorn']} ({stack['http']}), {stack['loop']}, {stack['processes']}; response "
          f"{out['response_bytes']} B; state dir on {fs['device']} ({fs['fstype']}, mounted at {fs['mountpoint']})")
    busy = max(load_before, load_after) > (os.cpu_count() or 1)
    print(f"machine: {os.cpu_count()} CPUs, 1-minute load average {load_before:.1f} before and {load_after:.1f} after the run"
          f"{' (above the CPU count: other work competed for the CPUs, the figures are pessimistic)' if busy else ''}")
    if args.env:
        print(f"not the defaults: {' '.join(args.env)}")
    print()
    print(f"{'scenario':<33} {'req/s':>7} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7} {'errors':>6} "
          f"{'srv CPU ms/req':>14} {'x bare':>7}")
    for scenario in SCENARIOS:
        r, lat = rows[scenario], rows[scenario]["latency_ms"]
        cpu = r["server_cpu_ms_per_request"]
        print(f"{LABELS[scenario].format(clients=args.clients):<33} {r['rps']:>7.0f} {lat['median']:>7.2f} {lat['p90']:>7.2f} "
              f"{lat['p99']:>7.2f} {lat['max']:>7.2f} {r['errors']:>6} {'n/a' if cpu is None else f'{cpu:.3f}':>14} "
              f"{r['rps'] / bare['rps']:>7.2f}")
    print()
    print(f"history commit floor (write+fsync+rename+fsync(dir) of the {out['record_bytes']} B record, "
          f"{len(out['floor_s'])} after the rounds): median {floor['median']:.2f} ms, p90 {floor['p90']:.2f} ms "
          f"-> one conversation (a turn at a time) at most {1000 / floor['median']:.0f} turns/s, the channel's "
          f"{out['slots']} execution slots (concurrency.maxConcurrentRuns) at most {out['slots'] * 1000 / floor['median']:.0f}")
    print(f"load generator: {null['generator_cpu_ms_per_request']:.3f} ms CPU a request, ceiling {null['rps']:.0f} req/s "
          f"against the null server; against the bare endpoint it used {bare['generator_core_share']:.0%} of a core "
          f"({bare['rps'] / null['rps']:.0%} of its ceiling)")
    for scenario in ("distinct", "inprocess"):
        threads = rows[scenario]["cpu_ms_per_request_by_thread"]
        if threads:
            print(f"CPU a request by thread, {LABELS[scenario].format(clients=args.clients)}: "
                  + ", ".join(f"{name} {ms:.2f} ms" for name, ms in threads.items()))
    print("  (MainThread: the event loop; asyncio: worker threads, the history store's load and commit; "
          "monoagent-artifacts: the run-file writer)")
    if errors:
        print("errors: " + "; ".join(f"{s}: {rows[s]['error_kinds']}" for s in SCENARIOS if rows[s]["errors"]))
    if profile is not None:
        print()
        print(profile_top(profile))
    print()
    print(verdict_line("serve", ok, detail))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == BARE_SERVER:
        bare_server(Path(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == NULL_SERVER:
        null_server(Path(sys.argv[2]))
    else:
        main()
