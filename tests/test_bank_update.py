"""``update_bank``: the bank update from one batch (METHOD §2, Adaptive update, Order within a batch)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from admire.actions import describe, format_output, validate_action
from admire.milestones.bank import MilestoneBank, Provenance
from admire.milestones.generator import HeuristicGenerator
from admire.milestones.update import update_bank
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement

USERNAME = UIElement(hint_text="Username", class_name="input_text", is_editable=True)
PASSWORD = UIElement(hint_text="Password", class_name="input_password", is_editable=True)
LOGIN = UIElement(text="Login", class_name="button", is_clickable=True)
OTHER = UIElement(text="Remember me", class_name="a", is_clickable=True)


def goal(username: str, password: str) -> str:
    return f'Enter the username "{username}" and the password "{password}" into the text fields and press login.'


def act(index: int, action: dict[str, object], element: UIElement) -> Step:
    valid = validate_action(action)
    observation = Observation(goal="g", ui_elements=(element,), step=index)
    return Step(index=index, observation=observation, raw_output=format_output(valid), action=valid,
                grounded_description=describe(valid, observation))


def login(tid: str, username: str = "karrie", password: str = "9Ht", *, detour: int = 0,
          outcome: float = 1.0, termination: Termination = Termination.SUCCESS,
          task: str = "miniwob/login-user") -> Trajectory:
    """A login episode; ``detour`` extra clicks on another link make it longer."""
    steps = [act(0, {"action_type": "input_text", "text": username, "index": 0}, USERNAME)]
    steps += [act(0, {"action_type": "click", "index": 0}, OTHER) for _ in range(detour)]
    steps += [act(0, {"action_type": "input_text", "text": password, "index": 0}, PASSWORD),
              act(0, {"action_type": "click", "index": 0}, LOGIN)]
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
    return Trajectory(id=tid, task=Task(name=task), goal=goal(username, password), steps=tuple(steps),
                      outcome=outcome, termination=termination)


SLOTTED_LOGIN = ("typed \"<value>\" into the 'Username' field", "typed \"<value>\" into the 'Password' field",
                 "clicked the 'Login' button")


class CountingGenerator(HeuristicGenerator):
    """The heuristic Φ, counting its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def initialise(self, trajectory: Trajectory) -> list[str]:
        self.calls.append(trajectory.id)
        return super().initialise(trajectory)


@pytest.fixture
def bank(tmp_path: Path):
    with MilestoneBank(tmp_path / "milestones.sqlite") as opened:
        yield opened


def test_the_first_success_initialises_the_key_from_the_shortest_one_slotted(bank: MilestoneBank) -> None:
    batch = [login("long", detour=2), login("failed", outcome=0.0, termination=Termination.MAX_STEPS),
             login("short", "vina", "US"), login("short-too", "nathalie", "fzzq")]
    [change] = update_bank(bank, batch, HeuristicGenerator(), run="run-a", epoch=3)
    assert change.kind == "init" and change.changed and change.before is None
    assert change.trajectory_id == "short"  # the first of the shortest, in batch order
    stored = bank.get("miniwob/login-user")
    assert stored == change.after
    assert stored.milestones == SLOTTED_LOGIN  # type: ignore[union-attr]
    assert stored.provenance.run == "run-a" and stored.provenance.epoch == 3  # type: ignore[union-attr]
    assert stored.provenance.trajectory_id == "short" and stored.provenance.generator == "heuristic"  # type: ignore[union-attr]


def test_env_errors_and_failures_never_write(bank: MilestoneBank) -> None:
    crashed = login("crashed", outcome=1.0, termination=Termination.ENV_ERROR)
    failed = login("failed", outcome=0.0, termination=Termination.AGENT_STOP)
    assert update_bank(bank, [crashed, failed], HeuristicGenerator()) == []
    assert bank.version == 0


def test_at_most_one_write_per_key_per_batch_and_one_per_key(bank: MilestoneBank) -> None:
    batch = [login("a1"), login("a2"), login("b1", task="miniwob/login-user-popup"), login("a3")]
    changes = update_bank(bank, batch, HeuristicGenerator())
    assert [(c.key, c.kind) for c in changes] == [("miniwob/login-user", "init"),
                                                  ("miniwob/login-user-popup", "init")]
    assert bank.version == 2


def test_a_later_shorter_success_updates_and_an_equal_one_keeps(bank: MilestoneBank) -> None:
    update_bank(bank, [login("first", detour=1)], HeuristicGenerator(), epoch=0)
    assert len(bank.get("miniwob/login-user").milestones) == 4  # type: ignore[union-attr]
    [same] = update_bank(bank, [login("same", "vina", "US", detour=1)], HeuristicGenerator(), epoch=1)
    assert same.kind == "kept" and not same.changed and bank.version == 1
    [shorter] = update_bank(bank, [login("shortcut", "nathalie", "fzzq")], HeuristicGenerator(), epoch=2)
    assert shorter.kind == "update" and shorter.before.version == 1  # type: ignore[union-attr]
    assert shorter.after.version == 2 and shorter.after.milestones == SLOTTED_LOGIN  # type: ignore[union-attr]
    assert [v.provenance.epoch for v in bank.history("miniwob/login-user")] == [0, 2]


def test_instruction_keys_are_not_slotted(bank: MilestoneBank) -> None:
    [change] = update_bank(bank, [login("a")], HeuristicGenerator(), key="instruction")
    assert change.key == "miniwob/login-user::" + goal("karrie", "9Ht")
    assert change.after.milestones[0] == "typed \"karrie\" into the 'Username' field"  # type: ignore[union-attr]


def test_a_static_bank_never_changes_and_the_generator_is_not_asked(tmp_path: Path) -> None:
    generator = CountingGenerator()
    with MilestoneBank(tmp_path / "static.sqlite", mode="static") as bank:
        [change] = update_bank(bank, [login("a")], generator)
        assert change.kind == "skipped" and "static" in change.reason
        assert bank.version == 0 and generator.calls == []


def test_a_frozen_list_is_left_alone(bank: MilestoneBank, tmp_path: Path) -> None:
    source = tmp_path / "frozen.json"
    source.write_text(json.dumps({"miniwob/login-user": ["clicked the 'Login' button"]}))
    bank.import_json(source, freeze=True)
    [change] = update_bank(bank, [login("a")], HeuristicGenerator())
    assert change.kind == "skipped" and "frozen" in change.reason
    assert bank.version == 1


class Exploding(HeuristicGenerator):
    name = "exploding"

    def initialise(self, trajectory: Trajectory) -> list[str]:
        if trajectory.task.name.endswith("popup"):
            raise RuntimeError("endpoint down")
        return super().initialise(trajectory)


def test_a_failing_generator_is_logged_and_other_keys_still_update(bank: MilestoneBank,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    batch = [login("p", task="miniwob/login-user-popup"), login("a")]
    with caplog.at_level(logging.ERROR, logger="admire.milestones.update"):
        changes = update_bank(bank, batch, Exploding())
    assert [(c.key, c.kind) for c in changes] == [("miniwob/login-user-popup", "skipped"),
                                                  ("miniwob/login-user", "init")]
    assert "endpoint down" in changes[0].reason
    assert "exploding" in caplog.text and "endpoint down" in caplog.text
    assert bank.keys() == ["miniwob/login-user"]


class Fixed(HeuristicGenerator):
    def __init__(self, phrases: Sequence[str] | None) -> None:
        super().__init__()
        self.phrases = phrases

    def initialise(self, trajectory: Trajectory) -> list[str]:
        return list(self.phrases or [])

    def update(self, current: Sequence[str], trajectory: Trajectory) -> list[str] | None:
        return None if self.phrases is None else list(self.phrases)


def test_an_empty_answer_stores_nothing_and_an_identical_one_keeps(bank: MilestoneBank) -> None:
    [empty] = update_bank(bank, [login("a")], Fixed(["  ", ""]))
    assert empty.kind == "skipped" and bank.version == 0
    bank.put("miniwob/login-user", ["clicked the 'Login' button"],
             Provenance(run="", epoch=0, trajectory_id=None, generator="manual", created_at=0.0))
    [same] = update_bank(bank, [login("b")], Fixed(["clicked  the 'Login' button"]))
    assert same.kind == "kept" and bank.version == 1
    [kept] = update_bank(bank, [login("c")], Fixed(None))
    assert kept.kind == "kept" and bank.version == 1
