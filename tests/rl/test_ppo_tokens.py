"""``ppo_update`` per token: a policy that writes several tokens per step gets a ratio, a clip, a KL and an
entropy per token, aggregated as ``loss_agg`` says (token_mean, seq_mean, seq_mean_token_sum)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
import torch
from torch import nn

from admire.agent.base import Decision
from admire.rl.ppo import PPOConfig, Sample, micro_batches, ppo_update, token_weights
from admire.types import Observation

SCREEN = Observation(goal="write some digits")


class TokenBandit(nn.Module):
    """Every token is drawn from softmax(z) over 4 digits; a decision's text is its digits ("021")."""

    def __init__(self) -> None:
        super().__init__()
        self.z = nn.Parameter(torch.zeros(4))

    def token_log_probs_and_entropy(self, decisions: Sequence[Decision]):
        log_probs = torch.log_softmax(self.z, dim=0)
        width = max(len(d.text) for d in decisions)
        out = torch.zeros(len(decisions), width)
        mask = torch.zeros(len(decisions), width)
        for row, d in enumerate(decisions):
            for col, ch in enumerate(d.text):
                out[row, col] = log_probs[int(ch)]
                mask[row, col] = 1.0
        entropy = -(log_probs.exp() * log_probs).sum().expand(len(decisions), width) * mask
        return out * mask, entropy, mask

    def token_log_probs(self, decisions: Sequence[Decision]):
        new, _, mask = self.token_log_probs_and_entropy(decisions)
        return new, mask

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        new, mask = self.token_log_probs(decisions)
        return (new * mask).sum(dim=1)

    def probs(self) -> torch.Tensor:
        return torch.softmax(self.z.detach(), dim=0)

    def act(self, observations, histories, greedy=False):  # pragma: no cover - never rolled out
        raise NotImplementedError


def token_sample(policy: TokenBandit, text: str, advantage: float, shift: float = 0.0) -> Sample:
    """A sample whose old token log-probs are the current ones minus ``shift`` (ratio e^shift per token)."""
    current = torch.log_softmax(policy.z.detach(), dim=0)
    old = tuple(float(current[int(ch)]) - shift for ch in text)
    return Sample(Decision(SCREEN, (), text), old_log_prob=sum(old), advantage=advantage,
                  num_tokens=len(text), old_token_log_probs=old)


def sgd(policy: TokenBandit, samples: Sequence[Sample], lr: float = 1.0, **config: object) -> dict[str, float]:
    options = {"epochs": 1, "minibatch_size": 1024, "max_grad_norm": 0.0, **config}
    return ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=lr), samples, PPOConfig(**options),
                      random.Random(0))


def test_a_positive_advantage_raises_every_token_it_wrote() -> None:
    policy = TokenBandit()
    sgd(policy, [token_sample(policy, "011", +1.0), token_sample(policy, "2", -1.0)], lr=0.5)
    p = policy.probs()
    assert p[0] > 0.25 and p[1] > 0.25 and p[2] < 0.25


def test_the_token_mean_gradient_is_the_policy_gradient_over_all_tokens() -> None:
    # At ρ = 1: Δz = lr · Σ_tokens w_tok · A · (e_tok − p); token_mean gives each of the 3 tokens 1/3.
    policy = TokenBandit()
    p = policy.probs()
    sgd(policy, [token_sample(policy, "00", 1.0), token_sample(policy, "3", -1.0)], lr=0.3, loss_agg="token_mean")
    onehot = torch.eye(4)
    expected = 0.3 * ((onehot[0] - p) * 2 / 3 * 1.0 + (onehot[3] - p) / 3 * -1.0)
    assert policy.z.detach() == pytest.approx(expected, abs=1e-6)


def test_a_token_outside_the_clip_range_on_the_advantage_side_gives_no_gradient() -> None:
    policy = TokenBandit()
    inside = token_sample(policy, "0", +1.0, shift=0.0)
    outside = token_sample(policy, "1", +1.0, shift=0.5)  # ρ = e^0.5 > 1.2 with A > 0: clipped
    sgd(policy, [outside], lr=1.0)
    assert torch.equal(policy.z.detach(), torch.zeros(4))
    sgd(policy, [inside], lr=1.0)
    assert policy.probs()[0] > 0.25


def test_the_three_aggregations_weigh_tokens_as_named() -> None:
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    token = token_weights(mask, "token_mean")
    seq = token_weights(mask, "seq_mean")
    summed = token_weights(mask, "seq_mean_token_sum")
    assert token[0, 0] == token[1, 0] == pytest.approx(1 / 5)
    assert seq[0, 0] == pytest.approx(1 / 8) and seq[1, 0] == pytest.approx(1 / 2)
    assert summed[0, 0] == summed[1, 0] == pytest.approx(1 / 2)
    assert float((token * (1 - mask)).abs().sum()) == 0.0 and float(token.sum()) == pytest.approx(1.0)
    assert float(seq.sum()) == pytest.approx(1.0)


def test_approx_kl_is_the_token_mean_of_k3_after_the_update_when_target_kl_reads_it() -> None:
    # Two passes: after the first, target_kl reads the whole batch's KL (and, at 1e-9, stops there).
    policy = TokenBandit()
    samples = [token_sample(policy, "01", 1.0), token_sample(policy, "2", -1.0)]
    stats = sgd(policy, samples, lr=0.5, target_kl=1e-9, epochs=2)
    assert stats["epochs_run"] == 1
    new = torch.log_softmax(policy.z.detach(), dim=0)
    log_ratio = torch.tensor([float(new[int(ch)]) - o for s in samples
                              for ch, o in zip(s.decision.text, s.old_token_log_probs, strict=True)])
    assert stats["approx_kl"] == pytest.approx(float((log_ratio.exp() - 1 - log_ratio).mean()), abs=1e-6)


def test_with_no_kl_key_approx_kl_is_the_minibatches_kl_before_their_steps() -> None:
    # No key reads the KL, so it is not measured by scoring the batch again: the logged value is the mean,
    # over minibatches, of each one's KL before its step (here e^0.3 per token against the old log-probs).
    policy = TokenBandit()
    samples = [token_sample(policy, "01", 1.0, shift=0.3), token_sample(policy, "2", -1.0, shift=0.3)]
    stats = sgd(policy, samples, lr=0.5)
    assert stats["approx_kl"] == pytest.approx(math.exp(0.3) - 1 - 0.3, abs=1e-6)


class CountingBandit(TokenBandit):
    """Remembers which texts it was asked to score."""

    def __init__(self) -> None:
        super().__init__()
        self.scored: list[str] = []

    def token_log_probs_and_entropy(self, decisions: Sequence[Decision]):
        self.scored.extend(d.text for d in decisions)
        return super().token_log_probs_and_entropy(decisions)


@pytest.mark.parametrize("epochs", [1, 2])
def test_after_the_last_pass_the_batch_is_not_scored_again_for_a_kl_nothing_reads(epochs: int) -> None:
    # target_kl can stop a pass that another follows, never the last one: after it, approx_kl is the
    # minibatches' KL before their steps, and the batch is scored only by the passes themselves.
    policy = CountingBandit()
    samples = [token_sample(policy, "01", 1.0, shift=0.3), token_sample(policy, "2", -1.0, shift=0.3)]
    stats = sgd(policy, samples, lr=0.0, target_kl=100.0, epochs=epochs)
    assert stats["epochs_run"] == epochs
    kl_reads = epochs - 1  # one whole-batch KL after each pass but the last
    assert sorted(policy.scored) == sorted(["01", "2"] * (epochs + kl_reads))
    assert stats["approx_kl"] == pytest.approx(math.exp(0.3) - 1 - 0.3, abs=1e-6)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean", "seq_mean_token_sum"])
def test_a_step_with_zero_advantage_is_not_scored_and_the_update_is_the_same(loss_agg: str) -> None:
    # Its surrogate is 0·ρ: it adds nothing to the gradient, but its tokens still count in the aggregation.
    # The comparison scores it with an advantage too small to matter, so both updates take the same step.
    results = []
    for zero in (0.0, 1e-30):
        policy = CountingBandit()
        samples = [token_sample(policy, "021", 1.0, shift=0.3), token_sample(policy, "33", zero),
                   token_sample(policy, "1", -0.5), token_sample(policy, "2", zero)]
        stats = sgd(policy, samples, lr=0.5, loss_agg=loss_agg)
        results.append((policy.z.detach().clone(), sorted(policy.scored), stats))
    (skipped, scored_texts, stats), (full, all_texts, _) = results
    assert scored_texts == ["021", "1"] and all_texts == ["021", "1", "2", "33"]
    assert stats["scored_frac"] == 0.5
    assert torch.allclose(skipped, full, atol=1e-6) and not torch.allclose(full, torch.zeros(4))


def test_zero_advantage_steps_are_scored_when_a_reference_or_entropy_term_trains() -> None:
    for options, reference in (({"entropy_coef": 0.1}, None), ({"kl_coef": 0.5}, TokenBandit())):
        policy = CountingBandit()
        samples = [token_sample(policy, "0", 1.0), token_sample(policy, "11", 0.0)]
        ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.5), samples,
                   PPOConfig(epochs=1, minibatch_size=8, **options), random.Random(0), reference=reference)
        assert sorted(policy.scored) == ["0", "11"], options


def test_the_kl_term_pulls_toward_the_reference_per_token() -> None:
    reference = TokenBandit()
    policy = TokenBandit()
    with torch.no_grad():
        policy.z[0] = 2.0
    ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=1.0), [token_sample(policy, "00", 0.0)],
               PPOConfig(epochs=1, kl_coef=1.0), random.Random(0), reference=reference)
    assert float(policy.z.detach()[0]) < 2.0  # a zero advantage: only the KL term moved it, toward the reference
    free = TokenBandit()
    with torch.no_grad():
        free.z[0] = 2.0
    ppo_update(free, torch.optim.SGD(free.parameters(), lr=1.0), [token_sample(free, "00", 0.0)],
               PPOConfig(epochs=1, kl_coef=1.0), random.Random(0), reference=None)
    assert float(free.z.detach()[0]) == 2.0


def test_max_kl_bounds_a_token_level_update() -> None:
    policy = TokenBandit()
    samples = [token_sample(policy, "000", +1.0), token_sample(policy, "1", -1.0)] * 3
    stats = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=3.0), samples,
                       PPOConfig(epochs=3, minibatch_size=2, max_kl=0.05), random.Random(0))
    assert 0 < stats["approx_kl"] <= 0.05 and stats["backtracks"] >= 1
    assert policy.probs()[0] > 0.25


def test_a_batch_that_mixes_token_and_step_samples_is_refused() -> None:
    policy = TokenBandit()
    step = Sample(Decision(SCREEN, (), "0"), old_log_prob=-1.0, advantage=1.0)
    with pytest.raises(ValueError, match="per token or per step, not both"):
        sgd(policy, [token_sample(policy, "0", 1.0), step])


def test_token_samples_need_a_policy_that_scores_tokens() -> None:
    class StepOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.z = nn.Parameter(torch.zeros(4))

        def log_prob(self, decisions):
            return torch.log_softmax(self.z, 0)[[int(d.text[0]) for d in decisions]]

    with pytest.raises(ValueError, match="has no token_log_probs"):
        sgd(StepOnly(), [token_sample(TokenBandit(), "0", 1.0)])


@pytest.mark.parametrize("old", [(-1.0, -1.0, -1.0), (-1.0,)], ids=["longer", "shorter"])
def test_old_log_probs_of_a_different_tokenization_are_refused(old: tuple[float, ...]) -> None:
    # Shorter would compare the missing tokens' new log-probs with padding zeros, silently.
    policy = TokenBandit()
    sample = token_sample(policy, "01", 1.0)
    other = Sample(sample.decision, sample.old_log_prob, 1.0, old_token_log_probs=old)
    with pytest.raises(ValueError, match="tokenized as when it was sampled"):
        sgd(policy, [other])


# --------------------------------------------------------------------------------------------------
# Micro-batches sized by answer tokens
# --------------------------------------------------------------------------------------------------

def test_micro_batches_cut_runs_of_at_most_the_budget_and_keep_a_long_row_alone() -> None:
    assert micro_batches([4, 1, 3, 0, 2], [3, 2, 6, 1, 1], budget=5) == [[4, 1], [3], [0, 2]]
    assert micro_batches([0, 1], [9, 9], budget=None) == [[0, 1]]


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean", "seq_mean_token_sum"])
def test_a_minibatch_in_micro_batches_takes_the_same_step_as_in_one_piece(loss_agg: str) -> None:
    results = []
    for budget in (None, 3):
        policy = TokenBandit()
        samples = [token_sample(policy, "021", 1.0, shift=0.3), token_sample(policy, "3", -0.5),
                   token_sample(policy, "1103", 0.7, shift=-0.4), token_sample(policy, "22", -1.0, shift=0.1)]
        stats = sgd(policy, samples, loss_agg=loss_agg, max_answer_tokens=budget, entropy_coef=0.1)
        results.append((policy.z.detach().clone(), stats))
    (whole, whole_stats), (parts, part_stats) = results
    assert torch.allclose(whole, parts, atol=1e-6)
    assert not torch.allclose(whole, torch.zeros(4))  # the step did move the policy
    assert whole_stats["clip_frac"] > 0  # and some tokens were clipped, so the sum of the parts is tested
    for key in ("loss", "clip_frac", "entropy", "grad_norm", "approx_kl"):
        assert part_stats[key] == pytest.approx(whole_stats[key], abs=1e-6)


def test_a_budget_below_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="ppo_max_answer_tokens must be >= 1"):
        PPOConfig(max_answer_tokens=0)
