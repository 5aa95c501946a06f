"""PPO samples from scored trajectories: advantages per group, and the groups an estimator does not keep dropped
when ``algorithm.filter_groups`` asks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from admire.agent.base import Decision
from admire.rl.advantages import compute_advantages, group_samples
from admire.rl.ppo import Sample
from admire.types import Trajectory


@dataclass(frozen=True)
class SampleBatch:
    """An epoch's PPO samples and what the advantage step says about them."""

    samples: list[Sample]
    groups: int
    groups_dropped: int
    nonzero_frac: float
    """Effective sample utilisation: the share of the batch's trainable steps (those with a log-prob, in
    kept *and* dropped groups) whose advantage is non-zero, |A| > 1e-8; a dropped group counts as zeros."""


def build_samples(
    trajectories: Sequence[Trajectory], rewards: Sequence[Sequence[Any]], estimator: str, *,
    filter_groups: bool = False, **options: Any,
) -> SampleBatch:
    """PPO samples from scored trajectories, with advantages computed per group.

    A group is one task instance rolled out ``rollout.n`` times: keyed by (task, seed, group index), so
    two instances of a task never share a baseline, nor do two groups of the same recurring instance
    drawn in one epoch. ``options`` go to the estimator (``norm_by_std``, ``std_floor``, ``failed_baseline``).
    With ``filter_groups`` a group the estimator does not keep (DAPO's dynamic sampling: all rewards tie) gives
    no samples, so it counts in no denominator of the loss, as verl's rows of such a group do not
    (``admire.integrations.verl.trainer``). A group with no usable step gives none either way.
    """
    groups: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for i, trajectory in enumerate(trajectories):
        groups[(trajectory.task.name, trajectory.task.seed, trajectory.group)].append(i)
    samples: list[Sample] = []
    dropped = trainable = nonzero = 0
    for members in groups.values():
        result = compute_advantages(estimator, group_samples([trajectories[i] for i in members],
                                                             [rewards[i] for i in members]), **options)
        if filter_groups and not result.keep:
            dropped += 1
            trainable += sum(s.log_prob is not None for i in members for s in trajectories[i].steps)
            continue
        for i, advantages in zip(members, result.advantages, strict=True):
            if advantages is None:
                continue
            trajectory = trajectories[i]
            for step, advantage in zip(trajectory.steps, advantages, strict=True):
                if step.log_prob is None:
                    continue
                trainable += 1
                nonzero += abs(advantage) > 1e-8
                history = trajectory.steps[: step.index]
                tokens = step.info.get("token_log_probs")  # a token policy's per-token log-probs
                samples.append(Sample(Decision(step.observation, tuple(history), step.raw_output),
                                      old_log_prob=step.log_prob, advantage=advantage,
                                      num_tokens=len(tokens) if tokens else 1,
                                      old_token_log_probs=tuple(float(t) for t in tokens) if tokens else None))
    return SampleBatch(samples, groups=len(groups), groups_dropped=dropped,
                       nonzero_frac=nonzero / trainable if trainable else 0.0)
