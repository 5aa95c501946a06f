"""A suite's goal template, filled without ``str.format``: templates can come from env-server clients."""

from __future__ import annotations

import string

MAX_GOAL_TEMPLATE = 1000
"""Longest goal template, in characters (AndroidWorld's MiniWoB one is 64)."""


def fill_goal_template(template: str, utterance: str) -> str:
    """``template`` with every ``{utterance}`` replaced by ``utterance`` (``{{`` and ``}}`` are literal braces).

    A template can come from a client of the env server, so it is never handed to ``str.format``: a field
    other than ``{utterance}``, a conversion (``!r``), a format spec (``:>100000000``, a 100 MB goal from a
    short request) or an attribute chain (``{utterance.__class__}``) is a ``ValueError`` that names it, as is a
    template longer than ``MAX_GOAL_TEMPLATE`` characters or one without ``{utterance}``."""
    if not isinstance(template, str):
        raise ValueError(f"goal_template must be a string, got {type(template).__name__}")
    if len(template) > MAX_GOAL_TEMPLATE:
        raise ValueError(f"goal_template has {len(template)} characters; at most {MAX_GOAL_TEMPLATE}")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ValueError(f"goal_template {template[:80]!r} is malformed ({error}); write {{utterance}} where the "
                         "goal goes and {{ or }} for a literal brace") from None
    pieces: list[str] = []
    fields = 0
    for literal, field, spec, conversion in parts:
        pieces.append(literal)
        if field is None:
            continue
        if field != "utterance" or spec or conversion:
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"goal_template may hold only {{utterance}}, got {shown[:80]!r}")
        pieces.append(utterance)
        fields += 1
    if not fields:
        raise ValueError(f"goal_template must contain {{utterance}}, got {template[:80]!r}")
    return "".join(pieces)
