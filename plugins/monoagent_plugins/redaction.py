"""The default redactor: secrets and filesystem paths out, ordinary web URLs kept.

Secrets become ``[REDACTED:<kind>]``. An absolute filesystem path becomes an opaque host-root
token (``<root:1a2b3c4d>``, a digest of the hidden prefix, so equal prefixes stay comparable)
followed by at most two trailing components. URLs keep their host and path; only credentials
in them (``user:password@``) and secret-looking query values are removed. Wrappers on the
``redact`` hook add steps on top of this one.
"""

from __future__ import annotations

import hashlib
import re

from monoagent.plugins import bundled_impl

_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)")),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{16,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    ("aws_secret", re.compile(r"(?i)(aws_secret_access_key\s*[=:]\s*)['\"]?[A-Za-z0-9/+=]{40}['\"]?")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer_token", re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{16,}=*")),
    ("url_credentials", re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^\s/@:]+:[^\s/@]+@")),
    (
        "secret_assignment",
        re.compile(r"(?i)(\b[\w.\-]*(?:api[_-]?key|secret|token|passw(?:or)?d|credential)s?[\"']?\s*[=:]\s*[\"']?)[^\s\"',;&]{6,}"),
    ),
]

_PATH = re.compile(
    r"(?<![\w:/.~\-])(?:~|[A-Za-z]:\\|/)(?:[^\s/\\'\"<>|:`]+[/\\])+[^\s/\\'\"<>|:`,;)]*"
)


def _path_token(match: re.Match[str]) -> str:
    path = match.group(0)
    parts = [p for p in re.split(r"[/\\]", path) if p and p != "~" and not p.endswith(":")]
    keep = parts[-2:] if len(parts) > 2 else parts[-1:] if len(parts) > 1 else []
    hidden = path[: len(path) - len("/".join(keep))] if keep else path
    digest = hashlib.sha256(hidden.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"<root:{digest}>" + "".join("/" + part for part in keep)


def redact_text(text: str) -> str:
    for kind, pattern in _SECRETS:
        if pattern.groups:
            text = pattern.sub(lambda m, k=kind: m.group(1) + f"[REDACTED:{k}]", text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return _PATH.sub(_path_token, text)


@bundled_impl
def redact(text: str, kind: str) -> str:
    return redact_text(text)
