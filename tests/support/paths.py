"""Where things are, for tests that read files of the checkout (the README, docs, benchmarks, recorded data)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
DATA = TESTS / "data"  # recorded trajectories (login_user_batch.jsonl)
SUPPORT = TESTS / "support"
