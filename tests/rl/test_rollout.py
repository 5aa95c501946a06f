"""Rollout mechanics on a fake env: grouping, batching, budgets, format errors, crash re-runs."""

from __future__ import annotations

from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.types import Task, Termination
from tests.support.fakes import FormEnv, ScriptedPolicy

TYPE = {"action_type": "input_text", "index": 0, "text": "ann"}
SUBMIT = {"action_type": "click", "index": 1}


def tasks(k: int = 2) -> list[Task]:
    return [Task(name="fake/form", seed=i, params={"name": "ann"}) for i in range(k)]


def test_groups_are_full_ordered_and_batched_across_envs() -> None:
    envs = [FormEnv(), FormEnv()]
    policy = ScriptedPolicy([TYPE, SUBMIT])
    requests = group_requests(tasks(2), n=3)
    out = collect(requests, envs, policy, max_steps=5)
    assert [(t.group, t.info["replica"]) for t in out] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert all(t.termination is Termination.SUCCESS and t.outcome == 1.0 for t in out)
    assert all(len(t.steps) == 2 for t in out)
    assert max(policy.batch_sizes) == 2  # both envs decided in one call
    assert out[0].steps[0].grounded_description == 'typed "ann" into the \'Name\' field'
    assert out[0].steps[1].grounded_description == "clicked the 'Submit' button"


def test_step_budget_ends_as_max_steps() -> None:
    out = collect(group_requests(tasks(1), 1), [FormEnv()], ScriptedPolicy([TYPE]), max_steps=3)
    assert out[0].termination is Termination.MAX_STEPS and len(out[0].steps) == 3 and out[0].outcome == 0.0


def test_unparseable_output_is_a_format_error_that_costs_a_step() -> None:
    out = collect(group_requests(tasks(1), 1), [FormEnv()], ScriptedPolicy(["Reason: hmm\nAction: click it", TYPE,
                                                                           SUBMIT]), max_steps=5)
    first = out[0].steps[0]
    assert not first.format_valid and first.action is None and "no JSON object" in (first.parse_error or "")
    assert first.grounded_description == ""
    assert out[0].success and len(out[0].steps) == 3


def test_invalid_index_is_a_format_error_not_a_crash() -> None:
    env = FormEnv()
    out = collect(group_requests(tasks(1), 1), [env], ScriptedPolicy([{"action_type": "click", "index": 7}, TYPE,
                                                                      SUBMIT]), max_steps=5)
    first = out[0].steps[0]
    assert not first.format_valid and "out of range" in (first.parse_error or "")
    assert out[0].success and env.restarts == 0


def test_wrong_answer_ends_the_episode_as_a_failure() -> None:
    out = collect(group_requests(tasks(1), 1), [FormEnv()], ScriptedPolicy([SUBMIT]), max_steps=5)
    assert out[0].outcome == 0.0 and out[0].termination is Termination.AGENT_STOP
    assert out[0].info["raw_reward"] == -1.0


def test_a_crash_restarts_the_env_and_reruns_the_episode() -> None:
    env = FormEnv(crash_on_step=1, crash_times=1)
    stats = RolloutStats()
    out = collect(group_requests(tasks(1), 2), [env], ScriptedPolicy([TYPE, SUBMIT]), max_steps=5, stats=stats)
    assert [t.termination for t in out] == [Termination.SUCCESS, Termination.SUCCESS]
    assert env.restarts == 1 and stats.env_errors == 1 and stats.reruns == 1
    assert env.resets == 3  # two episodes, one re-run


def test_an_env_that_keeps_crashing_yields_an_env_error_trajectory() -> None:
    env = FormEnv(crash_on_step=0, crash_times=100)
    out = collect(group_requests(tasks(1), 1), [env], ScriptedPolicy([TYPE]), max_steps=5, max_reruns=2)
    assert out[0].termination is Termination.ENV_ERROR and out[0].excluded
    assert env.resets == 3


def test_on_episode_sees_each_final_trajectory_once() -> None:
    seen = []
    env = FormEnv(crash_on_step=1, crash_times=1)
    out = collect(group_requests(tasks(2), 2), [env], ScriptedPolicy([TYPE, SUBMIT]), max_steps=5,
                  on_episode=seen.append)
    assert sorted(t.id for t in seen) == sorted(t.id for t in out)
