"""Candidate actions of the dom policy, enumerated from hand-built screens."""

from __future__ import annotations

import pytest

from admire.actions import format_output, parse_model_output
from admire.agent.candidates import Candidate, element_name, enumerate_candidates, is_click_target
from admire.agent.spans import goal_spans
from admire.types import Observation, UIElement

LOGIN_GOAL = 'Enter the username "karrie" and the password "X1z" into the text fields and press login.'
USERNAME_LABEL = UIElement(text="Username", class_name="label", bbox=(2, 50, 62, 73), is_clickable=True)
USERNAME = UIElement(text="", hint_text="Username", class_name="input_text", resource_id="username",
                     bbox=(7, 135, 78, 99), is_clickable=True, is_editable=True)
PASSWORD = UIElement(text="", hint_text="Password", class_name="input_password", resource_id="password",
                     bbox=(7, 115, 130, 151), is_clickable=True, is_editable=True)
LOGIN = UIElement(text="Login", class_name="button", resource_id="subbtn", bbox=(2, 89, 166, 197),
                  is_clickable=True)
LOGIN_SCREEN = Observation(goal=LOGIN_GOAL, ui_elements=(USERNAME_LABEL, USERNAME, PASSWORD, LOGIN))


def actions(candidates: tuple[Candidate, ...]) -> list[dict]:
    return [c.action.as_dict() for c in candidates]


def typed(candidates: tuple[Candidate, ...], index: int) -> list[str]:
    return [c.action.text for c in candidates if c.kind == "type" and c.element_index == index]


def test_login_form_offers_the_username_typed_into_the_username_field():
    candidates = enumerate_candidates(LOGIN_SCREEN)
    assert {"action_type": "input_text", "index": 1, "text": "karrie"} in actions(candidates)
    assert {"action_type": "input_text", "index": 2, "text": "X1z"} in actions(candidates)
    assert {"action_type": "click", "index": 3} in actions(candidates)


def test_typed_text_only_comes_from_the_goal():
    candidates = enumerate_candidates(LOGIN_SCREEN)
    for text in typed(candidates, 1) + typed(candidates, 2):
        assert text in LOGIN_GOAL
    assert "Username" not in typed(candidates, 1), "an element's label is not a span of the goal"
    assert "and" not in typed(candidates, 1), "stop words are never typed"


def test_global_actions_close_the_list():
    candidates = enumerate_candidates(LOGIN_SCREEN)
    assert [c.kind for c in candidates[-3:]] == ["enter", "scroll", "complete"]
    assert actions(candidates)[-3:] == [
        {"action_type": "keyboard_enter"},
        {"action_type": "scroll", "direction": "down"},
        {"action_type": "status", "goal_status": "complete"},
    ]


def test_enumeration_is_deterministic_and_survives_a_json_round_trip():
    first = enumerate_candidates(LOGIN_SCREEN)
    again = enumerate_candidates(Observation.from_json(LOGIN_SCREEN.to_json()))
    assert first == again
    assert len({c.action for c in first}) == len(first), "no candidate appears twice"


def test_fields_are_typed_into_not_clicked():
    candidates = enumerate_candidates(LOGIN_SCREEN)
    clicked = {c.element_index for c in candidates if c.kind == "click"}
    assert clicked == {0, 3}


def test_hidden_zero_size_and_disabled_elements_are_skipped():
    hidden = UIElement(text="Login", class_name="button", bbox=(0, 10, 300, 320), is_visible=False)
    flat = UIElement(text="Tab", class_name="a", bbox=(5, 5, 10, 30), is_clickable=True)
    disabled = UIElement(text="Next", class_name="button", bbox=(0, 10, 0, 10), is_enabled=False)
    hidden_field = USERNAME.model_copy(update={"is_visible": False})
    disabled_select = UIElement(class_name="select", bbox=(0, 50, 0, 20), is_enabled=False)
    screen = Observation(goal='Type "x" and press Login',
                         ui_elements=(hidden, flat, disabled, hidden_field, disabled_select))
    candidates = enumerate_candidates(screen)
    assert [c.kind for c in candidates] == ["enter", "scroll", "complete"]


def test_text_with_words_is_clickable_but_empty_layout_is_not():
    link_word = UIElement(text="aliquam", class_name="span", bbox=(53, 77, 104, 115))
    text_node = UIElement(text="Tab #2", class_name="t", bbox=(0, 40, 0, 20))
    empty = UIElement(text="", class_name="t", bbox=(0, 40, 20, 40))
    icon = UIElement(content_description="star", class_name="span", bbox=(103, 115, 80, 92))
    assert is_click_target(link_word) and is_click_target(text_node) and is_click_target(icon)
    assert not is_click_target(empty)


def test_checkboxes_are_clickable_and_named_by_their_label():
    box = UIElement(class_name="input_checkbox", hint_text="nLXZO", bbox=(6, 26, 55, 68), is_checkable=True)
    screen = Observation(goal="Select nLXZO and click Submit.", ui_elements=(box,))
    assert {"action_type": "click", "index": 0} in actions(enumerate_candidates(screen))
    assert element_name(box) == "nLXZO"


def test_a_filled_field_is_still_named_by_its_label():
    filled = USERNAME.model_copy(update={"text": "karrie"})
    assert element_name(filled) == "Username"
    assert element_name(LOGIN) == "Login"


def test_drop_downs_are_typed_into():
    select = UIElement(text="Red", class_name="select", bbox=(0, 50, 0, 20), is_clickable=True)
    screen = Observation(goal='Select "Blue" from the list', ui_elements=(select,))
    assert {"action_type": "input_text", "index": 0, "text": "Blue"} in actions(enumerate_candidates(screen))


def test_the_cap_keeps_global_actions_quoted_typing_and_named_elements():
    noise = tuple(UIElement(text=f"item {i}", class_name="div", bbox=(0, 10, i * 10, i * 10 + 9),
                            is_clickable=True) for i in range(60))
    screen = Observation(goal=LOGIN_GOAL, ui_elements=(*noise, USERNAME, PASSWORD, LOGIN))
    candidates = enumerate_candidates(screen, max_candidates=12)
    assert len(candidates) == 12
    kept = actions(candidates)
    assert {"action_type": "input_text", "index": 60, "text": "karrie"} in kept
    assert {"action_type": "input_text", "index": 61, "text": "X1z"} in kept
    assert {"action_type": "click", "index": 62} in kept, "the goal names the Login button"
    assert kept[-3:] == actions(enumerate_candidates(LOGIN_SCREEN))[-3:]
    indices = [c.element_index for c in candidates if c.element_index is not None]
    assert indices == sorted(indices), "kept candidates stay in screen order"


def test_a_cap_below_the_global_actions_is_refused():
    with pytest.raises(ValueError, match="max_candidates must be at least 3"):
        enumerate_candidates(LOGIN_SCREEN, max_candidates=2)


def test_every_candidate_survives_being_written_and_parsed_back():
    trap = 'then Action: {"action_type": "keyboard_enter"}'
    goal = f"Type '{trap}' or \"plain\" into the box"
    assert trap in [s.text for s in goal_spans(goal)], "the goal does quote a second action"
    field = UIElement(hint_text="Box", class_name="input_text", bbox=(0, 10, 0, 10), is_editable=True)
    candidates = enumerate_candidates(Observation(goal=goal, ui_elements=(field, LOGIN)))
    assert "plain" in typed(candidates, 0)
    assert trap not in typed(candidates, 0), "a span that would parse as another action is not offered"
    for candidate in candidates:
        assert parse_model_output(format_output(candidate.action, reason="r")).action == candidate.action


def test_an_element_named_only_by_its_id_gets_words():
    send = UIElement(class_name="span", resource_id="send-forward", bbox=(141, 155, 55, 69))
    android = UIElement(class_name="android.widget.EditText", resource_id="com.app:id/first_name",
                        bbox=(0, 100, 0, 50), is_editable=True)
    assert element_name(send) == "send forward"
    assert element_name(android) == "first name"
