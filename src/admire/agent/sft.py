"""Supervised warm start for a policy that writes tokens (the ``lm`` policy): imitate oracle demonstrations.

The analogue of the paper's pretrained base for a model that starts from random or general weights: the
policy reads demonstrations of tasks *outside* the training suite, written in exactly the answer format
it is trained to produce (``Reason:`` / ``Action: {json}`` / ``Description:``), and minimises the
negative log-likelihood of every answer token given the screen and the steps before it. The same
``token_log_probs`` the PPO update uses scores the answers, so the warm start and RL train the same
tokens of the same prompts.

A demonstration's reason names the element the action acts on, by its label and its number ("The 'Password'
field is element 2."): the answer states which element before the ``Action`` line gives its index, so what
is imitated is reading the numbered screen, not the numbers the demonstrations happened to use (why:
docs/lm-policy.md, "The warm start"). An action on no element keeps one fixed sentence. The description is the
grounded description of the action on that screen — what ``description: model|both`` compares with the
model's own description.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import Any

import torch

from admire.actions import describe, element_phrase, target_element
from admire.agent.base import Decision, trainable_parameters
from admire.progress import ProgressFn
from admire.types import Action, Observation, Trajectory

DEMONSTRATION_REASON = "This is the next step toward the goal."
"""The reason of a demonstrated action that acts on no numbered element (wait, back, an app by name …)."""


def demonstration_reason(action: Action, observation: Observation | None) -> str:
    """Which element the action acts on, by its label and its number ("The 'Password' field is element 2.")."""
    element = target_element(action, observation)
    if element is None or action.index is None:
        return DEMONSTRATION_REASON
    phrase = element_phrase(element)
    return f"{phrase[:1].upper()}{phrase[1:]} is element {action.index}."


def answer_text(action: Action, description: str, reason: str = DEMONSTRATION_REASON) -> str:
    """The answer the ``lm`` policy is asked for (``admire.agent.prompts``), for one demonstrated step."""
    action_json = json.dumps(action.as_dict(), ensure_ascii=False)
    return f"Reason: {reason}\nAction: {action_json}\nDescription: {description}"


def demonstration_answers(trajectories: Sequence[Trajectory], successful_only: bool = True) -> list[Decision]:
    """One decision per parsed step of each (successful) demonstration, its text in the answer format."""
    decisions: list[Decision] = []
    for trajectory in trajectories:
        if trajectory.excluded or (successful_only and not trajectory.success):
            continue
        for position, step in enumerate(trajectory.steps):
            if step.action is None:
                continue
            text = answer_text(step.action, describe(step.action, step.observation),
                               demonstration_reason(step.action, step.observation))
            decisions.append(Decision(step.observation, tuple(trajectory.steps[:position]), text))
    return decisions


def pretrain_tokens(
    policy: Any, trajectories: Sequence[Trajectory], *, epochs: int = 3, lr: float = 1e-3, batch_size: int = 4,
    seed: int = 0, progress: ProgressFn | None = None,
) -> dict[str, float]:
    """Minimise the token-mean negative log-likelihood of the demonstrated answers; returns what happened.

    Metrics: ``decisions`` (answers imitated), ``tokens`` (answer tokens per pass), ``epochs``, and
    ``nll_before`` / ``nll_after`` (token-mean NLL over all answers, measured without gradients).
    ``progress(done, total)`` hears of every minibatch.
    """
    if epochs < 0 or batch_size <= 0 or not lr > 0:
        raise ValueError(f"the warm start needs epochs >= 0, batch_size > 0 and lr > 0; got epochs={epochs}, "
                         f"batch_size={batch_size}, lr={lr}")
    decisions = demonstration_answers(trajectories)
    if not decisions:
        return {"decisions": 0.0, "tokens": 0.0, "epochs": float(epochs), "nll_before": math.nan,
                "nll_after": math.nan}
    parameters = trainable_parameters(policy)
    optimizer = torch.optim.Adam(parameters, lr=lr)
    order = list(range(len(decisions)))
    shuffler = random.Random(seed)
    nll_before, tokens = _mean_nll(policy, decisions, batch_size)
    total = epochs * math.ceil(len(decisions) / batch_size)
    done = 0
    policy.train()
    for _ in range(epochs):
        shuffler.shuffle(order)
        for start in range(0, len(order), batch_size):
            log_probs, mask = policy.token_log_probs([decisions[i] for i in order[start:start + batch_size]])
            loss = -(log_probs * mask).sum() / mask.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            done += 1
            if progress is not None:
                progress(done, total)
    policy.eval()
    nll_after, _ = _mean_nll(policy, decisions, batch_size)
    return {"decisions": float(len(decisions)), "tokens": float(tokens), "epochs": float(epochs),
            "nll_before": nll_before, "nll_after": nll_after}


def _mean_nll(policy: Any, decisions: Sequence[Decision], batch_size: int) -> tuple[float, int]:
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(decisions), batch_size):
            log_probs, mask = policy.token_log_probs(list(decisions[start:start + batch_size]))
            total += float(-(log_probs * mask).sum())
            count += int(mask.sum())
    return total / max(count, 1), count
