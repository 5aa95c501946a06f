"""Protocol modules import no implementation: importing ``admire.envs.base``, ``admire.agent.base`` or
``admire.rewards`` (each in a fresh interpreter) loads no backend, policy or server module of ours and no
browser, torch or server package. This is what lets a user of the reward functions or a backend's author
install the small core only, and what keeps ``import admire.envs`` from starting anything."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
from admire.envs.base import ENVS
from admire.envs.executors import EXECUTORS
from admire.milestones.generator import GENERATORS
from admire.rl.advantages import ADVANTAGE_ESTIMATORS
names = {r.kind: r.names() for r in (ENVS, POLICIES, EXECUTORS, GENERATORS, ADVANTAGE_ESTIMATORS)}
print(json.dumps({"names": names, "modules": sorted(sys.modules)}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(out.stdout)
    assert {"miniwob", "remote"} <= set(report["names"]["environment backend"])
    assert "dom" in report["names"]["policy"] and {"local", "ray"} <= set(report["names"]["env executor"])
    assert {"heuristic", "llm"} <= set(report["names"]["milestone generator"])
    assert "grpo_step" in report["names"]["advantage estimator"]
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
