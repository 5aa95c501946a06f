"""Every arm of a comparison starts from one start: ``warm_start.from_run`` loads another run's
``checkpoints/start.*`` (its weights, random states and evaluation before RL), on the fake env and policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from admire import checkpoints
from admire.commands.train import config_yaml
from admire.config import load_config
from admire.rl.shared_start import check_from_run
from admire.runs import RunDir
from admire.tracking import read_metrics
from tests.rl.test_trainer_fakes import FAKE, fake_backend_and_policy, run_training  # noqa: F401


def started_run(tmp_path: Path, name: str, *overrides: str) -> RunDir:
    """A run that stops after its start (no epoch), with the config.yaml `admire train` writes."""
    _, run = run_training(tmp_path, "trainer.total_epochs=0", *overrides, name=name)
    run.config.write_text(config_yaml(load_config(overrides=[*FAKE, "trainer.total_epochs=0", *overrides])))
    return run


def policy_weights(run: RunDir) -> dict[str, torch.Tensor]:
    return dict(checkpoints.load_policy(run.path))


def test_a_run_writes_its_start_before_the_first_epoch_and_a_resume_begins_there(tmp_path: Path) -> None:
    run = started_run(tmp_path, "source")
    start = checkpoints.load(run.start_checkpoint)
    assert start["state"]["epoch"] == 0 and start["state"]["baseline"] is not None
    assert run.load_checkpoint()["state"] == start["state"]  # latest.json names it


def test_a_run_from_another_runs_start_is_the_run_that_started_there(tmp_path: Path) -> None:
    whole_summary, whole = run_training(tmp_path, name="whole")
    source = started_run(tmp_path, "source")
    shared_summary, shared = run_training(tmp_path, f"actor_rollout_ref.warm_start.from_run={source.path}",
                                          name="shared")
    assert shared_summary["before"] == whole_summary["before"] and shared_summary["after"] == whole_summary["after"]
    drop = {"time/epoch_s", "time/milestone_s", "wall_s", "env/steps_per_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(shared.metrics)] == \
        [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(whole.metrics)]
    final = policy_weights(shared)
    assert all(torch.equal(final[k], v) for k, v in policy_weights(whole).items())
    assert shared.trajectory_file("eval", 0).read_bytes() == source.trajectory_file("eval", 0).read_bytes()


def test_two_arms_from_one_start_begin_with_identical_weights(tmp_path: Path) -> None:
    source = started_run(tmp_path, "source")
    start = f"actor_rollout_ref.warm_start.from_run={source.path}"
    arms = [run_training(tmp_path, start, "trainer.total_epochs=1", *reward, name=name)[1]
            for name, reward in (("admire", ()), ("outcome", ("reward.mode=outcome",)))]
    starts = [checkpoints.load(arm.start_checkpoint) for arm in arms]
    first, second = (dict(s["policy"]) for s in starts)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert starts[0]["state"]["baseline"] == starts[1]["state"]["baseline"]
    tensors = [(arm.checkpoints / "start.safetensors").read_bytes() for arm in arms]
    assert tensors[0] == tensors[1]


def test_a_start_from_a_run_started_otherwise_is_refused_naming_the_keys(tmp_path: Path) -> None:
    source = started_run(tmp_path, "source")
    check_from_run(load_config(overrides=[*FAKE, f"actor_rollout_ref.warm_start.from_run={source.path}",
                                          "reward.mode=outcome", "actor_rollout_ref.actor.lr=0.5"]))
    other = load_config(overrides=[*FAKE, f"actor_rollout_ref.warm_start.from_run={source.path}", "run.seed=3",
                                   "env.max_steps=6"])
    with pytest.raises(ValueError, match=r"other values of run.seed, env.max_steps; start from"):
        check_from_run(other)


def test_a_start_from_a_folder_without_one_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a run directory"):
        check_from_run(load_config(overrides=[*FAKE, f"actor_rollout_ref.warm_start.from_run={tmp_path}"]))
    RunDir(tmp_path / "young").create()
    (tmp_path / "young" / "config.yaml").write_text(config_yaml(load_config(overrides=FAKE)))
    with pytest.raises(ValueError, match=r"has no checkpoints/start\.json yet"):
        check_from_run(load_config(overrides=[*FAKE, f"actor_rollout_ref.warm_start.from_run={tmp_path / 'young'}"]))
