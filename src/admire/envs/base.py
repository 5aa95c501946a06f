"""The environment protocol, as small as Gymnasium's ``Env``, and the backend registry.

A backend is anything with ``reset``/``step``/``close``/``healthy``/``restart``: the embedded MiniWoB++
browser, the HTTP client of an env server (``remote``), or a third party's emulator. Rollouts, the
trainer and the env server see only this protocol, so a trajectory is produced the same way whichever
machine runs the device. ``python -m admire.envs.check_env <backend>`` checks a backend against it.

Built-in backends are declared below as ``module:attr`` strings and imported on first lookup, so this
module imports no implementation (no browser, no HTTP client); third-party backends arrive through the
``admire.envs`` entry-point group (see :mod:`admire.registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from admire.registry import Registry
from admire.types import Action, Observation, Task


class EnvCrashed(RuntimeError):
    """The backend died (browser gone, emulator unreachable). The episode becomes ``env_error``."""


class InvalidAction(ValueError):
    """A well-formed action that cannot act on this screen (index out of range): a format error."""


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    done: bool
    success: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class GuiEnv(Protocol):
    """One device, one episode at a time.

    * ``reset(task)`` starts an episode and returns its first screen.
    * ``step(action)`` acts once. An action the screen cannot take (an index out of range, a malformed
      action) raises ``InvalidAction`` and leaves the episode as it was; a dead device raises
      ``EnvCrashed``. The episode ends with ``done=True`` on success, failure, the agent's ``status``
      action, or when the step budget (``Task.max_steps``, else the backend's ``max_steps``) is spent
      (``info["termination"] == "max_steps"``); stepping after that is a ``RuntimeError``.
    * ``healthy()`` is a cheap probe: False once the device died or the env is closed. It never raises.
    * ``restart()`` gets a working device again after ``EnvCrashed`` or an unhealthy probe (a new browser,
      a new session); the next call is ``reset``. Rollouts and the env server's pool call it.
    * ``close()`` frees everything and is idempotent; any call but ``close``/``healthy`` afterwards is a
      ``RuntimeError`` that says the env is closed.
    """

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: Action) -> StepResult: ...

    def close(self) -> None: ...

    def healthy(self) -> bool: ...

    def restart(self) -> None: ...


EnvFactory = Callable[..., GuiEnv]
ENVS: Registry[EnvFactory] = Registry(
    "environment backend",
    group="admire.envs",
    builtins={
        "miniwob": "admire.envs.miniwob:MiniWoBEnv",
        "remote": "admire.envs.remote:RemoteEnv",  # make_env("remote:http://host:8765"): an env server's device
        "gym": "admire.envs.gym:GymBackend",  # a Gymnasium text env as a backend (the `gym` extra)
        "android_world": "admire.envs.android_world:AndroidWorldEnv",  # AndroidWorld emulators (the `android` extra)
    },
)


DevicePool = Callable[[Mapping[str, Any], int, Callable[..., GuiEnv]], Callable[[], GuiEnv]]
"""A backend whose every env needs a device of its own (an emulator on its ports): called with the backend's
config section (``env.<backend>``), how many envs may exist at once and the backend's factory with its other
options bound, it checks the section at once (a ``ValueError`` naming the key) and returns a factory whose
every call builds one env on the next free device. ``admire.envs.building`` builds such a backend's envs
through it, wherever ``env.executor`` would have run the others."""
DEVICE_POOLS: Registry[DevicePool] = Registry(
    "device pool",
    group="admire.device_pools",
    builtins={"android_world": "admire.envs.android_devices:device_pool"},
)


def register_env(name: str) -> Callable[[EnvFactory], EnvFactory]:
    """Register a backend factory under ``name`` (the ``<backend>`` part of task names)."""
    return ENVS.register(name)


def registered_envs() -> list[str]:
    return ENVS.names()


def make_env(name: str, **options: Any) -> GuiEnv:
    """Build a backend by name: ``make_env("miniwob", max_steps=10)``.

    A spec ``<backend>:<argument>`` hands the argument to the factory as its first positional
    parameter, so a config can name a backend that needs one: ``make_env("remote:http://host:8765")``.
    """
    backend, sep, argument = name.partition(":")
    if sep:
        return ENVS.lookup(backend)(argument, **options)
    return ENVS.lookup(name)(**options)


def make_task(name: str, seed: int = 0, **params: Any) -> Task:
    """The public way to address a task: ``make_task("miniwob/login-user", seed=3)``."""
    backend, sep, template = name.partition("/")
    if not sep or not backend or not template:
        raise ValueError(f"a task name is '<backend>/<task>', e.g. 'miniwob/login-user'; got {name!r}")
    if int(seed) < 0:
        raise ValueError(f"a task seed must be >= 0, got {seed}")
    return Task(name=name, seed=int(seed), params=params)

