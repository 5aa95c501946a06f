"""The ``local`` executor: each env lives in this process (the default, and the fastest on one machine)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from admire.envs.base import ENVS, GuiEnv, make_env


def local_executor(spec: str, settings: Mapping[str, Any] | None = None, **options: Any) -> Callable[[], GuiEnv]:
    """``make_env(spec, **options)`` as a zero-argument factory. The backend is looked up now, so an
    unknown name fails before the first env is built. ``settings`` must be empty: nothing to set here."""
    if settings:
        raise ValueError(f"the local executor takes no settings, got {', '.join(sorted(settings))}")
    ENVS.lookup(spec.partition(":")[0])
    return functools.partial(make_env, spec, **options)
