"""Group-relative advantages over step rewards (METHOD §5), behind a registry like verl's.

An estimator takes one *group* (the rollouts of one task) as ``GroupSample``s — each trajectory's per-step
R_total(t), its outcome and whether it is excluded — and returns an ``AdvantageResult``: one tuple of
per-step advantages per sample, aligned with the input, ``None`` for excluded samples (an env error is
never scored as a failure, so it neither gets a gradient nor moves the group's baseline). The result also
carries the loss hints a trainer needs: PPO clip range, how the loss is aggregated, and whether the group
is kept at all (DAPO's dynamic sampling).

Standard deviations are population ones (ddof=0): the group *is* the population being normalised, and
ddof=0 keeps a two-sample group well defined. Exact ties give advantages of exactly 0, not rounding noise
divided by ε.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from admire.registry import Registry
from admire.types import RewardBreakdown, Trajectory

EPS = 1e-6
CLIP_LOW = 0.2
DAPO_CLIP_HIGH = 0.28

LossAggregation = Literal["seq_mean", "token_mean"]
"""``seq_mean``: each step's action tokens are averaged, then steps are averaged over the batch (paper
Eq. 12, "averaged over the total number of steps"); ``token_mean``: every token of the batch counts once
(DAPO's token-level aggregation, so long actions are not down-weighted)."""


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
    """Per-step advantages of a group (aligned with its samples) and the loss hints of the estimator."""

    advantages: tuple[tuple[float, ...] | None, ...]
    keep: bool = True
    clip_low: float = CLIP_LOW
    clip_high: float = CLIP_LOW
    loss_agg: LossAggregation = "seq_mean"
    info: dict[str, float] = field(default_factory=dict)


AdvantageEstimator = Callable[[Sequence[GroupSample]], AdvantageResult]

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def register_advantage(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Register an estimator under ``name`` (``algorithm.adv_estimator`` in the config)."""
    return ADVANTAGE_ESTIMATORS.register(name)


def list_advantages() -> list[str]:
    return ADVANTAGE_ESTIMATORS.names()


def get_advantage(name: str) -> AdvantageEstimator:
    return ADVANTAGE_ESTIMATORS.lookup(name)


def compute_advantages(name: str, samples: Sequence[GroupSample]) -> AdvantageResult:
    """Look up an estimator and run it on one group."""
    return get_advantage(name)(samples)


# --------------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------------

@register_advantage("grpo_step")
def grpo_step(samples: Sequence[GroupSample]) -> AdvantageResult:
    """Paper Eq. 13: normalise R_total(t) against every step of every trajectory in the group.

    Pooling steps (rather than trajectory returns) is what lets a dense milestone reward separate good
    and bad steps *within* a trajectory as well as across it.
    """
    pooled = _pooled(samples)
    if pooled.size == 0:
        return _empty(samples)
    return AdvantageResult(_broadcast(samples, lambda r: _normalised(r, pooled)), info=_stats(pooled))


@register_advantage("grpo_traj")
def grpo_traj(samples: Sequence[GroupSample]) -> AdvantageResult:
    """Classic GRPO (the outcome baseline): one return per trajectory, broadcast to its steps.

    The return is the mean of the trajectory's step rewards. Under ``reward.mode=outcome`` that is
    O(τ) + η·(mean format penalty), i.e. exactly the outcome when every output parsed, while a trajectory
    of unparseable outputs still ranks below a parseable one with the same outcome. A trajectory with no
    steps has no return on the reward scale and no step to train, so like in ``grpo_step`` it takes no
    part in the baseline.
    """
    scored = [s for s in samples if not s.excluded and s.rewards]
    if not scored:
        return _empty(samples)
    returns = np.array([float(np.mean(s.rewards)) for s in scored])
    per_trajectory = iter(_normalised(returns, returns).tolist())
    advantages: list[tuple[float, ...] | None] = []
    for s in samples:
        if s.excluded:
            advantages.append(None)
        else:
            advantages.append((next(per_trajectory),) * len(s.rewards) if s.rewards else ())
    return AdvantageResult(tuple(advantages), info=_stats(returns))


@register_advantage("rloo_step")
def rloo_step(samples: Sequence[GroupSample]) -> AdvantageResult:
    """Leave-one-out: A_t = R_total(t) − mean of the *other* trajectories' pooled steps.

    Unlike ``grpo_step`` the advantage is not divided by a standard deviation (the RLOO estimator is
    unbiased as it stands, and dividing would reintroduce the trajectory's own rewards through the
    spread). With no other non-excluded trajectory (or no other steps) there is no baseline and A = 0.
    """
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


@register_advantage("dapo_step")
def dapo_step(samples: Sequence[GroupSample]) -> AdvantageResult:
    """``grpo_step`` plus DAPO's training hints: clip-higher, dynamic sampling, token-level loss.

    A group whose pooled step rewards all tie has zero advantage everywhere; DAPO drops it (``keep``
    False) so the batch is refilled with groups that carry signal instead of diluting the loss.
    """
    base = grpo_step(samples)
    pooled = _pooled(samples)
    keep = pooled.size > 0 and not _all_tie(pooled)
    return AdvantageResult(base.advantages, keep=keep, clip_low=CLIP_LOW, clip_high=DAPO_CLIP_HIGH,
                           loss_agg="token_mean", info=base.info)


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def _pooled(samples: Sequence[GroupSample]) -> np.ndarray:
    rewards = [r for s in samples if not s.excluded for r in s.rewards]
    return np.asarray(rewards, dtype=np.float64)


def _normalised(values: np.ndarray, population: np.ndarray) -> np.ndarray:
    """(x − mean)/(std + ε) against ``population`` (ddof=0); exact ties give exact zeros."""
    if _all_tie(population):
        return np.zeros_like(values)
    return (values - population.mean()) / (population.std() + EPS)


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


def _stats(values: np.ndarray) -> dict[str, float]:
    return {"reward_mean": float(values.mean()), "reward_std": float(values.std()),
            "num_values": float(values.size)}
