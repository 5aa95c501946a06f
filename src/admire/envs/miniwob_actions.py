"""AndroidWorld's JSON actions as MiniWoB++ actions.

Planning is separate from doing: :func:`plan_action` turns an ``Action`` and the elements of the last
observation into a list of :class:`MiniwobOp` (one per miniwob action), without a browser, so every
rule here is checked by fast unit tests; the env only executes the ops.

* pointer actions by index use ``CLICK_ELEMENT`` on a positive DOM ref (works even when the element
  is scrolled out of view), and ``CLICK_COORDS`` at the bbox centre for text pseudo-elements, whose
  negative refs cannot be clicked; x/y actions click the point;
* ``input_text`` focuses (the indexed element, or whatever has focus), optionally clears with
  Ctrl+A, Backspace, and types;
* ``scroll`` turns the wheel over the element, the point, or the task area; ``swipe`` is a scroll the
  other way round (a finger moving up scrolls the content down);
* ``status`` ends the episode; ``wait`` sleeps; the phone-only actions do nothing but still cost a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from admire.envs.base import InvalidAction
from admire.envs.miniwob_dom import ElementTarget
from admire.types import Action

HORIZONTAL_SCROLLS = ("SCROLL_LEFT_COORDS", "SCROLL_RIGHT_COORDS")
SLEEP = "SLEEP"
_SCROLL_KIND = {"up": "SCROLL_UP_COORDS", "down": "SCROLL_DOWN_COORDS",
                "left": "SCROLL_LEFT_COORDS", "right": "SCROLL_RIGHT_COORDS"}
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
NO_OP_ACTIONS = ("navigate_home", "navigate_back", "open_app", "answer", "unknown")


@dataclass(frozen=True)
class MiniwobOp:
    """One miniwob action (``kind`` is a ``miniwob.action.ActionTypes`` name), or one of ours:
    ``SCROLL_LEFT_COORDS``/``SCROLL_RIGHT_COORDS`` (miniwob scrolls only vertically) and ``SLEEP``."""

    kind: str
    ref: int | None = None
    coords: tuple[float, float] | None = None
    text: str | None = None
    key: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class ActionPlan:
    ops: tuple[MiniwobOp, ...]
    ends_episode: bool = False


def plan_action(
    action: Action,
    targets: Sequence[ElementTarget],
    viewport: tuple[float, float],
    page_point: tuple[float, float],
    wait_s: float,
) -> ActionPlan:
    """The miniwob ops for ``action`` on a screen whose elements are ``targets``.

    Raises ``InvalidAction`` when the action cannot act on this screen (index out of range, a point
    outside the browser window); nothing has been done to the page then.
    """
    kind = action.action_type
    target = _target(action, targets)
    if kind in ("click", "long_press"):
        return ActionPlan(_click(action, target, viewport))
    if kind == "double_tap":
        if target is not None and target.ref > 0:
            return ActionPlan((MiniwobOp("CLICK_ELEMENT", ref=target.ref),) * 2)
        return ActionPlan((MiniwobOp("DBLCLICK_COORDS", coords=_point(action, target, viewport)),))
    if kind == "input_text":
        return ActionPlan(_type(action, target, viewport))
    if kind == "keyboard_enter":
        return ActionPlan((MiniwobOp("PRESS_KEY", key="<Enter>"),))
    if kind in ("scroll", "swipe"):
        direction = action.direction or "down"
        if kind == "swipe":
            direction = _OPPOSITE[direction]
        point = page_point if target is None and action.x is None else _point(action, target, viewport)
        return ActionPlan((MiniwobOp(_SCROLL_KIND[direction], coords=point),))
    if kind == "status":
        return ActionPlan((), ends_episode=True)
    if kind == "wait":
        return ActionPlan((MiniwobOp(SLEEP, seconds=wait_s),))
    if kind in NO_OP_ACTIONS:
        return ActionPlan(())
    raise InvalidAction(f"action_type {kind!r} has no MiniWoB++ equivalent")


def _target(action: Action, targets: Sequence[ElementTarget]) -> ElementTarget | None:
    if action.index is None:
        return None
    if not 0 <= action.index < len(targets):
        span = f"0..{len(targets) - 1}" if targets else "none"
        raise InvalidAction(
            f"index {action.index} is out of range: this screen has {len(targets)} elements "
            f"(valid indices: {span})"
        )
    return targets[action.index]


def _point(action: Action, target: ElementTarget | None, viewport: tuple[float, float]) -> tuple[float, float]:
    if target is not None:
        x, y = target.center
        where = f"element {action.index}'s centre ({x:.0f}, {y:.0f})"
    elif action.x is not None and action.y is not None:
        x, y = action.x, action.y
        where = f"point ({x:.0f}, {y:.0f})"
    else:
        raise InvalidAction(f"a {action.action_type} action needs an index or <x, y>")
    width, height = viewport
    if not (0 <= x < width and 0 <= y < height):
        raise InvalidAction(
            f"{where} is outside the browser window ({width:.0f}×{height:.0f}); scroll it into view first"
        )
    return (float(x), float(y))


def _click(action: Action, target: ElementTarget | None, viewport: tuple[float, float]) -> tuple[MiniwobOp, ...]:
    if target is not None and target.ref > 0:
        return (MiniwobOp("CLICK_ELEMENT", ref=target.ref),)
    return (MiniwobOp("CLICK_COORDS", coords=_point(action, target, viewport)),)


def _type(action: Action, target: ElementTarget | None, viewport: tuple[float, float]) -> tuple[MiniwobOp, ...]:
    text = action.text or ""
    has_point = target is not None or action.x is not None
    if not action.clear_text and target is not None and target.ref > 0:
        return (MiniwobOp("FOCUS_ELEMENT_AND_TYPE_TEXT", ref=target.ref, text=text),)
    ops: list[MiniwobOp] = list(_click(action, target, viewport)) if has_point else []
    if action.clear_text:
        ops += [MiniwobOp("PRESS_KEY", key="C-a"), MiniwobOp("PRESS_KEY", key="<Backspace>")]
    if text:
        ops.append(MiniwobOp("TYPE_TEXT", text=text))
    return tuple(ops)
