"""The GUI lexicon of the prose reader, read from the packaged ``lexicon.yaml``.

Why a data file: what the prose reader knows about GUIs (which verbs state which kind of action, which
phrases are read together, which step kinds prose may call by which action, which controls come in
pairs, what labels abbreviate) is data, not logic. Kept in one file, it can be read and extended without
touching the reader (``prose.py``) or the signatures (``signature.py``), and the tests are generated
from the same entries. The file is read once and checked here section by section: a malformed file is a
bug in the package, but one that a contributor editing it should see named, not a ``KeyError`` deep in
the reader.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import MappingProxyType

import yaml

LEXICON_FILE = "lexicon.yaml"
SECTIONS = ("stop_words", "aliases", "keep", "verbs", "phrases", "compatible", "self_named", "role_words",
            "opposites", "symbol_names", "synonyms")
# The shapes of an entry: a word as the reader's tokens (prose.py folds and lower-cases the text), words
# read together, and the name of a kind of action.
_SHAPES: dict[str, tuple[re.Pattern[str], str]] = {
    "word": (re.compile(r"[a-z0-9]+"), "a word of lower-case ASCII letters and digits (the reader's tokens)"),
    "phrase": (re.compile(r"[a-z0-9]+(?: [a-z0-9]+)+"), "two or more words of lower-case ASCII letters and digits "
                                                       "separated by single spaces"),
    "kind": (re.compile(r"[a-z][a-z_]*"), "a kind: lower-case ASCII letters and underscores"),
}


class LexiconError(ValueError):
    """A lexicon file that does not have the shape the reader needs; the message names the section."""


@dataclass(frozen=True)
class Lexicon:
    """The sections of ``lexicon.yaml`` (see the comments there for what each is for), read-only.

    ``phrases`` is flattened to (words, kind) pairs in the file's order, the form the reader scans.
    """

    stop_words: frozenset[str]
    aliases: Mapping[str, str]
    keep: Mapping[str, str]
    verbs: Mapping[str, tuple[str, ...]]
    phrases: tuple[tuple[tuple[str, ...], str], ...]
    compatible: Mapping[str, frozenset[str]]
    self_named: frozenset[str]
    role_words: Mapping[str, str]
    opposites: tuple[tuple[str, str], ...]
    symbol_names: Mapping[str, str]
    synonyms: Mapping[str, tuple[str, ...]]

    @property
    def action_kinds(self) -> frozenset[str]:
        """Every kind of action prose can state: the kinds of the verbs and of the phrases."""
        return frozenset(self.verbs) | {kind for _, kind in self.phrases}


@lru_cache(maxsize=1)
def load_lexicon() -> Lexicon:
    """The packaged lexicon, read and checked once."""
    text = resources.files("admire.milestones").joinpath(LEXICON_FILE).read_text(encoding="utf-8")
    return parse_lexicon(text, source=f"admire/milestones/{LEXICON_FILE}")


def parse_lexicon(text: str, source: str = LEXICON_FILE) -> Lexicon:
    """The lexicon in the YAML ``text``; a :class:`LexiconError` naming ``source`` and the section if its
    shape is not the one the reader needs."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LexiconError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise LexiconError(f"{source}: expected a mapping of the sections {', '.join(SECTIONS)}")
    missing = [name for name in SECTIONS if name not in data]
    unknown = [str(name) for name in data if name not in SECTIONS]
    if missing or unknown:
        problems = ([f"missing section(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown section(s) {', '.join(unknown)}"] if unknown else [])
        raise LexiconError(f"{source}: {'; '.join(problems)}")
    return _Reader(source, data).lexicon()


@dataclass(frozen=True)
class _Reader:
    """Reads each section into its shape, naming the section in every error."""

    source: str
    data: Mapping[object, object]

    def lexicon(self) -> Lexicon:
        phrases = tuple((tuple(phrase.split(" ")), kind)
                        for kind, listed in self.lists_by_key("phrases", "phrase").items() for phrase in listed)
        lexicon = Lexicon(
            stop_words=frozenset(self.words("stop_words", self.data["stop_words"])),
            aliases=self.word_map("aliases"),
            keep=self.word_map("keep"),
            verbs=self.lists_by_key("verbs"),
            phrases=phrases,
            compatible=MappingProxyType({kind: frozenset(kinds)
                                         for kind, kinds in self.lists_by_key("compatible", "kind").items()}),
            self_named=frozenset(self.words("self_named", self.data["self_named"], shape="kind")),
            role_words=self.word_map("role_words"),
            opposites=self.pairs("opposites"),
            symbol_names=self.word_map("symbol_names", symbol_keys=True),
            synonyms=self.lists_by_key("synonyms", key_shape="word"),
        )
        self.check_references(lexicon)
        return lexicon

    def fail(self, section: str, problem: str) -> LexiconError:
        return LexiconError(f"{self.source}, section '{section}': {problem}")

    def word(self, section: str, value: object, shape: str = "word") -> str:
        """``value`` if it is a string of the ``shape`` (``_SHAPES``) the reader compares it in."""
        pattern, described = _SHAPES[shape]
        if isinstance(value, bool):
            raise self.fail(section, f"{value!r} is a boolean (YAML reads a bare on, off, yes or no as one): "
                                     "quote it")
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise self.fail(section, f"expected {described}, got {value!r}")
        return value

    def symbol(self, section: str, value: object) -> str:
        if not isinstance(value, str) or not value or value != value.strip():
            raise self.fail(section, f"expected a symbol without surrounding spaces, got {value!r}")
        return value

    def words(self, section: str, listed: object, shape: str = "word", key: str = "") -> tuple[str, ...]:
        if not isinstance(listed, list) or not listed:
            raise self.fail(section, f"{key + ': ' if key else ''}expected a non-empty list, got {listed!r}")
        return tuple(self.word(section, item, shape) for item in listed)

    def mapping(self, section: str) -> dict[object, object]:
        value = self.data[section]
        if not isinstance(value, dict) or not value:
            raise self.fail(section, f"expected a non-empty mapping, got {value!r}")
        return value

    def word_map(self, section: str, *, symbol_keys: bool = False) -> Mapping[str, str]:
        return MappingProxyType({
            (self.symbol(section, key) if symbol_keys else self.word(section, key)): self.word(section, value)
            for key, value in self.mapping(section).items()
        })

    def lists_by_key(self, section: str, shape: str = "word", key_shape: str = "kind") -> Mapping[str, tuple[str, ...]]:
        """A mapping of ``key_shape`` entries to non-empty lists of ``shape`` entries."""
        read: dict[str, tuple[str, ...]] = {}
        for key, value in self.mapping(section).items():
            name = self.word(section, key, key_shape)
            read[name] = self.words(section, value, shape, key=name)
        return MappingProxyType(read)

    def pairs(self, section: str) -> tuple[tuple[str, str], ...]:
        listed = self.data[section]
        if not isinstance(listed, list) or not listed:
            raise self.fail(section, f"expected a non-empty list of pairs, got {listed!r}")
        read: list[tuple[str, str]] = []
        for pair in listed:
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(section, f"expected a pair of words, got {pair!r}")
            read.append((self.word(section, pair[0]), self.word(section, pair[1])))
        return tuple(read)

    def check_references(self, lexicon: Lexicon) -> None:
        """The sections that name kinds name ones the lexicon has, and a verb states one kind only."""
        stated: dict[str, str] = {}
        for kind, words in lexicon.verbs.items():
            for word in words:
                if stated.setdefault(word, kind) != kind:
                    raise self.fail("verbs", f"{word!r} is listed under both {stated[word]!r} and {kind!r}")
        kinds = lexicon.action_kinds
        for step_kind, callable_as in lexicon.compatible.items():
            if not callable_as <= kinds:
                unknown = ", ".join(sorted(callable_as - kinds))
                raise self.fail("compatible", f"{step_kind}: {unknown} is not a kind of the verbs or the phrases")
        if not lexicon.self_named <= set(lexicon.compatible):
            unknown = ", ".join(sorted(lexicon.self_named - set(lexicon.compatible)))
            raise self.fail("self_named", f"{unknown} is not a step kind of 'compatible'")
