"""A stored run config is brought to today's layout by versioned steps: a run written before a key existed
keeps the value it ran with when it is resumed, re-scored by the viewer or evaluated."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from admire.config import load_config, load_run_config, read_run_config
from admire.config_files import plain
from admire.config_migration import CONFIG_VERSION, LEGACY_DEFAULTS, migrate, stored_version
from admire.config_schema import ConfigError, TrainingConfig, validate_config
from admire.rewards import RewardConfig


def _select(values: dict, dotted: str) -> object:
    node: object = values
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, dotted
        node = node[part]
    return node


def test_every_legacy_key_is_a_key_of_the_schema() -> None:
    current = plain(load_config())
    for dotted in LEGACY_DEFAULTS:
        _select(current, dotted)


def test_the_shipped_config_is_at_the_current_version_and_a_fresh_config_is_not_migrated() -> None:
    cfg = load_config()
    assert cfg.config_version == CONFIG_VERSION
    assert cfg.milestone_reward.matcher == "grounded"  # today's default, not the legacy "sbert"


def test_an_old_run_config_is_read_as_it_ran_and_a_new_one_is_left_alone(tmp_path: Path) -> None:
    old = {"milestone_reward": {"threshold": 0.75, "progress": "total", "key": "instruction"},
           "algorithm": {"adv_estimator": "grpo_step"}, "env": {"suite": "miniwob-demo"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old), encoding="utf-8")
    cfg = read_run_config(tmp_path)
    assert cfg.config_version == CONFIG_VERSION
    assert cfg.milestone_reward.matcher == "sbert" and cfg.milestone_reward.update_rule == "shorter"
    assert cfg.algorithm.std_floor == 0.0 and cfg.env.train_instances_per_task is None
    assert RewardConfig.from_mapping(dict(cfg)).matcher == "sbert"
    new = {"config_version": CONFIG_VERSION, "milestone_reward": {"matcher": "grounded"},
           "algorithm": {"std_floor": 0.1}}
    assert migrate(new) == new
    assert new == {"config_version": CONFIG_VERSION, "milestone_reward": {"matcher": "grounded"},
                   "algorithm": {"std_floor": 0.1}}  # not mutated


def test_a_whole_old_run_config_validates_with_the_values_it_ran_with(tmp_path: Path) -> None:
    old = plain(load_config())
    del old["config_version"]
    for dotted in LEGACY_DEFAULTS:
        *parents, leaf = dotted.split(".")
        section = _select(old, ".".join(parents))
        assert isinstance(section, dict)
        del section[leaf]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old), encoding="utf-8")
    cfg = load_run_config(tmp_path)
    assert isinstance(cfg, TrainingConfig)
    migrated = plain(cfg)
    for dotted, value in LEGACY_DEFAULTS.items():
        assert _select(migrated, dotted) == value, dotted


def test_a_config_without_a_section_gets_no_section() -> None:
    assert "trainer" not in migrate({"env": {}})


def test_a_config_from_a_newer_admire_or_with_a_bad_version_is_refused() -> None:
    with pytest.raises(ValueError, match="newer admire"):
        stored_version({"config_version": CONFIG_VERSION + 1})
    for bad in ("1", -1, True, 1.0):
        with pytest.raises(ValueError, match="config_version must be a non-negative integer"):
            stored_version({"config_version": bad})
    assert stored_version({}) == 0


def test_a_fresh_config_that_claims_an_old_layout_is_refused() -> None:
    values = plain(load_config())
    values["config_version"] = 0
    with pytest.raises(ConfigError, match="config_version"):
        validate_config(values)
