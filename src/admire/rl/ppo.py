"""The policy update: PPO-clip over step-level samples (method.md §5, paper Eq. 12), top to bottom.

A sample is one step: the decision (screen, history, text written), the log-probability the policy
gave it when it acted, its advantage, the clip range its group asked for (DAPO's clip-higher) and how
many tokens its action has. For the ``dom`` policy one decision is one "token", so the step mean
(``seq_mean``) and DAPO's token mean (``token_mean``) coincide; a token policy whose step log-prob is
the mean over its tokens passes ``num_tokens`` and gets the weighting each aggregation means.

One call runs up to ``epochs`` passes of shuffled minibatches. Per minibatch:

    loss = −Σ w_i · min(ρ_i·A_i, clip(ρ_i, 1−ε_low,i, 1+ε_high,i)·A_i)      (PPO-clip)
           − entropy_coef · Σ w_i · H_i                                    (entropy bonus)
           + kl_coef · Σ w_i · k3(π_ref ‖ π_θ)_i                           (KL to a reference)

with ρ_i = π_θ(a_i)/π_old(a_i) and w_i the aggregation weights (1/N, or n_i/Σn for ``token_mean``).
After each pass the KL of the current policy from the one that acted is measured on the whole batch
(CleanRL's k3 estimator, mean of (ρ − 1) − log ρ); above ``target_kl`` the remaining passes are skipped.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from admire.agent.base import Decision, Policy

LossAggregation = Literal["seq_mean", "token_mean"]
LOSS_AGGREGATIONS: tuple[str, ...] = get_args(LossAggregation)


@dataclass(frozen=True)
class Sample:
    """One step to train on. ``clip_low``/``clip_high`` None: the ``PPOConfig``'s range."""

    decision: Decision
    old_log_prob: float
    advantage: float
    clip_low: float | None = None
    clip_high: float | None = None
    num_tokens: int = 1


@dataclass(frozen=True)
class PPOConfig:
    """The update's knobs (``actor_rollout_ref.actor.*``).

    ``target_kl`` None turns the early stop off (the paper's reading: a fixed number of passes).
    ``max_kl`` None turns the per-step trust region off (see ``ppo_update``).
    ``loss_agg`` is set by the trainer from the advantage estimator's hint (``dapo_step``: token_mean).
    """

    epochs: int = 2
    minibatch_size: int = 64
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    entropy_coef: float = 0.0
    target_kl: float | None = None
    max_kl: float | None = None
    loss_agg: LossAggregation = "seq_mean"

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError(f"ppo_epochs and ppo_mini_batch_size must be >= 1, got {self.epochs} and "
                             f"{self.minibatch_size}")
        for name in ("clip_low", "clip_high", "kl_coef", "entropy_coef"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"actor.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.target_kl is not None and not self.target_kl > 0:
            raise ValueError(f"actor.target_kl must be > 0 or null (off), got {self.target_kl!r}")
        if self.max_kl is not None and not self.max_kl > 0:
            raise ValueError(f"actor.max_kl must be > 0 or null (off), got {self.max_kl!r}")
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss aggregation must be one of {', '.join(LOSS_AGGREGATIONS)}, got {self.loss_agg!r}")


def ppo_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    config: PPOConfig,
    rng: random.Random,
    reference: Policy | None = None,
) -> dict[str, float]:
    """Run up to ``config.epochs`` passes of minibatch PPO-clip; returns diagnostics.

    ``approx_kl`` is the KL (k3) of the updated policy from the one that acted, on the whole batch;
    ``epochs_run`` the passes run before the early stop; ``loss``, ``clip_frac``, ``entropy``,
    ``ref_kl`` and ``grad_norm`` (before clipping) are averaged over the minibatches.

    Why the KL is checked after each *pass* on the *whole batch* (not per minibatch): it is the
    quantity ``target_kl`` bounds — how far the policy that acts next has moved from the one that
    collected the data — measured exactly under the current parameters, whereas a minibatch's KL is
    seen before its own step and on a few samples only. The pass that crosses the target is kept
    (as in CleanRL); the clip bounds how far a single pass can go. A pass stays the unit, so
    ``ppo_epochs`` keeps its meaning and ``epochs_run`` is a count of passes.

    ``max_kl`` is a trust region per optimizer step, for what ``target_kl`` cannot stop: the first
    pass. After each step the whole batch's KL is measured; past ``max_kl`` the step is shrunk along
    its direction (``_backtrack``) until it is within, and the update ends there. Adam's first steps
    move every weight by about ``lr`` whatever the gradient's size, and from a warm start one pass
    moved the policy to an approx KL of 0.5–1.4 (results.md, click-checkboxes-large).

    Why a minibatch whose gradient is exactly zero takes no optimizer step (``steps_skipped``): a
    GRPO group whose outcomes and milestone scores tie has all-zero advantages, and Adam given a zero
    gradient still moves the parameters by its running first moment. Measured on the demo (seed 2,
    ADMIRE): over 8 epochs in which every advantage was 0 the policy's entropy fell from 1.47 to 0.09
    and it stayed at 0-17% training success for the rest of the run — the optimizer kept pushing in
    the direction of one earlier update with no data behind it.
    """
    if not samples:
        return {"loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "ref_kl": 0.0, "entropy": 0.0,
                "grad_norm": 0.0, "minibatches": 0, "epochs_run": 0, "steps_skipped": 0, "backtracks": 0}
    if config.entropy_coef > 0 and not hasattr(policy, "log_prob_and_entropy"):
        raise ValueError(f"actor.entropy_coef > 0 needs a policy with log_prob_and_entropy(); "
                         f"{type(policy).__name__} has only log_prob()")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    decisions = [s.decision for s in samples]
    old = torch.tensor([s.old_log_prob for s in samples])
    advantages = torch.tensor([s.advantage for s in samples])
    low = torch.tensor([config.clip_low if s.clip_low is None else s.clip_low for s in samples])
    high = torch.tensor([config.clip_high if s.clip_high is None else s.clip_high for s in samples])
    weights = aggregation_weights(samples, config.loss_agg)
    ref_log_probs = None
    if reference is not None and config.kl_coef > 0:
        with torch.no_grad():
            ref_log_probs = reference.log_prob(decisions)

    totals = {"loss": 0.0, "clip_frac": 0.0, "ref_kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
    minibatches = epochs_run = skipped = backtracks = 0
    stop = False
    approx_kl = 0.0
    order = list(range(len(samples)))
    for _ in range(config.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), config.minibatch_size):
            if stop:
                break
            batch = torch.tensor(order[start : start + config.minibatch_size])
            new, entropy = _score(policy, [decisions[i] for i in batch.tolist()])
            w = weights[batch] / weights[batch].sum()  # the aggregation, within the minibatch
            ratio = torch.exp(new - old[batch])
            clipped = torch.clamp(ratio, 1.0 - low[batch], 1.0 + high[batch])
            surrogate = torch.minimum(ratio * advantages[batch], clipped * advantages[batch])
            loss = -(w * surrogate).sum()
            if config.entropy_coef > 0:
                loss = loss - config.entropy_coef * (w * entropy).sum()
            ref_kl = torch.zeros(())
            if ref_log_probs is not None:
                delta = ref_log_probs[batch] - new  # k3 estimator of KL(new || ref), always >= 0
                ref_kl = (w * (torch.exp(delta) - delta - 1.0)).sum()
                loss = loss + config.kl_coef * ref_kl
            optimizer.zero_grad()
            loss.backward()
            max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            if not float(grad_norm) > 0:
                skipped += 1
            elif config.max_kl is None:
                optimizer.step()
            else:
                before = [p.detach().clone() for p in params]
                optimizer.step()
                if measure_approx_kl(policy, decisions, old) > config.max_kl:
                    backtracks += _backtrack(policy, params, before, decisions, old, config.max_kl)
                    stop = True
            with torch.no_grad():
                outside = (ratio < 1.0 - low[batch]) | (ratio > 1.0 + high[batch])
                totals["loss"] += float(loss)
                totals["clip_frac"] += float(outside.float().mean())
                totals["ref_kl"] += float(ref_kl)
                totals["entropy"] += float((w * entropy).sum())
                totals["grad_norm"] += float(grad_norm)
            minibatches += 1
        epochs_run += 1
        approx_kl = measure_approx_kl(policy, decisions, old)
        if stop or (config.target_kl is not None and approx_kl > config.target_kl):
            break
    return {**{k: v / minibatches for k, v in totals.items()}, "approx_kl": approx_kl,
            "minibatches": minibatches, "epochs_run": epochs_run, "steps_skipped": skipped,
            "backtracks": backtracks}


def _backtrack(policy: Policy, params: Sequence[torch.nn.Parameter], before: Sequence[torch.Tensor],
               decisions: Sequence[Decision], old: torch.Tensor, max_kl: float, halvings: int = 6) -> int:
    """Shrink the step just taken (θ_before + s·Δ, s = 1/2, 1/4, …) until the batch KL is within
    ``max_kl``; if no fraction is, undo the step. Returns the halvings tried. The step's direction is
    kept (a line search, as TRPO's), so a too-large step still teaches what it can."""
    step = [p.detach() - b for p, b in zip(params, before, strict=True)]
    with torch.no_grad():
        for tried in range(1, halvings + 1):
            scale = 0.5**tried
            for p, b, d in zip(params, before, step, strict=True):
                p.copy_(b + scale * d)
            if measure_approx_kl(policy, decisions, old) <= max_kl:
                return tried
        for p, b in zip(params, before, strict=True):
            p.copy_(b)
    return halvings


def aggregation_weights(samples: Sequence[Sample], loss_agg: LossAggregation) -> torch.Tensor:
    """Each sample's share of the loss before normalisation: 1 per step (``seq_mean``, paper Eq. 12:
    averaged over steps) or its number of tokens (``token_mean``, DAPO: every token counts once)."""
    if any(s.num_tokens < 1 for s in samples):
        raise ValueError("every sample needs num_tokens >= 1")
    if loss_agg == "token_mean":
        return torch.tensor([float(s.num_tokens) for s in samples])
    return torch.ones(len(samples))


def measure_approx_kl(policy: Policy, decisions: Sequence[Decision], old: torch.Tensor) -> float:
    """KL(π_old ‖ π_θ) on the batch by the k3 estimator, mean of (ρ − 1) − log ρ (always >= 0)."""
    with torch.no_grad():
        log_ratio = policy.log_prob(decisions) - old
        return float((torch.exp(log_ratio) - 1.0 - log_ratio).mean())


def _score(policy: Policy, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and per-decision entropies in one forward pass when the policy can give both; otherwise
    the entropy is estimated from the sampled actions (−log π(a)), which is only logged, never trained."""
    both = getattr(policy, "log_prob_and_entropy", None)
    if both is not None:
        return both(decisions)
    new = policy.log_prob(decisions)
    return new, -new.detach()
