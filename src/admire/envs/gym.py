"""Gymnasium interop, both ways: an ADMIRE backend as a ``gymnasium.Env``, a Gymnasium text env as a backend.

**ADMIRE → Gymnasium.** :class:`AdmireGymEnv` runs one ADMIRE task on any backend (``miniwob``,
``remote:http://…``, a plug-in) behind Gymnasium's API, so Gymnasium tooling (``check_env``, wrappers,
vector envs, other RL libraries) can drive it. Importing this module registers one id per MiniWoB++
task, ``admire/miniwob-<task>-v0``; ``gymnasium.make("admire.envs.gym:admire/miniwob-login-user-v0")``
imports it for you (Gymnasium 1.x loads no plug-in entry points, so ``module:id`` is the lazy path).

* Observation: ``Text`` — the goal and a numbered listing of the screen's elements (:func:`screen_text`;
  ``[i]`` is the ``index`` an action names). With ``screenshots=True`` a ``Dict`` of that text and
  ``screenshot``, an RGB ``Box`` of ``screenshot_shape``.
* Action: ``Text`` — the model's ``Reason: … Action: {json}`` output or the bare action JSON, read by
  :func:`admire.actions.parse_model_output` (a dict or an ``Action`` is accepted too).
* Reward: the outcome, 1.0 on the step that succeeds and 0.0 otherwise. A step whose output does not
  parse, or names an action the screen refuses (index out of range), is **format-invalid**: the page
  is untouched, the reward is ``invalid_reward`` (0.0), the episode goes on and the step counts
  against the budget; ``info["format_valid"]`` is False and ``info["parse_error"]`` says why.
* ``terminated``: the backend ended the episode (success, a wrong answer, the agent's ``status``).
  ``truncated``: the step budget (``max_steps``) ran out first.
* ``reset(seed=s)`` plays the task's instance ``s``; without a seed, the instance is drawn from the
  env's seeded ``np_random``. ``options={"task": "miniwob/other", "params": {...}}`` switches task.
* ``close()`` closes the backend (``close_backend=False`` leaves a shared one open). A crashed backend
  (``EnvCrashed``) is restarted and the error re-raised: call ``reset`` again.

**Gymnasium → ADMIRE.** :class:`GymBackend`, registered as the ``gym`` backend, wraps a Gymnasium env
so admire can train on it: ``make_env("gym:MyText-v0")`` with tasks named ``gym/MyText-v0``. The
wrapped env must provide

* text observations: a ``str``, or a dict with a ``"text"`` string (and optionally ``"goal"``);
* text actions: ``step`` takes a ``str``;
* success: ``info["success"]`` on the terminating step, else ``reward >= success_threshold`` (1.0).

Its screen is element 0, an editable reply box, then one clickable element per non-empty line of
the text: ``input_text`` sends its text, ``answer`` its text, ``click`` on a line sends that line,
``wait`` lets a turn pass without calling the env, ``status`` ends the episode as the agent's stop;
anything else is an ``InvalidAction``. The goal is ``info["goal"]`` from ``reset``, else
the observation's ``"goal"``, else its first line. A task's seed is ``reset``'s seed and its
``params`` are ``reset``'s options.
"""

from __future__ import annotations

import io
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, SupportsFloat

import numpy as np

from admire.actions import ActionError, element_label, element_role, parse_model_output, validate_action
from admire.envs.base import EnvCrashed, GuiEnv, InvalidAction, StepResult, make_env, make_task, register_env
from admire.extras import require
from admire.types import Action, Observation, Task, Termination, UIElement

require("gymnasium")  # without it: one line naming pip install 'admire[gym]'

import gymnasium  # noqa: E402 - after the check for the `gym` extra
from gymnasium import spaces  # noqa: E402

ID_PREFIX = "admire/"
DEFAULT_MAX_STEPS = 10
MAX_OBSERVATION_CHARS = 16_384
"""A MiniWoB screen lists in 0.3–4 k characters; longer listings are cut with a marker line."""
MAX_ACTION_CHARS = 8_192
DEFAULT_SCREENSHOT_SHAPE = (210, 160)
"""(height, width) of MiniWoB++'s task area in CSS pixels."""
SAMPLE_CHARSET = string.printable
"""What ``sample()`` draws from; ``contains`` accepts any character (screens are Unicode)."""


class UnicodeText(spaces.Text):
    """``spaces.Text`` that contains any string within its length bounds.

    Gymnasium's ``Text`` only contains characters of its charset, but a screen or a model's output may
    hold any character; the charset here only shapes ``sample()``.
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


# --------------------------------------------------------------------------------------------------
# ADMIRE backend → gymnasium.Env
# --------------------------------------------------------------------------------------------------

def screen_text(observation: Observation, max_chars: int = MAX_OBSERVATION_CHARS) -> str:
    """The goal and the screen as text a language model can act on; ``[i]`` is the element's index.

    Every element is listed (hidden ones marked), so indices are the backend's own.
    """
    lines = [f"Goal: {observation.goal}", f"Step: {observation.step}", "Elements:"]
    for i, element in enumerate(observation.ui_elements):
        lines.append(f"[{i}] {_element_line(element)}")
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 40].rsplit("\n", 1)[0]
    shown = cut.count("\n") - 2
    return f"{cut}\n… ({len(observation.ui_elements) - max(shown, 0)} more elements)"


def _element_line(element: UIElement) -> str:
    label = element_label(element)
    parts = [element_role(element), repr(label) if label else "(unlabelled)"]
    if element.is_editable and element.text:
        parts.append(f"value={' '.join(element.text.split())[:200]!r}")
    flags = [name for name, on in (("clickable", element.is_clickable), ("editable", element.is_editable),
                                   ("checkable", element.is_checkable), ("checked", element.is_checked),
                                   ("focused", element.is_focused), ("selected", element.is_selected),
                                   ("disabled", not element.is_enabled), ("hidden", not element.is_visible))
             if on]
    if flags:
        parts.append("(" + ", ".join(flags) + ")")
    if element.center is not None:
        x, y = element.center
        parts.append(f"@({x:.0f},{y:.0f})")
    return " ".join(parts)


class AdmireGymEnv(gymnasium.Env):
    """One ADMIRE task on one backend, as a ``gymnasium.Env`` (semantics in the module docstring).

    ``task`` is ``<backend>/<task>`` (``miniwob/login-user``); ``backend`` is a backend spec for
    :func:`~admire.envs.base.make_env` (default: the task's backend) or a ready ``GuiEnv``;
    ``backend_options`` go to ``make_env``.
    """

    # render_fps: Gymnasium asks for one; a text screen has none to speak of.
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        task: str,
        backend: str | GuiEnv | None = None,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        screenshots: bool = False,
        screenshot_shape: tuple[int, int] = DEFAULT_SCREENSHOT_SHAPE,
        max_observation_chars: int = MAX_OBSERVATION_CHARS,
        invalid_reward: float = 0.0,
        close_backend: bool = True,
        render_mode: str | None = None,
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.task = make_task(task)
        self.max_steps = int(max_steps)
        self.screenshots = bool(screenshots)
        self.screenshot_shape = (int(screenshot_shape[0]), int(screenshot_shape[1]))
        self.max_observation_chars = int(max_observation_chars)
        self.invalid_reward = float(invalid_reward)
        self.close_backend = bool(close_backend)
        self.render_mode = render_mode
        text = UnicodeText(self.max_observation_chars)
        if self.screenshots:
            image = spaces.Box(0, 255, shape=(*self.screenshot_shape, 3), dtype=np.uint8)
            self.observation_space = spaces.Dict({"text": text, "screenshot": image})
        else:
            self.observation_space = text
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        if backend is None or isinstance(backend, str):
            options = {"max_steps": self.max_steps, "screenshots": self.screenshots, **(backend_options or {})}
            self.backend: GuiEnv = make_env(backend or self.task.backend, **options)
        else:
            self.backend = backend
        self.last_observation: Observation | None = None
        """The backend's own observation behind the last one returned (structured: elements, bboxes)."""
        self._steps = 0
        self._over = True
        self._closed = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        if "task" in options:
            self.task = make_task(str(options.pop("task")))
        params = dict(options.pop("params", None) or self.task.params)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; known: task, params")
        task_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        task = Task(name=self.task.name, seed=task_seed, max_steps=self.max_steps, params=params)
        observation = self._call(lambda: self.backend.reset(task))
        self._steps, self._over = 0, False
        self.last_observation = observation
        return self._encode(observation), {"task": task.name, "seed": task_seed, "goal": observation.goal}

    def step(self, action: str | Mapping[str, Any] | Action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._over or self.last_observation is None:
            raise RuntimeError("no episode is running: call reset() first (the last one has ended)")
        parsed, error = _read_action(action)
        self._steps += 1
        info: dict[str, Any] = {"step": self._steps, "format_valid": parsed is not None, "parse_error": error,
                                "success": False, "termination": None}
        if parsed is not None:
            info["action"] = parsed.model_dump(exclude_none=True)
            try:
                result: StepResult | None = self._call(lambda: self.backend.step(parsed))
            except InvalidAction as exc:
                result = None
                info.update(format_valid=False, parse_error=f"invalid action: {exc}")
        else:
            result = None
        terminated = truncated = False
        if result is None:
            reward = self.invalid_reward
        else:
            self.last_observation = result.observation
            reward = 1.0 if result.success else 0.0
            termination = result.info.get("termination")
            info.update(success=result.success, termination=termination,
                        **{k: result.info[k] for k in ("raw_reward", "screen_changed") if k in result.info})
            if result.done:
                truncated = termination == Termination.MAX_STEPS.value and not result.success
                terminated = not truncated
        if not terminated and self._steps >= self.max_steps:
            truncated = True
            info["termination"] = Termination.MAX_STEPS.value
        self._over = terminated or truncated
        return self._encode(self.last_observation), reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.last_observation is None:
            return None
        return screen_text(self.last_observation, self.max_observation_chars)

    def close(self) -> None:
        if self._closed:
            return
        self._closed, self._over = True, True
        if self.close_backend:
            self.backend.close()

    def _call(self, fn):
        """Run a backend call; a crash restarts the backend (when it can) before it is re-raised."""
        try:
            return fn()
        except EnvCrashed:
            self._over = True
            self.backend.restart()
            raise

    def _encode(self, observation: Observation) -> Any:
        text = screen_text(observation, self.max_observation_chars)
        if not self.screenshots:
            return text
        return {"text": text, "screenshot": self._pixels(observation)}

    def _pixels(self, observation: Observation) -> np.ndarray:
        height, width = self.screenshot_shape
        shot = observation.screenshot
        if shot is None or shot.png is None:
            return np.zeros((height, width, 3), dtype=np.uint8)  # no screen after the episode ended
        from PIL import Image

        with Image.open(io.BytesIO(shot.png)) as image:
            rgb = image.convert("RGB")
            if rgb.size != (width, height):
                rgb = rgb.resize((width, height))
            return np.asarray(rgb, dtype=np.uint8).copy()


def _read_action(action: str | Mapping[str, Any] | Action) -> tuple[Action | None, str | None]:
    if isinstance(action, str):
        parsed = parse_model_output(action)
        return parsed.action, (None if parsed.action is not None else parsed.error or "no action in the output")
    try:
        return validate_action(action), None
    except ActionError as exc:
        return None, str(exc)


def gym_id(task: str) -> str:
    """The Gymnasium id of an ADMIRE task: ``miniwob/login-user`` → ``admire/miniwob-login-user-v0``
    (a task that names a versioned id keeps its version: ``gym/ns/Text-v2`` → ``admire/gym-ns-Text-v2``)."""
    backend, _, template = make_task(task).name.partition("/")
    name = f"{backend}-{template.replace('/', '-')}"
    return f"{ID_PREFIX}{name}" if re.search(r"-v\d+$", name) else f"{ID_PREFIX}{name}-v0"


def register_task(task: str, env_id: str | None = None, **kwargs: Any) -> str:
    """Register one ADMIRE task as a Gymnasium id (default :func:`gym_id`); ``kwargs`` go to the env."""
    env_id = env_id or gym_id(task)
    if env_id not in gymnasium.registry:
        gymnasium.register(id=env_id, entry_point=f"{__name__}:AdmireGymEnv", kwargs={"task": task, **kwargs})
    return env_id


def register_envs(tasks: Sequence[str] | None = None) -> list[str]:
    """Register Gymnasium ids for ``tasks`` (default: every MiniWoB++ task installed); idempotent."""
    if tasks is None:
        try:
            from admire.envs.miniwob import miniwob_task_names

            tasks = [f"miniwob/{name}" for name in miniwob_task_names()]
        except ImportError:  # no MiniWoB++ installed: nothing to list
            tasks = []
    return [register_task(task) for task in tasks]


# --------------------------------------------------------------------------------------------------
# gymnasium.Env with text observations → ADMIRE backend
# --------------------------------------------------------------------------------------------------

@register_env("gym")
class GymBackend:
    """A Gymnasium text env as a ``GuiEnv`` (contract in the module docstring).

    ``env_id`` fixes the Gymnasium id (then every task must be ``gym/<env_id>``); without it the env
    is made from each task's name. ``make_kwargs`` go to ``gymnasium.make``; ``screenshots`` is
    accepted (the trainer passes it) and ignored: text envs have no screen.
    """

    def __init__(self, env_id: str | None = None, *, max_steps: int = DEFAULT_MAX_STEPS,
                 success_threshold: float = 1.0, make_kwargs: Mapping[str, Any] | None = None,
                 screenshots: bool = False) -> None:
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.env_id = env_id or None
        self.max_steps = int(max_steps)
        self.success_threshold = float(success_threshold)
        self.make_kwargs = dict(make_kwargs or {})
        self._env: gymnasium.Env | None = None
        self._made_for: str | None = None
        self._observation: Observation | None = None
        self._lines: tuple[str, ...] = ()
        self._goal = ""
        self._steps = 0
        self._budget = self.max_steps
        self._over = True
        self._closed = False

    def reset(self, task: Task) -> Observation:
        self._check_open()
        env_id = task.template
        if task.backend != "gym" or not env_id:
            raise ValueError(f"the gym backend runs tasks named 'gym/<gymnasium id>', got {task.name!r}")
        if self.env_id is not None and env_id != self.env_id:
            raise ValueError(f"this gym backend wraps {self.env_id!r}; task {task.name!r} names another env")
        if self._env is None or self._made_for != env_id:
            self._shut()
            self._env = gymnasium.make(env_id, **self.make_kwargs)
            self._made_for = env_id
        raw, info = self._env.reset(seed=int(task.seed), options=dict(task.params) or None)
        text, goal = _text_of(raw)
        self._goal = str(info.get("goal") or goal or next((line for line in text.splitlines() if line.strip()), ""))
        self._steps, self._over = 0, False
        self._budget = int(task.max_steps) if task.max_steps else self.max_steps
        self._observation = self._screen(text)
        return self._observation

    def step(self, action: Action) -> StepResult:
        self._check_open()
        if self._over or self._env is None or self._observation is None:
            raise RuntimeError("no episode is running: call reset(task) first (the last one has ended)")
        if action.action_type == "status":
            self._over = True
            return StepResult(self._observation, done=True, success=False,
                              info={"termination": Termination.AGENT_STOP.value, "screen_changed": False})
        before = self._observation
        if action.action_type == "wait":  # a turn-based text env does not move on its own: a turn passes
            reward, terminated, truncated, info = 0.0, False, False, {}
            self._steps += 1
            self._observation = before.model_copy(update={"step": self._steps})
        else:
            raw, reward, terminated, truncated, info = self._env.step(self._reply(action))
            self._steps += 1
            self._observation = self._screen(_text_of(raw)[0])
        success = bool(info["success"]) if "success" in info else float(reward) >= self.success_threshold
        success = bool(terminated) and success
        termination = None
        if terminated:
            termination = Termination.SUCCESS.value if success else "failure"
        elif truncated or self._steps >= self._budget:
            termination = Termination.MAX_STEPS.value
        self._over = termination is not None
        return StepResult(self._observation, done=self._over, success=success,
                          info={"raw_reward": float(reward), "termination": termination,
                                "screen_changed": self._observation.ui_elements != before.ui_elements})

    def restart(self) -> None:
        self._check_open()
        self._shut()
        self._over = True

    def close(self) -> None:
        self._closed, self._over = True, True
        self._shut()

    def healthy(self) -> bool:
        return not self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this gym backend is closed")

    def _reply(self, action: Action) -> str:
        kind, index = action.action_type, action.index
        if kind in ("input_text", "answer") and index in (None, 0):
            return action.text or ""
        if kind == "click" and index is not None and 1 <= index <= len(self._lines):
            return self._lines[index - 1]
        raise InvalidAction(f"a text env takes input_text or answer (into element 0), a click on a line "
                            f"(1–{len(self._lines)}), wait or status; got {kind} on index {index}")

    def _screen(self, text: str) -> Observation:
        self._lines = tuple(line.strip() for line in text.splitlines() if line.strip())
        reply = UIElement(class_name="input_text", hint_text="reply", is_editable=True, is_clickable=True)
        lines = tuple(UIElement(text=line, class_name="text", is_clickable=True) for line in self._lines)
        return Observation(goal=self._goal, ui_elements=(reply, *lines), step=self._steps)

    def _shut(self) -> None:
        env, self._env, self._made_for = self._env, None, None
        if env is not None:
            env.close()


def _text_of(raw: Any) -> tuple[str, str | None]:
    """(the observation's text, its goal if it carries one); anything else is the wrapped env's error."""
    if isinstance(raw, str):
        return raw, None
    if isinstance(raw, Mapping) and isinstance(raw.get("text"), str):
        goal = raw.get("goal")
        return raw["text"], goal if isinstance(goal, str) else None
    raise TypeError(f"the gym backend needs text observations (a str, or a dict with a 'text' string); "
                    f"got {type(raw).__name__}")


register_envs()
