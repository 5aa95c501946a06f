"""Grounded descriptions: the sentence for an executed action, built from the screen it acted on.

``describe`` is what the milestone matcher compares. It is built from the UI element, not the model's
words, so a policy cannot earn milestone reward by narrating (method.md §3).
"""

from __future__ import annotations

import re

from admire.actions.schema import clip
from admire.types import Action, Observation, UIElement

# Roles by class name: Android widget classes and MiniWoB++ DOM tags (lower-cased, last dotted part).
_ROLES: dict[str, str] = {
    "button": "button", "imagebutton": "button", "floatingactionbutton": "button",
    "materialbutton": "button", "input_button": "button", "input_submit": "button",
    "input_reset": "button",
    "edittext": "field", "autocompletetextview": "field", "input_text": "field",
    "input_password": "field", "input_email": "field", "input_number": "field", "input_tel": "field",
    "input_search": "field", "input_url": "field", "input_date": "field", "input_time": "field",
    "textarea": "text area",
    "checkbox": "checkbox", "input_checkbox": "checkbox", "checkedtextview": "checkbox",
    "radiobutton": "radio button", "input_radio": "radio button",
    "switch": "switch", "switchcompat": "switch", "togglebutton": "toggle",
    "spinner": "dropdown", "select": "dropdown",
    "a": "link", "tab": "tab", "tabview": "tab", "li": "item",
    "recyclerview": "list", "listview": "list", "ul": "list", "ol": "list", "scrollview": "list",
    "imageview": "image", "img": "image",
    "textview": "text", "t": "text", "span": "text", "p": "text", "label": "label",
    "h1": "heading", "h2": "heading", "h3": "heading", "h4": "heading",
    "div": "element", "view": "element", "viewgroup": "element", "linearlayout": "element",
    "framelayout": "element", "relativelayout": "element",
}
MAX_LABEL_CHARS = 60


def _label(text: str) -> str:
    return clip(text, MAX_LABEL_CHARS)


def element_role(element: UIElement) -> str:
    name = (element.class_name or "").strip().lower()
    name = name.rsplit(".", 1)[-1]
    role = _ROLES.get(name)
    if role is None:
        if element.is_editable:
            role = "field"
        elif element.is_checkable:
            role = "checkbox"
        elif element.is_scrollable:
            role = "list"
        elif "button" in name:
            role = "button"
        else:
            role = "element"
    return role


def element_label(element: UIElement) -> str | None:
    """The name a person would use: visible text, else content description, hint or resource id.

    An editable field's text is what was typed into it, not its name, so a field is named by its
    label (hint, description) first: "typed "ann" into the 'Name' field" stays the same sentence
    whatever the field held before, which is what lets milestones match across episodes.
    """
    values = (element.text, element.content_description, element.hint_text, element.tooltip)
    if element.is_editable:
        values = (element.hint_text, element.content_description, element.tooltip, None)
    for value in values:
        if value and value.strip():
            return _label(" ".join(value.split()))
    if element.resource_id:
        rid = element.resource_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        rid = re.sub(r"[_\-]+", " ", rid).strip()
        if rid:
            return _label(rid)
    if element.is_editable and element.text and element.text.strip():
        return _label(" ".join(element.text.split()))
    return None


def element_phrase(element: UIElement) -> str:
    label, role = element_label(element), element_role(element)
    return f"the '{label}' {role}" if label else f"an unlabelled {role}"


def target_element(action: Action, observation: Observation | None) -> UIElement | None:
    """The element an action acts on: by index, else the smallest element under its point."""
    if observation is None:
        return None
    elements = observation.ui_elements
    if action.index is not None:
        return elements[action.index] if 0 <= action.index < len(elements) else None
    if action.x is None or action.y is None:
        return None
    under = [e for e in elements if e.contains(action.x, action.y) and e.bbox is not None]
    if not under:
        return None

    def area(e: UIElement) -> float:
        x_min, x_max, y_min, y_max = e.bbox  # type: ignore[misc]
        return (x_max - x_min) * (y_max - y_min)

    return min(under, key=area)


_POINTER_VERBS = {"click": "clicked", "double_tap": "double-tapped", "long_press": "long-pressed"}


def describe(action: Action, observation: Observation | None = None) -> str:
    """The grounded sentence for an executed action, built from the screen it acted on.

    ``observation`` is the screen *before* the action, so a click on a checked box reads "unchecked".
    """
    kind = action.action_type
    element = target_element(action, observation)
    if kind in _POINTER_VERBS:
        if element is None and action.index is not None:
            return f"{_POINTER_VERBS[kind]} element {action.index}, which is not on the screen"
        if element is None:
            return f"{_POINTER_VERBS[kind]} at ({action.x or 0:.0f}, {action.y or 0:.0f})"
        if kind == "click" and element.is_checkable:
            verb = "unchecked" if element.is_checked else "checked"
            return f"{verb} {element_phrase(element)}"
        return f"{_POINTER_VERBS[kind]} {element_phrase(element)}"
    if kind == "input_text":
        # clear_text does not change the sentence: both ways reach the same milestone.
        typed = f'typed "{_label(action.text or "")}"'
        return typed if element is None else f"{typed} into {element_phrase(element)}"
    if kind in ("scroll", "swipe"):
        verb = "scrolled" if kind == "scroll" else "swiped"
        where = f" in {element_phrase(element)}" if element is not None else ""
        return f"{verb} {action.direction}{where}"
    if kind == "open_app":
        return f"opened the {action.app_name} app"
    if kind == "status":
        return f"declared the task {action.goal_status}"
    if kind == "answer":
        return f'answered "{_label(action.text or "")}"'
    fixed = {
        "navigate_home": "went to the home screen",
        "navigate_back": "went back",
        "keyboard_enter": "pressed Enter",
        "wait": "waited",
        "unknown": "did an unknown action",
    }
    return fixed[kind]
