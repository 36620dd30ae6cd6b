"""The default redactor: secrets and filesystem paths out, ordinary web URLs kept.

Secrets become ``[REDACTED:<kind>]``: API keys of the common model providers (Anthropic,
OpenAI, Google, Groq, xAI, Hugging Face, Replicate, ...), cloud keys (AWS access and secret
keys, Azure account keys and SAS signatures, GCP service-account key blocks), platform tokens
(GitHub, GitLab, Slack, Stripe and its webhook secrets, npm, PyPI, SendGrid, Twilio, Telegram bots, DigitalOcean),
JWTs, bearer and basic ``Authorization`` values, private-key blocks, credentials in URLs
(``user:password@``), ``.netrc`` passwords, ``curl -u user:password``, secret-looking query values and
``password=...`` style assignments.

An absolute filesystem path (POSIX, ``~``, Windows drive or UNC, ``file://``) becomes an opaque
host-root token ``<root:1a2b3c4d>`` followed by at most two trailing components. The token is a
keyed digest of the hidden prefix (the key is random per process), so equal prefixes stay
comparable within a process while the prefix cannot be guessed back. Account and home prefixes
(``/home/<user>``, ``/Users/<user>``, ``C:\\Users\\<user>``, ``/root``) are always hidden, and a
trailing component that is itself sensitive (``.ssh``, ``id_rsa``, ``.env``, a run id) is hidden
with the prefix. Relative paths and ordinary web URLs (``https://docs.python.org/3/``) stay
readable; only the credentials and secret parameters inside a URL are removed.

:func:`redact_structure` applies a text redactor to JSON-shaped data: string values and object
keys alike, values under secret-named keys wholesale, and keys that collide after redaction
disambiguated deterministically (``key``, ``key#2``, ``key#3``, in input order) so no admitted
value is lost. Wrappers on the ``redact`` hook add steps on top of this one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Callable
from typing import Any

from monoagent.plugins import bundled_impl
from monoagent.text import LazyPattern

_lazy = LazyPattern  # the patterns compile on first use (CLI start-up)

_KEY = os.urandom(32)
MAX_KEY_CHARS = 256

_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", _lazy(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)")),
    ("private_key", _lazy(r"(?i)(\"private_key\"\s*:\s*\")[^\"]+")),
    ("anthropic_key", _lazy(r"\bsk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai_key", _lazy(r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}")),
    ("groq_key", _lazy(r"\bgsk_[A-Za-z0-9]{20,}")),
    ("xai_key", _lazy(r"\bxai-[A-Za-z0-9]{20,}")),
    ("replicate_token", _lazy(r"\br8_[A-Za-z0-9]{20,}")),
    ("huggingface_token", _lazy(r"\bhf_[A-Za-z0-9]{30,}")),
    ("google_api_key", _lazy(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("google_oauth_token", _lazy(r"\bya29\.[0-9A-Za-z_\-]{20,}")),
    ("aws_access_key", _lazy(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    (
        "aws_secret",
        _lazy(r"(?i)(aws_?secret_?(?:access_?)?key[\"']?\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])"),
    ),
    ("azure_key", _lazy(r"(?i)(\b(?:AccountKey|SharedAccessKey|sig)=)[A-Za-z0-9%/+]{20,}={0,2}")),
    ("github_token", _lazy(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("gitlab_token", _lazy(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("slack_token", _lazy(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
    ("slack_webhook", _lazy(r"(https://hooks\.slack\.com/services/)[A-Za-z0-9/_\-]+")),
    ("discord_webhook", _lazy(r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/)[0-9]+/[A-Za-z0-9_\-]+")),
    ("telegram_bot_token", _lazy(r"\b[0-9]{8,10}:AA[A-Za-z0-9_\-]{30,40}\b")),
    ("stripe_key", _lazy(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("stripe_webhook_secret", _lazy(r"\bwhsec_[A-Za-z0-9]{24,}")),
    ("npm_token", _lazy(r"\bnpm_[A-Za-z0-9]{36}")),
    ("pypi_token", _lazy(r"\bpypi-AgE[A-Za-z0-9_\-]{20,}")),
    ("sendgrid_key", _lazy(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}")),
    ("twilio_key", _lazy(r"\bSK[0-9a-fA-F]{32}\b")),
    ("digitalocean_token", _lazy(r"\bdo[por]_v1_[a-f0-9]{64}")),
    ("jwt", _lazy(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer_token", _lazy(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{16,}=*")),
    ("basic_auth", _lazy(r"(?i)(\bauthorization\s*[=:]\s*[\"']?basic\s+)[A-Za-z0-9+/]{8,}=*")),
    ("netrc_password", _lazy(r"(?i)(\b(?:machine\s+\S+|default)\s+(?:(?:login|account)\s+\S+\s+)*password\s+)(?!\[REDACTED)\S+")),
    ("cli_credentials", _lazy(r"(?i)((?:^|\s)(?:-u|--user)(?:\s+|=)[\"']?[^\s:\"'/]+:)(?!\[REDACTED|//)[^\s\"']+")),
    ("json_auth", _lazy(r"(?i)(\"(?:auth|identitytoken|registrytoken)\"\s*:\s*\")(?!\[REDACTED)[^\"]{8,}")),
    ("npm_auth", _lazy(r"(?i)(:_auth(?:Token)?\s*=\s*)(?!\[REDACTED)\S+")),
    ("url_credentials", _lazy(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^\s/@:\"'<>]*:[^\s/@\"'<>]+(?=@)")),
    (
        "secret_parameter",
        _lazy(
            r"(?i)([?&](?:access_token|refresh_token|id_token|token|api[_-]?key|apikey|key|secret|client_secret|password|passwd|pwd|sig|signature|auth)=)(?!\[REDACTED)[^&#\s\"'<>]{4,}"
        ),
    ),
    (
        "secret_assignment",
        _lazy(
            r"(?i)(\b[\w.\-]*(?:api[_-]?keys?|secrets?|token|passw(?:or)?d|passwd|credentials?|private[_-]?key|access[_-]?key)[\"']?\s*[=:]\s*[\"']?)(?!\[REDACTED)[^\s\"',;&]{6,}"
        ),
    ),
]

_SECRET_KEY_NAME = _lazy(
    r"(?i)^(?:.*[_\-.])?(?:api[_-]?key|apikey|secret|client[_-]?secret|token|access[_-]?token|refresh[_-]?token|"
    r"passw(?:or)?d|passwd|pwd|credentials?|private[_-]?key|authorization|cookie|session[_-]?key|auth|auth[_-]?token)$"
)

_URL = _lazy(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s\"'<>`]*")

_PATH = _lazy(
    r"(?<![\w:/.~\-\\])(?:~[A-Za-z0-9_.\-]*(?=[/\\])|[A-Za-z]:(?=[\\/])|\\\\(?=[^\s\\]))?(?:[/\\][^\s/\\'\"<>|:`*?]+)+[/\\]?"
)

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


def _redact_url(url: str) -> str:
    if url.lower().startswith("file://"):
        rest = url[7:]
        return "file://" + (opaque_path(rest) if rest.startswith("/") else rest)
    return url


def _secrets(text: str) -> str:
    for kind, pattern in _SECRETS:
        if pattern.groups:
            text = pattern.sub(lambda m, k=kind: m.group(1) + f"[REDACTED:{k}]", text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def _paths(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in _URL.finditer(text):
        out.append(_PATH.sub(lambda m: opaque_path(m.group(0)), text[last : match.start()]))
        out.append(_redact_url(match.group(0)))
        last = match.end()
    out.append(_PATH.sub(lambda m: opaque_path(m.group(0)), text[last:]))
    return "".join(out)


def redact_text(text: str) -> str:
    """Secrets, then absolute paths outside URLs, out of ``text``."""
    return _paths(_secrets(text))


def redact_structure(value: Any, redact: Callable[[str], str] = redact_text) -> Any:
    """JSON-shaped ``value`` with every string and object key passed through ``redact``.

    A value under a secret-named key (``password``, ``api_key``, ``token``, ...) that is a string
    is replaced wholesale. Keys that collide after redaction keep every value: the second and
    later ones (in input order) get ``#2``, ``#3``...; keys are bounded to 256 characters.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            raw_key = str(key)
            if isinstance(item, str) and _SECRET_KEY_NAME.match(raw_key) and item:
                item_out: Any = "[REDACTED:secret_value]"
            else:
                item_out = redact_structure(item, redact)
            safe = redact(raw_key)[:MAX_KEY_CHARS]
            name, n = safe, 1
            while name in out:
                n += 1
                name = f"{safe}#{n}"
            out[name] = item_out
        return out
    if isinstance(value, (list, tuple)):
        return [redact_structure(item, redact) for item in value]
    return value


@bundled_impl
def redact(text: str, kind: str) -> str:
    if kind == "terminal":  # the reader is the machine's own user: secrets go, paths stay readable
        return _secrets(text)
    return redact_text(text)
