"""Model text to an ``Action``: the ``Reason: … Action: {json}`` output of M3A/T3A-style agents.

``parse_model_output`` never raises: unreadable output is a format penalty (method.md §4), not a crashed
rollout. ``format_output`` writes the same text for an action, so a policy that picks actions directly
(the ``dom`` policy) produces steps that parse like a VLM's.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any

from admire.actions.schema import ActionError, validate_action
from admire.types import Action


@dataclass(frozen=True)
class ParseResult:
    """What a model said, read as well as it can be. ``error`` says why when it is not valid."""

    raw: str
    action: Action | None
    reason: str | None = None
    description: str | None = None
    error: str | None = None

    @property
    def format_valid(self) -> bool:
        return self.action is not None


_MARKER = re.compile(r"(?i)(?<![\w\"'])(reason|thought|thinking|description|action)\s*[*_]*\s*:")
_FENCE = re.compile(r"```[ \t]*(?:json|python)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
MAX_OUTPUT_CHARS = 100_000


def parse_model_output(text: object) -> ParseResult:
    """Read ``Reason: … Action: {json}`` output; never raises.

    Accepts an optional ``Description:`` line, code fences, single-quoted or Python-literal dicts,
    braces inside string values and chatter around the object. When an ``Action:`` marker exists the
    object after it wins; otherwise the last object in the text that looks like an action.
    """
    try:
        return _parse(text)
    except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
        raw = text if isinstance(text, str) else repr(text)
        return ParseResult(raw=raw, action=None, error=f"unreadable output ({type(exc).__name__})")


def _parse(text: object) -> ParseResult:
    if not isinstance(text, str):
        return ParseResult(raw=repr(text), action=None, error=f"output is not text ({type(text).__name__})")
    if not text.strip():
        return ParseResult(raw=text, action=None, error="empty output")
    if len(text) > MAX_OUTPUT_CHARS:
        return ParseResult(raw=text[:MAX_OUTPUT_CHARS], action=None,
                           error=f"output longer than {MAX_OUTPUT_CHARS} characters")
    sections, action_tails = _sections(text)
    reason = sections.get("reason") or sections.get("thought") or sections.get("thinking")
    description = sections.get("description")
    candidates: list[str] = []
    for tail in reversed(action_tails):  # the last 'Action:' followed by an object wins
        candidates = _objects(tail)
        if candidates:
            break
    marked = bool(candidates)
    if not marked:
        candidates = list(reversed(_objects(text)))
    if not candidates:
        where = "after 'Action:'" if action_tails else "in the output"
        return ParseResult(raw=text, action=None, reason=reason, description=description,
                           error=f"no JSON object {where}")
    first_error = None
    for candidate in candidates:
        data, err = _load_object(candidate)
        if data is None:
            first_error = first_error or err
            if marked:
                break
            continue
        if not marked and "action_type" not in data:
            continue
        try:
            action = validate_action(data)
        except ActionError as exc:
            return ParseResult(raw=text, action=None, reason=reason, description=description,
                               error=f"invalid action: {exc}")
        return ParseResult(raw=text, action=action, reason=reason, description=description)
    return ParseResult(raw=text, action=None, reason=reason, description=description,
                       error=first_error or "no object with an 'action_type' in the output")


def _sections(text: str) -> tuple[dict[str, str], list[str]]:
    """``Name: value`` sections (first occurrence wins) and the text after each ``Action:`` marker."""
    marks = list(_MARKER.finditer(text))
    sections: dict[str, str] = {}
    action_tails: list[str] = []
    for i, mark in enumerate(marks):
        name = mark.group(1).lower()
        if name == "action":
            action_tails.append(text[mark.end():])
            continue
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        value = text[mark.end():end].strip()
        if value and name not in sections:
            sections[name] = value
    return sections, action_tails


def _objects(text: str) -> list[str]:
    """Balanced ``{…}`` substrings, outermost only, in order; fenced blocks are searched first."""
    found: list[str] = []
    for fence in _FENCE.finditer(text):
        found.extend(_balanced(fence.group(1)))
    found.extend(obj for obj in _balanced(text) if obj not in found)
    return found


def _balanced(text: str) -> list[str]:
    out: list[str] = []
    depth, start, quote, escaped = 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'" and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
    if depth > 0 and start >= 0:
        out.append(text[start:] + "}" * depth)  # a truncated object: try closing it
    return out


def _load_object(candidate: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        value = json.loads(candidate)
    except (ValueError, RecursionError):
        try:
            with warnings.catch_warnings():  # model text is full of odd escapes ("\-"): not our warning
                warnings.simplefilter("ignore")
                tree = ast.parse(candidate.strip(), mode="eval")
            value = _literal(tree.body)
        except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
            return None, "action is not valid JSON or a Python literal dict"
    if not isinstance(value, dict):
        return None, "action is not a JSON object"
    return value, None


_NAMES = {"true": True, "false": False, "null": None, "none": None}


def _literal(node: ast.AST) -> Any:
    """``ast.literal_eval`` that also knows JSON's ``true/false/null``."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id.lower() in _NAMES:
        return _NAMES[node.id.lower()]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"not a literal: {type(node).__name__}")


def format_output(action: Action, reason: str = "", description: str | None = None) -> str:
    """The text a well-behaved model writes for ``action``; the inverse of ``parse_model_output``."""
    lines = [f"Reason: {reason}".rstrip()]
    if description:
        lines.append(f"Description: {description}")
    lines.append("Action: " + json.dumps(action.as_dict(), ensure_ascii=False))
    return "\n".join(lines)
