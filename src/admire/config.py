"""Configuration: Hydra composition of the YAML under ``configs/`` plus ``key=value`` overrides.

Hydra's compose API is used rather than ``@hydra.main`` so that ``admire train`` stays one subcommand
of one CLI, keeps the working directory, and writes only into ``runs/<name>`` — while users keep
Hydra's override grammar (``trainer.total_epochs=5``, ``+new.key=1``, ``env.max_envs=[4]``).
"""

from __future__ import annotations

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
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory.resolve()), version_base=None):
            cfg = compose(config_name=name, overrides=list(overrides))
    except HydraException as exc:
        raise ValueError(f"bad configuration override: {exc}") from None
    finally:
        GlobalHydra.instance().clear()
    return cfg


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
    "actor_rollout_ref.actor.target_kl": None,
    "actor_rollout_ref.actor.entropy_coef": 0.0,
    "env.train_instances_per_task": None,
    "trainer.total_env_steps": None,
}


def with_legacy_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a plain nested dict) with every key of ``LEGACY_DEFAULTS`` it lacks filled in."""
    filled = {section: dict(values) if isinstance(values, dict) else values for section, values in config.items()}
    for dotted, value in LEGACY_DEFAULTS.items():
        *parents, leaf = dotted.split(".")
        node: Any = filled
        for name in parents:
            child = node.get(name)
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
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml); start one with admire train")
    loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    cfg = OmegaConf.create(with_legacy_defaults(loaded) if isinstance(loaded, dict) else loaded)
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
    assert isinstance(cfg, DictConfig)
    return cfg


def first(value: Any) -> Any:
    """The original project's per-backend lists (``env.max_envs: [16]``) for a single backend."""
    if OmegaConf.is_list(value) or (isinstance(value, Sequence) and not isinstance(value, str)):
        return value[0]
    return value
