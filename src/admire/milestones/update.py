"""Updating the bank from one batch of trajectories (method.md §2, Adaptive update and Order within a batch).

For each key, the batch's successes (never ``env_error`` episodes) are considered; the shortest one
(fewest steps; the first of equals in batch order, so the result does not depend on timing) either
initialises the key's list or is offered to Φ's update rule. At most one write per key per batch.
The trainer calls this *before* computing the batch's rewards, so the failed siblings of a first
success are already scaffolded.

The split of work with Φ (``generator.py``): Φ reads a trajectory and writes raw phrases; this module
owns the key, hence the slot scheme (``slots.slot_scheme``: none for instruction keys, one ``<value>``
for task keys, positional ``<v1>``… for skeleton keys). Every list is prepared the same way before it
is stored — blank phrases dropped, whitespace normalised, consecutive repeats collapsed on the *raw*
phrases, then slotted — and must keep K ≥ ``MIN_MILESTONES``. Collapsing after slotting would merge
"checked the 'A' checkbox", "checked the 'B' checkbox" into one checkpoint (docs/decisions.md#d2). An
update hands Φ the same preparation as a ``slot`` function, so the heuristic compares its candidate
with the stored list in slotted space (``merge_milestones``).

A generator that raises is logged and the key is left as it was: a milestone problem must never stop
training.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from admire.milestones.bank import (
    FrozenMilestonesError,
    KeyKind,
    MilestoneBank,
    MilestoneList,
    Provenance,
    milestone_key,
)
from admire.milestones.generator import (
    MIN_MILESTONES,
    UPDATE_RULES,
    MilestoneGenerator,
    UpdateRule,
    ask_update,
    collapse_repeats,
)
from admire.milestones.slots import apply_slots, extract_slot_values, positional_values, slot_scheme
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
    rule: UpdateRule = "common",
) -> list[BankChange]:
    """Initialise or update the milestone list of every key that has a success in this batch.

    Returns one ``BankChange`` per such key, in the order the keys first appear in the batch. With a
    slotted key (``task``, ``skeleton``) the phrases are slotted with the values of the chosen success's
    own instruction before they are stored, so they read "typed "<value>" into …" (task) or "typed
    "<v1>" into …" (skeleton) for every instance. ``rule`` is ``milestone_reward.update_rule``
    (``common`` | ``shorter``), the heuristic's update rule (``merge_milestones``).
    """
    if rule not in UPDATE_RULES:
        raise ValueError(f"milestone_reward.update_rule must be one of {', '.join(UPDATE_RULES)}; got {rule!r}")
    scheme = slot_scheme(key)
    chosen: dict[str, Trajectory] = {}
    for trajectory in trajectories:
        if trajectory.excluded or not trajectory.success:
            continue
        name = milestone_key(trajectory, key=key)
        best = chosen.get(name)
        if best is None or len(trajectory.steps) < len(best.steps):
            chosen[name] = trajectory
    return [_update_key(bank, name, trajectory, generator, scheme, rule, run, epoch)
            for name, trajectory in chosen.items()]


def slot_values_for(goal: str, scheme: str) -> tuple[list[str], bool]:
    """The values to hide in texts of an episode with instruction ``goal``, and whether positionally.

    ``positional``: ``positional_values`` (order of first appearance, so ``<v1>`` is the first value of
    the instruction); ``single``: ``extract_slot_values`` (longest first, one ``<value>``); ``none``.
    """
    if scheme == "positional":
        return positional_values(goal), True
    if scheme == "single":
        return extract_slot_values(goal), False
    if scheme == "none":
        return [], False
    raise ValueError(f"unknown slot scheme {scheme!r}: expected none, single or positional")


def slot_phrases(phrases: Sequence[str], goal: str, scheme: str) -> list[str]:
    """Raw phrases of one success → stored form: blanks dropped, repeats collapsed, *then* slotted."""
    cleaned = collapse_repeats([" ".join(p.split()) for p in phrases if isinstance(p, str) and p.strip()])
    values, positional = slot_values_for(goal, scheme)
    if not values:
        return cleaned
    if positional:
        return [apply_slots(phrase, values, positional=True) for phrase in cleaned]
    return [apply_slots(phrase, values) for phrase in cleaned]


def _update_key(
    bank: MilestoneBank,
    name: str,
    trajectory: Trajectory,
    generator: MilestoneGenerator,
    scheme: str,
    rule: UpdateRule,
    run: str,
    epoch: int,
) -> BankChange:
    current = bank.get(name)
    slot = partial(slot_phrases, goal=trajectory.goal, scheme=scheme)

    def unchanged(kind: ChangeKind, reason: str) -> BankChange:
        return BankChange(name, kind, current, current, trajectory.id, reason)

    if bank.mode == "static":
        return unchanged("skipped", "the bank is static")
    if current is not None and current.frozen:
        return unchanged("skipped", f"version {current.version} was imported frozen")
    try:
        if current is None:
            phrases: list[str] | None = slot(generator.initialise(trajectory))
        else:
            phrases = ask_update(generator, list(current.milestones), trajectory, slot=slot, rule=rule)
    except Exception as error:  # a bad generator must not stop training (method.md §2)
        log.exception("milestone generator %r failed on %s (trajectory %s); %s left as it was",
                      generator.name, name, trajectory.id, name)
        return unchanged("skipped", f"generator {generator.name!r} failed: {error!r}")
    if phrases is None:
        return unchanged("kept", "the generator kept the current list")
    # Already in stored form (``slot`` ran); only blanks and stray whitespace are tidied, never collapsed.
    phrases = [" ".join(p.split()) for p in phrases if isinstance(p, str) and p.strip()]
    if len(phrases) < MIN_MILESTONES:
        return unchanged("skipped", f"the generator's list has {len(phrases)} checkpoint(s); a milestone list "
                                    f"needs at least {MIN_MILESTONES} (a degenerate success stores nothing)")
    if current is not None and tuple(phrases) == current.milestones:
        return unchanged("kept", "the new list equals the current one")
    provenance = Provenance(run=run, epoch=epoch, trajectory_id=trajectory.id, generator=generator.name,
                            created_at=time.time())
    try:
        stored = bank.put(name, phrases, provenance)
    except FrozenMilestonesError as error:  # frozen by an import in another process meanwhile
        return unchanged("skipped", str(error))
    return BankChange(name, "init" if current is None else "update", current, stored, trajectory.id)
