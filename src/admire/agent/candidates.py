"""The finite action space of the ``dom`` policy: what can be done on this screen, in a fixed order.

A sentence-embedding scorer cannot write free text, so the policy chooses among candidates enumerated
from the screen: click a clickable element, type a span of the goal into a field, press Enter, scroll,
or declare the task complete. The list depends only on the observation (never on randomness), so a
decision written during a rollout can be found again, at the same position, when the trainer recomputes
its log-probability.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from admire.actions import element_role, format_output, parse_model_output, validate_action
from admire.agent.spans import DEFAULT_MAX_SPANS, Span, goal_spans
from admire.types import Action, Observation, UIElement

CandidateKind = Literal["click", "type", "enter", "scroll", "complete"]
CANDIDATE_KINDS: tuple[CandidateKind, ...] = ("click", "type", "enter", "scroll", "complete")
DEFAULT_MAX_CANDIDATES = 96

# Elements a click can matter on even when the backend did not flag them clickable: links, tabs, list
# items and leaf text (MiniWoB++ email rows and tab links are plain text nodes and spans).
_CLICKABLE_ROLES = frozenset({"button", "link", "tab", "item", "checkbox", "radio button", "switch",
                              "toggle", "dropdown", "text", "image", "label"})
# Tags typed into by value: text fields, text areas and <select> (typing picks the matching option).
_TYPEABLE_TAGS = frozenset({"select", "textarea"})


@dataclass(frozen=True)
class Candidate:
    """One possible action with what it acts on: the element index and, for typing, the goal span."""

    kind: CandidateKind
    action: Action
    element_index: int | None = None
    span: Span | None = None


def enumerate_candidates(
    observation: Observation,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    max_spans: int = DEFAULT_MAX_SPANS,
    spans: tuple[Span, ...] | None = None,
) -> tuple[Candidate, ...]:
    """Every candidate action on ``observation``, deterministically ordered, at most ``max_candidates``.

    When the screen offers more than the cap, what is kept is decided by a fixed priority that never
    looks at a learned score: the three global actions, typing quoted spans, clicks on elements the goal
    names, other clicks, then other typing. The kept candidates are returned in screen order.
    """
    if max_candidates < 3:
        raise ValueError(f"max_candidates must be at least 3 (Enter, scroll, complete), got {max_candidates}")
    if spans is None:
        spans = goal_spans(observation.goal, max_spans)
    goal_lower = observation.goal.lower()
    clicks: list[tuple[int, Candidate]] = []
    typing: list[tuple[int, Candidate]] = []
    for index, element in enumerate(observation.ui_elements):
        if not _on_screen(element):
            continue
        if is_type_target(element):
            for span in spans:
                if not _round_trips(span.text):
                    continue
                action = validate_action({"action_type": "input_text", "index": index, "text": span.text})
                priority = 1 if span.quoted else 4
                typing.append((priority, Candidate("type", action, index, span)))
        elif is_click_target(element):
            action = validate_action({"action_type": "click", "index": index})
            name = element_name(element).lower()
            priority = 2 if name and name in goal_lower else 3
            clicks.append((priority, Candidate("click", action, index)))

    fixed = [
        Candidate("enter", validate_action({"action_type": "keyboard_enter"})),
        Candidate("scroll", validate_action({"action_type": "scroll", "direction": "down"})),
        Candidate("complete", validate_action({"action_type": "status", "goal_status": "complete"})),
    ]
    pooled = clicks + typing
    ranked = sorted(range(len(pooled)), key=lambda position: (pooled[position][0], position))
    kept = sorted((pooled[position][1] for position in ranked[: max_candidates - len(fixed)]),
                  key=_screen_order)
    return (*kept, *fixed)


def is_type_target(element: UIElement) -> bool:
    """Fields the policy types into: editable elements, text areas and drop-downs (when enabled)."""
    tag = (element.class_name or "").lower()
    return element.is_enabled and (element.is_editable or tag in _TYPEABLE_TAGS)


def is_click_target(element: UIElement) -> bool:
    """Elements worth a click: flagged clickable or checkable, or of a role that reacts to clicks.

    Text only counts when it has words: an empty text node is layout, not a target.
    """
    if not element.is_enabled:
        return False
    if element.is_clickable or element.is_checkable:
        return True
    role = element_role(element)
    if role in ("text", "label", "image"):
        return bool(element_name(element))
    return role in _CLICKABLE_ROLES


def element_name(element: UIElement) -> str:
    """What the element is called. A field is named by its label, not by what has been typed in it."""
    if is_type_target(element):
        order = (element.hint_text, element.content_description, element.tooltip, _id_words(element),
                 element.text)
    else:
        order = (element.text, element.content_description, element.hint_text, element.tooltip,
                 _id_words(element))
    for value in order:
        if value and value.strip():
            return " ".join(value.split())
    return ""


def _id_words(element: UIElement) -> str | None:
    """A resource id as words: "send-forward" → "send forward", "com.app:id/first_name" → "first name"."""
    if not element.resource_id:
        return None
    return re.sub(r"[_\-]+", " ", element.resource_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1])


def _on_screen(element: UIElement) -> bool:
    """Visible and with an area: zero-size or hidden elements cannot receive a click or keys."""
    if not element.is_visible:
        return False
    if element.bbox is None:
        return True
    x_min, x_max, y_min, y_max = element.bbox
    return x_max > x_min and y_max > y_min


def _screen_order(candidate: Candidate) -> tuple[int, int, int, int]:
    kind_order = 0 if candidate.kind == "click" else 1
    span = candidate.span
    span_key = (span.start, -len(span.text)) if span is not None else (-1, 0)
    element = candidate.element_index if candidate.element_index is not None else -1
    return (element, kind_order, *span_key)


@lru_cache(maxsize=4096)
def _round_trips(text: str) -> bool:
    """Whether typing ``text`` survives being written as model output and parsed back.

    A goal could quote something that looks like a second ``Action: {…}``; such a span is not offered,
    so every candidate the policy writes parses back to itself.
    """
    action = validate_action({"action_type": "input_text", "index": 0, "text": text})
    return parse_model_output(format_output(action)).action == action
