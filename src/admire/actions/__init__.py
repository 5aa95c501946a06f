"""Actions: the schema every policy and backend shares, reading model text, and grounded descriptions.

* ``schema`` — AndroidWorld's JSON actions, their limits and ``validate_action`` (names the broken rule);
* ``parsing`` — ``parse_model_output`` reads ``Reason: … Action: {json}`` text and never raises;
  ``format_output`` writes it;
* ``descriptions`` — ``describe`` turns an executed action and its screen into the sentence the milestone
  matcher compares (method.md §3).

The public names of all three are importable from ``admire.actions``.
"""

from admire.actions.descriptions import (
    MAX_LABEL_CHARS,
    describe,
    element_label,
    element_phrase,
    element_role,
    target_element,
)
from admire.actions.parsing import MAX_OUTPUT_CHARS, ParseResult, format_output, parse_model_output
from admire.actions.schema import (
    ACTION_KEYS,
    ACTION_TYPES,
    DIRECTIONS,
    GOAL_STATUSES,
    MAX_APP_NAME_CHARS,
    MAX_INDEX,
    MAX_KEYCODE_CHARS,
    MAX_TEXT_CHARS,
    POINTER_ACTIONS,
    ActionError,
    validate_action,
)

__all__ = [
    "ACTION_KEYS",
    "ACTION_TYPES",
    "DIRECTIONS",
    "GOAL_STATUSES",
    "MAX_APP_NAME_CHARS",
    "MAX_INDEX",
    "MAX_KEYCODE_CHARS",
    "MAX_LABEL_CHARS",
    "MAX_OUTPUT_CHARS",
    "MAX_TEXT_CHARS",
    "POINTER_ACTIONS",
    "ActionError",
    "ParseResult",
    "describe",
    "element_label",
    "element_phrase",
    "element_role",
    "format_output",
    "parse_model_output",
    "target_element",
    "validate_action",
]
