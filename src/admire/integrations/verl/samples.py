"""Stepwise samples: one GUI step = one verl sample, and the way it travels in a ``verl.DataProto``.

ADMIRE scores every step of an episode (R_total(t), method.md §4) and normalises steps against the steps of
their group (``grpo_step``), so the unit of training is the step, not the episode: a step's prompt is its
screen and history, its response the model's output at that step. A ``StepSample`` is that step plus what the
advantage and reward code need to put steps back together — its group (verl's ``uid``: the rollouts of one
task instance), its trajectory and its position in it.

The DataProto layout is verl's, so verl's actor, rollout and estimators read it unchanged, with the project's
data contract (one name per field, shared by the agent loop, the reward manager and the trainer):

* tensors: ``prompts`` (left-padded), ``responses`` (right-padded), ``response_mask`` (the response's tokens;
  all 0 on an excluded step, so no path through verl trains on it), ``attention_mask``,
  ``input_ids`` (= prompts ⧺ responses), ``position_ids`` (text positions: cumulative attention − 1, as
  verl's ``compute_position_id_with_mask``; a VL model's rope index comes from the agent loop's processor),
  ``token_level_rewards`` (float32, the step's reward on its last response token, 0 elsewhere; present when
  the steps are scored) and ``rollout_log_probs`` (float32, right-padded with 0; present when given);
* non-tensors (object arrays): ``uid``, ``admire_traj_id``, ``admire_step``, ``admire_num_steps``,
  ``admire_excluded`` and ``admire_trajectory`` (the episode's ``Trajectory`` JSON on its last step only).

Rewards and log-probabilities travel as float32 (verl's dtype), so a round trip returns
``float(np.float32(x))``: exact for any value float32 represents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from admire.extras import require

require("verl", "torch", extra="verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl import DataProto  # noqa: E402

GROUP = "uid"
TRAJ_ID = "admire_traj_id"
STEP = "admire_step"
NUM_STEPS = "admire_num_steps"
EXCLUDED = "admire_excluded"
TRAJECTORY = "admire_trajectory"
NON_TENSOR_KEYS: tuple[str, ...] = (GROUP, TRAJ_ID, STEP, NUM_STEPS, EXCLUDED, TRAJECTORY)
"""The non-tensor fields every stepwise batch carries (the data contract)."""

REWARDS = "token_level_rewards"
LOG_PROBS = "rollout_log_probs"
TENSOR_KEYS: tuple[str, ...] = ("prompts", "responses", "response_mask", "attention_mask", "input_ids",
                                "position_ids")
"""The tensors every stepwise batch carries; ``token_level_rewards`` and ``rollout_log_probs`` are optional."""


@dataclass(frozen=True)
class StepSample:
    """One step of one episode as a training sample.

    ``reward`` is the step's R_total, ``None`` until the step is scored. An ``excluded`` step belongs to an
    episode that crashed (env error) after its re-runs: it is never scored, so it carries no reward, and the
    estimators give it no advantage. ``trajectory_json`` (the whole episode, ``Trajectory.model_dump_json()``)
    rides on the last step only, so a batch holds each episode once.
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    group_id: str
    traj_id: str
    step: int
    num_steps: int
    reward: float | None = None
    excluded: bool = False
    trajectory_json: str | None = None
    response_logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        where = f"step {self.step} of trajectory {self.traj_id!r}"
        set_ = object.__setattr__
        set_(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        set_(self, "response_ids", tuple(int(t) for t in self.response_ids))
        set_(self, "group_id", str(self.group_id))
        set_(self, "traj_id", str(self.traj_id))
        set_(self, "step", int(self.step))
        set_(self, "num_steps", int(self.num_steps))
        set_(self, "excluded", bool(self.excluded))
        if not self.prompt_ids:
            raise ValueError(f"{where} has an empty prompt: a step's prompt holds at least its screen")
        if not self.response_ids:
            raise ValueError(f"{where} has an empty response: a step is one model output of at least one token")
        if not 0 <= self.step < self.num_steps:
            raise ValueError(f"{where}: the step index must be in 0..num_steps-1 (num_steps={self.num_steps})")
        if self.reward is not None:
            if self.excluded:
                raise ValueError(f"{where} is excluded (env error) and carries no reward: pass reward=None")
            if not math.isfinite(float(self.reward)):
                raise ValueError(f"{where} has reward {self.reward!r}: a step reward is a finite number")
            set_(self, "reward", float(self.reward))
        if self.trajectory_json is not None and self.step != self.num_steps - 1:
            raise ValueError(f"{where}: the trajectory JSON rides on the last step only "
                             f"(step {self.num_steps - 1}); pass trajectory_json=None here")
        if self.response_logprobs is not None:
            logprobs = tuple(float(x) for x in self.response_logprobs)
            if len(logprobs) != len(self.response_ids):
                raise ValueError(f"{where} has {len(logprobs)} response log-probs for "
                                 f"{len(self.response_ids)} response tokens: give one per token")
            set_(self, "response_logprobs", logprobs)


def to_data_proto(samples: Sequence[StepSample], pad_token_id: int, *, prompt_length: int | None = None,
                  response_length: int | None = None) -> DataProto:
    """A verl batch of ``samples`` (row i = sample i), padded to ``prompt_length``/``response_length``
    (verl's ``rollout.prompt_length``/``response_length``) or, when not given, to the longest in the batch."""
    if not samples:
        raise ValueError("to_data_proto needs at least one step sample")
    _check_consistent(samples)
    longest_prompt = max(len(s.prompt_ids) for s in samples)
    longest_response = max(len(s.response_ids) for s in samples)
    P = _length("prompt_length", prompt_length, longest_prompt)
    R = _length("response_length", response_length, longest_response)

    n = len(samples)
    prompts = torch.full((n, P), int(pad_token_id), dtype=torch.long)
    responses = torch.full((n, R), int(pad_token_id), dtype=torch.long)
    prompt_attention = torch.zeros((n, P), dtype=torch.long)
    response_attention = torch.zeros((n, R), dtype=torch.long)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        prompts[i, P - p:] = torch.tensor(s.prompt_ids, dtype=torch.long)
        prompt_attention[i, P - p:] = 1
        responses[i, :r] = torch.tensor(s.response_ids, dtype=torch.long)
        response_attention[i, :r] = 1
    attention_mask = torch.cat([prompt_attention, response_attention], dim=1)
    excluded = torch.tensor([s.excluded for s in samples])
    tensors: dict[str, torch.Tensor] = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_attention * ~excluded.unsqueeze(1),
        "attention_mask": attention_mask,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),
    }
    rewards = _rewards(samples)
    if rewards is not None:
        tensors[REWARDS] = place_step_rewards(response_attention, rewards)
    logprobs = _logprobs(samples, R)
    if logprobs is not None:
        tensors[LOG_PROBS] = logprobs

    non_tensors = {
        GROUP: _objects([s.group_id for s in samples]),
        TRAJ_ID: _objects([s.traj_id for s in samples]),
        STEP: _objects([s.step for s in samples]),
        NUM_STEPS: _objects([s.num_steps for s in samples]),
        EXCLUDED: _objects([s.excluded for s in samples]),
        TRAJECTORY: _objects([s.trajectory_json for s in samples]),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def from_data_proto(data: DataProto) -> list[StepSample]:
    """The step samples of a stepwise verl batch (the inverse of ``to_data_proto``, row by row)."""
    absent = [k for k in ("prompts", "responses", "attention_mask") if k not in data.batch]
    absent += [k for k in NON_TENSOR_KEYS if k not in data.non_tensor_batch]
    if absent:
        raise ValueError(f"not a stepwise batch: it lacks {', '.join(absent)} (build it with to_data_proto)")
    P = data.batch["prompts"].shape[1]
    attention = data.batch["attention_mask"].bool()
    prompt_attention, response_attention = attention[:, :P], attention[:, P:]
    nt = data.non_tensor_batch
    trained = response_attention & ~torch.as_tensor(nt[EXCLUDED].astype(bool)).unsqueeze(1)
    if "response_mask" in data.batch and not torch.equal(data.batch["response_mask"].bool(), trained):
        raise ValueError("response_mask is not the response's attention mask (all 0 on excluded steps): a "
                         "stepwise sample's response is the model's output alone, every token of it trained")
    rewards = step_rewards(data) if REWARDS in data.batch else None
    logprobs = data.batch.get(LOG_PROBS, None)
    samples = []
    for i in range(len(data)):
        excluded = bool(nt[EXCLUDED][i])
        response = data.batch["responses"][i][response_attention[i]]
        samples.append(StepSample(
            prompt_ids=tuple(data.batch["prompts"][i][prompt_attention[i]].tolist()),
            response_ids=tuple(response.tolist()),
            group_id=nt[GROUP][i],
            traj_id=nt[TRAJ_ID][i],
            step=nt[STEP][i],
            num_steps=nt[NUM_STEPS][i],
            reward=None if rewards is None or excluded else float(rewards[i]),
            excluded=excluded,
            trajectory_json=nt[TRAJECTORY][i],
            response_logprobs=None if logprobs is None else tuple(logprobs[i][response_attention[i]].tolist()),
        ))
    return samples


def place_step_rewards(response_mask: torch.Tensor, rewards: Sequence[float] | np.ndarray | torch.Tensor
                       ) -> torch.Tensor:
    """verl's ``token_level_rewards``: row i is 0 except ``rewards[i]`` on its last response token (the last
    1 of ``response_mask``), float32. A row with no trainable token (``response_mask`` all 0, as an excluded
    step's) keeps its reward on column 0, so ``step_rewards`` still reads it while nothing trains on it. Where
    the reward sits does not change what the estimators see (they sum the row); the last token is where verl's
    own reward loop puts a sequence score."""
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be (batch, response_length), got shape {tuple(response_mask.shape)}")
    values = torch.as_tensor(np.asarray(rewards, dtype=np.float64), dtype=torch.float32).reshape(-1)
    if values.numel() != response_mask.shape[0]:
        raise ValueError(f"{values.numel()} rewards for {response_mask.shape[0]} rows: give one reward per row")
    mask = response_mask.bool()
    length = mask.shape[1]
    last = length - 1 - torch.argmax(mask.flip(dims=[1]).to(torch.int8), dim=1)
    last = torch.where(mask.any(dim=1), last, torch.zeros_like(last))
    placed = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    placed[torch.arange(mask.shape[0], device=mask.device), last] = values.to(mask.device)
    return placed


def step_rewards(data: DataProto) -> np.ndarray:
    """Each row's step reward: the sum of its ``token_level_rewards`` (float64)."""
    if REWARDS not in data.batch:
        raise ValueError(f"the batch has no {REWARDS}: score its steps first (place_step_rewards)")
    return data.batch[REWARDS].to(torch.float64).sum(dim=-1).numpy()


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def _check_consistent(samples: Sequence[StepSample]) -> None:
    """The steps of one trajectory agree on its length, group and exclusion, and no step appears twice."""
    first: dict[str, StepSample] = {}
    seen: set[tuple[str, int]] = set()
    for s in samples:
        if (s.traj_id, s.step) in seen:
            raise ValueError(f"step {s.step} of trajectory {s.traj_id!r} appears twice in the batch")
        seen.add((s.traj_id, s.step))
        ref = first.setdefault(s.traj_id, s)
        for name in ("num_steps", "group_id", "excluded"):
            if getattr(s, name) != getattr(ref, name):
                raise ValueError(f"the steps of trajectory {s.traj_id!r} disagree on {name} "
                                 f"({getattr(ref, name)!r} vs {getattr(s, name)!r}): one episode has one {name}")


def _length(name: str, given: int | None, longest: int) -> int:
    if given is None:
        return longest
    if given < longest:
        raise ValueError(f"a step is {longest} tokens long but {name}={given}: raise {name} or shorten the step")
    return int(given)


def _rewards(samples: Sequence[StepSample]) -> list[float] | None:
    """Row rewards (0 for excluded steps), or None when no step is scored; scored and unscored kept steps
    may not mix (a half-scored batch would train unscored steps as reward 0)."""
    kept = [s for s in samples if not s.excluded]
    scored = [s for s in kept if s.reward is not None]
    if not scored:
        return None
    if len(scored) != len(kept):
        s = next(s for s in kept if s.reward is None)
        raise ValueError(f"step {s.step} of trajectory {s.traj_id!r} has no reward while other steps do: "
                         "score every step that is not excluded")
    return [0.0 if s.reward is None else s.reward for s in samples]


def _logprobs(samples: Sequence[StepSample], length: int) -> torch.Tensor | None:
    given = [s.response_logprobs is not None for s in samples]
    if not any(given):
        return None
    if not all(given):
        raise ValueError("some step samples have response log-probs and some do not: give them for all or none")
    out = torch.zeros((len(samples), length), dtype=torch.float32)
    for i, s in enumerate(samples):
        logprobs = s.response_logprobs or ()
        out[i, :len(logprobs)] = torch.tensor(logprobs, dtype=torch.float32)
    return out


def _objects(values: list[object]) -> np.ndarray:
    """A 1-D object array (np.array would turn equal-length strings or lists into a 2-D array)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
