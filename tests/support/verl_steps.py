"""Stepwise verl rows of recorded trajectories, and the CPU trainer's scoring of the same trajectories, for the
tests of ``admire.integrations.verl.rewards`` and ``.trainer``.

Rows are built as the ``admire_gui`` agent loop emits them (one per step, the stepwise contract in
``extra_fields``, the episode's JSON on its last step), in a shuffled order and with response lengths that
differ from row to row, so a test sees rewards placed by (trajectory, step) and not by position.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from admire.config import compose_config
from admire.config_files import plain
from admire.config_schema import TrainingConfig, validate_config
from admire.milestones.bank import MilestoneBank
from admire.milestones.generator import make_generator
from admire.milestones.update import update_bank
from admire.rewards import RewardConfig, score_batch
from admire.rl.scoring import build_matcher
from admire.types import RewardBreakdown, Trajectory
from tests.support.core_scoring import TextHashEncoder, described
from tests.support.paths import DATA

RECORDED = DATA / "login_user_batch.jsonl"
"""One login-user group: ok-short (3 steps), ok-long (4), fail-no-password (2), fail-swapped (3), crashed."""


def recorded_batch() -> list[Trajectory]:
    return [described(Trajectory.from_json(line)) for line in RECORDED.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def config(**sections: Any) -> TrainingConfig:
    """The shipped config with ``sections`` merged in (``milestone_reward={"update_before_reward": False}``)."""
    return validate_config(OmegaConf.merge(compose_config(), OmegaConf.create(sections)))


def response_length(trajectory_id: str, step: int) -> int:
    """A response length that differs between rows (so the last response token moves from row to row)."""
    return 1 + (step + len(trajectory_id)) % 4


def step_rows(groups: Mapping[str, Sequence[Trajectory]], *, flagged: frozenset[str] = frozenset(),
              seed: int = 0) -> list[dict[str, Any]]:
    """One row per step, as the agent loop puts it into TransferQueue: ``prompts``, ``responses``,
    ``response_mask``, ``loss_mask``, ``uid`` and the contract in ``extra_fields``. ``flagged`` trajectory ids
    are marked ``admire_excluded`` whatever their JSON says; rows come shuffled by ``seed``."""
    rows = []
    for uid, trajectories in groups.items():
        for trajectory in trajectories:
            n = len(trajectory.steps)
            for step in range(n):
                length = response_length(trajectory.id, step)
                mask = torch.ones(length, dtype=torch.int64)
                rows.append({
                    "prompts": torch.arange(3 + step, dtype=torch.int64) + 7,
                    "responses": torch.arange(length, dtype=torch.int64) + 100,
                    "response_mask": mask, "loss_mask": mask.clone(), "uid": uid,
                    "extra_fields": {
                        "uid": uid, "admire_traj_id": trajectory.id, "admire_step": step, "admire_num_steps": n,
                        "admire_excluded": trajectory.excluded or trajectory.id in flagged,
                        "admire_trajectory": trajectory.to_json() if step == n - 1 else None,
                        "reward_extra_info": {},
                    },
                })
    random.Random(seed).shuffle(rows)
    return rows


def as_data_proto(rows: Sequence[Mapping[str, Any]]) -> Any:
    """The rows as a padded verl ``DataProto`` (``samples.to_data_proto``), row i = rows[i]."""
    from admire.integrations.verl.samples import StepSample, to_data_proto

    samples = [StepSample(prompt_ids=tuple(row["prompts"].tolist()), response_ids=tuple(row["responses"].tolist()),
                          group_id=row["uid"], traj_id=row["extra_fields"]["admire_traj_id"],
                          step=row["extra_fields"]["admire_step"], num_steps=row["extra_fields"]["admire_num_steps"],
                          excluded=row["extra_fields"]["admire_excluded"],
                          trajectory_json=row["extra_fields"]["admire_trajectory"]) for row in rows]
    return to_data_proto(samples, pad_token_id=0)


def cpu_rewards(trajectories: Sequence[Trajectory], cfg: DictConfig, epoch: int, path: Path
                ) -> dict[str, list[RewardBreakdown]]:
    """The CPU trainer's steps 2–3 on ``trajectories`` (its usable ones): a fresh bank at ``path`` updated
    from the successes, then ``score_batch`` with λ(``epoch``); rewards by trajectory id."""
    reward_cfg = RewardConfig.from_mapping(plain(cfg))
    usable = [t for t in trajectories if not t.excluded]
    with MilestoneBank(path, mode=cfg.milestone_reward.mode) as bank:
        update_bank(bank, usable, make_generator(cfg.milestone_reward.generator), key=cfg.milestone_reward.key,
                    rule=cfg.milestone_reward.update_rule, epoch=epoch)
        scored = score_batch(usable, bank, build_matcher(reward_cfg, TextHashEncoder()), reward_cfg, epoch)
    return {t.id: r for t, r in zip(usable, scored, strict=True)}
