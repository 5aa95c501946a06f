"""The envs of a training config (``env.*``): one list for the CPU trainer, the verl agent loop and ``admire eval``.

``env.src`` names the backends, ``env.max_envs`` how many envs of each; ``env.executor`` says where they run
(``local``, ``ray`` …, :mod:`admire.envs.executors`) with its own section (``env.ray``) as its settings;
``env.miniwob`` (the settle mode and its bounds) goes to the ``miniwob`` backend, wherever it runs. A backend
with a device pool (``admire.envs.base.DEVICE_POOLS``: ``android_world``, one emulator per env) builds its envs
through the pool, with its own section (``env.android_world``) as the pool's settings.

Every function takes the typed ``env`` section (``admire.config_schema.EnvSection``), already validated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from admire.envs.base import DEVICE_POOLS, GuiEnv, make_env

if TYPE_CHECKING:
    from admire.config_schema import EnvSection


def env_specs(env: EnvSection) -> list[str]:
    """``env.src``: the backend specs, one per backend."""
    return [str(spec) for spec in env.src]


def env_counts(env: EnvSection) -> list[int]:
    """``env.max_envs`` as one count per backend of ``env.src`` (a single number applies to each; the schema
    checks that a list has one count per backend)."""
    counts = env.max_envs
    return [int(n) for n in counts] if isinstance(counts, list) else [int(counts)] * len(env.src)


def env_options(env: EnvSection) -> dict[str, Any]:
    """The options every backend's factory gets."""
    return {"max_steps": int(env.max_steps), "screenshots": bool(env.screenshots)}


def check_device_pools(env: EnvSection) -> None:
    """Check the section of every backend of ``env.src`` that takes its devices from a pool (adb, ports, the
    launcher: one emulator per env) before a run directory exists; a bad value is a ``ValueError``."""
    for spec, count in zip(env_specs(env), env_counts(env), strict=True):
        if spec in DEVICE_POOLS:
            DEVICE_POOLS.lookup(spec)(_section(env, spec), count,
                                      functools.partial(make_env, spec, **env_options(env)))


def make_envs(env: EnvSection, stack: ExitStack) -> list[Any]:
    """The environments of every backend in ``env.src`` (``env.src=[miniwob, remote:http://host:8765]
    env.max_envs=[4, 16]``: 4 local browsers and 16 devices of that server), closed when ``stack`` unwinds.
    Every backend must run the suite's tasks: rollouts hand any task to any env."""
    from admire.envs.executors import get_executor

    options = env_options(env)
    executor = get_executor(env.executor)
    settings = _section(env, env.executor) if getattr(env, env.executor, None) is not None else None
    miniwob = _section(env, "miniwob")
    envs = []
    for spec, count in zip(env_specs(env), env_counts(env), strict=True):
        build: Callable[[], GuiEnv]
        if spec in DEVICE_POOLS:
            build = DEVICE_POOLS.lookup(spec)(_section(env, spec), count,
                                              functools.partial(make_env, spec, **options))
        else:
            build = executor(spec, settings, **options, **(miniwob if spec == "miniwob" else {}))
        for _ in range(count):
            built = build()
            stack.callback(built.close)
            envs.append(built)
    return envs


def _section(env: EnvSection, name: str) -> dict[str, Any]:
    """``env.<name>`` (an executor's or a backend's settings) as a plain dict: empty when the config sets it to
    null, and for a name the schema has no section for."""
    section = getattr(env, name, None)
    return section.model_dump() if section is not None else {}
