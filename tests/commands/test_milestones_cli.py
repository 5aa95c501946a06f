"""``admire milestones show | history | export | import`` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admire.cli import main
from admire.milestones.bank import MilestoneBank, Provenance


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["milestones", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich folds table cells to the terminal width; a wide one keeps each cell on one line."""
    monkeypatch.setenv("COLUMNS", "240")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory whose bank has two versions of one list and one of another."""
    run = tmp_path / "runs" / "demo"
    with MilestoneBank(run / "milestones.sqlite") as bank:
        for epoch, phrases in enumerate([["typed <value> into Username", "clicked Login"], ["clicked Login"]]):
            bank.put("miniwob/login-user", phrases,
                     Provenance(run="demo", epoch=epoch, trajectory_id=f"t{epoch}", generator="heuristic",
                                created_at=1_700_000_000.0 + epoch))
        bank.put("miniwob/click-test", ["clicked Click Me"],
                 Provenance(run="demo", epoch=0, trajectory_id="t7", generator="heuristic", created_at=1.0))
    return run


def test_show_prints_the_latest_list_of_every_key(capsys: pytest.CaptureFixture[str], run_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "show", str(run_dir), "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["bank_version"] == 3
    assert {item["key"]: (item["version"], item["milestones"]) for item in shown["lists"]} == {
        "miniwob/click-test": (1, ["clicked Click Me"]),
        "miniwob/login-user": (2, ["clicked Login"]),
    }
    code, table, _ = run_cli(capsys, "show", str(run_dir / "milestones.sqlite"), "--key", "miniwob/click-test")
    assert code == 0
    assert "miniwob/click-test" in table and "1. clicked Click Me" in table and "login-user" not in table


def test_history_lists_every_version_with_its_provenance(capsys: pytest.CaptureFixture[str],
                                                         run_dir: Path) -> None:
    code, out, _ = run_cli(capsys, "history", str(run_dir), "miniwob/login-user", "--json")
    assert code == 0
    versions = json.loads(out)["versions"]
    assert [(v["version"], v["provenance"]["trajectory_id"], len(v["milestones"])) for v in versions] == [
        (1, "t0", 2), (2, "t1", 1)]
    code, table, _ = run_cli(capsys, "history", str(run_dir), "miniwob/login-user")
    assert code == 0 and "2 version(s)" in table and "heuristic" in table


def test_export_then_import_round_trips_into_a_new_run(capsys: pytest.CaptureFixture[str], run_dir: Path,
                                                       tmp_path: Path) -> None:
    exported = tmp_path / "static.json"
    code, out, _ = run_cli(capsys, "export", str(run_dir), str(exported))
    assert code == 0 and "exported 2 list(s)" in out
    new_run = tmp_path / "runs" / "static-control"  # does not exist yet: created as a run directory
    code, out, _ = run_cli(capsys, "import", str(new_run), str(exported))
    assert code == 0 and "imported 2 list(s) (frozen)" in out
    assert (new_run / "milestones.sqlite").is_file()

    _, before, _ = run_cli(capsys, "show", str(run_dir), "--json")
    _, after, _ = run_cli(capsys, "show", str(new_run), "--json")
    strip = [{k: v for k, v in item.items() if k not in ("version", "frozen")} for item in json.loads(before)["lists"]]
    assert [{k: v for k, v in item.items() if k not in ("version", "frozen")}
            for item in json.loads(after)["lists"]] == strip
    assert all(item["frozen"] for item in json.loads(after)["lists"])


def test_import_of_a_hand_written_file_can_stay_adaptive(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    source = tmp_path / "hand.json"
    source.write_text(json.dumps({"miniwob/choose-list": ["selected <value>", "clicked the 'Submit' button"]}))
    bank_file = tmp_path / "bank.sqlite"
    code, out, _ = run_cli(capsys, "import", str(bank_file), str(source), "--no-freeze")
    assert code == 0 and "(adaptive)" in out
    with MilestoneBank(bank_file) as bank:
        item = bank.get("miniwob/choose-list")
        assert item is not None and not item.frozen and item.provenance.run == "import:hand.json"


def test_errors_are_named_with_exit_code_2(capsys: pytest.CaptureFixture[str], run_dir: Path,
                                           tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "show", str(tmp_path / "nowhere"))
    assert code == 2 and "no milestone bank at" in err
    assert not (tmp_path / "nowhere").exists()  # reading never creates a bank
    code, _, err = run_cli(capsys, "history", str(run_dir), "miniwob/unknown")
    assert code == 2 and "no milestones for key 'miniwob/unknown'" in err and "miniwob/login-user" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = run_cli(capsys, "import", str(run_dir), str(bad))
    assert code == 2 and "not a JSON milestone file" in err


# -- the command never writes into a file it did not create ---------------------------------


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_show_and_history_leave_the_bank_byte_for_byte(capsys: pytest.CaptureFixture[str], run_dir: Path) -> None:
    before = tree(run_dir)
    assert run_cli(capsys, "show", str(run_dir))[0] == 0
    assert run_cli(capsys, "history", str(run_dir), "miniwob/login-user", "--json")[0] == 0
    assert tree(run_dir) == before  # read-only: no -wal, no -shm, no checkpoint


def test_export_replaces_a_json_file_only_with_force(capsys: pytest.CaptureFixture[str], run_dir: Path,
                                                     tmp_path: Path) -> None:
    target = tmp_path / "ms.json"
    target.write_text("my notes")
    code, _, err = run_cli(capsys, "export", str(run_dir), str(target))
    assert code == 2 and "exists" in err and "--force" in err and target.read_text() == "my notes"
    code, _, _ = run_cli(capsys, "export", str(run_dir), str(target), "--force")
    assert code == 0 and json.loads(target.read_text())["format"] == "admire-milestones"
    bank_bytes = (run_dir / "milestones.sqlite").read_bytes()
    code, _, err = run_cli(capsys, "export", str(run_dir), str(run_dir / "milestones.sqlite"), "--force")
    assert code == 2 and "the milestone bank itself" in err
    assert (run_dir / "milestones.sqlite").read_bytes() == bank_bytes


def insert_raw_version(bank_file: Path, created_at: object, milestones: str = '["x"]') -> None:
    """A row no check lets in any more, as a bank written by an older version may hold."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(bank_file)) as db, db:
        db.execute("INSERT INTO versions (key, version, milestones, run, epoch, trajectory_id, generator, "
                   "created_at, frozen) VALUES ('miniwob/login-user', "
                   "(SELECT MAX(version) + 1 FROM versions WHERE key = 'miniwob/login-user'), ?, 'old', 0, "
                   "NULL, 'manual', ?, 1)", (milestones, created_at))


@pytest.mark.parametrize("created_at", [1e300, -1e300, 1e30, "garbage"])
def test_history_shows_a_bank_with_bad_stored_values(capsys: pytest.CaptureFixture[str], run_dir: Path,
                                                     created_at: object) -> None:
    insert_raw_version(run_dir / "milestones.sqlite", created_at, milestones="{broken")
    code, table, err = run_cli(capsys, "history", str(run_dir), "miniwob/login-user")
    assert code == 0 and "Traceback" not in err and "3 version(s)" in table and "? (" in table
    from datetime import datetime

    assert datetime.fromtimestamp(1_700_000_000).strftime("%Y-%m-%d") in table  # good versions keep their time
    code, out, _ = run_cli(capsys, "history", str(run_dir), "miniwob/login-user", "--json")
    assert code == 0
    versions = json.loads(out)["versions"]  # strict JSON: NaN would not parse in most readers
    assert versions[-1]["milestones"] == ["{broken"]
    code, _, _ = run_cli(capsys, "show", str(run_dir), "--json")
    assert code == 0


def test_a_failed_import_into_a_new_run_creates_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "in.json"
    source.write_text(json.dumps({"format": "admire-milestones", "lists": {"k": {"milestones": ["a"], "provenance": {
        "run": "r", "epoch": 0, "trajectory_id": None, "generator": "g", "created_at": float("nan")}}}}))
    code, _, err = run_cli(capsys, "import", str(tmp_path / "runs" / "new"), str(source))
    assert code == 2 and "created_at" in err and "'k'" in err
    assert not (tmp_path / "runs").exists()


HOSTILE = ["typed [/] into [bold]Name", "clicked [link=http://evil.example]here[/link]",
           "typed \x1b[31mred\x1b[0m", "opened \x1b]8;;http://evil.example\x07link\x1b]8;;\x07", "x\u202ey"]


@pytest.mark.parametrize("action", ["show", "history"])
def test_phrases_are_shown_literally_and_escapes_never_reach_the_terminal(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, action: str) -> None:
    # Phrases come from what an agent typed: no markup is read from them and no control character is sent.
    run = tmp_path / "runs" / "hostile"
    with MilestoneBank(run / "milestones.sqlite") as bank:
        bank.put("miniwob/[red]key", HOSTILE, Provenance(run="[/]", epoch=0, trajectory_id="\x1b[2J",
                                                        generator="heuristic", created_at=1.0))
    args = ["show", str(run)] if action == "show" else ["history", str(run), "miniwob/[red]key"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and err == ""
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    for shown in ("typed [/] into [bold]Name", "[link=http://evil.example]here[/link]", "typed \\x1b[31mred\\x1b[0m",
                  "\\x1b]8;;http://evil.example\\x07link", "x\\u202ey", "from \\x1b[2J"):
        assert shown in out
    if action == "show":
        assert "miniwob/[red]key" in out and "run [/]" in out
