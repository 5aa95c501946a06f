"""``admire bench learning --sweep`` and ``--tuned-from`` (admire.benchmarks.sweep): every arm tuned alike on
validation seeds, then each arm's own best setting on the test split; planned and reported on fake runs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from admire.benchmarks import learning
from admire.benchmarks.sweep import Setting, best_settings, check_sweep, parse_sweeps

LR = "actor_rollout_ref.actor.lr"


def keys(overrides: tuple[str, ...]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_a_sweep_is_the_product_of_its_keys_values_each_labelled() -> None:
    settings = parse_sweeps([f"{LR}=0.01,0.003", "actor_rollout_ref.actor.max_kl=0.1,null"])
    assert [s.label for s in settings] == ["lr:0.01+max_kl:0.1", "lr:0.01+max_kl:null", "lr:0.003+max_kl:0.1",
                                           "lr:0.003+max_kl:null"]
    assert settings[1].overrides == (f"{LR}=0.01", "actor_rollout_ref.actor.max_kl=null")
    shared_last_part = parse_sweeps(["actor_rollout_ref.actor.lr=0.1", "actor_rollout_ref.warm_start.lr=0.2"])
    assert shared_last_part[0].label == "actor_rollout_ref.actor.lr:0.1+actor_rollout_ref.warm_start.lr:0.2"
    assert parse_sweeps([]) == (Setting(),)


@pytest.mark.parametrize(("spec", "message"), [
    ("actor_rollout_ref.actor.lr", "write KEY=V1,V2"),
    (f"{LR}=0.1,", "cannot name a run folder"),
    (f"{LR}=../x", "cannot name a run folder"),
    (f"{LR}=0.1,0.1", "listed twice"),
    (f"{LR}=1+2", "cannot name a run folder"),
])
def test_a_malformed_sweep_is_a_one_line_error(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sweeps([spec])
    with pytest.raises(ValueError, match="twice"):
        parse_sweeps([f"{LR}=0.1", f"+{LR}=0.2"])


def test_a_sweep_is_refused_on_the_test_split_and_on_a_key_that_defines_a_variant() -> None:
    settings = parse_sweeps([f"{LR}=0.1,0.2"])
    check_sweep(settings, ["outcome", "admire"], learning.VARIANTS, "validation")
    with pytest.raises(ValueError, match="validation seeds"):
        check_sweep(settings, ["outcome"], learning.VARIANTS, "test")
    with pytest.raises(ValueError, match="'outcome' is defined by that key"):
        check_sweep(parse_sweeps(["reward.mode=outcome,admire"]), ["admire", "outcome"], learning.VARIANTS,
                    "validation")


def test_every_setting_shares_the_seeds_start_unless_it_changes_the_start(tmp_path: Path) -> None:
    common = learning.common_overrides("miniwob-long")
    plan = learning.build_plan(["outcome", "admire"], [0], common, tmp_path, parse_sweeps([f"{LR}=0.01,0.003"]))
    assert [s.name for s in plan] == ["start-s0", "outcome@lr:0.01-s0", "admire@lr:0.01-s0", "outcome@lr:0.003-s0",
                                      "admire@lr:0.003-s0"]
    start = str((tmp_path / "runs" / "start-s0").resolve())
    for spec in plan[1:]:
        assert keys(spec.overrides)[LR] == spec.name.split(":", 1)[1].removesuffix("-s0")
        assert keys(spec.overrides)["actor_rollout_ref.warm_start.from_run"] == start and spec.needs == "start-s0"
        assert keys(spec.overrides)["run.name"] == spec.name
    assert keys(plan[1].overrides)["reward.mode"] == "outcome"  # the variant's own key is kept
    assert LR not in keys(plan[0].overrides) or keys(plan[0].overrides)[LR] == "0.003"  # the suite's, not swept

    epochs = learning.build_plan(["admire"], [0], common, tmp_path,
                                 parse_sweeps(["actor_rollout_ref.warm_start.epochs=5,20", f"{LR}=0.1,0.2"]))
    assert [s.name for s in epochs] == [  # one start per value of the key that decides it, shared across lr
        "start@epochs:5-s0", "admire@epochs:5+lr:0.1-s0", "admire@epochs:5+lr:0.2-s0", "start@epochs:20-s0",
        "admire@epochs:20+lr:0.1-s0", "admire@epochs:20+lr:0.2-s0"]
    assert keys(epochs[0].overrides)["actor_rollout_ref.warm_start.epochs"] == "5"
    assert LR not in keys(epochs[0].overrides) or keys(epochs[0].overrides)[LR] == "0.003"
    assert keys(epochs[2].overrides)["actor_rollout_ref.warm_start.from_run"].endswith("/start@epochs:5-s0")


def test_every_planned_run_of_a_sweep_is_a_valid_command_line(tmp_path: Path) -> None:
    """Run names, starts and bank paths carry the setting's label into overrides: Hydra must read them whole."""
    from admire.config import load_config

    common = learning.common_overrides("miniwob-long", epochs=3)
    sweeps = parse_sweeps([f"{LR}=0.01,1e-3", "actor_rollout_ref.warm_start.epochs=5,20"])
    for spec in learning.build_plan(["outcome", "admire", "static"], [0], common, tmp_path, sweeps):
        cfg = load_config(overrides=list(spec.overrides))
        assert cfg.run.name == spec.name


def test_the_best_setting_of_each_variant_is_its_own() -> None:
    def row(mean: float | None, ok: int = 3) -> dict[str, Any]:
        return {"after": {"mean": mean, "n": ok}, "ok": ok, "runs": 3}

    table = {"admire@lr:0.01": row(0.6), "admire@lr:0.1": row(0.6), "admire@lr:0.3": row(None, 0),
             "admire@lr:0.5": row(0.9, 1), "outcome@lr:0.1": row(0.5), "outcome@lr:0.2": row(0.4),
             "outcome": row(0.9)}
    plan_order = ["outcome@lr:0.1", "admire@lr:0.1", "outcome@lr:0.2", "admire@lr:0.01", "admire@lr:0.3",
                  "admire@lr:0.5"]
    settings = {name: [f"{LR}={name.split(':')[1]}"] for name in plan_order}
    best = best_settings(table, settings)
    assert best["outcome"]["label"] == "outcome@lr:0.1" and best["outcome"]["overrides"] == [f"{LR}=0.1"]
    assert best["admire"]["label"] == "admire@lr:0.1"  # a tie goes to the setting the command listed first
    # lr 0.5's 90% is one seed of three: not a candidate beside settings judged on every seed


FAKE_TRAIN = textwrap.dedent("""\
    import json, pathlib, sys
    run, after = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "adv/nonzero_frac": 0.5}) + "\\n")
    (run / "summary.json").write_text(json.dumps(
        {"before": {"success": 0.0}, "after": {"success": after}, "env_steps": 10, "wall_s": 1.0}))
    """)
# Held-out success the fake runs report: each arm is best at a different learning rate.
SUCCESS = {("outcome", "0.1"): 0.5, ("outcome", "0.2"): 0.3, ("admire", "0.1"): 0.4, ("admire", "0.2"): 0.7}


def test_a_sweep_then_a_test_run_with_each_arms_best_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    trained: dict[str, dict[str, str]] = {}

    def fake(spec: Any, run_dir: Path) -> list[str]:
        overrides = keys(spec.overrides)
        trained[spec.name] = overrides
        after = SUCCESS[(learning.base_variant(spec.variant), overrides[LR])]
        return [sys.executable, "-c", FAKE_TRAIN, str(run_dir), str(after)]

    monkeypatch.setattr(learning, "train_command", fake)
    monkeypatch.setattr(learning, "POLL_S", 0.05)
    sweep, test = tmp_path / "sweep", tmp_path / "test"
    base = ["--suite", "miniwob-smoke", "--seeds", "0", "1", "--parallel", "2"]
    assert learning.main([*base, "--out", str(sweep), "--sweep", f"{LR}=0.1,0.2"]) == 0
    saved = json.loads((sweep / "results.json").read_text())
    assert saved["split"] == "validation"
    assert {v: b["label"] for v, b in saved["sweep"]["best"].items()} == {"outcome": "outcome@lr:0.1",
                                                                          "admire": "admire@lr:0.2"}
    assert saved["variants"]["outcome@lr:0.1"] == ["reward.mode=outcome"]
    assert saved["summary"]["admire@lr:0.2"]["gain_over_outcome"]["mean"] == pytest.approx(0.4)  # vs outcome@lr:0.2
    report = (sweep / "results.md").read_text()
    assert "| **admire@lr:0.2** | 2/2 | 70.0 ± 0.0 |" in report and "| admire@lr:0.1 | 2/2 | 40.0 ± 0.0 |" in report
    assert f"- `outcome@lr:0.1`: `reward.mode=outcome {LR}=0.1`" in report

    trained.clear()
    assert learning.main([*base, "--out", str(test), "--split", "test", "--tuned-from", str(sweep)]) == 0
    assert {name: o[LR] for name, o in trained.items()} == {"outcome-s0": "0.1", "admire-s0": "0.2",
                                                            "outcome-s1": "0.1", "admire-s1": "0.2"}
    assert all(o["trainer.eval_split"] == "test" for o in trained.values())
    table = json.loads((test / "results.json").read_text())["summary"]
    assert table["admire"]["gain_over_outcome"]["mean"] == pytest.approx(0.2)  # each arm at its own best
    assert f"- `admire`: `{LR}=0.2`" in (test / "results.md").read_text()

    assert learning.main([*base, "--out", str(tmp_path / "again"), "--tuned-from", str(test)]) == 2
    assert "hold no sweep" in capsys.readouterr().err
    assert learning.main([*base, "--out", str(tmp_path / "x"), "--sweep", f"{LR}=0.1", "--split", "test"]) == 2
    assert "validation seeds" in capsys.readouterr().err
    assert learning.main([*base, "--variants", "outcome_traj", "--out", str(tmp_path / "y"), "--tuned-from",
                          str(sweep)]) == 2
    assert "no finished setting of outcome_traj" in capsys.readouterr().err
    assert learning.main(["--suite", "miniwob-demo", "--seeds", "0", "--out", str(tmp_path / "z"), "--tuned-from",
                          str(sweep)]) == 2
    assert "not 'miniwob-demo'" in capsys.readouterr().err


def test_each_start_of_a_sweep_is_hashed_in_the_results(tmp_path: Path) -> None:
    for name in ("start-s0", "start@epochs:5-s0", "startle-s0"):
        folder = tmp_path / name / "checkpoints"
        folder.mkdir(parents=True)
        (folder / "start.json").write_text(json.dumps({"tensors_sha256": f"hash of {name}"}))
    assert learning.shared_starts(tmp_path) == {"start-s0": "hash of start-s0",
                                                "start@epochs:5-s0": "hash of start@epochs:5-s0"}
