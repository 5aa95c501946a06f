"""Gymnasium interop both ways: an ADMIRE backend as a ``gymnasium.Env`` (Gymnasium's own ``check_env``
passes, with its warnings as errors, on the fake backend and on real MiniWoB++), and a Gymnasium text
env as an ADMIRE backend that rollouts train on."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from admire.envs.base import EnvCrashed, GuiEnv, InvalidAction, make_env, make_task
from admire.envs.check_env import check_env as check_backend
from admire.envs.check_env import failures
from admire.envs.gym import AdmireGymEnv, GymBackend, UnicodeText, gym_id, register_task, screen_text
from admire.rl.rollout import collect, group_requests
from admire.types import Action, Observation, Termination, UIElement
from tests.support.fakes import FormEnv, ScriptedPolicy

TYPE_ANN = 'Reason: the field wants the name.\nAction: {"action_type": "input_text", "index": 0, "text": "ann"}'
SUBMIT = '{"action_type": "click", "index": 1}'
FAKE_ID = "admire-test/fake-form-v0"
MAGIC_ID = "admire-test/Magic-v0"


def strict_check(env: gymnasium.Env) -> None:
    """Gymnasium's checker with every warning it raises turned into a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


@pytest.fixture
def fake_gym_id() -> Iterator[str]:
    gymnasium.register(id=FAKE_ID, entry_point=lambda **kw: AdmireGymEnv("fake/form", backend=FormEnv(), **kw),
                       kwargs={"max_steps": 4})
    yield FAKE_ID
    del gymnasium.registry[FAKE_ID]


# --------------------------------------------------------------------------------------------------
# ADMIRE backend → gymnasium.Env
# --------------------------------------------------------------------------------------------------

def test_check_env_passes_on_the_fake_backend(fake_gym_id: str) -> None:
    env = gymnasium.make(fake_gym_id, render_mode="ansi")
    strict_check(env)  # spaces, seeded reset determinism, step determinism, render modes, double close
    env.close()


def test_reward_is_the_outcome_and_the_episode_terminates_on_success() -> None:
    backend = FormEnv()
    env = AdmireGymEnv("fake/form", backend=backend, max_steps=5)
    text, info = env.reset(seed=3, options={"params": {"name": "ann"}})
    assert text.startswith('Goal: Enter "ann" and press Submit.') and "[1] button 'Submit' (clickable)" in text
    assert info == {"task": "fake/form", "seed": 3, "goal": 'Enter "ann" and press Submit.'}
    assert text in env.observation_space
    _, reward, terminated, truncated, info = env.step(TYPE_ANN)
    assert (reward, terminated, truncated, info["format_valid"]) == (0.0, False, False, True)
    assert "value='ann'" in env.step(TYPE_ANN)[0]
    _, reward, terminated, truncated, info = env.step(SUBMIT)
    assert (reward, terminated, truncated, info["success"], info["termination"]) == (1.0, True, False, True, "success")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(SUBMIT)
    env.close()
    assert backend.closed


def test_malformed_or_refused_output_is_a_format_invalid_step_that_counts_against_the_budget() -> None:
    env = AdmireGymEnv("fake/form", backend=FormEnv(), max_steps=3, invalid_reward=-0.5)
    first, _ = env.reset(seed=0)
    text, reward, terminated, truncated, info = env.step("I think I should click something")
    assert (text, reward, terminated, truncated) == (first, -0.5, False, False)
    assert not info["format_valid"] and info["parse_error"]
    _, reward, _, _, info = env.step({"action_type": "click", "index": 7})  # parses, but the screen refuses it
    assert (reward, info["format_valid"]) == (-0.5, False) and info["parse_error"].startswith("invalid action:")
    _, reward, terminated, truncated, info = env.step(TYPE_ANN)
    assert (reward, terminated, truncated, info["termination"]) == (0.0, False, True, Termination.MAX_STEPS.value)


def test_a_wrong_answer_terminates_with_reward_zero_and_the_agents_stop_terminates() -> None:
    env = AdmireGymEnv("fake/form", backend=FormEnv(), max_steps=5)
    env.reset(seed=0, options={"params": {"name": "bob"}})
    env.step(TYPE_ANN)
    _, reward, terminated, truncated, info = env.step(SUBMIT)
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step('{"action_type": "status", "goal_status": "infeasible"}')
    assert (reward, terminated, info["termination"]) == (0.0, True, "agent_stop")


def test_seed_maps_to_the_task_seed_and_unseeded_resets_draw_from_np_random() -> None:
    class SeedRecorder(FormEnv):
        def __init__(self) -> None:
            super().__init__()
            self.tasks = []

        def reset(self, task):
            self.tasks.append(task)
            return super().reset(task)

    backend = SeedRecorder()
    env = AdmireGymEnv("fake/form", backend=backend, max_steps=6)
    env.reset(seed=42)
    env.reset()
    env.reset(seed=42)
    env.reset()
    seeds = [t.seed for t in backend.tasks]
    assert seeds[0] == seeds[2] == 42 and seeds[1] == seeds[3] != 42  # reproducible from the reset seed
    assert all(t.max_steps == 6 and t.name == "fake/form" for t in backend.tasks)
    env.reset(seed=1, options={"task": "fake/other"})
    assert backend.tasks[-1].name == "fake/other"
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"level": 3})


def test_a_crashed_backend_is_restarted_and_the_crash_reaches_the_caller() -> None:
    backend = FormEnv(crash_on_step=0)
    env = AdmireGymEnv("fake/form", backend=backend, close_backend=False)
    env.reset(seed=0)
    with pytest.raises(EnvCrashed):
        env.step(TYPE_ANN)
    assert backend.restarts == 1
    env.reset(seed=0)
    assert not env.step(TYPE_ANN)[2]
    env.close()
    assert not backend.closed  # close_backend=False: a shared backend stays open


def test_screenshots_add_an_rgb_box_and_long_screens_are_cut_to_the_text_space() -> None:
    env = AdmireGymEnv("fake/form", backend=FormEnv(), screenshots=True, screenshot_shape=(20, 10))
    observation, _ = env.reset(seed=0)
    assert isinstance(env.observation_space, spaces.Dict) and observation in env.observation_space
    assert observation["screenshot"].shape == (20, 10, 3) and observation["screenshot"].dtype == np.uint8

    crowded = Observation(goal="g", ui_elements=tuple(UIElement(text=f"item {i}", is_clickable=True)
                                                      for i in range(500)))
    text = screen_text(crowded, max_chars=400)
    assert len(text) <= 400 and text.endswith("more elements)") and "[0] element 'item 0'" in text
    assert "Zürich ✓" in UnicodeText(100) and "x" * 101 not in UnicodeText(100)


def test_miniwob_tasks_have_registered_ids() -> None:
    assert gym_id("miniwob/login-user") == "admire/miniwob-login-user-v0"
    spec = gymnasium.spec("admire/miniwob-click-test-v0")
    assert spec.entry_point == "admire.envs.gym:AdmireGymEnv" and spec.kwargs["task"] == "miniwob/click-test"
    assert len([i for i in gymnasium.registry if i.startswith("admire/miniwob-")]) > 100


@pytest.mark.browser
def test_check_env_passes_on_real_miniwob_and_an_episode_succeeds() -> None:
    env = gymnasium.make("admire.envs.gym:admire/miniwob-click-test-v0", render_mode="ansi")
    try:
        strict_check(env)  # starts two more browsers of its own (render-mode and close checks)
        text, _ = env.reset(seed=5)
        assert text.startswith("Goal: Click the button.") and "[0] button 'Click Me!' (clickable)" in text
        assert env.render() == text
        _, reward, terminated, truncated, info = env.step('Reason: the only button.\nAction: '
                                                          '{"action_type": "click", "index": 0}')
        assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    finally:
        env.close()
    assert not env.unwrapped.backend.healthy()  # close closed the browser


# --------------------------------------------------------------------------------------------------
# gymnasium.Env with text observations → ADMIRE backend
# --------------------------------------------------------------------------------------------------

class MagicWordEnv(gymnasium.Env):
    """Say the seeded magic word (typed, or picked from the listed options) within three tries."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    WORDS = ("open sesame", "abracadabra", "hocus pocus")

    def __init__(self, success_in_info: bool = True) -> None:
        self.observation_space = UnicodeText(1000)
        self.action_space = UnicodeText(100)
        self.success_in_info = success_in_info
        self.closed = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.word = (options or {}).get("word") or self.WORDS[int(self.np_random.integers(len(self.WORDS)))]
        self.tries = 0
        return self._text("Say the magic word."), {"goal": f"Say the magic word: {self.word}"}

    def step(self, action: str):
        self.tries += 1
        ok = action.strip().lower() == self.word
        info = {"success": ok} if self.success_in_info else {}
        return self._text("Right!" if ok else "Wrong."), float(ok), ok or self.tries >= 3, False, info

    def _text(self, status: str) -> str:
        return status + "\nOptions:\n" + "\n".join(self.WORDS)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def magic_id() -> Iterator[str]:
    gymnasium.register(id=MAGIC_ID, entry_point=MagicWordEnv)
    yield MAGIC_ID
    del gymnasium.registry[MAGIC_ID]


def magic_task(seed: int = 0, **params: Any):
    return make_task(f"gym/{MAGIC_ID}", seed=seed, **params)


def test_the_gym_backend_keeps_the_backend_protocol(magic_id: str) -> None:
    backend = make_env(f"gym:{magic_id}", max_steps=5, screenshots=False)
    assert isinstance(backend, GymBackend) and isinstance(backend, GuiEnv)
    observation = backend.reset(magic_task(seed=0, word="abracadabra"))
    assert observation.goal == "Say the magic word: abracadabra"
    assert [e.text for e in observation.ui_elements[1:]] == ["Say the magic word.", "Options:", *MagicWordEnv.WORDS]
    assert observation.ui_elements[0].is_editable
    result = backend.step(Action(action_type="input_text", index=0, text="open sesame"))
    assert (result.done, result.success, result.info["raw_reward"]) == (False, False, 0.0)
    assert result.info["screen_changed"]
    with pytest.raises(InvalidAction, match="text env takes"):
        backend.step(Action(action_type="scroll", direction="down"))
    result = backend.step(Action(action_type="click", index=4))  # the line "abracadabra"
    assert (result.done, result.success, result.info["termination"]) == (True, True, "success")
    assert backend.healthy()
    backend.restart()
    assert backend.reset(magic_task(seed=0, word="abracadabra")).goal.endswith("abracadabra")
    stop = backend.step(Action(action_type="status", goal_status="infeasible"))
    assert (stop.done, stop.success, stop.info["termination"]) == (True, False, "agent_stop")
    inner = backend._env.unwrapped
    backend.close()
    assert not backend.healthy() and inner.closed
    with pytest.raises(ValueError, match="wraps"):
        GymBackend(magic_id).reset(make_task("gym/Other-v0"))


def test_the_gym_backend_passes_the_backend_conformance_suite(magic_id: str) -> None:
    results = check_backend(GymBackend(magic_id, max_steps=5), magic_task(seed=3))
    assert failures(results) == [] and not any(r.skipped for r in results), [r.line() for r in results]


def test_success_falls_back_to_the_reward_threshold_and_the_budget_ends_episodes(magic_id: str) -> None:
    backend = GymBackend(max_steps=2, make_kwargs={"success_in_info": False})
    backend.reset(magic_task(word="hocus pocus"))
    assert backend.step(Action(action_type="answer", text="hocus pocus")).success
    backend.reset(magic_task(word="hocus pocus"))
    backend.step(Action(action_type="answer", text="nope"))
    last = backend.step(Action(action_type="answer", text="nope"))
    assert (last.done, last.success, last.info["termination"]) == (True, False, "max_steps")
    with pytest.raises(ValueError, match="gym/<gymnasium id>"):
        backend.reset(make_task("miniwob/click-test"))
    backend.close()


def test_a_rollout_through_collect_trains_on_a_gymnasium_text_env(magic_id: str) -> None:
    envs = [GymBackend(magic_id, max_steps=4) for _ in range(2)]
    policy = ScriptedPolicy([{"action_type": "input_text", "index": 0, "text": "open sesame"},
                             {"action_type": "input_text", "index": 0, "text": "abracadabra"},
                             {"action_type": "input_text", "index": 0, "text": "hocus pocus"}])
    tasks = [magic_task(seed=s) for s in range(3)]
    trajectories = collect(group_requests(tasks, 2), envs, policy, max_steps=4)
    assert len(trajectories) == 6
    for trajectory in trajectories:
        word = trajectory.goal.split(": ", 1)[1]
        assert trajectory.termination is Termination.SUCCESS and trajectory.outcome == 1.0
        assert len(trajectory.steps) == MagicWordEnv.WORDS.index(word) + 1  # tried in order until right
        assert all(step.format_valid for step in trajectory.steps)
    for env in envs:
        env.close()


def test_both_directions_compose_into_an_env_gymnasium_accepts(magic_id: str) -> None:
    env_id = register_task(f"gym/{magic_id}", max_steps=3)  # gymnasium text env → backend → gymnasium.Env
    try:
        assert env_id == "admire/gym-admire-test-Magic-v0"
        env = gymnasium.make(env_id, render_mode="ansi")
        strict_check(env)
        text, _ = env.reset(seed=0, options={"params": {"word": "open sesame"}})
        assert "[0] field 'reply' (clickable, editable)" in text
        action = 'Action: {"action_type": "input_text", "index": 0, "text": "open sesame"}'
        _, reward, terminated, _, _ = env.step(action)
        assert (reward, terminated) == (1.0, True)
        env.close()
    finally:
        del gymnasium.registry[env_id]
