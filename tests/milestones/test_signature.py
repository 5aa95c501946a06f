"""Signatures of grounded descriptions. Every sentence is written by ``actions.describe`` from real
``Action`` / ``Observation`` / ``UIElement`` objects, so a change to describe()'s grammar fails here."""

from __future__ import annotations

from typing import Any

import pytest

from admire.actions import ACTION_TYPES, DIRECTIONS, MAX_LABEL_CHARS, describe, validate_action
from admire.milestones.signature import Signature, parse_signature, role_family, signatures_agree
from admire.types import Observation, UIElement

BUTTON = UIElement(text="Login", class_name="button", bbox=(0, 100, 0, 40))
PASSWORD = UIElement(hint_text="Password", class_name="input_password", is_editable=True, bbox=(0, 100, 50, 70))
USERNAME = UIElement(hint_text="Username", class_name="input_text", is_editable=True, bbox=(0, 100, 80, 100))
BOX = UIElement(text="Remember me", class_name="input_checkbox", is_checkable=True)
TICKED = UIElement(text="Remember me", class_name="input_checkbox", is_checkable=True, is_checked=True)
WIFI = UIElement(text="Wi-Fi", class_name="android.widget.Switch", is_checkable=True)
LIST = UIElement(content_description="Results", class_name="androidx.recyclerview.widget.RecyclerView",
                 is_scrollable=True)
BARE_IMAGE = UIElement(class_name="android.widget.ImageView", is_clickable=True)
TAB_1 = UIElement(text="Tab #1", class_name="tab")
TAB_2 = UIElement(text="Tab #2", class_name="tab")
QUOTED = UIElement(text="Don't save", class_name="button")
SCREEN = Observation(goal="", ui_elements=(BUTTON, PASSWORD, USERNAME, BOX, TICKED, WIFI, LIST, BARE_IMAGE, TAB_1,
                                           TAB_2, QUOTED))


def said(observation: Observation | None = SCREEN, **action: Any) -> str:
    """describe() of a validated action on ``observation``."""
    return describe(validate_action(action), observation)


def at(element: UIElement) -> int:
    return SCREEN.ui_elements.index(element)


# (the action, the signature of its description)
FORMS: list[tuple[dict[str, Any], Signature]] = [
    ({"action_type": "click", "index": at(BUTTON)}, Signature("clicked", "button", "login")),
    ({"action_type": "double_tap", "index": at(BUTTON)}, Signature("double-tapped", "button", "login")),
    ({"action_type": "long_press", "index": at(BUTTON)}, Signature("long-pressed", "button", "login")),
    ({"action_type": "click", "x": 50, "y": 20}, Signature("clicked", "button", "login")),  # by its point
    ({"action_type": "click", "index": at(BOX)}, Signature("checked", "checkbox", "remember me")),
    ({"action_type": "click", "index": at(TICKED)}, Signature("unchecked", "checkbox", "remember me")),
    ({"action_type": "click", "index": at(WIFI)}, Signature("checked", "switch", "wi-fi")),
    ({"action_type": "click", "index": at(TAB_2)}, Signature("clicked", "tab", "tab #2")),
    ({"action_type": "click", "index": at(QUOTED)}, Signature("clicked", "button", "don't save")),
    ({"action_type": "click", "index": at(BARE_IMAGE)}, Signature("clicked", "image")),
    ({"action_type": "long_press", "index": 99}, Signature("long-pressed", "missing element", "99")),
    ({"action_type": "click", "x": 500, "y": 7.6}, Signature("clicked", "point", "500, 8")),
    ({"action_type": "input_text", "text": "9Ht", "index": at(PASSWORD)},
     Signature("typed", "field", "password", "9Ht")),
    ({"action_type": "input_text", "text": 'say "hi"', "index": at(USERNAME)},
     Signature("typed", "field", "username", 'say "hi"')),
    ({"action_type": "input_text", "text": "karrie"}, Signature("typed", value="karrie")),
    ({"action_type": "scroll", "direction": "down", "index": at(LIST)}, Signature("scrolled down", "list", "results")),
    ({"action_type": "scroll", "direction": "up"}, Signature("scrolled up")),
    ({"action_type": "swipe", "direction": "left"}, Signature("swiped left")),
    ({"action_type": "open_app", "app_name": "Contacts"}, Signature("opened", "app", "contacts")),
    ({"action_type": "status", "goal_status": "complete"}, Signature("declared", value="complete")),
    ({"action_type": "status", "goal_status": "infeasible"}, Signature("declared", value="infeasible")),
    ({"action_type": "answer", "text": "42 km"}, Signature("answered", value="42 km")),
    ({"action_type": "keyboard_enter"}, Signature("pressed enter")),
    ({"action_type": "navigate_back"}, Signature("went back")),
    ({"action_type": "navigate_home"}, Signature("went home")),
    ({"action_type": "wait"}, Signature("waited")),
    ({"action_type": "unknown"}, Signature("unknown")),
]


@pytest.mark.parametrize(("action", "expected"), FORMS, ids=lambda v: said(**v) if isinstance(v, dict) else "")
def test_every_form_describe_writes_parses_into_its_signature(action: dict[str, Any], expected: Signature) -> None:
    assert parse_signature(said(**action)) == expected


def test_the_forms_cover_every_action_type_and_direction() -> None:
    assert {action["action_type"] for action, _ in FORMS} == set(ACTION_TYPES)
    scrolls = [said(action_type=kind, direction=d) for kind in ("scroll", "swipe") for d in DIRECTIONS]
    assert all(parse_signature(text) is not None for text in scrolls)


def test_an_unlabelled_element_of_every_role_parses() -> None:
    for class_name in ("button", "input_text", "textarea", "input_checkbox", "input_radio", "select", "a", "li",
                       "img", "span", "div", "android.widget.ToggleButton"):
        element = UIElement(class_name=class_name, is_editable=class_name in ("input_text", "textarea"))
        text = said(Observation(goal="", ui_elements=(element,)), action_type="long_press", index=0)
        assert text.startswith("long-pressed an unlabelled ")
        signature = parse_signature(text)
        assert signature is not None and signature.label is None and signature.role == text.split(" ", 3)[-1]


def test_a_long_value_clipped_by_describe_still_parses() -> None:
    message = "Purus velit faucibus eu, vel quis varius semper, odio fermentum quam auctor aenean."
    text = said(action_type="input_text", text=message, index=at(USERNAME))
    signature = parse_signature(text)
    assert signature is not None and signature.label == "username"
    assert signature.value is not None and signature.value.startswith(message[:40])
    assert len(signature.value) < len(message) and len(text) < len(message) + MAX_LABEL_CHARS


def test_text_outside_the_grammar_has_no_signature() -> None:
    for prose in ("Login button clicked", "typed <value> into the Username field", "the user logged in", "",
                  "clicked", "I click on the Login button to sign in", "opened Contacts"):
        assert parse_signature(prose) is None


def test_a_copied_description_may_differ_in_case_full_stop_and_curly_quotes() -> None:
    original = parse_signature(said(action_type="click", index=at(BOX)))
    assert parse_signature("Checked the ‘Remember me’ checkbox.") == original
    assert parse_signature('Typed “<v1>” into the ‘Password’ field') == Signature("typed", "field", "password", "<v1>")


def test_a_non_string_is_refused() -> None:
    with pytest.raises(TypeError, match="reads a string"):
        parse_signature(None)  # type: ignore[arg-type]


# -- agreement ----------------------------------------------------------------------------------

def agree(a: str, b: str) -> bool:
    return signatures_agree(parse_signature(a), parse_signature(b))


def test_checked_and_unchecked_do_not_agree() -> None:
    checked, unchecked = said(action_type="click", index=at(BOX)), said(action_type="click", index=at(TICKED))
    assert checked == "checked the 'Remember me' checkbox" and unchecked == "unchecked the 'Remember me' checkbox"
    assert not agree(checked, unchecked)
    assert agree(checked, checked)


def test_tab_numbers_do_not_agree() -> None:
    assert not agree(said(action_type="click", index=at(TAB_2)), said(action_type="click", index=at(TAB_1)))


def test_the_same_value_in_another_field_or_another_value_in_the_same_field_does_not_agree() -> None:
    user = 'typed "<v1>" into the \'Username\' field'
    assert not agree(user, 'typed "<v1>" into the \'Password\' field')
    assert not agree(user, 'typed "<v2>" into the \'Username\' field')
    assert not agree(user, 'typed "<v1>"')  # the field is part of the step
    assert agree(user, user)
    assert not agree('typed "-10"', 'typed "10"')
    assert not agree('typed "9ht" into the \'Password\' field', 'typed "9Ht" into the \'Password\' field')
    assert agree('typed "<V1>"', 'typed "<v1>"')  # placeholders are not values: their case does not count


def test_renderings_of_one_step_agree() -> None:
    assert agree("clicked the 'Log in' button", "clicked the 'Login' link")  # spacing; clickable family
    assert agree("clicked the 'Save' button", "clicked the 'Save' text")
    assert agree("checked the 'Wi-Fi' switch", "checked the 'Wi‑Fi' checkbox")  # U+2011; toggle family
    assert agree('typed "<value>" into the \'From:\' field', 'typed "<value>" into the \'From\' text area')
    assert agree("scrolled down in the 'Results' list", "scrolled down")  # a scroll's container is optional
    assert agree("opened the Contacts app", "opened the 'contacts' app")
    assert agree("clicked the 'Alarms' tab", "clicked the 'Alarm' tab")  # a renderer's plural
    assert agree("clicked the 'Favourites' tab", "clicked the 'Favorites' tab")  # one spelling
    assert agree('typed "2" into the \'Qty\' dropdown', 'typed "2" into the \'Quantity\' dropdown')


def test_different_steps_with_shared_words_do_not_agree() -> None:
    assert not agree("clicked the 'Search' button", "clicked the 'Search' field")  # clickable vs input
    assert not agree("clicked the 'Save' button", "long-pressed the 'Save' button")
    assert not agree("scrolled down in the 'Results' list", "scrolled up in the 'Results' list")
    assert not agree("opened the Contacts app", "opened the Phone app")
    assert not agree("clicked the '+' button", "clicked the '-' button")  # symbol-only labels keep their symbol
    assert not agree("clicked the 'First name' text", "clicked the 'Last name' text")
    assert not agree("clicked at (10, 20)", "clicked at (10, 21)")
    # A label that is part of another is another control on the same screen: social-media's toggled
    # 'reply active' beside 'reply', a form's 'Verify password' beside 'Password' (docs/results.md).
    assert not agree("clicked the 'reply' button", "clicked the 'reply active' button")
    assert not agree('typed "<v1>" into the \'Password\' field', 'typed "<v1>" into the \'Verify password\' field')


def test_text_without_a_signature_agrees_with_nothing() -> None:
    assert not signatures_agree(None, parse_signature("went back"))
    assert not signatures_agree(None, None)


def test_role_families() -> None:
    assert role_family("button") == role_family("image") == role_family("tab") == "clickable"
    assert role_family("field") == role_family("text area") == "input"
    assert role_family("switch") == role_family("checkbox") == "toggle"
    assert role_family("slider") == "slider" and role_family(None) is None
