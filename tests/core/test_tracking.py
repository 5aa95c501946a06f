"""``metrics.jsonl`` on disk: every line fsynced when logged, malformed lines reported and skipped (never
fatal), a resume's truncation atomic; atomically written run files get the mode ``open()`` would give."""

from __future__ import annotations

import inspect
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from admire.fileio import atomic_write_bytes, atomic_write_text, default_file_mode
from admire.tracking import JsonlSink, Tracker, read_metrics, truncate_metrics


def write_lines(path: Path, *lines: str, newline_at_end: bool = True) -> None:
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""), encoding="utf-8")


def test_every_logged_line_is_fsynced_before_log_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    seen: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        seen.append(path.read_text(encoding="utf-8"))  # what was on disk when fsync was asked for
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    sink = JsonlSink(path)
    for step in range(3):
        sink.log({"loss": 0.5 * step}, step)
    sink.close()
    assert len(seen) == 3
    assert [text.count("\n") for text in seen] == [1, 2, 3]  # each fsync covers the line just written


def test_tracker_fsyncs_the_jsonl_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    tracker = Tracker(tmp_path, name="t", tensorboard=False, swanlab=None)
    tracker.log({"a": 1.0}, step=0)
    tracker.close()
    assert len(calls) == 1 and read_metrics(tmp_path / "metrics.jsonl") == [{"a": 1.0, "step": 0}]


def test_the_trainer_logs_an_epoch_before_its_checkpoint() -> None:
    """The guarantee rests on this order: the line is durable before the checkpoint that covers it."""
    from admire.rl import trainer

    source = inspect.getsource(trainer.train)
    assert source.index("tracker.log(metrics") < source.index("run.save_checkpoint(")


def test_a_torn_last_line_is_reported_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0, "a": 1}', '{"step": 1, "a": 2}', '{"step": 2, "a"', newline_at_end=False)
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        records = read_metrics(path)
    assert [r["step"] for r in records] == [0, 1]
    [warning] = caplog.messages
    assert str(path) in warning and "line 3" in warning and "torn last line" in warning


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("[1, 2]", "JSON list, not an object"),
        ('"text"', "JSON str, not an object"),
        ("42", "JSON int, not an object"),
        ('{"a": 1}', "no valid 'step'"),
        ('{"step": "3"}', "no valid 'step'"),
        ('{"step": -1}', "no valid 'step'"),
        ('{"step": true}', "no valid 'step'"),
        ('{"step": 1.5}', "no valid 'step'"),
        ("{not json", "not JSON"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_a_malformed_line_anywhere_is_reported_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           line: str, problem: str) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0, "a": 1}', line, '{"step": 1, "a": 2}')
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        assert read_metrics(path) == [{"step": 0, "a": 1}, {"step": 1, "a": 2}]
    [warning] = caplog.messages
    assert str(path) in warning and "line 2" in warning and problem in warning


def test_invalid_utf8_is_reported_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 0}\n\xff\xfe\n')
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        assert read_metrics(path) == [{"step": 0}]
    assert "line 2" in caplog.text and "not UTF-8" in caplog.text


@pytest.mark.parametrize("last", ["[1, 2]", '"x"', '{"loss": 1}', '{"step": null}', '{"step": 2, "a'])
def test_truncate_survives_a_last_line_of_the_wrong_shape(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                          last: str) -> None:
    """Once, a last line that was valid JSON but not a record crashed every resume here."""
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0, "a": 1}', '{"step": 1, "a": 2}', '{"step": 2, "a": 3}', last)
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        truncate_metrics(path, before_step=2)
    assert path.read_text(encoding="utf-8") == '{"a": 1, "step": 0}\n{"a": 2, "step": 1}\n'
    assert "line 4" in caplog.text
    assert not [p for p in tmp_path.iterdir() if p.name != "metrics.jsonl"]  # no temporary file left


def test_truncate_is_atomic_and_keeps_the_file_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}', '{"step": 1}')
    path.chmod(0o640)
    written = []
    import admire.tracking as tracking

    real = tracking.atomic_write_text
    monkeypatch.setattr(tracking, "atomic_write_text", lambda p, text: written.append(p) or real(p, text))
    truncate_metrics(path, before_step=1)
    assert written == [path] and read_metrics(path) == [{"step": 0}]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_truncate_leaves_an_intact_file_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}', '{"step": 1}')
    import admire.tracking as tracking

    monkeypatch.setattr(tracking, "atomic_write_text", lambda *a: pytest.fail("rewrote an intact file"))
    truncate_metrics(path, before_step=2)


def test_a_torn_but_parsable_last_line_gets_its_newline_back(tmp_path: Path) -> None:
    """A writer killed between the JSON and its newline: the next append must not join the two lines."""
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}', '{"step": 1}', newline_at_end=False)
    truncate_metrics(path, before_step=2)
    sink = JsonlSink(path)
    sink.log({}, 2)
    sink.close()
    assert [r["step"] for r in read_metrics(path)] == [0, 1, 2]


def test_metrics_missing_for_checkpointed_epochs_are_reported_once(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}', '{"step": 2', newline_at_end=False)  # epoch 1 lost, epoch 2 torn
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        truncate_metrics(path, before_step=3)
    missing = [m for m in caplog.messages if "cannot be recreated" in m]
    assert len(missing) == 1 and "2 of the 3 epoch(s)" in missing[0] and "epoch 1, 2" in missing[0]
    assert read_metrics(path) == [{"step": 0}]


def test_a_checkpoint_claiming_a_huge_epoch_is_warned_about_without_listing_every_epoch(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}', '{"step": 2}')
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        truncate_metrics(path, before_step=10**30)  # a set of every epoch would be the whole memory
    missing = [m for m in caplog.messages if "cannot be recreated" in m]
    assert len(missing) == 1 and f"{10**30 - 2} of the {10**30} epoch(s)" in missing[0]
    assert "epoch 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, ..." in missing[0]
    assert read_metrics(path) == [{"step": 0}, {"step": 2}]


def test_a_negative_step_is_refused_before_the_file_is_touched(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}')
    with pytest.raises(ValueError, match="before_step must be >= 0"):
        truncate_metrics(path, before_step=-1)
    assert read_metrics(path) == [{"step": 0}]


def test_no_warning_when_the_checkpoint_covers_what_is_there(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    write_lines(path, '{"step": 0}', '{"step": 1}', '{"step": 2}')
    with caplog.at_level(logging.WARNING, logger="admire.tracking"):
        truncate_metrics(path, before_step=2)
        truncate_metrics(tmp_path / "absent.jsonl", before_step=0)
    assert caplog.messages == []


# -- file modes (admire.fileio) -----------------------------------------------------------------------


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    previous = os.umask(0o022)
    os.umask(previous)
    yield set_mask
    os.umask(previous)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077, 0o002])
def test_an_atomic_write_gets_the_mode_open_would_give(tmp_path: Path, umask, mask: int) -> None:
    umask(mask)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic = atomic_write_text(tmp_path / "atomic.txt", "x")
    sink = JsonlSink(tmp_path / "metrics.jsonl")
    sink.close()
    expected = 0o666 & ~mask
    assert default_file_mode() == expected
    assert {stat.S_IMODE(p.stat().st_mode) for p in (plain, atomic, tmp_path / "metrics.jsonl")} == {expected}


def test_an_atomic_write_keeps_an_existing_file_mode(tmp_path: Path, umask) -> None:
    umask(0o022)
    path = tmp_path / "summary.json"
    path.write_text("{}")
    path.chmod(0o600)
    atomic_write_bytes(path, b"{}\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == b"{}\n"


def test_a_run_directory_s_files_match_metrics_jsonl(tmp_path: Path, umask) -> None:
    from admire.runs import RunDir

    umask(0o027)
    run = RunDir(tmp_path / "runs" / "r").create()
    run.write_summary({"ok": True})
    atomic_write_text(run.config, "run: {name: r}\n")
    Tracker(run.path, name="r", tensorboard=False, swanlab=None).close()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (run.summary, run.config, run.metrics)}
    assert set(modes.values()) == {0o640}, modes


def test_overwrite_false_never_replaces_a_file(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("mine")
    with pytest.raises(FileExistsError):
        atomic_write_text(path, "theirs", overwrite=False)
    assert path.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert atomic_write_text(tmp_path / "new.json", "{}", overwrite=False).read_text() == "{}"
    assert json.loads((tmp_path / "new.json").read_text()) == {}
