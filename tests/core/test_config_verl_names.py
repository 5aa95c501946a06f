"""verl's key names on the CPU trainer: each is read as this project's key when a config is loaded
(files and overrides), both names of one setting with different values in one place are refused in one line,
a later place wins whichever name it uses, and what a run saves holds only this project's names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from admire.cli import main
from admire.commands.train import config_yaml
from admire.config import PACKAGED_CONFIGS, compose_config, load_config, load_run_config
from admire.config_files import plain
from admire.config_names import VERL_NAMES
from admire.config_schema import ConfigError, check_resume_overrides, validate_config
from admire.rl.builders import check_config

ALIASES = [
    ("actor_rollout_ref.actor.optim.lr=0.00002", "actor_rollout_ref.actor.lr", 2e-5),
    ("actor_rollout_ref.actor.grad_clip=0.5", "actor_rollout_ref.actor.max_grad_norm", 0.5),
    ("actor_rollout_ref.actor.optim.clip_grad=0.5", "actor_rollout_ref.actor.max_grad_norm", 0.5),
    ("trainer.test_freq=5", "trainer.eval_every", 5),
    ("trainer.test_freq=-1", "trainer.eval_every", 0),  # verl's "never"
    ("trainer.project_name=gui-rl", "tracking.project", "gui-rl"),
    ("trainer.experiment_name=qwen-admire", "run.name", "qwen-admire"),
    ("algorithm.adv_estimator=grpo", "algorithm.adv_estimator", "grpo_traj"),  # verl's outcome GRPO
]


@pytest.mark.parametrize(("override", "key", "value"), ALIASES, ids=[a[0] for a in ALIASES])
def test_a_verl_name_sets_this_projects_key(override: str, key: str, value: Any) -> None:
    cfg = compose_config(overrides=[override])
    assert OmegaConf.select(cfg, key) == value
    assert all(OmegaConf.select(cfg, alias) is None for alias in VERL_NAMES)  # only this project's names remain
    validate_config(cfg)


def test_the_kl_pair_is_one_weight() -> None:
    def kl(*overrides: str, config: str = "demo_miniwob") -> float:
        return float(load_config(config, list(overrides)).actor_rollout_ref.actor.kl_coef)

    assert kl("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.02") == 0.02
    assert kl("actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.kl_loss_coef=0.02") == 0.0
    assert kl("actor_rollout_ref.actor.use_kl_loss=true") == 0.001  # verl's default coefficient
    # verl_stepwise.yaml says use_kl_loss: true, kl_loss_coef: 0.001; an override of either keeps the other
    assert kl(config="verl_stepwise") == 0.001
    assert kl("actor_rollout_ref.actor.kl_loss_coef=0.05", config="verl_stepwise") == 0.05
    assert kl("actor_rollout_ref.actor.use_kl_loss=false", config="verl_stepwise") == 0.0
    assert kl("actor_rollout_ref.actor.kl_coef=0.2", config="verl_stepwise") == 0.2  # this project's name wins
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.actor\.kl_loss_coef: verl applies it only with "
                                         r"actor_rollout_ref\.actor\.use_kl_loss=true"):
        kl("actor_rollout_ref.actor.kl_loss_coef=0.02")


def test_the_logger_list_sets_the_trackers() -> None:
    tracking = load_config(overrides=["trainer.logger=[console,tensorboard,wandb]"]).tracking
    assert (tracking.tensorboard, tracking.swanlab, tracking.wandb) == (True, None, "offline")
    tracking = load_config(overrides=["trainer.logger=[swanlab]", "tracking.swanlab=local"]).tracking
    assert (tracking.tensorboard, tracking.swanlab, tracking.wandb) == (False, "local", None)
    with pytest.raises(ValueError, match=r"^trainer\.logger: mlflow is not a tracker of this project; use console, "
                                         r"tensorboard, swanlab, wandb"):
        load_config(overrides=["trainer.logger=[console,mlflow]"])


@pytest.mark.parametrize("overrides", [
    ["actor_rollout_ref.actor.optim.lr=0.001", "actor_rollout_ref.actor.lr=0.002"],
    ["trainer.test_freq=5", "trainer.eval_every=3"],
    ["trainer.logger=[console]", "tracking.wandb=online"],
    ["actor_rollout_ref.actor.grad_clip=1", "actor_rollout_ref.actor.optim.clip_grad=2"],
])
def test_both_names_with_different_values_are_one_line(overrides: list[str]) -> None:
    with pytest.raises(ValueError) as error:
        load_config(overrides=overrides)
    message = str(error.value)
    assert "\n" not in message and "keep one" in message
    for override in overrides:
        assert override.partition("=")[0] in message


def test_both_names_with_the_same_value_are_fine() -> None:
    cfg = load_config(overrides=["actor_rollout_ref.actor.optim.lr=0.001", "actor_rollout_ref.actor.lr=0.001",
                                 "trainer.test_freq=4", "trainer.eval_every=4"])
    assert cfg.actor_rollout_ref.actor.lr == 0.001 and cfg.trainer.eval_every == 4


def test_a_file_in_verls_names_loads_as_this_projects(tmp_path: Path) -> None:
    cfg = load_config("verl_stepwise", ["trainer.backend=cpu"])
    check_config(cfg)  # the CPU trainer's own checks: the file is a valid CPU config too
    saved = config_yaml(cfg)  # what admire train writes as the run's config.yaml
    loaded = yaml.safe_load(saved)
    assert not {alias for alias in VERL_NAMES if OmegaConf.select(OmegaConf.create(loaded), alias) is not None}
    assert loaded["actor_rollout_ref"]["actor"]["lr"] == 1e-6 and "optim" not in loaded["actor_rollout_ref"]["actor"]
    assert loaded["trainer"]["eval_every"] == 20 and loaded["tracking"]["swanlab"] == "offline"

    # both names in one file: refused, naming both
    shipped = yaml.safe_load((PACKAGED_CONFIGS / "verl_stepwise.yaml").read_text())
    shipped["actor_rollout_ref"]["actor"]["lr"] = 0.5
    (tmp_path / "both.yaml").write_text(yaml.safe_dump(shipped))
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.actor\.lr: given as actor_rollout_ref\.actor\.lr=0\.5 "
                                         r"and, under verl's name, as actor_rollout_ref\.actor\.optim\.lr=1e-06"):
        load_config(str(tmp_path / "both.yaml"))


def test_an_override_in_either_name_beats_the_files_other_name() -> None:
    assert load_config("verl_stepwise", ["actor_rollout_ref.actor.lr=0.5"]).actor_rollout_ref.actor.lr == 0.5
    assert load_config(overrides=["actor_rollout_ref.actor.optim.lr=0.5"]).actor_rollout_ref.actor.lr == 0.5
    assert load_config("verl_stepwise", ["trainer.eval_every=0"]).trainer.eval_every == 0


def test_the_cli_refuses_a_conflict_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--quiet", f"run.dir={tmp_path / 'runs'}", "trainer.test_freq=5",
                 "trainer.eval_every=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("admire train: error: trainer.eval_every: given as trainer.eval_every=2 and, under "
                          "verl's name, as trainer.test_freq=5") and "\n" not in err
    assert not (tmp_path / "runs").exists()


def test_resume_overrides_take_verl_names_too(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(config_yaml(load_config()), encoding="utf-8")
    assert check_resume_overrides(["trainer.test_freq=3"]) == [("trainer.eval_every", "3")]
    assert [key for key, _ in check_resume_overrides(["trainer.logger=[console]"])] == \
        ["tracking.tensorboard", "tracking.swanlab", "tracking.wandb"]
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.actor\.optim\.lr: may not change when resuming"):
        check_resume_overrides(["actor_rollout_ref.actor.optim.lr=0.1"])
    cfg = load_run_config(tmp_path, ["trainer.test_freq=3", "trainer.logger=[console,wandb]"])
    assert cfg.trainer.eval_every == 3 and (cfg.tracking.tensorboard, cfg.tracking.wandb) == (False, "offline")
    assert "test_freq" not in plain(cfg)["trainer"]


def test_the_cpu_dry_run_checks_verl_names_and_writes_nothing(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dry-run", f"run.dir={tmp_path / 'runs'}", "trainer.experiment_name=x",
                 "trainer.test_freq=3", "actor_rollout_ref.actor.optim.lr=0.01"]) == 0
    assert capsys.readouterr().out.strip() == (f"dry run: the configuration is valid (trainer.backend=cpu, run folder "
                                               f"{tmp_path / 'runs' / 'x'}; nothing written)")
    assert not (tmp_path / "runs").exists()
