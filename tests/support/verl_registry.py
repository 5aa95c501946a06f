"""verl's advantage-estimator registry put back after a test (the project's autouse fixture restores only
ADMIRE's own registries): a test may register ``admire_<name>`` estimators in verl and the next sees none of them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from verl.trainer.ppo import core_algos


@contextmanager
def verl_estimators_restored() -> Iterator[None]:
    """verl's ``ADV_ESTIMATOR_REGISTRY`` as it was on entry (the same dict object, so aliases of it stay valid)."""
    saved = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    try:
        yield
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.clear()
        core_algos.ADV_ESTIMATOR_REGISTRY.update(saved)
