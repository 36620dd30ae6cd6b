"""The default redactor: secrets and filesystem paths out, ordinary text and web URLs kept.

Secrets become ``[REDACTED:<kind>]``, found by token formats (credentials whose shape names
them) and context rules (a value under a secret-named key, credentials in URLs and command
lines): :mod:`monoagent_plugins.observability.redaction_secrets` describes them all. An absolute
filesystem path becomes an opaque host-root token followed by at most two trailing components;
web URLs stay readable: :mod:`monoagent_plugins.observability.redaction_paths`. The ``redact`` hook runs
both (:func:`redact_text`), or the secret rules only for the terminal, whose reader is the
machine's own user.

:func:`redact_structure` applies a text redactor to JSON-shaped data: string values and object
keys alike, values under secret-named keys wholesale, and keys that collide after redaction
disambiguated deterministically (``key``, ``key#2``, ``key#3``, in input order) so no admitted
value is lost. Wrappers on the ``redact`` hook add steps on top of this one.

The recall and precision of these rules are measured on ``tests/data/redaction_recall.json``
and ``tests/data/redaction_precision.json`` (held as floors by
``tests/hostile/test_hostile_secrets.py``; ``bench/redaction.py`` measures them next to
detect-secrets); docs/security.md has the figures and why detect-secrets is not used at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monoagent import hookimpl
from monoagent_plugins.observability.redaction_names import is_placeholder, is_secret_name
from monoagent_plugins.observability.redaction_paths import redact_paths
from monoagent_plugins.observability.redaction_secrets import redact_secrets

MAX_KEY_CHARS = 256


def redact_text(text: str) -> str:
    """Secrets, then absolute paths outside URLs, out of ``text``."""
    return redact_paths(redact_secrets(text))


def redact_structure(value: Any, redact: Callable[[str], str] = redact_text) -> Any:
    """JSON-shaped ``value`` with every string and object key passed through ``redact``.

    A string or number under a secret-named key (``password``, ``api_key``, ``SecretAccessKey``,
    ...; see :func:`is_secret_name`), or in a list under one, is replaced wholesale unless it is
    a placeholder; so is the ``value`` of a ``{"name": <secret name>, "value": ...}`` pair, the
    second item of a ``[<secret name>, value]`` pair, and every value under ``data`` or
    ``stringData`` of a Kubernetes ``{"kind": "Secret"}``. Keys
    that collide after redaction keep every value: the second and later ones (in input order)
    get ``#2``, ``#3``...; keys are bounded to 256 characters.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        named = any(
            str(k).lower() in ("name", "key") and isinstance(v, str) and is_secret_name(v) for k, v in value.items()
        )
        kubernetes_secret = value.get("kind") == "Secret"
        for key, item in value.items():
            raw_key = str(key)
            secret = is_secret_name(raw_key) or (named and raw_key.lower() == "value")
            if kubernetes_secret and raw_key in ("data", "stringData") and isinstance(item, dict):
                item_out = {k: _secret_item(v, redact) for k, v in redact_structure(item, redact).items()}
            else:
                item_out = _secret_item(item, redact) if secret else redact_structure(item, redact)
            safe = redact(raw_key)[:MAX_KEY_CHARS]
            name, n = safe, 1
            while name in out:
                n += 1
                name = f"{safe}#{n}"
            out[name] = item_out
        return out
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and isinstance(value[0], str) and is_secret_name(value[0]):
            return [redact(value[0]), _secret_item(value[1], redact)]
        return [redact_structure(item, redact) for item in value]
    return value


def _secret_item(item: Any, redact: Callable[[str], str]) -> Any:
    """``item`` found under a secret-named key: its strings and numbers replaced, placeholders kept."""
    if isinstance(item, (str, int, float)) and not isinstance(item, bool):
        return item if is_placeholder(item) else "[REDACTED:secret_value]"
    if isinstance(item, (list, tuple)):
        return [_secret_item(element, redact) for element in item]
    return redact_structure(item, redact)


@hookimpl(trylast=True)
def redact(text: str, kind: str) -> str:
    if kind == "terminal":  # the reader is the machine's own user: secrets go, paths stay readable
        return redact_secrets(text)
    return redact_text(text)
