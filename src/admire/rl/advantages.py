"""Group-relative advantages over step rewards (method.md §5), behind a registry like verl's.

An estimator takes one *group* (the rollouts of one task) as ``GroupSample``s — each trajectory's per-step
R_total(t), its outcome and whether it is excluded — and returns an ``AdvantageResult``: one tuple of
per-step advantages per sample, aligned with the input, ``None`` for excluded samples (an env error is
never scored as a failure, so it neither gets a gradient nor moves the group's baseline), and whether the
group is worth keeping (``keep``: DAPO's dynamic sampling marks a group whose rewards all tie). An estimator
returns numbers only: how the loss is clipped (``actor.clip_ratio_*``) and aggregated (``actor.loss_agg_mode``)
and whether groups not kept are dropped (``algorithm.filter_groups``) are config keys, read the same way by
the CPU trainer and by verl, so an estimator means the same thing on both.

Standard deviations are population ones (ddof=0): the group *is* the population being normalised, and
ddof=0 keeps a two-sample group well defined. Exact ties give advantages of exactly 0, not rounding noise
divided by ε.

Normalisation options (keyword options of every built-in estimator, passed by ``compute_advantages``):

* ``norm_by_std`` (``algorithm.norm_adv_by_std_in_grpo``, verl's key; default True, the paper's Eq. 13):
  A = (R − mean)/(max(std, std_floor) + ε). False: A = R − mean (Dr. GRPO-style centring only).
* ``std_floor`` (``algorithm.std_floor``; 0.0 is the paper): the smallest spread a group is divided by.
* ``failed_baseline`` (``algorithm.failed_group_baseline``; ``"mean"`` is the paper): the baseline of a
  group in which no trajectory succeeded. ``"zero"``: A = R/scale there, so a failed group's milestone
  hits are pushed up and its other steps are left alone rather than pushed down.

Why these options exist, with what was measured: docs/decisions.md#d4
(``std_floor``; ``SHIPPED_STD_FLOOR`` = 0.1 follows from the 0/1 reward scale) and
docs/decisions.md#d5 (``failed_baseline``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from admire.registry import Registry
from admire.types import RewardBreakdown, Trajectory

EPS = 1e-6
DAPO_CLIP_HIGH = 0.28
"""DAPO's clip-higher (``actor_rollout_ref.actor.clip_ratio_high`` in a DAPO config; the shipped one is 0.2)."""
SHIPPED_STD_FLOOR = 0.1
"""The ``algorithm.std_floor`` this project ships (the module docstring says why); 0.0 is the paper."""
FAILED_BASELINES: tuple[str, ...] = ("mean", "zero")
OPTIONS: tuple[str, ...] = ("norm_by_std", "std_floor", "failed_baseline")
"""The keyword options ``compute_advantages`` knows and checks."""
CONFIG_KEYS: dict[str, str] = {"norm_adv_by_std_in_grpo": "norm_by_std", "std_floor": "std_floor",
                               "failed_group_baseline": "failed_baseline"}
"""``algorithm.<key>`` (the same names in verl's ``algorithm`` section) → the option it sets."""

@dataclass(frozen=True)
class GroupSample:
    """One trajectory of a group as an estimator sees it."""

    rewards: tuple[float, ...]
    outcome: float = 0.0
    """O(τ), for estimators and metrics that look at the outcome alone; the built-in ones use ``rewards``."""
    excluded: bool = False

    def __post_init__(self) -> None:
        rewards = tuple(float(r) for r in self.rewards)
        if not self.excluded and not all(np.isfinite(rewards)):
            raise ValueError(f"step rewards must be finite numbers, got {rewards!r}")
        object.__setattr__(self, "rewards", rewards)

    @classmethod
    def from_scored(cls, trajectory: Trajectory, breakdowns: Sequence[RewardBreakdown]) -> GroupSample:
        """A sample from a trajectory and its ``score_trajectory`` output; env errors become excluded."""
        if trajectory.excluded:
            return cls(rewards=(), outcome=float(trajectory.outcome), excluded=True)
        if len(breakdowns) != len(trajectory.steps):
            raise ValueError(f"trajectory {trajectory.id!r} has {len(trajectory.steps)} steps but "
                             f"{len(breakdowns)} reward breakdowns: score it with rewards.score_trajectory")
        return cls(rewards=tuple(b.total for b in breakdowns), outcome=float(trajectory.outcome))


def group_samples(
    trajectories: Sequence[Trajectory], breakdowns: Sequence[Sequence[RewardBreakdown]]
) -> list[GroupSample]:
    """``GroupSample``s for a group, from ``rewards.score_batch`` output (``[]`` for env errors)."""
    if len(trajectories) != len(breakdowns):
        raise ValueError(f"{len(trajectories)} trajectories but {len(breakdowns)} breakdown lists")
    return [GroupSample.from_scored(t, b) for t, b in zip(trajectories, breakdowns, strict=True)]


@dataclass(frozen=True)
class AdvantageResult:
    """Per-step advantages of a group (aligned with its samples), whether the group is worth keeping (with
    ``algorithm.filter_groups`` the trainers drop the groups that are not), and the group's statistics."""

    advantages: tuple[tuple[float, ...] | None, ...]
    keep: bool = True
    info: dict[str, float] = field(default_factory=dict)


AdvantageEstimator = Callable[..., AdvantageResult]
"""``estimator(samples, **options) -> AdvantageResult``. Options are keyword-only and optional: an
estimator takes those of ``OPTIONS`` it honours (or ``**options``); ``compute_advantages`` passes it only
what it declares, so a plain ``estimator(samples)`` still works (and ignores the options)."""

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator",
    group="admire.advantages",
    builtins={name: f"admire.rl.advantages:{name}" for name in ("grpo_step", "grpo_traj", "rloo_step", "dapo_step")},
)
"""``algorithm.adv_estimator`` → estimator. The built-ins below are declared as strings like every other
plug-in (:mod:`admire.registry`); third-party estimators come through the ``admire.advantages`` entry
points or ``register_advantage``."""


def register_advantage(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Register an estimator under ``name`` (``algorithm.adv_estimator`` in the config)."""
    return ADVANTAGE_ESTIMATORS.register(name)


def list_advantages() -> list[str]:
    return ADVANTAGE_ESTIMATORS.names()


def get_advantage(name: str) -> AdvantageEstimator:
    return ADVANTAGE_ESTIMATORS.lookup(name)


def compute_advantages(name: str, samples: Sequence[GroupSample], **options: Any) -> AdvantageResult:
    """Look up an estimator and run it on one group with the options it declares.

    ``options`` are ``norm_by_std`` (bool), ``std_floor`` (float ≥ 0) and ``failed_baseline`` ("mean" |
    "zero"); an unknown option or a bad
    value is an error here, so a typo in the config cannot be dropped silently. An estimator that does
    not declare an option does not get it (a custom ``estimator(samples)`` keeps working).
    """
    checked = _check_options(options)
    estimator = get_advantage(name)
    return estimator(samples, **_declared(estimator, checked))


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown advantage option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    if "norm_by_std" in options and not isinstance(options["norm_by_std"], bool):
        raise ValueError(f"norm_by_std (algorithm.norm_adv_by_std_in_grpo) must be true or false, "
                         f"got {options['norm_by_std']!r}")
    if "failed_baseline" in options and options["failed_baseline"] not in FAILED_BASELINES:
        raise ValueError(f"failed_baseline (algorithm.failed_group_baseline) must be one of "
                         f"{', '.join(FAILED_BASELINES)}, got {options['failed_baseline']!r}")
    if "std_floor" in options:
        floor = options["std_floor"]
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not math.isfinite(floor) or floor < 0:
            raise ValueError(f"std_floor (algorithm.std_floor) must be a finite number >= 0, got {floor!r}")
    return options


def declared_options(estimator: AdvantageEstimator) -> frozenset[str]:
    """The options of ``OPTIONS`` that ``estimator`` takes (all of them with ``**options``; none when its
    signature cannot be read). The config schema refuses a non-default value of one it does not take."""
    try:
        parameters = inspect.signature(estimator).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: pass nothing it may not take
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return frozenset(OPTIONS)
    return frozenset(p.name for p in parameters if p.name in OPTIONS
                     and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))


def _declared(estimator: AdvantageEstimator, options: dict[str, Any]) -> dict[str, Any]:
    names = declared_options(estimator)
    return {key: value for key, value in options.items() if key in names}


# --------------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------------

def grpo_step(samples: Sequence[GroupSample], *, norm_by_std: bool = True, std_floor: float = 0.0,
              failed_baseline: str = "mean") -> AdvantageResult:
    """Paper Eq. 13: normalise R_total(t) against every step of every trajectory in the group.

    Pooling steps (rather than trajectory returns) is what lets a dense milestone reward separate good
    and bad steps *within* a trajectory as well as across it. ``norm_by_std``/``std_floor``/
    ``failed_baseline``: see the module docstring.
    """
    pooled = _pooled(samples)
    if pooled.size == 0:
        return _empty(samples)
    zero = _zero_baseline(samples, failed_baseline)
    return AdvantageResult(_broadcast(samples, lambda r: _normalised(r, pooled, norm_by_std, std_floor, zero)),
                           info=_stats(pooled, norm_by_std, std_floor))


def grpo_traj(samples: Sequence[GroupSample], *, norm_by_std: bool = True, std_floor: float = 0.0,
              failed_baseline: str = "mean") -> AdvantageResult:
    """Classic GRPO (the outcome baseline): one return per trajectory, broadcast to its steps.

    The return is the mean of the trajectory's step rewards. Under ``reward.mode=outcome`` that is
    O(τ) + η·(mean format penalty), i.e. exactly the outcome when every output parsed, while a trajectory
    of unparseable outputs still ranks below a parseable one with the same outcome. A trajectory with no
    steps has no return on the reward scale and no step to train, so like in ``grpo_step`` it takes no
    part in the baseline. ``norm_by_std``/``std_floor`` apply to the spread of the returns;
    ``failed_baseline`` as in ``grpo_step``.
    """
    scored = [s for s in samples if not s.excluded and s.rewards]
    if not scored:
        return _empty(samples)
    returns = np.array([float(np.mean(s.rewards)) for s in scored])
    zero = _zero_baseline(samples, failed_baseline)
    per_trajectory = iter(_normalised(returns, returns, norm_by_std, std_floor, zero).tolist())
    advantages: list[tuple[float, ...] | None] = []
    for s in samples:
        if s.excluded:
            advantages.append(None)
        else:
            advantages.append((next(per_trajectory),) * len(s.rewards) if s.rewards else ())
    return AdvantageResult(tuple(advantages), info=_stats(returns, norm_by_std, std_floor))


def rloo_step(samples: Sequence[GroupSample], *, norm_by_std: bool = True, std_floor: float = 0.0) -> AdvantageResult:
    """Leave-one-out: A_t = R_total(t) − mean of the *other* trajectories' pooled steps.

    Unlike ``grpo_step`` the advantage is not divided by a standard deviation (the RLOO estimator is
    unbiased as it stands, and dividing would reintroduce the trajectory's own rewards through the
    spread), so ``norm_by_std`` and ``std_floor`` are accepted and have no effect: λ(e) already keeps
    its meaning here. With no other non-excluded trajectory (or no other steps) there is no baseline
    and A = 0.
    """
    del norm_by_std, std_floor  # accepted so that every built-in estimator takes the same options
    pooled = _pooled(samples)
    if pooled.size == 0:
        return _empty(samples)
    if _all_tie(pooled):
        return AdvantageResult(_broadcast(samples, lambda r: np.zeros_like(r)), info=_stats(pooled))
    total, count = float(pooled.sum()), pooled.size

    def leave_one_out(rewards: np.ndarray) -> np.ndarray:
        others = count - rewards.size
        if others == 0:
            return np.zeros_like(rewards)
        return rewards - (total - float(rewards.sum())) / others

    return AdvantageResult(_broadcast(samples, leave_one_out), info=_stats(pooled))


def dapo_step(samples: Sequence[GroupSample], *, norm_by_std: bool = True, std_floor: float = 0.0,
              failed_baseline: str = "mean") -> AdvantageResult:
    """``grpo_step`` plus DAPO's dynamic-sampling mark: a group whose pooled step rewards all tie has zero
    advantage everywhere and is not kept (``keep`` False), so with ``algorithm.filter_groups=true`` it takes no
    place in the loss rather than dilute it. DAPO's other two settings are config keys of the actor, the same
    on both trainers: ``clip_ratio_high=0.28`` (``DAPO_CLIP_HIGH``) and ``loss_agg_mode=token-mean``. The
    normalisation options are ``grpo_step``'s; a group with a tiny spread under ``std_floor`` gets tiny
    advantages rather than being dropped (only exact ties are not kept).
    """
    base = grpo_step(samples, norm_by_std=norm_by_std, std_floor=std_floor, failed_baseline=failed_baseline)
    pooled = _pooled(samples)
    keep = pooled.size > 0 and not _all_tie(pooled)
    return AdvantageResult(base.advantages, keep=keep, info=base.info)


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def _pooled(samples: Sequence[GroupSample]) -> np.ndarray:
    rewards = [r for s in samples if not s.excluded for r in s.rewards]
    return np.asarray(rewards, dtype=np.float64)


def _zero_baseline(samples: Sequence[GroupSample], failed_baseline: str) -> bool:
    """Whether this group's baseline is 0: ``failed_baseline="zero"`` and no kept trajectory succeeded."""
    kept = [s for s in samples if not s.excluded]
    return failed_baseline == "zero" and bool(kept) and all(s.outcome <= 0 for s in kept)


def _normalised(values: np.ndarray, population: np.ndarray, norm_by_std: bool = True,
                std_floor: float = 0.0, zero_baseline: bool = False) -> np.ndarray:
    """(x − mean)/(max(std, floor) + ε) against ``population`` (ddof=0), or x − mean without the std;
    with ``zero_baseline`` x is not centred. Exact ties give exact zeros."""
    if _all_tie(population):
        return np.zeros_like(values)
    centred = values if zero_baseline else values - population.mean()
    return centred / _scale(population, std_floor) if norm_by_std else centred


def _scale(population: np.ndarray, std_floor: float) -> float:
    return max(float(population.std()), float(std_floor)) + EPS


def _all_tie(values: np.ndarray) -> bool:
    return values.size == 0 or bool(values.max() == values.min())


def _broadcast(
    samples: Sequence[GroupSample], transform: Callable[[np.ndarray], np.ndarray]
) -> tuple[tuple[float, ...] | None, ...]:
    return tuple(None if s.excluded else tuple(transform(np.asarray(s.rewards, dtype=np.float64)).tolist())
                 for s in samples)


def _empty(samples: Sequence[GroupSample]) -> AdvantageResult:
    """No usable step in the group: nothing to learn from, so the group is not kept."""
    return AdvantageResult(tuple(None if s.excluded else () for s in samples), keep=False)


def _stats(values: np.ndarray, norm_by_std: bool | None = None, std_floor: float = 0.0) -> dict[str, float]:
    """Group statistics; with ``norm_by_std`` given, also ``adv_scale`` (what A was divided by, 1.0 when
    not normalised) and ``std_floored`` (1.0 when the floor, not the group's spread, set the scale)."""
    stats = {"reward_mean": float(values.mean()), "reward_std": float(values.std()),
             "num_values": float(values.size)}
    if norm_by_std is not None:
        stats["adv_scale"] = _scale(values, std_floor) if norm_by_std else 1.0
        stats["std_floored"] = float(bool(norm_by_std) and float(values.std()) < std_floor)
    return stats
