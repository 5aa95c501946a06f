"""Environments: the ``GuiEnv`` protocol, the backend registry, and the built-in backends."""

from admire.envs.base import (
    EnvCrashed,
    GuiEnv,
    InvalidAction,
    StepResult,
    make_env,
    make_task,
    register_env,
    registered_envs,
)

__all__ = [
    "EnvCrashed",
    "GuiEnv",
    "InvalidAction",
    "StepResult",
    "make_env",
    "make_task",
    "register_env",
    "registered_envs",
]
