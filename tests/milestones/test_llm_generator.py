"""Φ_llm and its fallback, against a real local HTTP server speaking the OpenAI chat API."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from admire.llm import ChatClient
from admire.milestones.bank import MilestoneBank
from admire.milestones.generator import HeuristicGenerator, MilestoneGenerator, make_generator
from admire.milestones.llm_generator import LLMGenerator
from admire.milestones.update import slot_phrases, update_bank
from tests.support.llm_cases import LOGIN_GOAL, login_trajectory, shortcut_trajectory
from tests.support.openai_stub import OpenAIStub, Reply, completion, error, hang, json_answer

LLM_MILESTONES = ["typed \"alice\" into the 'Username' field", "typed \"x1\" into the 'Password' field",
                  "clicked the 'Login' button"]
CURRENT = ["clicked the 'Username' field", "typed \"alice\" into the 'Username' field",
           "clicked the 'Password' field", "typed \"x1\" into the 'Password' field", "clicked the 'Login' button"]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def generator_for(stub: OpenAIStub, fallback: MilestoneGenerator | None = None) -> LLMGenerator:
    client = ChatClient(stub.url, "milestone-model", timeout=stub.client_timeout(), max_retries=1, backoff=0.01)
    return LLMGenerator(client, fallback=fallback)


def prompt_of(stub: OpenAIStub, number: int = 0) -> str:
    return stub.requests[number].body["messages"][0]["content"]


def test_good_initialise_answer_is_used(stub: OpenAIStub) -> None:
    trajectory = login_trajectory()
    stub.script(json_answer({"milestones": ["  typed \"alice\" into the 'Username' field ", *LLM_MILESTONES[1:]]}))
    generator = generator_for(stub)
    milestones = generator.initialise(trajectory)
    assert milestones == LLM_MILESTONES
    assert milestones != HeuristicGenerator().initialise(trajectory)  # the LLM's answer, not the fallback's
    assert (generator.fallbacks, generator.last_error, generator.calls) == (0, None, 1)


def test_initialise_prompt_shows_goal_grounded_steps_and_reasons(stub: OpenAIStub) -> None:
    trajectory = login_trajectory()
    stub.script(json_answer({"milestones": LLM_MILESTONES}))
    generator_for(stub).initialise(trajectory)
    prompt = prompt_of(stub)
    assert LOGIN_GOAL in prompt
    assert "1. clicked the 'Username' field — agent's reason: Focus the username field first." in prompt
    assert "3. waited (no visible effect)" in prompt
    assert "7. clicked the 'Login' button — agent's reason: Submit the form." in prompt  # step 7 did not parse
    assert "(invalid output)" not in prompt
    assert "between 2 and 8 milestones" in prompt
    assert "Copy each milestone verbatim from one step description above" in prompt  # keeps signatures
    assert "$" not in prompt  # every placeholder was filled


def test_answer_with_chatter_and_fences_is_used(stub: OpenAIStub) -> None:
    fenced = '```json\n{"milestones": ["clicked the \'Login\' button", "typed \\"x1\\""]}\n```'
    stub.script(completion("Sure, here are the milestones:\n" + fenced))
    assert generator_for(stub).initialise(login_trajectory()) == ["clicked the 'Login' button", 'typed "x1"']


@pytest.mark.parametrize(
    ("replies", "reason"),
    [
        ([completion("The milestones are: log in, then submit.")], "no a JSON object with 'milestones'"),
        ([completion('{"milestones": ["a", "b"')], "no a JSON object with 'milestones'"),
        ([json_answer({"milestones": ["clicked the 'Login' button"]})], "expected 2 to 8 milestones, got 1"),
        # a repeated checkpoint is one checkpoint: K counts after collapsing, as for the heuristic
        ([json_answer({"milestones": ["clicked the 'Login' button"] * 2})], "expected 2 to 8 milestones, got 1"),
        ([json_answer({"milestones": [f"step {i}" for i in range(9)]})], "expected 2 to 8 milestones, got 9"),
        ([json_answer({"milestones": ["clicked the 'Login' button", "   "]})], "milestone 2 is empty"),
        ([json_answer({"milestones": ["clicked", 3]})], "milestone 2 is not a string"),
        ([json_answer({"milestones": "clicked login"})], "'milestones' must be a list"),
        ([json_answer({"milestones": ["x" * 201, "clicked"]})], "longer than 200 characters"),
        ([error(500, "upstream crashed"), error(500, "upstream crashed")], "HTTP 500"),
        ([hang(2.0), hang(2.0)], "timeout"),
        ([error(401, "bad key")], "HTTP 401"),
    ],
)
def test_bad_initialise_answer_falls_back_to_the_heuristic(
    stub: OpenAIStub, caplog: pytest.LogCaptureFixture, replies: list[Reply], reason: str
) -> None:
    trajectory = login_trajectory()
    before = trajectory.to_json()
    stub.script(*replies)
    generator = generator_for(stub)
    with caplog.at_level(logging.WARNING, logger="admire.milestones"):
        milestones = generator.initialise(trajectory)
    assert milestones == HeuristicGenerator().initialise(trajectory)
    assert generator.fallbacks == 1
    assert reason in (generator.last_error or "")
    assert any(reason in r.getMessage() and "heuristic" in r.getMessage() and trajectory.id in r.getMessage()
               for r in caplog.records)
    assert trajectory.to_json() == before  # training data intact
    assert stub.pending() == 0


def test_the_given_fallback_is_the_one_used(stub: OpenAIStub) -> None:
    trajectory = login_trajectory()
    stub.script(completion("no json"))
    fallback = HeuristicGenerator(max_milestones=2)
    assert generator_for(stub, fallback=fallback).initialise(trajectory) == fallback.initialise(trajectory)
    assert len(fallback.initialise(trajectory)) == 2


def test_fallbacks_are_counted_and_the_llm_is_used_again_when_it_recovers(stub: OpenAIStub) -> None:
    trajectory = login_trajectory()
    stub.script(error(400, "bad request"), completion("nonsense"), json_answer({"milestones": LLM_MILESTONES}))
    generator = generator_for(stub)
    heuristic = HeuristicGenerator().initialise(trajectory)
    assert [generator.initialise(trajectory) for _ in range(3)] == [heuristic, heuristic, LLM_MILESTONES]
    assert generator.fallbacks == 2
    assert "no a JSON object" in (generator.last_error or "")


# --------------------------------------------------------------------------------------------------
# update
# --------------------------------------------------------------------------------------------------

def test_update_not_better_keeps_the_list(stub: OpenAIStub) -> None:
    stub.script(json_answer({"better": False, "milestones": [], "reason": "same path"}))
    generator = generator_for(stub)
    assert generator.update(CURRENT, shortcut_trajectory()) is None
    assert generator.fallbacks == 0
    prompt = prompt_of(stub)
    assert "1. clicked the 'Username' field\n2. typed \"alice\" into the 'Username' field" in prompt
    assert "3. clicked the 'Login' button" in prompt  # the new run's last step
    assert "copied verbatim from a step description of the new run" in prompt
    assert "<v1> is the first value named in the instruction" in prompt
    assert "$" not in prompt


def test_update_better_returns_the_new_list(stub: OpenAIStub) -> None:
    stub.script(json_answer({"better": True, "milestones": LLM_MILESTONES, "reason": "skips the clicks"}))
    generator = generator_for(stub)
    assert generator.update(CURRENT, shortcut_trajectory()) == LLM_MILESTONES
    assert generator.fallbacks == 0


def test_update_better_with_the_same_list_keeps_it(stub: OpenAIStub) -> None:
    stub.script(json_answer({"better": True, "milestones": CURRENT}))
    assert generator_for(stub).update(CURRENT, shortcut_trajectory()) is None


@pytest.mark.parametrize(
    ("replies", "reason"),
    [
        ([completion("yes it is better")], "no a JSON object with 'better'"),
        ([json_answer({"better": "yes", "milestones": LLM_MILESTONES})], "\"better\": true or false"),
        ([json_answer({"better": True, "milestones": ["only one"]})], "expected 2 to 8 milestones, got 1"),
        ([json_answer({"better": True})], "no 'milestones'"),
        ([error(503, "loading"), error(503, "loading")], "HTTP 503"),
        ([hang(2.0), hang(2.0)], "timeout"),
    ],
)
def test_bad_update_answer_falls_back_to_the_heuristic_update(
    stub: OpenAIStub, caplog: pytest.LogCaptureFixture, replies: list[Reply], reason: str
) -> None:
    trajectory = shortcut_trajectory()
    before = trajectory.to_json()
    stub.script(*replies)
    generator = generator_for(stub)
    with caplog.at_level(logging.WARNING, logger="admire.milestones"):
        result = generator.update(CURRENT, trajectory)
    expected = HeuristicGenerator().update(CURRENT, trajectory)
    assert expected is not None  # the shortcut is strictly shorter, so the heuristic rewrites the list
    assert result == expected
    assert generator.fallbacks == 1
    assert reason in (generator.last_error or "")
    assert any(reason in r.getMessage() for r in caplog.records)
    assert trajectory.to_json() == before


# --------------------------------------------------------------------------------------------------
# with the bank: slotted lists, K >= 2, fallback in slotted space
# --------------------------------------------------------------------------------------------------

def _slot(phrases):
    return slot_phrases(phrases, LOGIN_GOAL, "positional")


SLOTTED = ["typed \"<v1>\" into the 'Username' field", "typed \"<v2>\" into the 'Password' field",
           "clicked the 'Login' button"]


def test_update_with_slot_returns_the_answer_slotted(stub: OpenAIStub) -> None:
    stub.script(json_answer({"better": True, "milestones": LLM_MILESTONES}))
    assert generator_for(stub).update(CURRENT, shortcut_trajectory(), slot=_slot) == SLOTTED


def test_update_fallback_merges_in_slotted_space(stub: OpenAIStub) -> None:
    # The stored list is slotted; the heuristic fallback slots the new run before merging, so a run that
    # passes through every stored checkpoint changes nothing (rather than "no common checkpoint").
    stub.script(completion("no json"))
    generator = generator_for(stub)
    assert generator.update(SLOTTED, shortcut_trajectory(), slot=_slot, rule="common") is None
    assert generator.fallbacks == 1


def test_llm_answers_go_through_the_bank_slotted_with_k_of_at_least_two(stub: OpenAIStub, tmp_path: Path) -> None:
    twice = ["clicked the 'Login' button", "clicked the 'Login' button"]
    stub.script(json_answer({"milestones": LLM_MILESTONES}), json_answer({"better": True, "milestones": twice}))
    generator = generator_for(stub)
    with MilestoneBank(tmp_path / "bank.sqlite") as bank:
        [init] = update_bank(bank, [login_trajectory()], generator, key="skeleton")
        assert list(init.after.milestones) == SLOTTED  # type: ignore[union-attr]
        # A "better" answer of one checkpoint (after collapsing) is invalid: the heuristic answers, and
        # the shortcut passes through all three checkpoints, so the list stays.
        [update] = update_bank(bank, [shortcut_trajectory()], generator, key="skeleton")
        assert update.kind == "kept" and generator.fallbacks == 1
        assert "expected 2 to 8 milestones, got 1" in (generator.last_error or "")
    assert stub.pending() == 0


# --------------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------------

def test_make_generator_builds_the_llm_generator_from_config_keys(stub: OpenAIStub) -> None:
    generator = make_generator("llm", base_url=stub.root_url, model="served", timeout=30.0, max_retries=0,
                               fallback="heuristic")
    assert isinstance(generator, LLMGenerator)
    assert isinstance(generator, MilestoneGenerator)
    assert isinstance(generator.fallback, HeuristicGenerator)
    stub.script(json_answer({"milestones": LLM_MILESTONES}))
    assert generator.initialise(login_trajectory()) == LLM_MILESTONES
    assert stub.requests[0].body["model"] == "served"


def test_make_generator_llm_without_endpoint_says_what_to_set() -> None:
    with pytest.raises(ValueError, match="missing 'base_url' and 'model'"):
        make_generator("llm")


def test_make_generator_llm_refuses_a_client_and_config_keys_together(stub: OpenAIStub) -> None:
    client = ChatClient(stub.url, "m")
    with pytest.raises(ValueError, match="not both"):
        make_generator("llm", client=client, model="other")
    with pytest.raises(ValueError, match="cannot fall back to itself"):
        make_generator("llm", client=client, fallback="llm")
