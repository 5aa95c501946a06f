"""Every arm of a comparison starts from one start: ``warm_start.from_run`` loads another run's
``checkpoints/start.*`` (its weights, random states and evaluation before RL), on the fake env and policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from admire import checkpoints
from admire.commands.train import config_yaml
from admire.config import load_config
from admire.rl.shared_start import check_from_run
from admire.runs import RunDir
from tests.core.test_checkpoints import assert_same
from tests.rl.test_trainer_fakes import FAKE, fake_backend_and_policy, run_training  # noqa: F401
from tests.support.metrics import untimed_metrics


def started_run(tmp_path: Path, name: str, *overrides: str) -> RunDir:
    """A run that stops after its start (no epoch), with the config.yaml `admire train` writes."""
    _, run = run_training(tmp_path, "trainer.total_epochs=0", *overrides, name=name)
    run.config.write_text(config_yaml(load_config(overrides=[*FAKE, "trainer.total_epochs=0", *overrides])))
    return run


def policy_weights(run: RunDir) -> dict[str, Any]:
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
    assert untimed_metrics(shared.metrics) == untimed_metrics(whole.metrics)
    final = policy_weights(shared)
    for key, value in policy_weights(whole).items():
        assert_same(final[key], value, key)
    assert shared.trajectory_file("eval", 0).read_bytes() == source.trajectory_file("eval", 0).read_bytes()


def test_two_arms_from_one_start_begin_with_identical_weights(tmp_path: Path) -> None:
    source = started_run(tmp_path, "source")
    start = f"actor_rollout_ref.warm_start.from_run={source.path}"
    arms = [run_training(tmp_path, start, "trainer.total_epochs=1", *reward, name=name)[1]
            for name, reward in (("admire", ()), ("outcome", ("reward.mode=outcome",)))]
    starts = [checkpoints.load(arm.start_checkpoint) for arm in arms]
    first, second = (dict(s["policy"]) for s in starts)
    assert_same(first, second)
    assert starts[0]["state"]["baseline"] == starts[1]["state"]["baseline"]
    tensors = [(arm.checkpoints / "start.safetensors").read_bytes() for arm in arms]
    assert tensors[0] == tensors[1]


def test_a_start_from_a_run_started_otherwise_is_refused_naming_the_keys(tmp_path: Path) -> None:
    source = started_run(tmp_path, "source")
    check_from_run(load_config(overrides=[*FAKE, f"actor_rollout_ref.warm_start.from_run={source.path}",
                                          "reward.mode=outcome", "actor_rollout_ref.actor.lr=0.5",
                                          "+actor_rollout_ref.model.sampler_dtype=float32"]))  # acts after the start
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


class Killed(Exception):
    """Stands for the process being killed while it evaluates before RL."""


def test_a_run_killed_after_its_warm_start_resumes_without_imitating_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from admire.agent.base import trainable_parameters
    from admire.rl import evaluation
    from admire.rl.trainer import train
    from tests.support.fakes import TrigramEncoder

    imitations: list[str] = []

    def imitate(policy: torch.nn.Module, *args: object, **kwargs: object) -> dict[str, float]:
        imitations.append("imitated")
        with torch.no_grad():
            trainable_parameters(policy)[0].add_(0.5)  # the warm start's mark on the weights
        return {"demonstrations": 3.0, "nll_after": 0.25}

    monkeypatch.setattr(evaluation, "warm_start", imitate)
    warm = ("actor_rollout_ref.warm_start.enable=true", "trainer.total_epochs=1")
    whole_summary, whole = run_training(tmp_path, *warm, name="whole")
    assert imitations == ["imitated"] and not (whole.checkpoints / "warm.json").exists()

    real_evaluate = evaluation.evaluate
    kills = iter([True])

    def evaluate_once_killed(*args: Any, **kwargs: Any) -> dict[str, float]:
        if next(kills, False):
            raise Killed
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", evaluate_once_killed)
    with pytest.raises(Killed):
        run_training(tmp_path, *warm, name="killed")
    killed = RunDir(tmp_path / "killed")
    assert imitations == ["imitated"] * 2
    assert (killed.checkpoints / "warm.json").is_file() and not killed.start_checkpoint.exists()
    assert killed.status.read_text() == "evaluating the policy before RL\n"  # what the run was doing
    assert killed.load_checkpoint()["state"]["warm_start"] == {"demonstrations": 3.0, "nll_after": 0.25}

    summary = train(load_config(overrides=[*FAKE, *warm]), killed, console=Console(quiet=True),
                    encoder=TrigramEncoder())
    assert imitations == ["imitated"] * 2  # the resume evaluated the imitated weights; it did not imitate again
    assert not (killed.checkpoints / "warm.json").exists() and killed.start_checkpoint.is_file()
    assert summary["warm_start"] == whole_summary["warm_start"]
    assert killed.status.read_text() == "finished\n"
    assert summary["before"] == whole_summary["before"] and summary["after"] == whole_summary["after"]
    resumed, uninterrupted = policy_weights(killed), policy_weights(whole)
    assert_same(resumed, uninterrupted)
