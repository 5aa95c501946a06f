"""ADMIRE inside TRL's ``GRPOTrainer``: GUI episodes as multi-turn completions, scored with milestone rewards.

``rollout`` plays one episode per completion in a ``GuiEnv`` with the trainer's model and scores the batch
with the CPU trainer's own step (``BatchScorer``, from ``admire.rl.scoring``: bank update from the batch's
successes, then per-step rewards); ``rewards`` holds the TRL reward function ``admire_reward``, which hands each
episode's return to TRL. Names are imported on first use, so importing this package loads neither torch nor TRL::

    from admire.integrations.trl import BatchScorer, admire_reward, make_rollout_func, open_bank, task_dataset
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BatchScorer": "admire.rl.scoring",
    "open_bank": "admire.rl.scoring",
    "admire_reward": f"{__name__}.rewards",
    "episode_return": f"{__name__}.rewards",
    "FOLDS": f"{__name__}.rewards",
    "make_rollout_func": f"{__name__}.rollout",
    "generate_with_model": f"{__name__}.rollout",
    "task_dataset": f"{__name__}.rollout",
    "task_prompt": f"{__name__}.rollout",
    "parse_task_prompt": f"{__name__}.rollout",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
