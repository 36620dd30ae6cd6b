"""Benchmark: the provider layer's overhead on one streamed reply, against a bare httpx call.

A local server (a child process, so it does not share our GIL) streams the same Anthropic
Messages API reply to every request: message_start, 120 text_delta events of a few words each,
message_delta with usage, message_stop, byte for byte as the vendor documents it.

Measured in the same run, interleaved one request each in turn, N times (200; 40 with --quick):

- **monoagent**: the ``anthropic`` runtime made by a ``fresh_agent`` (``agent.provider(...)``),
  driven directly with ``async for event in runtime.stream(request)`` for a ProviderRequest built
  by the agent's own assembly; this is the whole provider layer (request body from the
  assembled prompt, an httpx client per step, SSE decoding with httpx-sse, event objects,
  usage), without the harness around it;
- **bare httpx**: one ``httpx.AsyncClient`` kept open across requests (connection reuse, the
  most favourable bare set-up), POSTing a pre-built body and reading ``aiter_lines`` with
  ``json.loads`` of each ``data:`` line, collecting the text deltas.

Reported: median and p90 per request and the time to the first text token, for both, and the
ratio of the medians. Also, for information, a whole ``agent.respond`` turn on the same server
(history commit and run artifacts included), which is not part of the target.

Target: monoagent median <= 1.2 x bare median + 2 ms.

    .venv/bin/python bench/providers.py [--quick] [--json] [-n N]
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _benchlib import emit_json, machine, parser, scaled, state_dir, summary, verdict_line

RATIO = 1.2
ALLOWANCE_MS = 2.0
DELTAS = 120
PHRASE = "the quick brown fox "

SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def event(name, data):
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

frames = [event("message_start", {"type": "message_start", "message": {"id": "msg_bench", "type": "message", "role": "assistant",
          "content": [], "model": "claude-x", "stop_reason": None, "stop_sequence": None,
          "usage": {"input_tokens": 900, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
          event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
          event("ping", {"type": "ping"})]
for i in range(int(sys.argv[1])):
    frames.append(event("content_block_delta", {"type": "content_block_delta", "index": 0,
                  "delta": {"type": "text_delta", "text": f"{i} " + sys.argv[2]}}))
frames += [event("content_block_stop", {"type": "content_block_stop", "index": 0}),
           event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                 "usage": {"output_tokens": 480}}),
           event("message_stop", {"type": "message_stop"})]
chunks = [b"%x\r\n%s\r\n" % (len(f), f) for f in frames]

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
    def log_message(self, *args):
        pass

class Server(ThreadingHTTPServer):
    daemon_threads = True
    def handle_error(self, request, address):
        pass

server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


async def monoagent_request(runtime: Any, request: Any) -> tuple[float, float, str]:
    from monoagent._kernel.model import TextDelta

    start = time.perf_counter()
    first = 0.0
    pieces: list[str] = []
    async for event in runtime.stream(request):
        if isinstance(event, TextDelta):
            if not pieces:
                first = time.perf_counter() - start
            pieces.append(event.text)
    return time.perf_counter() - start, first, "".join(pieces)


async def bare_request(client: Any, url: str, headers: dict[str, str], body: bytes) -> tuple[float, float, str]:
    start = time.perf_counter()
    first = 0.0
    pieces: list[str] = []
    async with client.stream("POST", url, content=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                if data["type"] == "content_block_delta" and data["delta"]["type"] == "text_delta":
                    if not pieces:
                        first = time.perf_counter() - start
                    pieces.append(data["delta"]["text"])
    return time.perf_counter() - start, first, "".join(pieces)


async def run(tmp: Path, url: str, n: int) -> dict[str, Any]:
    import httpx

    from monoagent._kernel.model import ProviderRequest
    from monoagent._kernel.turn_request import TurnRequest
    from monoagent.testing import fresh_agent

    agent = fresh_agent(
        tmp,
        config={"runtime": {"model": "anthropic:claude-x"}, "providers": {"anthropic": {"baseUrl": url}}},
        env={"ANTHROPIC_API_KEY": "bench-key"},
    )
    runtime = agent.provider("anthropic:claude-x")
    prompt = await agent.assemble(TurnRequest("Tell me about foxes.", conversation_id="bench"))
    request = ProviderRequest("claude-x", prompt, prompt.messages)
    from monoagent_plugins.providers.anthropic_wire import request_body

    body = request_body(request, 4096)
    headers = {"content-type": "application/json", "x-api-key": "bench-key", "anthropic-version": "2023-06-01"}
    endpoint = f"{url}/v1/messages"
    ours: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    turns: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(5):  # warm-up: imports, converters, connection
            await monoagent_request(runtime, request)
            await bare_request(client, endpoint, headers, body)
        expected = None
        for i in range(n):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for which in order:
                if which == 0:
                    total, first, text = await monoagent_request(runtime, request)
                    ours.append((total, first))
                else:
                    total, first, text = await bare_request(client, endpoint, headers, body)
                    bare.append((total, first))
                expected = expected or text
                if text != expected:
                    raise SystemExit("the two paths streamed different text")
        for i in range(max(n // 4, 5)):
            start = time.perf_counter()
            await agent.respond(TurnRequest("Tell me about foxes.", conversation_id=f"bench-{i}"))
            turns.append(time.perf_counter() - start)
    await agent.aclose()
    return {"ours": ours, "bare": bare, "turns": turns, "chars": len(expected or "")}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=None, help="requests per path (default 200, quick 40)")
    args = p.parse_args()
    n = args.n or (40 if args.quick else 200)
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(DELTAS), PHRASE], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        with state_dir(args.tmp_root, args.keep) as tmp:
            started = time.perf_counter()
            out = asyncio.run(run(tmp, url, n))
            wall = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait()

    ours = scaled(summary([t for t, _ in out["ours"]]), 1000)
    bare = scaled(summary([t for t, _ in out["bare"]]), 1000)
    ours_first = scaled(summary([f for _, f in out["ours"]]), 1000)
    bare_first = scaled(summary([f for _, f in out["bare"]]), 1000)
    turn = scaled(summary(out["turns"]), 1000)
    ratio = ours["median"] / bare["median"] if bare["median"] else float("inf")
    limit = RATIO * bare["median"] + ALLOWANCE_MS
    ok = ours["median"] <= limit
    detail = (
        f"monoagent {ours['median']:.2f} ms vs bare httpx {bare['median']:.2f} ms per streamed reply "
        f"({ratio:.2f}x; target <= {RATIO}x + {ALLOWANCE_MS:.0f} ms = {limit:.2f} ms); "
        f"first token {ours_first['median']:.2f} vs {bare_first['median']:.2f} ms"
    )
    if args.json:
        emit_json(
            {
                "benchmark": "providers",
                "quick": args.quick,
                "n": n,
                "deltas": DELTAS,
                "chars": out["chars"],
                "wall_s": wall,
                "machine": machine(),
                "monoagent_ms": ours,
                "bare_httpx_ms": bare,
                "monoagent_first_token_ms": ours_first,
                "bare_httpx_first_token_ms": bare_first,
                "ratio": ratio,
                "whole_turn_ms": turn,
                "target": f"monoagent median <= {RATIO} x bare median + {ALLOWANCE_MS} ms",
                "pass": ok,
                "verdict": verdict_line("providers", ok, detail),
            }
        )
        return
    print(f"providers benchmark: one Anthropic stream of {DELTAS} text deltas ({out['chars']} chars) from a local "
          f"server process, {n} requests per path, interleaved, {wall:.1f} s in all")
    print("monoagent = the anthropic runtime's stream() (request body, client, SSE, events); "
          "bare = one reused httpx.AsyncClient + aiter_lines + json.loads")
    print()
    print(f"{'path':<22}{'median ms':>11}{'p90 ms':>10}{'min ms':>10}{'first token ms':>16}")
    for name, total, first in (("monoagent runtime", ours, ours_first), ("bare httpx", bare, bare_first)):
        print(f"{name:<22}{total['median']:>11.2f}{total['p90']:>10.2f}{total['min']:>10.2f}{first['median']:>16.2f}")
    print()
    print(f"ratio of medians: {ratio:.2f}x (target <= {RATIO}x + {ALLOWANCE_MS:.0f} ms, i.e. <= {limit:.2f} ms)")
    print(f"for information, a whole agent.respond turn on the same server: median {turn['median']:.2f} ms "
          f"(p90 {turn['p90']:.2f} ms, {turn['n']:.0f} turns; history commit and run artifacts included)")
    print(verdict_line("providers", ok, detail))


if __name__ == "__main__":
    main()
