"""Every plug-in registry put back as it was after each test (the autouse fixture in ``tests/conftest.py``).

A test may register a backend, a policy, a generator, an estimator or an executor however it likes —
``@register_env("fake")``, ``ENVS["fake"] = …``, ``monkeypatch.setitem(POLICIES.entries, …)`` — and the next
test sees the registries as they were before it: names added are gone, names replaced or removed are
back. The snapshot is each registry's entry table (a dict copy, nothing imported), so it costs
microseconds per test. What is registered at import time (a test module's module-level ``@register_env``
during collection) is part of every snapshot and stays.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from admire.registry import Registry

# The registries of ``admire.registry`` (tests/core/test_registries.py checks none is missing).
REGISTRIES = (
    "admire.envs.base:ENVS",
    "admire.envs.base:DEVICE_POOLS",
    "admire.agent.base:POLICIES",
    "admire.milestones.generator:GENERATORS",
    "admire.rl.advantages:ADVANTAGE_ESTIMATORS",
    "admire.envs.executors:EXECUTORS",
    "admire.models:MODELS",
)


def all_registries() -> list[Registry]:
    """The registries (their modules are protocol modules: importing them imports no implementation)."""
    found = []
    for target in REGISTRIES:
        module, _, attr = target.partition(":")
        found.append(getattr(importlib.import_module(module), attr))
    return found


@contextmanager
def registries_restored() -> Iterator[None]:
    """Inside: register anything. After: every registry holds exactly the entries it held before."""
    saved = [(registry, dict(registry._entries), registry._plugins_loaded) for registry in all_registries()]
    try:
        yield
    finally:
        for registry, entries, plugins_loaded in saved:
            registry._entries.clear()
            registry._entries.update(entries)
            registry._plugins_loaded = plugins_loaded
