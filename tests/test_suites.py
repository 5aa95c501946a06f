"""Task suites: names, contents, and deterministic disjoint train/eval seeds."""

from __future__ import annotations

from collections import Counter

import pytest

from admire.envs.miniwob import miniwob_task_names
from admire.envs.suites import (
    EVAL_SEED_START,
    TRAIN_SEEDS,
    Suite,
    get_suite,
    list_suites,
    load_suites,
)


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
