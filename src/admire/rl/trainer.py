"""The CPU training loop, top to bottom (in the manner of CleanRL's single-file algorithms).

for each epoch:  sample tasks (a recurring pool of instances per task) → roll out groups → update the
milestone bank from successes → rewards → advantages per group → PPO-clip update (stopped early at a KL
target) → (evaluate greedily on held-out seeds) → log → checkpoint; stop at ``trainer.total_epochs`` or
once ``trainer.total_env_steps`` env steps have been taken.

Everything a resumed run needs is in ``runs/<name>``: the checkpoint holds the policy, optimizer, RNG
states, the next epoch and the bank version; an epoch whose rollouts finished but whose update did not
is resumed from its written trajectories, so no finished trajectory is lost or duplicated, and from the
random states written with them (``checkpoints/rollout.*``), so the rest of the run samples what the
uninterrupted run would have.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, cast

import torch

from admire.agent.base import check_finite_weights, trainable_parameters
from admire.checkpoints import CheckpointError
from admire.config_files import plain
from admire.config_schema import TrainingConfig, experiment_values
from admire.embeddings import Encoder
from admire.envs.building import make_envs
from admire.envs.suites import get_suite
from admire.milestones.bank import BankMode, MilestoneBank, MilestoneBankError
from admire.progress import TrainingProgress, counting
from admire.report import plot_learning_curve
from admire.rewards import StepJudge
from admire.rl.builders import (
    check_config,
    configure_threads,
    initial_policy,
    reference_policy,
    seed_everything,
)
from admire.rl.evaluation import NoUsableEpisodes, evaluate, no_usable_episodes, start_of_rl
from admire.rl.ppo import ppo_update
from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.rl.samples import SampleBatch, build_samples
from admire.rl.scoring import BatchScorer, build_judge, start_bank_afresh
from admire.runs import RunDir
from admire.tracking import Tracker, read_metrics, truncate_metrics
from admire.train_state import TrainState, checkpoint_state, restore, restore_rollout_state, rollout_state

logger = logging.getLogger("admire.trainer")


def train(
    cfg: TrainingConfig, run: RunDir, *, console: Any = None, encoder: Encoder | None = None,
    judge: StepJudge | None = None, on_restored: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Train the policy described by ``cfg`` into ``run``; returns the summary (also in summary.json).

    ``encoder`` replaces the sentence encoder of the matcher and of the policy (tests pass a fake one;
    by default the matcher loads ``milestone_reward.encoder`` and the policy its own); ``judge`` replaces
    the LLM judge that ``reward.mode=judge`` builds from ``reward.judge``. Environments come from the
    backend registry (``env.src``), so a test registers a fake backend rather than passing one in.
    ``on_restored`` is called once the bank is open and the checkpoint (if any) restored, before the run
    folder is written to: a resume records itself there, so a resume that cannot start records nothing.
    """
    settings = check_config(cfg, judge_given=judge is not None)
    reward_cfg, loop, ppo_cfg = settings.reward, settings.loop, settings.ppo
    configure_threads(cfg.trainer.threads)
    seed_everything(int(cfg.run.seed))
    suite = get_suite(cfg.env.suite)
    policy = initial_policy(cfg, encoder=encoder)
    optimizer = torch.optim.Adam(trainable_parameters(policy), lr=float(cfg.actor_rollout_ref.actor.lr))
    reference = reference_policy(policy) if ppo_cfg.kl_coef > 0 else None
    update_rng = random.Random(int(cfg.run.seed))
    experiment = experiment_values(cfg)
    if judge is None and reward_cfg.mode == "judge":
        judge = build_judge(cfg)

    with ExitStack() as stack:
        try:
            bank = MilestoneBank(run.bank, mode=cast(BankMode, cfg.milestone_reward.mode))
        except MilestoneBankError as exc:
            raise CheckpointError(f"{exc}; put back a copy of the run's milestones.sqlite, or start a new run") \
                from None
        stack.callback(bank.close)
        scorer = BatchScorer.from_config(cfg, bank, encoder=encoder, judge=judge, run=run.path.name)
        envs = make_envs(cfg.env, stack)

        state = TrainState()
        checkpoint = run.load_checkpoint()
        if checkpoint is not None:
            state = restore(checkpoint, policy, optimizer, bank, update_rng)
            logger.info("resuming %s at epoch %d (bank version %d)", run.path, state.epoch, bank.version)
        else:
            start_bank_afresh(cfg, bank)
        if on_restored is not None:
            on_restored()
        truncate_metrics(run.metrics, before_step=state.epoch)
        tracker = Tracker(run.path, name=run.path.name, config=plain(cfg),
                          project=cfg.tracking.project,
                          tensorboard=bool(cfg.tracking.tensorboard), swanlab=cfg.tracking.swanlab,
                          wandb=cfg.tracking.wandb)
        stack.callback(tracker.close)
        progress = stack.enter_context(TrainingProgress(int(cfg.trainer.total_epochs), state.epoch, console,
                                                        status_file=run.status))
        max_steps = int(cfg.env.max_steps)
        started = time.perf_counter() - state.wall_s
        cpu_started = time.process_time() - state.cpu_s  # minutes of a core, whatever else shares the machine

        def clocked(reached: TrainState) -> TrainState:
            """``reached`` with this run's wall and CPU time so far."""
            reached.wall_s = time.perf_counter() - started
            reached.cpu_s = time.process_time() - cpu_started
            return reached

        def snapshot(reached: TrainState) -> dict[str, Any]:
            return checkpoint_state(policy, optimizer, bank, update_rng, clocked(reached), experiment)

        evaluation: dict[str, float] | None = None
        if state.baseline is None:  # before RL: a warm start (this run's or another's) and an evaluation
            state = start_of_rl(policy, envs, suite, cfg, run, update_rng, state, progress,
                                on_warm_started=lambda warm: run.save_warm_checkpoint(snapshot(warm)))
            run.save_start_checkpoint(snapshot(state))  # a resume, or another run (warm_start.from_run), starts here

        for epoch in range(state.epoch, int(cfg.trainer.total_epochs)):
            if loop.total_env_steps is not None and state.env_steps >= loop.total_env_steps:
                break  # the env-step budget is spent: runs compare at equal env steps
            epoch_started = time.perf_counter()
            # 1. Sample tasks and roll out one group of `rollout.n` episodes per task.
            stats = RolloutStats()
            phase_started = time.perf_counter()
            trajectories = run.read_trajectories("train", epoch)  # an interrupted epoch keeps its rollouts
            if trajectories is None:
                tasks = suite.train_tasks(int(cfg.trainer.tasks_per_epoch), epoch=epoch, seed=int(cfg.run.seed),
                                          instances_per_task=loop.instances_per_task)
                progress.status(f"epoch {epoch}: rolling out {len(tasks)} groups")
                requests = group_requests(tasks, int(cfg.actor_rollout_ref.rollout.n))
                trajectories = collect(requests, envs, policy, max_steps=max_steps, epoch=epoch, stats=stats,
                                       keep_screenshots=bool(cfg.env.screenshots),
                                       on_episode=counting(progress.counter(f"epoch {epoch}: rollout, episode"),
                                                           len(requests)))
                # The states first: written rollouts then always have theirs (a kill between the two
                # leaves no rollouts, and the epoch is rolled out again).
                run.save_rollout_state(rollout_state(policy, update_rng), epoch)
                run.write_trajectories("train", epoch, trajectories)
            else:  # its steps were taken before the interruption: count them, at no known rate
                stats.env_steps = sum(step.format_valid for t in trajectories for step in t.steps)
                saved = run.load_rollout_state(epoch)
                if saved is not None:  # sample on as the uninterrupted run did after these rollouts
                    restore_rollout_state(saved, policy, update_rng)
            rollout_s = time.perf_counter() - phase_started
            usable = [t for t in trajectories if not t.excluded]
            if trajectories and not usable:  # no browser started, or every one crashed: nothing to learn from
                raise NoUsableEpisodes(no_usable_episodes(f"epoch {epoch}", trajectories, cfg, run))

            # 2. Milestones: the bank is updated from this batch's successes *before* the batch is scored
            # (method.md §2, order; after it with milestone_reward.update_before_reward=false), then
            # 3. rewards for every step with λ(epoch), milestones looked up in the bank. Both happen in
            # BatchScorer.score (admire/rl/scoring.py), the step the verl and TRL paths call too.
            scored = scorer.score(usable, epoch)
            rewards = scored.rewards
            run.write_rewards("train", epoch, {t.id: r for t, r in zip(usable, rewards, strict=True)}, "trainer")
            # Then advantages per group.
            batch = build_samples(usable, rewards, cfg.algorithm.adv_estimator, filter_groups=loop.filter_groups,
                                  **loop.advantage_options)

            # 4. PPO-clip update (clip range and loss aggregation: actor_rollout_ref.actor.*).
            progress.status(f"epoch {epoch}: PPO update on {len(batch.samples)} samples")
            policy.train()
            phase_started = time.perf_counter()
            update = ppo_update(policy, optimizer, batch.samples, ppo_cfg, update_rng, reference=reference)
            check_finite_weights(policy, f"the update of epoch {epoch} (its checkpoint was not written)")
            policy.eval()
            # where an epoch's time goes: sampling and stepping the browsers, then the update
            timing = {"time/epoch_s": time.perf_counter() - epoch_started, "time/rollout_s": rollout_s,
                      "time/update_s": time.perf_counter() - phase_started}

            # 5. Evaluate on held-out seeds now and then.
            metrics = scorer.metrics(trajectories, scored)  # rewards, milestones, the judge: as verl and TRL log them
            metrics.update(epoch_metrics(stats, update, batch))
            metrics.update(timing)
            evaluation = None
            if int(cfg.trainer.eval_every) > 0 and (epoch + 1) % int(cfg.trainer.eval_every) == 0:
                progress.status(f"epoch {epoch}: evaluating")
                phase_started = time.perf_counter()
                evaluation = evaluate(policy, envs, suite, cfg, run, epoch=epoch, stats=RolloutStats(),
                                      progress=progress.counter(f"epoch {epoch}: evaluating, episode"))
                metrics.update({f"eval/{k}": v for k, v in evaluation.items()})
                metrics["time/eval_s"] = time.perf_counter() - phase_started

            # 6. Log and checkpoint.
            # Counted from the trajectories, so an epoch resumed from its written rollouts counts the same.
            state.epoch = epoch + 1
            state.env_steps += sum(step.format_valid for t in trajectories for step in t.steps)
            clocked(state)
            metrics.update({"env_steps_total": state.env_steps, "wall_s": state.wall_s})
            tracker.log(metrics, step=epoch)  # before the checkpoint: a resume truncates and redoes it
            run.save_checkpoint(checkpoint_state(policy, optimizer, bank, update_rng, state, experiment), epoch,
                                keep=int(cfg.trainer.keep_checkpoints))
            progress.advance(metrics)

        # The last epoch's evaluation, when it had one, is the final one: same policy, same seeds. With no
        # epoch run (a run that only makes a start for others), the policy is the one evaluated before RL.
        final = evaluation if state.epoch > 0 else state.baseline
        if final is None:
            progress.status("final evaluation")
            final = evaluate(policy, envs, suite, cfg, run, epoch=state.epoch - 1, stats=RolloutStats(),
                             progress=progress.counter("final evaluation: episode"))
        summary = {
            "run": run.path.name,
            "suite": suite.name,
            "reward_mode": reward_cfg.mode,
            "epochs": state.epoch,  # run, which is fewer than trainer.total_epochs when the env-step budget ran out
            "env_steps": state.env_steps,
            "wall_s": time.perf_counter() - started,
            "cpu_s": time.process_time() - cpu_started,
            "before": state.baseline,
            "warm_start": state.warm_start,
            "after": final,
            "bank_version": bank.version,
        }
        run.write_summary(summary)
        progress.status("finished")
        plot_learning_curve(read_metrics(run.metrics), run.report / "learning_curve.png")
    return summary


def epoch_metrics(stats: RolloutStats, update: dict[str, float], batch: SampleBatch) -> dict[str, float]:
    """What the rollouts, the advantage step and the PPO update say about an epoch."""
    metrics: dict[str, float] = {
        "env/steps": stats.env_steps,
        "env/steps_per_s": stats.steps_per_s,
        "env/reruns": stats.reruns,
        "ppo/loss": update["loss"],
        "ppo/clip_frac": update["clip_frac"],
        "ppo/approx_kl": update["approx_kl"],
        "ppo/ref_kl": update["ref_kl"],
        "ppo/entropy": update["entropy"],
        "ppo/grad_norm": update["grad_norm"],
        "ppo/epochs_run": update["epochs_run"],
        "ppo/steps_skipped": update["steps_skipped"],
        "ppo/backtracks": update["backtracks"],
        "ppo/samples": len(batch.samples),
        "adv/groups_dropped": batch.groups_dropped,
        "adv/nonzero_frac": batch.nonzero_frac,
    }
    if "scored_frac" in update:  # token level: the share of steps scored (a zero advantage teaches nothing)
        metrics["ppo/scored_frac"] = update["scored_frac"]
    return metrics
