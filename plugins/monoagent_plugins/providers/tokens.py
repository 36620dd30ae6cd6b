"""The default token estimate: tiktoken's ``cl100k_base`` when installed, else 4 UTF-8 bytes a token.

With the optional extra (``pip install 'monoagent[tokens]'``), text is counted exactly with
tiktoken's ``cl100k_base`` encoding, a provider-agnostic approximation (as the documents use).
Without it, or when the encoding cannot be loaded (tiktoken fetches its data once, on first use;
one log line says so), the estimate is ``ceil(utf8_bytes / 4)``.

The figure is calibrated against ``cl100k_base`` by ``bench/tokens.py``: English prose and
Markdown run at 4.1 to 5.4 UTF-8 bytes a token and Python code at 4.3, so the estimate errs high
there (the safe side when sizing a request against a budget); JSON (2.6), Chinese and Japanese
(2.8 to 3.0) run lower, where it counts up to a third too few, inside the 20% headroom of the
compaction trigger plus the reactive compaction after an overflow. Bytes vary less across scripts
than characters do (Chinese is 1.0 character a token, English 4.1), hence bytes. A tokeniser plugin
(a model's own tokeniser) replaces both by implementing ``count_tokens``.
"""

from __future__ import annotations

import functools
from typing import Any

from monoagent import hookimpl, logger

BYTES_PER_TOKEN = 4
ENCODING = "cl100k_base"


@functools.cache
def _encoding() -> Any:
    """tiktoken's encoding, once per process; None without tiktoken or when it cannot load its data."""
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        return tiktoken.get_encoding(ENCODING)
    except Exception as exc:  # tiktoken downloads the encoding on first use: offline, it raises what requests raised
        logger.bind(plugin="tokens").warning(
            "tiktoken is installed but its {} encoding could not be loaded ({}: {}); token counts are estimated at "
            "{} UTF-8 bytes a token", ENCODING, type(exc).__name__, exc, BYTES_PER_TOKEN,
        )
        return None


def estimate(text: str) -> int:
    """``ceil(utf8_bytes / 4)``: the calibrated estimate without a tokeniser (ASCII text, one byte a
    character, is measured without encoding it: ``str.isascii`` reads a flag, it does not scan)."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return -(-size // BYTES_PER_TOKEN)


@hookimpl(trylast=True)
def count_tokens(text: str, model: str) -> int:
    encoding = _encoding()
    if encoding is None:
        return estimate(text)
    return len(encoding.encode(text, disallowed_special=()))
