"""The LLM step judge (reward.mode=judge), against a real local HTTP server speaking the OpenAI API."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from admire.judge import LLMJudge, read_scores
from admire.llm import ChatClient
from admire.types import Termination, Trajectory
from tests.support.llm_cases import LOGIN_GOAL, login_trajectory
from tests.support.openai_stub import OpenAIStub, completion, error, hang, json_answer, raw

SCORES = [0.2, 1.0, 0.0, 0.1, 0.0, 1.0, 0.0, 1.0]  # one per step of login_trajectory()


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def judge_for(stub: OpenAIStub, **options: object) -> LLMJudge:
    client = ChatClient(stub.url, "judge-model", timeout=stub.client_timeout(), max_retries=1, backoff=0.01)
    return LLMJudge(client, **options)  # type: ignore[arg-type]


def prompt_of(stub: OpenAIStub, number: int = 0) -> str:
    return stub.requests[number].body["messages"][0]["content"]


def test_good_answer_gives_one_score_per_step(stub: OpenAIStub) -> None:
    trajectory = login_trajectory()
    stub.script(json_answer({"scores": SCORES}))
    judge = judge_for(stub)
    assert judge.score(trajectory) == SCORES
    assert (judge.failures, judge.last_error) == (0, None)
    prompt = prompt_of(stub)
    assert LOGIN_GOAL in prompt
    for number, step in enumerate(trajectory.steps, start=1):
        assert f"{number}. {step.grounded_description or '(invalid output)'}" in prompt
    assert "agent's reason: Submit the form." in prompt
    assert "exactly 8 numbers" in prompt


def test_the_prompt_marks_steps_without_effect(stub: OpenAIStub) -> None:
    stub.script(json_answer({"scores": SCORES}))
    judge_for(stub).score(login_trajectory())
    assert "3. waited (no visible effect)" in prompt_of(stub)


def test_answer_in_a_code_fence_with_chatter_is_read(stub: OpenAIStub) -> None:
    stub.script(completion("Here you go:\n```json\n" + json.dumps({"scores": SCORES}) + "\n```"))
    assert judge_for(stub).score(login_trajectory()) == SCORES


def test_scores_are_clamped_to_the_unit_interval(stub: OpenAIStub) -> None:
    stub.script(json_answer({"scores": [-0.5, 1.7, 0.5, 3, -2, 1, 0, 0.25]}))
    assert judge_for(stub).score(login_trajectory()) == [0.0, 1.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.25]


@pytest.mark.parametrize(
    ("replies", "reason"),
    [
        ([json_answer({"scores": SCORES[:5]})], "expected 8 scores, one per step, got 5"),
        ([json_answer({"scores": [*SCORES[:7], "high"]})], "score 8 is not a finite number"),
        ([json_answer({"scores": [*SCORES[:7], True]})], "score 8 is not a finite number"),
        ([json_answer({"scores": "all good"})], "'scores' must be a list"),
        ([completion("I think the agent did well.")], "no a JSON object with 'scores'"),
        ([raw("<html>proxy error</html>")], "not JSON"),
        ([error(500, "boom"), error(500, "boom")], "HTTP 500"),
        ([hang(2.0), hang(2.0)], "timeout"),
    ],
)
def test_a_failed_answer_scores_all_zeros_and_is_logged(
    stub: OpenAIStub, caplog: pytest.LogCaptureFixture, replies: list, reason: str
) -> None:
    stub.script(*replies)
    judge = judge_for(stub)
    with caplog.at_level(logging.WARNING, logger="admire.judge"):
        scores = judge.score(login_trajectory())
    assert scores == [0.0] * 8
    assert judge.failures == 1
    assert reason in (judge.last_error or "")
    assert any(reason in record.getMessage() and "traj-login-1" in record.getMessage()
               for record in caplog.records)


def test_the_judge_recovers_after_a_failure(stub: OpenAIStub) -> None:
    stub.script(completion("not json"), json_answer({"scores": SCORES}))
    judge = judge_for(stub)
    assert judge.score(login_trajectory()) == [0.0] * 8
    assert judge.score(login_trajectory()) == SCORES
    assert judge.failures == 1


def test_long_trajectories_are_judged_in_windows_with_earlier_steps_as_context(stub: OpenAIStub) -> None:
    stub.script(json_answer({"scores": SCORES[0:3]}), json_answer({"scores": SCORES[3:6]}),
                json_answer({"scores": SCORES[6:8]}))
    trajectory = login_trajectory()
    assert judge_for(stub, max_steps_per_call=3).score(trajectory) == SCORES
    assert len(stub.requests) == 3
    first, last = prompt_of(stub, 0), prompt_of(stub, 2)
    assert "Earlier steps" not in first
    assert "exactly 3 numbers" in first and "exactly 2 numbers" in last
    assert "Earlier steps" in last
    context, to_score = last.split("Steps to score", 1)
    assert f"6. {trajectory.steps[5].grounded_description}" in context
    assert f"8. {trajectory.steps[7].grounded_description}" in to_score
    assert trajectory.steps[5].grounded_description not in to_score


def test_a_failed_window_zeroes_the_whole_trajectory(stub: OpenAIStub) -> None:
    stub.script(json_answer({"scores": SCORES[0:4]}), json_answer({"scores": [1.0]}))
    judge = judge_for(stub, max_steps_per_call=4)
    assert judge.score(login_trajectory()) == [0.0] * 8
    assert "expected 4 scores" in (judge.last_error or "")


def test_an_empty_trajectory_asks_nothing(stub: OpenAIStub) -> None:
    empty = Trajectory(id="t0", task=login_trajectory().task, goal=LOGIN_GOAL, termination=Termination.MAX_STEPS)
    assert judge_for(stub).score(empty) == []
    assert stub.requests == []


def test_the_trajectory_is_left_intact(stub: OpenAIStub) -> None:
    trajectory = login_trajectory()
    before = trajectory.to_json()
    stub.script(completion("garbage"))
    judge_for(stub).score(trajectory)
    assert trajectory.to_json() == before


def test_read_scores_rejects_nan() -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        read_scores('{"scores": [NaN]}', 1)


def test_from_config_builds_a_working_judge(stub: OpenAIStub) -> None:
    judge = LLMJudge.from_config({"base_url": stub.root_url, "model": "j", "max_steps_per_call": 4,
                                  "max_retries": 0})
    stub.script(json_answer({"scores": SCORES[:4]}), json_answer({"scores": SCORES[4:]}))
    assert judge.score(login_trajectory()) == SCORES
    assert [r.body["model"] for r in stub.requests] == ["j", "j"]


def test_bad_window_size_is_refused(stub: OpenAIStub) -> None:
    with pytest.raises(ValueError, match="max_steps_per_call"):
        judge_for(stub, max_steps_per_call=0)
