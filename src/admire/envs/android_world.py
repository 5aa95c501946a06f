"""AndroidWorld on a running Android emulator, as a ``GuiEnv``: the phone backend.

Written against AndroidWorld's own interface, so the benchmark's tasks are run the way its runner runs
them, and only the device differs between a user's emulator and the tests' fake:

* **The device** is AndroidWorld's ``AsyncEnv``, built by ``launcher`` (default
  ``android_world.env.env_launcher:load_and_setup_env``) with the console/gRPC ports of an emulator the
  user started (AVD ``AndroidWorldAvd``, ``-grpc 8554``); nothing here starts an emulator or downloads an
  image. It is connected on the first ``reset``. The default launcher can be replaced by setting
  ``ADMIRE_ANDROID_LAUNCHER=module:attr`` (how ``python -m admire.envs.check_env android_world`` and
  subprocesses reach a fake device).
* **A task** ``android_world/<TaskClass>`` is looked up in AndroidWorld's registry
  (``TaskRegistry().get_registry(family)``, family ``android_world``), instantiated as AndroidWorld's
  ``suite_utils`` does (``random.seed(Task.seed)``, ``generate_random_params()``, the seed stored in the
  params; our ``Task.params`` override generated ones), then ``initialize_task(env)``; the goal is
  ``task.goal``. The caller's global ``random`` state is put back afterwards.
* **An episode** ends on the agent's ``status`` action or when the step budget is spent (``Task.max_steps``,
  else ``max_steps``, else AndroidWorld's ``int(10 * complexity)``), and then ``is_successful(env)`` is
  evaluated (with ``check_every_step=True``, after every step too, ending the episode on success).
  Success is a score of 1; the score itself (fractional for composite tasks) is ``info["score"]``.
  ``tear_down(env)`` runs when the episode ends, and before the next ``reset`` if it did not.
* **Failures**: every call into the device runs in a worker thread with a deadline (``call_timeout_s``).
  An exception from the device or the task code, or a call past its deadline (a frozen emulator), is
  ``EnvCrashed``; the env is then unhealthy until ``restart()``, which runs ``device.restart()`` when a
  ``DeviceControl`` is given (:mod:`admire.envs.android_devices`) and connects afresh through ``launcher``.
  An element index the screen does not have is ``InvalidAction``.

Screens and actions are converted by :mod:`admire.envs.android_world_ui` (element order kept, so an
action's index is AndroidWorld's index).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import difflib
import importlib
import logging
import os
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from admire.actions import ActionError, validate_action
from admire.envs.android_world_ui import elements_from_android, screenshot_from_pixels, to_json_action
from admire.envs.base import EnvCrashed, InvalidAction, StepResult
from admire.errors import brief
from admire.extras import MissingExtra, missing
from admire.types import Action, Observation, Task, Termination, UIElement

log = logging.getLogger(__name__)

BACKEND = "android_world"
DEFAULT_LAUNCHER = "android_world.env.env_launcher:load_and_setup_env"
LAUNCHER_ENV_VAR = "ADMIRE_ANDROID_LAUNCHER"
DEFAULT_REGISTRY = "android_world.registry:TaskRegistry"
INSTALL = ("AndroidWorld is not on PyPI: pip install 'admire[android]', then git clone "
           "https://github.com/google-research/android_world && pip install --no-deps -e android_world "
           "(docs/android.md)")
NEEDS = ("android_env", "dm_env", "absl")
T = TypeVar("T")


class DeviceLike(Protocol):
    """What the env needs of an emulator's controller: ``android_devices.DeviceControl`` is one."""

    def healthy(self) -> bool: ...

    def restart(self) -> None: ...


def require_android_world() -> None:
    """One line naming the install steps when AndroidWorld or the packages its code imports are missing."""
    absent = missing(*NEEDS, "android_world")
    if absent:
        raise MissingExtra(f"admire.envs.android_world needs {', '.join(absent)}; {INSTALL}")


def load(spec: str, what: str) -> Any:
    """The object named by ``module:attr``; a bad spec is a one-line ``ValueError``/``MissingExtra``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what} must be 'module:attr', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("android_world", *NEEDS):
            require_android_world()
        raise ValueError(f"{what} {spec!r}: cannot import {module_name} ({brief(exc)})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


class AndroidWorldEnv:
    """One Android emulator running AndroidWorld tasks, one episode at a time.

    Options: ``console_port``/``grpc_port`` (the emulator's, as ``emulator -port 5554 -grpc 8554``),
    ``adb_path`` (default: the launcher's), ``emulator_setup`` (AndroidWorld's one-time app install on the
    first connection), ``freeze_datetime`` (AndroidWorld's fixed October 2023 clock), ``max_steps`` (step
    budget when the task sets none; default ``int(10 * complexity)``), ``screenshots`` (a PNG of the screen
    in every observation), ``launcher`` (``module:attr`` of a function with ``load_and_setup_env``'s
    signature), ``device`` (health and restart of the emulator itself), ``family`` and ``task_registry``
    (where task classes are found: ``module:attr`` of a mapping name → ``TaskEval`` class, or of a
    ``TaskRegistry`` class; default AndroidWorld's), ``wait_to_stabilize`` (read screens with
    ``get_state(wait_to_stabilize=True)``), ``check_every_step`` (evaluate success after every step),
    ``call_timeout_s`` (a device call that takes longer is a crash).

    Not thread-safe: one env per thread.
    """

    def __init__(
        self,
        *,
        console_port: int = 5554,
        grpc_port: int = 8554,
        adb_path: str | None = None,
        emulator_setup: bool = False,
        freeze_datetime: bool = True,
        max_steps: int | None = None,
        screenshots: bool = True,
        launcher: str | None = None,
        device: DeviceLike | None = None,
        family: str = "android_world",
        task_registry: str | None = None,
        wait_to_stabilize: bool = False,
        check_every_step: bool = False,
        call_timeout_s: float = 300.0,
    ) -> None:
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
        if float(call_timeout_s) <= 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s}")
        self.console_port, self.grpc_port = int(console_port), int(grpc_port)
        self.adb_path = adb_path
        self.emulator_setup, self.freeze_datetime = bool(emulator_setup), bool(freeze_datetime)
        self.max_steps = None if max_steps is None else int(max_steps)
        self.screenshots = bool(screenshots)
        self.device = device
        self.family = family
        self.wait_to_stabilize, self.check_every_step = bool(wait_to_stabilize), bool(check_every_step)
        self.call_timeout_s = float(call_timeout_s)
        self._launch: Callable[..., Any] = load(launcher or os.environ.get(LAUNCHER_ENV_VAR) or DEFAULT_LAUNCHER,
                                                "launcher")
        require_android_world()  # after the launcher: a test's launcher may bring AndroidWorld's source copy
        self._registry_spec = task_registry
        self._tasks: Mapping[str, Any] | None = None
        self._env: Any = None  # AndroidWorld's AsyncEnv, connected on the first reset
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._crashed = False
        self._closed = False
        self._task: Task | None = None
        self._instance: Any = None  # the TaskEval of the running (or last) episode, until torn down
        self._elements: tuple[UIElement, ...] = ()
        self._goal = ""
        self._steps = 0
        self._budget = 1
        self._episode_over = True

    # ---------------------------------------------------------------------------------- GuiEnv

    def reset(self, task: Task) -> Observation:
        """Start an episode of ``task``: a fresh task instance, set up on the device, from its seed."""
        self._check_open()
        task_class = self.task_class(task)
        if self._crashed:
            raise EnvCrashed("the Android device crashed earlier; call restart() before reset()")
        self._episode_over = True
        if self._env is None:
            self._connect()
        self._tear_down()
        instance = self._call("creating the task", lambda: self._instantiate(task_class, task))
        env = self._env
        self._call("resetting the device", lambda: env.reset(go_home=bool(getattr(instance, "start_on_home_screen",
                                                                                     True))))
        self._instance = instance
        self._call("initialising the task", lambda: _seeded(task.seed, lambda: instance.initialize_task(env)))
        self._goal = str(self._call("reading the goal", lambda: instance.goal))
        state = self._state()
        self._task = task
        self._steps = 0
        self._budget = self._budget_for(task, instance)
        self._episode_over = False
        return self._observation(state)

    def step(self, action: Action | Mapping[str, Any]) -> StepResult:
        """Execute one action. ``InvalidAction`` leaves the episode as it was; ``EnvCrashed`` means the
        device died or froze (``restart()``)."""
        self._check_open()
        if self._crashed:
            raise EnvCrashed("the Android device crashed earlier; call restart()")
        if self._episode_over or self._instance is None:
            raise RuntimeError("no episode is running: call reset(task) first (the last one has ended)")
        try:
            action = validate_action(action)
        except ActionError as exc:
            raise InvalidAction(str(exc)) from exc
        if action.index is not None and not 0 <= action.index < len(self._elements):
            raise InvalidAction(f"element index {action.index} is not on the screen "
                                f"({len(self._elements)} elements: 0..{len(self._elements) - 1})")
        try:
            json_action = to_json_action(action)
        except ValueError as exc:  # JSONAction's own checks
            raise InvalidAction(f"AndroidWorld refused the action: {brief(exc)}") from exc
        before = self._elements
        env = self._env
        self._call(f"executing a {action.action_type} action", lambda: env.execute_action(json_action))
        self._steps += 1
        state = self._state()
        termination: str | None = None
        if action.action_type == "status":
            termination = Termination.AGENT_STOP.value
        elif self._steps >= self._budget:
            termination = Termination.MAX_STEPS.value
        score: float | None = None
        if termination is not None or self.check_every_step:
            score = self._score()
            if score == 1.0:
                termination = Termination.SUCCESS.value
        observation = self._observation(state)
        info: dict[str, Any] = {
            "termination": termination,
            "score": score,
            "screen_changed": observation.ui_elements != before,
            "step": self._steps,
            "max_steps": self._budget,
            "task": self._task.name if self._task is not None else None,
        }
        if action.action_type == "answer":
            info["answer"] = str(getattr(env, "interaction_cache", "") or "")
        if termination is not None:
            self._episode_over = True
            self._tear_down()
        return StepResult(observation=observation, done=termination is not None,
                          success=termination == Termination.SUCCESS.value, info=info)

    def close(self) -> None:
        """Tear the task down, close the AsyncEnv (not the emulator, which is the user's). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._episode_over = True
        if not self._crashed:
            with contextlib.suppress(EnvCrashed):
                self._tear_down()
        self._disconnect()

    def healthy(self) -> bool:
        """False once the env is closed or a device call failed; else the device's own probe when there is
        a ``DeviceControl``, else True. Never raises."""
        if self._closed or self._crashed:
            return False
        if self.device is None:
            return True
        try:
            return bool(self.device.healthy())
        except Exception as exc:  # noqa: BLE001 - a probe never raises
            log.warning("device health probe failed: %s", brief(exc))
            return False

    def restart(self) -> None:
        """Restart the emulator (``device.restart()``, when there is one) and connect afresh."""
        self._check_open()
        self._disconnect()
        self._instance = None
        self._episode_over = True
        if self.device is not None:
            try:
                self.device.restart()
            except EnvCrashed:
                raise
            except Exception as exc:
                raise EnvCrashed(f"restarting the Android device failed: {brief(exc)}") from exc
        self._crashed = False
        self._connect()

    # ------------------------------------------------------------------------------- beyond GuiEnv

    def task_class(self, task: Task) -> Any:
        """AndroidWorld's ``TaskEval`` class for ``android_world/<TaskClass>``, or a ValueError naming it."""
        if task.backend != BACKEND or "/" not in task.name:
            raise ValueError(f"the android_world env runs tasks named 'android_world/<Task>', got {task.name!r}")
        tasks = self.tasks()
        if task.template not in tasks:
            close = difflib.get_close_matches(task.template, list(tasks), n=3)
            hint = (f"; did you mean {', '.join(close)}?" if close
                    else f" ({len(tasks)} tasks in family {self.family!r})")
            raise ValueError(f"unknown AndroidWorld task {task.template!r}{hint}")
        return tasks[task.template]

    def tasks(self) -> Mapping[str, Any]:
        """Task name → ``TaskEval`` class, from ``task_registry`` (AndroidWorld's registry by default)."""
        if self._tasks is None:
            registry = load(self._registry_spec or DEFAULT_REGISTRY, "task_registry")
            if isinstance(registry, Mapping):
                self._tasks = dict(registry)
            else:
                if isinstance(registry, type):
                    registry = registry()
                self._tasks = dict(registry.get_registry(self.family))
        return self._tasks

    @property
    def async_env(self) -> Any:
        """AndroidWorld's ``AsyncEnv`` (None before the first reset), for tests and debugging."""
        return self._env

    @property
    def task_instance(self) -> Any:
        """ORACLE-ONLY: the running episode's ``TaskEval`` (its params are the ground truth)."""
        return self._instance

    @property
    def steps_taken(self) -> int:
        return self._steps

    def __enter__(self) -> AndroidWorldEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this android_world env is closed; make a new one")

    def _connect(self) -> None:
        options: dict[str, Any] = {"console_port": self.console_port, "grpc_port": self.grpc_port,
                                   "emulator_setup": self.emulator_setup, "freeze_datetime": self.freeze_datetime}
        if self.adb_path is not None:
            options["adb_path"] = self.adb_path
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="android-world")
        self._env = self._call(f"connecting to emulator-{self.console_port}", lambda: self._launch(**options))

    def _disconnect(self) -> None:
        env, pool = self._env, self._pool
        self._env = None
        if env is not None and pool is not None and not self._crashed:
            with contextlib.suppress(Exception):
                pool.submit(env.close).result(timeout=min(self.call_timeout_s, 30.0))
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)  # a hung call's thread is left to end by itself
        self._pool = None

    def _call(self, doing: str, fn: Callable[[], T]) -> T:
        """``fn()`` on the device's worker thread, with a deadline; any failure is ``EnvCrashed``."""
        if self._pool is None:
            raise EnvCrashed(f"no connection to emulator-{self.console_port} while {doing}; call restart()")
        future = self._pool.submit(fn)
        try:
            return future.result(timeout=self.call_timeout_s)
        except concurrent.futures.TimeoutError:
            self._crashed = True
            raise EnvCrashed(f"emulator-{self.console_port} did not answer within {self.call_timeout_s:g} s while "
                             f"{doing}; call restart()") from None
        except Exception as exc:
            self._crashed = True
            raise EnvCrashed(f"emulator-{self.console_port} failed while {doing}: {brief(exc)}; "
                             "call restart()") from exc

    def _instantiate(self, task_class: Any, task: Task) -> Any:
        """As AndroidWorld's ``suite_utils._instantiate_task``: seeded random params, the seed kept in them."""
        task_class.set_device_time(self._env)
        params = _seeded(task.seed, task_class.generate_random_params)
        params = {**params, **task.params, "seed": task.seed}
        return task_class(params)

    def _state(self) -> Any:
        env = self._env
        state = self._call("reading the screen", lambda: env.get_state(wait_to_stabilize=self.wait_to_stabilize))
        self._elements = elements_from_android(state.ui_elements)
        return state

    def _score(self) -> float:
        instance, env = self._instance, self._env
        return float(self._call("checking success", lambda: instance.is_successful(env)))

    def _tear_down(self) -> None:
        instance, env = self._instance, self._env
        self._instance = None
        if instance is not None and getattr(instance, "initialized", False) and env is not None:
            self._call("tearing the task down", lambda: instance.tear_down(env))

    def _budget_for(self, task: Task, instance: Any) -> int:
        if task.max_steps:
            return int(task.max_steps)
        if self.max_steps is not None:
            return self.max_steps
        return max(1, int(10 * float(instance.complexity)))

    def _observation(self, state: Any) -> Observation:
        shot = screenshot_from_pixels(state.pixels) if self.screenshots else None
        return Observation(goal=self._goal, ui_elements=self._elements, screenshot=shot, step=self._steps)


def _seeded(seed: int, fn: Callable[[], T]) -> T:
    """``fn()`` after ``random.seed(seed)`` (AndroidWorld draws params from the global ``random``), with the
    caller's global random state put back afterwards."""
    saved = random.getstate()
    random.seed(seed)
    try:
        return fn()
    finally:
        random.setstate(saved)
