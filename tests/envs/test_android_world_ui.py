"""Conversions between AndroidWorld's screens/actions and ours, on AndroidWorld's real code (source copy):
accessibility forests and uiautomator dumps through its real ``representation_utils``, every ``JSONAction``
type, and screenshots."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

from admire.envs import android_world_ui as ui
from admire.types import Action, UIElement
from tests.support import android_fake
from tests.support.android_fake import json_action, representation_utils  # AndroidWorld's, from the source copy

SCREEN = (1080, 2400)
UIAUTOMATOR_XML = """<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>
<hierarchy rotation="0">
  <node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.android.settings"
        content-desc="" checkable="false" checked="false" clickable="false" enabled="true" focusable="false"
        focused="false" scrollable="false" long-clickable="false" password="false" selected="false"
        bounds="[0,0][1080,2400]">
    <node index="0" text="Wi-Fi" resource-id="android:id/switch_widget" class="android.widget.Switch"
          package="com.android.settings" content-desc="Wi-Fi toggle" checkable="true" checked="true"
          clickable="true" enabled="true" focusable="true" focused="false" scrollable="false"
          long-clickable="false" password="false" selected="false" bounds="[42,300][1038,420]" />
    <node index="1" text="" resource-id="com.android.settings:id/list" class="android.widget.ScrollView"
          package="com.android.settings" content-desc="" checkable="false" checked="false" clickable="false"
          enabled="false" focusable="true" focused="true" scrollable="true" long-clickable="false"
          password="false" selected="true" bounds="[0,440][1080,2400]" />
  </node>
</hierarchy>"""


def carried_fields() -> list[str]:
    """AndroidWorld's UIElement fields we carry (everything but NOT_CARRIED, bbox and the resource names)."""
    names = [f.name for f in dataclasses.fields(representation_utils.UIElement)]
    return [n for n in names if n not in ui.NOT_CARRIED | {"bbox", "bbox_pixels", "resource_name", "resource_id"}]


def test_every_androidworld_field_is_carried_or_listed_as_not_carried() -> None:
    theirs = {f.name for f in dataclasses.fields(representation_utils.UIElement)}
    ours = set(UIElement.model_fields)
    accounted = set(carried_fields()) | ui.NOT_CARRIED | {"bbox", "bbox_pixels", "resource_name", "resource_id"}
    assert accounted == theirs
    assert set(carried_fields()) <= ours
    assert not (ui.NOT_CARRIED & ours)  # a field we gain must move from NOT_CARRIED into the conversion


def test_the_accessibility_forest_becomes_our_elements_without_loss() -> None:
    phone = android_fake.Phone(app=android_fake.NOTES, notes=["a", "b"], starred={"b"}, selected="a",
                               draft="typed", field_focused=True)
    theirs = representation_utils.forest_to_ui_elements(phone.forest(), screen_size=(360, 640))
    ours = ui.elements_from_android(theirs)
    assert len(ours) == len(theirs) == 6  # same order: an index means the same element on both sides
    for mine, their in zip(ours, theirs, strict=True):
        for name in carried_fields():
            value = getattr(their, name)
            assert getattr(mine, name) == (value if value is not None else getattr(UIElement(), name)), name
        box = their.bbox_pixels
        assert mine.bbox == (box.x_min, box.x_max, box.y_min, box.y_max)  # AndroidWorld's order
        assert ui.normalised_bbox(mine.bbox, (360, 640)) == pytest.approx(
            (their.bbox.x_min, their.bbox.x_max, their.bbox.y_min, their.bbox.y_max))
        assert mine.resource_id == their.resource_name
    field = ours[1]
    assert (field.class_name, field.text, field.hint_text, field.is_editable, field.is_focused) == \
        ("android.widget.EditText", "typed", "Title", True, True)
    notes = [e for e in ours if e.resource_id == f"{android_fake.NOTES}:id/note"]
    expected = [("a", False, True), ("b", True, False)]
    assert [(e.text, e.is_checked, e.is_selected) for e in notes] == expected


def test_a_uiautomator_dump_becomes_our_elements() -> None:
    theirs = representation_utils.xml_dump_to_ui_elements(UIAUTOMATOR_XML)
    ours = ui.elements_from_android(theirs)
    assert [e.model_dump(exclude_defaults=True) for e in ours] == [
        {"text": "", "content_description": "", "class_name": "android.widget.FrameLayout", "resource_id": "",
         "package_name": "com.android.settings", "bbox": (0.0, 1080.0, 0.0, 2400.0)},  # empty strings stay empty
        {"text": "Wi-Fi", "content_description": "Wi-Fi toggle", "class_name": "android.widget.Switch",
         "resource_id": "android:id/switch_widget", "package_name": "com.android.settings",
         "bbox": (42.0, 1038.0, 300.0, 420.0), "is_clickable": True, "is_checkable": True, "is_checked": True,
         "is_focusable": True},
        {"text": "", "content_description": "", "class_name": "android.widget.ScrollView",
         "resource_id": "com.android.settings:id/list",
         "package_name": "com.android.settings", "bbox": (0.0, 1080.0, 440.0, 2400.0), "is_focused": True,
         "is_scrollable": True, "is_selected": True, "is_enabled": False, "is_focusable": True},
    ]
    assert ours[1].center == theirs[1].bbox_pixels.center


def test_our_elements_go_back_to_androidworlds() -> None:
    theirs = representation_utils.xml_dump_to_ui_elements(UIAUTOMATOR_XML)
    for their in theirs:
        mine = ui.element_from_android(their)
        back = ui.element_to_android(mine, SCREEN)
        assert ui.element_from_android(back) == mine
        assert back.bbox_pixels == their.bbox_pixels
        assert back.bbox == representation_utils.BoundingBox(*ui.normalised_bbox(mine.bbox, SCREEN))


ACTIONS = [
    {"action_type": "click", "index": 3},
    {"action_type": "click", "x": 120, "y": 640},
    {"action_type": "double_tap", "index": 0},
    {"action_type": "long_press", "x": 5, "y": 6},
    {"action_type": "scroll", "direction": "down", "index": 2},
    {"action_type": "scroll", "direction": "left"},
    {"action_type": "swipe", "direction": "up"},
    {"action_type": "input_text", "text": "hello world", "index": 1, "clear_text": True},
    {"action_type": "navigate_home"},
    {"action_type": "navigate_back"},
    {"action_type": "keyboard_enter"},
    {"action_type": "open_app", "app_name": "Contacts"},
    {"action_type": "status", "goal_status": "complete"},
    {"action_type": "status", "goal_status": "infeasible"},
    {"action_type": "wait"},
    {"action_type": "answer", "text": "42"},
    {"action_type": "unknown"},
]


def test_every_json_action_type_is_covered() -> None:
    assert {a["action_type"] for a in ACTIONS} == set(json_action._ACTION_TYPES)


@pytest.mark.parametrize("fields", ACTIONS, ids=lambda a: a["action_type"])
def test_actions_convert_to_androidworlds_json_action_and_back(fields: dict) -> None:
    action = Action(**fields)
    converted = ui.to_json_action(action)
    assert isinstance(converted, json_action.JSONAction)
    assert converted.as_dict(skip_none=True) == fields  # AndroidWorld's own JSON of the action
    assert ui.from_json_action(converted) == action


def test_fractional_coordinates_become_whole_pixels() -> None:
    converted = ui.to_json_action(Action(action_type="click", x=10.6, y=3.2))
    assert (converted.x, converted.y) == (11, 3)


def test_screenshots_are_pngs_of_the_pixels() -> None:
    image_module = pytest.importorskip("PIL.Image")
    pixels = np.random.default_rng(0).integers(0, 256, size=(7, 5, 4), dtype=np.uint8)
    shot = ui.screenshot_from_pixels(pixels)
    assert (shot.width, shot.height) == (5, 7)
    decoded = np.asarray(image_module.open(io.BytesIO(shot.png)).convert("RGB"))
    assert np.array_equal(decoded, pixels[..., :3])
    with pytest.raises(ValueError, match="H×W×3"):
        ui.screenshot_from_pixels(np.zeros((4, 4), dtype=np.uint8))
