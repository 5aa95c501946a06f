"""The milestone bank: versions, static and frozen lists, JSON export/import, and durability against a
killed writer process and two writer processes at once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections import defaultdict
from contextlib import closing
from itertools import pairwise
from pathlib import Path

import pytest

from admire.milestones.bank import (
    FrozenMilestonesError,
    MilestoneBank,
    MilestoneBankError,
    Provenance,
    milestone_key,
)
from admire.types import Task, Termination, Trajectory


def provenance(run: str = "run-a", epoch: int = 0, trajectory_id: str | None = "t0") -> Provenance:
    return Provenance(run=run, epoch=epoch, trajectory_id=trajectory_id, generator="heuristic",
                      created_at=1_700_000_000.0)


@pytest.fixture
def bank(tmp_path: Path):
    with MilestoneBank(tmp_path / "milestones.sqlite") as opened:
        yield opened


def test_put_adds_versions_and_get_returns_the_latest(bank: MilestoneBank) -> None:
    assert bank.get("miniwob/login-user") is None and bank.version == 0
    first = bank.put("miniwob/login-user", ["a", "b", "c"], provenance(epoch=1))
    second = bank.put("miniwob/login-user", ["a", "c"], provenance(epoch=2, trajectory_id="t9"))
    other = bank.put("miniwob/click-test", ["  clicked   the 'Click Me!' button "], provenance())
    assert (first.version, second.version, other.version) == (1, 2, 1)
    assert bank.get("miniwob/login-user") == second
    assert second.milestones == ("a", "c") and second.provenance.trajectory_id == "t9"
    assert other.milestones == ("clicked the 'Click Me!' button",)  # whitespace normalised
    assert [v.milestones for v in bank.history("miniwob/login-user")] == [("a", "b", "c"), ("a", "c")]
    assert bank.keys() == ["miniwob/click-test", "miniwob/login-user"]
    assert bank.version == 3


def test_versions_survive_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "bank.sqlite"
    with MilestoneBank(path) as bank:
        bank.put("k", ["one", "two"], provenance())
        bank.put("k", ["two"], provenance(epoch=3))
    with MilestoneBank(path) as reopened:
        assert [(v.version, v.milestones, v.provenance.epoch) for v in reopened.history("k")] == [
            (1, ("one", "two"), 0), (2, ("two",), 3)]
        assert reopened.version == 2


def test_an_in_memory_bank_works() -> None:
    with MilestoneBank(":memory:") as bank:
        bank.put("k", ["x"], provenance())
        assert bank.get("k").milestones == ("x",)  # type: ignore[union-attr]


@pytest.mark.parametrize("milestones", [[], ["ok", ""], "a string", [3], ["x"] * 257, ["y" * 1001], ["a\ud800b"]],
                         ids=["empty", "blank", "string", "number", "too-many", "too-long", "surrogate"])
def test_bad_milestone_lists_are_refused(bank: MilestoneBank, milestones: object) -> None:
    with pytest.raises(ValueError, match="milestones for 'k'"):
        bank.put("k", milestones, provenance())  # type: ignore[arg-type]
    assert bank.version == 0


def test_a_static_bank_refuses_writes_but_accepts_an_import(tmp_path: Path) -> None:
    source = tmp_path / "static.json"
    source.write_text(json.dumps({"miniwob/login-user": ["typed <value> into the Username field"]}))
    with MilestoneBank(tmp_path / "bank.sqlite", mode="static") as bank:
        with pytest.raises(FrozenMilestonesError, match="static"):
            bank.put("miniwob/login-user", ["x"], provenance())
        [imported] = bank.import_json(source)
        assert imported.frozen and imported.provenance.generator == "manual"
        assert imported.provenance.run == "import:static.json"
        assert bank.get("miniwob/login-user") == imported


def test_a_frozen_list_refuses_training_writes_and_an_unfrozen_import_allows_them(bank: MilestoneBank,
                                                                                  tmp_path: Path) -> None:
    source = tmp_path / "m.json"
    source.write_text(json.dumps({"k": ["a", "b"]}))
    bank.import_json(source, freeze=True)
    with pytest.raises(FrozenMilestonesError, match="frozen"):
        bank.put("k", ["a"], provenance())
    bank.import_json(source, freeze=False)
    assert bank.put("k", ["a"], provenance()).version == 3


def test_export_then_import_keeps_lists_and_provenance(bank: MilestoneBank, tmp_path: Path) -> None:
    bank.put("k1", ["a", "b"], provenance(epoch=1))
    bank.put("k1", ["b"], provenance(run="run-b", epoch=4, trajectory_id="t4"))
    bank.put("k2", ["c"], provenance(trajectory_id=None))
    exported = bank.export_json(tmp_path / "out" / "milestones.json")
    document = json.loads(exported.read_text())
    assert document["format"] == "admire-milestones" and document["bank_version"] == 3
    assert not list(exported.parent.glob(".milestones.json.*"))  # no temporary file left behind

    with MilestoneBank(tmp_path / "other.sqlite") as other:
        imported = other.import_json(exported)
        assert {item.key: item.milestones for item in imported} == {"k1": ("b",), "k2": ("c",)}
        assert other.get("k1").provenance == bank.get("k1").provenance  # type: ignore[union-attr]
        assert all(item.frozen for item in imported)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not a JSON milestone file"),
        ("[1, 2]", "is a JSON object"),
        ('{"good": ["a"], "bad": []}', "key 'bad'"),
        ('{"format": "admire-milestones", "lists": {"k": ["a"]}}', "object with 'milestones'"),
        ('{"format": "admire-milestones", "lists": {"k": {"milestones": ["a"], "provenance": {"run": 1}}}}',
         "bad provenance"),
    ],
)
def test_a_bad_milestone_file_is_named_and_changes_nothing(bank: MilestoneBank, tmp_path: Path,
                                                           content: str, message: str) -> None:
    source = tmp_path / "bad.json"
    source.write_text(content)
    with pytest.raises(ValueError, match=message):
        bank.import_json(source)
    assert bank.version == 0 and bank.keys() == []


def test_a_missing_milestone_file_is_named(bank: MilestoneBank, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no milestone file"):
        bank.import_json(tmp_path / "missing.json")


def test_coverage_is_keys_with_milestones_over_keys_seen(bank: MilestoneBank) -> None:
    bank.put("a", ["x"], provenance())
    bank.put("b", ["x"], provenance())
    assert bank.coverage(["a", "c", "d", "a"]) == pytest.approx(1 / 3)
    assert bank.coverage(["a", "b"]) == 1.0
    assert bank.coverage([]) == 0.0


def test_a_file_that_is_not_a_bank_is_named(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MilestoneBankError, match="not a usable milestone bank"):
        MilestoneBank(path)


def test_a_bank_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bank.sqlite"
    MilestoneBank(path).close()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    with pytest.raises(MilestoneBankError, match="newer admire"):
        MilestoneBank(path)


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'adaptive' or 'static'"):
        MilestoneBank(tmp_path / "b.sqlite", mode="frozen")  # type: ignore[arg-type]


def test_milestone_keys_by_task_and_by_instruction() -> None:
    task = Task(name="miniwob/login-user", seed=3)
    trajectory = Trajectory(id="t", task=task, goal='Enter  the username "karrie".',
                            termination=Termination.SUCCESS)
    assert milestone_key(trajectory) == "miniwob/login-user"
    assert milestone_key(trajectory, key="instruction") == 'miniwob/login-user::Enter the username "karrie".'
    assert milestone_key(task, "Click it", key="instruction") == "miniwob/login-user::Click it"
    assert milestone_key("android_world/ContactsAddContact") == "android_world/ContactsAddContact"
    with pytest.raises(ValueError, match="needs the instruction"):
        milestone_key(task, key="instruction")
    with pytest.raises(ValueError, match="'task', 'instruction' or 'skeleton'"):
        milestone_key(task, key="template")  # type: ignore[arg-type]


def test_skeleton_keys_are_equal_across_instances_of_one_structure() -> None:
    first = Trajectory(id="a", task=Task(name="miniwob/login-user", seed=1), termination=Termination.SUCCESS,
                       goal='Enter the username "karrie" and the password "9Ht" into the text fields and press login.')
    second = Trajectory(id="b", task=Task(name="miniwob/login-user", seed=2), termination=Termination.SUCCESS,
                        goal='Enter the username "vina" and the password "US" into the text fields and press login.')
    key = milestone_key(first, key="skeleton")
    assert key == ('miniwob/login-user::Enter the username "<v1>" and the password "<v2>" into the text fields '
                   "and press login.")
    assert milestone_key(second, key="skeleton") == key
    # The instruction key tells the two instances apart; the skeleton key is what lets one list serve both.
    assert milestone_key(first, key="instruction") != milestone_key(second, key="instruction")


def test_skeleton_keys_differ_for_different_structures_and_tasks() -> None:
    task = Task(name="miniwob/click-checkboxes")
    one = milestone_key(task, "Select qKDSf and click Submit.", key="skeleton")
    also_one = milestone_key(task, "Select 9Ht and click Submit.", key="skeleton")
    three = milestone_key(task, "Select fzzqo, NYYyS82, 91YPF and click Submit.", key="skeleton")
    other_three = milestone_key(task, "Select 0qP, wXy2, Zk and click Submit.", key="skeleton")
    nothing = milestone_key(task, "Select nothing and click Submit.", key="skeleton")
    assert one == also_one == "miniwob/click-checkboxes::Select <v1> and click Submit."
    assert three == other_three == "miniwob/click-checkboxes::Select <v1>, <v2>, <v3> and click Submit."
    assert len({one, three, nothing}) == 3
    assert nothing == "miniwob/click-checkboxes::Select nothing and click Submit."
    assert milestone_key("miniwob/click-checkboxes-transfer", "Select qKDSf and click Submit.",
                         key="skeleton") != one
    with pytest.raises(ValueError, match="needs the instruction"):
        milestone_key(task, key="skeleton")


# -- durability across processes -----------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from admire.milestones.bank import MilestoneBank, Provenance
    path, writer, count, go, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
    bank = MilestoneBank(path)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    for i in range(count):
        key = f"miniwob/task-{i % 5}"
        stored = bank.put(key, [f"{writer}:{i}", f"phrase for {key}"],
                          Provenance(run=writer, epoch=i, trajectory_id=f"{writer}-{i}", generator="test",
                                     created_at=time.time()))
        print(key, stored.version, flush=True)
        time.sleep(pause)  # a trainer does work between updates; it also lets the other writer in
    """
)


def start_writer(path: Path, writer: str, count: int, go: Path, pause: float = 0.0) -> subprocess.Popen[str]:
    """A writer process that has opened the bank and waits for ``go`` to exist."""
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(path), writer, str(count), str(go), str(pause)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    ready = process.stdout.readline()
    assert ready == "ready\n", process.stderr.read() if process.stderr else ready
    return process


def assert_consistent(bank: MilestoneBank) -> None:
    """Every stored row is whole: its content agrees with its provenance, versions count 1, 2, 3…"""
    keys = bank.keys()
    for key in keys:
        history = bank.history(key)
        assert [item.version for item in history] == list(range(1, len(history) + 1))
        for item in history:
            assert item.milestones == (f"{item.provenance.run}:{item.provenance.epoch}", f"phrase for {key}")


def test_a_writer_killed_mid_run_leaves_every_committed_version(tmp_path: Path) -> None:
    path, go = tmp_path / "bank.sqlite", tmp_path / "go"
    writer = start_writer(path, "w", 1_000_000, go)
    go.touch()
    reported: dict[str, int] = {}
    try:
        assert writer.stdout is not None
        for _ in range(120):
            line = writer.stdout.readline()
            assert line, writer.stderr.read() if writer.stderr else "the writer stopped early"
            key, version = line.split()
            reported[key] = int(version)
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    for line in writer.stdout.read().splitlines():  # committed and printed before the kill
        key, version = line.split()
        reported[key] = int(version)

    with MilestoneBank(path) as reopened:
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert_consistent(reopened)
        for key, version in reported.items():
            latest = reopened.get(key)
            assert latest is not None
            # The last reported commit is there; at most one more commit may have landed unreported.
            assert version <= latest.version <= version + 1
        # The bank is still writable after the crash.
        assert reopened.put("miniwob/task-0", ["after", "crash"], provenance()).version == (
            reopened.history("miniwob/task-0")[-1].version)


def test_two_writer_processes_at_once_lose_nothing(tmp_path: Path) -> None:
    path, go = tmp_path / "bank.sqlite", tmp_path / "go"
    count = 80
    writers = [start_writer(path, name, count, go, pause=0.002) for name in ("left", "right")]
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err

    with MilestoneBank(path) as bank:
        assert_consistent(bank)
        written = defaultdict(set)
        keys = bank.keys()
        for key in keys:
            for item in bank.history(key):
                written[item.provenance.run].add(item.provenance.epoch)
        assert written == {"left": set(range(count)), "right": set(range(count))}
        assert sum(len(bank.history(key)) for key in keys) == 2 * count
        assert bank.version == 2 * count
        with closing(sqlite3.connect(path)) as db:
            order = [row[0] for row in db.execute("SELECT run FROM versions ORDER BY seq")]
        switches = sum(a != b for a, b in pairwise(order))
        assert switches > 1, "the two writers did not overlap, so this test did not test concurrency"


def test_rollback_forgets_later_writes_and_keeps_earlier_ones(tmp_path) -> None:
    from admire.milestones.bank import MilestoneBank, Provenance

    bank = MilestoneBank(tmp_path / "bank.sqlite")
    prov = Provenance(run="r", epoch=0, trajectory_id=None, generator="heuristic", created_at=0.0)
    bank.put("miniwob/a", ["one", "two"], prov)
    checkpoint = bank.version
    bank.put("miniwob/a", ["one"], prov)
    bank.put("miniwob/b", ["x", "y"], prov)
    assert bank.rollback(checkpoint) == 2
    assert bank.version == checkpoint
    assert bank.keys() == ["miniwob/a"] and bank.get("miniwob/a").milestones == ("one", "two")
    assert bank.rollback(checkpoint) == 0
    bank.close()


# -- never write into a file the bank did not create; imported numbers checked --------------------------


def foreign_sqlite(path: Path) -> bytes:
    """Another program's database (rollback journal, one table); returns its bytes."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("INSERT INTO notes (body) VALUES ('keep me')")
    return path.read_bytes()


@pytest.mark.parametrize("readonly", [True, False])
def test_a_foreign_sqlite_file_is_refused_and_left_unchanged(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "other.db"
    before = foreign_sqlite(path)
    with pytest.raises(MilestoneBankError, match=r"not an ADMIRE milestone bank .*notes"):
        MilestoneBank(path, readonly=readonly)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["notes"]


@pytest.mark.parametrize(("content", "message"), [(b"", "empty file"), (os.urandom(4096), "not an SQLite")])
def test_read_only_opening_refuses_a_file_that_is_not_sqlite(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bank.sqlite"
    path.write_bytes(content)
    with pytest.raises(MilestoneBankError, match=message):
        MilestoneBank(path, readonly=True)
    assert path.read_bytes() == content and sorted(p.name for p in tmp_path.iterdir()) == ["bank.sqlite"]


def test_a_read_only_bank_reads_without_side_files_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "bank.sqlite"
    with MilestoneBank(path) as bank:
        bank.put("k", ["a"], provenance())
    before = path.read_bytes()
    with MilestoneBank(path, readonly=True) as reader:
        assert reader.get("k").milestones == ("a",) and reader.version == 1  # type: ignore[union-attr]
        with pytest.raises(MilestoneBankError, match="read-only"):
            reader.put("k", ["b"], provenance())
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["bank.sqlite"]
    with pytest.raises(MilestoneBankError, match="no milestone bank"):
        MilestoneBank(tmp_path / "missing.sqlite", readonly=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_a_read_only_bank_sees_a_writer_s_uncheckpointed_versions(tmp_path: Path) -> None:
    """A run writing its bank keeps a -wal file: the reader must read through it, not around it."""
    path = tmp_path / "bank.sqlite"
    with MilestoneBank(path) as writer:
        writer.put("k", ["a"], provenance())
        assert Path(f"{path}-wal").exists()
        with MilestoneBank(path, readonly=True) as reader:
            assert reader.version == 1 and reader.keys() == ["k"]


def exported(tmp_path: Path, provenance_fields: dict[str, object], key: str = "k") -> Path:
    good = {"run": "r", "epoch": 1, "trajectory_id": None, "generator": "heuristic", "created_at": 1.7e9}
    path = tmp_path / "in.json"
    document = {"format": "admire-milestones", "lists": {
        "good": {"milestones": ["a"], "provenance": good},
        key: {"milestones": ["b"], "provenance": {**good, **provenance_fields}}}}
    path.write_text(json.dumps(document))  # json.dumps writes NaN and Infinity, as Python's json reads them
    return path


@pytest.mark.parametrize(
    ("field", "value"),
    [("created_at", float("nan")), ("created_at", float("inf")), ("created_at", -float("inf")),
     ("created_at", 1e30), ("created_at", 1e300), ("created_at", -1.0), ("created_at", "2024-01-01"),
     ("created_at", True), ("created_at", None), ("epoch", 1e300), ("epoch", -1), ("epoch", 1.5),
     ("epoch", "3"), ("epoch", 2**70), ("run", 7), ("generator", ["x"]), ("trajectory_id", 5)],
)
def test_imported_numbers_and_fields_are_checked_and_nothing_is_written(bank: MilestoneBank, tmp_path: Path,
                                                                        field: str, value: object) -> None:
    bank.put("k", ["before"], provenance())
    with pytest.raises(ValueError, match=rf"key 'k'.*{field}"):
        bank.import_json(exported(tmp_path, {field: value}))
    assert bank.version == 1 and bank.keys() == ["k"]  # not even the good list went in


def test_a_sane_created_at_range_is_accepted(bank: MilestoneBank, tmp_path: Path) -> None:
    for created_at in (0, 1.0, 1_700_000_000, 253_402_300_799.0):
        bank.import_json(exported(tmp_path, {"created_at": created_at}))
    assert bank.get("k").provenance.created_at == 253_402_300_799.0  # type: ignore[union-attr]


def test_put_refuses_a_provenance_no_reader_could_show(bank: MilestoneBank) -> None:
    bad = Provenance(run="r", epoch=0, trajectory_id=None, generator="g", created_at=float("nan"))
    with pytest.raises(ValueError, match="created_at"):
        bank.put("k", ["a"], bad)
    assert bank.version == 0


def test_an_import_that_fails_half_way_leaves_the_bank_as_it_was(bank: MilestoneBank, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """All lists go in one transaction: a failure at the second insert rolls back the first."""
    import admire.milestones.bank as bank_module

    bank.put("k1", ["old"], provenance())
    source = tmp_path / "in.json"
    source.write_text(json.dumps({"k1": ["new"], "k2": ["x"], "k3": ["y"]}))
    real_insert = bank_module._insert
    calls = []

    def failing_insert(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise sqlite3.OperationalError("disk I/O error")
        return real_insert(*args, **kwargs)

    monkeypatch.setattr(bank_module, "_insert", failing_insert)
    with pytest.raises(sqlite3.OperationalError):
        bank.import_json(source)
    assert calls == ["k1", "k2"]
    assert bank.version == 1 and bank.get("k1").milestones == ("old",) and bank.keys() == ["k1"]  # type: ignore[union-attr]


def test_stored_values_no_check_would_allow_are_read_not_fatal(tmp_path: Path) -> None:
    """A bank written by an older version (or edited by hand) may hold 1e300, NaN or broken JSON: readers cope."""
    path = tmp_path / "bank.sqlite"
    with MilestoneBank(path) as bank:
        bank.put("k", ["a"], provenance())
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO versions (key, version, milestones, run, epoch, trajectory_id, generator, "
                   "created_at, frozen) VALUES ('k', 2, 'not json', 'r', 99999999999999999999, NULL, 'g', 1e300, 1)")
    with MilestoneBank(path, readonly=True) as reader:
        _, second = reader.history("k")
    assert second.provenance.created_at == 1e300 and second.milestones == ("not json",) and second.frozen


def test_export_never_overwrites_without_being_asked_and_never_the_bank(tmp_path: Path) -> None:
    path = tmp_path / "bank.sqlite"
    with MilestoneBank(path) as bank:
        bank.put("k", ["a"], provenance())
    before = path.read_bytes()
    with MilestoneBank(path, readonly=True) as bank:
        for target in (path, Path(f"{path}-wal"), tmp_path / "." / "bank.sqlite"):
            with pytest.raises(MilestoneBankError, match="the milestone bank itself"):
                bank.export_json(target, overwrite=True)
        other = tmp_path / "ms.json"
        other.write_text("mine")
        with pytest.raises(FileExistsError):
            bank.export_json(other)
        assert other.read_text() == "mine"
        bank.export_json(other, overwrite=True)
        assert json.loads(other.read_text())["lists"]["k"]["milestones"] == ["a"]
    assert path.read_bytes() == before


def test_a_milestone_file_of_too_many_keys_is_refused_before_any_is_checked(tmp_path: Path) -> None:
    import json

    from admire.milestones.bank import MAX_KEYS, read_milestone_file

    path = tmp_path / "many.json"
    path.write_text(json.dumps({f"k{i}": ["a"] for i in range(MAX_KEYS + 1)}))
    with pytest.raises(ValueError, match=f"holds {MAX_KEYS + 1} keys; a milestone file may hold at most {MAX_KEYS}"):
        read_milestone_file(path)


def test_a_fifo_is_not_read_as_a_milestone_file(tmp_path: Path) -> None:
    import os

    from admire.milestones.bank import read_milestone_file

    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(ValueError, match="is not a regular file"):
        read_milestone_file(tmp_path / "pipe.json")
