"""CONTRIBUTING.md's recipes work as written. Each plug-in's code block (marked ``<!-- recipe: <kind> -->``) is
saved as the module its entry-point line names, registered through that line as an installed package's entry
point would be, and checked with the project's own checkers: ``check_env`` for the backend, ``check_policy`` for
the policy, ``compute_advantages`` through the registry for the estimator. Then the three train together and
the policy learns the backend's task. A recipe that rots fails here."""

from __future__ import annotations

import importlib
import importlib.metadata
import random
import re
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from admire.agent import check_policy
from admire.agent.base import POLICIES
from admire.config import load_config
from admire.config_schema import ConfigError, validate_config
from admire.envs import check_env
from admire.envs.base import ENVS
from admire.registry import Registry
from admire.rl.advantages import ADVANTAGE_ESTIMATORS, GroupSample, compute_advantages
from admire.rl.trainer import train
from admire.runs import RunDir
from tests.support.fakes import TrigramEncoder
from tests.support.paths import REPO

CONTRIBUTING = REPO / "CONTRIBUTING.md"
_RECIPE = re.compile(r"^<!-- recipe: ([a-z-]+) -->\n```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)
KINDS = ("backend", "policy", "estimator")
GROUPS: dict[str, Registry[Any]] = {"admire.envs": ENVS, "admire.policies": POLICIES,
                                    "admire.advantages": ADVANTAGE_ESTIMATORS}
"""The registries of the recipes' entry-point groups."""


def recipes() -> dict[str, tuple[str, str]]:
    """Every marked block of CONTRIBUTING.md: name -> (language, code)."""
    found: dict[str, tuple[str, str]] = {}
    for name, language, code in _RECIPE.findall(CONTRIBUTING.read_text(encoding="utf-8")):
        assert name not in found, f"two blocks are marked 'recipe: {name}'"
        found[name] = (language, code)
    return found


def block(name: str, language: str) -> str:
    found = recipes()
    assert name in found, f"CONTRIBUTING.md has no block marked <!-- recipe: {name} -->"
    assert found[name][0] == language, f"the block 'recipe: {name}' is {found[name][0]}, expected {language}"
    return found[name][1]


def check_command(kind: str, module: str) -> list[str]:
    """The arguments of the recipe's check command, which must be ``python -m <module> …``."""
    lines = [line for line in block(f"{kind}-check", "bash").splitlines() if line.strip()]
    assert len(lines) == 1, f"the {kind} check is one command, got {lines}"
    argv = shlex.split(lines[0], comments=True)
    assert argv[:3] == ["python", "-m", module], f"the {kind} check runs {argv[:3]}, expected python -m {module}"
    return argv[3:]


Install = Callable[[str], str]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """``install(kind)``: the recipe's module written where its entry point says, the entry point visible to the
    registries (they read entry points afresh); returns the registered name. The modules are forgotten after the
    test, and the autouse fixture of conftest.py puts the registries back."""
    monkeypatch.syspath_prepend(str(tmp_path))
    declared: list[importlib.metadata.EntryPoint] = []
    real = importlib.metadata.entry_points

    def entry_points(**selection: str) -> list[importlib.metadata.EntryPoint]:
        return [*real(**selection), *(p for p in declared if p.group == selection.get("group"))]

    monkeypatch.setattr("admire.registry.entry_points", entry_points)
    packages: set[str] = set()

    def _install(kind: str) -> str:
        groups = tomllib.loads(block(f"{kind}-entry-point", "toml"))["project"]["entry-points"]
        assert len(groups) == 1 and len(next(iter(groups.values()))) == 1, f"one entry point for the {kind}"
        group, entries = next(iter(groups.items()))
        name, target = next(iter(entries.items()))
        module = target.partition(":")[0]
        path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
        code = block(kind, "python")
        assert code.startswith(f"# {path.relative_to(tmp_path).as_posix()}\n"), \
            f"the {kind} recipe's first line names the file its entry point imports ({module})"
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(tmp_path).parents:
            if folder != Path("."):
                (tmp_path / folder / "__init__.py").touch()
        path.write_text(code, encoding="utf-8")
        packages.add(module.split(".")[0])
        importlib.invalidate_caches()
        declared.append(importlib.metadata.EntryPoint(name=name, value=target, group=group))
        registry = GROUPS[group]
        registry._plugins_loaded = False  # read the entry points again, as a fresh process would
        assert name in registry.names()
        return name

    yield _install
    for loaded in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[loaded]


def test_contributing_marks_a_plug_in_an_entry_point_and_a_check_for_each_recipe() -> None:
    expected = {f"{kind}{part}" for kind in KINDS for part in ("", "-entry-point", "-check")}
    assert set(recipes()) == expected


def test_the_backend_recipe_passes_check_env(install: Install, capsys: pytest.CaptureFixture[str]) -> None:
    name = install("backend")
    argv = check_command("backend", "admire.envs.check_env")
    assert argv[0] == name
    code = check_env.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"all {len(check_env.CHECKS)} checks passed" in out


def test_the_policy_recipe_passes_check_policy(install: Install) -> None:
    name = install("policy")
    argv = check_command("policy", "admire.agent.check_policy")
    assert argv[0] == name
    lines: list[str] = []
    assert check_policy.main(argv, out=lines.append) == 0, lines
    checks = [line for line in lines if not line.startswith("capabilities:")]
    assert len(checks) == 6 and all(line.startswith("ok") for line in checks), lines


def test_the_estimator_recipe_computes_aligned_advantages_through_the_registry(install: Install) -> None:
    name = install("estimator")
    exec(compile(block("estimator-check", "python"), "CONTRIBUTING.md (recipe: estimator-check)", "exec"), {})
    rng = random.Random(0)
    for _ in range(20):
        group = [GroupSample(tuple(rng.random() for _ in range(rng.randint(0, 4))), outcome=float(rng.random() < 0.5),
                             excluded=rng.random() < 0.2) for _ in range(rng.randint(1, 6))]
        result = compute_advantages(name, group)
        assert len(result.advantages) == len(group)
        for sample, advantages in zip(group, result.advantages, strict=True):
            assert (advantages is None) == sample.excluded
            assert advantages is None or len(advantages) == len(sample.rewards)
        outcomes = {s.outcome for s in group if not s.excluded}
        assert result.keep == (len(outcomes) > 1)
    tied = compute_advantages(name, [GroupSample((1.0,), outcome=1.0), GroupSample((0.0, 1.0), outcome=1.0)])
    assert not tied.keep and tied.advantages == ((0.0,), (0.0, 0.0))


def test_the_config_takes_the_recipes_names_and_the_estimators_group_minimum(install: Install) -> None:
    env, policy, estimator = (install(kind) for kind in KINDS)
    task = check_command("backend", "admire.envs.check_env")[2]
    names = [f"env.src=[{env}]", f"env.suite={task}", f"actor_rollout_ref.model.name={policy}",
             f"algorithm.adv_estimator={estimator}"]
    validate_config(load_config(overrides=[*names, "actor_rollout_ref.rollout.n=2"]))
    with pytest.raises(ConfigError, match=rf"{estimator} compares the episodes of a group, so it needs n >= 2"):
        validate_config(load_config(overrides=[*names, "actor_rollout_ref.rollout.n=1"]))


def test_the_three_recipes_train_together_and_the_policy_learns(install: Install, tmp_path: Path) -> None:
    env, policy, estimator = (install(kind) for kind in KINDS)
    task = check_command("backend", "admire.envs.check_env")[2]
    cfg = load_config(overrides=[
        f"env.src=[{env}]", f"env.suite={task}", "env.max_envs=[1]", "env.max_steps=3",
        f"actor_rollout_ref.model.name={policy}", f"algorithm.adv_estimator={estimator}",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.lr=0.5", "trainer.tasks_per_epoch=4",
        "trainer.eval_episodes=8", "trainer.eval_every=0", "trainer.total_epochs=4",
        "tracking.tensorboard=false", "tracking.swanlab=null"])
    summary = train(cfg, RunDir(tmp_path / "run").create(), console=Console(quiet=True), encoder=TrigramEncoder())
    assert summary["epochs"] == 4
    assert summary["before"]["success"] == 0.0 and summary["after"]["success"] == 1.0, summary
