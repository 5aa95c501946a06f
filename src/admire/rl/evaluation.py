"""Held-out evaluation and the warm start: what the trainer runs before RL, now and then during it, and after.

Evaluation is greedy on the suite's held-out seeds (``trainer.eval_split``: validation or test); the warm start
imitates oracle demonstrations of *other* tasks, the analogue of a pretrained base.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch

from admire.agent.base import Policy, scores_tokens
from admire.config_schema import TrainingConfig, WarmStartSection
from admire.envs.building import env_specs, make_envs
from admire.envs.suites import Suite, get_suite
from admire.progress import ProgressFn, TrainingProgress, counting
from admire.rl.builders import policy_from_checkpoint
from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.rl.shared_start import start_from_run
from admire.runs import RunDir
from admire.train_state import TrainState
from admire.types import Task, Trajectory


class NoUsableEpisodes(RuntimeError):
    """An epoch whose every episode was an environment error: training stops rather than checkpoint nothing."""


def no_usable_episodes(what: str, trajectories: Sequence[Trajectory], cfg: TrainingConfig,
                       run: RunDir | None) -> str:
    """The one-line error for a batch of episodes that all failed in their environment."""
    errors = sorted({str(t.info.get("env_error", "env error"))[:200] for t in trajectories})
    then = f", then `admire train resume={run.path}`" if run is not None else ""
    return (f"{what}: all {len(trajectories)} episodes failed in their environment ({'; '.join(errors[:3])}); "
            f"nothing was trained or checkpointed. Check the backend with "
            f"`python -m admire.envs.check_env {env_specs(cfg.env)[0]}`{then}")


def evaluate(
    policy: Policy, envs: Sequence[Any], suite: Suite, cfg: TrainingConfig, run: RunDir | None, *, epoch: int,
    stats: RolloutStats, progress: ProgressFn | None = None,
) -> dict[str, float]:
    """Greedy success on held-out seeds, per task and on average; trajectories kept in the run.
    ``progress(done, total)`` hears of every finished episode. No usable episode at all is
    ``NoUsableEpisodes``: a success rate of 0 would be a number about no episode."""
    tasks: list[Task] = suite.eval_tasks(cfg.trainer.eval_episodes, split=cfg.trainer.eval_split)
    with torch.no_grad():
        trajectories = collect(group_requests(tasks, 1), envs, policy, max_steps=int(cfg.env.max_steps),
                               greedy=True, epoch=max(epoch, 0), stats=stats,
                               keep_screenshots=cfg.env.screenshots,
                               on_episode=counting(progress, len(tasks)))
    if trajectories and all(t.excluded for t in trajectories):
        what = "the evaluation before RL" if epoch < 0 else f"the evaluation after epoch {epoch}"
        raise NoUsableEpisodes(no_usable_episodes(what, trajectories, cfg, run))
    if run is not None:
        run.write_trajectories("eval", epoch + 1, trajectories)
    per_task: dict[str, list[float]] = defaultdict(list)
    for trajectory in trajectories:
        if not trajectory.excluded:
            per_task[trajectory.task.name].append(trajectory.outcome)
    result = {f"success/{name}": float(np.mean(values)) for name, values in sorted(per_task.items())}
    result["success"] = float(np.mean([result[k] for k in result])) if result else 0.0
    return result


def evaluate_policy(cfg: TrainingConfig, policy: Any, *, progress: ProgressFn | None = None) -> dict[str, float]:
    """Greedy success of ``policy`` on held-out seeds of ``cfg.env.suite`` (browsers start here);
    ``progress(done, total)`` hears of every finished episode."""
    with ExitStack() as stack:
        envs = make_envs(cfg.env, stack)
        return evaluate(policy, envs, get_suite(cfg.env.suite), cfg, None, epoch=0, stats=RolloutStats(),
                        progress=progress)


def evaluate_checkpoint(cfg: TrainingConfig, checkpoint: Path, *,
                        progress: ProgressFn | None = None) -> dict[str, float]:
    """Load a policy from a checkpoint (or run directory) and evaluate it greedily on ``cfg.env.suite``."""
    return evaluate_policy(cfg, policy_from_checkpoint(cfg, checkpoint), progress=progress)


def warm_start(policy: Any, env: Any, suite: Suite, section: WarmStartSection, seed: int, *,
               progress: ProgressFn | None = None, answer_progress: ProgressFn | None = None) -> dict[str, float]:
    """Behaviour cloning on oracle demonstrations of tasks *outside* the training suite.

    The analogue of starting RL from a pretrained base model: the policy learns what forms and
    lists look like in general, never the tasks it is evaluated on (an overlap is refused).
    ``progress(done, total)`` hears of every recorded demonstration (the slow part: a browser plays each);
    ``answer_progress`` of every minibatch a token policy imitates (the slow part for a language model).
    """
    from admire.agent.pretrain import pretrain, record_oracle_demonstrations

    demo_suite = get_suite(section.suite)
    overlap = sorted(set(demo_suite.tasks) & set(suite.tasks))
    if overlap:
        raise ValueError(f"warm_start.suite {demo_suite.name!r} shares tasks with the training suite "
                         f"{suite.name!r} ({', '.join(overlap)}): demonstrations must come from other tasks")
    tasks = demo_suite.train_tasks(len(demo_suite.tasks) * int(section.episodes_per_task), epoch=0, seed=seed)
    demos = record_oracle_demonstrations(env, tasks, max_steps=int(section.max_steps),
                                         on_demonstration=counting(progress, len(tasks)))
    if scores_tokens(policy):  # a policy that writes tokens imitates whole answers
        from admire.agent.sft import pretrain_tokens

        metrics = pretrain_tokens(policy, demos, epochs=int(section.epochs), lr=float(section.lr), seed=seed,
                                  progress=answer_progress)
    else:
        metrics = pretrain(policy, demos, epochs=int(section.epochs), lr=float(section.lr), seed=seed)
    return {"demonstrations": len(demos), **{k: float(v) for k, v in metrics.items()}}


def start_of_rl(policy: Any, envs: Sequence[Any], suite: Suite, cfg: TrainingConfig, run: RunDir, rng: random.Random,
                state: TrainState, progress: TrainingProgress,
                on_warm_started: Callable[[TrainState], object] | None = None) -> TrainState:
    """The state RL starts from: another run's warm start and evaluation before RL
    (``actor_rollout_ref.warm_start.from_run``, its weights and random states loaded into ``policy`` and
    ``rng``), or this run's own warm start (when enabled, and not already in ``state``: a run resumed from
    its ``warm`` checkpoint) and evaluation before RL. ``on_warm_started(state)`` is called once a warm start
    is done, before the evaluation (the trainer checkpoints there)."""
    shared_start = cfg.actor_rollout_ref.warm_start.from_run
    if shared_start:
        progress.status(f"starting from {shared_start}: its warm start and its evaluation before RL")
        state = TrainState(**start_from_run(Path(str(shared_start)), policy, rng, run))
    elif cfg.actor_rollout_ref.warm_start.enable and state.warm_start is None:
        progress.status("warm start: behaviour cloning of oracle demonstrations on other tasks")
        state.warm_start = warm_start(policy, envs[0], suite, cfg.actor_rollout_ref.warm_start,
                                      seed=int(cfg.run.seed), progress=progress.counter("warm start: demonstration"),
                                      answer_progress=progress.counter("warm start: imitating, minibatch"))
        if on_warm_started is not None:
            on_warm_started(state)
    if state.baseline is None:
        progress.status("evaluating the policy before RL")
        state.baseline = evaluate(policy, envs, suite, cfg, run, epoch=-1, stats=RolloutStats(),
                                  progress=progress.counter("evaluating before RL: episode"))
    return state
