"""Per-step rewards of method.md §4: outcome, format, asymmetric milestone, process return, λ(e).

Plain functions on plain data: a ``MatchResult`` from the matcher and a ``Trajectory`` go in, one
``RewardBreakdown`` per step comes out. No torch, no browser, no encoder at import time, so any trainer
(ours, verl, TRL) can call these directly.

How ``RewardBreakdown`` is filled, so that every total can be recomputed from the record alone:

* ``outcome`` = O(τ) on every step; ``format`` = η·R_format(t), the weighted penalty as it enters the
  total (−η or 0);
* ``milestone`` = R_mil(t) *before* λ, ``milestone_weight`` = the weight that multiplies the dense term;
* ``process`` = the milestone term after propagation when the process return is on, else 0;
* ``judge`` = the LLM judge's step score in ``reward.mode=judge``, else 0.

    reward.mode=admire, process_reward.enable=false:  total = outcome + format + milestone_weight·milestone
    reward.mode=admire, process_reward.enable=true:   total = outcome + format + milestone_weight·process
                                                      (process = R_mil'(t); milestone keeps R_mil(t);
                                                      see ``process_terms`` for progress: prefix)
    reward.mode=judge:   total = outcome + format + milestone_weight·judge
                         (judge = the judge's step score, the paper's process-reward baseline;
                          milestone_weight = judge_weight·judge_decay^e; milestone = 0)
    reward.mode=outcome: total = outcome + format

The match fields (matched milestone, similarity, hits, K) are recorded whenever a match is given, in
every mode, so that the viewer can show what *would* have matched in a baseline run.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

from admire.actions import POINTER_ACTIONS, describe
from admire.embeddings import DEFAULT_ENCODER
from admire.milestones.bank import milestone_key
from admire.milestones.generator import UPDATE_RULES
from admire.milestones.matcher import (
    DEFAULT_CONTRAST_MARGIN,
    DEFAULT_PROSE_THRESHOLD,
    MATCHER_MODES,
    MAX_CONTRAST_MARGIN,
    MatcherMode,
)
from admire.milestones.signature import parse_signature
from admire.milestones.slots import slot_scheme
from admire.milestones.update import slot_values_for
from admire.types import Observation, RewardBreakdown, Step, Trajectory, UIElement

if TYPE_CHECKING:  # the caller builds and passes the matcher
    from admire.milestones.matcher import Matcher, MatchResult

RewardMode = Literal["outcome", "admire", "judge"]
Strategy = Literal["mix", "success_only", "failure_only", "uniform"]
Progress = Literal["prefix", "total", "running"]
DescriptionSource = Literal["grounded", "model", "both"]
MilestoneKey = Literal["task", "instruction", "skeleton"]

REWARD_MODES: tuple[str, ...] = get_args(RewardMode)
STRATEGIES: tuple[str, ...] = get_args(Strategy)
PROGRESS_MODES: tuple[str, ...] = get_args(Progress)
DESCRIPTION_SOURCES: tuple[str, ...] = get_args(DescriptionSource)
MILESTONE_KEYS: tuple[str, ...] = get_args(MilestoneKey)
MAX_COUNTERFACTUALS = 30
"""Counterfactuals per step: the nearest plausible targets. A screen rarely has more real rivals, and the
cost (describe + one embedding each, per distinct text) stays a small share of the batch."""


class StepJudge(Protocol):
    """An LLM judge scoring each step of a trajectory in [0, 1] (the paper's process-reward baseline).

    Declared here structurally so that ``rewards`` does not import ``judge`` (which may talk to a server).
    """

    def score(self, trajectory: Trajectory) -> list[float]: ...


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RewardConfig:
    """Every knob of method.md §4, with the project's defaults.

    ``process_enable`` defaults to False because method.md §4 says ``enable: false`` is the paper exactly;
    the original project's yaml turns it on, which ``from_mapping`` honours when the key is given.
    ``judge_weight``/``judge_decay`` weight the judge baseline with the same shape of schedule as the
    milestone term (0.3·0.9^e by default), so that the two dense signals are compared at equal strength.
    ``threshold`` is the matcher's δ; it is kept here because it is part of ``milestone_reward``, and so
    are ``matcher`` (its mode: ``grounded`` needs the step's signature to agree, ``sbert`` is the paper's
    text-only matching) and ``encoder`` (the sentence encoder: a local path or an installed model
    package); the caller builds the matcher from them and ``score_batch`` checks that it did.
    ``contrast_margin`` (grounded matcher only) is the cosine gap by which a step must beat its
    counterfactuals (``counterfactual_descriptions``) to hit a milestone that has no signature (an LLM's
    prose); 0 — or null in a config file — turns it off and matches such milestones by the cosine alone.
    ``prose_threshold`` (grounded matcher only) is the cosine such a milestone needs when the prose reading
    (``milestones.prose``) finds that its words name the step's action and element; null turns the reading
    off (the cosine and the contrast alone, as before it existed).

    ``progress`` defaults to ``prefix`` (docs/decisions.md#d6): a failure is paid k/K only on the steps up
    to its last hit, so the wrong tail after its last real checkpoint earns nothing; ``total`` is the
    paper's Eq. 11 on every step, ``running`` Algorithm 1's running count.
    """

    mode: RewardMode = "admire"
    format_weight: float = 0.5
    milestone_enable: bool = True
    milestone_weight: float = 0.3
    milestone_decay: float = 0.9
    threshold: float = 0.75
    strategy: Strategy = "mix"
    zeta: float = 0.5
    progress: Progress = "prefix"
    description: DescriptionSource = "grounded"
    milestone_key: MilestoneKey = "task"
    matcher: MatcherMode = "grounded"
    encoder: str = DEFAULT_ENCODER
    contrast_margin: float = DEFAULT_CONTRAST_MARGIN
    prose_threshold: float | None = DEFAULT_PROSE_THRESHOLD
    process_enable: bool = False
    process_weight: float = 1.0
    process_decay_gamma: float = 0.99
    judge_weight: float = 0.3
    judge_decay: float = 0.9

    def __post_init__(self) -> None:
        _check_choice("reward.mode", self.mode, REWARD_MODES)
        _check_choice("milestone_reward.strategy", self.strategy, STRATEGIES)
        _check_choice("milestone_reward.progress", self.progress, PROGRESS_MODES)
        _check_choice("milestone_reward.description", self.description, DESCRIPTION_SOURCES)
        _check_choice("milestone_reward.key", self.milestone_key, MILESTONE_KEYS)
        _check_choice("milestone_reward.matcher", self.matcher, MATCHER_MODES)
        if not isinstance(self.encoder, str) or not self.encoder.strip():
            raise ValueError("milestone_reward.encoder must name a sentence encoder (a local path or an installed "
                             f"model package such as {DEFAULT_ENCODER!r}), got {self.encoder!r}")
        for name in ("milestone_enable", "process_enable"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"RewardConfig.{name} must be true or false, got {getattr(self, name)!r}")
        _check_range("reward.format_weight", self.format_weight, 0.0, math.inf)
        _check_range("milestone_reward.weight", self.milestone_weight, 0.0, math.inf)
        _check_range("milestone_reward.decay", self.milestone_decay, 0.0, 1.0)
        _check_range("milestone_reward.threshold", self.threshold, -1.0, 1.0)
        if self.contrast_margin is None:  # null in a config file: the contrast is off
            object.__setattr__(self, "contrast_margin", 0.0)
        _check_range("milestone_reward.contrast_margin", self.contrast_margin, 0.0, MAX_CONTRAST_MARGIN)
        if self.prose_threshold is not None:
            _check_range("milestone_reward.prose_threshold", self.prose_threshold, -1.0, 1.0)
        _check_range("milestone_reward.zeta", self.zeta, 0.0, math.inf)
        _check_range("process_reward.weight", self.process_weight, -math.inf, math.inf)
        _check_range("process_reward.decay_gamma", self.process_decay_gamma, 0.0, 1.0)
        _check_range("reward.judge_weight", self.judge_weight, 0.0, math.inf)
        _check_range("reward.judge_decay", self.judge_decay, 0.0, 1.0)

    @property
    def slot_scheme(self) -> str:
        """How the episode's literal values are hidden for this key (method.md §2, Slots; ``slots.slot_scheme``):
        ``none`` for instruction keys, ``single`` (``<value>``) for task keys, ``positional`` (``<v1>``…)
        for skeleton keys."""
        return slot_scheme(self.milestone_key)

    @property
    def matches_milestones(self) -> bool:
        """Whether computing this config's rewards needs the matcher at all."""
        return self.mode == "admire" and self.milestone_enable

    @staticmethod
    def config_keys() -> list[str]:
        """The dotted config keys ``from_mapping`` reads (``milestone_reward.threshold`` …), for tools that
        check a user's overrides before building the config."""
        return [f"{section}.{key}" for section, keys in _SECTION_KEYS.items() for key in keys]

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> RewardConfig:
        """Read the original project's nested keys (``milestone_reward.*``, ``process_reward.*``, ``reward.*``).

        Missing keys keep their defaults. Keys of other components in the same sections (the bank's
        ``mode``, ``update_before_reward`` and ``update_rule``, the generator's keys, a judge's endpoint…)
        are left alone, though ``update_rule``'s value is checked here so that a typo fails before training;
        a key that looks like a misspelling of one of ours is an error, because a silently ignored
        ``treshold`` would change a run.
        """
        if hasattr(cfg, "model_dump"):  # the typed config (admire.config_schema), read as the mapping it holds
            cfg = cfg.model_dump()
        if not isinstance(cfg, Mapping):
            raise TypeError(f"RewardConfig.from_mapping needs a mapping (dict or DictConfig), got {type(cfg).__name__}")
        values: dict[str, Any] = {}
        for section, mapping in _SECTION_KEYS.items():
            given = cfg.get(section)
            if given is None:
                continue
            if not isinstance(given, Mapping):
                raise TypeError(f"config section '{section}' must be a mapping, got {type(given).__name__}")
            for key, value in given.items():
                field = mapping.get(str(key))
                if field is None:
                    _reject_misspelling(section, str(key), mapping)
                    _check_foreign(section, str(key), value)
                    continue
                if value is None and field in _NULL_MEANS:
                    values[field] = _NULL_MEANS[field]
                    continue
                values[field] = _coerce(f"{section}.{key}", value, _FIELD_TYPES[field])
        return cls(**values)


_SECTION_KEYS: dict[str, dict[str, str]] = {
    "reward": {"mode": "mode", "format_weight": "format_weight", "judge_weight": "judge_weight",
               "judge_decay": "judge_decay"},
    "milestone_reward": {"enable": "milestone_enable", "threshold": "threshold", "weight": "milestone_weight",
                         "strategy": "strategy", "decay": "milestone_decay", "zeta": "zeta",
                         "progress": "progress", "description": "description", "key": "milestone_key",
                         "matcher": "matcher", "encoder": "encoder", "contrast_margin": "contrast_margin",
                         "prose_threshold": "prose_threshold"},
    "process_reward": {"enable": "process_enable", "weight": "process_weight",
                       "decay_gamma": "process_decay_gamma"},
}
_FOREIGN_KEYS = {"milestone_reward": {"mode", "update_before_reward", "update_rule", "generator", "static_path",
                                       "llm"}}
_NULL_MEANS: dict[str, Any] = {"contrast_margin": 0.0, "prose_threshold": None}
"""Fields whose ``null`` in a config file has a meaning (the margin and the prose reading: off)."""
_FIELD_TYPES: dict[str, type] = {f.name: {"bool": bool, "float": float, "float | None": float}.get(str(f.type), str)
                                 for f in fields(RewardConfig)}


def _reject_misspelling(section: str, key: str, known: Mapping[str, str]) -> None:
    if key in _FOREIGN_KEYS.get(section, set()):
        return
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    if close:
        raise ValueError(f"unknown key '{section}.{key}': did you mean '{section}.{close[0]}'? "
                         f"Known keys: {', '.join(sorted(known))}")


def _check_foreign(section: str, key: str, value: Any) -> None:
    """The foreign keys whose values are cheap to check here, so that a bad one fails at config time."""
    if section == "milestone_reward" and key == "update_rule":
        _check_choice("milestone_reward.update_rule", value, UPDATE_RULES)


def _coerce(name: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{name} must be true or false, got {value!r}")
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(f"{name} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    return str(value)


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _check_range(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not low <= value <= high or math.isinf(value):
        raise ValueError(f"{name} must be a finite number in [{low}, {high}], got {value!r}")


# --------------------------------------------------------------------------------------------------
# The terms of R_total(t)
# --------------------------------------------------------------------------------------------------

def milestone_lambda(epoch: int, cfg: RewardConfig) -> float:
    """λ(e) = λ0·γ^e: strong shaping early, fading so the outcome dominates late in training."""
    _check_epoch(epoch)
    return cfg.milestone_weight * cfg.milestone_decay**epoch


def judge_lambda(epoch: int, cfg: RewardConfig) -> float:
    """The judge baseline's weight, on the same kind of schedule as λ(e)."""
    _check_epoch(epoch)
    return cfg.judge_weight * cfg.judge_decay**epoch


def _check_epoch(epoch: int) -> None:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")


def milestone_step_rewards(match: MatchResult, success: bool, cfg: RewardConfig) -> list[float]:
    """R_mil(t) for every step, before λ (method.md §4): the progress term plus the hit term.

    ``mix``: a success is *denoised* (only its hit steps earn r_t^mil, so wasted steps earn nothing); a
    failure is *scaffolded* (steps earn the progress k/K, hit steps also ζ·r_t^mil), so a near miss
    beats a hopeless one. ``success_only`` / ``failure_only`` zero the other side. ``uniform`` applies the
    scaffold rule to successes too (our reading of the paper's "k/K on successes too": the same rule for
    every trajectory, so the outcome is the only asymmetry left).

    Which steps earn k/K (``progress``): ``prefix`` (default) the steps up to and including the last hit,
    with the trajectory's total k, and 0 after it; ``total`` every step (Eq. 11); ``running`` the hits
    up to and including step t (Algorithm 1). Under ``total`` a failure that hit one checkpoint and then
    wandered for 18 steps is paid k/K for each wrong step (docs/decisions.md#d6): length is rewarded,
    the wrong tail is reinforced. Under ``prefix`` the steps that led to the last checkpoint still share
    the credit, the tail after it gets none.
    """
    progress, hits = milestone_step_terms(match, success, cfg)
    return [p + h for p, h in zip(progress, hits, strict=True)]


def milestone_step_terms(match: MatchResult, success: bool, cfg: RewardConfig) -> tuple[list[float], list[float]]:
    """R_mil(t) split into (progress term, hit term) per step; ``milestone_step_rewards`` is their sum.

    The hit term is r_t^mil on a denoised trajectory's hit steps and ζ·r_t^mil on a scaffolded one's;
    the progress term is k/K on the steps ``progress`` selects (scaffold only). They are kept apart
    because the process return treats them differently under ``progress: prefix`` (``process_terms``).
    """
    num_steps = len(match.hits)
    zeros = [0.0] * num_steps
    K = match.num_milestones
    rule = _rule_for(success, cfg.strategy)
    if K <= 0 or rule == "none":
        return zeros, list(zeros)
    hit_similarity = [hit.similarity if hit is not None else None for hit in match.hits]
    if rule == "denoise":
        return zeros, [float(s) if s is not None else 0.0 for s in hit_similarity]
    total_hits = sum(1 for s in hit_similarity if s is not None)
    last_hit = max((t for t, s in enumerate(hit_similarity) if s is not None), default=-1)
    progress: list[float] = []
    hit_terms: list[float] = []
    running = 0
    for t, similarity in enumerate(hit_similarity):
        running += similarity is not None
        k = running if cfg.progress == "running" else total_hits
        paid = cfg.progress != "prefix" or t <= last_hit
        progress.append(k / K if paid else 0.0)
        hit_terms.append(cfg.zeta * float(similarity) if similarity is not None else 0.0)
    return progress, hit_terms


def _rule_for(success: bool, strategy: str) -> Literal["denoise", "scaffold", "none"]:
    if strategy == "uniform":
        return "scaffold"
    if success:
        return "denoise" if strategy in ("mix", "success_only") else "none"
    return "scaffold" if strategy in ("mix", "failure_only") else "none"


def process_terms(match: MatchResult, success: bool, cfg: RewardConfig) -> list[float]:
    """R_mil'(t), the milestone term after the process return (``process_reward.enable``).

    ``progress: total | running`` (the original project's reading): the return of the whole R_mil,
    weight·Σ_{j≥t} γ^{j−t}·R_mil(j).

    ``progress: prefix``: the return of the *hit term* only, plus the progress term un-propagated,
    weight·(Σ_{j≥t} γ^{j−t}·h(j) + p(t)). **Decision:** the return exists so that a step that made a
    later hit possible shares that hit's credit; k/K is already paid on every step of the prefix, so
    propagating it too would pay step t the progress of every later prefix step again — about
    (k/K)·(steps left) with γ = 0.99, a reward for length. That is how a 20-step dawdling failure
    out-earned a 2-step success (docs/decisions.md#d6), and it would come back through a
    late last hit. With γ = 0 both readings are weight·R_mil(t).
    """
    if cfg.progress != "prefix":
        return process_return(milestone_step_rewards(match, success, cfg), cfg.process_weight,
                              cfg.process_decay_gamma)
    progress, hits = milestone_step_terms(match, success, cfg)
    returned = process_return(hits, cfg.process_weight, cfg.process_decay_gamma)
    return [r + cfg.process_weight * p for r, p in zip(returned, progress, strict=True)]


def process_return(values: Sequence[float], weight: float, gamma: float) -> list[float]:
    """R'(t) = weight·Σ_{j≥t} γ^{j−t}·R(j): a step that made a later hit possible shares its credit."""
    returns = [0.0] * len(values)
    running = 0.0
    for t in range(len(values) - 1, -1, -1):
        running = float(values[t]) + gamma * running
        returns[t] = weight * running
    return returns


def format_penalty(step: Step) -> float:
    """R_format(t): −1 when the model's output did not parse into a valid action."""
    return 0.0 if step.format_valid else -1.0


def descriptions_for(step: Step, cfg: RewardConfig) -> list[str]:
    """The description(s) of a step that the matcher compares (method.md §3, ``description``).

    ``model`` falls back to the grounded description when the model gave none, so a silent model is
    matched on what it did rather than on an empty string; ``both`` lets the matcher take the maximum.
    """
    grounded = step.grounded_description
    model = step.model_description.strip() if step.model_description else ""
    if cfg.description == "grounded" or not model:
        return [grounded]
    if cfg.description == "model" or model == grounded:
        return [model]
    return [grounded, model]


def counterfactual_descriptions(step: Step, limit: int = MAX_COUNTERFACTUALS) -> list[str]:
    """What the step's description would have been had the same action hit another plausible target.

    The contrastive fallback of the grounded matcher (method.md §3) compares a step against these when the
    milestone has no signature: a step that typed into the Password field with a Username field on the
    same screen must score higher against "typed the username" than 'typed … into the Username field'
    would have, by ``contrast_margin``, or it does not hit. Only pointer actions and ``input_text`` with an
    index that is on the screen have counterfactuals (a point or a scroll names no element to swap); the
    targets are the visible, enabled elements the action could have meant — editable ones for typing,
    clickable, editable or checkable ones for a pointer — except elements that contain the target or lie
    inside it (the same place on the screen, so the same click). The ``limit`` nearest to the target are
    kept (screen order where there are no boxes), because a crowded page's far corners are not rivals.
    """
    action = step.action
    observation: Observation | None = step.observation
    if (action is None or action.index is None or observation is None
            or (action.action_type not in POINTER_ACTIONS and action.action_type != "input_text")):
        return []
    elements = observation.ui_elements
    if not 0 <= action.index < len(elements):
        return []
    target = elements[action.index]
    typing = action.action_type == "input_text"
    others = [j for j, element in enumerate(elements)
              if j != action.index and _plausible_target(element, typing) and not _nested(element, target)]
    center = target.center
    if center is not None:
        others.sort(key=lambda j: _distance(elements[j], center))  # stable: boxless ones last, in order
    return [describe(action.model_copy(update={"index": j}), observation) for j in others[:limit]]


def _plausible_target(element: UIElement, typing: bool) -> bool:
    if not (element.is_visible and element.is_enabled):
        return False
    if typing:
        return element.is_editable
    return element.is_clickable or element.is_editable or element.is_checkable


def _nested(element: UIElement, target: UIElement) -> bool:
    """Whether one of the two boxes contains the other (an ancestor or a descendant of the target)."""
    if element.bbox is None or target.bbox is None:
        return False
    (ax0, ax1, ay0, ay1), (bx0, bx1, by0, by1) = element.bbox, target.bbox
    return (ax0 <= bx0 and bx1 <= ax1 and ay0 <= by0 and by1 <= ay1) or \
        (bx0 <= ax0 and ax1 <= bx1 and by0 <= ay0 and ay1 <= by1)


def _distance(element: UIElement, center: tuple[float, float]) -> float:
    other = element.center
    if other is None:
        return math.inf
    return math.hypot(other[0] - center[0], other[1] - center[1])


# --------------------------------------------------------------------------------------------------
# Composition
# --------------------------------------------------------------------------------------------------

def score_trajectory(
    trajectory: Trajectory,
    match: MatchResult | None,
    cfg: RewardConfig,
    epoch: int,
    judge_scores: Sequence[float] | None = None,
) -> list[RewardBreakdown]:
    """One ``RewardBreakdown`` per step: R_total(t) = R_outcome + η·R_format(t) + λ(e)·R_mil(t).

    ``match`` may be None when the trajectory's key has no milestones yet (K = 0, no milestone reward).
    An ``env_error`` trajectory is refused: it must be excluded, never scored as a failure (DESIGN §6).
    """
    if trajectory.excluded:
        raise ValueError(f"trajectory {trajectory.id!r} ended in an environment error and cannot be scored: "
                         "exclude env_error trajectories (Trajectory.excluded) before computing rewards")
    _check_epoch(epoch)
    num_steps = len(trajectory.steps)
    if match is not None and len(match.hits) != num_steps:
        raise ValueError(f"match for trajectory {trajectory.id!r} covers {len(match.hits)} steps but the "
                         f"trajectory has {num_steps}: match the trajectory's own step descriptions")
    outcome = float(trajectory.outcome)
    formats = [cfg.format_weight * format_penalty(step) for step in trajectory.steps]
    milestone = [0.0] * num_steps
    process = [0.0] * num_steps
    judge = [0.0] * num_steps
    weight = 0.0
    dense = milestone
    if cfg.mode == "admire" and cfg.milestone_enable and match is not None:
        milestone = milestone_step_rewards(match, trajectory.success, cfg)
        weight = milestone_lambda(epoch, cfg)
        dense = milestone
        if cfg.process_enable:
            process = process_terms(match, trajectory.success, cfg)
            dense = process
    elif cfg.mode == "judge":
        judge = _checked_judge_scores(trajectory, judge_scores)
        weight = judge_lambda(epoch, cfg)
        dense = judge
    breakdowns = []
    for t in range(num_steps):
        hit = match.hits[t] if match is not None else None
        breakdowns.append(RewardBreakdown(
            outcome=outcome,
            format=formats[t],
            milestone=milestone[t],
            process=process[t],
            judge=judge[t],
            total=outcome + formats[t] + weight * dense[t],
            milestone_weight=weight,
            matched_milestone=hit.milestone if hit is not None else None,
            matched_index=hit.milestone_index if hit is not None else None,
            similarity=_step_similarity(match, t),
            hits=match.k if match is not None else 0,
            num_milestones=match.num_milestones if match is not None else 0,
        ))
    return breakdowns


def _step_similarity(match: MatchResult | None, t: int) -> float | None:
    if match is None:
        return None
    value = match.similarities[t]
    return float(value) if value is not None else None


def _checked_judge_scores(trajectory: Trajectory, scores: Sequence[float] | None) -> list[float]:
    if scores is None:
        raise ValueError("reward.mode=judge needs judge_scores (one score in [0, 1] per step); "
                         "pass a StepJudge to score_batch or the judge's scores to score_trajectory")
    if len(scores) != len(trajectory.steps):
        raise ValueError(f"judge gave {len(scores)} scores for trajectory {trajectory.id!r} with "
                         f"{len(trajectory.steps)} steps: a judge must score every step exactly once")
    checked = []
    for t, score in enumerate(scores):
        value = float(score)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"judge score {score!r} for step {t} of trajectory {trajectory.id!r} is not in "
                             "[0, 1]: clip or rescale the judge's output")
        checked.append(value)
    return checked


# --------------------------------------------------------------------------------------------------
# A batch at once
# --------------------------------------------------------------------------------------------------

class StoredMilestones(Protocol):
    @property
    def milestones(self) -> Sequence[str]: ...


@runtime_checkable
class MilestoneStore(Protocol):
    """Anything with ``get(key)`` returning the stored list or None — ``MilestoneBank`` is one."""

    def get(self, key: str) -> StoredMilestones | None: ...


MilestoneSource = Callable[[Trajectory], Sequence[str]] | Mapping[str, Sequence[str]] | MilestoneStore


def milestone_key_for(trajectory: Trajectory, cfg: RewardConfig) -> str:
    """The key a trajectory's milestones are stored under, exactly as the bank computes it."""
    return milestone_key(trajectory, key=cfg.milestone_key)


def score_batch(
    trajectories: Sequence[Trajectory],
    milestones_for_key: MilestoneSource,
    matcher: Matcher | None,
    cfg: RewardConfig,
    epoch: int,
    judge: StepJudge | None = None,
) -> list[list[RewardBreakdown]]:
    """Rewards for a whole batch, aligned with ``trajectories``.

    All trajectories are matched with one ``matcher.match_many`` call so the encoder sees one big batch
    of new texts. ``milestones_for_key`` is a ``MilestoneBank`` (or any store with ``get(key)``) or a
    mapping, both looked up with ``milestone_key_for``, or a callable (trajectory → milestones); a missing
    key means no milestones yet (K = 0).
    ``env_error`` trajectories get ``[]`` (they are not scored; the advantage code drops them).
    """
    _check_epoch(epoch)
    lookup = _milestone_lookup(milestones_for_key, cfg)
    scored = [i for i, trajectory in enumerate(trajectories) if not trajectory.excluded]
    matches: dict[int, MatchResult] = {}
    if cfg.matches_milestones:
        matches = _match_all([trajectories[i] for i in scored], scored, lookup, matcher, cfg)
    elif cfg.mode == "judge" and judge is None:
        raise ValueError("reward.mode=judge needs a StepJudge: pass judge=... to score_batch")
    results: list[list[RewardBreakdown]] = [[] for _ in trajectories]
    for i in scored:
        trajectory = trajectories[i]
        scores = judge.score(trajectory) if cfg.mode == "judge" and judge is not None else None
        results[i] = score_trajectory(trajectory, matches.get(i), cfg, epoch, judge_scores=scores)
    return results


def _milestone_lookup(source: MilestoneSource, cfg: RewardConfig) -> Callable[[Trajectory], Sequence[str]]:
    if isinstance(source, Mapping):
        return lambda trajectory: source.get(milestone_key_for(trajectory, cfg), ())
    if isinstance(source, MilestoneStore):
        def from_store(trajectory: Trajectory) -> Sequence[str]:
            stored = source.get(milestone_key_for(trajectory, cfg))
            return stored.milestones if stored is not None else ()

        return from_store
    if callable(source):
        return source
    raise TypeError("milestones_for_key must be a MilestoneBank, a mapping {key: milestones} or a callable "
                    f"(trajectory) -> milestones, got {type(source).__name__}")


def _match_all(
    trajectories: Sequence[Trajectory],
    positions: Sequence[int],
    lookup: Callable[[Trajectory], Sequence[str]],
    matcher: Matcher | None,
    cfg: RewardConfig,
) -> dict[int, MatchResult]:
    items: list[tuple[Any, ...]] = []
    item_positions = []
    contrast = cfg.matcher == "grounded" and cfg.contrast_margin > 0
    for position, trajectory in zip(positions, trajectories, strict=True):
        milestones = list(lookup(trajectory) or ())
        if not milestones:
            continue  # K = 0: nothing to match, no milestone reward
        descriptions = [_as_matcher_input(descriptions_for(step, cfg)) for step in trajectory.steps]
        values, positional = slot_values_for(trajectory.goal, cfg.slot_scheme)
        item: tuple[Any, ...] = (descriptions, milestones, values, positional)
        # Counterfactuals only where the matcher can use them: a milestone without a signature.
        if contrast and any(parse_signature(milestone) is None for milestone in milestones):
            counterfactuals = [counterfactual_descriptions(step) for step in trajectory.steps]
            if any(counterfactuals):
                item += (counterfactuals,)
        items.append(item)
        item_positions.append(position)
    if not items:
        return {}
    if matcher is None:
        raise ValueError("milestone rewards are enabled and milestones exist, but no matcher was given: "
                         "pass an admire.milestones.matcher.Matcher (or set milestone_reward.enable=false)")
    threshold = getattr(matcher, "threshold", cfg.threshold)
    if threshold != cfg.threshold:
        raise ValueError(f"the matcher's threshold δ={threshold} differs from milestone_reward.threshold="
                         f"{cfg.threshold}: build it as Matcher(threshold=cfg.threshold)")
    mode = getattr(matcher, "mode", cfg.matcher)
    if mode != cfg.matcher:
        raise ValueError(f"the matcher's mode {mode!r} differs from milestone_reward.matcher={cfg.matcher!r}: "
                         "build it as Matcher(mode=cfg.matcher)")
    margin = getattr(matcher, "contrast_margin", cfg.contrast_margin)
    if margin != cfg.contrast_margin:
        raise ValueError(f"the matcher's contrast margin {margin} differs from milestone_reward.contrast_margin="
                         f"{cfg.contrast_margin}: build it as Matcher(contrast_margin=cfg.contrast_margin)")
    prose = getattr(matcher, "prose_threshold", cfg.prose_threshold)
    if prose != cfg.prose_threshold:
        raise ValueError(f"the matcher's prose threshold {prose} differs from milestone_reward.prose_threshold="
                         f"{cfg.prose_threshold}: build it as Matcher(prose_threshold=cfg.prose_threshold)")
    results = matcher.match_many(items)
    if len(results) != len(items):
        raise RuntimeError(f"matcher returned {len(results)} results for {len(items)} trajectories")
    return dict(zip(item_positions, results, strict=True))


def _as_matcher_input(descriptions: list[str]) -> str | list[str]:
    return descriptions[0] if len(descriptions) == 1 else descriptions
