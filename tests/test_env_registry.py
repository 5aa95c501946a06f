"""The backend registry and task naming (``make_env``, ``make_task``)."""

from __future__ import annotations

import pytest

from admire.envs import GuiEnv, make_env, make_task, register_env, registered_envs
from tests.fakes import FormEnv


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
