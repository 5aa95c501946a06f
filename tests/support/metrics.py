"""What two runs' metrics files are compared on: every value but the timings, which no two runs share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from admire.tracking import read_metrics

TIMINGS = ("time/", "wall_s", "env/steps_per_s")
"""Prefixes of the metrics that measure time (``time/*``, ``wall_s``, ``env/steps_per_s``)."""


def untimed_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` with their timings left out."""
    return [{k: v for k, v in record.items() if not k.startswith(TIMINGS)} for record in read_metrics(path)]
