"""Φ_llm: milestones written by an LLM from a successful trajectory (method.md §2, the paper's GPT-4o).

The LLM sees the goal and the grounded descriptions of the run's steps (with the agent's reasons), and
answers JSON. The answer is validated strictly; anything else — endpoint down, timeout, chatter with no
JSON, too few or too many milestones — is answered by the fallback generator (the offline heuristic by
default), logged with its reason on ``admire.milestones`` and counted in ``fallbacks``/``last_error``
so that training can report how often the LLM was not used. Training never stops for it.

Answer schemas (also written out in the prompt files, ``prompts/milestone_*.txt``):

* initialise: ``{"milestones": [m_1, …, m_K]}`` with 2 ≤ K ≤ 8 non-empty strings (counted after
  consecutive repeats are collapsed: the same rule, ``check_milestone_count``, as the heuristic's lists);
* update: ``{"better": bool, "milestones": [...], "reason": str}``; ``milestones`` is read (and must be
  valid) only when ``better`` is true; ``reason`` is optional and only logged.

The prompts ask for milestones *copied verbatim* from the step descriptions: a copied description keeps
the shape the grounded matcher parses into a signature (verb, element role, label, value), while a
paraphrase ("logged in") has none and can only be matched by text similarity.

In an update, ``update_bank`` passes ``slot`` (the new run's phrases → the slotted space of the stored
list) and ``rule``: the LLM's answer is slotted with it, and a fallback to the heuristic update gets
both, so the fallback merges in slotted space exactly as the heuristic generator does on its own.

``make_generator("llm", base_url=…, model=…)`` builds one from config keys (``make_llm_generator``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from admire.llm import ChatClient, LLMError, make_chat_client, parse_json_answer
from admire.milestones.generator import (
    MAX_MILESTONES,
    MIN_MILESTONES,
    HeuristicGenerator,
    MilestoneGenerator,
    SlotFunction,
    UpdateRule,
    ask_update,
    check_milestone_count,
    collapse_repeats,
    make_generator,
)
from admire.milestones.prompting import fill, load_prompt, milestone_lines, step_lines
from admire.types import Trajectory

logger = logging.getLogger("admire.milestones")

INIT_PROMPT = "milestone_init.txt"
UPDATE_PROMPT = "milestone_update.txt"
MAX_MILESTONE_CHARS = 200


class LLMGenerator:
    """Milestones from an OpenAI-compatible chat endpoint, with a fallback that always answers."""

    name = "llm"

    def __init__(self, client: ChatClient, fallback: MilestoneGenerator | None = None) -> None:
        self.client = client
        self.fallback: MilestoneGenerator = fallback if fallback is not None else HeuristicGenerator()
        self.init_template = load_prompt(INIT_PROMPT)
        self.update_template = load_prompt(UPDATE_PROMPT)
        self.calls = 0
        self.fallbacks = 0
        self.last_error: str | None = None

    def initialise(self, trajectory: Trajectory) -> list[str]:
        prompt = fill(self.init_template, goal=trajectory.goal, steps=_executed_steps(trajectory),
                      min_milestones=MIN_MILESTONES, max_milestones=MAX_MILESTONES)
        try:
            return read_milestones(parse_json_answer(self._ask(prompt), key="milestones"))
        except (LLMError, ValueError) as exc:
            self._note_fallback("initialise milestones", trajectory, exc)
            return self.fallback.initialise(trajectory)

    def update(self, current: Sequence[str], trajectory: Trajectory, *, slot: SlotFunction | None = None,
               rule: UpdateRule = "common") -> list[str] | None:
        """The rewritten list when the LLM judges the new run better; ``None`` keeps ``current``.

        ``rule`` is not the LLM's business (it judges "better" itself); it is passed on to the fallback.
        With ``slot`` the answer is returned slotted, and an answer that slotting leaves with fewer than
        ``MIN_MILESTONES`` checkpoints falls back like any other invalid answer.
        """
        prompt = fill(self.update_template, goal=trajectory.goal, milestones=milestone_lines(current),
                      steps=_executed_steps(trajectory), min_milestones=MIN_MILESTONES,
                      max_milestones=MAX_MILESTONES)
        try:
            better, milestones, reason = read_update(parse_json_answer(self._ask(prompt), key="better"))
            if better and slot is not None:
                milestones = check_milestone_count(slot(milestones), maximum=None)
        except (LLMError, ValueError) as exc:
            self._note_fallback("update milestones", trajectory, exc)
            return ask_update(self.fallback, current, trajectory, slot=slot, rule=rule)
        logger.debug("LLM update for trajectory %s: better=%s (%s)", trajectory.id, better, reason or "-")
        if not better or milestones == list(current):
            return None
        return milestones

    def _ask(self, prompt: str) -> str:
        self.calls += 1
        return self.client.chat([{"role": "user", "content": prompt}])

    def _note_fallback(self, what: str, trajectory: Trajectory, exc: Exception) -> None:
        self.fallbacks += 1
        self.last_error = str(exc)
        logger.warning("the LLM could not %s for trajectory %s (%s); using the %s generator's answer",
                       what, trajectory.id, exc, getattr(self.fallback, "name", type(self.fallback).__name__))


def make_llm_generator(client: ChatClient | None = None, fallback: MilestoneGenerator | str | None = None,
                       **client_config: Any) -> LLMGenerator:
    """``make_generator("llm", …)``: from a ready ``client``, or from the config keys of
    ``make_chat_client`` (``base_url``, ``model``, ``api_key_env``, ``timeout``, ``max_retries``…).
    ``fallback`` may name a registered generator, so a YAML config can choose it."""
    if client is None:
        client = make_chat_client(client_config)
    elif client_config:
        raise ValueError(f"give the llm generator a client or its config keys, not both "
                         f"(got a client and {', '.join(sorted(client_config))})")
    if isinstance(fallback, str):
        if fallback == "llm":
            raise ValueError("the llm generator cannot fall back to itself; use 'heuristic'")
        fallback = make_generator(fallback)
    return LLMGenerator(client, fallback)


def _executed_steps(trajectory: Trajectory) -> str:
    """Steps that executed an action; unparsable outputs did nothing on screen and only add noise."""
    return step_lines(step for step in trajectory.steps if step.action is not None)


def read_milestones(answer: Any) -> list[str]:
    """The validated ``milestones`` of an answer object; ``ValueError`` names the broken rule.

    Consecutive repeats are collapsed before K is counted, as for the heuristic's lists: a model that
    writes the same checkpoint twice has given one checkpoint.
    """
    if not isinstance(answer, dict) or "milestones" not in answer:
        raise ValueError("the answer has no 'milestones'")
    milestones = answer["milestones"]
    if not isinstance(milestones, list):
        raise ValueError(f"'milestones' must be a list of strings, got {type(milestones).__name__}")
    if len(milestones) > MAX_MILESTONES:
        check_milestone_count(milestones)  # raises with the rule's message
    out: list[str] = []
    for position, milestone in enumerate(milestones, start=1):
        if not isinstance(milestone, str):
            raise ValueError(f"milestone {position} is not a string: {milestone!r}")
        text = " ".join(milestone.split())
        if not text:
            raise ValueError(f"milestone {position} is empty")
        if len(text) > MAX_MILESTONE_CHARS:
            raise ValueError(f"milestone {position} is longer than {MAX_MILESTONE_CHARS} characters")
        out.append(text)
    return check_milestone_count(collapse_repeats(out))


def read_update(answer: Any) -> tuple[bool, list[str], str | None]:
    """``(better, milestones, reason)`` of an update answer; milestones are validated only if better."""
    if not isinstance(answer, dict) or not isinstance(answer.get("better"), bool):
        raise ValueError("the answer needs \"better\": true or false")
    reason = answer.get("reason")
    reason = reason if isinstance(reason, str) else None
    if not answer["better"]:
        return False, [], reason
    return True, read_milestones(answer), reason
