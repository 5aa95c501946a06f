"""The verl task dataset: the CPU trainer's task instances as parquet rows that verl's own ``RLHFDataset`` reads and
that the ``admire_gui`` agent loop turns back into the same tasks."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from admire.config import load_config
from admire.envs.suites import EVAL_SEED_START, TRAIN_SEEDS, get_suite
from admire.integrations.verl.dataset import AGENT_NAME, task_from_row, write_task_dataset
from admire.types import Task
from tests.support.models import tiny_qwen2_dir  # noqa: F401 - the session's prepared tiny model

CONFIG = ["env.suite=miniwob-smoke", "trainer.total_epochs=3", "trainer.tasks_per_epoch=4", "run.seed=5",
          "trainer.eval_episodes=2"]


def tasks_in(path: Path) -> list[Task]:
    return [task_from_row(row) for row in pq.read_table(path).to_pylist()]


def test_the_train_file_is_the_cpu_trainers_tasks_epoch_after_epoch_and_val_its_eval_set(tmp_path: Path) -> None:
    train, val = write_task_dataset(load_config(overrides=CONFIG), tmp_path / "data")
    assert (train.name, val.name, train.parent) == ("train.parquet", "val.parquet", tmp_path / "data")
    suite = get_suite("miniwob-smoke")
    expected = [t for epoch in range(3) for t in suite.train_tasks(4, epoch=epoch, seed=5)]
    assert tasks_in(train) == expected and len(expected) == 12
    assert tasks_in(val) == suite.eval_tasks(2)
    assert all(t.seed in TRAIN_SEEDS for t in tasks_in(train))
    assert all(t.seed >= EVAL_SEED_START for t in tasks_in(val))  # disjoint from every training seed


def test_rows_carry_what_verl_needs_and_name_the_task(tmp_path: Path) -> None:
    train, _ = write_task_dataset("miniwob-smoke", tmp_path)
    rows = pq.read_table(train).to_pylist()
    assert [r["extra_info"] for r in rows] == [{"index": i, "split": "train"} for i in range(3)]
    for row in rows:
        assert row["agent_name"] == AGENT_NAME == "admire_gui"
        assert row["data_source"] == row["admire_task"] and row["admire_split"] == "train"
        (message,) = row["prompt"]
        assert message["role"] == "user" and row["admire_task"] in message["content"]


def test_a_fixed_instance_pool_and_a_suites_goal_template_reach_the_rows(tmp_path: Path) -> None:
    overrides = [*CONFIG, "env.suite=android-miniwob", "env.train_instances_per_task=2"]
    train, val = write_task_dataset(load_config(overrides=overrides), tmp_path)
    suite = get_suite("android-miniwob")
    assert suite.goal_template is not None
    tasks = tasks_in(train)
    assert tasks == [t for e in range(3) for t in suite.train_tasks(4, epoch=e, seed=5, instances_per_task=2)]
    assert all(t.params == {"goal_template": suite.goal_template} for t in tasks + tasks_in(val))
    assert all(t.seed in suite.instance_pool(t.name, 2, seed=5) for t in tasks)


def test_keyword_arguments_override_the_config(tmp_path: Path) -> None:
    train, val = write_task_dataset(load_config(overrides=CONFIG), tmp_path, epochs=1, tasks_per_epoch=2,
                                    seed=9, eval_per_task=1)
    suite = get_suite("miniwob-smoke")
    assert tasks_in(train) == suite.train_tasks(2, epoch=0, seed=9)
    assert tasks_in(val) == suite.eval_tasks(1)


def test_verls_rl_dataset_reads_the_files_and_hands_the_task_to_the_agent_loop(tmp_path: Path,
                                                                              tiny_qwen2_dir) -> None:  # noqa: F811
    train, val = write_task_dataset(load_config(overrides=CONFIG), tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen2_dir, local_files_only=True)
    config = {"prompt_key": "prompt", "max_prompt_length": 256, "filter_overlong_prompts": False,  # verl's defaults
              "cache_dir": str(tmp_path / "cache")}
    dataset = RLHFDataset(str(train), tokenizer, config)
    assert len(dataset) == 12
    longest = max(len(tokenizer.apply_chat_template(dataset[i]["raw_prompt"], add_generation_prompt=True,
                                                    tokenize=True)["input_ids"]) for i in range(12))
    assert longest < 64  # the placeholder never trips data.filter_overlong_prompts
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    assert list(batch["agent_name"]) == [AGENT_NAME] * 12
    assert list(batch["index"]) == list(range(12))
    rows = [{key: batch[key][i] for key in ("admire_task", "admire_seed", "admire_params")} for i in range(12)]
    assert [task_from_row(r) for r in rows] == tasks_in(train)
    assert len(RLHFDataset(str(val), tokenizer, config)) == len(get_suite("miniwob-smoke").tasks) * 2


def test_what_is_not_a_config_suite_or_row_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="an ADMIRE config, a Suite or a suite name"):
        write_task_dataset(42, tmp_path)
    with pytest.raises(ValueError, match=r"admire_task='<backend>/<task>'.*write_task_dataset"):
        task_from_row({"prompt": [], "uid": "x"})
    with pytest.raises(ValueError, match=r"trainer.total_epochs >= 1"):
        write_task_dataset("miniwob-smoke", tmp_path, epochs=0)
