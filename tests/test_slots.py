"""Slot values from real MiniWoB++ utterances (read from miniwob 1.1.0 with reset(seed=…)) and their
replacement by the placeholder in grounded descriptions."""

from __future__ import annotations

import pytest

from admire.actions import MAX_LABEL_CHARS, describe, validate_action
from admire.milestones.slots import PLACEHOLDER, apply_slots, extract_slot_values
from admire.types import Observation, UIElement

UTTERANCES = [
    ('Enter the username "karrie" and the password "9Ht" into the text fields and press login.',
     {"karrie", "9Ht"}),
    ("Select 5 from the list and click Submit.", {"5"}),
    ('Find the email by Lyda and reply to them with the text "Eu."', {"Lyda", "Eu."}),
    ("Select Helli from the list and click Submit.", {"Helli"}),
    ("Find the email by Audrey and forward that email to Hedy.", {"Audrey", "Hedy"}),
    ("Amargo is waiting for the email by Lissie.", {"Amargo", "Lissie"}),
    ("Give Bobine the message you received from Cora,", {"Bobine", "Cora"}),
    ("Select fzzqo, NYYyS82 and click Submit.", {"fzzqo", "NYYyS82"}),
    ("Select 91YPF, i6Vdpn2, nd7Qt, XPMut and click Submit.", {"91YPF", "i6Vdpn2", "nd7Qt", "XPMut"}),
    ("Select words similar to gleeful, swine, rabbits, flames and click Submit.",
     {"gleeful", "swine", "rabbits", "flames"}),
    ("Enter 9:37 PM as the time and press submit.", {"9:37 PM"}),
    ("Enter 05/20/2010 as the date and hit submit.", {"05/20/2010"}),
    ("Select -10 with the spinner and hit Submit.", {"-10"}),
    ('For the user @leo, click on the "Share via DM" button.', {"@leo", "Share via DM"}),
    ('Find the email by Jemima and reply to them with the text "Purus velit faucibus eu.".',
     {"Jemima", "Purus velit faucibus eu."}),
    ('Switch between the tabs to find and click on the link "euismod.".', {"euismod."}),
    ("Type the text below into the text field and press Submit.", set()),
]


@pytest.mark.parametrize(("utterance", "expected"), UTTERANCES)
def test_values_of_real_miniwob_utterances(utterance: str, expected: set[str]) -> None:
    assert set(extract_slot_values(utterance)) == expected


def test_values_come_longest_first_without_case_insensitive_repeats() -> None:
    values = extract_slot_values('Type "Bob" in the box, then "bob" again, then "Roberta".')
    assert values == ["Roberta", "Bob"]


def test_android_style_values_phone_numbers_files_emails_and_names() -> None:
    values = extract_slot_values(
        "Add a contact named John Smith with phone number +1-555-0199 and email john.smith@mail.com, "
        "then save notes.md."
    )
    assert set(values) == {"John Smith", "+1-555-0199", "john.smith@mail.com", "notes.md"}


def test_a_non_string_instruction_is_refused() -> None:
    with pytest.raises(TypeError, match="instruction must be a string"):
        extract_slot_values(None)  # type: ignore[arg-type]


def test_replacement_is_whole_token_and_case_insensitive() -> None:
    assert apply_slots("typed \"5\" into the '15' field", ["5"]) == f"typed \"{PLACEHOLDER}\" into the '15' field"
    assert apply_slots("clicked the 'KARRIE' link", ["karrie"]) == f"clicked the '{PLACEHOLDER}' link"
    assert apply_slots("clicked the 'karries' link", ["karrie"]) == "clicked the 'karries' link"


def test_longer_values_win_and_placeholders_are_never_replaced_again() -> None:
    text = "selected Heard Island and McDonald Islands, not Heard Island"
    assert apply_slots(text, ["Heard Island", "Heard Island and McDonald Islands"]) == (
        f"selected {PLACEHOLDER}, not {PLACEHOLDER}")
    once = apply_slots('typed "value" into the field', ["value"])
    assert once == f'typed "{PLACEHOLDER}" into the field'
    assert apply_slots(once, ["value"]) == once


def test_whitespace_inside_a_value_matches_any_whitespace_or_none() -> None:
    assert apply_slots('typed "9:37PM"', ["9:37 PM"]) == f'typed "{PLACEHOLDER}"'
    assert apply_slots('typed "9:37  PM"', ["9:37 PM"]) == f'typed "{PLACEHOLDER}"'


def test_values_without_a_letter_or_digit_are_ignored() -> None:
    assert apply_slots("went back.", [".", " "]) == "went back."


def test_values_must_be_a_list_of_strings() -> None:
    with pytest.raises(TypeError, match="not one string"):
        apply_slots("text", "karrie")
    with pytest.raises(TypeError, match="must be strings"):
        apply_slots("text", [5])  # type: ignore[list-item]


def _typed(text: str, label: str) -> str:
    field = UIElement(text=None, hint_text=label, class_name="input_text", is_editable=True)
    action = validate_action({"action_type": "input_text", "text": text, "index": 0})
    return describe(action, Observation(goal="", ui_elements=(field,)))


def test_two_instances_of_a_template_give_the_same_slotted_descriptions() -> None:
    first = 'Enter the username "karrie" and the password "9Ht" into the text fields and press login.'
    second = 'Enter the username "vina" and the password "US" into the text fields and press login.'
    one = [apply_slots(_typed(v, f), extract_slot_values(first)) for v, f in (("karrie", "Username"),
                                                                              ("9Ht", "Password"))]
    two = [apply_slots(_typed(v, f), extract_slot_values(second)) for v, f in (("vina", "Username"),
                                                                               ("US", "Password"))]
    assert one == two
    assert one[0] == f"typed \"{PLACEHOLDER}\" into the 'Username' field"


def test_a_long_value_clipped_by_the_grounded_description_is_still_replaced() -> None:
    message = "Purus velit faucibus eu, vel quis varius semper, odio fermentum quam auctor aenean."
    assert len(message) > MAX_LABEL_CHARS
    description = _typed(message, "Message")
    assert message not in description  # describe() clipped it
    assert apply_slots(description, [message]) == f"typed \"{PLACEHOLDER}\" into the 'Message' field"
