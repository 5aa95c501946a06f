"""Slot values from real MiniWoB++ utterances (read from miniwob 1.1.0 with reset(seed=…)) and their
replacement by the placeholder in grounded descriptions."""

from __future__ import annotations

import pytest

from admire.actions import MAX_LABEL_CHARS, describe, validate_action
from admire.milestones.slots import (
    PLACEHOLDER,
    apply_slots,
    extract_slot_values,
    positional_values,
    skeleton,
    slot_scheme,
)
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


# -- positional slots and skeletons ---------------------------------------------------------------

LOGIN = 'Enter the username "karrie" and the password "9Ht" into the text fields and press login.'


def test_positional_values_come_in_order_of_first_appearance() -> None:
    assert positional_values(LOGIN) == ["karrie", "9Ht"]  # extract_slot_values gives them longest first
    assert positional_values('Type "Bo", then "Roberta", then "bo" again.') == ["Bo", "Roberta"]
    assert positional_values("Type the text below into the text field and press Submit.") == []


def test_a_value_inside_a_longer_value_gets_no_number_of_its_own() -> None:
    # The comma list also yields "md" and "todo", which occur only inside the file names.
    goal = "Open notes.md, todo.txt and share them."
    assert {"md", "todo"} <= set(extract_slot_values(goal))
    assert positional_values(goal) == ["notes.md", "todo.txt"]
    assert skeleton(goal) == "Open <v1>, <v2> and share them."


def test_a_shorter_value_that_also_occurs_alone_is_numbered_where_it_first_does() -> None:
    goal = 'Select "Heard Island and McDonald Islands" and then Heard Island.'
    assert positional_values(goal) == ["Heard Island and McDonald Islands", "Heard Island"]
    assert apply_slots("chose Heard Island and McDonald Islands, not Heard Island", positional_values(goal),
                       positional=True) == "chose <v1>, not <v2>"
    later = 'Type "Bob" first and "Bob Smith" second.'
    assert positional_values(later) == ["Bob", "Bob Smith"]


def test_positional_slots_number_values_and_a_value_in_the_wrong_field_reads_differently() -> None:
    values = positional_values(LOGIN)
    right = apply_slots(_typed("karrie", "Username"), values, positional=True)
    swapped = apply_slots(_typed("9Ht", "Username"), values, positional=True)
    assert right == "typed \"<v1>\" into the 'Username' field"
    assert swapped == "typed \"<v2>\" into the 'Username' field"
    # The single scheme cannot tell them apart: this is why the skeleton key slots positionally.
    assert apply_slots(_typed("karrie", "Username"), values) == apply_slots(_typed("9Ht", "Username"), values)


def test_positional_slotting_is_idempotent_and_leaves_every_placeholder_alone() -> None:
    values = ["karrie", "v1", "value"]
    once = apply_slots('typed "karrie" into <v2>, <value> and <V1>', values, positional=True)
    assert once == 'typed "<v1>" into <v2>, <value> and <V1>'
    assert apply_slots(once, values, positional=True) == once
    assert apply_slots(once, values) == once  # the single scheme leaves positional placeholders alone too


def test_positional_slotting_shares_the_single_schemes_token_and_clipping_rules() -> None:
    assert apply_slots("typed \"5\" into the '15' field", ["7", "5"], positional=True) == (
        "typed \"<v2>\" into the '15' field")
    assert apply_slots('typed "9:37PM"', ["9:37 PM"], positional=True) == 'typed "<v1>"'
    message = "Purus velit faucibus eu, vel quis varius semper, odio fermentum quam auctor aenean."
    assert apply_slots(_typed(message, "Message"), ["Eu", message], positional=True) == (
        "typed \"<v2>\" into the 'Message' field")
    with pytest.raises(TypeError, match="not one string"):
        apply_slots("text", "karrie", positional=True)


def test_instances_with_one_skeleton_give_the_same_positionally_slotted_descriptions() -> None:
    second = 'Enter the username "vina" and the password "US" into the text fields and press login.'
    assert skeleton(LOGIN) == skeleton(second)
    one = [apply_slots(_typed(v, f), positional_values(LOGIN), positional=True)
           for v, f in (("karrie", "Username"), ("9Ht", "Password"))]
    two = [apply_slots(_typed(v, f), positional_values(second), positional=True)
           for v, f in (("vina", "Username"), ("US", "Password"))]
    assert one == two == ["typed \"<v1>\" into the 'Username' field", "typed \"<v2>\" into the 'Password' field"]


def test_skeletons_of_different_structures_differ() -> None:
    one_box = skeleton("Select qKDSf and click Submit.")
    three_boxes = skeleton("Select fzzqo, NYYyS82, 91YPF and click Submit.")
    assert one_box == "Select <v1> and click Submit."
    assert three_boxes == "Select <v1>, <v2>, <v3> and click Submit."
    assert skeleton("Select   nothing and click Submit.") == "Select nothing and click Submit."
    assert skeleton("Select 9Ht and click Submit.") == one_box


def test_slot_scheme_by_key() -> None:
    assert slot_scheme("instruction") == "none"
    assert slot_scheme("task") == "single"
    assert slot_scheme("skeleton") == "positional"
    with pytest.raises(ValueError, match="'task', 'instruction' or 'skeleton'"):
        slot_scheme("template")


def test_the_email_rule_starts_only_where_a_run_of_address_characters_starts() -> None:
    # Each start inside a long run would rescan the rest of it: quadratic in the goal's length.
    found = extract_slot_values("write to ann.lee+x@example.co.uk or a@b@c.com now")
    assert found == ["ann.lee+x@example.co.uk", "b@c.com"]
    assert extract_slot_values("x" * 300_000) == []  # one long word: linear time, no value


def test_a_goal_of_many_values_is_blanked_once_per_rule() -> None:
    goal = " ".join(str(n) for n in range(20_000))  # 20,000 numbers: one rebuild per rule, not one per number
    assert sorted(extract_slot_values(goal), key=int) == [str(n) for n in range(20_000)]
