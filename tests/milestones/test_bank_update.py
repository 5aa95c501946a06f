"""``update_bank``: the bank update from one batch (method.md §2, Adaptive update, Order within a batch)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from admire.actions import describe, format_output, validate_action
from admire.milestones.bank import MilestoneBank, Provenance
from admire.milestones.generator import HeuristicGenerator
from admire.milestones.slots import apply_slots, extract_slot_values
from admire.milestones.update import slot_phrases, update_bank
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement

USERNAME = UIElement(hint_text="Username", class_name="input_text", is_editable=True)
PASSWORD = UIElement(hint_text="Password", class_name="input_password", is_editable=True)
LOGIN = UIElement(text="Login", class_name="button", is_clickable=True)
OTHER = UIElement(text="Remember me", class_name="a", is_clickable=True)
SUBMIT = UIElement(text="Submit", class_name="button", is_clickable=True)


def checkbox(label: str) -> UIElement:
    return UIElement(text=label, class_name="input_checkbox", is_checkable=True, is_checked=False)


def goal(username: str, password: str) -> str:
    return f'Enter the username "{username}" and the password "{password}" into the text fields and press login.'


def act(index: int, action: dict[str, object], element: UIElement) -> Step:
    valid = validate_action(action)
    observation = Observation(goal="g", ui_elements=(element,), step=index)
    return Step(index=index, observation=observation, raw_output=format_output(valid), action=valid,
                grounded_description=describe(valid, observation))


def login(tid: str, username: str = "karrie", password: str = "9Ht", *, detour: int = 0,
          outcome: float = 1.0, termination: Termination = Termination.SUCCESS,
          task: str = "miniwob/login-user", detour_to: UIElement = OTHER) -> Trajectory:
    """A login episode; ``detour`` extra clicks on another element (``detour_to``) make it longer."""
    steps = [act(0, {"action_type": "input_text", "text": username, "index": 0}, USERNAME)]
    steps += [act(0, {"action_type": "click", "index": 0}, detour_to) for _ in range(detour)]
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


@pytest.mark.parametrize("rule", ["common", "shorter"])
def test_a_later_shorter_success_updates_and_an_equal_one_keeps(bank: MilestoneBank, rule: str) -> None:
    update_bank(bank, [login("first", detour=1)], HeuristicGenerator(), epoch=0, rule=rule)
    assert len(bank.get("miniwob/login-user").milestones) == 4  # type: ignore[union-attr]
    [same] = update_bank(bank, [login("same", "vina", "US", detour=1)], HeuristicGenerator(), epoch=1, rule=rule)
    assert same.kind == "kept" and not same.changed and bank.version == 1
    [shorter] = update_bank(bank, [login("shortcut", "nathalie", "fzzq")], HeuristicGenerator(), epoch=2,
                            rule=rule)
    assert shorter.kind == "update" and shorter.before.version == 1  # type: ignore[union-attr]
    assert shorter.after.version == 2 and shorter.after.milestones == SLOTTED_LOGIN  # type: ignore[union-attr]
    assert [v.provenance.epoch for v in bank.history("miniwob/login-user")] == [0, 2]


def test_skeleton_keys_slot_positionally(bank: MilestoneBank) -> None:
    [change] = update_bank(bank, [login("a")], HeuristicGenerator(), key="skeleton")
    assert change.key == 'miniwob/login-user::Enter the username "<v1>" and the password "<v2>" into the text ' \
                         "fields and press login."
    assert change.after.milestones == (  # type: ignore[union-attr]
        "typed \"<v1>\" into the 'Username' field", "typed \"<v2>\" into the 'Password' field",
        "clicked the 'Login' button")


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


MANUAL = Provenance(run="", epoch=0, trajectory_id=None, generator="manual", created_at=0.0)


def test_an_empty_answer_stores_nothing_and_an_identical_one_keeps(bank: MilestoneBank) -> None:
    [empty] = update_bank(bank, [login("a")], Fixed(["  ", ""]))
    assert empty.kind == "skipped" and bank.version == 0
    bank.put("miniwob/login-user", ["clicked the 'Remember me' link", "clicked the 'Login' button"], MANUAL)
    [same] = update_bank(bank, [login("b")], Fixed(["clicked  the 'Remember me' link", "clicked the 'Login' button"]))
    assert same.kind == "kept" and bank.version == 1
    [kept] = update_bank(bank, [login("c")], Fixed(None))
    assert kept.kind == "kept" and bank.version == 1


def test_a_generator_of_the_two_argument_protocol_gets_its_raw_answer_slotted(bank: MilestoneBank) -> None:
    bank.put("miniwob/login-user", list(SLOTTED_LOGIN), MANUAL)
    raw = ["typed \"nathalie\" into the 'Username' field", "clicked the 'Login' button"]
    [change] = update_bank(bank, [login("a", "nathalie", "fzzq")], Fixed(raw))
    assert change.kind == "update"
    assert change.after.milestones == ("typed \"<value>\" into the 'Username' field",  # type: ignore[union-attr]
                                       "clicked the 'Login' button")


def test_an_unknown_update_rule_is_refused(bank: MilestoneBank) -> None:
    with pytest.raises(ValueError, match="update_rule must be one of common, shorter"):
        update_bank(bank, [login("a")], HeuristicGenerator(), rule="longest")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Slotting before collapsing merged distinct checkpoints (docs/decisions.md#d2)
# --------------------------------------------------------------------------------------------------

BOXES_GOAL = "Select fzzqo, NYYyS82, Hwe and click Submit."


def tick(labels: Sequence[str], tid: str = "boxes", goal: str = BOXES_GOAL) -> Trajectory:
    steps = [act(i, {"action_type": "click", "index": 0}, checkbox(label)) for i, label in enumerate(labels)]
    steps.append(act(len(labels), {"action_type": "click", "index": 0}, SUBMIT))
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
    return Trajectory(id=tid, task=Task(name="miniwob/click-checkboxes"), goal=goal, steps=tuple(steps),
                      outcome=1.0, termination=Termination.SUCCESS)


def test_slotting_before_collapsing_would_merge_three_checkboxes_into_one() -> None:
    # The first implementation's order, kept here as the reproduction: slot, then collapse.
    raw = HeuristicGenerator().initialise(tick(["fzzqo", "NYYyS82", "Hwe"]))
    values = extract_slot_values(BOXES_GOAL)
    old = [apply_slots(p, values) for p in raw]
    old = [p for i, p in enumerate(old) if i == 0 or old[i - 1] != p]
    assert old == ["checked the '<value>' checkbox", "clicked the 'Submit' button"]  # ticking one box: k/K = 1


@pytest.mark.parametrize(("key", "boxes"), [
    ("task", ["checked the '<value>' checkbox"] * 3),
    ("skeleton", ["checked the '<v1>' checkbox", "checked the '<v2>' checkbox", "checked the '<v3>' checkbox"]),
])
def test_three_checkboxes_stay_three_checkpoints(bank: MilestoneBank, key: str,
                                                                   boxes: list[str]) -> None:
    [change] = update_bank(bank, [tick(["fzzqo", "NYYyS82", "Hwe"])], HeuristicGenerator(), key=key)
    assert change.after.milestones == (*boxes, "clicked the 'Submit' button")  # type: ignore[union-attr]


def test_slot_phrases_collapses_raw_repeats_only() -> None:
    phrases = ["checked the 'fzzqo' checkbox", "checked the 'fzzqo' checkbox", "checked the 'Hwe' checkbox", " "]
    assert slot_phrases(phrases, BOXES_GOAL, "single") == ["checked the '<value>' checkbox"] * 2
    assert slot_phrases(phrases, BOXES_GOAL, "positional") == ["checked the '<v1>' checkbox",
                                                               "checked the '<v3>' checkbox"]
    assert slot_phrases(phrases, BOXES_GOAL, "none") == ["checked the 'fzzqo' checkbox", "checked the 'Hwe' checkbox"]


# --------------------------------------------------------------------------------------------------
# A degenerate first success was permanent (docs/decisions.md#d3)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["common", "shorter"])
def test_a_degenerate_success_stores_nothing(bank: MilestoneBank, rule: str) -> None:
    nothing = tick([], tid="nothing", goal="Select nothing and click Submit.")
    [change] = update_bank(bank, [nothing], HeuristicGenerator(), key="task", rule=rule)
    assert change.kind == "skipped" and "at least 2" in change.reason
    assert bank.get("miniwob/click-checkboxes") is None
    [later] = update_bank(bank, [tick(["fzzqo", "Hwe"])], HeuristicGenerator(), key="task", rule=rule)
    assert later.kind == "init" and len(later.after.milestones) == 3  # type: ignore[union-attr]


def test_a_stored_degenerate_list_is_frozen_under_shorter_and_replaced_under_common(
        bank: MilestoneBank) -> None:
    # A K = 1 list as the first implementation stored it ("select nothing, click Submit").
    bank.put("miniwob/click-checkboxes", ["clicked the 'Submit' button"], MANUAL)
    real = tick(["fzzqo", "NYYyS82"])
    [paper] = update_bank(bank, [real], HeuristicGenerator(), rule="shorter")
    assert paper.kind == "kept" and bank.get("miniwob/click-checkboxes").milestones == (  # type: ignore[union-attr]
        "clicked the 'Submit' button",)
    [common] = update_bank(bank, [real], HeuristicGenerator(), rule="common")
    assert common.kind == "update"
    assert common.after.milestones == ("checked the '<value>' checkbox",  # type: ignore[union-attr]
                                       "checked the '<value>' checkbox", "clicked the 'Submit' button")


def test_common_updates_converge_on_what_every_success_passes_through(bank: MilestoneBank) -> None:
    # Two successes of equal length, each with its own detour: "shorter" keeps the first detour forever;
    # "common" drops both detours (slotted comparison: the values differ between instances).
    first = login("first", detour=1)  # clicks 'Remember me' after the username
    other = login("other", "vina", "US", detour=1, detour_to=SUBMIT)  # clicks 'Submit' there instead
    assert len(first.steps) == len(other.steps) == 4
    update_bank(bank, [first], HeuristicGenerator(), epoch=0)
    detoured = bank.get("miniwob/login-user").milestones  # type: ignore[union-attr]
    assert "clicked the 'Remember me' link" in detoured
    [paper] = update_bank(bank, [other], HeuristicGenerator(), epoch=1, rule="shorter")
    assert paper.kind == "kept" and bank.get("miniwob/login-user").milestones == detoured  # type: ignore[union-attr]
    [common] = update_bank(bank, [other], HeuristicGenerator(), epoch=1)
    assert common.kind == "update" and common.after.milestones == SLOTTED_LOGIN  # type: ignore[union-attr]
