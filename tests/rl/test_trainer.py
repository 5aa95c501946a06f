"""The main job end to end on the real parts: MiniWoB++ in Chromium, the MiniLM encoder, the dom policy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from admire.cli import main
from admire.config import load_run_config
from admire.milestones.bank import MilestoneBank
from admire.rl.builders import build_policy
from admire.runs import RunDir
from admire.tracking import read_metrics
from admire.types import Trajectory
from tests.support.models import tiny_qwen2_5_vl_dir  # noqa: F401

pytestmark = pytest.mark.browser

TINY = [
    "env.suite=miniwob-smoke",
    "env.max_envs=[1]",
    "env.max_steps=4",
    "trainer.tasks_per_epoch=2",
    "actor_rollout_ref.rollout.n=2",
    "trainer.eval_episodes=1",
    "trainer.eval_every=0",
    "tracking.tensorboard=false",
    "tracking.swanlab=null",
    # Fresh seeds: this draw has a group with mixed outcomes, so one epoch has a non-zero advantage to
    # train on (a batch whose groups all tie gives A = 0 and, rightly, no update at all).
    "env.train_instances_per_task=null",
]


def test_one_real_training_update_changes_the_policy_and_fills_the_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", "--quiet", f"run.dir={tmp_path}", "run.name=one", "trainer.total_epochs=1", *TINY])
    assert code == 0
    run = RunDir(tmp_path / "one")
    for path in (run.config, run.metrics, run.bank, run.summary, run.report / "learning_curve.png",
                 run.checkpoints / "latest.json", run.trajectory_file("train", 0), run.trajectory_file("eval", 0)):
        assert path.exists(), path
    checkpoint = run.load_checkpoint()
    assert checkpoint is not None and checkpoint["state"]["epoch"] == 1
    untrained = build_policy(load_run_config(run.path)).state_dict()
    trained = checkpoint["policy"]
    changed = [k for k, v in trained.items() if isinstance(v, torch.Tensor) and not torch.equal(v, untrained[k])]
    assert changed, "the PPO update left every parameter as it was"
    [record] = read_metrics(run.metrics)
    assert record["step"] == 0 and record["train/episodes"] == 4 and record["env/steps"] > 0
    trajectories = run.read_trajectories("train", 0)
    assert trajectories is not None and len(trajectories) == 4
    assert all(step.grounded_description for t in trajectories for step in t.steps if step.format_valid)
    # Each step's reward breakdown is kept beside its trajectory (the viewer explains it; mean = the metric).
    rewards = run.read_rewards("train", 0)
    assert rewards is not None and set(rewards) == {t.id for t in trajectories if not t.excluded}
    assert all(len(rewards[t.id]) == len(t.steps) for t in trajectories if not t.excluded)
    totals = [b.total for breakdowns in rewards.values() for b in breakdowns]
    assert record["reward/total"] == pytest.approx(sum(totals) / len(totals))

    # The trained checkpoint evaluates on its own: `admire eval` reads the run's config and weights.
    assert main(["eval", "--checkpoint", str(run.path), "--episodes", "1", "--max-envs", "1"]) == 0
    out = capsys.readouterr().out
    assert "miniwob/click-test" in out and "average" in out


def _wait_for(path: Path, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"training exited with {process.returncode} before {path.name} appeared")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.02)


def test_kill_9_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    args = ["train", "--quiet", f"run.dir={tmp_path}", "run.name=killed", "trainer.total_epochs=3", *TINY]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Its own process group, so the kill also takes the browsers it started (a real kill -9 of a
    # trainer orphans them; the test must not leave them behind).
    process = subprocess.Popen([sys.executable, "-m", "admire.cli", *args], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run = RunDir(tmp_path / "killed")
    try:
        # Kill the moment epoch 1's rollouts are on disk: its update and checkpoint are still to come.
        _wait_for(run.trajectory_file("train", 1), process, timeout=300)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    checkpoint = run.load_checkpoint()
    assert checkpoint is not None
    resumed_epoch, bank_version = checkpoint["state"]["epoch"], checkpoint["bank_version"]
    assert resumed_epoch in (1, 2)
    interrupted = run.read_trajectories("train", 1)
    assert interrupted is not None

    assert main(["train", "--quiet", f"resume={run.path}"]) == 0

    final = run.load_checkpoint()
    assert final is not None and final["state"]["epoch"] == 3
    assert final["bank_version"] >= bank_version
    # Epoch 1's finished rollouts were reused, not re-run or appended to.
    assert [t.id for t in run.read_trajectories("train", 1) or []] == [t.id for t in interrupted]
    ids = [t.id for e in range(3) for t in run.read_trajectories("train", e) or []]
    assert len(ids) == 3 * 4 and len(set(ids)) == len(ids)
    # One metrics line per epoch, none doubled by the redone epoch; a resumed epoch's env steps are counted.
    records = read_metrics(run.metrics)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert [r["env/steps"] for r in records] == [
        sum(s.format_valid for t in run.read_trajectories("train", e) or [] for s in t.steps) for e in range(3)]
    # The bank holds at most one version per key and epoch: the redone epoch did not stack a second one.
    with MilestoneBank(run.bank) as bank:
        versions = [entry for key in bank.latest() for entry in bank.history(key.key)]
    per_epoch = Counter((entry.key, entry.provenance.epoch) for entry in versions)
    assert all(count == 1 for count in per_epoch.values()), per_epoch
    # And the run sampled what an uninterrupted one samples: epoch 1's rollouts were reused with the random
    # states written after them, so epoch 2 draws the same actions on the same screens.
    assert main(["train", "--quiet", f"run.dir={tmp_path}", "run.name=whole", "trainer.total_epochs=3", *TINY]) == 0
    whole = RunDir(tmp_path / "whole")
    for epoch in range(3):
        assert answers(run.read_trajectories("train", epoch)) == answers(whole.read_trajectories("train", epoch))


def answers(trajectories: list[Trajectory] | None) -> list[tuple[str, list[str]]]:
    return [(t.goal, [step.raw_output for step in t.steps]) for t in trajectories or []]


@pytest.mark.slow
def test_the_dom_policy_learns_the_smoke_suite(tmp_path: Path) -> None:
    """End-to-end learning (make test-all): held-out success rises well above the random start."""
    args = ["train", "--quiet", f"run.dir={tmp_path}", "run.name=learn", "trainer.total_epochs=15",
            "env.suite=miniwob-smoke", "env.max_steps=4", "trainer.tasks_per_epoch=3", "trainer.eval_episodes=10",
            "trainer.eval_every=0", "tracking.tensorboard=false", "tracking.swanlab=null"]
    assert main(args) == 0
    summary = json.loads((tmp_path / "learn" / "summary.json").read_text())
    assert summary["after"]["success"] >= 0.8
    assert summary["after"]["success"] >= summary["before"]["success"] + 0.3


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_admire_train_runs_the_lm_policy_end_to_end_and_keeps_its_adapter_as_safetensors(
    tmp_path: Path, tiny_qwen2_5_vl_dir: Path, capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    from safetensors.torch import load_file

    code = main(["train", "--quiet", f"run.dir={tmp_path}", "run.name=lm", "trainer.total_epochs=1",
                 "actor_rollout_ref.model.name=lm", f"actor_rollout_ref.model.path={tiny_qwen2_5_vl_dir}",
                 "+actor_rollout_ref.model.lora=true", "+actor_rollout_ref.model.max_new_tokens=16",
                 "env.screenshots=true", "env.max_steps=1", "trainer.tasks_per_epoch=1", *TINY[3:]])
    assert code == 0
    run = RunDir(tmp_path / "lm")
    checkpoint = run.load_checkpoint()
    assert checkpoint is not None and checkpoint["state"]["epoch"] == 1
    [weights] = run.checkpoints.glob("epoch_*.safetensors")
    tensors = load_file(weights)
    adapter = [k for k in tensors if k.startswith("policy/")]
    assert adapter and all("lora" in k for k in adapter if "_extra_state" not in k)  # not the 49 MB base model
    steps = [s for t in run.read_trajectories("train", 0) or () for s in t.steps]
    assert steps and all(len(s.info["token_log_probs"]) == s.info["num_tokens"] for s in steps)
