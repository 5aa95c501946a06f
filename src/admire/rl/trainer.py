"""The CPU training loop, top to bottom (in the manner of CleanRL's single-file algorithms).

for each epoch:  sample tasks (a recurring pool of instances per task) → roll out groups → update the
milestone bank from successes → rewards → advantages per group → PPO-clip update (stopped early at a KL
target) → (evaluate greedily on held-out seeds) → log → checkpoint; stop at ``trainer.total_epochs`` or
once ``trainer.total_env_steps`` env steps have been taken.

Everything a resumed run needs is in ``runs/<name>``: the checkpoint holds the policy, optimizer, RNG
states, the next epoch and the bank version; an epoch whose rollouts finished but whose update did not
is resumed from its written trajectories, so no finished trajectory is lost or duplicated.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from admire.agent.base import (
    Decision,
    NonFiniteWeights,
    Policy,
    check_finite_weights,
    make_policy,
    trainable_parameters,
)
from admire.checkpoints import CheckpointError, check_weight_types
from admire.config import LEGACY_DEFAULTS
from admire.config_schema import experiment_values
from admire.embeddings import Encoder
from admire.envs.suites import Suite, get_suite
from admire.milestones.bank import MilestoneBank, MilestoneBankError
from admire.progress import ProgressFn, counting
from admire.report import plot_learning_curve
from admire.rewards import RewardConfig, StepJudge
from admire.rl.advantages import AdvantageResult, compute_advantages, group_samples
from admire.rl.ppo import PPOConfig, Sample, ppo_update
from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.rl.scoring import (
    BatchScorer,
    build_judge,
    judge_metrics,
    judge_section,
    reward_metrics,
    start_bank_afresh,
)
from admire.rl.shared_start import restore_rng, start_from_run
from admire.runs import RunDir
from admire.tracking import Tracker, read_metrics, truncate_metrics
from admire.types import Task, Trajectory

logger = logging.getLogger("admire.trainer")


class NoUsableEpisodes(RuntimeError):
    """An epoch whose every episode was an environment error: training stops rather than checkpoint nothing."""


def specs_of(cfg: DictConfig) -> str:
    return str(cfg.env.src[0] if OmegaConf.is_list(cfg.env.src) else cfg.env.src)


MAX_EPOCHS = 10_000_000
MAX_ENV_STEPS = 10**15
"""Bounds of a checkpoint's counters: far above any run, far below what would exhaust memory."""


@dataclass
class TrainState:
    """What a checkpoint restores besides the weights."""

    epoch: int = 0  # the next epoch to run
    env_steps: int = 0
    wall_s: float = 0.0
    baseline: dict[str, float] | None = None
    warm_start: dict[str, float] | None = None

    def __post_init__(self) -> None:
        """A checkpoint's state is checked before anything on disk follows it (the metrics file is cut at
        ``epoch``): a negative or absurd epoch or step count is a ``ValueError``."""
        for name, limit in (("epoch", MAX_EPOCHS), ("env_steps", MAX_ENV_STEPS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise ValueError(f"TrainState.{name} must be an integer in [0, {limit}], got {value!r}")
        if isinstance(self.wall_s, bool) or not isinstance(self.wall_s, int | float) or not (
                math.isfinite(self.wall_s) and self.wall_s >= 0):
            raise ValueError(f"TrainState.wall_s must be a finite number >= 0, got {self.wall_s!r}")


def train(
    cfg: DictConfig, run: RunDir, *, console: Any = None, encoder: Encoder | None = None,
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
    check_config(cfg, judge_given=judge is not None)
    configure_threads(cfg.trainer.threads)
    seed_everything(int(cfg.run.seed))
    suite = get_suite(cfg.env.suite)
    reward_cfg = RewardConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True))
    loop = LoopSettings.from_config(cfg)
    ppo_cfg = ppo_config(cfg)
    policy = build_policy(cfg, encoder=encoder)
    if cfg.actor_rollout_ref.model.path and not takes_path(str(cfg.actor_rollout_ref.model.name)):
        weights = load_policy_weights(Path(cfg.actor_rollout_ref.model.path))
        check_weight_types(policy.state_dict(), weights, cfg.actor_rollout_ref.model.path)
        policy.load_state_dict(weights)
        check_finite_weights(policy, f"the checkpoint {cfg.actor_rollout_ref.model.path}")
    optimizer = torch.optim.Adam(trainable_parameters(policy), lr=float(cfg.actor_rollout_ref.actor.lr))
    reference = reference_policy(policy) if ppo_cfg.kl_coef > 0 else None
    update_rng = random.Random(int(cfg.run.seed))
    experiment = experiment_values(cfg)
    if judge is None and reward_cfg.mode == "judge":
        judge = build_judge(cfg)

    with ExitStack() as stack:
        try:
            bank = MilestoneBank(run.bank, mode=cfg.milestone_reward.mode)
        except MilestoneBankError as exc:
            raise CheckpointError(f"{exc}; put back a copy of the run's milestones.sqlite, or start a new run") \
                from None
        stack.callback(bank.close)
        scorer = BatchScorer.from_config(cfg, bank, encoder=encoder, judge=judge, run=run.path.name)
        envs = make_envs(cfg, stack)

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
        tracker = Tracker(run.path, name=run.path.name, config=OmegaConf.to_container(cfg, resolve=True),
                          project=str(OmegaConf.select(cfg, "tracking.project", default="admire")),
                          tensorboard=bool(cfg.tracking.tensorboard), swanlab=cfg.tracking.swanlab,
                          wandb=cfg.tracking.wandb)
        stack.callback(tracker.close)
        progress = stack.enter_context(TrainingProgress(int(cfg.trainer.total_epochs), state.epoch, console))
        max_steps = int(cfg.env.max_steps)
        started = time.perf_counter() - state.wall_s

        evaluation: dict[str, float] | None = None
        shared_start = OmegaConf.select(cfg, "actor_rollout_ref.warm_start.from_run", default=None)
        if state.baseline is None and shared_start:
            progress.status(f"starting from {shared_start}: its warm start and its evaluation before RL")
            state = TrainState(**start_from_run(Path(str(shared_start)), policy, update_rng, run))
        elif state.baseline is None and cfg.actor_rollout_ref.warm_start.enable:
            progress.status("warm start: behaviour cloning of oracle demonstrations on other tasks")
            state.warm_start = warm_start(policy, envs[0], suite, cfg.actor_rollout_ref.warm_start,
                                          seed=int(cfg.run.seed),
                                          progress=progress.counter("warm start: demonstration"),
                                          answer_progress=progress.counter("warm start: imitating, minibatch"))
        if state.baseline is None:
            progress.status("evaluating the policy before RL")
            state.baseline = evaluate(policy, envs, suite, cfg, run, epoch=-1, stats=RolloutStats(),
                                      progress=progress.counter("evaluating before RL: episode"))
        if checkpoint is None:  # a resume, or another run (warm_start.from_run), starts from here
            run.save_start_checkpoint(checkpoint_state(policy, optimizer, bank, update_rng, state, experiment))

        for epoch in range(state.epoch, int(cfg.trainer.total_epochs)):
            if loop.total_env_steps is not None and state.env_steps >= loop.total_env_steps:
                break  # the env-step budget is spent: runs compare at equal env steps
            epoch_started = time.perf_counter()
            # 1. Sample tasks and roll out one group of `rollout.n` episodes per task.
            stats = RolloutStats()
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
                run.write_trajectories("train", epoch, trajectories)
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
            batch = build_samples(usable, rewards, cfg.algorithm.adv_estimator, **loop.advantage_options)

            # 4. PPO-clip update, aggregated as the estimator asks (DAPO: token mean).
            policy.train()
            update = ppo_update(policy, optimizer, batch.samples,
                                dataclasses.replace(ppo_cfg, loss_agg=ppo_cfg_loss_agg(cfg, batch.loss_agg)),
                                update_rng, reference=reference)
            check_finite_weights(policy, f"the update of epoch {epoch} (its checkpoint was not written)")
            policy.eval()
            timing = {"time/epoch_s": time.perf_counter() - epoch_started, "time/milestone_s": scored.seconds}

            # 5. Evaluate on held-out seeds now and then.
            metrics = epoch_metrics(trajectories, rewards, usable, stats, update, batch, bank, scored.changes,
                                    key=scorer.key)
            metrics.update(timing)
            metrics.update(judge_metrics(judge))
            evaluation = None
            if int(cfg.trainer.eval_every) > 0 and (epoch + 1) % int(cfg.trainer.eval_every) == 0:
                progress.status(f"epoch {epoch}: evaluating")
                evaluation = evaluate(policy, envs, suite, cfg, run, epoch=epoch, stats=RolloutStats(),
                                      progress=progress.counter(f"epoch {epoch}: evaluating, episode"))
                metrics.update({f"eval/{k}": v for k, v in evaluation.items()})

            # 6. Log and checkpoint.
            # Counted from the trajectories, so an epoch resumed from its written rollouts counts the same.
            state.epoch = epoch + 1
            state.env_steps += sum(step.format_valid for t in trajectories for step in t.steps)
            state.wall_s = time.perf_counter() - started
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
            "before": state.baseline,
            "warm_start": state.warm_start,
            "after": final,
            "bank_version": bank.version,
        }
        run.write_summary(summary)
        plot_learning_curve(read_metrics(run.metrics), run.report / "learning_curve.png")
    return summary


# --------------------------------------------------------------------------------------------------
# The pieces the loop calls
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopSettings:
    """The loop's keys added for issue 11, with the defaults a run started before them lacks (so an older
    run's ``config.yaml`` still resumes, and behaves as it did)."""

    instances_per_task: int | None = None
    total_env_steps: int | None = None
    advantage_options: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: DictConfig) -> LoopSettings:
        instances = _optional_int(cfg, "env.train_instances_per_task")
        budget = _optional_int(cfg, "trainer.total_env_steps")
        for key, value in (("env.train_instances_per_task", instances), ("trainer.total_env_steps", budget)):
            if value is not None and value < 1:
                raise ValueError(f"{key} must be a positive integer or null, got {value}")
        options = {"norm_by_std": bool(_legacy(cfg, "algorithm.norm_adv_by_std_in_grpo")),
                   "std_floor": float(_legacy(cfg, "algorithm.std_floor")),
                   "failed_baseline": str(_legacy(cfg, "algorithm.failed_group_baseline"))}
        return cls(instances_per_task=instances, total_env_steps=budget, advantage_options=options)


def check_config(cfg: DictConfig, *, judge_given: bool = False) -> None:
    """Refuse, with one line, what would only fail later in the run (``admire train`` calls it before it
    makes a run directory); ``judge_given``: a judge is passed in, so none needs configuring. The typed
    schema (``admire.config_schema``) checks every key first; the components' own checks follow."""
    from admire.config_schema import validate_config

    validate_config(cfg)
    RewardConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True))
    LoopSettings.from_config(cfg)
    ppo_config(cfg)
    model = OmegaConf.to_container(cfg.actor_rollout_ref.model, resolve=True)
    assert isinstance(model, dict)
    policy_options(str(model["name"]), {k: v for k, v in model.items() if k not in ("name", "path")})
    if not judge_given and str(OmegaConf.select(cfg, "reward.mode", default="admire")) == "judge":
        judge_section(cfg)
    specs = [str(spec) for spec in (cfg.env.src if OmegaConf.is_list(cfg.env.src) else [cfg.env.src])]
    if "android_world" in specs:  # adb, the launcher and one emulator per env, before a run dir is made
        counts = cfg.env.max_envs
        count = int(counts[specs.index("android_world")]) if OmegaConf.is_list(counts) else int(counts)
        _android_settings(cfg, count)


def ppo_config(cfg: DictConfig) -> PPOConfig:
    """``actor_rollout_ref.actor.*`` as a ``PPOConfig`` (``target_kl``, ``max_kl``, ``entropy_coef`` optional)."""
    actor = cfg.actor_rollout_ref.actor
    target_kl = _legacy(cfg, "actor_rollout_ref.actor.target_kl")
    max_kl = _legacy(cfg, "actor_rollout_ref.actor.max_kl")
    micro = _legacy(cfg, "actor_rollout_ref.actor.ppo_max_answer_tokens")
    return PPOConfig(
        epochs=int(actor.ppo_epochs),
        minibatch_size=int(actor.ppo_mini_batch_size),
        clip_low=float(actor.clip_ratio_low),
        clip_high=float(actor.clip_ratio_high),
        kl_coef=float(actor.kl_coef),
        max_grad_norm=float(actor.max_grad_norm),
        entropy_coef=float(_legacy(cfg, "actor_rollout_ref.actor.entropy_coef")),
        target_kl=None if target_kl is None else float(target_kl),
        max_kl=None if max_kl is None else float(max_kl),
        max_answer_tokens=None if micro is None else int(micro),
    )


def _legacy(cfg: DictConfig, key: str) -> Any:
    """``key``, or the value a run written before it existed behaved with (``config.LEGACY_DEFAULTS``)."""
    return OmegaConf.select(cfg, key, default=LEGACY_DEFAULTS[key])


def _optional_int(cfg: DictConfig, key: str) -> int | None:
    value = OmegaConf.select(cfg, key, default=None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be a positive integer or null, got {value!r}")
    return value


def evaluate_checkpoint(cfg: DictConfig, checkpoint: Path, *, progress: ProgressFn | None = None) -> dict[str, float]:
    """Load a policy from a checkpoint (or run directory) and evaluate it greedily on ``cfg.env.suite``."""
    return evaluate_policy(cfg, policy_from_checkpoint(cfg, checkpoint), progress=progress)


def policy_from_checkpoint(cfg: DictConfig, checkpoint: Path) -> Any:
    """The policy of ``cfg`` with the weights of ``checkpoint``, before any browser starts; an unreadable
    checkpoint or one for another policy is a one-line ``ValueError`` (``CheckpointError`` is one)."""
    configure_threads(cfg.trainer.threads)
    seed_everything(int(cfg.run.seed))
    weights = load_policy_weights(checkpoint)
    policy = build_policy(cfg)
    check_weight_types(policy.state_dict(), weights, checkpoint)
    try:
        policy.load_state_dict(weights)
        check_finite_weights(policy, f"the checkpoint {checkpoint}")
    except (RuntimeError, KeyError, TypeError) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{checkpoint}: its weights do not fit the policy {cfg.actor_rollout_ref.model.name!r} "
                         f"({detail}); evaluate it with its run's config (--checkpoint runs/<name>)") from None
    policy.eval()
    return policy


def evaluate_policy(cfg: DictConfig, policy: Any, *, progress: ProgressFn | None = None) -> dict[str, float]:
    """Greedy success of ``policy`` on held-out seeds of ``cfg.env.suite`` (browsers start here);
    ``progress(done, total)`` hears of every finished episode."""
    with ExitStack() as stack:
        envs = make_envs(cfg, stack)
        return evaluate(policy, envs, get_suite(cfg.env.suite), cfg, None, epoch=0, stats=RolloutStats(),
                        progress=progress)


def warm_start(policy: Any, env: Any, suite: Suite, section: DictConfig, seed: int, *,
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
    if hasattr(policy, "token_log_probs"):  # a policy that writes tokens imitates whole answers
        from admire.agent.sft import pretrain_tokens

        metrics = pretrain_tokens(policy, demos, epochs=int(section.epochs), lr=float(section.lr), seed=seed,
                                  progress=answer_progress)
    else:
        metrics = pretrain(policy, demos, epochs=int(section.epochs), lr=float(section.lr), seed=seed)
    return {"demonstrations": len(demos), **{k: float(v) for k, v in metrics.items()}}


def build_policy(cfg: DictConfig, encoder: Encoder | None = None) -> Any:
    """The policy ``actor_rollout_ref.model.name`` with the other keys of that section as its options
    (and ``encoder``, when given, as the sentence encoder of a policy that takes one).

    ``model.path`` goes to a policy whose factory takes a ``path`` (``lm``: a local Hugging Face
    directory, verl's meaning of the key); for one that does not (``dom``) it names a checkpoint whose
    weights the trainer loads into it."""
    model = OmegaConf.to_container(cfg.actor_rollout_ref.model, resolve=True)
    assert isinstance(model, dict)
    name = str(model["name"])
    options = policy_options(name, {k: v for k, v in model.items() if k not in ("name", "path")})
    if takes_path(name) and model.get("path"):
        options["path"] = str(model["path"])
    if encoder is not None:
        options["encoder"] = encoder
    return make_policy(name, seed=int(cfg.run.seed), **options)


def policy_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` the policy ``name`` takes. The shipped config's model section holds the ``dom`` policy's
    keys (``hidden_size``, ``prior_strength``, ``encoder``): for a policy that does not take one, a key left
    at its shipped value is dropped; one set to anything else is an error naming the policy's options."""
    from admire.config import load_config

    parameters = _factory_parameters(name)
    if parameters is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(options)
    shipped = OmegaConf.to_container(load_config().actor_rollout_ref.model, resolve=True)
    assert isinstance(shipped, dict)
    taken = {k: v for k, v in options.items() if k in parameters}
    foreign = sorted(k for k, v in options.items() if k not in parameters and shipped.get(k, object()) != v)
    if foreign:
        known = ", ".join(p for p in parameters if p not in ("seed", "path", "encoder"))
        raise ValueError(f"actor_rollout_ref.model.{foreign[0]} is not an option of the {name!r} policy; "
                         f"its options: {known}")
    return taken


def takes_path(name: str) -> bool:
    """Whether the policy ``name``'s factory takes ``path`` (a model directory) itself."""
    return "path" in (_factory_parameters(name) or {})


def _factory_parameters(name: str) -> Mapping[str, inspect.Parameter] | None:
    """The parameters of the policy ``name``'s factory; None when its signature cannot be read."""
    from admire.agent.base import POLICIES

    try:
        return inspect.signature(POLICIES.lookup(name)).parameters
    except (TypeError, ValueError):
        return None


class _ReferenceView:
    """The reference model of a policy that keeps it inside itself (LoRA: the adapter switched off),
    seen as a policy: its log-probs are the policy's under ``policy.reference()``."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        with self.policy.reference():
            return self.policy.log_prob(decisions)

    def token_log_probs(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        with self.policy.reference():
            return self.policy.token_log_probs(decisions)


def reference_policy(policy: Any) -> Any:
    """The frozen policy the KL term pulls toward: the policy's own ``reference()`` when it has one (no
    copy of a language model's weights), else a deep copy taken now."""
    return _ReferenceView(policy) if callable(getattr(policy, "reference", None)) else copy.deepcopy(policy)


LOSS_AGG_MODES: dict[str, str] = {
    "token-mean": "token_mean", "seq-mean-token-mean": "seq_mean", "seq-mean-token-sum": "seq_mean_token_sum",
}
"""verl's ``actor.loss_agg_mode`` names → ``ppo_update``'s ``loss_agg``."""


def ppo_cfg_loss_agg(cfg: DictConfig, hint: str) -> str:
    """``actor_rollout_ref.actor.loss_agg_mode`` when set (verl's names), else the estimator's hint
    (``dapo_step``: token mean; the others: each step's tokens averaged, then the steps)."""
    mode = _legacy(cfg, "actor_rollout_ref.actor.loss_agg_mode")
    return hint if mode is None else LOSS_AGG_MODES[str(mode)]


def make_envs(cfg: DictConfig, stack: ExitStack) -> list[Any]:
    """The environments of every backend in ``env.src``, closed when ``stack`` unwinds.

    ``env.max_envs`` gives one count per backend (``env.src=[miniwob, remote:http://host:8765]
    env.max_envs=[4, 16]``: 4 local browsers and 16 devices of that server); a single number applies to
    each backend. Every backend must run the suite's tasks: rollouts hand any task to any env. The envs
    run where ``env.executor`` says (``local``, ``ray`` …, :mod:`admire.envs.executors`), with the
    executor's own section (``env.ray``) as its settings. ``env.miniwob`` (the settle mode and its bounds)
    goes to the ``miniwob`` backend, wherever it runs; an ``admire serve`` sets its devices' own.
    """
    from admire.envs.executors import get_executor

    options = {"max_steps": int(cfg.env.max_steps), "screenshots": bool(cfg.env.screenshots)}
    name = str(cfg.env.get("executor", "local"))
    executor = get_executor(name)
    section = cfg.env.get(name) if name != "local" else None
    settings = OmegaConf.to_container(section, resolve=True) if section is not None else None
    specs = [str(spec) for spec in (cfg.env.src if OmegaConf.is_list(cfg.env.src) else [cfg.env.src])]
    counts = cfg.env.max_envs
    counts = [int(n) for n in counts] if OmegaConf.is_list(counts) else [int(counts)] * len(specs)
    if len(counts) != len(specs):
        raise ValueError(f"env.max_envs has {len(counts)} count(s) but env.src has {len(specs)} backend(s); "
                         "give one count per backend")
    miniwob = cfg.env.get("miniwob")
    miniwob_options = OmegaConf.to_container(miniwob, resolve=True) if miniwob is not None else {}
    assert isinstance(miniwob_options, dict)
    envs = []
    for spec, count in zip(specs, counts, strict=True):
        build = executor(spec, settings, **options, **(miniwob_options if spec == "miniwob" else {}))
        if spec == "android_world":  # each env takes an emulator of env.android_world's port ranges
            build = _android_factory(cfg, count, options)
        for _ in range(count):
            env = build()
            stack.callback(env.close)
            envs.append(env)
    return envs


def _android_settings(cfg: DictConfig, count: int) -> Any:
    """``env.android_world`` checked for ``count`` envs, one emulator each (docs/android.md)."""
    from admire.envs.android_devices import CONFIG_NAMES, AndroidSettings

    section = cfg.env.get("android_world")
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    assert isinstance(values, dict)
    return AndroidSettings.parse(devices=count, names=CONFIG_NAMES, **values)


def _android_factory(cfg: DictConfig, count: int, options: dict[str, Any]) -> Any:
    """A factory of AndroidWorld envs, each taking the next free emulator of ``env.android_world``."""
    from admire.envs.base import make_env

    settings = _android_settings(cfg, count)
    return settings.factory(lambda **device: make_env("android_world", **options, **device))


@dataclass(frozen=True)
class SampleBatch:
    """An epoch's PPO samples and what the advantage step says about them."""

    samples: list[Sample]
    groups: int
    groups_dropped: int
    loss_agg: str
    nonzero_frac: float
    """Effective sample utilisation: the share of the batch's trainable steps (those with a log-prob, in
    kept *and* dropped groups) whose advantage is non-zero, |A| > 1e-8; a dropped group counts as zeros."""


def build_samples(
    trajectories: Sequence[Trajectory], rewards: Sequence[Sequence[Any]], estimator: str, **options: Any
) -> SampleBatch:
    """PPO samples from scored trajectories, with advantages computed per group.

    A group is one task instance rolled out ``rollout.n`` times: keyed by (task, seed, group index), so
    two instances of a task never share a baseline, nor do two groups of the same recurring instance
    drawn in one epoch. ``options`` go to the estimator (``norm_by_std``, ``std_floor``, ``failed_baseline``). The
    estimator's hints are honoured: a group it does not keep (DAPO's dynamic sampling) gives no
    samples, and its clip range goes with each of its samples where it departs from the neutral default
    (DAPO's clip-higher; otherwise ``actor.clip_ratio_*`` apply).
    """
    groups: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for i, trajectory in enumerate(trajectories):
        groups[(trajectory.task.name, trajectory.task.seed, trajectory.group)].append(i)
    samples: list[Sample] = []
    dropped = trainable = nonzero = 0
    aggregations: set[str] = set()
    for members in groups.values():
        result = compute_advantages(estimator, group_samples([trajectories[i] for i in members],
                                                             [rewards[i] for i in members]), **options)
        if not result.keep:
            dropped += 1
            trainable += sum(s.log_prob is not None for i in members for s in trajectories[i].steps)
            continue
        aggregations.add(result.loss_agg)
        clip_low, clip_high = _clip_hint(result, "clip_low"), _clip_hint(result, "clip_high")
        for i, advantages in zip(members, result.advantages, strict=True):
            if advantages is None:
                continue
            trajectory = trajectories[i]
            for step, advantage in zip(trajectory.steps, advantages, strict=True):
                if step.log_prob is None:
                    continue
                trainable += 1
                nonzero += abs(advantage) > 1e-8
                history = trajectory.steps[: step.index]
                tokens = step.info.get("token_log_probs")  # a token policy's per-token log-probs
                samples.append(Sample(Decision(step.observation, tuple(history), step.raw_output),
                                      old_log_prob=step.log_prob, advantage=advantage,
                                      clip_low=clip_low, clip_high=clip_high,
                                      num_tokens=len(tokens) if tokens else 1,
                                      old_token_log_probs=tuple(float(t) for t in tokens) if tokens else None))
    if len(aggregations) > 1:
        raise ValueError(f"advantage estimator {estimator!r} asked for several loss aggregations in one batch: "
                         f"{sorted(aggregations)}")
    return SampleBatch(samples, groups=len(groups), groups_dropped=dropped,
                       loss_agg=aggregations.pop() if aggregations else "seq_mean",
                       nonzero_frac=nonzero / trainable if trainable else 0.0)


_NEUTRAL_CLIP = {f.name: f.default for f in dataclasses.fields(AdvantageResult) if f.name.startswith("clip_")}


def _clip_hint(result: AdvantageResult, name: str) -> float | None:
    """The estimator's clip bound when it asks for a specific one, else None (the config's bound)."""
    value = getattr(result, name)
    return None if value == _NEUTRAL_CLIP[name] else float(value)


def no_usable_episodes(what: str, trajectories: Sequence[Trajectory], cfg: DictConfig, run: RunDir | None) -> str:
    """The one-line error for a batch of episodes that all failed in their environment."""
    errors = sorted({str(t.info.get("env_error", "env error"))[:200] for t in trajectories})
    then = f", then `admire train resume={run.path}`" if run is not None else ""
    return (f"{what}: all {len(trajectories)} episodes failed in their environment ({'; '.join(errors[:3])}); "
            f"nothing was trained or checkpointed. Check the backend with "
            f"`python -m admire.envs.check_env {specs_of(cfg)}`{then}")


def evaluate(
    policy: Policy, envs: Sequence[Any], suite: Suite, cfg: DictConfig, run: RunDir | None, *, epoch: int,
    stats: RolloutStats, progress: ProgressFn | None = None,
) -> dict[str, float]:
    """Greedy success on held-out seeds, per task and on average; trajectories kept in the run.
    ``progress(done, total)`` hears of every finished episode. No usable episode at all is
    ``NoUsableEpisodes``: a success rate of 0 would be a number about no episode."""
    tasks: list[Task] = suite.eval_tasks(int(cfg.trainer.eval_episodes),
                                         split=OmegaConf.select(cfg, "trainer.eval_split", default="test"))
    with torch.no_grad():
        trajectories = collect(group_requests(tasks, 1), envs, policy, max_steps=int(cfg.env.max_steps),
                               greedy=True, epoch=max(epoch, 0), stats=stats,
                               keep_screenshots=bool(cfg.env.get("screenshots", False)),
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


def epoch_metrics(
    trajectories: Sequence[Trajectory], rewards: Sequence[Sequence[Any]], usable: Sequence[Trajectory],
    stats: RolloutStats, update: dict[str, float], batch: SampleBatch, bank: MilestoneBank,
    changes: Sequence[Any], key: str,
) -> dict[str, float]:
    metrics = reward_metrics(trajectories, rewards, usable, bank, changes, key=key)
    metrics.update({
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
    })
    if "scored_frac" in update:  # token level: the share of steps scored (a zero advantage teaches nothing)
        metrics["ppo/scored_frac"] = update["scored_frac"]
    return metrics


def checkpoint_state(
    policy: Policy, optimizer: torch.optim.Optimizer, bank: MilestoneBank, rng: random.Random, state: TrainState,
    experiment: dict[str, Any],
) -> dict[str, Any]:
    """Everything a resumed run needs, as tensors and plain data: ``admire.checkpoints`` stores the tensors
    as safetensors and the rest (RNG tuples, numpy state, param groups, TrainState) as JSON. ``experiment``
    (``config_schema.experiment_values``) lets a resume see hand edits of ``config.yaml``."""
    return {
        "experiment": experiment,
        "policy": policy.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                "update": rng.getstate()},
        "bank_version": bank.version,
        "bank_identity": bank.identity,
        "state": state.__dict__.copy(),
    }


def restore(
    checkpoint: dict[str, Any], policy: Policy, optimizer: torch.optim.Optimizer, bank: MilestoneBank,
    rng: random.Random,
) -> TrainState:
    """Put everything back as ``checkpoint_state`` took it; a checkpoint that does not fit this policy,
    optimizer or TrainState is a ``CheckpointError`` (one line) before anything is changed on disk."""
    try:
        state = TrainState(**checkpoint["state"])
        version = int(checkpoint["bank_version"])
        identity = checkpoint.get("bank_identity")  # absent from checkpoints written before banks had one
        if identity is not None and identity != bank.identity:
            raise CheckpointError("the run's milestones.sqlite is not the bank the checkpoint was trained with "
                                  "(replaced since by another run's); put the run's own bank back, or start a "
                                  "new run")
        if not 0 <= version <= bank.version:
            raise CheckpointError(f"the checkpoint was taken at milestone bank version {version} but the run's bank "
                                  f"is at version {bank.version} (deleted or replaced since); put the run's "
                                  "milestones.sqlite back, or start a new run")
        check_weight_types(policy.state_dict(), checkpoint["policy"], "the checkpoint")
        policy.load_state_dict(checkpoint["policy"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        restore_rng(checkpoint["rng"], rng)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(f"the checkpoint does not fit this run's policy or trainer ({detail}); resume it "
                              "with the config it was trained with") from None
    try:
        check_finite_weights(policy, "the checkpoint")
    except NonFiniteWeights as exc:
        raise CheckpointError(f"{exc}; no training can continue from it: start a new run") from None
    try:
        bank.rollback(version)  # drop lists written after the checkpoint
    except MilestoneBankError as exc:
        raise CheckpointError(f"{exc}; put back a copy of the run's milestones.sqlite, or start a new run") from None
    return state


def load_policy_weights(path: Path) -> dict[str, Any]:
    """The policy's weights from a run directory (its latest checkpoint), its ``checkpoints/`` folder,
    ``latest.json`` or one entry (``epoch_XXXX.json`` / ``.safetensors``); never from a pickle: an old
    ``.pt`` is a ``CheckpointError`` naming the converter (``admire.checkpoints``)."""
    from admire.checkpoints import load_policy

    return load_policy(path)


def configure_threads(setting: Any) -> int:
    """One torch thread on small machines: two threads under load measured 30× slower on 2 cores."""
    threads = 1 if setting in (None, "auto") and (os.cpu_count() or 1) <= 4 else setting
    threads = int(threads) if threads not in (None, "auto") else max(1, (os.cpu_count() or 1) // 2)
    torch.set_num_threads(threads)
    return threads


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class TrainingProgress:
    """A rich progress bar over epochs with ETA and the live training success rate."""

    def __init__(self, total: int, completed: int, console: Any = None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]epoch {task.completed}/{task.total}"), BarColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console,
            transient=False,
        )
        self._task = self._progress.add_task("train", total=total, completed=completed, info="starting")

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def status(self, text: str) -> None:
        self._progress.update(self._task, info=text)

    def counter(self, label: str) -> ProgressFn:
        """A ``progress(done, total)`` that shows ``<label> done/total`` as the bar's status."""
        return lambda done, total: self.status(f"{label} {done}/{total}")

    def advance(self, metrics: dict[str, float]) -> None:
        info = (f"success {metrics['train/success']:.0%}  milestone {metrics['reward/milestone']:+.3f}  "
                f"{metrics['env/steps_per_s']:.1f} steps/s")
        if "eval/success" in metrics:
            info += f"  eval {metrics['eval/success']:.0%}"
        self._progress.update(self._task, advance=1, info=info)
