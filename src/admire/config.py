"""Configuration: Hydra composition of the YAML under ``configs/`` plus ``key=value`` overrides.

Hydra's compose API is used rather than ``@hydra.main`` so that ``admire train`` stays one subcommand
of one CLI, keeps the working directory, and writes only into ``runs/<name>`` — while users keep
Hydra's override grammar (``trainer.total_epochs=5``, ``+new.key=1``, ``env.max_envs=[4]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

PACKAGED_CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = "demo_miniwob"


def load_config(
    name: str = DEFAULT_CONFIG, overrides: Sequence[str] = (), config_dir: str | Path | None = None
) -> DictConfig:
    """Compose ``<config_dir>/<name>.yaml`` with overrides; a path to a YAML file works as ``name`` too."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        config_dir, name = path.resolve().parent, path.stem
    directory = Path(config_dir) if config_dir is not None else PACKAGED_CONFIGS
    if not (directory / f"{name}.yaml").exists():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.yaml")))
        raise FileNotFoundError(f"no config {name!r} in {directory}; available: {known}")
    own = [o for o in overrides if not _names_a_verl_family(o)]
    family = [f"++{o.lstrip('+')}" for o in overrides if _names_a_verl_family(o)]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory.resolve()), version_base=None):
            cfg = compose(config_name=name, overrides=own)
            given = compose(config_name=None, overrides=family) if family else None
    except HydraException as exc:
        raise ValueError(re.sub(r"(?<![\w+])\+\+(?=\w)", "", hydra_one_line(exc))) from None  # our "++", not theirs
    finally:
        GlobalHydra.instance().clear()
    return _with_canonical_names(cfg, given)


def _names_a_verl_family(override: str) -> bool:
    """An override of a key that has a verl name, under either name: these are merged by
    ``resolve_verl_names`` (a later layer wins per setting, whichever name it uses) rather than by Hydra,
    which knows only the names the config file happens to use."""
    key = override.lstrip("+").partition("=")[0].strip()
    return not override.startswith("~") and key in _VERL_FAMILY_KEYS


def _with_canonical_names(cfg: DictConfig, given: DictConfig | None) -> DictConfig:
    """``cfg`` (the composed file and the plain overrides) with the verl-named overrides ``given`` applied
    and every verl name turned into this project's; ``cfg`` itself when neither uses one."""
    file_layer = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(file_layer, dict)
    layers = [file_layer]
    if given is not None:
        override_layer = OmegaConf.to_container(given, resolve=False)
        assert isinstance(override_layer, dict)
        layers.append(override_layer)
    elif not _uses_verl_names(file_layer):
        return cfg
    canonical = OmegaConf.create(resolve_verl_names(*layers))
    OmegaConf.set_struct(canonical, bool(OmegaConf.is_struct(cfg)))
    return canonical


def hydra_one_line(exc: Exception) -> str:
    """Hydra's override errors span lines (a caret under the text, numbered options); the CLI prints one:
    ``<key>: <what is wrong>; <fix>``."""
    text = str(exc)
    unknown = re.match(r"Could not override '([^']+)'", text)
    if unknown:
        from admire.config_schema import known_keys, suggest

        key = unknown.group(1)
        if key in known_keys():  # a key with a default that this config file does not write out
            return f"{key}: this config file does not set it; add it with +{key}=<value>"
        return f"{key}: unknown key; {suggest(key)}"
    ambiguous = re.match(r"Ambiguous value for argument '([^'=]+)=([^']*)'", text)
    if ambiguous:
        key, value = ambiguous.groups()
        key = key.lstrip("+")
        return (f"{key}: the value {value!r} has a comma; quote it for a string ({key}='{value}') "
                f"or bracket it for a list ({key}=[{value}])")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    detail = "; ".join(line for line in lines if line and set(line) != {"^"})
    return f"bad configuration override: {detail}; write overrides as key=value, e.g. trainer.total_epochs=5"


# Keys added after runs already existed, with the value that reproduces how those runs behaved. A run
# directory written before a key existed keeps its behaviour when resumed, re-scored by the viewer or
# evaluated, instead of silently picking up a newer default.
LEGACY_DEFAULTS: dict[str, Any] = {
    "milestone_reward.matcher": "sbert",
    "milestone_reward.encoder": "all-MiniLM-L6-v2",
    "milestone_reward.update_rule": "shorter",
    "milestone_reward.contrast_margin": 0.0,
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.std_floor": 0.0,
    "algorithm.failed_group_baseline": "mean",
    "actor_rollout_ref.actor.target_kl": None,
    "actor_rollout_ref.actor.max_kl": None,
    "actor_rollout_ref.actor.loss_agg_mode": None,
    "actor_rollout_ref.actor.entropy_coef": 0.0,
    "env.train_instances_per_task": None,
    "trainer.total_env_steps": None,
    "env.executor": "local",
    "actor_rollout_ref.warm_start.enable": False,
}


def with_legacy_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a plain nested dict) with every key of ``LEGACY_DEFAULTS`` it lacks filled in (inside
    sections it has: a sub-section such as ``actor_rollout_ref.warm_start`` is added, a top-level one is not)."""
    filled = {section: dict(values) if isinstance(values, dict) else values for section, values in config.items()}
    for dotted, value in LEGACY_DEFAULTS.items():
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


def load_run_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """The resolved config a run was started with (keys it predates at their old values, see
    ``LEGACY_DEFAULTS``), with (few) overrides for resuming it."""
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml); start one with admire train")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (YAMLError, OmegaConfBaseException, UnicodeDecodeError) as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{path}: not a readable config ({detail}); restore it from a copy") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a config (a mapping of sections); restore it from a copy")
    layers = [with_legacy_defaults(loaded)]
    for override in overrides:
        key, sep, _ = override.lstrip("+").partition("=")
        if not sep or not key.strip() or key.startswith("~"):
            raise ValueError(f"{override}: not a key=value override; write it as key=value, "
                             "e.g. trainer.eval_episodes=5")
    if overrides:
        try:
            given = OmegaConf.to_container(OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]), resolve=False)
        except OmegaConfBaseException as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ValueError(f"bad override ({detail}); write overrides as key=value, e.g. trainer.eval_episodes=5") \
                from None
        assert isinstance(given, dict)
        layers.append(given)
    cfg = OmegaConf.create(resolve_verl_names(*layers))  # verl's names, in overrides or a hand-written file
    assert isinstance(cfg, DictConfig)
    return cfg



# --------------------------------------------------------------------------------------------------
# verl's names for this project's keys
# --------------------------------------------------------------------------------------------------
# The original project ran on verl, so its users write verl's names. The CPU trainer accepts them too:
# each is turned into this project's name when a config is loaded (files and key=value overrides), and a
# run's config.yaml holds only this project's names. Where both names of one setting appear in one place
# (one file, or the overrides) with different values the config is refused; between places the later
# wins, whichever name it uses (an override of ``actor_rollout_ref.actor.lr`` beats a file's ``optim.lr``).

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
_VERL_FAMILY_KEYS: frozenset[str] = frozenset(VERL_NAMES) | frozenset(_VERL_TARGETS)
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


def _uses_verl_names(layer: dict[str, Any]) -> bool:
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
    use = given.get("actor_rollout_ref.actor.use_kl_loss", _lowest_given(below, "actor_rollout_ref.actor.use_kl_loss"))
    coef = given.get("actor_rollout_ref.actor.kl_loss_coef",
                     _lowest_given(below, "actor_rollout_ref.actor.kl_loss_coef"))
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


def _lowest_given(layers: Sequence[dict[str, Any]], key: str) -> Any:
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
    copy = _copy(tree)
    for dotted in dotted_keys:
        *parents, leaf = dotted.split(".")
        path = [copy]
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
    return copy


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _merge_into(base: dict[str, Any], layer: dict[str, Any]) -> None:
    """Hydra's merge of a later layer: per leaf, the later wins; a list or scalar replaces."""
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge_into(base[key], value)
        else:
            base[key] = _copy(value)


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
