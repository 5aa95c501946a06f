"""The heuristic Φ (method.md §2) on hand-built trajectories whose descriptions come from the real
``actions.describe``, and the generator registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admire.actions import describe, format_output, validate_action
from admire.milestones.generator import (
    GENERATORS,
    HeuristicGenerator,
    MilestoneGenerator,
    ask_update,
    check_milestone_count,
    checkpoint_phrases,
    evenly_spaced,
    longest_common_subsequence,
    make_generator,
    merge_milestones,
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
    assert checkpoint_phrases(trajectory(unchecked_then_checked)) == ["clicked the 'Submit' button"]
    three_toggles = [click(0, box_off), click(1, box_on), click(2, box_off)]
    assert checkpoint_phrases(trajectory(three_toggles)) == ["checked the 'A' checkbox"]


def test_removing_an_undone_toggle_can_make_neighbours_duplicates_which_collapse() -> None:
    steps = [click(0, LOGIN), click(1, checkbox("A", False)), click(2, checkbox("A", True)), click(3, LOGIN),
             click(4, SUBMIT)]
    assert HeuristicGenerator().initialise(trajectory(steps)) == ["clicked the 'Login' button",
                                                                  "clicked the 'Submit' button"]


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


def test_a_success_with_fewer_than_two_checkpoints_gives_no_list() -> None:
    # docs/decisions.md#d3: "select nothing, click Submit" is one checkpoint; K = 1 would pay a failure
    # k/K = 1 for submitting at once, so the heuristic gives no list (the bank stores nothing).
    degenerate = trajectory([click(0, SUBMIT)])
    assert checkpoint_phrases(degenerate) == ["clicked the 'Submit' button"]
    assert HeuristicGenerator().initialise(degenerate) == []
    assert HeuristicGenerator().initialise(trajectory([invalid(0), click(1, LOGIN, changed=False)])) == []


def test_update_rule_shorter_replaces_only_with_a_strictly_shorter_list() -> None:
    generator = HeuristicGenerator()
    shortcut = trajectory([typed(0, "karrie", USERNAME), click(1, LOGIN)])
    same_length = trajectory([typed(0, "a", USERNAME), typed(1, "b", PASSWORD), click(2, SUBMIT)])
    longer = trajectory([click(0, SUBMIT), *same_length.steps])
    assert generator.update(LOGIN_PHRASES, shortcut, rule="shorter") == [
        "typed \"karrie\" into the 'Username' field", "clicked the 'Login' button"]
    assert generator.update(LOGIN_PHRASES, same_length, rule="shorter") is None
    assert generator.update(LOGIN_PHRASES, longer, rule="shorter") is None
    assert generator.update(LOGIN_PHRASES, trajectory([invalid(0)]), rule="shorter") is None  # empty never replaces


def test_update_rule_common_keeps_what_both_successes_pass_through() -> None:
    generator = HeuristicGenerator()
    detour = trajectory([typed(0, "karrie", USERNAME), click(1, SUBMIT), typed(2, "9Ht", PASSWORD), click(3, LOGIN)])
    current = generator.initialise(detour)
    # A later success of the same length without the detour: "shorter" keeps the detour forever,
    # "common" drops it (the new success did without it).
    same_length_other_detour = trajectory([typed(0, "karrie", USERNAME), typed(1, "9Ht", PASSWORD),
                                           click(2, checkbox("Remember", False)), click(3, LOGIN)])
    assert generator.update(current, same_length_other_detour, rule="shorter") is None
    assert generator.update(current, same_length_other_detour) == LOGIN_PHRASES  # rule="common" is the default
    # A longer success that passes through every current checkpoint changes nothing.
    assert generator.update(LOGIN_PHRASES, detour) is None


def test_merge_milestones_common_and_its_fallbacks() -> None:
    a, b, c, d, e, x = "a", "b", "c", "d", "e", "x"
    assert merge_milestones([a, b, c, d], [a, x, c, d]) == [a, c, d]  # b was a detour: the new success skipped it
    assert merge_milestones([a, b, c], [a, b, c]) is None  # nothing to change
    # Fewer than two shared checkpoints: different routes; the shorter valid list is kept.
    assert merge_milestones([a, b, c], [d, e]) == [d, e]
    assert merge_milestones([d, e], [a, b, c]) is None
    assert merge_milestones([a, b], [d, e]) is None  # a tie keeps the current list
    assert merge_milestones([a, b, c], [e]) is None  # an invalid candidate never replaces
    # A stored list with K < 2 (an older bank, a hand-written file) is replaced by any valid candidate,
    # under "common"; under "shorter" (the first implementation) it is frozen for good.
    assert merge_milestones(["clicked Submit"], [a, b, "clicked Submit"]) == [a, b, "clicked Submit"]
    assert merge_milestones(["clicked Submit"], [a, b, "clicked Submit"], rule="shorter") is None
    # Repeated phrases (one <value> placeholder for three checkboxes) keep their multiplicity.
    box = "checked the '<value>' checkbox"
    assert merge_milestones([box, box, box, "clicked Submit"], [box, box, "clicked Submit"]) == [
        box, box, "clicked Submit"]
    with pytest.raises(ValueError, match="update_rule must be one of common, shorter"):
        merge_milestones([a, b], [a, b], rule="longest")  # type: ignore[arg-type]


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    remaining = iter(long)
    return all(any(item == other for other in remaining) for item in short)


def _lcs_length(a: list[str], b: list[str]) -> int:
    if not a or not b:
        return 0
    if a[0] == b[0]:
        return 1 + _lcs_length(a[1:], b[1:])
    return max(_lcs_length(a[1:], b), _lcs_length(a, b[1:]))


@given(st.lists(st.sampled_from("abcd"), max_size=7), st.lists(st.sampled_from("abcd"), max_size=7))
def test_longest_common_subsequence_is_common_and_longest(a, b):
    common = longest_common_subsequence(a, b)
    assert _is_subsequence(common, a) and _is_subsequence(common, b)
    assert len(common) == _lcs_length(a, b)
    assert longest_common_subsequence(a, b) == common  # deterministic


@given(st.lists(st.lists(st.sampled_from("abcdef"), min_size=2, max_size=6), min_size=1, max_size=6))
def test_common_updates_only_keep_checkpoints_of_the_latest_lists_and_stay_valid(successes):
    current = successes[0]
    for candidate in successes[1:]:
        merged = merge_milestones(current, candidate)
        if merged is not None:
            assert len(merged) >= 2
            # either what both passed through, or the new (shorter) route as it was
            assert merged == candidate or (_is_subsequence(merged, current) and _is_subsequence(merged, candidate))
            current = merged
    assert len(current) >= 2


def test_check_milestone_count_is_the_rule_for_every_generator() -> None:
    assert check_milestone_count(["a", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match="expected 2 to 8 milestones, got 1"):
        check_milestone_count(["a"])
    with pytest.raises(ValueError, match="expected 2 to 8 milestones, got 9"):
        check_milestone_count(list("abcdefghi"))
    assert len(check_milestone_count(list("abcdefghi"), maximum=None)) == 9


def test_ask_update_slots_the_candidate_and_serves_generators_without_the_options() -> None:
    current = ["typed \"<value>\" into the 'Username' field", "typed \"<value>\" into the 'Password' field",
               "clicked the 'Login' button"]

    def slot(phrases):
        return [p.replace('"alice"', '"<value>"').replace('"x1"', '"<value>"') for p in phrases]

    detour = trajectory([typed(0, "alice", USERNAME), click(1, SUBMIT), typed(2, "x1", PASSWORD), click(3, LOGIN)])
    # The heuristic compares in slotted space: the new success passes through all three checkpoints.
    assert ask_update(HeuristicGenerator(), current, detour, slot=slot) is None
    # Without slotting, the raw candidate shares only the Login click with ``current``: no common list.
    assert HeuristicGenerator().update(current, detour) is None

    class OldStyle:
        name = "old-style"

        def initialise(self, trajectory: Trajectory) -> list[str]:
            return []

        def update(self, current: Sequence[str], trajectory: Trajectory) -> list[str] | None:
            return ['typed "alice" into the \'Username\' field', "clicked the 'Login' button"]

    assert ask_update(OldStyle(), current, detour, slot=slot) == [
        "typed \"<value>\" into the 'Username' field", "clicked the 'Login' button"]


def test_max_milestones_is_an_option_and_is_checked() -> None:
    buttons = [UIElement(text=f"B{i}", class_name="button") for i in range(5)]
    generator = make_generator("heuristic", max_milestones=3)
    assert isinstance(generator, HeuristicGenerator)
    assert len(generator.initialise(trajectory([click(i, b) for i, b in enumerate(buttons)]))) == 3
    with pytest.raises(ValueError, match="max_milestones"):
        HeuristicGenerator(max_milestones=0)
    with pytest.raises(ValueError, match="max_milestones must be an integer >= 2"):
        HeuristicGenerator(max_milestones=1)  # a list of one is never stored


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
