"""Probes of the commands that touch a user's data files: ``admire milestones``
and ``admire viz``. Each row is a hostile or careless command line; each must exit 2 with one
``admire …: error:`` line and leave every file exactly as it was (``tests/support/probe_harness.py``).

Fixture banks are written through the bank API; foreign databases with ``sqlite3`` as another program
would write them.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from admire.milestones.bank import MilestoneBank, Provenance
from tests.support.probe_harness import CliProbe, run_cli_probe
from tests.support.viz_helpers import make_run

RUN = "runs/x"
BANK = f"{RUN}/milestones.sqlite"


def bank(tmp: Path) -> None:
    with MilestoneBank(tmp / BANK) as opened:
        opened.put("miniwob/login-user", ["typed <value> into Username", "clicked Login"],
                   Provenance(run="x", epoch=0, trajectory_id="t0", generator="heuristic", created_at=1.7e9))
        opened.put("miniwob/click-test", ["clicked Click Me"],
                   Provenance(run="x", epoch=1, trajectory_id="t1", generator="heuristic", created_at=1.7e9))


def foreign_db(tmp: Path) -> None:
    """Another program's SQLite file (rollback journal), which admire must neither change nor switch to WAL."""
    with closing(sqlite3.connect(tmp / "other.db")) as db, db:
        db.execute("CREATE TABLE contacts (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO contacts (name) VALUES ('Ada')")


def foreign_wal_db(tmp: Path) -> None:
    with closing(sqlite3.connect(tmp / "wal.db", isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (x)")


def random_bytes(tmp: Path) -> None:
    (tmp / "random.db").write_bytes(bytes(range(256)) * 64)


def empty_file(tmp: Path) -> None:
    (tmp / "empty.sqlite").write_bytes(b"")


def bank_and(*more):
    def setup(tmp: Path) -> None:
        bank(tmp)
        for step in more:
            step(tmp)
    return setup


def file(name: str, content: str | bytes):
    def setup(tmp: Path) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return setup


def milestone_file(created_at: object = 1.7e9, epoch: object = 0, name: str = "in.json", keys: int = 1):
    """An export file of ``keys`` lists whose last list carries ``created_at`` and ``epoch``."""
    good = {"run": "r", "epoch": 0, "trajectory_id": None, "generator": "heuristic", "created_at": 1.7e9}
    lists = {f"k{i}": {"milestones": [f"phrase {i}"], "provenance": good} for i in range(1, keys)}
    lists[f"k{keys}"] = {"milestones": ["last"], "provenance": {**good, "created_at": created_at, "epoch": epoch}}
    text = json.dumps({"format": "admire-milestones", "format_version": 1, "lists": lists})
    return file(name, text)


def with_run(tmp: Path) -> None:
    make_run(tmp / "runs", name="x")


def run_and(*more):
    def setup(tmp: Path) -> None:
        with_run(tmp)
        for step in more:
            step(tmp)
    return setup


def previous_export(tmp: Path) -> None:
    """A report from an earlier `admire viz --export` of the same run, which may be replaced."""
    from admire.viz.data import RunData
    from admire.viz.export import write_export

    write_export(RunData(tmp / RUN), tmp / "report.html", max_trajectories=1)


def outcome_scoring(tmp: Path) -> None:
    """The run rewards outcomes only, so scoring needs no sentence encoder (the probes stay fast)."""
    config = tmp / RUN / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("mode: admire", "mode: outcome"), encoding="utf-8")


def unscored_run(*more):
    """A run whose evaluations still need reward breakdowns, then ``more`` damage done to it."""
    return run_and(outcome_scoring, *more)


def appended(name: str, content: bytes):
    """``content`` appended to a file of the run, as a torn write or a hand edit leaves it."""
    def setup(tmp: Path) -> None:
        with (tmp / RUN / name).open("ab") as handle:
            handle.write(content)
    return setup


def config_value(old: str, new: str):
    def setup(tmp: Path) -> None:
        config = tmp / RUN / "config.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    return setup


def trajectory_folder(tmp: Path) -> None:
    """A directory named like a trajectory file (a mistaken ``mkdir``, an unpacked archive)."""
    (tmp / RUN / "trajectories" / "train_epoch_0099.jsonl").mkdir()


def screenshot_of_size(width: int, height: int):
    """The first recorded screenshot of the last training epoch claims ``width`` × ``height`` pixels."""
    def setup(tmp: Path) -> None:
        path = tmp / RUN / "trajectories" / "train_epoch_0002.jsonl"
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace('"width":160,"height":210', f'"width":{width},"height":{height}', 1),
                        encoding="utf-8")
    return setup


EVAL_0 = "trajectories/eval_epoch_0000.jsonl"
REWARDS_0 = "trajectories/rewards/train_epoch_0000.jsonl"
HUGE = 10**400

PROBES: list[CliProbe] = [
    # -- milestones export: never over the bank, never over a file it did not write ----------------------
    CliProbe("export-over-the-bank", ("milestones", "export", RUN, BANK), message="the milestone bank itself",
             setup=bank),
    CliProbe("export-over-the-bank-with-force", ("milestones", "export", RUN, BANK, "--force"),
             message="the milestone bank itself", setup=bank),
    CliProbe("export-over-the-bank-wal", ("milestones", "export", RUN, f"{BANK}-wal", "--force"),
             message="the milestone bank itself", setup=bank),
    CliProbe("export-over-an-existing-file", ("milestones", "export", RUN, "notes.json"),
             message=r"exists.*--force", setup=bank_and(file("notes.json", '{"mine": true}'))),
    CliProbe("export-force-over-a-database", ("milestones", "export", RUN, "other.db", "--force"),
             message="is a database", setup=bank_and(foreign_db)),
    CliProbe("export-onto-a-directory", ("milestones", "export", RUN, "runs"), message="is a directory",
             setup=bank),
    CliProbe("export-under-a-file", ("milestones", "export", RUN, "notes.json/ms.json"),
             message="not a directory", setup=bank_and(file("notes.json", "{}"))),
    CliProbe("export-of-a-missing-bank", ("milestones", "export", "runs/none", "ms.json"),
             message="no milestone bank at", held=True),
    # -- read commands on files that are not banks: read-only, refused, unchanged -------------------------
    CliProbe("show-a-foreign-sqlite", ("milestones", "show", "other.db"),
             message="not an ADMIRE milestone bank.*contacts", setup=foreign_db),
    CliProbe("history-a-foreign-sqlite", ("milestones", "history", "other.db", "k"),
             message="not an ADMIRE milestone bank", setup=foreign_db),
    CliProbe("show-a-foreign-wal-sqlite", ("milestones", "show", "wal.db"), message="not an ADMIRE milestone bank",
             setup=foreign_wal_db),
    CliProbe("show-random-bytes", ("milestones", "show", "random.db"), message="not an SQLite database",
             setup=random_bytes),
    CliProbe("show-an-empty-file", ("milestones", "show", "empty.sqlite"), message="empty file",
             setup=empty_file),
    CliProbe("show-a-text-file", ("milestones", "show", "notes.db"), message="not an SQLite database",
             setup=file("notes.db", "SQLite is great\n")),
    CliProbe("show-a-missing-bank", ("milestones", "show", "runs/none"), message="no milestone bank at",
             held=True),
    CliProbe("history-of-an-unknown-key", ("milestones", "history", RUN, "miniwob/none"),
             message="no milestones for key 'miniwob/none'", setup=bank, held=True),
    CliProbe("show-an-unknown-key", ("milestones", "show", RUN, "--key", "nope"),
             message="no milestones for key 'nope'", setup=bank, held=True),
    # -- import: the whole file checked first, one transaction, nothing created on failure ---------------
    CliProbe("import-created-at-nan", ("milestones", "import", RUN, "in.json"), message=r"'k1'.*created_at",
             setup=bank_and(milestone_file(float("nan")))),
    CliProbe("import-created-at-infinity", ("milestones", "import", RUN, "in.json"), message="created_at",
             setup=bank_and(milestone_file(float("inf")))),
    CliProbe("import-created-at-1e30", ("milestones", "import", RUN, "in.json"), message="created_at.*1e\\+30",
             setup=bank_and(milestone_file(1e30))),
    CliProbe("import-created-at-1e300", ("milestones", "import", RUN, "in.json"), message="created_at.*1e\\+300",
             setup=bank_and(milestone_file(1e300))),
    CliProbe("import-created-at-negative", ("milestones", "import", RUN, "in.json"), message="created_at",
             setup=bank_and(milestone_file(-5.0))),
    CliProbe("import-created-at-text", ("milestones", "import", RUN, "in.json"), message="created_at",
             setup=bank_and(milestone_file("yesterday"))),
    CliProbe("import-epoch-1e300", ("milestones", "import", RUN, "in.json"), message="epoch",
             setup=bank_and(milestone_file(epoch=1e300))),
    CliProbe("import-epoch-too-big-for-sqlite", ("milestones", "import", RUN, "in.json"), message="epoch",
             setup=bank_and(milestone_file(epoch=2**64))),
    CliProbe("import-nan-into-a-new-run", ("milestones", "import", "runs/new", "in.json"), message="created_at",
             setup=milestone_file(float("nan"))),
    CliProbe("import-fails-half-way", ("milestones", "import", RUN, "in.json"), message=r"'k3'.*created_at",
             setup=bank_and(milestone_file(1e300, keys=3))),
    CliProbe("import-malformed-json", ("milestones", "import", RUN, "in.json"), message="not a JSON milestone file",
             setup=bank_and(file("in.json", '{"k": ["a", '))),
    CliProbe("import-deeply-nested-json", ("milestones", "import", RUN, "in.json"), message="nested too deeply",
             setup=bank_and(file("in.json", "[" * 200_000))),
    CliProbe("import-binary-file", ("milestones", "import", RUN, "in.json"), message="not a JSON milestone file",
             setup=bank_and(file("in.json", b"\xff\xfe\x00garbage"))),
    CliProbe("import-malformed-json-into-a-new-run", ("milestones", "import", "runs/new", "in.json"),
             message="not a JSON milestone file", setup=file("in.json", "{")),
    CliProbe("import-a-json-list", ("milestones", "import", RUN, "in.json"), message="is a JSON object",
             setup=bank_and(file("in.json", "[1, 2]")), held=True),
    CliProbe("import-an-empty-list", ("milestones", "import", RUN, "in.json"), message="key 'b'",
             setup=bank_and(file("in.json", '{"a": ["x"], "b": []}')), held=True),
    CliProbe("import-into-a-foreign-sqlite", ("milestones", "import", "other.db", "in.json"),
             message="not an ADMIRE milestone bank", setup=run_and(foreign_db, file("in.json", '{"k": ["a"]}'))),
    CliProbe("import-into-random-bytes", ("milestones", "import", "random.db", "in.json"),
             message="not an SQLite database", setup=run_and(random_bytes, file("in.json", '{"k": ["a"]}'))),
    CliProbe("import-into-an-empty-file", ("milestones", "import", "empty.sqlite", "in.json"),
             message="empty file", setup=run_and(empty_file, file("in.json", '{"k": ["a"]}'))),
    CliProbe("import-a-missing-file", ("milestones", "import", RUN, "missing.json"),
             message="no milestone file at", setup=bank),
    CliProbe("import-a-directory", ("milestones", "import", RUN, "runs"), message="is a directory", setup=bank),
    # -- viz --export: a new file or a previous export, nothing else, nothing half-written ---------------
    CliProbe("viz-export-onto-a-directory", ("viz", RUN, "--no-score", "--export", "site"),
             message="is a directory.*report.html", setup=run_and(file("site/index.html", "<h1>mine</h1>"))),
    CliProbe("viz-export-onto-an-empty-directory", ("viz", RUN, "--no-score", "--export", "out"),
             message="is a directory", setup=run_and(lambda tmp: (tmp / "out").mkdir())),
    CliProbe("viz-export-onto-the-run", ("viz", RUN, "--no-score", "--export", RUN), message="is a directory",
             setup=with_run),
    CliProbe("viz-export-over-another-file", ("viz", RUN, "--no-score", "--export", "page.html"),
             message="not an admire export", setup=run_and(file("page.html", "<!doctype html><p>my page"))),
    CliProbe("viz-export-over-the-config", ("viz", RUN, "--no-score", "--export", f"{RUN}/config.yaml"),
             message="not an admire export", setup=with_run),
    CliProbe("viz-export-under-a-file", ("viz", RUN, "--no-score", "--export", "notes.txt/report.html"),
             message="cannot write.*not a directory", setup=run_and(file("notes.txt", "x"))),
    CliProbe("viz-export-unwritable-path", ("viz", RUN, "--no-score", "--export", "/proc/admire-probe/r.html"),
             message="cannot write", setup=with_run),
    CliProbe("viz-of-a-missing-run", ("viz", "runs/none", "--no-score", "--export", "r.html"),
             message="not a run directory", held=True),
    CliProbe("viz-export-negative-max", ("viz", RUN, "--no-score", "--export", "r.html", "--max-trajectories", "-1"),
             message="max-trajectories", setup=with_run, held=True),
    CliProbe("viz-bad-port", ("viz", RUN, "--no-score", "--port", "70000"), message="--port", setup=with_run,
             held=True),
    # -- viz scoring: a run's damaged or hostile files are skipped with a warning, never a traceback ------
    CliProbe("viz-export-scores-past-a-torn-trajectory-line", ("viz", RUN, "--export", "r.html"), exit_code=0,
             unchanged=False, setup=unscored_run(appended(EVAL_0, b'{"id": "torn", "task": {"na'))),
    CliProbe("viz-export-scores-past-a-binary-trajectory-line", ("viz", RUN, "--export", "r.html"), exit_code=0,
             unchanged=False, setup=unscored_run(appended(EVAL_0, b"\xff\xfe\x00 binary\n"))),
    CliProbe("viz-export-scores-past-json-that-is-no-trajectory", ("viz", RUN, "--export", "r.html"),
             exit_code=0, unchanged=False,
             setup=unscored_run(appended(EVAL_0, b'{"task": {"name": "x"}, "id": "b", "termination": "success"}\n'))),
    CliProbe("viz-export-scores-past-a-folder-named-like-a-trajectory-file", ("viz", RUN, "--export", "r.html"),
             exit_code=0, unchanged=False, setup=unscored_run(trajectory_folder)),
    CliProbe("viz-export-past-a-malformed-rewards-file", ("viz", RUN, "--export", "r.html"), exit_code=0,
             unchanged=False, setup=unscored_run(appended(REWARDS_0, b'junk\n{"id": 1}\n[]\n\xff\n'))),
    CliProbe("viz-export-past-a-screenshot-of-impossible-size", ("viz", RUN, "--export", "r.html"), exit_code=0,
             unchanged=False, setup=unscored_run(screenshot_of_size(HUGE, HUGE))),
    CliProbe("viz-export-past-a-screenshot-wider-than-any-screen", ("viz", RUN, "--export", "r.html"),
             exit_code=0, unchanged=False, setup=unscored_run(screenshot_of_size(HUGE, 210))),
    CliProbe("viz-export-with-a-threshold-out-of-range", ("viz", RUN, "--export", "r.html"),
             message=r"config\.yaml: milestone_reward\.threshold: .*7.*; .*--no-score",
             setup=unscored_run(config_value("threshold: 0.75", "threshold: 7"))),
    CliProbe("viz-export-with-a-threshold-that-is-no-number", ("viz", RUN, "--export", "r.html"),
             message=r"config\.yaml: milestone_reward\.threshold: .*'abc'; .*--no-score",
             setup=unscored_run(config_value("threshold: 0.75", "threshold: abc"))),
    CliProbe("viz-export-with-a-reward-section-that-is-no-mapping", ("viz", RUN, "--export", "r.html"),
             message=r"config\.yaml: .*'reward' must be a mapping",
             setup=run_and(config_value("reward: {mode: admire, format_weight: 0.5}", "reward: 5"))),
    # -- what must still work ---------------------------------------------------------------------------
    CliProbe("viz-export-replaces-a-previous-export", ("viz", RUN, "--no-score", "--export", "report.html"),
             exit_code=0, unchanged=False, setup=run_and(previous_export)),
    CliProbe("export-force-replaces-a-json-file", ("milestones", "export", RUN, "ms.json", "--force"),
             exit_code=0, unchanged=False, setup=bank_and(file("ms.json", "{}"))),
    CliProbe("show-a-bank-reads-only", ("milestones", "show", RUN, "--json"), exit_code=0, setup=bank),
]


@pytest.mark.parametrize("probe", PROBES, ids=[probe.id for probe in PROBES])
def test_probe(probe: CliProbe, tmp_path: Path, capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")
    run_cli_probe(probe, tmp_path, capsys, monkeypatch)


def test_every_probe_id_is_unique() -> None:
    assert len({probe.id for probe in PROBES}) == len(PROBES)


def test_a_foreign_database_is_still_what_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the bytes: no tables added, the journal mode untouched (the probe above checks the bytes)."""
    run_cli_probe(next(p for p in PROBES if p.id == "show-a-foreign-sqlite"), tmp_path, capsys, monkeypatch)
    with closing(sqlite3.connect(tmp_path / "other.db")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [row[0] for row in db.execute("SELECT name FROM sqlite_master")] == ["contacts"]


def test_a_replaced_export_is_a_new_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    probe = next(p for p in PROBES if p.id == "viz-export-replaces-a-previous-export")
    run_cli_probe(probe, tmp_path, capsys, monkeypatch)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert html.count('<section class="page" id="t-') == 5  # the default selection, not the old 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "runs"]
