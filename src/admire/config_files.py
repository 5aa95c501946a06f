"""Where the shipped configs live, and a config node as plain data: what both the loader (``admire.config``)
and the typed schema (``admire.config_schema``, whose defaults are checked against the shipped YAML) need, so
that neither imports the other for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

PACKAGED_CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = "demo_miniwob"


def plain(node: Any) -> dict[str, Any]:
    """A config (or one of its sections) as a plain nested dict with every interpolation resolved; a node that
    is not a mapping is a ``TypeError``."""
    values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    if not isinstance(values, dict):
        raise TypeError(f"expected a config section (a mapping), got {type(values).__name__}")
    return {str(key): value for key, value in values.items()}
