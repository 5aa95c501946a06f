"""Named task suites and their train/eval splits.

A suite is a list of task templates; the split decides the seeds. Train seeds are drawn from
``TRAIN_SEEDS``; held-out seeds are ``VALIDATION_SEED_START + i`` (the validation split, read for every
choice: learning rate, trust region, budget) or ``EVAL_SEED_START + i`` (the test split, read once per
configuration for a reported table). The three ranges are disjoint, so a held-out episode is never one the
policy trained on nor one a choice was made on, and all are deterministic, so two runs with the same
config see the same tasks in the same order. Suites live in ``suites.yaml`` beside this file; a user's
own YAML file of the same shape can be loaded with :func:`load_suites`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from admire.envs.goal_template import fill_goal_template
from admire.types import Task

SUITES_FILE = Path(__file__).with_name("suites.yaml")
TRAIN_SEEDS = range(0, 100_000)
EVAL_SEED_START = 1_000_000  # the test split
VALIDATION_SEED_START = 2_000_000
DEFAULT_EVAL_EPISODES_PER_TASK = 20
MAX_EVAL_EPISODES_PER_TASK = 100_000
"""Held-out seeds per task at most: far beyond any table, and a typo of 10^20 fails at once, not after days."""
ALL_TASKS = "all"

Split = Literal["train", "eval"]
HeldOutSplit = Literal["validation", "test"]
HELD_OUT_SPLITS: tuple[str, ...] = ("validation", "test")


@dataclass(frozen=True)
class Suite:
    """A named list of tasks (full names, ``miniwob/login-user``) and its seeded splits."""

    name: str
    tasks: tuple[str, ...]
    description: str = ""
    goal_template: str | None = None
    """Put into every task's ``params`` (``Task.params["goal_template"]``): a backend that honours it shows
    the goal as ``fill_goal_template(goal_template, <its own goal>)``. ``android-miniwob`` uses AndroidWorld's
    MiniWoB template, so MiniWoB++ episodes read as AndroidWorld's MiniWoB family does."""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"suite {self.name!r} has no tasks")
        bad = [t for t in self.tasks if "/" not in t]
        if bad:
            raise ValueError(f"suite {self.name!r}: task names are '<backend>/<task>', got {bad}")
        if self.goal_template is not None:
            try:
                fill_goal_template(self.goal_template, "")
            except ValueError as error:
                raise ValueError(f"suite {self.name!r}: {error}") from None

    @property
    def task_params(self) -> dict[str, Any]:
        """The params every task of this suite carries (``goal_template`` when the suite sets one)."""
        return {} if self.goal_template is None else {"goal_template": self.goal_template}

    @property
    def templates(self) -> tuple[str, ...]:
        return tuple(t.split("/", 1)[1] for t in self.tasks)

    def train_tasks(self, n: int, epoch: int = 0, seed: int = 0, instances_per_task: int | None = None) -> list[Task]:
        """``n`` training tasks for ``epoch``: every template about ``n / len(tasks)`` times, in a
        shuffled order. The same ``(epoch, seed)`` gives the same list.

        ``instances_per_task=None``: each task gets a fresh seed from ``TRAIN_SEEDS`` (another epoch
        gives other seeds, so an instruction practically never recurs). An int ``m``: each template has
        a fixed pool of ``m`` training seeds (:meth:`instance_pool`) that recurs every epoch, the
        paper's setting of a finite training set seen again and again; within an epoch a template's
        seeds are taken from its pool in a fresh shuffled order, so all of the pool is visited before
        a seed repeats.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        rng = random.Random(f"{self.name}|train|{seed}|{epoch}")
        names: list[str] = []
        while len(names) < n:
            block = list(self.tasks)
            rng.shuffle(block)
            names.extend(block)
        names = names[:n]
        if instances_per_task is None:
            return [Task(name=name, seed=rng.randrange(TRAIN_SEEDS.start, TRAIN_SEEDS.stop), params=self.task_params)
                    for name in names]
        draws: dict[str, list[int]] = {}
        tasks = []
        for name in names:
            if not draws.get(name):
                pool = list(self.instance_pool(name, instances_per_task, seed))
                rng.shuffle(pool)
                draws[name] = pool
            tasks.append(Task(name=name, seed=draws[name].pop(), params=self.task_params))
        return tasks

    def instance_pool(self, task: str, size: int, seed: int = 0) -> tuple[int, ...]:
        """The ``size`` recurring training seeds of ``task`` (``env.train_instances_per_task``).

        Deterministic from the suite name, the task and the run seed, drawn without replacement from
        ``TRAIN_SEEDS`` (so disjoint from the evaluation seeds), and sorted.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"env.train_instances_per_task must be a positive integer or null, got {size!r}")
        if task not in self.tasks:
            raise ValueError(f"task {task!r} is not in suite {self.name!r}")
        rng = random.Random(f"{self.name}|pool|{seed}|{task}")
        return tuple(sorted(rng.sample(TRAIN_SEEDS, size)))

    def eval_tasks(self, per_task: int = DEFAULT_EVAL_EPISODES_PER_TASK, split: HeldOutSplit = "test") -> list[Task]:
        """A fixed held-out set: seeds ``start .. start + per_task - 1`` of every template, where ``start`` is
        ``EVAL_SEED_START`` for the test split and ``VALIDATION_SEED_START`` for the validation split."""
        if not 0 <= per_task <= MAX_EVAL_EPISODES_PER_TASK:
            raise ValueError(f"per_task must be in [0, {MAX_EVAL_EPISODES_PER_TASK}], got {per_task}")
        if split not in HELD_OUT_SPLITS:
            raise ValueError(f"a held-out split is one of {', '.join(HELD_OUT_SPLITS)}, got {split!r}")
        start = EVAL_SEED_START if split == "test" else VALIDATION_SEED_START
        return [Task(name=name, seed=start + i, params=self.task_params)
                for name in self.tasks for i in range(per_task)]

    def split(self, split: Split, n: int | None = None, epoch: int = 0) -> list[Task]:
        """``split("train", n, epoch)``: ``n`` training tasks (default one per template);
        ``split("eval", n)``: ``n`` episodes per template (default 20)."""
        if split == "train":
            return self.train_tasks(len(self.tasks) if n is None else n, epoch=epoch)
        if split == "eval":
            return self.eval_tasks(DEFAULT_EVAL_EPISODES_PER_TASK if n is None else n)
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")


def load_suites(path: str | Path = SUITES_FILE) -> dict[str, Suite]:
    """Read a suites YAML file: ``{name: {backend, description, tasks: [templates] | all, goal_template}}``."""
    return {name: _suite_from_yaml(name, spec, path) for name, spec in _read_specs(path).items()}


def _read_specs(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a mapping of suite names to suites")
    return {str(name): spec for name, spec in data.items()}


def _suite_from_yaml(name: str, spec: Any, path: str | Path) -> Suite:
    if not isinstance(spec, Mapping) or "tasks" not in spec or "backend" not in spec:
        raise ValueError(f"{path}: suite {name!r} needs 'backend' and 'tasks'")
    backend = str(spec["backend"])
    tasks = spec["tasks"]
    if tasks == ALL_TASKS:
        tasks = _all_tasks(backend)
    if not isinstance(tasks, list | tuple) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"{path}: suite {name!r}: 'tasks' must be a list of task names or 'all'")
    full = tuple(t if "/" in t else f"{backend}/{t}" for t in tasks)
    template = spec.get("goal_template")
    return Suite(name=name, tasks=full, description=str(spec.get("description", "")).strip(),
                 goal_template=None if template is None else str(template))


def _all_tasks(backend: str) -> list[str]:
    if backend != "miniwob":
        raise ValueError(f"'tasks: all' is only known for the miniwob backend, not {backend!r}")
    from admire.envs.miniwob import miniwob_task_names  # imports miniwob and gymnasium

    return list(miniwob_task_names())


@cache
def _builtin_specs() -> dict[str, Any]:
    return _read_specs(SUITES_FILE)


def list_suites() -> list[str]:
    """Names of the built-in suites."""
    return sorted(_builtin_specs())


@cache
def get_suite(name: str) -> Suite:
    """A built-in suite by name, or an ad-hoc one from comma-separated task names
    (``"miniwob/login-user,miniwob/click-test"``). Only ``miniwob-all`` imports miniwob."""
    if "/" in name:
        tasks = tuple(t.strip() for t in name.split(",") if t.strip())
        return Suite(name=name, tasks=tasks, description="ad-hoc suite")
    specs = _builtin_specs()
    if name not in specs:
        raise KeyError(f"unknown suite {name!r}; known suites: {', '.join(sorted(specs))}")
    return _suite_from_yaml(name, specs[name], SUITES_FILE)
