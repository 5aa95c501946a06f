"""The policy protocol: what the trainer and the rollout know about any policy.

A policy turns screens into the text a model would write (``Reason: … Action: {json}``), and can
score, under its current parameters, the text it wrote earlier. That is all PPO needs, so the same
trainer drives the CPU ``dom`` policy and a VLM without knowing which it has.

Policies are looked up by name (``actor_rollout_ref.model.name``) in ``POLICIES``: the built-in ``dom``
is declared as a ``module:attr`` string, others arrive through the ``admire.policies`` entry-point group
or ``register_policy`` (see :mod:`admire.registry`). This module imports no implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from admire.registry import Registry
from admire.types import Action, Observation, Step

if TYPE_CHECKING:  # torch stays out of import time for users of the protocol alone
    import torch


@dataclass(frozen=True)
class PolicyOutput:
    """One decision: the text written, the action it parsed to (None: format error), its log-prob."""

    text: str
    action: Action | None
    log_prob: float
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """What a log-prob is computed for: the screen, the steps before it, and the text written."""

    observation: Observation
    history: tuple[Step, ...]
    text: str


@runtime_checkable
class Policy(Protocol):
    def act(
        self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]], greedy: bool = False
    ) -> list[PolicyOutput]:
        """One decision per environment; batched so a policy can run one forward pass for all."""
        ...

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        """Log-probabilities (differentiable, shape ``[len(decisions)]``) under the current parameters."""
        ...


PolicyFactory = Callable[..., Policy]
POLICIES: Registry[PolicyFactory] = Registry(
    "policy",
    group="admire.policies",
    builtins={
        "dom": "admire.agent.dom_policy:DomPolicy",
        "lm": "admire.agent.lm_policy:LMPolicy",
    },  # imported on lookup: torch stays out of import time
)


def register_policy(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    return POLICIES.register(name)


def make_policy(name: str, **options: Any) -> Policy:
    return POLICIES.lookup(name)(**options)


def trainable_parameters(policy: Any) -> list[Any]:
    """What an optimizer updates: the policy's ``trainable_parameters()`` when it says (LoRA: the
    adapter only), else every parameter."""
    chosen = getattr(policy, "trainable_parameters", None)
    return list(chosen()) if callable(chosen) else list(policy.parameters())



class NonFiniteWeights(ValueError):
    """A policy whose weights hold NaN or infinity: every action it would sample is noise (or a crash in the
    sampler), so it is stopped where the weights were loaded or updated, with the parameter's name."""


def check_finite_weights(policy: Any, where: str) -> None:
    """``NonFiniteWeights`` naming the first parameter of ``policy`` that is not finite; ``where`` says what
    produced the weights ("the checkpoint …", "the update of epoch 3")."""
    import torch

    named = getattr(policy, "named_parameters", None)
    if not callable(named):
        return
    with torch.no_grad():
        for name, parameter in named():
            if not bool(torch.isfinite(parameter).all()):
                raise NonFiniteWeights(f"{where} left the policy's weight {name!r} holding NaN or infinity")
