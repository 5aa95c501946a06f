"""Advantage estimators of method.md §5 against hand-computed groups, plus properties of the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from admire.rewards import RewardConfig, milestone_lambda
from admire.rl import advantages as adv
from admire.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    EPS,
    SHIPPED_STD_FLOOR,
    GroupSample,
    compute_advantages,
    dapo_step,
    get_advantage,
    group_samples,
    grpo_step,
    grpo_traj,
    list_advantages,
    register_advantage,
    rloo_step,
)
from admire.types import Observation, RewardBreakdown, Step, Task, Termination, Trajectory


def sample(*rewards: float, outcome: float = 0.0) -> GroupSample:
    return GroupSample(rewards=tuple(rewards), outcome=outcome)


ENV_ERROR = GroupSample(rewards=(), excluded=True)


# --------------------------------------------------------------------------------------------------
# grpo_step (Eq. 13)
# --------------------------------------------------------------------------------------------------

def test_grpo_step_normalises_over_all_pooled_steps():
    # Pooled steps [1, 3, 2]: mean 2; population std sqrt(((1-2)² + (3-2)² + 0²)/3) = sqrt(2/3) = 0.8164966
    # A = (R - 2)/(0.8164966 + 1e-6): 1 → -1.2247434, 3 → +1.2247434, 2 → 0.
    result = grpo_step([sample(1.0, 3.0, outcome=1.0), sample(2.0)])
    (a1, a3), (a2,) = result.advantages
    assert a1 == pytest.approx(-1.0 / (math.sqrt(2 / 3) + 1e-6))
    assert a1 == pytest.approx(-1.2247434, abs=1e-6)
    assert a3 == pytest.approx(1.2247434, abs=1e-6)
    assert a2 == 0.0
    assert result.keep


def test_grpo_step_uses_population_std_not_sample_std():
    # Two steps [0, 1]: population std 0.5 (sample std would be 0.7071) → A = ±0.5/(0.5 + 1e-6) ≈ ±0.999998.
    (a0, a1), = grpo_step([sample(0.0, 1.0)]).advantages
    assert a0 == pytest.approx(-0.5 / 0.500001)
    assert a1 == pytest.approx(0.999998, abs=1e-6)


def test_grpo_step_pools_steps_so_longer_trajectories_weigh_more():
    # Steps A=[1, 1, 1], B=[0]: mean 0.75 (not 0.5, the mean of trajectory means); var = (3·0.0625 + 0.5625)/4
    # = 0.1875, std 0.4330127; A's steps (1 - 0.75)/0.4330137 = 0.5773490, B's (0 - 0.75)/0.4330137 = -1.732047.
    result = grpo_step([sample(1.0, 1.0, 1.0), sample(0.0)])
    assert result.advantages[0] == pytest.approx((0.577349,) * 3, abs=1e-6)
    assert result.advantages[1] == pytest.approx((-1.732047,), abs=1e-6)


def test_grpo_step_all_equal_rewards_give_exactly_zero():
    # 0.1 repeated: the float mean is not exactly 0.1, so without the tie rule A would be rounding/1e-6.
    result = grpo_step([sample(0.1, 0.1, 0.1), sample(0.1), sample(0.1, 0.1)])
    assert result.advantages == ((0.0, 0.0, 0.0), (0.0,), (0.0, 0.0))
    assert result.keep  # plain GRPO keeps the group; only dapo drops ties


def test_grpo_step_excludes_env_errors_from_baseline_and_output():
    with_error = grpo_step([sample(1.0, 3.0), ENV_ERROR, sample(2.0)])
    without = grpo_step([sample(1.0, 3.0), sample(2.0)])
    assert with_error.advantages == (without.advantages[0], None, without.advantages[1])


def test_excluded_sample_rewards_never_move_the_baseline():
    poisoned = GroupSample(rewards=(100.0, -100.0), excluded=True)
    result = grpo_step([sample(1.0, 3.0), poisoned, sample(2.0)])
    assert result.advantages[1] is None
    assert result.advantages[2] == (0.0,)  # still the pooled mean of [1, 3, 2]


def test_all_excluded_group_is_not_kept_by_any_estimator():
    for name in list_advantages():
        result = compute_advantages(name, [ENV_ERROR, ENV_ERROR])
        assert result.advantages == (None, None)
        assert not result.keep, name


def test_zero_step_trajectory_gets_empty_advantages():
    result = grpo_step([sample(), sample(1.0, 0.0)])
    assert result.advantages[0] == ()
    assert result.advantages[1] == pytest.approx((0.999998, -0.999998), abs=1e-6)


# --------------------------------------------------------------------------------------------------
# grpo_traj (the outcome baseline)
# --------------------------------------------------------------------------------------------------

def test_grpo_traj_normalises_trajectory_returns_and_broadcasts():
    # Returns = mean step reward: A=[1,1,1] → 1; B=[0, -0.5] (a failure with one unparseable step,
    # η·(-1) = -0.5) → -0.25; C=[0] → 0. Mean 0.25; deviations 0.75, -0.5, -0.25;
    # var = (0.5625 + 0.25 + 0.0625)/3 = 0.2916667, std 0.5400617.
    # A: 0.75/0.5400627 = 1.388728; B: -0.5/0.5400627 = -0.925819; C: -0.25/0.5400627 = -0.462909.
    result = grpo_traj([sample(1.0, 1.0, 1.0, outcome=1.0), sample(0.0, -0.5), sample(0.0)])
    assert result.advantages[0] == pytest.approx((1.388728,) * 3, abs=1e-6)
    assert result.advantages[1] == pytest.approx((-0.925819,) * 2, abs=1e-6)
    assert result.advantages[2] == pytest.approx((-0.462909,), abs=1e-6)


def test_grpo_traj_ignores_step_count_unlike_grpo_step():
    # Returns A=1 (3 steps), B=0 (1 step): mean 0.5, std 0.5 → ±0.999998 regardless of lengths.
    result = grpo_traj([sample(1.0, 1.0, 1.0), sample(0.0)])
    assert result.advantages[0] == pytest.approx((0.999998,) * 3, abs=1e-6)
    assert result.advantages[1] == pytest.approx((-0.999998,), abs=1e-6)


def test_grpo_traj_all_equal_and_exclusion():
    assert grpo_traj([sample(1.0, 1.0), sample(1.0)]).advantages == ((0.0, 0.0), (0.0,))
    result = grpo_traj([sample(1.0), ENV_ERROR, sample(0.0)])
    assert result.advantages[1] is None
    assert result.advantages[0] == pytest.approx((0.999998,), abs=1e-6)


def test_grpo_traj_zero_step_trajectory_has_no_return_and_no_say_in_the_baseline():
    # Returns: A has no steps (left out), B = 0, C = 1 → mean 0.5, std 0.5 → B -0.999998, C +0.999998.
    result = grpo_traj([sample(outcome=1.0), sample(0.0), sample(1.0)])
    assert result.advantages[0] == ()
    assert result.advantages[1] == pytest.approx((-0.999998,), abs=1e-6)
    assert result.advantages[2] == pytest.approx((0.999998,), abs=1e-6)


# --------------------------------------------------------------------------------------------------
# rloo_step
# --------------------------------------------------------------------------------------------------

def test_rloo_step_uses_the_other_trajectories_steps_as_baseline():
    # A=[1, 3], B=[2], C=[0, 6].
    # A: others' steps [2, 0, 6] mean 8/3 → [1 - 8/3, 3 - 8/3] = [-1.6666667, 0.3333333]
    # B: others' steps [1, 3, 0, 6] mean 2.5 → [-0.5]
    # C: others' steps [1, 3, 2] mean 2 → [-2, 4]   (no std division)
    result = rloo_step([sample(1.0, 3.0), sample(2.0), sample(0.0, 6.0)])
    assert result.advantages[0] == pytest.approx((-5 / 3, 1 / 3))
    assert result.advantages[1] == pytest.approx((-0.5,))
    assert result.advantages[2] == pytest.approx((-2.0, 4.0))
    assert result.keep


def test_rloo_step_without_other_trajectories_has_no_baseline():
    assert rloo_step([sample(1.0, 0.0)]).advantages == ((0.0, 0.0),)
    assert rloo_step([sample(1.0, 0.0), ENV_ERROR]).advantages == ((0.0, 0.0), None)


def test_rloo_step_all_equal_gives_zero():
    assert rloo_step([sample(0.3, 0.3), sample(0.3)]).advantages == ((0.0, 0.0), (0.0,))


# --------------------------------------------------------------------------------------------------
# dapo_step
# --------------------------------------------------------------------------------------------------

def test_dapo_step_is_grpo_step_plus_the_keep_mark():
    group = [sample(1.0, 3.0), sample(2.0), ENV_ERROR]
    result = dapo_step(group)
    assert result.advantages == grpo_step(group).advantages
    assert result.keep
    assert set(vars(result)) == {"advantages", "keep", "info"}  # numbers only: loss settings are config keys


def test_dapo_step_drops_groups_whose_rewards_all_tie():
    result = dapo_step([sample(0.0, 0.0), sample(0.0), ENV_ERROR])
    assert not result.keep
    assert result.advantages == ((0.0, 0.0), (0.0,), None)


# --------------------------------------------------------------------------------------------------
# Normalisation options (docs/decisions.md#d4)
# --------------------------------------------------------------------------------------------------

def _all_fail_group(lam: float) -> list[GroupSample]:
    """Four failures of 5 steps at weight λ: one hit its first milestone of K = 3 at step 0 with s = 0.9,
    so under progress prefix R_mil = [1/3 + 0.5·0.9, 0, 0, 0, 0] = [0.78333, 0, …]; the others hit
    nothing. Every output parsed and the outcome is 0, so R_total = λ·R_mil."""
    hit = 1 / 3 + 0.5 * 0.9
    return [sample(lam * hit, 0.0, 0.0, 0.0, 0.0)] + [sample(0.0, 0.0, 0.0, 0.0, 0.0) for _ in range(3)]


def test_without_a_floor_the_z_score_cancels_lambda_in_an_all_fail_group():
    # λ(59) = 0.3·0.9^59 ≈ 0.000599. Pooled: one value x among 20, others 0. mean x/20, std
    # x·√(1/20·19/20) = 0.21794·x, so A(hit) = 0.95/0.21794 = 4.3589 and A(others) = −0.05/0.21794
    # = −0.22942 — whatever x is: λ has no effect (the paper's reading, std_floor 0). At epoch 59 the ε of
    # 1e-6 beside a std of 0.0001 takes 1% off: 4.317.
    lam = milestone_lambda(59, RewardConfig())
    assert lam == pytest.approx(0.000599, rel=1e-3)
    late = grpo_step(_all_fail_group(lam))
    early = grpo_step(_all_fail_group(milestone_lambda(0, RewardConfig())))
    assert late.advantages[0][0] == pytest.approx(4.3589, rel=2e-2)  # type: ignore[index]
    assert late.advantages[1] == pytest.approx((-0.22942,) * 5, abs=1e-2)
    assert max(abs(a) for steps in late.advantages for a in steps) > 3  # type: ignore[union-attr]
    assert late.advantages[0][0] == pytest.approx(early.advantages[0][0], rel=2e-2)  # type: ignore[index]


def test_the_shipped_std_floor_lets_lambda_shrink_an_all_fail_group():
    # std_floor 0.1: the group's std 0.21794·x is below it for x = λ·0.78333 ≤ 0.235, so A = (R − mean)/0.1.
    # Epoch 59: x = 0.000599·0.78333 = 0.000469 → A(hit) = 0.95·0.000469/0.1 = 0.0045; others −0.00023.
    # Epoch 0: x = 0.235 → A(hit) = 0.95·0.235/0.1 = 2.23. The ratio of the two is λ(59)/λ(0) = 0.9^59.
    assert SHIPPED_STD_FLOOR == 0.1
    lam = milestone_lambda(59, RewardConfig())
    late = compute_advantages("grpo_step", _all_fail_group(lam), norm_by_std=True, std_floor=SHIPPED_STD_FLOOR)
    early = compute_advantages("grpo_step", _all_fail_group(0.3), norm_by_std=True, std_floor=SHIPPED_STD_FLOOR)
    assert late.advantages[0][0] == pytest.approx(0.95 * lam * 0.783333 / (0.1 + EPS), rel=1e-6)  # type: ignore[index]
    assert max(abs(a) for steps in late.advantages for a in steps) < 0.01  # type: ignore[union-attr]
    assert early.advantages[0][0] == pytest.approx(2.2325, abs=1e-3)  # type: ignore[index]
    assert late.advantages[0][0] / early.advantages[0][0] == pytest.approx(0.9**59, rel=1e-6)  # type: ignore[index]
    assert late.info["std_floored"] == 1.0 and late.info["adv_scale"] == pytest.approx(0.1 + EPS)


def test_the_std_floor_leaves_groups_whose_outcomes_differ_as_in_the_paper():
    # One 2-step success among seven 20-step failures: p = 2/142, pooled std ≈ 0.118 > 0.1.
    group = [sample(1.0, 1.0, outcome=1.0)] + [sample(*([0.0] * 20)) for _ in range(7)]
    paper = grpo_step(group)
    floored = grpo_step(group, std_floor=SHIPPED_STD_FLOOR)
    assert paper.info["reward_std"] > SHIPPED_STD_FLOOR
    assert floored.advantages == paper.advantages
    assert floored.info["std_floored"] == 0.0


def test_without_std_normalisation_advantages_are_centred_rewards():
    # Pooled [1, 3, 2], mean 2 → A = R − 2.
    result = compute_advantages("grpo_step", [sample(1.0, 3.0), sample(2.0)], norm_by_std=False)
    assert result.advantages == ((-1.0, 1.0), (0.0,))
    assert result.info["adv_scale"] == 1.0
    # grpo_traj: returns [2, 2.5]... of trajectories [1, 3] → 2 and [3] → 3: mean 2.5 → ∓0.5.
    traj = compute_advantages("grpo_traj", [sample(1.0, 3.0), sample(3.0)], norm_by_std=False)
    assert traj.advantages == ((-0.5, -0.5), (0.5,))
    assert grpo_step([sample(0.1, 0.1), sample(0.1)], norm_by_std=False).advantages == ((0.0, 0.0), (0.0,))


def test_grpo_traj_and_dapo_step_honour_the_floor():
    tiny = [sample(0.001), sample(0.0)]  # returns 0.001 and 0: std 0.0005
    assert grpo_traj(tiny).advantages[0] == pytest.approx((0.0005 / 0.000501,))  # the paper: ±1 whatever the scale
    assert grpo_traj(tiny, std_floor=0.1).advantages[0] == pytest.approx((0.0005 / 0.100001,))
    dapo = dapo_step(tiny, std_floor=0.1)
    assert dapo.advantages == grpo_step(tiny, std_floor=0.1).advantages
    assert dapo.keep
    assert not dapo_step([sample(0.2), sample(0.2)], std_floor=0.1).keep  # exact ties are still dropped


def test_a_failed_group_centred_on_its_mean_pushes_down_every_step_that_hit_nothing():
    # The paper's reading: in a group with no success, the Submit pressed too early (0) is pushed down.
    group = [sample(0.3, 0.0, 0.0), sample(0.0, 0.0)]  # hit, wander, early submit | two steps with no hit
    result = grpo_step(group)
    assert all(a < 0 for a in result.advantages[0][1:]) and all(a < 0 for a in result.advantages[1])


def test_a_zero_baseline_in_a_failed_group_pushes_up_the_hits_and_leaves_the_rest_at_zero():
    group = [sample(0.3, 0.0, 0.0), sample(0.0, 0.0)]
    result = grpo_step(group, failed_baseline="zero", std_floor=0.1)
    scale = max(np.std([0.3, 0, 0, 0, 0]), 0.1) + EPS
    assert result.advantages == (pytest.approx((0.3 / scale, 0.0, 0.0)), (0.0, 0.0))
    # a format penalty in a failed group is still pushed down
    assert grpo_step([sample(-0.5, 0.0), sample(0.0)], failed_baseline="zero").advantages[0][0] < 0


def test_a_zero_baseline_leaves_groups_with_a_success_and_ties_as_in_the_paper():
    mixed = [sample(1.3, 1.0, outcome=1.0), sample(0.3, 0.0)]
    assert grpo_step(mixed, failed_baseline="zero").advantages == grpo_step(mixed).advantages
    assert grpo_traj(mixed, failed_baseline="zero").advantages == grpo_traj(mixed).advantages
    tie = [sample(0.0, 0.0), sample(0.0)]
    assert grpo_step(tie, failed_baseline="zero").advantages == ((0.0, 0.0), (0.0,))
    # an env error's outcome does not count: the kept trajectories all failed
    failed = [sample(0.3, 0.0), GroupSample(rewards=(), outcome=1.0, excluded=True)]
    assert grpo_step(failed, failed_baseline="zero").advantages[0][1] == 0.0


def test_grpo_traj_and_dapo_step_take_the_failed_baseline_too():
    group = [sample(0.3, 0.0), sample(0.0, 0.0)]
    assert grpo_traj(group, failed_baseline="zero").advantages[1] == (0.0, 0.0)
    assert dapo_step(group, failed_baseline="zero").advantages == grpo_step(group, failed_baseline="zero").advantages
    with pytest.raises(ValueError, match=r"\(algorithm.failed_group_baseline\) must be one of mean, zero"):
        compute_advantages("grpo_step", group, failed_baseline="min")


def test_rloo_step_accepts_the_options_and_is_unchanged_by_them():
    group = [sample(1.0, 3.0), sample(2.0), sample(0.0, 6.0)]
    assert rloo_step(group, norm_by_std=False, std_floor=0.5).advantages == rloo_step(group).advantages


def test_compute_advantages_checks_options_and_passes_only_what_an_estimator_declares():
    with pytest.raises(ValueError,
                       match=r"unknown advantage option\(s\) std_flor; known: norm_by_std, std_floor, failed_baseline"):
        compute_advantages("grpo_step", [sample(1.0)], std_flor=0.1)
    with pytest.raises(ValueError, match=r"std_floor \(algorithm.std_floor\) must be a finite number >= 0"):
        compute_advantages("grpo_step", [sample(1.0)], std_floor=-0.1)
    with pytest.raises(ValueError, match=r"norm_by_std \(algorithm.norm_adv_by_std_in_grpo\) must be true or false"):
        compute_advantages("grpo_step", [sample(1.0)], norm_by_std="yes")

    seen: list[dict] = []

    @register_advantage("test_plain")
    def plain(samples):
        return adv.AdvantageResult(tuple(None if s.excluded else (0.0,) * len(s.rewards) for s in samples))

    @register_advantage("test_any")
    def any_options(samples, **options):
        seen.append(options)
        return plain(samples)

    try:
        assert compute_advantages("test_plain", [sample(1.0)], norm_by_std=False, std_floor=0.1).advantages == ((0.0,),)
        compute_advantages("test_any", [sample(1.0)], norm_by_std=False, std_floor=0.1)
        assert seen == [{"norm_by_std": False, "std_floor": 0.1}]
    finally:
        ADVANTAGE_ESTIMATORS.pop("test_plain", None)
        ADVANTAGE_ESTIMATORS.pop("test_any", None)


# --------------------------------------------------------------------------------------------------
# Registry and inputs
# --------------------------------------------------------------------------------------------------

def test_registry_lists_the_four_estimators_of_the_method():
    assert {"grpo_step", "grpo_traj", "rloo_step", "dapo_step"} <= set(list_advantages())
    assert get_advantage("rloo_step") is rloo_step


def test_unknown_estimator_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'gae'.*dapo_step.*grpo_step"):
        get_advantage("gae")


def test_register_a_custom_estimator_and_refuse_a_name_clash():
    @register_advantage("outcome_sign")
    def outcome_sign(samples):
        return adv.AdvantageResult(tuple(None if s.excluded else (s.outcome - 0.5,) * len(s.rewards)
                                         for s in samples))

    try:
        assert compute_advantages("outcome_sign", [sample(0.0, outcome=1.0)]).advantages == ((0.5,),)
        with pytest.raises(ValueError, match="already registered"):
            register_advantage("grpo_step")(outcome_sign)
    finally:
        ADVANTAGE_ESTIMATORS.pop("outcome_sign", None)


def test_group_samples_from_trajectories_and_breakdowns():
    def trajectory(i: int, steps: int, termination: Termination, outcome: float = 0.0) -> Trajectory:
        obs = Observation(goal="Click OK")
        return Trajectory(id=f"t{i}", task=Task(name="miniwob/click-test"), goal="Click OK",
                          steps=tuple(Step(index=t, observation=obs, raw_output="") for t in range(steps)),
                          outcome=outcome, termination=termination)

    trajectories = [trajectory(0, 2, Termination.SUCCESS, 1.0), trajectory(1, 1, Termination.ENV_ERROR),
                    trajectory(2, 1, Termination.MAX_STEPS)]
    breakdowns = [[RewardBreakdown(total=1.2), RewardBreakdown(total=1.0)], [], [RewardBreakdown(total=-0.5)]]
    samples = group_samples(trajectories, breakdowns)
    assert samples == [GroupSample((1.2, 1.0), 1.0), GroupSample((), 0.0, excluded=True),
                       GroupSample((-0.5,), 0.0)]
    with pytest.raises(ValueError, match="has 2 steps but 1 reward breakdowns"):
        group_samples(trajectories[:1], [breakdowns[0][:1]])


def test_non_finite_rewards_are_rejected():
    with pytest.raises(ValueError, match="finite"):
        GroupSample(rewards=(0.0, float("nan")))


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------

# Quarters are exact in binary, so adding an integer keeps ties exact and sums exact.
quarters = st.integers(-400, 400).map(lambda n: n / 4)
groups = st.lists(st.lists(quarters, min_size=0, max_size=8), min_size=1, max_size=6)


def _samples(group: list[list[float]]) -> list[GroupSample]:
    return [GroupSample(tuple(rewards)) for rewards in group]


@given(groups)
def test_grpo_step_advantages_have_zero_mean_over_pooled_steps(group):
    result = grpo_step(_samples(group))
    pooled = [a for steps in result.advantages for a in steps]
    if pooled:
        assert abs(np.mean(pooled)) < 1e-9


@given(groups, st.integers(-50, 50), st.sampled_from(["grpo_step", "grpo_traj", "rloo_step", "dapo_step"]),
       st.sampled_from([{}, {"std_floor": SHIPPED_STD_FLOOR}, {"norm_by_std": False}]))
def test_advantages_are_invariant_to_a_constant_reward_shift(group, shift, name, options):
    before = compute_advantages(name, _samples(group), **options)
    after = compute_advantages(name, _samples([[r + shift for r in rewards] for rewards in group]), **options)
    assert after.keep == before.keep
    for a, b in zip(after.advantages, before.advantages, strict=True):
        assert a == pytest.approx(b, abs=1e-9)


@given(groups, st.floats(0.0, 2.0))
def test_grpo_step_divides_by_the_larger_of_std_and_floor(group, floor):
    result = grpo_step(_samples(group), std_floor=floor)
    pooled = np.array([r for rewards in group for r in rewards])
    if pooled.size == 0 or pooled.max() == pooled.min():
        return
    expected = (pooled - pooled.mean()) / (max(pooled.std(), floor) + EPS)
    assert [a for steps in result.advantages for a in steps] == pytest.approx(expected.tolist(), abs=1e-9)


@given(groups)
def test_rloo_step_advantages_sum_to_zero_over_a_group_of_equal_length_trajectories(group):
    # n trajectories of length L, S_i = Σ_t R_it, S = Σ_i S_i. Trajectory i sums to
    # S_i − L·(S − S_i)/((n−1)·L) = S_i − (S − S_i)/(n−1); over all i: S − (n·S − S)/(n−1) = 0.
    length = min((len(g) for g in group), default=0)
    equal = [rewards[:length] for rewards in group]
    if length == 0 or len(equal) < 2:
        return
    result = rloo_step(_samples(equal))
    assert abs(sum(a for steps in result.advantages for a in steps)) < 1e-9
