"""What the ``dom`` scorer sees about each candidate action: similarities, roles and history.

The trainable network is small, so the features carry the structure: the cosine of the goal with the
element, of a span with a field's label and of the words before the span ("the username") with the
label, whether the goal names the element, what the episode already did to it, and whether other
elements the goal names are still untouched. Everything is computed from the observation, the history
and frozen sentence embeddings, so the same decision always gets the same features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
FEATURE_INDEX = {name: i for i, name in enumerate(FEATURE_NAMES)}
NUM_FEATURES = len(FEATURE_NAMES)
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


def element_key(element: UIElement) -> ElementKey:
    """Identity of an element across screens of one episode: its tag, its name and where it is.

    Fields are named by their label, so typing into one does not change who it is.
    """
    box = tuple(round(v) for v in element.bbox) if element.bbox is not None else ()
    return ((element.class_name or "").lower(), element_name(element), box)


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
        if action.action_type == "click" and key is not None:
            summary.clicked.add(key)
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
    ) -> None:
        self.embeddings = embeddings
        self.max_candidates = max_candidates
        self.max_spans = max_spans

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
        named = [_names_in_goal(name, words) for name in all_names]
        control_names = {all_names[i].lower() for i, e in enumerate(elements)
                         if is_type_target(e) or e.is_checkable}
        pending = {
            i for i, e in enumerate(elements)
            if named[i] and (is_click_target(e) or is_type_target(e)) and not e.is_checked
            and not (_is_text(e) and all_names[i].lower() in control_names)
            and keys[i] not in past.clicked and keys[i] not in past.typed_into
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
        numeric = np.zeros((n, NUM_FEATURES), dtype=np.float32)
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


def _names_in_goal(name: str, goal_words_lower: frozenset[str]) -> bool:
    """True when every word of the element's name is a word of the goal ("Login" in "press login")."""
    tokens = [t.strip(".,;:!?'\"()").lower() for t in name.split()]
    tokens = [t for t in tokens if t]
    return bool(tokens) and len(tokens) <= 4 and all(t in goal_words_lower for t in tokens)


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
