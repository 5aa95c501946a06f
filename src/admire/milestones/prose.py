"""Reading a milestone written in prose against a grounded step: does it name this step, or another?

Why: a milestone an LLM paraphrased ("Login button clicked", "enter the password", "Wi-Fi turned on")
has no signature (``signature.py``), so the grounded matcher used to fall back to the cosine alone, and
the cosine fails both ways on such pairs. Measured with all-MiniLM-L6-v2 on the hand-labelled pairs
(``admire bench matcher_calibration``): a prose milestone that names the step's element and action
scores 0.70 on average against the step's grounded description, below δ = 0.75 in 60% of the pairs,
while "<value> checkbox unchecked" scores 0.84 against "checked the '<value>' checkbox" and
"scrolled up the results" 0.88 against a scroll down.

A grounded description has a signature (verb, role, label, value), so what the prose must say is
known. This module reads the prose with a small lexicon of GUI verbs and compares:

* **conflict** — the prose states an action the step did not do (checked vs unchecked, turned on vs off,
  scrolled up vs down, clicked a field vs typed into it, went back vs home, opened vs long-pressed), or
  names a number or slot the step does not have ('Tab #3' for 'Tab #2', ``<v2>`` for ``<v1>``). A
  conflicting prose milestone is not this step, whatever the cosine.
  It also conflicts when it names the twin of the step's control: a label word's opposite without the
  word itself ("Sign In clicked" against 'Sign Up', "marked as read" against 'Mark as unread').
* **anchored** — it states a compatible action and names the step's element: every content word of the label
  ("login", "first name", ``<value>``), compared by their dictionary forms (lemminflect's English lemmas) so
  "Alarms" names 'Alarm', "deleted" names 'Delete' and "cancelled" names 'Cancel', with one spelling for
  British and American forms and common abbreviations ('Qty', 'Prev'), the parts of a hyphenated label kept
  ('Check-in' is not 'Check-out') and a few names prose gives one-word or symbol labels (a 'To' field holds
  the recipient or the destination, '×' is multiply); and no other verb is left unexplained ("email deleted"
  against a click on the email is an effect the label does not name). A step whose label the prose does not
  name is anchored by its positional slot alone ("typed <v1>") only when the prose names no other element
  ("typed <v1> as the event location" against 'Event title' is a slot in another field). The matcher then
  needs only the lower cosine ``prose_threshold``: the words already say which step it is.
* **neutral** — neither (an effect-only milestone such as "message sent"): the cosine and the contrast
  against the screen's other targets decide, as before.

This is deliberately a lexicon, not a parser: it only ever *narrows* what the cosine may match
(conflict) or vouches for a pair whose prose repeats the step's own label and action (anchored), and
text it does not understand stays neutral. Words are lower-case ASCII-folded; word forms come from a
dictionary (lemminflect, which ships its English data in its wheel), and the GUI knowledge (verbs by kind,
phrases, which kinds each step may be called by, opposites, aliases, synonyms, role and stop words, nouns a
dictionary would read as verbs) is data: ``lexicon.yaml`` beside this module, read by ``lexicon.py``. This
module holds only how it is read. The lexicon is English, as the grounded grammar is.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from admire.milestones.lexicon import load_lexicon
from admire.milestones.signature import DIRECTIONS, Signature, canonical_word, role_family

ProseVerdict = Literal["anchored", "neutral", "conflict"]

_TOKEN = re.compile(r"<(?:value|v\d+)>|[a-z0-9]+", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<(?:value|v\d+)>", re.IGNORECASE)
_POSITIONAL = re.compile(r"<v\d+>", re.IGNORECASE)
# From the start of a run of letters and digits only: a start inside a long run rescans it (quadratic).
_HYPHENATED = re.compile(r"(?<![a-z0-9])[a-z0-9]++(?:-[a-z0-9]++)+", re.IGNORECASE)
# The sections of lexicon.yaml (what each is for is said there).
_LEXICON = load_lexicon()
_STOP = _LEXICON.stop_words
_KEEP = _LEXICON.keep  # nouns a dictionary would read as a verb of the lexicon ("setting" → "set")
_ROLE_WORDS = _LEXICON.role_words  # role words prose names elements by, and the role each stands for


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The dictionary form of a word (lemminflect's English lemmas, the verb's first), the same on both sides
    of a comparison: "clicked", "clicking", "clicks" → "click"; "tapped" → "tap"; "sent" → "send";
    "Alarms" → "alarm"; "cancelled" → "cancel". A word the dictionary does not know keeps its form, except
    a past form ("unchecked" → "uncheck"); placeholders and numbers are kept as they are."""
    from lemminflect import getAllLemmas, getLemma

    word = canonical_word(word.lower())
    if word in _KEEP:
        return _KEEP[word]
    if _PLACEHOLDER.fullmatch(word) or word.isdigit() or len(word) <= 2:
        return word
    lemmas = getAllLemmas(word)
    for upos in ("VERB", "NOUN"):
        if lemmas.get(upos):
            return str(lemmas[upos][0])
    if _ends_like_a_past(word):  # "unchecked" is an adjective to the dictionary, the undoing of a tick to a GUI
        return str(getLemma(word, upos="VERB")[0])
    for upos in ("ADJ", "ADV"):
        if lemmas.get(upos):
            return str(lemmas[upos][0])
    return word


def _ends_like_a_past(word: str) -> bool:
    """A past form a dictionary does not know ("unticked"), read by its ending."""
    return len(word) >= 5 and word.endswith("ed") and word.isascii() and word.isalpha()


@lru_cache(maxsize=65_536)
def is_past_form(word: str) -> bool:
    """Whether ``word`` is a verb's past tense or participle ("deleted", "sent"): an effect the prose states."""
    from lemminflect import getAllLemmas, getInflection

    known = getAllLemmas(word)
    verbs = known.get("VERB")
    if not verbs:
        return _ends_like_a_past(word) and "NOUN" not in known
    # A past form that is also the verb itself ("run", "set", "forecast") does not say the prose is past.
    return any(word != lemma and word in getInflection(lemma, tag=tag) for lemma in verbs for tag in ("VBD", "VBN"))


def _stems(words: str) -> tuple[str, ...]:
    return tuple(stem(w) for w in _TOKEN.findall(_fold(words)))


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


# The GUI verbs by the kind of action they state, as dictionary forms. A prose milestone may state several
# ("long pressed" is long + click); phrases are read before single words, on the words as written.
_PHRASES = _LEXICON.phrases
_KIND_STEMS = {kind: frozenset(stem(word) for word in words) for kind, words in _LEXICON.verbs.items()}
_STEM_KIND = {word: kind for kind, words in _KIND_STEMS.items() for word in words}
_COMPATIBLE = _LEXICON.compatible  # what each kind of grounded step (step_kind) may be called in prose
_SELF_NAMED = _LEXICON.self_named  # steps whose kind of action is the whole step


@dataclass(frozen=True)
class ProseReading:
    """What a prose milestone states: the kinds of GUI action, every word's stem, the numbers and slots
    it names, its direction words, the role families it names elements by ("the Password *field*"), its
    past forms outside the lexicon ("deleted", "sent"), which state an effect, and its ``content``: the
    stems left once stop words, verbs, role words, slots and numbers are taken out (what it names)."""

    kinds: frozenset[str]
    stems: frozenset[str]
    identifiers: frozenset[str]
    directions: frozenset[str]
    roles: frozenset[str]
    other_verbs: frozenset[str]
    content: frozenset[str]


@lru_cache(maxsize=65_536)
def read_prose(text: str) -> ProseReading:
    """The lexicon's reading of ``text`` (any string; unknown words are simply not verbs)."""
    tokens = [t.lower() for t in _TOKEN.findall(_fold(text))]
    kinds: set[str] = set()
    in_phrase: set[int] = set()
    for i in range(len(tokens)):
        for phrase, kind in _PHRASES:
            if tuple(tokens[i:i + len(phrase)]) == phrase:
                kinds.add(kind)
                in_phrase.update(range(i, i + len(phrase)))
    stems = [stem(token) for token in tokens]
    other_verbs: set[str] = set()
    for i, token in enumerate(tokens):
        stem_kind = _STEM_KIND.get(stems[i])
        if stem_kind is not None:
            if i not in in_phrase:
                kinds.add(stem_kind)
        elif is_past_form(token) and i not in in_phrase:
            other_verbs.add(stems[i])
    return ProseReading(
        kinds=frozenset(kinds),
        stems=frozenset(stems),
        identifiers=frozenset(t for t in tokens if _PLACEHOLDER.fullmatch(t) or t.isdigit()),
        directions=frozenset(t for t in tokens if t in DIRECTIONS),
        roles=frozenset(str(role_family(_ROLE_WORDS[t])) for t in tokens if t in _ROLE_WORDS),
        other_verbs=frozenset(other_verbs),
        content=frozenset(stems[i] for i, t in enumerate(tokens)
                          if t not in _STOP and t not in _ROLE_WORDS and i not in in_phrase
                          and not _PLACEHOLDER.fullmatch(t) and not t.isdigit()
                          and _STEM_KIND.get(stems[i]) is None and stems[i] not in other_verbs),
    )


def step_kind(signature: Signature) -> str | None:
    """The kind of action a grounded step did, as the lexicon's ``compatible`` knows them; None for steps
    prose is not read against (a point, an element off the screen, waiting)."""
    verb, dropdown = signature.verb, role_family(signature.role) == "dropdown"
    if signature.role in ("point", "missing element"):
        return None
    if verb == "clicked":
        return "click_dropdown" if dropdown else "click"
    if verb == "typed":
        return "type_dropdown" if dropdown else "type"
    if verb.startswith(("scrolled", "swiped")):
        return "scroll"
    return {"double-tapped": "double", "long-pressed": "long", "checked": "check", "unchecked": "uncheck",
            "opened": "app", "went back": "back", "went home": "home", "pressed enter": "enter",
            "answered": "answer", "declared": "declare"}.get(verb)


@lru_cache(maxsize=65_536)
def prose_verdict(step: Signature | None, milestone: str) -> ProseVerdict:
    """Whether the prose ``milestone`` names the grounded ``step`` (anchored), another step (conflict),
    or cannot tell (neutral). A step without a signature, or of a kind prose is not read against, is
    neutral. Cached like the signatures: a batch compares the same descriptions with the same milestones
    over and over."""
    kind = step_kind(step) if step is not None else None
    if step is None or kind is None:
        return "neutral"
    prose = read_prose(milestone)
    label, value = _stems(_SYMBOL_NAMES.get((step.label or "").strip(), step.label or "")), _stems(step.value or "")
    if not prose.identifiers <= set(label) | set(value):
        return "conflict"  # a number or slot the step does not have: 'Tab #3', <v2>
    if kind == "scroll" and prose.directions and step.verb.split()[-1] not in prose.directions:
        return "conflict"  # scrolled up against a scroll down
    # Stop words are not names ("Add to cart"), except a label that is one ('To', 'From') and the parts of
    # a hyphenated word: 'Check-in' is not 'Check-out'.
    joined = {stem(part) for word in _HYPHENATED.findall(_fold(step.label or "")) for part in word.split("-")}
    label_words = {w for w in label if w not in _STOP or w in joined} or set(label)
    if any(opposite in prose.stems and word not in prose.stems
           for word in label for opposite in _OPPOSITES.get(word, ())):
        return "conflict"  # "Sign In clicked" against 'Sign Up', "marked as read" against 'Mark as unread'
    compatible = _COMPATIBLE[kind]
    # A word of the label is the element's name, not a verb: 'Search' names the field in "search
    # query entered", so it does not state a search.
    stated = {k for k in prose.kinds if not _explained_by_label(k, prose, label_words)}
    if stated and not stated & compatible:
        return "conflict"  # clicked a field that was typed into, went home instead of back, …
    family = role_family(step.role)
    if family != "app" and label_words and not _names_any(prose, label_words) and family in prose.roles:
        # An element of the same role with none of this one's name: "the Password field". (Apps are
        # named by their kind as often as by their name: "the messaging app".)
        return "conflict"
    label_verbs = {verb for verb in prose.other_verbs if _names(verb, label_words)}
    acts = bool(prose.kinds & compatible) or (bool(label_verbs) and kind in ("click", "app"))
    if not acts or prose.other_verbs - label_verbs:
        return "neutral"  # no action stated, or an effect the label does not name ("email deleted")
    if kind in _SELF_NAMED:
        return "anchored"
    if label_words and all(_names_any(prose, {word}) for word in label_words):
        return "anchored"
    # A positional slot (<v1>, <v2>) is one value of the goal, typed into one field only, so naming it
    # names the step; the single <value> of an unpositional goal could go into any field.
    slots = {w for w in value if _POSITIONAL.fullmatch(w)}
    if not label_words:
        slots |= {w for w in value if _PLACEHOLDER.fullmatch(w)}  # an unlabelled field: the value is all there is
    if not slots or not slots <= prose.stems:
        return "neutral"
    # ... unless the prose also names an element the label does not: "typed <v1> as the event location"
    # against 'Event title' puts the slot in another field.
    return "anchored" if _unnamed_content(prose, label_words) == set() else "neutral"


def _unnamed_content(prose: ProseReading, label_words: set[str]) -> set[str]:
    """Content words of the prose that are neither a verb of the lexicon, a role word, a slot nor a word
    of the label or part of one ("name" of 'Username')."""
    return {s for s in prose.content
            if not _names(s, label_words) and not (len(s) >= 3 and any(s in word for word in label_words))}


# Words that name the other one of a pair of controls, by dictionary form: a label with one, read against
# prose with the other (and not the label's), names the twin ('Sign in' / "Sign up clicked").
_OPPOSITE_PAIRS = _LEXICON.opposites
_OPPOSITES: dict[str, frozenset[str]] = {
    stem(word): frozenset(stem(b if a == word else a) for a, b in _OPPOSITE_PAIRS if word in (a, b))
    for pair in _OPPOSITE_PAIRS for word in pair
}

# What prose calls the fields and keys a label names in one word or a symbol: a 'To' field is where
# the recipient or destination goes, a calculator's '×' is "multiply".
_SYMBOL_NAMES = _LEXICON.symbol_names
_SYNONYMS = {stem(word): frozenset(stem(s) for s in synonyms) for word, synonyms in _LEXICON.synonyms.items()}


def _names(prose_stem: str, label_words: set[str]) -> bool:
    """Whether a word of the prose (as its dictionary form) is a word of the label, or one of the synonyms of
    ``_SYNONYMS``."""
    return any(prose_stem == word or prose_stem in _SYNONYMS.get(word, ()) for word in label_words)


def _names_any(prose: ProseReading, words: set[str]) -> bool:
    return any(_names(s, words) for s in prose.stems)


def _explained_by_label(kind: str, prose: ProseReading, label_words: set[str]) -> bool:
    """Whether every word that gave the prose this kind of action is a word of the step's label."""
    hits = _KIND_STEMS.get(kind, frozenset()) & prose.stems
    return bool(hits) and hits <= label_words
