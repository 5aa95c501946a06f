"""Fakes for unit tests only: a tiny GUI env and a scripted policy (never used outside tests/), and for the
trainer's tests a seeded form env, a tiny trainable policy and a fake sentence encoder."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from admire.actions import format_output, parse_model_output, validate_action
from admire.agent.base import Decision, PolicyOutput
from admire.envs.base import EnvCrashed, InvalidAction, StepResult
from admire.types import Action, Observation, Step, Task, UIElement


class FormEnv:
    """A login form: type the name into the field, then click Submit. Can be told to crash. Keeps the
    whole ``GuiEnv`` protocol (``python -m admire.envs.check_env tests.support.fakes:FormEnv --task fake/form``):
    a step budget (``max_steps``, or the task's), no step outside an episode, nothing after ``close``."""

    def __init__(self, crash_on_step: int | None = None, crash_times: int = 1, max_steps: int | None = None) -> None:
        self.crash_on_step = crash_on_step
        self.crash_times = crash_times
        self.max_steps = max_steps
        self._budget: int | None = None
        self._running = False
        self.resets = 0
        self.restarts = 0
        self.closed = False
        self._typed = ""
        self._steps = 0
        self._goal = ""

    def _observation(self) -> Observation:
        return Observation(
            goal=self._goal,
            step=self._steps,
            ui_elements=(
                UIElement(hint_text="Name", class_name="input_text", is_editable=True, text=self._typed or None,
                          bbox=(0, 100, 0, 20)),
                UIElement(text="Submit", class_name="button", is_clickable=True, bbox=(0, 50, 30, 50)),
            ),
        )

    def reset(self, task: Task) -> Observation:
        self._check_open()
        self.resets += 1
        self._budget, self._running = task.max_steps or self.max_steps, True
        self._typed, self._steps = "", 0
        self._goal = f'Enter "{task.params.get("name", "ann")}" and press Submit.'
        self._name = task.params.get("name", "ann")
        return self._observation()

    def step(self, action: Action) -> StepResult:
        result = self._step(action)
        if not result.done and self._budget is not None and self._steps >= self._budget:
            result = StepResult(result.observation, done=True, success=False,
                                info={**result.info, "termination": "max_steps"})
        self._running = not result.done
        return result

    def _step(self, action: Action) -> StepResult:
        self._check_open()
        if not self._running:
            raise RuntimeError("no episode is running: call reset(task) first")
        if self.crash_on_step is not None and self._steps == self.crash_on_step and self.crash_times > 0:
            self.crash_times -= 1
            raise EnvCrashed("the fake browser died")
        if action.index is not None and action.index > 1:
            raise InvalidAction(f"index {action.index} is out of range (2 elements)")
        self._steps += 1
        before = self._typed
        if action.action_type == "input_text" and action.index == 0:
            self._typed = action.text or ""
        if action.action_type == "click" and action.index == 1:
            ok = self._typed == self._name
            return StepResult(self._observation(), done=True, success=ok,
                              info={"raw_reward": 1.0 if ok else -1.0, "termination": "success" if ok else "failure",
                                    "screen_changed": True})
        if action.action_type == "status":
            return StepResult(self._observation(), done=True, success=False,
                              info={"termination": "agent_stop", "screen_changed": False})
        return StepResult(self._observation(), done=False, success=False,
                          info={"screen_changed": self._typed != before})

    def restart(self) -> None:
        self._check_open()
        self.restarts += 1
        self._running = False

    def close(self) -> None:
        self.closed = True
        self._running = False

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this FormEnv is closed; make a new one")

    def healthy(self) -> bool:
        return not self.closed


class ScriptedPolicy:
    """Plays a fixed list of model outputs per episode (by step index); records its batches."""

    def __init__(self, script: Sequence[str | dict]) -> None:
        self.script = [s if isinstance(s, str) else format_output(validate_action(s), reason="scripted")
                       for s in script]
        self.batch_sizes: list[int] = []

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        self.batch_sizes.append(len(observations))
        outputs = []
        for history in histories:
            text = self.script[min(len(history), len(self.script) - 1)]
            outputs.append(PolicyOutput(text=text, action=parse_model_output(text).action, log_prob=-0.5))
        return outputs

    def log_prob(self, decisions: Sequence[Decision]) -> None:  # unused by rollout tests
        raise NotImplementedError


# --------------------------------------------------------------------------------------------------
# For the trainer on fakes (tests/rl/test_trainer_fakes.py)
# --------------------------------------------------------------------------------------------------

FORM_NAMES = ("ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal")


class SeededFormEnv(FormEnv):
    """``FormEnv`` whose instance (the name to type) comes from the task's seed, built like a backend:
    ``SeededFormEnv(max_steps=…, screenshots=…)`` (options the trainer passes are accepted and ignored)."""

    def __init__(self, crash_on_step: int | None = None, crash_times: int = 1, **_options: Any) -> None:
        super().__init__(crash_on_step=crash_on_step, crash_times=crash_times)

    def reset(self, task: Task) -> Observation:
        name = task.params.get("name", FORM_NAMES[task.seed % len(FORM_NAMES)])
        return super().reset(task.model_copy(update={"params": {**task.params, "name": name}}))


_QUOTED = re.compile(r'"([^"]+)"')


class FormPolicy(nn.Module):
    """A tiny trainable policy for ``FormEnv``: three candidate actions and a table of logits.

    Candidates on every screen: 0 type the goal's quoted name into the field, 1 type a wrong name, 2
    click Submit. The state is whether the field holds text, so the policy has 2×3 logits (``init``,
    zeros by default: success is reachable by sampling, while the greedy policy retypes forever).
    Satisfies the ``Policy`` protocol and offers ``log_prob_and_entropy`` like the ``dom`` policy.
    """

    WRONG = "zzz"

    def __init__(self, seed: int = 0, init: Sequence[Sequence[float]] | None = None, **_options: Any) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.tensor(init if init is not None else [[0.0] * 3] * 2))
        self._sampler = torch.Generator().manual_seed(seed)

    def get_extra_state(self) -> dict[str, Any]:
        """The sampler's state, as the real policies keep theirs: a resumed run samples on where it stopped."""
        return {"sampler": self._sampler.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._sampler.set_state(state["sampler"])

    def candidates(self, observation: Observation) -> list[Action]:
        quoted = _QUOTED.search(observation.goal)
        name = quoted.group(1) if quoted else ""
        return [validate_action({"action_type": "input_text", "index": 0, "text": name}),
                validate_action({"action_type": "input_text", "index": 0, "text": self.WRONG}),
                validate_action({"action_type": "click", "index": 1})]

    def distribution(self, observations: Sequence[Observation]) -> torch.Tensor:
        states = torch.tensor([1 if o.ui_elements and o.ui_elements[0].text else 0 for o in observations])
        return torch.log_softmax(self.logits[states], dim=1)

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        with torch.no_grad():
            log_probs = self.distribution(observations)
            chosen = (log_probs.argmax(dim=1) if greedy
                      else torch.multinomial(log_probs.exp(), 1, generator=self._sampler).squeeze(1))
        outputs = []
        for row, observation in enumerate(observations):
            action = self.candidates(observation)[int(chosen[row])]
            outputs.append(PolicyOutput(text=format_output(action, reason="fake"), action=action,
                                        log_prob=float(log_probs[row, int(chosen[row])])))
        return outputs

    def log_prob_and_entropy(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = self.distribution([d.observation for d in decisions])
        rows = [self.candidates(d.observation).index(parse_model_output(d.text).action) for d in decisions]
        chosen = log_probs[torch.arange(len(decisions)), torch.tensor(rows, dtype=torch.long)]
        return chosen, -(log_probs.exp() * log_probs).sum(dim=1)

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        return self.log_prob_and_entropy(decisions)[0]

    def success_probability(self) -> float:
        """P(type the right name, then click Submit) in two steps: how much the policy has learnt."""
        with torch.no_grad():
            probs = torch.softmax(self.logits, dim=1)
            return float(probs[0, 0] * probs[1, 2])


class TrigramEncoder:
    """A fake sentence encoder: hashed character trigrams, L2-normalised (no model to load).

    Equal texts have cosine 1 and texts that share letters are similar, which is all the matcher's
    arithmetic needs; it counts its calls.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            padded = f"  {text.lower()}  "
            for i in range(len(padded) - 2):
                out[row, int(hashlib.md5(padded[i:i + 3].encode()).hexdigest(), 16) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class TokenFormPolicy(FormPolicy):
    """``FormPolicy`` written as two tokens per step, as a language model writes several: the choice
    (3-way, as before) and an end token (2-way logits ``end``; the policy always writes its first). It
    reports per-token log-probs in ``PolicyOutput.info`` and scores tokens with ``token_log_probs``, so
    the trainer and PPO take their token-level path."""

    def __init__(self, seed: int = 0, **options: Any) -> None:
        super().__init__(seed=seed, **options)
        self.end = nn.Parameter(torch.zeros(2))

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        end = float(torch.log_softmax(self.end.detach(), dim=0)[0])
        outputs = []
        for output in super().act(observations, histories, greedy):
            tokens = [output.log_prob, end]
            outputs.append(PolicyOutput(text=output.text, action=output.action, log_prob=sum(tokens),
                                        info={"token_log_probs": tokens, "num_tokens": 2}))
        return outputs

    def token_log_probs_and_entropy(
        self, decisions: Sequence[Decision]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        choice, choice_entropy = FormPolicy.log_prob_and_entropy(self, decisions)
        end_log_probs = torch.log_softmax(self.end, dim=0)
        end = end_log_probs[0].expand(len(decisions))
        end_entropy = -(end_log_probs.exp() * end_log_probs).sum().expand(len(decisions))
        return (torch.stack([choice, end], dim=1), torch.stack([choice_entropy, end_entropy], dim=1),
                torch.ones(len(decisions), 2))

    def token_log_probs(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        new, _, mask = self.token_log_probs_and_entropy(decisions)
        return new, mask

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        return self.token_log_probs(decisions)[0].sum(dim=1)
