"""Stepwise samples in verl's DataProto: the layout verl reads, an exact round trip through verl's own batch
operations, rewards on the last response token, and one-line errors for batches that cannot be right."""

from __future__ import annotations

import pickle
import random
from dataclasses import replace

import numpy as np
import pytest
import torch
from verl import DataProto

from admire.integrations.verl.samples import (
    NON_TENSOR_KEYS,
    StepSample,
    from_data_proto,
    place_step_rewards,
    step_rewards,
    to_data_proto,
)
from admire.types import Observation, Step, Task, Trajectory

PAD = 0


def episode_json(traj_id: str, num_steps: int, outcome: float) -> str:
    steps = tuple(Step(index=i, observation=Observation(goal="click ok", step=i), raw_output=f"out {i}")
                  for i in range(num_steps))
    return Trajectory(id=traj_id, task=Task(name="miniwob/click-button"), goal="click ok", steps=steps,
                      outcome=outcome, termination="success" if outcome else "max_steps").model_dump_json()


def f32(x: float) -> float:
    """What a float32 tensor gives back."""
    return float(np.float32(x))


def random_batch(seed: int, *, rewards: bool = True, logprobs: bool = False) -> list[StepSample]:
    """Three groups of two or three episodes of 1–4 steps, prompts/responses of different lengths; one episode
    of group 1 crashed (excluded)."""
    rng = random.Random(seed)
    samples = []
    for g in range(3):
        for t in range(rng.choice([2, 3])):
            traj, n = f"g{g}-t{t}", rng.randint(1, 4)
            excluded = (g, t) == (1, 0)
            for step in range(n):
                response = tuple(rng.randint(1, 99) for _ in range(rng.randint(1, 6)))
                samples.append(StepSample(
                    prompt_ids=tuple(rng.randint(1, 99) for _ in range(rng.randint(1, 9))),
                    response_ids=response, group_id=f"uid-{g}", traj_id=traj, step=step, num_steps=n,
                    reward=None if excluded or not rewards else f32(rng.uniform(-1, 2)), excluded=excluded,
                    trajectory_json=episode_json(traj, n, float(t == 0)) if step == n - 1 else None,
                    response_logprobs=tuple(f32(-rng.random()) for _ in response) if logprobs else None))
    return samples


def test_layout_is_verls_left_padded_prompts_and_right_padded_responses():
    samples = [StepSample(prompt_ids=(5, 6), response_ids=(7,), group_id="u", traj_id="a", step=0, num_steps=2,
                          reward=0.5),
               StepSample(prompt_ids=(8,), response_ids=(9, 10, 11), group_id="u", traj_id="a", step=1,
                          num_steps=2, reward=-1.0, trajectory_json="{}")]
    data = to_data_proto(samples, pad_token_id=PAD)
    b = data.batch
    assert b["prompts"].tolist() == [[5, 6], [PAD, 8]]
    assert b["responses"].tolist() == [[7, PAD, PAD], [9, 10, 11]]
    assert b["response_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]
    assert b["input_ids"].tolist() == [[5, 6, 7, PAD, PAD], [PAD, 8, 9, 10, 11]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 2, 2], [0, 0, 1, 2, 3]]
    assert b["token_level_rewards"].tolist() == [[0.5, 0, 0], [0, 0, -1.0]]
    assert b["token_level_rewards"].dtype == torch.float32
    nt = data.non_tensor_batch
    assert set(nt) == set(NON_TENSOR_KEYS)
    assert all(v.dtype == object and v.shape == (2,) for v in nt.values())
    assert nt["uid"].tolist() == ["u", "u"] and nt["admire_traj_id"].tolist() == ["a", "a"]
    assert nt["admire_step"].tolist() == [0, 1] and nt["admire_num_steps"].tolist() == [2, 2]
    assert nt["admire_excluded"].tolist() == [False, False] and nt["admire_trajectory"].tolist() == [None, "{}"]


def test_round_trip_is_exact():
    samples = random_batch(0, logprobs=True)
    back = from_data_proto(to_data_proto(samples, pad_token_id=PAD))
    assert back == samples
    last = next(s for s in back if s.trajectory_json is not None)
    assert Trajectory.model_validate_json(last.trajectory_json).id == last.traj_id


def test_round_trip_without_rewards_or_logprobs_has_neither():
    samples = random_batch(1, rewards=False)
    data = to_data_proto(samples, pad_token_id=PAD)
    assert "token_level_rewards" not in data.batch and "rollout_log_probs" not in data.batch
    assert from_data_proto(data) == samples


def test_fixed_lengths_pad_to_verls_prompt_and_response_length():
    samples = random_batch(2)
    data = to_data_proto(samples, pad_token_id=PAD, prompt_length=16, response_length=8)
    assert data.batch["prompts"].shape == (len(samples), 16) and data.batch["responses"].shape == (len(samples), 8)
    assert from_data_proto(data) == samples
    with pytest.raises(ValueError, match="response_length=3"):
        to_data_proto(samples, pad_token_id=PAD, response_length=3)


def test_round_trip_survives_verls_concat_select_and_pickle():
    a, b = random_batch(3, logprobs=True), random_batch(4, logprobs=True)
    b = [replace(s, traj_id="b-" + s.traj_id, group_id="b-" + s.group_id) for s in b]
    # to_data_proto pads each batch to its own longest step: give both the same lengths, as verl's rollout does
    da, db = (to_data_proto(x, pad_token_id=PAD, prompt_length=10, response_length=7) for x in (a, b))
    joined = DataProto.concat([da, db])
    assert from_data_proto(joined) == a + b
    picked = [5, 0, len(a) + 2, 3]
    assert from_data_proto(joined.select_idxs(picked)) == [(a + b)[i] for i in picked]
    assert from_data_proto(pickle.loads(pickle.dumps(joined))) == a + b
    assert from_data_proto(joined[2:6]) == (a + b)[2:6]


def test_rewards_sit_on_the_last_response_token():
    samples = random_batch(5)
    data = to_data_proto(samples, pad_token_id=PAD)
    rewards = data.batch["token_level_rewards"]
    for i, s in enumerate(samples):
        last = len(s.response_ids) - 1
        expected = 0.0 if s.excluded else s.reward
        assert rewards[i, last].item() == expected
        assert torch.count_nonzero(rewards[i, :last]) == 0 and torch.count_nonzero(rewards[i, last + 1:]) == 0
    assert step_rewards(data).tolist() == [0.0 if s.excluded else s.reward for s in samples]


def test_excluded_steps_have_no_trainable_token():
    samples = random_batch(7)
    data = to_data_proto(samples, pad_token_id=PAD)
    mask = data.batch["response_mask"]
    for i, s in enumerate(samples):
        assert mask[i].sum().item() == (0 if s.excluded else len(s.response_ids))
    assert any(s.excluded for s in samples)
    assert from_data_proto(data) == samples


def test_place_step_rewards_uses_the_last_unmasked_token():
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    placed = place_step_rewards(mask, [2.0, -0.5, 1.25])
    assert placed.tolist() == [[0, 0, 0, 2.0, 0], [-0.5, 0, 0, 0, 0], [0, 0, 0, 0, 1.25]]
    # no trainable token (an excluded step): column 0, so the row's sum still reads it and nothing trains on it
    assert place_step_rewards(torch.tensor([[1, 0], [0, 0]]), [1.0, 3.0]).tolist() == [[1.0, 0], [3.0, 0]]
    with pytest.raises(ValueError, match="one reward per row"):
        place_step_rewards(mask, [1.0])


def step(**changes) -> StepSample:
    fields = {"prompt_ids": (1, 2), "response_ids": (3,), "group_id": "u", "traj_id": "t", "step": 0,
              "num_steps": 2, "reward": 1.0}
    return StepSample(**{**fields, **changes})


@pytest.mark.parametrize(("changes", "message"), [
    ({"response_ids": ()}, "empty response"),
    ({"prompt_ids": ()}, "empty prompt"),
    ({"step": 2}, "0..num_steps-1"),
    ({"excluded": True}, "carries no reward"),
    ({"trajectory_json": "{}"}, "last step only"),
    ({"reward": float("nan")}, "finite"),
    ({"response_logprobs": (0.1, 0.2)}, "one per token"),
])
def test_a_bad_step_is_a_one_line_error(changes, message):
    with pytest.raises(ValueError, match=message) as error:
        step(**changes)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("second", "message"), [
    ({"step": 1, "num_steps": 3}, "disagree on num_steps"),
    ({"step": 1, "group_id": "other"}, "disagree on group_id"),
    ({"step": 1, "excluded": True, "reward": None}, "disagree on excluded"),
    ({"step": 0}, "appears twice"),
    ({"step": 1, "reward": None}, "has no reward while other steps do"),
    ({"step": 1, "response_logprobs": (-0.1,)}, "all or none"),
])
def test_an_inconsistent_batch_is_a_one_line_error(second, message):
    with pytest.raises(ValueError, match=message) as error:
        to_data_proto([step(), step(**second)], pad_token_id=PAD)
    assert "\n" not in str(error.value)


def test_from_data_proto_refuses_a_batch_that_is_not_stepwise():
    data = to_data_proto(random_batch(6), pad_token_id=PAD)
    data.non_tensor_batch.pop("admire_traj_id")
    with pytest.raises(ValueError, match="lacks admire_traj_id"):
        from_data_proto(data)
    data = to_data_proto(random_batch(6), pad_token_id=PAD)
    data.batch["response_mask"][0, 0] = 0
    with pytest.raises(ValueError, match="response_mask is not the response's attention mask"):
        from_data_proto(data)
    with pytest.raises(ValueError, match="at least one"):
        to_data_proto([], pad_token_id=PAD)
