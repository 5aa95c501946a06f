"""A learning benchmark's report inputs, small enough to commit (``admire bench learning --archive DIR``).

A results folder holds checkpoints, browser logs and every training episode with its screens: hundreds of MB
that a fresh clone cannot have, so a report quoted in the docs could not be re-read from the repository. The
archive keeps what ``--report-only`` reads, and nothing it does not:

- ``invocations.jsonl`` (the commands and overrides the report names), ``results.md`` and ``results.json``;
- per run: ``summary.json``, ``metrics.jsonl`` and ``status.txt`` (not its log);
- per run, its evaluation episodes (``trajectories/eval_epoch_*.jsonl``) without their screens: each step keeps
  the model's answer, the action and its descriptions, and drops the observation (the goal stays), the
  per-token log-probs and the timings (an arm's copy of its start's evaluation before RL is left out: the
  report reads the start's). The intervals and paired tests need only task, seed and outcome;
- per run holding a start checkpoint (a start, and each arm begun from it), the hash of those weights
  (``checkpoints/start.sha256``) in place of the checkpoint: the arms of a seed can be seen to share theirs.

``admire bench learning --report-only --out DIR`` on the archive then prints the same tables as on the folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

RUN_FILES = ("summary.json", "metrics.jsonl", "status.txt")
REPORT_FILES = ("invocations.jsonl", "results.md", "results.json")
START_HASH = "start.sha256"
"""The file, in an archived start's ``checkpoints/``, that holds the hash of its weights (one line)."""


def archive(out: Path, target: Path) -> list[Path]:
    """Copy ``out``'s report inputs into ``target`` (created; files already there are replaced) and return the
    files written. An unfinished run keeps what it has (its metrics and status), so the report still lists it
    among the runs without a result; the runs' logs stay behind. ``check_target`` first."""
    written: list[Path] = []
    for name in REPORT_FILES:
        if (out / name).is_file():
            written.append(_copy(out / name, target / name))
    for run in sorted(p for p in (out / "runs").glob("*") if p.is_dir()):
        into = target / "runs" / run.name
        written += [_copy(run / name, into / name) for name in RUN_FILES if (run / name).is_file()]
        for path in sorted((run / "trajectories").glob("eval_epoch_*.jsonl")):
            if not _copy_of_its_start(path, out / "runs"):
                written.append(_write(into / "trajectories" / path.name, without_screens(path)))
        start = run / "checkpoints" / "start.json"
        if start.is_file():
            digest = str(json.loads(start.read_text(encoding="utf-8")).get("tensors_sha256", "unreadable"))
            written.append(_write(into / "checkpoints" / START_HASH, digest + "\n"))
    return written


def check_target(out: Path, target: Path) -> None:
    """Refuse an archive into the results folder itself (it would copy each file onto itself)."""
    if target.resolve() == out.resolve():
        raise ValueError(f"--archive {target} is --out itself; name another folder")


def _copy_of_its_start(path: Path, runs: Path) -> bool:
    """Whether ``path`` is an arm's evaluation before RL that its seed's start wrote (an arm that begins from a
    shared start holds a copy of it): the report reads the start's when the arm's is missing."""
    run = path.parents[1].name
    variant, _, seed = run.rpartition("-s")
    start = runs / f"start-s{seed}" / "trajectories" / path.name
    return (path.name == "eval_epoch_0000.jsonl" and variant != "start" and start.is_file()
            and start.read_bytes() == path.read_bytes())


def without_screens(path: Path) -> str:
    """An evaluation file's episodes, each step's observation reduced to the goal and its per-token
    log-probs and timings dropped (a trajectory a line, as written)."""
    from admire.types import Observation, Trajectory  # pydantic models: loaded only when an archive is written

    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        trajectory = Trajectory.from_json(line)
        steps = tuple(step.model_copy(update={
            "observation": Observation(goal=trajectory.goal, step=step.observation.step), "timings": {},
            "info": {k: v for k, v in step.info.items() if k != "token_log_probs"}}) for step in trajectory.steps)
        lines.append(trajectory.model_copy(update={"steps": steps}).to_json())
    return "".join(line + "\n" for line in lines)


def _copy(source: Path, destination: Path) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    return destination


def _write(destination: Path, text: str) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(text, encoding="utf-8")
    return destination
