"""Checkpoints as safetensors + JSON (docs/decisions.md#d10): exact round trips, an exact resume, no pickle ever
loaded, every broken file a one-line ``CheckpointError``, a kill between writes harmless, old ``.pt``
runs converted only on request."""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from admire import checkpoints
from admire.checkpoints import CheckpointError, LegacyCheckpointError
from admire.rl.builders import load_policy_weights
from admire.runs import RunDir
from admire.train_state import TrainState, checkpoint_state, restore, restore_rollout_state, rollout_state

# --------------------------------------------------------------------------------------------------
# A tiny policy with the same kinds of state as the dom policy: weights, and extra state holding a
# sampler's generator state (a uint8 tensor) and a config dict.
# --------------------------------------------------------------------------------------------------


class TinyPolicy(nn.Module):
    def __init__(self, seed: int = 0, hidden: int = 4) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = nn.Sequential(nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, 2))
        self.sampler = torch.Generator().manual_seed(seed)
        self.config = {"hidden": hidden, "scale": 0.5, "name": "tiny"}

    def get_extra_state(self) -> dict[str, Any]:
        return {"sampler": self.sampler.get_state(), "config": dict(self.config)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if state["config"] != self.config:
            raise ValueError(f"this checkpoint was saved by a differently shaped tiny policy ({state['config']})")
        self.sampler.set_state(state["sampler"])


class FakeBank:
    """What ``checkpoint_state``/``restore`` use of the milestone bank: its version and a rollback."""

    def __init__(self, version: int = 0, identity: str | None = "bank-a") -> None:
        self.version = version
        self.identity = identity
        self.rolled_back_to: int | None = None

    def rollback(self, version: int) -> int:
        self.rolled_back_to = version
        self.version = version
        return 0


def update(policy: TinyPolicy, optimizer: torch.optim.Optimizer, rng: random.Random) -> None:
    """One step whose data draws on every RNG a checkpoint restores: torch's global generator, numpy's,
    python's, the update rng and the policy's own sampler."""
    x = torch.randn(8, 3) * float(np.random.uniform(0.5, 1.5)) + random.random()
    noise = torch.rand(8, 2, generator=policy.sampler) * rng.random()
    loss = ((policy.net(x) - noise) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def trained(steps: int = 3) -> tuple[TinyPolicy, torch.optim.Adam, random.Random]:
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    policy = TinyPolicy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    rng = random.Random(7)
    for _ in range(steps):
        update(policy, optimizer, rng)
    return policy, optimizer, rng


def save_run(tmp_path: Path, epoch: int = 2, name: str = "run") -> tuple[RunDir, dict[str, Any]]:
    policy, optimizer, rng = trained()
    state = TrainState(epoch=epoch + 1, env_steps=123, wall_s=4.25, baseline={"miniwob/a": 0.5, "mean": 0.25},
                       warm_start={"bc/loss": 0.125})
    run = RunDir(tmp_path / name).create()
    snapshot = checkpoint_state(policy, optimizer, FakeBank(9), rng, state, {})  # type: ignore[arg-type]
    run.save_checkpoint(snapshot, epoch)
    return run, snapshot


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal with exact types: tensors bit for bit (and dtype), tuples stay tuples, arrays stay arrays."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}/{i}")
    else:
        assert a == b, where


# --------------------------------------------------------------------------------------------------
# Round trip and resume
# --------------------------------------------------------------------------------------------------

def test_the_round_trip_is_exact_and_stored_as_safetensors_plus_json(tmp_path: Path) -> None:
    run, saved = save_run(tmp_path)
    names = sorted(p.name for p in run.checkpoints.iterdir())
    assert names == ["epoch_0002.json", "epoch_0002.safetensors", "latest.json"]
    # Plain data only: the JSON parses, the tensors file is safetensors, nothing is a pickle.
    entry = json.loads((run.checkpoints / "epoch_0002.json").read_text())
    assert entry["format"] == "admire-checkpoint" and entry["version"] == 1
    assert entry["state"]["state"]["baseline"] == {"miniwob/a": 0.5, "mean": 0.25}
    from safetensors.torch import load_file

    tensors = load_file(run.checkpoints / "epoch_0002.safetensors")
    assert "policy/net.0.weight" in tensors and "rng/torch" in tensors and "optimizer/state/0/exp_avg" in tensors

    loaded = run.load_checkpoint()
    assert loaded is not None
    assert_same(saved["optimizer"], loaded["optimizer"], "optimizer")  # Adam moments, step, betas tuple
    assert_same(saved["rng"], loaded["rng"], "rng")  # python tuples, numpy ndarray, torch uint8 tensor
    assert_same(saved["state"], loaded["state"], "state")
    assert loaded["bank_version"] == 9
    assert list(saved["policy"]) == list(loaded["policy"])
    for key in saved["policy"]:
        assert_same(saved["policy"][key], loaded["policy"][key], key)  # incl. _extra_state's sampler + config


def test_restore_puts_back_weights_optimizer_rngs_and_train_state(tmp_path: Path) -> None:
    run, saved = save_run(tmp_path)
    policy, optimizer, rng, bank = TinyPolicy(seed=5), None, random.Random(0), FakeBank(50)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    state = restore(run.load_checkpoint() or {}, policy, optimizer, bank, rng)  # type: ignore[arg-type]
    assert state == TrainState(**saved["state"])
    assert bank.rolled_back_to == 9
    assert_same(saved["policy"]["net.0.weight"], policy.state_dict()["net.0.weight"])
    assert_same(saved["optimizer"], optimizer.state_dict(), "optimizer")
    assert random.getstate() == saved["rng"]["python"] and rng.getstate() == saved["rng"]["update"]
    assert_same(np.random.get_state()[1], saved["rng"]["numpy"][1])
    assert torch.equal(torch.get_rng_state(), saved["rng"]["torch"])
    assert torch.equal(policy.sampler.get_state(), saved["policy"]["_extra_state"]["sampler"])


def test_a_resumed_update_gives_the_same_tensors_as_an_uninterrupted_one(tmp_path: Path) -> None:
    run, _ = save_run(tmp_path)
    # Uninterrupted: three steps (in save_run), checkpoint, then two more.
    policy, optimizer, rng = trained()
    for _ in range(2):
        update(policy, optimizer, rng)
    # Resumed: a fresh process's objects, other seeds, then the checkpoint, then the same two steps.
    torch.manual_seed(1234)
    resumed, resumed_rng = TinyPolicy(seed=3), random.Random(3)
    resumed_optimizer = torch.optim.Adam(resumed.parameters(), lr=0.05, betas=(0.8, 0.95))
    restore(run.load_checkpoint() or {}, resumed, resumed_optimizer, FakeBank(9), resumed_rng)  # type: ignore[arg-type]
    for _ in range(2):
        update(resumed, resumed_optimizer, resumed_rng)
    for (name, a), b in zip(policy.state_dict().items(), resumed.state_dict().values(), strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), name
    assert_same(optimizer.state_dict(), resumed_optimizer.state_dict(), "optimizer")


def test_the_trainer_resumed_after_one_epoch_ends_where_an_uninterrupted_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``train()`` with the real dom policy (its sampler state is extra state) on the fake env:
    killed after epoch 0's checkpoint, then resumed, it ends with the weights and optimizer state of a run
    that was never interrupted."""
    from rich.console import Console

    from admire.config import load_config
    from admire.envs.base import ENVS
    from admire.rl.trainer import train
    from tests.support.fakes import SeededFormEnv, TrigramEncoder

    monkeypatch.setitem(ENVS.entries, "fake-form", SeededFormEnv)
    fake = ["env.src=[fake-form]", "env.suite=fake-form/login", "env.max_envs=[1]", "env.max_steps=4",
            "env.train_instances_per_task=3", "actor_rollout_ref.model.name=dom",
            "+actor_rollout_ref.model.embedding_dim=16",
            "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.lr=0.1", "trainer.tasks_per_epoch=2",
            "trainer.eval_episodes=2", "trainer.eval_every=0", "tracking.tensorboard=false", "tracking.swanlab=null"]

    def run_epochs(name: str) -> RunDir:
        run = RunDir(tmp_path / name).create()
        cfg = load_config(overrides=[*fake, "trainer.total_epochs=2"])
        train(cfg, run, console=Console(quiet=True), encoder=TrigramEncoder(dim=16))
        return run

    whole = run_epochs("whole")
    real_save = RunDir.save_checkpoint

    def save_then_die(self: RunDir, *args: Any, **kwargs: Any) -> Path:
        real_save(self, *args, **kwargs)
        raise SystemExit("killed right after epoch 0's checkpoint")

    with monkeypatch.context() as patch:
        patch.setattr(RunDir, "save_checkpoint", save_then_die)
        with pytest.raises(SystemExit):
            run_epochs("split")
    split = run_epochs("split")  # the same folder: resumes from epoch 0's checkpoint
    a, b = whole.load_checkpoint(), split.load_checkpoint()
    assert a is not None and b is not None and a["state"]["epoch"] == b["state"]["epoch"] == 2
    for key, value in a["policy"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b["policy"][key]), key
    assert_same(a["optimizer"], b["optimizer"], "optimizer")


def test_the_states_after_a_rollout_come_back_for_that_epoch_only_and_never_move_latest(tmp_path: Path) -> None:
    run, _ = save_run(tmp_path, epoch=2)
    latest = (run.checkpoints / "latest.json").read_bytes()
    policy, _, rng = trained()
    policy.sampler.manual_seed(7)
    saved = rollout_state(policy, rng)
    draws = (random.random(), float(np.random.rand()), float(torch.rand(1)), rng.random(),
             float(torch.rand(1, generator=policy.sampler)))
    run.save_rollout_state(saved, 3)
    assert (run.checkpoints / "latest.json").read_bytes() == latest
    assert run.load_rollout_state(2) is None and run.load_rollout_state(4) is None  # another epoch's
    other_policy, _, other_rng = trained()
    loaded = run.load_rollout_state(3)
    assert loaded is not None
    restore_rollout_state(loaded, other_policy, other_rng)
    assert draws == (random.random(), float(np.random.rand()), float(torch.rand(1)), other_rng.random(),
                     float(torch.rand(1, generator=other_policy.sampler)))


def test_a_policy_without_a_sampler_of_its_own_keeps_only_the_global_states(tmp_path: Path) -> None:
    rng = random.Random(0)
    state = rollout_state(nn.Linear(2, 2), rng)  # type: ignore[arg-type]
    assert set(state) == {"rng"}
    with pytest.raises(CheckpointError, match="do not fit this run"):  # a sampler's state, no sampler to take it
        restore_rollout_state({**state, "policy": {"sampler": 1}}, nn.Linear(2, 2), rng)  # type: ignore[arg-type]


def test_unreadable_rollout_states_name_the_file_to_delete(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    policy, _, rng = trained()
    run.save_rollout_state(rollout_state(policy, rng), 1)
    (run.checkpoints / "rollout.safetensors").write_bytes(b"not tensors")
    with pytest.raises(CheckpointError, match=r"delete .*rollout\.\* to resume without"):
        run.load_rollout_state(1)


def test_the_newest_keep_epochs_are_kept(tmp_path: Path) -> None:
    run, snapshot = save_run(tmp_path, epoch=0)
    for epoch in range(1, 5):
        run.save_checkpoint(snapshot, epoch, keep=2)
    assert sorted(p.name for p in run.checkpoints.iterdir()) == [
        "epoch_0003.json", "epoch_0003.safetensors", "epoch_0004.json", "epoch_0004.safetensors", "latest.json"]
    assert json.loads((run.checkpoints / "latest.json").read_text())["entry"] == "epoch_0004.json"


def test_every_accepted_form_gives_the_policy_weights(tmp_path: Path) -> None:
    run, saved = save_run(tmp_path)
    forms = [run.path, run.checkpoints, run.checkpoints / "latest.json", run.checkpoints / "epoch_0002.json",
             run.checkpoints / "epoch_0002.safetensors"]
    for form in forms:
        weights = load_policy_weights(form)
        assert torch.equal(weights["net.2.bias"], saved["policy"]["net.2.bias"]), form
        TinyPolicy().load_state_dict(weights)


def test_a_value_json_cannot_hold_is_refused_at_save_and_nothing_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    with pytest.raises(TypeError, match=r"cannot store a object at 'state/thing'.*nothing is pickled"):
        checkpoints.save(folder, {"state": {"thing": object()}}, 0)
    assert not folder.exists() or not any(folder.iterdir())


# --------------------------------------------------------------------------------------------------
# Hostile and broken files
# --------------------------------------------------------------------------------------------------


class Payload:
    """Unpickling this runs a shell command that creates ``marker``: what a crafted ``.pt`` does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def crafted_pt(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"policy": {"w": torch.zeros(1)}, "payload": Payload(marker)}, path)
    return path


def test_the_crafted_pickle_does_run_code_when_unpickled(tmp_path: Path) -> None:
    """The control: the file the refusal tests use really is hostile (what the old loader did)."""
    marker = tmp_path / "pwned"
    crafted = crafted_pt(tmp_path / "evil.pt", marker)
    torch.load(crafted, weights_only=False)
    assert marker.exists()


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


def test_a_crafted_pickle_is_refused_unread_everywhere_a_checkpoint_is_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    run = RunDir(tmp_path / "old").create()
    crafted_pt(run.checkpoints / "latest.pt", marker)
    bare = crafted_pt(tmp_path / "model.pt", marker)
    for load in (run.load_checkpoint, lambda: load_policy_weights(run.path), lambda: load_policy_weights(bare),
                 lambda: load_policy_weights(run.checkpoints / "latest.pt"), lambda: checkpoints.verify(run.path)):
        with pytest.raises(LegacyCheckpointError) as exc:
            load()
        message = one_line(exc)
        assert "pickle" in message and "can run code" in message and "python -m admire.checkpoints convert" in message
    assert not marker.exists()
    # Converting without --trust tries torch's restricted unpickler only, which refuses the payload.
    with pytest.raises(CheckpointError, match="--trust"):
        checkpoints.convert(bare)
    assert not marker.exists()


def test_admire_eval_refuses_a_crafted_pickle_without_running_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from admire.cli import main

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    crafted = crafted_pt(tmp_path / "evil.pt", marker)
    try:
        code: int | None = main(["eval", "--checkpoint", str(crafted), "--episodes", "1"])
    except CheckpointError:  # until `admire eval` turns every error into its one line (tests/commands/test_probes_*)
        code = None
    assert code != 0
    assert not marker.exists()


def broken(tmp_path: Path, how: str) -> RunDir:
    run, _ = save_run(tmp_path)
    tensors, entry, latest = (run.checkpoints / n for n in ("epoch_0002.safetensors", "epoch_0002.json",
                                                              "latest.json"))
    rng = np.random.default_rng(0)
    if how == "truncated-tensors":
        tensors.write_bytes(tensors.read_bytes()[:100])
    elif how == "random-tensors":
        tensors.write_bytes(rng.bytes(tensors.stat().st_size))
    elif how == "random-tensors-hash-fixed":  # reaches the safetensors parser itself
        data = rng.bytes(4096)
        tensors.write_bytes(data)
        import hashlib

        document = json.loads(entry.read_text())
        document["tensors_sha256"] = hashlib.sha256(data).hexdigest()
        entry.write_text(json.dumps(document))
        (run.checkpoints / "latest.json").unlink()
    elif how == "truncated-json":
        entry.write_bytes(entry.read_bytes()[:50])
    elif how == "random-json":
        latest.write_bytes(rng.bytes(300))
    elif how == "swapped-tensors":  # another save's tensors under this name
        checkpoints.save(tmp_path / "other", {"policy": {"w": torch.ones(2)}}, 3)
        tensors.write_bytes((tmp_path / "other" / "epoch_0003.safetensors").read_bytes())
    elif how == "missing-entry":
        entry.unlink()
    elif how == "deep-json":
        latest.write_text("[" * 100_000 + "]" * 100_000)
    return run


@pytest.mark.parametrize("how", ["truncated-tensors", "random-tensors", "random-tensors-hash-fixed",
                                 "truncated-json", "random-json", "swapped-tensors", "missing-entry", "deep-json"])
def test_a_broken_checkpoint_is_a_one_line_checkpoint_error(tmp_path: Path, how: str) -> None:
    run = broken(tmp_path, how)
    target = run.checkpoints / "epoch_0002.json" if how == "random-tensors-hash-fixed" else run.path
    with pytest.raises(CheckpointError) as exc:
        load_policy_weights(target)
    one_line(exc)
    assert isinstance(exc.value, ValueError)


def test_a_random_bytes_safetensors_file_without_its_json_is_refused(tmp_path: Path) -> None:
    lone = tmp_path / "weights.safetensors"
    lone.write_bytes(os.urandom(512))
    with pytest.raises(CheckpointError, match=r"no weights\.json beside it"):
        load_policy_weights(lone)


def test_a_run_without_a_checkpoint_loads_none_and_a_missing_path_is_an_error(tmp_path: Path) -> None:
    assert RunDir(tmp_path / "fresh").create().load_checkpoint() is None
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_policy_weights(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        load_policy_weights(tmp_path / "fresh")


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_a_kill_between_the_writes_leaves_the_previous_checkpoint_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: int
) -> None:
    """Die at the tensors file (1), the entry JSON (2) or the pointer (3) of epoch 3's save."""
    run, snapshot = save_run(tmp_path)
    real = checkpoints.atomic_write_bytes
    calls = {"n": 0}

    def dying_write(path: Any, data: bytes, **kw: Any) -> Path:
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise SystemExit("killed")  # as a SIGKILL would: the write never happens (it is atomic)
        return real(path, data, **kw)

    monkeypatch.setattr(checkpoints, "atomic_write_bytes", dying_write)
    later = {**snapshot, "state": {**snapshot["state"], "epoch": 4}}
    with pytest.raises(SystemExit):
        run.save_checkpoint(later, 3)
    monkeypatch.setattr(checkpoints, "atomic_write_bytes", real)
    loaded = run.load_checkpoint()
    assert loaded is not None and loaded["state"]["epoch"] == 3
    assert torch.equal(loaded["policy"]["net.0.weight"], snapshot["policy"]["net.0.weight"])
    # The run goes on: the next save succeeds over whatever the killed one left.
    run.save_checkpoint(later, 3)
    assert (run.load_checkpoint() or {})["state"]["epoch"] == 4


# --------------------------------------------------------------------------------------------------
# Old .pt runs: refused, converted on request
# --------------------------------------------------------------------------------------------------

def old_run(tmp_path: Path) -> tuple[RunDir, dict[str, Any]]:
    """A run as admire wrote it before this change: the same dict, pickled by torch.save."""
    policy, optimizer, rng = trained()
    old = {"policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
           "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                   "update": rng.getstate()},
           "bank_version": 4, "state": {"epoch": 2, "env_steps": 10, "wall_s": 1.0, "baseline": {"mean": 0.1},
                                        "warm_start": None}}
    run = RunDir(tmp_path / "old").create()
    torch.save(old, run.checkpoints / "epoch_0001.pt")
    torch.save(old, run.checkpoints / "latest.pt")
    return run, old


def test_convert_needs_trust_for_a_full_unpickle_and_then_resumes(tmp_path: Path) -> None:
    run, old = old_run(tmp_path)
    with pytest.raises(LegacyCheckpointError):
        run.load_checkpoint()
    before = sorted(p.name for p in run.checkpoints.iterdir())
    # Without --trust: torch's restricted unpickler cannot read the RNG states, so nothing is converted.
    result = subprocess.run([sys.executable, "-m", "admire.checkpoints", "convert", str(run.path)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--trust" in result.stderr and len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in run.checkpoints.iterdir()) == before
    result = subprocess.run([sys.executable, "-m", "admire.checkpoints", "convert", str(run.path), "--trust"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    converted = run.load_checkpoint()
    assert converted is not None
    assert_same(old["optimizer"], converted["optimizer"], "optimizer")
    assert_same(old["rng"], converted["rng"], "rng")
    assert converted["state"] == old["state"] and converted["bank_version"] == 4
    # It resumes: restore into fresh objects and take a step, as from the old file itself.
    policy, optimizer, rng = TinyPolicy(seed=8), None, random.Random(0)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    state = restore(converted, policy, optimizer, FakeBank(9), rng)  # type: ignore[arg-type]
    assert state.epoch == 2 and state.baseline == {"mean": 0.1}
    update(policy, optimizer, rng)
    reference, reference_optimizer, reference_rng = TinyPolicy(seed=9), None, random.Random(1)
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=0.05, betas=(0.8, 0.95))
    restore(old, reference, reference_optimizer, FakeBank(9), reference_rng)  # type: ignore[arg-type]
    update(reference, reference_optimizer, reference_rng)
    assert torch.equal(policy.net[0].weight, reference.net[0].weight)


def test_a_bare_policy_state_dict_converts_without_trust(tmp_path: Path) -> None:
    policy = TinyPolicy()
    weights = {k: v for k, v in policy.state_dict().items() if isinstance(v, torch.Tensor)}
    torch.save(weights, tmp_path / "policy.pt")
    [entry] = checkpoints.convert(tmp_path / "policy.pt")
    assert entry.name == "policy.json" and entry.with_suffix(".safetensors").exists()
    loaded = load_policy_weights(entry)
    assert all(torch.equal(weights[k], loaded[k]) for k in weights)


def test_a_checkpoint_of_another_shape_is_a_checkpoint_error_on_restore(tmp_path: Path) -> None:
    run, _ = save_run(tmp_path)
    policy = TinyPolicy(hidden=6)
    optimizer = torch.optim.Adam(policy.parameters())
    with pytest.raises(CheckpointError, match="does not fit") as exc:
        restore(run.load_checkpoint() or {}, policy, optimizer, FakeBank(9), random.Random())  # type: ignore[arg-type]
    one_line(exc)


@pytest.mark.parametrize("state", [{"epoch": -1}, {"epoch": 10**30}, {"env_steps": -5}, {"epoch": "3"},
                                   {"wall_s": float("nan")}, {"cpu_s": -1.0}])
def test_a_checkpoint_whose_counters_are_impossible_is_refused_before_anything_follows_it(
        tmp_path: Path, state: dict[str, Any]) -> None:
    # The trainer cuts metrics.jsonl at the restored epoch: a negative one emptied it, a huge one exhausted memory.
    run, _ = save_run(tmp_path)
    loaded = run.load_checkpoint() or {}
    tampered = {**loaded, "state": {**loaded["state"], **state}}
    policy, bank = TinyPolicy(seed=5), FakeBank(50)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    with pytest.raises(CheckpointError, match=r"does not fit .*TrainState\.") as exc:
        restore(tampered, policy, optimizer, bank, random.Random(0))  # type: ignore[arg-type]
    one_line(exc)
    assert bank.rolled_back_to is None  # nothing was restored


def test_a_bank_behind_the_checkpoint_is_refused_before_anything_is_restored(tmp_path: Path) -> None:
    # The checkpoint was taken at bank version 9; a bank at version 0 was deleted (or swapped) since.
    run, _ = save_run(tmp_path)
    policy, bank = TinyPolicy(seed=5), FakeBank(0)
    before = {k: v.clone() for k, v in policy.state_dict().items() if isinstance(v, torch.Tensor)}
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    with pytest.raises(CheckpointError, match=r"bank version 9 but the run's bank is at version 0") as exc:
        restore(run.load_checkpoint() or {}, policy, optimizer, bank, random.Random(0))  # type: ignore[arg-type]
    one_line(exc)
    assert bank.rolled_back_to is None
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items() if k in before)


def test_a_fifo_in_place_of_a_checkpoint_file_is_refused_unread(tmp_path: Path) -> None:
    import os

    run, _ = save_run(tmp_path)
    (tensors,) = run.checkpoints.glob("*.safetensors")
    tensors.unlink()
    os.mkfifo(tensors)  # read, it would block forever
    with pytest.raises(CheckpointError, match="is not a regular file") as exc:
        run.load_checkpoint()
    one_line(exc)


def test_another_runs_bank_at_a_higher_version_is_refused_and_a_copy_of_its_own_is_not(tmp_path: Path) -> None:
    # The version alone cannot tell: another run's bank at version 50 is "ahead" of the checkpoint's 9.
    run, _ = save_run(tmp_path)
    policy, optimizer = TinyPolicy(seed=5), None
    with pytest.raises(CheckpointError, match=r"not the bank the checkpoint was trained with") as exc:
        restore(run.load_checkpoint() or {}, policy, optimizer, FakeBank(50, identity="bank-b"),  # type: ignore[arg-type]
                random.Random(0))
    one_line(exc)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    own_copy = FakeBank(9, identity="bank-a")
    restore(run.load_checkpoint() or {}, policy, optimizer, own_copy, random.Random(0))  # type: ignore[arg-type]
    assert own_copy.rolled_back_to == 9


def test_a_bank_keeps_its_identity_across_opens_and_copies(tmp_path: Path) -> None:
    import shutil

    from admire.milestones.bank import MilestoneBank

    with MilestoneBank(tmp_path / "a.sqlite") as bank:
        identity = bank.identity
    assert identity is not None and len(identity) == 32
    shutil.copyfile(tmp_path / "a.sqlite", tmp_path / "copy.sqlite")
    with MilestoneBank(tmp_path / "a.sqlite") as again, MilestoneBank(tmp_path / "copy.sqlite") as copy, \
            MilestoneBank(tmp_path / "b.sqlite") as other:
        assert again.identity == copy.identity == identity != other.identity


def test_a_bank_that_cannot_be_rolled_back_is_one_line() -> None:
    from admire.milestones.bank import MilestoneBankError

    class DamagedBank(FakeBank):
        def rollback(self, version: int) -> int:
            raise MilestoneBankError("milestones.sqlite cannot be rolled back to version 9: database disk image is "
                                     "malformed")

    policy = TinyPolicy(seed=5)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05, betas=(0.8, 0.95))
    snapshot = checkpoint_state(policy, optimizer, FakeBank(9), random.Random(0), TrainState(epoch=1), {})  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match=r"malformed; put back a copy of the run's milestones\.sqlite") as exc:
        restore(snapshot, policy, optimizer, DamagedBank(9), random.Random(0))  # type: ignore[arg-type]
    one_line(exc)


def test_a_damaged_bank_file_raises_the_banks_own_error_on_rollback(tmp_path: Path) -> None:
    import sqlite3

    from admire.milestones.bank import MilestoneBank, MilestoneBankError

    bank = MilestoneBank(tmp_path / "b.sqlite")
    try:
        bank._db.close()  # what a damaged or vanished file looks like to the next write
        bank._db = sqlite3.connect(":memory:", check_same_thread=False)
        with pytest.raises(MilestoneBankError, match="cannot be rolled back to version 0"):
            bank.rollback(0)
    finally:
        bank._db.close()
