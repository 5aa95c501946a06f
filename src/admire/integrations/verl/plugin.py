"""ADMIRE's registrations in verl, made in every process that imports verl.

verl's trainer runs in Ray actors (the TaskRunner, rollout and reward workers), each a fresh interpreter, so
registering from the driver's own code is not enough: each process must find ADMIRE's estimators, agent loop,
and trainer by name. verl gives a hook for exactly this: ``import verl`` imports every entry point
of the ``verl.plugins`` group (``verl/__init__.py``; env ``VERL_USE_EXTERNAL_PLUGINS`` = auto | none | names).
This project declares, in pyproject.toml::

    [project.entry-points."verl.plugins"]
    admire = "admire.integrations.verl.plugin"

and importing this module registers everything (``register()`` at the bottom). Where plugins are turned off,
``VERL_USE_EXTERNAL_MODULES=admire.integrations.verl.plugin`` or an explicit ``register()`` does the same.

verl imports the entry point half-way through its own ``__init__`` (after ``verl.DataProto`` exists) and logs a
failing plugin only at DEBUG, so: nothing here imports verl at module level beyond what ``register()`` needs,
and a failure is logged as a WARNING before it propagates (otherwise a broken install would show up only as
"Unknown advantage estimator" much later).
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger("admire.integrations.verl")

MODULES: tuple[str, ...] = (
    "admire.integrations.verl.agent_loop",
    "admire.integrations.verl.trainer",
    "admire.integrations.verl.hf_rollout",
)
"""Modules whose ``register()`` puts their part into verl's registries: the agent loop, the trainer and the
``admire_hf`` rollout. There is no reward manager to register: the reward step is the trainer's, on the driver
(``admire.integrations.verl.rewards`` says why)."""

_registered_modules: set[str] = set()
"""The modules of ``MODULES`` whose ``register()`` has run in this process."""


def register() -> list[str]:
    """Register ADMIRE's estimators (``admire_<name>`` for every estimator known now), the agent loop and
    the trainer in verl. Idempotent: calling it again registers what is new (an ADMIRE
    estimator added since, a module whose ``register()`` could not run before) and leaves the rest. Returns
    the names of the modules whose ``register()`` ran in this call.

    A module still being imported when this runs — the process's first ``import verl`` came from inside it, so
    verl loads this plugin half-way through that module — has no ``register`` yet; it stays pending and the
    next ``register()`` call runs its hook.
    """
    from admire.integrations.verl import cpu

    if cpu.selected():  # first: the modules below make verl resolve its platform
        cpu.install()
    without_trl_value_head()
    from admire.integrations.verl.advantages import register_estimators

    register_estimators()
    ran = []
    for name in MODULES:
        if name in _registered_modules:
            continue
        module = importlib.import_module(name)
        hook = getattr(module, "register", None)
        if callable(hook):
            hook()
            _registered_modules.add(name)
            ran.append(name)
    return ran


def without_trl_value_head() -> None:
    """Stop verl's model patches from importing TRL's value-head model.

    verl's ``apply_monkey_patch`` (every actor and reference build) imports ``AutoModelForCausalLMWithValueHead``
    from ``trl`` whenever ``trl`` is importable, to patch its ``state_dict`` for a critic; TRL 1.x has no such
    class, so the import fails and the actor never builds in an environment that also has this project's TRL
    adapter. ADMIRE's estimators train no critic, so the patch has nothing to do here: verl is told TRL is absent.
    """
    from verl.models.transformers import monkey_patch

    monkey_patch.is_trl_available = lambda: False


try:
    register()
except Exception:
    log.warning("admire's verl plugin failed to register; verl will not know admire_* names", exc_info=True)
    raise
