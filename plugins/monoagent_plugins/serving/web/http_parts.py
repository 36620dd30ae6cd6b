"""The web console's HTTP pieces: errors in the console's shape, request bodies, cookies, the page's headers."""

from __future__ import annotations

import functools
import hmac
import mimetypes
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from monoagent_plugins.serving.http import RequestRefused, json_bytes, parse_json, read_body

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

COOKIE = "monoagent_web"
"""The session cookie's name, followed by ``_<port>`` (:func:`cookie_name`)."""
CSRF_HEADER = "X-CSRF-Token"
STATIC = Path(__file__).parent / "static"
TITLE_MAX = 200
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
API_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
TYPES = {".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml",
         ".json": "application/json", ".txt": "text/plain; charset=utf-8", ".png": "image/png", ".ico": "image/x-icon",
         ".woff2": "font/woff2", ".webmanifest": "application/manifest+json"}


class Refused(Exception):
    """An API request answered with an error: status, message, code."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import Response

    return Response(json_bytes({"error": {"message": message, "code": code}}), status_code=status,
                    media_type="application/json", headers={**API_HEADERS, **(headers or {})})


Route = TypeVar("Route", bound=Callable[..., Awaitable["Response"]])


def refusals(route: Route) -> Route:
    """An API route whose :class:`Refused` becomes its error answer (:func:`error`)."""
    @functools.wraps(route)
    async def answered(*args: Any, **kwargs: Any) -> Response:
        try:
            return await route(*args, **kwargs)
        except Refused as refused:
            return error(refused.status, refused.message, refused.code)

    return cast("Route", answered)


def answer(payload: Any, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(json_bytes(payload), status_code=status, media_type="application/json", headers=API_HEADERS)


CODES = {400: "bad_request", 408: "request_timeout", 413: "body_too_large"}


async def body_object(request: Request, max_bytes: int, timeout_s: float, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The request's JSON object with only ``allowed`` keys; :class:`Refused` naming what is wrong."""
    try:
        raw = await read_body(request, max_bytes, timeout_s)
        body = parse_json(raw) if raw.strip() else {}
    except RequestRefused as refused:
        raise Refused(refused.status, refused.message, CODES.get(refused.status, "bad_request")) from None
    if not isinstance(body, dict):
        raise Refused(400, f"the request body must be a JSON object with {', '.join(allowed) or 'no keys'}", "bad_request")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise Refused(400, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed) or 'none'}", "bad_request")
    return body


def title_of(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > TITLE_MAX:
        raise Refused(400, f"title must be a string of 1 to {TITLE_MAX} characters (not only spaces)", "bad_request")
    return " ".join(value.split()) if "\n" in value or "\r" in value else value.strip()


def submission_id_of(value: Any) -> str:
    try:
        parsed = uuid.UUID(value) if isinstance(value, str) and len(value) == 36 else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise Refused(400, "submission_id must be a UUID string such as 3f1c2b1e-8a5d-4f7e-9c0a-2b6f1d3e4a5b, made "
                           "by the page for each Send", "bad_request")
    return str(parsed)


def token_ok(presented: Any, tokens: list[str]) -> bool:
    """Whether ``presented`` is one of ``tokens``, every one compared in constant time."""
    if not isinstance(presented, str) or not presented:
        return False
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(presented.encode("utf-8", "replace"), token.encode("utf-8", "replace"))
    return matched


def own_origin(request: Request) -> str:
    url = request.url
    return f"{url.scheme}://{url.netloc}"


def origin_ok(request: Request) -> bool:
    """An ``Origin`` header, when present, names this server itself."""
    origin = request.headers.get("origin")
    return origin is None or origin == own_origin(request)


def cookie_name(request: Request) -> str:
    """``monoagent_web_<port>``: the port the browser reached (cookies are shared by every port of a host, so two
    consoles on one machine, two agents, would otherwise sign each other out)."""
    url = request.url
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{COOKIE}_{port}"


def session_cookie(request: Request) -> str | None:
    return request.cookies.get(cookie_name(request))


def cookie_header(request: Request, value: str, max_age: int | None) -> str:
    """The ``Set-Cookie`` of a session: HttpOnly, SameSite=Strict, Path=/web, Secure over https."""
    parts = [f"{cookie_name(request)}={value}", "HttpOnly", "SameSite=Strict", "Path=/web"]
    secure = request.url.scheme == "https"
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def static_file(relative: str) -> Path | None:
    """The file under the static directory that ``relative`` names, or None (no such file, or a path that leaves it)."""
    parts = relative.split("/")
    if not relative or any(not part or part.startswith(".") or "\\" in part for part in parts):
        return None
    path = STATIC.joinpath(*parts)
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_relative_to(STATIC.resolve()) or not resolved.is_file():
        return None
    return resolved


def content_type(path: Path) -> str:
    return TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
