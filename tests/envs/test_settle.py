"""The settled screen (issue 13, item 10): observations are read once the page is quiet, so a seeded
run is reproducible. Real Chromium; the shared session env."""

from __future__ import annotations

import contextlib
import time

import pytest
import torch

from admire.agent.dom_policy import DomPolicy
from admire.envs import make_task
from admire.envs.miniwob import MiniWoBEnv
from admire.envs.miniwob_settle import DEFAULT_SETTLE_MAX_S, DEFAULT_SETTLE_QUIET_S
from admire.envs.suites import EVAL_SEED_START
from admire.rl.rollout import collect, group_requests
from admire.types import Action, Observation
from tests.support.fakes import TrigramEncoder

pytestmark = pytest.mark.browser

AUTOCOMPLETE = "miniwob/use-autocomplete"


@contextlib.contextmanager
def settle_defaults(env: MiniWoBEnv):
    """The shared env with the default settle options, restored afterwards whatever a test set."""
    saved = (env.settle_quiet_s, env.settle_max_s)
    env.settle_quiet_s, env.settle_max_s = DEFAULT_SETTLE_QUIET_S, DEFAULT_SETTLE_MAX_S
    try:
        yield env
    finally:
        env.settle_quiet_s, env.settle_max_s = saved


def suggestions(observation: Observation, prefix: str) -> list[str]:
    return [e.text for e in observation.ui_elements
            if not e.is_editable and e.text and e.text.startswith(prefix) and e.class_name in ("div", "li", "a")]


def type_prefix(env: MiniWoBEnv, seed: int):
    observation = env.reset(make_task(AUTOCOMPLETE, seed=seed))
    prefix = env.ground_truth()["start"]
    box = next(i for i, e in enumerate(observation.ui_elements) if e.is_editable)
    return prefix, env.step(Action(action_type="input_text", index=box, text=prefix, clear_text=True))


def test_the_autocomplete_menu_is_in_the_observation_right_after_typing(miniwob_env):
    # jQuery-UI opens the menu 300 ms after the last keystroke; read at once, the screen has no menu.
    with settle_defaults(miniwob_env) as env:
        prefix, result = type_prefix(env, seed=EVAL_SEED_START)
        assert suggestions(result.observation, prefix), [e.text for e in result.observation.ui_elements]
        assert result.info["settled"] is True and result.info["settle_s"] > 0


def test_a_reset_shows_no_menu_left_open_by_the_last_episode(miniwob_env):
    with settle_defaults(miniwob_env) as env:
        prefix, result = type_prefix(env, seed=EVAL_SEED_START)
        assert suggestions(result.observation, prefix)
        fresh = env.reset(make_task(AUTOCOMPLETE, seed=EVAL_SEED_START + 1))
        assert suggestions(fresh, prefix) == []
        assert all(not e.text for e in fresh.ui_elements if e.class_name in ("li", "div"))


def test_settle_options_are_validated():
    with pytest.raises(ValueError, match="settle_max_s"):
        MiniWoBEnv(settle_max_s=-1)
    with pytest.raises(ValueError, match="settle_quiet_s"):
        MiniWoBEnv(settle_quiet_s=60)


TASKS = (("use-autocomplete", 3), ("click-collapsible", 1))
"""Seeds 1,000,000-1,000,002 of use-autocomplete include one (…001) where, read at once, the untrained
policy's second step depends on whether the menu had time to open."""


class ThinkingPolicy:
    """A policy that takes ``delay_s`` before each decision, as a slower or busier machine would."""

    def __init__(self, policy: DomPolicy, delay_s: float) -> None:
        self.policy, self.delay_s = policy, delay_s

    def act(self, observations, histories, greedy: bool = False):
        time.sleep(self.delay_s)
        return self.policy.act(observations, histories, greedy=greedy)


def evaluation(env: MiniWoBEnv, delay_s: float, order: int) -> dict[tuple[str, int], tuple[float, tuple[str, ...]]]:
    """A greedy seeded evaluation of a fixed untrained policy: outcome and actions per (task, seed).
    ``order`` (1 or -1) changes what ran on the browser before each episode."""
    policy = ThinkingPolicy(DomPolicy(seed=0, prior_strength=1.0, encoder=TrigramEncoder(dim=384)), delay_s)
    tasks = [make_task(f"miniwob/{t}", seed=EVAL_SEED_START + i) for t, n in TASKS for i in range(n)][::order]
    with torch.no_grad():
        trajectories = collect(group_requests(tasks, 1), [env], policy, max_steps=4, greedy=True)
    return {(t.task.name, t.task.seed): (t.outcome, tuple(s.raw_output for s in t.steps)) for t in trajectories}


def test_the_same_seeded_evaluation_twice_gives_the_same_episodes(miniwob_env):
    # Once as fast as it goes, once with 0.4 s of thinking per step and in the reverse order.
    with settle_defaults(miniwob_env) as env:
        first = evaluation(env, delay_s=0.0, order=1)
        second = evaluation(env, delay_s=0.4, order=-1)
    assert len(first) == sum(n for _, n in TASKS)
    assert {k: v[0] for k, v in first.items()} == {k: v[0] for k, v in second.items()}
    assert first == second  # the same actions too, not only the same outcomes
