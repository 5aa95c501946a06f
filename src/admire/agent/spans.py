"""Text spans a policy may type, taken from the goal sentence alone.

The ``dom`` policy cannot invent text: everything it types is a span of the instruction it was given
(a quoted string, a name, a number, a content word). That keeps the action space finite and honest —
the env's ground-truth fields are never looked at, so what the policy learns is *which* span of the
goal belongs in *which* field, which is the skill MiniWoB++'s form tasks test.

Spans come out in a fixed priority order (quoted strings, then salient tokens such as names and codes,
then runs of capitalised words, then the remaining content words) and are capped, so the candidate
list built from them is deterministic and short.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Function words and punctuation-only tokens are never typed: no MiniWoB++ or AndroidWorld form asks for
# "the". Instruction verbs ("enter", "click") stay: they are cheap and the scorer learns to ignore them.
STOP_WORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "nor", "of", "to", "in", "on", "at", "by", "for", "with", "from",
    "into", "onto", "over", "under", "up", "down", "out", "off", "as", "is", "are", "was", "were", "be",
    "been", "being", "it", "its", "this", "that", "these", "those", "them", "they", "their", "there",
    "then", "than", "so", "such", "very", "can", "will", "would", "should", "could", "may", "might", "must",
    "do", "does", "did", "done", "has", "have", "had", "not", "no", "yes", "you", "your", "yours", "me",
    "my", "we", "our", "us", "he", "him", "his", "she", "her", "i", "if", "else", "when", "while", "where",
    "which", "who", "whom", "whose", "what", "how", "all", "any", "both", "each", "few", "more", "most",
    "other", "some", "only", "own", "same", "too", "just", "also", "again", "once", "here", "about",
    "above", "below", "after", "before", "between", "through", "during", "until", "against", "among", "per",
    "via",
})

DEFAULT_MAX_SPANS = 8
CONTEXT_WORDS = 3

_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|(?<!\w)\'([^\']+)\'(?!\w)')
_TOKEN = re.compile(r"[^\s,;:!?()\[\]{}\"“”]+")
_EDGE_PUNCT = ".,;:!?'\"()[]{}"
_CLAUSE_BREAK = re.compile(r"[.;:!?](?=\s|$)|\n")


@dataclass(frozen=True)
class Span:
    """A piece of the goal that could be typed.

    ``context`` is the few words before the span in the goal ("the username" for ``"karrie"``): its
    similarity to a field's label is what tells the scorer which field the span belongs in.
    """

    text: str
    start: int
    quoted: bool = False
    salient: bool = False
    context: str = ""

    @property
    def rank_key(self) -> tuple[int, int, int]:
        """Quoted, then salient, then the rest; by position; a multi-word name before its first word."""
        tier = 0 if self.quoted else (1 if self.salient else 2)
        return (tier, self.start, -len(self.text))


def goal_spans(goal: str, max_spans: int = DEFAULT_MAX_SPANS) -> tuple[Span, ...]:
    """The typeable spans of ``goal``, most promising first, at most ``max_spans``, no duplicates."""
    if max_spans <= 0:
        return ()
    found: list[Span] = []
    quoted_ranges: list[tuple[int, int]] = []
    for match in _QUOTED.finditer(goal):
        group = next(g for g in range(1, 4) if match.group(g) is not None)
        text = match.group(group).strip()
        quoted_ranges.append((match.start(), match.end()))
        if text:
            found.append(Span(text, match.start(group), quoted=True, context=_context(goal, match.start())))

    words = []  # (start, end, word) with edge punctuation cut off and the offsets following the cut
    for match in _TOKEN.finditer(goal):
        raw, word = match.group(), _strip_edges(match.group())
        if word and not _inside(match.start(), quoted_ranges):
            start = match.start() + len(raw) - len(raw.lstrip(_EDGE_PUNCT))
            words.append((start, start + len(word), word))
    for position, (start, _end, word) in enumerate(words):
        if word.lower() in STOP_WORDS or not any(ch.isalnum() for ch in word):
            continue
        salient = _is_salient(word, first=position == 0 or _sentence_start(goal, start))
        found.append(Span(word, start, salient=salient, context=_context(goal, start)))
    found.extend(_capitalised_runs(goal, words))

    ordered = sorted(found, key=lambda span: span.rank_key)
    unique: list[Span] = []
    seen: set[str] = set()
    for span in ordered:
        if span.text in seen:
            continue
        seen.add(span.text)
        unique.append(span)
        if len(unique) == max_spans:
            break
    return tuple(unique)


def goal_words(goal: str) -> frozenset[str]:
    """Lower-cased words of the goal, quotes included: used to ask "does the goal name this element?"."""
    return frozenset(w.lower() for w in (_strip_edges(t) for t in _TOKEN.findall(goal)) if w)


def _is_salient(word: str, first: bool) -> bool:
    """Names, codes and numbers: capitalised mid-sentence, containing a digit, or mixed case."""
    if any(ch.isdigit() for ch in word) or "@" in word:
        return True
    if not first and word[:1].isupper():
        return True
    return any(ch.isupper() for ch in word[1:]) and any(ch.islower() for ch in word)


def _capitalised_runs(goal: str, words: list[tuple[int, int, str]]) -> list[Span]:
    """Multi-word names ("New York", "Ann Marie"): adjacent capitalised words in one clause."""
    runs: list[Span] = []
    current: list[tuple[int, int, str]] = []

    def flush() -> None:
        if len(current) >= 2:
            start, end = current[0][0], current[-1][1]
            text = _strip_edges(goal[start:end])
            runs.append(Span(text, start, salient=True, context=_context(goal, start)))
        current.clear()

    previous_end = -1
    for start, end, word in words:
        capitalised = word[:1].isupper() and not _sentence_start(goal, start)
        contiguous = previous_end >= 0 and goal[previous_end:start].strip() == ""
        if capitalised and (contiguous or not current):
            current.append((start, end, word))
        else:
            flush()
            if capitalised:
                current.append((start, end, word))
        previous_end = end if capitalised else -1
    flush()
    return runs


def _context(goal: str, start: int) -> str:
    """Up to ``CONTEXT_WORDS`` words right before ``start``, not crossing a sentence or clause break."""
    before = goal[:start]
    breaks = list(_CLAUSE_BREAK.finditer(before))
    before = before[breaks[-1].end():] if breaks else before
    tokens = [_strip_edges(t) for t in before.split()]
    tokens = [t for t in tokens if t]
    return " ".join(tokens[-CONTEXT_WORDS:])


def _sentence_start(goal: str, start: int) -> bool:
    before = goal[:start].rstrip()
    return not before or before[-1] in ".!?\n"


def _inside(position: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= position < hi for lo, hi in ranges)


def _strip_edges(token: str) -> str:
    return token.strip(_EDGE_PUNCT)
