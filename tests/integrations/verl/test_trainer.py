"""The ``admire_step`` trainer's reward and advantage step, run on verl's own objects without Ray.

verl's ``PPOTrainer.__init__`` builds Ray worker groups, so the trainer is made with ``__new__`` and the few
attributes ``_compute_advantage`` reads; TransferQueue is replaced by an in-memory store that returns what
TQ returns (verl's ``list_of_dict_to_tensordict`` of the rows the agent loop put: ragged tensors nested,
the rest non-tensor stacks).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from admire.integrations.verl import trainer as trainer_module
from admire.integrations.verl.advantages import register_estimators
from admire.integrations.verl.config import settings_overrides
from admire.integrations.verl.rewards import AdmireStepRewards
from admire.integrations.verl.trainer import AdmireStepTrainer, check_estimator, register, stepwise_batch
from admire.rl.advantages import DAPO_CLIP_HIGH, compute_advantages, group_samples
from admire.rl.builders import LOSS_AGG_MODES, LoopSettings, ppo_config
from admire.rl.samples import build_samples
from admire.types import Trajectory
from tests.support.core_scoring import TextHashEncoder
from tests.support.verl_steps import config, cpu_rewards, recorded_batch, step_rows


class MemoryQueue:
    """``tq.kv_batch_get``/``kv_batch_put`` over rows kept in memory (absent fields are skipped, as TQ does)."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> TensorDict:
        return list_of_dict_to_tensordict([{f: self.rows[k][f] for f in select_fields if f in self.rows[k]}
                                           for k in keys])

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: TensorDict) -> KVBatchMeta:
        for name, column in fields.items():
            for key, value in zip(keys, column.unbind(), strict=True):
                self.rows[key][name] = value
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)


def failed_group() -> list[Trajectory]:
    """Two failures of the same instance in a group of their own (no success: a failed group)."""
    failures = [t for t in recorded_batch() if t.id.startswith("fail-")]
    return [t.model_copy(update={"id": f"again-{t.id}", "group": 2}) for t in failures]


def make_trainer(tmp_path: Path, estimator: str, **algorithm: Any) -> AdmireStepTrainer:
    register_estimators()
    trainer = AdmireStepTrainer.__new__(AdmireStepTrainer)
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False,
                                                     "norm_adv_by_std_in_grpo": True, **algorithm}})
    trainer.global_steps = 4  # the 4th training step: λ(e) of epoch 3
    trainer.admire_rewards = AdmireStepRewards(config(), tmp_path / "run", encoder=TextHashEncoder())
    return trainer


def queued_batch(monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryQueue, KVBatchMeta, dict[str, list[Trajectory]]]:
    """Both groups' rows in the queue, plus one padding row built as verl builds it (a copy of a real row's
    fields, ``response_mask`` 0, tag ``is_padding``)."""
    groups = {"g0": recorded_batch(), "g1": failed_group()}
    rows = step_rows(groups)
    padding = copy.deepcopy(rows[0])
    padding.update(responses=torch.tensor([2]), response_mask=torch.tensor([0]), loss_mask=torch.tensor([0]))
    keyed = {f"k{i}": row for i, row in enumerate([*rows, padding])}
    queue = MemoryQueue(keyed)
    monkeypatch.setattr(trainer_module, "tq", queue)
    tags = [{"is_padding": key == f"k{len(rows)}"} for key in keyed]
    return queue, KVBatchMeta(keys=list(keyed), tags=tags, partition_id="train"), groups


CASES = [
    ("grpo_step", {"failed_group_baseline": "zero"}, {"failed_baseline": "zero"}),  # needs each row's outcome
    ("grpo_traj", {}, {}),  # one return per trajectory: needs each row's trajectory
    ("rloo_step", {"std_floor": 0.1}, {"std_floor": 0.1}),
]


@pytest.mark.parametrize(("name", "algorithm", "options"), CASES, ids=[c[0] for c in CASES])
def test_the_advantage_step_scores_the_batch_and_equals_the_cpu_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, algorithm: dict, options: dict,
) -> None:
    trainer = make_trainer(tmp_path, f"admire_{name}", **algorithm)
    queue, batch, groups = queued_batch(monkeypatch)
    metrics: dict[str, float] = {}
    trainer._compute_advantage(batch, metrics)

    rewards = cpu_rewards([t for group in groups.values() for t in group], config(), 3, tmp_path / "cpu.sqlite")
    expected: dict[tuple[str, int], tuple[float, float]] = {}  # (trajectory, step) -> (reward, advantage)
    for group in groups.values():
        scored = [rewards.get(t.id, []) for t in group]
        result = compute_advantages(name, group_samples(group, scored), norm_by_std=True, **options)
        for trajectory, breakdowns, advantages in zip(group, scored, result.advantages, strict=True):
            for t, breakdown in enumerate(breakdowns):
                expected[(trajectory.id, t)] = (breakdown.total, advantages[t])

    assert any(advantage != 0 for _, advantage in expected.values())
    for key, row in queue.rows.items():
        fields = row["extra_fields"]
        length = row["responses"].shape[0]
        if batch.tags[batch.keys.index(key)]["is_padding"] or fields["admire_excluded"]:
            for name_ in ("response_mask", "loss_mask", "advantages", "rm_scores"):
                assert not row[name_].any(), (key, name_)
            continue
        reward, advantage = expected[(fields["admire_traj_id"], fields["admire_step"])]
        assert row["response_mask"].tolist() == [1] * length
        assert row["rm_scores"].tolist() == pytest.approx([0.0] * (length - 1) + [reward], abs=1e-6)
        assert row["token_level_rewards"].tolist() == row["rm_scores"].tolist()
        assert row["advantages"].tolist() == pytest.approx([advantage] * length, abs=1e-5)
    assert metrics["milestones/bank_version"] == 1.0 and metrics["admire/excluded_rows"] == 1.0
    assert metrics["reward/total"] == pytest.approx(np.mean([r for r, _ in expected.values()]), abs=1e-6)


DAPO = {"algorithm": {"adv_estimator": "dapo_step", "filter_groups": True},
        "actor_rollout_ref": {"actor": {"clip_ratio_high": DAPO_CLIP_HIGH, "loss_agg_mode": "token-mean"}}}


def test_dapo_step_is_the_same_estimator_on_both_trainers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One DAPO config: the CPU trainer's samples and verl's trainable rows are the same steps with the same
    advantages (a tie group left out of both), under the same clip range and loss aggregation."""
    cfg = config(**DAPO)
    tie = [t.model_copy(update={"id": f"tie-{i}", "group": 3}) for i, t in enumerate(recorded_batch()[3:4] * 2)]
    groups = {"g0": recorded_batch(), "g1": failed_group(), "g2": tie}
    rows = step_rows(groups)
    queue = MemoryQueue({f"k{i}": row for i, row in enumerate(rows)})
    monkeypatch.setattr(trainer_module, "tq", queue)
    batch = KVBatchMeta(keys=list(queue.rows), tags=[{} for _ in rows], partition_id="train")
    trainer = make_trainer(tmp_path, "admire_dapo_step", std_floor=cfg.algorithm.std_floor,  # as verl_overrides set
                           failed_group_baseline=cfg.algorithm.failed_group_baseline)
    trainer.admire_rewards = AdmireStepRewards(cfg, tmp_path / "run", encoder=TextHashEncoder())
    metrics: dict[str, float] = {}
    trainer._compute_advantage(batch, metrics)
    on_verl = {(row["extra_fields"]["admire_traj_id"], row["extra_fields"]["admire_step"]):
               float(row["advantages"][0]) for row in queue.rows.values() if row["response_mask"].any()}

    trajectories = [t for group in groups.values() for t in group]
    rewards = cpu_rewards(trajectories, cfg, 3, tmp_path / "cpu.sqlite")
    usable = [t for t in trajectories if not t.excluded]
    loop = LoopSettings.from_config(cfg)
    samples = build_samples(usable, [rewards[t.id] for t in usable], "dapo_step", filter_groups=loop.filter_groups,
                            **loop.advantage_options)
    step_of = {id(step.observation): (t.id, step.index) for t in usable for step in t.steps}
    on_cpu = {step_of[id(sample.decision.observation)]: sample.advantage for sample in samples.samples}

    assert samples.groups_dropped == 1 and metrics["adv/groups_dropped"] == 1.0
    assert not any(key[0].startswith("tie-") for key in on_verl)
    assert on_verl.keys() == on_cpu.keys()
    for key, advantage in on_cpu.items():
        assert on_verl[key] == pytest.approx(advantage, abs=1e-5), key
    ppo = ppo_config(cfg)
    pairs = dict(o.split("=", 1) for o in settings_overrides(cfg, tmp_path / "run"))
    assert (ppo.clip_high, ppo.loss_agg) == (DAPO_CLIP_HIGH, "token_mean")
    assert float(pairs["actor_rollout_ref.actor.clip_ratio_high"]) == ppo.clip_high
    assert LOSS_AGG_MODES[pairs["actor_rollout_ref.actor.loss_agg_mode"]] == ppo.loss_agg


def test_stepwise_batch_reads_the_contract_from_the_agent_loops_extra_fields() -> None:
    rows = step_rows({"g0": recorded_batch()})
    fields = list_of_dict_to_tensordict([{k: row[k] for k in ("uid", "extra_fields", "response_mask")}
                                         for row in rows])
    data = stepwise_batch(fields)
    assert data.batch["response_mask"].shape == (len(rows), max(row["responses"].shape[0] for row in rows))
    for name in ("uid", "admire_traj_id", "admire_step", "admire_num_steps", "admire_excluded", "admire_trajectory"):
        want = [row["uid"] if name == "uid" else row["extra_fields"][name] for row in rows]
        assert data.non_tensor_batch[name].tolist() == want


def test_an_estimator_that_is_not_admires_is_refused_before_verl_starts() -> None:
    register_estimators()
    with pytest.raises(ValueError, match=r"needs an ADMIRE estimator .* got 'grpo'"):
        AdmireStepTrainer(OmegaConf.create({"algorithm": {"adv_estimator": "grpo"}}))  # verl's __init__ not reached
    check_estimator("admire_grpo_step")


def test_loading_a_checkpoint_starts_the_bank_as_verl_starts_the_run(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh run (verl's step 0) starts an empty bank even if the run directory holds an older one."""
    trainer = make_trainer(tmp_path, "admire_grpo_step")
    _, batch, _ = queued_batch(monkeypatch)
    trainer._compute_advantage(batch, {})
    assert trainer.admire_rewards.bank.version == 1
    trainer.config = OmegaConf.merge(trainer.config, {"trainer": {"resume_mode": "disable"}})
    trainer._load_checkpoint()
    assert trainer.global_steps == 0 and trainer.admire_rewards.bank.version == 0


def test_the_trainer_is_registered_as_admire_step_and_runs_verls_sync_branches() -> None:
    assert register() is register() is AdmireStepTrainer
    assert get_trainer_cls("admire_step") is AdmireStepTrainer
    trainer = AdmireStepTrainer.__new__(AdmireStepTrainer)
    trainer.trainer_mode = "admire_step"  # what verl's __init__ assigns (trainer.v1.trainer_mode)
    assert trainer.trainer_mode == "sync"


class RecordingWorkers:
    """The actor's worker group as far as ``_update_actor`` uses it: records what ``update_actor`` was told."""

    def __init__(self) -> None:
        self.told: dict[str, Any] = {}

    def update_actor(self, batch: KVBatchMeta) -> dict[str, Any]:
        self.told = dict(batch.extra_info)
        return {"metrics": {"mfu": [0.0], "pg_loss": [0.0]}}


def test_the_actor_trains_on_the_whole_batch_and_counts_only_rows_with_a_trainable_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verl counts ``ppo_mini_batch_size`` in prompts × n rows and divides ``seq-mean-token-mean`` by that fixed
    count; a stepwise batch has Σ steps rows, some of them padding or excluded (``response_mask`` all 0)."""
    queue, batch, _ = queued_batch(monkeypatch)
    queue.rows["k0"]["response_mask"] = torch.zeros_like(queue.rows["k0"]["response_mask"])  # an excluded step
    trainer = make_trainer(tmp_path, "admire_grpo_step")
    trainer.config = OmegaConf.merge(trainer.config, {"actor_rollout_ref": {
        "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 2, "calculate_entropy": False, "entropy_coeff": 0.0,
                  "data_loader_seed": 0, "shuffle": False, "use_dynamic_bsz": False,
                  "ppo_micro_batch_size_per_gpu": 2},
        "rollout": {"n": 4, "temperature": 1.0}}})
    workers = trainer.actor_rollout_wg = RecordingWorkers()
    trainer._update_actor(batch, {})
    assert workers.told["mini_batch_size"] == len(batch)  # one optimizer step per PPO epoch, not Σ steps / (2 × 4)
    assert workers.told["global_batch_size"] == len(batch) - 2  # neither the padding row nor the excluded one
    assert workers.told["epochs"] == 2
    assert trainer.actor_rollout_wg is workers
    assert trainer._get_required_batch_multiple(dp_size=3) == 6  # data parallel × micro-batch, not × n prompts
