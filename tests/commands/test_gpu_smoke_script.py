"""scripts/gpu_smoke.sh and cpu_smoke.sh (verl end to end on one GPU, on the CPU) and scripts/run_stepwise.sh
(Qwen2.5-VL on one node): their dry runs print every command and run ``admire train --dry-run``,
which checks the config with the schema, the verl backend's checks and verl's own composition and
``validate_config``, so a bad key fails here and nothing is prepared, served or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

SMOKE = REPO / "scripts" / "gpu_smoke.sh"
CPU_SMOKE = REPO / "scripts" / "cpu_smoke.sh"
VERL_SMOKE = REPO / "scripts" / "verl_smoke.sh"
STEPWISE = REPO / "scripts" / "run_stepwise.sh"


def dry_run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), "--dry-run", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env}, timeout=240, cwd=REPO)


@pytest.mark.parametrize(("script", "device", "rollout"), [(SMOKE, "cuda", "vllm"), (CPU_SMOKE, "cpu", "admire_hf")])
def test_the_smoke_dry_run_prints_the_run_and_verls_command(tmp_path: Path, script: Path, device: str,
                                                            rollout: str) -> None:
    """The GPU smoke is the CPU one with the CPU key off: the same commands, the device and rollout aside."""
    out = tmp_path / "out"
    result = dry_run(script, str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"+ admire models prepare tiny-qwen2 {out}/tiny-qwen2"
    assert lines[1].startswith(f"+ admire models warm-start {out}/tiny-qwen2 {out}/tiny-qwen2-warm --suite "
                               "miniwob/click-button-sequence ")
    assert lines[2] == "+ TMPDIR=/tmp/admire-serve.XXXXXX admire serve --num-devices 1 --port 8767"
    train = next(line for line in lines if line.startswith("+ admire train --config configs/verl_stepwise.yaml "))
    assert f" trainer.device={device} actor_rollout_ref.rollout.name={rollout} " in train
    run = f"{out}/runs/{device}-verl"
    # the folder names a remote: server, so the resume confirms it (a run folder does not choose where a key goes)
    assert f"+ admire train resume={run} env.src=[remote:http://127.0.0.1:8767] trainer.total_epochs=3" in lines
    command = next(line for line in lines if "-m verl.trainer.main_ppo " in line)
    for setting in (f"actor_rollout_ref.model.path={out}/tiny-qwen2-warm", "trainer.n_gpus_per_node=1",
                    "trainer.total_training_steps=2", "trainer.v1.trainer_mode=admire_step",
                    "algorithm.adv_estimator=admire_grpo_step", f"actor_rollout_ref.rollout.name={rollout}",
                    "trainer.save_freq=1", "++admire.max_reruns=0"):
        assert f" {setting} " in f"{command} ", setting
    assert ("VERL_PLATFORM=admire_cpu" in command) == (device == "cpu")
    assert lines[-1] == f"dry run: the configuration is valid (trainer.backend=verl, run folder {run}; nothing written)"
    assert not out.exists()  # nothing prepared, no run folder


def test_a_bad_key_in_the_smoke_script_fails_its_dry_run(tmp_path: Path) -> None:
    broken = tmp_path / "verl_smoke.sh"
    broken.write_text(VERL_SMOKE.read_text().replace('"env.max_steps=3"', '"env.max_stepz=3"'))
    result = dry_run(broken, str(tmp_path / "out"), DEVICE="cuda")
    assert result.returncode != 0
    assert "env.max_stepz: unknown key; did you mean env.max_steps?" in result.stderr


def test_the_stepwise_dry_run_serves_and_trains_on_the_node(tmp_path: Path) -> None:
    result = dry_run(STEPWISE, f"run.dir={tmp_path / 'runs'}", "run.name=qwen", GPUS="4", ENV_DEVICES="16")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "+ admire serve --backend miniwob --num-devices 16 --screenshots --port 8765 &"
    assert lines[1].startswith("+ admire train --config configs/verl_stepwise.yaml trainer.backend=verl ")
    for setting in ("trainer.n_gpus_per_node=4", "'trainer.logger=[console,file,tensorboard,swanlab]'",
                    "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.agent.num_workers=8"):
        assert f" {setting} " in f"{lines[2]} ", setting
    assert lines[-1].startswith("dry run: the configuration is valid (trainer.backend=verl")
    assert not (tmp_path / "runs").exists()
