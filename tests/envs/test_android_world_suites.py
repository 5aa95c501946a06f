"""The AndroidWorld suites: task names AndroidWorld has, disjoint seeds, and its MiniWoB family reproduced on
MiniWoB++ with AndroidWorld's own goal template."""

from __future__ import annotations

import importlib
import json

import pytest

from admire.envs.suites import EVAL_SEED_START, Suite, get_suite, list_suites, load_suites
from tests.support.android_fake import use_source_copy
from tests.support.paths import TESTS

use_source_copy()  # AndroidWorld's modules from tests/third_party (already done by importing the fake)
miniwob_base = importlib.import_module("android_world.task_evals.miniwob.miniwob_base")
miniwob_registry = importlib.import_module("android_world.task_evals.miniwob.miniwob_registry")

METADATA = TESTS / "third_party" / "android_world" / "task_metadata.json"
ANDROID_SUITES = [name for name in list_suites() if name.startswith("android-world")]


def test_android_world_suites_name_androidworld_tasks() -> None:
    known = {entry["task_name"] for entry in json.loads(METADATA.read_text(encoding="utf-8"))}
    assert len(known) == 116 and ANDROID_SUITES
    for name in ANDROID_SUITES:
        suite = get_suite(name)
        assert all(t.startswith("android_world/") for t in suite.tasks)
        assert set(suite.templates) <= known, set(suite.templates) - known


def test_the_easy_suite_is_every_task_androidworld_rates_easy() -> None:
    easy = {e["task_name"] for e in json.loads(METADATA.read_text(encoding="utf-8")) if e["difficulty"] == "easy"}
    assert set(get_suite("android-world-easy").templates) == easy


def test_android_world_train_and_eval_instances_are_disjoint() -> None:
    suite = get_suite("android-world-system")
    train = {(t.name, t.seed) for epoch in range(3) for t in suite.train_tasks(50, epoch=epoch)}
    evaluation = {(t.name, t.seed) for t in suite.eval_tasks(5)}
    assert train and evaluation and not train & evaluation
    assert min(seed for _, seed in evaluation) == EVAL_SEED_START


def test_android_miniwob_is_androidworlds_miniwob_subset_with_its_goal_template() -> None:
    suite = get_suite("android-miniwob")
    assert set(suite.templates) == set(miniwob_registry.TASK_REGISTRY_SUBSET)
    assert suite.goal_template == miniwob_base.MiniWoBTask.template
    assert all(t.params == {"goal_template": miniwob_base.MiniWoBTask.template}
               for t in suite.train_tasks(4) + suite.eval_tasks(1) + suite.train_tasks(3, instances_per_task=2))
    assert get_suite("miniwob-demo").eval_tasks(1)[0].params == {}


def test_a_goal_template_without_the_utterance_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"suite 'x': goal_template must contain \{utterance\}"):
        Suite(name="x", tasks=("miniwob/click-test",), goal_template="Do it")
    path = tmp_path / "suites.yaml"
    path.write_text("mine:\n  backend: miniwob\n  goal_template: 'Now: {utterance}'\n  tasks: [click-test]\n")
    assert load_suites(path)["mine"].eval_tasks(1)[0].params == {"goal_template": "Now: {utterance}"}


@pytest.mark.browser
def test_miniwob_shows_the_suites_goal_template(miniwob_env) -> None:
    plain = miniwob_env.reset(get_suite("miniwob-smoke").eval_tasks(1)[0])
    task = get_suite("android-miniwob").eval_tasks(1)[0]
    task = task.model_copy(update={"name": "miniwob/click-test"})
    prefixed = miniwob_env.reset(task)
    assert prefixed.goal == f"Follow the instructions shown on the top of the screen: {plain.goal}"
