"""The environment protocol, as small as Gymnasium's ``Env``, and the backend registry.

A backend is anything with ``reset``/``step``/``close``/``healthy``: the embedded MiniWoB++ browser,
an AndroidWorld emulator, or the HTTP client of the env server. Rollouts see only this protocol, so a
trajectory is produced the same way whichever machine runs the device.
"""

from __future__ import annotations

from collections.abc import Callable
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
    def reset(self, task: Task) -> Observation: ...

    def step(self, action: Action) -> StepResult: ...

    def close(self) -> None: ...

    def healthy(self) -> bool: ...


EnvFactory = Callable[..., GuiEnv]
ENVS: Registry[EnvFactory] = Registry("environment backend", loader=lambda _name: _load_builtin_backends())


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


def _load_builtin_backends() -> None:
    """Import the built-in backends so they register; each imports its heavy deps lazily."""
    import admire.envs.miniwob
    import admire.server.client  # noqa: F401 - the ``remote`` backend; its HTTP client is set up when one is built
