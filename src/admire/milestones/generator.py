"""The abstraction function Φ: successful trajectory → ordered milestone phrases (method.md §2).

Two implementations share the ``MilestoneGenerator`` protocol: ``heuristic`` here (offline, the
default) and ``llm`` in ``llm_generator.py``, which falls back to the heuristic when the model's answer
is unusable. Both are declared in ``GENERATORS`` as ``module:attr`` strings and imported on lookup, so
naming a generator in a config is enough; others arrive through the ``admire.generators`` entry-point
group or ``register_generator`` (see :mod:`admire.registry`).

Generators return raw phrases; slotting the instruction's values (``slots.py``) is the bank update's
job, because only it knows the key and hence the slot scheme (none, single ``<value>``, positional
``<v1>``…). An *update* has to compare the new success with the stored list, which is slotted, so
``update_bank`` hands ``update`` a ``slot`` function (raw phrases of the new success → the stored
list's space) and the update ``rule``; the heuristic turns the new success into a candidate list, slots
it, and merges it with ``merge_milestones`` — a pure function on two slotted lists.

Collapsing repeated phrases happens on the raw phrases, *before* slotting: after slotting, "checked
the 'A' checkbox" and "checked the 'B' checkbox" can read alike although they are two checkpoints.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar, get_args, runtime_checkable

from admire.registry import Registry
from admire.types import Step, Trajectory

MIN_MILESTONES = 2
MAX_MILESTONES = 8
"""K is kept in [2, 8] as in the paper (method.md §2). A list of one checkpoint is what a degenerate success
("select nothing, click Submit") leaves behind; paying k/K = 1 for that one step teaches failures to
submit at once, so such a list is never stored."""

UpdateRule = Literal["common", "shorter"]
UPDATE_RULES: tuple[str, ...] = get_args(UpdateRule)
"""``milestone_reward.update_rule``: ``common`` (default) keeps the checkpoints every success passes
through; ``shorter`` is the first implementation's reading of the paper, replace when strictly shorter."""

SlotFunction = Callable[[Sequence[str]], list[str]]
"""Raw phrases of one success → the space the stored list lives in (repeats collapsed, then slotted)."""


@runtime_checkable
class MilestoneGenerator(Protocol):
    """Φ. ``initialise`` writes a first list; ``update`` returns a better one or None to keep ``current``.

    ``initialise`` returns raw phrases (literal values); ``update_bank`` collapses and slots them.
    ``current`` is the stored list, slotted. ``update`` may take two keyword-only options, which
    ``update_bank`` passes only to an ``update`` that declares them (``ask_update``): ``slot`` — when
    given, the answer must be in the slotted space of ``current`` — and ``rule``, the update rule of
    the heuristic (``milestone_reward.update_rule``). An ``update`` without them returns raw phrases.
    """

    name: str

    def initialise(self, trajectory: Trajectory) -> list[str]: ...

    def update(self, current: Sequence[str], trajectory: Trajectory) -> list[str] | None: ...


GeneratorFactory = Callable[..., MilestoneGenerator]
F = TypeVar("F", bound=GeneratorFactory)

GENERATORS: Registry[GeneratorFactory] = Registry(
    "milestone generator",
    group="admire.generators",
    builtins={
        "heuristic": "admire.milestones.generator:HeuristicGenerator",
        "llm": "admire.milestones.llm_generator:make_llm_generator",
    },
)


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


class HeuristicGenerator:
    """Φ without a language model: the grounded descriptions of the steps that made progress.

    A step is kept when its output was a valid action that changed the screen and is not a status,
    wait or unknown action. ``answer`` steps are kept even though they do not change the screen: for
    information tasks the answer is the deliverable. Then toggles undone later are removed in pairs
    ("checked the 'X' checkbox" … "unchecked the 'X' checkbox": the box ends as it started), then
    consecutive duplicates are collapsed ("scrolled down" three times is one checkpoint).

    More than ``max_milestones`` phrases are thinned to an evenly spaced subset that keeps the first
    and the last phrase, because the last step of a success is the one that completed the task.
    Fewer than ``MIN_MILESTONES`` gives an empty list: the success was degenerate (an instance with
    nothing to do but submit), and neither a one-phrase list nor invented padding is a scaffold worth
    paying for; the key waits for a success that shows the work.

    ``update`` merges the new success's list with the current one (``merge_milestones``).
    """

    name = "heuristic"

    def __init__(self, max_milestones: int = MAX_MILESTONES) -> None:
        if (isinstance(max_milestones, bool) or not isinstance(max_milestones, int)
                or max_milestones < MIN_MILESTONES):
            raise ValueError(f"max_milestones must be an integer >= {MIN_MILESTONES}, got {max_milestones!r}")
        self.max_milestones = max_milestones

    def initialise(self, trajectory: Trajectory) -> list[str]:
        phrases = checkpoint_phrases(trajectory)
        if len(phrases) < MIN_MILESTONES:
            return []
        return evenly_spaced(phrases, self.max_milestones)

    def update(self, current: Sequence[str], trajectory: Trajectory, *, slot: SlotFunction | None = None,
               rule: UpdateRule = "common") -> list[str] | None:
        """``merge_milestones(current, candidate, rule)`` with the new success's list as the candidate.

        ``slot`` puts the candidate into the space of ``current``; without it the two are compared as
        they are, which is right only for lists that are not slotted (instruction keys).
        """
        candidate = self.initialise(trajectory)
        if slot is not None:
            candidate = slot(candidate)
        return merge_milestones(current, candidate, rule)


def checkpoint_phrases(trajectory: Trajectory) -> list[str]:
    """The raw phrases of the steps that made progress: undone toggles removed, repeats collapsed."""
    phrases = [_phrase(step) for step in trajectory.steps if _is_checkpoint(step)]
    return collapse_repeats(remove_undone_toggles(phrases))


def merge_milestones(current: Sequence[str], candidate: Sequence[str],
                     rule: UpdateRule = "common") -> list[str] | None:
    """The heuristic's update of a stored list by a new success's list, both slotted; None keeps ``current``.

    ``common``: the new list is the ordered longest common subsequence of the two, when it has at least
    ``MIN_MILESTONES`` phrases. A checkpoint that one success skipped is not necessary, so dropping it
    moves the list towards what *every* success passes through; a detour of the first success (an
    extra click) goes at the second success that does without it, and the list can only lose phrases
    that some success did without, never gain invented ones. When the two share fewer than two
    checkpoints they describe different routes, and no common list is a scaffold; then the shorter
    *valid* list (K ≥ 2) is kept, as in the paper's preference for the shortcut — ties keep ``current``
    so that the list does not flip between equal routes. A stored list with K < 2 (from an older bank or
    a hand-written file) is not valid, so any valid candidate replaces it: a degenerate list cannot
    freeze a key.

    ``shorter`` (the first implementation's reading of the paper): the candidate replaces ``current``
    only when it is valid and strictly shorter.
    """
    if rule not in UPDATE_RULES:
        raise ValueError(f"milestone_reward.update_rule must be one of {', '.join(UPDATE_RULES)}; got {rule!r}")
    current, candidate = list(current), list(candidate)
    candidate_valid = len(candidate) >= MIN_MILESTONES
    if rule == "shorter":
        return candidate if candidate_valid and len(candidate) < len(current) else None
    common = longest_common_subsequence(current, candidate)
    if len(common) >= MIN_MILESTONES:
        new = common
    elif candidate_valid and (len(current) < MIN_MILESTONES or len(candidate) < len(current)):
        new = candidate
    else:
        return None
    return None if new == current else new


def longest_common_subsequence(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """An ordered longest common subsequence of ``a`` and ``b`` (exact phrase equality).

    Among several of equal length the one that takes the earliest phrases of ``a`` is returned, so the
    result depends only on the two lists.
    """
    n, m = len(a), len(b)
    # suffix[i][j] = length of an LCS of a[i:] and b[j:]
    suffix = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            suffix[i][j] = (suffix[i + 1][j + 1] + 1 if a[i] == b[j]
                            else max(suffix[i + 1][j], suffix[i][j + 1]))
    out: list[str] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            out.append(a[i])
            i, j = i + 1, j + 1
        elif suffix[i + 1][j] >= suffix[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def ask_update(generator: MilestoneGenerator, current: Sequence[str], trajectory: Trajectory, *,
               slot: SlotFunction | None = None, rule: UpdateRule = "common") -> list[str] | None:
    """``generator.update`` with the keyword options it declares; the answer in ``current``'s space.

    A generator written against the two-argument protocol still works: it gets neither option, and
    its raw answer is slotted here.
    """
    accepted = _keywords_of(generator.update)
    options: dict[str, Any] = {}
    if "rule" in accepted:
        options["rule"] = rule
    if "slot" in accepted:
        options["slot"] = slot
    answer = generator.update(current, trajectory, **options)
    if answer is None:
        return None
    if slot is not None and "slot" not in accepted:
        return slot(answer)
    return list(answer)


def _keywords_of(function: Callable[..., Any]) -> frozenset[str]:
    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return frozenset({"slot", "rule"})
    return frozenset(p.name for p in parameters
                     if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))


def check_milestone_count(phrases: Sequence[str], *, maximum: int | None = MAX_MILESTONES) -> list[str]:
    """``phrases`` as a list when ``MIN_MILESTONES`` ≤ K (≤ ``maximum``); ``ValueError`` otherwise.

    The one rule every generator's answer passes, the LLM's and the heuristic's alike.
    """
    count = len(phrases)
    if count < MIN_MILESTONES or (maximum is not None and count > maximum):
        expected = f"{MIN_MILESTONES} to {maximum}" if maximum is not None else f"at least {MIN_MILESTONES}"
        raise ValueError(f"expected {expected} milestones, got {count}")
    return list(phrases)


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
