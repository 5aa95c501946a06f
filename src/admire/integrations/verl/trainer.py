"""The ``admire_step`` trainer: verl 0.9.1's synchronous v1 trainer with ADMIRE's reward and advantage step.

Select it with ``trainer.use_v1=true trainer.v1.trainer_mode=admire_step`` and an ADMIRE estimator
(``algorithm.adv_estimator=admire_grpo_step``, :mod:`admire.integrations.verl.advantages`). Everything else is
verl's ``PPOTrainerSync`` (rollout through the agent loop, old/ref log-probs, the actor update, checkpoints,
logging); what changes, and why:

* ``_compute_advantage`` (verl: ``PPOTrainer._compute_advantage``, ``verl/trainer/ppo/v1/trainer_base.py``)
  scores the batch first. verl's stock step takes ``rm_scores`` as given and calls the estimator with ``uid``
  alone (``compute_advantage_for_multi_trajectories`` → ``ray_trainer.compute_advantage``); ADMIRE needs the
  milestone bank updated from the batch's successes *before* any step is scored, on the driver, and estimators
  that know each row's trajectory. So: the rows' stepwise fields (the agent loop's ``extra_fields``) →
  :class:`~admire.integrations.verl.rewards.AdmireStepRewards` (bank update, then ``score_batch``; R_total on
  each step's last response token) → verl's own KL-in-reward (``apply_kl_penalty``) and rollout correction
  (``compute_rollout_correction_and_add_to_batch``) as in the stock step → the registered ``admire_*``
  estimator's computation (``advantages.stepwise_advantages``, which also says which groups it kept, for
  ``algorithm.filter_groups``) with ``index`` (uid), ``traj_index``, ``outcome`` and ``excluded``. The reward
  step's metrics (``reward/*``, ``milestones/*``, ``train/*``, the CPU trainer's names) go into verl's metrics
  dict.
* Excluded episodes (crashed after their re-runs) and verl's padding rows get no gradient: their
  ``response_mask`` and ``loss_mask`` are written back as 0, as verl's own padding rows have
  (``padding_utils.construct_minimal_padding_template``: "do not contribute to PPO, entropy, or KL losses").
  A zero advantage alone would not do: the KL and entropy terms would still train on those tokens, and
  ``token-mean`` would count them in its denominator; the CPU path makes no sample of them at all.
* ``_load_checkpoint`` / ``_save_checkpoint`` (same file) also put the bank where the checkpoint left it: a
  fresh run starts an empty bank, a resumed one drops the lists written after its checkpoint.
* ``trainer_mode`` always reads ``"sync"``: verl takes the registry name (``trainer.v1.trainer_mode``) as the
  mode and switches to its async replay buffer, prompt refill and TransferQueue checkpoints for any name but
  ``sync`` (``trainer_base.py``: ``_build_replay_buffer``, ``_init_dataloader``, ``_load_checkpoint``,
  ``_save_checkpoint``, ``_submit_batch_to_rollout``); this trainer is the sync one (``trainer.v1.sync.*``
  settings apply).

* ``_update_actor`` trains on the whole batch of steps in one mini-batch per PPO epoch (``ppo_epochs``
  optimizer steps per update), with the loss's sequence count (``global_batch_size``) equal to the rows that
  have a trainable token. verl counts ``ppo_mini_batch_size`` in prompts × ``rollout.n`` rows and pads the batch
  to a multiple of that; a stepwise batch has Σ steps rows, so stock verl would take about mean-episode-length
  optimizer steps per epoch, and its ``seq-mean-token-mean`` divides by the fixed mini-batch row count, padding
  and excluded rows included. Here the batch is padded only to what data parallelism needs
  (``_get_required_batch_multiple``), and neither padding nor excluded rows count in any denominator
  (``token-mean`` counts tokens, which they have none of). verl's ``actor.ppo_mini_batch_size`` is not used.

λ(e)'s epoch is the training step (``global_steps - 1``): one CPU-trainer epoch is one rollout batch and one
update, which is what one verl step is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from admire.extras import require

require("verl", "torch", extra="verl", feature="the admire_step verl trainer")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transfer_queue as tq  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import apply_kl_penalty  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer  # noqa: E402
from verl.workers.utils.padding import response_to_nested  # noqa: E402

from admire.integrations.verl.advantages import PREFIX, stepwise_advantages  # noqa: E402
from admire.integrations.verl.rewards import STEP_FIELDS, AdmireStepRewards  # noqa: E402

TRAINER_NAME = "admire_step"
READ_FIELDS: tuple[str, ...] = ("uid", "extra_fields", "response_mask", "loss_mask", "rollout_log_probs",
                                "old_log_probs", "ref_log_prob", "values")
"""What the step reads from TransferQueue: the stock step's fields, the agent loop's ``extra_fields`` (where the
stepwise contract rides) and ``loss_mask`` (zeroed with ``response_mask``). Absent ones are skipped by TQ."""
WRITTEN: tuple[str, ...] = ("rm_scores", "token_level_rewards", "advantages", "returns", "response_mask",
                            "loss_mask", "rollout_is_weights")
"""What it writes back (those present): the step rewards as ``rm_scores`` too, so verl's own ``critic/score``
metrics and validation tables show them."""


def stepwise_batch(fields: TensorDict) -> DataProto:
    """The rows TransferQueue returned as a padded DataProto whose non-tensors are the stepwise contract
    (``uid`` and the ``admire_*`` fields, read from each row's ``extra_fields``)."""
    fields = fields.clone(recurse=False)
    extra = list(fields.pop("extra_fields").tolist())
    uid = list(fields.pop("uid").tolist())
    data = DataProto(batch=fields.to_padded_tensor())
    for i, row in enumerate(extra):
        if not isinstance(row, dict):
            raise ValueError(f"row {i} has no extra_fields dict: the rows must come from the admire_gui agent loop")
    for name in STEP_FIELDS:
        values = uid if name == "uid" else [row.get(name) for row in extra]
        column = np.empty(len(values), dtype=object)
        column[:] = values
        data.non_tensor_batch[name] = column
    return data


def admire_advantages(data: DataProto, rewards: AdmireStepRewards, algorithm: Any, *, epoch: int,
                      padding: np.ndarray | None = None, kl_ctrl: Any = None) -> tuple[DataProto, dict[str, float]]:
    """The reward and advantage step on a padded stepwise batch (``stepwise_batch``): what
    ``AdmireStepTrainer._compute_advantage`` does between reading TransferQueue and writing it back.

    ``padding`` marks verl's padding rows (tags ``is_padding``): never scored, zero everywhere.
    ``algorithm`` is verl's ``algorithm`` section; ``kl_ctrl`` its KL controller when ``use_kl_in_reward``.
    """
    n, width = data.batch["response_mask"].shape
    padding = np.zeros(n, dtype=bool) if padding is None else np.asarray(padding, dtype=bool)
    real = np.flatnonzero(~padding)
    real_rows = torch.as_tensor(real, dtype=torch.long)
    scores = rewards.score(data.select_idxs(real), epoch)
    metrics = dict(scores.metrics)

    token_scores = torch.zeros((n, width), dtype=torch.float32)
    token_scores[real_rows] = scores.token_level_rewards.to(torch.float32)
    trained = np.zeros(n, dtype=bool)
    trained[real] = ~scores.excluded
    keep = torch.as_tensor(trained, dtype=data.batch["response_mask"].dtype).unsqueeze(-1)
    for name in ("response_mask", "loss_mask"):
        if name in data.batch:
            data.batch[name] = data.batch[name] * keep.to(data.batch[name].dtype)
    data.batch["token_level_scores"] = token_scores
    data.batch["rm_scores"] = token_scores

    if _get(algorithm, "use_kl_in_reward", False):
        data, kl_metrics = apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty=_get(algorithm, "kl_penalty", "kl"))
        metrics.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = token_scores
    correction = _get(algorithm, "rollout_correction", None)
    if (correction is not None and "rollout_log_probs" in data.batch
            and not correction.get("bypass_mode", False)):
        data, correction_metrics = compute_rollout_correction_and_add_to_batch(data, correction)
        metrics.update(correction_metrics)

    name = str(_get(algorithm, "adv_estimator", ""))
    scored = data.select_idxs(real)
    # The registered estimator admire_<name>'s own computation, with the keep mark it cannot return to verl.
    advantages, returns, kept = stepwise_advantages(
        name.removeprefix(PREFIX), scored.batch["token_level_rewards"], scored.batch["response_mask"],
        config=algorithm, index=scored.non_tensor_batch["uid"], traj_index=scores.traj_index,
        outcome=scores.outcome, excluded=scores.excluded)
    data.batch["advantages"] = torch.zeros((n, width), dtype=advantages.dtype)
    data.batch["returns"] = torch.zeros((n, width), dtype=returns.dtype)
    data.batch["advantages"][real_rows] = advantages
    data.batch["returns"][real_rows] = returns
    if rewards.cfg.algorithm.filter_groups:  # the groups the estimator does not keep leave the loss (CPU: no sample)
        dropped = np.zeros(n, dtype=bool)
        dropped[real] = ~kept
        trained = torch.as_tensor(~dropped, dtype=data.batch["response_mask"].dtype).unsqueeze(-1)
        for field in ("response_mask", "loss_mask"):
            if field in data.batch:
                data.batch[field] = data.batch[field] * trained.to(data.batch[field].dtype)
        metrics["adv/groups_dropped"] = float(len({uid for uid, k in zip(scored.non_tensor_batch["uid"], kept,
                                                                           strict=True) if not k}))
    return data, metrics


ADVANTAGES_FOLDER = "advantages"
"""Under the run's ``trajectories/``: each training step's rows as ``{traj_id, step, reward, advantage}``."""


def write_advantages(run_dir: Any, epoch: int, data: DataProto, padding: np.ndarray) -> Path:
    """One line per real row of the batch: its episode and step, its step reward and the advantage the
    estimator gave its tokens (None for a row with no trainable token), so that a run's numbers can be checked
    against the CPU trainer's on the same trajectories."""
    from admire.fileio import atomic_write_text

    mask = data.batch["response_mask"].bool()
    lines = []
    for i in np.flatnonzero(~np.asarray(padding, dtype=bool)):
        trained = mask[i]
        advantage = float(data.batch["advantages"][i][trained][0]) if bool(trained.any()) else None
        lines.append(json.dumps({"traj_id": str(data.non_tensor_batch["admire_traj_id"][i]),
                                 "step": int(data.non_tensor_batch["admire_step"][i]),
                                 "excluded": bool(data.non_tensor_batch["admire_excluded"][i]),
                                 "reward": float(data.batch["token_level_scores"][i].sum()),
                                 "advantage": advantage}))
    path = Path(run_dir) / "trajectories" / ADVANTAGES_FOLDER / f"train_epoch_{epoch:04d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path


def check_estimator(name: str) -> None:
    """Refuse, before verl starts anything, an estimator that is not one of ADMIRE's registered ones."""
    if not str(name).startswith(PREFIX):
        raise ValueError(f"trainer.v1.trainer_mode={TRAINER_NAME} needs an ADMIRE estimator "
                         f"(algorithm.adv_estimator=admire_grpo_step, admire_grpo_traj, admire_rloo_step or "
                         f"admire_dapo_step), got {name!r}")
    core_algos.get_adv_estimator_fn(name)  # unknown: verl's one-line ValueError (the plugin did not load)


class AdmireStepTrainer(PPOTrainerSync):
    """verl's ``PPOTrainerSync`` with ADMIRE's batch reward step and stepwise estimators (module docstring)."""

    admire_rewards: AdmireStepRewards

    def __init__(self, config: Any) -> None:
        check_estimator(config.algorithm.adv_estimator)  # before verl builds its worker groups
        super().__init__(config)

    @property
    def trainer_mode(self) -> str:
        """Always ``sync`` (the module docstring says why); verl assigns the registry name here."""
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        del value

    def _load_checkpoint(self) -> None:
        """verl's, then the bank where that checkpoint left it (a fresh run: an empty bank)."""
        super()._load_checkpoint()
        if getattr(self, "admire_rewards", None) is None:
            self.admire_rewards = AdmireStepRewards.from_verl_config(self.config)
        self.admire_rewards.start(self.global_steps)

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        self.admire_rewards.checkpoint(self.global_steps)

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        """Rows per data-parallel rank times its micro-batch: the only padding one whole-batch update needs."""
        actor = self.config.actor_rollout_ref.actor
        micro = 1 if actor.get("use_dynamic_bsz", False) else int(actor.get("ppo_micro_batch_size_per_gpu") or 1)
        return dp_size * micro

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """verl's update, on the whole batch at once and with the trainable rows as its sequence count."""
        masks = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                select_fields=["response_mask"])["response_mask"]
        trainable = sum(int(row.sum() > 0) for row in masks.unbind())
        group = self.actor_rollout_wg
        self.actor_rollout_wg = WholeBatchUpdate(group, rows=len(batch), trainable=trainable)
        try:
            return super()._update_actor(batch, metrics)
        finally:
            self.actor_rollout_wg = group

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """ADMIRE's rewards (bank update, then scoring) and the ``admire_*`` estimator on the whole batch."""
        fields = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=list(READ_FIELDS))
        lengths = fields["response_mask"]  # nested: each row's response length, for the write-back
        padding = np.asarray([bool(tag.get("is_padding", False)) for tag in batch.tags], dtype=bool)
        epoch = max(self.global_steps - 1, 0)
        data, step_metrics = admire_advantages(stepwise_batch(fields), self.admire_rewards, self.config.algorithm,
                                               epoch=epoch, padding=padding,
                                               kl_ctrl=getattr(self, "kl_ctrl_in_reward", None))
        metrics.update(step_metrics)
        write_advantages(self.admire_rewards.run.path, epoch, data, padding)
        written = {name: response_to_nested(data.batch[name], lengths)
                   for name in WRITTEN if name in data.batch}
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                               fields=TensorDict(written, batch_size=len(batch)))


class WholeBatchUpdate:
    """The actor's worker group, with ``update_actor`` told the batch's real sizes (``_update_actor``)."""

    def __init__(self, group: Any, *, rows: int, trainable: int) -> None:
        self.group, self.rows, self.trainable = group, rows, trainable

    def update_actor(self, batch: KVBatchMeta) -> Any:
        """verl's update with the batch as one mini-batch and the trainable rows as the loss's row count (verl's
        ``_update_actor`` sets both from ``ppo_mini_batch_size`` just before this call)."""
        batch.extra_info.update({"mini_batch_size": self.rows, "global_batch_size": max(self.trainable, 1)})
        return self.group.update_actor(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)


def register() -> type[AdmireStepTrainer]:
    """Register the trainer as ``admire_step`` in verl's v1 trainer registry (idempotent: verl accepts the
    same class twice)."""
    return register_trainer(TRAINER_NAME)(AdmireStepTrainer)


def _get(config: Any, key: str, default: Any) -> Any:
    """``config[key]`` for a DictConfig, a dict or verl's ``AlgoConfig``."""
    getter = getattr(config, "get", None)
    value = getter(key, default) if callable(getter) else getattr(config, key, default)
    return default if value is None else value
