"""One start for every arm of a comparison: RL from another run's warm start (``warm_start.from_run``).

Two arms that each record and imitate their own demonstrations do not start from the same policy (a
recording can differ by a step, and the imitation then differs), so a gap between them mixes the reward's
effect with the start's. A run writes ``checkpoints/start.*`` once its warm start and its evaluation before
RL are done; a run with ``actor_rollout_ref.warm_start.from_run=RUN`` begins from RUN's: its policy weights,
its random states and its evaluation before RL. Its first epoch is then the one RUN would have run with
this run's reward, algorithm and actor keys.

What decides the start must be the same in both runs, or the start is refused (``check_from_run``): the
seed, the environment, the model, the warm start's own keys and the evaluation's episodes and split.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

from admire.config_files import plain
from admire.config_schema import TrainingConfig
from admire.runs import RunDir

# Dotted keys whose values decide a run's start (the warm start, then the evaluation before RL).
START_KEYS: tuple[str, ...] = ("run.seed", "env", "actor_rollout_ref.model", "actor_rollout_ref.warm_start",
                               "trainer.eval_episodes", "trainer.eval_split")
# Keys inside those sections that say where a start comes from, or act after it (training tasks only; the
# lm policy's sampler drafts sampled rollouts, never the warm start or the greedy evaluation before RL).
NOT_COMPARED: frozenset[str] = frozenset({"actor_rollout_ref.warm_start.enable",
                                          "actor_rollout_ref.warm_start.from_run", "env.train_instances_per_task",
                                          "actor_rollout_ref.model.sampler_dtype"})


def check_from_run(cfg: TrainingConfig) -> None:
    """``warm_start.from_run`` names a run that has a start and was started as this run would be; raises
    ``ValueError`` (one line) otherwise. Reads two small files; writes nothing."""
    from admire.config import load_run_config

    source = cfg.actor_rollout_ref.warm_start.from_run
    if not source:
        return
    run = RunDir(Path(source))
    if not run.config.is_file():
        raise ValueError(f"actor_rollout_ref.warm_start.from_run: {source} is not a run directory (no config.yaml)")
    if not run.start_checkpoint.is_file():
        raise ValueError(f"actor_rollout_ref.warm_start.from_run: {source} has no checkpoints/start.json yet; "
                         "let that run finish its warm start and its evaluation before RL first")
    theirs = plain(load_run_config(run.path))  # migrated and validated: both sides have every key
    ours = plain(cfg)
    differing = [name for key in START_KEYS for name in _differences(key, ours, theirs)]
    if differing:
        raise ValueError(f"actor_rollout_ref.warm_start.from_run: {source} was started with other values of "
                         f"{', '.join(differing)}; start from a run whose start keys equal this run's")


def _select(values: dict[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _differences(key: str, ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    mine, other = _select(ours, key), _select(theirs, key)
    if isinstance(mine, dict) and isinstance(other, dict):
        names = sorted(set(mine) | set(other))
        return [f"{key}.{name}" for name in names
                if f"{key}.{name}" not in NOT_COMPARED and mine.get(name) != other.get(name)]
    return [] if mine == other else [key]


def start_from_run(source: Path, policy: Any, update_rng: random.Random, run: RunDir) -> dict[str, Any]:
    """Load ``source``'s start into ``policy`` and the random states, and copy its evaluation episodes
    before RL into ``run`` (the viewer shows them there too); returns its TrainState fields (epoch 0, its
    warm-start metrics and its evaluation before RL)."""
    from admire import checkpoints

    origin = RunDir(source)
    saved = checkpoints.load(origin.start_checkpoint)
    checkpoints.check_weight_types(policy.state_dict(), saved["policy"], origin.start_checkpoint)
    policy.load_state_dict(saved["policy"])
    restore_rng(saved["rng"], update_rng)
    episodes = origin.trajectory_file("eval", 0)
    if episodes.is_file():
        target = run.trajectory_file("eval", 0)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(episodes, target)
    return dict(saved["state"])


def restore_rng(saved: Any, update_rng: random.Random) -> None:
    """Put back the random states a checkpoint took: Python's, numpy's, torch's and the update's. numpy and
    torch are imported here: the learning benchmark reads this module's keys while it plans, without torch."""
    import numpy as np
    import torch

    random.setstate(saved["python"])
    np.random.set_state(saved["numpy"])
    torch.set_rng_state(saved["torch"])
    update_rng.setstate(saved["update"])
