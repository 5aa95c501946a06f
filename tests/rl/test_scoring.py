"""The scoring step of a batch (admire.rl.scoring.BatchScorer), which the CPU trainer, the verl reward step and
the TRL rollout share: the bank learns from the batch's successes before (or, configured, after) the batch is
scored; excluded episodes stay out of both; the result is exactly ``update_bank`` + ``score_batch`` by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from admire.config import load_config
from admire.config_files import plain
from admire.config_migration import migrate
from admire.config_schema import TrainingConfig, validate_config
from admire.judge import LLMJudge
from admire.milestones.bank import MilestoneBank, milestone_key
from admire.milestones.generator import make_generator
from admire.milestones.update import update_bank
from admire.rewards import RewardConfig, score_batch
from admire.rl.scoring import BatchScorer, build_matcher, open_bank, reward_metrics
from admire.types import Termination, Trajectory
from tests.support.core_scoring import TextHashEncoder, described
from tests.support.paths import DATA

# One login-user group: ok-short (3 steps), ok-long (4), fail-no-password (2), fail-swapped (3), crashed.
RECORDED = DATA / "login_user_batch.jsonl"


def recorded_batch() -> list[Trajectory]:
    return [described(Trajectory.from_json(line)) for line in RECORDED.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def by_id(batch: list[Trajectory], trajectory_id: str) -> int:
    return next(i for i, t in enumerate(batch) if t.id == trajectory_id)


def scorer(tmp_path: Path, *overrides: str) -> BatchScorer:
    cfg = load_config(overrides=list(overrides))
    return BatchScorer.from_config(cfg, MilestoneBank(tmp_path / "bank.sqlite", mode=cfg.milestone_reward.mode),
                                   encoder=TextHashEncoder(), run="test-run")


def test_a_success_pays_a_failure_of_the_same_key_in_the_same_batch(tmp_path: Path) -> None:
    batch = recorded_batch()
    scoring = scorer(tmp_path)
    assert scoring.update_before_reward and scoring.bank.version == 0
    scored = scoring.score(batch, epoch=0)
    assert [c.kind for c in scored.changes] == ["init"] and scoring.bank.version == 1
    failure = scored.rewards[by_id(batch, "fail-no-password")]
    assert batch[by_id(batch, "fail-no-password")].outcome == 0.0
    assert failure[0].num_milestones > 0 and failure[0].hits >= 1 and failure[0].milestone > 0
    assert scored.seconds > 0.0


def test_update_after_reward_scores_the_batch_with_the_bank_as_it_was(tmp_path: Path) -> None:
    batch = recorded_batch()
    scoring = scorer(tmp_path, "milestone_reward.update_before_reward=false")
    scored = scoring.score(batch, epoch=0)
    assert all(b.num_milestones == 0 and b.milestone == 0.0 for r in scored.rewards for b in r)
    # The bank still learnt from the batch, after it: the next batch is paid.
    assert [c.kind for c in scored.changes] == ["init"] and scoring.bank.version == 1
    failure = scoring.score(batch, epoch=1).rewards[by_id(batch, "fail-no-password")]
    assert failure[0].milestone > 0


def test_excluded_trajectories_feed_no_bank_and_get_no_rewards(tmp_path: Path) -> None:
    """``ok-short`` is the shortest success, the one the bank would distil; excluded, ``ok-long`` is taken."""
    batch = recorded_batch()
    short = by_id(batch, "ok-short")
    batch[short] = batch[short].model_copy(update={"termination": Termination.ENV_ERROR})
    scoring = scorer(tmp_path)
    scored = scoring.score(batch, epoch=0)
    key = milestone_key(batch[0], key=scoring.key)
    assert scoring.bank.get(key).provenance.trajectory_id == "ok-long"
    assert scored.rewards[short] == [] and scored.rewards[by_id(batch, "crashed")] == []
    assert len(scored.rewards) == len(batch) and all(scored.rewards[i] for i, t in enumerate(batch) if not t.excluded)

    only_excluded = scorer(tmp_path / "excluded")
    assert only_excluded.score([batch[short]], epoch=0).changes == [] and only_excluded.bank.version == 0


@pytest.mark.parametrize("before", [True, False])
def test_the_result_is_update_bank_and_score_batch_by_hand(tmp_path: Path, before: bool) -> None:
    batch = recorded_batch()
    overrides = [f"milestone_reward.update_before_reward={str(before).lower()}", "milestone_reward.key=task"]
    scored = scorer(tmp_path / "scorer", *overrides).score(batch, epoch=3)

    cfg = load_config(overrides=overrides)
    reward = RewardConfig.from_mapping(plain(cfg))
    usable = [t for t in batch if not t.excluded]
    generator = make_generator(cfg.milestone_reward.generator)
    with MilestoneBank(tmp_path / "hand.sqlite") as bank:
        if before:
            changes = update_bank(bank, usable, generator, key="task", rule=cfg.milestone_reward.update_rule,
                                  run="test-run", epoch=3)
        expected = score_batch(batch, bank, build_matcher(reward, TextHashEncoder()), reward, 3)
        if not before:
            changes = update_bank(bank, usable, generator, key="task", rule=cfg.milestone_reward.update_rule,
                                  run="test-run", epoch=3)
    assert scored.rewards == expected
    assert [(c.key, c.kind, c.after.milestones) for c in scored.changes] == \
        [(c.key, c.kind, c.after.milestones) for c in changes]


def written_before(dotted: str) -> TrainingConfig:
    """The shipped config as a run written before ``dotted`` existed stored it, read through the migration."""
    section, key = dotted.split(".")
    old = plain(load_config())
    del old["config_version"], old[section][key]
    return validate_config(migrate(old))


def test_from_config_takes_the_configs_parts(tmp_path: Path) -> None:
    cfg = load_config(overrides=["milestone_reward.key=instruction", "milestone_reward.update_rule=common",
                                 "reward.format_weight=0.25"])
    bank = MilestoneBank(tmp_path / "bank.sqlite")
    scoring = BatchScorer.from_config(cfg, bank, encoder=TextHashEncoder(), run="r1")
    assert scoring.bank is bank and scoring.key == "instruction" and scoring.reward.format_weight == 0.25
    assert scoring.update_rule == "common" and scoring.run == "r1" and scoring.generator.name == "heuristic"
    assert scoring.matcher is not None and scoring.judge is None
    # A run written before update_rule existed resumes with the rule it ran with (config_migration.LEGACY_DEFAULTS).
    legacy = BatchScorer.from_config(written_before("milestone_reward.update_rule"), bank, encoder=TextHashEncoder())
    assert legacy.update_rule == "shorter"
    # Outcome-only rewards need no matcher; the judge baseline builds the judge of reward.judge.
    assert BatchScorer.from_config(load_config(overrides=["reward.mode=outcome"]), bank).matcher is None
    judged = BatchScorer.from_config(load_config(overrides=["reward.mode=judge", "reward.judge.model=m",
                                                            "reward.judge.base_url=http://127.0.0.1:9/v1"]), bank)
    assert isinstance(judged.judge, LLMJudge) and judged.matcher is None


def test_an_empty_static_bank_gets_the_frozen_list(tmp_path: Path) -> None:
    source = MilestoneBank(tmp_path / "source.sqlite")
    update_bank(source, recorded_batch(), make_generator("heuristic"), key="task")
    source.export_json(tmp_path / "static.json")
    cfg = load_config(overrides=["milestone_reward.mode=static",
                                 f"milestone_reward.static_path={tmp_path / 'static.json'}"])
    with open_bank(cfg, tmp_path / "bank.sqlite") as bank:
        assert bank.keys() == source.keys() and bank.get(bank.keys()[0]).frozen
        version = bank.version
    with open_bank(cfg, tmp_path / "bank.sqlite") as again:
        assert again.version == version  # imported once, not again
    source.close()


def test_metrics_are_the_trainers_reward_metrics_with_the_cost_and_the_judge(tmp_path: Path) -> None:
    batch = recorded_batch()
    scoring = scorer(tmp_path)
    scored = scoring.score(batch, epoch=0)
    metrics = scoring.metrics(batch, scored)
    usable = [t for t in batch if not t.excluded]
    expected = reward_metrics(batch, scored.rewards, usable, scoring.bank, scored.changes, key=scoring.key)
    assert metrics == {**{k: float(v) for k, v in expected.items()}, "time/milestone_s": scored.seconds}
    assert metrics["train/episodes"] == 5.0 and metrics["train/env_errors"] == 1.0
    assert metrics["milestones/updates"] == 1.0 and metrics["reward/milestone"] > 0


def test_the_step_reward_gap_is_the_successes_mean_shaping_minus_the_failures(tmp_path: Path) -> None:
    import statistics

    from admire.rl.scoring import step_reward_gap

    batch = recorded_batch()
    scoring = scorer(tmp_path)
    scored = scoring.score(batch, epoch=0)
    metrics = scoring.metrics(batch, scored)
    shaping = {t.id: statistics.fmean(b.total - b.outcome for b in r)
               for t, r in zip(batch, scored.rewards, strict=True) if not t.excluded}
    won = [shaping["ok-short"], shaping["ok-long"]]
    lost = [shaping["fail-no-password"], shaping["fail-swapped"]]
    gap = statistics.fmean(won) - statistics.fmean(lost)
    assert metrics["reward/step_gap"] == pytest.approx(gap)
    assert metrics["reward/step_gap_norm"] == pytest.approx(gap / statistics.pstdev([*won, *lost]))
    assert abs(gap) > 1e-6  # the milestone term pays the two outcomes differently here
    successes = [(t, r) for t, r in zip(batch, scored.rewards, strict=True) if t.success]
    assert step_reward_gap(successes) == {}  # nothing to tell apart
