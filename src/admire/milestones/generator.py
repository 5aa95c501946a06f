"""The abstraction function Φ: successful trajectory → ordered milestone phrases (METHOD §2).

Two implementations share the ``MilestoneGenerator`` protocol: ``heuristic`` here (offline, the
default) and ``llm`` in ``llm_generator.py``, which registers itself with ``register_generator`` and
falls back to the heuristic when the model's answer is unusable. ``make_generator(name)`` imports
``admire.milestones.<name>_generator`` on demand, so naming a generator in a config is enough.

Generators return raw phrases; slotting the instruction's values (``slots.py``) is the bank update's
job, because only it knows whether milestones are keyed by task or by instruction.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from admire.registry import Registry
from admire.types import Step, Trajectory

MIN_MILESTONES = 2
MAX_MILESTONES = 8


@runtime_checkable
class MilestoneGenerator(Protocol):
    """Φ. ``initialise`` writes a first list; ``update`` returns a better one or None to keep ``current``."""

    name: str

    def initialise(self, trajectory: Trajectory) -> list[str]: ...

    def update(self, current: Sequence[str], trajectory: Trajectory) -> list[str] | None: ...


GeneratorFactory = Callable[..., MilestoneGenerator]
F = TypeVar("F", bound=GeneratorFactory)


def _import_generator_module(name: str) -> None:
    """``make_generator("llm")`` imports ``admire.milestones.llm_generator`` on demand."""
    if not name:
        return
    try:
        importlib.import_module(f"admire.milestones.{name}_generator")
    except ModuleNotFoundError as error:
        if error.name != f"admire.milestones.{name}_generator":
            raise  # the generator's module exists but one of its own imports is missing


GENERATORS: Registry[GeneratorFactory] = Registry("milestone generator", loader=_import_generator_module)


def register_generator(name: str) -> Callable[[F], F]:
    """Register a generator class (or factory) under ``name`` for ``make_generator``."""
    return GENERATORS.register(name)


def make_generator(name: str, **options: Any) -> MilestoneGenerator:
    """Build a registered generator: ``make_generator("heuristic")``, ``make_generator("llm", base_url=…)``."""
    return GENERATORS.lookup(name)(**options)


# Grounded toggles read "checked the 'X' checkbox" / "unchecked the 'X' switch" (actions.describe).
_TOGGLE = re.compile(r"^(checked|unchecked) (.+)$")
# Actions that are never a checkpoint of progress. ``status`` ends the episode; whether the task was
# done is the outcome reward's business, and a "declared the task complete" milestone would pay a
# failed trajectory for stopping. ``wait`` and ``unknown`` do nothing on purpose.
_NOT_CHECKPOINTS = frozenset({"status", "wait", "unknown"})


@register_generator("heuristic")
class HeuristicGenerator:
    """Φ without a language model: the grounded descriptions of the steps that made progress.

    A step is kept when its output was a valid action that changed the screen and is not a status,
    wait or unknown action. ``answer`` steps are kept even though they do not change the screen: for
    information tasks the answer is the deliverable. Then toggles undone later are removed in pairs
    ("checked the 'X' checkbox" … "unchecked the 'X' checkbox": the box ends as it started), then
    consecutive duplicates are collapsed ("scrolled down" three times is one checkpoint).

    More than ``MAX_MILESTONES`` phrases are thinned to an evenly spaced subset that keeps the first
    and the last phrase, because the last step of a success is the one that completed the task.
    Fewer than ``MIN_MILESTONES`` is returned as it is (one phrase, or none when no step qualified):
    inventing padding would reward steps the trajectory never needed, and a single milestone is still
    a valid scaffold. The bank stores nothing for an empty list.
    """

    name = "heuristic"

    def __init__(self, max_milestones: int = MAX_MILESTONES) -> None:
        if isinstance(max_milestones, bool) or not isinstance(max_milestones, int) or max_milestones < 1:
            raise ValueError(f"max_milestones must be a positive integer, got {max_milestones!r}")
        self.max_milestones = max_milestones

    def initialise(self, trajectory: Trajectory) -> list[str]:
        phrases = [_phrase(step) for step in trajectory.steps if _is_checkpoint(step)]
        phrases = collapse_repeats(remove_undone_toggles(phrases))
        return evenly_spaced(phrases, self.max_milestones)

    def update(self, current: Sequence[str], trajectory: Trajectory) -> list[str] | None:
        """Replace the list only when the new path is strictly shorter (a shortcut was found)."""
        candidate = self.initialise(trajectory)
        if candidate and len(candidate) < len(current):
            return candidate
        return None


def _is_checkpoint(step: Step) -> bool:
    if not step.format_valid or step.action is None or not _phrase(step):
        return False
    kind = step.action.action_type
    if kind in _NOT_CHECKPOINTS:
        return False
    return step.screen_changed or kind == "answer"


def _phrase(step: Step) -> str:
    return " ".join(step.grounded_description.split())


def remove_undone_toggles(phrases: Sequence[str]) -> list[str]:
    """Drop each toggle together with the later toggle of the same element that undid it."""
    kept: list[str] = []
    for phrase in phrases:
        toggle = _TOGGLE.match(phrase)
        if toggle is not None:
            verb, element = toggle.groups()
            previous = _last_toggle(kept, element)
            if previous is not None and _TOGGLE.match(kept[previous]).group(1) != verb:  # type: ignore[union-attr]
                del kept[previous]
                continue
        kept.append(phrase)
    return kept


def _last_toggle(phrases: Sequence[str], element: str) -> int | None:
    for i in range(len(phrases) - 1, -1, -1):
        toggle = _TOGGLE.match(phrases[i])
        if toggle is not None and toggle.group(2) == element:
            return i
    return None


def collapse_repeats(phrases: Sequence[str]) -> list[str]:
    out: list[str] = []
    for phrase in phrases:
        if not out or out[-1] != phrase:
            out.append(phrase)
    return out


def evenly_spaced(phrases: Sequence[str], limit: int) -> list[str]:
    """At most ``limit`` phrases, evenly spaced, always keeping the first and the last."""
    n = len(phrases)
    if n <= limit:
        return list(phrases)
    if limit == 1:
        return [phrases[-1]]
    return [phrases[round(i * (n - 1) / (limit - 1))] for i in range(limit)]
