"""A run's stored ``config.yaml`` brought to the current layout, one explicit version step at a time.

Why: a run folder outlives the code that wrote it. When a key is added (or a default changes), a run written
before has no value for it, and reading it with today's default would change how that run behaves when it is
resumed, re-scored by the viewer or evaluated. Each stored config says which layout it has
(``config_version``; a config written before the key existed is version 0), and ``migrate`` applies the steps
from there to ``CONFIG_VERSION``, each writing the values that version's runs ran with. A fresh config
(composed from the shipped YAML and overrides) is never migrated: it is current by construction.

Adding a step: bump ``CONFIG_VERSION``, add ``_to_<n>`` to ``STEPS`` writing the values the older runs
behaved with, and extend ``tests/core/test_config_migration.py``'s stored configs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONFIG_VERSION = 1
"""The layout this code writes (the shipped YAML's ``config_version``)."""

LEGACY_DEFAULTS: dict[str, Any] = {
    "milestone_reward.matcher": "sbert",
    "milestone_reward.encoder": "all-MiniLM-L6-v2",
    "milestone_reward.update_rule": "shorter",
    "milestone_reward.contrast_margin": 0.0,
    "milestone_reward.prose_threshold": None,
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.std_floor": 0.0,
    "algorithm.failed_group_baseline": "mean",
    "actor_rollout_ref.actor.target_kl": None,
    "actor_rollout_ref.actor.max_kl": None,
    "actor_rollout_ref.actor.ppo_max_answer_tokens": None,
    "actor_rollout_ref.actor.loss_agg_mode": None,
    "actor_rollout_ref.actor.entropy_coef": 0.0,
    "env.train_instances_per_task": None,
    "trainer.total_env_steps": None,
    "env.executor": "local",
    "actor_rollout_ref.warm_start.enable": False,
    "actor_rollout_ref.warm_start.from_run": None,
    "trainer.eval_split": "test",
    "algorithm.filter_groups": False,
}
"""Version 0 → 1: the keys added while runs already existed, with the value that reproduces how those runs
behaved (a run without ``milestone_reward.matcher`` matched with the cosine alone, ``sbert``; one without
``algorithm.std_floor`` divided by the bare standard deviation …)."""


DAPO_SETTINGS: dict[str, Any] = {"algorithm.filter_groups": True, "actor_rollout_ref.actor.clip_ratio_high": 0.28}
"""Version 0 → 1, ``dapo_step`` runs: before version 1 the estimator itself asked for DAPO's settings, whatever the
config said (groups not kept dropped, clip-higher 0.28, token-mean loss unless ``loss_agg_mode`` was set); since,
they are config keys, so a version-0 ``dapo_step`` run gets the values it ran with written out."""


def _to_1(config: dict[str, Any]) -> dict[str, Any]:
    """Every key of ``LEGACY_DEFAULTS`` the config lacks, filled in inside sections it has: a sub-section
    such as ``actor_rollout_ref.warm_start`` is added, a top-level one is not (a partial file, such as the
    reward sections the viewer reads, stays partial). A ``dapo_step`` run gets ``DAPO_SETTINGS``."""
    filled = _fill(config, LEGACY_DEFAULTS)
    algorithm = filled.get("algorithm")
    if isinstance(algorithm, dict) and algorithm.get("adv_estimator") == "dapo_step":
        for dotted, value in DAPO_SETTINGS.items():
            _set(filled, dotted, value)
        section = filled.get("actor_rollout_ref")
        actor = section.get("actor") if isinstance(section, dict) else None
        if isinstance(actor, dict) and actor.get("loss_agg_mode") is None:
            actor["loss_agg_mode"] = "token-mean"
    return filled


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    """``config[a][b]… = value`` where every parent section exists (``_fill`` copied them); else nothing."""
    *parents, leaf = dotted.split(".")
    node: Any = config
    for name in parents:
        node = node.get(name) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node[leaf] = value


def _fill(config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with each dotted key of ``defaults`` it lacks set, inside the sections it has (every
    section on the way is copied, so the caller's dict is never changed)."""
    filled = {section: dict(values) if isinstance(values, dict) else values for section, values in config.items()}
    for dotted, value in defaults.items():
        *parents, leaf = dotted.split(".")
        node: Any = filled
        for depth, name in enumerate(parents):
            child = node.get(name)
            if child is None and depth > 0 and name not in node:
                child = {}
            if not isinstance(child, dict):
                break
            child = dict(child)
            node[name] = child
            node = child
        else:
            node.setdefault(leaf, value)
    return filled


STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _to_1}
"""``STEPS[v]`` takes a version-``v`` config to version ``v + 1``."""


def stored_version(config: dict[str, Any]) -> int:
    """The layout a stored config has: its ``config_version``, 0 when it has none (written before the key)."""
    version = config.get("config_version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"config_version must be a non-negative integer, got {version!r}; restore the run's "
                         "config.yaml from a copy")
    if version > CONFIG_VERSION:
        raise ValueError(f"config_version {version} was written by a newer admire (this one reads up to "
                         f"{CONFIG_VERSION}); upgrade admire to read this run")
    return version


def migrate(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a stored run config as a plain nested dict) at ``CONFIG_VERSION``; a new dict, the argument
    is not changed. A config already current comes back equal to itself (with its ``config_version``)."""
    version = stored_version(config)
    migrated = dict(config)
    while version < CONFIG_VERSION:
        migrated = STEPS[version](migrated)
        version += 1
    migrated["config_version"] = version
    return migrated


def migrate_flat(values: dict[str, Any]) -> dict[str, Any]:
    """``migrate`` for a config written as dotted keys (what a checkpoint records of its experiment): the
    values a checkpoint of an older layout was trained with, in today's keys."""
    nested: dict[str, Any] = {}
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = nested
        for name in parents:
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[leaf] = value
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for name, value in node.items():
                walk(value, f"{prefix}{name}.")
        else:
            flat[prefix.rstrip(".")] = node

    walk(migrate(nested), "")
    return flat
