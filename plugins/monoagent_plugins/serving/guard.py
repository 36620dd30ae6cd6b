"""The connection guard of ``monoagent serve``: bounded time per request, and a cap on unauthenticated connections.

uvicorn bounds neither the time a client takes to send its request headers nor its body, so a
client that sends them a byte at a time holds a connection (and, mid-body, a request task)
for as long as it likes. :func:`guarded_protocol` makes uvicorn's h11 protocol class enforce:

- **headers**: the request line and headers must be complete within ``serve.headerTimeoutMs`` of
  the connection's opening, or of the first byte of a later request on a kept-alive connection;
  otherwise the server answers ``408`` (``Connection: close``) and closes the connection.
- **body**: a route reads its body with
  :func:`~monoagent_plugins.serving.http.read_body`, which answers ``408`` once the body is not
  complete within its timeout of the end of the headers (``serve.bodyTimeoutMs`` once the request
  is authenticated, ``serve.unauthenticatedBodyTimeoutMs`` before: the webhook's signature is
  checked over the body). The guard closes a connection whose body is still arriving
  :data:`BACKSTOP_MARGIN_S` past the longer of the two (a route that answered without reading it).
- **unauthenticated connections**: at most ``serve.maxUnauthenticatedConnections`` connections
  may be open that have not presented an accepted credential (a route calls
  :func:`~monoagent_plugins.serving.http.authenticated` once it has one: a good bearer token, a
  verified webhook signature). A connection opened beyond the cap evicts the oldest
  unauthenticated one, which is answered ``503`` with ``Retry-After: 1`` (or, mid-body, closed),
  so slow clients cannot keep a new client out, and an authenticated connection is never
  evicted.

The per-connection object is put in each request's ``scope["state"]`` under :data:`CONNECTION`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import attrs

from monoagent import logger

CONNECTION = "monoagent.connection"
"""The key of a request's :class:`GuardedConnection` in ``scope["state"]``."""
BACKSTOP_MARGIN_S = 1.0
"""How long past the longer body timeout the guard waits for a route to answer before it closes the connection."""


@attrs.frozen
class GuardLimits:
    """The limits of :func:`guarded_protocol`, from the ``serve`` section (seconds and a count)."""

    header_timeout_s: float
    body_timeout_s: float
    unauthenticated_body_timeout_s: float
    max_unauthenticated: int


def _raw_answer(status: int, reason: str, message: str, *extra: str) -> bytes:
    body = message.encode()
    head = [f"HTTP/1.1 {status} {reason}", "content-type: text/plain; charset=utf-8", "connection: close",
            f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def guarded_protocol(limits: GuardLimits) -> type:
    """uvicorn's h11 protocol class with the guard's limits (the ``http`` argument of ``uvicorn.Config``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    unauthenticated: OrderedDict[int, Any] = OrderedDict()

    class GuardedConnection(H11Protocol):
        """One client connection under the guard's limits."""

        authenticated = False
        headers_done_at: float | None = None
        _timer: asyncio.TimerHandle | None = None
        _seen: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.app_state = {**self.app_state, CONNECTION: self}
            while len(unauthenticated) >= limits.max_unauthenticated:
                _, oldest = unauthenticated.popitem(last=False)
                oldest.evict()
            unauthenticated[id(self)] = self
            self._arm(limits.header_timeout_s, self._headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            unauthenticated.pop(id(self), None)
            self._disarm()
            super().connection_lost(exc)

        def authenticate(self) -> None:
            """The connection presented an accepted credential: it no longer counts, and is never evicted."""
            self.authenticated = True
            unauthenticated.pop(id(self), None)

        def evict(self) -> None:
            logger.warning("serve: over serve.maxUnauthenticatedConnections ({}): closing the oldest unauthenticated "
                           "connection, from {}", limits.max_unauthenticated, self.client[0] if self.client else "-")
            self._disarm()
            if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
                self.transport.write(_raw_answer(503, "Service Unavailable", "too many unauthenticated connections "
                                                 "(serve.maxUnauthenticatedConnections); retry", "retry-after: 1"))
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._timer is None and self.conn.their_state is h11.IDLE:
                self._arm(limits.header_timeout_s, self._headers_late)  # the first byte of a kept-alive request
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def _follow(self) -> None:
            """Move the timer along with the request: headers, then body, then none."""
            if self.cycle is not None and self.cycle is not self._seen:  # a new request's headers are in
                self._seen = self.cycle
                self.headers_done_at = self.loop.time()
                if self.conn.their_state is h11.SEND_BODY:
                    self._arm(max(limits.body_timeout_s, limits.unauthenticated_body_timeout_s) + BACKSTOP_MARGIN_S,
                              self._body_late)
                else:
                    self._disarm()
            elif self.conn.their_state is not h11.SEND_BODY and self.conn.their_state is not h11.IDLE:
                self._disarm()  # the body is in

        def _arm(self, delay: float, callback: Any) -> None:
            self._disarm()
            self._timer = self.loop.call_later(delay, callback)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_late(self) -> None:
            self._timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            logger.info("serve: request headers from {} not complete within {} ms (serve.headerTimeoutMs): "
                           "connection closed", self.client[0] if self.client else "-", round(limits.header_timeout_s * 1000))
            if self.conn.our_state is h11.IDLE:
                self.transport.write(_raw_answer(408, "Request Timeout", "request headers not complete within "
                                                 f"{round(limits.header_timeout_s * 1000)} ms (serve.headerTimeoutMs)"))
            self.transport.close()

        def _body_late(self) -> None:
            self._timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
                return
            logger.info("serve: a request body from {} still arriving past its timeout: connection closed",
                           self.client[0] if self.client else "-")
            self.transport.close()

    return GuardedConnection
