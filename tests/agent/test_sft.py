"""The supervised warm start of a token policy: demonstrations become answers in the policy's own format, and
imitating them lowers their negative log-likelihood (the tiny prepared Qwen2)."""

from __future__ import annotations

import math

import pytest
import torch

from admire.actions import parse_model_output, validate_action
from admire.agent.sft import (
    DEMONSTRATION_REASON,
    answer_text,
    demonstration_answers,
    demonstration_reason,
    pretrain_tokens,
)
from admire.types import Observation, Step, Task, Termination, Trajectory, UIElement
from tests.support.models import tiny_qwen2_dir  # noqa: F401

SCREEN = Observation(goal='Click the "OK" button.', ui_elements=(
    UIElement(text="Cancel", class_name="button", is_clickable=True),
    UIElement(text="OK", class_name="button", is_clickable=True),
))


def demonstration(success: bool = True) -> Trajectory:
    action = validate_action({"action_type": "click", "index": 1})
    step = Step(index=0, observation=SCREEN, raw_output="Reason: x\nAction: {}", action=action)
    return Trajectory(id="demo-1", task=Task(name="miniwob/click-button"), goal=SCREEN.goal, steps=(step,),
                      outcome=1.0 if success else 0.0,
                      termination=Termination.SUCCESS if success else Termination.MAX_STEPS)


def test_an_answer_parses_back_to_its_action_with_the_grounded_description() -> None:
    action = validate_action({"action_type": "input_text", "index": 0, "text": "ann"})
    parsed = parse_model_output(answer_text(action, 'typed "ann" into the \'Username\' field'))
    assert parsed.action == action and parsed.reason == DEMONSTRATION_REASON
    assert parsed.description == 'typed "ann" into the \'Username\' field'


def test_only_successful_demonstrations_are_imitated_and_their_text_is_rewritten() -> None:
    decisions = demonstration_answers([demonstration(), demonstration(success=False)])
    assert len(decisions) == 1
    answer = parse_model_output(decisions[0].text)
    assert answer.description == "clicked the 'OK' button"
    assert answer.reason == "The 'OK' button is element 1."  # the element named before its number


def test_a_reason_names_the_acted_on_element_and_its_number_or_falls_back_to_the_fixed_sentence() -> None:
    typed = validate_action({"action_type": "input_text", "index": 0, "text": "ann"})
    field = Observation(goal="Log in.", ui_elements=(UIElement(hint_text="Username", class_name="input_text",
                                                                 is_editable=True),))
    assert demonstration_reason(typed, field) == "The 'Username' field is element 0."
    assert demonstration_reason(validate_action({"action_type": "wait"}), field) == DEMONSTRATION_REASON
    assert demonstration_reason(validate_action({"action_type": "click", "index": 5}), field) == DEMONSTRATION_REASON


def test_imitation_lowers_the_answers_negative_log_likelihood(tiny_qwen2_dir) -> None:  # noqa: F811
    from admire.agent.lm_policy import LMPolicy

    torch.set_num_threads(1)
    policy = LMPolicy(path=str(tiny_qwen2_dir))  # all weights: the random tiny model's head is its embedding
    done: list[int] = []
    metrics = pretrain_tokens(policy, [demonstration()], epochs=8, lr=3e-3, batch_size=1,
                              progress=lambda finished, total: done.append(finished))
    assert metrics["decisions"] == 1 and metrics["tokens"] > 10 and done == list(range(1, 9))
    assert metrics["nll_after"] < metrics["nll_before"] - 1.0


def test_nothing_to_imitate_and_bad_settings() -> None:
    empty = pretrain_tokens(object(), [demonstration(success=False)])
    assert empty["decisions"] == 0 and math.isnan(empty["nll_after"])
    with pytest.raises(ValueError, match="epochs >= 0, batch_size > 0 and lr > 0"):
        pretrain_tokens(object(), [], lr=0)
