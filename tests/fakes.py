"""Fakes for unit tests only: a tiny GUI env and a scripted policy (never used outside tests/)."""

from __future__ import annotations

from collections.abc import Sequence

from admire.actions import format_output, parse_model_output, validate_action
from admire.agent.base import Decision, PolicyOutput
from admire.envs.base import EnvCrashed, InvalidAction, StepResult
from admire.types import Action, Observation, Step, Task, UIElement


class FormEnv:
    """A login form: type the name into the field, then click Submit. Can be told to crash."""

    def __init__(self, crash_on_step: int | None = None, crash_times: int = 1) -> None:
        self.crash_on_step = crash_on_step
        self.crash_times = crash_times
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
        self.resets += 1
        self._typed, self._steps = "", 0
        self._goal = f'Enter "{task.params.get("name", "ann")}" and press Submit.'
        self._name = task.params.get("name", "ann")
        return self._observation()

    def step(self, action: Action) -> StepResult:
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
        self.restarts += 1

    def close(self) -> None:
        self.closed = True

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
