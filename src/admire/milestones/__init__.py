"""Milestones: the abstraction Φ, the durable bank, slots, and the ordered-pointer matcher (method.md §2–§3).

This package is the pure method: it imports no torch, browser or server code at import time. The
sentence encoder (``admire.embeddings``) is loaded the first time it encodes.
"""

from admire.milestones.bank import (
    FrozenMilestonesError,
    MilestoneBank,
    MilestoneBankError,
    MilestoneList,
    Provenance,
    milestone_key,
)
from admire.milestones.generator import (
    GENERATORS,
    HeuristicGenerator,
    MilestoneGenerator,
    make_generator,
    register_generator,
)
from admire.milestones.matcher import Hit, Matcher, MatchResult
from admire.milestones.slots import PLACEHOLDER, apply_slots, extract_slot_values
from admire.milestones.update import BankChange, update_bank

__all__ = [
    "GENERATORS",
    "PLACEHOLDER",
    "BankChange",
    "FrozenMilestonesError",
    "HeuristicGenerator",
    "Hit",
    "MatchResult",
    "Matcher",
    "MilestoneBank",
    "MilestoneBankError",
    "MilestoneGenerator",
    "MilestoneList",
    "Provenance",
    "apply_slots",
    "extract_slot_values",
    "make_generator",
    "milestone_key",
    "register_generator",
    "update_bank",
]
