"""method.md §4 rewards against hand-computed examples (the arithmetic is in the comments)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from admire.actions import describe, validate_action
from admire.milestones.bank import MilestoneBank, Provenance
from admire.milestones.matcher import Hit, Matcher, MatchResult
from admire.milestones.slots import extract_slot_values, positional_values
from admire.rewards import (
    RewardConfig,
    counterfactual_descriptions,
    descriptions_for,
    format_penalty,
    judge_lambda,
    milestone_key_for,
    milestone_lambda,
    milestone_step_rewards,
    process_return,
    process_terms,
    score_batch,
    score_trajectory,
)
from admire.rl.advantages import GroupSample, group_samples, grpo_step
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement

GOAL = 'Enter the username "karrie" and the password "x9Z" into the text fields and press login.'
MILESTONES = ("typed into the 'Username' field", "typed into the 'Password' field",
              "clicked the 'Login' button", "login page closed")


# --------------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------------

def make_match(similarities: Sequence[float | None], num_milestones: int) -> MatchResult:
    """A match where step t hits the next milestone with ``similarities[t]`` (None: no hit)."""
    hits: list[Hit | None] = []
    checked: list[int | None] = []
    pointer = 0
    for similarity in similarities:
        checked.append(pointer if pointer < num_milestones else None)
        if similarity is None:
            hits.append(None)
        else:
            hits.append(Hit(milestone_index=pointer, milestone=f"m{pointer}", similarity=similarity))
            pointer += 1
    shown = tuple(s if s is not None else 0.1 for s in similarities) if num_milestones else \
        tuple(None for _ in similarities)
    return MatchResult(hits=tuple(hits), similarities=shown, checked=tuple(checked),
                       num_milestones=num_milestones)


def make_step(index: int, grounded: str = "clicked the 'OK' button", *, valid: bool = True,
              model: str | None = None) -> Step:
    return Step(index=index, observation=Observation(goal=GOAL, step=index), raw_output="…",
                format_valid=valid, grounded_description=grounded, model_description=model,
                parse_error=None if valid else "no JSON object in the output")


def make_trajectory(num_steps: int, outcome: float, *, invalid: Sequence[int] = (),
                    termination: Termination | None = None, task: str = "miniwob/login-user",
                    descriptions: Sequence[str] | None = None, goal: str = GOAL, tid: str = "t") -> Trajectory:
    descriptions = descriptions or ["clicked the 'OK' button"] * num_steps
    steps = tuple(make_step(t, descriptions[t], valid=t not in invalid) for t in range(num_steps))
    if termination is None:
        termination = Termination.SUCCESS if outcome >= 1 else Termination.MAX_STEPS
    return Trajectory(id=tid, task=Task(name=task), goal=goal, steps=steps, outcome=outcome,
                      termination=termination)


def approx_list(values: Sequence[float]):
    return pytest.approx(list(values), abs=1e-12)


# A 5-step match against K = 4 milestones, hitting at t=1 (s=0.8) and t=3 (s=0.9): k = 2, k/K = 0.5.
FIVE_STEPS = [None, 0.8, None, 0.9, None]
# The paper's Eq. 11 (k/K on every step of a failure); the shipped default is progress: prefix.
TOTAL = RewardConfig(progress="total")


# --------------------------------------------------------------------------------------------------
# R_mil(t): the asymmetric milestone reward
# --------------------------------------------------------------------------------------------------

def test_success_is_denoised_only_hit_steps_earn_their_similarity():
    rewards = milestone_step_rewards(make_match(FIVE_STEPS, 4), success=True, cfg=RewardConfig())
    assert rewards == approx_list([0.0, 0.8, 0.0, 0.9, 0.0])


def test_failure_is_scaffolded_with_total_progress():
    # k/K = 2/4 = 0.5 everywhere; hit steps add ζ·r = 0.5·0.8 = 0.4 and 0.5·0.9 = 0.45.
    rewards = milestone_step_rewards(make_match(FIVE_STEPS, 4), success=False, cfg=TOTAL)
    assert rewards == approx_list([0.5, 0.9, 0.5, 0.95, 0.5])


def test_prefix_progress_pays_k_over_K_up_to_the_last_hit_and_nothing_after_it():
    # The default. Last hit at t=3: k/K = 0.5 on t = 0..3 (+ζ·r on hits), 0 on the tail t=4.
    assert RewardConfig().progress == "prefix"
    rewards = milestone_step_rewards(make_match(FIVE_STEPS, 4), success=False, cfg=RewardConfig())
    assert rewards == approx_list([0.5, 0.9, 0.5, 0.95, 0.0])
    # A hit on the last step pays every step, exactly as total does; no hit pays nothing.
    last = [None, None, 0.8]
    assert milestone_step_rewards(make_match(last, 2), False, RewardConfig()) == approx_list([0.5, 0.5, 0.9])
    assert milestone_step_rewards(make_match([None] * 3, 2), False, RewardConfig()) == [0.0] * 3
    # A success is denoised as before: only hit steps earn r_t.
    assert milestone_step_rewards(make_match(FIVE_STEPS, 4), True, RewardConfig()) == approx_list([0, 0.8, 0, 0.9, 0])


def test_failure_with_running_progress_counts_hits_up_to_and_including_t():
    # running k_t = [0, 1, 1, 2, 2] → k_t/4 = [0, 0.25, 0.25, 0.5, 0.5]; plus 0.4 at t=1 and 0.45 at t=3.
    cfg = RewardConfig(progress="running")
    rewards = milestone_step_rewards(make_match(FIVE_STEPS, 4), success=False, cfg=cfg)
    assert rewards == approx_list([0.0, 0.65, 0.25, 0.95, 0.5])


def test_running_progress_does_not_change_a_success():
    cfg = RewardConfig(progress="running")
    assert milestone_step_rewards(make_match(FIVE_STEPS, 4), True, cfg) == approx_list([0, 0.8, 0, 0.9, 0])


def test_zeta_scales_the_similarity_bonus_of_a_failure():
    # ζ = 1: [0.5, 0.5 + 0.8, 0.5, 0.5 + 0.9, 0.5].
    rewards = milestone_step_rewards(make_match(FIVE_STEPS, 4), False, RewardConfig(zeta=1.0, progress="total"))
    assert rewards == approx_list([0.5, 1.3, 0.5, 1.4, 0.5])


def test_failure_without_any_hit_earns_nothing():
    # k = 0 → k/K = 0 on every step.
    assert milestone_step_rewards(make_match([None, None, None], 3), False, RewardConfig()) == [0.0] * 3


def test_no_milestones_means_no_milestone_reward():
    match = make_match([None, None], 0)
    for strategy in ("mix", "success_only", "failure_only", "uniform"):
        cfg = RewardConfig(strategy=strategy)
        assert milestone_step_rewards(match, True, cfg) == [0.0, 0.0]
        assert milestone_step_rewards(match, False, cfg) == [0.0, 0.0]


@pytest.mark.parametrize(
    ("strategy", "success_rewards", "failure_rewards"),
    [
        ("mix", [0.0, 0.8, 0.0, 0.9, 0.0], [0.5, 0.9, 0.5, 0.95, 0.5]),
        ("success_only", [0.0, 0.8, 0.0, 0.9, 0.0], [0.0] * 5),  # no scaffold for failures
        ("failure_only", [0.0] * 5, [0.5, 0.9, 0.5, 0.95, 0.5]),  # no denoise for successes
        # uniform: the scaffold rule on both sides, k/K + ζ·r on hits and k/K elsewhere.
        ("uniform", [0.5, 0.9, 0.5, 0.95, 0.5], [0.5, 0.9, 0.5, 0.95, 0.5]),
    ],
)
def test_strategies(strategy, success_rewards, failure_rewards):
    cfg = RewardConfig(strategy=strategy, progress="total")
    match = make_match(FIVE_STEPS, 4)
    assert milestone_step_rewards(match, True, cfg) == approx_list(success_rewards)
    assert milestone_step_rewards(match, False, cfg) == approx_list(failure_rewards)


def test_uniform_with_running_progress():
    # Success under uniform follows the failure rule: running k_t/4 = [0, .25, .25, .5, .5] + ζ·r on hits.
    cfg = RewardConfig(strategy="uniform", progress="running")
    assert milestone_step_rewards(make_match(FIVE_STEPS, 4), True, cfg) == approx_list([0, 0.65, 0.25, 0.95, 0.5])


@given(st.lists(st.one_of(st.none(), st.floats(0.75, 1.0, exclude_min=True)), max_size=20), st.integers(1, 8))
def test_running_progress_never_exceeds_total_and_agrees_at_the_last_step(similarities, num_milestones):
    # Hits beyond K cannot happen (the pointer stops at m_K), so keep at most K of them.
    kept, hits = [], 0
    for s in similarities:
        if s is not None and hits < num_milestones:
            hits += 1
            kept.append(s)
        else:
            kept.append(None)
    match = make_match(kept, num_milestones)
    total = milestone_step_rewards(match, False, TOTAL)
    running = milestone_step_rewards(match, False, RewardConfig(progress="running"))
    assert all(r <= t + 1e-12 for r, t in zip(running, total, strict=True))
    if kept:
        assert running[-1] == pytest.approx(total[-1])


# --------------------------------------------------------------------------------------------------
# λ(e), process return, format
# --------------------------------------------------------------------------------------------------

def test_lambda_decays_geometrically_with_epoch():
    cfg = RewardConfig()
    assert milestone_lambda(0, cfg) == pytest.approx(0.3)  # 0.3·0.9^0
    assert milestone_lambda(1, cfg) == pytest.approx(0.27)  # 0.3·0.9
    assert milestone_lambda(2, cfg) == pytest.approx(0.243)  # 0.3·0.81
    assert milestone_lambda(10, RewardConfig(milestone_decay=1.0)) == pytest.approx(0.3)  # no decay
    assert milestone_lambda(3, RewardConfig(milestone_weight=0.5, milestone_decay=0.5)) == pytest.approx(0.0625)


def test_lambda_refuses_a_negative_epoch():
    with pytest.raises(ValueError, match="epoch must be an integer >= 0"):
        milestone_lambda(-1, RewardConfig())


def test_judge_lambda_has_its_own_weight_and_decay():
    cfg = RewardConfig(judge_weight=0.2, judge_decay=0.5)
    assert judge_lambda(2, cfg) == pytest.approx(0.05)  # 0.2·0.5²


def test_process_return_discounts_future_milestone_rewards_back():
    # γ = 0.5: R'(3) = 0.9; R'(2) = 0 + 0.5·0.9 = 0.45; R'(1) = 0.8 + 0.5·0.45 = 1.025;
    # R'(0) = 0 + 0.5·1.025 = 0.5125.
    assert process_return([0.0, 0.8, 0.0, 0.9], weight=1.0, gamma=0.5) == approx_list([0.5125, 1.025, 0.45, 0.9])
    # weight 2 doubles every term; γ = 0 is the identity (times the weight).
    assert process_return([0.0, 0.8, 0.0, 0.9], 2.0, 0.5) == approx_list([1.025, 2.05, 0.9, 1.8])
    assert process_return([0.3, 0.7], 1.0, 0.0) == approx_list([0.3, 0.7])
    assert process_return([], 1.0, 0.99) == []


@given(st.lists(st.floats(-10, 10), max_size=12), st.floats(0, 1), st.floats(-3, 3))
def test_process_return_equals_its_definition(values, gamma, weight):
    expected = [weight * sum(gamma ** (j - t) * values[j] for j in range(t, len(values)))
                for t in range(len(values))]
    assert process_return(values, weight, gamma) == pytest.approx(expected, abs=1e-9)


def test_format_penalty_is_minus_one_for_an_unparseable_step():
    assert format_penalty(make_step(0, valid=False)) == -1.0
    assert format_penalty(make_step(0, valid=True)) == 0.0


# --------------------------------------------------------------------------------------------------
# score_trajectory: the composition R_total(t)
# --------------------------------------------------------------------------------------------------

def test_success_total_with_format_penalty_and_decayed_lambda():
    # Success, 3 steps, step 1 unparseable; K = 2, hits at t=0 (0.8) and t=2 (0.9); epoch 1 → λ = 0.27.
    # t0: 1 + 0 + 0.27·0.8 = 1.216;  t1: 1 − 0.5·1 + 0.27·0 = 0.5;  t2: 1 + 0.27·0.9 = 1.243.
    trajectory = make_trajectory(3, 1.0, invalid=[1])
    scored = score_trajectory(trajectory, make_match([0.8, None, 0.9], 2), RewardConfig(), epoch=1)
    assert [b.total for b in scored] == approx_list([1.216, 0.5, 1.243])
    assert [b.format for b in scored] == [0.0, -0.5, 0.0]
    assert [b.milestone for b in scored] == approx_list([0.8, 0.0, 0.9])
    assert all(b.outcome == 1.0 and b.milestone_weight == pytest.approx(0.27) for b in scored)
    assert [b.process for b in scored] == [0.0, 0.0, 0.0]
    assert [b.matched_index for b in scored] == [0, None, 1]
    assert [b.matched_milestone for b in scored] == ["m0", None, "m1"]
    assert [b.similarity for b in scored] == approx_list([0.8, 0.1, 0.9])
    assert all(b.hits == 2 and b.num_milestones == 2 for b in scored)


def test_failure_total_is_scaffolded_and_penalised():
    # Failure, 3 steps, step 2 unparseable; K = 4, one hit at t=1 (0.8); epoch 0 → λ = 0.3.
    # R_mil = [1/4, 1/4 + 0.5·0.8, 1/4] = [0.25, 0.65, 0.25]
    # totals: 0 + 0.3·0.25 = 0.075;  0.3·0.65 = 0.195;  −0.5 + 0.3·0.25 = −0.425.
    trajectory = make_trajectory(3, 0.0, invalid=[2])
    scored = score_trajectory(trajectory, make_match([None, 0.8, None], 4), TOTAL, epoch=0)
    assert [b.milestone for b in scored] == approx_list([0.25, 0.65, 0.25])
    assert [b.total for b in scored] == approx_list([0.075, 0.195, -0.425])
    # progress: prefix (the default): the step after the last hit earns no progress, −0.5 + 0 = −0.5.
    prefix = score_trajectory(trajectory, make_match([None, 0.8, None], 4), RewardConfig(), epoch=0)
    assert [b.total for b in prefix] == approx_list([0.075, 0.195, -0.5])


def test_process_return_replaces_the_milestone_term_in_the_total():
    # Same failure as above with process_reward on (weight 1, γ 0.5):
    # R_mil' = [0.25 + 0.5·0.775, 0.65 + 0.5·0.25, 0.25] = [0.6375, 0.775, 0.25]
    # totals: 0.3·0.6375 = 0.19125;  0.3·0.775 = 0.2325;  −0.5 + 0.3·0.25 = −0.425.
    cfg = RewardConfig(process_enable=True, process_weight=1.0, process_decay_gamma=0.5, progress="total")
    scored = score_trajectory(make_trajectory(3, 0.0, invalid=[2]), make_match([None, 0.8, None], 4), cfg, 0)
    assert [b.process for b in scored] == approx_list([0.6375, 0.775, 0.25])
    assert [b.milestone for b in scored] == approx_list([0.25, 0.65, 0.25])  # the local term stays visible
    assert [b.total for b in scored] == approx_list([0.19125, 0.2325, -0.425])


def test_process_return_under_prefix_propagates_the_hit_term_and_adds_progress_where_earned():
    # Failure, 4 steps, K = 4, hits at t=1 (0.8) and t=2 (0.6): k/K = 0.5 on t ≤ 2, 0 at t=3.
    # Hit terms h = ζ·r = [0, 0.4, 0.3, 0]; γ = 0.5: return [0.5·0.55, 0.4 + 0.5·0.3, 0.3, 0]
    # = [0.275, 0.55, 0.3, 0]; plus progress [0.5, 0.5, 0.5, 0] → process = [0.775, 1.05, 0.8, 0];
    # total = 0.3·process = [0.2325, 0.315, 0.24, 0].
    cfg = RewardConfig(process_enable=True, process_weight=1.0, process_decay_gamma=0.5)
    scored = score_trajectory(make_trajectory(4, 0.0), make_match([None, 0.8, 0.6, None], 4), cfg, 0)
    assert [b.milestone for b in scored] == approx_list([0.5, 0.9, 0.8, 0.0])
    assert [b.process for b in scored] == approx_list([0.775, 1.05, 0.8, 0.0])
    assert [b.total for b in scored] == approx_list([0.2325, 0.315, 0.24, 0.0])
    # weight 2 doubles both parts; with γ = 0 the process term is weight·R_mil(t), as under total.
    doubled = RewardConfig(process_enable=True, process_weight=2.0, process_decay_gamma=0.5)
    assert process_terms(make_match([None, 0.8, 0.6, None], 4), False, doubled) == approx_list([1.55, 2.1, 1.6, 0])
    for progress in ("prefix", "total"):
        flat = RewardConfig(process_enable=True, process_weight=2.0, process_decay_gamma=0.0, progress=progress)
        match = make_match([None, 0.8, 0.6, None], 4)
        assert process_terms(match, False, flat) == approx_list([2 * r for r in milestone_step_rewards(match, False,
                                                                                                         flat)])


# --------------------------------------------------------------------------------------------------
# Progress paid to a wrong tail made dawdling pay (docs/decisions.md#d6)
# --------------------------------------------------------------------------------------------------

def _success_and_dawdler(cfg: RewardConfig, dawdler_hit_at: int) -> tuple[list[float], list[float]]:
    """Step totals of a 2-step success (K = 2, both hit at s = 0.9) and a 20-step failure that hits the
    first milestone (s = 0.9) at step ``dawdler_hit_at`` and wanders for the rest, at epoch 0."""
    success = score_trajectory(make_trajectory(2, 1.0, tid="quick"), make_match([0.9, 0.9], 2), cfg, epoch=0)
    similarities: list[float | None] = [None] * 20
    similarities[dawdler_hit_at] = 0.9
    dawdler = score_trajectory(make_trajectory(20, 0.0, tid="dawdle"), make_match(similarities, 2), cfg, epoch=0)
    return [b.total for b in success], [b.total for b in dawdler]


def _summed_advantages(success: list[float], dawdler: list[float]) -> tuple[float, float]:
    result = grpo_step([GroupSample(tuple(success), 1.0), GroupSample(tuple(dawdler), 0.0)])
    return sum(result.advantages[0]), sum(result.advantages[1])  # type: ignore[arg-type]


def test_a_dawdling_failure_out_earns_a_quick_success_under_total_progress():
    # The paper's progress (Eq. 11, k/K on every step) with the process return on (weight 1, γ 0.99).
    # Success: R_mil = [0.9, 0.9] → R' = [0.9 + 0.99·0.9, 0.9] = [1.791, 0.9] → totals [1.537, 1.27].
    # Dawdler: R_mil = [0.5 + 0.45, 0.5 × 19]; R'(1) = 0.5·Σ_{n<19} 0.99^n ≈ 8.69, R'(0) ≈ 0.95 + 0.99·8.69
    # ≈ 9.55 → its first step totals 0.3·9.55 ≈ 2.87, more than any step of the success.
    cfg = RewardConfig(process_enable=True, progress="total")
    success, dawdler = _success_and_dawdler(cfg, dawdler_hit_at=0)
    assert success == approx_list([1.5373, 1.27])
    assert max(dawdler) > 2.8 > max(success)
    assert sum(dawdler) > 10 * sum(success)
    success_adv, dawdler_adv = _summed_advantages(success, dawdler)
    assert success_adv < 0 < dawdler_adv  # grpo_step pushes the success down and the dawdling up


def test_a_quick_success_out_earns_a_dawdling_failure_under_the_shipped_defaults():
    # Shipped defaults, stated: progress prefix, ζ 0.5, λ0 0.3 (epoch 0), strategy mix; the process
    # return is switched on with its defaults, weight 1.0 and γ 0.99.
    cfg = RewardConfig(process_enable=True)
    assert (cfg.progress, cfg.zeta, cfg.milestone_weight, cfg.strategy) == ("prefix", 0.5, 0.3, "mix")
    assert (cfg.process_weight, cfg.process_decay_gamma) == (1.0, 0.99)
    # Dawdler hitting at step 0: R_mil = [0.95, 0 × 19]; process = [ζ·0.9 + 0.5, 0 …] → totals [0.285, 0 …].
    success, dawdler = _success_and_dawdler(cfg, dawdler_hit_at=0)
    assert success == approx_list([1.5373, 1.27])
    assert dawdler == approx_list([0.285] + [0.0] * 19)
    assert min(success) > max(dawdler)
    success_adv, dawdler_adv = _summed_advantages(success, dawdler)
    assert success_adv > 0 > dawdler_adv
    # Dawdling first and hitting at the last step: the whole trajectory is the prefix, but only the hit
    # term is propagated (process_terms): step t totals 0.3·(0.5 + 0.45·0.99^(19−t)) ≤ 0.285.
    success, late = _success_and_dawdler(cfg, dawdler_hit_at=19)
    assert late == approx_list([0.3 * (0.5 + 0.45 * 0.99 ** (19 - t)) for t in range(20)])
    assert min(success) > max(late)
    # Propagating the progress term too would have brought the dawdling reward back through the late hit:
    match = make_match([None] * 19 + [0.9], 2)
    propagated = process_return(milestone_step_rewards(match, False, cfg), 1.0, 0.99)
    assert 0.3 * propagated[0] > max(success)


def test_every_total_is_recomputable_from_its_breakdown():
    trajectory = make_trajectory(5, 0.0, invalid=[0, 4])
    match = make_match(FIVE_STEPS, 4)
    for cfg in (RewardConfig(), RewardConfig(process_enable=True), RewardConfig(mode="outcome"),
                RewardConfig(process_enable=True, progress="total")):
        for b in score_trajectory(trajectory, match, cfg, epoch=3):
            dense = b.process if cfg.process_enable else b.milestone
            assert b.total == pytest.approx(b.outcome + b.format + b.milestone_weight * dense)


def test_outcome_mode_is_outcome_plus_format_only():
    # Failure: totals = 0 + 0.5·[−1, 0, 0] = [−0.5, 0, 0]; success: 1 + [0, 0, 0].
    cfg = RewardConfig(mode="outcome")
    match = make_match([None, 0.8, None], 4)
    failed = score_trajectory(make_trajectory(3, 0.0, invalid=[0]), match, cfg, epoch=0)
    assert [b.total for b in failed] == approx_list([-0.5, 0.0, 0.0])
    assert all(b.milestone == 0.0 and b.milestone_weight == 0.0 for b in failed)
    assert failed[1].matched_milestone == "m0"  # what would have matched stays visible in the viewer
    succeeded = score_trajectory(make_trajectory(3, 1.0), None, cfg, epoch=0)
    assert [b.total for b in succeeded] == [1.0, 1.0, 1.0]


def test_judge_mode_adds_the_weighted_judge_score():
    # Judge scores [0.2, 1.0, 0.5]; epoch 1 → judge λ = 0.3·0.9 = 0.27; failure with step 0 unparseable:
    # t0: 0 − 0.5 + 0.27·0.2 = −0.446;  t1: 0.27·1.0 = 0.27;  t2: 0.27·0.5 = 0.135.
    cfg = RewardConfig(mode="judge")
    scored = score_trajectory(make_trajectory(3, 0.0, invalid=[0]), None, cfg, 1, judge_scores=[0.2, 1.0, 0.5])
    assert [b.total for b in scored] == approx_list([-0.446, 0.27, 0.135])
    assert [b.judge for b in scored] == approx_list([0.2, 1.0, 0.5])
    assert all(b.milestone == 0.0 and b.process == 0.0 for b in scored)


def test_judge_mode_rejects_missing_short_or_out_of_range_scores():
    cfg = RewardConfig(mode="judge")
    trajectory = make_trajectory(2, 0.0)
    with pytest.raises(ValueError, match="needs judge_scores"):
        score_trajectory(trajectory, None, cfg, 0)
    with pytest.raises(ValueError, match="judge gave 1 scores"):
        score_trajectory(trajectory, None, cfg, 0, judge_scores=[0.5])
    with pytest.raises(ValueError, match=r"not in \[0, 1\]"):
        score_trajectory(trajectory, None, cfg, 0, judge_scores=[0.5, 1.5])


def test_no_milestones_yet_or_milestones_disabled_gives_outcome_and_format():
    trajectory = make_trajectory(2, 0.0, invalid=[1])
    assert [b.total for b in score_trajectory(trajectory, None, RewardConfig(), 0)] == [0.0, -0.5]
    disabled = RewardConfig(milestone_enable=False)
    scored = score_trajectory(trajectory, make_match([0.9, None], 2), disabled, 0)
    assert [b.total for b in scored] == [0.0, -0.5]


def test_env_error_trajectories_are_refused():
    trajectory = make_trajectory(2, 0.0, termination=Termination.ENV_ERROR)
    with pytest.raises(ValueError, match=r"environment error.*exclude env_error"):
        score_trajectory(trajectory, None, RewardConfig(), 0)


def test_a_match_for_another_trajectory_is_refused():
    with pytest.raises(ValueError, match="covers 2 steps but the trajectory has 3"):
        score_trajectory(make_trajectory(3, 0.0), make_match([None, 0.9], 2), RewardConfig(), 0)


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------

def test_config_from_the_original_projects_nested_keys():
    cfg = RewardConfig.from_mapping(OmegaConf.create({
        "milestone_reward": {"enable": True, "threshold": 0.8, "weight": 0.2, "strategy": "uniform",
                             "decay": 1.0, "zeta": 0.25, "progress": "running", "description": "both",
                             "key": "instruction", "mode": "static", "update_before_reward": True,
                             "matcher": "sbert", "encoder": "/models/minilm", "update_rule": "shorter",
                             "generator": "heuristic", "static_path": None, "llm": {"model": None}},
        "process_reward": {"enable": True, "weight": 2.0, "decay_gamma": 0.95},
        "reward": {"mode": "admire", "format_weight": 1},
        "trainer": {"total_epochs": 20},
    }))
    assert cfg == RewardConfig(threshold=0.8, milestone_weight=0.2, strategy="uniform", milestone_decay=1.0,
                               zeta=0.25, progress="running", description="both", milestone_key="instruction",
                               process_enable=True, process_weight=2.0, process_decay_gamma=0.95,
                               format_weight=1.0, matcher="sbert", encoder="/models/minilm")
    assert RewardConfig.from_mapping({}) == RewardConfig()
    assert not RewardConfig().process_enable  # the paper exactly (method.md §4)


def test_config_defaults_of_the_reward_keys():
    cfg = RewardConfig()
    assert (cfg.progress, cfg.matcher, cfg.encoder, cfg.milestone_key) == ("prefix", "grounded",
                                                                           "all-MiniLM-L6-v2", "task")
    skeleton = RewardConfig.from_mapping({"milestone_reward": {"key": "skeleton", "progress": "prefix"}})
    assert skeleton.milestone_key == "skeleton" and skeleton.slot_scheme == "positional"
    assert RewardConfig(milestone_key="task").slot_scheme == "single"
    assert RewardConfig(milestone_key="instruction").slot_scheme == "none"
    with pytest.raises(ValueError, match=r"milestone_reward.matcher must be one of grounded, sbert"):
        RewardConfig.from_mapping({"milestone_reward": {"matcher": "cosine"}})
    with pytest.raises(ValueError, match=r"milestone_reward.progress must be one of prefix, total, running"):
        RewardConfig(progress="tail")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"milestone_reward.encoder must name a sentence encoder"):
        RewardConfig.from_mapping({"milestone_reward": {"encoder": " "}})
    with pytest.raises(ValueError, match=r"milestone_reward.update_rule must be one of common, shorter"):
        RewardConfig.from_mapping({"milestone_reward": {"update_rule": "longest"}})
    with pytest.raises(ValueError, match=r"did you mean 'milestone_reward.matcher'"):
        RewardConfig.from_mapping({"milestone_reward": {"matchr": "sbert"}})
    with pytest.raises(ValueError, match=r"did you mean 'milestone_reward.encoder'"):
        RewardConfig.from_mapping({"milestone_reward": {"encodr": "x"}})


def test_config_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"milestone_reward.strategy must be one of mix, success_only"):
        RewardConfig.from_mapping({"milestone_reward": {"strategy": "both_ways"}})
    with pytest.raises(ValueError, match=r"reward.mode must be one of outcome, admire, judge"):
        RewardConfig(mode="dense")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"did you mean 'milestone_reward.threshold'"):
        RewardConfig.from_mapping({"milestone_reward": {"treshold": 0.7}})
    with pytest.raises(ValueError, match=r"milestone_reward.weight must be a number"):
        RewardConfig.from_mapping({"milestone_reward": {"weight": "high"}})
    with pytest.raises(ValueError, match=r"process_reward.enable must be true or false"):
        RewardConfig.from_mapping({"process_reward": {"enable": "yes"}})
    with pytest.raises(ValueError, match=r"milestone_reward.decay must be a finite number in \[0.0, 1.0\]"):
        RewardConfig(milestone_decay=1.5)


def test_descriptions_for_each_source():
    step = make_step(0, "clicked the 'Login' button", model="I pressed login")
    silent = make_step(0, "clicked the 'Login' button")
    assert descriptions_for(step, RewardConfig()) == ["clicked the 'Login' button"]
    assert descriptions_for(step, RewardConfig(description="model")) == ["I pressed login"]
    assert descriptions_for(silent, RewardConfig(description="model")) == ["clicked the 'Login' button"]
    assert descriptions_for(step, RewardConfig(description="both")) == ["clicked the 'Login' button",
                                                                        "I pressed login"]
    assert descriptions_for(silent, RewardConfig(description="both")) == ["clicked the 'Login' button"]


# --------------------------------------------------------------------------------------------------
# score_batch
# --------------------------------------------------------------------------------------------------

class RecordingMatcher:
    """Returns canned matches and records what it was asked, to check the batch is matched in one call."""

    def __init__(self, matches: Sequence[MatchResult]) -> None:
        self.matches = list(matches)
        self.calls: list[list[tuple]] = []

    def match_many(self, items):
        self.calls.append(list(items))
        return self.matches[: len(items)]


def test_score_batch_matches_everything_in_one_call_and_skips_env_errors():
    success = make_trajectory(2, 1.0, tid="a", descriptions=["typed \"karrie\" into the 'Username' field",
                                                             "clicked the 'Login' button"])
    failure = make_trajectory(2, 0.0, tid="b")
    crashed = make_trajectory(1, 0.0, tid="c", termination=Termination.ENV_ERROR)
    unknown_task = make_trajectory(2, 0.0, tid="d", task="miniwob/click-test")
    matcher = RecordingMatcher([make_match([0.8, 0.9], 4), make_match([None, 0.7], 4)])
    bank = {"miniwob/login-user": MILESTONES}
    result = score_batch([success, crashed, failure, unknown_task], bank, matcher, RewardConfig(), epoch=0)

    assert len(matcher.calls) == 1
    (descriptions, milestones, slots, positional), second = matcher.calls[0]
    assert descriptions == ["typed \"karrie\" into the 'Username' field", "clicked the 'Login' button"]
    assert milestones == list(MILESTONES)
    assert {"karrie", "x9Z"} <= set(slots)  # task-keyed milestones compare with slot values hidden
    assert slots == extract_slot_values(GOAL) and positional is False  # one <value> for every value
    assert second[0] == ["clicked the 'OK' button"] * 2
    assert result[1] == []  # env error: not scored
    # success, hits 0.8 and 0.9 (denoise): 1 + 0.3·0.8 = 1.24, 1 + 0.3·0.9 = 1.27
    assert [b.total for b in result[0]] == approx_list([1.24, 1.27])
    # failure has one hit (t=1, 0.7): R_mil = [1/4, 1/4 + 0.35] = [0.25, 0.6] → totals [0.075, 0.18]
    assert [b.total for b in result[2]] == approx_list([0.075, 0.18])
    assert [b.total for b in result[3]] == [0.0, 0.0]  # no milestones for its key yet: K = 0
    assert result[3][0].num_milestones == 0


def test_score_batch_with_instruction_keys_and_a_callable_source():
    cfg = RewardConfig(milestone_key="instruction", description="both")
    step_model = Step(index=0, observation=Observation(goal=GOAL), raw_output="…",
                      grounded_description="clicked the 'Login' button", model_description="I logged in")
    trajectory = make_trajectory(1, 0.0).model_copy(update={"steps": (step_model,)})
    assert milestone_key_for(trajectory, cfg) == f"miniwob/login-user::{GOAL}"
    matcher = RecordingMatcher([make_match([None], 2)])
    score_batch([trajectory], lambda t: MILESTONES[:2], matcher, cfg, epoch=0)
    (descriptions, milestones, slots, positional), = matcher.calls[0]
    assert milestones == list(MILESTONES[:2])
    assert descriptions == [["clicked the 'Login' button", "I logged in"]]
    assert slots == [] and positional is False  # instruction keys are literal: nothing to hide


def test_score_batch_with_skeleton_keys_passes_the_values_in_order_of_appearance():
    cfg = RewardConfig(milestone_key="skeleton")
    trajectory = make_trajectory(1, 0.0)
    matcher = RecordingMatcher([make_match([None], 2)])
    score_batch([trajectory], lambda t: MILESTONES[:2], matcher, cfg, epoch=0)
    (_, _, slots, positional), = matcher.calls[0]
    assert slots == positional_values(GOAL) and positional is True
    assert slots[:2] == ["karrie", "x9Z"]  # <v1> is the username, <v2> the password


def test_score_batch_outcome_and_judge_modes_need_no_matcher():
    trajectories = [make_trajectory(2, 1.0, tid="a"), make_trajectory(2, 0.0, tid="b", invalid=[1])]
    outcome = score_batch(trajectories, {}, None, RewardConfig(mode="outcome"), epoch=0)
    assert [[b.total for b in r] for r in outcome] == [[1.0, 1.0], [0.0, -0.5]]

    class HalfJudge:
        def score(self, trajectory):
            return [0.5] * len(trajectory.steps)

    judged = score_batch(trajectories, {}, None, RewardConfig(mode="judge"), epoch=0, judge=HalfJudge())
    # + 0.3·0.5 = 0.15 on every step
    assert [[b.total for b in r] for r in judged] == [approx_list([1.15, 1.15]), approx_list([0.15, -0.35])]
    with pytest.raises(ValueError, match="needs a StepJudge"):
        score_batch(trajectories, {}, None, RewardConfig(mode="judge"), epoch=0)


def test_score_batch_without_a_matcher_when_milestones_exist_is_an_error():
    with pytest.raises(ValueError, match="no matcher was given"):
        score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, None, RewardConfig(), 0)


# --------------------------------------------------------------------------------------------------
# The real matcher, end to end
# --------------------------------------------------------------------------------------------------

def test_real_minilm_matcher_rewards_and_advantages_end_to_end():
    """A login group scored from a real bank with all-MiniLM-L6-v2: the near miss beats the hopeless failure."""
    milestones = ["typed \"<value>\" into the 'Username' field", "typed \"<value>\" into the 'Password' field",
                  "clicked the 'Login' button"]
    success = make_trajectory(3, 1.0, tid="win", descriptions=[
        "typed \"karrie\" into the 'Username' field", "typed \"x9Z\" into the 'Password' field",
        "clicked the 'Login' button"])
    near_miss = make_trajectory(3, 0.0, tid="near", descriptions=[
        "typed \"karrie\" into the 'Username' field", "clicked the 'Login' button", "scrolled down"])
    hopeless = make_trajectory(3, 0.0, tid="lost", descriptions=[
        "scrolled down", "clicked the 'Cancel' link", "navigated back"])
    crashed = make_trajectory(1, 0.0, tid="crash", termination=Termination.ENV_ERROR)
    group = [success, near_miss, hopeless, crashed]

    with MilestoneBank(":memory:") as bank:
        bank.put("miniwob/login-user", milestones, Provenance(run="test", epoch=0, trajectory_id="win",
                                                              generator="heuristic", created_at=0.0))
        scored = score_batch(group, bank, Matcher(), RewardConfig(), epoch=0)

    assert [b.matched_index for b in scored[0]] == [0, 1, 2]  # all three milestones, in order
    assert all(b.similarity > 0.75 for b in scored[0])
    assert scored[1][0].matched_index == 0 and scored[1][0].hits == 1  # only the username before the miss
    assert all(b.matched_index is None for b in scored[2])
    near_mean = sum(b.total for b in scored[1]) / 3
    hopeless_mean = sum(b.total for b in scored[2]) / 3
    assert near_mean > hopeless_mean == 0.0
    # progress: prefix — the near miss's progress is paid up to its last hit (t=0), not on its wrong tail.
    assert scored[1][0].total > 0.0 and [b.total for b in scored[1][1:]] == [0.0, 0.0]

    result = grpo_step(group_samples(group, scored))
    assert result.advantages[3] is None
    assert min(result.advantages[0]) > max(result.advantages[1])
    assert result.advantages[1][0] > max(result.advantages[2])
    assert sum(result.advantages[1]) > sum(result.advantages[2])


def test_score_batch_refuses_a_matcher_built_with_another_threshold():
    matcher = RecordingMatcher([make_match([None], 4)])
    matcher.threshold = 0.6
    with pytest.raises(ValueError, match=r"differs from milestone_reward.threshold=0.75"):
        score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, matcher, RewardConfig(), 0)


def test_score_batch_refuses_a_matcher_built_with_another_mode():
    matcher = RecordingMatcher([make_match([None], 4)])
    matcher.mode = "sbert"
    with pytest.raises(ValueError, match=r"mode 'sbert' differs from milestone_reward.matcher='grounded'"):
        score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, matcher, RewardConfig(), 0)
    matched = score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, matcher,
                          RewardConfig(matcher="sbert"), 0)
    assert matched[0][0].num_milestones == 4


# --------------------------------------------------------------------------------------------------
# The contrastive fallback: prose milestones against the same action on the other fields of the screen
# --------------------------------------------------------------------------------------------------

PROSE = "typed the username"  # an LLM's milestone: it parses into no signature
USER_TYPED = "typed \"<value>\" into the 'Username' field"
PASS_TYPED = "typed \"<value>\" into the 'Password' field"


def login_screen() -> Observation:
    """Username, Password, Login, and a form container around them all, plus a hidden and a disabled field."""
    return Observation(goal=GOAL, ui_elements=(
        UIElement(hint_text="Username", class_name="input_text", is_editable=True, is_clickable=True,
                  bbox=(0, 100, 0, 20)),
        UIElement(hint_text="Password", class_name="input_password", is_editable=True, is_clickable=True,
                  bbox=(0, 100, 30, 50)),
        UIElement(text="Login", class_name="button", is_clickable=True, bbox=(0, 50, 60, 80)),
        UIElement(text="Username Password Login", class_name="form", is_clickable=True, bbox=(0, 200, 0, 100)),
        UIElement(hint_text="Hidden", class_name="input_text", is_editable=True, is_visible=False,
                  bbox=(0, 100, 90, 95)),
        UIElement(hint_text="Disabled", class_name="input_text", is_editable=False, is_enabled=False,
                  bbox=(0, 100, 96, 99)),
    ))


def login_step(index: int, action: dict) -> Step:
    screen = login_screen()
    executed = validate_action(action)
    return Step(index=index, observation=screen, raw_output="…", action=executed,
                grounded_description=describe(executed, screen))


def typed_into(field: int, text: str = "karrie", tid: str = "t") -> Trajectory:
    step = login_step(0, {"action_type": "input_text", "text": text, "index": field})
    return make_trajectory(1, 0.0, tid=tid).model_copy(update={"steps": (step,)})


class SpareAxisEncoder:
    """Exact vectors for the texts in its table, the spare axis (cosine 0 to every milestone) for the rest."""

    def __init__(self, table: Mapping[str, Sequence[float]], dim: int = 4) -> None:
        self.dim = dim
        self.table = {text: np.asarray(vector, dtype=np.float32) for text, vector in table.items()}
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        spare = np.eye(self.dim, dtype=np.float32)[-1]
        return np.stack([self.table.get(text, spare) for text in texts])


def fields_matcher(cfg: RewardConfig) -> tuple[Matcher, SpareAxisEncoder]:
    """The prose milestone is axis 0; the right field scores 0.9 against it, the wrong one 0.8 (> δ)."""
    encoder = SpareAxisEncoder({PROSE: [1, 0, 0, 0], USER_TYPED: [0.9, 0.43589, 0, 0],
                                PASS_TYPED: [0.8, 0, 0.6, 0]})
    return Matcher(encoder, threshold=cfg.threshold, mode=cfg.matcher, contrast_margin=cfg.contrast_margin), encoder


def test_counterfactuals_are_the_same_action_on_the_other_plausible_targets_nearest_first():
    typing = login_step(0, {"action_type": "input_text", "text": "x9Z", "index": 1})
    # Typing has editable rivals only: not the button or the form, not the hidden or the disabled field.
    assert counterfactual_descriptions(typing) == ["typed \"x9Z\" into the 'Username' field"]
    click = login_step(0, {"action_type": "click", "index": 2})
    # Password (30 px away) before Username (60 px); the form around the button is the same place: no rival.
    assert counterfactual_descriptions(click) == ["clicked the 'Password' field", "clicked the 'Username' field"]
    assert counterfactual_descriptions(click, limit=1) == ["clicked the 'Password' field"]
    no_index = [{"action_type": "click", "x": 10, "y": 70}, {"action_type": "scroll", "direction": "down"},
                {"action_type": "keyboard_enter"}, {"action_type": "click", "index": 17}]
    for action in no_index:
        assert counterfactual_descriptions(login_step(0, action)) == [], action
    assert counterfactual_descriptions(make_step(0)) == []  # no action (and no screen)
    bare = Step(index=0, observation=Observation(goal=GOAL), raw_output="…",
                action=validate_action({"action_type": "click", "index": 0}))
    assert counterfactual_descriptions(bare) == []


def test_score_batch_refuses_a_prose_milestone_to_the_wrong_field_when_the_margin_is_on():
    bank = {"miniwob/login-user": [PROSE]}
    wrong, right = typed_into(1, tid="wrong"), typed_into(0, tid="right")
    assert wrong.steps[0].grounded_description == "typed \"karrie\" into the 'Password' field"
    cfg = RewardConfig()
    assert cfg.contrast_margin == 0.05
    matcher, encoder = fields_matcher(cfg)
    scored = score_batch([wrong, right], bank, matcher, cfg, epoch=0)
    assert len(encoder.calls) == 1  # counterfactuals ride in the batch's one encoder call
    assert scored[0][0].matched_index is None and scored[0][0].similarity == pytest.approx(0.8, abs=1e-6)
    assert scored[0][0].total == 0.0  # no hit, no progress
    assert scored[1][0].matched_index == 0 and scored[1][0].similarity == pytest.approx(0.9, abs=1e-6)
    # The margin off: the paper's matching, and the wrong field earns the milestone.
    off = RewardConfig(contrast_margin=0.0)
    fooled = score_batch([wrong, right], bank, fields_matcher(off)[0], off, epoch=0)
    assert [r[0].matched_index for r in fooled] == [0, 0]


def test_score_batch_passes_counterfactuals_only_where_a_milestone_has_no_signature():
    trajectory = typed_into(1)
    signed = {"miniwob/login-user": [USER_TYPED]}
    prose = {"miniwob/login-user": [PROSE, USER_TYPED]}
    for cfg, bank, expected in ((RewardConfig(), prose, True), (RewardConfig(), signed, False),
                                (RewardConfig(contrast_margin=0.0), prose, False),
                                (RewardConfig(matcher="sbert"), prose, False)):
        matcher = RecordingMatcher([make_match([None], 2)])
        score_batch([trajectory], bank, matcher, cfg, epoch=0)
        (item,) = matcher.calls[0]
        assert (len(item) == 5) is expected, (cfg, bank)
        if expected:
            assert item[4] == [["typed \"karrie\" into the 'Username' field"]]
    # A signature milestone with a better-scoring wrong field still needs only its signature and δ.
    cfg = RewardConfig()
    matcher, _ = fields_matcher(cfg)
    assert score_batch([typed_into(0)], signed, matcher, cfg, epoch=0)[0][0].matched_index == 0


def test_a_step_without_a_screen_is_matched_as_before():
    bank = {"miniwob/login-user": [PROSE]}
    blind = make_trajectory(1, 0.0, descriptions=["typed \"karrie\" into the 'Password' field"])
    matcher = RecordingMatcher([make_match([None], 1)])
    score_batch([blind], bank, matcher, RewardConfig(), epoch=0)
    assert len(matcher.calls[0][0]) == 4  # no counterfactuals: the item is what it was
    for cfg in (RewardConfig(), RewardConfig(contrast_margin=0.0)):
        scored = score_batch([blind], bank, fields_matcher(cfg)[0], cfg, epoch=0)
        assert scored[0][0].matched_index == 0 and scored[0][0].similarity == pytest.approx(0.8, abs=1e-6)


def test_config_contrast_margin_key():
    assert RewardConfig().contrast_margin == 0.05
    read = RewardConfig.from_mapping({"milestone_reward": {"contrast_margin": 0.1}})
    assert read == RewardConfig(contrast_margin=0.1)
    assert RewardConfig.from_mapping({"milestone_reward": {"contrast_margin": None}}).contrast_margin == 0.0
    assert RewardConfig.from_mapping({"milestone_reward": {"contrast_margin": 0}}).contrast_margin == 0.0
    assert RewardConfig(contrast_margin=None).contrast_margin == 0.0  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"did you mean 'milestone_reward.contrast_margin'"):
        RewardConfig.from_mapping({"milestone_reward": {"contrast_margn": 0.05}})
    with pytest.raises(ValueError, match=r"milestone_reward.contrast_margin must be a finite number in \[0.0, 2.0\]"):
        RewardConfig.from_mapping({"milestone_reward": {"contrast_margin": -0.05}})
    with pytest.raises(ValueError, match=r"milestone_reward.contrast_margin must be a number"):
        RewardConfig.from_mapping({"milestone_reward": {"contrast_margin": "wide"}})


def test_config_prose_threshold_key():
    assert RewardConfig().prose_threshold == 0.3
    read = RewardConfig.from_mapping({"milestone_reward": {"prose_threshold": 0.5}})
    assert read == RewardConfig(prose_threshold=0.5)
    assert RewardConfig.from_mapping({"milestone_reward": {"prose_threshold": None}}).prose_threshold is None
    with pytest.raises(ValueError, match=r"milestone_reward.prose_threshold must be a finite number in \[-1.0, 1.0\]"):
        RewardConfig.from_mapping({"milestone_reward": {"prose_threshold": 1.5}})
    with pytest.raises(ValueError, match=r"did you mean 'milestone_reward.prose_threshold'"):
        RewardConfig.from_mapping({"milestone_reward": {"prose_treshold": 0.3}})


def test_score_batch_refuses_a_matcher_built_with_another_prose_threshold():
    matcher = RecordingMatcher([make_match([None], 4)])
    matcher.prose_threshold = None
    with pytest.raises(ValueError, match=r"prose threshold None differs from milestone_reward.prose_threshold=0.3"):
        score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, matcher, RewardConfig(), 0)


def test_score_batch_refuses_a_matcher_built_with_another_contrast_margin():
    matcher = RecordingMatcher([make_match([None], 4)])
    matcher.contrast_margin = 0.0
    with pytest.raises(ValueError, match=r"contrast margin 0.0 differs from milestone_reward.contrast_margin=0.05"):
        score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, matcher, RewardConfig(), 0)
    matched = score_batch([make_trajectory(1, 0.0)], {"miniwob/login-user": MILESTONES}, matcher,
                          RewardConfig(contrast_margin=0.0), 0)
    assert matched[0][0].num_milestones == 4
