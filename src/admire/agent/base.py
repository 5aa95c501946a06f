"""The policy protocol: what the trainer and the rollout know about any policy.

A policy turns screens into the text a model would write (``Reason: … Action: {json}``), and can
score, under its current parameters, the text it wrote earlier. That is all PPO needs, so the same
trainer drives the CPU ``dom`` policy and a VLM without knowing which it has.

Policies are looked up by name (``actor_rollout_ref.model.name``) in ``POLICIES``: the built-in ``dom``
is declared as a ``module:attr`` string, others arrive through the ``admire.policies`` entry-point group
or ``register_policy`` (see :mod:`admire.registry`). This module imports no implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

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


@runtime_checkable
class TrainablePolicy(Policy, Protocol):
    """What the CPU trainer, PPO and checkpoints call on a policy they train, beyond ``Policy``: a torch
    module's parameters, state and mode. Any ``torch.nn.Module`` that implements ``Policy`` has them; a policy
    is checked once, when it is built (``check_trainable``), not at the first use deep in an update."""

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]: ...

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...


# The capabilities a trainable policy may add. Each is a protocol, so the trainer asks a type guard below rather
# than looking for a method by name, and ``python -m admire.agent.check_policy`` reports which a policy has.

@runtime_checkable
class EntropyPolicy(Protocol):
    """Log-probs and the entropy of each decision's whole distribution in one pass (``actor.entropy_coef``;
    without it the entropy is estimated from the sampled actions and only logged)."""

    def log_prob_and_entropy(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class TokenPolicy(Protocol):
    """A policy that writes tokens: PPO, the reference KL and the warm start score each answer token."""

    def token_log_probs(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, T]`` per-token log-probs (differentiable) and a ``[N, T]`` float mask, right-padded."""
        ...

    def token_log_probs_and_entropy(self, decisions: Sequence[Decision]
                                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The same with the per-token entropy ``[N, T]`` of the whole next-token distribution."""
        ...


@runtime_checkable
class ReferencePolicy(Protocol):
    """A policy that holds its own reference model (LoRA: the adapter switched off), so the KL term needs
    no copy of its weights."""

    def reference(self) -> AbstractContextManager[None]: ...


@runtime_checkable
class AdapterPolicy(Protocol):
    """A policy that trains only part of itself (a LoRA adapter): the optimizer gets these."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]: ...


CAPABILITIES: dict[str, type] = {"entropy": EntropyPolicy, "tokens": TokenPolicy, "reference": ReferencePolicy,
                                 "adapter": AdapterPolicy}
"""The optional protocols, by the name ``check_policy`` reports them under."""


def missing_methods(policy: object, protocol: type) -> list[str]:
    """The methods of ``protocol`` that ``policy`` lacks (empty when it implements the protocol)."""
    return sorted(name for name in protocol_methods(protocol) if not callable(getattr(policy, name, None)))


def protocol_methods(protocol: type) -> list[str]:
    """The public methods a protocol (and the protocols it extends) declares."""
    names = {name for klass in protocol.__mro__ if getattr(klass, "_is_protocol", False) and klass is not Protocol
             for name, value in vars(klass).items() if callable(value) and not name.startswith("_")}
    return sorted(names)


# What the trainer asks of a policy, each a type guard: a policy implements a protocol when every method of it
# is callable on the instance (``isinstance`` on a runtime protocol also accepts a class attribute that hides a
# method, such as a property raising AttributeError).

def is_trainable(policy: object) -> TypeGuard[TrainablePolicy]:
    return not missing_methods(policy, TrainablePolicy)


def has_entropy(policy: object) -> TypeGuard[EntropyPolicy]:
    return not missing_methods(policy, EntropyPolicy)


def scores_tokens(policy: object) -> TypeGuard[TokenPolicy]:
    return not missing_methods(policy, TokenPolicy)


def holds_reference(policy: object) -> TypeGuard[ReferencePolicy]:
    return not missing_methods(policy, ReferencePolicy)


def trains_an_adapter(policy: object) -> TypeGuard[AdapterPolicy]:
    return not missing_methods(policy, AdapterPolicy)


def check_trainable(policy: object, name: str) -> TrainablePolicy:
    """``policy`` as a ``TrainablePolicy``, or a one-line ``TypeError`` naming what the policy ``name`` lacks."""
    missing = missing_methods(policy, TrainablePolicy)
    if missing:
        raise TypeError(f"the {name!r} policy ({type(policy).__name__}) cannot be trained: it has no "
                        f"{', '.join(missing)} (a torch.nn.Module implementing act and log_prob has them all); "
                        f"check it with python -m admire.agent.check_policy {name}")
    assert is_trainable(policy)
    return policy


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
    return list(policy.trainable_parameters()) if trains_an_adapter(policy) else list(policy.parameters())



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
