"""The prompt a language-model policy reads: chat messages in the style of AndroidWorld's M3A agent.

A step's prompt is rebuilt from plain data — the observation and the steps before it — every time it is
needed: once when the policy acts and again whenever PPO scores what it wrote. PPO's ratio is only
meaningful if both see the same tokens, so :func:`build_messages` is a pure function of its inputs
(no clock, no randomness, no dict-order surprises), and it never reads anything a task keeps hidden:
an ``Observation`` carries no ground truth, and of a past ``Step`` only the action, the grounded
description, whether the screen changed and the parse error are shown (never ``info``).

The shape follows M3A (android_world's ``m3a.py``), in this project's own words: a system turn with the
action space and the answer format, and a user turn with the goal, the screen's numbered elements
(the number is the ``index`` an action uses), a window of recent steps with what each did, and, for a
vision-language model, the screenshot as an image part. The model answers in three lines::

    Reason: <one line>
    Action: {json}
    Description: <what the action does, one line>

which ``admire.actions.parse_model_output`` reads (the description feeds ``description: model|both``).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from admire.actions import MAX_LABEL_CHARS, element_label, element_role
from admire.actions.schema import clip
from admire.types import Action, Observation, Screenshot, Step, UIElement

if TYPE_CHECKING:  # PIL is imported only when a screenshot is attached
    from PIL.Image import Image

DEFAULT_HISTORY_WINDOW = 4
"""Steps of history shown; M3A shows its whole summary history, but prompts grow with every step and a
small model reads a short window better."""

ACTION_SPACE: tuple[tuple[dict[str, Any], str], ...] = (
    ({"action_type": "click", "index": 0},
     'tap element 0 (or give "x" and "y" in screen pixels instead of "index")'),
    ({"action_type": "double_tap", "index": 0}, "tap element 0 twice"),
    ({"action_type": "long_press", "index": 0}, "press and hold element 0"),
    ({"action_type": "input_text", "text": "hello", "index": 0},
     'type "hello" into element 0 (add "clear_text": true to replace what it holds)'),
    ({"action_type": "keyboard_enter"}, "press Enter"),
    ({"action_type": "scroll", "direction": "down"},
     'scroll the screen up, down, left or right (add "index" to scroll one element)'),
    ({"action_type": "swipe", "direction": "left"}, "swipe across the screen up, down, left or right"),
    ({"action_type": "navigate_home"}, "go to the home screen"),
    ({"action_type": "navigate_back"}, "go back"),
    ({"action_type": "open_app", "app_name": "Settings"}, "open an app by its name"),
    ({"action_type": "wait"}, "wait for the screen to update"),
    ({"action_type": "answer", "text": "42"}, "answer a question the goal asks"),
    ({"action_type": "status", "goal_status": "complete"},
     'stop: the goal is done ("infeasible": it cannot be done)'),
)
"""One example per action type of the schema (``unknown`` excepted: it is what a backend records, not
something to choose), each valid under ``validate_action``, with what it does."""

ANSWER_FORMAT = (
    "Reason: <why this action, in one line>\n"
    "Action: <one JSON object from the list above>\n"
    "Description: <what the action does, in one line>"
)


def system_prompt() -> str:
    """The system turn: the job, the action space (one line per action type) and the answer format."""
    actions = "\n".join(f"- {json.dumps(example, ensure_ascii=False)}: {meaning}" for example, meaning in ACTION_SPACE)
    return (
        "You operate a graphical user interface (a web page or a phone screen) to reach a user's goal. "
        "Each turn you see the goal, the elements on the screen, numbered, and your previous steps; "
        "you answer with the one next action.\n\n"
        f"Actions, as JSON objects (\"index\" is an element's number):\n{actions}\n\n"
        f"Answer in exactly these three lines and nothing else:\n{ANSWER_FORMAT}"
    )


def element_line(index: int, element: UIElement) -> str:
    """``3: field "Username" holds "ann" (focused)`` — role and label from ``admire.actions``, then state."""
    label = element_label(element)
    parts = [f"{index}: {element_role(element)}", json.dumps(label, ensure_ascii=False) if label else "(no label)"]
    if element.is_editable and element.text and element.text.strip() and element.text.strip() != label:
        parts.append("holds " + json.dumps(clip(" ".join(element.text.split()), MAX_LABEL_CHARS), ensure_ascii=False))
    states = []
    if element.is_checkable:
        states.append("checked" if element.is_checked else "unchecked")
    for flag, word in ((element.is_selected, "selected"), (element.is_focused, "focused"),
                       (element.is_editable, "editable"), (element.is_scrollable, "scrollable"),
                       (not element.is_enabled, "disabled"), (not element.is_visible, "hidden")):
        if flag:
            states.append(word)
    if states:
        parts.append(f"({', '.join(states)})")
    return " ".join(parts)


def history_line(number: int, step: Step) -> str:
    """``Step 2: {json} -> clicked the 'Login' button`` (or the parse error, or that nothing changed)."""
    if step.action is None:
        return f"Step {number}: format error ({step.parse_error or 'no valid action'})"
    action = json.dumps(step.action.as_dict(), ensure_ascii=False)
    result = step.grounded_description or _action_name(step.action)
    if not step.screen_changed:
        result += " (the screen did not change)"
    return f"Step {number}: {action} -> {result}"


def user_prompt(observation: Observation, history: Sequence[Step], history_window: int) -> str:
    """The user turn's text: goal, numbered elements, the last ``history_window`` steps, the question."""
    elements = "\n".join(element_line(i, e) for i, e in enumerate(observation.ui_elements)) or "(none)"
    shown = list(history)[-history_window:] if history_window > 0 else []
    first = len(history) - len(shown) + 1
    if not history:
        steps = " none yet (this is the first step)"
    elif not shown:
        steps = f" {len(history)} (not shown)"
    else:
        skipped = f"\n({first - 1} earlier not shown)" if first > 1 else ""
        steps = skipped + "".join("\n" + history_line(first + i, step) for i, step in enumerate(shown))
    return (f"Goal: {observation.goal}\n\n"
            f"Elements on the screen:\n{elements}\n\n"
            f"Previous steps:{steps}\n\n"
            "What is the next action?")


def build_messages(observation: Observation, history: Sequence[Step], *,
                   history_window: int = DEFAULT_HISTORY_WINDOW, screenshot: bool = False,
                   max_pixels: int | None = None) -> list[dict[str, Any]]:
    """Chat messages for ``apply_chat_template``: a system turn and a user turn (see the module docstring).

    With ``screenshot`` and a screenshot in the observation, the user turn is a list of parts — the image
    (a PIL image, as Hugging Face processors take it) then the text; otherwise its content is a string.
    A screenshot whose bytes were not kept (``Screenshot.stored()``) cannot be shown, and guessing would
    give a prompt other than the one acted on: it raises ``ValueError``. ``max_pixels`` downscales the
    image (see :func:`screenshot_image`).
    """
    if history_window < 0:
        raise ValueError(f"history_window must be 0 or more, got {history_window}")
    text = user_prompt(observation, history, history_window)
    content: str | list[dict[str, Any]] = text
    if screenshot and observation.screenshot is not None:
        content = [{"type": "image", "image": screenshot_image(observation.screenshot, max_pixels)},
                   {"type": "text", "text": text}]
    return [{"role": "system", "content": system_prompt()}, {"role": "user", "content": content}]


def screenshot_image(screenshot: Screenshot, max_pixels: int | None = None) -> Image:
    """The screenshot as an RGB PIL image; one without bytes is refused (see :func:`build_messages`).

    With ``max_pixels``, a larger image is scaled down (aspect ratio kept) to at most that many pixels. A
    vision-language model pays for pixels in tokens — Qwen2.5-VL one token per 28 × 28 patch — so a
    1080 × 2400 phone screenshot would be about 3,300 image tokens at full size; downscaling here, before
    the processor, keeps that cost a setting of the policy rather than of the processor files.
    """
    if max_pixels is not None and max_pixels < 1:
        raise ValueError(f"max_pixels must be at least 1 (or None for no limit), got {max_pixels}")
    if screenshot.png is None:
        raise ValueError(f"screenshot {screenshot.ref} has no image bytes (only its reference was kept); keep "
                         "screenshots inline in the observations a vision-language policy scores")
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(screenshot.png)) as image:
        rgb = image.convert("RGB")
    width, height = rgb.size
    if max_pixels is None or width * height <= max_pixels:
        return rgb
    scale = math.sqrt(max_pixels / (width * height))
    size = (max(1, math.floor(width * scale)), max(1, math.floor(height * scale)))
    return rgb.resize(size, PILImage.Resampling.LANCZOS)


def _action_name(action: Action) -> str:
    return action.action_type.replace("_", " ")
