"""Structured signatures of grounded descriptions: what a step did, to which element, with which value.

Why the matcher needs more than a cosine: a sentence encoder sees two descriptions of a GUI step as
near-identical whenever most of their words are shared, and in GUI steps the one word that differs is
the one that matters. Measured with all-MiniLM-L6-v2: "typed X into the 'Password' field" against the
same sentence with 'Username' scores 0.79, "unchecked" against "checked" 0.91, 'Tab #2' against
'Tab #1' 0.90 — all above δ = 0.75, so a login with both values swapped hits every milestone.

``actions.describe`` writes its sentences from a small grammar ("clicked the 'Login' button",
'typed "<v1>" into the \\'Password\\' field', "opened the Contacts app", …), so the parts that decide
whether two steps are the same can be read back exactly: the **verb** (clicked, checked, unchecked,
typed, scrolled down, …), the element's **role** (button, field, checkbox, …), its **label** and the
typed or answered **value** (after slotting, so ``<v1>`` and ``<v2>`` are different values). The
grounded matcher counts a hit only when these agree *and* the cosine clears δ.

What "agree" forgives, and why (each is a way the same step is rendered differently, never a different
step):

* labels are compared without case, spaces and punctuation ("Log in" = "Login", "From:" = "From",
  "Wi‑Fi" = "Wi-Fi" = "WiFi"), with each word in the singular ('Alarms' = 'Alarm') and in one spelling
  ('Favourites' = 'Favorites', 'Qty' = 'Quantity': the ``aliases`` of ``lexicon.yaml``); digits and
  placeholders stay, so 'Tab #2' ≠ 'Tab #1' and '<v1>' ≠ '<v2>';
* roles are compared by family: a 'Save' *button*, *text*, *image* or *link* is one clickable thing
  whose class name differs between renderings (an Android ImageButton or TextView, a DOM ``button``
  or ``span``), while a field, a toggle, a dropdown, a list and an app stay distinct;
* a scroll or swipe without an element agrees with one in any element: the direction is the step, and
  the container is wherever the gesture happened to start.

Values are what was typed or answered and are compared exactly, case included ("9Ht" is not "9ht",
"-10" is not "10"), up to whitespace and Unicode compatibility forms. (Slotting, which runs first,
is case-insensitive: that is where an instance's values are recognised, not where they are checked.)
Text that is not in the grammar (an LLM's prose, a model's own words) has no signature; the matcher
then falls back to the cosine alone (the paper's matching) for that milestone.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from admire.milestones.lexicon import load_lexicon

_SCROLL_VERBS = ("scrolled", "swiped")
_POINTER_VERBS = ("clicked", "double-tapped", "long-pressed")
DIRECTIONS = ("up", "down", "left", "right")

# The role families of ``signatures_agree``. Roles describe() writes (actions.descriptions._ROLES and its fallbacks)
# plus the few a person or an LLM copying the grammar writes for the same things (icon, file, …).
# A role not listed is its own family, so an unknown role agrees only with itself.
_CLICKABLE = ("button", "link", "image", "icon", "text", "label", "heading", "element", "item", "tab",
              "menu item", "option", "file", "folder", "card", "row", "title", "view")
_ROLE_FAMILY: dict[str, str] = {role: "clickable" for role in _CLICKABLE}
_ROLE_FAMILY |= {"field": "input", "text area": "input", "text field": "input", "text box": "input",
                 "search box": "input", "input": "input"}
_ROLE_FAMILY |= {"checkbox": "toggle", "switch": "toggle", "toggle": "toggle", "radio button": "toggle"}
_ROLE_FAMILY |= {"dropdown": "dropdown", "list": "container", "app": "app"}

_DASHES = dict.fromkeys(map(ord, "‐‑‒–—―−﹣－"), "-")
_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'})
_PLACEHOLDER = re.compile(r"<(?:value|v\d+)>", re.IGNORECASE)

_ROLE = r"[a-z][a-z-]*(?: [a-z][a-z-]*)*"
_PHRASE = rf"(?:the '(?P<label>.+)' (?P<role>{_ROLE})|an? unlabell?ed (?P<urole>{_ROLE}))"
_GRAMMAR: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE | re.DOTALL)) for name, pattern in (
        ("toggle", rf"(?P<verb>checked|unchecked) {_PHRASE}"),
        ("offscreen", r"(?P<verb>clicked|double-tapped|long-pressed) element (?P<index>\d+), which is not on "
                      r"the screen"),
        ("point", r"(?P<verb>clicked|double-tapped|long-pressed) at \((?P<x>-?\d+), (?P<y>-?\d+)\)"),
        ("pointer", rf"(?P<verb>clicked|double-tapped|long-pressed) {_PHRASE}"),
        ("typed", rf'typed "(?P<value>.*)"(?: into {_PHRASE})?'),
        ("scroll", rf"(?P<verb>scrolled|swiped) (?P<direction>up|down|left|right)(?: in {_PHRASE})?"),
        ("app", r"opened the (?P<app>.+) app"),
        ("status", r"declared the task (?P<status>complete|infeasible)"),
        ("answer", r'answered "(?P<value>.*)"'),
    )
)
_FIXED = {
    "went to the home screen": "went home",
    "went back": "went back",
    "pressed enter": "pressed enter",
    "waited": "waited",
    "did an unknown action": "unknown",
}


@dataclass(frozen=True)
class Signature:
    """What a grounded step did: ``verb`` (e.g. "clicked", "unchecked", "typed", "scrolled down"), the
    element's ``role`` and ``label``, and the typed or answered ``value``; None where the sentence has none.

    Fields have whitespace collapsed and are lower-case except ``value``, which keeps its case (it is
    what was typed). Compare two signatures with ``signatures_agree``, not ``==``: agreement forgives
    renderings of the same step (see the module docstring).
    """

    verb: str
    role: str | None = None
    label: str | None = None
    value: str | None = None


def parse_signature(text: str) -> Signature | None:
    """The signature of a sentence in ``actions.describe``'s grammar, or None for any other text.

    Lenient only where a copy of a description drifts without changing its meaning: case, surrounding
    whitespace, one trailing full stop, curly quotes. Placeholders (``<value>``, ``<v1>``) are ordinary
    label and value text, so the caller slots the sentence first.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_signature reads a string, got {type(text).__name__}")
    return _parse(text)


@lru_cache(maxsize=65_536)
def _parse(text: str) -> Signature | None:
    sentence = " ".join(text.translate(_QUOTES).split())
    if sentence.endswith(".") and not sentence.endswith(".."):
        sentence = sentence[:-1].rstrip()
    if not sentence:
        return None
    fixed = _FIXED.get(sentence.lower())
    if fixed is not None:
        return Signature(fixed)
    for name, pattern in _GRAMMAR:
        match = pattern.fullmatch(sentence)
        if match is not None:
            return _build(name, match)
    return None


def _build(form: str, match: re.Match[str]) -> Signature:
    parts = match.groupdict()
    verb = (parts.get("verb") or "").lower()
    role, label = _element(parts)
    if form in ("toggle", "pointer"):
        return Signature(verb, role, label)
    if form == "offscreen":
        return Signature(verb, "missing element", parts["index"])
    if form == "point":
        # A point that hit no element: only the exact point is the same step (the cosine of two
        # coordinate pairs says nothing about whether they are near).
        return Signature(verb, "point", f"{parts['x']}, {parts['y']}")
    if form == "typed":
        return Signature("typed", role, label, _value(parts["value"]))
    if form == "scroll":
        return Signature(f"{verb} {parts['direction'].lower()}", role, label)
    if form == "app":
        return Signature("opened", "app", _normalise(parts["app"]))
    if form == "status":
        return Signature("declared", value=parts["status"].lower())
    return Signature("answered", value=_value(parts["value"]))  # form == "answer"


def _element(parts: dict[str, str | None]) -> tuple[str | None, str | None]:
    if parts.get("urole"):
        return _normalise(parts["urole"] or ""), None
    if parts.get("role"):
        return _normalise(parts["role"] or ""), _normalise(parts["label"] or "")
    return None, None


def _normalise(text: str) -> str:
    """Compatibility-normalised, one kind of dash, lower-case, whitespace collapsed."""
    return _value(text).lower()


def _value(text: str) -> str:
    """Compatibility-normalised, one kind of dash, whitespace collapsed, case kept; placeholders lower-case."""
    text = " ".join(unicodedata.normalize("NFKC", text).translate(_DASHES).split())
    return _PLACEHOLDER.sub(lambda match: match.group(0).lower(), text)


def signatures_agree(a: Signature | None, b: Signature | None) -> bool:
    """Whether two signatures describe the same step: verb, role family, label and value all agree.

    None (text outside the grammar) agrees with nothing. Two absent values or labels agree.
    """
    if a is None or b is None:
        return False
    return a.verb == b.verb and a.value == b.value and _elements_agree(a, b)


def _elements_agree(a: Signature, b: Signature) -> bool:
    if a.verb.startswith(_SCROLL_VERBS) and (a.role is None or b.role is None):
        return True  # a scroll without an element: the direction is the step
    return role_family(a.role) == role_family(b.role) and _label_key(a.label) == _label_key(b.label)


def role_family(role: str | None) -> str | None:
    """The family a role is compared by (``clickable``, ``input``, ``toggle`` …); an unknown role is its own."""
    return None if role is None else _ROLE_FAMILY.get(role, role)


@lru_cache(maxsize=65_536)
def _label_key(label: str | None) -> str | None:
    """A label without case, spaces and punctuation; placeholders and symbol-only labels kept as they are."""
    if label is None:
        return None
    pieces: list[str] = []
    last = 0
    for placeholder in _PLACEHOLDER.finditer(label):
        pieces.append(_alphanumeric(label[last:placeholder.start()]))
        pieces.append(placeholder.group(0).lower())
        last = placeholder.end()
    pieces.append(_alphanumeric(label[last:]))
    key = "".join(pieces)
    return key if key else "".join(label.split())  # "+" and "-" buttons keep their symbol


def _alphanumeric(text: str) -> str:
    """Letters and digits only, each word in the singular ('Alarms' = 'Alarm': a renderer's plural)."""
    return "".join(canonical_word(_singular("".join(ch for ch in word if ch.isalnum())))
                   for word in text.casefold().split())


# One spelling for words a label may be rendered in two ways (British and American spelling, common UI
# abbreviations): 'Favourites' = 'Favorites', 'Qty' = 'Quantity'. GUI knowledge shared with the prose
# reader, so it lives in its lexicon (the ``aliases`` of lexicon.yaml).
WORD_ALIASES = load_lexicon().aliases


def canonical_word(word: str) -> str:
    """``word`` (lower-case) in the spelling of ``WORD_ALIASES``, a plural kept plural ("msgs" → "messages")."""
    if word in WORD_ALIASES:
        return WORD_ALIASES[word]
    if word.endswith("s") and word[:-1] in WORD_ALIASES:
        return WORD_ALIASES[word[:-1]] + "s"
    return word


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
