"""Slot placeholders: one milestone list for every instance of a templated task (METHOD §2, Slots).

MiniWoB++ and AndroidWorld draw a task's parameters per episode ("Enter the username "karrie" …",
next episode "… "vina" …"). With milestones keyed by task, the literal values of the instruction are
replaced by a placeholder on *both* sides of every comparison, so "typed "<value>" into the 'Username'
field" serves every instance.

Why one placeholder, ``<value>``, rather than numbered ``<value1>``, ``<value2>``: extraction is a
heuristic and does not find the same number of values in every instance of a template (a two-word
name, a capitalised word that happens to be a value), so any numbering would shift between the
instance that wrote a milestone and the instance matched against it. The element's label ("into the
'Password' field") already says which value goes where; the placeholder only has to hide the value.

Replacing a word that is *not* a value (a constant button name such as "Menu") is harmless, because it
is replaced in every instance of the template alike; missing a value costs similarity. Extraction
therefore leans towards extracting.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from admire.actions import MAX_LABEL_CHARS

PLACEHOLDER = "<value>"

# Quoted strings: straight or curly double quotes anywhere; single quotes only where they open after
# a non-word character and close before one (so "don't" and "user's" are not quotes).
_DOUBLE_QUOTED = re.compile(r'"([^"\n]+)"|“([^”\n]+)”')
_SINGLE_QUOTED = re.compile(r"(?<!\w)'([^'\n]+)'(?!\w)|‘([^’\n]+)’")

_URL = re.compile(r"https?://[^\s\"'<>]+[^\s\"'<>.,;:!?)]")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_HANDLE = re.compile(r"(?<![\w@])@\w+")
_FILENAME = re.compile(r"(?<![\w.])\w[\w-]*\.[A-Za-z0-9]{1,5}(?!\w)(?!\.\w)")
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
        for match in pattern.finditer(rest):
            values.append(match.group(0))
            rest = rest[:match.start()] + " " * (match.end() - match.start()) + rest[match.end():]
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


def apply_slots(text: str, values: Sequence[str]) -> str:
    """``text`` with every value replaced by ``<value>``: case-insensitive, whole tokens only.

    A value counts as a whole token when no letter, digit or underscore touches it on either side, so
    "5" is replaced in "typed "5"" but not in "15". Whitespace inside a value matches any whitespace
    (or none: "9:37 PM" typed as "9:37PM"). Grounded descriptions clip long texts to
    ``MAX_LABEL_CHARS`` with an ellipsis, so a long value's clipped form is replaced too. Placeholders
    already in ``text`` are left alone, so applying slots twice changes nothing.
    """
    if not isinstance(text, str):
        raise TypeError(f"text to slot must be a string, got {type(text).__name__}")
    if isinstance(values, str):
        raise TypeError("slot values must be a sequence of strings, not one string; wrap it in a list")
    pattern = _slot_pattern(tuple(values))
    return text if pattern is None else pattern.sub(PLACEHOLDER, text)


@lru_cache(maxsize=4096)
def _slot_pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    forms: dict[str, None] = {}
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"slot values must be strings, got {type(value).__name__}: {value!r}")
        value = " ".join(value.split())
        if not _usable(value):
            continue
        forms[value.lower()] = None
        if len(value) > MAX_LABEL_CHARS:
            forms[(value[: MAX_LABEL_CHARS - 1].rstrip() + "…").lower()] = None
    if not forms:
        return None
    alternatives = [re.escape(PLACEHOLDER)]
    for form in sorted(forms, key=len, reverse=True):
        alternatives.append(r"\s*".join(re.escape(part) for part in form.split(" ")))
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)
