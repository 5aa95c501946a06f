"""Configuration: Hydra composition of the YAML under ``configs/`` plus ``key=value`` overrides.

Hydra's compose API is used rather than ``@hydra.main`` so that ``admire train`` stays one subcommand
of one CLI, keeps the working directory, and writes only into ``runs/<name>`` — while users keep
Hydra's override grammar (``trainer.total_epochs=5``, ``+new.key=1``, ``env.max_envs=[4]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from admire.config_files import DEFAULT_CONFIG, PACKAGED_CONFIGS
from admire.config_migration import migrate
from admire.config_names import VERL_FAMILY_KEYS, resolve_verl_names, uses_verl_names
from admire.errors import first_line
from admire.fileio import UnreadableFile, read_bounded

if TYPE_CHECKING:
    from admire.config_schema import TrainingConfig

MAX_RUN_CONFIG_BYTES = 16 << 20
"""A run's config.yaml is a few KB; one larger than 16 MiB (or a FIFO in its place) is not read."""


def load_config(
    name: str = DEFAULT_CONFIG, overrides: Sequence[str] = (), config_dir: str | Path | None = None
) -> TrainingConfig:
    """The typed config of ``<config_dir>/<name>.yaml`` with overrides (``compose_config``, validated): what every
    module below the commands takes. A bad value is a one-line ``ConfigError`` naming the key and the fix."""
    from admire.config_schema import validate_config

    return validate_config(compose_config(name, overrides, config_dir))


def compose_config(
    name: str = DEFAULT_CONFIG, overrides: Sequence[str] = (), config_dir: str | Path | None = None
) -> DictConfig:
    """Compose ``<config_dir>/<name>.yaml`` with overrides, unvalidated (for the commands that merge or print
    raw sections); a path to a YAML file works as ``name`` too."""
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
    ``admire.config_names.resolve_verl_names`` (a later layer wins per setting, whichever name it uses)
    rather than by Hydra, which knows only the names the config file happens to use."""
    key = override.lstrip("+").partition("=")[0].strip()
    return not override.startswith("~") and key in VERL_FAMILY_KEYS


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
    elif not uses_verl_names(file_layer):
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


def _first_interpolation(node: Any, prefix: str = "") -> tuple[str, str] | None:
    """The first ``(key, value)`` whose string value holds an OmegaConf interpolation (``${…}``), or None."""
    if isinstance(node, dict):
        for name, value in node.items():
            found = _first_interpolation(value, f"{prefix}{name}.")
            if found is not None:
                return found
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found = _first_interpolation(value, f"{prefix}{index}.")
            if found is not None:
                return found
    elif isinstance(node, str) and "${" in node:
        return prefix.rstrip("."), node
    return None


def load_run_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> TrainingConfig:
    """The typed config a run was started with, migrated to today's layout (``admire.config_migration``), with
    (few) overrides for resuming it."""
    from admire.config_schema import validate_config

    return validate_config(read_run_config(run_dir, overrides))


def read_run_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """A run's stored config migrated to today's layout (the values it ran with, ``admire.config_migration``)
    with (few) overrides, unvalidated: a partial file stays partial."""
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml); start one with admire train")
    try:
        text = read_bounded(path, MAX_RUN_CONFIG_BYTES, "run config").decode("utf-8")
        loaded = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    except (YAMLError, OmegaConfBaseException, UnicodeDecodeError, UnreadableFile) as exc:
        detail = first_line(exc)
        raise ValueError(f"{path}: not a readable config ({detail}); restore it from a copy") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a config (a mapping of sections); restore it from a copy")
    interpolated = _first_interpolation(loaded)
    if interpolated is not None:
        key, value = interpolated
        raise ValueError(f"{path}: {key} holds the interpolation {value[:80]!r}, but a run's config is stored with "
                         "every value resolved (an interpolation there would read this machine's environment, "
                         "e.g. a secret, for a folder someone handed you); write the value itself")
    layers = [migrate(loaded)]
    for override in overrides:
        key, sep, _ = override.lstrip("+").partition("=")
        if not sep or not key.strip() or key.startswith("~"):
            raise ValueError(f"{override}: not a key=value override; write it as key=value, "
                             "e.g. trainer.eval_episodes=5")
    if overrides:
        try:
            given = OmegaConf.to_container(OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]), resolve=False)
        except OmegaConfBaseException as exc:
            detail = first_line(exc)
            raise ValueError(f"bad override ({detail}); write overrides as key=value, e.g. trainer.eval_episodes=5") \
                from None
        assert isinstance(given, dict)
        layers.append(given)
    cfg = OmegaConf.create(resolve_verl_names(*layers))  # verl's names, in overrides or a hand-written file
    assert isinstance(cfg, DictConfig)
    return cfg
