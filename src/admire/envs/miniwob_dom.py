"""Reading a MiniWoB++ page: one script call, turned into ``UIElement``s and the refs to act on them.

miniwob's own step makes four to five browser round trips (metadata twice, utterance, DOM); each costs
several milliseconds, more than everything else in a step. :data:`READ_PAGE_JS` gets the episode state,
the utterance, ``core.getDOMInfo()`` and what the DOM info lacks (labels of inputs, options of selects)
in one call, and :func:`read_page` parses the DOM with miniwob's own ``DOMElement`` so the element tree
is exactly the one miniwob's observation would hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from admire.types import UIElement

READ_PAGE_JS = r"""
var state = {done: WOB_DONE_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, env_reward: WOB_REWARD_GLOBAL,
             reason: WOB_REWARD_REASON, utterance: core.getUtterance()};
if (WOB_DONE_GLOBAL) { return state; }
state.dom = core.getDOMInfo();
var clean = function (s) { return (s || '').replace(/\s+/g, ' ').trim(); };
var labelOf = function (el) {
  var parts = [];
  if (el.labels && el.labels.length) {
    for (var i = 0; i < el.labels.length; i++) { parts.push(el.labels[i].textContent); }
  } else if (el.previousElementSibling && el.previousElementSibling.tagName === 'LABEL') {
    parts.push(el.previousElementSibling.textContent);
  }
  return clean(parts.join(' ')).replace(/\s*:$/, '');
};
var extras = {};
var refs = core.previousDOMInfo;
for (var ref in refs) {
  var el = refs[ref];
  var tag = el.tagName;
  if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') {
    var x = {label: labelOf(el), placeholder: clean(el.getAttribute('placeholder')),
             disabled: !!el.disabled};
    if (tag === 'SELECT') {
      x.options = Array.prototype.map.call(el.options, function (o) { return clean(o.text); });
      x.selected = el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].text) : '';
    }
    extras[ref] = x;
  } else if (el.getAttribute && (el.getAttribute('aria-label') || el.getAttribute('title'))) {
    extras[ref] = {label: clean(el.getAttribute('aria-label') || el.getAttribute('title'))};
  }
}
state.extras = extras;
return state;
"""
"""Returns ``{done, raw_reward, env_reward, reason, utterance[, dom, extras]}``; no DOM once done."""

INTERACTIVE_TAGS = frozenset({"button", "a", "select", "textarea"})
TEXT_INPUT_TAGS = frozenset({
    "input_text", "input_password", "input_email", "input_number", "input_search", "input_tel",
    "input_url", "input_date", "input_time", "input_datetime-local", "input_month", "input_week",
    "textarea",
})
CHECKABLE_TAGS = frozenset({"input_checkbox", "input_radio"})
VALUE_AS_TEXT_TAGS = frozenset({"input_button", "input_submit", "input_reset"})
SKIPPED_TAGS = frozenset({"br", "hr", "script", "style"})


@dataclass(frozen=True)
class ElementTarget:
    """How to act on the element at one index: its DOM ref (>0 elements, <0 text) and bbox centre."""

    ref: int
    center: tuple[float, float]
    tag: str


@dataclass(frozen=True)
class Page:
    """One reading of the page. ``elements[i]`` and ``targets[i]`` describe the same DOM node."""

    done: bool
    raw_reward: float
    env_reward: float
    reason: str | None
    utterance: str
    fields: tuple[tuple[str, str], ...] | None
    elements: tuple[UIElement, ...]
    targets: tuple[ElementTarget, ...]
    signature: int


def read_page(raw: Mapping[str, Any], task_size: tuple[int, int]) -> Page:
    """Parse :data:`READ_PAGE_JS`'s answer. ``task_size`` is the task area (160×210 for MiniWoB).

    ``fields`` is set only when the page itself supplied them (tasks whose ``getUtterance`` returns a
    dict); otherwise the caller runs miniwob's field extractor on the utterance.
    """
    utterance_raw = raw.get("utterance")
    fields: tuple[tuple[str, str], ...] | None = None
    if isinstance(utterance_raw, Mapping):
        utterance = str(utterance_raw.get("utterance", ""))
        fields = tuple((str(k), str(v)) for k, v in dict(utterance_raw.get("fields") or {}).items())
    else:
        utterance = str(utterance_raw or "")
    reason = raw.get("reason")
    base = {
        "done": bool(raw.get("done")),
        "raw_reward": float(raw.get("raw_reward") or 0.0),
        "env_reward": float(raw.get("env_reward") or 0.0),
        "reason": None if reason is None else str(reason),
        "utterance": utterance,
        "fields": fields,
    }
    dom = raw.get("dom")
    if base["done"] or not dom:
        return Page(elements=(), targets=(), signature=hash(("done", utterance)), **base)
    from miniwob.dom import DOMElement  # miniwob's parser: same tree as its observations

    nodes = DOMElement(dom).subtree_elements
    extras = {int(ref): value for ref, value in dict(raw.get("extras") or {}).items()}
    elements: list[UIElement] = []
    targets: list[ElementTarget] = []
    for node in nodes[1:]:  # nodes[0] is <body>
        if not _listed(node):
            continue
        element = to_ui_element(node, extras.get(node.ref, {}), task_size)
        elements.append(element)
        targets.append(ElementTarget(ref=node.ref, center=element.center or (0.0, 0.0), tag=node.tag))
    return Page(elements=tuple(elements), targets=tuple(targets), signature=dom_signature(nodes, utterance),
                **base)


def _listed(node: Any) -> bool:
    """Interactive elements and leaves (text runs, icons, swatches); containers are left out."""
    tag = node.tag
    if tag in SKIPPED_TAGS:
        return False
    return node.is_leaf or tag in INTERACTIVE_TAGS or tag.startswith("input_")


def to_ui_element(node: Any, extra: Mapping[str, Any], task_size: tuple[int, int]) -> UIElement:
    """One DOM node as an AndroidWorld-style ``UIElement`` (tag -> class_name, label -> hint_text)."""
    tag: str = node.tag
    left, top, width, height = float(node.left), float(node.top), float(node.width), float(node.height)
    bbox = (left, left + width, top, top + height)
    disabled = bool(extra.get("disabled", False))
    checkable = tag in CHECKABLE_TAGS
    text: str | None
    if tag == "select":
        text = extra.get("selected") or None
    elif checkable:
        text = None  # the visible name of a checkbox is its label, kept in hint_text
    elif tag in TEXT_INPUT_TAGS or tag in VALUE_AS_TEXT_TAGS:
        text = "" if node.value is None else str(node.value)
    else:
        text = node.text if node.text else None
    hint = None
    if tag == "select" or tag == "textarea" or tag.startswith("input_"):
        hint = extra.get("label") or extra.get("placeholder") or node.id or None
    description = None
    options: Sequence[str] = extra.get("options") or ()
    if tag == "select":
        description = "options: " + ", ".join(options) if options else None
    elif not text and not hint:
        description = extra.get("label") or (node.classes if isinstance(node.classes, str) else None) or None
    task_w, task_h = task_size
    visible = left < task_w and left + width > 0 and top < task_h and top + height > 0
    return UIElement(
        text=text,
        content_description=description,
        class_name=tag,
        hint_text=hint,
        resource_id=node.id or None,
        bbox=bbox,
        is_clickable=not disabled,
        is_editable=tag in TEXT_INPUT_TAGS and not disabled,
        is_checkable=checkable,
        is_checked=bool(node.value) if checkable else False,
        is_focused=bool(node.focused),
        is_enabled=not disabled,
        is_visible=visible,
    )


def dom_signature(nodes: Sequence[Any], utterance: str) -> int:
    """A cheap fingerprint of what is on screen, to tell whether a step changed it.

    Text refs are renumbered on every read, so refs are left out; everything a person could see
    (tag, text, value, focus, position, size) is in.
    """
    return hash((utterance, tuple(
        (n.tag, n.text, str(n.value), bool(n.focused), round(float(n.left), 1), round(float(n.top), 1),
         round(float(n.width), 1), round(float(n.height), 1))
        for n in nodes
    )))
