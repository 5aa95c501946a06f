"""What a training run is built from, read from its config: the policy, its reference, the PPO settings and
the loop's own keys, each checked before anything is built (``check_config``).

The CPU trainer (``admire.rl.trainer``), ``admire eval`` and the probes build through here, so a policy is
made the same way wherever it runs.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import random
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from admire.agent.base import (
    Decision,
    TrainablePolicy,
    check_finite_weights,
    check_trainable,
    holds_reference,
    make_policy,
)
from admire.checkpoints import check_weight_types
from admire.config_files import plain
from admire.config_schema import DEFAULT_LOSS_AGG_MODE, TrainingConfig
from admire.embeddings import Encoder
from admire.envs.building import check_device_pools
from admire.errors import first_line
from admire.rewards import RewardConfig
from admire.rl.ppo import LossAggregation, PPOConfig
from admire.rl.scoring import judge_section


@dataclass(frozen=True)
class LoopSettings:
    """The loop's own keys: the training-instance pool, the env-step budget, the advantage estimator's
    options and whether groups it does not keep are dropped (``algorithm.*``)."""

    instances_per_task: int | None = None
    total_env_steps: int | None = None
    advantage_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    filter_groups: bool = False

    @classmethod
    def from_config(cls, cfg: TrainingConfig) -> LoopSettings:
        algorithm = cfg.algorithm
        options = {"norm_by_std": algorithm.norm_adv_by_std_in_grpo, "std_floor": float(algorithm.std_floor),
                   "failed_baseline": algorithm.failed_group_baseline}
        return cls(instances_per_task=cfg.env.train_instances_per_task, total_env_steps=cfg.trainer.total_env_steps,
                   advantage_options=options, filter_groups=algorithm.filter_groups)


@dataclass(frozen=True)
class RunSettings:
    """What ``check_config`` built while checking: the trainer uses these rather than build them again."""

    reward: RewardConfig
    loop: LoopSettings
    ppo: PPOConfig


def check_config(cfg: TrainingConfig, *, judge_given: bool = False) -> RunSettings:
    """Refuse, with one line, what would only fail later in the run (``admire train`` calls it before it
    makes a run directory); ``judge_given``: a judge is passed in, so none needs configuring. The typed
    schema (``admire.config_schema``) checked every key when the config was loaded; the components' own
    checks follow here."""
    settings = RunSettings(RewardConfig.from_mapping(plain(cfg)), LoopSettings.from_config(cfg), ppo_config(cfg))
    model = plain(cfg.actor_rollout_ref.model)
    policy_options(str(model["name"]), {k: v for k, v in model.items() if k not in ("name", "path")})
    if not judge_given and cfg.reward.mode == "judge":
        judge_section(cfg)
    check_device_pools(cfg.env)  # adb, the launcher and one emulator per env, before a run dir is made
    return settings


LOSS_AGG_MODES: dict[str, LossAggregation] = {
    "token-mean": "token_mean", "seq-mean-token-mean": "seq_mean", "seq-mean-token-sum": "seq_mean_token_sum",
}
"""verl's ``actor.loss_agg_mode`` names → ``ppo_update``'s ``loss_agg`` (the same key on both trainers)."""


def ppo_config(cfg: TrainingConfig) -> PPOConfig:
    """``actor_rollout_ref.actor.*`` as a ``PPOConfig`` (``target_kl``, ``max_kl``, ``entropy_coef`` optional;
    ``loss_agg_mode`` in verl's names, null = ``seq-mean-token-mean``, the paper's)."""
    actor = cfg.actor_rollout_ref.actor
    return PPOConfig(
        epochs=actor.ppo_epochs,
        minibatch_size=actor.ppo_mini_batch_size,
        clip_low=float(actor.clip_ratio_low),
        clip_high=float(actor.clip_ratio_high),
        kl_coef=float(actor.kl_coef),
        max_grad_norm=float(actor.max_grad_norm),
        entropy_coef=float(actor.entropy_coef),
        target_kl=None if actor.target_kl is None else float(actor.target_kl),
        max_kl=None if actor.max_kl is None else float(actor.max_kl),
        max_answer_tokens=actor.ppo_max_answer_tokens,
        loss_agg=LOSS_AGG_MODES[actor.loss_agg_mode or DEFAULT_LOSS_AGG_MODE],
    )


def build_policy(cfg: TrainingConfig, encoder: Encoder | None = None) -> TrainablePolicy:
    """The policy ``actor_rollout_ref.model.name`` with the other keys of that section as its options
    (and ``encoder``, when given, as the sentence encoder of a policy that takes one).

    ``model.path`` goes to a policy whose factory takes a ``path`` (``lm``: a local Hugging Face
    directory, verl's meaning of the key); for one that does not (``dom``) it names a checkpoint whose
    weights the trainer loads into it."""
    model = plain(cfg.actor_rollout_ref.model)
    name = str(model["name"])
    options = policy_options(name, {k: v for k, v in model.items() if k not in ("name", "path")})
    if takes_path(name) and model.get("path"):
        options["path"] = str(model["path"])
    if encoder is not None:
        options["encoder"] = encoder
    return check_trainable(make_policy(name, seed=int(cfg.run.seed), **options), name)


def initial_policy(cfg: TrainingConfig, encoder: Encoder | None = None) -> TrainablePolicy:
    """``build_policy``, then, for a policy that does not read ``model.path`` itself (``dom``), the weights of
    the checkpoint it names: the policy a new run starts from."""
    policy = build_policy(cfg, encoder=encoder)
    path = cfg.actor_rollout_ref.model.path
    if path and not takes_path(str(cfg.actor_rollout_ref.model.name)):
        load_weights(policy, load_policy_weights(Path(path)), path)
    return policy


def load_weights(policy: TrainablePolicy, weights: dict[str, Any], source: Any) -> None:
    """Checkpoint ``weights`` into ``policy``: their dtypes checked first (nothing is cast silently), then
    loaded, then checked finite; ``source`` names the checkpoint in the errors."""
    check_weight_types(policy.state_dict(), weights, source)
    policy.load_state_dict(weights)
    check_finite_weights(policy, f"the checkpoint {source}")


def policy_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` the policy ``name`` takes. The shipped config's model section holds the ``dom`` policy's
    keys (``hidden_size``, ``prior_strength``, ``encoder``): for a policy that does not take one, a key left
    at its shipped value is dropped; one set to anything else is an error naming the policy's options."""
    from admire.config_schema import shipped_default

    parameters = _factory_parameters(name)
    if parameters is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(options)
    taken = {k: v for k, v in options.items() if k in parameters}
    foreign = sorted(k for k, v in options.items()
                     if k not in parameters and shipped_default(f"actor_rollout_ref.model.{k}") != v)
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

    def _reference(self) -> AbstractContextManager[None]:
        context: AbstractContextManager[None] = self.policy.reference()
        return context

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        with self._reference():
            scores: torch.Tensor = self.policy.log_prob(decisions)
        return scores

    def token_log_probs(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        with self._reference():
            scored: tuple[torch.Tensor, torch.Tensor] = self.policy.token_log_probs(decisions)
        return scored

    def token_log_probs_and_entropy(self, decisions: Sequence[Decision]
                                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with self._reference():
            both: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = self.policy.token_log_probs_and_entropy(decisions)
        return both


def reference_policy(policy: Any) -> Any:
    """The frozen policy the KL term pulls toward: the policy's own ``reference()`` when it has one (no
    copy of a language model's weights), else a deep copy taken now."""
    return _ReferenceView(policy) if holds_reference(policy) else copy.deepcopy(policy)


def policy_from_checkpoint(cfg: TrainingConfig, checkpoint: Path) -> Any:
    """The policy of ``cfg`` with the weights of ``checkpoint``, before any browser starts; an unreadable
    checkpoint or one for another policy is a one-line ``ValueError`` (``CheckpointError`` is one)."""
    configure_threads(cfg.trainer.threads)
    seed_everything(int(cfg.run.seed))
    weights = load_policy_weights(checkpoint)
    policy = build_policy(cfg)
    try:
        load_weights(policy, weights, checkpoint)
    except (RuntimeError, KeyError, TypeError) as exc:
        detail = first_line(exc)
        raise ValueError(f"{checkpoint}: its weights do not fit the policy {cfg.actor_rollout_ref.model.name!r} "
                         f"({detail}); evaluate it with its run's config (--checkpoint runs/<name>)") from None
    policy.eval()
    return policy


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
