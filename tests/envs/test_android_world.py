"""The android_world backend against AndroidWorld's real code (the source copy in tests/third_party) and the
faithful fake device of tests/support/android_fake.py: episodes with every action type, success and
teardown through real ``TaskEval`` subclasses, budgets, seeds, crashes and freezes, and ``check_env``."""

from __future__ import annotations

import inspect
import os
import random
import subprocess
import sys

import pytest

from admire.envs.base import ENVS, EnvCrashed, InvalidAction, make_env, make_task
from admire.extras import MissingExtra
from admire.types import Action, Observation
from tests.support import android_fake
from tests.support.android_fake import NotesAddNote, NotesAddTwoNotes
from tests.support.paths import REPO

LAUNCHER = "tests.support.android_fake:load_and_setup_env"
TASKS = "tests.support.android_fake:TASKS"


def make(**options) -> object:
    return make_env("android_world", launcher=LAUNCHER, task_registry=TASKS, **options)


@pytest.fixture
def env():
    env = make()
    yield env
    env.close()


def index_of(observation: Observation, text: str | None = None, cls: str | None = None) -> int:
    for i, element in enumerate(observation.ui_elements):
        if (text is None or text in (element.text, element.content_description)) and \
                (cls is None or element.class_name == cls):
            return i
    raise AssertionError(f"no element {text!r}/{cls!r} in {[e.text for e in observation.ui_elements]}")


def act(env, **action) -> object:
    return env.step(Action(**action))


def test_registered_as_a_builtin_backend() -> None:
    from admire.envs.android_world import AndroidWorldEnv

    assert ENVS.lookup("android_world") is AndroidWorldEnv


def test_the_fake_launcher_has_the_real_launchers_signature() -> None:
    from android_world.env import env_launcher

    real = inspect.signature(env_launcher.load_and_setup_env).parameters
    fake = inspect.signature(android_fake.load_and_setup_env).parameters
    assert list(fake) == list(real)
    assert [p.default for n, p in fake.items() if n != "adb_path"] == \
           [p.default for n, p in real.items() if n != "adb_path"]


def test_an_episode_with_every_action_type_succeeds_and_tears_down(env) -> None:
    task = make_task("android_world/NotesAddTwoNotes", seed=11).model_copy(update={"max_steps": 30})
    observation = env.reset(task)
    params = env.task_instance.params
    first, second = params["first"], params["second"]
    assert observation.goal == f"Add two notes in the Notes app: '{first}' and '{second}'."
    assert env.task_instance.initialized  # AndroidWorld's own initialize_task ran
    phone = env.async_env.phone
    assert observation.screenshot is not None and observation.screenshot.png.startswith(b"\x89PNG")

    r = act(env, action_type="swipe", direction="right")  # the launcher's second page
    assert phone.home_page == 1 and r.info["screen_changed"]
    r = act(env, action_type="click", index=index_of(r.observation, "Settings"))
    r = act(env, action_type="click", index=index_of(r.observation, "Wi-Fi"))
    assert phone.wifi and r.observation.ui_elements[index_of(r.observation, "Wi-Fi")].is_checked
    act(env, action_type="navigate_back")
    assert phone.app == android_fake.LAUNCHER
    r = act(env, action_type="open_app", app_name=android_fake.NOTES)
    field = index_of(r.observation, cls="android.widget.EditText")
    r = act(env, action_type="input_text", index=field, text=first)  # taps the field, types, presses enter
    for extra in ("alpha one", "beta two"):
        r = act(env, action_type="input_text", text=extra)  # the field keeps the focus
    r = act(env, action_type="click", index=field)
    r = act(env, action_type="input_text", text=second, clear_text=True)
    r = act(env, action_type="keyboard_enter")
    assert phone.notes == [first, "alpha one", "beta two", second]
    listed = [e.text for e in r.observation.ui_elements if e.resource_id == f"{android_fake.NOTES}:id/note"]
    assert listed == [first, "alpha one", "beta two"]
    r = act(env, action_type="scroll", direction="down", index=index_of(r.observation, "Saved notes"))
    listed = [e.text for e in r.observation.ui_elements if e.resource_id == f"{android_fake.NOTES}:id/note"]
    assert listed == ["alpha one", "beta two", second]
    r = act(env, action_type="long_press", index=index_of(r.observation, "beta two"))
    assert phone.selected == "beta two" and r.observation.ui_elements[index_of(r.observation, "beta two")].is_selected
    r = act(env, action_type="double_tap", index=index_of(r.observation, "alpha one"))
    assert phone.starred == {"alpha one"}
    act(env, action_type="wait")
    r = act(env, action_type="answer", text="two notes added")
    assert r.info["answer"] == "two notes added" and not r.done
    act(env, action_type="unknown")
    r = act(env, action_type="navigate_home")
    assert phone.app == android_fake.LAUNCHER
    instance = env.task_instance
    r = act(env, action_type="status", goal_status="complete")

    assert (r.done, r.success, r.info["termination"], r.info["score"]) == (True, True, "success", 1.0)
    assert not instance.initialized  # torn down by AndroidWorld's tear_down
    assert env.task_instance is None
    log = phone.adb_log
    for expected in ("swipe 360 320 0 320", "press BACK", f"start {android_fake.NOTES}", "press ENTER", "clear_text",
                     "long_press", "broadcast com.example.ACTION_UPDATE_OVERLAY", "press HOME"):
        assert any(line.startswith(expected) for line in log), f"{expected!r} not in the adb log"
    assert sum(line.startswith("tap ") for line in log) >= 6  # clicks, input_text's tap and the double tap's two
    with pytest.raises(RuntimeError, match="no episode is running"):
        act(env, action_type="wait")


def test_a_fractional_score_is_kept_and_is_not_success(env) -> None:
    env.reset(make_task("android_world/NotesAddTwoNotes", seed=2))
    first = env.task_instance.params["first"]
    r = act(env, action_type="open_app", app_name=android_fake.NOTES)
    act(env, action_type="input_text", index=index_of(r.observation, cls="android.widget.EditText"), text=first)
    r = act(env, action_type="status", goal_status="complete")
    assert (r.done, r.success, r.info["termination"], r.info["score"]) == (True, False, "agent_stop", 0.5)


def test_check_every_step_ends_the_episode_on_success() -> None:
    env = make(check_every_step=True)
    try:
        observation = env.reset(make_task("android_world/NotesAddNote", seed=5))
        title = env.task_instance.params["title"]
        r = act(env, action_type="click", index=index_of(observation, "Notes"))
        assert not r.done and r.info["score"] == 0.0
        r = act(env, action_type="input_text", index=index_of(r.observation, cls="android.widget.EditText"), text=title)
        assert (r.done, r.success, r.info["termination"]) == (True, True, "success")
    finally:
        env.close()


def test_params_come_from_the_seed_as_in_androidworlds_suite_utils(env) -> None:
    random.seed(123)
    expected_next = random.random()
    random.seed(123)
    goals = [env.reset(make_task("android_world/NotesAddNote", seed=s)).goal for s in (4, 4, 9)]
    assert random.random() == expected_next  # the caller's global random state is put back
    random.seed(4)
    assert env.task_instance.params["seed"] == 9
    assert goals[0] == goals[1] == NotesAddNote.template.format(**NotesAddNote.generate_random_params())
    params = env.reset(make_task("android_world/NotesAddNote", seed=4, title="pinned")).goal
    assert "'pinned'" in params  # Task.params override generated ones


def test_the_step_budget_is_ten_times_complexity_unless_set(env) -> None:
    env.reset(make_task("android_world/NotesAddTwoNotes", seed=1))
    assert act(env, action_type="navigate_home").info["max_steps"] == int(10 * NotesAddTwoNotes.complexity) == 15
    env.reset(make_task("android_world/NotesAddNote", seed=1).model_copy(update={"max_steps": 2}))
    assert not act(env, action_type="navigate_home").done
    r = act(env, action_type="navigate_home")
    assert (r.done, r.success, r.info["termination"], r.info["score"]) == (True, False, "max_steps", 0.0)
    other = make(max_steps=3)
    try:
        other.reset(make_task("android_world/NotesAddNote", seed=1))
        assert act(other, action_type="navigate_home").info["max_steps"] == 3
    finally:
        other.close()


def test_out_of_range_and_refused_actions_are_invalid_and_change_nothing(env) -> None:
    observation = env.reset(make_task("android_world/NotesAddNote", seed=1))
    phone = env.async_env.phone
    before = list(phone.adb_log)
    with pytest.raises(InvalidAction, match="element index 2 is not on the screen"):
        act(env, action_type="click", index=len(observation.ui_elements))
    with pytest.raises(InvalidAction):
        env.step({"action_type": "scroll", "direction": "sideways"})
    assert phone.adb_log == before and env.steps_taken == 0 and env.healthy()
    assert act(env, action_type="navigate_home").info["step"] == 1


def test_unknown_task_names_say_what_exists(env) -> None:
    with pytest.raises(ValueError, match="did you mean NotesAddNote"):
        env.reset(make_task("android_world/NotesAddNot"))
    with pytest.raises(ValueError, match="android_world/<Task>"):
        env.reset(make_task("miniwob/click-test"))


def test_the_default_registry_is_androidworlds_task_registry() -> None:
    env = make_env("android_world", launcher=LAUNCHER)  # android_world.registry: the fake's stand-in here
    try:
        assert set(env.tasks()) == {"NotesAddNote", "NotesAddTwoNotes"}
        env.reset(make_task("android_world/NotesAddNote"))
    finally:
        env.close()


def test_a_crashed_device_is_env_crashed_until_restart(env) -> None:
    env.reset(make_task("android_world/NotesAddNote", seed=1))
    old = env.async_env
    old.crash()
    with pytest.raises(EnvCrashed, match="AdbControllerError"):
        act(env, action_type="navigate_home")
    assert env.healthy() is False
    with pytest.raises(EnvCrashed, match="restart"):
        env.reset(make_task("android_world/NotesAddNote", seed=1))
    env.restart()
    assert env.healthy() is True and env.async_env is not old
    assert env.reset(make_task("android_world/NotesAddNote", seed=1)).goal


def test_a_frozen_device_is_env_crashed_after_the_call_timeout() -> None:
    env = make(call_timeout_s=0.5)
    try:
        env.reset(make_task("android_world/NotesAddNote", seed=1))
        frozen = env.async_env
        frozen.freeze()
        with pytest.raises(EnvCrashed, match=r"did not answer within 0\.5 s"):
            act(env, action_type="navigate_home")
        assert env.healthy() is False
        frozen.unfreeze()  # lets the stuck worker thread end
        env.restart()
        assert env.reset(make_task("android_world/NotesAddNote", seed=1)).goal
    finally:
        env.close()


def test_faults_named_in_the_environment_hit_the_first_launch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMIRE_ANDROID_FAKE_CRASH_AFTER", "2")
    monkeypatch.setattr(android_fake, "_launches", 0)
    env = make()
    try:
        env.reset(make_task("android_world/NotesAddNote", seed=1))
        act(env, action_type="navigate_home")
        with pytest.raises(EnvCrashed):
            act(env, action_type="navigate_home")
        env.restart()
        env.reset(make_task("android_world/NotesAddNote", seed=1))
        for _ in range(3):
            act(env, action_type="navigate_home")
    finally:
        env.close()


class CountingDevice:
    def __init__(self) -> None:
        self.restarts = 0
        self.up = True

    def healthy(self) -> bool:
        return self.up

    def restart(self) -> None:
        self.restarts += 1
        self.up = True


def test_a_device_control_answers_health_and_is_restarted() -> None:
    device = CountingDevice()
    env = make(device=device)
    try:
        env.reset(make_task("android_world/NotesAddNote", seed=1))
        device.up = False
        assert env.healthy() is False
        env.restart()
        assert device.restarts == 1 and env.healthy() is True
    finally:
        env.close()


def test_close_is_idempotent_and_refuses_later_calls(env) -> None:
    env.reset(make_task("android_world/NotesAddNote", seed=1))
    device = env.async_env
    env.close()
    env.close()
    assert env.healthy() is False and device.controller.closed
    with pytest.raises(RuntimeError, match="closed"):
        env.reset(make_task("android_world/NotesAddNote", seed=1))


def test_a_missing_androidworld_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import admire.envs.android_world as module

    monkeypatch.setattr(module, "missing", lambda *names: ["android_world"])
    with pytest.raises(MissingExtra) as caught:
        make()
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install 'admire[android]'" in message and "github.com/google-research/android_world" in message


def test_a_bad_launcher_is_one_line() -> None:
    with pytest.raises(ValueError, match="launcher must be 'module:attr'"):
        make_env("android_world", launcher="no_colon")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        make_env("android_world", launcher="tests.support.android_fake:nope")


def test_check_env_passes_against_the_fake() -> None:
    environment = {**os.environ, "ADMIRE_ANDROID_LAUNCHER": LAUNCHER, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "admire.envs.check_env", "android_world",
                           "--task", "android_world/NotesAddNote"], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "all 11 checks passed on android_world/NotesAddNote" in done.stdout
