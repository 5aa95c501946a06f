"""The table of configuration keys in the docs, generated from the typed schema.

Why: a hand-written table of keys drifts from the code — a key is added, a default changes, a choice is
renamed, and the table still says the old thing. Here every row comes from ``config_schema.TrainingConfig``:
the dotted key, its type (with its range or allowed values), its default and the field's ``description``. The
table sits in ``docs/method.md`` between ``<!-- keys:begin -->`` and ``<!-- keys:end -->``; a test fails when
it differs from ``key_table()``, and ::

    python -m admire.config_docs --write docs/method.md

rewrites it (``--check`` only compares; with neither option the table is printed).

The default column is the value of the shipped ``configs/demo_miniwob.yaml`` — what a run gets unless it is
overridden — or the schema's default where the YAML does not set the key (the two agree wherever both exist: a
test of ``config_schema`` checks it). A key the YAML must give and does not is ``required``.
"""

from __future__ import annotations

import argparse
import math
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from omegaconf import OmegaConf
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from admire.config_files import DEFAULT_CONFIG, PACKAGED_CONFIGS
from admire.config_schema import TrainingConfig

BEGIN = "<!-- keys:begin -->"
END = "<!-- keys:end -->"
DOCS_PAGE = "docs/method.md"
"""The page that holds the table, relative to the repository root."""

REGENERATE = f"python -m admire.config_docs --write {DOCS_PAGE}"


@dataclass(frozen=True)
class KeyRow:
    """One row of the table: a leaf key, or a section (whose keys follow it)."""

    key: str
    type: str
    default: str
    description: str


# --------------------------------------------------------------------------------------------------
# Walking the schema
# --------------------------------------------------------------------------------------------------

def section_of(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds (``RaySection`` of ``RaySection | None``), or None for a leaf."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def fields(model: type[BaseModel] = TrainingConfig, prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every field as ``(dotted key, field)``, a section before its keys, in the schema's order."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield key, field
        section = section_of(field.annotation)
        if section is not None:
            yield from fields(section, f"{key}.")


def leaf_keys(model: type[BaseModel] = TrainingConfig) -> list[str]:
    """The dotted keys that hold values (not sections)."""
    return [key for key, field in fields(model) if section_of(field.annotation) is None]


def undocumented(model: type[BaseModel] = TrainingConfig) -> list[str]:
    """The keys, sections included, whose field has no description: the table would have an empty cell."""
    return [key for key, field in fields(model) if not (field.description or "").strip()]


# --------------------------------------------------------------------------------------------------
# Types, in words
# --------------------------------------------------------------------------------------------------

_NAMES = {int: "int", float: "float", str: "str", bool: "bool", type(None): "null"}


def type_text(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """A type as a reader of the YAML sees it: ``int ≥ 1``, ``float in [0, 1]``, ``"a", "b" or null``,
    ``list of str``. Allowed values come from ``Literal`` and from ``config_schema``'s choice validators, so
    a renamed choice changes the table."""
    return _join(_terms(annotation, metadata))


def _terms(annotation: Any, metadata: Sequence[Any]) -> list[str]:
    """The alternatives of a type, each as words (a choice contributes one term per value)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *extra = get_args(annotation)
        return _terms(base, [*extra, *metadata])
    if origin in (Union, types.UnionType):
        return [term for member in get_args(annotation) for term in _terms(member, metadata)]
    if origin is Literal:
        return [_quote(value) for value in get_args(annotation)]
    flat = _flatten(metadata)
    choices = next((c for c in map(_choices_of, flat) if c is not None), None)
    if choices is not None:
        return [_quote(value) for value in choices]
    if origin is list:
        (item,) = get_args(annotation)
        size = "non-empty list" if any(isinstance(m, annotated_types.MinLen) and m.min_length > 0
                                       for m in flat) else "list"
        return [f"{size} of {_join(_terms(item, ()))}"]
    if origin is dict:
        key, value = get_args(annotation)
        return [f"map of {_join(_terms(key, ()))} to {_join(_terms(value, ()))}"]
    name = _NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return [name + _bounds(flat)]


def _flatten(metadata: Sequence[Any]) -> list[Any]:
    """Constraints given as ``Field(ge=1)`` inside ``Annotated`` arrive as a ``FieldInfo``: its own metadata."""
    flat: list[Any] = []
    for item in metadata:
        flat.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return flat


def _choices_of(item: Any) -> tuple[str, ...] | None:
    """The allowed values of ``config_schema._choice(...)``: the tuple its check function closes over."""
    if not isinstance(item, AfterValidator) or not isinstance(item.func, types.FunctionType):
        return None
    func = item.func
    names = func.__code__.co_freevars
    if not func.__qualname__.startswith("_choice.") or "options" not in names or func.__closure__ is None:
        return None
    return tuple(str(o) for o in func.__closure__[names.index("options")].cell_contents)


def _bounds(metadata: Sequence[Any]) -> str:
    low: tuple[str, Any] | None = None
    high: tuple[str, Any] | None = None
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = ("[", item.ge)
        elif isinstance(item, annotated_types.Gt):
            low = ("(", item.gt)
        elif isinstance(item, annotated_types.Le):
            high = ("]", item.le)
        elif isinstance(item, annotated_types.Lt):
            high = (")", item.lt)
    if low and high and low == ("[", high[1]) and high[0] == "]":
        return f" = {value_text(low[1])}"
    if low and high:
        return f" in {low[0]}{value_text(low[1])}, {value_text(high[1])}{high[0]}"
    if low:
        return f" {'≥' if low[0] == '[' else '>'} {value_text(low[1])}"
    if high:
        return f" {'≤' if high[0] == ']' else '<'} {value_text(high[1])}"
    return ""


def _quote(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else value_text(value)


def _join(terms: Sequence[str]) -> str:
    unique = list(dict.fromkeys(terms))
    return unique[0] if len(unique) == 1 else f"{', '.join(unique[:-1])} or {unique[-1]}"


# --------------------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------------------

def value_text(value: Any) -> str:
    """A value as YAML flow text, the same on every machine (``null``, ``true``, ``0.5``, ``[miniwob]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value).lower()
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return str(value)


def shipped_values() -> dict[str, Any]:
    """Every dotted leaf key of the packaged default config with its value (interpolations unresolved)."""
    tree = OmegaConf.to_container(OmegaConf.load(PACKAGED_CONFIGS / f"{DEFAULT_CONFIG}.yaml"), resolve=False)
    assert isinstance(tree, dict)
    values: dict[str, Any] = {}

    def walk(node: Mapping[Any, Any], prefix: str) -> None:
        for name, value in node.items():
            if isinstance(value, Mapping) and value:
                walk(value, f"{prefix}{name}.")
            else:
                values[f"{prefix}{name}"] = value

    walk(tree, "")
    return values


def _default_text(key: str, field: FieldInfo, shipped: Mapping[str, Any]) -> str:
    if key in shipped:
        return f"`{value_text(shipped[key])}`"
    if field.default_factory is not None:
        return f"`{value_text(field.get_default(call_default_factory=True))}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{value_text(field.default)}`"


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

def rows(model: type[BaseModel] = TrainingConfig) -> list[KeyRow]:
    """One row per key of ``model``; a section's row (type ``section``, no default) precedes its keys."""
    shipped = shipped_values()
    table = []
    for key, field in fields(model):
        section = section_of(field.annotation)
        if section is not None:
            nullable = type(None) in get_args(field.annotation)
            table.append(KeyRow(key, "section or null" if nullable else "section", "",
                                (field.description or "").strip()))
        else:
            table.append(KeyRow(key, type_text(field.annotation, field.metadata),
                                _default_text(key, field, shipped), (field.description or "").strip()))
    return table


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: ``|`` would end the cell, ``<word>`` would render as an HTML tag."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "\\<")


def key_table(model: type[BaseModel] = TrainingConfig) -> str:
    """The Markdown table of every key: key | type | default | description (ends with a newline)."""
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for row in rows(model):
        key = f"`{row.key}`"
        default = row.default.replace("|", "\\|")
        lines.append(f"| {key} | {_cell(row.type)} | {default} | {_cell(row.description)} |")
    return "\n".join(lines) + "\n"


def replace_table(text: str, table: str) -> str:
    """``text`` with what lies between the markers replaced by ``table``; the markers and all else kept."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0 or end < start or text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"needs exactly one {BEGIN} followed by one {END}")
    return f"{text[:start + len(BEGIN)]}\n{table}{text[end:]}"


def table_in(text: str) -> str:
    """What lies between the markers (the ``table`` that ``replace_table`` wrote), or ValueError."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"needs exactly one {BEGIN} followed by one {END}")
    return text[start + len(BEGIN):end].removeprefix("\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table, or write it into (``--write``) or compare it with (``--check``) a docs page."""
    parser = argparse.ArgumentParser(prog="python -m admire.config_docs",
                                     description="The configuration key table, generated from the typed schema.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PAGE", type=Path, help=f"replace the table between {BEGIN} and {END}")
    group.add_argument("--check", metavar="PAGE", type=Path, help="exit 1 when the page's table is not current")
    args = parser.parse_args(argv)
    missing = undocumented()
    if missing:
        print(f"config_docs: no description for {', '.join(missing)}; add description= to the field in "
              "admire/config_schema.py", file=sys.stderr)
        return 1
    table = key_table()
    page: Path | None = args.write or args.check
    if page is None:
        sys.stdout.write(table)
        return 0
    try:
        text = page.read_text(encoding="utf-8")
        new = replace_table(text, table)
    except (OSError, ValueError) as exc:
        print(f"config_docs: {page}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(f"config_docs: {page}: the key table is not current; run python -m admire.config_docs --write {page}",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        page.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
