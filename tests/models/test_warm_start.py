"""``admire models warm-start``: refusals before a browser starts, and demonstrations whose history reads as a
rollout's. The command itself runs for real in the CPU verl smoke (``tests/integrations/verl/test_cpu_smoke.py``),
which starts from the model it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from admire.actions import describe
from admire.agent.pretrain import record_oracle_demonstrations
from admire.agent.prompts import history_line
from admire.cli import main
from admire.models.warm_start import WarmStartSettings
from admire.types import Task


def warm_start(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["models", "warm-start", *args])
    return code, capsys.readouterr().err.strip()


def test_each_refusal_is_one_line_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, out = tmp_path / "base", tmp_path / "out"
    base.mkdir()
    code, err = warm_start(capsys, str(base), str(out), "--suite", "miniwob/click-button-sequence")
    assert code == 2 and "is not a model directory (no config.json)" in err and "\n" not in err
    (base / "config.json").write_text("{}")
    code, err = warm_start(capsys, str(base), str(out), "--suite", "miniwob/click-tab")
    assert code == 2 and "miniwob/click-tab has no oracle to imitate" in err
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, err = warm_start(capsys, str(base), str(out), "--suite", "miniwob/click-button-sequence")
    assert code == 2 and "exists and is not empty" in err and (out / "keep.txt").read_text() == "mine"
    code, err = warm_start(capsys, str(base), str(tmp_path / "new"), "--suite", "miniwob/click-test", "--epochs", "0")
    assert code == 2 and "--epochs must be at least 1" in err
    assert not (tmp_path / "new").exists()


def test_the_settings_refuse_a_learning_rate_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="--lr must be positive"):
        WarmStartSettings(suite="miniwob/click-test", lr=0.0)


@pytest.mark.browser
def test_demonstrations_carry_the_grounded_description_a_rollout_records(miniwob_env) -> None:
    """A demonstration's later prompts show its earlier steps as a rollout's prompts do: action -> description."""
    (demo,) = record_oracle_demonstrations(miniwob_env, [Task(name="miniwob/click-button-sequence", seed=5)])
    assert demo.success and len(demo.steps) == 2
    for step in demo.steps:
        assert step.grounded_description == describe(step.action, step.observation) != ""
    assert history_line(1, demo.steps[0]).endswith("-> clicked the 'ONE' button")
