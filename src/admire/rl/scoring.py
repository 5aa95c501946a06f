"""The scoring step of a batch, in one place for every trainer: the milestone bank learns from the batch's
successes, then every step of the batch is scored (method.md §2, order within a batch).

The CPU trainer (``admire.rl.trainer.train``, its steps 2–3), the verl reward step
(``admire.integrations.verl.rewards``) and the TRL rollout (``admire.integrations.trl``) all score through
:class:`BatchScorer`, so the order, λ(epoch) and the matcher, generator and judge a config describes are the
same wherever a batch is scored, and :func:`reward_metrics` names the result alike in every run's logs.
Nothing here imports torch: a reward step on a driver process stays light.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from admire.config_files import plain
from admire.embeddings import Encoder, make_encoder
from admire.milestones.bank import BankMode, KeyKind, MilestoneBank, milestone_key
from admire.milestones.generator import MilestoneGenerator, UpdateRule, make_generator
from admire.milestones.matcher import Matcher
from admire.milestones.update import BankChange, update_bank
from admire.rewards import RewardConfig, StepJudge, score_batch
from admire.types import RewardBreakdown, Trajectory

if TYPE_CHECKING:
    from admire.config_schema import TrainingConfig


@dataclass(frozen=True)
class ScoredBatch:
    """What scoring a batch gave: the rewards, what it did to the bank, and what that cost."""

    rewards: list[list[RewardBreakdown]]
    """Per trajectory, aligned with the scored batch: one breakdown per step (``[]`` for an excluded one)."""
    changes: list[BankChange] = field(default_factory=list)
    """One per milestone key with a success in the batch (none when the config matches no milestones)."""
    seconds: float = 0.0
    """Wall time of the bank update and the scoring together (the trainer's ``time/milestone_s``)."""


@dataclass
class BatchScorer:
    """The bank update and the scoring of a batch, with the parts a config describes.

    ``update_before_reward`` (``milestone_reward.update_before_reward``) True: the bank learns from the batch's
    successes before the batch is scored, so a first success already pays its failed siblings; False: after
    (the batch is scored with the bank as it was). ``run`` is the bank's provenance (the run's name). The
    bank belongs to the caller, who opens, rolls back and closes it (its lifetime is the run's, not a
    batch's); the milestone key is the reward config's (``milestone_reward.key``).
    """

    bank: MilestoneBank
    reward: RewardConfig
    matcher: Matcher | None
    generator: MilestoneGenerator
    update_rule: UpdateRule = "common"
    update_before_reward: bool = True
    judge: StepJudge | None = None
    run: str = ""

    @classmethod
    def from_config(cls, cfg: TrainingConfig, bank: MilestoneBank, *, encoder: Encoder | None = None,
                    judge: StepJudge | None = None, generator: MilestoneGenerator | None = None,
                    run: str = "") -> BatchScorer:
        """The parts ``cfg`` (the project's config) describes: ``reward.*``, ``milestone_reward.*`` (the
        matcher over its ``encoder``, the generator Φ, ``update_rule`` and ``update_before_reward``),
        ``process_reward.*`` and, for ``reward.mode=judge``, the LLM judge of ``reward.judge``. ``encoder``,
        ``judge`` and ``generator`` replace the built ones (tests pass fakes)."""
        reward = RewardConfig.from_mapping(plain(cfg))
        if judge is None and reward.mode == "judge":
            judge = build_judge(cfg)
        return cls(bank=bank, reward=reward,
                   matcher=build_matcher(reward, encoder) if reward.matches_milestones else None,
                   generator=generator if generator is not None else build_generator(cfg),
                   update_rule=cast(UpdateRule, cfg.milestone_reward.update_rule),
                   update_before_reward=cfg.milestone_reward.update_before_reward, judge=judge, run=run)

    @property
    def key(self) -> str:
        """The milestone key the bank is read and written with (``milestone_reward.key``)."""
        return self.reward.milestone_key

    def score(self, trajectories: Sequence[Trajectory], epoch: int) -> ScoredBatch:
        """Update the bank from the batch's successes (before or after scoring, as configured), then score every
        step with λ(``epoch``); ``epoch`` is also the bank's provenance. Excluded trajectories (``env_error``)
        neither feed the bank nor get rewards."""
        started = time.perf_counter()
        usable = [t for t in trajectories if not t.excluded]
        changes: list[BankChange] = []
        if self.reward.matches_milestones and self.update_before_reward:
            changes = self._update(usable, epoch)
        rewards = score_batch(trajectories, self.bank, self.matcher, self.reward, epoch, judge=self.judge)
        if self.reward.matches_milestones and not self.update_before_reward:
            changes = self._update(usable, epoch)
        return ScoredBatch(rewards, changes, time.perf_counter() - started)

    def metrics(self, trajectories: Sequence[Trajectory], scored: ScoredBatch) -> dict[str, float]:
        """What a scored batch says, as floats under the CPU trainer's names: :func:`reward_metrics`
        (``trajectories`` is the batch ``score`` got), ``time/milestone_s`` and the judge's calls and failures."""
        usable = [t for t in trajectories if not t.excluded]
        metrics = {name: float(value) for name, value in reward_metrics(
            trajectories, scored.rewards, usable, self.bank, scored.changes, key=self.key).items()}
        metrics["time/milestone_s"] = scored.seconds
        metrics.update(judge_metrics(self.judge))
        return metrics

    def _update(self, usable: Sequence[Trajectory], epoch: int) -> list[BankChange]:
        return update_bank(self.bank, usable, self.generator, key=cast(KeyKind, self.key), rule=self.update_rule,
                           run=self.run, epoch=epoch)


def open_bank(cfg: TrainingConfig, path: str | Path) -> MilestoneBank:
    """The durable bank at ``path`` in ``milestone_reward.mode``; an empty one in static mode gets the fixed
    list of ``milestone_reward.static_path``, frozen (for a caller with no run directory, such as a TRL
    script; the CPU and verl trainers start and roll back their run's bank with its checkpoints)."""
    section = cfg.milestone_reward
    bank = MilestoneBank(path, mode=cast(BankMode, section.mode))
    if section.mode == "static" and section.static_path and not bank.keys():
        bank.import_json(section.static_path, freeze=True)
    return bank


def start_bank_afresh(cfg: TrainingConfig, bank: MilestoneBank) -> None:
    """A new run's bank: empty (a run killed before its first checkpoint starts afresh too) and, in static mode,
    holding ``milestone_reward.static_path``'s lists, frozen. The CPU trainer and the verl trainer start with it."""
    bank.rollback(0)
    section = cfg.milestone_reward
    if section.mode == "static" and section.static_path:
        bank.import_json(section.static_path, freeze=True)


# --------------------------------------------------------------------------------------------------
# The parts, built from the config
# --------------------------------------------------------------------------------------------------


def build_matcher(reward_cfg: RewardConfig, encoder: Encoder | None = None) -> Matcher:
    """The matcher of ``milestone_reward.matcher`` (grounded | sbert) over ``milestone_reward.encoder``."""
    return Matcher(encoder=encoder if encoder is not None else make_encoder(reward_cfg.encoder),
                   threshold=reward_cfg.threshold, mode=reward_cfg.matcher,
                   contrast_margin=reward_cfg.contrast_margin, prose_threshold=reward_cfg.prose_threshold)


def build_generator(cfg: TrainingConfig) -> MilestoneGenerator:
    """The milestone generator Φ of ``milestone_reward.generator``, with its options (the LLM endpoint of
    ``milestone_reward.llm``: ``base_url``, ``model``, ``api_key_env``…)."""
    section = cfg.milestone_reward
    options = plain(section.llm) if section.generator == "llm" else {}
    return make_generator(section.generator, **options)


def build_judge(cfg: TrainingConfig) -> StepJudge:
    """The LLM step judge of ``reward.mode=judge``, from the ``reward.judge`` section (any
    OpenAI-compatible endpoint: ``base_url``, ``model``, ``api_key_env``, ``timeout``, ``max_retries``,
    ``max_steps_per_call``)."""
    from admire.judge import LLMJudge

    return LLMJudge.from_config(judge_section(cfg))


def judge_section(cfg: TrainingConfig) -> dict[str, Any]:
    """``reward.judge`` as a dict, refused in one line when it names no endpoint (``check_config`` asks too,
    before a run directory is made)."""
    from admire.judge import judge_endpoint

    section = cfg.reward.judge
    return judge_endpoint(section.model_dump() if section is not None else None)


# --------------------------------------------------------------------------------------------------
# Metrics of a scored batch
# --------------------------------------------------------------------------------------------------


def reward_metrics(
    trajectories: Sequence[Trajectory], rewards: Sequence[Sequence[Any]], usable: Sequence[Trajectory],
    bank: MilestoneBank, changes: Sequence[Any], key: str,
) -> dict[str, float]:
    """A scored batch's episode, reward and milestone metrics (``train/*``, ``reward/*``, ``milestones/*``),
    under the same names wherever the batch was scored (the CPU loop, the verl reward step, the TRL rollout).
    ``trajectories`` is the whole batch, ``usable`` its non-excluded part; ``rewards`` may be aligned with
    either (an excluded trajectory's ``[]`` adds no step)."""
    steps = [b for breakdowns in rewards for b in breakdowns]
    per_task: dict[str, list[float]] = defaultdict(list)
    for trajectory in usable:
        per_task[trajectory.task.name].append(trajectory.outcome)
    keys_seen = {milestone_key(t, key=cast(KeyKind, key)) for t in usable}
    with_milestones = [b for b in steps if b.num_milestones > 0]
    metrics: dict[str, float] = {
        "train/success": float(np.mean([t.outcome for t in usable])) if usable else 0.0,
        "train/episodes": len(trajectories),
        "train/env_errors": sum(t.excluded for t in trajectories),
        "train/steps_per_episode": float(np.mean([len(t.steps) for t in usable])) if usable else 0.0,
        "train/format_valid": float(np.mean([s.format_valid for t in usable for s in t.steps])) if steps else 1.0,
        "reward/total": float(np.mean([b.total for b in steps])) if steps else 0.0,
        "reward/outcome": float(np.mean([b.outcome for b in steps])) if steps else 0.0,
        "reward/format": float(np.mean([b.format for b in steps])) if steps else 0.0,
        "reward/milestone": float(np.mean([b.milestone for b in steps])) if steps else 0.0,
        "reward/process": float(np.mean([b.process for b in steps])) if steps else 0.0,
        "reward/judge": float(np.mean([b.judge for b in steps])) if steps else 0.0,
        "milestones/coverage": bank.coverage(keys_seen),
        "milestones/hit_rate": (float(np.mean([b.hits / b.num_milestones for b in with_milestones]))
                                if with_milestones else 0.0),
        "milestones/updates": sum(1 for c in changes if c.changed),
        "milestones/bank_version": bank.version,
    }
    metrics.update({f"train/success/{name}": float(np.mean(v)) for name, v in sorted(per_task.items())})
    scored = zip(usable if len(rewards) == len(usable) else trajectories, rewards, strict=True)
    metrics.update(step_reward_gap([(t, list(b)) for t, b in scored if not t.excluded]))
    return metrics


def step_reward_gap(scored: Sequence[tuple[Trajectory, Sequence[Any]]]) -> dict[str, float]:
    """How well the step rewards tell a success from a failure (reward quality, logged every epoch).

    A trajectory's shaping is the mean over its steps of what the reward adds to the outcome (``total -
    outcome``: format, milestone or process, judge). ``reward/step_gap`` is the mean shaping of the batch's
    successes minus that of its failures; ``reward/step_gap_norm`` divides it by the standard deviation of the
    shaping over all of them, so rewards of different scales compare. Omitted when the batch lacks either
    outcome (nothing to tell apart)."""
    shaping = [(trajectory.success, float(np.mean([b.total - b.outcome for b in breakdowns])))
               for trajectory, breakdowns in scored if breakdowns]
    won = [value for success, value in shaping if success]
    lost = [value for success, value in shaping if not success]
    if not won or not lost:
        return {}
    gap = float(np.mean(won) - np.mean(lost))
    spread = float(np.std([value for _, value in shaping]))
    return {"reward/step_gap": gap, **({"reward/step_gap_norm": gap / spread} if spread > 0 else {})}


def judge_metrics(judge: StepJudge | None) -> dict[str, float]:
    """Calls and failures of an LLM judge, so a run whose judge kept failing (scores 0) says so."""
    if judge is None or not hasattr(judge, "failures"):
        return {}
    return {"judge/calls": float(getattr(judge, "calls", 0)), "judge/failures": float(judge.failures)}
