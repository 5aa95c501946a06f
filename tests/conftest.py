"""Shared test set-up: offline model hub, Debian Chromium, a scratch TMPDIR per test session, and plug-in
registries put back after every test."""

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


# --------------------------------------------------------------------------------------------------
# One real MiniWoB++ browser for the whole session (starting Chromium costs about a second)
# --------------------------------------------------------------------------------------------------

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def miniwob_session_env():
    """The shared real MiniWoB++ env; tests that need their own browser (crash, close) make one."""
    from admire.envs.miniwob import MiniWoBEnv

    env = MiniWoBEnv(max_steps=10)
    yield env
    env.close()


@pytest.fixture
def miniwob_env(miniwob_session_env):
    """The shared env, healthy and with default options at the start of each test."""
    env = miniwob_session_env
    if not env.healthy():
        env.restart()
    from admire.envs.miniwob_settle import DEFAULT_SETTLE, DEFAULT_SETTLE_MAX_S, DEFAULT_SETTLE_QUIET_S

    env.screenshots, env.screenshot_scale, env.max_steps = False, 1.0, 10
    env.settle, env.settle_quiet_s, env.settle_max_s = DEFAULT_SETTLE, DEFAULT_SETTLE_QUIET_S, DEFAULT_SETTLE_MAX_S
    return env


# --------------------------------------------------------------------------------------------------
# What a test registers (an env backend, a policy, a generator, an estimator, an executor) ends with it
# --------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _registries_restored():
    """Each plug-in registry as it was before the test (``tests/support/registries.py``)."""
    from tests.support.registries import registries_restored

    with registries_restored():
        yield
