"""Protocol modules import no implementation: importing ``admire.envs.base``, ``admire.agent.base`` or
``admire.rewards`` (each in a fresh interpreter) loads no backend, policy or server module of ours and no
browser, torch or server package. This is what lets a user of the reward functions or a backend's author
install the small core only, and what keeps ``import admire.envs`` from starting anything."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import admire

FORBIDDEN_OURS = ("admire.envs.miniwob", "admire.agent.dom_policy", "admire.envs.remote", "admire.envs.executors.",
                  "admire.server")
FORBIDDEN_PACKAGES = ("selenium", "miniwob", "torch", "fastapi", "uvicorn", "ray", "sentence_transformers")

PROBE = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(module: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


def offenders(modules: list[str]) -> list[str]:
    ours = [m for m in modules if m.startswith(FORBIDDEN_OURS)]
    theirs = [m for m in modules if m.split(".")[0] in FORBIDDEN_PACKAGES]
    return sorted(ours + theirs)


@pytest.mark.parametrize("module", ["admire.envs.base", "admire.agent.base", "admire.rewards"])
def test_a_protocol_module_imports_no_implementation_and_no_heavy_package(module: str) -> None:
    modules = loaded_by(module)
    assert module in modules
    assert offenders(modules) == []


def test_the_registries_name_their_built_ins_without_importing_them() -> None:
    probe = """
import json, sys
from admire.agent.base import POLICIES
from admire.envs.base import DEVICE_POOLS, ENVS
from admire.envs.executors import EXECUTORS
from admire.milestones.generator import GENERATORS
from admire.rl.advantages import ADVANTAGE_ESTIMATORS
names = {r.kind: r.names() for r in (ENVS, POLICIES, EXECUTORS, GENERATORS, ADVANTAGE_ESTIMATORS, DEVICE_POOLS)}
print(json.dumps({"names": names, "modules": sorted(sys.modules)}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(out.stdout)
    assert {"miniwob", "remote"} <= set(report["names"]["environment backend"])
    assert "dom" in report["names"]["policy"] and {"local", "ray"} <= set(report["names"]["env executor"])
    assert {"heuristic", "llm"} <= set(report["names"]["milestone generator"])
    assert "grpo_step" in report["names"]["advantage estimator"]
    assert report["names"]["device pool"] == ["android_world"]
    assert "admire.envs.android_devices" not in report["modules"]
    assert offenders(report["modules"]) == []
    assert "admire.milestones.llm_generator" not in report["modules"]


def test_the_offender_filter_catches_what_it_should() -> None:
    """The check above is only as good as this filter: it must see a backend and a heavy package."""
    assert offenders(["admire.envs.miniwob_dom", "admire.server.app", "torch.nn", "raylet", "admire.envs.base",
                      "admire.envs.executors.ray", "ray._private"]) == \
        ["admire.envs.executors.ray", "admire.envs.miniwob_dom", "admire.server.app", "ray._private", "torch.nn"]


def test_the_remote_backend_imports_nothing_of_the_server_or_its_web_framework() -> None:
    # A backend depends on the wire format (admire.wire), never on the server that also speaks it.
    modules = loaded_by("admire.envs.remote")
    assert "admire.wire" in modules
    assert [m for m in modules if m.startswith("admire.server") or m.split(".")[0] in ("fastapi", "uvicorn")] == []


def imported_modules(path: Path) -> set[str]:
    """Every module a source file imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_verl_integration_and_the_env_layer_import_nothing_of_the_cpu_trainer() -> None:
    # verl's agent loop builds its envs through the env layer (admire.envs.building), as the CPU trainer does.
    package = Path(admire.__file__).parent
    sources = [*sorted((package / "integrations" / "verl").glob("*.py")), *sorted((package / "envs").rglob("*.py"))]
    assert len(sources) > 10
    importers = [str(p.relative_to(package)) for p in sources if "admire.rl.trainer" in imported_modules(p)]
    assert importers == []
    assert "admire.envs.building" in imported_modules(package / "integrations" / "verl" / "agent_loop.py")


def test_the_env_layer_builds_without_torch_or_the_trainer() -> None:
    modules = loaded_by("admire.envs.building")
    assert [m for m in modules if m.startswith("admire.rl") or m.split(".")[0] == "torch"] == []


def test_the_config_loader_and_the_schema_point_one_way() -> None:
    # The loader may ask the schema for a key's spelling; the schema reads the shipped YAML's location from
    # admire.config_files, never from the loader.
    package = Path(admire.__file__).parent
    assert "admire.config" not in imported_modules(package / "config_schema.py")
    assert not [m for m in imported_modules(package / "config_files.py") if m.startswith("admire")]


def test_planning_a_learning_benchmark_loads_no_torch() -> None:
    # The benchmark plans its runs (which arms share a start) in the parent process; the runs load torch.
    probe = """
import json, sys
from admire.benchmarks.learning import start_label
print(json.dumps({"label": start_label(["actor_rollout_ref.model.lora=true", "reward.mode=outcome"]),
                  "modules": sorted(sys.modules)}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(out.stdout)
    assert report["label"].startswith("start@")
    assert "admire.rl.shared_start" in report["modules"]
    assert [m for m in report["modules"] if m.split(".")[0] == "torch"] == []
