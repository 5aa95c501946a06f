"""The action schema: AndroidWorld's JSON actions, their limits, and ``validate_action``.

``validate_action`` applies AndroidWorld's rules to a JSON action and names the rule it broke. Every
policy and every backend goes through it: a policy's output after parsing (``actions.parsing``), a client's
action at the server, an oracle's demonstration.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from typing import Any, get_args

from admire.types import Action, ActionType, Direction, GoalStatus

ACTION_TYPES: tuple[str, ...] = get_args(ActionType)
DIRECTIONS: tuple[str, ...] = get_args(Direction)
GOAL_STATUSES: tuple[str, ...] = get_args(GoalStatus)
POINTER_ACTIONS = ("click", "double_tap", "long_press")
ACTION_KEYS = tuple(Action.model_fields)

MAX_TEXT_CHARS = 2000
"""Longest ``text`` of an ``input_text`` or ``answer``. MiniWoB++ types about 2 ms a character (measured:
2000 characters in 4 s, 4000 in 8 s on a loaded 2-core machine), so an unbounded text kept a device
busy for minutes and then killed it (60 KB took 60 s; docs/decisions.md#d9). The longest texts real tasks need (a
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
    ``bad_text``, ``text_too_long``, ``missing_app_name``, ``app_name_too_long``, ``bad_goal_status``,
    ``missing_goal_status``, ``bad_keycode``, ``bad_clear_text``.

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
    unknown = sorted(clip(str(k), 40) for k in data if k not in ACTION_KEYS)
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
        out["app_name"] = _bounded(app.strip(), "app_name", MAX_APP_NAME_CHARS, "app_name_too_long")
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


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Control characters that are not text to type (tab, newline and carriage return are)."""
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 40
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict = 2, 4, 4


def _show(value: Any) -> str:
    """A short excerpt of a bad value for a message: an action may be a megabyte of text or nesting."""
    return _SHOWN.repr(value)


def _bounded(text: str, name: str, limit: int, rule: str) -> str:
    """``text`` when it is at most ``limit`` characters of real Unicode that a keyboard types: a lone UTF-16
    surrogate (valid JSON, ``"\\ud800"``) typed into a browser crashed it, and no JSON trajectory can hold
    one; a control character other than tab and newline (NUL, escape, C1 codes) is no key either."""
    if len(text) > limit:
        raise ActionError(rule, f"{name} is {len(text)} characters long; the limit is {limit}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ActionError("bad_text", f"{name} holds a lone UTF-16 surrogate, which is not text") from None
    control = _CONTROL.search(text)
    if control is not None:
        raise ActionError("bad_text", f"{name} holds the control character U+{ord(control.group()):04X}, which no "
                                      "keyboard types")
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


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
