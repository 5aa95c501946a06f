"""The policy update: PPO-clip over step-level samples (method.md §5, paper Eq. 12), top to bottom.

A sample is one step: the decision (screen, history, text written), the log-probability the policy
gave it when it acted, its advantage, the clip range its group asked for (DAPO's clip-higher) and how
many tokens its action has. For the ``dom`` policy one decision is one "token", so the step mean
(``seq_mean``) and DAPO's token mean (``token_mean``) coincide.

**Token level.** When every sample carries ``old_token_log_probs`` (a language model's per-token
log-probs of the text it wrote) and the policy has ``token_log_probs(decisions) -> (log_probs, mask)``
(``[N, T]``, right-padded), the ratio and the clip are per token, as in verl and TRL, and the loss is
aggregated over tokens by ``loss_agg``: ``token_mean`` (every token of the minibatch counts once, DAPO),
``seq_mean`` (each step's tokens averaged, then the steps: verl's seq-mean-token-mean, the paper's
"averaged over the steps") or ``seq_mean_token_sum`` (each step's tokens summed, then the steps
averaged: Dr. GRPO). The KL to a reference, the entropy bonus and the approx KL are per token too.
Scoring a language model's answer is what an update costs, so at token level a step whose advantage is 0
is not scored unless an entropy or reference term trains (its gradient is exactly 0; its tokens still count
in the aggregation), and the whole batch is scored again for the KL only when ``target_kl`` or ``max_kl``
reads it (otherwise ``approx_kl`` is the minibatches' mean KL before their steps, CleanRL's estimate).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from admire.agent.base import Decision, Policy, TokenPolicy, has_entropy, missing_methods, scores_tokens

LossAggregation = Literal["seq_mean", "token_mean", "seq_mean_token_sum"]
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
    old_token_log_probs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class PPOConfig:
    """The update's knobs (``actor_rollout_ref.actor.*``).

    ``target_kl`` None turns the early stop off (the paper's reading: a fixed number of passes).
    ``max_kl`` None turns the per-step trust region off (see ``ppo_update``).
    ``loss_agg`` comes from ``actor_rollout_ref.actor.loss_agg_mode`` (verl's names, the same key on verl).
    ``max_answer_tokens`` (token level only) splits each minibatch into micro-batches of at most that many
    answer tokens (a longer single answer is a micro-batch of its own), each backpropagated before the next
    is scored: the same gradient and the same step as the whole minibatch at once, with the activations of
    one micro-batch alive at a time. None: the whole minibatch in one forward.
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
    max_answer_tokens: int | None = None

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
        if self.max_answer_tokens is not None and self.max_answer_tokens < 1:
            raise ValueError(f"actor.ppo_max_answer_tokens must be >= 1 or null (off), got {self.max_answer_tokens}")
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
    its direction (``_backtrack``) until it is within, and the update ends there: Adam's first steps
    move every weight by about ``lr`` whatever the gradient's size (docs/decisions.md#d7).

    A minibatch whose gradient is exactly zero takes no optimizer step (``steps_skipped``): Adam given a
    zero gradient still moves the parameters by its running first moment (docs/decisions.md#d11).
    """
    if not samples:
        return {"loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "ref_kl": 0.0, "entropy": 0.0,
                "grad_norm": 0.0, "minibatches": 0, "epochs_run": 0, "steps_skipped": 0, "backtracks": 0}
    if _token_level(policy, samples):
        assert scores_tokens(policy) and (reference is None or scores_tokens(reference))
        return _ppo_update_tokens(policy, optimizer, samples, config, rng, reference)
    if config.entropy_coef > 0 and not has_entropy(policy):
        raise ValueError(f"actor.entropy_coef > 0 needs a policy with log_prob_and_entropy(); "
                         f"{type(policy).__name__} has only log_prob()")
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

    def minibatch_loss(indices: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        batch = torch.tensor(indices)
        new, entropy = _score(policy, [decisions[i] for i in indices])
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
        with torch.no_grad():
            outside = (ratio < 1.0 - low[batch]) | (ratio > 1.0 + high[batch])
            stats = {"clip_frac": float(outside.float().mean()), "ref_kl": float(ref_kl),
                     "entropy": float((w * entropy).sum())}
        return loss, stats

    def minibatch_backward(indices: list[int]) -> tuple[float, dict[str, float]]:
        loss, stats = minibatch_loss(indices)
        loss.backward()
        return float(loss.detach()), stats

    return _passes(optimizer, config, rng, len(samples), minibatch_backward,
                   lambda: measure_approx_kl(policy, decisions, old))


def _token_level(policy: Policy, samples: Sequence[Sample]) -> bool:
    """Whether this batch trains per token: every sample has its token log-probs and the policy scores
    tokens. A mix, or token samples for a policy without ``token_log_probs``, is a wiring error."""
    with_tokens = sum(s.old_token_log_probs is not None for s in samples)
    if with_tokens == 0:
        return False
    if with_tokens != len(samples):
        raise ValueError(f"{with_tokens} of {len(samples)} samples carry token log-probs: a batch is trained "
                         "per token or per step, not both")
    if not scores_tokens(policy):
        missing = ", ".join(f"{name}()" for name in missing_methods(policy, TokenPolicy))
        raise ValueError(f"the samples carry token log-probs but {type(policy).__name__} has no {missing}")
    return True


def _ppo_update_tokens(
    policy: TokenPolicy, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], config: PPOConfig,
    rng: random.Random, reference: TokenPolicy | None,
) -> dict[str, float]:
    """``ppo_update`` per token (the module docstring): the same passes, early stops, skipped zero-gradient
    steps and trust region, with ratios, clipping, KL and entropy on each token of each step."""
    decisions = [s.decision for s in samples]
    old = [torch.tensor(s.old_token_log_probs, dtype=torch.float32) for s in samples]
    advantages = torch.tensor([s.advantage for s in samples])
    low = torch.tensor([config.clip_low if s.clip_low is None else s.clip_low for s in samples])
    high = torch.tensor([config.clip_high if s.clip_high is None else s.clip_high for s in samples])
    ref_cache: dict[int, torch.Tensor] = {}

    def reference_tokens(indices: list[int], mask: torch.Tensor) -> torch.Tensor | None:
        if reference is None or config.kl_coef <= 0:
            return None
        missing = [i for i in indices if i not in ref_cache]
        if missing:
            with torch.no_grad():
                ref, ref_mask = reference.token_log_probs([decisions[i] for i in missing])
            for row, i in enumerate(missing):
                ref_cache[i] = ref[row][ref_mask[row] > 0].detach()
        return _aligned([ref_cache[i] for i in indices], mask)

    def batch_kl() -> float:
        with torch.no_grad():
            new, mask = policy.token_log_probs(decisions)
            log_ratio = (new - _aligned(old, mask, decisions)) * mask
            return float(((torch.exp(log_ratio) - 1.0 - log_ratio) * mask).sum() / mask.sum().clamp(min=1))

    def micro_batch_loss(indices: list[int], totals: tuple[float, int]) -> tuple[torch.Tensor, dict[str, float]]:
        """The minibatch loss's share from ``indices``: token weights over the whole minibatch's ``totals``
        (its tokens, its steps), so the shares add up to the minibatch loss; statistics are sums too."""
        chosen = [decisions[i] for i in indices]
        if config.entropy_coef > 0:
            new, entropy, mask = policy.token_log_probs_and_entropy(chosen)
        else:
            new, mask = policy.token_log_probs(chosen)
            entropy = -new.detach()
        mask = mask.to(new.dtype)
        old_mb = _aligned([old[i] for i in indices], mask, chosen)
        w = token_weights(mask, config.loss_agg, totals)
        ratio = torch.exp(new - old_mb)
        adv = advantages[indices].unsqueeze(1).to(new.device)
        lo, hi = low[indices].unsqueeze(1).to(new.device), high[indices].unsqueeze(1).to(new.device)
        surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - lo, 1.0 + hi) * adv)
        loss = -(w * surrogate).sum()
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * (w * entropy).sum()
        ref_kl = torch.zeros(())
        ref = reference_tokens(indices, mask)
        if ref is not None:
            delta = (ref - new) * mask
            ref_kl = (w * (torch.exp(delta) - delta - 1.0)).sum()
            loss = loss + config.kl_coef * ref_kl
        with torch.no_grad():
            outside = ((ratio < 1.0 - lo) | (ratio > 1.0 + hi)).to(mask.dtype) * mask
            log_ratio = (new - old_mb) * mask
            stats = {"clip_frac": float(outside.sum()), "ref_kl": float(ref_kl),
                     "entropy": float((w * entropy).sum()), "weight": float(w.sum()), "tokens": float(mask.sum()),
                     "kl": float(((torch.exp(log_ratio) - 1.0 - log_ratio) * mask).sum())}
        return loss, stats

    # A step whose advantage is 0 adds exactly nothing to the gradient when no entropy or reference term is
    # trained (its surrogate is 0·ρ), so it is not scored: the expensive forward and backward go to the
    # steps that teach. Its tokens still count in the aggregation's totals, so the step taken is the same.
    only_teaching = config.entropy_coef == 0 and (reference is None or config.kl_coef <= 0)
    kl_read = config.target_kl is not None or config.max_kl is not None
    pre_step_kl: list[float] = []

    def minibatch_backward(indices: list[int]) -> tuple[float, dict[str, float]]:
        lengths = [old[i].numel() for i in indices]
        totals = (float(sum(lengths)), len(indices))
        scored = [i for i in indices if advantages[i] != 0] if only_teaching else list(indices)
        loss_value = 0.0
        sums = {"clip_frac": 0.0, "ref_kl": 0.0, "entropy": 0.0, "weight": 0.0, "tokens": 0.0, "kl": 0.0}
        for chunk in micro_batches(scored, [old[i].numel() for i in scored], config.max_answer_tokens):
            if not chunk:
                continue
            loss, part = micro_batch_loss(chunk, totals)
            loss.backward()
            loss_value += float(loss.detach())
            for key, value in part.items():
                sums[key] += value
        if sums["tokens"]:
            pre_step_kl.append(sums["kl"] / sums["tokens"])
        entropy = sums["entropy"]
        if len(scored) < len(indices) and sums["weight"] > 0:  # the weighted mean over the steps scored
            full = totals[0] / totals[1] if config.loss_agg == "seq_mean_token_sum" else 1.0
            entropy *= full / sums["weight"]
        stats = {"clip_frac": sums["clip_frac"] / max(sums["tokens"], 1.0), "ref_kl": sums["ref_kl"],
                 "entropy": entropy, "scored_frac": len(scored) / len(indices)}
        return loss_value, stats

    def logged_kl() -> float:
        """The mean of the minibatches' KL before their steps (CleanRL's logged estimate): no extra scoring."""
        return sum(pre_step_kl) / len(pre_step_kl) if pre_step_kl else 0.0

    def measured_kl() -> float:
        """The whole batch's KL when a key reads it (``target_kl``, ``max_kl``), else the logged estimate."""
        return batch_kl() if kl_read else logged_kl()

    # After the last pass no key has anything left to decide, so its KL is the logged estimate: scoring the
    # whole batch again there would cost a forward over every sample, for a logged number only.
    return _passes(optimizer, config, rng, len(samples), minibatch_backward, measured_kl, final_kl=logged_kl)


def _passes(
    optimizer: torch.optim.Optimizer, config: PPOConfig, rng: random.Random, size: int,
    minibatch_backward: Callable[[list[int]], tuple[float, dict[str, float]]], batch_kl: Callable[[], float],
    final_kl: Callable[[], float] | None = None,
) -> dict[str, float]:
    """The passes both update paths share: shuffled minibatches of ``size`` samples, each one's gradient
    accumulated by ``minibatch_backward`` (which returns its loss and logged statistics), the gradient
    clipped, no step on a zero gradient, the per-step trust region, and the KL early stop after each pass,
    all measured by ``batch_kl``; after the last pass, with nothing left to stop, the logged KL is
    ``final_kl``'s where one is given."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    totals = {"loss": 0.0, "clip_frac": 0.0, "ref_kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
    minibatches = epochs_run = skipped = backtracks = 0
    stop = False
    approx_kl = 0.0
    order = list(range(size))
    for _ in range(config.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), config.minibatch_size):
            if stop:
                break
            optimizer.zero_grad()
            loss, stats = minibatch_backward(order[start : start + config.minibatch_size])
            max_norm = config.max_grad_norm if config.max_grad_norm > 0 else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            if not float(grad_norm) > 0:
                skipped += 1
            elif config.max_kl is None:
                optimizer.step()
            else:
                before = [p.detach().clone() for p in params]
                optimizer.step()
                if batch_kl() > config.max_kl:
                    backtracks += _backtrack(params, before, batch_kl, config.max_kl)
                    stop = True
            totals["loss"] += loss
            totals["grad_norm"] += float(grad_norm)
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value
            minibatches += 1
        epochs_run += 1
        last = epochs_run == config.epochs
        approx_kl = final_kl() if last and not stop and final_kl is not None else batch_kl()
        if stop or (config.target_kl is not None and approx_kl > config.target_kl):
            break
    return {**{k: v / minibatches for k, v in totals.items()}, "approx_kl": approx_kl,
            "minibatches": minibatches, "epochs_run": epochs_run, "steps_skipped": skipped,
            "backtracks": backtracks}


def token_weights(mask: torch.Tensor, loss_agg: LossAggregation,
                  totals: tuple[float, int] | None = None) -> torch.Tensor:
    """Each token's share of a minibatch's loss (they sum to 1 over the minibatch's tokens). ``mask`` may
    be part of the minibatch: ``totals`` are then the whole minibatch's (tokens, steps)."""
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
    tokens, steps = totals if totals is not None else (float(mask.sum()), mask.shape[0])
    if loss_agg == "token_mean":
        return mask / max(tokens, 1.0)
    if loss_agg == "seq_mean_token_sum":
        return mask / steps
    return mask / (lengths * steps)


def micro_batches(indices: Sequence[int], lengths: Sequence[int], budget: int | None) -> list[list[int]]:
    """``indices`` in order, cut into runs of at most ``budget`` tokens (``lengths``, one per index); a row
    longer than the budget is a run of its own. None: one run."""
    if budget is None:
        return [list(indices)]
    runs: list[list[int]] = []
    used = 0
    for index, length in zip(indices, lengths, strict=True):
        if runs and used + length <= budget:
            runs[-1].append(index)
            used += length
        else:
            runs.append([index])
            used = length
    return runs


def _aligned(rows: Sequence[torch.Tensor], mask: torch.Tensor,
             decisions: Sequence[Decision] | None = None) -> torch.Tensor:
    """1-D per-token rows right-padded to ``mask``'s width, on its device. Row ``k`` must have exactly as
    many values as ``mask[k]`` has tokens: another count means the text was tokenized differently from when
    it was sampled, and the log-probs of different tokens would be paired (or compared with padding)."""
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    counts = mask.sum(dim=1).round().long().tolist()
    for k, row in enumerate(rows):
        if row.numel() != counts[k]:
            where = f" ({decisions[k].text[:60]!r})" if decisions is not None else ""
            raise ValueError(f"a sample has {row.numel()} old token log-probs but the policy scores {counts[k]} "
                             f"tokens{where}: the response must be tokenized as when it was sampled")
        out[k, : row.numel()] = row.to(mask.device)
    return out


def _backtrack(params: Sequence[torch.nn.Parameter], before: Sequence[torch.Tensor],
               kl: Callable[[], float], max_kl: float, halvings: int = 6) -> int:
    """Shrink the step just taken (θ_before + s·Δ, s = 1/2, 1/4, …) until ``kl()``, the batch KL, is within
    ``max_kl``; if no fraction is, undo the step. Returns the halvings tried. The step's direction is
    kept (a line search, as TRPO's), so a too-large step still teaches what it can."""
    step = [p.detach() - b for p, b in zip(params, before, strict=True)]
    with torch.no_grad():
        for tried in range(1, halvings + 1):
            scale = 0.5**tried
            for p, b, d in zip(params, before, step, strict=True):
                p.copy_(b + scale * d)
            if kl() <= max_kl:
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
    if has_entropy(policy):
        return policy.log_prob_and_entropy(decisions)
    new = policy.log_prob(decisions)
    return new, -new.detach()
