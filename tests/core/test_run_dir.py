"""The run folder's own hygiene: where reward files may go, and what a killed process left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from admire.fileio import atomic_write_text
from admire.runs import RunDir


def test_a_dangling_rewards_link_is_refused_before_any_folder_is_made(tmp_path: Path) -> None:
    # A link to a folder that does not exist yet: making the folder would follow it out of the run.
    run = RunDir(tmp_path / "r").create()
    target = tmp_path / "elsewhere" / "made-by-us"
    (run.trajectories / "rewards").symlink_to(target, target_is_directory=True)
    with pytest.raises(ValueError, match="leads outside the run"):
        run.write_rewards("train", 0, {}, source="test")
    assert not target.exists() and not target.parent.exists()


def test_only_the_temporary_files_of_atomic_writes_are_removed(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r").create()
    atomic_write_text(run.config, "a: 1\n")
    left = [run.path / ".config.yaml.k2j3h4.tmp", run.checkpoints / ".latest.json.abc123.tmp",
            run.trajectories / ".train_epoch_0001.jsonl.zz9.tmp"]
    kept = [run.path / ".notes.tmp", run.path / "notes.tmp", run.config]
    for path in left + kept[:2]:
        path.write_text("half")
    assert sorted(run.remove_partial_writes()) == sorted(left)
    assert all(path.exists() for path in kept) and not any(path.exists() for path in left)
