"""Validation of the JSON action schema: every action type, every rejection rule."""

from __future__ import annotations

import pytest

from admire.actions import (
    ACTION_TYPES,
    MAX_APP_NAME_CHARS,
    MAX_INDEX,
    MAX_KEYCODE_CHARS,
    MAX_TEXT_CHARS,
    ActionError,
    parse_model_output,
    validate_action,
)
from admire.types import Action

VALID: list[dict] = [
    {"action_type": "click", "index": 3},
    {"action_type": "click", "x": 10, "y": 20.5},
    {"action_type": "double_tap", "index": 0},
    {"action_type": "long_press", "x": 1, "y": 2},
    {"action_type": "scroll", "direction": "down"},
    {"action_type": "scroll", "direction": "up", "index": 4},
    {"action_type": "swipe", "direction": "left"},
    {"action_type": "input_text", "text": "karrie", "index": 2},
    {"action_type": "input_text", "text": "hello", "index": 2, "clear_text": True},
    {"action_type": "input_text", "text": "no target"},
    {"action_type": "navigate_home"},
    {"action_type": "navigate_back"},
    {"action_type": "keyboard_enter"},
    {"action_type": "open_app", "app_name": "Contacts"},
    {"action_type": "status", "goal_status": "complete"},
    {"action_type": "status", "goal_status": "infeasible"},
    {"action_type": "wait"},
    {"action_type": "answer", "text": "42 emails"},
    {"action_type": "unknown"},
]


def test_every_action_type_has_a_valid_example() -> None:
    assert {a["action_type"] for a in VALID} == set(ACTION_TYPES)


@pytest.mark.parametrize("data", VALID, ids=lambda d: d["action_type"])
def test_valid_actions_are_accepted_and_keep_their_fields(data: dict) -> None:
    action = validate_action(data)
    assert isinstance(action, Action)
    for key, value in data.items():
        assert getattr(action, key) == value


def test_validating_an_action_again_is_idempotent() -> None:
    for data in VALID:
        action = validate_action(data)
        assert validate_action(action) == action


def test_index_given_as_string_or_integral_float_becomes_int() -> None:
    assert validate_action({"action_type": "click", "index": "7"}).index == 7
    assert validate_action({"action_type": "click", "index": 7.0}).index == 7


def test_numbers_typed_as_text_are_stringified_like_android_world() -> None:
    assert validate_action({"action_type": "input_text", "text": 1234, "index": 0}).text == "1234"


def test_direction_and_status_are_normalised() -> None:
    assert validate_action({"action_type": "scroll", "direction": "DOWN"}).direction == "down"
    assert validate_action({"action_type": "status", "goal_status": "Completed"}).goal_status == "complete"


def test_keycode_with_prefix_is_accepted() -> None:
    assert validate_action({"action_type": "keyboard_enter", "keycode": "KEYCODE_ENTER"}).keycode == (
        "KEYCODE_ENTER"
    )


REJECTED: list[tuple[object, str]] = [
    (["click", 3], "not_an_object"),
    ("click", "not_an_object"),
    ({"index": 3}, "missing_action_type"),
    ({"action_type": "tap", "index": 3}, "unknown_action_type"),
    ({"action_type": 5}, "unknown_action_type"),
    ({"action_type": "click", "index": 3, "target": "x"}, "unknown_key"),
    ({"action_type": "click", "index": 3, "x": 1, "y": 2}, "index_and_coordinates"),
    ({"action_type": "click", "index": 1, "x": 1}, "index_and_coordinates"),
    ({"action_type": "click", "index": "three"}, "bad_index"),
    ({"action_type": "click", "index": 2.5}, "bad_index"),
    ({"action_type": "click", "index": -1}, "bad_index"),
    ({"action_type": "click", "index": True}, "bad_index"),
    ({"action_type": "click", "x": 5}, "bad_coordinates"),
    ({"action_type": "click", "x": "left", "y": 3}, "bad_coordinates"),
    ({"action_type": "click", "x": float("nan"), "y": 3}, "bad_coordinates"),
    ({"action_type": "click"}, "missing_target"),
    ({"action_type": "double_tap"}, "missing_target"),
    ({"action_type": "long_press"}, "missing_target"),
    ({"action_type": "scroll", "direction": "sideways"}, "bad_direction"),
    ({"action_type": "scroll", "direction": 1}, "bad_direction"),
    ({"action_type": "scroll"}, "missing_direction"),
    ({"action_type": "swipe"}, "missing_direction"),
    ({"action_type": "input_text", "index": 2}, "missing_text"),
    ({"action_type": "answer"}, "missing_text"),
    ({"action_type": "input_text", "text": ["a"], "index": 2}, "bad_text"),
    ({"action_type": "input_text", "text": True, "index": 2}, "bad_text"),
    ({"action_type": "input_text", "text": "x" * (MAX_TEXT_CHARS + 1), "index": 2}, "text_too_long"),
    ({"action_type": "answer", "text": "x" * 60_000}, "text_too_long"),
    ({"action_type": "input_text", "text": "a\ud800b", "index": 2}, "bad_text"),  # a lone surrogate: no text
    ({"action_type": "open_app", "app_name": "Set\udc00tings"}, "bad_text"),
    ({"action_type": "input_text", "text": "a\x00b", "index": 2}, "bad_text"),  # NUL: no key types it
    ({"action_type": "input_text", "text": "\x1b[31m", "index": 2}, "bad_text"),  # an escape sequence
    ({"action_type": "answer", "text": "x\x9by"}, "bad_text"),  # a C1 control
    ({"action_type": "input_text", "text": 10**5000, "index": 2}, "text_too_long"),
    ({"action_type": "open_app", "app_name": "A" * (MAX_APP_NAME_CHARS + 1)}, "app_name_too_long"),
    ({"action_type": "keyboard_enter", "keycode": "KEYCODE_" + "X" * MAX_KEYCODE_CHARS}, "bad_keycode"),
    ({"action_type": "click", "index": MAX_INDEX + 1}, "bad_index"),
    ({"action_type": "click", "index": "9" * 5000}, "bad_index"),
    ({"action_type": "click", "x": 10**400, "y": 3}, "bad_coordinates"),
    ({"action_type": "click", "x": "1" * 5000, "y": 3}, "bad_coordinates"),
    ({"action_type": "open_app"}, "missing_app_name"),
    ({"action_type": "open_app", "app_name": "  "}, "missing_app_name"),
    ({"action_type": "status", "goal_status": "maybe"}, "bad_goal_status"),
    ({"action_type": "status", "goal_status": 1}, "bad_goal_status"),
    ({"action_type": "status"}, "missing_goal_status"),
    ({"action_type": "keyboard_enter", "keycode": "ENTER"}, "bad_keycode"),
    ({"action_type": "keyboard_enter", "keycode": 66}, "bad_keycode"),
    ({"action_type": "input_text", "text": "a", "index": 0, "clear_text": "yes"}, "bad_clear_text"),
]


@pytest.mark.parametrize(("data", "rule"), REJECTED, ids=[r for _, r in REJECTED])
def test_each_rule_rejects_with_its_name(data: object, rule: str) -> None:
    with pytest.raises(ActionError) as info:
        validate_action(data)  # type: ignore[arg-type]
    assert info.value.rule == rule
    assert rule in str(info.value)
    assert info.value.message  # a human sentence, not only the rule name


def test_every_documented_rule_is_exercised() -> None:
    documented = validate_action.__doc__ or ""
    for _, rule in REJECTED:
        assert f"``{rule}``" in documented
    tested = {rule for _, rule in REJECTED}
    named = set(__import__("re").findall(r"``([a-z_]+)``", documented.split("Rules")[1]))
    assert named == tested


def test_a_text_at_the_limit_is_accepted_and_one_over_it_is_not() -> None:
    assert validate_action({"action_type": "input_text", "text": "x" * MAX_TEXT_CHARS}).text == "x" * MAX_TEXT_CHARS
    with pytest.raises(ActionError, match=f"text is {MAX_TEXT_CHARS + 1} characters long; the limit is"):
        validate_action({"action_type": "input_text", "text": "x" * (MAX_TEXT_CHARS + 1)})


def test_an_action_record_built_directly_is_held_to_the_same_limits() -> None:
    """Envs validate what they are handed, ``Action`` records included: a policy cannot skip the schema."""
    with pytest.raises(ActionError) as info:
        validate_action(Action(action_type="input_text", text="x" * 60_000))
    assert info.value.rule == "text_too_long"


@pytest.mark.parametrize("data", [
    {"action_type": "x" * 1_000_000},
    {"action_type": "click", "index": 1, "k" * 1_000_000: 1},
    {"action_type": "click", "index": [[[[["deep"] * 1000]]]]},
    {"action_type": "scroll", "direction": "d" * 1_000_000},
    {"action_type": "status", "goal_status": ["maybe"] * 100_000},
])
def test_messages_show_only_an_excerpt_of_a_huge_value(data: dict) -> None:
    with pytest.raises(ActionError) as info:
        validate_action(data)
    assert len(str(info.value)) < 400


def test_a_model_writing_a_too_long_text_is_a_format_error_not_a_crash() -> None:
    """What the rollout records as format-invalid (a format penalty): the action never reaches an env."""
    long_text = "y" * (MAX_TEXT_CHARS + 1)
    parsed = parse_model_output('Reason: type it\nAction: {"action_type": "input_text", "index": 0, "text": "'
                                + long_text + '"}')
    assert not parsed.format_valid and parsed.action is None
    assert "text_too_long" in (parsed.error or "")


def test_tab_newline_and_carriage_return_are_text_to_type() -> None:
    action = validate_action({"action_type": "input_text", "text": "line one\n\tline two\r\n", "index": 2})
    assert action.text == "line one\n\tline two\r\n"
