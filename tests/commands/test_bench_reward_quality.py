"""``admire bench reward_quality``: a run's step reward measured against the oracles, on a run folder holding a
real recorded login-user batch scored by ADMIRE, with the oracle replayed in real MiniWoB++."""

from __future__ import annotations

from pathlib import Path

import pytest

from admire.benchmarks.reward_quality import hits_on_path, main, measure, normalised, print_table
from admire.commands.train import config_yaml
from admire.config import load_config
from admire.milestones.bank import MilestoneBank
from admire.rl.scoring import BatchScorer
from admire.runs import RunDir
from admire.types import RewardBreakdown
from tests.rl.test_scoring import recorded_batch
from tests.support.core_scoring import TextHashEncoder


def scored_run(tmp_path: Path) -> RunDir:
    """A run folder as the trainer leaves it: config.yaml, the bank, one epoch's trajectories and rewards."""
    cfg = load_config(overrides=["env.suite=miniwob/login-user"])
    run = RunDir(tmp_path / "run").create()
    run.config.write_text(config_yaml(cfg))
    batch = recorded_batch()
    bank = MilestoneBank(run.bank, mode="adaptive")
    scored = BatchScorer.from_config(cfg, bank, encoder=TextHashEncoder(), run="run").score(batch, epoch=0)
    bank.close()
    run.write_trajectories("train", 0, batch)
    usable = [(t, r) for t, r in zip(batch, scored.rewards, strict=True) if not t.excluded]
    run.write_rewards("train", 0, {t.id: r for t, r in usable}, "trainer")
    return run


def test_hits_on_the_oracles_path_count_only_steps_paid_a_hit() -> None:
    batch = [t for t in recorded_batch() if not t.excluded]
    trajectory = batch[0]
    paid = [RewardBreakdown(matched_milestone="m" if i % 2 == 0 else None) for i in range(len(trajectory.steps))]
    first = normalised(trajectory.steps[0].grounded_description)
    assert hits_on_path([(trajectory, paid)], {(trajectory.task.name, trajectory.task.seed): {first}}) == \
        (1, sum(b.matched_milestone is not None for b in paid))
    assert hits_on_path([(trajectory, paid)], {}) == (0, 0)  # an instance the oracle did not play is left out


def test_a_real_run_is_measured_against_its_replayed_oracle(tmp_path: Path, miniwob_env: object) -> None:
    run = scored_run(tmp_path)
    before = run.bank.read_bytes()
    result = measure(run.path, max_instances=5)
    assert result["episodes"] == 4 and result["instances"] == 1 and result["oracle_episodes"] == 1
    assert result["hits"] > 0 and result["hits_on_oracle_path"] <= result["hits"]
    assert result["share_hits_on_path"] == pytest.approx(result["hits_on_oracle_path"] / result["hits"])
    assert result["oracle_steps"] > 0 and 0 <= result["oracle_steps_hit"] <= result["oracle_steps"]
    assert result["step_gap"] is not None
    assert run.bank.read_bytes() == before  # the run's bank is read from a copy
    out = tmp_path / "quality.json"
    assert main(["--run", str(run.path), "--json", str(out)]) == 0 and out.stat().st_size > 0
    with pytest.raises(SystemExit):
        main(["--run", str(tmp_path)])  # not a run folder: a usage error


def test_the_table_prints_shares_in_percent_and_a_dash_where_nothing_was_hit(capsys: pytest.CaptureFixture[str]
                                                                             ) -> None:
    common = {"episodes": 40, "step_gap": 0.0031, "step_gap_norm": 0.16}
    print_table([{**common, "run": "a", "hits": 257, "share_hits_on_path": 254 / 257, "oracle_steps": 113,
                  "share_oracle_steps_hit": 68 / 113, "tasks_without_oracle": [], "oracle_failures": 0},
                 {**common, "run": "b", "hits": 0, "share_hits_on_path": None, "oracle_steps": 0,
                  "share_oracle_steps_hit": None, "tasks_without_oracle": ["t"], "oracle_failures": 2}])
    rows = capsys.readouterr().out.splitlines()
    assert rows[2:] == ["| a | 40 | 0.003 (0.160) | 98.8 of 257 | 60.2 of 113 |",
                        "| b | 40 | 0.003 (0.160) | – of 0 | – of 0 |",
                        "b: no oracle for t (left out)",
                        "b: 2 oracle replays did not succeed within env.max_steps (left out)"]
