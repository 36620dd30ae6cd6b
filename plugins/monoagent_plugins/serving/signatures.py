"""HMAC-SHA256 request signatures with a timestamp: the inbound webhook channel checks them, the
webhook notifier makes them. One scheme for both directions, so a receiver written for one
verifies the other.

The header (:data:`SIGNATURE_HEADER`) is ``t=<unix seconds>,v1=<hex>``, where ``<hex>`` is
``HMAC-SHA256(secret, f"{t}." + raw body)``. Several ``v1=`` entries may be given (a sender
rotating its secret signs with both); one matching entry is enough. A timestamp more than
:data:`TOLERANCE_S` (5 minutes) away from the receiver's clock, in either direction, is refused, so a
captured request cannot be replayed later. Every comparison is constant-time
(:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence

SIGNATURE_HEADER = "X-Monoagent-Signature"
TOLERANCE_S = 300
"""How far a signature's timestamp may be from the receiver's clock: older (or newer) requests are refused."""

_MAX_HEADER_CHARS = 2048
_ENTRY = re.compile(r"^(t|v1)=([0-9a-fA-F]{64}|[0-9]{1,12})$")


class SignatureRefused(Exception):
    """A request whose signature header is missing, malformed, stale or wrong; the message says which."""


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``f"{timestamp}." + body`` under ``secret``."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The :data:`SIGNATURE_HEADER` value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    return f"t={timestamp},v1={signature(secret, body, timestamp)}"


def parse(header: str | None) -> tuple[int, list[str]]:
    """``(timestamp, [v1 signatures])`` of a header value; :class:`SignatureRefused` naming what is wrong."""
    if not header:
        raise SignatureRefused(f"missing {SIGNATURE_HEADER} header (t=<unix seconds>,v1=<hex HMAC-SHA256>)")
    if len(header) > _MAX_HEADER_CHARS:
        raise SignatureRefused(f"{SIGNATURE_HEADER} header is longer than {_MAX_HEADER_CHARS} characters")
    timestamp: int | None = None
    digests: list[str] = []
    for part in header.split(","):
        found = _ENTRY.match(part.strip())
        if found is None:
            raise SignatureRefused(f"malformed {SIGNATURE_HEADER} header: expected t=<unix seconds>,v1=<64 hex digits>")
        key, value = found.groups()
        if key == "t":
            if timestamp is not None or not value.isdigit():
                raise SignatureRefused(f"malformed {SIGNATURE_HEADER} header: exactly one t=<unix seconds> is allowed")
            timestamp = int(value)
        elif len(value) == 64:
            digests.append(value.lower())
        else:
            raise SignatureRefused(f"malformed {SIGNATURE_HEADER} header: v1 must be 64 hex digits")
    if timestamp is None or not digests:
        raise SignatureRefused(f"malformed {SIGNATURE_HEADER} header: it needs t=<unix seconds> and at least one v1=<hex>")
    return timestamp, digests


def verify(secrets: Sequence[str], header: str | None, body: bytes, now: float, tolerance_s: int = TOLERANCE_S) -> int:
    """Check ``header`` against ``body`` under any of ``secrets``; the signed timestamp, or :class:`SignatureRefused`.

    Staleness is checked before the HMAC, and every secret is compared against every given
    signature, so the time taken says nothing about which one nearly matched.
    """
    timestamp, digests = parse(header)
    if abs(now - timestamp) > tolerance_s:
        raise SignatureRefused(
            f"signature timestamp {timestamp} is more than {tolerance_s} s from the server's clock ({int(now)}): "
            f"a replayed or delayed request; sign it again"
        )
    matched = False
    for secret in secrets:
        expected = signature(secret, body, timestamp)
        for digest in digests:
            matched |= hmac.compare_digest(expected, digest)
    if not matched:
        raise SignatureRefused("signature does not match the body under the configured secret")
    return timestamp
