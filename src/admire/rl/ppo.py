"""The policy update: PPO-clip over step-level samples (METHOD §5, paper Eq. 12).

A sample is one step: the decision (screen, history, text written), the log-probability the policy
gave it when it acted, and its advantage. The loss is averaged over the steps of each minibatch. For
the ``dom`` policy one decision is one "token", so step-mean and DAPO's token-mean coincide; a token
policy passes per-token log-probs through the same function.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from admire.agent.base import Decision, Policy


@dataclass(frozen=True)
class Sample:
    decision: Decision
    old_log_prob: float
    advantage: float


@dataclass(frozen=True)
class PPOConfig:
    epochs: int = 2
    minibatch_size: int = 64
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0


def ppo_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    config: PPOConfig,
    rng: random.Random,
    reference: Policy | None = None,
) -> dict[str, float]:
    """Run ``config.epochs`` passes of minibatch PPO-clip; returns averaged diagnostics."""
    if not samples:
        return {"loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "ref_kl": 0.0, "minibatches": 0}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    ref_log_probs = None
    if reference is not None and config.kl_coef > 0:
        with torch.no_grad():
            ref_log_probs = reference.log_prob([s.decision for s in samples])
    totals = {"loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "ref_kl": 0.0}
    count = 0
    order = list(range(len(samples)))
    for _ in range(config.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), config.minibatch_size):
            batch = order[start : start + config.minibatch_size]
            new = policy.log_prob([samples[i].decision for i in batch])
            old = torch.tensor([samples[i].old_log_prob for i in batch], dtype=new.dtype)
            adv = torch.tensor([samples[i].advantage for i in batch], dtype=new.dtype)
            ratio = torch.exp(new - old)
            clipped = torch.clamp(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
            loss = -torch.minimum(ratio * adv, clipped * adv).mean()
            ref_kl = torch.zeros(())
            if ref_log_probs is not None:
                delta = ref_log_probs[batch] - new  # k3 estimator of KL(new || ref), always >= 0
                ref_kl = (torch.exp(delta) - delta - 1.0).mean()
                loss = loss + config.kl_coef * ref_kl
            optimizer.zero_grad()
            loss.backward()
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                totals["loss"] += float(loss)
                outside = (ratio < 1.0 - config.clip_low) | (ratio > 1.0 + config.clip_high)
                totals["clip_frac"] += float(outside.float().mean())
                totals["approx_kl"] += float((old - new).mean())
                totals["ref_kl"] += float(ref_kl)
            count += 1
    return {**{k: v / count for k, v in totals.items()}, "minibatches": count}
