"""Env executors: *where* a backend's envs run (``env.executor``), apart from *which* backend it is.

An executor turns a backend spec (``"miniwob"``, ``"remote:http://host:8765"``) into a zero-argument
factory of ``GuiEnv``s::

    executor(spec: str, settings: Mapping[str, Any] | None, **options) -> Callable[[], GuiEnv]

``settings`` is the executor's own config section (``env.<executor>``, e.g. ``env.ray``; None when
absent) and ``options`` go to the backend's factory (``max_steps``, ``screenshots``). The trainer's
``make_envs`` and ``admire serve --executor`` call it once per backend and then the factory once per env.

Built-ins: ``local`` (the env in this process, :mod:`admire.envs.executors.local`) and ``ray`` (each env
in its own Ray actor, here or on a cluster, :mod:`admire.envs.executors.ray`). They are declared as
``module:attr`` strings, so importing this package imports neither; third-party executors arrive through
the ``admire.executors`` entry-point group (see :mod:`admire.registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from admire.envs.base import GuiEnv
from admire.registry import Registry

EnvExecutor = Callable[..., Callable[[], GuiEnv]]
"""``executor(spec, settings, **options) -> factory``: see the module docstring."""

EXECUTORS: Registry[EnvExecutor] = Registry(
    "env executor",
    group="admire.executors",
    builtins={
        "local": "admire.envs.executors.local:local_executor",
        "ray": "admire.envs.executors.ray:ray_executor",
    },
)


def register_executor(name: str) -> Callable[[EnvExecutor], EnvExecutor]:
    """Register an executor under ``name`` (``env.executor`` in the config)."""
    return EXECUTORS.register(name)


def get_executor(name: str) -> EnvExecutor:
    """The executor ``env.executor=name`` names; an unknown name is one line listing the known ones."""
    if name not in EXECUTORS.names():
        known = [repr(n) for n in EXECUTORS.names()]
        choices = f"{', '.join(known[:-1])} or {known[-1]}" if len(known) > 1 else ", ".join(known)
        raise ValueError(f"env.executor must be {choices}, got {name!r}")
    return EXECUTORS.lookup(name)


def env_factory(executor: str, spec: str, settings: Mapping[str, Any] | None = None,
                **options: Any) -> Callable[[], GuiEnv]:
    """A factory of ``spec``'s envs run by ``executor``: ``env_factory("ray", "miniwob", {"num_cpus_per_env":
    0.5}, max_steps=10)()`` is one MiniWoB env in a Ray actor."""
    return get_executor(executor)(spec, settings, **options)


__all__ = ["EXECUTORS", "EnvExecutor", "env_factory", "get_executor", "register_executor"]
