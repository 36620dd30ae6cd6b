"""The default token estimate: ``ceil(utf8_bytes / 4)``.

A provider-agnostic approximation that errs high for English text, which is the safe side when
sizing history against a budget. A tokeniser plugin (tiktoken, a model's own tokeniser)
replaces it by implementing ``count_tokens``.
"""

from __future__ import annotations

from monoagent.kernel.host import bundled_impl


@bundled_impl
def count_tokens(text: str, model: str) -> int:
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)
