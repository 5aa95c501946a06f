"""The verl reward step (``AdmireStepRewards``) on recorded trajectories laid out as stepwise verl rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from admire.config_files import plain
from admire.integrations.verl.rewards import AdmireStepRewards
from admire.milestones.bank import milestone_key
from tests.support.core_scoring import TextHashEncoder
from tests.support.verl_steps import as_data_proto, config, cpu_rewards, recorded_batch, response_length, step_rows


def reward_step(tmp_path: Path, **sections: object) -> AdmireStepRewards:
    return AdmireStepRewards(config(**sections), tmp_path / "run", encoder=TextHashEncoder())


def row_of(rows: list[dict], trajectory_id: str, step: int) -> int:
    return next(i for i, row in enumerate(rows) if row["extra_fields"]["admire_traj_id"] == trajectory_id
                and row["extra_fields"]["admire_step"] == step)


def test_rewards_equal_the_cpu_trainers_and_sit_on_each_rows_last_response_token(tmp_path: Path) -> None:
    batch = recorded_batch()
    rows = step_rows({"g0": batch})
    step = reward_step(tmp_path)
    rewards, _ = step(as_data_proto(rows), epoch=3)

    expected = torch.zeros_like(rewards)
    for trajectory_id, breakdowns in cpu_rewards(batch, config(), 3, tmp_path / "cpu.sqlite").items():
        for t, breakdown in enumerate(breakdowns):
            expected[row_of(rows, trajectory_id, t), response_length(trajectory_id, t) - 1] = breakdown.total
    assert torch.equal(rewards, expected)
    assert expected[row_of(rows, "fail-no-password", 0)].sum() > 0  # the comparison covers a milestone hit


def test_the_bank_is_updated_from_the_batch_before_the_batch_is_scored(tmp_path: Path) -> None:
    """The failure that typed the username is paid by milestones distilled from this batch's own success."""
    rows = step_rows({"g0": recorded_batch()})
    step = reward_step(tmp_path)
    assert step.bank.version == 0
    rewards, metrics = step(as_data_proto(rows), epoch=0)
    assert step.bank.version == 1 and metrics["milestones/updates"] == 1.0
    assert rewards[row_of(rows, "fail-no-password", 0)].sum() > 0.2  # λ(0)·(k/K + ζ·r) on an outcome of 0
    assert metrics["reward/milestone"] > 0 and metrics["milestones/hit_rate"] > 0


def test_update_after_reward_scores_with_the_bank_as_it_was(tmp_path: Path) -> None:
    rows = step_rows({"g0": recorded_batch()})
    step = reward_step(tmp_path, milestone_reward={"update_before_reward": False})
    rewards, metrics = step(as_data_proto(rows), epoch=0)
    assert rewards[row_of(rows, "fail-no-password", 0)].sum() == 0.0
    assert step.bank.version == 1 and metrics["reward/milestone"] == 0.0


def test_excluded_episodes_get_nothing_and_stay_out_of_the_bank(tmp_path: Path) -> None:
    """``ok-short`` (the shortest success, the one the bank would distil) is flagged excluded by its rows."""
    batch = recorded_batch()
    rows = step_rows({"g0": batch}, flagged=frozenset({"ok-short"}))
    step = reward_step(tmp_path)
    rewards, metrics = step(as_data_proto(rows), epoch=0)

    key = milestone_key(batch[0], key=step.key)
    assert step.bank.get(key).provenance.trajectory_id == "ok-long"
    excluded = [i for i, row in enumerate(rows) if row["extra_fields"]["admire_traj_id"] in ("ok-short", "crashed")]
    assert len(excluded) == 4 and not rewards[excluded].any()
    assert metrics["admire/excluded_rows"] == 4.0 and metrics["train/env_errors"] == 2.0
    assert metrics["train/episodes"] == 5.0
    assert rewards[row_of(rows, "ok-long", 3)].sum() > 1.0


def test_a_step_without_trainable_tokens_keeps_its_reward_in_column_0(tmp_path: Path) -> None:
    """An empty answer's filler token is not trained (mask 0), but its reward still counts in the group."""
    rows = step_rows({"g0": recorded_batch()})
    data = as_data_proto(rows)
    i = row_of(rows, "fail-no-password", 0)
    data.batch["response_mask"][i] = 0
    rewards, _ = reward_step(tmp_path)(data, epoch=0)
    reference, _ = reward_step(tmp_path / "again")(as_data_proto(rows), epoch=0)
    assert rewards[i, 0] == reference[i].sum() > 0 and rewards[i, 1:].sum() == 0


def test_rows_that_break_the_contract_are_refused_in_one_line(tmp_path: Path) -> None:
    rows = step_rows({"g0": recorded_batch()})
    last = row_of(rows, "ok-long", 3)
    rows[last]["extra_fields"]["admire_trajectory"] = None
    with pytest.raises(ValueError, match="'ok-long' has no row with admire_trajectory"):
        reward_step(tmp_path)(as_data_proto(rows), epoch=0)

    data = as_data_proto(step_rows({"g0": recorded_batch()}))
    doubled = data.select_idxs(np.concatenate([np.arange(len(data)), [0]]))
    with pytest.raises(ValueError, match=r"on two rows .*padding"):
        reward_step(tmp_path / "doubled")(doubled, epoch=0)


def test_a_resumed_run_drops_the_lists_written_after_its_checkpoint(tmp_path: Path) -> None:
    batch = recorded_batch()
    step = reward_step(tmp_path)
    step.start(0)
    step.checkpoint(5)  # the bank is empty at step 5
    step(as_data_proto(step_rows({"g0": batch})), epoch=5)
    assert step.bank.version == 1
    step.start(5)
    assert step.bank.version == 0 and step.bank.keys() == []
    with pytest.raises(ValueError, match="no bank version for step 6"):
        step.start(6)


def test_from_a_verl_config_the_bank_is_the_run_directorys(tmp_path: Path) -> None:
    """The ``admire`` section of verl's config is the whole project config plus ``run_dir`` and the agent loop's
    ``max_reruns`` (and keys of the verl path the shipped config does not have)."""
    from omegaconf import OmegaConf

    section = plain(config(milestone_reward={"key": "task"}))
    section.update(run_dir=str(tmp_path / "runs" / "r1"), verl={"overrides": ["trainer.nnodes=1"]},
                   max_reruns=0)  # the agent loop's own key (verl.overrides=[++admire.max_reruns=0]), not the config's
    verl_config = OmegaConf.create({"admire": section, "trainer": {"default_local_dir": str(tmp_path / "ckpt")}})
    step = AdmireStepRewards.from_verl_config(verl_config, encoder=TextHashEncoder())
    assert step.key == "task" and step.run.bank == tmp_path / "runs" / "r1" / "milestones.sqlite"
    step(as_data_proto(step_rows({"g0": recorded_batch()})), epoch=0)
    assert step.run.bank.exists() and step.bank.version == 1

    with pytest.raises(ValueError, match="no 'admire' section"):
        AdmireStepRewards.from_verl_config(OmegaConf.create({"trainer": {"default_local_dir": "x"}}))
