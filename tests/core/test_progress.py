"""Progress of evaluation and the warm start: the loops report ``progress(done, total)``; ``admire eval``
shows a bar and the trainer shows the count in its epoch bar's status."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from admire.agent.base import POLICIES
from admire.cli import main
from admire.commands.train import config_yaml
from admire.config import load_config
from admire.envs.base import ENVS
from admire.progress import TrainingProgress, counting, progress_bar
from admire.rl.evaluation import evaluate_policy
from admire.rl.trainer import train
from admire.runs import RunDir
from tests.support.fakes import FormPolicy, SeededFormEnv, TrigramEncoder

FAKE = ["env.src=[fake-form]", "env.suite=fake-form/login", "env.max_envs=[2]", "env.max_steps=4",
        "actor_rollout_ref.model.name=tiny-form", "trainer.eval_episodes=5", "tracking.tensorboard=false",
        "tracking.swanlab=null"]


@pytest.fixture(autouse=True)
def fake_backend_and_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(ENVS.entries, "fake-form", SeededFormEnv)
    monkeypatch.setitem(POLICIES.entries, "tiny-form", lambda seed=0, **_options: FormPolicy(seed=seed))
    yield


def test_counting_reports_zero_first_then_each_item() -> None:
    reports: list[tuple[int, int]] = []
    one_more = counting(lambda done, total: reports.append((done, total)), 3)
    assert reports == [(0, 3)]
    assert one_more is not None
    for item in "abc":
        one_more(item)
    assert reports == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert counting(None, 3) is None


def test_evaluate_policy_reports_every_episode() -> None:
    cfg = load_config(overrides=FAKE)
    reports: list[tuple[int, int]] = []
    result = evaluate_policy(cfg, FormPolicy(seed=0), progress=lambda done, total: reports.append((done, total)))
    assert "success" in result
    assert reports == [(done, 5) for done in range(6)]


def test_progress_bar_shows_done_of_total() -> None:
    out = io.StringIO()
    with progress_bar("eval suite: episodes", Console(file=out, width=120)) as progress:
        progress(0, 4)
        progress(3, 4)
    assert "eval suite: episodes" in out.getvalue() and "3/4" in out.getvalue()


def test_the_training_bar_shows_the_count_in_its_status() -> None:
    out = io.StringIO()
    with TrainingProgress(2, 0, Console(file=out, width=160)) as bar:
        bar.counter("evaluating before RL: episode")(7, 12)
    assert "evaluating before RL: episode 7/12" in out.getvalue()


def test_admire_eval_shows_a_bar_over_its_episodes(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(overrides=[*FAKE, "trainer.total_epochs=1", "trainer.tasks_per_epoch=2",
                                 "actor_rollout_ref.rollout.n=2", "trainer.eval_every=0"])
    run = RunDir(tmp_path / "run").create()
    run.config.write_text(config_yaml(cfg), encoding="utf-8")  # as admire train writes it
    train(cfg, run, console=Console(quiet=True), encoder=TrigramEncoder())
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run.path), "--episodes", "3"]) == 0
    out, err = capsys.readouterr()
    assert "eval fake-form/login: episodes" in err and "3/3" in err  # the bar, on stderr
    assert "success" in out  # the table, on stdout


def test_the_status_file_gets_each_new_phase_at_once_and_counts_at_most_every_few_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from admire import progress as module

    clock = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    status = tmp_path / "status.txt"
    with module.TrainingProgress(3, 0, Console(quiet=True), status_file=status) as bar:
        bar.status("warm start: demonstration 1/40")
        assert status.read_text() == "warm start: demonstration 1/40\n"
        bar.status("warm start: demonstration 2/40")  # the same phase within 5 s: not yet
        assert status.read_text() == "warm start: demonstration 1/40\n"
        bar.status("warm start: imitating, minibatch 1/57")  # a new phase: at once
        assert status.read_text() == "warm start: imitating, minibatch 1/57\n"
        clock[0] += module.STATUS_EVERY_S
        bar.status("warm start: imitating, minibatch 9/57")
        assert status.read_text() == "warm start: imitating, minibatch 9/57\n"
        bar.status("warm start: imitating, minibatch 10/57")
    assert status.read_text() == "warm start: imitating, minibatch 10/57\n"  # the last line, on exit
