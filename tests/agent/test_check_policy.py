"""``python -m admire.agent.check_policy``: the policy contract the trainer relies on, checked on the real ``dom``
policy and the real ``lm`` policy (tiny-qwen2), and failing where a policy breaks it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from admire.agent.base import (
    Decision,
    PolicyOutput,
    TrainablePolicy,
    check_trainable,
    missing_methods,
    scores_tokens,
)
from admire.agent.check_policy import capabilities, check_policy, main
from admire.types import Observation, Step
from tests.support.fakes import FormPolicy, TokenFormPolicy
from tests.support.models import tiny_qwen2_dir  # noqa: F401


def by_name(results: Sequence[object]) -> dict[str, bool]:
    return {r.name: r.ok for r in results}  # type: ignore[attr-defined]


def test_the_dom_policy_keeps_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dom"]) == 0
    out = capsys.readouterr().out
    assert out.count("ok  ") == 6 and "capabilities: entropy" in out


def test_the_lm_policy_keeps_the_contract_with_its_token_checks(tiny_qwen2_dir: Path,  # noqa: F811
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["lm", "--option", f"path={tiny_qwen2_dir}", "--option", "max_new_tokens=6",
                 "--option", "lora=true"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ok   tokens:" in out and "answer tokens" in out
    assert "capabilities: tokens, reference, adapter" in out


def test_fake_policies_of_the_trainer_tests_keep_it_too() -> None:
    assert all(by_name(check_policy(FormPolicy(seed=0))).values())
    token = TokenFormPolicy(seed=0)
    assert scores_tokens(token) and all(by_name(check_policy(token)).values())


class NotAModule:
    """Acts and scores, but has no parameters, state or modes: a policy PPO could not train."""

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        return [PolicyOutput("Action: {}", None, -1.0) for _ in observations]

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        return torch.full((len(decisions),), -1.0, requires_grad=True)


def test_a_policy_without_module_methods_fails_the_protocol_check_and_is_refused_when_built() -> None:
    results = check_policy(NotAModule())
    assert [(r.name, r.ok) for r in results] == [("protocol", False)]
    assert "load_state_dict" in results[0].detail and "parameters" in results[0].detail
    assert missing_methods(NotAModule(), TrainablePolicy) == ["eval", "load_state_dict", "named_parameters",
                                                              "parameters", "state_dict", "train"]
    with pytest.raises(TypeError, match=r"'broken' policy .* cannot be trained: it has no eval, load_state_dict"):
        check_trainable(NotAModule(), "broken")


class Drifting(FormPolicy):
    """Reports a log-prob at act time that its ``log_prob`` does not give back: PPO's first ratio would not be 1."""

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        return [PolicyOutput(o.text, o.action, o.log_prob - 0.5, o.info) for o in super().act(observations, histories,
                                                                                               greedy)]


class Frozen(FormPolicy):
    """A log_prob that does not depend on the parameters: no gradient reaches them."""

    def log_prob(self, decisions: Sequence[Decision]) -> torch.Tensor:
        return super().log_prob(decisions).detach().requires_grad_()

    def log_prob_and_entropy(self, decisions: Sequence[Decision]) -> tuple[torch.Tensor, torch.Tensor]:
        new, entropy = super().log_prob_and_entropy(decisions)
        return new.detach().requires_grad_(), entropy


def test_a_policy_whose_scores_drift_or_do_not_train_fails_that_check() -> None:
    drifting = by_name(check_policy(Drifting(seed=0)))
    assert drifting["protocol"] and drifting["act"] and not drifting["log_prob"]
    frozen = by_name(check_policy(Frozen(seed=0)))
    assert frozen["log_prob"] and not frozen["gradient"]


def test_a_bad_option_or_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-policy"]) == 2
    assert "cannot build 'no-such-policy'" in capsys.readouterr().err
    assert main(["dom", "--option", "hidden_size"]) == 2
    assert "key=value" in capsys.readouterr().err


def test_capabilities_are_the_optional_protocols() -> None:
    assert capabilities(FormPolicy(seed=0)) == ["entropy"]
    assert "tokens" in capabilities(TokenFormPolicy(seed=0))
