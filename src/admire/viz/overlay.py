"""Where an action acted, drawn over the screenshot it acted on.

The geometry is computed once, as plain numbers in the screenshot's own pixel coordinates, and turned
into an SVG whose ``viewBox`` is the screenshot's size: laid over the ``<img>`` at any display size the
marks stay on the pixels they name. Element boxes and action points are in screen coordinates; a
screenshot taken at a zoom (MiniWoB++'s ``screenshot_scale``) passes that zoom as ``scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from admire.actions import target_element
from admire.types import Step

POINTER_ACTIONS = ("click", "double_tap", "long_press")
ARROW_FRACTION = 0.25
"""Scroll and swipe arrows are a quarter of the screen's smaller side long."""
MAX_SCREEN_SIDE = 1 << 16
"""No screen is wider or taller than this many pixels; a screenshot that says so is damaged or hand-made."""


def plausible_size(width: int, height: int) -> bool:
    """Whether a screenshot's recorded size is one a screen can have: a trajectory line that claims 10**400
    pixels would overflow every float the overlay computes, so such a screenshot is shown as unreadable."""
    return 0 < width <= MAX_SCREEN_SIDE and 0 < height <= MAX_SCREEN_SIDE


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class StepOverlay:
    """The marks for one step, in screenshot pixels."""

    width: int
    height: int
    action_type: str
    box: Box | None = None
    point: tuple[float, float] | None = None
    arrow: tuple[float, float, float, float] | None = None
    text: str | None = None


def step_overlay(step: Step, scale: float = 1.0) -> StepOverlay | None:
    """The overlay of ``step``, or None when the step has no screenshot to draw on (or one of no real size)."""
    shot = step.observation.screenshot
    if shot is None or not plausible_size(shot.width, shot.height):
        return None
    action = step.action
    if action is None:
        return StepOverlay(shot.width, shot.height, "unparsed")
    element = target_element(action, step.observation)
    box = None
    if element is not None and element.bbox is not None:
        x_min, x_max, y_min, y_max = element.bbox
        box = Box(x_min * scale, y_min * scale, (x_max - x_min) * scale, (y_max - y_min) * scale)
    point = None
    if action.x is not None and action.y is not None:
        point = (action.x * scale, action.y * scale)
    elif action.action_type in POINTER_ACTIONS and box is not None:
        point = (box.x + box.width / 2, box.y + box.height / 2)
    arrow = None
    if action.action_type in ("scroll", "swipe") and action.direction is not None:
        arrow = _arrow(action.direction, box, shot.width, shot.height)
    text = action.text if action.action_type in ("input_text", "answer") and action.text else None
    return StepOverlay(shot.width, shot.height, action.action_type, box, point, arrow, text)


def _arrow(direction: str, box: Box | None, width: int, height: int) -> tuple[float, float, float, float]:
    cx, cy = (box.x + box.width / 2, box.y + box.height / 2) if box is not None else (width / 2, height / 2)
    length = ARROW_FRACTION * min(width, height)
    dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[direction]
    return (cx - dx * length / 2, cy - dy * length / 2, cx + dx * length / 2, cy + dy * length / 2)


def overlay_svg(overlay: StepOverlay) -> str:
    """The SVG drawn over the screenshot; every number is in the screenshot's pixels (its viewBox)."""
    unit = max(overlay.width, overlay.height) / 100.0  # stroke widths and radii scale with the screen
    parts = [
        f'<svg class="overlay" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {overlay.width} {overlay.height}" '
        f'preserveAspectRatio="none" data-action="{escape(overlay.action_type)}" aria-hidden="true">',
        '<defs><marker id="arrowhead" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="4" markerHeight="4" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#e8590c"/></marker></defs>',
    ]
    if overlay.box is not None:
        b = overlay.box
        parts.append(f'<rect class="target" x="{b.x:g}" y="{b.y:g}" width="{b.width:g}" height="{b.height:g}" '
                     f'fill="rgba(255,212,59,0.18)" stroke="#f59f00" stroke-width="{0.6 * unit:.3g}"/>')
    if overlay.arrow is not None:
        x1, y1, x2, y2 = overlay.arrow
        parts.append(f'<line class="arrow" x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="#e8590c" '
                     f'stroke-width="{unit:.3g}" marker-end="url(#arrowhead)"/>')
    if overlay.point is not None:
        x, y = overlay.point
        parts.append(f'<circle class="click" cx="{x:g}" cy="{y:g}" r="{2.5 * unit:.3g}" fill="rgba(224,49,49,0.35)" '
                     f'stroke="#e03131" stroke-width="{0.6 * unit:.3g}"/>')
        parts.append(f'<circle class="click-dot" cx="{x:g}" cy="{y:g}" r="{0.6 * unit:.3g}" fill="#e03131"/>')
    if overlay.text is not None:
        size = 4.5 * unit
        if overlay.box is not None:
            tx, ty = overlay.box.x, overlay.box.y + overlay.box.height + size
            if ty > overlay.height:
                ty = max(size, overlay.box.y - size / 3)
        else:
            tx, ty = size / 2, overlay.height - size / 2
        label = overlay.text if len(overlay.text) <= 40 else overlay.text[:39] + "…"
        parts.append(f'<text class="typed" x="{tx:g}" y="{ty:g}" font-size="{size:.3g}" font-family="sans-serif" '
                     f'fill="#1864ab" stroke="white" stroke-width="{0.8 * unit:.3g}" paint-order="stroke">'
                     f'⌨ {escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
