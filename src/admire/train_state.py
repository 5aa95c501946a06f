"""What a training checkpoint holds besides the files ``admire.checkpoints`` writes: the loop's counters
(``TrainState``), and how a run's policy, optimizer, RNGs and milestone bank are put into one and taken back."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from admire.agent.base import NonFiniteWeights, TrainablePolicy, check_finite_weights
from admire.checkpoints import CheckpointError, check_weight_types
from admire.errors import first_line
from admire.milestones.bank import MilestoneBank, MilestoneBankError
from admire.rl.shared_start import restore_rng

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
    cpu_s: float = 0.0  # the trainer process's CPU time (all its threads; browsers are processes of their own)

    def __post_init__(self) -> None:
        """A checkpoint's state is checked before anything on disk follows it (the metrics file is cut at
        ``epoch``): a negative or absurd epoch or step count is a ``ValueError``."""
        for name, limit in (("epoch", MAX_EPOCHS), ("env_steps", MAX_ENV_STEPS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise ValueError(f"TrainState.{name} must be an integer in [0, {limit}], got {value!r}")
        for name in ("wall_s", "cpu_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value >= 0):
                raise ValueError(f"TrainState.{name} must be a finite number >= 0, got {value!r}")


def checkpoint_state(
    policy: TrainablePolicy, optimizer: torch.optim.Optimizer, bank: MilestoneBank, rng: random.Random,
    state: TrainState,
    experiment: dict[str, Any],
) -> dict[str, Any]:
    """Everything a resumed run needs, as tensors and plain data: ``admire.checkpoints`` stores the tensors
    as safetensors and the rest (RNG tuples, numpy state, param groups, TrainState) as JSON. ``experiment``
    (``config_schema.experiment_values``) lets a resume see hand edits of ``config.yaml``."""
    return {
        "experiment": experiment,
        "policy": policy.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": random_states(rng),
        "bank_version": bank.version,
        "bank_identity": bank.identity,
        "state": state.__dict__.copy(),
    }


def random_states(rng: random.Random) -> dict[str, Any]:
    """Python's, numpy's and torch's global random states and the update's, as a checkpoint keeps them."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "update": rng.getstate()}


def _policy_extra_state(policy: TrainablePolicy) -> Any:
    """A policy's own sampler state (``get_extra_state``, e.g. the lm policy's generator), or None."""
    own = getattr(type(policy), "get_extra_state", None)
    if own is None or own is torch.nn.Module.get_extra_state:
        return None
    return cast(Any, policy).get_extra_state()


def rollout_state(policy: TrainablePolicy, rng: random.Random) -> dict[str, Any]:
    """The random states right after an epoch's rollouts: every generator sampling advanced."""
    extra = _policy_extra_state(policy)
    return {"rng": random_states(rng), **({"policy": extra} if extra is not None else {})}


def restore_rollout_state(saved: dict[str, Any], policy: TrainablePolicy, rng: random.Random) -> None:
    """Put back :func:`rollout_state`'s states: an epoch resumed from its written rollouts then goes on as
    the uninterrupted run did after sampling them. A state that does not fit is a ``CheckpointError``."""
    try:
        restore_rng(saved["rng"], rng)
        if "policy" in saved:
            cast(Any, policy).set_extra_state(saved["policy"])
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        detail = first_line(exc)
        raise CheckpointError(f"the random states written after the rollouts do not fit this run ({detail}); "
                              "delete checkpoints/rollout.* to resume without them") from None


def restore(
    checkpoint: dict[str, Any], policy: TrainablePolicy, optimizer: torch.optim.Optimizer, bank: MilestoneBank,
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
        detail = first_line(exc)
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
