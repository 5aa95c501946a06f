"""Grounded descriptions: the sentence the milestone matcher compares, built from the screen."""

from __future__ import annotations

import pytest

from admire.actions import describe, element_label, element_role, validate_action
from admire.types import Observation, UIElement

LOGIN = UIElement(text="Login", class_name="button", bbox=(10, 60, 100, 120), is_clickable=True)
USERNAME = UIElement(hint_text="Username", class_name="input_text", bbox=(10, 150, 40, 60), is_editable=True)
PHONE_FIELD = UIElement(class_name="android.widget.EditText", resource_id="com.app:id/first_name",
                        is_editable=True, bbox=(0, 100, 0, 50))
INBOX = UIElement(content_description="Inbox", class_name="androidx.recyclerview.widget.RecyclerView",
                  is_scrollable=True, bbox=(0, 400, 0, 800))
BOX = UIElement(text="Option A", class_name="input_checkbox", is_checkable=True, bbox=(0, 20, 200, 220))
BOX_CHECKED = BOX.model_copy(update={"is_checked": True})
SEARCH_ICON = UIElement(content_description="Search", class_name="android.widget.ImageButton",
                        bbox=(300, 340, 10, 50), is_clickable=True)
BLANK = UIElement(class_name="android.view.View", bbox=(0, 10, 0, 10))

SCREEN = Observation(goal="Log in as karrie",
                     ui_elements=(LOGIN, USERNAME, PHONE_FIELD, INBOX, BOX, BOX_CHECKED, SEARCH_ICON, BLANK))


@pytest.mark.parametrize(
    ("action", "sentence"),
    [
        ({"action_type": "click", "index": 0}, "clicked the 'Login' button"),
        ({"action_type": "input_text", "index": 1, "text": "karrie"}, 'typed "karrie" into the \'Username\' field'),
        ({"action_type": "input_text", "index": 1, "text": "karrie", "clear_text": True},
         'typed "karrie" into the \'Username\' field'),
        ({"action_type": "input_text", "index": 2, "text": "Ann"}, 'typed "Ann" into the \'first name\' field'),
        ({"action_type": "input_text", "text": "hello"}, 'typed "hello"'),
        ({"action_type": "scroll", "index": 3, "direction": "down"}, "scrolled down in the 'Inbox' list"),
        ({"action_type": "scroll", "direction": "up"}, "scrolled up"),
        ({"action_type": "swipe", "direction": "left"}, "swiped left"),
        ({"action_type": "open_app", "app_name": "Contacts"}, "opened the Contacts app"),
        ({"action_type": "navigate_back"}, "went back"),
        ({"action_type": "navigate_home"}, "went to the home screen"),
        ({"action_type": "keyboard_enter"}, "pressed Enter"),
        ({"action_type": "wait"}, "waited"),
        ({"action_type": "status", "goal_status": "complete"}, "declared the task complete"),
        ({"action_type": "status", "goal_status": "infeasible"}, "declared the task infeasible"),
        ({"action_type": "answer", "text": "3"}, 'answered "3"'),
        ({"action_type": "click", "index": 4}, "checked the 'Option A' checkbox"),
        ({"action_type": "click", "index": 5}, "unchecked the 'Option A' checkbox"),
        ({"action_type": "long_press", "index": 6}, "long-pressed the 'Search' button"),
        ({"action_type": "double_tap", "index": 7}, "double-tapped an unlabelled element"),
    ],
)
def test_sentences(action: dict, sentence: str) -> None:
    assert describe(validate_action(action), SCREEN) == sentence


def test_a_click_by_coordinates_names_the_smallest_element_under_the_point() -> None:
    # (20, 30) lies inside both the Inbox list and the first-name field; the field is smaller.
    assert describe(validate_action({"action_type": "click", "x": 20, "y": 30}), SCREEN) == (
        "clicked the 'first name' field"
    )


def test_a_click_on_empty_space_names_the_point() -> None:
    assert describe(validate_action({"action_type": "click", "x": 900, "y": 900}), SCREEN) == "clicked at (900, 900)"


def test_an_index_off_the_screen_still_gets_a_sentence() -> None:
    assert describe(validate_action({"action_type": "click", "index": 99}), SCREEN) == (
        "clicked element 99, which is not on the screen"
    )


def test_label_preference_text_then_description_then_hint_then_resource_id() -> None:
    assert element_label(UIElement(text="A", content_description="B", hint_text="C", resource_id="x/d")) == "A"
    assert element_label(UIElement(content_description="B", hint_text="C", resource_id="x/d")) == "B"
    assert element_label(UIElement(hint_text="C", resource_id="x/d")) == "C"
    assert element_label(UIElement(resource_id="com.x:id/save_button")) == "save button"
    assert element_label(UIElement(text="   ")) is None


def test_a_field_is_named_by_its_label_not_by_what_was_typed_into_it() -> None:
    filled = USERNAME.model_copy(update={"text": "karrie"})
    assert element_label(filled) == "Username"
    assert describe(validate_action({"action_type": "input_text", "index": 0, "text": "x"}),
                    Observation(goal="", ui_elements=(filled,))) == 'typed "x" into the \'Username\' field'
    unnamed = UIElement(class_name="android.widget.EditText", is_editable=True, text="draft")
    assert element_label(unnamed) == "draft"


def test_long_labels_are_clipped_and_whitespace_collapsed() -> None:
    label = element_label(UIElement(text="word  \n" * 40))
    assert label is not None and len(label) <= 60 and label.endswith("…") and "  " not in label


def test_roles_from_android_classes_and_dom_tags() -> None:
    assert element_role(UIElement(class_name="android.widget.Switch")) == "switch"
    assert element_role(UIElement(class_name="select")) == "dropdown"
    assert element_role(UIElement(class_name="a")) == "link"
    assert element_role(UIElement(class_name="com.custom.Widget", is_editable=True)) == "field"
    assert element_role(UIElement(class_name="com.custom.FancyButton")) == "button"
