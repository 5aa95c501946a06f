"""Every record of the data model survives JSON losslessly (property-tested)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from admire.types import (
    Action,
    Observation,
    RewardBreakdown,
    Screenshot,
    Step,
    Task,
    Termination,
    Trajectory,
    UIElement,
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
short_text = st.text(max_size=30)
json_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | short_text
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=8,
)
opt_text = st.none() | short_text

tasks = st.builds(
    Task,
    name=st.sampled_from(["miniwob/login-user", "android_world/ContactsAddContact", "miniwob/click-tab-2"]),
    seed=st.integers(0, 2**31),
    max_steps=st.none() | st.integers(1, 50),
    params=st.dictionaries(short_text, json_value, max_size=3),
)
bboxes = st.none() | st.tuples(finite, finite, finite, finite)
elements = st.builds(
    UIElement,
    text=opt_text, content_description=opt_text, class_name=opt_text, hint_text=opt_text,
    resource_id=opt_text, package_name=opt_text, tooltip=opt_text, bbox=bboxes,
    is_clickable=st.booleans(), is_editable=st.booleans(), is_checkable=st.booleans(),
    is_checked=st.booleans(), is_focused=st.booleans(), is_scrollable=st.booleans(),
    is_selected=st.booleans(), is_enabled=st.booleans(), is_visible=st.booleans(),
)
screenshots = st.builds(
    Screenshot, ref=short_text, width=st.integers(1, 4000), height=st.integers(1, 4000),
    png=st.none() | st.binary(max_size=64),
)
observations = st.builds(
    Observation, goal=short_text, ui_elements=st.lists(elements, max_size=4).map(tuple),
    screenshot=st.none() | screenshots, step=st.integers(0, 100),
)
actions = st.builds(
    Action,
    action_type=st.sampled_from(["click", "input_text", "scroll", "status", "open_app", "wait"]),
    index=st.none() | st.integers(0, 500), x=st.none() | finite, y=st.none() | finite, text=opt_text,
    direction=st.none() | st.sampled_from(["up", "down", "left", "right"]),
    goal_status=st.none() | st.sampled_from(["complete", "infeasible"]), app_name=opt_text,
    keycode=st.none() | st.just("KEYCODE_ENTER"), clear_text=st.none() | st.booleans(),
)
steps = st.builds(
    Step, index=st.integers(0, 100), observation=observations, raw_output=st.text(max_size=80),
    action=st.none() | actions, parse_error=opt_text, format_valid=st.booleans(), reason=opt_text,
    model_description=opt_text, grounded_description=short_text, screen_changed=st.booleans(),
    log_prob=st.none() | finite, timings=st.dictionaries(short_text, finite, max_size=3),
    info=st.dictionaries(short_text, json_value, max_size=3),
)
trajectories = st.builds(
    Trajectory, id=short_text, task=tasks, goal=short_text, steps=st.lists(steps, max_size=3).map(tuple),
    outcome=st.sampled_from([0.0, 1.0]), termination=st.sampled_from(list(Termination)),
    epoch=st.integers(0, 1000), group=st.integers(0, 1000),
    info=st.dictionaries(short_text, json_value, max_size=3),
)
breakdowns = st.builds(
    RewardBreakdown, outcome=finite, format=finite, milestone=finite, process=finite, total=finite,
    milestone_weight=finite, matched_milestone=opt_text, matched_index=st.none() | st.integers(0, 8),
    similarity=st.none() | finite, hits=st.integers(0, 8), num_milestones=st.integers(0, 8),
)


@pytest.mark.parametrize(
    "strategy", [tasks, elements, screenshots, observations, actions, steps, trajectories, breakdowns],
    ids=["Task", "UIElement", "Screenshot", "Observation", "Action", "Step", "Trajectory", "RewardBreakdown"],
)
def test_json_round_trip_is_lossless(strategy: st.SearchStrategy) -> None:
    @settings(max_examples=60, deadline=None)
    @given(strategy)
    def check(record) -> None:
        again = type(record).from_json(record.to_json())
        assert again == record
        assert again.to_json() == record.to_json()

    check()


def test_records_are_frozen() -> None:
    task = Task(name="miniwob/login-user", seed=1)
    with pytest.raises(ValidationError):
        task.seed = 2  # type: ignore[misc]


def test_unknown_keys_are_rejected_at_the_boundary() -> None:
    with pytest.raises(ValidationError):
        Task.model_validate({"name": "miniwob/x", "seed": 0, "fields": {"password": "secret"}})


def test_task_name_parts() -> None:
    task = Task(name="android_world/ContactsAddContact", seed=3)
    assert (task.backend, task.template) == ("android_world", "ContactsAddContact")


def test_screenshot_is_addressed_by_content_and_can_drop_its_bytes() -> None:
    a = Screenshot.from_png(b"\x89PNG-a", 160, 210)
    b = Screenshot.from_png(b"\x89PNG-a", 160, 210)
    c = Screenshot.from_png(b"\x89PNG-b", 160, 210)
    assert a.ref == b.ref != c.ref
    assert a.stored().png is None and a.stored().ref == a.ref


def test_an_observation_drops_its_screenshot_and_keeps_the_rest() -> None:
    shot = Screenshot.from_png(b"\x89PNG-a", 160, 210)
    seen = Observation(goal="Log in", ui_elements=(UIElement(text="Login"),), screenshot=shot, step=3)
    bare = seen.without_screenshot()
    assert bare.screenshot is None and bare == seen.model_copy(update={"screenshot": None})
    assert bare.without_screenshot() is bare  # nothing to drop: the same object


def test_element_geometry() -> None:
    element = UIElement(bbox=(10, 30, 100, 140))
    assert element.center == (20, 120)
    assert element.contains(10, 100) and not element.contains(31, 120)


def test_trajectory_flags() -> None:
    task = Task(name="miniwob/click-test", seed=0)
    ok = Trajectory(id="a", task=task, goal="g", outcome=1.0, termination=Termination.SUCCESS)
    crashed = Trajectory(id="b", task=task, goal="g", termination=Termination.ENV_ERROR)
    assert ok.success and not ok.excluded
    assert crashed.excluded and not crashed.success


def test_a_lone_surrogate_from_a_page_or_a_server_is_written_as_a_replacement_character() -> None:
    # UTF-8 cannot hold a lone surrogate: the whole trajectory failed to serialise. A pair given as two code
    # units is the character it encodes.
    observation = Observation(goal="type a\ud800b", ui_elements=(UIElement(text="x\udfffy", class_name="button"),))
    step = Step(index=0, observation=observation, raw_output="Reason: \ud83d\ude00\nAction: {}")
    trajectory = Trajectory(id="t", task=Task(name="miniwob/x", params={"k\ud800": ["v\udc00"]}), goal="a\ud800",
                            steps=(step,), outcome=0.0, termination=Termination.MAX_STEPS)
    back = Trajectory.from_json(trajectory.to_json())
    assert back.steps[0].observation.goal == "type a\ufffdb"
    assert back.steps[0].observation.ui_elements[0].text == "x\ufffdy"
    assert back.steps[0].raw_output == "Reason: \U0001f600\nAction: {}"
    assert back.task.params == {"k\ufffd": ["v\ufffd"]} and back.goal == "a\ufffd"
    assert (back.id, back.termination, back.outcome) == (trajectory.id, trajectory.termination, trajectory.outcome)
