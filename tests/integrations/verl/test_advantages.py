"""ADMIRE's estimators registered in verl give, on a verl batch, exactly what admire.rl.advantages gives on the
same steps (the CPU path), through verl's registry and verl's own ``compute_advantage``; and they are not
verl's GRPO (ddof=0 + floor, not ddof=1), as the module docstring says."""

from __future__ import annotations

import random
import zlib
from dataclasses import replace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from admire.integrations.verl.advantages import register_estimators, verl_estimator, verl_name
from admire.integrations.verl.samples import StepSample, place_step_rewards, to_data_proto
from admire.rl.advantages import AdvantageResult, GroupSample, compute_advantages, register_advantage
from tests.support.verl_registry import verl_estimators_restored

BUILTINS = ("grpo_step", "grpo_traj", "rloo_step", "dapo_step")
ATOL = 1e-6  # the estimators return float32 (verl's dtype) of admire's float64


@pytest.fixture(autouse=True)
def _verl_registry():
    """ADMIRE's estimators registered in verl (without relying on the entry point), verl's registry put back after."""
    with verl_estimators_restored():
        register_estimators()
        yield


def episodes(seed: int, *, excluded: bool = True) -> list[StepSample]:
    """Four groups of 2–4 episodes of 1–5 steps, rows shuffled (verl does not keep episodes together); with
    ``excluded`` one episode of group 0 crashed. Rewards are float32 values, so the batch carries them exactly."""
    rng = random.Random(seed)
    samples = []
    for g in range(4):
        for t in range(rng.randint(2, 4)):
            n, crashed = rng.randint(1, 5), excluded and (g, t) == (0, 1)
            success = rng.random() < 0.4
            for step in range(n):
                samples.append(StepSample(
                    prompt_ids=(1, 2, 3), response_ids=tuple(range(1, rng.randint(2, 6))), group_id=f"uid-{g}",
                    traj_id=f"g{g}t{t}" + ("s" if success else "f"), step=step, num_steps=n, excluded=crashed,
                    reward=None if crashed else float(np.float32(rng.uniform(-0.5, 1.5) + success)),
                    trajectory_json=None))
    rng.shuffle(samples)
    return samples


def outcome_of(s: StepSample) -> float:
    """O(τ) of the step's episode (``episodes`` marks a successful one in its id)."""
    return float(s.traj_id.endswith("s"))


def cpu_path(samples: list[StepSample], name: str, *, by_trajectory: bool = True, **options) -> dict:
    """(traj_id, step) -> advantage from admire.rl.advantages, groups and episodes built the CPU trainer's way
    (episodes in order of their id, steps in step order) — no verl involved."""
    out = {}
    for group in sorted({s.group_id for s in samples}):
        steps = sorted((s for s in samples if s.group_id == group), key=lambda s: (s.traj_id, s.step))
        trajectories = sorted({s.traj_id for s in steps}) if by_trajectory else [(s.traj_id, s.step) for s in steps]
        members = [[s for s in steps if (s.traj_id if by_trajectory else (s.traj_id, s.step)) == t]
                   for t in trajectories]
        group_samples = [GroupSample(rewards=() if m[0].excluded else tuple(s.reward for s in m),
                                     outcome=outcome_of(m[0]), excluded=m[0].excluded) for m in members]
        result = compute_advantages(name, group_samples, **options)
        for m, advantages in zip(members, result.advantages, strict=True):
            for i, s in enumerate(m):
                out[(s.traj_id, s.step)] = 0.0 if advantages is None else advantages[i]
    return out


def expected_tensor(samples: list[StepSample], data, by_key: dict) -> torch.Tensor:
    scalars = torch.tensor([by_key[(s.traj_id, s.step)] for s in samples], dtype=torch.float64)
    return (scalars.unsqueeze(-1) * data.batch["response_mask"]).to(torch.float32)


def kwargs_of(samples: list[StepSample], data) -> dict:
    return {"traj_index": data.non_tensor_batch["admire_traj_id"],
            "outcome": np.array([outcome_of(s) for s in samples]),
            "excluded": data.non_tensor_batch["admire_excluded"].astype(bool)}


CONFIGS = [  # verl's algorithm config in each form verl hands it over, and the admire options it means
    (None, {}),
    ({"norm_adv_by_std_in_grpo": False}, {"norm_by_std": False}),
    (OmegaConf.create({"norm_adv_by_std_in_grpo": True, "std_floor": 0.5, "failed_group_baseline": "zero"}),
     {"norm_by_std": True, "std_floor": 0.5, "failed_baseline": "zero"}),
    (AlgoConfig(norm_adv_by_std_in_grpo=False), {"norm_by_std": False}),
]


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize(("config", "options"), CONFIGS)
def test_registered_estimator_equals_the_cpu_path(name, config, options):
    samples = episodes(zlib.crc32(f"{name}{options}".encode()))
    data = to_data_proto(samples, pad_token_id=0)
    fn = get_adv_estimator_fn(verl_name(name))
    advantages, returns = fn(token_level_rewards=data.batch["token_level_rewards"],
                             response_mask=data.batch["response_mask"], config=config,
                             index=data.non_tensor_batch["uid"], **kwargs_of(samples, data))
    expected = expected_tensor(samples, data, cpu_path(samples, name, **options))
    torch.testing.assert_close(advantages, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(returns, advantages, atol=0, rtol=0)
    assert advantages.dtype == torch.float32 and advantages.shape == data.batch["responses"].shape
    crashed = torch.tensor([s.excluded for s in samples])
    assert crashed.any() and torch.count_nonzero(advantages[crashed]) == 0
    assert torch.count_nonzero(advantages[~crashed]) > 0


def test_excluded_rows_take_no_part_in_the_baseline():
    samples = episodes(7)
    data = to_data_proto(samples, pad_token_id=0)
    fn, kwargs = verl_estimator("grpo_step"), kwargs_of(samples, data)
    before, _ = fn(data.batch["token_level_rewards"], data.batch["response_mask"], None,
                   index=data.non_tensor_batch["uid"], **kwargs)
    noisy = data.batch["token_level_rewards"].clone()
    noisy[torch.tensor(kwargs["excluded"]), 0] += 7.0  # what a crashed step "scored" must not matter
    after, _ = fn(noisy, data.batch["response_mask"], None, index=data.non_tensor_batch["uid"], **kwargs)
    assert torch.equal(before, after)
    without, _ = fn(noisy, data.batch["response_mask"], None, index=data.non_tensor_batch["uid"],
                    traj_index=kwargs["traj_index"])
    assert not torch.equal(without, after)  # the flag is what keeps them out


@pytest.mark.parametrize("name", ["grpo_step", "dapo_step"])
def test_without_traj_index_step_pooling_estimators_are_exact(name):
    samples = episodes(8)
    data = to_data_proto(samples, pad_token_id=0)
    excluded = data.non_tensor_batch["admire_excluded"].astype(bool)
    advantages, _ = get_adv_estimator_fn(verl_name(name))(
        data.batch["token_level_rewards"], data.batch["response_mask"], AlgoConfig(),
        index=data.non_tensor_batch["uid"], excluded=excluded)
    expected = expected_tensor(samples, data, cpu_path(samples, name))
    torch.testing.assert_close(advantages, expected, atol=ATOL, rtol=0)


def test_without_traj_index_each_row_is_a_one_step_trajectory():
    samples = episodes(9, excluded=False)
    data = to_data_proto(samples, pad_token_id=0)
    advantages, _ = get_adv_estimator_fn("admire_grpo_traj")(
        data.batch["token_level_rewards"], data.batch["response_mask"], None, index=data.non_tensor_batch["uid"])
    one_step = expected_tensor(samples, data, cpu_path(samples, "grpo_traj", by_trajectory=False))
    by_episode = expected_tensor(samples, data, cpu_path(samples, "grpo_traj"))
    torch.testing.assert_close(advantages, one_step, atol=ATOL, rtol=0)
    assert not torch.allclose(advantages, by_episode, atol=1e-3)


def v1_compute_advantage(data, adv_estimator, config):
    """The v1 (TransferQueue) trainer's call: keys ``{uid}_{session}_{i}``, non-GRPO names go to compute_advantage."""
    keys = [f"{u}_{t}_{k}" for k, (u, t) in enumerate(zip(data.non_tensor_batch["uid"],
                                                          data.non_tensor_batch["admire_traj_id"], strict=True))]
    return compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator=adv_estimator,
                                                    config=config)


@pytest.mark.parametrize("call", [compute_advantage, v1_compute_advantage])
@pytest.mark.parametrize("config", [AlgoConfig(norm_adv_by_std_in_grpo=False), {"norm_adv_by_std_in_grpo": False}])
def test_through_verls_compute_advantage(call, config):
    """verl's own driver-side calls (legacy and v1 trainer) for a non-GRPO name: they pass only uid."""
    samples = episodes(10, excluded=False)
    data = to_data_proto(samples, pad_token_id=0)
    out = call(data, adv_estimator="admire_grpo_step", config=config)
    expected = expected_tensor(samples, data, cpu_path(samples, "grpo_step", norm_by_std=False))
    torch.testing.assert_close(out.batch["advantages"], expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.batch["returns"], expected, atol=ATOL, rtol=0)


def two_row_group() -> dict:
    data = to_data_proto([StepSample(prompt_ids=(1,), response_ids=(2, 3), group_id="u", traj_id=t, step=0,
                                     num_steps=1, reward=r) for t, r in (("a", 0.0), ("b", 1.0))], pad_token_id=0)
    return {"token_level_rewards": data.batch["token_level_rewards"], "response_mask": data.batch["response_mask"],
            "index": data.non_tensor_batch["uid"]}


def test_std_convention_is_admires_not_verls_grpo():
    batch = two_row_group()
    admire, _ = get_adv_estimator_fn("admire_grpo_step")(config=AlgoConfig(), **batch)
    verl_grpo, _ = compute_grpo_outcome_advantage(norm_adv_by_std_in_grpo=True, **batch)
    # population std 0.5 -> ±1 here; unbiased std 0.7071 -> ±0.7071 in verl's GRPO
    torch.testing.assert_close(admire[:, 0], torch.tensor([-0.5, 0.5]) / (0.5 + 1e-6))
    torch.testing.assert_close(verl_grpo[:, 0], torch.tensor([-0.5, 0.5]) / (2 ** -0.5 + 1e-6))
    assert not torch.allclose(admire, verl_grpo, atol=0.1)


def test_one_step_groups_differ_from_verls_grpo_by_the_ddof_factor_only():
    rng = np.random.default_rng(11)
    n, groups = 5, 6
    rewards = torch.tensor(rng.normal(size=groups * n), dtype=torch.float32)
    mask = torch.ones(groups * n, 3, dtype=torch.long)
    batch = {"token_level_rewards": place_step_rewards(mask, rewards), "response_mask": mask,
             "index": np.array([f"g{i // n}" for i in range(groups * n)], dtype=object)}
    admire, _ = get_adv_estimator_fn("admire_grpo_step")(config=None, **batch)
    verl_grpo, _ = compute_grpo_outcome_advantage(norm_adv_by_std_in_grpo=True, **batch)
    torch.testing.assert_close(verl_grpo, admire * ((n - 1) / n) ** 0.5, atol=1e-5, rtol=1e-5)


def test_failed_group_baseline_zero_needs_the_outcome():
    with pytest.raises(ValueError, match="needs the outcome") as error:
        get_adv_estimator_fn("admire_grpo_step")(config={"failed_group_baseline": "zero"}, **two_row_group())
    assert "\n" not in str(error.value)


def test_a_bad_option_or_batch_is_a_one_line_error():
    fn = get_adv_estimator_fn("admire_grpo_step")
    batch = two_row_group()
    with pytest.raises(ValueError, match="std_floor"):
        fn(config={"std_floor": -1.0}, **batch)
    with pytest.raises(ValueError, match="put 'uid'"):
        fn(batch["token_level_rewards"], batch["response_mask"], None)
    with pytest.raises(ValueError, match="a trajectory belongs to one group"):
        fn(config=None, traj_index=np.array(["a", "a"], dtype=object),
           **{**batch, "index": np.array(["u", "v"], dtype=object)})
    with pytest.raises(ValueError, match="one value per row"):
        fn(config=None, excluded=np.array([False]), **batch)
    with pytest.raises(ValueError, match="excluded flags of trajectory 'a' differ"):
        fn(config=None, traj_index=np.array(["a", "a"], dtype=object), excluded=np.array([False, True]), **batch)


def test_an_estimator_registered_later_is_registered_in_verl_with_steps_in_row_order():
    @register_advantage("position")
    def position(samples):
        """Advantage = the step's position in its trajectory, so the row order shows."""
        return AdvantageResult(tuple(None if s.excluded else tuple(map(float, range(len(s.rewards))))
                                     for s in samples))

    assert "admire_position" in register_estimators()
    samples = episodes(12)
    data = to_data_proto(samples, pad_token_id=0)
    kwargs = kwargs_of(samples, data)
    advantages, _ = get_adv_estimator_fn("admire_position")(
        data.batch["token_level_rewards"], data.batch["response_mask"], None, index=data.non_tensor_batch["uid"],
        **kwargs)
    seen: dict[str, int] = {}
    for i, s in enumerate(samples):
        if s.excluded:
            assert torch.count_nonzero(advantages[i]) == 0
            continue
        k = seen[s.traj_id] = seen.get(s.traj_id, -1) + 1  # the k-th row of its trajectory
        assert advantages[i, 0].item() == k


def test_registration_is_idempotent_and_keeps_one_function_per_name():
    first = {name: get_adv_estimator_fn(verl_name(name)) for name in BUILTINS}
    assert register_estimators() == register_estimators()
    assert all(get_adv_estimator_fn(verl_name(name)) is first[name] is verl_estimator(name) for name in BUILTINS)


def test_an_estimator_returning_the_wrong_number_of_advantages_is_refused():
    @register_advantage("short")
    def short(samples):
        return AdvantageResult(tuple(() for _ in samples))

    register_estimators(["short"])
    with pytest.raises(ValueError, match="one per step"):
        get_adv_estimator_fn("admire_short")(config=None, **two_row_group())


def test_rows_of_an_episode_must_agree_on_its_outcome():
    samples = [replace(s, reward=1.0) for s in episodes(13, excluded=False)]
    data = to_data_proto(samples, pad_token_id=0)
    outcome = np.zeros(len(samples))
    longer = next(s.traj_id for s in samples if s.num_steps > 1)
    outcome[np.flatnonzero(data.non_tensor_batch["admire_traj_id"] == longer)[0]] = 1.0
    with pytest.raises(ValueError, match="outcomes of trajectory"):
        verl_estimator("grpo_step")(data.batch["token_level_rewards"], data.batch["response_mask"], None,
                                    index=data.non_tensor_batch["uid"],
                                    traj_index=data.non_tensor_batch["admire_traj_id"], outcome=outcome)
