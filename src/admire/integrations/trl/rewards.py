"""ADMIRE's rewards for TRL's ``GRPOTrainer``: an episode's per-step rewards folded into one, and the reward function.

TRL's GRPO gives one scalar reward per completion and normalises it within the group of ``num_generations``
completions of one prompt: it is trajectory-level. ADMIRE's reward is per step, and it needs the whole batch
at once: the milestone bank is updated from the batch's successes *before* the batch is scored (method.md
§2, order within a batch), so a first success already scaffolds its failed siblings. A TRL reward function
sees the batch too, but only after generation and without the episodes; so the scoring runs at the end of
the rollout function (:mod:`admire.integrations.trl.rollout`), with the CPU trainer's own step
(:class:`admire.rl.scoring.BatchScorer`), and the rollout forwards each episode's numbers to
:func:`admire_reward`, which only hands them to TRL.

The fold of the per-step R_total into the episode's one scalar is the **mean over its steps** (``FOLDS``,
``fold="sum"`` is the other): the outcome keeps its 0/1 scale (it is the same on every step), the format
penalty becomes η times the share of malformed steps, and the milestone term the average per-step
milestone reward. A sum would pay a success once per step, so a long success would beat a short one.
The mean is also the per-trajectory average of exactly the values ``grpo_step`` pools per group.

An episode that ended in an environment error (after its re-runs) is excluded as on the CPU path: its
reward is ``None``, which TRL turns into NaN, leaves out of the group's mean and std and gives advantage 0
(``GRPOTrainer._calculate_rewards`` and ``_generate_and_score_completions``); the rollout also masks all of
its completion tokens (``env_mask`` 0), so no loss, KL or entropy term and no token count comes from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from admire.types import RewardBreakdown

FOLDS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda totals: float(np.mean(totals)) if totals else 0.0,
    "sum": lambda totals: float(np.sum(totals)),
}
"""How an episode's per-step R_total becomes its one TRL reward (see the module docstring)."""

RETURN_FIELD = "admire_return"
"""The rollout's per-row field :func:`admire_reward` reads (None: excluded)."""


def episode_return(breakdowns: Sequence[RewardBreakdown], fold: str = "mean") -> float:
    """One episode's TRL reward from its per-step breakdowns (``FOLDS``)."""
    if fold not in FOLDS:
        raise ValueError(f"fold must be one of {', '.join(FOLDS)}, got {fold!r}")
    return FOLDS[fold]([b.total for b in breakdowns])


def admire_reward(prompts: Sequence[Any], completions: Sequence[Any],
                  admire_return: Sequence[float | None] | None = None,
                  admire_metrics: Sequence[Mapping[str, float]] | None = None,
                  log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float | None]:
    """TRL reward function: each completion's ADMIRE episode return, as the rollout function computed it.

    Pass it with the rollout: ``GRPOTrainer(reward_funcs=admire_reward, rollout_func=make_rollout_func(...))``.
    ``None`` (an excluded episode) stays None, so TRL gives that completion no advantage. The batch's
    reward terms and bank numbers (``admire_metrics``) go to TRL's logs through ``log_metric``.
    """
    if admire_return is None:
        raise ValueError("admire_reward reads the episode returns that ADMIRE's rollout forwards; pass "
                         "rollout_func=admire.integrations.trl.make_rollout_func(...) to GRPOTrainer")
    if len(admire_return) != len(prompts):
        raise ValueError(f"admire_reward got {len(admire_return)} episode returns for {len(prompts)} completions; "
                         "the rollout must give one per completion")
    if log_metric is not None and admire_metrics:
        for name, value in admire_metrics[0].items():
            log_metric(name, float(value))
    return [None if value is None else float(value) for value in admire_return]

