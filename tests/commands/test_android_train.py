"""``admire train`` with ``env.src=[android_world]``: one epoch of the real trainer and the real ``dom`` policy
on AndroidWorld's code over the faithful fake device (``tests/support/android_fake.py``), the emulator
chosen from ``env.android_world.console_ports`` and checked through a fake ``adb``. ``train`` is what
``admire train`` runs once its config is loaded; the sentence encoder is the trigram fake (no MiniLM)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from admire.config import load_config
from admire.rl.trainer import train
from admire.runs import RunDir
from admire.tracking import read_metrics
from admire.types import Termination
from tests.support.fake_adb import FakeAdb
from tests.support.fakes import TrigramEncoder

TASK = "android_world/NotesAddNote"


def android_config(adb: FakeAdb, *overrides: str):
    return load_config(overrides=[
        "env.src=[android_world]", f"env.suite={TASK}", "env.max_envs=[1]", "env.max_steps=3",
        "env.android_world.launcher=tests.support.android_fake:load_and_setup_env",
        f"env.android_world.adb_path={adb.path}", "env.android_world.console_ports=5560",
        "actor_rollout_ref.model.name=dom", "+actor_rollout_ref.model.embedding_dim=64",
        "actor_rollout_ref.rollout.n=2", "trainer.tasks_per_epoch=1", "trainer.total_epochs=1",
        "trainer.eval_every=0", "trainer.eval_episodes=1", "tracking.tensorboard=false", "tracking.swanlab=null",
        *overrides,
    ])


def test_one_epoch_trains_on_android_world(tmp_path: Path) -> None:
    from tests.support import android_fake

    adb = FakeAdb(tmp_path / "sdk")
    run = RunDir(tmp_path / "run").create()
    summary = train(android_config(adb), run, console=Console(quiet=True), encoder=TrigramEncoder(dim=64))

    assert summary["epochs"] == 1 and summary["env_steps"] > 0
    trajectories = run.read_trajectories("train", 0)
    assert trajectories is not None and len(trajectories) == 2  # one group of rollout.n=2
    for trajectory in trajectories:
        assert trajectory.task.name == TASK and trajectory.termination is not Termination.ENV_ERROR
        assert trajectory.goal.startswith("Add a note titled '")  # the goal of AndroidWorld's TaskEval
        assert 1 <= len(trajectory.steps) <= 3
    assert len(read_metrics(run.metrics)) == 1
    device = android_fake.DEVICES[5560]
    assert (device.console_port, device.grpc_port) == (5560, 8560)  # the port pair of env.android_world
    assert ["-s", "emulator-5560", "shell", "getprop", "sys.boot_completed"] in adb.calls()


def test_a_bad_android_world_key_is_refused_before_training(tmp_path: Path) -> None:
    adb = FakeAdb(tmp_path / "sdk")
    run = RunDir(tmp_path / "run").create()
    with pytest.raises(ValueError, match=r"env\.android_world\.console_ports.*5561 cannot be an emulator console"):
        train(android_config(adb, "env.android_world.console_ports=5561"), run, console=Console(quiet=True),
              encoder=TrigramEncoder(dim=64))
    assert not adb.calls()


def test_admire_train_without_adb_is_one_line_and_makes_no_run(tmp_path: Path, capsys, monkeypatch) -> None:
    from admire.cli import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/Android/Sdk either
    code = main(["train", "--quiet", f"run.dir={tmp_path / 'runs'}", "env.src=[android_world]", f"env.suite={TASK}"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "admire train: error: adb is neither on PATH nor at ~/Android/Sdk/platform-tools/adb; install the Android "
        "SDK platform-tools or pass env.android_world.adb_path"]
    assert not (tmp_path / "runs").exists()
