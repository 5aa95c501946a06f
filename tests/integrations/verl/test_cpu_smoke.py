"""verl, end to end, on the CPU: ``scripts/cpu_smoke.sh`` run once, and what its run left checked.

The script trains with ``python -m verl.trainer.main_ppo`` (Ray, the ``admire_step`` trainer, the ``admire_gui``
agent loop over ``admire serve``, FSDP2 on gloo, the ``admire_hf`` rollout) for 2 global steps with one browser
killed mid-episode, removes the step-2 checkpoint and resumes to step 3. Everything asserted here comes from the
run's own files: verl's metrics, the milestone bank, the checkpoints, the recorded trajectories, rewards and
advantages (which the CPU trainer's code must reproduce), and the logs.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from admire.milestones.bank import MilestoneBank
from admire.rl.advantages import compute_advantages, group_samples
from admire.rl.scoring import BatchScorer
from admire.runs import RunDir
from tests.support.paths import REPO

# The script bounds each of its three long commands by SMOKE_TIMEOUT (900 s); the fixture's own bound sits above
# their sum so that a slow or stuck run fails with the script's logs, and pytest's bound above the fixture's.
SCRIPT_TIMEOUT_S = 2900
pytestmark = [pytest.mark.browser, pytest.mark.timeout(SCRIPT_TIMEOUT_S + 100)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The script's output folder after one run (it fails the module when the script fails)."""
    out = tmp_path_factory.mktemp("cpu-verl")
    env = {**os.environ, "PYTHON": sys.executable, "SMOKE_PORT": str(free_port())}
    try:
        done = subprocess.run(["bash", str(REPO / "scripts" / "cpu_smoke.sh"), str(out)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as slow:
        pytest.fail(f"cpu_smoke.sh ran past {SCRIPT_TIMEOUT_S} s: {text_of(slow.stderr)[-2000:]}{logs_of(out)}")
    if done.returncode != 0:
        pytest.fail(f"cpu_smoke.sh exited {done.returncode}: {done.stderr[-2000:]}{logs_of(out)}")
    return out


def text_of(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def logs_of(out: Path) -> str:
    """The end of every log the script wrote, for a failure message."""
    return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(out.glob("*.log")))


def run_of(smoke: Path) -> RunDir:
    return RunDir(smoke / "runs" / "cpu-verl")


def metrics(smoke: Path) -> list[list[dict[str, Any]]]:
    """verl's metrics, one list of steps per launch (the first run, then the resume)."""
    files = sorted((run_of(smoke).path / "verl").glob("metrics-*.jsonl"))
    return [[json.loads(line) for line in f.read_text().splitlines() if line.strip()] for f in files]


def test_two_global_steps_then_a_resume_from_step_1_to_step_3(smoke: Path) -> None:
    first, resumed = metrics(smoke)
    training = [row for row in first if "actor/pg_loss" in row["data"]]
    assert [row["step"] for row in training] == [1, 2]
    assert [row["data"]["training/global_step"] for row in training] == [1, 2]
    assert [row["step"] for row in resumed if "actor/pg_loss" in row["data"]] == [2, 3]
    for row in training:
        assert math.isfinite(row["data"]["actor/pg_loss"]) and math.isfinite(row["data"]["actor/grad_norm"])


def test_every_rollout_used_the_weights_of_the_step_before(smoke: Path) -> None:
    """The weight sync reached the rollout: each answer of step s was sampled by the weights the actor had after
    step s - 1 (the version the server reports), and those weights give the actor's own token probabilities."""
    run = run_of(smoke)
    for epoch in (0, 1, 2):
        played = [t for t in run.read_trajectories("train", epoch) if not t.excluded]
        assert played and all(t.info["weight_versions"] == [epoch] for t in played), epoch
    for launch in metrics(smoke):
        for row in (r for r in launch if "actor/pg_loss" in r["data"]):
            assert row["data"]["training/off_policy/trajectory_staleness/max"] == 0
            assert row["data"]["training/rollout_probs_diff_max"] < 1e-3


def test_the_admire_reward_metrics_reach_verls_logger(smoke: Path) -> None:
    for launch in metrics(smoke):
        for row in (r for r in launch if "actor/pg_loss" in r["data"]):
            data = row["data"]
            for name in ("reward/total", "reward/outcome", "reward/format", "reward/milestone", "train/success",
                         "milestones/coverage", "milestones/bank_version", "time/milestone_s"):
                assert math.isfinite(float(data[name])), name
    assert any(r["data"].get("train/success", 0) > 0 for launch in metrics(smoke) for r in launch)


def test_the_killed_browsers_episode_is_excluded_and_trains_nothing(smoke: Path) -> None:
    assert "killed browser" in (smoke / "kill.log").read_text()
    first, _ = metrics(smoke)
    assert sum(r["data"].get("train/env_errors", 0) for r in first) == 1
    assert sum(r["data"].get("admire/excluded_rows", 0) for r in first) == 1
    rows = [json.loads(line) for epoch in (0, 1)
            for line in advantages_file(smoke, epoch).read_text().splitlines()]
    excluded = [row for row in rows if row["excluded"]]
    assert len(excluded) == 1 and excluded[0]["advantage"] is None and excluded[0]["reward"] == 0.0


def test_the_milestone_bank_is_filled_and_rolled_back_to_the_checkpoint_on_resume(smoke: Path) -> None:
    run = run_of(smoke)
    versions = json.loads((run.path / "verl_bank_versions.json").read_text())
    assert set(versions) == {"1", "2", "3"}  # step 2's again, after the resume
    resume_log = (smoke / "resume.log").read_text()
    assert f"milestone bank rolled back to version {versions['1']}, as at the checkpoint of step 1" in resume_log
    bank = MilestoneBank(run.bank)
    try:
        assert bank.version >= 1 and bank.version == versions["3"]
        assert any(len(entry.milestones) >= 2 for entry in bank.latest())
    finally:
        bank.close()
    assert (run.path / "checkpoints" / "global_step_1").is_dir()
    assert (run.path / "checkpoints" / "global_step_3").is_dir()


def cpu_advantages(trajectories: list[Any], rewards: list[Any], estimator: str, options: dict[str, Any]
                   ) -> dict[tuple[str, int], float]:
    """Each step's advantage as the CPU trainer's ``build_samples`` computes it: per group of one task instance
    (task, seed, group index), ``compute_advantages`` on the group's scored trajectories."""
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault((t.task.name, t.task.seed, t.group), []).append(i)
    out: dict[tuple[str, int], float] = {}
    for members in groups.values():
        result = compute_advantages(estimator, group_samples([trajectories[i] for i in members],
                                                             [rewards[i] for i in members]), **options)
        for i, advantages in zip(members, result.advantages, strict=True):
            out.update({(trajectories[i].id, k): float(a) for k, a in enumerate(advantages or [])})
    return out


def advantages_file(smoke: Path, epoch: int) -> Path:
    return run_of(smoke).trajectories / "advantages" / f"train_epoch_{epoch:04d}.jsonl"


def test_the_cpu_trainers_code_gives_the_same_rewards_and_advantages_on_the_recorded_batches(smoke: Path,
                                                                                                tmp_path: Path) -> None:
    """Replay the run's recorded trajectories, epoch by epoch, through the CPU trainer's reward step (a fresh
    bank, ``BatchScorer``) and its advantage step (``build_samples``): the same numbers verl's run recorded."""
    run = run_of(smoke)
    cfg = OmegaConf.load(run.path / "verl" / "admire" / "run.yaml")
    del cfg["run_dir"]
    bank = MilestoneBank(tmp_path / "bank.sqlite")
    scorer = BatchScorer.from_config(cfg, bank, run="replay")
    options = {"norm_by_std": bool(cfg.algorithm.norm_adv_by_std_in_grpo), "std_floor": float(cfg.algorithm.std_floor),
               "failed_baseline": str(cfg.algorithm.failed_group_baseline)}
    compared = 0
    for epoch in (0, 1, 2):
        trajectories = run.read_trajectories("train", epoch)
        assert trajectories
        usable = [t for t in trajectories if not t.excluded]
        scored = scorer.score(usable, epoch)
        cpu_reward = {(t.id, i): b.total for t, r in zip(usable, scored.rewards, strict=True) for i, b in enumerate(r)}
        cpu_advantage = cpu_advantages(usable, scored.rewards, str(cfg.algorithm.adv_estimator), options)
        for line in advantages_file(smoke, epoch).read_text().splitlines():
            row = json.loads(line)
            if row["excluded"]:
                continue
            key = (row["traj_id"], row["step"])
            assert row["reward"] == pytest.approx(cpu_reward[key], abs=1e-5)
            if row["advantage"] is not None:
                assert row["advantage"] == pytest.approx(cpu_advantage[key], abs=1e-4)
                compared += 1
    bank.close()
    assert compared >= 6


def test_the_model_is_tiny_qwen2_after_a_supervised_warm_start(smoke: Path) -> None:
    record = json.loads((smoke / "tiny-qwen2-warm" / "admire-warm-start.json").read_text())
    assert record["demonstrations"] == 6 and record["metrics"]["nll_after"] < 0.05 < record["metrics"]["nll_before"]
