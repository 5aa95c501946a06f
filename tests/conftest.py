"""Shared test set-up: offline model hub, Debian Chromium, a scratch TMPDIR per test session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")

_SCRATCH = Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "admire-tests"
_SCRATCH.mkdir(parents=True, exist_ok=True)
os.environ["TMPDIR"] = str(_SCRATCH)
tempfile.tempdir = None  # re-read TMPDIR
