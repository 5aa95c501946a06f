"""Intervals and paired tests of ``admire bench learning`` (``admire.benchmarks.intervals``), and the report's
episode-level tables read from the runs' evaluation files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from admire.benchmarks import learning
from admire.benchmarks.intervals import (
    bootstrap_interval,
    paired_difference,
    paired_permutation_p,
    sign_flip_p,
    suite_success,
)
from admire.types import Observation, Step, Task, Termination, Trajectory


def episodes(rates: dict[str, float], n: int = 20) -> dict[str, dict[int, float]]:
    """n episodes per task, the first round(rate·n) of them successes."""
    return {task: {1_000_000 + i: float(i < round(rate * n)) for i in range(n)} for task, rate in rates.items()}


def test_suite_success_is_the_mean_over_tasks() -> None:
    assert suite_success(episodes({"a": 0.5, "b": 1.0})) == pytest.approx(0.75)
    assert suite_success({"a": {1: 1.0}, "b": {1: 0.0, 2: 0.0, 3: 0.0}}) == pytest.approx(0.5)  # not pooled


def test_the_interval_holds_the_mean_widens_with_fewer_episodes_and_is_reproducible() -> None:
    runs = {0: episodes({"a": 0.5, "b": 0.3}), 1: episodes({"a": 0.6, "b": 0.4}), 2: episodes({"a": 0.4, "b": 0.2})}
    wide = bootstrap_interval({s: episodes({"a": 0.5}, n=10) for s in range(3)})
    narrow = bootstrap_interval({s: episodes({"a": 0.5}, n=200) for s in range(3)})
    interval = bootstrap_interval(runs)
    assert interval is not None and wide is not None and narrow is not None
    assert interval.mean == pytest.approx(0.4) and interval.low < interval.mean < interval.high
    assert narrow.high - narrow.low < wide.high - wide.low  # the episodes' noise is counted
    assert wide.high - wide.low > 0.25  # identical seeds: the spread over seeds is 0, the episodes' is not
    assert bootstrap_interval(runs) == interval
    assert bootstrap_interval({}) is None


def test_a_paired_difference_does_not_count_what_the_arms_share() -> None:
    # Both arms fail and succeed on the same episodes except 2 of 20 per task that only the arm solves.
    base = {s: episodes({"a": 0.5, "b": 0.5}) for s in range(3)}
    arm = {s: {t: {k: max(v, float(k - 1_000_000 in (10, 11))) for k, v in e.items()} for t, e in run.items()}
           for s, run in base.items()}
    difference = paired_difference(arm, base)
    assert difference is not None and difference.mean == pytest.approx(0.1)
    assert difference.low > 0.03
    independent = bootstrap_interval(arm), bootstrap_interval(base)
    assert independent[0] is not None and independent[1] is not None
    assert independent[0].low < independent[1].high  # the arms' own intervals overlap: unpaired, no difference
    assert paired_permutation_p(arm, base) < 0.001
    assert paired_permutation_p(base, base) == 1.0
    assert paired_difference(arm, {}) is None and paired_permutation_p(arm, {}) is None


def test_the_sign_flip_test_is_exact_and_bounded_by_the_number_of_seeds() -> None:
    assert sign_flip_p([0.1, 0.2, 0.3]) == pytest.approx(2 / 8)  # the smallest p three seeds can give
    assert sign_flip_p([0.1, 0.2, 0.3, 0.1, 0.2]) == pytest.approx(2 / 32)
    assert sign_flip_p([0.1, -0.1]) == pytest.approx(1.0)
    assert sign_flip_p([]) is None
    flips = np.array([[a, b, c] for a in (-1, 1) for b in (-1, 1) for c in (-1, 1)])
    values = np.array([0.3, -0.1, 0.2])
    expected = np.mean(np.abs((flips * values).mean(axis=1)) >= abs(values.mean()) - 1e-12)
    assert sign_flip_p(list(values)) == pytest.approx(expected)


def write_eval(folder: Path, index: int, rates: dict[str, float], n: int = 20) -> None:
    lines = []
    for task, outcomes in episodes(rates, n).items():
        for seed, outcome in outcomes.items():
            step = Step(index=0, observation=Observation(goal="g"), raw_output="x", format_valid=True)
            lines.append(Trajectory(id=f"{task}-{seed}", task=Task(name=task, seed=seed), goal="g", steps=(step,),
                                    outcome=outcome, termination=Termination.SUCCESS if outcome else
                                    Termination.MAX_STEPS).to_json())
    (folder / "trajectories").mkdir(parents=True, exist_ok=True)
    (folder / "trajectories" / f"eval_epoch_{index:04d}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_report_reads_episodes_from_the_runs_and_their_shared_start(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        start = runs / f"start-s{seed}"
        write_eval(start, 0, {"miniwob/a": 0.2, "miniwob/b": 0.1})
        (start / "summary.json").write_text(json.dumps({"before": {"success": 0.15}, "after": {"success": 0.15}}))
        for variant, rates in (("outcome", {"miniwob/a": 0.3, "miniwob/b": 0.1}),
                               ("admire", {"miniwob/a": 0.6, "miniwob/b": 0.3})):
            folder = runs / f"{variant}-s{seed}"
            write_eval(folder, 3, rates)
            (folder / "summary.json").write_text(json.dumps({"before": {"success": 0.15}, "after": {
                "success": suite_success(episodes(rates))}, "env_steps": 300, "wall_s": 5.0}))
            (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(3)))
    markdown, _ = learning.write_report(tmp_path, "miniwob-lm")
    table = json.loads((tmp_path / "results.json").read_text())["summary"]
    admire = table["admire"]
    assert admire["before_ci"]["mean"] == pytest.approx(0.15)  # from the start runs' evaluation before RL
    assert admire["after_ci"]["mean"] == pytest.approx(0.45)
    versus = admire["vs_outcome"]
    assert versus["mean"] == pytest.approx(0.25) and versus["low"] > 0 and versus["seeds"] == 3
    assert versus["p_sign_flip_seeds"] == pytest.approx(0.25) and versus["p_permutation_episodes"] < 0.01
    assert table["outcome"]["vs_outcome"] is None
    assert admire["per_task"]["miniwob/a"]["after"] == {"mean": pytest.approx(0.6), "episodes": 60,
                                                        "per_seed": {"0": 0.6, "1": 0.6, "2": 0.6}}
    assert "| admire | 15.0 [" in markdown and "| miniwob/a | 20 → 30 (30, 30, 30) | 20 → 60 (60, 60, 60) |" in markdown


def test_a_seed_kept_as_summaries_only_counts_where_its_summary_suffices(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    rates = {"outcome": {"miniwob/a": 0.3, "miniwob/b": 0.1}, "admire": {"miniwob/a": 0.6, "miniwob/b": 0.3}}
    for seed in (0, 1, 2):
        start = runs / f"start-s{seed}"
        start.mkdir(parents=True)
        before = {"success": 0.15, "success/miniwob/a": 0.2, "success/miniwob/b": 0.1}
        (start / "summary.json").write_text(json.dumps({"before": before, "after": before}))
        for variant, rate in rates.items():
            folder = runs / f"{variant}-s{seed}"
            folder.mkdir()
            if seed != 2:  # seed 2: its evaluation files are gone, its summary says 10 points more for admire
                write_eval(start, 0, {"miniwob/a": 0.2, "miniwob/b": 0.1})
                write_eval(folder, 3, rate)
                (folder / "metrics.jsonl").write_text(json.dumps({"step": 0, "adv/nonzero_frac": 0.5}) + "\n")
            more = 0.1 if seed == 2 and variant == "admire" else 0.0
            after = {"miniwob/a": rate["miniwob/a"] + more, "miniwob/b": rate["miniwob/b"]}
            summary = {"success": sum(after.values()) / 2, **{f"success/{t}": v for t, v in after.items()}}
            (folder / "summary.json").write_text(json.dumps({"before": before, "after": summary, "env_steps": 300}))
    markdown, _ = learning.write_report(tmp_path, "miniwob-lm")
    admire = json.loads((tmp_path / "results.json").read_text())["summary"]["admire"]
    assert admire["episode_seeds"] == [0, 1] and admire["seeds_without_episodes"] == [2]
    versus = admire["vs_outcome"]
    assert versus["seeds"] == 2 and versus["mean"] == pytest.approx(0.25)  # the episodes: seeds 0 and 1
    assert versus["per_seed"] == {"0": pytest.approx(0.25), "1": pytest.approx(0.25), "2": pytest.approx(0.3)}
    assert versus["p_sign_flip_seeds"] == pytest.approx(0.25)  # three seeds: the smallest p is 2/8
    assert admire["per_task"]["miniwob/a"]["after"]["per_seed"] == {"0": 0.6, "1": 0.6, "2": pytest.approx(0.7)}
    assert admire["per_task"]["miniwob/a"]["after"]["episodes"] == 40
    assert admire["per_task"]["miniwob/a"]["before"]["per_seed"]["2"] == pytest.approx(0.2)
    assert "`admire`: no evaluation episodes on disk for seed(s) 2" in markdown
    assert "cover seed(s) 0, 1." in markdown
    assert admire["metrics_seeds"] == [0, 1] and admire["utilisation"] == pytest.approx(0.5)
    assert "`admire`: utilisation, milestone cost, coverage and step gap are means over seed(s) 0, 1," in markdown
