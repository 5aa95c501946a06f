"""``admire bench`` and the learning benchmark, without training anything.

The bench command runs tiny benchmark files in child processes (one failing, one with a dataclass);
the learning benchmark's plan, scheduler and report are checked on fabricated run directories and on
fake ``admire train`` commands, so these tests take seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from admire.commands import bench
from admire.commands.bench import split_names
from tests.support.paths import REPO

BENCHMARKS = REPO / "src" / "admire" / "benchmarks"


def main(argv: Sequence[str]) -> int:
    """``admire <argv>`` for the bench command, parsed as the CLI parses it (a subcommand), without
    importing every other command."""
    parser = argparse.ArgumentParser(prog="admire")
    bench.add_arguments(parser.add_subparsers(dest="command").add_parser("bench"))
    args = parser.parse_args(list(argv))
    assert args.command == "bench"
    return bench.run(args)


# --------------------------------------------------------------------------------------------------
# admire bench
# --------------------------------------------------------------------------------------------------


def write_benchmarks(folder: Path) -> Path:
    """``bad`` raises; ``good`` has a dataclass (needs its module in sys.modules) and echoes its argv;
    ``legacy`` has a ``main()`` that reads sys.argv itself; ``slow`` sleeps."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bad.py").write_text("def main(argv):\n    raise RuntimeError('boom in bad')\n")
    (folder / "good.py").write_text(textwrap.dedent("""\
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Row:
            value: int

        def main(argv):
            print("good ran with", argv, Row(3))
            return 0
        """))
    (folder / "legacy.py").write_text("import sys\n\ndef main():\n    print('legacy argv', sys.argv[1:])\n")
    (folder / "slow.py").write_text("import time\n\ndef main(argv):\n    time.sleep(60)\n")
    (folder / "_helper.py").write_text("raise SystemExit('a helper is not a benchmark')\n")
    return folder


def test_a_failing_benchmark_is_reported_and_the_next_one_still_runs(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = write_benchmarks(tmp_path / "benchmarks")
    assert main(["bench", "--dir", str(folder), "bad", "good"]) == 1
    out, err = capfd.readouterr()
    assert "boom in bad" in err  # the child's traceback, not ours
    assert "good ran with [] Row(value=3)" in out  # ran after the failure, dataclass and all
    assert "1/2 benchmarks ok; failed: bad" in out
    summary = out.split("=== summary")[1]
    assert "bad" in summary and "FAILED" in summary and "exit    1" in summary
    assert "good" in summary and " ok " in summary
    assert "[1/2] bad (1 more after this)" in out and "[2/2] good (0 more after this)" in out  # progress lines
    assert "admire bench: 2 benchmark(s), each in its own process: bad, good" in out


def test_the_benchmarks_ship_in_the_package_and_run_by_their_module_name(
        capfd: pytest.CaptureFixture[str]) -> None:
    """``admire bench`` finds the benchmarks in the installed package (no clone needed) and the child
    imports ``admire.benchmarks.<name>``; ``--help`` is the cheapest run of one."""
    import admire.benchmarks

    assert bench.benchmarks_dir() == Path(admire.benchmarks.__file__).resolve().parent == BENCHMARKS
    assert main(["bench", "--list"]) == 0
    listed = capfd.readouterr().out.split()
    assert listed == sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
    assert bench.module_name("learning", BENCHMARKS / "learning.py") == "admire.benchmarks.learning"
    assert main(["bench", "learning", "--help"]) == 0
    out = capfd.readouterr().out
    assert "usage: admire bench learning" in out and "1/1 benchmarks ok" in out


def test_arguments_after_one_name_reach_its_main(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = write_benchmarks(tmp_path / "benchmarks")
    assert main(["bench", "--dir", str(folder), "good", "--seeds", "0", "1"]) == 0
    assert "good ran with ['--seeds', '0', '1']" in capfd.readouterr().out
    assert main(["bench", "--dir", str(folder), "legacy", "--", "x", "--flag"]) == 0
    assert "legacy argv ['x', '--flag']" in capfd.readouterr().out


def test_a_benchmark_past_the_timeout_is_stopped_and_reported(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = write_benchmarks(tmp_path / "benchmarks")
    assert main(["bench", "--dir", str(folder), "--timeout", "2", "slow", "good"]) == 1
    out = capfd.readouterr().out
    assert "timed out" in out and "failed: slow" in out and "good ran with" in out


def test_unknown_names_and_ambiguous_arguments_are_one_line_errors(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = write_benchmarks(tmp_path / "benchmarks")
    assert main(["bench", "--dir", str(folder), "good", "nope"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "unknown benchmark(s) nope" in err and "good" in err
    assert main(["bench", "--dir", str(folder), "good", "bad", "--seeds", "0"]) == 2
    assert "exactly one benchmark name" in capfd.readouterr().err
    assert main(["bench", "--dir", str(tmp_path / "missing")]) == 2


def test_list_skips_private_helpers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_benchmarks(tmp_path / "benchmarks")
    assert main(["bench", "--dir", str(folder), "--list"]) == 0
    assert capsys.readouterr().out.split() == ["bad", "good", "legacy", "slow"]


def test_split_names() -> None:
    assert split_names(["learning", "--suite", "x", "--seeds", "0", "1"]) == (
        ["learning"], ["--suite", "x", "--seeds", "0", "1"])
    assert split_names(["a", "b"]) == (["a", "b"], [])
    assert split_names(["a", "--", "0", "--x"]) == (["a"], ["0", "--x"])
    assert split_names([]) == ([], [])


# --------------------------------------------------------------------------------------------------
# admire.benchmarks.learning
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def learning() -> ModuleType:
    return importlib.import_module("admire.benchmarks.learning")


def as_dict(overrides: Sequence[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_every_variant_builds_its_own_overrides(learning: ModuleType, tmp_path: Path) -> None:
    common = learning.common_overrides("miniwob-long", epochs=40, env_steps=5000,
                                       extra=["milestone_reward.decay=0.5", "env.max_envs=[2]"])
    plan = learning.build_plan(list(learning.VARIANTS), [0, 1], common, tmp_path)
    runs = {spec.name: spec for spec in plan}
    assert len(plan) == 2 * (len(learning.VARIANTS) + 1)  # and one start per seed (a warm start)
    for spec in plan:
        keys = as_dict(spec.overrides)
        assert keys["run.name"] == spec.name == f"{spec.variant}-s{spec.seed}"
        assert keys["run.seed"] == str(spec.seed)
        assert keys["run.dir"] == str((tmp_path / "runs").resolve())
        assert keys["env.suite"] == "miniwob-long"
        assert keys["trainer.total_epochs"] == ("0" if spec.variant == "start" else "40")
        assert keys["trainer.total_env_steps"] == "5000"
        assert keys["actor_rollout_ref.warm_start.enable"] == "true"
        assert keys["actor_rollout_ref.warm_start.suite"] == "miniwob-long-warmstart-lists"
        assert keys["actor_rollout_ref.model.block_features"] == "true"  # the suite's own keys
        assert keys["env.max_steps"] == "24" and keys["actor_rollout_ref.actor.max_kl"] == "0.1"
        assert keys["actor_rollout_ref.actor.lr"] == "0.003"
        assert keys["env.max_envs"] == "[2]"  # --set beats the base
        assert len(keys) == len(spec.overrides)  # no key twice (Hydra refuses duplicates)
        for override in learning.VARIANTS.get(spec.variant, ()):
            assert override in spec.overrides  # a variant's own keys beat --set
    assert as_dict(runs["outcome-s0"].overrides)["reward.mode"] == "outcome"
    assert as_dict(runs["no_decay-s1"].overrides)["milestone_reward.decay"] == "1.0"
    assert as_dict(runs["admire-s1"].overrides)["milestone_reward.decay"] == "0.5"  # --set reaches the others
    assert as_dict(runs["uniform-s0"].overrides)["milestone_reward.strategy"] == "uniform"
    assert as_dict(runs["sbert-s0"].overrides)["milestone_reward.matcher"] == "sbert"
    paper = as_dict(runs["paper-s0"].overrides)
    assert paper["milestone_reward.key"] == "instruction" and paper["env.train_instances_per_task"] == "null"
    assert paper["actor_rollout_ref.actor.target_kl"] == "null" and paper["algorithm.std_floor"] == "0"
    static = runs["static-s1"]
    assert static.needs == "admire-s1"
    assert as_dict(static.overrides)["milestone_reward.mode"] == "static"
    assert as_dict(static.overrides)["milestone_reward.static_path"] == str(
        (tmp_path / "milestones" / "admire-s1.json").resolve())
    assert [s.variant for s in plan[-2:]] == ["static", "static"]  # after every admire run


def test_with_a_warm_start_every_arm_of_a_seed_starts_from_that_seeds_start_run(
        learning: ModuleType, tmp_path: Path) -> None:
    plan = learning.build_plan(["outcome", "admire", "static"], [0, 1], learning.common_overrides("miniwob-long"),
                               tmp_path)
    assert [s.name for s in plan[:3]] == ["start-s0", "outcome-s0", "admire-s0"]
    for spec in plan:
        keys = as_dict(spec.overrides)
        start = str((tmp_path / "runs" / f"start-s{spec.seed}").resolve())
        if spec.variant == "start":
            assert spec.needs is None and "actor_rollout_ref.warm_start.from_run" not in keys
        else:
            assert keys["actor_rollout_ref.warm_start.from_run"] == start
            assert spec.needs == (f"admire-s{spec.seed}" if spec.variant == "static" else f"start-s{spec.seed}")
    without = learning.build_plan(["outcome"], [0], learning.common_overrides("miniwob-demo"), tmp_path)
    assert [(s.name, s.needs) for s in without] == [("outcome-s0", None)]
    assert "actor_rollout_ref.warm_start.from_run" not in as_dict(without[0].overrides)


def test_static_alone_brings_the_admire_runs_it_imports(learning: ModuleType, tmp_path: Path) -> None:
    plan = learning.build_plan(["static"], [3], learning.common_overrides("miniwob-demo"), tmp_path)
    assert [(s.name, s.needs) for s in plan] == [("admire-s3", None), ("static-s3", "admire-s3")]
    with pytest.raises(ValueError, match="unknown variant"):
        learning.build_plan(["nope"], [0], [], tmp_path)


def test_suite_defaults_and_quick(learning: ModuleType) -> None:
    demo = as_dict(learning.common_overrides("miniwob-demo"))
    assert demo["actor_rollout_ref.warm_start.enable"] == "false" and "trainer.total_env_steps" not in demo
    assert demo["env.max_envs"] == "[1]"
    assert demo["trainer.eval_split"] == "validation"  # choices are made on validation seeds unless asked
    assert as_dict(learning.common_overrides("miniwob-demo", split="test"))["trainer.eval_split"] == "test"
    assert learning.parse_args(["--split", "test"]).split == "test" and learning.parse_args([]).split == "validation"
    args = learning.parse_args(["--quick"])
    assert (args.suite, args.seeds, args.epochs, args.variants) == ("miniwob-smoke", [0], 2, ["outcome", "admire"])
    assert args.out == Path("bench-results/learning-miniwob-smoke")
    quick = as_dict(learning.common_overrides(args.suite, epochs=args.epochs, quick=True))
    assert quick["trainer.total_epochs"] == "2" and quick["env.suite"] == "miniwob-smoke"
    defaults = learning.parse_args([])
    assert (defaults.suite, defaults.seeds) == ("miniwob-long", [0, 1, 2])


def test_the_variant_keys_exist_in_the_shipped_config(learning: ModuleType) -> None:
    """A renamed config key would make every run of a variant die at start-up; catch it here (composed: a static
    variant's milestone file is named by the benchmark when it runs)."""
    from admire.config import compose_config

    common = learning.common_overrides("miniwob-smoke", epochs=2, env_steps=100, quick=True)
    for variant, overrides in learning.VARIANTS.items():
        cfg = compose_config("demo_miniwob", learning.merge_overrides(common, overrides))
        assert cfg.env.suite == "miniwob-smoke", variant


def write_run(runs: Path, name: str, *, before: float, after: float, env_steps: int,
              epochs: Sequence[dict[str, Any]]) -> None:
    folder = runs / name
    folder.mkdir(parents=True)
    summary = {"before": {"success": before}, "after": {"success": after}, "env_steps": env_steps, "wall_s": 10.0,
               "cpu_s": env_steps / 100}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i, **m}) + "\n" for i, m in enumerate(epochs)))


def epochs(nonzero: Sequence[float], epoch_s: float, milestone_s: float, coverage: Sequence[float],
           evals: Sequence[float]) -> list[dict[str, Any]]:
    records = []
    for i, frac in enumerate(nonzero):
        record = {"adv/nonzero_frac": frac, "time/epoch_s": epoch_s, "time/milestone_s": milestone_s,
                  "milestones/coverage": coverage[i], "env_steps_total": 100 * (i + 1),
                  "reward/step_gap": 0.1 * coverage[i], "reward/step_gap_norm": coverage[i]}
        if i % 2 == 1:
            record["eval/success"] = evals[i // 2]
        records.append(record)
    return records


@pytest.fixture
def fabricated(tmp_path: Path) -> Path:
    """Two seeds of outcome and admire, and an admire seed that failed (no summary, a log)."""
    out = tmp_path / "bench"
    runs = out / "runs"
    write_run(runs, "outcome-s0", before=0.2, after=0.3, env_steps=400,
              epochs=epochs([0.2, 0.4, 0.2, 0.4], 10.0, 0.0, [0, 0, 0, 0], [0.25, 0.3]))
    write_run(runs, "outcome-s1", before=0.0, after=0.5, env_steps=420,
              epochs=epochs([0.1, 0.3, 0.1, 0.3], 10.0, 0.0, [0, 0, 0, 0], [0.4, 0.5]))
    write_run(runs, "admire-s0", before=0.2, after=0.6, env_steps=400,
              epochs=epochs([0.8, 0.8, 0.9, 0.9], 10.0, 0.5, [0.5, 0.6, 0.7, 0.8], [0.4, 0.6]))
    write_run(runs, "admire-s1", before=0.0, after=0.7, env_steps=440,
              epochs=epochs([0.7, 0.7, 0.7, 0.7], 20.0, 0.5, [0.5, 0.6, 0.7, 1.0], [0.5, 0.7]))
    (runs / "admire-s2").mkdir()
    (out / "logs").mkdir()
    (out / "logs" / "admire-s2.log").write_text("Traceback: boom\n")
    return out


def test_report_numbers_from_fabricated_runs(learning: ModuleType, fabricated: Path) -> None:
    failed = {"admire-s2": learning.Execution(1, 3.0)}
    markdown, results = learning.write_report(fabricated, "miniwob-long", failed)
    saved = json.loads((fabricated / "results.json").read_text())
    table = saved["summary"]
    assert saved["split"] == "test"  # runs that never named a split were evaluated on the test seeds
    assert list(table) == ["outcome", "admire"]  # VARIANTS order
    admire, outcome = table["admire"], table["outcome"]
    assert (admire["runs"], admire["ok"], outcome["ok"]) == (3, 2, 2)
    assert admire["after"]["mean"] == pytest.approx(0.65)
    assert admire["after"]["std"] == pytest.approx(0.0707107, abs=1e-6)  # sample std of 0.6, 0.7
    assert admire["after"]["per_seed"] == {"0": 0.6, "1": 0.7}
    assert admire["before"]["mean"] == pytest.approx(0.1)
    assert outcome["after"]["mean"] == pytest.approx(0.4)
    assert admire["gain_over_outcome"]["per_seed"] == {"0": pytest.approx(0.3), "1": pytest.approx(0.2)}
    assert outcome["gain_over_outcome"] is None
    assert admire["utilisation"] == pytest.approx((0.85 + 0.7) / 2)  # mean over epochs, then over seeds
    assert admire["cpu_s"] == pytest.approx(4.2) and outcome["cpu_s"] == pytest.approx(4.1)  # mean over seeds
    assert outcome["utilisation"] == pytest.approx((0.3 + 0.2) / 2)
    assert admire["milestone_cost"] == pytest.approx((2 / 40 + 2 / 80) / 2)  # Σ milestone_s / Σ epoch_s per run
    assert outcome["milestone_cost"] == 0.0
    assert admire["coverage"] == pytest.approx(0.9)  # the last epoch's, averaged
    assert admire["env_steps"] == pytest.approx(420)
    assert admire["step_gap"] == pytest.approx(0.1 * (0.65 + 0.7) / 2)  # mean over epochs, then over seeds
    assert admire["step_gap_norm"] == pytest.approx((0.65 + 0.7) / 2) and outcome["step_gap"] == 0.0
    assert admire["not_ok"] == [{"run": "admire-s2", "status": "failed", "exit_code": 1,
                                 "log": str(fabricated / "logs" / "admire-s2.log"), "note": ""}]
    row = next(line for line in markdown.splitlines() if line.startswith("| admire "))
    assert "| 2/3 |" in row and "10.0 ± 14.1 → 65.0 ± 7.1" in row
    assert "s0: 20 → 60, s1: 0 → 70, s2: failed (exit 1)" in row
    assert "25.0 ± 7.1" in row and "77.5%" in row and "3.8%" in row and "90.0%" in row and "| 0.068 (0.68) |" in row
    assert f"`admire-s2`: failed, exit 1; log `{fabricated / 'logs' / 'admire-s2.log'}`" in markdown
    assert (fabricated / "results.md").read_text() == markdown
    assert (fabricated / "curves.png").stat().st_size > 1000
    curve = next(r for r in results if r.name == "admire-s1").curve
    assert curve == [(0.0, 0.0), (200.0, 0.5), (400.0, 0.7), (440.0, 0.7)]  # start, evals, final


def test_metrics_keep_the_last_record_of_a_step_and_skip_a_torn_line(learning: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "a": 1}\n{"step": 1, "a": 2}\n{"step": 1, "a": 3}\n{"step": 2, "a"')
    assert learning.metrics_by_step(path) == [{"step": 0, "a": 1}, {"step": 1, "a": 3}]


def fake_train(learning: ModuleType, failing: set[str]) -> Any:
    """Stands in for ``admire train``: writes a summary (or exits 3 for the runs in ``failing``)."""
    script = textwrap.dedent("""\
        import json, pathlib, sys
        run, fail = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"
        print("training", run.name)
        if fail:
            sys.exit(3)
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "adv/nonzero_frac": 0.5}) + "\\n")
        (run / "summary.json").write_text(json.dumps(
            {"before": {"success": 0.0}, "after": {"success": 0.5}, "env_steps": 10, "wall_s": 1.0}))
        """)

    def command(spec: Any, run_dir: Path) -> list[str]:
        return [sys.executable, "-c", script, str(run_dir), "1" if spec.name in failing else "0"]

    return command


def test_scheduler_reports_a_failed_run_and_skips_what_needed_it(
        learning: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learning, "train_command", fake_train(learning, failing={"admire-s0"}))
    monkeypatch.setattr(learning, "admire_command",  # the bank export: echo instead of `admire milestones`
                        lambda *args: [sys.executable, "-c", "import sys; print(*sys.argv[1:])", *args])
    monkeypatch.setattr(learning, "POLL_S", 0.05)
    out = tmp_path / "bench"
    plan = learning.build_plan(["outcome", "static"], [0, 1], [], out)
    lines: list[str] = []
    results = learning.Scheduler(plan, out, parallel=2, resume=False, say=lines.append).run()
    assert results["admire-s0"].code == 3
    assert results["static-s0"].code is None and "admire-s0 failed" in results["static-s0"].note
    assert results["outcome-s0"].code == 0 and results["static-s1"].code == 0
    assert "training admire-s0" in (out / "logs" / "admire-s0.log").read_text()
    assert "milestones export" in (out / "logs" / "static-s1.log").read_text()  # the bank export ran first
    assert any("FAILED (exit 3)" in line and "admire-s0.log" in line for line in lines)
    markdown, _ = learning.write_report(out, "miniwob-smoke", results, plan)
    assert "s0: failed (exit 3)" in markdown and "s0: not started" in markdown


def test_main_refuses_to_overwrite_and_resume_keeps_finished_runs(
        learning: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []
    fake = fake_train(learning, failing=set())

    def counting(spec: Any, run_dir: Path) -> list[str]:
        calls.append(spec.name)
        return fake(spec, run_dir)

    monkeypatch.setattr(learning, "train_command", counting)
    monkeypatch.setattr(learning, "POLL_S", 0.05)
    out = tmp_path / "bench"
    argv = ["--suite", "miniwob-smoke", "--seeds", "0", "--out", str(out)]
    assert learning.main(argv) == 0
    assert calls == ["outcome-s0", "admire-s0"]
    assert learning.main(argv) == 2  # runs exist: refused
    assert "--resume" in capsys.readouterr().err
    (out / "runs" / "admire-s0" / "summary.json").unlink()
    assert learning.main([*argv, "--resume"]) == 0
    assert calls == ["outcome-s0", "admire-s0", "admire-s0"]  # only the unfinished one again
    assert learning.main(["--report-only", "--out", str(out)]) == 0
    report = (out / "results.md").read_text()
    assert "`miniwob-smoke`" in report and "admire bench learning --suite miniwob-smoke" in report


def test_a_benchmark_that_opts_out_runs_only_when_named(tmp_path: Path) -> None:
    from admire.commands.bench import runs_by_default

    quick = tmp_path / "quick.py"
    quick.write_text("def main(argv):\n    return 0\n")
    long = tmp_path / "long.py"
    long.write_text("RUN_BY_DEFAULT = False\n\ndef main(argv):\n    return 0\n")
    assert runs_by_default(quick) and not runs_by_default(long)
    assert not runs_by_default(BENCHMARKS / "learning.py")


def test_matcher_calibration_scores_the_shipped_matcher_in_each_setting(tmp_path: Path) -> None:
    """On a few pairs with the real encoder: the bench's own check that its δ-search gate reproduces the
    matcher passes, and the three settings differ where the prose reading should make them differ."""
    from admire.benchmarks import matcher_calibration

    rows = [("checked the '<value>' checkbox", "<value> checkbox unchecked", False, "other_action"),  # s 0.84
            ("clicked the 'OK' button", "OK tapped", True, "paraphrase_named"),  # s below δ
            ("clicked the 'Login' button", "clicked the 'Login' button", True, "grounded_same"),
            ('typed "<v1>" into the \'Username\' field', 'typed "<v1>" into the \'Password\' field', False,
             "grounded_field_swap")]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"description": d, "milestone": m, "same_step": same, "kind": kind,
                                        "domain": "web"}) + "\n" for d, m, same, kind in rows))
    out = tmp_path / "calibration.json"
    assert matcher_calibration.main(["--data", str(data), "--json", str(out)]) == 0
    modes = json.loads(out.read_text())["modes"]
    accuracy = {mode: modes[mode]["at_threshold"]["accuracy"] for mode in modes}
    assert accuracy == {"grounded": 1.0, "grounded-no-prose": 0.5, "sbert": pytest.approx(0.25)}
    assert modes["grounded"]["pairs.jsonl"]["n"] == 4


def test_matcher_calibration_refuses_a_malformed_pair_file(tmp_path: Path) -> None:
    from admire.benchmarks import matcher_calibration

    data = tmp_path / "pairs.jsonl"
    data.write_text('{"description": "clicked"}\n')
    with pytest.raises(SystemExit, match=r"pairs.jsonl:1: not a pair"):
        matcher_calibration.main(["--data", str(data)])


def test_a_continued_run_takes_this_invocations_budget(learning: ModuleType, tmp_path: Path) -> None:
    common = learning.common_overrides("miniwob-long", epochs=30, env_steps=280)
    start, arm = learning.build_plan(["admire"], [0], common, tmp_path)
    for spec in (start, arm):
        (tmp_path / spec.name).mkdir()
        (tmp_path / spec.name / "config.yaml").write_text("run: {}\n")
    assert learning.train_command(arm, tmp_path / arm.name)[-3:] == [
        f"resume={tmp_path / arm.name}", "trainer.total_epochs=30", "trainer.total_env_steps=280"]
    assert learning.train_command(start, tmp_path / start.name)[-1] == f"resume={tmp_path / start.name}"


def test_the_heartbeat_reads_a_runs_status_line(learning: ModuleType, tmp_path: Path) -> None:
    assert learning.run_status(tmp_path / "missing") == "starting"
    (tmp_path / "status.txt").write_text("warm start: imitating, minibatch 12/57\n")
    assert learning.run_status(tmp_path) == "warm start: imitating, minibatch 12/57"
