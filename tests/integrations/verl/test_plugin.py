"""The verl plugin: a fresh ``import verl`` (what every Ray actor of verl's trainer does) registers ADMIRE's
estimators through the ``verl.plugins`` entry point, without a circular import; ``register()`` is idempotent,
runs each part's own ``register()`` once and picks up estimators registered later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from admire.integrations.verl import plugin
from admire.integrations.verl.advantages import verl_estimator
from admire.rl.advantages import AdvantageResult, register_advantage
from tests.support.models import tiny_qwen2_dir  # noqa: F401 - the session's prepared tiny model
from tests.support.verl_registry import verl_estimators_restored

BUILTINS = ("admire_grpo_step", "admire_grpo_traj", "admire_rloo_step", "admire_dapo_step")

PROBE = textwrap.dedent("""
    import json, sys
    import verl
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn
    names = sorted(k for k in ADV_ESTIMATOR_REGISTRY if k.startswith("admire_"))
    loaded = "admire.integrations.verl.plugin" in sys.modules
    fn = get_adv_estimator_fn("admire_grpo_step") if "admire_grpo_step" in names else None
    print(json.dumps({"names": names, "plugin_loaded": loaded,
                      "fn": None if fn is None else f"{fn.__module__}.{fn.__name__}"}))
""")


@pytest.fixture(autouse=True)
def _verl_registry(monkeypatch):
    """verl's estimator registry and the plugin's record of registered modules put back after each test."""
    monkeypatch.setattr(plugin, "_registered_modules", set(plugin._registered_modules))
    with verl_estimators_restored():
        yield


def fresh_import_verl(**env: str) -> dict:
    """``import verl`` in a new interpreter (as a Ray actor starts), with ``env`` added; what it registered."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environment,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed to register" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_entry_point_is_installed():
    found = [ep for ep in entry_points(group="verl.plugins") if ep.name == "admire"]
    assert found, "no verl.plugins entry point 'admire': reinstall the project (pip install -e .)"
    assert found[0].value == "admire.integrations.verl.plugin"


def test_a_fresh_import_verl_registers_admire_through_the_entry_point():
    seen = fresh_import_verl(VERL_USE_EXTERNAL_PLUGINS="auto")
    assert seen["plugin_loaded"]
    assert set(BUILTINS) <= set(seen["names"])
    assert seen["fn"] == "admire.integrations.verl.advantages.admire_grpo_step"


@pytest.mark.slow  # a second fresh interpreter (~15 s); the documented fallback, not the default path
def test_with_plugins_off_verls_external_modules_setting_loads_it_instead():
    seen = fresh_import_verl(VERL_USE_EXTERNAL_PLUGINS="none",
                             VERL_USE_EXTERNAL_MODULES="admire.integrations.verl.plugin")
    assert seen["plugin_loaded"] and set(BUILTINS) <= set(seen["names"])


def hook_module(tmp_path, monkeypatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_register_runs_each_parts_hook_once_and_is_idempotent(tmp_path, monkeypatch):
    name = hook_module(tmp_path, monkeypatch, "admire_test_hook", """
        CALLS = []
        def register():
            CALLS.append(1)
    """)
    monkeypatch.setattr(plugin, "MODULES", (name,))
    assert plugin.register() == [name]
    assert plugin.register() == []
    assert sys.modules[name].CALLS == [1]
    assert all(get_adv_estimator_fn(n) is verl_estimator(n.removeprefix("admire_")) for n in BUILTINS)


def test_a_module_still_importing_when_verl_loads_the_plugin_registers_on_the_next_call(tmp_path, monkeypatch):
    """The process's first ``import verl`` comes from inside a part (``import admire.integrations.verl.agent_loop``
    first): verl runs the plugin while that module is half-imported, before its ``register`` exists."""
    name = hook_module(tmp_path, monkeypatch, "admire_test_late_hook", """
        import admire_test_late_hook_record as record
        from admire.integrations.verl import plugin
        record.FIRST = plugin.register()  # what verl's import does at this point
        def register():
            record.CALLS.append(1)
    """)
    (tmp_path / "admire_test_late_hook_record.py").write_text("CALLS = []\nFIRST = None\n")
    monkeypatch.delitem(sys.modules, "admire_test_late_hook_record", raising=False)
    monkeypatch.setattr(plugin, "MODULES", (name,))
    __import__(name)
    record = sys.modules["admire_test_late_hook_record"]
    assert record.FIRST == [] and record.CALLS == []
    assert plugin.register() == [name] and record.CALLS == [1]


def test_a_failing_import_inside_a_part_is_not_swallowed(tmp_path, monkeypatch):
    name = hook_module(tmp_path, monkeypatch, "admire_test_broken_hook", """
        import admire_no_such_dependency  # noqa: F401
        def register():
            pass
    """)
    monkeypatch.setattr(plugin, "MODULES", (name,))
    with pytest.raises(ModuleNotFoundError, match="admire_no_such_dependency"):
        plugin.register()


def test_register_adds_an_estimator_registered_since():
    @register_advantage("since")
    def since(samples):
        return AdvantageResult(tuple(None if s.excluded else (0.0,) * len(s.rewards) for s in samples))

    with pytest.raises(ValueError, match="Unknown advantage estimator"):
        get_adv_estimator_fn("admire_since")
    plugin.register()
    assert get_adv_estimator_fn("admire_since") is verl_estimator("since")


CPU_PROBE = textwrap.dedent("""
    import json
    import torch.distributed as dist
    import verl
    from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device
    from verl.workers.engine.base import EngineRegistry
    from verl.workers import engine_workers
    import os
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PROBE_PORT"], RANK="0", WORLD_SIZE="1")
    engine_workers.initialize_global_process_group_ray()
    from verl.workers.engine.fsdp import transformer_impl
    policy = transformer_impl.CPUOffloadPolicy(pin_memory=True)
    print(json.dumps({"device": get_device_name(), "backend": get_nccl_backend(),
                      "engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
                      "group": dist.get_backend(), "pinned": policy.pin_memory,
                      "memory": get_torch_device().max_memory_allocated() > 0}))
""")


def test_the_cpu_platform_in_a_fresh_process_gives_verl_a_cpu_device_gloo_and_its_fsdp_engine():
    """``VERL_PLATFORM=admire_cpu`` (what ``trainer.device=cpu`` sets in every worker): on ``import verl`` the
    plugin registers the platform, the FSDP engines for ``cpu``, a gloo-only process group and unpinned
    offload, before any verl module asks for the device."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VERL_PLATFORM": "admire_cpu", "PROBE_PORT": str(port)}
    done = subprocess.run([sys.executable, "-c", CPU_PROBE], env=env, capture_output=True, text=True, timeout=300,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "device": "cpu", "backend": "gloo", "engine": "FSDPEngineWithLMHead", "group": "cpu:gloo", "pinned": False,
        "memory": True}


def test_verl_does_not_import_trls_value_head_even_where_trl_is_installed(tiny_qwen2_dir):  # noqa: F811
    """verl's model patches import ``AutoModelForCausalLMWithValueHead`` from TRL whenever TRL is importable;
    TRL 1.x has none, so the actor's build would fail in this project's environment (which has the TRL adapter)."""
    import importlib.util

    from transformers import AutoModelForCausalLM
    from verl.models.transformers import monkey_patch

    assert importlib.util.find_spec("trl") is not None  # the situation this guards against
    plugin.register()
    assert monkey_patch.is_trl_available() is False
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, local_files_only=True)
    monkey_patch.apply_monkey_patch(model)  # raised ImportError before
