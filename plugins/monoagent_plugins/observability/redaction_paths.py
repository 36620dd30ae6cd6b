"""The default redactor's path rule: absolute filesystem paths as opaque host-root tokens (:func:`redact_paths`).

An absolute filesystem path becomes an opaque host-root token ``<root:1a2b3c4d>``
followed by at most two trailing components. The token is a keyed digest of the hidden prefix
(the key is random per process), so equal prefixes stay comparable within a process while the
prefix cannot be guessed back. Only real paths count: a Windows drive or UNC path, a home path
(``~``, ``~user``), ``file://`` URLs, and a POSIX path whose first component is a filesystem
root (``/home``, ``/Users``, ``/etc``, ``/tmp``, ``/var``, ``/opt``, ``/srv``, ...) or that names
a file (``/x/y/report.pdf``, ``/x/.env``). Escapes inside JSON strings (``\\t``, ``\\n``, ``\\\\``,
``\\/``) are read as escapes (a JSON-escaped path, ``C:\\\\Users\\\\x`` or ``\\/home\\/x``, is
still a path), and markup (``</html>``, ``<br/>``), URL routes (``/api/v1/users``) and slash
commands (``/help``) are not paths. Account and home prefixes (``/home/<user>``,
``/Users/<user>``, ``C:\\Users\\<user>``, ``/root``) are always hidden, and a trailing component
that is itself sensitive (``.ssh``, ``id_rsa``, ``.env``, a run id) is hidden with the prefix.
Ordinary web URLs (``https://docs.python.org/3/``) stay readable; only the credentials and
secret parameters inside a URL are removed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re

from monoagent import LazyPattern

_lazy = LazyPattern  # the patterns compile on first use (CLI start-up)

_KEY = os.urandom(32)

_URL = _lazy(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s\"'<>`]*")

_COMPONENT = r"[^\s/\\'\"<>|:`*?]+"
_PATH_LOOKBEHIND = r"(?:(?<![\w:/.~\-\\<])|(?<=\\[nrt]))"
_JSON_PATH_SHAPES = (
    rf"[A-Za-z]:\\\\{_COMPONENT}(?:\\\\{_COMPONENT})*",  # C:\\Users\\x (JSON-escaped)
    rf"[A-Za-z]:/{_COMPONENT}(?:/{_COMPONENT})*/?",  # C:/Users/x
    rf"\\\\\\\\{_COMPONENT}(?:\\\\{_COMPONENT})+",  # \\\\server\\share (JSON-escaped UNC)
    rf"~[\w.\-]*(?:/{_COMPONENT})+/?",  # ~/x, ~alice/x
    rf"(?P<escaped>\\/{_COMPONENT}(?:\\/{_COMPONENT})*)",  # \/home\/x (JSON-escaped)
    rf"(?P<posix>/{_COMPONENT}(?:/{_COMPONENT})*/?)",
)
_RAW_PATH_SHAPES = (
    rf"[A-Za-z]:\\{_COMPONENT}(?:[\\/]{_COMPONENT})*[\\/]?",  # C:\Users\x
    rf"\\\\{_COMPONENT}(?:\\{_COMPONENT})+",  # \\server\share
)
# In JSON text a backslash is always an escape, so the raw Windows shapes (whose separators could be
# read out of "\\x\tname") are left out there.
_JSON_PATH = _lazy(_PATH_LOOKBEHIND + "(?:" + "|".join(_JSON_PATH_SHAPES) + ")")
_PATH = _lazy(_PATH_LOOKBEHIND + "(?:" + "|".join(_JSON_PATH_SHAPES[:3] + _RAW_PATH_SHAPES + _JSON_PATH_SHAPES[3:]) + ")")
_FILESYSTEM_ROOTS = frozenset(
    "home users root tmp var etc usr opt srv mnt media private volumes library applications system dev proc sys run "
    "bin sbin lib lib32 lib64 libx32 boot snap nix workspace workspaces cygdrive cores".split()
)
_DRIVE_ROOTS = frozenset(("users", "windows", "program files", "programdata", "documents and settings"))
_FILE_LIKE = _lazy(r"\.[^.\s]+|.+\.[A-Za-z][A-Za-z0-9]{0,7}")
_HOME_ROOTS = {"home", "users", "root", "var", "private", "tmp", "mnt", "media", "documents and settings"}
_SENSITIVE = _lazy(
    r"(?i)^(?:\.ssh|\.aws|\.gnupg|\.kube|\.docker|\.netrc|\.pgpass|\.npmrc|\.pypirc|\.env(?:\..*)?|\.git-credentials|"
    r"id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?|credentials(?:\.json)?|secrets?(?:\.\w+)?|.*\.(?:pem|key|p12|pfx|kdbx)|"
    r"[0-9a-f]{16,}|[0-9a-f\-]{32,}|tmp[A-Za-z0-9_]{6,}|run-[A-Za-z0-9]{8,})$"
)


def _root_token(hidden: str) -> str:
    digest = hmac.new(_KEY, hidden.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
    return f"<root:{digest}>"


def opaque_path(path: str) -> str:
    """``path`` as a host-root token and at most two non-sensitive trailing components."""
    parts = [p for p in re.split(r"[/\\]", path) if p]
    if len(parts) > 1 and len(parts[0]) == 1 and parts[1].lower() in _DRIVE_ROOTS and path.startswith("/"):
        parts[0] += ":"  # /c/Users/... is C:\Users\... (Git Bash, MSYS, Cygwin)
    floor = 1
    if parts and (parts[0].startswith("~") or parts[0].endswith(":")):
        floor = 1 + (1 if len(parts) > 1 and parts[0].endswith(":") and parts[1].lower() in _HOME_ROOTS else 0)
        if parts[0].endswith(":") and len(parts) > 1 and parts[1].lower() in ("users", "documents and settings"):
            floor = 3
    elif parts and parts[0].lower() in _HOME_ROOTS:
        floor = 1 if parts[0].lower() == "root" else 2
    elif path.startswith("\\\\"):
        floor = 2
    keep: list[str] = []
    for part in reversed(parts[floor:]):
        if len(keep) == 2 or _SENSITIVE.match(part):
            break
        keep.insert(0, part)
    hidden = "/".join(parts[: len(parts) - len(keep)])
    return _root_token(hidden) + "".join("/" + part for part in keep)


def _path(match: re.Match[str]) -> str:
    """A matched path-shaped span as a token, unless it is a POSIX-shaped span that is no filesystem path."""
    span = match.group(0)
    if match.group("posix") or match.group("escaped"):
        parts = [p for p in re.split(r"\\?/", span) if p]
        drive = len(parts) > 1 and len(parts[0]) == 1 and parts[1].lower() in _DRIVE_ROOTS  # /c/Users/... (Git Bash)
        if not (parts[0].lower() in _FILESYSTEM_ROOTS or drive or any(_FILE_LIKE.fullmatch(p) for p in parts)):
            return span
    return opaque_path(span)


def _redact_url(url: str) -> str:
    if url.lower().startswith("file://"):
        rest = url[7:]
        return "file://" + (opaque_path(rest) if rest.startswith("/") else rest)
    return url


def redact_paths(text: str) -> str:
    """``text`` with every absolute filesystem path outside web URLs as an opaque host-root token."""
    paths = _JSON_PATH if _is_json(text) else _PATH
    out: list[str] = []
    last = 0
    for match in _URL.finditer(text):
        out.append(paths.sub(_path, text[last : match.start()]))
        out.append(_redact_url(match.group(0)))
        last = match.end()
    out.append(paths.sub(_path, text[last:]))
    return "".join(out)


def _is_json(text: str) -> bool:
    """Whether ``text`` is one JSON object or array (whose backslashes are all escapes)."""
    stripped = text.strip()
    if not stripped or stripped[0] + stripped[-1] not in ("{}", "[]") or "\\" not in stripped:
        return False
    try:
        json.loads(stripped)
    except (ValueError, RecursionError):
        return False
    return True
