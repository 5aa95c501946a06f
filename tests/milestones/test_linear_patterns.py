"""Every pattern that reads agent- or page-written text runs in linear time on hostile input.

A goal, a label or a typed value can be a megabyte of anything. A pattern that may start inside a long run
of the characters it consumes rescans the run from each start, and one goal then costs minutes in
``admire rewards``, the viewer's scoring and the trainer's scoring. The inputs below are the shapes that
found such patterns (one character or a short unit repeated to 1 MB); a quadratic pattern takes hours on
them, so the bound on each test is generous and is not a speed measurement.
"""

from __future__ import annotations

import importlib
import re

import pytest

from admire.milestones.prose import prose_verdict
from admire.milestones.signature import Signature
from admire.milestones.slots import extract_slot_values

MODULES = ("admire.milestones.slots", "admire.milestones.prose", "admire.milestones.signature",
           "admire.milestones.generator", "admire.actions.parsing")
UNITS = ("a", "A", "1", "-", ".", " ", '"', "'", "@", "a-", "-_", "a--", "1-", ' "', "a.", "a@", "1:", "a, ",
         "aA", "a1", "A ", "1.", ",h", "http://a", "<v1>")
ONE_MB = 1 << 20


def patterns() -> list[tuple[str, re.Pattern[str]]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        found += [(f"{name}.{attr}", value) for attr, value in vars(module).items() if isinstance(value, re.Pattern)]
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "pattern"), patterns(), ids=[name for name, _ in patterns()])
def test_a_pattern_reads_a_megabyte_of_hostile_text_in_linear_time(name: str, pattern: re.Pattern[str]) -> None:
    for unit in UNITS:
        text = unit * (ONE_MB // len(unit))
        for _ in pattern.finditer(text):
            pass


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", ["a-", "a--", "x", "a.b-", "ann@x"])
def test_slot_extraction_and_prose_reading_take_a_megabyte_of_text(unit: str) -> None:
    text = unit * (ONE_MB // len(unit))
    extract_slot_values(text)
    prose_verdict(Signature(verb="clicked", role="button", label=text), "clicked the Submit button")


def test_a_file_name_is_found_whole_after_dashes_and_inside_a_sentence() -> None:
    assert extract_slot_values("open --report-2024.pdf now") == ["report-2024.pdf"]
    assert extract_slot_values("save notes_v2.txt then quit") == ["notes_v2.txt"]
