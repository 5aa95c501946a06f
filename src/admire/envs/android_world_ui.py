"""AndroidWorld's screens and actions in this project's types, and back.

Kept apart from the backend (:mod:`admire.envs.android_world`) because these are pure conversions: they
take AndroidWorld's objects by their attributes and import AndroidWorld only to build a ``JSONAction``, so
they are tested on real AndroidWorld objects without a device.

* Elements: AndroidWorld's ``UIElement`` keeps two boxes, ``bbox_pixels`` (screen pixels) and ``bbox``
  (normalised to the screen, or, from a uiautomator dump, the same pixels). Ours keeps pixels in the same
  order, ``(x_min, x_max, y_min, y_max)``, so ``bbox_pixels`` maps one to one and the normalised box is
  recomputed from the screen size (:func:`normalised_bbox`). Booleans that AndroidWorld leaves ``None`` take
  our defaults (``False``; ``True`` for enabled and visible). The accessibility forest names a view's id
  ``resource_name`` (``view_id_resource_name``) and a uiautomator dump ``resource_id``: both are the same
  ``package:id/name`` string and land in ``resource_id``. Fields our ``UIElement`` does not have are listed
  in :data:`NOT_CARRIED` (checked by the tests, so a field added on either side is noticed).
* Element order is AndroidWorld's own: an action's ``index`` refers to the same element on both sides.
* Actions: every field of our ``Action`` is a field of ``JSONAction`` of the same name and meaning.
* Screenshots: ``State.pixels`` (an RGB ``uint8`` array) becomes a PNG with the standard library alone.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from admire.types import Action, BBox, Screenshot, UIElement

BOOL_FIELDS: dict[str, bool] = {
    # our field -> the default when AndroidWorld says None
    "is_clickable": False,
    "is_editable": False,
    "is_checkable": False,
    "is_checked": False,
    "is_focused": False,
    "is_scrollable": False,
    "is_selected": False,
    "is_enabled": True,
    "is_visible": True,
    "is_focusable": False,
    "is_long_clickable": False,
}
TEXT_FIELDS = ("text", "content_description", "class_name", "hint_text", "package_name", "tooltip")
ACTION_FIELDS = ("action_type", "index", "x", "y", "text", "direction", "goal_status", "app_name", "keycode",
                 "clear_text")
NOT_CARRIED = frozenset({"metadata"})
"""AndroidWorld ``UIElement`` fields with no place in ours: ``metadata`` is AndroidWorld's free-form slot
for its own tools (not JSON-typed); no prompt of AndroidWorld's shows it."""


def element_from_android(element: Any) -> UIElement:
    """Our ``UIElement`` for one of AndroidWorld's (from the accessibility forest or a uiautomator dump)."""
    values: dict[str, Any] = {name: getattr(element, name, None) for name in TEXT_FIELDS}
    resource_id = getattr(element, "resource_id", None)
    values["resource_id"] = resource_id if resource_id is not None else getattr(element, "resource_name", None)
    for name, default in BOOL_FIELDS.items():
        value = getattr(element, name, None)
        values[name] = default if value is None else bool(value)
    box = getattr(element, "bbox_pixels", None)
    if box is not None:
        values["bbox"] = (_number(box.x_min), _number(box.x_max), _number(box.y_min), _number(box.y_max))
    return UIElement(**values)


def elements_from_android(elements: Any) -> tuple[UIElement, ...]:
    """A screen's elements, in AndroidWorld's order (indexes agree)."""
    return tuple(element_from_android(e) for e in elements)


def normalised_bbox(bbox: BBox, screen_size: tuple[int, int]) -> BBox:
    """AndroidWorld's normalised ``bbox`` for a pixel box: each coordinate over the screen's width or height."""
    width, height = screen_size
    x_min, x_max, y_min, y_max = bbox
    return (x_min / width, x_max / width, y_min / height, y_max / height)


def element_to_android(element: UIElement, screen_size: tuple[int, int] | None = None) -> Any:
    """AndroidWorld's ``UIElement`` for ours (the inverse of :func:`element_from_android` on the fields we
    carry); ``bbox`` is normalised when ``screen_size`` is given, as the accessibility forest's is."""
    from android_world.env import representation_utils as ru

    values: dict[str, Any] = {name: getattr(element, name) for name in (*TEXT_FIELDS, *BOOL_FIELDS)}
    values["resource_id"] = element.resource_id
    if element.bbox is not None:
        values["bbox_pixels"] = ru.BoundingBox(*element.bbox)
        if screen_size is not None:
            values["bbox"] = ru.BoundingBox(*normalised_bbox(element.bbox, screen_size))
    return ru.UIElement(**values)


def to_json_action(action: Action) -> Any:
    """AndroidWorld's ``JSONAction`` for a validated action; coordinates are whole pixels there."""
    from android_world.env import json_action

    values = {name: getattr(action, name) for name in ACTION_FIELDS if getattr(action, name) is not None}
    for axis in ("x", "y"):
        if axis in values:
            values[axis] = round(values[axis])
    return json_action.JSONAction(**values)


def from_json_action(action: Any) -> Action:
    """Our ``Action`` for a ``JSONAction`` (e.g. one from AndroidWorld's own agents)."""
    values = {name: getattr(action, name, None) for name in ACTION_FIELDS}
    return Action(**{k: v for k, v in values.items() if v is not None})


def screenshot_from_pixels(pixels: Any) -> Screenshot:
    """A PNG of ``State.pixels`` (H×W×3 or H×W×4 ``uint8``; an alpha channel is dropped)."""
    image = np.ascontiguousarray(np.asarray(pixels, dtype=np.uint8)[..., :3])
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"State.pixels should be an H×W×3 array, got shape {image.shape}")
    height, width = int(image.shape[0]), int(image.shape[1])
    return Screenshot.from_png(encode_png(image), width, height)


def encode_png(image: np.ndarray) -> bytes:
    """An RGB ``uint8`` array as PNG bytes (filter 0 on every row, zlib level 6)."""
    height, width = image.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), dtype=np.uint8), image.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + chunk(b"IEND", b""))


def _number(value: Any) -> float:
    return float(value)
