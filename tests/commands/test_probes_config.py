"""Hostile configs, run names, resume
overrides and ``admire eval`` inputs, as a table of probes against the real CLI.

Every probe ends in one ``admire <command>: error:`` line (or, for a finished run, a plain exit 0)
and leaves the probe's folder exactly as it was: nothing half-written, no browser started (every
refusal comes before one would). Two tests below the table check what a probe cannot: names of runs
started in the same second, and resume overrides recorded in the run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from rich.console import Console

from admire import checkpoints
from admire.agent.base import POLICIES
from admire.cli import main
from admire.commands import train as train_command
from admire.commands.train import config_yaml
from admire.config import load_config
from admire.envs.base import ENVS
from admire.runs import RunDir
from tests.support.fakes import FormPolicy, SeededFormEnv
from tests.support.probe_harness import CliProbe, run_cli_probe

RUNS = "run.dir={tmp}/runs"


def _fake_run(tmp: Path, name: str = "x", **summary: int) -> Path:
    """A run folder as ``admire train`` leaves it, without training: its config (and a summary)."""
    run = tmp / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    cfg = load_config(overrides=[f"run.dir={tmp}/runs", f"run.name={name}", "trainer.total_epochs=3"])
    (run / "config.yaml").write_text(config_yaml(cfg), encoding="utf-8")
    if summary:
        (run / "summary.json").write_text(json.dumps({"run": name, **summary}), encoding="utf-8")
    return run


def _finished_run(tmp: Path) -> None:
    _fake_run(tmp, epochs=3, env_steps=120)


def _budget_spent_run(tmp: Path) -> None:
    run = _fake_run(tmp, epochs=2, env_steps=120)
    text = (run / "config.yaml").read_text(encoding="utf-8").replace("total_env_steps: null", "total_env_steps: 100")
    (run / "config.yaml").write_text(text, encoding="utf-8")


def _run_with_checkpoint(tmp: Path, bank: bool = True) -> Path:
    """A run with its bank and a checkpoint that records its experiment."""
    from admire.config_schema import experiment_values
    from admire.milestones.bank import MilestoneBank

    run = _fake_run(tmp)
    if bank:
        MilestoneBank(run / "milestones.sqlite").close()
    checkpoints.save(run / "checkpoints", {"policy": {"w": torch.zeros(4)}, "state": {"epoch": 1},
                                           "experiment": experiment_values(OmegaConf.load(run / "config.yaml"))},
                     epoch=0)
    return run


def _negative_epoch(tmp: Path) -> None:
    """A checkpoint claiming epoch -1 beside a metrics.jsonl a resume would cut back to that epoch."""
    from admire.milestones.bank import MilestoneBank

    run = _fake_run(tmp)
    MilestoneBank(run / "milestones.sqlite").close()
    (run / "metrics.jsonl").write_text('{"step": 0, "train/success": 0.5}\n', encoding="utf-8")
    checkpoints.save(run / "checkpoints", {"policy": {"w": torch.zeros(4)}, "state": {"epoch": -1}}, epoch=0)


def _bank_deleted(tmp: Path) -> None:
    _run_with_checkpoint(tmp, bank=False)


def _hand_edited_run(tmp: Path) -> None:
    """A run whose checkpoint recorded its experiment, then ``reward.mode`` changed in its config.yaml by hand."""
    run = _run_with_checkpoint(tmp)
    text = (run / "config.yaml").read_text(encoding="utf-8")
    assert "  mode: admire\n" in text
    (run / "config.yaml").write_text(text.replace("  mode: admire\n", "  mode: outcome\n", 1), encoding="utf-8")


def _fifo_in_place_of(name: str) -> Callable[[Path], None]:
    """A run whose ``name`` is a FIFO: reading it would block forever."""
    def setup(tmp: Path) -> None:
        run = _fake_run(tmp)
        (run / name).unlink(missing_ok=True)
        os.mkfifo(run / name)
    return setup


def _remote_run(tmp: Path) -> None:
    """A run folder whose config sends the device server's token to a server of the folder's choosing."""
    run = _fake_run(tmp)
    text = (run / "config.yaml").read_text(encoding="utf-8")
    assert "  - miniwob\n" in text
    (run / "config.yaml").write_text(text.replace("  - miniwob\n", "  - remote:http://their.host:8765\n", 1))


def _env_interpolation_run(tmp: Path) -> None:
    """A handed run folder whose config reads a variable of this machine into a value that leaves it."""
    run = _fake_run(tmp)
    text = (run / "config.yaml").read_text(encoding="utf-8")
    assert "  project: admire\n" in text
    hostile = text.replace("  project: admire\n", "  project: ${oc.env:AWS_SECRET_ACCESS_KEY}\n")
    (run / "config.yaml").write_text(hostile)


def _checkpoint(tmp: Path) -> Path:
    """A real (safetensors + JSON) checkpoint of a small state, in ``tmp/ck``."""
    state = {"policy": {"w": torch.zeros(4)}, "state": {"epoch": 1}}
    return checkpoints.save(tmp / "ck", state, epoch=1)


def _truncated_checkpoint(tmp: Path) -> None:
    entry = _checkpoint(tmp)
    tensors = entry.with_suffix(".safetensors")
    tensors.write_bytes(tensors.read_bytes()[:20])


def _random_bytes_checkpoint(tmp: Path) -> None:
    (tmp / "ck").mkdir()
    (tmp / "ck" / "random.json").write_bytes(os.urandom(512))
    (tmp / "ck" / "random.safetensors").write_bytes(os.urandom(512))


def _run_without_checkpoint(tmp: Path) -> None:
    _fake_run(tmp)


PROBES = [
    # ---- admire train: values the schema refuses before a run folder exists -----------------------
    CliProbe("total-epochs-abc", ("train", "--quiet", RUNS, "trainer.total_epochs=abc"),
             message=r"trainer\.total_epochs: must be a valid integer, got abc; e\.g\. trainer\.total_epochs="),
    CliProbe("threshold-2", ("train", "--quiet", RUNS, "milestone_reward.threshold=2"),
             message=r"milestone_reward\.threshold: must be less than or equal to 1, got 2;"),
    CliProbe("suite-nope", ("train", "--quiet", RUNS, "env.suite=nope"),
             message=r"env\.suite: unknown suite 'nope'; known suites: .*miniwob-demo"),
    CliProbe("reward-mode-bogus", ("train", "--quiet", RUNS, "reward.mode=bogus"),
             message=r"reward\.mode: must be one of outcome, admire, judge, got 'bogus'"),
    CliProbe("max-envs-list-0", ("train", "--quiet", RUNS, "env.max_envs=[0]"),
             message=r"env\.max_envs\[0\]: must be greater than or equal to 1, got 0; e\.g\. env\.max_envs=\[2\]"),
    CliProbe("max-envs-0", ("train", "--quiet", RUNS, "env.max_envs=0"),
             message=r"env\.max_envs: must be greater than or equal to 1"),
    CliProbe("adv-estimator-bogus", ("train", "--quiet", RUNS, "algorithm.adv_estimator=bogus"),
             message=r"algorithm\.adv_estimator: unknown advantage estimator 'bogus'; registered: .*grpo_step"),
    CliProbe("rollout-n-0", ("train", "--quiet", RUNS, "actor_rollout_ref.rollout.n=0"),
             message=r"actor_rollout_ref\.rollout\.n: must be greater than or equal to 1, got 0"),
    CliProbe("rollout-n-1-rloo", ("train", "--quiet", RUNS, "algorithm.adv_estimator=rloo_step",
                                  "actor_rollout_ref.rollout.n=1"),
             message=r"actor_rollout_ref\.rollout\.n: rloo_step compares the episodes of a group, so it needs n >= 2"),
    CliProbe("unknown-key", ("train", "--quiet", RUNS, "nope.key=1"), message=r"nope\.key: unknown key"),
    CliProbe("unknown-key-added", ("train", "--quiet", RUNS, "+milestone_reward.treshold=0.5"),
             message=r"milestone_reward\.treshold: unknown key; did you mean milestone_reward\.threshold\?"),
    CliProbe("misspelt-key", ("train", "--quiet", RUNS, "milestone_reward.treshold=0.5"),
             message=r"milestone_reward\.treshold: unknown key; did you mean milestone_reward\.threshold\?"),
    CliProbe("env-src-nope", ("train", "--quiet", RUNS, "env.src=[nope]"),
             message=r"env\.src: unknown environment backend 'nope'; registered: .*miniwob"),
    CliProbe("policy-nope", ("train", "--quiet", RUNS, "actor_rollout_ref.model.name=nope"),
             message=r"actor_rollout_ref\.model\.name: unknown policy 'nope'; registered: .*dom"),
    CliProbe("generator-nope", ("train", "--quiet", RUNS, "milestone_reward.generator=nope"),
             message=r"milestone_reward\.generator: unknown milestone generator 'nope'"),
    CliProbe("threads-0", ("train", "--quiet", RUNS, "trainer.threads=0"), message=r"trainer\.threads: must be"),
    CliProbe("static-without-file", ("train", "--quiet", RUNS, "milestone_reward.mode=static"),
             message=r"milestone_reward\.static_path: .*set milestone_reward\.static_path="),
    CliProbe("static-file-missing", ("train", "--quiet", RUNS, "milestone_reward.mode=static",
                                     "milestone_reward.static_path={tmp}/none.json"),
             message=r"milestone_reward\.static_path: no file .*none\.json; export one"),
    CliProbe("static-file-malformed", ("train", "--quiet", RUNS, "milestone_reward.mode=static",
                                       "milestone_reward.static_path={tmp}/ms.json"),
             message=r"milestone_reward\.static_path: .*ms\.json is not a JSON milestone file",
             setup=lambda tmp: (tmp / "ms.json").write_text('{"k": [1, 2', encoding="utf-8")),
    CliProbe("model-path-missing", ("train", "--quiet", RUNS, "actor_rollout_ref.model.path={tmp}/none"),
             message=r"actor_rollout_ref\.model\.path: no checkpoint at"),
    CliProbe("lm-path-not-a-model", ("train", "--quiet", RUNS, "actor_rollout_ref.model.name=lm",
                                      "actor_rollout_ref.model.path={tmp}"),
             message=r"model\.path: .* is not a Hugging Face model directory .*admire models prepare"),
    CliProbe("lm-foreign-option", ("train", "--quiet", RUNS, "actor_rollout_ref.model.name=lm",
                                   "actor_rollout_ref.model.hidden_size=64"),
             message=r"actor_rollout_ref\.model\.hidden_size is not an option of the 'lm' policy; its options: "),
    CliProbe("run-name-path", ("train", "--quiet", RUNS, "run.name=../escape"),
             message=r"run\.name: must be a plain folder name"),
    CliProbe("comma-value", ("train", "--quiet", RUNS, "env.suite=a,b"), message=r"env\.suite: .*comma; quote it"),
    CliProbe("override-syntax", ("train", "--quiet", RUNS, "trainer.total_epochs=["),
             message=r"bad configuration override: .*write overrides as key=value"),
    CliProbe("judge-without-endpoint", ("train", "--quiet", RUNS, "reward.mode=judge"),
             message=r"reward\.judge\.base_url", held=True),
    CliProbe("instances-0", ("train", "--quiet", RUNS, "env.train_instances_per_task=0"),
             message=r"env\.train_instances_per_task: must be greater than or equal to 1", held=True),
    # ---- run names and resume --------------------------------------------------------------------
    CliProbe("existing-run-name", ("train", "--quiet", RUNS, "run.name=x"), setup=_fake_run,
             message=r"run\.name: .*runs/x already exists; continue that run with admire train resume=.*runs/x"),
    CliProbe("resume-unknown-key", ("train", "--quiet", "resume={tmp}/runs/x", "foo.bar=1"), setup=_fake_run,
             message=r"foo\.bar: unknown key"),
    CliProbe("resume-disallowed-key", ("train", "--quiet", "resume={tmp}/runs/x", "milestone_reward.threshold=0.5"),
             setup=_fake_run,
             message=r"milestone_reward\.threshold: may not change when resuming.*trainer\.total_epochs"),
    CliProbe("resume-bad-value", ("train", "--quiet", "resume={tmp}/runs/x", "trainer.total_epochs=abc"),
             setup=_fake_run, message=r"trainer\.total_epochs: must be a valid integer, got abc"),
    CliProbe("resume-bad-threshold", ("train", "--quiet", "resume={tmp}/runs/x", "milestone_reward.threshold=2"),
             setup=_fake_run, message=r"milestone_reward\.threshold: may not change when resuming"),
    CliProbe("resume-bad-max-envs", ("train", "--quiet", "resume={tmp}/runs/x", "env.max_envs=[0]"),
             setup=_fake_run, message=r"env\.max_envs\[0\]: must be greater than or equal to 1"),
    CliProbe("resume-not-key-value", ("train", "--quiet", "resume={tmp}/runs/x", "~trainer.total_epochs"),
             setup=_fake_run, message=r"not a key=value override"),
    CliProbe("resume-hand-edited-experiment-key", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_hand_edited_run,
             message=r"config\.yaml was edited after the run's last checkpoint: reward\.mode: 'admire' -> 'outcome'"),
    CliProbe("dry-run-misspelt-task", ("train", "--quiet", "--dry-run", RUNS, "env.suite=miniwob/click-tset"),
             message=r"env\.suite: .*click-tset.*click-test"),
    CliProbe("train-misspelt-task", ("train", "--quiet", RUNS, "env.suite=miniwob/click-tset"),
             message=r"env\.suite: .*click-tset.*click-test"),
    CliProbe("eval-misspelt-task", ("eval", "--checkpoint", "{tmp}", "--suite", "miniwob/click-tset"),
             message=r"env\.suite: .*click-tset.*click-test"),
    CliProbe("resume-negative-epoch", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_negative_epoch,
             message=r"training state is not one a run writes \(TrainState\.epoch must be an integer"),
    CliProbe("resume-bank-deleted", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_bank_deleted,
             message=r"milestones\.sqlite is missing, and the run's checkpoint was trained with it"),
    CliProbe("resume-env-interpolation", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_env_interpolation_run,
             message=r"tracking\.project holds the interpolation '\$\{oc\.env:AWS_SECRET_ACCESS_KEY\}', but a run's "
                     r"config is stored with every value resolved"),
    CliProbe("eval-env-interpolation", ("eval", "--checkpoint", "{tmp}/runs/x"), setup=_env_interpolation_run,
             message=r"holds the interpolation"),
    CliProbe("resume-metrics-fifo", ("train", "--quiet", "resume={tmp}/runs/x"),
             setup=_fifo_in_place_of("metrics.jsonl"), message=r"metrics\.jsonl is not a regular file"),
    CliProbe("resume-config-fifo", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_fifo_in_place_of("config.yaml"),
             message=r"config\.yaml: not a readable config \(.*is not a regular file"),
    CliProbe("eval-config-fifo", ("eval", "--checkpoint", "{tmp}/runs/x"), setup=_fifo_in_place_of("config.yaml"),
             message=r"config\.yaml: not a readable config \(.*is not a regular file"),
    CliProbe("resume-remote-server-unconfirmed", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_remote_run,
             message=r"would send \$ADMIRE_SERVER_TOKEN to http://their\.host:8765; .*confirm with "
                     r"env\.src=\[remote:http://their\.host:8765\]"),
    CliProbe("resume-other-backends", ("train", "--quiet", "resume={tmp}/runs/x", "env.src=[android_world]"),
             setup=_fake_run, message=r"env\.src: may change only where the devices are on resume"),
    CliProbe("resume-empty", ("train", "--quiet", "resume="), message=r"resume: names no run"),
    CliProbe("resume-not-a-run", ("train", "--quiet", "resume={tmp}"), message=r"not a run directory", held=True),
    CliProbe("resume-finished", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_finished_run, exit_code=0),
    CliProbe("resume-finished-same-total", ("train", "--quiet", "resume={tmp}/runs/x", "trainer.total_epochs=3"),
             setup=_finished_run, exit_code=0),
    CliProbe("resume-budget-spent", ("train", "--quiet", "resume={tmp}/runs/x"), setup=_budget_spent_run,
             exit_code=0),
    # ---- admire eval -----------------------------------------------------------------------------
    CliProbe("eval-missing-checkpoint", ("eval", "--checkpoint", "{tmp}/nope.json"),
             message=r"--checkpoint: no such file or folder"),
    CliProbe("eval-truncated-checkpoint", ("eval", "--checkpoint", "{tmp}/ck"), setup=_truncated_checkpoint,
             message=r"does not match the sha256|not a readable safetensors"),
    CliProbe("eval-random-bytes-checkpoint", ("eval", "--checkpoint", "{tmp}/ck/random.json"),
             setup=_random_bytes_checkpoint, message=r"not readable JSON|not a valid checkpoint"),
    CliProbe("eval-random-bytes-tensors", ("eval", "--checkpoint", "{tmp}/ck/random.safetensors"),
             setup=_random_bytes_checkpoint, message=r"not readable JSON|not a valid checkpoint"),
    CliProbe("eval-run-without-checkpoint", ("eval", "--checkpoint", "{tmp}/runs/x"),
             setup=_run_without_checkpoint, message=r"no checkpoint in .*runs/x"),
    CliProbe("eval-bad-suite", ("eval", "--checkpoint", "{tmp}/runs/x", "--suite", "nope"),
             setup=_run_without_checkpoint, message=r"env\.suite: unknown suite 'nope'"),
    CliProbe("eval-episodes-negative", ("eval", "--checkpoint", "{tmp}", "--episodes", "-3"),
             message=r"argument --episodes: must be a whole number >= 1, got -3"),
    CliProbe("eval-episodes-0", ("eval", "--checkpoint", "{tmp}", "--episodes", "0"),
             message=r"argument --episodes: must be a whole number >= 1, got 0"),
    CliProbe("eval-episodes-huge", ("eval", "--checkpoint", "{tmp}", "--episodes", str(10**20)),
             message=r"argument --episodes: must be at most 100000, got 100000000000000000000"),
    CliProbe("eval-episodes-abc", ("eval", "--checkpoint", "{tmp}", "--episodes", "abc"),
             message=r"argument --episodes: must be a whole number"),
    CliProbe("eval-max-envs-0", ("eval", "--checkpoint", "{tmp}", "--max-envs", "0"),
             message=r"argument --max-envs: must be a whole number >= 1, got 0"),
    CliProbe("eval-unknown-override", ("eval", "--checkpoint", "{tmp}/runs/x", "foo.bar=1"),
             setup=_run_without_checkpoint, message=r"foo\.bar: unknown key"),
    CliProbe("eval-no-checkpoint-argument", ("eval",), message=r"--checkpoint", held=True),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_probe(probe: CliProbe, tmp_path: Path, capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> None:
    run_cli_probe(probe, tmp_path, capsys, monkeypatch)


def test_resuming_a_finished_run_says_how_to_train_more(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _finished_run(tmp_path)
    assert main(["train", "--quiet", f"resume={tmp_path}/runs/x"]) == 0
    out = capsys.readouterr().out
    assert "is finished" in out and "trainer.total_epochs=" in out and "resume=" in out


# --------------------------------------------------------------------------------------------------
# Run names and recorded resumes
# --------------------------------------------------------------------------------------------------

def test_runs_started_in_the_same_second_get_different_folders(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train_command.time, "strftime", lambda _format: "20250101-120000")
    first = train_command.create_run_dir(tmp_path / "runs", None, "demo_miniwob")
    second = train_command.create_run_dir(tmp_path / "runs", None, "demo_miniwob")
    third = train_command.create_run_dir(tmp_path / "runs", None, "demo_miniwob")
    assert first.name == "demo_miniwob-20250101-120000"
    assert len({first, second, third}) == 3 and all(p.is_dir() for p in (first, second, third))
    with pytest.raises(ValueError, match="already exists"):
        train_command.create_run_dir(tmp_path / "runs", first.name, "demo_miniwob")


FAKE = [
    "env.src=[fake-form]", "env.suite=fake-form/login", "env.max_envs=[1]", "env.max_steps=4",
    "env.train_instances_per_task=3", "actor_rollout_ref.model.name=tiny-form", "actor_rollout_ref.rollout.n=2",
    "trainer.tasks_per_epoch=2", "trainer.eval_episodes=2", "trainer.eval_every=0", "reward.mode=outcome",
    "tracking.tensorboard=false", "tracking.swanlab=null",
]


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(ENVS.entries, "fake-form", SeededFormEnv)
    monkeypatch.setitem(POLICIES.entries, "tiny-form", lambda seed=0, **_options: FormPolicy(seed=seed))
    monkeypatch.setattr("admire.report.Console", lambda *a, **k: Console(quiet=True))
    yield


def test_resume_overrides_are_recorded_and_a_finished_run_is_left_alone(
    tmp_path: Path, fakes: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--quiet", f"run.dir={tmp_path}", "run.name=r", "trainer.total_epochs=1", *FAKE]) == 0
    run = RunDir(tmp_path / "r")
    assert json.loads(run.summary.read_text())["epochs"] == 1

    assert main(["train", "--quiet", f"resume={run.path}", "trainer.total_epochs=2", "trainer.keep_checkpoints=1"]) == 0
    stored = OmegaConf.load(run.config)
    assert stored.trainer.total_epochs == 2 and stored.trainer.keep_checkpoints == 1
    assert stored.reward.mode == "outcome"  # the rest of the config is as it was
    [entry] = [json.loads(line) for line in (run.path / "resumes.jsonl").read_text().splitlines()]
    assert entry["overrides"] == {"trainer.total_epochs": 2, "trainer.keep_checkpoints": 1} and entry["time"]
    assert json.loads(run.summary.read_text())["epochs"] == 2

    capsys.readouterr()
    before = {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    assert main(["train", "--quiet", f"resume={run.path}"]) == 0  # finished: no second final evaluation
    assert "is finished" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("damage", ["bank", "checkpoint"])
def test_a_resume_that_cannot_start_is_one_line_and_changes_nothing(
    tmp_path: Path, fakes: None, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    assert main(["train", "--quiet", f"run.dir={tmp_path}", "run.name=r", "trainer.total_epochs=1", *FAKE]) == 0
    run = RunDir(tmp_path / "r")
    if damage == "bank":  # not a database at all
        for path in run.path.glob("milestones.sqlite*"):
            path.unlink()
        run.bank.write_bytes(b"this is not a milestone bank " * 40)
    else:  # readable, but its weights do not fit the policy: one tensor more
        from admire import checkpoints

        state = checkpoints.load(run.path)
        state["policy"] = {**state["policy"], "extra.weight": torch.zeros(2)}
        checkpoints.save(run.checkpoints, state, epoch=0)
    before = {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--quiet", f"resume={run.path}", "trainer.total_epochs=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("admire train: error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert ("milestone bank" if damage == "bank" else "does not fit") in err
    assert not (run.path / "resumes.jsonl").exists()
    after = {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file() and p.name != "milestones.sqlite-journal"}
    assert {p: b for p, b in after.items() if p in before} == before  # config.yaml, metrics, checkpoints untouched
