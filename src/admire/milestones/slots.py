"""Slot placeholders: one milestone list for every instance of a templated task (method.md §2, Slots; §7).

MiniWoB++ and AndroidWorld draw a task's parameters per episode ("Enter the username "karrie" …",
next episode "… "vina" …"). With milestones shared between instances, the literal values of the
instruction are replaced by placeholders on *both* sides of every comparison, so "typed "<v1>" into
the 'Username' field" serves every instance. Which placeholders depends on the milestone key
(``slot_scheme``):

* ``instruction`` key — ``none``: a list serves one instruction, whose values are its own.
* ``task`` key — ``single``: every value becomes ``<value>``. Instances of one task template do not all
  have the same number of values (click-checkboxes asks for 0 to 6 boxes; extraction is a heuristic
  that may find a capitalised word in one instance and not in another), so any numbering would shift
  between the instance that wrote a milestone and the instance matched against it. The price: a value
  typed into the wrong field still matches ("typed "<value>" into the 'Username' field" whichever value
  it was), so a login with its two values swapped hits every milestone.
* ``skeleton`` key — ``positional``: value i, numbered by its *first appearance* in the instruction,
  becomes ``<v{i}>``. This is safe exactly because of the key: the skeleton is the instruction with
  these placeholders, so two instances with the same skeleton have the same number of values, in the
  same order, in the same places of the sentence — ``<v2>`` is the password in both. A value typed
  into the wrong field then reads "typed "<v2>" into the 'Username' field" and matches nothing.

Replacing a word that is *not* a value (a constant button name such as "Menu") is harmless, because it
is replaced in every instance of the template alike; missing a value costs similarity. Extraction
therefore leans towards extracting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal

from admire.actions import MAX_LABEL_CHARS

PLACEHOLDER = "<value>"

# Quoted strings: straight or curly double quotes anywhere; single quotes only where they open after
# a non-word character and close before one (so "don't" and "user's" are not quotes).
_DOUBLE_QUOTED = re.compile(r'"([^"\n]+)"|“([^”\n]+)”')
_SINGLE_QUOTED = re.compile(r"(?<!\w)'([^'\n]+)'(?!\w)|‘([^’\n]+)’")

_URL = re.compile(r"https?://[^\s\"'<>]+[^\s\"'<>.,;:!?)]")
# Starting only where a run of address characters starts: a start inside a long run would rescan it, and a
# goal of one long word would cost quadratic time.
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_HANDLE = re.compile(r"(?<![\w@])@\w+")
# A file name is the whole of a run of name characters (leading dashes left out, as "value"): a start
# inside the run would rescan it to its end, quadratic on "a-a-a-…".
_FILENAME = re.compile(r"(?<![\w.-])-*+(?P<value>\w[\w-]*+\.[A-Za-z0-9]{1,5})(?!\w)(?!\.\w)")
# A time with its AM/PM ("9:37 PM"), before plain numbers so the two stay one value.
_TIME = re.compile(r"(?<![\w:])\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\.?)?(?![\w:])")
# Numbers, dates, phone numbers, ranges, ordinals: "5", "-10", "05/20/2010", "+1-555-0199", "7th".
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,:/-]\d+)*(?:st|nd|rd|th|%)?(?![\w])")
# Random strings of the kind MiniWoB++ generates: letters mixed with digits ("9Ht", "i6Vdpn2") or a
# capital after a lower-case letter ("qKDSf", "yA").
_MIXED_TOKEN = re.compile(r"(?<![\w@])(?:(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z\d]{2,}|[a-z]+[A-Z][A-Za-z\d]*)(?!\w)")
# Runs of capitalised words ("Audrey", "Heard Island", "McDonald Islands", "MOT").
_CAPITALISED_RUN = re.compile(r"(?<![\w@.])[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")
# Comma lists of single words ("Select fzzqo, NYYyS82 and click Submit"): lower-case values that no
# other rule can see. Common words in such a list are not items.
_WORD_LIST = re.compile(r"(?<![\w-])[\w-]+(?:,\s+[\w-]+)+")

# Words that are instructions, not values, when they appear capitalised (sentence starts, button
# names). A value that is also one of these words is still extracted when it is quoted.
_COMMON_WORDS_TEXT = """
    a an the and or but if then so to from into onto in on at of for with by as is are be it its this
    that these those all any each every both either some no not yes ok okay i you your me my we our us
    they them their he she his her please also only just when where which who what how there here
    enter type select choose click tap press hit find book use give forward send reply switch expand
    collapse navigate check uncheck copy paste guess focus draw search submit cancel login log sign
    next previous prev back done save menu home open close go scroll swipe set add delete remove create
    edit turn enable disable mark star record take play pause stop start show hide clear drag drop move
    resize highlight toggle increase decrease change update rename share call text message write
    read look get make put keep run install uninstall download upload first last new old
    button link field box checkbox tab item list option dropdown icon page app apps screen file folder
    am pm
"""
COMMON_WORDS: frozenset[str] = frozenset(_COMMON_WORDS_TEXT.split())


def extract_slot_values(instruction: str) -> list[str]:
    """The literal values of ``instruction``: longest first, without repeats (case-insensitive).

    Longest first so that replacing them never breaks a long value by replacing a shorter one inside
    it first ("Heard Island and McDonald Islands" before "Heard Island"). Quoted strings are taken
    whole and nothing inside them is looked at again.
    """
    if not isinstance(instruction, str):
        raise TypeError(f"an instruction must be a string, got {type(instruction).__name__}")
    values: list[str] = []
    outside: list[str] = []  # the instruction with quoted parts blanked out
    last = 0
    for match in sorted(
        [*_DOUBLE_QUOTED.finditer(instruction), *_SINGLE_QUOTED.finditer(instruction)],
        key=lambda m: m.start(),
    ):
        if match.start() < last:
            continue  # a quote inside another quote
        values.append(next(g for g in match.groups() if g is not None))
        outside.append(instruction[last:match.start()])
        outside.append(" " * (match.end() - match.start()))
        last = match.end()
    outside.append(instruction[last:])
    rest = "".join(outside)
    # Lists first: the token rules below blank their matches, which would split a list apart.
    list_values = _list_items(rest)

    for pattern in (_URL, _EMAIL, _HANDLE, _FILENAME, _TIME, _NUMBER, _MIXED_TOKEN):
        pieces, last = [], 0  # each match blanked, the text rebuilt once per pattern (not once per match)
        group = "value" if "value" in pattern.groupindex else 0  # the value may be part of what the rule reads
        for match in pattern.finditer(rest):
            start, end = match.span(group)
            values.append(match.group(group))
            pieces += [rest[last:start], " " * (end - start)]
            last = end
        rest = "".join([*pieces, rest[last:]])
    values.extend(_capitalised_values(rest))
    values.extend(list_values)
    return _longest_first(values)


def _capitalised_values(text: str) -> list[str]:
    """Runs of capitalised words with the common words trimmed off both ends (and split at them)."""
    found: list[str] = []
    for match in _CAPITALISED_RUN.finditer(text):
        run: list[str] = []
        for word in match.group(0).split():
            if word.lower().strip("'-") in COMMON_WORDS:
                if run:
                    found.append(" ".join(run))
                run = []
            else:
                run.append(word)
        if run:
            found.append(" ".join(run))
    return [value for value in found if any(ch.isalpha() for ch in value)]


def _list_items(text: str) -> list[str]:
    items: list[str] = []
    for match in _WORD_LIST.finditer(text):
        words = [w.strip() for w in match.group(0).split(",")]
        kept = [w for w in words if w.lower() not in COMMON_WORDS and not w.isdigit()]
        if len(kept) >= 2 or (len(kept) == len(words) and kept):
            items.extend(kept)
    return items


def _longest_first(values: Sequence[str]) -> list[str]:
    unique: dict[str, str] = {}
    for value in values:
        value = " ".join(value.split())
        if _usable(value) and value.lower() not in unique:
            unique[value.lower()] = value
    # Stable sort: equal lengths keep the order they appear in the instruction.
    return sorted(unique.values(), key=len, reverse=True)


def _usable(value: str) -> bool:
    """A value must contain a letter or digit: replacing bare punctuation would shred every sentence."""
    return any(ch.isalnum() for ch in value)


def positional_values(instruction: str) -> list[str]:
    """The values of ``instruction`` in order of first appearance: value i becomes ``<v{i+1}>``.

    Appearance is read the way ``apply_slots`` replaces: longest value first at every position, whole
    tokens only. So a value that occurs only inside a longer one ("Heard Island" inside "Heard Island
    and McDonald Islands") gets no number of its own, and a value that also occurs on its own is
    numbered where it first does.
    """
    values = extract_slot_values(instruction)
    compiled = _positional_pattern(tuple(values))
    if compiled is None:
        return []
    pattern, index_of = compiled
    order: dict[int, None] = {}
    for match in pattern.finditer(instruction):
        if not _ANY_PLACEHOLDER.fullmatch(match.group(0)):
            order.setdefault(_index_of(match.group(0), index_of, values), None)
    return [values[i] for i in order]


def apply_slots(text: str, values: Sequence[str], positional: bool = False) -> str:
    """``text`` with every value replaced by a placeholder: case-insensitive, whole tokens only.

    ``positional=False`` (the ``single`` scheme) writes ``<value>`` for every value; ``positional=True``
    writes ``<v{i+1}>`` for ``values[i]``, so pass ``positional_values(instruction)``. A value counts as a
    whole token when no letter, digit or underscore touches it on either side, so "5" is replaced in
    "typed "5"" but not in "15". Longer values win over shorter ones inside them. Whitespace inside a
    value matches any whitespace (or none: "9:37 PM" typed as "9:37PM"). Grounded descriptions clip long
    texts to ``MAX_LABEL_CHARS`` with an ellipsis, so a long value's clipped form is replaced too.
    Placeholders already in ``text`` (``<value>``, ``<v1>`` …) are left alone, so applying slots twice
    changes nothing.
    """
    if not isinstance(text, str):
        raise TypeError(f"text to slot must be a string, got {type(text).__name__}")
    if isinstance(values, str):
        raise TypeError("slot values must be a sequence of strings, not one string; wrap it in a list")
    if not positional:
        pattern = _slot_pattern(tuple(values))
        return text if pattern is None else pattern.sub(_keep_placeholders(PLACEHOLDER), text)
    compiled = _positional_pattern(tuple(values))
    if compiled is None:
        return text
    pattern, index_of = compiled

    def numbered(match: re.Match[str]) -> str:
        found = match.group(0)
        if _ANY_PLACEHOLDER.fullmatch(found):
            return found
        return positional_placeholder(_index_of(found, index_of, values))

    return pattern.sub(numbered, text)


def positional_placeholder(index: int) -> str:
    """``<v{index+1}>``: the placeholder of the value at ``index`` of ``positional_values``."""
    return f"<v{index + 1}>"


SlotScheme = Literal["none", "single", "positional"]
_SCHEMES: dict[str, SlotScheme] = {"instruction": "none", "task": "single", "skeleton": "positional"}


def slot_scheme(key: str) -> SlotScheme:
    """How values are slotted under a milestone key: instruction → none, task → single, skeleton → positional."""
    scheme = _SCHEMES.get(key)
    if scheme is None:
        raise ValueError(f"milestone_reward.key is 'task', 'instruction' or 'skeleton', got {key!r}")
    return scheme


def skeleton(goal: str) -> str:
    """``goal`` with its values replaced by positional placeholders and whitespace normalised.

    "Enter the username "karrie" and the password "9Ht" …" → "Enter the username "<v1>" and the
    password "<v2>" …": instances that share it share the structure of their values (``slot_scheme``).
    """
    if not isinstance(goal, str):
        raise TypeError(f"an instruction must be a string, got {type(goal).__name__}")
    return " ".join(apply_slots(goal, positional_values(goal), positional=True).split())


_ANY_PLACEHOLDER = re.compile(r"<(?:value|v\d+)>", re.IGNORECASE)


def _keep_placeholders(placeholder: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        found = match.group(0)
        return found if _ANY_PLACEHOLDER.fullmatch(found) else placeholder

    return replace


def _form_key(text: str) -> str:
    """What a matched value is looked up by: case and whitespace do not count (the pattern ignores both)."""
    return "".join(text.lower().split())


def _index_of(found: str, index_of: dict[str, int], values: Sequence[str]) -> int:
    """The index of the value a match of the positional pattern is a form of."""
    index = index_of.get(_form_key(found))
    if index is not None:
        return index
    # Case folding the regex applies but str.lower() does not (rare Unicode): ask each value's pattern.
    for form, candidate in _forms(tuple(values)):
        if _compile([form]).fullmatch(found):
            return candidate
    raise AssertionError(f"{found!r} matched the slot pattern but none of its values")  # pragma: no cover


def _forms(values: tuple[str, ...]) -> list[tuple[str, int]]:
    """(form, index of its value) for every usable value and the clipped form of a long one; first wins."""
    forms: dict[str, int] = {}
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(f"slot values must be strings, got {type(value).__name__}: {value!r}")
        value = " ".join(value.split())
        if not _usable(value):
            continue
        forms.setdefault(value.lower(), index)
        if len(value) > MAX_LABEL_CHARS:
            forms.setdefault((value[: MAX_LABEL_CHARS - 1].rstrip() + "…").lower(), index)
    return list(forms.items())


def _compile(forms: Sequence[str]) -> re.Pattern[str]:
    alternatives = [_ANY_PLACEHOLDER.pattern]
    for form in sorted(forms, key=len, reverse=True):
        alternatives.append(r"\s*".join(re.escape(part) for part in form.split(" ")))
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


@lru_cache(maxsize=4096)
def _slot_pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    forms = _forms(values)
    return _compile([form for form, _ in forms]) if forms else None


@lru_cache(maxsize=4096)
def _positional_pattern(values: tuple[str, ...]) -> tuple[re.Pattern[str], dict[str, int]] | None:
    forms = _forms(values)
    if not forms:
        return None
    index_of: dict[str, int] = {}
    for form, index in forms:
        index_of.setdefault(_form_key(form), index)
    return _compile([form for form, _ in forms]), index_of
