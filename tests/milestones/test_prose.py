"""The prose reading: which milestones in prose name a grounded step, which name another, which cannot tell."""

from __future__ import annotations

import pytest

from admire.milestones.prose import is_past_form, prose_verdict, read_prose, stem, step_kind
from admire.milestones.signature import parse_signature


def verdict(description: str, milestone: str) -> str:
    return prose_verdict(parse_signature(description), milestone)


LOGIN = "clicked the 'Login' button"
USERNAME = 'typed "<v1>" into the \'Username\' field'
TICKED = "checked the '<value>' checkbox"
WIFI_ON = "checked the 'Wi-Fi' switch"
SCROLL_DOWN = "scrolled down in the 'Results' list"


@pytest.mark.parametrize(("description", "milestone"), [
    (LOGIN, "Login button clicked"),
    (LOGIN, "press the login button"),
    (USERNAME, "Username entered"),
    (USERNAME, "username field filled in"),
    (USERNAME, "typed <v1> as the name"),  # a positional slot is typed into one field only
    (TICKED, "ticked the box for <value>"),
    (WIFI_ON, "Wi-Fi turned on"),
    (WIFI_ON, "enabled Wi-Fi"),
    (SCROLL_DOWN, "scrolled down the results"),
    ("clicked the 'Tab #2' tab", "switched to Tab #2"),
    ("clicked the 'Alarm' tab", "switched to the alarms"),  # plural of the label
    ("clicked the 'Delete' button", "event deleted"),  # the label is the verb of the effect
    ("clicked the 'Star' image", "email starred"),  # doubled consonant
    ("clicked the 'Send' button", "email sent"),  # irregular past
    ("long-pressed the '<value>' item", "long pressed <value>"),
    ("opened the Contacts app", "launch Contacts"),
    ("went back", "pressed the back button"),
    ("pressed Enter", "pressed the Enter key"),
    ('typed "<value>" into the \'Search\' field', "search query entered"),  # 'Search' names the field
    ("clicked the 'Search' button", "search started"),
    ('typed "<value>" into the \'To\' field', "recipient <value> entered"),  # what prose calls a 'To' field
    ('typed "<value>" into the \'From:\' field', "origin set to <value>"),
    ("clicked the '×' button", "multiply pressed"),  # a symbol's name
    ("clicked the 'Prev' button", "went to the previous month"),  # an abbreviation
    ("clicked the 'Apply filters' button", "filters applied"),  # "applied" is "apply"
    ('typed "<v1>" into the \'Check-in\' field', "check-in date set to <v1>"),
])
def test_prose_that_names_the_step_and_a_compatible_action_is_anchored(description: str, milestone: str) -> None:
    assert verdict(description, milestone) == "anchored"


@pytest.mark.parametrize(("description", "milestone"), [
    (TICKED, "<value> checkbox unchecked"),  # the opposite toggle
    ("unchecked the 'Remember me' checkbox", "Remember me checkbox checked"),
    (WIFI_ON, "Wi-Fi turned off"),
    (SCROLL_DOWN, "scrolled up the results"),
    ("clicked the 'Tab #2' tab", "switched to Tab #3"),  # a number the step does not have
    (USERNAME, "typed <v2> into the Username field"),  # another slot
    (USERNAME, "typed <v1> into the Password field"),  # another field of the same role
    (USERNAME, "clicked the Username field"),  # a click, where the step typed
    ('typed "<value>" into the \'Search\' field', "Search button clicked"),
    (LOGIN, "Cancel button clicked"),
    ("went back", "went to the home screen"),
    ("long-pressed the '<value>' item", "opened the event <value>"),  # a plain open is not a long press
    ("opened the Settings app", "Wi-Fi turned on"),
    ("pressed Enter", "pressed Escape"),
    ("clicked the 'Sign Up' button", "Sign In clicked"),  # the twin control: in for up
    ("clicked the 'Mark as unread' button", "marked as read"),
    ('typed "<v1>" into the \'Check-in\' field', "check-out date set to <v1>"),  # a hyphenated label keeps "in"
])
def test_prose_that_names_another_action_or_element_conflicts(description: str, milestone: str) -> None:
    assert verdict(description, milestone) == "conflict"


@pytest.mark.parametrize(("description", "milestone"), [
    ("clicked the 'Send' button", "message delivered"),  # an effect the label does not name
    ("clicked the '<value>' item", "deleted the email from <value>"),  # an effect beside the named element
    ('typed "<value>" into the \'Card number\' field', "typed the expiry date <value>"),  # one <value> for any field
    ("clicked the 'Book flight for $<value>' button", "Book button clicked"),  # part of the label only
    ("opened the Simple SMS Messenger app", "messaging app opened"),  # apps are named by their kind too
    ("clicked at (10, 20)", "clicked the map"),  # a point names no element
    # the step's slot, but in a field the prose names and the label does not
    ('typed "<v1>" into the \'Event title\' field', "typed <v1> as the event location"),
    ('typed "<v1>" into the \'Recipient IBAN\' field', "typed <v1> as the transfer reference"),
])
def test_prose_that_cannot_tell_is_neutral(description: str, milestone: str) -> None:
    assert verdict(description, milestone) == "neutral"


def test_a_step_without_a_signature_is_neutral() -> None:
    assert prose_verdict(None, "Login button clicked") == "neutral"
    assert prose_verdict(parse_signature("waited"), "waited for the page") == "neutral"


def test_labels_made_of_stop_words_still_name_their_field() -> None:
    to_field = 'typed "<value>" into the \'To\' field'
    assert verdict(to_field, "typed <value> into the message body") == "neutral"
    assert verdict(to_field, "To field filled in") == "anchored"


def test_the_stemmer_is_the_same_on_both_sides_and_keeps_slots_and_numbers() -> None:
    # (Kept nouns and aliases are tested entry by entry from the lexicon: test_lexicon.py.)
    assert stem("clicked") == stem("clicking") == stem("clicks") == stem("click") == "click"
    assert stem("tapped") == stem("tap") == "tap"
    assert stem("added") == stem("add") == "add"
    assert stem("<V1>") == "<v1>" and stem("2016") == "2016"
    assert stem("applied") == stem("apply") and stem("replies") == stem("reply") == "reply"
    # Word forms from the dictionary, not a suffix rule: irregular forms, doubled consonants, -ied.
    assert stem("cancelled") == stem("cancel") == "cancel" and stem("starred") == "star"
    assert stem("hidden") == "hide" and stem("sent") == "send" and stem("chosen") == stem("chose") == "choose"
    assert stem("deleted") == stem("delete") == "delete"
    assert stem("unchecked") == "uncheck"  # an adjective to the dictionary, a past form by its ending


def test_past_forms_are_read_from_the_dictionary() -> None:
    assert is_past_form("deleted") and is_past_form("sent") and is_past_form("gave") and is_past_form("unticked")
    assert not is_past_form("run") and not is_past_form("forecast")  # the verb itself: nothing says it is past
    assert not is_past_form("hundred") and not is_past_form("delete") and not is_past_form("speed")


def test_the_reading_lists_kinds_identifiers_directions_and_roles() -> None:
    reading = read_prose("Long pressed <v2> then scrolled down to Tab #3 and the Save button")
    assert {"long", "scroll"} <= reading.kinds
    assert reading.identifiers == {"<v2>", "3"}
    assert reading.directions == {"down"}
    assert reading.roles == {"clickable"}


def test_step_kinds_follow_the_signature() -> None:
    assert step_kind(parse_signature("clicked the 'Country' dropdown")) == "click_dropdown"
    assert step_kind(parse_signature('typed "<value>" into the \'Country\' dropdown')) == "type_dropdown"
    assert step_kind(parse_signature("swiped left")) == "scroll"
    assert step_kind(parse_signature("clicked element 7, which is not on the screen")) is None
    assert step_kind(parse_signature("clicked at (3, 4)")) is None
