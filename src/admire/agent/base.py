"""The policy protocol: what the trainer and the rollout know about any policy.

A policy turns screens into the text a model would write (``Reason: … Action: {json}``), and can
score, under its current parameters, the text it wrote earlier. That is all PPO needs, so the same
trainer drives the CPU ``dom`` policy and a VLM without knowing which it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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
_REGISTRY: dict[str, PolicyFactory] = {}


def register_policy(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    def decorator(factory: PolicyFactory) -> PolicyFactory:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"a policy named {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorator


def make_policy(name: str, **options: Any) -> Policy:
    _load_builtin_policies()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; registered: {', '.join(sorted(_REGISTRY))}") from None
    return factory(**options)


def _load_builtin_policies() -> None:
    import admire.agent.dom_policy  # noqa: F401
