"""The settings every bundled HTTP provider has, declared once.

Each provider's config class keeps its own keys, defaults and environment variables
(``MONO_AGENT_<PREFIX>_...``); these functions build the four fields they share, so a change to
a bound or a wording reaches every provider and the generated configuration reference alike.
"""

from __future__ import annotations

from typing import Any

from monoagent import ProviderError, setting

_READ_TIMEOUT_DOC = "Read timeout: the longest wait for the next piece of the stream{loading} (seconds)."


def max_output_tokens(env_prefix: str, default: int | None, doc: str) -> Any:
    """``maxOutputTokens``: the answer's length cap sent with each request (``doc`` names the wire field)."""
    return setting(default, doc=doc, env=f"MONO_AGENT_{env_prefix}_MAX_OUTPUT_TOKENS", min=1, max=1_000_000)


def read_timeout(env_prefix: str, *, model_loading: bool = False) -> Any:
    """``timeoutSeconds``; a local server that loads the model on the first request says so."""
    doc = _READ_TIMEOUT_DOC.format(loading=", model loading included" if model_loading else "")
    return setting(600.0, doc=doc, env=f"MONO_AGENT_{env_prefix}_TIMEOUT_SECONDS", min=0.1, max=3600)


def connect_timeout(env_prefix: str) -> Any:
    """``connectTimeoutSeconds``."""
    return setting(10.0, doc="Connect timeout (seconds).", env=f"MONO_AGENT_{env_prefix}_CONNECT_TIMEOUT_SECONDS", min=0.1, max=600)


def context_window(env_prefix: str, default: int, what: str) -> Any:
    """``contextWindow``: ``what`` says whose window it is (the model's, the server's)."""
    return setting(
        default, doc=f"{what}, in tokens (drives the compaction budget).",
        env=f"MONO_AGENT_{env_prefix}_CONTEXT_WINDOW", min=1024, max=100_000_000,
    )


def missing_setting(provider: str, model: str, what: str, remedy: str) -> ProviderError:
    """The one-line error of a provider whose required setting is unset, e.g. no API key."""
    return ProviderError(f"{provider}: no {what} for {provider}:{model}; {remedy}", provider=provider)
