"""scripts/gpu_lm_smoke.sh, the language-model run prepared for a GPU machine: its CPU dry run prints the
commands and checks the training configuration with the trainer's own checker, so a bad key fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "gpu_lm_smoke.sh"


def dry_run(script: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(script), "--dry-run", str(tmp_path / "out")], capture_output=True,
                          text=True, env=env, timeout=120, cwd=REPO)


def test_the_dry_run_prints_the_run_and_validates_its_configuration(tmp_path: Path) -> None:
    result = dry_run(SCRIPT, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"+ admire models prepare smollm2-135m {tmp_path / 'out'}/smollm2-135m"
    assert lines[1].startswith("+ admire train actor_rollout_ref.model.name=lm ")
    assert lines[-1] == "dry run: the training configuration is valid"
    assert not (tmp_path / "out").exists()  # nothing prepared, no run folder


def test_a_bad_key_in_the_script_fails_its_dry_run(tmp_path: Path) -> None:
    broken = tmp_path / "gpu_lm_smoke.sh"
    broken.write_text(SCRIPT.read_text().replace("+actor_rollout_ref.model.lora=true",
                                                 "+actor_rollout_ref.model.lorra=true"))
    result = dry_run(broken, tmp_path)
    assert result.returncode != 0
    assert "actor_rollout_ref.model.lorra is not an option of the 'lm' policy" in result.stderr

