"""``ppo_update`` on a bandit whose gradients can be written down: sign, clipping, the KL term, gradient
clipping, minibatches, the KL early stop, per-sample clip ranges, loss aggregation and the entropy bonus."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence

import pytest
import torch
from torch import nn

from admire.agent.base import Decision
from admire.agent.dom_policy import DomPolicy
from admire.rl.ppo import PPOConfig, Sample, ppo_update
from admire.types import Observation, Task
from tests.support.fakes import FormEnv, FormPolicy, TrigramEncoder

SCREEN = Observation(goal="pick an arm")


class Bandit(nn.Module):
    """π(a) = softmax(z)_a over ``arms`` arms; a decision's text is the arm's number."""

    def __init__(self, logits: Sequence[float] = (0.0, 0.0, 0.0, 0.0)) -> None:
        super().__init__()
        self.z = nn.Parameter(torch.tensor(list(logits)))

    def log_prob_and_entropy(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(self.z, dim=0)
        arms = torch.tensor([int(d.text) for d in decisions])
        return log_probs[arms], -(log_probs.exp() * log_probs).sum().expand(len(decisions))

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        return self.log_prob_and_entropy(decisions)[0]

    def probs(self) -> torch.Tensor:
        return torch.softmax(self.z.detach(), dim=0)

    def act(self, observations, histories, greedy=False):  # pragma: no cover - never rolled out
        raise NotImplementedError


class LogProbOnly(Bandit):
    """A policy that offers only ``log_prob`` (no entropy): the PPO must still run."""

    log_prob_and_entropy = property()  # hides the method: hasattr() is False

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        return Bandit.log_prob_and_entropy(self, decisions)[0]


def sample(policy: Bandit, arm: int, advantage: float, ratio: float = 1.0, **options: float) -> Sample:
    """A sample of ``arm`` whose old log-prob makes π_θ/π_old equal ``ratio`` before the update."""
    current = float(torch.log_softmax(policy.z.detach(), dim=0)[arm])
    return Sample(Decision(SCREEN, (), str(arm)), old_log_prob=current - float(torch.log(torch.tensor(ratio))),
                  advantage=advantage, **options)


def sgd_step(policy: Bandit, samples: Sequence[Sample], lr: float = 1.0, **config: object) -> dict[str, float]:
    """One plain-SGD pass, so a parameter change is lr × the loss gradient."""
    options = {"epochs": 1, "minibatch_size": 1024, "max_grad_norm": 0.0, **config}
    return ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=lr), samples, PPOConfig(**options),
                      random.Random(0))


def test_a_positive_advantage_raises_its_action_and_a_negative_one_lowers_it() -> None:
    policy = Bandit()
    before = policy.probs()
    sgd_step(policy, [sample(policy, 0, +1.0), sample(policy, 1, -1.0)], lr=0.5)
    after = policy.probs()
    assert after[0] > before[0] and after[1] < before[1]


def test_the_gradient_is_the_policy_gradient_at_ratio_one() -> None:
    # At ρ = 1 the PPO loss is −mean(A·log π) to first order: Δz = lr·mean_i A_i (e_{a_i} − p).
    policy = Bandit()
    p = policy.probs()
    sgd_step(policy, [sample(policy, 0, 2.0), sample(policy, 3, -1.0)], lr=0.1)
    expected = 0.1 * 0.5 * (2.0 * (torch.eye(4)[0] - p) - 1.0 * (torch.eye(4)[3] - p))
    assert torch.allclose(policy.z.detach(), expected, atol=1e-6)


@pytest.mark.parametrize(("advantage", "ratio"), [(+1.0, 1.5), (-1.0, 0.5)])
def test_a_ratio_outside_the_clip_range_on_the_advantage_side_gives_no_gradient(advantage: float,
                                                                                ratio: float) -> None:
    policy = Bandit()
    stats = sgd_step(policy, [sample(policy, 0, advantage, ratio=ratio)])
    assert torch.equal(policy.z.detach(), torch.zeros(4))
    assert stats["clip_frac"] == 1.0


@pytest.mark.parametrize(("advantage", "ratio"), [(-1.0, 1.5), (+1.0, 0.5), (+1.0, 1.1)])
def test_the_pessimistic_side_and_the_inside_of_the_range_still_have_a_gradient(advantage: float,
                                                                                ratio: float) -> None:
    policy = Bandit()
    sgd_step(policy, [sample(policy, 0, advantage, ratio=ratio)])
    moved = policy.z.detach()[0]
    assert moved != 0 and (moved > 0) == (advantage > 0)


def test_a_per_sample_clip_high_widens_the_range_of_that_sample_only() -> None:
    # ρ = 1.25 with A > 0: clipped at ε_high = 0.2, unclipped at DAPO's 0.28.
    policy = Bandit()
    sgd_step(policy, [sample(policy, 0, +1.0, ratio=1.25)])
    assert torch.equal(policy.z.detach(), torch.zeros(4))
    sgd_step(policy, [sample(policy, 0, +1.0, ratio=1.25, clip_high=0.28)])
    assert policy.z.detach()[0] > 0
    policy = Bandit()  # and a per-sample clip_low narrows the other side
    sgd_step(policy, [sample(policy, 0, -1.0, ratio=0.95, clip_low=0.01)])
    assert torch.equal(policy.z.detach(), torch.zeros(4))


def test_the_kl_term_pulls_toward_the_reference_and_is_off_at_kl_coef_zero() -> None:
    policy, reference = Bandit(), Bandit([2.0, 0.0, 0.0, 0.0])
    samples = [sample(policy, arm, 0.0) for arm in range(4)]
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    ppo_update(policy, optimizer, samples, PPOConfig(epochs=3, kl_coef=0.0), random.Random(0), reference=reference)
    assert torch.equal(policy.z.detach(), torch.zeros(4))
    stats = ppo_update(policy, optimizer, samples, PPOConfig(epochs=20, kl_coef=1.0), random.Random(0),
                       reference=reference)
    assert policy.probs()[0] > 0.3  # from 0.25 toward the reference's 0.71
    assert stats["ref_kl"] > 0


def test_max_grad_norm_bounds_the_step() -> None:
    policy = Bandit()
    samples = [sample(policy, 0, 100.0), sample(policy, 1, -100.0)]
    stats = sgd_step(policy, samples, lr=1.0, max_grad_norm=0.01)
    assert float(policy.z.detach().norm()) == pytest.approx(0.01, rel=1e-4)
    assert stats["grad_norm"] > 1.0  # logged before clipping
    unclipped = Bandit()
    sgd_step(unclipped, [sample(unclipped, 0, 100.0), sample(unclipped, 1, -100.0)], lr=1.0)
    assert float(unclipped.z.detach().norm()) > 1.0


def test_minibatches_are_counted_per_pass() -> None:
    policy = Bandit()
    samples = [sample(policy, i % 4, 0.1) for i in range(10)]
    stats = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.01), samples,
                       PPOConfig(epochs=3, minibatch_size=3), random.Random(0))
    assert stats["minibatches"] == 3 * 4 and stats["epochs_run"] == 3


def test_target_kl_stops_the_passes_once_the_policy_has_moved_too_far() -> None:
    def run(target_kl: float | None) -> dict[str, float]:
        policy = Bandit()
        samples = [sample(policy, 0, 1.0), sample(policy, 1, -1.0)]
        return ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=1.0), samples,
                          PPOConfig(epochs=6, minibatch_size=1, clip_low=10.0, clip_high=10.0, target_kl=target_kl),
                          random.Random(0))

    free, stopped = run(None), run(0.01)
    assert free["epochs_run"] == 6 and free["minibatches"] == 12
    assert stopped["epochs_run"] == 1 and stopped["minibatches"] == 2
    assert stopped["approx_kl"] > 0.01 and free["approx_kl"] > stopped["approx_kl"]
    assert run(1e6)["epochs_run"] == 6


def test_approx_kl_is_the_k3_estimate_on_the_whole_batch_after_the_update() -> None:
    policy = Bandit()
    samples = [sample(policy, arm, adv) for arm, adv in ((0, 1.0), (1, -0.5), (2, 0.0))]
    stats = sgd_step(policy, samples, lr=0.5)
    log_ratio = torch.stack([policy.log_prob([s.decision])[0] - s.old_log_prob for s in samples]).detach()
    assert stats["approx_kl"] == pytest.approx(float((log_ratio.exp() - 1 - log_ratio).mean()), rel=1e-5)


def test_token_mean_weights_steps_by_their_tokens_and_seq_mean_does_not() -> None:
    def delta(loss_agg: str) -> torch.Tensor:
        policy = Bandit()
        samples = [sample(policy, 0, 1.0, num_tokens=3), sample(policy, 1, 1.0, num_tokens=1)]
        sgd_step(policy, samples, lr=1.0, loss_agg=loss_agg)
        return policy.z.detach()

    p, e = torch.full((4,), 0.25), torch.eye(4)
    assert torch.allclose(delta("seq_mean"), 0.5 * (e[0] - p) + 0.5 * (e[1] - p), atol=1e-6)
    assert torch.allclose(delta("token_mean"), 0.75 * (e[0] - p) + 0.25 * (e[1] - p), atol=1e-6)


def test_with_one_token_per_step_both_aggregations_coincide() -> None:
    results = []
    for loss_agg in ("seq_mean", "token_mean"):
        policy = Bandit()
        sgd_step(policy, [sample(policy, 0, 1.0), sample(policy, 2, -2.0)], lr=0.3, loss_agg=loss_agg)
        results.append(policy.z.detach())
    assert torch.equal(results[0], results[1])


def test_the_entropy_bonus_raises_the_entropy_and_the_entropy_is_logged() -> None:
    policy = Bandit([3.0, 0.0, 0.0, 0.0])
    entropy = float(policy.log_prob_and_entropy([Decision(SCREEN, (), "0")])[1][0].detach())
    stats = sgd_step(policy, [sample(policy, arm, 0.0) for arm in range(4)], lr=1.0, entropy_coef=0.5)
    assert stats["entropy"] == pytest.approx(entropy)
    assert float(policy.log_prob_and_entropy([Decision(SCREEN, (), "0")])[1][0].detach()) > entropy


def test_a_policy_without_entropy_trains_but_refuses_an_entropy_bonus() -> None:
    policy = LogProbOnly()
    assert not hasattr(policy, "log_prob_and_entropy")
    stats = sgd_step(policy, [sample(policy, 0, 1.0)], lr=0.5)
    assert policy.probs()[0] > 0.25 and stats["entropy"] > 0
    with pytest.raises(ValueError, match="entropy_coef"):
        sgd_step(policy, [sample(policy, 0, 1.0)], entropy_coef=0.1)


def test_no_samples_is_no_update() -> None:
    policy = Bandit()
    stats = ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=1.0), [], PPOConfig(), random.Random(0))
    assert stats["epochs_run"] == 0 and stats["minibatches"] == 0
    assert torch.equal(policy.z.detach(), torch.zeros(4))


def test_a_batch_with_no_signal_leaves_an_adam_policy_where_it_was() -> None:
    # Adam keeps moving parameters on a zero gradient (its running first moment); a batch of tied
    # groups (every advantage 0) must not move the policy. This collapsed a demo run's entropy.
    policy = Bandit()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    config = PPOConfig(epochs=1, minibatch_size=8, max_grad_norm=0.0)
    ppo_update(policy, optimizer, [sample(policy, 0, +1.0), sample(policy, 1, -1.0)], config, random.Random(0))
    moved = policy.z.detach().clone()
    stats = ppo_update(policy, optimizer, [sample(policy, a, 0.0) for a in (0, 1, 2, 3)], config,
                       random.Random(0))
    assert torch.equal(policy.z.detach(), moved)
    assert stats["steps_skipped"] == 1 and stats["minibatches"] == 1


def test_a_batch_with_signal_still_steps_adam() -> None:
    policy = Bandit()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    stats = ppo_update(policy, optimizer, [sample(policy, 0, +1.0), sample(policy, 1, 0.0)],
                       PPOConfig(epochs=1, minibatch_size=8), random.Random(0))
    assert stats["steps_skipped"] == 0 and policy.probs()[0] > 0.25


def test_max_kl_shrinks_a_step_that_goes_too_far_and_keeps_its_direction() -> None:
    def update(max_kl: float | None) -> tuple[Bandit, dict[str, float]]:
        policy = Bandit()
        samples = [sample(policy, 0, +1.0), sample(policy, 1, -1.0)] * 4
        stats = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=3.0), samples,
                           PPOConfig(epochs=4, minibatch_size=2, max_kl=max_kl), random.Random(0))
        return policy, stats

    _, free_stats = update(None)
    guarded, stats = update(0.05)
    assert free_stats["approx_kl"] > 0.05 and free_stats["backtracks"] == 0
    assert 0 < stats["approx_kl"] <= 0.05 and stats["backtracks"] >= 1
    assert stats["epochs_run"] == 1 and stats["minibatches"] == 1  # the update ends at the shrunk step
    assert guarded.probs()[0] > 0.25 > guarded.probs()[1]


def test_max_kl_undoes_a_step_no_fraction_of_which_fits() -> None:
    policy = Bandit()
    stats = ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=3.0), [sample(policy, 0, +1.0)],
                       PPOConfig(epochs=1, minibatch_size=1, max_kl=1e-12), random.Random(0))
    assert torch.equal(policy.z.detach(), torch.zeros(4)) and stats["approx_kl"] == 0.0


@pytest.mark.parametrize("options", [{"epochs": 0}, {"target_kl": 0.0}, {"max_kl": -1.0}, {"entropy_coef": -1.0},
                                     {"loss_agg": "sum"}, {"minibatch_size": 0}])
def test_bad_settings_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PPOConfig(**options)


def test_the_dom_policy_gives_log_probs_and_entropies_in_one_pass() -> None:
    policy = DomPolicy(encoder=TrigramEncoder(dim=32), embedding_dim=32, seed=3)
    screen = FormEnv().reset(Task(name="fake/form"))
    [output] = policy.act([screen], [()])
    decision = Decision(screen, (), output.text)
    log_prob, entropy = policy.log_prob_and_entropy([decision])
    assert float(log_prob[0].detach()) == pytest.approx(output.log_prob, abs=1e-5)
    assert float(log_prob[0].detach()) == pytest.approx(float(policy.log_prob([decision])[0].detach()), abs=1e-6)
    assert float(entropy[0].detach()) == pytest.approx(output.info["entropy"], abs=1e-5)
    (log_prob.sum() + entropy.sum()).backward()  # both are differentiable, with finite gradients
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)


def test_ppo_trains_the_fake_form_policy_toward_the_rewarded_action() -> None:
    policy = FormPolicy()
    reference = copy.deepcopy(policy)
    screen = FormEnv().reset(Task(name="fake/form"))
    outputs = policy.act([screen] * 16, [()] * 16)
    samples = [Sample(Decision(screen, (), o.text), o.log_prob, 1.0 if o.action == policy.candidates(screen)[0]
                      else -0.5) for o in outputs]
    ppo_update(policy, torch.optim.Adam(policy.parameters(), lr=0.1), samples, PPOConfig(epochs=4),
               random.Random(0), reference=reference)
    assert torch.softmax(policy.logits.detach()[0], dim=0)[0] > 1 / 3
