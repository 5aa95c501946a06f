"""A run on disk (DESIGN §4): what a training run writes, and how it is read back.

Nothing is written in place. Trajectory files and checkpoints are written to a temporary file and
renamed, so a run killed at any instant leaves either the old file or the new one, never half of one;
``resume`` then continues from the last checkpoint without losing or duplicating a finished epoch.
Checkpoints are safetensors (every tensor) plus JSON (everything else), never a pickle; ``latest.json``
is written last and names the epoch's two files with their sha256 (``admire.checkpoints``).

```
runs/<name>/
  config.yaml  metrics.jsonl  milestones.sqlite  summary.json
  resumes.jsonl   (one line per `resume=`: its time and overrides, which config.yaml then holds)
  trajectories/train_epoch_0003.jsonl   eval_epoch_0005.jsonl   screenshots/<ref>.png
  trajectories/rewards/train_epoch_0003.jsonl   (each step's RewardBreakdown, for the viewer)
  checkpoints/latest.json   checkpoints/epoch_0003.safetensors   checkpoints/epoch_0003.json
  checkpoints/rollout.*   (the random states after the newest epoch's rollouts)
  report/learning_curve.png
```
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from admire.fileio import atomic_write_bytes, atomic_write_text, is_partial_write, read_bounded
from admire.types import RewardBreakdown, Trajectory

__all__ = ["RunDir", "atomic_write_bytes", "atomic_write_text"]


MAX_TRAJECTORY_FILE_BYTES = 1 << 30
"""One epoch's trajectory file may be at most 1 GiB (screenshots are stored beside it, not in it)."""


class RunDir:
    """The folder of one run, with the names every tool agrees on."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def bank(self) -> Path:
        return self.path / "milestones.sqlite"

    @property
    def status(self) -> Path:
        """One line: what the run is doing now (the progress bar's status; ``admire bench learning`` reads it)."""
        return self.path / "status.txt"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def trajectories(self) -> Path:
        return self.path / "trajectories"

    @property
    def screenshots(self) -> Path:
        return self.trajectories / "screenshots"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def report(self) -> Path:
        return self.path / "report"

    def create(self) -> RunDir:
        for folder in (self.path, self.trajectories, self.checkpoints, self.report):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    # ---- trajectories -------------------------------------------------------------------------

    def trajectory_file(self, kind: str, epoch: int) -> Path:
        return self.trajectories / f"{kind}_epoch_{epoch:04d}.jsonl"

    def write_trajectories(self, kind: str, epoch: int, trajectories: Sequence[Trajectory]) -> Path:
        """Write one epoch's trajectories at once; screenshots go beside them, once per content hash."""
        lines = []
        for trajectory in trajectories:
            lines.append(self.store_screenshots(trajectory).to_json())
        path = self.trajectory_file(kind, epoch)
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        return path

    def read_trajectories(self, kind: str, epoch: int) -> list[Trajectory] | None:
        path = self.trajectory_file(kind, epoch)
        if not path.exists():
            return None
        text = read_bounded(path, MAX_TRAJECTORY_FILE_BYTES, "trajectory file").decode("utf-8")
        return [Trajectory.from_json(line) for line in text.splitlines() if line]

    def trajectory_epochs(self, kind: str) -> list[int]:
        return sorted(int(p.stem.rsplit("_", 1)[1]) for p in self.trajectories.glob(f"{kind}_epoch_*.jsonl"))

    def iter_trajectories(self, kind: str = "train") -> Iterable[Trajectory]:
        for epoch in self.trajectory_epochs(kind):
            yield from self.read_trajectories(kind, epoch) or []

    def store_screenshots(self, trajectory: Trajectory) -> Trajectory:
        """``trajectory`` with its screenshots as references, their PNGs written beside the trajectories
        (once per content hash)."""
        if not any(step.observation.screenshot and step.observation.screenshot.png for step in trajectory.steps):
            return trajectory
        steps = []
        for step in trajectory.steps:
            shot = step.observation.screenshot
            if shot is not None and shot.png is not None:
                target = self.screenshots / f"{shot.ref}.png"
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    atomic_write_bytes(target, shot.png)
                step = step.model_copy(
                    update={"observation": step.observation.model_copy(update={"screenshot": shot.stored()})}
                )
            steps.append(step)
        return trajectory.model_copy(update={"steps": tuple(steps)})

    def screenshot_path(self, ref: str) -> Path:
        return self.screenshots / f"{ref}.png"

    # ---- rewards (one breakdown per step, beside the trajectories they explain) ---------------------

    def rewards_file(self, kind: str, epoch: int) -> Path:
        return self.trajectories / "rewards" / f"{kind}_epoch_{epoch:04d}.jsonl"

    def write_rewards(
        self, kind: str, epoch: int, rewards: Mapping[str, Sequence[RewardBreakdown]], source: str
    ) -> Path:
        """One line per trajectory id; ``source`` says who computed them (the trainer, a re-scoring)."""
        lines = [json.dumps({"id": trajectory_id, "source": source,
                             "rewards": [b.model_dump(mode="json") for b in breakdowns]})
                 for trajectory_id, breakdowns in rewards.items()]
        path = self.rewards_file(kind, epoch)
        inside = self.path.resolve()
        # Checked before the folder is made: a link (even one leading nowhere yet) would write elsewhere.
        if not path.parent.resolve().is_relative_to(inside):
            raise ValueError(f"{path.parent} leads outside the run {self.path} (to {path.parent.resolve()}); "
                             "remove that link, and reward files are written inside the run again")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        return path

    def read_rewards(self, kind: str, epoch: int) -> dict[str, list[RewardBreakdown]] | None:
        path = self.rewards_file(kind, epoch)
        if not path.exists():
            return None
        rewards: dict[str, list[RewardBreakdown]] = {}
        for line in read_bounded(path, MAX_TRAJECTORY_FILE_BYTES, "reward file").decode("utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                rewards[str(record["id"])] = [RewardBreakdown.model_validate(b) for b in record["rewards"]]
        return rewards

    # ---- checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self, state: dict[str, Any], epoch: int, keep: int = 3) -> Path:
        """Write ``epoch_XXXX.safetensors`` + ``epoch_XXXX.json``, then ``latest.json`` pointing at them;
        keep the newest ``keep`` epochs. Returns the entry's JSON path."""
        from admire import checkpoints

        return checkpoints.save(self.checkpoints, state, epoch, keep=keep)

    def save_start_checkpoint(self, state: dict[str, Any]) -> Path:
        """Write ``checkpoints/start.*`` (before the first epoch) and point ``latest.json`` at it."""
        from admire import checkpoints

        return checkpoints.save_start(self.checkpoints, state)

    def save_rollout_state(self, state: dict[str, Any], epoch: int) -> Path:
        """Write ``checkpoints/rollout.*``: the random states right after ``epoch``'s rollouts were written."""
        from admire import checkpoints

        return checkpoints.save_rollout(self.checkpoints, state, epoch)

    def load_rollout_state(self, epoch: int) -> dict[str, Any] | None:
        """The random states written after ``epoch``'s rollouts, or None (``admire.checkpoints.load_rollout``)."""
        from admire import checkpoints

        return checkpoints.load_rollout(self.checkpoints, epoch)

    def save_warm_checkpoint(self, state: dict[str, Any]) -> Path:
        """Write ``checkpoints/warm.*`` (after the warm start, before the evaluation before RL) and point
        ``latest.json`` at it."""
        from admire import checkpoints

        return checkpoints.save_warm(self.checkpoints, state)

    @property
    def start_checkpoint(self) -> Path:
        from admire import checkpoints

        return self.checkpoints / f"{checkpoints.START}.json"

    def load_checkpoint(self, path: Path | None = None) -> dict[str, Any] | None:
        """The latest checkpoint (or the one ``path`` names), or None when the run has none yet.

        Raises ``CheckpointError`` (a ``ValueError``, one line) for an unreadable checkpoint and for an
        old pickle ``.pt`` one, which is refused unread (``python -m admire.checkpoints convert``)."""
        from admire import checkpoints

        if path is None and not checkpoints.has_checkpoint(self.checkpoints):
            return None
        return checkpoints.load(path or self.checkpoints)

    # ---- what a killed run leaves -------------------------------------------------------------

    def remove_partial_writes(self) -> list[Path]:
        """Delete the temporary files of atomic writes a killed process left behind (``.<name>.<random>.tmp``
        beside the file it was writing; :func:`admire.fileio.atomic_write_bytes`), in the run's own folders.
        Called when a resume starts, when no other process may be writing this run. Returns what went."""
        removed = []
        for folder in (self.path, self.trajectories, self.trajectories / "rewards", self.screenshots,
                       self.checkpoints, self.report):
            if folder.is_symlink() or not folder.is_dir():
                continue
            for path in folder.glob(".*.tmp"):
                if path.is_file() and not path.is_symlink() and is_partial_write(path.name):
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed

    # ---- summary ------------------------------------------------------------------------------

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_text(self.summary, json.dumps(summary, indent=2, sort_keys=True) + "\n")
