"""An old run's ``config.yaml`` resumes through the migration exactly as the run would have gone on: the
migrated file is byte for byte the one today's admire writes for the same run, and the epochs after the
resume have the same weights and metrics as an uninterrupted run's."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from admire.agent.base import POLICIES
from admire.cli import main
from admire.config_migration import LEGACY_DEFAULTS
from admire.envs.base import ENVS
from admire.integrations.verl.config import hydra_value
from tests.support.fakes import FormPolicy, SeededFormEnv, TrigramEncoder
from tests.support.metrics import untimed_metrics

FAKE = ["env.src=[fake-form]", "env.suite=fake-form/login", "env.max_envs=[1]", "env.max_steps=4",
        "actor_rollout_ref.model.name=tiny-form", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.lr=0.1",
        "trainer.tasks_per_epoch=4", "trainer.eval_episodes=4", "trainer.eval_every=0", "tracking.tensorboard=false",
        "tracking.swanlab=null"]
# What a run written before each later key behaved with, given explicitly (an unknown key needs Hydra's +).
LEGACY = [f"{key}={hydra_value(value)}" for key, value in LEGACY_DEFAULTS.items()]


class ResumableFormPolicy(FormPolicy):
    """``FormPolicy`` whose sampler's state travels with its weights, as the ``dom`` and ``lm`` policies' do:
    a resumed run then samples what the uninterrupted one sampled."""

    def get_extra_state(self) -> dict[str, Any]:
        return {"sampler": self._sampler.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._sampler.set_state(state["sampler"])


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(ENVS.entries, "fake-form", SeededFormEnv)
    monkeypatch.setitem(POLICIES.entries, "tiny-form", lambda seed=0, **_options: ResumableFormPolicy(seed=seed))
    monkeypatch.setattr("admire.rl.scoring.make_encoder", lambda _name: TrigramEncoder())
    yield


def _as_an_old_admire_wrote_it(path: Path) -> str:
    """Drop ``config_version`` and every key added after runs existed (their values are the legacy ones)."""
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    del config["config_version"]
    for dotted in LEGACY_DEFAULTS:
        *parents, leaf = dotted.split(".")
        node: Any = config
        for name in parents:
            node = node[name]
        del node[leaf]
    text = yaml.safe_dump(config, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return text


def _weights(run: Path) -> list[str]:
    files = sorted((run / "checkpoints").glob("epoch_*.safetensors"))
    return [hashlib.sha256(path.read_bytes()).hexdigest() for path in files]


def _metrics(run: Path) -> list[dict[str, Any]]:
    return untimed_metrics(run / "metrics.jsonl")


def test_an_old_runs_config_resumes_through_the_migration_byte_identically(tmp_path: Path) -> None:
    run = [*FAKE, *LEGACY, f"run.dir={tmp_path}", "run.name=run", "trainer.keep_checkpoints=5"]
    assert main(["train", "--quiet", *run, "trainer.total_epochs=3"]) == 0
    whole = tmp_path / "run"
    uninterrupted = {"config": (whole / "config.yaml").read_bytes(), "weights": _weights(whole),
                     "metrics": _metrics(whole)}
    shutil.rmtree(whole)  # the same run again, stopped after its first epoch
    assert main(["train", "--quiet", *run, "trainer.total_epochs=1"]) == 0
    old_text = _as_an_old_admire_wrote_it(whole / "config.yaml")

    assert main(["train", "--quiet", f"resume={whole}", "trainer.total_epochs=3"]) == 0

    assert (whole / "config.v0.yaml").read_text(encoding="utf-8") == old_text  # the old file is kept beside it
    assert (whole / "config.yaml").read_bytes() == uninterrupted["config"]
    assert _weights(whole) == uninterrupted["weights"]
    assert _metrics(whole) == uninterrupted["metrics"]
