"""The viewer's reading of a run: index, filters, rewards, milestone lists in force, hit rates, aggregates."""

from __future__ import annotations

import json
import os
import time

import pytest

from admire.milestones.bank import MilestoneList, Provenance
from admire.types import RewardBreakdown
from admire.viz.data import RunData, TrajectoryFilter, hit_phrases, lists_in_force
from admire.viz.index import index_file
from tests.support.viz_helpers import LOGIN_V1, LOGIN_V2, RUN_NAME, make_run


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path)


def test_index_lists_every_trajectory_with_its_fields(run):
    data = RunData(run.path)
    rows = data.rows()
    assert len(rows) == 3 * 3 + 2
    first = data.rows(TrajectoryFilter(kind="train", epoch=1))
    assert [(r.id, r.task, r.success, r.termination, r.num_steps) for r in first] == [
        ("lg-e1-g0", "miniwob/login-user", True, "success", 2),
        ("lg-e1-g1", "miniwob/login-user", False, "max_steps", 2),
        ("ck-e1-g2", "miniwob/click-test", False, "agent_stop", 1),
    ]
    assert data.kinds() == ["train", "eval"]
    assert data.epochs("eval") == [0, 3]


def test_a_trajectory_is_read_from_its_own_line(run):
    data = RunData(run.path)
    row = data.row("train-0002-1")
    trajectory = data.trajectory(row)
    assert trajectory == run.read_trajectories("train", 2)[1]


def test_unknown_or_malformed_addresses_are_key_errors(run):
    data = RunData(run.path)
    for address in ("train-0009-0", "train-0001-7", "../../etc", "train-1", ""):
        with pytest.raises(KeyError):
            data.row(address)


def test_filters_select_by_task_outcome_epoch_and_termination(run):
    data = RunData(run.path)
    assert {r.id for r in data.rows(TrajectoryFilter(task="miniwob/click-test"))} == {"ck-e0-g2", "ck-e1-g2",
                                                                                        "ck-e2-g2"}
    assert all(r.success for r in data.rows(TrajectoryFilter(outcome="success")))
    assert {r.id for r in data.rows(TrajectoryFilter(outcome="failure", kind="train", epoch=0))} == {"lg-e0-g1"}
    assert {r.id for r in data.rows(TrajectoryFilter(termination="agent_stop"))} == {"ck-e1-g2"}


def test_filter_query_is_parsed_and_bad_values_are_named():
    where = TrajectoryFilter.from_query({"kind": "train", "epoch": "3", "outcome": "success", "task": ""})
    assert where == TrajectoryFilter(kind="train", epoch=3, outcome="success")
    assert TrajectoryFilter.from_query(where.as_query()) == where
    for query, word in (({"epoch": "x"}, "epoch"), ({"epoch": "-1"}, "epoch"), ({"outcome": "win"}, "outcome"),
                        ({"termination": "boom"}, "termination"), ({"kind": "../x"}, "kind")):
        with pytest.raises(ValueError, match=word):
            TrajectoryFilter.from_query(query)


def test_index_skips_a_torn_last_line_and_keeps_offsets(run, tmp_path):
    path = run.trajectory_file("train", 0)
    text = path.read_text(encoding="utf-8")
    torn = tmp_path / "train_epoch_0000.jsonl"
    torn.write_text(text + text.splitlines()[0][:50], encoding="utf-8")
    rows = index_file(torn, "train", 0)
    assert len(rows) == 3
    with torn.open("rb") as handle:
        handle.seek(rows[2].offset)
        assert json.loads(handle.read(rows[2].length))["id"] == "ck-e0-g2"


def test_index_picks_up_a_rewritten_file(run):
    data = RunData(run.path)
    assert len(data.rows(TrajectoryFilter(kind="train", epoch=0))) == 3
    trajectories = run.read_trajectories("train", 0)[:1]
    time.sleep(0.01)
    run.write_trajectories("train", 0, trajectories)
    assert [r.id for r in data.rows(TrajectoryFilter(kind="train", epoch=0))] == ["lg-e0-g0"]


def test_rewards_are_read_per_trajectory_and_must_cover_every_step(run):
    data = RunData(run.path)
    rewards = data.rewards_for(data.row("train-0000-0"))
    assert [r.matched_milestone for r in rewards] == list(LOGIN_V1)
    assert data.rewards_for(data.row("eval-0000-0")) is None  # evaluations are not scored here
    assert data.unscored_files() == [("eval", 0), ("eval", 3)]


def test_lists_in_force_follow_the_trainer_order():
    def version(n: int, epoch: int, run: str = RUN_NAME) -> MilestoneList:
        return MilestoneList("k", n, (f"v{n}",), Provenance(run, epoch, None, "heuristic", 0.0), False)

    history = {"k": [version(1, 0), version(2, 2)]}
    assert lists_in_force(history, -1, RUN_NAME) == {}
    assert lists_in_force(history, 0, RUN_NAME)["k"].version == 1
    assert lists_in_force(history, 1, RUN_NAME)["k"].version == 1
    assert lists_in_force(history, 2, RUN_NAME)["k"].version == 2
    assert lists_in_force(history, 2, RUN_NAME, update_before_reward=False)["k"].version == 1
    imported = {"k": [version(1, 5, run="import:static.json")]}
    assert lists_in_force(imported, 0, RUN_NAME)["k"].version == 1


def test_hit_phrases_count_matched_text_from_the_list():
    rewards = [RewardBreakdown(matched_milestone="a", matched_index=0, num_milestones=2),
               RewardBreakdown(), RewardBreakdown(matched_milestone="z", matched_index=1, num_milestones=2)]
    assert hit_phrases(rewards, ("a", "b")) == {"a"}


def test_hit_table_per_milestone_and_epoch(run):
    table = RunData(run.path).hit_table("miniwob/login-user")
    assert table.epochs == [0, 1, 2]
    assert table.trajectories == {0: 2, 1: 2, 2: 2}
    rows = {row.phrase: row for row in table.rows}
    assert [row.phrase for row in table.rows] == [LOGIN_V2[0], LOGIN_V1[0]]  # current list first
    typed, clicked = rows[LOGIN_V1[0]], rows[LOGIN_V2[0]]
    assert typed.rates == {0: 1.0, 1: 1.0, 2: None} and not typed.current
    assert clicked.rates == {0: 0.5, 1: 0.5, 2: 1.0} and clicked.current
    assert clicked.overall == pytest.approx(4 / 6)


def test_task_table_and_curves(run):
    data = RunData(run.path)
    table = {row.task: row for row in data.task_table()}
    login = table["miniwob/login-user"]
    assert (login.train_episodes, login.train_success, login.last_train_success) == (6, 0.5, 0.5)
    assert (login.eval_first, login.eval_last) == (0.0, 1.0)
    assert table["miniwob/click-test"].train_success == pytest.approx(2 / 3)
    curves = data.curves()
    success = {s.name: s.points for s in curves["success rate"]}
    assert success["held-out (greedy)"] == [(1.0, 0.5)]
    assert len(success["train"]) == 3


def test_run_settings_come_from_the_config(run):
    data = RunData(run.path)
    assert (data.threshold, data.key_kind, data.update_before_reward, data.name) == (0.75, "task", True, RUN_NAME)


def test_not_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        RunData(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not an admire run"):
        RunData(tmp_path / "empty")


def test_a_run_without_bank_or_metrics_still_reads(run):
    run.bank.unlink()
    run.metrics.unlink()
    data = RunData(run.path)
    assert data.milestone_history() == {}
    assert data.curves()["success rate"] == []
    assert not run.bank.exists()  # reading never creates a bank


def test_reward_files_are_never_written_through_a_link_that_leads_outside_the_run(tmp_path) -> None:
    from admire.runs import RunDir

    run = RunDir(tmp_path / "runs" / "r").create()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run.trajectories.mkdir(parents=True, exist_ok=True)
    (run.trajectories / "rewards").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match="leads outside the run"):
        run.write_rewards("train", 0, {}, source="test")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_index_refuses_a_file_that_is_not_regular_without_blocking(tmp_path, kind):
    from admire.fileio import UnreadableFile

    path = tmp_path / "train_epoch_0000.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(UnreadableFile, match="not a regular file"):
        index_file(path, "train", 0)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("name", "attribute", "absent"),
                         [("config.yaml", "config", {}), ("summary.json", "summary", None),
                          ("metrics.jsonl", "metrics", [])])
def test_run_files_that_are_fifos_read_as_absent_without_blocking(run, name, attribute, absent):
    (run.path / name).unlink()
    os.mkfifo(run.path / name)
    data = RunData(run.path)
    assert getattr(data, attribute) == absent
    assert data.task_table()


def test_a_rewards_file_keeps_its_good_lines_past_damaged_ones(run):
    path = run.rewards_file("train", 1)
    with path.open("ab") as handle:
        handle.write(b'junk\n{"id": 1}\n[]\n\xff\xfe\n{"id": "x", "rewards": "no"}\n{"id": "y", "rewards": [')
    data = RunData(run.path)
    assert sorted(data.rewards("train", 1)) == ["ck-e1-g2", "lg-e1-g0", "lg-e1-g1"]


def test_a_rewards_path_that_is_a_folder_reads_as_unscored(run):
    path = run.rewards_file("train", 1)
    path.unlink()
    path.mkdir()
    assert RunData(run.path).rewards("train", 1) == {}


def test_a_screenshot_larger_than_a_screenshot_may_be_is_left_out(run, monkeypatch):
    import admire.viz.data as viz_data

    monkeypatch.setattr(viz_data, "MAX_SCREENSHOT_BYTES", 10)
    ref = run.read_trajectories("train", 0)[0].steps[0].observation.screenshot.ref
    assert RunData(run.path).screenshot_data_uri(ref) is None


def test_scoring_reads_past_unreadable_lines_and_counts_them(run):
    with run.trajectory_file("eval", 0).open("ab") as handle:
        handle.write(b'\xff\x00 binary\n{"task": {"name": "x"}, "id": "b"}\n{"id": "torn", "ta')
    trajectories, skipped = RunData(run.path).readable_trajectories("eval", 0)
    assert [t.id for t in trajectories] == ["ev0-e0-g0"] and skipped == 3
