"""The envs of a training config (``env.*``): one list for the CPU trainer, the verl agent loop and ``admire eval``.

``env.src`` names the backends, ``env.max_envs`` how many envs of each; ``env.executor`` says where they run
(``local``, ``ray`` …, :mod:`admire.envs.executors`) with its own section (``env.ray``) as its settings;
``env.miniwob`` (the settle mode and its bounds) goes to the ``miniwob`` backend, wherever it runs. A backend
with a device pool (``admire.envs.base.DEVICE_POOLS``: ``android_world``, one emulator per env) builds its envs
through the pool, with its own section (``env.android_world``) as the pool's settings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from omegaconf import DictConfig, OmegaConf

from admire.envs.base import DEVICE_POOLS, GuiEnv, make_env


def env_specs(cfg: DictConfig) -> list[str]:
    """``env.src`` as a list of backend specs (a single spec is a list of one)."""
    return [str(spec) for spec in (cfg.env.src if OmegaConf.is_list(cfg.env.src) else [cfg.env.src])]


def env_counts(cfg: DictConfig) -> list[int]:
    """``env.max_envs`` as one count per backend of ``env.src`` (a single number applies to each)."""
    specs = env_specs(cfg)
    counts = cfg.env.max_envs
    numbers = [int(n) for n in counts] if OmegaConf.is_list(counts) else [int(counts)] * len(specs)
    if len(numbers) != len(specs):
        raise ValueError(f"env.max_envs has {len(numbers)} count(s) but env.src has {len(specs)} backend(s); "
                         "give one count per backend")
    return numbers


def env_options(cfg: DictConfig) -> dict[str, Any]:
    """The options every backend's factory gets."""
    return {"max_steps": int(cfg.env.max_steps), "screenshots": bool(cfg.env.get("screenshots", False))}


def check_device_pools(cfg: DictConfig) -> None:
    """Check the section of every backend of ``env.src`` that takes its devices from a pool (adb, ports, the
    launcher: one emulator per env) before a run directory exists; a bad value is a ``ValueError``."""
    for spec, count in zip(env_specs(cfg), env_counts(cfg), strict=True):
        if spec in DEVICE_POOLS:
            DEVICE_POOLS.lookup(spec)(_section(cfg, spec), count,
                                      functools.partial(make_env, spec, **env_options(cfg)))


def make_envs(cfg: DictConfig, stack: ExitStack) -> list[Any]:
    """The environments of every backend in ``env.src`` (``env.src=[miniwob, remote:http://host:8765]
    env.max_envs=[4, 16]``: 4 local browsers and 16 devices of that server), closed when ``stack`` unwinds.
    Every backend must run the suite's tasks: rollouts hand any task to any env."""
    from admire.envs.executors import get_executor

    options = env_options(cfg)
    name = str(cfg.env.get("executor", "local"))
    executor = get_executor(name)
    settings = _section(cfg, name) if name != "local" and cfg.env.get(name) is not None else None
    miniwob = _section(cfg, "miniwob")
    envs = []
    for spec, count in zip(env_specs(cfg), env_counts(cfg), strict=True):
        build: Callable[[], GuiEnv]
        if spec in DEVICE_POOLS:
            build = DEVICE_POOLS.lookup(spec)(_section(cfg, spec), count,
                                              functools.partial(make_env, spec, **options))
        else:
            build = executor(spec, settings, **options, **(miniwob if spec == "miniwob" else {}))
        for _ in range(count):
            env = build()
            stack.callback(env.close)
            envs.append(env)
    return envs


def _section(cfg: DictConfig, name: str) -> dict[str, Any]:
    """``env.<name>`` as a plain dict (empty when the config has none)."""
    section = cfg.env.get(name)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    assert isinstance(values, dict)
    return {str(key): value for key, value in values.items()}
