"""Where the shipped configs live, and a config node as plain data: what both the loader (``admire.config``)
and the typed schema (``admire.config_schema``, whose defaults are checked against the shipped YAML) need, so
that neither imports the other for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from pydantic import BaseModel

PACKAGED_CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = "demo_miniwob"


def plain(node: Any) -> dict[str, Any]:
    """A config (typed, or composed with every interpolation resolved) or one of its sections as a plain nested
    dict, the form YAML, JSON and the trackers take; a node that is not a mapping is a ``TypeError``."""
    if isinstance(node, BaseModel):
        values: Any = node.model_dump(mode="json")
    else:
        values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    if not isinstance(values, dict):
        raise TypeError(f"expected a config section (a mapping), got {type(values).__name__}")
    return {str(key): value for key, value in values.items()}
