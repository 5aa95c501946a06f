"""Where the overlay draws an action, in the screenshot's own pixel coordinates."""

from __future__ import annotations

import re

from admire.types import Action, Observation, Screenshot, Step, UIElement
from admire.viz.overlay import Box, overlay_svg, step_overlay

SHOT = Screenshot(ref="sha256-" + "0" * 32, width=160, height=210)
BUTTON = UIElement(text="OK", class_name="button", bbox=(20.0, 80.0, 120.0, 140.0))
FIELD = UIElement(text="Name", class_name="input_text", is_editable=True, bbox=(10.0, 110.0, 60.0, 80.0))


def make_step(action: Action | None, screenshot: Screenshot | None = SHOT) -> Step:
    observation = Observation(goal="g", ui_elements=(FIELD, BUTTON), screenshot=screenshot)
    return Step(index=0, observation=observation, raw_output="", action=action, format_valid=action is not None)


def test_click_by_index_marks_the_element_box_and_its_centre():
    overlay = step_overlay(make_step(Action(action_type="click", index=1)))
    assert overlay.box == Box(20.0, 120.0, 60.0, 20.0)
    assert overlay.point == (50.0, 130.0)
    assert (overlay.width, overlay.height) == (160, 210)


def test_click_by_coordinates_marks_the_point_and_the_element_under_it():
    overlay = step_overlay(make_step(Action(action_type="click", x=30.0, y=125.0)))
    assert overlay.point == (30.0, 125.0)
    assert overlay.box == Box(20.0, 120.0, 60.0, 20.0)


def test_a_zoomed_screenshot_scales_every_mark():
    overlay = step_overlay(make_step(Action(action_type="click", x=30.0, y=125.0)), scale=2.0)
    assert overlay.point == (60.0, 250.0)
    assert overlay.box == Box(40.0, 240.0, 120.0, 40.0)


def test_typing_marks_the_field_and_carries_the_text():
    overlay = step_overlay(make_step(Action(action_type="input_text", index=0, text="ann")))
    assert overlay.box == Box(10.0, 60.0, 100.0, 20.0)
    assert overlay.text == "ann"
    assert overlay.point is None


def test_scroll_draws_an_arrow_in_its_direction():
    overlay = step_overlay(make_step(Action(action_type="scroll", direction="down")))
    x1, y1, x2, y2 = overlay.arrow
    assert x1 == x2 == 80.0 and y2 > y1


def test_no_screenshot_no_overlay_and_unparsed_output_draws_nothing():
    assert step_overlay(make_step(Action(action_type="click", index=1), screenshot=None)) is None
    overlay = step_overlay(make_step(None))
    assert overlay.action_type == "unparsed" and overlay.box is None and overlay.point is None


def test_svg_uses_the_screenshot_size_as_its_coordinate_system():
    svg = overlay_svg(step_overlay(make_step(Action(action_type="click", index=1))))
    assert 'viewBox="0 0 160 210"' in svg
    assert re.search(r'<circle class="click" cx="50" cy="130"', svg)
    assert re.search(r'<rect class="target" x="20" y="120" width="60" height="20"', svg)


def test_typed_text_is_escaped_in_the_svg():
    svg = overlay_svg(step_overlay(make_step(Action(action_type="input_text", index=0, text="</svg><script>x"))))
    assert "<script>" not in svg and "&lt;/svg&gt;&lt;script&gt;x" in svg
