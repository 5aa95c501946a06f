"""parse_model_output over a corpus of realistic model outputs, and a property: it never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admire.actions import format_output, parse_model_output, validate_action

# (model output, the action it must parse to) — what M3A/T3A-style models and small RL policies write.
WELL_FORMED: list[tuple[str, dict]] = [
    ('Reason: The login button submits the form.\nAction: {"action_type": "click", "index": 5}',
     {"action_type": "click", "index": 5}),
    ('Reason: Type the username first.\nAction: {"action_type": "input_text", "text": "karrie", "index": 2}',
     {"action_type": "input_text", "text": "karrie", "index": 2}),
    ("Reason: I need to see more emails.\nAction: {\"action_type\": \"scroll\", \"direction\": \"down\"}",
     {"action_type": "scroll", "direction": "down"}),
    ('Reason: done\nAction: {"action_type": "status", "goal_status": "complete"}',
     {"action_type": "status", "goal_status": "complete"}),
    ('Reason: open contacts\nAction: {"action_type": "open_app", "app_name": "Contacts"}',
     {"action_type": "open_app", "app_name": "Contacts"}),
    ('Reason: go back to the list\nAction: {"action_type": "navigate_back"}', {"action_type": "navigate_back"}),
    ('Reason: home\nAction: {"action_type": "navigate_home"}', {"action_type": "navigate_home"}),
    ('Reason: submit the search\nAction: {"action_type": "keyboard_enter"}', {"action_type": "keyboard_enter"}),
    ('Reason: the page is loading\nAction: {"action_type": "wait"}', {"action_type": "wait"}),
    ('Reason: the answer is on screen\nAction: {"action_type": "answer", "text": "3 unread"}',
     {"action_type": "answer", "text": "3 unread"}),
    ('Reason: tap the centre\nAction: {"action_type": "click", "x": 120, "y": 340}',
     {"action_type": "click", "x": 120, "y": 340}),
    ('Reason: hold the item\nAction: {"action_type": "long_press", "index": 9}',
     {"action_type": "long_press", "index": 9}),
    ('Reason: zoom in\nAction: {"action_type": "double_tap", "index": 1}', {"action_type": "double_tap", "index": 1}),
    ('Reason: next page\nAction: {"action_type": "swipe", "direction": "left"}',
     {"action_type": "swipe", "direction": "left"}),
    # An optional Description line (the paper's model-side description).
    ('Reason: Need to log in.\nDescription: click the Login button\nAction: {"action_type": "click", "index": 5}',
     {"action_type": "click", "index": 5}),
    # Code fences, with and without a language tag.
    ('Reason: click it\nAction:\n```json\n{"action_type": "click", "index": 0}\n```',
     {"action_type": "click", "index": 0}),
    ('Reason: click it\nAction: ```\n{"action_type": "click", "index": 0}\n```', {"action_type": "click", "index": 0}),
    ('```json\n{"action_type": "keyboard_enter"}\n```', {"action_type": "keyboard_enter"}),
    # Single quotes and Python literals.
    ("Reason: type it\nAction: {'action_type': 'input_text', 'text': 'hello', 'index': 3}",
     {"action_type": "input_text", "text": "hello", "index": 3}),
    ("Reason: clear first\nAction: {'action_type': 'input_text', 'text': 'x', 'index': 3, 'clear_text': True}",
     {"action_type": "input_text", "text": "x", "index": 3, "clear_text": True}),
    ('Reason: json literals\nAction: {"action_type": "input_text", "text": "x", "index": 3, "clear_text": true}',
     {"action_type": "input_text", "text": "x", "index": 3, "clear_text": True}),
    ("Action: {'action_type': 'click', 'index': 2, 'x': None, 'y': None}", {"action_type": "click", "index": 2}),
    ('Action: {"action_type": "click", "index": 2, "x": null, "y": null}', {"action_type": "click", "index": 2}),
    ("Action: {'action_type': 'click', 'index': 4,}", {"action_type": "click", "index": 4}),
    # Braces and quotes inside text values.
    ('Reason: type code\nAction: {"action_type": "input_text", "text": "if (a) { b(); }", "index": 1}',
     {"action_type": "input_text", "text": "if (a) { b(); }", "index": 1}),
    ('Reason: quote\nAction: {"action_type": "input_text", "text": "she said \\"hi}\\"", "index": 1}',
     {"action_type": "input_text", "text": 'she said "hi}"', "index": 1}),
    ("Reason: apostrophe\nAction: {\"action_type\": \"input_text\", \"text\": \"it's {fine}\", \"index\": 0}",
     {"action_type": "input_text", "text": "it's {fine}", "index": 0}),
    # Chatter around the object.
    ('Sure! Here is my answer.\nReason: press login\nAction: {"action_type": "click", "index": 5}\nHope it helps!',
     {"action_type": "click", "index": 5}),
    ('Reason: press login\nAction: I will click the button: {"action_type": "click", "index": 5} (the login one)',
     {"action_type": "click", "index": 5}),
    # Markers in other shapes.
    ('**Reason:** press login\n**Action:** {"action_type": "click", "index": 5}', {"action_type": "click", "index": 5}),
    ('reason: lower case\naction: {"action_type": "click", "index": 5}', {"action_type": "click", "index": 5}),
    ('Thought: the form is filled.\nAction: {"action_type": "keyboard_enter"}', {"action_type": "keyboard_enter"}),
    ('Reason: one line. Action: {"action_type": "click", "index": 8}', {"action_type": "click", "index": 8}),
    # No Action marker: the object with an action_type is found anyway.
    ('{"action_type": "click", "index": 1}', {"action_type": "click", "index": 1}),
    ('I think {"action_type": "wait"} is right', {"action_type": "wait"}),
    ('Reason: the dict {"a": 1} is not an action.\n{"action_type": "click", "index": 2}',
     {"action_type": "click", "index": 2}),
    # The last Action marker wins; a reasoning "action:" earlier does not confuse the parser.
    ('Reason: the best action: click login.\nAction: {"action_type": "click", "index": 5}',
     {"action_type": "click", "index": 5}),
    ('Action: {"action_type": "click", "index": 1}\nWait, that is wrong.\nAction: {"action_type": "click", "index": 2}',
     {"action_type": "click", "index": 2}),
    # Normalised spellings and types.
    ('Reason: done\nAction: {"action_type": "status", "goal_status": "task_complete"}',
     {"action_type": "status", "goal_status": "complete"}),
    ('Reason: idx as str\nAction: {"action_type": "click", "index": "12"}', {"action_type": "click", "index": 12}),
    ('Reason: unicode\nAction: {"action_type": "input_text", "text": "Zoë — café ☕", "index": 0}',
     {"action_type": "input_text", "text": "Zoë — café ☕", "index": 0}),
    ('Reason: multi-line text\nAction: {"action_type": "input_text", "text": "line1\\nline2", "index": 0}',
     {"action_type": "input_text", "text": "line1\nline2", "index": 0}),
    # A truncated object (generation hit its token limit on the closing brace).
    ('Reason: click\nAction: {"action_type": "click", "index": 5', {"action_type": "click", "index": 5}),
]

# (model output, a fragment the error must contain) — each malformed shape and adversarial text.
MALFORMED: list[tuple[object, str]] = [
    ("", "empty output"),
    ("   \n\t ", "empty output"),
    ("Reason: I don't know what to do.", "no JSON object in the output"),
    ("Reason: click the login button\nAction: click(5)", "no JSON object after 'Action:'"),
    ('Reason: x\nAction: {"action_type": "click" "index": 5}', "not valid JSON"),
    ('Reason: x\nAction: {"action_type": click, "index": 5}', "not valid JSON"),
    ('Reason: x\nAction: {"action_type": "fly", "index": 5}', "unknown_action_type"),
    ('Reason: x\nAction: {"index": 5}', "missing_action_type"),
    ('Reason: x\nAction: {"action_type": "click"}', "missing_target"),
    ('Reason: x\nAction: {"action_type": "click", "index": 1, "x": 2, "y": 3}', "index_and_coordinates"),
    ('Reason: x\nAction: {"action_type": "scroll", "direction": "diagonal"}', "bad_direction"),
    ('Reason: x\nAction: {"action_type": "input_text", "index": 1}', "missing_text"),
    ('Reason: x\nAction: {"action_type": "status", "goal_status": "unsure"}', "bad_goal_status"),
    ('Reason: x\nAction: {"action_type": "keyboard_enter", "keycode": "ENTER"}', "bad_keycode"),
    ('Reason: x\nAction: {"action_type": "click", "index": 1, "element": "Login"}', "unknown_key"),
    ('{"a": 1}', "no object with an 'action_type'"),
    ("Action: {__import__('os').system('echo pwned')}", "not valid JSON"),
    ("Action: {'action_type': 'click', 'index': (lambda: 1)()}", "not valid JSON"),
    ("Action: {**{'action_type': 'wait'}}", "not valid JSON"),
    ("{" * 5000 + "}" * 5000, "not valid JSON"),
    ("x" * 200_000, "longer than"),
    (None, "not text"),
    (b'{"action_type": "wait"}', "not text"),
]


def test_corpus_has_at_least_forty_outputs() -> None:
    assert len(WELL_FORMED) + len(MALFORMED) >= 40


@pytest.mark.parametrize(("text", "expected"), WELL_FORMED, ids=range(len(WELL_FORMED)))
def test_well_formed_outputs_parse_to_their_action(text: str, expected: dict) -> None:
    result = parse_model_output(text)
    assert result.format_valid, result.error
    assert result.error is None
    assert result.action == validate_action(expected)
    assert result.raw == text


@pytest.mark.parametrize(("text", "fragment"), MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_outputs_are_format_errors_with_a_reason(text: object, fragment: str) -> None:
    result = parse_model_output(text)
    assert not result.format_valid
    assert result.action is None
    assert result.error is not None and fragment in result.error


def test_reason_and_description_are_kept() -> None:
    result = parse_model_output(
        "Reason: The form needs a username.\nDescription: typed the name\n"
        'Action: {"action_type": "input_text", "text": "ann", "index": 1}'
    )
    assert result.reason == "The form needs a username."
    assert result.description == "typed the name"


def test_reason_is_kept_even_when_the_action_is_invalid() -> None:
    result = parse_model_output('Reason: try this\nAction: {"action_type": "fly"}')
    assert not result.format_valid and result.reason == "try this"


@pytest.mark.parametrize(("text", "expected"), WELL_FORMED[:14], ids=range(14))
def test_format_output_round_trips_through_the_parser(text: str, expected: dict) -> None:
    action = validate_action(expected)
    rendered = format_output(action, reason="because", description="a step")
    parsed = parse_model_output(rendered)
    assert parsed.action == action
    assert parsed.reason == "because" and parsed.description == "a step"


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    result = parse_model_output(text)
    assert result.format_valid == (result.action is not None)
    assert result.format_valid or result.error


_fragments = st.sampled_from(
    ["Reason:", "Action:", "Description:", "{", "}", '"', "'", "```", "json", "\\", "action_type", ":", ",",
     "click", "index", "null", "true", "1", "-", "\n", " "]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_fragments, max_size=40).map("".join))
def test_never_raises_on_adversarial_fragments(text: str) -> None:
    result = parse_model_output(text)
    assert result.format_valid == (result.action is not None)


def test_an_answer_typing_a_lone_surrogate_is_a_format_error_not_an_action() -> None:
    # Valid JSON ("\ud800") but no text: typed into a browser it crashed it, and no trajectory could hold it.
    parsed = parse_model_output('Reason: r\nAction: {"action_type": "input_text", "index": 0, "text": "a\\ud800b"}')
    assert parsed.action is None and "lone UTF-16 surrogate" in (parsed.error or "")
