"""Behaviour cloning warm start for the ``dom`` policy, from demonstration trajectories.

RL from a policy that never succeeds gets no signal on long tasks; a few demonstrations (e.g. scripted
oracles on tasks *outside* the training suite) teach the scorer what a sensible step looks like, and RL
takes it from there. The loss is the negative log-probability of each demonstrated step under the
policy, with the step's own history, so the history features are learned too.

A demonstrated action that the policy cannot express (a click by coordinates, a wait, text that is not a
span of the goal) is skipped and counted, never guessed at: the metrics say how much of the demonstration
the policy could actually imitate. One rewriting is made, because it changes nothing on the page: typing
with ``clear_text`` into a field that is empty is the same as typing into it (the policy's form).

``record_oracle_demonstrations`` produces such trajectories with the scripted oracles of
``admire.envs.oracles``; use tasks outside the training suite, or the warm start already knows the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import torch

from admire.actions import describe, format_output, target_element
from admire.agent.base import Decision
from admire.agent.dom_policy import DomPolicy, PreparedDecisions
from admire.types import Action, Observation, Step, Task, Termination, Trajectory

DEMONSTRATION_REASON = "Demonstration."


def demonstration_decisions(
    trajectories: Sequence[Trajectory], successful_only: bool = True
) -> list[Decision]:
    """One decision per step of each (successful) trajectory: its screen, the steps before it, its text."""
    decisions: list[Decision] = []
    for trajectory in trajectories:
        if trajectory.excluded or (successful_only and not trajectory.success):
            continue
        steps = trajectory.steps
        for position, step in enumerate(steps):
            text = step.raw_output
            if step.action is not None:
                policy_form = _without_noop_clear(step.action, step.observation)
                if policy_form != step.action:
                    text = format_output(policy_form, reason=step.reason or DEMONSTRATION_REASON)
            decisions.append(Decision(step.observation, tuple(steps[:position]), text))
    return decisions


def record_oracle_demonstrations(env: Any, tasks: Sequence[Task], max_steps: int = 20, *,
                                 on_demonstration: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Play each task with its scripted oracle on ``env`` (a MiniWoB env) and keep every step;
    ``on_demonstration`` is called with each one as it is recorded (progress).

    The oracle reads the task's ground truth; the trajectories it leaves hold only what a policy sees
    (screens and the written actions), so imitating them teaches nothing the policy could not know. Each step
    carries the grounded description a rollout would record for it, so a demonstration's history reads as a
    rollout's does in the ``lm`` policy's prompt.
    """
    from admire.envs.oracles import run_oracle

    trajectories = []
    for task in tasks:
        run = run_oracle(env, task, max_steps=max_steps)
        steps = tuple(
            Step(index=index, observation=observation, raw_output=format_output(action, reason=DEMONSTRATION_REASON),
                 action=action, reason=DEMONSTRATION_REASON, grounded_description=describe(action, observation))
            for index, (observation, action) in enumerate(zip(run.observations, run.actions, strict=True))
        )
        trajectories.append(Trajectory(
            id=f"demo-{uuid.uuid4().hex[:12]}", task=task, goal=steps[0].observation.goal, steps=steps,
            outcome=1.0 if run.success else 0.0, termination=_termination(run.success, run.termination),
            info={"source": "oracle"},
        ))
        if on_demonstration is not None:
            on_demonstration(trajectories[-1])
    return trajectories


def _termination(success: bool, reported: object) -> Termination:
    """How an oracle episode ended; ``reported`` is None when it ran out of steps."""
    if success:
        return Termination.SUCCESS
    if reported is None:
        return Termination.MAX_STEPS
    known = {t.value for t in Termination}
    return Termination(reported) if reported in known else Termination.AGENT_STOP


def _without_noop_clear(action: Action, observation: Observation) -> Action:
    """``input_text`` with ``clear_text`` set, into an empty field, written the way the policy writes it."""
    if action.action_type != "input_text" or action.clear_text is None:
        return action
    element = target_element(action, observation)
    if action.clear_text and (element is None or (element.text or "").strip()):
        return action  # clearing a filled field is a different action: not the policy's to imitate
    return action.model_copy(update={"clear_text": None})


def pretrain(
    policy: DomPolicy,
    trajectories: Sequence[Trajectory],
    epochs: int = 20,
    lr: float = 0.01,
    batch_size: int = 64,
    seed: int = 0,
    successful_only: bool = True,
) -> dict[str, float]:
    """Maximise the log-probability of the demonstrated actions; returns what happened.

    Metrics: ``decisions`` (steps offered), ``used``, ``skipped_unparsed`` (text with no valid action),
    ``skipped_not_candidate`` (an action the policy cannot take), ``epochs``, ``nll_before`` /
    ``nll_after`` (mean negative log-likelihood of the used steps) and ``accuracy_before`` /
    ``accuracy_after`` (share of used steps where the demonstrated action is the policy's greedy choice).
    """
    if epochs < 0 or batch_size <= 0 or lr <= 0:
        raise ValueError(f"pretrain needs epochs >= 0, batch_size > 0 and lr > 0; got epochs={epochs}, "
                         f"batch_size={batch_size}, lr={lr}")
    decisions = demonstration_decisions(trajectories, successful_only=successful_only)
    prepared = policy.prepare(decisions)
    usable = [i for i, index in enumerate(prepared.indices) if index is not None]
    metrics: dict[str, float] = {
        "decisions": float(len(decisions)),
        "used": float(len(usable)),
        "skipped_unparsed": float(sum(a is None for a in prepared.actions)),
        "skipped_not_candidate": float(sum(a is not None and i is None
                                           for a, i in zip(prepared.actions, prepared.indices, strict=True))),
        "epochs": float(epochs),
    }
    if not usable:
        return {**metrics, "nll_before": float("nan"), "nll_after": float("nan"),
                "accuracy_before": float("nan"), "accuracy_after": float("nan")}
    data = _subset(prepared, usable)
    metrics["nll_before"], metrics["accuracy_before"] = _evaluate(policy, data)
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    shuffler = torch.Generator().manual_seed(seed)
    policy.train()
    for _ in range(epochs):
        order = torch.randperm(len(usable), generator=shuffler).tolist()
        for start in range(0, len(order), batch_size):
            batch = _subset(data, order[start:start + batch_size])
            loss = -policy.log_prob_prepared(batch).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    metrics["nll_after"], metrics["accuracy_after"] = _evaluate(policy, data)
    return metrics


def _subset(prepared: PreparedDecisions, positions: Sequence[int]) -> PreparedDecisions:
    return PreparedDecisions(
        screens=tuple(prepared.screens[i] for i in positions),
        indices=tuple(prepared.indices[i] for i in positions),
        actions=tuple(prepared.actions[i] for i in positions),
    )


def _evaluate(policy: DomPolicy, data: PreparedDecisions) -> tuple[float, float]:
    with torch.no_grad():
        log_probs = policy.candidate_log_probs(data.screens)
        chosen = torch.tensor(data.indices, dtype=torch.long)
        nll = -log_probs[torch.arange(len(chosen)), chosen].mean()
        accuracy = (log_probs.argmax(dim=1) == chosen).float().mean()
    return float(nll), float(accuracy)
