"""What the ``dom`` scorer sees about each candidate action: similarities, roles and history.

The trainable network is small, so the features carry the structure: the cosine of the goal with the
element, of a span with a field's label and of the words before the span ("the username") with the
label, whether the goal names the element, what the episode already did to it, and whether other
elements the goal names are still untouched. Everything is computed from the observation, the history
and frozen sentence embeddings, so the same decision always gets the same features.

With ``block_features`` the scorer also sees which item of a list a repeated control belongs to: every
post of a feed has the same Reply icon and every dish the same "+", and only the item's name (the
post's @author, the dish) says which one the goal means. Without them the long MiniWoB++ tasks of
social-media and order-food were out of reach (0 of 100 sampled episodes after the warm start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from admire.actions import element_role, target_element
from admire.agent.candidates import (
    CANDIDATE_KINDS,
    DEFAULT_MAX_CANDIDATES,
    Candidate,
    element_name,
    enumerate_candidates,
    is_click_target,
    is_type_target,
)
from admire.agent.spans import DEFAULT_MAX_SPANS, goal_spans, goal_words
from admire.embeddings import EmbeddingCache
from admire.types import Action, BBox, Observation, Step, UIElement

ROLE_GROUPS: dict[str, str] = {
    "button": "button",
    "field": "field", "text area": "field", "dropdown": "field",
    "checkbox": "checkbox", "radio button": "checkbox", "switch": "checkbox", "toggle": "checkbox",
    "link": "link", "tab": "link", "item": "link",
    "text": "text", "label": "text", "heading": "text", "image": "text",
}
ROLE_FEATURES = ("button", "field", "checkbox", "link", "text", "other", "none")
LAST_ACTIONS = ("none", "click", "type", "enter", "scroll", "other")
_LAST_KIND = {"click": "click", "input_text": "type", "keyboard_enter": "enter", "scroll": "scroll"}

FEATURE_NAMES: tuple[str, ...] = (
    *(f"kind_{kind}" for kind in CANDIDATE_KINDS),
    *(f"role_{role}" for role in ROLE_FEATURES),
    "is_checked",
    "is_focused",
    "has_name",
    "field_nonempty",
    "field_holds_span",
    "sim_goal_element",
    "sim_span_element",
    "sim_context_element",
    "context_names_element",
    "name_in_goal",
    "name_is_quoted",
    "quoted_coverage",
    "span_quoted",
    "span_salient",
    "span_rank",
    "clicked_before",
    "typed_into_before",
    "span_typed_before",
    "span_typed_here_before",
    "repeats_earlier_action",
    "steps_so_far",
    *(f"last_{kind}" for kind in LAST_ACTIONS),
    "last_acted_on_this",
    "pending_this",
    "pending_others",
    "in_row_of_named",
)
NUM_FEATURES = len(FEATURE_NAMES)
"""The features every ``dom`` policy sees."""
BLOCK_FEATURE_NAMES: tuple[str, ...] = (
    "block_named",
    "twin_block_named",
    "names_a_block",
    "clicked_spot_before",
)
"""The list-item features of ``block_features=True`` (appended after the others): which item of a list
a repeated control belongs to. Off by default so that the shipped demo's policy, and every run made
before they existed, keeps its shape and its numbers."""
FEATURE_INDEX = {name: i for i, name in enumerate(FEATURE_NAMES + BLOCK_FEATURE_NAMES)}
STEP_SCALE = 10.0
PENDING_SCALE = 4.0


@dataclass(frozen=True)
class ScreenFeatures:
    """The candidates of one decision and their inputs to the scorer (one row per candidate)."""

    candidates: tuple[Candidate, ...]
    numeric: np.ndarray  # (n, NUM_FEATURES) float32
    goal: np.ndarray  # (d,) embedding of the goal
    element: np.ndarray  # (n, d) embedding of "<role> <name>"; zeros without an element
    span: np.ndarray  # (n, d) embedding of the typed span; zeros for other actions


ElementKey = tuple[str, str, tuple[int, ...]]
SpotKey = tuple[str, tuple[int, ...]]


def element_key(element: UIElement) -> ElementKey:
    """Identity of an element across screens of one episode: its tag, its name and where it is.

    Fields are named by their label, so typing into one does not change who it is.
    """
    tag, box = element_spot(element)
    return (tag, element_name(element), box)


def element_spot(element: UIElement) -> SpotKey:
    """Tag and place without the name: a toggle renamed by its click ("reply" → "reply active") is
    still the element that was clicked, as long as the screen has not scrolled since."""
    box = tuple(round(v) for v in element.bbox) if element.bbox is not None else ()
    return ((element.class_name or "").lower(), box)


@dataclass
class _History:
    """What the episode so far did, keyed so that it can be compared with the current screen."""

    clicked: set[ElementKey]
    typed_into: set[ElementKey]
    typed_spans: set[str]
    typed_pairs: set[tuple[ElementKey, str]]
    actions: set[tuple[str, ElementKey | None, str | None]]
    last_kind: str
    last_key: ElementKey | None
    steps: int
    clicked_spots: set[SpotKey] = field(default_factory=set)


def summarise_history(history: Sequence[Step]) -> _History:
    """Each past step's target looked up on *its own* screen, so indices that shift between screens
    do not matter; a step whose output did not parse counts only as "the last action was other"."""
    summary = _History(set(), set(), set(), set(), set(), "none", None, len(history))
    for step in history:
        action = step.action
        if action is None:
            summary.last_kind, summary.last_key = "other", None
            continue
        element = target_element(action, step.observation)
        key = element_key(element) if element is not None else None
        if action.action_type == "click" and key is not None and element is not None:
            summary.clicked.add(key)
            summary.clicked_spots.add(element_spot(element))
        if action.action_type == "scroll":  # everything moved: a place no longer says which element it is
            summary.clicked_spots.clear()
        if action.action_type == "input_text":
            summary.typed_spans.add(action.text or "")
            if key is not None:
                summary.typed_into.add(key)
                summary.typed_pairs.add((key, action.text or ""))
        summary.actions.add(_action_signature(action, key))
        summary.last_kind = _LAST_KIND.get(action.action_type, "other")
        summary.last_key = key
    return summary


def _action_signature(action: Action, key: ElementKey | None) -> tuple[str, ElementKey | None, str | None]:
    return (action.action_type, key, action.text)


class FeatureBuilder:
    """Turns (observation, history) into ``ScreenFeatures``; holds the embedding cache."""

    def __init__(
        self,
        embeddings: EmbeddingCache,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
        max_spans: int = DEFAULT_MAX_SPANS,
        block_features: bool = False,
    ) -> None:
        self.embeddings = embeddings
        self.max_candidates = max_candidates
        self.max_spans = max_spans
        self.block_features = block_features
        self.num_features = NUM_FEATURES + (len(BLOCK_FEATURE_NAMES) if block_features else 0)

    def build(self, observation: Observation, history: Sequence[Step]) -> ScreenFeatures:
        goal = observation.goal
        spans = goal_spans(goal, self.max_spans)
        candidates = enumerate_candidates(observation, self.max_candidates, self.max_spans, spans=spans)
        elements = observation.ui_elements
        past = summarise_history(history)
        words = goal_words(goal)
        quoted = [s.text.lower() for s in spans if s.quoted]

        # Elements the goal names, and which of them the episode has not dealt with yet. A text that
        # carries the name of a field or checkbox is its label: the work is on the control, not on it.
        keys = [element_key(e) for e in elements]
        all_names = [element_name(e) for e in elements]
        blocks = self.block_features
        goal_lower = " ".join(goal.lower().split()) if blocks else ""
        named = [_names_in_goal(name, words, goal_lower) for name in all_names]
        block_named, twin_block_named, block_owners = (_blocks_named(elements, all_names, named) if blocks
                                                       else (set(), set(), set()))
        control_names = {all_names[i].lower() for i, e in enumerate(elements)
                         if is_type_target(e) or e.is_checkable}
        # A repeated control the goal names ("Reply") is only wanted in the blocks the goal names too
        # (the posts by @user), when it names any; the name that marks such a block (@user, a dish) is,
        # like a label, not itself what is to be clicked.
        pending = {
            i for i, e in enumerate(elements)
            if named[i] and (is_click_target(e) or is_type_target(e)) and not e.is_checked
            and not (_is_text(e) and all_names[i].lower() in control_names)
            and keys[i] not in past.clicked and keys[i] not in past.typed_into
            and i not in twin_block_named and i not in block_owners
        }

        used = sorted({c.element_index for c in candidates if c.element_index is not None})
        named_boxes = [(i, e.bbox) for i, e in enumerate(elements) if named[i] and e.bbox is not None]
        in_named_row = {i for i in used
                        if any(j != i and _same_row(elements[i].bbox, box) for j, box in named_boxes)}
        names = {i: all_names[i] for i in used}
        descriptions = {i: f"{element_role(elements[i])} {names[i]}".strip() for i in used}
        span_texts = [s.text for s in spans]
        contexts = [s.context for s in spans]
        texts = [goal, *(descriptions[i] for i in used), *(names[i] for i in used), *span_texts, *contexts]
        vectors = self.embeddings.embed(texts)
        goal_vec = vectors[0]
        offset = 1
        desc_vec = {i: vectors[offset + k] for k, i in enumerate(used)}
        offset += len(used)
        name_vec = {i: vectors[offset + k] for k, i in enumerate(used)}
        offset += len(used)
        span_vec = {s.text: vectors[offset + k] for k, s in enumerate(spans)}
        offset += len(spans)
        context_vec = {s.text: vectors[offset + k] for k, s in enumerate(spans)}
        span_rank = {s.text: k for k, s in enumerate(spans)}

        n, dim = len(candidates), vectors.shape[1]
        numeric = np.zeros((n, self.num_features), dtype=np.float32)
        element_rows = np.zeros((n, dim), dtype=np.float32)
        span_rows = np.zeros((n, dim), dtype=np.float32)
        last_kind = FEATURE_INDEX[f"last_{past.last_kind}"]
        steps = min(past.steps / STEP_SCALE, 1.0)
        for row, candidate in enumerate(candidates):
            f = numeric[row]
            f[FEATURE_INDEX[f"kind_{candidate.kind}"]] = 1.0
            f[last_kind] = 1.0
            f[FEATURE_INDEX["steps_so_far"]] = steps
            index, span = candidate.element_index, candidate.span
            key = keys[index] if index is not None else None
            f[FEATURE_INDEX["repeats_earlier_action"]] = float(
                _action_signature(candidate.action, key) in past.actions)
            if index is None:
                f[FEATURE_INDEX["role_none"]] = 1.0
                f[FEATURE_INDEX["pending_others"]] = min(len(pending) / PENDING_SCALE, 1.0)
                continue
            element, name = elements[index], names[index]
            element_rows[row] = desc_vec[index]
            group = ROLE_GROUPS.get(element_role(element), "other")
            f[FEATURE_INDEX[f"role_{group}"]] = 1.0
            f[FEATURE_INDEX["is_checked"]] = float(element.is_checked)
            f[FEATURE_INDEX["is_focused"]] = float(element.is_focused)
            f[FEATURE_INDEX["has_name"]] = float(bool(name))
            f[FEATURE_INDEX["sim_goal_element"]] = float(goal_vec @ desc_vec[index])
            f[FEATURE_INDEX["name_in_goal"]] = float(named[index])
            f[FEATURE_INDEX["name_is_quoted"]] = float(name.lower() in quoted)
            f[FEATURE_INDEX["quoted_coverage"]] = _coverage(name.lower(), quoted)
            f[FEATURE_INDEX["clicked_before"]] = float(key in past.clicked)
            f[FEATURE_INDEX["typed_into_before"]] = float(key in past.typed_into)
            f[FEATURE_INDEX["last_acted_on_this"]] = float(key is not None and key == past.last_key)
            f[FEATURE_INDEX["pending_this"]] = float(index in pending)
            f[FEATURE_INDEX["pending_others"]] = min(len(pending - {index}) / PENDING_SCALE, 1.0)
            f[FEATURE_INDEX["in_row_of_named"]] = float(index in in_named_row)
            if blocks:
                f[FEATURE_INDEX["block_named"]] = float(index in block_named)
                f[FEATURE_INDEX["twin_block_named"]] = float(index in twin_block_named)
                f[FEATURE_INDEX["names_a_block"]] = float(index in block_owners)
                f[FEATURE_INDEX["clicked_spot_before"]] = float(element_spot(element) in past.clicked_spots)
            if is_type_target(element):
                value = (element.text or "").strip()
                f[FEATURE_INDEX["field_nonempty"]] = float(bool(value))
                if span is not None:
                    f[FEATURE_INDEX["field_holds_span"]] = float(value == span.text)
            if span is None:  # a click: how well does the best span of the goal name this element?
                if spans:
                    f[FEATURE_INDEX["sim_span_element"]] = max(float(span_vec[s.text] @ name_vec[index])
                                                               for s in spans)
                continue
            span_rows[row] = span_vec[span.text]
            f[FEATURE_INDEX["sim_span_element"]] = float(span_vec[span.text] @ name_vec[index])
            # Against "<role> <name>", not the bare name: MiniLM puts "Enter the username" nearer to
            # "Password" than to "Username" ("enter password" is a common phrase) but nearer to
            # "field Username" than to "field Password".
            f[FEATURE_INDEX["sim_context_element"]] = float(context_vec[span.text] @ desc_vec[index])
            f[FEATURE_INDEX["context_names_element"]] = float(_shares_word(span.context, name))
            f[FEATURE_INDEX["span_quoted"]] = float(span.quoted)
            f[FEATURE_INDEX["span_salient"]] = float(span.salient)
            f[FEATURE_INDEX["span_rank"]] = span_rank[span.text] / max(self.max_spans - 1, 1)
            f[FEATURE_INDEX["span_typed_before"]] = float(span.text in past.typed_spans)
            f[FEATURE_INDEX["span_typed_here_before"]] = float((key, span.text) in past.typed_pairs)
        return ScreenFeatures(candidates, numeric, goal_vec, element_rows, span_rows)


def _is_text(element: UIElement) -> bool:
    return ROLE_GROUPS.get(element_role(element)) == "text"


def _names_in_goal(name: str, goal_words_lower: frozenset[str], goal_lower: str = "") -> bool:
    """True when every word of the element's name is a word of the goal ("Login" in "press login"), or,
    for a longer name, when the goal quotes it whole ("Spinach and goat cheese dip")."""
    tokens = [t.strip(".,;:!?'\"()").lower() for t in name.split()]
    tokens = [t for t in tokens if t]
    if len(tokens) > 4:
        return " ".join(name.lower().split()) in goal_lower
    return bool(tokens) and all(t in goal_words_lower for t in tokens)


def _coverage(name_lower: str, quoted_lower: Sequence[str]) -> float:
    """Share of the goal's quoted strings found inside the element's name ("Ant", "ica" in Antarctica)."""
    if not quoted_lower or not name_lower:
        return 0.0
    return sum(q in name_lower for q in quoted_lower) / len(quoted_lower)


def _shares_word(context: str, name: str) -> bool:
    context_words = {w.strip(".,;:!?'\"()").lower() for w in context.split()}
    return any(w.strip(".,;:!?'\"()").lower() in context_words for w in name.split() if len(w) > 1)


def _same_row(box: BBox | None, other: BBox) -> bool:
    """Whether two boxes share a row (overlap over half the shorter height): the star icon of an
    inbox row, the checkbox beside its label, the cell of a table row."""
    if box is None:
        return False
    overlap = min(box[3], other[3]) - max(box[2], other[2])
    shorter = min(box[3] - box[2], other[3] - other[2])
    return shorter > 0 and overlap > 0.5 * shorter


def _blocks_named(elements: Sequence[UIElement], names: Sequence[str],
                  named: Sequence[bool]) -> tuple[set[int], set[int], set[int]]:
    """Which repeated controls sit in a block the goal names, and which sit in another block than those.

    Lists repeat one template per item (a post's Reply/Like icons, a dish's "-" and "+", a row's star),
    and what tells the items apart is a name inside the item (the post's @author, the dish's name, a
    diet icon). Twins are elements of one tag, name, column and size (``_twin_key``; checkboxes named by
    their own labels are not twins); in reading order, the block of a twin is what lies between the previous
    twin and itself (the first twin's block reaches back as far as the next twin is ahead). A block is
    named when it holds an element the goal names whose name (its first word, so that "reply active"
    counts as "reply") occurs fewer times on the screen than there are twins: a name in every block is
    part of the template and says nothing about which block is meant. Returns (twins in a named
    block, twins in an unnamed block while a twin of theirs is in a named one, the names that mark blocks).
    """
    heads = [name.lower().split()[0] if name.strip() else "" for name in names]
    groups: dict[tuple[str, str, int, int, int], list[int]] = {}
    for i, element in enumerate(elements):
        key = _twin_key(element, heads[i])
        if key is not None:
            groups.setdefault(key, []).append(i)
    counts: dict[str, int] = {}
    for head in heads:
        counts[head] = counts.get(head, 0) + 1
    inside: set[int] = set()
    outside: set[int] = set()
    owners: set[int] = set()
    for twins in groups.values():
        if len(twins) < 2:
            continue
        starts = [2 * twins[0] - twins[1], *twins[:-1]]  # exclusive: block = (start, twin)
        marks = [{j for j in range(max(start + 1, 0), end) if named[j] and counts[heads[j]] < len(twins)}
                 for start, end in zip(starts, twins, strict=True)]
        if any(marks):
            inside.update(t for t, found in zip(twins, marks, strict=True) if found)
            outside.update(t for t, found in zip(twins, marks, strict=True) if not found)
            owners.update(*marks)
    return inside, outside, owners


def _twin_key(element: UIElement, head: str) -> tuple[str, str, int, int, int] | None:
    """Tag, name, column and size: what the copies of one list item's control have in common. The name
    is its first word, so that a toggled icon ("reply active") stays the twin of the others."""
    if element.bbox is None:
        return None
    x_min, x_max, y_min, y_max = element.bbox
    if x_max <= x_min or y_max <= y_min:
        return None
    return ((element.class_name or "").lower(), head, round(x_min), round(x_max), round(y_max - y_min))
