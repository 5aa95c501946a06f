"""The trainer's wiring, on fakes: a seeded form env registered as a backend, a tiny trainable policy
registered as a policy, and a trigram encoder for the matcher — no Chromium, no MiniLM, seconds per run.

Each wiring test names the mutation of the trainer it kills (docs/decisions.md#d8): the bank updated after
scoring, λ(e) frozen at epoch 0, the PPO loss sign flipped, advantage groups keyed by task only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from admire.agent.base import POLICIES
from admire.cli import main
from admire.config import load_config
from admire.envs.base import ENVS
from admire.envs.suites import get_suite
from admire.judge import LLMJudge
from admire.rl.advantages import DAPO_CLIP_HIGH
from admire.rl.builders import check_config, ppo_config
from admire.rl.samples import build_samples
from admire.rl.scoring import build_judge
from admire.rl.trainer import train
from admire.runs import RunDir
from admire.tracking import read_metrics
from admire.types import Observation, RewardBreakdown, Step, Task, Termination, Trajectory
from tests.support.fakes import FormPolicy, SeededFormEnv, TokenFormPolicy, TrigramEncoder

TASK = "fake-form/login"
FAKE = [
    "env.src=[fake-form]",
    f"env.suite={TASK}",
    "env.max_envs=[1]",
    "env.max_steps=4",
    "env.train_instances_per_task=3",
    "actor_rollout_ref.model.name=tiny-form",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.lr=0.1",
    "trainer.tasks_per_epoch=4",
    "trainer.eval_episodes=4",
    "trainer.eval_every=0",
    "trainer.total_epochs=2",
    "tracking.tensorboard=false",
    "tracking.swanlab=null",
]


@pytest.fixture(autouse=True)
def fake_backend_and_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register the fakes for one test; monkeypatch takes them out of the registries afterwards."""
    monkeypatch.setitem(ENVS.entries, "fake-form", SeededFormEnv)
    monkeypatch.setitem(POLICIES.entries, "tiny-form", lambda seed=0, **_options: FormPolicy(seed=seed))
    yield


def run_training(tmp_path: Path, *overrides: str, name: str = "run", **inject: Any) -> tuple[dict[str, Any], RunDir]:
    cfg = load_config(overrides=[*FAKE, *overrides])
    run = RunDir(tmp_path / name).create()
    inject.setdefault("encoder", TrigramEncoder())
    summary = train(cfg, run, console=Console(quiet=True), **inject)
    return summary, run


def trajectories_and_rewards(run: RunDir, epoch: int) -> list[tuple[Trajectory, list[RewardBreakdown]]]:
    trajectories = run.read_trajectories("train", epoch)
    rewards = run.read_rewards("train", epoch)
    assert trajectories is not None and rewards is not None
    return [(t, rewards[t.id]) for t in trajectories if not t.excluded]


# --------------------------------------------------------------------------------------------------
# Learning, metrics, the new keys
# --------------------------------------------------------------------------------------------------

def test_training_on_the_fake_env_raises_held_out_success(tmp_path: Path) -> None:
    """Kills a flipped PPO loss sign at the level of the loop: success must rise, not fall."""
    summary, run = run_training(tmp_path, "trainer.total_epochs=8")
    assert summary["before"]["success"] == 0.0  # the untrained greedy policy retypes the name forever
    assert summary["after"]["success"] == 1.0
    curve = [record["train/success"] for record in read_metrics(run.metrics)]
    assert sum(curve[-2:]) / 2 > sum(curve[:2]) / 2 + 0.3


def test_the_metrics_and_summary_the_benchmark_reads(tmp_path: Path) -> None:
    summary, run = run_training(tmp_path, "trainer.eval_every=1", "actor_rollout_ref.actor.target_kl=null")
    records = read_metrics(run.metrics)
    assert [r["step"] for r in records] == [0, 1]
    for name in ("adv/nonzero_frac", "ppo/entropy", "ppo/approx_kl", "ppo/epochs_run", "time/epoch_s",
                 "time/milestone_s", "milestones/coverage", "train/success", "env_steps_total", "eval/success"):
        assert all(name in r for r in records), name
    for record in records:
        assert 0.0 <= record["adv/nonzero_frac"] <= 1.0 and record["ppo/entropy"] > 0
        assert 0.0 < record["time/milestone_s"] < record["time/epoch_s"]
        assert 0.0 < record["time/rollout_s"] + record["time/update_s"] < record["time/epoch_s"]
        assert record["time/eval_s"] > 0.0  # outside the epoch's time: eval_every=1 evaluates after each epoch
        assert record["ppo/epochs_run"] == 2  # ppo_epochs, no KL target
    assert records[-1]["env_steps_total"] == summary["env_steps"]
    saved = json.loads(run.summary.read_text())
    assert {"before", "after", "env_steps", "wall_s"} <= set(saved)
    assert saved["cpu_s"] > 0.0  # the trainer process's own CPU time, read from time.process_time
    assert "success" in saved["after"] and f"success/{TASK}" in saved["after"]


def test_training_instances_come_from_the_recurring_pool(tmp_path: Path) -> None:
    _, run = run_training(tmp_path, "trainer.total_epochs=3")
    pool = set(get_suite(TASK).instance_pool(TASK, 3, seed=0))
    seeds = [t.task.seed for epoch in range(3) for t, _ in trajectories_and_rewards(run, epoch)]
    assert set(seeds) == pool
    records = read_metrics(run.metrics)
    assert records[-1]["milestones/coverage"] == 1.0  # one skeleton for every instance, and it has a list


def test_total_env_steps_stops_training_at_the_budget(tmp_path: Path) -> None:
    summary, run = run_training(tmp_path, "trainer.total_epochs=50", "trainer.total_env_steps=40")
    records = read_metrics(run.metrics)
    assert summary["epochs"] == len(records) < 50
    assert summary["env_steps"] >= 40 and records[-2]["env_steps_total"] < 40
    assert summary["after"] is not None


def test_target_kl_stops_the_ppo_passes(tmp_path: Path) -> None:
    _, run = run_training(tmp_path, "actor_rollout_ref.actor.ppo_epochs=4", "actor_rollout_ref.actor.target_kl=1e-9")
    records = read_metrics(run.metrics)
    assert [r["ppo/epochs_run"] for r in records] == [1, 1]
    assert all(r["ppo/approx_kl"] > 1e-9 for r in records)


def test_the_dom_policy_trains_with_an_injected_encoder(tmp_path: Path) -> None:
    summary, run = run_training(tmp_path, "actor_rollout_ref.model.name=dom",
                                "+actor_rollout_ref.model.embedding_dim=64", "trainer.total_epochs=1",
                                encoder=TrigramEncoder(dim=64))
    [record] = read_metrics(run.metrics)
    assert record["train/episodes"] == 16 and record["ppo/samples"] > 0 and record["ppo/entropy"] > 0
    assert summary["epochs"] == 1


# --------------------------------------------------------------------------------------------------
# Mutations of the loop (docs/decisions.md#d8)
# --------------------------------------------------------------------------------------------------

def test_the_bank_is_updated_from_a_batch_before_the_batch_is_scored(tmp_path: Path) -> None:
    """Kills: update_bank called after score_batch. The failures of the epoch of the first success are
    already scaffolded — they have milestones (K > 0) in that very epoch."""
    _, run = run_training(tmp_path, "trainer.total_epochs=1")
    scored = trajectories_and_rewards(run, 0)
    assert any(t.success for t, _ in scored) and any(not t.success for t, _ in scored)
    failures = [breakdowns for t, breakdowns in scored if not t.success]
    assert all(b.num_milestones >= 2 for breakdowns in failures for b in breakdowns)
    assert any(b.milestone > 0 for breakdowns in failures for b in breakdowns)


def test_lambda_decays_with_the_epoch_the_batch_was_collected_in(tmp_path: Path) -> None:
    """Kills: score_batch given epoch 0 (λ never decays). λ(e) = 0.3·0.5^e in the kept rewards."""
    _, run = run_training(tmp_path, "trainer.total_epochs=3", "milestone_reward.decay=0.5")
    for epoch in range(3):
        weights = {b.milestone_weight for _, breakdowns in trajectories_and_rewards(run, epoch)
                   for b in breakdowns if b.num_milestones > 0}
        assert weights and all(w == pytest.approx(0.3 * 0.5**epoch) for w in weights), (epoch, weights)


def _trajectory(seed: int, group: int, success: bool, task: str = TASK) -> Trajectory:
    steps = tuple(Step(index=i, observation=Observation(goal="g", step=i), raw_output=f"step {i}",
                       format_valid=True, log_prob=-0.7) for i in range(2))
    return Trajectory(id=f"{task}-{seed}-{group}-{success}", task=Task(name=task, seed=seed), goal="g",
                      steps=steps, outcome=float(success), group=group,
                      termination=Termination.SUCCESS if success else Termination.MAX_STEPS)


def _scored(trajectories: Sequence[Trajectory]) -> list[list[RewardBreakdown]]:
    return [[RewardBreakdown(outcome=t.outcome, total=t.outcome) for _ in t.steps] for t in trajectories]


def test_advantage_groups_are_task_instance_and_group() -> None:
    """Kills: groups keyed by task only (or by task and seed). Every group below ties (all succeed or all
    fail), so no step has an advantage; merging any two of them would give ±1."""
    batch = [_trajectory(1, 0, True), _trajectory(1, 0, True),    # instance 1, all succeed
             _trajectory(2, 1, False), _trajectory(2, 1, False),  # instance 2, all fail
             _trajectory(1, 2, False), _trajectory(1, 2, False)]  # instance 1 drawn again: another group
    result = build_samples(batch, _scored(batch), "grpo_step")
    assert result.groups == 3 and len(result.samples) == 12
    assert all(s.advantage == 0.0 for s in result.samples) and result.nonzero_frac == 0.0
    mixed = [_trajectory(1, 0, True), _trajectory(1, 0, False)]
    assert build_samples(mixed, _scored(mixed), "grpo_step").nonzero_frac == 1.0


def test_filter_groups_drops_the_groups_the_estimator_does_not_keep() -> None:
    batch = [_trajectory(1, 0, True), _trajectory(1, 0, False), _trajectory(2, 1, False), _trajectory(2, 1, False)]
    dapo = build_samples(batch, _scored(batch), "dapo_step", filter_groups=True)
    assert dapo.groups_dropped == 1 and len(dapo.samples) == 4
    assert dapo.nonzero_frac == 0.5  # the dropped group's 4 steps count as unused
    kept = build_samples(batch, _scored(batch), "dapo_step")  # without the key the tie group stays, at A = 0
    assert kept.groups_dropped == 0 and len(kept.samples) == 8
    assert sorted(s.advantage for s in kept.samples)[2:6] == [0.0] * 4
    assert {(s.clip_low, s.clip_high) for s in dapo.samples} == {(None, None)}  # the actor's clip range applies


def test_dapos_clip_range_and_token_mean_are_the_actors_keys() -> None:
    cfg = load_config(overrides=[*FAKE, "algorithm.adv_estimator=dapo_step", "algorithm.filter_groups=true",
                                 f"actor_rollout_ref.actor.clip_ratio_high={DAPO_CLIP_HIGH}",
                                 "actor_rollout_ref.actor.loss_agg_mode=token-mean"])
    ppo = ppo_config(cfg)
    assert (ppo.clip_low, ppo.clip_high, ppo.loss_agg) == (0.2, DAPO_CLIP_HIGH, "token_mean")
    shipped = ppo_config(load_config(overrides=FAKE))
    assert (shipped.clip_high, shipped.loss_agg) == (0.2, "seq_mean")  # null = seq-mean-token-mean, any estimator


def test_the_std_options_reach_the_estimator() -> None:
    batch = [_trajectory(1, 0, True), _trajectory(1, 0, False)]
    normalised = build_samples(batch, _scored(batch), "grpo_step", norm_by_std=True, std_floor=0.0)
    centred = build_samples(batch, _scored(batch), "grpo_step", norm_by_std=False, std_floor=0.0)
    assert {round(s.advantage, 4) for s in normalised.samples} == {1.0, -1.0}
    assert {s.advantage for s in centred.samples} == {0.5, -0.5}


# --------------------------------------------------------------------------------------------------
# The judge baseline
# --------------------------------------------------------------------------------------------------

class HalfJudge:
    """Scores every step 0.5 and counts its calls like the LLM judge."""

    def __init__(self) -> None:
        self.calls = 0
        self.failures = 0

    def score(self, trajectory: Trajectory) -> list[float]:
        self.calls += 1
        return [0.5] * len(trajectory.steps)


def test_judge_mode_scores_every_step_with_the_judge(tmp_path: Path) -> None:
    judge = HalfJudge()
    _, run = run_training(tmp_path, "reward.mode=judge", "trainer.total_epochs=1", judge=judge)
    scored = trajectories_and_rewards(run, 0)
    assert judge.calls == len(scored)
    assert all(b.judge == 0.5 and b.milestone_weight == pytest.approx(0.3) for _, bs in scored for b in bs)
    [record] = read_metrics(run.metrics)
    assert record["judge/calls"] == len(scored) and record["judge/failures"] == 0


def test_judge_mode_without_an_endpoint_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(overrides=[*FAKE, "reward.mode=judge"])
    with pytest.raises(ValueError, match=r"reward.mode=judge needs an OpenAI-compatible endpoint.*judge.base_url"):
        check_config(cfg)
    assert main(["train", "--quiet", "reward.mode=judge"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "reward.judge.base_url" in err


def test_the_judge_is_built_from_the_reward_judge_section() -> None:
    cfg = load_config(overrides=[*FAKE, "reward.mode=judge", "reward.judge.base_url=http://127.0.0.1:9/v1",
                                 "reward.judge.model=judge-model", "reward.judge.max_steps_per_call=3"])
    check_config(cfg)
    judge = build_judge(cfg)
    assert isinstance(judge, LLMJudge) and judge.max_steps_per_call == 3
    assert judge.client.model == "judge-model" and "127.0.0.1:9" in judge.client.url


def test_bad_values_of_the_new_keys_are_refused() -> None:
    for override in ("env.train_instances_per_task=0", "trainer.total_env_steps=-5",
                     "actor_rollout_ref.actor.target_kl=0", "actor_rollout_ref.actor.entropy_coef=-1",
                     "actor_rollout_ref.actor.ppo_max_answer_tokens=0"):
        with pytest.raises(ValueError):
            check_config(load_config(overrides=[*FAKE, override]))


def test_the_micro_batch_budget_reaches_the_ppo_update() -> None:
    assert ppo_config(load_config(overrides=FAKE)).max_answer_tokens is None  # as shipped: one piece
    cfg = load_config(overrides=[*FAKE, "actor_rollout_ref.actor.ppo_max_answer_tokens=256"])
    check_config(cfg)
    assert ppo_config(cfg).max_answer_tokens == 256


# --------------------------------------------------------------------------------------------------
# A policy that writes tokens: the token-level path of the trainer
# --------------------------------------------------------------------------------------------------

def test_a_token_policy_trains_per_token_and_learns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[TokenFormPolicy] = []

    def token_policy(seed: int = 0, **_options: Any) -> TokenFormPolicy:
        built.append(TokenFormPolicy(seed=seed))
        return built[-1]

    monkeypatch.setitem(POLICIES.entries, "tiny-token-form", token_policy)
    summary, run = run_training(tmp_path, "actor_rollout_ref.model.name=tiny-token-form", "trainer.total_epochs=8",
                                "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum")
    assert summary["after"]["success"] > summary["before"]["success"] == 0.0
    steps = [s for t, _ in trajectories_and_rewards(run, 0) for s in t.steps]
    assert steps and all(len(s.info["token_log_probs"]) == 2 for s in steps)
    assert all(s.log_prob == pytest.approx(sum(s.info["token_log_probs"])) for s in steps)
    trajectories = [t for t, _ in trajectories_and_rewards(run, 0)]
    rewards = [r for _, r in trajectories_and_rewards(run, 0)]
    batch = build_samples(trajectories, rewards, "grpo_step")
    assert batch.samples and all(s.old_token_log_probs is not None and s.num_tokens == 2 for s in batch.samples)


def test_an_unknown_loss_agg_mode_is_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loss_agg_mode"):
        check_config(load_config(overrides=[*FAKE, "actor_rollout_ref.actor.loss_agg_mode=sum"]))


def test_an_epoch_without_one_usable_episode_stops_training_before_a_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # No browser can start: every episode is an env error. Checkpointing that epoch would skip it on resume.
    from admire.envs.base import EnvCrashed
    from admire.rl.evaluation import NoUsableEpisodes

    class NoBrowser(SeededFormEnv):
        def reset(self, task: Task) -> Observation:
            raise EnvCrashed("chromium did not start")

    monkeypatch.setitem(ENVS.entries, "fake-form", NoBrowser)
    with pytest.raises(NoUsableEpisodes, match=r"the evaluation before RL: all 4 episodes failed in their environment"):
        run_training(tmp_path)
    run = RunDir(tmp_path / "run")
    assert run.load_checkpoint() is None and not run.summary.exists()
    code = main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=cli", "trainer.threads=1"])
    err = capsys.readouterr().err
    assert code == 1 and "admire train: error: the evaluation before RL: all 4 episodes failed" in err
    assert "Traceback" not in err
    # Only the training episodes fail (the evaluation ran): the epoch is not checkpointed either.
    monkeypatch.setitem(ENVS.entries, "fake-form", SeededFormEnv)
    _, started = run_training(tmp_path, "trainer.total_epochs=0", name="started")
    monkeypatch.setitem(ENVS.entries, "fake-form", NoBrowser)
    with pytest.raises(NoUsableEpisodes, match=r"epoch 0: all 16 episodes failed in their environment"):
        train(load_config(overrides=FAKE), started, console=Console(quiet=True), encoder=TrigramEncoder())
    assert started.load_checkpoint()["state"]["epoch"] == 0  # still the start: epoch 0 was not checkpointed


def test_resuming_a_hostile_run_folder_sends_no_key_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # A folder someone hands you: its config sends $THEIR_PICK to their listener. Nothing may reach it.
    import socket
    import threading

    import yaml

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            received.append(connection.recv(4096))
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        assert main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=handed", "trainer.total_epochs=1"]) == 0
        config_path = tmp_path / "handed" / "config.yaml"
        config = yaml.safe_load(config_path.read_text())
        config["reward"]["mode"] = "judge"
        config["reward"]["judge"].update(base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
                                         api_key_env="THEIR_PICK")
        config_path.write_text(yaml.safe_dump(config))
        monkeypatch.setenv("THEIR_PICK", "s3cret-value")
        code = main(["train", f"resume={tmp_path / 'handed'}", "trainer.total_epochs=2"])
        err = capsys.readouterr().err
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert code == 2 and "a run folder does not choose where a key goes" in err
    assert "reward.judge.base_url=http://127.0.0.1:" in err and "reward.judge.api_key_env=THEIR_PICK" in err
    assert received == []


def test_the_final_evaluation_is_of_the_final_policy(tmp_path: Path) -> None:
    # Evaluated after epochs 2 and 4 of 5: the last policy is evaluated again at the end, not reported from
    # epoch 4's evaluation, and filed like any evaluation after the last epoch (eval_epoch_0005: after 5 epochs);
    # with an evaluation in the last epoch, that one is the final one.
    summary, run = run_training(tmp_path, "trainer.total_epochs=5", "trainer.eval_every=2")
    assert [p.name for p in sorted(run.trajectories.glob("eval_*.jsonl"))] == \
        ["eval_epoch_0000.jsonl", "eval_epoch_0002.jsonl", "eval_epoch_0004.jsonl", "eval_epoch_0005.jsonl"]
    final = run.read_trajectories("eval", 5)
    assert final is not None
    assert summary["after"]["success"] == pytest.approx(sum(t.outcome for t in final) / len(final))
    summary, run = run_training(tmp_path, "trainer.total_epochs=4", "trainer.eval_every=2", name="even")
    assert not run.trajectory_file("eval", 5).exists() and run.trajectory_file("eval", 4).exists()


def test_a_resume_refuses_a_hand_edited_experiment_key_and_accepts_the_unedited_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=r", "trainer.total_epochs=1"]) == 0
    config_path = tmp_path / "r" / "config.yaml"
    original = config_path.read_text()
    config = yaml.safe_load(original)
    config["milestone_reward"]["threshold"] = 0.5  # a hand edit of a key that defines the experiment
    config_path.write_text(yaml.safe_dump(config))
    metrics = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["train", f"resume={tmp_path / 'r'}", "trainer.total_epochs=2"]) == 2
    assert "milestone_reward.threshold: 0.75 -> 0.5" in capsys.readouterr().err
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == metrics
    assert not (tmp_path / "r" / "resumes.jsonl").exists()
    config_path.write_text(original)
    (tmp_path / "r" / "checkpoints" / ".latest.json.x1y2z3.tmp").write_text("{")  # a write a kill cut short
    assert main(["train", f"resume={tmp_path / 'r'}", "trainer.total_epochs=2"]) == 0
    assert not list((tmp_path / "r").rglob(".*.tmp"))


def test_admire_eval_with_no_usable_episode_is_one_line_and_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # It printed "average 0%" about no episode before, then a traceback.
    from admire.envs.base import EnvCrashed

    class NoBrowser(SeededFormEnv):
        def reset(self, task: Task) -> Observation:
            raise EnvCrashed("chromium did not start")

    assert main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=run", "trainer.total_epochs=1"]) == 0
    monkeypatch.setitem(ENVS.entries, "fake-form", NoBrowser)
    capsys.readouterr()
    code = main(["eval", "--checkpoint", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err, captured.err
    assert [line for line in captured.err.splitlines() if "error" in line] == [next(
        line for line in captured.err.splitlines() if line.startswith("admire eval: error: the evaluation"))]
    assert "average" not in captured.out


def test_an_update_that_leaves_weights_not_finite_stops_training_before_its_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    import admire.rl.trainer as trainer_module

    real_update = trainer_module.ppo_update
    updates = []

    def diverging_update(policy: Any, *args: Any, **kwargs: Any) -> dict[str, float]:
        result = real_update(policy, *args, **kwargs)
        updates.append(1)
        if len(updates) == 2:  # the second epoch's update diverges
            with torch.no_grad():
                next(iter(policy.parameters())).fill_(float("nan"))
        return result

    monkeypatch.setattr(trainer_module, "ppo_update", diverging_update)
    code = main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=d", "trainer.total_epochs=3"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "the update of epoch 1 (its checkpoint was not written) left the policy's weight" in err
    assert "NaN or infinity; training diverged" in err
    latest = json.loads((tmp_path / "d" / "checkpoints" / "latest.json").read_text())
    assert latest["epoch"] == 0  # epoch 0's checkpoint is the last one


def test_a_checkpoint_holding_nan_weights_is_refused_by_eval_and_by_resume(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from admire import checkpoints

    assert main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=n", "trainer.total_epochs=1"]) == 0
    run = RunDir(tmp_path / "n")
    state = run.load_checkpoint()
    assert state is not None
    name = next(k for k, v in state["policy"].items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    state["policy"][name] = torch.full_like(state["policy"][name], float("nan"))
    checkpoints.save(run.checkpoints, state, 0)
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run.path)]) == 2
    assert f"left the policy's weight {name!r} holding NaN or infinity" in capsys.readouterr().err
    assert main(["train", f"resume={run.path}", "trainer.total_epochs=2"]) == 2
    err = capsys.readouterr().err
    assert "holding NaN or infinity; no training can continue from it" in err and "Traceback" not in err


class Killed(BaseException):
    """Stands for a SIGKILL: nothing in the trainer handles it."""


def test_an_epoch_resumed_from_its_rollouts_goes_on_sampling_as_the_uninterrupted_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import admire.rl.trainer as trainer_module

    assert main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=whole", "trainer.total_epochs=3"]) == 0
    updates = {"n": 0}
    real_update = trainer_module.ppo_update

    def killed_in_the_second_update(*args: Any, **kwargs: Any) -> Any:
        updates["n"] += 1
        if updates["n"] == 2:  # epoch 1: its rollouts are written, its checkpoint is not
            raise Killed
        return real_update(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "ppo_update", killed_in_the_second_update)
    with pytest.raises(Killed):
        main(["train", *FAKE, f"run.dir={tmp_path}", "run.name=cut", "trainer.total_epochs=3"])
    monkeypatch.setattr(trainer_module, "ppo_update", real_update)
    cut, whole = RunDir(tmp_path / "cut"), RunDir(tmp_path / "whole")
    assert cut.load_checkpoint()["state"]["epoch"] == 1 and cut.read_trajectories("train", 1)  # type: ignore[index]
    rollout = cut.checkpoints / "rollout.safetensors"
    intact = rollout.read_bytes()
    # Unreadable states are refused before the resume writes anything, naming the file to delete.
    rollout.write_bytes(b"not tensors")
    metrics = cut.metrics.read_bytes()
    capsys.readouterr()
    assert main(["train", f"resume={cut.path}"]) == 2
    assert "rollout.* to resume without" in capsys.readouterr().err
    assert cut.metrics.read_bytes() == metrics and not (cut.path / "resumes.jsonl").exists()
    rollout.write_bytes(intact)
    assert main(["train", f"resume={cut.path}"]) == 0

    def texts(run: RunDir, epoch: int) -> list[list[str]]:
        return [[step.raw_output for step in t.steps] for t in run.read_trajectories("train", epoch) or []]

    assert [texts(cut, e) for e in range(3)] == [texts(whole, e) for e in range(3)]
    assert [r["env/steps"] for r in read_metrics(cut.metrics)] == [r["env/steps"] for r in read_metrics(whole.metrics)]
