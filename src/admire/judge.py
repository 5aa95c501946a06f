"""The LLM step judge: the paper's process-reward baseline (``reward.mode: judge``, method.md §4).

An LLM reads the goal and the steps of a trajectory and scores each step's contribution in [0, 1].
It is a baseline to compare ADMIRE against, so it must never be the reason a run stops or a reward is
made up: when the judge cannot answer (endpoint down, timeout, wrong number of scores, unreadable
JSON), every step of the trajectory scores 0 — a judge failure must not inject reward — and the reason
is logged and counted (``failures``, ``last_error``) so that training can report it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from admire.llm import ChatClient, LLMError, make_chat_client, missing_endpoint_keys, parse_json_answer
from admire.milestones.prompting import fill, load_prompt, step_lines
from admire.types import Step, Trajectory

logger = logging.getLogger("admire.judge")

JUDGE_PROMPT = "judge_step.txt"


def judge_endpoint(section: object) -> dict[str, Any]:
    """The ``reward.judge`` section as a dict, refused in one line when it names no endpoint.

    ``admire train`` (before it makes a run directory) and ``admire rewards`` (before it reads a file)
    both ask, so the rule and its message live here, beside the judge they configure.
    """
    values = dict(section) if isinstance(section, Mapping) else {}
    if missing_endpoint_keys(values):
        raise ValueError("reward.mode=judge needs an OpenAI-compatible endpoint: set reward.judge.base_url (or "
                         "OPENAI_BASE_URL) and reward.judge.model (e.g. "
                         "reward.judge.base_url=http://localhost:8000/v1)")
    return values


class LLMJudge:
    """Scores steps through a chat endpoint; satisfies ``rewards.StepJudge``.

    ``max_steps_per_call`` splits long trajectories into windows so each answer stays short; later
    windows see the earlier steps as context. If any window fails, the whole trajectory scores 0:
    a half-judged trajectory would reward its steps by where the endpoint happened to fail.
    """

    name = "llm"

    def __init__(self, client: ChatClient, max_steps_per_call: int | None = None) -> None:
        if max_steps_per_call is not None and max_steps_per_call < 1:
            raise ValueError(f"max_steps_per_call must be >= 1 or None, got {max_steps_per_call}")
        self.client = client
        self.max_steps_per_call = max_steps_per_call
        self.template = load_prompt(JUDGE_PROMPT)
        self.calls = 0
        self.failures = 0
        self.last_error: str | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> LLMJudge:
        """A judge from a config section: the keys of ``make_chat_client`` plus ``max_steps_per_call``."""
        window = cfg.get("max_steps_per_call")
        return cls(make_chat_client(cfg), max_steps_per_call=None if window is None else int(window))

    def score(self, trajectory: Trajectory) -> list[float]:
        """One score in [0, 1] per step, in order; all zeros when the judge fails."""
        steps = trajectory.steps
        if not steps:
            return []
        window = self.max_steps_per_call or len(steps)
        prompts = [(self.prompt(trajectory, start, start + window), len(steps[start:start + window]))
                   for start in range(0, len(steps), window)]
        scores: list[float] = []
        try:
            for prompt, count in prompts:
                self.calls += 1
                answer = self.client.chat([{"role": "user", "content": prompt}])
                scores.extend(read_scores(answer, count))
        except (LLMError, ValueError) as exc:
            self.failures += 1
            self.last_error = str(exc)
            logger.warning("LLM judge failed on trajectory %s (%s); its %d steps score 0",
                           trajectory.id, exc, len(steps))
            return [0.0] * len(steps)
        return scores

    def prompt(self, trajectory: Trajectory, start: int, stop: int) -> str:
        """The prompt that scores ``steps[start:stop]``, with the earlier steps as context."""
        earlier: Sequence[Step] = trajectory.steps[:start]
        context = ""
        if earlier:
            context = "\nEarlier steps of the same run, already scored (context only):\n" + step_lines(earlier) + "\n"
        chunk = trajectory.steps[start:stop]
        return fill(self.template, goal=trajectory.goal, context=context,
                    steps=step_lines(chunk, first_number=start + 1), count=len(chunk))


def read_scores(answer: str, count: int) -> list[float]:
    """The ``{"scores": [...]}`` of an answer, exactly ``count`` finite numbers, clamped to [0, 1].

    Raises ``ValueError`` naming what was wrong; an out-of-range number is clamped rather than refused
    because the judge's ordering of steps is still informative.
    """
    value = parse_json_answer(answer, key="scores")
    scores = value["scores"]
    if not isinstance(scores, list):
        raise ValueError(f"'scores' must be a list of numbers, got {type(scores).__name__}")
    if len(scores) != count:
        raise ValueError(f"expected {count} scores, one per step, got {len(scores)}")
    out: list[float] = []
    for position, score in enumerate(scores, start=1):
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ValueError(f"score {position} is not a finite number: {score!r}")
        out.append(min(1.0, max(0.0, float(score))))
    return out
