"""The one-file export: self-contained (no URL leaves the file), anchors between pages, a cap on trajectories."""

from __future__ import annotations

import os
import re

import pytest

from admire.cli import main
from admire.viz.data import RunData
from admire.viz.export import default_selection, export_html
from tests.support.probe_harness import snapshot
from tests.support.viz_helpers import EVIL, make_run


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "runs")


def test_export_is_one_self_contained_file(run):
    html = export_html(RunData(run.path))
    urls = re.findall(r'\s(?:src|href|action)="([^"]*)"', html)
    assert urls and all(u.startswith(("#", "data:image/png;base64,")) for u in urls), \
        sorted({u[:40] for u in urls if not u.startswith(("#", "data:"))})
    assert "url(" not in html.replace("url(#arrowhead)", "") and "@import" not in html
    assert html.count('<section class="page"') == 2 + len(default_selection(RunData(run.path))) + 1 + 2


def test_export_pages_link_by_anchor(run):
    data = RunData(run.path)
    html = export_html(data)
    ids = set(re.findall(r' id="([^"]+)"', html))
    anchors = set(re.findall(r'href="#([^"]+)"', html))
    assert anchors <= ids, anchors - ids
    assert "t-train-0002-0" in ids and "train-0002-0-s1" in ids
    assert "m-" + b"miniwob/login-user".hex() in ids


def test_default_selection_is_the_last_epoch_then_evaluations_capped(run):
    data = RunData(run.path)
    assert [r.address for r in default_selection(data)] == ["train-0002-0", "train-0002-1", "train-0002-2",
                                                            "eval-0000-0", "eval-0003-0"]
    assert [r.address for r in default_selection(data, 4)] == ["train-0002-0", "train-0002-1", "train-0002-2",
                                                               "eval-0003-0"]
    html = export_html(data, max_trajectories=1)
    assert html.count('<section class="page" id="t-') == 1 and "holds 1 of 11 trajectories" in html
    with pytest.raises(ValueError):
        default_selection(data, -1)


def test_export_embeds_each_screenshot_as_png_data(run):
    html = export_html(RunData(run.path))
    ref = run.read_trajectories("train", 2)[0].steps[0].observation.screenshot.ref
    match = re.search(rf'<img src="(data:image/png;base64,[^"]+)"[^>]*data-ref="{ref}"', html)
    assert match is not None
    import base64

    assert base64.b64decode(match[1].split(",", 1)[1]) == run.screenshot_path(ref).read_bytes()


def test_export_escapes_untrusted_text(run):
    html = export_html(RunData(run.path))
    assert EVIL not in html and "<script>window.pwned" not in html


def test_admire_viz_export_command(run, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["viz", str(run.path), "--export", str(out), "--no-score", "--max-trajectories", "2"]) == 0
    assert out.read_text(encoding="utf-8").count('<section class="page" id="t-') == 2
    assert "wrote" in capsys.readouterr().out


def test_admire_viz_refuses_a_missing_run_and_bad_options(tmp_path, run, capsys):
    assert main(["viz", str(tmp_path / "nope"), "--no-score"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["viz", str(run.path), "--no-score", "--export", str(tmp_path / "x.html"),
                 "--max-trajectories", "-1"]) == 2
    assert not (tmp_path / "x.html").exists()
    assert main(["viz", str(run.path), "--no-score", "--port", "70000"]) == 2


# -- the export writes one new file or replaces a previous export, nothing else ----------------


def test_an_export_replaces_a_previous_export(run, tmp_path, capsys):
    out = tmp_path / "report.html"
    argv = ["viz", str(run.path), "--export", str(out), "--no-score", "--max-trajectories", "1"]
    assert main(argv) == 0
    first = out.read_text(encoding="utf-8")
    assert main([*argv[:-1], "2"]) == 0
    assert out.read_text(encoding="utf-8") != first and out.read_text(encoding="utf-8").count('id="t-') == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "runs"]  # no temporary file left


def test_an_export_creates_missing_folders(run, tmp_path, capsys):
    out = tmp_path / "reports" / "june" / "report.html"
    assert main(["viz", str(run.path), "--export", str(out), "--no-score", "--max-trajectories", "1"]) == 0
    assert out.is_file()


@pytest.mark.parametrize("kind", ["directory", "empty directory", "other file", "under a file"])
def test_an_export_target_that_is_not_ours_is_refused_before_scoring(run, tmp_path, capsys, monkeypatch, kind):
    """Refused before anything runs: not even the reward files of an unscored run are written."""
    import admire.commands.viz as viz_command

    monkeypatch.setattr(viz_command, "score_run", lambda data: pytest.fail("scored before checking --export"))
    target = tmp_path / "target"
    if kind == "directory":
        target.mkdir()
        (target / "index.html").write_text("someone's site")
    elif kind == "empty directory":
        target.mkdir()
    elif kind == "other file":
        target.write_text("<!doctype html><title>my page</title>")
    else:
        target.write_text("a file")
        target = target / "report.html"
    before = snapshot(tmp_path)
    assert main(["viz", str(run.path), "--export", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("admire viz: error: ") and "Traceback" not in err
    assert snapshot(tmp_path) == before


def test_a_write_that_fails_late_leaves_nothing(run, tmp_path, capsys, monkeypatch):
    import admire.fileio as fileio

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", full_disk)
    out = tmp_path / "new" / "report.html"
    assert main(["viz", str(run.path), "--export", str(out), "--no-score"]) == 2
    err = capsys.readouterr().err
    assert "no space left on device" in err and err.count("\n") == 1
    assert not (tmp_path / "new").exists()  # the folder made for it is removed again


def test_rescoring_uses_the_runs_own_encoder(run, monkeypatch):
    """The viewer re-scores with ``milestone_reward.encoder`` of the run, as the trainer scored."""
    import admire.rl.scoring as scoring
    from admire.commands.viz import score_run
    from tests.support.fakes import TrigramEncoder

    asked: list[str] = []
    monkeypatch.setattr(scoring, "make_encoder", lambda name: asked.append(str(name)) or TrigramEncoder())
    text = run.config.read_text(encoding="utf-8").replace("threshold: 0.75,", "threshold: 0.75, encoder: /models/mine,")
    run.config.write_text(text, encoding="utf-8")
    done = score_run(RunData(run.path))
    assert asked == ["/models/mine"]
    assert done and all(kind == "eval" for kind, _, _ in done)  # the evaluations had no breakdowns


def test_a_moved_encoder_directory_shows_the_run_without_breakdowns(run, tmp_path, capsys):
    from admire.commands.viz import score_run

    gone = tmp_path / "moved-model"
    text = run.config.read_text(encoding="utf-8").replace("threshold: 0.75,", f"threshold: 0.75, encoder: {gone},")
    run.config.write_text(text, encoding="utf-8")
    before = snapshot(run.path)
    assert score_run(RunData(run.path)) == []
    err = capsys.readouterr().err
    assert err.startswith("admire viz: reward breakdowns not computed: unknown encoder") and err.count("\n") == 1
    assert snapshot(run.path) == before  # nothing written


def _outcome_only(run) -> None:
    """Rewards of outcomes only: scoring needs no sentence encoder."""
    run.config.write_text(run.config.read_text(encoding="utf-8").replace("mode: admire", "mode: outcome"),
                          encoding="utf-8")


def test_scoring_skips_unreadable_trajectory_lines_in_one_warning(run, tmp_path, capsys):
    _outcome_only(run)
    with run.trajectory_file("eval", 0).open("ab") as handle:
        handle.write(b'\xff\x00 binary\n{"task": {"name": "x"}, "id": "b"}\n{"id": "torn", "ta')
    assert main(["viz", str(run.path), "--export", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [f"admire viz: warning: {run.trajectory_file('eval', 0)}: 3 unreadable lines (torn, binary "
                        "or not a trajectory) left unscored"], err
    assert "Traceback" not in err and (tmp_path / "r.html").is_file()
    assert list(run.read_rewards("eval", 0)) == ["ev0-e0-g0"]  # the readable trajectory is scored


def test_a_folder_named_like_a_trajectory_file_is_reported_once(run, tmp_path, capsys, caplog):
    """The viewer's index says it leaves the folder out; scoring does not say it a second time."""
    _outcome_only(run)
    run.trajectory_file("train", 99).mkdir()
    assert main(["viz", str(run.path), "--export", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "train_epoch_0099" in line]
    said += [record.getMessage() for record in caplog.records if "train_epoch_0099" in record.getMessage()]
    assert said == [f"{run.trajectory_file('train', 99)} is left out of the viewer: Is a directory"], err
    assert (tmp_path / "r.html").is_file() and not run.rewards_file("train", 99).exists()


def test_an_invalid_config_value_is_refused_before_scoring_writes(run, tmp_path, capsys):
    run.config.write_text(run.config.read_text(encoding="utf-8").replace("threshold: 0.75", "threshold: 7"),
                          encoding="utf-8")
    before = snapshot(tmp_path)
    assert main(["viz", str(run.path), "--export", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err == (f"admire viz: error: {run.config}: milestone_reward.threshold: must be a finite number in "
                   "[-1.0, 1.0], got 7.0; correct it there, or view the run without re-scoring (--no-score)\n")
    assert snapshot(tmp_path) == before


def _fifo(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _dev_zero(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/zero")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", [_fifo, _dev_zero], ids=["fifo", "dev-zero"])
@pytest.mark.parametrize("where", ["trajectories/train_epoch_0007.jsonl", "trajectories/rewards/eval_epoch_0003.jsonl",
                                   "config.yaml", "summary.json", "metrics.jsonl"])
def test_an_export_reads_past_files_that_never_end(run, tmp_path, capsys, special, where):
    """A FIFO or /dev/zero in a run's place of a file: the export is written, nothing blocks or fills memory."""
    _outcome_only(run)
    target = run.path / where
    target.unlink(missing_ok=True)
    special(target)
    argv = ["viz", str(run.path), "--export", str(tmp_path / "r.html")]
    if where == "config.yaml":  # the config then reads as the defaults, which score with the sentence encoder
        argv.append("--no-score")
    assert main(argv) == 0
    assert "Traceback" not in capsys.readouterr().err and (tmp_path / "r.html").is_file()
