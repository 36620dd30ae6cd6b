"""Slow clients against a real ``monoagent serve`` subprocess: bounded header and body time, capped unauthenticated connections.

Each test speaks raw HTTP/1.1 over real sockets on 127.0.0.1 and waits on the server's answer or its
close (a blocking ``recv`` with a generous socket timeout that only bounds a failing test), never on
a sleep. The limits are configured small; the elapsed time is checked against them.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
from serving import TOKEN, Server, auth, completion, history, serve_env

MARGIN_S = 5.0
"""How much later than its limit a cut may come on a loaded machine (two cores shared by many processes)."""


def connect(server: Server) -> socket.socket:
    url = urlsplit(server.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    return sock


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = bytearray()
    while chunk := sock.recv(65536):
        received += chunk
    return bytes(received)


def one_answer(sock: socket.socket) -> bytes:
    """One complete HTTP answer (its headers and its Content-Length body) on a connection kept open."""
    received = bytearray()
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, bytes(received)
        received += chunk
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def still_open(sock: socket.socket) -> bool:
    """True while the server has neither answered nor closed the connection."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)  # data or b"" (closed): not open and silent
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)
    return False


def slow_server(tmp_path, **limits: str) -> Server:
    env = serve_env(tmp_path, MONO_AGENT_WEBHOOK_ENABLED="1", MONO_AGENT_WEBHOOK_SECRET_DEPLOY="webhook-secret-1", **limits)
    (tmp_path / "monoagent.toml").write_text("[webhook.hooks.deploy]\n", encoding="utf-8")
    return Server(tmp_path, env=env)


def test_a_slowloris_header_is_answered_408_and_closed_within_the_header_timeout(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_SERVE_HEADER_TIMEOUT_MS="600")
    try:
        with connect(server) as trickle, connect(server) as silent:
            started = time.monotonic()
            trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ")
            answer = until_closed(trickle)
            elapsed = time.monotonic() - started
            assert answer.startswith(b"HTTP/1.1 408 ") and b"serve.headerTimeoutMs" in answer, answer
            assert 0.5 <= elapsed <= 0.6 + MARGIN_S, elapsed
            assert until_closed(silent).startswith(b"HTTP/1.1 408 ")  # a connection that never sends a byte
        with connect(server) as kept:
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # a kept-alive connection: its next request too
            assert one_answer(kept).startswith(b"HTTP/1.1 200 ")
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            assert until_closed(kept).startswith(b"HTTP/1.1 408 ")
        assert server.client.get("/healthz").status_code == 200
        assert server.terminate() == 0
        assert "not complete within 600 ms (serve.headerTimeoutMs)" in server.log()
    finally:
        server.stop()


def test_a_half_sent_body_is_answered_408_within_its_timeout_and_runs_no_turn(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_SERVE_BODY_TIMEOUT_MS="1500", MONO_AGENT_SERVE_UNAUTHENTICATED_BODY_TIMEOUT_MS="500")
    try:
        cases = {  # path, headers, the limit that applies (seconds), its key
            "openai-api": (b"/v1/chat/completions", f"Authorization: Bearer {TOKEN}\r\nX-Conversation-Id: half\r\n".encode(),
                           1.5, b"serve.bodyTimeoutMs"),
            "webhook": (b"/hooks/deploy", b"X-Monoagent-Signature: t=1,v1=00\r\n", 0.5, b"serve.unauthenticatedBodyTimeoutMs"),
        }
        for name, (path, headers, limit, key) in cases.items():
            with connect(server) as sock:
                started = time.monotonic()
                sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers
                             + b"Content-Length: 100\r\n\r\n" + b'{"messages": [')
                answer = until_closed(sock)
                elapsed = time.monotonic() - started
            assert answer.startswith(b"HTTP/1.1 408 ") and key in answer and b"connection: close" in answer.lower(), (name, answer)
            assert limit - 0.1 <= elapsed <= limit + MARGIN_S, (name, elapsed)
        assert "no history" in history(tmp_path, "openai-api:half")
        assert "no history" in history(tmp_path, "webhook:deploy")
        assert server.terminate() == 0
    finally:
        server.stop()


def test_unauthenticated_connections_are_capped_and_an_authenticated_client_is_still_served(tmp_path):
    server = slow_server(tmp_path, MONO_AGENT_SERVE_MAX_UNAUTHENTICATED_CONNECTIONS="3", MONO_AGENT_SERVE_HEADER_TIMEOUT_MS="60000")
    slow: list[socket.socket] = []

    def trickle() -> None:
        """One more connection, accepted (its /healthz answered), then trickling the headers of its next request."""
        sock = connect(server)
        slow.append(sock)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert one_answer(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"POST /hooks/deploy HTTP/1.1\r\nHost: x\r\n")

    try:
        for _ in range(4):
            trickle()
        evicted = until_closed(slow[0])  # the fourth evicted the oldest
        assert evicted.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in evicted.lower(), evicted
        assert b"serve.maxUnauthenticatedConnections" in evicted
        with httpx.Client(base_url=server.url, timeout=30) as client:  # a new connection, with a good token
            served = client.post("/v1/chat/completions", json=completion("still served"), headers=auth())
            assert served.status_code == 200, served.text
            assert until_closed(slow[1]).startswith(b"HTTP/1.1 503 ")  # it took the oldest one's place
            assert still_open(slow[2]) and still_open(slow[3])
        trickle()  # the authenticated connection no longer counts: two slow ones and this one fit the cap
        assert still_open(slow[2]) and still_open(slow[3]) and still_open(slow[4])
        trickle()  # one more than the cap again: the oldest goes
        assert until_closed(slow[2]).startswith(b"HTTP/1.1 503 ") and still_open(slow[3])
        assert server.terminate() == 0
        assert "over serve.maxUnauthenticatedConnections (3)" in server.log()
    finally:
        for sock in slow:
            sock.close()
        server.stop()
