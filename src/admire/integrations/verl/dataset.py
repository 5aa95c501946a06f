"""The rows verl's RL dataset reads for an ADMIRE suite: one row per task instance, played by ``admire_gui``.

verl's trainer iterates a parquet file of prompts and hands each row to an agent loop. An ADMIRE prompt
cannot be written ahead of time — each step's prompt is the screen the env shows at that step — so a row
here names a *task instance* and the ``admire_gui`` agent loop (:mod:`admire.integrations.verl.agent_loop`)
builds every prompt as it plays. A row holds:

* ``prompt`` — the chat messages verl's ``RLHFDataset`` requires (it measures and filters on them); a one-line
  placeholder naming the task, never shown to the model;
* ``agent_name: admire_gui`` — verl picks the agent loop per row by this field;
* ``data_source`` — the task name, so verl's per-source validation metrics are per task;
* ``admire_task`` (``<backend>/<template>``), ``admire_seed``, ``admire_params`` (the task's params as a JSON
  object in a string: a parquet struct cannot be empty) and ``admire_split`` (``train`` or ``eval``) — top-level
  columns, which verl passes to the agent loop's ``run`` as keyword arguments;
* ``extra_info: {index, split}`` — verl's own bookkeeping (``index`` is the row's position in its file).

The seeds are the CPU trainer's: the train file is ``Suite.train_tasks(tasks_per_epoch, epoch=e, seed=run.seed,
instances_per_task=…)`` for ``e = 0 … total_epochs-1``, in that order, and the val file is
``Suite.eval_tasks(eval_episodes)`` — the disjoint seed ranges of :mod:`admire.envs.suites`, so no evaluation
episode is ever one trained on. Read with ``data.shuffle=false``, ``data.train_batch_size=tasks_per_epoch`` and
``trainer.total_epochs=1``, verl's training step ``k`` plays exactly the tasks of the CPU trainer's epoch ``k``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from admire.envs.suites import DEFAULT_EVAL_EPISODES_PER_TASK, Split, Suite, get_suite
from admire.extras import require
from admire.types import Task

AGENT_NAME = "admire_gui"
"""The agent loop's name in verl's registry and in every row's ``agent_name``."""

TRAIN_FILE = "train.parquet"
VAL_FILE = "val.parquet"
ROW_KEYS = ("admire_task", "admire_seed", "admire_params", "admire_split")
"""The row columns that name the task instance (what :func:`task_from_row` reads)."""


def task_row(task: Task, split: Split, index: int) -> dict[str, Any]:
    """One dataset row for ``task`` (see the module docstring for the fields)."""
    return {
        "prompt": [{"role": "user", "content": f"ADMIRE GUI task {task.name} (seed {task.seed}); the admire_gui "
                                               "agent loop builds each step's prompt from the screen."}],
        "data_source": task.name,
        "agent_name": AGENT_NAME,
        "admire_task": task.name,
        "admire_seed": int(task.seed),
        "admire_params": json.dumps(dict(task.params), sort_keys=True, ensure_ascii=False),
        "admire_split": split,
        "extra_info": {"index": int(index), "split": split},
    }


def task_from_row(row: Mapping[str, Any]) -> Task:
    """The task a row names, from its top-level ``admire_*`` columns (as verl passes them to the agent loop).

    A row without ``admire_task`` is not one of ours: ``ValueError`` naming the fix."""
    name = row.get("admire_task")
    if not isinstance(name, str) or "/" not in name:
        raise ValueError(f"the admire_gui agent loop needs a dataset row with admire_task='<backend>/<task>' (got "
                         f"{name!r}); write the dataset with admire.integrations.verl.dataset.write_task_dataset")
    params = row.get("admire_params") or "{}"
    return Task(name=name, seed=int(row.get("admire_seed", 0)),
                params=json.loads(params) if isinstance(params, str) else dict(params))


def task_rows(tasks: Sequence[Task], split: Split) -> list[dict[str, Any]]:
    """Rows for ``tasks`` in order, indexed from 0."""
    return [task_row(task, split, i) for i, task in enumerate(tasks)]


def train_tasks(suite: Suite, *, epochs: int, tasks_per_epoch: int, seed: int = 0,
                instances_per_task: int | None = None) -> list[Task]:
    """The CPU trainer's training tasks of every epoch, epoch after epoch (``Suite.train_tasks``)."""
    if epochs < 1 or tasks_per_epoch < 1:
        raise ValueError(f"the verl dataset needs trainer.total_epochs >= 1 and trainer.tasks_per_epoch >= 1, "
                         f"got {epochs} and {tasks_per_epoch}")
    return [task for epoch in range(epochs)
            for task in suite.train_tasks(tasks_per_epoch, epoch=epoch, seed=seed,
                                          instances_per_task=instances_per_task)]


def write_task_dataset(
    source: Any, out_dir: str | Path, *, epochs: int | None = None, tasks_per_epoch: int | None = None,
    seed: int | None = None, instances_per_task: int | None = None, eval_per_task: int | None = None,
) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``val.parquet`` into ``out_dir``; returns their paths.

    ``source`` is an ADMIRE config (its ``env.suite``, ``trainer.total_epochs``, ``trainer.tasks_per_epoch``,
    ``run.seed``, ``env.train_instances_per_task`` and ``trainer.eval_episodes`` give the defaults), a
    :class:`~admire.envs.suites.Suite` or a suite name; keyword arguments override what the config says. With a
    suite, ``epochs`` defaults to 1, ``tasks_per_epoch`` to one per template, ``eval_per_task`` to 20.
    """
    require("pyarrow", extra="verl", feature="the verl task dataset")
    import pyarrow as pa
    import pyarrow.parquet as pq

    settings = _settings(source)
    suite = settings.pop("suite")
    chosen = {"epochs": epochs, "tasks_per_epoch": tasks_per_epoch, "seed": seed,
              "instances_per_task": instances_per_task, "eval_per_task": eval_per_task}
    settings.update({k: v for k, v in chosen.items() if v is not None})
    train = train_tasks(suite, epochs=int(settings["epochs"]), tasks_per_epoch=int(settings["tasks_per_epoch"]),
                        seed=int(settings["seed"]), instances_per_task=settings["instances_per_task"])
    evaluation = suite.eval_tasks(int(settings["eval_per_task"]))
    if not evaluation:
        raise ValueError("the verl dataset needs trainer.eval_episodes >= 1 (verl validates on val.parquet)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / TRAIN_FILE, out / VAL_FILE)
    for path, rows in zip(paths, (task_rows(train, "train"), task_rows(evaluation, "eval")), strict=True):
        pq.write_table(pa.Table.from_pylist(rows), path)
    return paths


def _settings(source: Any) -> dict[str, Any]:
    """Suite and defaults from a config, a suite or a suite name."""
    if isinstance(source, Suite | str):
        suite = source if isinstance(source, Suite) else get_suite(source)
        return {"suite": suite, "epochs": 1, "tasks_per_epoch": len(suite.tasks), "seed": 0,
                "instances_per_task": None, "eval_per_task": DEFAULT_EVAL_EPISODES_PER_TASK}
    try:
        env, trainer = source.env, source.trainer
    except AttributeError:  # a typed config (admire.config_schema.TrainingConfig) has both
        raise TypeError(f"write_task_dataset takes an ADMIRE config, a Suite or a suite name, "
                        f"got {type(source).__name__}") from None
    return {"suite": get_suite(env.suite), "epochs": trainer.total_epochs, "tasks_per_epoch": trainer.tasks_per_epoch,
            "seed": source.run.seed, "instances_per_task": env.train_instances_per_task,
            "eval_per_task": trainer.eval_episodes}
