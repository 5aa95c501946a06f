"""A run written before a key existed keeps its behaviour: resume, viewer and eval fill the old value."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from admire.config import LEGACY_DEFAULTS, load_config, load_run_config, with_legacy_defaults
from admire.rewards import RewardConfig


def test_every_legacy_key_exists_in_the_shipped_config() -> None:
    shipped = load_config()
    for dotted in LEGACY_DEFAULTS:
        parent, _, leaf = dotted.rpartition(".")
        assert OmegaConf.select(shipped, parent) is not None and leaf in OmegaConf.select(shipped, parent), dotted


def test_an_old_run_config_is_scored_as_it_was_and_a_new_one_is_left_alone(tmp_path: Path) -> None:
    old = {"milestone_reward": {"threshold": 0.75, "progress": "total", "key": "instruction"},
           "algorithm": {"adv_estimator": "grpo_step"}, "env": {"suite": "miniwob-demo"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old), encoding="utf-8")
    cfg = load_run_config(tmp_path)
    assert cfg.milestone_reward.matcher == "sbert" and cfg.milestone_reward.update_rule == "shorter"
    assert cfg.algorithm.std_floor == 0.0 and cfg.env.train_instances_per_task is None
    assert RewardConfig.from_mapping(dict(cfg)).matcher == "sbert"
    new = {"milestone_reward": {"matcher": "grounded"}, "algorithm": {"std_floor": 0.1}}
    filled = with_legacy_defaults(new)
    assert filled["milestone_reward"]["matcher"] == "grounded" and filled["algorithm"]["std_floor"] == 0.1
    assert new == {"milestone_reward": {"matcher": "grounded"}, "algorithm": {"std_floor": 0.1}}  # not mutated


def test_a_config_without_a_section_gets_no_section() -> None:
    assert "trainer" not in with_legacy_defaults({"env": {}})
