"""Task suites: names, contents, and deterministic disjoint train/eval seeds."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from admire.envs.miniwob import miniwob_task_names
from admire.envs.suites import (
    EVAL_SEED_START,
    MAX_EVAL_EPISODES_PER_TASK,
    TRAIN_SEEDS,
    VALIDATION_SEED_START,
    Suite,
    get_suite,
    list_suites,
    load_suites,
)
from admire.types import Task


def test_the_built_in_suites():
    assert {"miniwob-smoke", "miniwob-demo", "miniwob-multistep", "miniwob-all"} <= set(list_suites())
    assert get_suite("miniwob-smoke").templates == ("click-test", "click-test-2", "click-button")
    assert 5 <= len(get_suite("miniwob-demo").tasks) <= 8
    assert 12 <= len(get_suite("miniwob-multistep").tasks) <= 18
    assert all(name.startswith("miniwob/") for name in get_suite("miniwob-demo").tasks)


def test_miniwob_all_is_every_task_of_the_package():
    everything = get_suite("miniwob-all")
    assert everything.templates == miniwob_task_names()
    assert len(everything.tasks) >= 100
    for name in ("miniwob-smoke", "miniwob-demo", "miniwob-multistep"):
        assert set(get_suite(name).templates) <= set(everything.templates), name


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown suite 'nope'.*miniwob-demo"):
        get_suite("nope")


def test_ad_hoc_suite_from_task_names():
    suite = get_suite("miniwob/login-user, miniwob/click-test")
    assert suite.tasks == ("miniwob/login-user", "miniwob/click-test")


def test_train_tasks_are_deterministic_balanced_and_change_with_the_epoch():
    suite = get_suite("miniwob-demo")
    first = suite.train_tasks(60, epoch=0)
    assert first == suite.train_tasks(60, epoch=0)
    assert [t.seed for t in first] != [t.seed for t in suite.train_tasks(60, epoch=1)]
    assert set(Counter(t.name for t in first).values()) == {10}
    assert all(t.seed in TRAIN_SEEDS for t in first)
    counts = Counter(t.name for t in suite.train_tasks(8, epoch=3))
    assert max(counts.values()) - min(counts.values()) <= 1 and len(counts) == 6


def test_eval_seeds_are_fixed_and_disjoint_from_training():
    suite = get_suite("miniwob-multistep")
    evaluation = suite.split("eval", 5)
    assert evaluation == suite.eval_tasks(per_task=5)
    assert [t.seed for t in evaluation[:5]] == list(range(EVAL_SEED_START, EVAL_SEED_START + 5))
    assert len(evaluation) == 5 * len(suite.tasks)
    train_seeds = {t.seed for epoch in range(3) for t in suite.train_tasks(100, epoch=epoch)}
    assert train_seeds.isdisjoint({t.seed for t in suite.eval_tasks()})
    assert len(suite.split("train")) == len(suite.tasks)
    with pytest.raises(ValueError, match="'train' or 'eval'"):
        suite.split("test")


def test_validation_test_and_training_seeds_are_three_disjoint_ranges():
    suite = get_suite("miniwob-demo")
    validation = {t.seed for t in suite.eval_tasks(per_task=50, split="validation")}
    test = {t.seed for t in suite.eval_tasks(per_task=50, split="test")}
    train = {t.seed for epoch in range(5) for t in suite.train_tasks(100, epoch=epoch)}
    assert min(validation) == VALIDATION_SEED_START and min(test) == EVAL_SEED_START
    assert validation.isdisjoint(test) and validation.isdisjoint(train) and test.isdisjoint(train)
    assert TRAIN_SEEDS.stop <= EVAL_SEED_START  # and disjoint up to the cap on held-out seeds per task:
    assert EVAL_SEED_START + MAX_EVAL_EPISODES_PER_TASK <= VALIDATION_SEED_START
    assert suite.eval_tasks(per_task=3) == suite.eval_tasks(per_task=3, split="test")  # the default: as before
    with pytest.raises(ValueError, match="validation, test"):
        suite.eval_tasks(per_task=3, split="train")  # type: ignore[arg-type]


def test_a_users_yaml_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("forms:\n  backend: miniwob\n  description: two forms\n  tasks: [login-user, enter-text]\n")
    suites = load_suites(path)
    assert suites["forms"] == Suite(name="forms", tasks=("miniwob/login-user", "miniwob/enter-text"),
                                    description="two forms")
    path.write_text("broken:\n  tasks: [login-user]\n")
    with pytest.raises(ValueError, match="needs 'backend' and 'tasks'"):
        load_suites(path)


def test_bad_suites_are_refused():
    with pytest.raises(ValueError, match="no tasks"):
        Suite(name="empty", tasks=())
    with pytest.raises(ValueError, match="'<backend>/<task>'"):
        Suite(name="bare", tasks=("login-user",))


def test_a_fixed_pool_of_training_instances_recurs_every_epoch():
    suite = get_suite("miniwob-demo")
    epochs = [suite.train_tasks(24, epoch=e, seed=7, instances_per_task=3) for e in range(5)]
    for task in suite.tasks:
        pool = suite.instance_pool(task, 3, seed=7)
        assert len(set(pool)) == 3 and all(s in TRAIN_SEEDS for s in pool)
        seen = [t.seed for tasks in epochs for t in tasks if t.name == task]
        assert set(seen) == set(pool)  # every instance recurs, nothing else is drawn
        # 4 draws per epoch from a pool of 3: the whole pool is used before a seed repeats
        first = [t.seed for t in epochs[0] if t.name == task]
        assert len(first) == 4 and set(first[:3]) == set(pool)
    assert epochs[0] == suite.train_tasks(24, epoch=0, seed=7, instances_per_task=3)
    assert set(Counter(t.name for t in epochs[2]).values()) == {4}


def test_instance_pools_depend_on_suite_task_and_run_seed_and_stay_off_the_eval_seeds():
    demo, smoke = get_suite("miniwob-demo"), get_suite("miniwob-smoke")
    task = demo.tasks[0]
    assert demo.instance_pool(task, 8, seed=0) == demo.instance_pool(task, 8, seed=0)
    assert demo.instance_pool(task, 8, seed=0) != demo.instance_pool(task, 8, seed=1)
    assert demo.instance_pool(task, 8) != demo.instance_pool(demo.tasks[1], 8)
    other = Suite(name="other", tasks=demo.tasks)
    assert other.instance_pool(task, 8) != demo.instance_pool(task, 8)
    eval_seeds = {t.seed for t in demo.eval_tasks(1000)}
    assert eval_seeds.isdisjoint(demo.instance_pool(task, 500))
    with pytest.raises(ValueError, match="train_instances_per_task"):
        demo.train_tasks(6, instances_per_task=0)
    with pytest.raises(ValueError, match="not in suite"):
        demo.instance_pool(smoke.tasks[0], 3)


def test_without_a_pool_the_seeds_are_fresh_as_before():
    suite = get_suite("miniwob-demo")
    assert suite.train_tasks(12, epoch=2, seed=1) == suite.train_tasks(12, epoch=2, seed=1, instances_per_task=None)
    seeds = [t.seed for e in range(4) for t in suite.train_tasks(12, epoch=e, seed=1)]
    assert len(set(seeds)) == len(seeds)


def test_a_goal_template_is_filled_without_str_format() -> None:
    from admire.envs.goal_template import MAX_GOAL_TEMPLATE, fill_goal_template

    assert fill_goal_template("Do: {utterance} {{now}}", "click {0.__class__}") == "Do: click {0.__class__} {now}"
    assert fill_goal_template("{utterance} / {utterance}", "x") == "x / x"
    for bad, phrase in [("{nope}", "may hold only {utterance}"), ("{utterance!r}", "'{utterance!r}'"),
                        ("{utterance:>100000000}", "'{utterance:>100000000}'"), ("{utterance[0]}", "only"),
                        ("{", "malformed"), ("no field", "must contain {utterance}"),
                        ("{utterance}" + "x" * MAX_GOAL_TEMPLATE, f"at most {MAX_GOAL_TEMPLATE}")]:
        with pytest.raises(ValueError, match=re.escape(phrase)):
            fill_goal_template(bad, "goal")
    with pytest.raises(ValueError, match=r"suite 'bad': goal_template may hold only"):
        Suite("bad", ("miniwob/click-test",), goal_template="{utterance} {other}")


def test_the_miniwob_env_refuses_a_bad_goal_template_before_any_browser() -> None:
    from admire.envs.miniwob import check_task

    with pytest.raises(ValueError, match="goal_template may hold only"):
        check_task(Task(name="miniwob/click-test", params={"goal_template": "{utterance.__class__}"}))
    assert check_task(Task(name="miniwob/click-test", params={"goal_template": "Follow: {utterance}"})) == "click-test"
