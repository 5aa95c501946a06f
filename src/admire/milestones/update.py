"""Updating the bank from one batch of trajectories (METHOD §2, Adaptive update and Order within a batch).

For each key, the batch's successes (never ``env_error`` episodes) are considered; the shortest one
(fewest steps; the first of equals in batch order, so the result does not depend on timing) either
initialises the key's list or is offered to Φ's update rule. At most one write per key per batch.
The trainer calls this *before* computing the batch's rewards, so the failed siblings of a first
success are already scaffolded.

A generator that raises is logged and the key is left as it was: a milestone problem must never stop
training.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from admire.milestones.bank import (
    FrozenMilestonesError,
    KeyKind,
    MilestoneBank,
    MilestoneList,
    Provenance,
    milestone_key,
)
from admire.milestones.generator import MilestoneGenerator, collapse_repeats
from admire.milestones.slots import apply_slots, extract_slot_values
from admire.types import Trajectory

log = logging.getLogger(__name__)

ChangeKind = Literal["init", "update", "kept", "skipped"]


@dataclass(frozen=True)
class BankChange:
    """What one batch did to one key. ``after`` is the list now in force (None when the key has none)."""

    key: str
    kind: ChangeKind
    before: MilestoneList | None
    after: MilestoneList | None
    trajectory_id: str | None
    reason: str = ""

    @property
    def changed(self) -> bool:
        return self.kind in ("init", "update")


def update_bank(
    bank: MilestoneBank,
    trajectories: Sequence[Trajectory],
    generator: MilestoneGenerator,
    *,
    key: KeyKind = "task",
    run: str = "",
    epoch: int = 0,
) -> list[BankChange]:
    """Initialise or update the milestone list of every key that has a success in this batch.

    Returns one ``BankChange`` per such key, in the order the keys first appear in the batch. With
    ``key="task"`` the phrases are slotted with the values of the chosen success's own instruction
    before they are stored, so they read "typed "<value>" into …" for every instance of the task.
    """
    chosen: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        if trajectory.excluded or not trajectory.success:
            continue
        name = milestone_key(trajectory, key=key)
        best = chosen.get(name)
        if best is None or len(trajectory.steps) < len(best.steps):
            chosen[name] = trajectory
    return [_update_key(bank, name, trajectory, generator, key, run, epoch)
            for name, trajectory in chosen.items()]


def _update_key(
    bank: MilestoneBank,
    name: str,
    trajectory: Trajectory,
    generator: MilestoneGenerator,
    key: KeyKind,
    run: str,
    epoch: int,
) -> BankChange:
    current = bank.get(name)

    def unchanged(kind: ChangeKind, reason: str) -> BankChange:
        return BankChange(name, kind, current, current, trajectory.id, reason)

    if bank.mode == "static":
        return unchanged("skipped", "the bank is static")
    if current is not None and current.frozen:
        return unchanged("skipped", f"version {current.version} was imported frozen")
    try:
        if current is None:
            phrases: list[str] | None = generator.initialise(trajectory)
        else:
            phrases = generator.update(list(current.milestones), trajectory)
    except Exception as error:  # a bad generator must not stop training (METHOD §2)
        log.exception("milestone generator %r failed on %s (trajectory %s); %s left as it was",
                      generator.name, name, trajectory.id, name)
        return unchanged("skipped", f"generator {generator.name!r} failed: {error!r}")
    if phrases is None:
        return unchanged("kept", "the generator kept the current list")
    if key == "task":
        values = extract_slot_values(trajectory.goal)
        phrases = [apply_slots(phrase, values) for phrase in phrases]
    phrases = collapse_repeats([" ".join(p.split()) for p in phrases if isinstance(p, str) and p.strip()])
    if not phrases:
        return unchanged("skipped", "the generator found no checkpoint in the trajectory")
    if current is not None and tuple(phrases) == current.milestones:
        return unchanged("kept", "the new list equals the current one")
    provenance = Provenance(run=run, epoch=epoch, trajectory_id=trajectory.id, generator=generator.name,
                            created_at=time.time())
    try:
        stored = bank.put(name, phrases, provenance)
    except FrozenMilestonesError as error:  # frozen by an import in another process meanwhile
        return unchanged("skipped", str(error))
    return BankChange(name, "init" if current is None else "update", current, stored, trajectory.id)
