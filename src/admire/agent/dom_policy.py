"""The ``dom`` policy: a few thousand parameters over frozen sentence embeddings, trained on the CPU.

Each screen is turned into a finite list of candidate actions (``agent.candidates``); each candidate
gets a feature row (``agent.features``) and a score from a small network; the softmax over the
candidates of a screen is the policy. The chosen candidate is written as the text a VLM would write
(``Reason: … Action: {json}``), so parsing, grounded descriptions, milestone matching and rewards run
the same code whichever policy produced the step, and ``log_prob`` re-reads that text to find the
candidate again under the current parameters.

The scorer is the sum of a linear term over the features and a small MLP over the features and
learned low-dimensional projections of the goal, element and span embeddings. By default it starts as
a plain random network (``prior_strength=0``): what it knows, it learnt from rewards or from
demonstrations (``agent.pretrain``). With ``prior_strength`` > 0 the linear term starts from hand-set
weights that say what a person would try first (use the span whose preceding words name the field,
touch what the goal names, do not repeat yourself, do not stop or scroll without reason). Those
weights are an initialisation, not a rule — all of them are trained — but they are strong: the
untrained greedy policy then already solves several MiniWoB++ form tasks, so an experiment that wants
to show learning should leave them off (`admire bench policy_sanity` measures both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from admire.actions import element_phrase, format_output, parse_model_output
from admire.agent.base import Decision, PolicyOutput
from admire.agent.candidates import DEFAULT_MAX_CANDIDATES, Candidate
from admire.agent.features import FEATURE_INDEX, FeatureBuilder, ScreenFeatures
from admire.agent.spans import DEFAULT_MAX_SPANS
from admire.embeddings import DEFAULT_CACHE_SIZE, DEFAULT_ENCODER, EmbeddingCache, Encoder, make_encoder
from admire.types import Action, Observation, Step

EMBEDDING_DIM = 384
"""all-MiniLM-L6-v2's sentence dimension; set ``embedding_dim`` with another ``encoder``."""

PRIOR_WEIGHTS: dict[str, float] = {
    "sim_context_element": 2.0,
    "context_names_element": 1.0,
    "sim_goal_element": 1.0,
    "pending_this": 1.0,
    "quoted_coverage": 1.0,
    "span_quoted": 1.0,
    "span_salient": 0.5,
    "repeats_earlier_action": -3.0,
    "typed_into_before": -1.0,
    "span_typed_before": -0.5,
    "field_holds_span": -2.0,
    "kind_enter": -1.0,
    "kind_scroll": -1.0,
    "kind_complete": -2.0,
}
"""The initial linear weights at ``prior_strength=1`` (see the module docstring); off by default."""


class UnknownDecisionError(ValueError):
    """A decision's text is not one of the candidate actions of its screen."""


class CandidateScorer(nn.Module):
    """score = w·f + MLP([f, P·goal, P·element, P·span, P·goal ⊙ P·element, P·span ⊙ P·element]).

    One projection P (embedding → ``projection_dim``) serves all three texts, so the products are a
    learned similarity in a shared space on top of the fixed cosines in the features.
    """

    def __init__(self, num_features: int, embedding_dim: int, projection_dim: int, hidden_size: int) -> None:
        super().__init__()
        self.project = nn.Linear(embedding_dim, projection_dim, bias=False)
        self.linear = nn.Linear(num_features, 1, bias=False)
        self.hidden = nn.Linear(num_features + 5 * projection_dim, hidden_size)
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, numeric: torch.Tensor, goal: torch.Tensor, element: torch.Tensor,
                span: torch.Tensor) -> torch.Tensor:
        """Shapes: numeric (B, N, F), goal (B, D), element and span (B, N, D) → scores (B, N)."""
        g = self.project(goal).unsqueeze(1).expand(-1, numeric.shape[1], -1)
        e, s = self.project(element), self.project(span)
        x = torch.cat([numeric, g, e, s, g * e, s * e], dim=-1)
        return self.linear(numeric).squeeze(-1) + self.out(torch.tanh(self.hidden(x))).squeeze(-1)


@dataclass(frozen=True)
class PreparedDecisions:
    """Decisions with their features computed and their chosen candidate found (None: not a candidate).

    Features depend only on the data and the frozen encoder, so a trainer that scores the same decisions
    for several epochs (PPO, behaviour cloning) prepares them once.
    """

    screens: tuple[ScreenFeatures, ...]
    indices: tuple[int | None, ...]
    actions: tuple[Action | None, ...]


class DomPolicy(nn.Module):
    """Candidate-scoring policy for DOM/accessibility-tree screens (see the module docstring)."""

    def __init__(
        self,
        hidden_size: int = 32,
        projection_dim: int = 8,
        seed: int = 0,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
        max_spans: int = DEFAULT_MAX_SPANS,
        prior_strength: float = 0.0,
        encoder: Encoder | str = DEFAULT_ENCODER,
        embedding_dim: int = EMBEDDING_DIM,
        embedding_cache_size: int = DEFAULT_CACHE_SIZE,
        block_features: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("hidden_size", hidden_size), ("projection_dim", projection_dim),
                            ("max_spans", max_spans), ("embedding_dim", embedding_dim)):
            if int(value) <= 0:
                raise ValueError(f"the dom policy needs a positive {name}, got {value}")
        self.config = {"hidden_size": int(hidden_size), "projection_dim": int(projection_dim),
                       "seed": int(seed), "max_candidates": int(max_candidates), "max_spans": int(max_spans),
                       "prior_strength": float(prior_strength), "embedding_dim": int(embedding_dim),
                       "block_features": bool(block_features)}
        self.embedding_dim = int(embedding_dim)
        # ``encoder`` is the config key actor_rollout_ref.model.encoder (a name or a model directory, as
        # milestone_reward.encoder) or an Encoder object; the same name shares one model with the matcher.
        self.embeddings = EmbeddingCache(make_encoder(encoder) if isinstance(encoder, str) else encoder,
                                         capacity=embedding_cache_size)
        self.features = FeatureBuilder(self.embeddings, max_candidates=max_candidates, max_spans=max_spans,
                                       block_features=bool(block_features))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.scorer = CandidateScorer(self.features.num_features, self.embedding_dim, projection_dim,
                                          hidden_size)
            if prior_strength:
                self._apply_prior(float(prior_strength))
        self._sampler = torch.Generator().manual_seed(int(seed))

    # ---------------------------------------------------------------------------------------------
    # The Policy protocol
    # ---------------------------------------------------------------------------------------------

    def act(
        self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]], greedy: bool = False
    ) -> list[PolicyOutput]:
        """Sample (or, ``greedy``, take the best) candidate of each screen in one forward pass."""
        if len(observations) != len(histories):
            raise ValueError(f"act got {len(observations)} observations but {len(histories)} histories; "
                             "pass one history (possibly empty) per observation")
        if not observations:
            return []
        screens = [self.features.build(o, h) for o, h in zip(observations, histories, strict=True)]
        with torch.no_grad():
            log_probs = self.candidate_log_probs(screens)
            if greedy:
                chosen = log_probs.argmax(dim=1)
            else:
                chosen = torch.multinomial(log_probs.exp(), 1, generator=self._sampler).squeeze(1)
            entropy = -(log_probs.exp() * log_probs.clamp_min(-1e9)).sum(dim=1)
        outputs = []
        for row, (screen, observation) in enumerate(zip(screens, observations, strict=True)):
            index = int(chosen[row])
            candidate = screen.candidates[index]
            text = self._write(candidate, observation)
            outputs.append(PolicyOutput(
                text=text,
                action=candidate.action,
                log_prob=float(log_probs[row, index]),
                info={"candidate_index": index, "num_candidates": len(screen.candidates),
                      "candidate_kind": candidate.kind, "entropy": float(entropy[row])},
            ))
        return outputs

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        """Differentiable log-probabilities of the decisions' texts, shape ``[len(decisions)]``.

        Raises ``UnknownDecisionError`` when a text is not a candidate of its screen: this policy can
        only score what it could have written.
        """
        prepared = self._prepare_known(decisions)
        return self.log_prob_prepared(prepared)

    def log_prob_and_entropy(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob`` and the entropy of each decision's whole candidate distribution, from one forward
        pass: PPO's entropy bonus and its logged ``ppo/entropy`` (both differentiable)."""
        if not decisions:
            return torch.zeros(0), torch.zeros(0)
        prepared = self._prepare_known(decisions)
        log_probs = self.candidate_log_probs(prepared.screens)
        rows = torch.tensor(prepared.indices, dtype=torch.long)
        chosen = log_probs[torch.arange(len(decisions)), rows]
        entropy = -(log_probs.exp() * log_probs.clamp_min(-1e9)).sum(dim=1)  # padding: exp(-inf) = 0
        return chosen, entropy

    # ---------------------------------------------------------------------------------------------
    # For trainers that score the same decisions repeatedly
    # ---------------------------------------------------------------------------------------------

    def candidates(self, observation: Observation, history: Sequence[Step] = ()) -> tuple[Candidate, ...]:
        """The candidate actions of a screen, in the order the policy's distribution uses."""
        return self.features.build(observation, history).candidates

    def _prepare_known(self, decisions: Sequence[Decision]) -> PreparedDecisions:
        """``prepare``, refusing (``UnknownDecisionError``) a text that is not a candidate of its screen."""
        prepared = self.prepare(decisions)
        for position, index in enumerate(prepared.indices):
            if index is None:
                raise self._unknown(decisions[position], prepared.actions[position],
                                    prepared.screens[position])
        return prepared

    def prepare(self, decisions: Sequence[Decision]) -> PreparedDecisions:
        """Features and the chosen candidate of each decision; never raises for a non-candidate text."""
        screens, indices, actions = [], [], []
        for decision in decisions:
            screen = self.features.build(decision.observation, decision.history)
            action = parse_model_output(decision.text).action
            screens.append(screen)
            actions.append(action)
            indices.append(_find(screen.candidates, action))
        return PreparedDecisions(tuple(screens), tuple(indices), tuple(actions))

    def log_prob_prepared(self, prepared: PreparedDecisions) -> torch.Tensor:
        """Log-probabilities of the prepared decisions whose index is known, in order, in one pass."""
        keep = [i for i, index in enumerate(prepared.indices) if index is not None]
        if not keep:
            return torch.zeros(0)
        screens = [prepared.screens[i] for i in keep]
        rows = torch.tensor([prepared.indices[i] for i in keep], dtype=torch.long)
        log_probs = self.candidate_log_probs(screens)
        return log_probs[torch.arange(len(keep)), rows]

    def candidate_log_probs(self, screens: Sequence[ScreenFeatures]) -> torch.Tensor:
        """The whole distribution of each screen, (B, N_max) log-probabilities; padding columns are -inf."""
        width = max(len(s.candidates) for s in screens)
        batch = len(screens)
        dims = {s.goal.shape[0] for s in screens}
        if dims != {self.embedding_dim}:
            raise ValueError(f"the sentence encoder gives {sorted(dims)}-dimensional embeddings but the "
                             f"policy was built for {self.embedding_dim}; pass embedding_dim= to match it")
        numeric = np.zeros((batch, width, self.features.num_features), dtype=np.float32)
        element = np.zeros((batch, width, self.embedding_dim), dtype=np.float32)
        span = np.zeros((batch, width, self.embedding_dim), dtype=np.float32)
        mask = np.zeros((batch, width), dtype=bool)
        for row, screen in enumerate(screens):
            n = len(screen.candidates)
            numeric[row, :n], element[row, :n], span[row, :n] = screen.numeric, screen.element, screen.span
            mask[row, :n] = True
        goal = torch.from_numpy(np.stack([s.goal for s in screens]))
        scores = self.scorer(torch.from_numpy(numeric), goal, torch.from_numpy(element),
                             torch.from_numpy(span))
        scores = scores.masked_fill(~torch.from_numpy(mask), float("-inf"))
        return torch.log_softmax(scores, dim=1)

    # ---------------------------------------------------------------------------------------------
    # Checkpoints: the sampler's state travels with the weights, so a resumed run samples the same.
    # ---------------------------------------------------------------------------------------------

    def get_extra_state(self) -> dict[str, Any]:
        return {"sampler": self._sampler.get_state(), "config": dict(self.config)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        config = state.get("config", {})
        mismatched = {k: (v, self.config.get(k)) for k, v in config.items()
                      if k in ("hidden_size", "projection_dim", "embedding_dim", "block_features")
                      and self.config.get(k, False) != v}
        if mismatched:
            details = ", ".join(f"{k}: checkpoint {a} vs policy {b}" for k, (a, b) in mismatched.items())
            raise ValueError(f"this checkpoint was saved by a differently shaped dom policy ({details}); "
                             "build the policy with the checkpoint's options")
        self._sampler.set_state(state["sampler"])

    # ---------------------------------------------------------------------------------------------

    def _apply_prior(self, strength: float) -> None:
        with torch.no_grad():
            weights = torch.zeros(self.features.num_features)
            for name, value in PRIOR_WEIGHTS.items():
                weights[FEATURE_INDEX[name]] = value * strength
            self.scorer.linear.weight.copy_(weights.unsqueeze(0))
            # Start the MLP quiet so the prior decides the first rollouts; it grows with training.
            self.scorer.out.weight.mul_(0.1)
            self.scorer.out.bias.zero_()

    def _write(self, candidate: Candidate, observation: Observation) -> str:
        text = format_output(candidate.action, reason=_reason(candidate, observation))
        if parse_model_output(text).action != candidate.action:  # an element label that confuses the parser
            text = format_output(candidate.action)
        return text

    def _unknown(self, decision: Decision, action: Action | None,
                 screen: ScreenFeatures) -> UnknownDecisionError:
        shown = ", ".join(str(c.action.as_dict()) for c in screen.candidates[:5])
        if action is None:
            what = f"the text {decision.text[:120]!r} does not parse into an action"
        else:
            what = f"the action {action.as_dict()} is not among the {len(screen.candidates)} candidates"
        return UnknownDecisionError(
            f"the dom policy cannot score this decision: {what} of its screen (first candidates: {shown}). "
            "It only scores texts it could have written on that screen with that history; a decision from "
            "another policy, or paired with another observation, cannot be scored."
        )


def _find(candidates: Sequence[Candidate], action: Action | None) -> int | None:
    if action is None:
        return None
    for index, candidate in enumerate(candidates):
        if candidate.action == action:
            return index
    return None


def _reason(candidate: Candidate, observation: Observation) -> str:
    """A short templated reason, so the output reads like a model's and descriptions stay grounded."""
    element = (observation.ui_elements[candidate.element_index]
               if candidate.element_index is not None else None)
    if candidate.kind == "click" and element is not None:
        return f"The goal points to {element_phrase(element)}, so I click it."
    if candidate.kind == "type" and element is not None and candidate.span is not None:
        return f'The goal gives "{candidate.span.text}", which belongs in {element_phrase(element)}.'
    if candidate.kind == "enter":
        return "Pressing Enter submits what has been entered."
    if candidate.kind == "scroll":
        return "Scrolling down may reveal what the goal needs."
    return "The goal appears to be done."
