"""Where the shipped configs live: the one thing both the loader (``admire.config``) and the typed schema
(``admire.config_schema``, whose defaults are checked against the shipped YAML) need to know, so that neither
imports the other for it."""

from __future__ import annotations

from pathlib import Path

PACKAGED_CONFIGS = Path(__file__).parent / "configs"
DEFAULT_CONFIG = "demo_miniwob"
