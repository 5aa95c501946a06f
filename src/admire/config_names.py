"""verl's names for this project's keys, so that one config file runs on both trainers.

The original project ran on verl, so its users write verl's names. The CPU trainer accepts them too:
each is turned into this project's name when a config is loaded (files and key=value overrides,
``admire.config``), and a run's config.yaml holds only this project's names. Where both names of one
setting appear in one place (one file, or the overrides) with different values the config is refused;
between places the later wins, whichever name it uses (an override of ``actor_rollout_ref.actor.lr`` beats a
file's ``optim.lr``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

VERL_NAMES: dict[str, tuple[str, ...]] = {
    "actor_rollout_ref.actor.optim.lr": ("actor_rollout_ref.actor.lr",),
    # verl 0.9 has both: the actor's grad_clip (the documented one) and optim.clip_grad (what its engines use)
    "actor_rollout_ref.actor.grad_clip": ("actor_rollout_ref.actor.max_grad_norm",),
    "actor_rollout_ref.actor.optim.clip_grad": ("actor_rollout_ref.actor.max_grad_norm",),
    # verl: a KL loss of weight kl_loss_coef when use_kl_loss (default false); here one weight, 0 = off
    "actor_rollout_ref.actor.use_kl_loss": ("actor_rollout_ref.actor.kl_coef",),
    "actor_rollout_ref.actor.kl_loss_coef": ("actor_rollout_ref.actor.kl_coef",),
    "trainer.test_freq": ("trainer.eval_every",),  # verl: -1 = never; here 0
    # verl's list of trackers; console is always on here (the progress bar), metrics.jsonl too
    "trainer.logger": ("tracking.tensorboard", "tracking.swanlab", "tracking.wandb"),
    "trainer.project_name": ("tracking.project",),
    "trainer.experiment_name": ("run.name",),
}
"""verl's name -> the key(s) of this project it sets."""

VERL_VALUES: dict[str, dict[str, str]] = {
    # verl's ``grpo`` is outcome GRPO: one score per sample (the sum of its token rewards, i.e. the episode's
    # reward), normalised within its group and given to every token; with multi-turn samples verl's v1
    # trainer takes each episode's final score and broadcasts it to every step. That is ``grpo_traj``: one
    # return per trajectory, normalised in the group, broadcast to its steps. (``grpo_step`` is ADMIRE's
    # step-pooled Eq. 13, which verl has no name for.) The std convention stays this project's (ddof=0 and
    # algorithm.std_floor), not verl's (ddof=1).
    "algorithm.adv_estimator": {"grpo": "grpo_traj"},
}
"""Values of verl that mean one of this project's values of the same key."""

VERL_KL_LOSS_COEF = 0.001
"""verl's default ``kl_loss_coef``: the weight of ``use_kl_loss=true`` given with no coefficient anywhere."""

TRACKERS: dict[str, str | None] = {"console": None, "tensorboard": "tracking.tensorboard",
                                   "swanlab": "tracking.swanlab", "wandb": "tracking.wandb"}
"""verl's ``trainer.logger`` entries this project has, and the key each turns on."""

TRACKER_MODE = "offline"
"""The mode of SwanLab or W&B turned on by ``trainer.logger`` when no ``tracking.*`` gives one: nothing
leaves the machine unless asked (``tracking.wandb=online``)."""

_VERL_TARGETS: tuple[str, ...] = tuple(dict.fromkeys(t for targets in VERL_NAMES.values() for t in targets))
VERL_FAMILY_KEYS: frozenset[str] = frozenset(VERL_NAMES) | frozenset(_VERL_TARGETS)
_ABSENT = object()


def resolve_verl_names(*layers: dict[str, Any]) -> dict[str, Any]:
    """Merge config layers (plain nested dicts, lowest first: a file, then its overrides) with verl's
    names turned into this project's (``VERL_NAMES``, ``VERL_VALUES``). Each setting is decided by the
    highest layer that names it under either name; a layer that gives it under both names with
    different values is a ``ValueError`` (one line naming both)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        _merge_into(merged, _without(layer, VERL_NAMES))
    for target in _VERL_TARGETS:
        aliases = [alias for alias, targets in VERL_NAMES.items() if target in targets]
        for depth in reversed(range(len(layers))):
            layer = layers[depth]
            given = {alias: _get(layer, alias) for alias in aliases if _get(layer, alias) is not _ABSENT}
            here = _get(layer, target)
            if not given and here is _ABSENT:
                continue
            if given:
                value = _from_verl(target, given, here, layers[:depth])
                if here is not _ABSENT and not _same(here, value):
                    names = " and ".join(f"{alias}={_show(v)}" for alias, v in given.items())
                    means = "" if [_show(v) for v in given.values()] == [_show(value)] else f" (which means " \
                        f"{_show(value)})"
                    raise ValueError(f"{target}: given as {target}={_show(here)} and, under verl's name, as "
                                     f"{names}{means}; keep one of the two names")
                _set(merged, target, value)
            break
    for key, table in VERL_VALUES.items():
        value = _get(merged, key)
        if isinstance(value, str) and value in table:
            _set(merged, key, table[value])
    return merged


def uses_verl_names(layer: dict[str, Any]) -> bool:
    """Whether a config layer uses any verl name or verl value (otherwise it is taken as it is)."""
    values = [(_get(layer, key), table) for key, table in VERL_VALUES.items()]
    return (any(_get(layer, alias) is not _ABSENT for alias in VERL_NAMES)
            or any(isinstance(value, str) and value in table for value, table in values))


def _from_verl(target: str, given: dict[str, Any], here: Any, below: Sequence[dict[str, Any]]) -> Any:
    """The value of ``target`` that verl's names ``given`` (in one layer) mean; ``here``: the layer's own
    value of ``target`` if it has one, ``below``: the lower layers (for what ``given`` leaves open)."""
    if target == "actor_rollout_ref.actor.kl_coef":
        return _kl_coef(given, below)
    if target.startswith("tracking.") and target != "tracking.project":
        listed = _trackers(given["trainer.logger"])
        if target == "tracking.tensorboard":
            return "tensorboard" in listed
        if target.removeprefix("tracking.") not in listed:
            return None
        lower = resolve_verl_names(*below) if below else {}
        for mode in (here, _get(lower, target)):
            if mode is not _ABSENT and mode is not None:
                return mode
        return TRACKER_MODE
    values = list(dict.fromkeys(_show(v) for v in given.values()))
    if len(values) > 1:
        raise ValueError(f"{target}: verl's names {' and '.join(f'{a}={_show(v)}' for a, v in given.items())} "
                         "disagree; keep one")
    value = next(iter(given.values()))
    if target == "trainer.eval_every" and isinstance(value, int) and not isinstance(value, bool):
        return max(value, 0)
    return value


def _kl_coef(given: dict[str, Any], below: Sequence[dict[str, Any]]) -> Any:
    use = given.get("actor_rollout_ref.actor.use_kl_loss", _highest_given(below, "actor_rollout_ref.actor.use_kl_loss"))
    coef = given.get("actor_rollout_ref.actor.kl_loss_coef",
                     _highest_given(below, "actor_rollout_ref.actor.kl_loss_coef"))
    if use is _ABSENT:
        raise ValueError("actor_rollout_ref.actor.kl_loss_coef: verl applies it only with "
                         "actor_rollout_ref.actor.use_kl_loss=true; give both, or set actor_rollout_ref.actor.kl_coef")
    if not isinstance(use, bool):
        raise ValueError(f"actor_rollout_ref.actor.use_kl_loss: must be true or false, got {_show(use)}; "
                         "e.g. actor_rollout_ref.actor.use_kl_loss=true")
    if not use:
        return 0.0
    if coef is _ABSENT:
        lower = _get(resolve_verl_names(*below), "actor_rollout_ref.actor.kl_coef") if below else _ABSENT
        coef = lower if isinstance(lower, int | float) and lower > 0 else VERL_KL_LOSS_COEF
    return coef


def _highest_given(layers: Sequence[dict[str, Any]], key: str) -> Any:
    """The value of ``key`` in the highest of ``layers`` that has it."""
    for layer in reversed(layers):
        value = _get(layer, key)
        if value is not _ABSENT:
            return value
    return _ABSENT


def _trackers(value: Any) -> list[str]:
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        raise ValueError(f"trainer.logger: must be a list of trackers, got {_show(value)}; "
                         "e.g. trainer.logger=[console,tensorboard]")
    unknown = [name for name in listed if name not in TRACKERS]
    if unknown:
        raise ValueError(f"trainer.logger: {', '.join(unknown)} is not a tracker of this project; "
                         f"use {', '.join(TRACKERS)}, e.g. trainer.logger=[console,swanlab]")
    return listed


def canonical_key(key: str) -> tuple[str, ...]:
    """This project's key(s) for a key given under verl's name (the key itself otherwise)."""
    return VERL_NAMES.get(key, (key,))


def _get(tree: Any, dotted: str) -> Any:
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def _without(tree: dict[str, Any], dotted_keys: Any) -> dict[str, Any]:
    """A deep copy of ``tree`` without the leaves ``dotted_keys`` (sections they empty are dropped)."""
    trimmed = copy.deepcopy(tree)
    for dotted in dotted_keys:
        *parents, leaf = dotted.split(".")
        path = [trimmed]
        for part in parents:
            child = path[-1].get(part)
            if not isinstance(child, dict):
                break
            path.append(child)
        else:
            if leaf in path[-1]:
                del path[-1][leaf]
                for depth in range(len(parents), 0, -1):
                    if path[depth]:
                        break
                    del path[depth - 1][parents[depth - 1]]
    return trimmed


def _merge_into(base: dict[str, Any], layer: dict[str, Any]) -> None:
    """Hydra's merge of a later layer: per leaf, the later wins; a list or scalar replaces."""
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge_into(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return f"[{','.join(_show(v) for v in value)}]"
    return str(value)
