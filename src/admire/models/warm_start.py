"""A supervised warm start written as a model directory: ``admire models warm-start BASE DIR --suite S``.

The CPU trainer warm-starts its policy in process (``actor_rollout_ref.warm_start``); verl starts from a model
path and has no such step, so a language model that cannot yet write ``Reason / Action`` would give verl a
batch of format errors and nothing to learn from. This module does the same behaviour cloning once, ahead of
the run: the suite's oracles play ``episodes`` instances of each task in MiniWoB++ (:mod:`admire.envs.oracles`),
the ``lm`` policy built on ``BASE`` imitates their answers (:func:`admire.agent.sft.pretrain_tokens`), and the
full weights are written as a Hugging Face directory (tokenizer included) that ``actor_rollout_ref.model.path``
can name. Like ``admire models prepare``, it builds into a hidden sibling of ``DIR`` and renames it into place,
so an interrupted run leaves no half-written model; ``admire-warm-start.json`` records the base, the tasks and
seeds, and the imitation's losses.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from admire.progress import ProgressFn

RECORD_FILE = "admire-warm-start.json"


@dataclass(frozen=True)
class WarmStartSettings:
    """What to imitate and how long: the defaults are the CPU verl smoke's (``scripts/cpu_smoke.sh``)."""

    suite: str
    episodes: int = 6
    """Oracle episodes per task of the suite."""
    epochs: int = 80
    lr: float = 3e-3
    batch_size: int = 4
    seed: int = 0
    max_steps: int = 12

    def __post_init__(self) -> None:
        for name in ("episodes", "epochs", "batch_size", "max_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"--lr must be positive, got {self.lr}")


def check(base: str | Path, directory: str | Path, settings: WarmStartSettings) -> None:
    """Every refusal before a browser starts: the base model, the target, the suite and its oracles."""
    from admire.envs.oracles import oracle_tasks
    from admire.envs.suites import get_suite

    base_dir, target = Path(base), Path(directory)
    if not (base_dir / "config.json").is_file():
        raise ValueError(f"{base_dir} is not a model directory (no config.json): prepare one with "
                         "`admire models prepare tiny-qwen2 DIR`")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(f"{target} exists and is not empty: choose a new directory")
    suite = get_suite(settings.suite)
    without = [task for task in suite.tasks if task.split("/", 1)[-1] not in oracle_tasks()]
    if without:
        raise ValueError(f"--suite {settings.suite}: {without[0]} has no oracle to imitate "
                         f"(tasks with one: admire.envs.oracles.oracle_tasks())")
    from admire.envs.miniwob_browser import BrowserNotFound, resolve_browser_paths

    try:
        resolve_browser_paths()
    except BrowserNotFound as exc:
        raise ValueError(f"the oracles play in MiniWoB++: {exc}") from None


def warm_start(base: str | Path, directory: str | Path, settings: WarmStartSettings, *,
               progress: ProgressFn | None = None) -> dict[str, Any]:
    """Record the demonstrations, imitate them, write the model directory; returns the record written."""
    import torch

    from admire.agent.lm_policy import LMPolicy
    from admire.agent.pretrain import record_oracle_demonstrations
    from admire.agent.sft import pretrain_tokens
    from admire.envs.base import ENVS
    from admire.envs.suites import get_suite
    from admire.progress import counting

    check(base, directory, settings)
    suite = get_suite(settings.suite)
    tasks = suite.train_tasks(len(suite.tasks) * settings.episodes, epoch=0, seed=settings.seed)
    env = ENVS["miniwob"](max_steps=settings.max_steps)
    try:
        demos = record_oracle_demonstrations(env, tasks, max_steps=settings.max_steps,
                                             on_demonstration=counting(progress, len(tasks)))
    finally:
        env.close()
    solved = [demo for demo in demos if demo.outcome > 0]
    if not solved:
        raise ValueError(f"no oracle episode of {settings.suite} succeeded: nothing to imitate")
    torch.manual_seed(settings.seed)
    policy = LMPolicy(path=str(base), seed=settings.seed)
    metrics = pretrain_tokens(policy, solved, epochs=settings.epochs, lr=settings.lr,
                              batch_size=settings.batch_size, seed=settings.seed)
    target = Path(directory)
    building = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}"
    try:
        policy.save_pretrained(building)
        record = {"base": str(Path(base).absolute()), "settings": asdict(settings),
                  "tasks": [{"name": t.name, "seed": t.seed} for t in tasks],
                  "demonstrations": len(solved), "metrics": {k: float(v) for k, v in metrics.items()}}
        (building / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty: check() refused anything else
        building.rename(target)
    finally:
        if building.exists():
            shutil.rmtree(building)
    return record
