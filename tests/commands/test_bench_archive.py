"""``admire bench learning --archive DIR``: the report's inputs without the screens, re-read by --report-only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admire.benchmarks import learning
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement


def episode(task: str, seed: int, outcome: float) -> str:
    screen = Observation(goal="log in", ui_elements=tuple(UIElement(text=f"field {i}") for i in range(30)), step=0)
    step = Step(index=0, observation=screen, raw_output="Reason: r\nAction: click 1", format_valid=True,
                grounded_description="clicked field 1", timings={"act_s": 1.5},
                info={"num_tokens": 9, "token_log_probs": [-0.1] * 9})
    return Trajectory(id=f"{task}-{seed}", task=Task(name=task, seed=seed), goal="log in", steps=(step,),
                      outcome=outcome, termination=Termination.SUCCESS if outcome else Termination.MAX_STEPS).to_json()


def write_run(folder: Path, index: int, successes: int, *, summary: bool = True) -> None:
    (folder / "trajectories").mkdir(parents=True)
    lines = [episode("miniwob/a", 2_000_000 + i, float(i < successes)) for i in range(10)]
    (folder / "trajectories" / f"eval_epoch_{index:04d}.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "trajectories" / "train_epoch_0000.jsonl").write_text(lines[0] + "\n")
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 0, "adv/nonzero_frac": 0.5}) + "\n")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "epoch_0001.safetensors").write_bytes(b"\0" * 4096)
    if summary:
        rate = {"success": successes / 10, "success/miniwob/a": successes / 10}
        (folder / "summary.json").write_text(json.dumps({"before": {"success": 0.2, "success/miniwob/a": 0.2},
                                                         "after": rate, "env_steps": 300}))


@pytest.fixture
def results_folder(tmp_path: Path) -> Path:
    out = tmp_path / "bench"
    runs = out / "runs"
    write_run(runs / "start-s0", 0, 2)
    (runs / "start-s0" / "checkpoints" / "start.json").write_text(json.dumps({"tensors_sha256": "ab" * 32}))
    write_run(runs / "outcome-s0", 1, 4)
    before = "trajectories/eval_epoch_0000.jsonl"  # an arm's copy of its start's evaluation before RL
    (runs / "outcome-s0" / before).write_bytes((runs / "start-s0" / before).read_bytes())
    write_run(runs / "admire-s0", 1, 7)
    write_run(runs / "admire-s1", 1, 5, summary=False)  # unfinished: listed among the runs without a result
    (out / "invocations.jsonl").write_text(json.dumps({"suite": "miniwob-lm", "command": "admire bench learning "
                                                       "--suite miniwob-lm --seeds 0", "common": [
                                                           "trainer.eval_split=validation"]}) + "\n")
    return out


def test_the_archive_re_reads_to_the_same_report_without_screens_or_checkpoints(results_folder: Path,
                                                                                tmp_path: Path) -> None:
    archived = tmp_path / "docs" / "lm"
    assert learning.main(["--report-only", "--out", str(results_folder), "--archive", str(archived)]) == 0
    files = sorted(str(p.relative_to(archived)) for p in archived.rglob("*") if p.is_file())
    assert "runs/start-s0/checkpoints/start.sha256" in files
    assert not [f for f in files if f.endswith(".safetensors") or "train_epoch" in f]
    assert "runs/admire-s1/metrics.jsonl" in files and "runs/admire-s1/summary.json" not in files
    assert "runs/admire-s0/trajectories/eval_epoch_0001.jsonl" in files and "invocations.jsonl" in files
    assert "runs/outcome-s0/trajectories/eval_epoch_0000.jsonl" not in files  # the start's is read instead
    assert "runs/start-s0/trajectories/eval_epoch_0000.jsonl" in files

    kept = Trajectory.from_json((archived / "runs/admire-s0/trajectories/eval_epoch_0001.jsonl").read_text()
                                .splitlines()[0])
    step = kept.steps[0]
    assert step.observation == Observation(goal="log in") and step.timings == {}
    assert step.info == {"num_tokens": 9} and step.raw_output.startswith("Reason: r")
    assert step.grounded_description == "clicked field 1" and kept.outcome == 1.0

    original = json.loads((results_folder / "results.json").read_text())
    (archived / "results.json").unlink()
    assert learning.main(["--report-only", "--out", str(archived)]) == 0
    again = json.loads((archived / "results.json").read_text())
    assert again["summary"] == original["summary"] and again["split"] == "validation"
    assert [r["status"] for r in again["runs"]] == [r["status"] for r in original["runs"]]
    assert again["shared_starts"] == original["shared_starts"] == {"start-s0": "ab" * 32}
    assert (archived / "results.md").read_text() == (results_folder / "results.md").read_text()


def test_an_archive_into_the_results_folder_itself_is_refused_before_anything_is_written(
        results_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p for p in results_folder.rglob("*"))
    assert learning.main(["--report-only", "--out", str(results_folder), "--archive", str(results_folder)]) == 2
    assert "--archive" in capsys.readouterr().err and sorted(results_folder.rglob("*")) == before
