"""ADMIRE's per-step rewards for a verl batch of stepwise samples, with the milestone bank on the driver.

verl 0.9.1's reward managers (``verl.experimental.reward_loop``) run one trajectory at a time inside
``RewardLoopWorker`` Ray actors; the bank is a single SQLite file that must be updated from a batch's
successes *before* that batch is scored (method.md §2, the CPU trainer's step 2), so ADMIRE's scoring is
a batch-level step that the driver runs: ``AdmireStepRewards``, called by the ``admire_step`` trainer
(``admire.integrations.verl.trainer``) on the whole batch. It rebuilds each episode from its rows (the
shared contract: ``admire_trajectory`` JSON on the last step of each ``admire_traj_id``), scores them with the
CPU trainer's own step (``admire.rl.scoring.BatchScorer``: bank update, then ``score_batch``) and puts each
step's R_total on the last response token of that step's row.

A step whose response has no trainable token (the agent loop's filler for an empty answer) keeps its
R_total in column 0 of its row, so the estimators' group statistics still count it, as the CPU path counts
every step; it gets no gradient (``response_mask`` is 0 there). Excluded rows get 0 and no part in anything.

Nothing is registered in verl's reward-loop registry: verl asks a reward manager only for an episode whose
final output has no ``reward_score`` (``AgentLoopWorker._compute_score``), and the ``admire_gui`` agent loop
gives every output one, so that per-episode path never runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admire.extras import require

require("verl", "torch", extra="verl", feature="the verl reward step")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402

from admire.config_schema import TrainingConfig, validate_config  # noqa: E402
from admire.embeddings import Encoder  # noqa: E402
from admire.milestones.bank import MilestoneBank  # noqa: E402
from admire.milestones.generator import MilestoneGenerator  # noqa: E402
from admire.rewards import StepJudge  # noqa: E402
from admire.rl.scoring import BatchScorer, ScoredBatch, start_bank_afresh  # noqa: E402
from admire.runs import RunDir  # noqa: E402
from admire.types import Trajectory  # noqa: E402

LOOP_KEYS: tuple[str, ...] = ("run_dir", "max_reruns")
"""Keys of verl's ``admire`` section that are not the project's config: where the run lives and the agent
loop's own setting (``admire.integrations.verl.agent_loop``)."""
STEP_FIELDS: tuple[str, ...] = ("uid", "admire_traj_id", "admire_step", "admire_num_steps", "admire_excluded",
                                "admire_trajectory")
"""The non-tensor fields of a stepwise sample this step reads (its contract with the agent loop and trainer)."""
BANK_VERSIONS_FILE = "verl_bank_versions.json"
"""In the run directory: the bank version at each verl checkpoint (global step → version), so that a
resumed run drops the lists written after its checkpoint, as the CPU trainer's ``restore`` does."""


@dataclass(frozen=True)
class StepRows:
    """A batch's rows seen as episodes: which trajectory and step each row is, and which rows get nothing."""

    trajectories: list[Trajectory]
    """One per ``admire_traj_id`` that carries its ``admire_trajectory`` JSON, in the order of first rows."""
    row_trajectory: np.ndarray
    """Per row: the index into ``trajectories``, or -1 for an excluded episode whose JSON is absent."""
    row_step: np.ndarray
    excluded: np.ndarray
    """Per row: the episode is excluded (its row flag, or an ``env_error`` termination): no reward, no gradient."""
    episodes: int
    excluded_episodes: int

    @classmethod
    def from_data(cls, data: DataProto) -> StepRows:
        """Check the rows against the contract and rebuild their episodes; a broken contract is one line."""
        missing = [name for name in STEP_FIELDS if name not in data.non_tensor_batch]
        if missing:
            raise ValueError(f"the batch lacks the stepwise fields {', '.join(missing)}: build it with the admire "
                             "agent loop (admire.integrations.verl.agent_loop) or samples.to_data_proto")
        fields = data.non_tensor_batch
        ids = [str(value) for value in fields["admire_traj_id"]]
        steps = np.asarray([int(value) for value in fields["admire_step"]], dtype=np.int64)
        flagged = np.asarray([bool(value) for value in fields["admire_excluded"]], dtype=bool)
        order = list(dict.fromkeys(ids))
        parsed: dict[str, Trajectory] = {}
        for i, text in enumerate(fields["admire_trajectory"]):
            if text is None or (isinstance(text, float) and np.isnan(text)):
                continue
            if ids[i] in parsed:
                raise ValueError(f"trajectory {ids[i]!r} carries admire_trajectory on two rows; only its last "
                                 "step may (admire_step == admire_num_steps - 1)")
            parsed[ids[i]] = Trajectory.from_json(text)
        excluded_ids = {tid for tid, flag in zip(ids, flagged, strict=True) if flag}
        excluded_ids |= {tid for tid, trajectory in parsed.items() if trajectory.excluded}
        lost = [tid for tid in order if tid not in parsed and tid not in excluded_ids]
        if lost:
            raise ValueError(f"trajectory {lost[0]!r} has no row with admire_trajectory: its last step must carry "
                             "the episode's JSON, or the episode must be flagged admire_excluded")
        trajectories = [parsed[tid] for tid in order if tid in parsed]
        position = {trajectory.id: k for k, trajectory in enumerate(trajectories)}
        for tid, trajectory in parsed.items():
            if trajectory.id != tid:
                raise ValueError(f"the row of trajectory {tid!r} carries the JSON of trajectory {trajectory.id!r}")
        row_trajectory = np.asarray([position.get(tid, -1) for tid in ids], dtype=np.int64)
        excluded = np.asarray([tid in excluded_ids for tid in ids], dtype=bool)
        seen: set[tuple[str, int]] = set()
        for i, tid in enumerate(ids):
            if (tid, int(steps[i])) in seen:
                raise ValueError(f"step {steps[i]} of trajectory {tid!r} is on two rows (verl's padding rows, "
                                 "tags is_padding, must be dropped before scoring)")
            seen.add((tid, int(steps[i])))
            if not excluded[i] and not 0 <= steps[i] < len(trajectories[row_trajectory[i]].steps):
                raise ValueError(f"row {i} is step {steps[i]} of trajectory {tid!r}, which has "
                                 f"{len(trajectories[row_trajectory[i]].steps)} steps")
        return cls(trajectories, row_trajectory, steps, excluded, episodes=len(order),
                   excluded_episodes=len(set(order) & excluded_ids))

    @property
    def usable(self) -> list[Trajectory]:
        """The episodes that are scored and may enter the bank, in batch order."""
        dropped = {int(k) for k in self.row_trajectory[self.excluded] if k >= 0}
        return [t for k, t in enumerate(self.trajectories) if k not in dropped]


@dataclass(frozen=True)
class StepScores:
    """What the reward step gives the advantage step."""

    token_level_rewards: torch.Tensor
    """(rows, response length): the step's R_total on its last response token, 0 elsewhere and on excluded rows."""
    step_rewards: np.ndarray
    """Per row: R_total of its step (0 for excluded rows)."""
    outcome: np.ndarray
    """Per row: O(τ) of its episode (0 for excluded rows)."""
    excluded: np.ndarray
    traj_index: np.ndarray
    """Per row: ``admire_traj_id``, as the ``admire_*`` estimators take it."""
    metrics: dict[str, float]


class AdmireStepRewards:
    """The reward manager of the verl path: owns the durable milestone bank of a run directory and scores
    whole batches with the CPU trainer's step (``admire.rl.scoring.BatchScorer``, ``admire.rl.trainer.train``'s
    steps 2–3).

    ``cfg`` is the project's config (the sections the CPU trainer reads: ``reward``, ``milestone_reward``,
    ``process_reward``, ``reward.judge``, ``milestone_reward.llm``); keys it lacks take the shipped defaults.
    ``encoder`` replaces the matcher's sentence encoder, ``judge`` the LLM judge and ``generator`` the
    milestone generator Φ (tests pass fakes). The bank is ``<run_dir>/milestones.sqlite``, the CPU path's.
    """

    def __init__(self, cfg: TrainingConfig | DictConfig | Mapping[str, Any], run_dir: str | Path, *,
                 encoder: Encoder | None = None, judge: StepJudge | None = None,
                 generator: MilestoneGenerator | None = None) -> None:
        from admire.config import compose_config

        if isinstance(cfg, TrainingConfig):
            self.cfg = cfg
        else:  # the keys it has over the shipped defaults, validated as the trainer's config is
            given = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
            defaults = compose_config()
            OmegaConf.set_struct(defaults, False)  # sections the shipped file does not write out (``verl``…)
            self.cfg = validate_config(OmegaConf.merge(defaults, given))
        self.run = RunDir(run_dir)
        self.run.path.mkdir(parents=True, exist_ok=True)
        self.bank = MilestoneBank(self.run.bank, mode=self.cfg.milestone_reward.mode)
        self.scorer = BatchScorer.from_config(self.cfg, self.bank, encoder=encoder, judge=judge, generator=generator,
                                              run=self.run.path.name)

    @property
    def key(self) -> str:
        """The milestone key of the bank (``milestone_reward.key``)."""
        return self.scorer.key

    @classmethod
    def from_verl_config(cls, config: DictConfig, **overrides: Any) -> AdmireStepRewards:
        """From a composed verl config: the project's keys in its ``admire`` section, the run directory in
        ``admire.run_dir`` (else verl's ``trainer.default_local_dir``)."""
        section = OmegaConf.select(config, "admire", default=None)
        if section is None:
            raise ValueError("the verl config has no 'admire' section (the project's reward and milestone keys); "
                             "compose it with `admire train trainer.backend=verl ...`")
        run_dir = OmegaConf.select(section, "run_dir", default=None) or config.trainer.default_local_dir
        project = {k: v for k, v in OmegaConf.to_container(section, resolve=True).items() if k not in LOOP_KEYS}
        return cls(OmegaConf.create(project), Path(str(run_dir)), **overrides)

    # ---- the run's bank across verl checkpoints ---------------------------------------------------

    def start(self, global_step: int) -> None:
        """Put the bank where verl's step ``global_step`` left it: a fresh run (step 0) starts an empty bank
        (and imports ``milestone_reward.static_path`` frozen in static mode), as the CPU trainer does; a
        resumed one drops the lists written after its checkpoint."""
        if global_step <= 0:
            start_bank_afresh(self.cfg, self.bank)
            return
        versions = self._versions()
        if str(global_step) not in versions:
            raise ValueError(f"{self.run.path / BANK_VERSIONS_FILE} has no bank version for step {global_step}: "
                             "resume from a checkpoint this trainer saved, or start afresh")
        version = int(versions[str(global_step)])
        self.bank.rollback(version)
        print(f"admire: milestone bank rolled back to version {version}, as at the checkpoint of step {global_step}",
              flush=True)

    def checkpoint(self, global_step: int) -> None:
        """Record the bank version of a checkpoint written at ``global_step``."""
        versions = self._versions()
        versions[str(global_step)] = self.bank.version
        from admire.fileio import atomic_write_text

        atomic_write_text(self.run.path / BANK_VERSIONS_FILE, json.dumps(versions, indent=1))

    def _versions(self) -> dict[str, int]:
        path = self.run.path / BANK_VERSIONS_FILE
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def close(self) -> None:
        self.bank.close()

    # ---- scoring ----------------------------------------------------------------------------------

    def __call__(self, data: DataProto, epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        """``token_level_rewards`` for the batch's rows and the metrics of the reward step."""
        scores = self.score(data, epoch)
        return scores.token_level_rewards, scores.metrics

    def score(self, data: DataProto, epoch: int) -> StepScores:
        """Update the bank from the batch's successes, then score every non-excluded episode (``epoch`` sets
        λ(e)); each step's R_total goes on the last response token of its row."""
        rows = StepRows.from_data(data)
        usable = rows.usable
        scored = self.scorer.score(usable, epoch)
        # The run's record, as the CPU trainer writes it (the viewer and `admire rewards` read both back).
        self.run.write_trajectories("train", epoch, rows.trajectories)
        self.run.write_rewards("train", epoch, {t.id: r for t, r in zip(usable, scored.rewards, strict=True)},
                               "verl")
        by_id = {t.id: (t, r) for t, r in zip(usable, scored.rewards, strict=True)}
        step_rewards = np.zeros(len(data), dtype=np.float64)
        outcome = np.zeros(len(data), dtype=np.float64)
        for i in np.flatnonzero(~rows.excluded):
            trajectory, breakdowns = by_id[rows.trajectories[rows.row_trajectory[i]].id]
            step_rewards[i] = breakdowns[rows.row_step[i]].total
            outcome[i] = float(trajectory.outcome)
        placed = place_rewards(data.batch["response_mask"], step_rewards, rows.excluded)
        metrics = self._metrics(rows, usable, scored)
        return StepScores(placed, step_rewards, outcome, rows.excluded,
                          np.asarray([str(v) for v in data.non_tensor_batch["admire_traj_id"]], dtype=object), metrics)

    def _metrics(self, rows: StepRows, usable: list[Trajectory], scored: ScoredBatch) -> dict[str, float]:
        """The CPU trainer's reward, milestone, judge and episode metrics and its ``time/milestone_s`` (same
        names; episodes counted by rows, an excluded one included), and the excluded rows."""
        metrics = self.scorer.metrics(usable, scored)
        metrics["train/episodes"] = float(rows.episodes)
        metrics["train/env_errors"] = float(rows.excluded_episodes)
        metrics["admire/excluded_rows"] = float(rows.excluded.sum())
        return metrics


def place_rewards(response_mask: torch.Tensor, step_rewards: np.ndarray, excluded: np.ndarray) -> torch.Tensor:
    """``token_level_rewards``: each row's reward on its last response token (``samples.place_step_rewards``),
    on column 0 for a row with no trainable token (its response is right-padded and not empty: column 0 is
    its first token), and nothing on excluded rows."""
    from admire.integrations.verl.samples import place_step_rewards

    mask = response_mask.bool()
    placed = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    trainable = mask.any(dim=1).cpu().numpy()
    for rows, put in ((trainable & ~excluded, "last"), (~trainable & ~excluded, "first")):
        if not rows.any():
            continue
        index = torch.as_tensor(rows, device=mask.device)
        if put == "last":
            placed[index] = place_step_rewards(mask[index], step_rewards[rows])
        else:
            placed[index, 0] = torch.as_tensor(step_rewards[rows], dtype=torch.float32, device=mask.device)
    return placed
