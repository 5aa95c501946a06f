"""ADMIRE's rewards for TRL (admire.integrations.trl): the CPU trainer's bank-then-score step on a batch
(``BatchScorer``, re-exported), the fold of per-step rewards into one reward per completion, and the TRL reward
function."""

from __future__ import annotations

from pathlib import Path

import pytest

from admire.integrations.trl import BatchScorer, admire_reward, episode_return, open_bank
from admire.milestones.bank import MilestoneBank
from admire.milestones.generator import make_generator
from admire.rewards import RewardConfig, score_batch
from admire.rl.rollout import collect, group_requests
from admire.rl.scoring import build_matcher
from admire.types import RewardBreakdown, Task, Trajectory
from tests.support.fakes import FormEnv, ScriptedPolicy, TrigramEncoder

TYPE = {"action_type": "input_text", "index": 0, "text": "ann"}
SUBMIT = {"action_type": "click", "index": 1}
STOP = {"action_type": "status", "goal_status": "complete"}
TASK = Task(name="fake/form", seed=0)


def scoring(tmp_path: Path, *, before: bool = True, key: str = "task") -> BatchScorer:
    reward = RewardConfig(milestone_key=key)
    return BatchScorer(bank=MilestoneBank(tmp_path / "bank.sqlite"), reward=reward,
                       matcher=build_matcher(reward, TrigramEncoder()), generator=make_generator("heuristic"),
                       update_before_reward=before)


def group() -> list[Trajectory]:
    """One group of the same instance: a success (type, submit) and a failure that typed and then gave up."""
    success = collect(group_requests([TASK], 1), [FormEnv()], ScriptedPolicy([TYPE, SUBMIT]), max_steps=4)
    failure = collect(group_requests([TASK], 1), [FormEnv()], ScriptedPolicy([TYPE, STOP]), max_steps=4)
    assert success[0].success and not failure[0].success
    return [success[0], failure[0]]


def test_the_bank_learns_from_the_batchs_success_before_its_failure_is_scored(tmp_path: Path) -> None:
    trajectories = group()
    scored = scoring(tmp_path / "a").score(trajectories, epoch=0)
    assert [c.kind for c in scored.changes] == ["init"]
    failed = scored.rewards[1]
    assert failed[0].num_milestones == 2 and failed[0].hits == 1
    assert failed[0].milestone > 0  # scaffolded by its sibling's success, in the same batch
    # The other order (milestone_reward.update_before_reward=false): the same batch finds the bank empty.
    late = scoring(tmp_path / "b", before=False)
    scored_late = late.score(trajectories, epoch=0)
    assert [c.kind for c in scored_late.changes] == ["init"] and late.bank.version == 1
    assert all(b.milestone == 0 and b.num_milestones == 0 for b in scored_late.rewards[1])


def test_scores_are_the_cpu_trainers_own(tmp_path: Path) -> None:
    trajectories = group()
    rewards = scoring(tmp_path / "a").score(trajectories, epoch=2).rewards
    # By hand, as admire.rl.trainer.train does it: update_bank, then score_batch on the same bank.
    from admire.milestones.update import update_bank

    reference = scoring(tmp_path / "b")
    update_bank(reference.bank, trajectories, reference.generator, key="task", rule="common", epoch=2)
    expected = score_batch(trajectories, reference.bank, reference.matcher, reference.reward, 2)
    assert rewards == expected


def test_an_excluded_episode_gets_no_rewards_and_does_not_feed_the_bank(tmp_path: Path) -> None:
    crashed = collect(group_requests([TASK], 1), [FormEnv(crash_on_step=0, crash_times=9)],
                      ScriptedPolicy([TYPE, SUBMIT]), max_steps=4, max_reruns=1)[0]
    assert crashed.excluded
    scored = scoring(tmp_path).score([crashed], epoch=0)
    assert scored.rewards == [[]] and scored.changes == []


def breakdown(total: float) -> RewardBreakdown:
    return RewardBreakdown(outcome=0.0, format=0.0, milestone=0.0, process=0.0, total=total)


def test_an_episodes_return_is_the_mean_of_its_step_rewards_or_their_sum() -> None:
    steps = [breakdown(1.0), breakdown(1.3), breakdown(0.7)]
    assert episode_return(steps) == pytest.approx(1.0)
    assert episode_return(steps, "sum") == pytest.approx(3.0)
    with pytest.raises(ValueError, match="fold must be one of mean, sum"):
        episode_return(steps, "max")


def test_admire_reward_hands_trl_the_forwarded_returns_and_logs_the_batch_metrics() -> None:
    logged: dict[str, float] = {}
    rewards = admire_reward(["p0", "p1", "p2"], ["c0", "c1", "c2"], admire_return=[1.0, None, -0.5],
                            admire_metrics=[{"reward/total": 0.25}] * 3, log_metric=logged.__setitem__,
                            trainer_state=object(), completion_ids=[[1], [2], [3]])
    assert rewards == [1.0, None, -0.5]  # None: an excluded episode, no advantage in TRL
    assert logged == {"reward/total": 0.25}


def test_admire_reward_without_the_rollout_says_to_pass_it() -> None:
    with pytest.raises(ValueError, match=r"pass rollout_func=admire\.integrations\.trl\.make_rollout_func") as caught:
        admire_reward(["p"], ["c"], trainer_state=object())
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="got 1 episode returns for 2 completions"):
        admire_reward(["p", "q"], ["c", "d"], admire_return=[1.0])


def test_batch_metrics_name_the_cpu_trainers_metrics(tmp_path: Path) -> None:
    trajectories = group()
    scorer = scoring(tmp_path)
    scored = scorer.score(trajectories, epoch=0)
    metrics = scorer.metrics(trajectories, scored)
    assert metrics["train/success"] == 0.5 and metrics["milestones/updates"] == 1.0
    assert metrics["milestones/bank_version"] == 1.0 and metrics["time/milestone_s"] == scored.seconds
    totals = [b.total for r in scored.rewards for b in r]
    assert metrics["reward/total"] == pytest.approx(sum(totals) / len(totals))


def test_scoring_from_a_config_uses_its_keys(tmp_path: Path) -> None:
    from admire.config import load_config

    cfg = load_config(overrides=["milestone_reward.key=task", "milestone_reward.update_before_reward=false",
                                 "reward.format_weight=0.25"])
    scorer = BatchScorer.from_config(cfg, open_bank(cfg, tmp_path / "bank.sqlite"), encoder=TrigramEncoder())
    assert scorer.key == "task" and not scorer.update_before_reward and scorer.reward.format_weight == 0.25
    assert scorer.update_rule == str(cfg.milestone_reward.update_rule) and scorer.matcher is not None
    assert scorer.generator.name == "heuristic"
