"""Hostile checkpoints handed to the CLI, as rows of a probe table.

Each probe gets exit 2, one ``admire <command>: error:`` line, no traceback and an unchanged folder;
the crafted pickle's payload would create a file, so "unchanged" also proves it never ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.probe_harness import CliProbe, run_cli_probe


class Payload:
    """Unpickling this runs a shell command that creates ``pwned`` beside the checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def crafted(tmp: Path) -> None:
    torch.save({"policy": {"w": torch.zeros(1)}, "payload": Payload(tmp / "pwned")}, tmp / "crafted.pt")


def valid_run(tmp: Path, name: str = "run") -> Path:
    """A run folder with one real checkpoint (tiny weights), written by the code under test."""
    from admire.checkpoints import save

    folder = tmp / name / "checkpoints"
    save(folder, {"policy": {"w": torch.arange(4.0)}, "state": {"epoch": 1}}, 0)
    return folder


def truncated(tmp: Path) -> None:
    tensors = valid_run(tmp) / "epoch_0000.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:40])


def random_bytes_latest(tmp: Path) -> None:
    (valid_run(tmp) / "latest.json").write_bytes(os.urandom(256))


def random_bytes_entry(tmp: Path) -> None:
    """Random bytes as the tensors file, with a JSON entry whose hash matches: the safetensors parser's turn."""
    data = os.urandom(1024)
    (tmp / "model.safetensors").write_bytes(data)
    (tmp / "model.json").write_text(json.dumps({"format": "admire-checkpoint", "version": 1, "epoch": None,
                                                "tensors": "model.safetensors",
                                                "tensors_sha256": hashlib.sha256(data).hexdigest(),
                                                "state": {"policy": {}}}))


def random_bytes_pt(tmp: Path) -> None:
    (tmp / "random.pt").write_bytes(os.urandom(1024))


def run_without_checkpoint(tmp: Path) -> None:
    (tmp / "empty" / "checkpoints").mkdir(parents=True)


def old_run(tmp: Path) -> None:
    """A run written before safetensors: its config and only a pickle ``latest.pt`` (a crafted one)."""
    from admire.commands.train import config_yaml
    from admire.config import load_config

    run = tmp / "old"
    (run / "checkpoints").mkdir(parents=True)
    cfg = load_config(overrides=["run.name=old", f"run.dir={tmp}"])
    (run / "config.yaml").write_text(config_yaml(cfg))
    torch.save({"policy": {"w": torch.zeros(1)}, "payload": Payload(tmp / "pwned")},
               run / "checkpoints" / "latest.pt")


def int8_weights(tmp: Path) -> None:
    """A checkpoint of the default policy with one weight stored as int8: loading would cast it silently."""
    from admire.checkpoints import save
    from admire.config import load_config
    from admire.rl.builders import build_policy

    weights = dict(build_policy(load_config()).state_dict())
    name = next(k for k, v in weights.items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    weights[name] = weights[name].to(torch.int8)
    save(tmp / "run" / "checkpoints", {"policy": weights, "state": {"epoch": 1}}, 0)


PICKLE = r"old pickle checkpoint.*can run code.*python -m admire\.checkpoints convert .* --trust"

PROBES = [
    CliProbe("eval-crafted-pickle", ("eval", "--checkpoint", "{tmp}/crafted.pt"), message=PICKLE, setup=crafted),
    CliProbe("eval-random-bytes-pt", ("eval", "--checkpoint", "{tmp}/random.pt"), message=PICKLE,
             setup=random_bytes_pt),
    CliProbe("eval-truncated", ("eval", "--checkpoint", "{tmp}/run"), message=r"sha256|truncated",
             setup=truncated),
    CliProbe("eval-random-bytes-pointer", ("eval", "--checkpoint", "{tmp}/run"),
             message=r"latest\.json is not readable JSON", setup=random_bytes_latest),
    CliProbe("eval-random-bytes-safetensors", ("eval", "--checkpoint", "{tmp}/model.safetensors"),
             message=r"not a readable safetensors file", setup=random_bytes_entry),
    CliProbe("eval-missing", ("eval", "--checkpoint", "{tmp}/nope"),
             message=r"(no checkpoint at|no such file or folder) .*nope"),
    CliProbe("eval-run-without-checkpoint", ("eval", "--checkpoint", "{tmp}/empty"),
             message=r"no checkpoint in .*empty", setup=run_without_checkpoint),
    CliProbe("train-model-path-crafted-pickle", ("train", "--quiet", "run.dir={tmp}/runs",
                                                 "actor_rollout_ref.model.path={tmp}/crafted.pt"),
             message=r"model\.path: .*" + PICKLE, setup=crafted),
    CliProbe("train-model-path-truncated", ("train", "--quiet", "run.dir={tmp}/runs",
                                            "actor_rollout_ref.model.path={tmp}/run"),
             message=r"model\.path: .*(sha256|truncated)", setup=truncated),
    CliProbe("eval-int8-weights", ("eval", "--checkpoint", "{tmp}/run"),
             message=r"is torch\.int8 where the policy holds torch\.float32", setup=int8_weights),
    CliProbe("train-model-path-int8-weights", ("train", "--quiet", "run.dir={tmp}/runs",
                                               "actor_rollout_ref.model.path={tmp}/run"),
             message=r"is torch\.int8 where the policy holds", setup=int8_weights),
    CliProbe("train-resume-old-pickle", ("train", "--quiet", "resume={tmp}/old"), message=PICKLE, setup=old_run),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_probe(probe: CliProbe, tmp_path: Path, capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> None:
    line = run_cli_probe(probe, tmp_path, capsys, monkeypatch)
    assert not (tmp_path / "pwned").exists()
    assert "\n" not in line
