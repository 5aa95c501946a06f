"""The commands of the README and of docs/usage.md (the everyday commands) run as written: every command of
their fenced ``bash``/``sh`` blocks is either run here (the cheap ones: seconds, no browser, nothing written)
and must exit 0, or listed in ``EXPENSIVE`` with the reason it is not — so a command added to either page must
be classified here, or this test fails.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from admire.cli import COMMANDS
from tests.support.paths import REPO

ROOT = REPO
README = ROOT / "README.md"
PAGES = (README, ROOT / "docs" / "usage.md")
_BLOCK = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.DOTALL | re.MULTILINE)

CHEAP = {
    "admire --version",
    "admire --help",
    "admire bench --list",
    "admire train --dry-run trainer.total_epochs=5",
}
"""Run by this test, from the repository root, as written."""

_TRAINS = "trains (minutes to hours in Chromium); test_trainer_fakes.py and the slow tests cover the loop"
_RUN = "needs a finished run in runs/<name> (a placeholder); test_cli.py and test_milestones_cli.py cover it"
_SERVES = "starts a long-running server; test_serve_command.py covers the command"
_RAY = "starts a Ray cluster; test_ray_executor.py covers the executor"
EXPENSIVE: dict[str, str] = {
    "make demo": "installs the package and trains for minutes (the main job)",
    "make test": "installs the package and runs this very test suite",
    "admire train trainer.total_epochs=20 actor_rollout_ref.rollout.n=8": _TRAINS,
    "admire train reward.mode=outcome run.name=baseline": _TRAINS,
    "admire train resume=runs/<name>": _RUN,
    "admire train resume=runs/<name> trainer.total_epochs=80": _RUN,
    "admire eval --checkpoint runs/<name> --suite miniwob-multistep --episodes 20": _RUN,
    "admire milestones show runs/<name>": _RUN,
    "admire milestones history runs/<name> miniwob/login-user": _RUN,
    "admire milestones export runs/<name> ms.json": _RUN,
    "admire train milestone_reward.mode=static milestone_reward.static_path=ms.json":
        "needs ms.json from the export above, then trains",
    "admire viz runs/<name>": _RUN,
    "admire serve --num-devices 4": _SERVES,
    "admire rewards tests/data/login_user_batch.jsonl":
        "loads MiniLM (about 20 s on 2 cores); test_rewards_cli.py runs it on this file",
    "admire bench": "runs every benchmark (tens of minutes, Chromium)",
    "admire bench learning --suite miniwob-demo": "hours of training",
    "admire bench learning --suite miniwob-demo --variants admire outcome --seeds 0 1 2 3 4 --parallel 2":
        "hours of training (the results table)",
    "admire serve --num-devices 4 --max-devices 8 --concurrency-limit 4": _SERVES,
    "ADMIRE_SERVER_TOKEN=$(openssl rand -hex 16) admire serve --host 0.0.0.0": _SERVES,
    "admire train 'env.src=[remote:http://127.0.0.1:8765]'": "needs the server above, then trains",
    "admire train env.executor=ray 'env.max_envs=[4]'": _RAY,
    "ray start --head": _RAY,
    "ray start --address=<head-ip>:6379 --resources='{\"browser\": 16}'": _RAY,
    "admire train env.executor=ray env.ray.address=auto 'env.max_envs=[64]' 'env.ray.resources={browser: 1}'": _RAY,
    "admire serve --executor ray --ray-address auto --num-devices 16": _RAY,
}
"""Not run, each with its reason."""


def readme_commands() -> list[str]:
    """Each command line of the shell blocks of ``PAGES``, without its trailing comment."""
    commands = []
    for block in (b for page in PAGES for b in _BLOCK.findall(page.read_text(encoding="utf-8"))):
        for line in block.splitlines():
            tokens = shlex.split(line, comments=True, posix=False)  # posix=False keeps the quotes as written
            if tokens:
                commands.append(" ".join(tokens))
    return commands


def test_every_readme_command_is_classified() -> None:
    commands = readme_commands()
    unclassified = [c for c in commands if c not in CHEAP and c not in EXPENSIVE]
    assert not unclassified, (f"commands of {[p.name for p in PAGES]} this test does not know: {unclassified}; "
                              "add each to CHEAP (it runs in seconds, without a browser) or to EXPENSIVE with the "
                              "reason")
    stale = [c for c in [*CHEAP, *EXPENSIVE] if c not in commands]
    assert not stale, f"no longer in {[p.name for p in PAGES]} (remove them here): {stale}"


def _run(command: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the installed `admire`
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("command", sorted(CHEAP))
def test_cheap_readme_command_runs_as_written(command: str) -> None:
    result = _run(command)
    assert result.returncode == 0, f"{command!r} exited {result.returncode}:\n{result.stderr[-2000:]}"
    assert result.stdout.strip(), f"{command!r} printed nothing"


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not list {sorted(pages - linked)}"
    assert all((ROOT / "docs" / link).resolve().is_file() for link in linked), "a link of docs/README.md is broken"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name: str) -> None:
    """docs/usage.md points to ``admire <command> --help`` for each command's options."""
    result = _run(f"admire {name} --help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: admire {name}")
