"""A multi-turn GUI rollout for TRL's ``GRPOTrainer``: one GUI episode per completion, scored by ADMIRE.

Why it is shaped this way:

* **The dataset names tasks, the rollout plays them.** TRL hands ``rollout_func(prompts, trainer)`` only the
  prompts (already repeated ``num_generations`` times, one completion each), not the other dataset
  columns; so a row's prompt is the task itself: ``miniwob/click-test#3`` (name and seed) or a task's JSON
  (:func:`task_prompt`, :func:`task_dataset`). Consecutive groups of ``num_generations`` rows are GRPO's
  groups, as on the CPU path (same task and seed within a group).
* **The episodes are the CPU path's.** Episodes run through ``admire.rl.rollout.collect`` with a policy
  that writes with the trainer's model: resets, the step budget, format errors (a malformed answer is a
  step with ``format_valid=False``, never a crash), invalid actions, env crashes (restart, re-run up to
  ``max_reruns`` times, then ``env_error``), grounded descriptions and the ``Trajectory`` records are
  exactly those of ``admire train``, over any ``GuiEnv`` (a local browser, or ``RemoteEnv`` to
  ``admire serve``), one or several stepping in lockstep.
* **One completion per episode, observations masked.** The prompt is the ``lm`` policy's first turn
  (``admire.agent.prompts.build_messages``: system turn, then the goal and the numbered screen) rendered
  by the model's chat template. Each step appends the model's sampled tokens (``env_mask`` 1), then the
  next screen as the next user turn — the user turn the ``lm`` policy builds for that step, with its
  history window — and the generation prompt (``env_mask`` 0). The model always continues exactly the
  token sequence TRL scores (prompt + completion so far), so TRL's log-probs are of what was sampled.
* **Scored as the CPU trainer scores.** After the batch, the CPU trainer's :class:`~admire.rl.scoring.
  BatchScorer` updates the bank from the batch's successes, then scores every step; each row carries its
  episode's return (:func:`~admire.integrations.trl.rewards.episode_return`) for
  :func:`~admire.integrations.trl.rewards.admire_reward`. An excluded episode gets ``None`` and an all-zero
  ``env_mask``: no gradient at all.

Text only: screenshots are not shown (a vision-language model reads the text screen). The completion's
length is bounded by ``max_steps`` × (``max_new_tokens`` + one screen), not by TRL's
``max_completion_length`` (TRL does not cut what a rollout function returns).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from admire.extras import require

require("torch", "transformers", "trl", extra="trl", feature="the TRL rollout")

import torch  # noqa: E402

from admire.actions import parse_model_output  # noqa: E402
from admire.agent.base import PolicyOutput  # noqa: E402
from admire.agent.prompts import DEFAULT_HISTORY_WINDOW, build_messages  # noqa: E402
from admire.envs.base import GuiEnv, make_task  # noqa: E402
from admire.integrations.trl.rewards import episode_return  # noqa: E402
from admire.rl.rollout import EpisodeRequest, RolloutStats, collect  # noqa: E402
from admire.rl.scoring import BatchScorer  # noqa: E402
from admire.types import Observation, Step, Task  # noqa: E402

PROMPT_IDS = "admire_prompt_ids"
"""Step info of an episode's first step: the prompt's token ids."""
TURN_IDS = "admire_turn_ids"
"""Step info: the tokens before this step's answer that the model did not write (the screen's user turn)."""
TOKEN_IDS = "admire_token_ids"
"""Step info: the tokens the model sampled for this step (its end-of-turn token included)."""
TOKEN_LOGPROBS = "admire_token_logprobs"
"""Step info: their log-probs when sampled (logits / temperature, as TRL scores them)."""
_SENTINEL = "\u2063ADMIRE-ANSWER\u2063"


@dataclass(frozen=True)
class TurnRequest:
    """One step to write: ``context`` is every token so far (prompt, completion, this screen's turn)."""

    context: list[int]
    observation: Observation
    history: tuple[Step, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class Generated:
    """What the model wrote for one step: token ids (through its stop token, if it stopped) and log-probs."""

    ids: list[int]
    logprobs: list[float]


Generate = Callable[[Sequence[TurnRequest], Any], list[Generated]]
"""``generate(requests, trainer) -> one Generated per request``; :func:`generate_with_model` by default."""


# --------------------------------------------------------------------------------------------------
# Tasks as prompts
# --------------------------------------------------------------------------------------------------

def task_prompt(task: Task) -> str:
    """A dataset prompt naming ``task``: ``miniwob/click-test#3``, or the task's JSON when it has parameters
    or its own step budget."""
    if task.params or task.max_steps is not None:
        return task.to_json()
    return f"{task.name}#{task.seed}"


def parse_task_prompt(prompt: Any) -> Task:
    """The task a dataset prompt names: ``<backend>/<task>``, ``<backend>/<task>#<seed>`` or a task's JSON;
    a conversational prompt names it in its last message."""
    text = prompt[-1]["content"] if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict) else prompt
    if not isinstance(text, str):
        raise ValueError(f"a prompt for ADMIRE's rollout names a task as a string, got {type(text).__name__}; "
                         "build the dataset with admire.integrations.trl.task_dataset(tasks)")
    text = text.strip()
    if text.startswith("{"):
        return Task.from_json(text)
    name, _, seed = text.partition("#")
    if seed and not seed.isdigit():
        raise ValueError(f"prompt {text!r}: the seed after '#' must be a whole number, e.g. miniwob/click-test#3")
    return make_task(name, seed=int(seed or 0))


def task_dataset(tasks: Sequence[Task]) -> Any:
    """A ``datasets.Dataset`` with one prompt per task (:func:`task_prompt`), for ``train_dataset``."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [task_prompt(task) for task in tasks]})


# --------------------------------------------------------------------------------------------------
# The conversation as tokens
# --------------------------------------------------------------------------------------------------

class ChatTurns:
    """The token ids of the conversation: the first turn, and each later screen as a user turn between the
    model's answers, all rendered by the tokenizer's chat template."""

    def __init__(self, tokenizer: Any, history_window: int = DEFAULT_HISTORY_WINDOW) -> None:
        self.tokenizer = tokenizer
        self.history_window = history_window

    def messages(self, observation: Observation, history: Sequence[Step]) -> list[dict[str, Any]]:
        return build_messages(observation, history, history_window=self.history_window, screenshot=False)

    def first(self, observation: Observation) -> list[int]:
        """The prompt: the ``lm`` policy's messages for the first screen, with the generation prompt."""
        text = self.tokenizer.apply_chat_template(self.messages(observation, ()), tokenize=False,
                                                  add_generation_prompt=True)
        return self._ids(text)

    def next(self, observation: Observation, history: Sequence[Step], answered: Sequence[int]) -> list[int]:
        """The tokens between the model's last answer (``answered``) and its next one: the template's end of
        the assistant turn (unless the model wrote it), the ``lm`` policy's user turn for this screen, and
        the generation prompt."""
        system, user = self.messages(observation, history)
        conversation = [system, {"role": "user", "content": "-"}, {"role": "assistant", "content": _SENTINEL}, user]
        text = self.tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        if text.count(_SENTINEL) != 1:
            raise ValueError("this tokenizer's chat template does not render an earlier assistant turn verbatim; "
                             "ADMIRE's TRL rollout needs one that does (e.g. Qwen's ChatML)")
        ids = self._ids(text.split(_SENTINEL, 1)[1])
        if answered and ids and answered[-1] == ids[0]:
            ids = ids[1:]  # the model closed its turn itself
        return ids

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


# --------------------------------------------------------------------------------------------------
# Writing steps with the trainer's model
# --------------------------------------------------------------------------------------------------

def generate_with_model(requests: Sequence[TurnRequest], trainer: Any) -> list[Generated]:
    """Sample each step with ``trainer.model`` and TRL's own generation settings (temperature, top-p/k,
    stop tokens), left-padded in one batch; log-probs are ``log_softmax(logits / temperature)`` of the
    sampled tokens, as TRL computes them."""
    if getattr(trainer.args, "use_vllm", False):
        raise ValueError("ADMIRE's TRL rollout writes with trainer.model; set use_vllm=False in GRPOConfig")
    from trl.models import unwrap_model_for_generation

    if not requests:
        return []
    tokenizer = _tokenizer(trainer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(r.context) for r in requests)
    device = trainer.accelerator.device
    input_ids = torch.tensor([[pad] * (width - len(r.context)) + r.context for r in requests], device=device)
    attention = torch.tensor([[0] * (width - len(r.context)) + [1] * len(r.context) for r in requests], device=device)
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = max(r.max_new_tokens for r in requests)
    config.output_logits, config.return_dict_in_generate = True, True
    with (unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                      generation_kwargs=trainer.generation_kwargs,
                                      gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs)
          as model, torch.no_grad()):
        out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
    sampled = out.sequences[:, width:]
    temperature = float(getattr(trainer, "temperature", 1.0))
    logprobs = torch.stack([torch.log_softmax(step.float() / temperature, dim=-1)
                            .gather(-1, sampled[:, t:t + 1]).squeeze(-1) for t, step in enumerate(out.logits)], dim=1)
    stops = set(trainer.eos_token_ids)
    results = []
    for row, request in enumerate(requests):
        ids = sampled[row].tolist()[: request.max_new_tokens]
        end = next((i + 1 for i, token in enumerate(ids) if token in stops), len(ids))
        results.append(Generated(ids[:end], [float(v) for v in logprobs[row, :end]]))
    return results


class _TrainerPolicy:
    """A ``Policy`` for ``collect`` that writes each step with ``generate``, continuing the episode's token
    sequence (rebuilt from the ids its earlier steps keep in ``Step.info``)."""

    def __init__(self, turns: ChatTurns, generate: Generate, trainer: Any, max_new_tokens: int,
                 stop_ids: Sequence[int]) -> None:
        self.turns, self.generate, self.trainer = turns, generate, trainer
        self.max_new_tokens = max_new_tokens
        self.stop_ids = set(stop_ids)

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        requests, preludes = [], []
        for observation, history in zip(observations, histories, strict=True):
            if history:
                prompt = list(history[0].info[PROMPT_IDS])  # type: ignore[arg-type]
                turn = self.turns.next(observation, history, history[-1].info[TOKEN_IDS])  # type: ignore[arg-type]
            else:
                prompt, turn = self.turns.first(observation), []
            context = prompt + completion_tokens(history)[0] + turn
            requests.append(TurnRequest(context, observation, tuple(history), self.max_new_tokens))
            preludes.append({PROMPT_IDS: prompt} if not history else {})
            preludes[-1][TURN_IDS] = turn
        written = self.generate(requests, self.trainer)
        if len(written) != len(requests):
            raise RuntimeError(f"generate returned {len(written)} answers for {len(requests)} steps")
        outputs = []
        for generated, prelude in zip(written, preludes, strict=True):
            text = self.turns.tokenizer.decode([t for t in generated.ids if t not in self.stop_ids],
                                               skip_special_tokens=True)
            parsed = parse_model_output(text)
            outputs.append(PolicyOutput(
                text=text, action=parsed.action, log_prob=float(sum(generated.logprobs)),
                info={**prelude, TOKEN_IDS: list(generated.ids), TOKEN_LOGPROBS: list(generated.logprobs),
                      "num_tokens": len(generated.ids), "parse_error": parsed.error}))
        return outputs

    def log_prob(self, decisions: Any) -> Any:  # TRL scores the completion itself
        raise NotImplementedError("TRL computes the log-probs of a rollout's completions")


def completion_tokens(steps: Sequence[Step]) -> tuple[list[int], list[int], list[float]]:
    """An episode's completion from its steps: (ids, env_mask, log-probs); screens masked 0, answers 1."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for step in steps:
        turn = list(step.info.get(TURN_IDS) or [])  # type: ignore[call-overload]
        answer = list(step.info.get(TOKEN_IDS) or [])  # type: ignore[call-overload]
        ids += turn + answer
        mask += [0] * len(turn) + [1] * len(answer)
        logprobs += [0.0] * len(turn) + [float(v) for v in step.info.get(TOKEN_LOGPROBS) or []]  # type: ignore[union-attr]
    return ids, mask, logprobs


# --------------------------------------------------------------------------------------------------
# The rollout function
# --------------------------------------------------------------------------------------------------

def make_rollout_func(
    envs: GuiEnv | Sequence[GuiEnv],
    scoring: BatchScorer,
    *,
    max_steps: int,
    max_new_tokens: int = 96,
    history_window: int = DEFAULT_HISTORY_WINDOW,
    fold: str = "mean",
    max_reruns: int = 2,
    generate: Generate | None = None,
    epoch: Callable[[Any], int] | None = None,
) -> Callable[[list[Any], Any], dict[str, Any]]:
    """TRL's ``rollout_func(prompts, trainer) -> dict`` playing one GUI episode per prompt in ``envs``.

    ``max_steps`` is each episode's step budget (``env.max_steps``), ``max_new_tokens`` each answer's;
    ``fold`` turns per-step R_total into the episode's reward (``rewards.FOLDS``); ``generate`` replaces the
    trainer's model (tests script it); ``epoch(trainer)`` is λ(e)'s epoch (default: completed passes over
    the dataset, ``int(trainer.state.epoch)``). The caller owns ``envs`` and closes them.

    Returned per row: ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (TRL's keys), and for
    reward functions ``admire_return`` (None: excluded), ``admire_step_rewards`` (R_total per step),
    ``admire_success``, ``admire_excluded``, ``admire_trajectory`` (the ``Trajectory``), plus
    ``admire_metrics`` (the batch's reward and bank numbers, which :func:`admire_reward` logs).
    """
    pool = [envs] if isinstance(envs, GuiEnv) else list(envs)
    if not pool:
        raise ValueError("make_rollout_func needs at least one environment")
    if max_steps < 1 or max_new_tokens < 1:
        raise ValueError(f"max_steps and max_new_tokens must be at least 1, got {max_steps} and {max_new_tokens}")
    episode_return([], fold)  # an unknown fold fails here, not after the first batch's episodes
    write = generate or generate_with_model
    epoch_of = epoch or (lambda trainer: int(getattr(trainer.state, "epoch", 0) or 0))

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tokenizer = _tokenizer(trainer)
        group_size = max(1, int(getattr(trainer, "num_generations", 1) or 1))
        tasks = [parse_task_prompt(prompt) for prompt in prompts]
        requests = [EpisodeRequest(task, group=i // group_size, replica=i % group_size) for i, task in enumerate(tasks)]
        turns = ChatTurns(tokenizer, history_window)
        stops = list(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])
        policy = _TrainerPolicy(turns, write, trainer, max_new_tokens, stops)
        current = epoch_of(trainer)
        trajectories = collect(requests, pool, policy, max_steps=max_steps, epoch=current, max_reruns=max_reruns,
                               stats=RolloutStats())
        scored = scoring.score(trajectories, current)
        rewards = scored.rewards
        out: dict[str, list[Any]] = {key: [] for key in (
            "prompt_ids", "completion_ids", "logprobs", "env_mask", "admire_return", "admire_step_rewards",
            "admire_success", "admire_excluded", "admire_trajectory")}
        for prompt, trajectory, breakdowns in zip(prompts, trajectories, rewards, strict=True):
            ids, mask, logprobs = completion_tokens(trajectory.steps)
            if trajectory.steps:
                prompt_ids = list(trajectory.steps[0].info[PROMPT_IDS])  # type: ignore[arg-type]
            else:  # reset never worked: nothing was shown, nothing written; TRL still needs tokens
                prompt_ids = list(tokenizer(json.dumps(prompt) if not isinstance(prompt, str) else prompt,
                                            add_special_tokens=False)["input_ids"])
            if not ids:
                ids, mask, logprobs = [tokenizer.eos_token_id], [0], [0.0]
            if trajectory.excluded:
                mask = [0] * len(ids)  # no gradient from an env_error episode
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            out["admire_return"].append(None if trajectory.excluded else episode_return(breakdowns, fold))
            out["admire_step_rewards"].append([b.total for b in breakdowns])
            out["admire_success"].append(trajectory.success)
            out["admire_excluded"].append(trajectory.excluded)
            out["admire_trajectory"].append(trajectory)
        result: dict[str, Any] = dict(out)
        result["admire_metrics"] = scoring.metrics(trajectories, scored)  # the same for every row
        return result

    return rollout_func


def _tokenizer(trainer: Any) -> Any:
    """The text tokenizer of ``trainer.processing_class`` (a processor's ``tokenizer``)."""
    processing = trainer.processing_class
    return getattr(processing, "tokenizer", None) or processing
