"""The access log of ``monoagent serve``: one log record per HTTP request, through loguru.

:class:`AccessLog` wraps the whole application (an ASGI middleware, so it costs one log call
per request and no per-request task) and logs, at INFO, when the response is done:
``method``, ``path`` (never the query string, cut at :data:`MAX_PATH_CHARS`), ``status``
(``None`` when the client went away before an answer began), ``duration_ms``, ``channel`` (the
channel whose route answered; ``server`` for ``/healthz`` and ``/readyz``, ``-`` for no route),
``client`` (the peer address, or the proxy's ``X-Forwarded-For`` when uvicorn trusts the peer)
and ``request_id``. Headers and bodies are never read, so neither the ``Authorization`` header
nor a request body can reach the log. The fields ride the record as keyword fields: text on the
terminal, one JSON object a line with ``monoagent serve --log-json``.

The request id is the client's ``X-Request-Id`` when it is a plain token of at most 128
characters (a reverse proxy's id keeps one id across both logs), else a new one; it is sent
back as ``X-Request-Id`` on every answer.

uvicorn's own access log stays off; its other records (``uvicorn.error``) are forwarded to
loguru at WARNING and up by :func:`forward_uvicorn_records`, so that every line the process
logs has the one format.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from monoagent import logger

MAX_PATH_CHARS = 512
"""A longer request path is logged cut to this many characters, with ``...``."""
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What a client's ``X-Request-Id`` must look like to be kept (anything else gets a new id)."""


def logged_path(path: str) -> str:
    return path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "..."


class AccessLog:
    """ASGI middleware: an access record per HTTP request, and its ``X-Request-Id``.

    ``channel_of(scope)`` names the channel that answered, from the scope the router filled in.
    """

    def __init__(self, app: Any, channel_of: Callable[[dict[str, Any]], str]) -> None:
        self.app = app
        self.channel_of = channel_of

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = next((value for name, value in scope["headers"] if name == b"x-request-id"), b"").decode("latin-1")
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        status: int | None = None

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            client = scope.get("client")
            logger.info("{method} {path} {status} {duration_ms} ms ({channel}, {client}, request {request_id})",
                        method=scope["method"], path=logged_path(scope["path"]), status=status,
                        duration_ms=round((time.perf_counter() - started) * 1000, 2), channel=self.channel_of(scope),
                        client=client[0] if client else "-", request_id=request_id)


class _ToLoguru(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        logger.opt(exception=record.exc_info or None).log(record.levelname, "uvicorn: {}", record.getMessage())


def forward_uvicorn_records() -> None:
    """Send uvicorn's log records (WARNING and up) to loguru instead of Python's last-resort stderr handler."""
    uvicorn_log = logging.getLogger("uvicorn")
    if not any(isinstance(handler, _ToLoguru) for handler in uvicorn_log.handlers):
        uvicorn_log.addHandler(_ToLoguru())
    uvicorn_log.setLevel(logging.WARNING)
    uvicorn_log.propagate = False
