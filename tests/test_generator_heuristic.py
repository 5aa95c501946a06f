"""The heuristic Φ (METHOD §2) on hand-built trajectories whose descriptions come from the real
``actions.describe``, and the generator registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from admire.actions import describe, format_output, validate_action
from admire.milestones.generator import (
    GENERATORS,
    HeuristicGenerator,
    MilestoneGenerator,
    evenly_spaced,
    make_generator,
    register_generator,
)
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement

USERNAME = UIElement(hint_text="Username", class_name="input_text", is_editable=True)
PASSWORD = UIElement(hint_text="Password", class_name="input_password", is_editable=True)
LOGIN = UIElement(text="Login", class_name="button", is_clickable=True)
SUBMIT = UIElement(text="Submit", class_name="button", is_clickable=True)


def checkbox(label: str, checked: bool) -> UIElement:
    return UIElement(text=label, class_name="input_checkbox", is_checkable=True, is_checked=checked)


def step(index: int, action: Mapping[str, Any], *elements: UIElement, changed: bool = True) -> Step:
    valid = validate_action(action)
    observation = Observation(goal="g", ui_elements=elements, step=index)
    return Step(index=index, observation=observation, raw_output=format_output(valid), action=valid,
                grounded_description=describe(valid, observation), screen_changed=changed)


def click(index: int, element: UIElement, changed: bool = True) -> Step:
    return step(index, {"action_type": "click", "index": 0}, element, changed=changed)


def typed(index: int, text: str, element: UIElement) -> Step:
    return step(index, {"action_type": "input_text", "text": text, "index": 0}, element)


def invalid(index: int) -> Step:
    return Step(index=index, observation=Observation(goal="g", step=index), raw_output="I think I will click",
                parse_error="no action", format_valid=False)


def trajectory(steps: Sequence[Step], tid: str = "t") -> Trajectory:
    steps = [s.model_copy(update={"index": i}) for i, s in enumerate(steps)]
    return Trajectory(id=tid, task=Task(name="miniwob/login-user"), goal="g", steps=tuple(steps), outcome=1.0,
                      termination=Termination.SUCCESS)


LOGIN_PHRASES = ["typed \"karrie\" into the 'Username' field", "typed \"9Ht\" into the 'Password' field",
                 "clicked the 'Login' button"]


def test_a_clean_trajectory_gives_its_grounded_descriptions_in_order() -> None:
    login = trajectory([typed(0, "karrie", USERNAME), typed(1, "9Ht", PASSWORD), click(2, LOGIN)])
    assert HeuristicGenerator().initialise(login) == LOGIN_PHRASES


def test_invalid_unchanged_status_and_wait_steps_are_dropped() -> None:
    noisy = trajectory([
        invalid(0),
        typed(1, "karrie", USERNAME),
        click(2, SUBMIT, changed=False),  # did nothing visible
        step(3, {"action_type": "wait"}),
        typed(4, "9Ht", PASSWORD),
        click(5, LOGIN),
        step(6, {"action_type": "status", "goal_status": "complete"}),
    ])
    assert HeuristicGenerator().initialise(noisy) == LOGIN_PHRASES


def test_an_answer_is_kept_although_it_does_not_change_the_screen() -> None:
    asked = trajectory([click(0, LOGIN), step(1, {"action_type": "answer", "text": "42"}, changed=False)])
    assert HeuristicGenerator().initialise(asked) == ["clicked the 'Login' button", 'answered "42"']


def test_consecutive_duplicates_collapse_but_repeats_later_stay() -> None:
    scroll = {"action_type": "scroll", "direction": "down"}
    steps = [step(0, scroll), step(1, scroll), step(2, scroll), click(3, LOGIN), step(4, scroll)]
    assert HeuristicGenerator().initialise(trajectory(steps)) == [
        "scrolled down", "clicked the 'Login' button", "scrolled down"]


def test_a_toggle_undone_later_is_removed_with_its_undo() -> None:
    steps = [
        click(0, checkbox("A", checked=False)),
        click(1, checkbox("B", checked=False)),
        click(2, checkbox("A", checked=True)),  # unchecks A again
        click(3, SUBMIT),
    ]
    assert HeuristicGenerator().initialise(trajectory(steps)) == [
        "checked the 'B' checkbox", "clicked the 'Submit' button"]


def test_undo_works_both_ways_and_a_third_toggle_stays() -> None:
    box_on, box_off = checkbox("A", checked=True), checkbox("A", checked=False)
    unchecked_then_checked = [click(0, box_on), click(1, box_off), click(2, SUBMIT)]
    assert HeuristicGenerator().initialise(trajectory(unchecked_then_checked)) == ["clicked the 'Submit' button"]
    three_toggles = [click(0, box_off), click(1, box_on), click(2, box_off)]
    assert HeuristicGenerator().initialise(trajectory(three_toggles)) == ["checked the 'A' checkbox"]


def test_removing_an_undone_toggle_can_make_neighbours_duplicates_which_collapse() -> None:
    steps = [click(0, LOGIN), click(1, checkbox("A", False)), click(2, checkbox("A", True)), click(3, LOGIN)]
    assert HeuristicGenerator().initialise(trajectory(steps)) == ["clicked the 'Login' button"]


def test_more_than_eight_phrases_are_thinned_evenly_keeping_first_and_last() -> None:
    buttons = [UIElement(text=f"B{i}", class_name="button") for i in range(12)]
    phrases = HeuristicGenerator().initialise(trajectory([click(i, b) for i, b in enumerate(buttons)]))
    assert len(phrases) == 8
    assert phrases[0] == "clicked the 'B0' button" and phrases[-1] == "clicked the 'B11' button"
    positions = [int(p.split("'B")[1].split("'")[0]) for p in phrases]
    assert positions == [0, 2, 3, 5, 6, 8, 9, 11]  # round(i * 11 / 7): gaps of 1 or 2, in order


def test_evenly_spaced_keeps_short_lists_and_handles_a_limit_of_one() -> None:
    assert evenly_spaced(["a", "b"], 8) == ["a", "b"]
    assert evenly_spaced(["a", "b", "c"], 1) == ["c"]
    assert evenly_spaced(list("abcde"), 3) == ["a", "c", "e"]


def test_fewer_than_two_phrases_are_returned_as_they_are() -> None:
    assert HeuristicGenerator().initialise(trajectory([click(0, LOGIN)])) == ["clicked the 'Login' button"]
    assert HeuristicGenerator().initialise(trajectory([invalid(0), click(1, LOGIN, changed=False)])) == []


def test_update_replaces_only_with_a_strictly_shorter_list() -> None:
    generator = HeuristicGenerator()
    shortcut = trajectory([typed(0, "karrie", USERNAME), click(1, LOGIN)])
    same_length = trajectory([typed(0, "a", USERNAME), typed(1, "b", PASSWORD), click(2, SUBMIT)])
    longer = trajectory([click(0, SUBMIT), *same_length.steps])
    assert generator.update(LOGIN_PHRASES, shortcut) == ["typed \"karrie\" into the 'Username' field",
                                                         "clicked the 'Login' button"]
    assert generator.update(LOGIN_PHRASES, same_length) is None
    assert generator.update(LOGIN_PHRASES, longer) is None
    assert generator.update(LOGIN_PHRASES, trajectory([invalid(0)])) is None  # empty never replaces


def test_max_milestones_is_an_option_and_is_checked() -> None:
    buttons = [UIElement(text=f"B{i}", class_name="button") for i in range(5)]
    generator = make_generator("heuristic", max_milestones=3)
    assert isinstance(generator, HeuristicGenerator)
    assert len(generator.initialise(trajectory([click(i, b) for i, b in enumerate(buttons)]))) == 3
    with pytest.raises(ValueError, match="max_milestones"):
        HeuristicGenerator(max_milestones=0)


def test_the_registry_builds_by_name_and_names_what_it_knows() -> None:
    assert isinstance(make_generator("heuristic"), MilestoneGenerator)
    with pytest.raises(ValueError, match=r"unknown milestone generator 'nope'.*heuristic"):
        make_generator("nope")


def test_register_generator_adds_a_generator_and_refuses_a_second_one_under_the_same_name() -> None:
    @register_generator("test-reverse")
    class Reverse(HeuristicGenerator):
        name = "test-reverse"

        def initialise(self, trajectory: Trajectory) -> list[str]:
            return list(reversed(super().initialise(trajectory)))

    try:
        built = make_generator("test-reverse")
        login = trajectory([typed(0, "karrie", USERNAME), typed(1, "9Ht", PASSWORD), click(2, LOGIN)])
        assert built.initialise(login) == list(reversed(LOGIN_PHRASES))
        with pytest.raises(ValueError, match="already registered"):
            register_generator("test-reverse")(HeuristicGenerator)
    finally:
        GENERATORS.pop("test-reverse", None)
