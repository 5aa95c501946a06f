"""Tests leave the plug-in registries as they found them: what one test registers is gone in the next
(the autouse fixture of ``tests/conftest.py``), and the fixture knows every registry the package has."""

from __future__ import annotations

import re

import pytest

from admire.agent.base import POLICIES, register_policy
from admire.envs.base import DEVICE_POOLS, ENVS, register_env
from admire.envs.executors import EXECUTORS
from admire.milestones.generator import GENERATORS, register_generator
from admire.models import MODELS
from admire.rl.advantages import ADVANTAGE_ESTIMATORS, register_advantage
from tests.support.fakes import FormEnv
from tests.support.paths import REPO
from tests.support.registries import REGISTRIES, all_registries, registries_restored

NAME = "leaked-by-the-previous-test"
BUILT_IN = {"env": "miniwob", "estimator": "grpo_step"}


def test_what_a_test_registers_replaces_or_removes_is_undone_after_it() -> None:
    # The autouse fixture's own context, entered here, so the check needs no second test run after this one.
    with registries_restored():
        register_env(NAME)(FormEnv)
        register_policy(NAME)(lambda **_options: None)
        register_generator(NAME)(lambda **_options: None)
        register_advantage(NAME)(lambda samples, **_options: None)
        EXECUTORS[NAME] = lambda *args, **kwargs: None
        MODELS[NAME] = None
        DEVICE_POOLS[NAME] = lambda section, count, build: build
        ENVS.entries[BUILT_IN["env"]] = FormEnv  # replaced
        del ADVANTAGE_ESTIMATORS[BUILT_IN["estimator"]]  # removed
        assert all(NAME in registry for registry in all_registries())
    assert not any(NAME in registry for registry in all_registries())
    assert ENVS.target("miniwob") == "admire.envs.miniwob:MiniWoBEnv"
    assert "grpo_step" in ADVANTAGE_ESTIMATORS and ADVANTAGE_ESTIMATORS["grpo_step"].__name__ == "grpo_step"
    assert {POLICIES.kind, GENERATORS.kind} <= {registry.kind for registry in all_registries()}


def test_the_fixture_restores_every_registry_the_package_defines() -> None:
    defined = set()
    for path in (REPO / "src" / "admire").rglob("*.py"):
        module = ".".join(path.relative_to(REPO / "src").with_suffix("").parts).removesuffix(".__init__")
        for attr in re.findall(r"^([A-Z_]+)(?:: Registry\[[^\]]*\])? = Registry\(", path.read_text(), re.M):
            defined.add(f"{module}:{attr}")
    assert defined == set(REGISTRIES)


def test_assigning_a_taken_name_is_refused_as_registering_it_is() -> None:
    with registries_restored():
        with pytest.raises(ValueError, match=r"^a environment backend named 'miniwob' is already registered"):
            ENVS["miniwob"] = FormEnv
        ENVS[NAME] = FormEnv
        ENVS[NAME] = FormEnv  # the same object again: harmless
        with pytest.raises(ValueError, match="already registered"):
            ENVS[NAME] = type("Other", (FormEnv,), {})
        ENVS.entries[NAME] = type("Other", (FormEnv,), {})  # a test's explicit swap
