"""The action schema: validation, parsing of model output, and grounded descriptions.

Three jobs that every policy and every backend share, so they live in one place:

* ``validate_action`` applies AndroidWorld's rules to a JSON action and names the rule it broke;
* ``parse_model_output`` reads the ``Reason: … Action: {json}`` text of M3A/T3A-style agents and never
  raises — unreadable output is a format penalty (method.md §4), not a crashed rollout;
* ``describe`` turns an executed action and the screen it acted on into the sentence the milestone
  matcher compares. It is built from the UI element, not the model's words, so a policy cannot earn
  milestone reward by narrating (method.md §3).
"""

from __future__ import annotations

import ast
import json
import re
import reprlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from admire.types import Action, ActionType, Direction, GoalStatus, Observation, UIElement

ACTION_TYPES: tuple[str, ...] = get_args(ActionType)
DIRECTIONS: tuple[str, ...] = get_args(Direction)
GOAL_STATUSES: tuple[str, ...] = get_args(GoalStatus)
POINTER_ACTIONS = ("click", "double_tap", "long_press")
ACTION_KEYS = tuple(Action.model_fields)

MAX_TEXT_CHARS = 2000
"""Longest ``text`` of an ``input_text`` or ``answer``. MiniWoB++ types about 2 ms a character (measured:
2000 characters in 4 s, 4000 in 8 s on a loaded 2-core machine), so an unbounded text kept a device
busy for minutes and then killed it (issue 13: 60 KB, 60 s). The longest texts real tasks need (a
note, a message, an address) are a few hundred characters; 2000 leaves room and types in seconds,
far inside the server's call timeout."""
MAX_APP_NAME_CHARS = 100
MAX_KEYCODE_CHARS = 64
MAX_INDEX = 100_000
"""No screen has this many elements; a bound keeps an absurd index (a 5000-digit string) cheap to refuse."""

# Accept the spellings models actually produce for the statuses AndroidWorld knows.
_STATUS_ALIASES = {"complete": "complete", "completed": "complete", "success": "complete", "done": "complete",
                   "task_complete": "complete", "infeasible": "infeasible",
                   "impossible": "infeasible", "task_impossible": "infeasible"}


class ActionError(ValueError):
    """A JSON action that breaks a rule of the schema; ``rule`` names which one."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{message} [rule: {rule}]")
        self.rule = rule
        self.message = message


def validate_action(action: Mapping[str, Any] | Action) -> Action:
    """Check a JSON action against AndroidWorld's rules and return it as an ``Action``.

    Rules (each ``ActionError.rule``): ``not_an_object``, ``missing_action_type``,
    ``unknown_action_type``, ``unknown_key``, ``index_and_coordinates``, ``bad_index``,
    ``bad_coordinates``, ``missing_target``, ``bad_direction``, ``missing_direction``, ``missing_text``,
    ``bad_text``, ``text_too_long``, ``missing_app_name``, ``bad_goal_status``, ``missing_goal_status``,
    ``bad_keycode``, ``bad_clear_text``.

    Every string is bounded (text by MAX_TEXT_CHARS, app_name and keycode too), so one action cannot
    occupy a device for long: a policy's too-long text is a format-invalid action (a format penalty),
    a client's a 422 invalid_action. Messages show only a short excerpt of a bad value, however large.
    """
    if isinstance(action, Action):
        action = action.as_dict()
    if not isinstance(action, Mapping):
        raise ActionError("not_an_object", f"an action must be a JSON object, got {type(action).__name__}")
    data = dict(action)
    kind = data.get("action_type")
    if kind is None:
        raise ActionError("missing_action_type", "the action has no 'action_type'")
    if not isinstance(kind, str) or kind not in ACTION_TYPES:
        raise ActionError("unknown_action_type",
                          f"unknown action_type {_show(kind)}; expected one of {', '.join(ACTION_TYPES)}")
    unknown = sorted(_clip(str(k), 40) for k in data if k not in ACTION_KEYS)
    if unknown:
        listed = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ActionError("unknown_key", f"unknown key(s) {listed} in a {kind} action")
    out: dict[str, Any] = {"action_type": kind}

    index, x, y = data.get("index"), data.get("x"), data.get("y")
    if index is not None and (x is not None or y is not None):
        raise ActionError("index_and_coordinates", "give either an index or <x, y>, not both")
    if index is not None:
        out["index"] = _as_int(index, "bad_index", "index")
        if not 0 <= out["index"] <= MAX_INDEX:
            raise ActionError("bad_index", f"index must be between 0 and {MAX_INDEX}, got {_show(out['index'])}")
    if x is not None or y is not None:
        if x is None or y is None:
            raise ActionError("bad_coordinates", "a point needs both x and y")
        out["x"], out["y"] = _as_number(x, "x"), _as_number(y, "y")
    if kind in POINTER_ACTIONS and "index" not in out and "x" not in out:
        raise ActionError("missing_target", f"a {kind} action needs an index or <x, y>")

    direction = data.get("direction")
    if direction is not None:
        if not isinstance(direction, str) or direction.lower() not in DIRECTIONS:
            raise ActionError("bad_direction",
                              f"invalid direction {_show(direction)}; expected one of {', '.join(DIRECTIONS)}")
        out["direction"] = direction.lower()
    elif kind in ("scroll", "swipe"):
        raise ActionError("missing_direction", f"a {kind} action needs a direction")

    text = data.get("text")
    if text is not None:
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            raise ActionError("bad_text", f"text must be a string, got {type(text).__name__}")
        out["text"] = _bounded(text if isinstance(text, str) else _number_text(text), "text", MAX_TEXT_CHARS,
                               "text_too_long")
    elif kind in ("input_text", "answer"):
        raise ActionError("missing_text", f"an {kind} action needs text")

    app = data.get("app_name")
    if app is not None:
        if not isinstance(app, str) or not app.strip():
            raise ActionError("missing_app_name", "app_name must be a non-empty string")
        out["app_name"] = _bounded(app.strip(), "app_name", MAX_APP_NAME_CHARS, "missing_app_name")
    elif kind == "open_app":
        raise ActionError("missing_app_name", "an open_app action needs app_name")

    status = data.get("goal_status")
    if status is not None:
        norm = _STATUS_ALIASES.get(str(status).strip().lower()) if isinstance(status, str) else None
        if norm is None:
            raise ActionError("bad_goal_status",
                              f"invalid goal_status {_show(status)}; expected complete or infeasible")
        out["goal_status"] = norm
    elif kind == "status":
        raise ActionError("missing_goal_status", "a status action needs goal_status")

    keycode = data.get("keycode")
    if keycode is not None:
        if not isinstance(keycode, str) or not keycode.startswith("KEYCODE_"):
            raise ActionError("bad_keycode", f"invalid keycode {_show(keycode)}: it must start with KEYCODE_")
        out["keycode"] = _bounded(keycode, "keycode", MAX_KEYCODE_CHARS, "bad_keycode")

    clear = data.get("clear_text")
    if clear is not None:
        if not isinstance(clear, bool):
            raise ActionError("bad_clear_text", f"clear_text must be true or false, got {_show(clear)}")
        out["clear_text"] = clear
    return Action(**out)


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 40
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict = 2, 4, 4


def _show(value: Any) -> str:
    """A short excerpt of a bad value for a message: an action may be a megabyte of text or nesting."""
    return _SHOWN.repr(value)


def _bounded(text: str, name: str, limit: int, rule: str) -> str:
    if len(text) > limit:
        raise ActionError(rule, f"{name} is {len(text)} characters long; the limit is {limit}")
    return text


def _number_text(value: int | float) -> str:
    """A number typed as text, stringified as AndroidWorld does; bounded like any text."""
    try:
        return str(value)
    except ValueError:  # an int too long to print (over 4300 digits)
        raise ActionError("text_too_long", f"text is a number too long to type; the limit is {MAX_TEXT_CHARS} "
                                           "characters") from None


def _as_int(value: Any, rule: str, name: str) -> int:
    if isinstance(value, bool):
        raise ActionError(rule, f"{name} must be an integer, got {_show(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and len(value) <= 32 and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise ActionError(rule, f"{name} must be an integer, got {_show(value)}")


def _as_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or (isinstance(value, str) and len(value) > 64):
        raise ActionError("bad_coordinates", f"{name} must be a number, got {_show(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ActionError("bad_coordinates", f"{name} must be a finite number, got {_show(value)}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ActionError("bad_coordinates", f"{name} must be finite, got {_show(value)}")
    return number


# --------------------------------------------------------------------------------------------------
# Parsing model output
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParseResult:
    """What a model said, read as well as it can be. ``error`` says why when it is not valid."""

    raw: str
    action: Action | None
    reason: str | None = None
    description: str | None = None
    error: str | None = None

    @property
    def format_valid(self) -> bool:
        return self.action is not None


_MARKER = re.compile(r"(?i)(?<![\w\"'])(reason|thought|thinking|description|action)\s*[*_]*\s*:")
_FENCE = re.compile(r"```[ \t]*(?:json|python)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
MAX_OUTPUT_CHARS = 100_000


def parse_model_output(text: object) -> ParseResult:
    """Read ``Reason: … Action: {json}`` output; never raises.

    Accepts an optional ``Description:`` line, code fences, single-quoted or Python-literal dicts,
    braces inside string values and chatter around the object. When an ``Action:`` marker exists the
    object after it wins; otherwise the last object in the text that looks like an action.
    """
    try:
        return _parse(text)
    except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
        raw = text if isinstance(text, str) else repr(text)
        return ParseResult(raw=raw, action=None, error=f"unreadable output ({type(exc).__name__})")


def _parse(text: object) -> ParseResult:
    if not isinstance(text, str):
        return ParseResult(raw=repr(text), action=None, error=f"output is not text ({type(text).__name__})")
    if not text.strip():
        return ParseResult(raw=text, action=None, error="empty output")
    if len(text) > MAX_OUTPUT_CHARS:
        return ParseResult(raw=text[:MAX_OUTPUT_CHARS], action=None,
                           error=f"output longer than {MAX_OUTPUT_CHARS} characters")
    sections, action_tails = _sections(text)
    reason = sections.get("reason") or sections.get("thought") or sections.get("thinking")
    description = sections.get("description")
    candidates: list[str] = []
    for tail in reversed(action_tails):  # the last 'Action:' followed by an object wins
        candidates = _objects(tail)
        if candidates:
            break
    marked = bool(candidates)
    if not marked:
        candidates = list(reversed(_objects(text)))
    if not candidates:
        where = "after 'Action:'" if action_tails else "in the output"
        return ParseResult(raw=text, action=None, reason=reason, description=description,
                           error=f"no JSON object {where}")
    first_error = None
    for candidate in candidates:
        data, err = _load_object(candidate)
        if data is None:
            first_error = first_error or err
            if marked:
                break
            continue
        if not marked and "action_type" not in data:
            continue
        try:
            action = validate_action(data)
        except ActionError as exc:
            return ParseResult(raw=text, action=None, reason=reason, description=description,
                               error=f"invalid action: {exc}")
        return ParseResult(raw=text, action=action, reason=reason, description=description)
    return ParseResult(raw=text, action=None, reason=reason, description=description,
                       error=first_error or "no object with an 'action_type' in the output")


def _sections(text: str) -> tuple[dict[str, str], list[str]]:
    """``Name: value`` sections (first occurrence wins) and the text after each ``Action:`` marker."""
    marks = list(_MARKER.finditer(text))
    sections: dict[str, str] = {}
    action_tails: list[str] = []
    for i, mark in enumerate(marks):
        name = mark.group(1).lower()
        if name == "action":
            action_tails.append(text[mark.end():])
            continue
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        value = text[mark.end():end].strip()
        if value and name not in sections:
            sections[name] = value
    return sections, action_tails


def _objects(text: str) -> list[str]:
    """Balanced ``{…}`` substrings, outermost only, in order; fenced blocks are searched first."""
    found: list[str] = []
    for fence in _FENCE.finditer(text):
        found.extend(_balanced(fence.group(1)))
    found.extend(obj for obj in _balanced(text) if obj not in found)
    return found


def _balanced(text: str) -> list[str]:
    out: list[str] = []
    depth, start, quote, escaped = 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'" and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
    if depth > 0 and start >= 0:
        out.append(text[start:] + "}" * depth)  # a truncated object: try closing it
    return out


def _load_object(candidate: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        value = json.loads(candidate)
    except (ValueError, RecursionError):
        try:
            with warnings.catch_warnings():  # model text is full of odd escapes ("\-"): not our warning
                warnings.simplefilter("ignore")
                tree = ast.parse(candidate.strip(), mode="eval")
            value = _literal(tree.body)
        except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
            return None, "action is not valid JSON or a Python literal dict"
    if not isinstance(value, dict):
        return None, "action is not a JSON object"
    return value, None


_NAMES = {"true": True, "false": False, "null": None, "none": None}


def _literal(node: ast.AST) -> Any:
    """``ast.literal_eval`` that also knows JSON's ``true/false/null``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id.lower() in _NAMES:
        return _NAMES[node.id.lower()]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"not a literal: {type(node).__name__}")


def format_output(action: Action, reason: str = "", description: str | None = None) -> str:
    """The text a well-behaved model writes for ``action``; the inverse of ``parse_model_output``."""
    lines = [f"Reason: {reason}".rstrip()]
    if description:
        lines.append(f"Description: {description}")
    lines.append("Action: " + json.dumps(action.as_dict(), ensure_ascii=False))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Grounded descriptions
# --------------------------------------------------------------------------------------------------

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
            return _clip(" ".join(value.split()))
    if element.resource_id:
        rid = element.resource_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        rid = re.sub(r"[_\-]+", " ", rid).strip()
        if rid:
            return _clip(rid)
    if element.is_editable and element.text and element.text.strip():
        return _clip(" ".join(element.text.split()))
    return None


def element_phrase(element: UIElement) -> str:
    label, role = element_label(element), element_role(element)
    return f"the '{label}' {role}" if label else f"an unlabelled {role}"


def _clip(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


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
        typed = f'typed "{_clip(action.text or "")}"'
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
        return f'answered "{_clip(action.text or "")}"'
    fixed = {
        "navigate_home": "went to the home screen",
        "navigate_back": "went back",
        "keyboard_enter": "pressed Enter",
        "wait": "waited",
        "unknown": "did an unknown action",
    }
    return fixed[kind]
