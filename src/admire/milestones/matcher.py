"""Matching step descriptions against milestones with an ordered pointer (method.md §3, §7).

Two modes (``milestone_reward.matcher``):

* ``sbert`` — the paper's matching: step t hits the milestone under the pointer when the cosine of the
  two sentences' embeddings exceeds δ.
* ``grounded`` (the default) — the hit also needs the structured signatures of the two sentences (verb,
  element role, element label, slotted value; ``signature.py``) to agree. A sentence encoder alone
  scores "typed "<v2>" into the 'Username' field" against the 'Password' one at 0.79 and "unchecked"
  against "checked" at 0.91, so false hits chain through the pointer; the signature cannot confuse
  them. r_t is still the cosine (Eq. 9 unchanged). A milestone outside the grammar of grounded
  descriptions (an LLM's prose, "Login button clicked") has no signature; for it the step's cosine must
  clear δ *and* beat, by ``contrast_margin``, the best cosine of the step's *counterfactuals* — the same
  action described on the other plausible targets of the same screen (computed by the caller,
  ``rewards.counterfactual_descriptions``). Without a signature nothing says which field a sentence is
  about except the encoder, and the encoder scores the wrong field's description nearly as high as the
  right one; what tells them apart is that the right step is the *best* fit on its screen. A step with no
  counterfactuals (no screen, no index-based action) is matched by the cosine alone, as in ``sbert``.
  Before the cosine, the prose is read against the step's signature (``prose.py``, a lexicon of GUI
  verbs): prose that states another action or names another element of the same role ("<value>
  checkbox unchecked" for a tick, "the Password field" for the Username one) is not a hit whatever the
  cosine; prose that states a compatible action and names the step's label ("Login button clicked")
  needs only the cosine ``prose_threshold`` (0.3) and no contrast, because its words already say which
  step it means and MiniLM scores such paraphrases at 0.70 on average, below δ in most pairs.
  ``prose_threshold=None`` turns the reading off.

Embeddings are cached by text because a batch repeats itself heavily: the same milestones for every
trajectory of a task, and the same grounded descriptions ("clicked the 'Submit' button") in most of
them. Every call encodes all the texts it has not seen before in one batch, which is what makes
matching 256 trajectories × 20 steps cheap. Counterfactuals join that batch only for trajectories that
have a milestone without a signature, and only when the contrast is on, so the heuristic generator's
lists (which always parse) cost nothing extra. Signatures are parsed once per text and cached too.

The sentence encoder sits behind the small ``Encoder`` protocol (``admire.embeddings``, which also holds
the text-keyed cache) and is imported only when first used, so this module (the pure method) never pulls
in torch at import time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Literal, get_args

import numpy as np

from admire.embeddings import CacheInfo, EmbeddingStore, Encoder, make_encoder, shared_encoder
from admire.milestones.prose import ProseVerdict, prose_verdict
from admire.milestones.signature import Signature, parse_signature, signatures_agree
from admire.milestones.slots import apply_slots

__all__ = [
    "DEFAULT_CONTRAST_MARGIN",
    "DEFAULT_MODE",
    "DEFAULT_PROSE_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "Hit",
    "MatchItem",
    "MatchResult",
    "Matcher",
    "MatcherMode",
]

DEFAULT_THRESHOLD = 0.75
"""δ of method.md §3 (the paper's value)."""

MatcherMode = Literal["grounded", "sbert"]
MATCHER_MODES: tuple[str, ...] = get_args(MatcherMode)
DEFAULT_MODE: MatcherMode = "grounded"
"""``sbert`` is the paper's text-only matching, one config key away (``milestone_reward.matcher``)."""

DEFAULT_CONTRAST_MARGIN = 0.05
"""How far (in cosine) a step must beat its best counterfactual to hit a milestone without a signature
(``milestone_reward.contrast_margin``; 0 turns the contrast off, which is the paper's matching)."""
DEFAULT_PROSE_THRESHOLD = 0.3
"""The cosine a milestone in prose needs when its words name the step's action and element
(``milestone_reward.prose_threshold``; None turns the prose reading off). Measured on the labelled pairs of
``admire bench matcher_calibration``: a paraphrase that names the step scores 0.70 on average against its
grounded description, and unrelated steps of the same task score 0.34 (docs/method.md §7)."""
MAX_CONTRAST_MARGIN = 2.0
"""The widest gap two cosines in [-1, 1] can have; a larger margin could never be met."""

StepDescriptions = str | Sequence[str]
"""A step's description, or several alternatives (grounded and model) of which the best counts."""

StepCounterfactuals = Sequence[str] | None
"""The descriptions of a step's action applied to the other plausible targets on its screen (None: none)."""

MatchItem = (tuple[Sequence[StepDescriptions], Sequence[str], Sequence[str]]
             | tuple[Sequence[StepDescriptions], Sequence[str], Sequence[str], bool]
             | tuple[Sequence[StepDescriptions], Sequence[str], Sequence[str], bool, Sequence[StepCounterfactuals]])
"""(descriptions per step, milestones, slot values[, positional[, counterfactuals]]) — one trajectory for
``Matcher.match_many``.

``positional`` (default False) slots the descriptions with ``<v1>``, ``<v2>`` … in the order of
``slot values`` (pass ``slots.positional_values(goal)``) instead of the single ``<value>``.
``counterfactuals`` (default: none) has one entry per step: the descriptions of the same action on the
other plausible targets of that step's screen (``rewards.counterfactual_descriptions``). They are slotted
like the descriptions and used only in grounded mode, with ``contrast_margin > 0``, against milestones
that have no signature.
"""


@dataclass(frozen=True)
class Hit:
    """Step t reached milestone ``milestone_index`` with this similarity (r_t^mil of method.md §3)."""

    milestone_index: int
    milestone: str
    similarity: float


@dataclass(frozen=True)
class MatchResult:
    """The ordered pointer's verdict on one trajectory, one entry per step.

    ``similarities[t]`` and ``checked[t]`` are None when nothing was compared at step t: the pointer
    had passed the last milestone, there are no milestones (K == 0), or the step had no description.
    ``signature_agreed[t]`` (grounded mode) says whether a description of step t had the signature of
    the milestone it was compared with; None where nothing was compared or the milestone has no
    signature (matched by the cosine alone), and empty in ``sbert`` mode. When no signature agreed,
    ``similarities[t]`` is still the best cosine, so what the gate turned away stays visible.
    ``rival_similarities[t]`` is the best cosine of step t's counterfactuals to the milestone where the
    contrast decided (a milestone without a signature, counterfactuals given, the cosine above δ), so a
    step the margin turned away shows what beat it; None elsewhere, and empty when the contrast is off
    (``sbert`` mode or ``contrast_margin`` 0). ``prose_verdicts[t]`` is how the prose reading judged step
    t against a milestone without a signature (``anchored``: it names this step; ``conflict``: another
    one; ``neutral``: cannot tell, the cosine decides); None elsewhere, and empty when the reading is off.
    """

    hits: tuple[Hit | None, ...]
    similarities: tuple[float | None, ...]
    checked: tuple[int | None, ...]
    num_milestones: int
    signature_agreed: tuple[bool | None, ...] = ()
    rival_similarities: tuple[float | None, ...] = ()
    prose_verdicts: tuple[ProseVerdict | None, ...] = ()

    @property
    def k(self) -> int:
        """The number of milestones hit (k of method.md §3)."""
        return sum(hit is not None for hit in self.hits)

    @property
    def progress(self) -> float:
        """k / K, or 0.0 when there are no milestones."""
        return self.k / self.num_milestones if self.num_milestones else 0.0


class Matcher:
    """Cosine similarity with an embedding cache, and the ordered pointer of method.md §3.

    ``encoder`` is an ``Encoder``, a name or directory for ``make_encoder``, or None for the process's
    shared all-MiniLM-L6-v2. ``mode`` is ``grounded`` (signature agreement and cosine > δ) or ``sbert``
    (cosine > δ, the paper's reading). ``contrast_margin`` (grounded mode) is how far a step's cosine to a
    milestone without a signature must exceed its best counterfactual's; 0 or None turns it off.
    ``prose_threshold`` (grounded mode) is the cosine a milestone without a signature needs when the prose
    reading finds that it names the step; None turns the reading off.
    """

    def __init__(
        self,
        encoder: Encoder | str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        cache_size: int = 100_000,
        mode: MatcherMode = DEFAULT_MODE,
        contrast_margin: float | None = DEFAULT_CONTRAST_MARGIN,
        prose_threshold: float | None = DEFAULT_PROSE_THRESHOLD,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, Real) or not -1.0 <= float(threshold) <= 1.0:
            raise ValueError(
                f"the milestone threshold δ is a cosine similarity in [-1, 1]; got {threshold!r} "
                "(the paper uses 0.75)"
            )
        if mode not in MATCHER_MODES:
            raise ValueError(f"milestone_reward.matcher is 'grounded' (signature and similarity) or 'sbert' "
                             f"(similarity only, the paper's), got {mode!r}")
        if contrast_margin is None:
            contrast_margin = 0.0
        if (isinstance(contrast_margin, bool) or not isinstance(contrast_margin, Real)
                or not 0.0 <= float(contrast_margin) <= MAX_CONTRAST_MARGIN):
            raise ValueError(f"milestone_reward.contrast_margin is a cosine gap in [0, {MAX_CONTRAST_MARGIN}] "
                             f"(0 or null turns the contrast off); got {contrast_margin!r}")
        if prose_threshold is not None and (
                isinstance(prose_threshold, bool) or not isinstance(prose_threshold, Real)
                or not -1.0 <= float(prose_threshold) <= 1.0):
            raise ValueError(f"milestone_reward.prose_threshold is a cosine similarity in [-1, 1] (null turns the "
                             f"prose reading off); got {prose_threshold!r}")
        if encoder is None:
            encoder = shared_encoder()
        elif isinstance(encoder, str):
            encoder = make_encoder(encoder)
        self.encoder: Encoder = encoder
        self.threshold: float = float(threshold)
        self.mode: MatcherMode = mode
        self.contrast_margin: float = float(contrast_margin)
        self.prose_threshold: float | None = None if prose_threshold is None else float(prose_threshold)
        self._store: EmbeddingStore = EmbeddingStore(self.encoder, cache_size)
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
        positional: bool = False,
    ) -> MatchResult:
        """Run the ordered pointer over one trajectory's step descriptions.

        ``descriptions[t]`` is step t's description or a sequence of alternatives (description mode
        "both"), of which the highest similarity counts (in grounded mode: among those whose signature
        agrees). ``slot_values`` are the literal values of this episode's instruction; they are
        replaced by placeholders in the descriptions — ``<value>``, or ``<v{i+1}>`` for
        ``slot_values[i]`` when ``positional`` — while the milestones are expected to be stored slotted
        already.
        """
        return self.match_many([(descriptions, milestones, slot_values, positional)])[0]

    @property
    def contrasts(self) -> bool:
        """Whether counterfactuals are used at all: grounded mode with a positive margin."""
        return self.mode == "grounded" and self.contrast_margin > 0.0

    @property
    def reads_prose(self) -> bool:
        """Whether milestones without a signature are read against the step's (grounded mode)."""
        return self.mode == "grounded" and self.prose_threshold is not None

    def match_many(self, items: Sequence[MatchItem]) -> list[MatchResult]:
        """``match`` for many trajectories, with every text of the batch encoded in one go."""
        prepared = [_prepare(i, *item) for i, item in enumerate(items)]
        texts: list[str] = []
        runs: list[tuple[list[tuple[str, ...]], tuple[str, ...], list[tuple[str, ...]] | None]] = []
        for steps, milestones, counterfactuals in prepared:
            rivals = None
            if milestones:  # K == 0: nothing is compared, so nothing needs encoding
                texts.extend(milestones)
                for alternatives in steps:
                    texts.extend(alternatives)
                if (self.contrasts and any(counterfactuals)
                        and any(parse_signature(milestone) is None for milestone in milestones)):
                    rivals = [_distinct(alternatives, others)
                              for alternatives, others in zip(steps, counterfactuals, strict=True)]
                    for others in rivals:
                        texts.extend(others)
            runs.append((steps, milestones, rivals))
        vectors = self.embed(texts) if texts else {}
        return [self._pointer(steps, milestones, vectors, rivals) for steps, milestones, rivals in runs]

    def _pointer(
        self,
        steps: list[tuple[str, ...]],
        milestones: tuple[str, ...],
        vectors: dict[str, np.ndarray],
        rivals: list[tuple[str, ...]] | None = None,
    ) -> MatchResult:
        grounded = self.mode == "grounded"
        hits: list[Hit | None] = []
        similarities: list[float | None] = []
        checked: list[int | None] = []
        agreed: list[bool | None] = []
        rival_scores: list[float | None] = []
        verdicts: list[ProseVerdict | None] = []
        pointer = 0
        for t, alternatives in enumerate(steps):
            rival_scores.append(None)
            verdicts.append(None)
            if pointer >= len(milestones) or not alternatives:
                hits.append(None)
                similarities.append(None)
                checked.append(None)
                agreed.append(None)
                continue
            milestone = milestones[pointer]
            target = vectors[milestone]
            scores = {text: _cosine(vectors[text], target) for text in alternatives}
            wanted = parse_signature(milestone) if grounded else None
            agreeing = _agreeing(alternatives, wanted) if wanted is not None else alternatives
            checked.append(pointer)
            agreed.append(None if wanted is None else bool(agreeing))
            if wanted is None and self.reads_prose:
                verdict, score, hit = self._read_prose(alternatives, milestone, scores)
                verdicts[t] = verdict
            else:
                score = max(scores[text] for text in (agreeing or alternatives))
                verdict, hit = None, bool(agreeing) and score > self.threshold
            similarities.append(score)
            if hit and wanted is None and verdict != "anchored" and rivals is not None and rivals[t]:
                # No signature says which element the milestone means: the step must be the best fit on
                # its screen, by the margin, not merely close (the wrong field scores nearly as high).
                rival = max(_cosine(vectors[text], target) for text in rivals[t])
                rival_scores[t] = rival
                hit = score - rival > self.contrast_margin
            if hit:
                hits.append(Hit(pointer, milestone, score))
                pointer += 1
            else:
                hits.append(None)
        return MatchResult(tuple(hits), tuple(similarities), tuple(checked), len(milestones),
                           tuple(agreed) if grounded else (), tuple(rival_scores) if self.contrasts else (),
                           tuple(verdicts) if self.reads_prose else ())

    def _read_prose(
        self, alternatives: tuple[str, ...], milestone: str, scores: dict[str, float],
    ) -> tuple[ProseVerdict, float, bool]:
        """A milestone in prose against one step: the best verdict among the step's descriptions (anchored
        over neutral over conflict), the cosine it is judged by, and whether that clears its bar."""
        verdicts = {text: prose_verdict(parse_signature(text), milestone) for text in alternatives}
        assert self.prose_threshold is not None, "prose is read only with a prose_threshold (reads_prose)"
        bars: tuple[tuple[ProseVerdict, float], ...] = (("anchored", self.prose_threshold), ("neutral", self.threshold))
        for verdict, bar in bars:
            texts = [text for text in alternatives if verdicts[text] == verdict]
            if texts:
                score = max(scores[text] for text in texts)
                return verdict, score, score > bar
        return "conflict", max(scores.values()), False


def _agreeing(alternatives: tuple[str, ...], wanted: Signature) -> tuple[str, ...]:
    """The alternatives whose signature agrees with the milestone's; text outside the grammar never does."""
    return tuple(text for text in alternatives if signatures_agree(parse_signature(text), wanted))


def _distinct(alternatives: tuple[str, ...], counterfactuals: tuple[str, ...]) -> tuple[str, ...]:
    """The counterfactuals that describe another step than the step's own descriptions.

    A counterfactual that reads the same as the step, or whose signature agrees with one of the step's
    (a container labelled like the button it holds: "clicked the 'Login' element"), is the same step
    rendered twice; as a rival it would make the right step lose against itself.
    """
    own = {signature for signature in map(parse_signature, alternatives) if signature is not None}
    return tuple(text for text in counterfactuals
                 if text not in alternatives
                 and not any(signatures_agree(parse_signature(text), signature) for signature in own))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(min(1.0, max(-1.0, float(np.dot(a, b)))))


def _prepare(
    position: int,
    descriptions: Sequence[StepDescriptions],
    milestones: Sequence[str],
    slot_values: Sequence[str] = (),
    positional: bool = False,
    counterfactuals: Sequence[StepCounterfactuals] | None = None,
) -> tuple[list[tuple[str, ...]], tuple[str, ...], list[tuple[str, ...]]]:
    """Validate one trajectory's inputs and slot its descriptions and counterfactuals; blanks are dropped."""
    where = f"match item {position}"
    if not isinstance(positional, bool):
        raise TypeError(f"{where}: the 4th element (positional) must be True or False, got {positional!r}")
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
        steps.append(_slotted_texts(alternatives, f"{where}: the description of step {t} must be a string or "
                                    "a sequence of strings", values, positional))
    return steps, tuple(milestones), _prepare_counterfactuals(where, counterfactuals, len(steps), values, positional)


def _prepare_counterfactuals(
    where: str,
    counterfactuals: Sequence[StepCounterfactuals] | None,
    num_steps: int,
    values: tuple[str, ...],
    positional: bool,
) -> list[tuple[str, ...]]:
    """One tuple of slotted counterfactual texts per step (empty where none were given)."""
    if counterfactuals is None:
        return [()] * num_steps
    if isinstance(counterfactuals, str) or not isinstance(counterfactuals, Sequence):
        raise TypeError(f"{where}: the 5th element (counterfactuals) must be a sequence with one list of "
                        f"strings per step, got {type(counterfactuals).__name__}")
    if len(counterfactuals) != num_steps:
        raise ValueError(f"{where}: {len(counterfactuals)} lists of counterfactuals for {num_steps} steps; "
                         "give one (possibly empty) list per step")
    prepared: list[tuple[str, ...]] = []
    for t, entry in enumerate(counterfactuals):
        if entry is None:
            prepared.append(())
            continue
        if isinstance(entry, str) or not isinstance(entry, Sequence):
            raise TypeError(f"{where}: the counterfactuals of step {t} must be a sequence of strings, "
                            f"got {type(entry).__name__}")
        prepared.append(_slotted_texts(entry, f"{where}: the counterfactuals of step {t} must be strings",
                                       values, positional))
    return prepared


def _slotted_texts(texts: Sequence[object], rule: str, values: tuple[str, ...], positional: bool) -> tuple[str, ...]:
    """The non-blank strings of ``texts``, slotted and without repeats; None is skipped, anything else
    that is not a string breaks ``rule``."""
    kept: list[str] = []
    for text in texts:
        if text is None:
            continue
        if not isinstance(text, str):
            raise TypeError(f"{rule}, got {type(text).__name__}")
        if text.strip():
            kept.append(apply_slots(text, values, positional=positional) if values else text)
    return tuple(dict.fromkeys(kept))
