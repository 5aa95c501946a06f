"""The backend registry and task naming (``make_env``, ``make_task``), the plug-in style every registry
shares (``admire.registry``), several backends in one run, and the executor registry."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import ClassVar

import pytest

from admire.envs import GuiEnv, make_env, make_task, register_env, registered_envs
from admire.envs.base import ENVS
from admire.registry import PluginError, Registry
from tests.support.fakes import FormEnv, SeededFormEnv
from tests.support.paths import REPO


def test_a_registered_backend_is_built_by_name_with_its_options() -> None:
    @register_env("fake-form")
    def build(crash_on_step: int | None = None) -> FormEnv:
        return FormEnv(crash_on_step=crash_on_step)

    env = make_env("fake-form", crash_on_step=3)
    assert isinstance(env, FormEnv) and env.crash_on_step == 3
    assert isinstance(env, GuiEnv)
    assert "fake-form" in registered_envs() and "miniwob" in registered_envs()


def test_registering_another_factory_under_a_taken_name_is_refused() -> None:
    @register_env("fake-twice")
    def first() -> FormEnv:
        return FormEnv()

    with pytest.raises(ValueError, match="already registered"):
        register_env("fake-twice")(lambda: FormEnv())


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown environment backend 'nope'.*miniwob"):
        make_env("nope")


def test_make_task_parses_backend_and_template() -> None:
    task = make_task("miniwob/login-user", seed=7)
    assert (task.backend, task.template, task.seed) == ("miniwob", "login-user", 7)


@pytest.mark.parametrize("name", ["login-user", "/login-user", "miniwob/", ""])
def test_make_task_rejects_names_without_backend_and_task(name: str) -> None:
    with pytest.raises(ValueError, match="<backend>/<task>"):
        make_task(name)


def test_make_task_rejects_negative_seeds() -> None:
    with pytest.raises(ValueError, match="seed"):
        make_task("miniwob/click-test", seed=-1)


# --------------------------------------------------------------------------------------------------
# One plug-in style: module:attr strings, entry points, the decorator (admire.registry)
# --------------------------------------------------------------------------------------------------

PLUGIN_MODULE = '''
from tests.support.fakes import FormEnv


class PluggedEnv(FormEnv):
    """A backend that only an entry point names."""
'''


def install_plugin(root: Path, entry_points: str, module: str = PLUGIN_MODULE) -> None:
    """A distribution on ``sys.path`` the way pip leaves one: a module and a ``.dist-info`` folder."""
    (root / "admire_test_plugin.py").write_text(module, encoding="utf-8")
    info = root / "admire_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: admire-test-plugin\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")


def test_a_declared_string_is_imported_only_when_looked_up() -> None:
    registry: Registry = Registry("thing",
                                  builtins={"form": "tests.support.fakes:FormEnv", "gone": "tests.no_such:Thing"})
    assert registry.names() == ["form", "gone"] and "gone" in registry  # listing imports nothing
    assert registry.target("form") == "tests.support.fakes:FormEnv"
    assert registry.lookup("form") is FormEnv
    with pytest.raises(PluginError, match=r"^thing 'gone' \(built-in, tests.no_such:Thing\) cannot be loaded: "
                                          r"ModuleNotFoundError: No module named 'tests.no_such'$"):
        registry.lookup("gone")
    with pytest.raises(ValueError, match=r"a plug-in is named as 'package\.module:attribute'"):
        registry.declare("bad", "tests.support.fakes.FormEnv")


def test_the_decorator_on_the_object_a_string_declares_is_the_same_registration() -> None:
    registry: Registry = Registry("thing", builtins={"form": "tests.support.fakes:FormEnv"})
    registry.register("form")(FormEnv)  # what a built-in module's own decorator would do: harmless
    with pytest.raises(ValueError, match=r"a thing named 'form' is already registered \(tests.support.fakes:FormEnv\)"):
        registry.register("form")(SeededFormEnv)
    with pytest.raises(ValueError, match="already registered"):
        registry.declare("form", "tests.support.fakes:SeededFormEnv")


def test_entry_points_of_an_installed_distribution_are_found_on_first_lookup(tmp_path: Path, monkeypatch) -> None:
    install_plugin(tmp_path, "[admire.test-envs]\nplugged = admire_test_plugin:PluggedEnv\n"
                             "broken = admire_test_plugin:NoSuchClass\nform = admire_test_plugin:PluggedEnv\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry: Registry = Registry("environment backend", group="admire.test-envs",
                                  builtins={"form": "tests.support.fakes:FormEnv"})
    assert registry.names() == ["broken", "form", "plugged"]
    assert registry.lookup("plugged").__name__ == "PluggedEnv"
    assert registry.lookup("form") is FormEnv  # a plug-in cannot take a built-in's name
    with pytest.raises(PluginError) as error:
        registry.lookup("broken")
    assert str(error.value) == ("environment backend 'broken' (plug-in from admire-test-plugin, "
                                "admire_test_plugin:NoSuchClass) cannot be loaded: AttributeError: module "
                                "'admire_test_plugin' has no attribute 'NoSuchClass'")


def test_a_plugged_backend_runs_the_conformance_suite_from_the_command_line(tmp_path: Path) -> None:
    """End to end, in a fresh interpreter: ``pip install`` is simulated by PYTHONPATH, nothing imports
    the plug-in, and ``python -m admire.envs.check_env plugged`` finds it through ENVS's entry points."""
    install_plugin(tmp_path, "[admire.envs]\nplugged = admire_test_plugin:PluggedEnv\n"
                             "broken = admire_test_plugin_gone:Env\n")
    repo = REPO
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])}
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    ok = run([sys.executable, "-m", "admire.envs.check_env", "plugged", "--task", "fake/form"])
    assert ok.returncode == 0, ok.stderr
    assert "all 11 checks passed" in ok.stdout
    broken = run([sys.executable, "-m", "admire.envs.check_env", "broken", "--task", "fake/form"])
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert broken.stderr.strip() == ("python -m admire.envs.check_env: error: environment backend 'broken' (plug-in "
                                     "from admire-test-plugin, admire_test_plugin_gone:Env) cannot be loaded: "
                                     "ModuleNotFoundError: No module named 'admire_test_plugin_gone'")


# --------------------------------------------------------------------------------------------------
# Several backends in one run (env.src, env.max_envs) and the executor registry
# --------------------------------------------------------------------------------------------------


class OtherFormEnv(FormEnv):
    def __init__(self, **_options: object) -> None:
        super().__init__()


def test_make_envs_builds_the_count_of_each_backend(monkeypatch) -> None:
    from admire.config import load_config
    from admire.envs.building import make_envs

    monkeypatch.setitem(ENVS.entries, "fake-a", SeededFormEnv)
    monkeypatch.setitem(ENVS.entries, "fake-b", OtherFormEnv)
    cfg = load_config(overrides=["env.src=[fake-a,fake-b]", "env.max_envs=[1,2]"])
    with ExitStack() as stack:
        envs = make_envs(cfg.env, stack)
        assert [type(e) for e in envs] == [SeededFormEnv, OtherFormEnv, OtherFormEnv]
    assert all(e.closed for e in envs)
    with ExitStack() as stack:
        assert len(make_envs(load_config(overrides=["env.src=[fake-a,fake-b]", "env.max_envs=2"]).env, stack)) == 4
    with pytest.raises(ValueError, match=r"max_envs: has 1 count\(s\) but env.src has 2"):  # before any env
        load_config(overrides=["env.src=[fake-a,fake-b]", "env.max_envs=[3]"])


class RecordingEnv(FormEnv):
    options: ClassVar[list[dict[str, object]]] = []

    def __init__(self, **options: object) -> None:
        super().__init__()
        RecordingEnv.options.append(options)


def test_env_miniwob_reaches_the_miniwob_backend_and_no_other(monkeypatch) -> None:
    from admire.config import load_config
    from admire.envs.building import make_envs

    monkeypatch.setitem(ENVS.entries, "miniwob", RecordingEnv)
    monkeypatch.setitem(ENVS.entries, "fake-b", RecordingEnv)
    monkeypatch.setattr(RecordingEnv, "options", [])
    cfg = load_config(overrides=["env.src=[miniwob,fake-b]", "env.max_envs=[1,1]", "env.miniwob.settle=wall",
                                 "env.miniwob.settle_max_s=2.5"])
    with ExitStack() as stack:
        make_envs(cfg.env, stack)
    common = {"max_steps": 8, "screenshots": False}
    assert RecordingEnv.options == [{**common, "settle": "wall", "settle_quiet_s": 0.02, "settle_max_s": 2.5},
                                    common]


def test_the_schema_wants_one_count_per_backend(monkeypatch) -> None:
    from admire.config import load_config
    from admire.config_schema import ConfigError, validate_config

    monkeypatch.setitem(ENVS.entries, "fake-a", SeededFormEnv)
    with pytest.raises(ConfigError, match=r"^env\.max_envs: has 1 count\(s\) but env\.src has 2 backend\(s\); "
                                          r"give one count per backend, e\.g\. env\.max_envs=\[4,4\]$"):
        validate_config(load_config(overrides=["env.src=[miniwob,fake-a]", "env.max_envs=[4]"]))
    validate_config(load_config(overrides=["env.src=[miniwob,fake-a]", "env.max_envs=[4,2]"]))


def test_the_executor_registry_builds_local_factories_and_names_the_known_executors() -> None:
    from admire.envs.executors import EXECUTORS, env_factory, get_executor

    assert {"local", "ray"} <= set(EXECUTORS.names())
    register_env("fake-exec")(SeededFormEnv) if "fake-exec" not in ENVS else None
    try:
        env = env_factory("local", "fake-exec", None, max_steps=3)()
        assert isinstance(env, SeededFormEnv)
        with pytest.raises(ValueError, match="the local executor takes no settings"):
            get_executor("local")("fake-exec", {"address": "auto"})
        with pytest.raises(ValueError, match=r"unknown environment backend 'nope'"):
            env_factory("local", "nope")
    finally:
        ENVS.pop("fake-exec", None)
