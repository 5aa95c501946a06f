"""The lm policy's prompt: determinism, element numbering, the history window, no ground truth, images."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest

from admire.actions import ACTION_TYPES, validate_action
from admire.agent.prompts import ACTION_SPACE, build_messages, system_prompt
from admire.types import Action, Observation, Screenshot, Step, UIElement

ELEMENTS = (
    UIElement(text="Login", class_name="button", is_clickable=True),
    UIElement(text="ann", hint_text="Username", class_name="input_text", is_editable=True, is_focused=True),
    UIElement(text="Remember me", class_name="input_checkbox", is_checkable=True, is_checked=True),
    UIElement(text="Help", class_name="a", is_enabled=False),
)
SCREEN = Observation(goal='Log in as "ann".', ui_elements=ELEMENTS)


def png(seed: int) -> Screenshot:
    from PIL import Image

    pixels = (np.random.default_rng(seed).random((21, 16, 3)) * 255).astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return Screenshot.from_png(buffer.getvalue(), 16, 21)


def step(index: int, action: Action | None, description: str = "", changed: bool = True,
         error: str | None = None, info: dict | None = None) -> Step:
    return Step(index=index, observation=SCREEN, raw_output="...", action=action, parse_error=error,
                format_valid=action is not None, grounded_description=description, screen_changed=changed,
                info=info or {})


def user_text(messages: list[dict]) -> str:
    content = messages[1]["content"]
    return content if isinstance(content, str) else next(p["text"] for p in content if p["type"] == "text")


def test_the_same_inputs_give_the_same_messages():
    history = [step(0, Action(action_type="click", index=0), "clicked the 'Login' button")]
    assert build_messages(SCREEN, history) == build_messages(SCREEN, list(history))
    assert json.dumps(build_messages(SCREEN, history)) == json.dumps(build_messages(SCREEN, tuple(history)))


def test_the_system_turn_lists_every_action_type_once_with_a_valid_example_and_the_answer_format():
    listed = [example["action_type"] for example, _ in ACTION_SPACE]
    assert sorted(listed) == sorted(t for t in ACTION_TYPES if t != "unknown")
    for example, _ in ACTION_SPACE:
        assert validate_action(example).as_dict() == example  # the prompt never shows an invalid action
    text = system_prompt()
    assert text.endswith("Reason: <why this action, in one line>\nAction: <one JSON object from the list above>\n"
                         "Description: <what the action does, in one line>")
    assert all(json.dumps(example) in text for example, _ in ACTION_SPACE)


def test_element_lines_are_numbered_by_the_index_an_action_uses_with_role_label_and_state():
    lines = user_text(build_messages(SCREEN, [])).splitlines()
    shown = [line for line in lines if re.match(r"\d+: ", line)]
    assert shown == [
        '0: button "Login"',
        '1: field "Username" holds "ann" (focused, editable)',
        '2: checkbox "Remember me" (checked)',
        '3: link "Help" (disabled)',
    ]


def test_the_history_shows_the_last_window_of_steps_with_what_each_did():
    history = [
        step(0, Action(action_type="click", index=1), "clicked the 'Username' field"),
        step(1, None, error="no JSON object after 'Action:'"),
        step(2, Action(action_type="input_text", index=1, text="ann"), 'typed "ann" into the field'),
        step(3, Action(action_type="click", index=3), "clicked the 'Help' link", changed=False),
    ]
    text = user_text(build_messages(SCREEN, history, history_window=3))
    assert "(1 earlier not shown)" in text
    assert "Step 1:" not in text
    assert "Step 2: format error (no JSON object after 'Action:')" in text
    assert 'Step 3: {"action_type": "input_text", "index": 1, "text": "ann"} -> typed "ann" into the field' in text
    assert "Step 4: " in text and "clicked the 'Help' link (the screen did not change)" in text
    assert "Previous steps: none yet" in user_text(build_messages(SCREEN, []))
    assert "Previous steps: 4 (not shown)" in user_text(build_messages(SCREEN, history, history_window=0))
    with pytest.raises(ValueError, match="history_window"):
        build_messages(SCREEN, history, history_window=-1)


def test_nothing_the_env_keeps_in_a_steps_info_reaches_the_prompt():
    secret = "XYZZY-ground-truth"
    history = [step(0, Action(action_type="click", index=0), "clicked the 'Login' button",
                    info={"fields": {"password": secret}, "raw_reward": 0})]
    assert secret not in json.dumps(build_messages(SCREEN, history, screenshot=True), default=str)


def test_a_vision_language_prompt_puts_the_screenshot_before_the_text_and_text_models_get_a_string():
    screen = SCREEN.model_copy(update={"screenshot": png(0)})
    parts = build_messages(screen, [], screenshot=True)[1]["content"]
    assert [p["type"] for p in parts] == ["image", "text"]
    image = parts[0]["image"]
    assert (image.mode, image.size) == ("RGB", (16, 21))
    again = build_messages(screen, [], screenshot=True)[1]["content"][0]["image"]
    assert np.array_equal(np.asarray(image), np.asarray(again))
    assert isinstance(build_messages(screen, [])[1]["content"], str)  # screenshot off: no image part
    assert isinstance(build_messages(SCREEN, [], screenshot=True)[1]["content"], str)  # no screenshot to show


def test_a_screenshot_without_its_bytes_is_refused_rather_than_silently_dropped():
    screen = SCREEN.model_copy(update={"screenshot": png(0).stored()})
    with pytest.raises(ValueError, match="no image bytes"):
        build_messages(screen, [], screenshot=True)


def test_a_screenshot_above_max_pixels_is_scaled_down_keeping_its_aspect_and_a_small_one_is_left_alone():
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (1080, 2400), (10, 200, 30)).save(buffer, format="PNG")  # a phone screenshot
    screen = SCREEN.model_copy(update={"screenshot": Screenshot.from_png(buffer.getvalue(), 1080, 2400)})
    image = build_messages(screen, [], screenshot=True, max_pixels=1280 * 28 * 28)[1]["content"][0]["image"]
    width, height = image.size
    assert width * height <= 1280 * 28 * 28
    assert width * height > 0.99 * 1280 * 28 * 28  # scaled to the limit, not below it
    assert abs(width / height - 1080 / 2400) < 0.01
    assert image.getpixel((width // 2, height // 2)) == (10, 200, 30)
    full = build_messages(screen, [], screenshot=True)[1]["content"][0]["image"]
    assert full.size == (1080, 2400)  # no limit given: the screenshot as taken
    small = build_messages(screen, [], screenshot=True, max_pixels=1080 * 2400)[1]["content"][0]["image"]
    assert small.size == (1080, 2400)  # exactly at the limit: untouched
    with pytest.raises(ValueError, match="max_pixels"):
        build_messages(screen, [], screenshot=True, max_pixels=0)
