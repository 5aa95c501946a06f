"""``trainer.backend=verl``: verl's configuration composed from this project's keys. Every key the
composition sets is checked against verl's own generated config and composed by Hydra exactly as
``verl.trainer.main_ppo`` does, with verl's own ``validate_config``; the command refuses a machine without a
rollout engine or GPU in one line before anything is written, and ``--dry-run`` prints the command on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from admire.cli import main
from admire.config import load_config
from admire.config_schema import ConfigError, validate_config
from admire.integrations.verl import config as verl_config
from admire.integrations.verl.config import (
    admire_section_overrides,
    check_machine,
    check_verl_config,
    compose_verl_config,
    settings_overrides,
    user_overrides,
    validate_verl_config,
    verl_command,
    verl_config_dir,
    verl_environment,
    verl_overrides,
    write_inputs,
)
from admire.rl.builders import check_config
from tests.support.paths import REPO


def _flat(tree: Any, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return {prefix.rstrip(".")}
    return {key for k, v in tree.items() for key in _flat(v, f"{prefix}{k}.")} | {prefix.rstrip(".")}


def _overrides(config: str = "verl_stepwise", *extra: str) -> tuple[Any, dict[str, str]]:
    cfg = load_config(config, ["trainer.backend=verl", *extra])
    pairs = dict(o.split("=", 1) for o in settings_overrides(cfg, "runs/x"))
    return cfg, pairs


def test_every_key_set_exists_in_verls_generated_config() -> None:
    generated = yaml.safe_load((verl_config_dir() / "_generated_ppo_trainer.yaml").read_text(encoding="utf-8"))
    known = _flat(generated)
    cfg = load_config("verl_stepwise")
    keys = [o.split("=", 1)[0] for o in [*settings_overrides(cfg, "runs/x"), *user_overrides(cfg)]]
    missing = [k for k in keys if not k.startswith("+") and k not in known]
    assert not missing, f"not keys of verl's config (a typo?): {missing}"
    added = [k.lstrip("+") for k in keys if k.startswith("+") and not k.startswith("++")]
    assert added == ["algorithm.std_floor", "algorithm.failed_group_baseline"]
    assert not [k for k in added if k in known]  # a '+' on an existing key would make Hydra refuse it
    forced = [k for k in keys if k.startswith("++")]  # set whether or not verl's config has the key
    assert forced == ["++actor_rollout_ref.model.override_config.attn_implementation"]


def test_the_composed_config_is_what_verl_would_run(tmp_path: Path) -> None:
    cfg = load_config("verl_stepwise", ["env.suite=miniwob-smoke", "trainer.total_epochs=2",
                                        "trainer.tasks_per_epoch=2", "trainer.eval_episodes=1"])
    run = tmp_path / "runs" / "r1"
    written = write_inputs(cfg, run)
    assert [p.relative_to(run).as_posix() for p in written] == ["verl/train.parquet", "verl/val.parquet",
                                                                "verl/admire/run.yaml"]
    composed = compose_verl_config(verl_overrides(cfg, run))  # Hydra refuses an unknown key: a typo fails here
    validate_verl_config(composed)  # verl's own checks (batch sizes against GPUs, micro batches)
    assert composed.trainer.v1.trainer_mode == "admire_step" and composed.trainer.use_v1 is True
    assert composed.actor_rollout_ref.rollout.agent.default_agent_loop == "admire_gui"
    assert composed.algorithm.adv_estimator == "admire_grpo_step"
    assert (composed.algorithm.std_floor, composed.algorithm.failed_group_baseline) == (0.1, "mean")
    assert composed.actor_rollout_ref.actor.optim.lr == 1e-6 and composed.actor_rollout_ref.actor.optim.clip_grad == 1
    actor = composed.actor_rollout_ref.actor
    assert actor.use_kl_loss is True and actor.kl_loss_coef == 0.001
    assert composed.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert (composed.data.train_batch_size, composed.trainer.total_training_steps) == (2, 2)
    assert composed.data.train_files == str(run / "verl" / "train.parquet")
    assert list(composed.trainer.logger) == ["console", "file", "tensorboard", "swanlab"]
    assert composed.trainer.experiment_name == "r1" and composed.trainer.default_local_dir == str(run / "checkpoints")
    assert composed.data.max_prompt_length == 4096  # verl.overrides, passed unchanged and last
    # the ADMIRE config reaches verl's processes as its `admire` section, with the run directory
    assert composed.admire.env.suite == "miniwob-smoke" and composed.admire.run_dir == str(run)
    assert OmegaConf.to_container(composed.admire.milestone_reward) == \
        cfg.milestone_reward.model_dump(mode="json")


def test_verls_own_entry_point_composes_the_command(tmp_path: Path) -> None:
    """The exact argv ``admire train`` runs, through ``verl.trainer.main_ppo``'s own Hydra (``--cfg job`` prints
    the composed config and stops before Ray): the search path and the ``admire`` group work there too."""
    import os
    import subprocess

    cfg = load_config("verl_stepwise", ["env.suite=miniwob-smoke", "trainer.total_epochs=1",
                                        "trainer.tasks_per_epoch=2", "trainer.eval_episodes=1"])
    run = tmp_path / "r2"
    write_inputs(cfg, run)
    result = subprocess.run([*verl_command(cfg, run), "--cfg", "job"], capture_output=True, text=True, timeout=240,
                            env={**os.environ, **verl_environment(cfg, run)})
    assert result.returncode == 0, result.stderr[-2000:]
    composed = yaml.safe_load(result.stdout)
    assert composed["trainer"]["v1"]["trainer_mode"] == "admire_step"
    assert composed["admire"]["run_dir"] == str(run) and composed["admire"]["env"]["suite"] == "miniwob-smoke"
    assert composed["admire"]["actor_rollout_ref"]["actor"]["kl_coef"] == 0.001


def test_a_typo_in_a_verl_override_is_one_line() -> None:
    with pytest.raises(ValueError) as error:
        compose_verl_config(["actor_rollout_ref.actor.optim.lrr=1"])
    assert str(error.value).startswith("verl's config refuses the composed overrides: Could not override "
                                       "'actor_rollout_ref.actor.optim.lrr'") and "\n" not in str(error.value)


def test_the_loss_keys_and_the_evaluation_cadence() -> None:
    _, pairs = _overrides("verl_stepwise", "algorithm.adv_estimator=dapo_step", "trainer.eval_every=0",
                          "trainer.logger=[console,wandb]")
    assert pairs["algorithm.adv_estimator"] == "admire_dapo_step"
    assert pairs["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"  # the estimator sets nothing
    assert pairs["actor_rollout_ref.actor.clip_ratio_high"] == "0.2"
    assert (pairs["trainer.test_freq"], pairs["trainer.val_before_train"]) == ("-1", "false")
    assert pairs["trainer.logger"] == "[console,file,wandb]"
    _, pairs = _overrides("verl_stepwise", "algorithm.adv_estimator=dapo_step",
                          "actor_rollout_ref.actor.loss_agg_mode=token-mean",
                          "actor_rollout_ref.actor.clip_ratio_high=0.28")
    assert pairs["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert pairs["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    _, pairs = _overrides("verl_stepwise", "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=false")
    assert pairs["algorithm.adv_estimator"] == "admire_grpo_traj"  # verl's grpo is outcome GRPO
    assert (pairs["actor_rollout_ref.actor.use_kl_loss"], pairs["actor_rollout_ref.actor.kl_loss_coef"]) == \
        ("false", "0.0")


def test_odd_strings_survive_hydras_grammar(tmp_path: Path) -> None:
    cfg = load_config("verl_stepwise", ['tracking.project="it\'s a project, really"'])
    run = tmp_path / "run with space"
    composed = compose_verl_config([*settings_overrides(cfg, run), *user_overrides(cfg)])
    assert composed.trainer.project_name == "it's a project, really"
    assert composed.trainer.default_local_dir == str(run / "checkpoints")
    assert admire_section_overrides(run)[0] == f"hydra.searchpath=['file://{run}/verl']"


def test_the_trackers_run_inside_the_run_folder(tmp_path: Path) -> None:
    cfg = load_config("verl_stepwise", ["tracking.wandb=online"])
    env = verl_environment(cfg, tmp_path)
    assert env["SWANLAB_MODE"] == "offline" and env["SWANLAB_LOG_DIR"] == str(tmp_path / "swanlab")
    assert env["WANDB_MODE"] == "online" and env["TENSORBOARD_DIR"] == str(tmp_path / "tensorboard")


def test_what_verl_cannot_honour_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.actor\.target_kl: verl's actor has no KL limit"):
        check_verl_config(load_config("verl_stepwise", ["actor_rollout_ref.actor.target_kl=0.02"]))
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.actor\.ppo_max_answer_tokens: verl sizes its micro"):
        check_verl_config(load_config("verl_stepwise", ["actor_rollout_ref.actor.ppo_max_answer_tokens=256"]))
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.model: trainer\.backend=verl trains a Hugging Face "):
        validate_config(load_config(overrides=["trainer.backend=verl", "trainer.n_gpus_per_node=1"]))
    with pytest.raises(ConfigError, match=r"^trainer\.n_gpus_per_node: trainer\.backend=verl trains on GPUs"):
        validate_config(load_config("verl_stepwise", ["trainer.n_gpus_per_node=0"]))
    check_config(load_config("verl_stepwise"))  # as shipped: valid


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A GPU machine as the checks see it: the packages at the versions given here, the CUDA devices given."""
    import torch

    state: dict[str, Any] = {"versions": {"verl": "0.9.1", "vllm": "0.24.1"}, "modules": {"vllm"}, "gpus": 8}
    real = verl_config.importlib.util.find_spec
    monkeypatch.setattr(verl_config, "installed_version", lambda package: state["versions"].get(package))
    monkeypatch.setattr(verl_config.importlib.util, "find_spec",
                        lambda name: object() if name in state["modules"] else
                        (None if name in ("vllm", "sglang", "flash_attn") else real(name)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: state["gpus"] > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state["gpus"])
    return state


def test_a_machine_with_what_verl_needs_passes(machine: dict[str, Any]) -> None:
    check_machine(load_config("verl_stepwise"))


def test_each_missing_or_wrong_piece_is_one_line_naming_the_install(machine: dict[str, Any]) -> None:
    cfg = load_config("verl_stepwise")
    machine["modules"] = set()
    with pytest.raises(ValueError, match=r"^actor_rollout_ref\.rollout\.name: trainer\.backend=verl rolls out with "
                                         r"vllm, which is not installed; on the GPU machine: pip install -c "
                                         r"constraints/gpu\.txt vllm"):
        check_machine(cfg)
    machine["modules"] = {"vllm"}
    machine["versions"]["vllm"] = "0.33.0"  # what PyPI has: verl 0.9.1 drives vLLM 0.24's internals
    with pytest.raises(ValueError, match=r"needs vllm<0\.25,>=0\.24, this machine has 0\.33\.0; pip install -c "
                                         r"constraints/gpu\.txt vllm"):
        check_machine(cfg)
    machine["versions"]["vllm"] = "0.24.1"
    machine["versions"]["verl"] = "0.10.0"
    with pytest.raises(ValueError, match=r"needs verl<0\.10,>=0\.9\.1, this machine has 0\.10\.0"):
        check_machine(cfg)
    machine["versions"]["verl"] = "0.9.1"
    machine["gpus"] = 2
    with pytest.raises(ValueError, match=r"^trainer\.n_gpus_per_node: 8 GPU\(s\) wanted, this machine has 2 CUDA"):
        check_machine(cfg)
    check_machine(load_config("verl_stepwise", ["trainer.n_gpus_per_node=2"]))


def test_flash_attention_asked_for_but_absent_is_refused(machine: dict[str, Any]) -> None:
    cfg = load_config("verl_stepwise", [
        "verl.overrides=['++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2']"])
    with pytest.raises(ValueError, match=r"^verl\.overrides: flash_attention_2 is asked for but flash_attn is not"):
        check_machine(cfg)
    machine["modules"] = {"vllm", "flash_attn"}
    check_machine(cfg)


def test_local_miniwob_envs_need_chromium(machine: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIWOB_CHROME_BINARY", "/nonexistent/chromium")
    with pytest.raises(ValueError, match=r"^env\.src: the agent loops start MiniWoB\+\+ browsers here; Chromium not "
                                         r"found at /nonexistent/chromium"):
        check_machine(load_config("verl_stepwise"))
    check_machine(load_config("verl_stepwise", ["env.src=[remote:http://127.0.0.1:8765]"]))


def test_the_cpu_device_needs_no_gpu_and_no_engine(machine: dict[str, Any]) -> None:
    machine.update(modules=set(), gpus=0)
    cfg = load_config("verl_stepwise", ["trainer.device=cpu", "actor_rollout_ref.rollout.name=admire_hf",
                                        "trainer.n_gpus_per_node=1"])
    assert verl_config.machine_problems(cfg) == []
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref\.rollout\.name: vllm needs a GPU; with "
                                          r"trainer\.device=cpu set actor_rollout_ref\.rollout\.name=admire_hf"):
        validate_config(load_config("verl_stepwise", ["trainer.device=cpu"]))
    with pytest.raises(ConfigError, match=r"^trainer\.nnodes: trainer\.device=cpu runs verl's workers on this machine"):
        validate_config(load_config("verl_stepwise", ["trainer.device=cpu", "actor_rollout_ref.rollout.name=admire_hf",
                                                      "trainer.nnodes=2"]))


def test_every_problem_is_listed_at_once(machine: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIWOB_CHROME_BINARY", "/nonexistent/chromium")
    machine.update(modules=set(), gpus=0)
    problems = verl_config.machine_problems(load_config("verl_stepwise"))
    assert [p.split(":", 1)[0] for p in problems] == ["actor_rollout_ref.rollout.name", "env.src",
                                                      "trainer.n_gpus_per_node"]


def test_the_cpu_device_composes_verls_cpu_settings() -> None:
    cfg, pairs = _overrides("verl_stepwise", "trainer.device=cpu", "actor_rollout_ref.rollout.name=admire_hf",
                            "trainer.n_gpus_per_node=2")
    assert pairs["trainer.device"] == "cpu" and pairs["actor_rollout_ref.actor.strategy"] == "fsdp2"
    assert pairs["++ray_kwargs.ray_init.num_gpus"] == "2"
    assert pairs["++ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM"] == "admire_cpu"
    assert pairs["++ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS"] == "'1'"  # a string for Ray
    assert pairs["++actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    assert pairs["actor_rollout_ref.actor.fsdp_config.use_torch_compile"] == "false"
    assert pairs["++actor_rollout_ref.actor.fsdp_config.mixed_precision"] == \
        "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    assert pairs["actor_rollout_ref.rollout.free_cache_engine"] == "false"
    assert verl_environment(cfg, "runs/x")["VERL_PLATFORM"] == "admire_cpu"
    validate_verl_config(compose_verl_config([*settings_overrides(cfg, "runs/x"), *user_overrides(cfg)]))
    _, gpu = _overrides("verl_stepwise")
    assert "trainer.device" not in gpu and gpu["++actor_rollout_ref.model.override_config.attn_implementation"] in (
        "sdpa", "flash_attention_2")


def test_train_refuses_before_writing_and_the_dry_run_prints_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    real = verl_config.importlib.util.find_spec
    monkeypatch.setattr(verl_config.importlib.util, "find_spec", lambda name: None if name == "vllm" else real(name))
    runs = tmp_path / "runs"
    args = ["train", "--quiet", "--config", str(REPO / "configs" / "verl_stepwise.yaml"), f"run.dir={runs}",
            "run.name=r"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("admire train: error: actor_rollout_ref.rollout.name: trainer.backend=verl rolls out with "
                          "vllm, which is not installed") and "\n" not in err
    assert not runs.exists()
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert " -m verl.trainer.main_ppo " in out[0] and "trainer.v1.trainer_mode=admire_step" in out[0]
    assert f"trainer.default_local_dir={runs / 'r' / 'checkpoints'}" in out[0]
    assert out[-1] == f"dry run: the configuration is valid (trainer.backend=verl, run folder {runs / 'r'}; " \
                      "nothing written)"
    assert not runs.exists()


def test_the_attention_kernel_is_flash_attention_only_where_it_is_installed_on_a_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's actor asks for ``flash_attention_2`` by default, which fails to load without ``flash_attn``."""
    real = verl_config.importlib.util.find_spec
    installed: set[str] = set()
    monkeypatch.setattr(verl_config.importlib.util, "find_spec",
                        lambda name: object() if name in installed else (None if name == "flash_attn" else real(name)))
    gpu = load_config("verl_stepwise")
    cpu = load_config("verl_stepwise", ["trainer.device=cpu", "actor_rollout_ref.rollout.name=admire_hf"])
    assert (verl_config.attention(gpu), verl_config.attention(cpu)) == ("sdpa", "sdpa")
    installed.add("flash_attn")
    assert (verl_config.attention(gpu), verl_config.attention(cpu)) == ("flash_attention_2", "sdpa")


def test_the_gpu_constraints_pin_the_engine_versions_the_machine_check_accepts() -> None:
    from packaging.specifiers import SpecifierSet

    pins = dict(line.split("==") for line in (REPO / "constraints" / "gpu.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert pins["vllm"] in SpecifierSet(",".join(verl_config.ENGINE_VERSIONS["vllm"]))
    assert pins["torch"] == "2.11.0"  # what vLLM 0.24 is built with


def test_verls_hydra_folder_and_metrics_go_into_the_run(tmp_path: Path) -> None:
    cfg = load_config("verl_stepwise", ["trainer.backend=verl"])
    assert f"hydra.run.dir={tmp_path.absolute() / 'verl' / 'hydra'}" in verl_overrides(cfg, tmp_path)
    path = Path(verl_environment(cfg, tmp_path)["VERL_FILE_LOGGER_PATH"])
    assert path.parent == tmp_path.absolute() / "verl" and path.name.startswith("metrics-")


def test_screenshots_for_a_vision_model_on_the_text_only_rollout_are_refused(tmp_path: Path) -> None:
    model = tmp_path / "vl"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2_5_vl", "vision_config": {"depth": 2}}')
    keys = ["trainer.device=cpu", "actor_rollout_ref.rollout.name=admire_hf", f"actor_rollout_ref.model.path={model}"]
    with pytest.raises(ValueError, match=r"^env\.screenshots: the admire_hf rollout serves text models only"):
        check_verl_config(load_config("verl_stepwise", [*keys, "env.screenshots=true"]))
    check_verl_config(load_config("verl_stepwise", [*keys, "env.screenshots=false"]))
