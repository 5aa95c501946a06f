"""Prompt templates as files, and how a trajectory is written into them.

The milestone generator and the step judge show the LLM the same thing — the goal and one line per
step built from the framework's grounded description — so that the milestones an LLM writes read like the
descriptions they will later be matched against (method.md §3), and the judge sees what the matcher sees.
Templates use ``string.Template`` (``$name``) because they hold JSON examples full of braces.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from string import Template

from admire.actions import describe
from admire.types import Step

MAX_REASON_CHARS = 200


def load_prompt(name: str) -> Template:
    """A template shipped in ``admire/milestones/prompts/``: kept as files so they can be read, diffed
    and tuned without touching code."""
    text = resources.files("admire.milestones").joinpath("prompts").joinpath(name).read_text(encoding="utf-8")
    return Template(text)


def fill(template: Template, **values: object) -> str:
    """The filled prompt; a placeholder left without a value is a bug in the caller, so it raises."""
    try:
        return template.substitute({key: str(value) for key, value in values.items()})
    except KeyError as exc:
        raise ValueError(f"prompt placeholder ${exc.args[0]} has no value") from None


def step_description(step: Step) -> str:
    """The grounded description, rebuilt from the action when a producer left it empty."""
    if step.grounded_description:
        return step.grounded_description
    if step.action is not None:
        return describe(step.action, step.observation)
    return "(invalid output)"


def step_line(step: Step, number: int) -> str:
    """``3. clicked the 'Login' button (no visible effect) — agent's reason: …``."""
    parts = [f"{number}. {step_description(step)}"]
    if step.action is not None and not step.format_valid:
        parts.append("(invalid output)")
    elif step.action is not None and not step.screen_changed:
        parts.append("(no visible effect)")
    reason = " ".join((step.reason or "").split())
    if reason:
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 1].rstrip() + "…"
        parts.append(f"— agent's reason: {reason}")
    return " ".join(parts)


def step_lines(steps: Iterable[Step], first_number: int = 1) -> str:
    lines = [step_line(step, number) for number, step in enumerate(steps, start=first_number)]
    return "\n".join(lines) if lines else "(no steps)"


def milestone_lines(milestones: Iterable[str]) -> str:
    lines = [f"{number}. {text}" for number, text in enumerate(milestones, start=1)]
    return "\n".join(lines) if lines else "(none)"
