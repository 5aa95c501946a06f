"""The paper's tables on the learning benchmark (admire.benchmarks.paper_tables): which variants each table
trains, which rows cannot run here and why, the milestones written by hand, and the tables as rendered."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from admire.benchmarks import learning
from admire.benchmarks.paper_tables import (
    TABLES,
    hand_written_milestones,
    not_runnable,
    render_tables,
    table_variants,
)
from admire.milestones.bank import MilestoneBank, milestone_key


def test_each_table_trains_its_own_variants_and_they_exist() -> None:
    assert table_variants(["4"]) == ["outcome", "admire", "outcome_rloo", "rloo", "outcome_dapo", "dapo"]
    assert table_variants(["1", "3"]) == ["outcome", "judge", "admire", "static_hand", "static"]
    assert all(v in learning.VARIANTS for t in TABLES.values() for v in t.variants)
    with pytest.raises(ValueError, match="--table 2: the paper's tables here are 1, 3, 4"):
        table_variants(["2"])
    assert learning.parse_args(["--table", "4"]).variants == table_variants(["4"])
    assert learning.parse_args(["--table", "4", "--variants", "admire"]).variants == ["admire"]


def test_a_row_that_cannot_run_here_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    common = learning.common_overrides("miniwob-long")
    reasons = not_runnable(["outcome", "judge", "static_hand"], "miniwob-long", common)
    assert set(reasons) == {"judge", "static_hand"}
    assert "reward.judge.base_url" in reasons["judge"] and "miniwob-long" in reasons["static_hand"]
    endpoint = [*common, "reward.judge.base_url=http://localhost:8000/v1", "reward.judge.model=judge"]
    assert not_runnable(["judge", "static_hand"], "miniwob-demo", endpoint) == {}
    plan = learning.build_plan(["static_hand"], [0], learning.common_overrides("miniwob-demo"), tmp_path)
    path = dict(o.split("=", 1) for o in plan[0].overrides)["milestone_reward.static_path"]
    assert Path(path) == hand_written_milestones("miniwob-demo")


@pytest.mark.parametrize("suite", ["miniwob-demo", "miniwob-lm"])
def test_the_milestones_written_by_hand_import_under_the_keys_the_suites_goals_give(suite: str,
                                                                                    tmp_path: Path) -> None:
    from admire.envs.suites import get_suite

    path = hand_written_milestones(suite)
    assert path is not None
    written = json.loads(path.read_text(encoding="utf-8"))
    tasks = {f"miniwob/{t.split('/')[-1]}" for t in get_suite(suite).tasks}
    assert {key.split("::")[0] for key in written} == tasks  # every task of the suite has a list
    for key in written:  # a goal with these placeholders filled is keyed back to the same list
        task, template = key.split("::", 1)
        goal = re.sub(r"<v(\d+)>", lambda m: f"Word{m.group(1)}x", template)
        assert milestone_key(task, goal, "skeleton") == key
    bank = MilestoneBank(tmp_path / "bank.sqlite", mode="static")
    assert len(bank.import_json(path)) == len(written)
    bank.close()


def test_the_tables_render_in_the_papers_shape_with_rows_not_run() -> None:
    summary = {
        "outcome": {"after": {"mean": 0.4, "std": 0.1, "n": 3}, "after_ci": {"mean": 0.4, "low": 0.3, "high": 0.5}},
        "admire": {"after": {"mean": 0.6, "std": 0.05, "n": 3}, "after_ci": None},
        "rloo": {"after": {"mean": None, "std": None, "n": 0}},
    }
    lines = render_tables(summary, {"judge": "no judge endpoint"})
    text = "\n".join(lines)
    assert "**Table 1: the reward signal** (`--table 1`)" in text
    assert "| outcome-only | 40.0 [30.0, 50.0] (3 seeds) |" in text
    assert "| process reward (LLM judge) | not run: no judge endpoint |" in text
    assert "| ADMIRE | 60.0 ± 5.0 (3 seeds) |" in text
    assert "| GRPO | 40.0 [30.0, 50.0] (3 seeds) | 60.0 ± 5.0 (3 seeds) |" in text
    assert "| RLOO | – (`outcome_rloo`: no finished run) | – (`rloo`: no finished run) |" in text
    assert "Table 3" in text  # its adaptive row finished
    assert render_tables({}, {}) == []
    trained_later = render_tables(summary, {"admire": "an old reason"})  # a row trained since shows its numbers
    assert "| ADMIRE | 60.0 ± 5.0 (3 seeds) |" in "\n".join(trained_later)


def test_table_1_without_an_endpoint_trains_the_other_rows_and_reports_the_judge_row_not_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from typing import Any

    from tests.commands.test_bench_sweep import FAKE_TRAIN

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    trained: list[str] = []

    def fake(spec: Any, run_dir: Path) -> list[str]:
        trained.append(spec.name)
        return [sys.executable, "-c", FAKE_TRAIN, str(run_dir), "0.5"]

    monkeypatch.setattr(learning, "train_command", fake)
    monkeypatch.setattr(learning, "POLL_S", 0.05)
    out = tmp_path / "bench"
    assert learning.main(["--suite", "miniwob-smoke", "--seeds", "0", "--table", "1", "--out", str(out)]) == 0
    assert trained == ["outcome-s0", "admire-s0"]
    report = (out / "results.md").read_text()
    assert "| process reward (LLM judge) | not run: no judge endpoint" in report
    assert json.loads((out / "results.json").read_text())["not_run"].keys() == {"judge"}
    assert learning.main(["--report-only", "--out", str(out)]) == 0  # read back from the invocations
    assert "| process reward (LLM judge) | not run" in (out / "results.md").read_text()
