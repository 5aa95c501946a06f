"""verl's configuration composed from this project's keys: what ``admire train trainer.backend=verl`` runs.

The same config trains on either backend. ``validate_config`` checks it first, as for the CPU trainer; then
:func:`verl_overrides` turns this project's keys into Hydra overrides of verl's own ``ppo_trainer`` config
(``python -m verl.trainer.main_ppo key=value ...``), so a verl user reads the command line in verl's names and
every verl setting this project has no key for stays verl's default or comes from ``verl.overrides``. The
mapping, key by key (this project's → verl's):

==========================================  ==============================================================
``actor_rollout_ref.model.path``            ``actor_rollout_ref.model.path`` (a local directory)
``actor_rollout_ref.rollout.n`` / ``.name``  ``actor_rollout_ref.rollout.n`` / ``.name`` (vllm | sglang)
``actor_rollout_ref.actor.lr``              ``actor_rollout_ref.actor.optim.lr``
``actor.max_grad_norm``                     ``actor.optim.clip_grad`` (what verl 0.9's engines read) and ``grad_clip``
``actor.clip_ratio_low`` / ``_high``        the same names, the same values as on the CPU path
``actor.loss_agg_mode``                     the same name; null = seq-mean-token-mean, as on the CPU path
``actor.kl_coef``                           ``actor.use_kl_loss`` (coef > 0) and ``actor.kl_loss_coef``
``actor.entropy_coef`` / ``ppo_epochs``     ``actor.entropy_coeff`` / ``actor.ppo_epochs``
``algorithm.adv_estimator``                 ``admire_<estimator>`` (registered by ``admire.integrations.verl``)
``algorithm.norm_adv_by_std_in_grpo``,      the same names; ``std_floor`` and ``failed_group_baseline`` are
``std_floor``, ``failed_group_baseline``    added to verl's ``algorithm`` section, where the estimators read them
``algorithm.filter_groups``                 read by the ``admire_step`` trainer from the ``admire`` section: the rows
                                            of a group the estimator does not keep leave the loss, as on the CPU path
``trainer.total_epochs``                    ``trainer.total_training_steps`` (one CPU epoch = one verl step)
``trainer.tasks_per_epoch``                 ``data.train_batch_size`` and ``actor.ppo_mini_batch_size``
``trainer.eval_every``                      ``trainer.test_freq`` (0 → -1), ``val_before_train``, ``save_freq``
``trainer.n_gpus_per_node`` / ``nnodes``    the same names
``trainer.keep_checkpoints``                ``trainer.max_actor_ckpt_to_keep``
``tracking.*``                              ``trainer.logger`` (+ SWANLAB_MODE / WANDB_MODE), ``project_name``
``run.name`` / the run directory            ``trainer.experiment_name`` / ``trainer.default_local_dir``
==========================================  ==============================================================

verl's ``ppo_mini_batch_size`` counts prompts (each of ``rollout.n`` episodes), not steps as this project's
``actor.ppo_mini_batch_size`` does, so it is set to the whole batch (one optimizer step per PPO epoch) and the
project's value is not used; ``verl.overrides`` sets verl's own. The ADMIRE trainer (``admire_step``), agent loop
(``admire_gui``) and task dataset (``data.train_files``/``val_files``, :mod:`admire.integrations.verl.dataset`)
are selected here too. The whole resolved ADMIRE config, plus ``run_dir``, reaches verl's processes as the
``admire`` section of verl's config: it is written as ``<run>/verl/admire/run.yaml`` and loaded by Hydra as the
option ``run`` of the config group ``admire`` (``hydra.searchpath=[file://<run>/verl] +admire=run``), so the
agent loop and the trainer read ``admire.env``, ``admire.milestone_reward`` … in any Ray worker on this node.

Nothing here imports verl: verl's config directory is found with ``importlib.util.find_spec`` and composed with
Hydra; only :func:`validate_verl_config` imports verl (its own ``validate_config``).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from admire.config_files import plain
from admire.config_schema import DEFAULT_LOSS_AGG_MODE, TrainingConfig

ENTRY = "verl.trainer.main_ppo"
"""verl's training entry point (Hydra, config ``ppo_trainer``), run as ``python -m``."""
TRAINER = "admire_step"
"""The v1 trainer :mod:`admire.integrations.verl.trainer` registers (``trainer.v1.trainer_mode``)."""
AGENT_LOOP = "admire_gui"
"""The agent loop :mod:`admire.integrations.verl.agent_loop` registers (also every dataset row's agent_name)."""
ESTIMATOR_PREFIX = "admire_"
VERL_FOLDER = "verl"
"""In the run directory: verl's inputs (the task dataset, the ``admire`` config group)."""
ADMIRE_GROUP, ADMIRE_OPTION = "admire", "run"
ENGINES: dict[str, str] = {"vllm": "vllm", "sglang": "sglang"}
"""``actor_rollout_ref.rollout.name`` → the module that must import."""
PROMPT_LENGTH = 4096
"""``data.max_prompt_length``: room for a long screen and the history window (a step's whole prompt)."""
PLUGIN_MODULE = "admire.integrations.verl.plugin"
METRICS_PREFIX = "metrics-"
"""verl's metrics of one launch: ``<run>/verl/metrics-<launch time>.jsonl`` (lines ``{"step": n, "data": {...}}``)."""
PLATFORM_NAME = "admire_cpu"
"""``VERL_PLATFORM`` of the CPU platform (:mod:`admire.integrations.verl.cpu`), set for ``trainer.device=cpu``."""


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------

def verl_overrides(cfg: TrainingConfig, run_dir: str | Path) -> list[str]:
    """The Hydra overrides of ``python -m verl.trainer.main_ppo`` for this config and run directory: this
    project's keys in verl's names (module docstring), the ADMIRE trainer, agent loop, dataset and ``admire``
    section, then ``verl.overrides`` unchanged (last, so they win)."""
    return [*settings_overrides(cfg, run_dir), *admire_section_overrides(run_dir), *user_overrides(cfg)]


def settings_overrides(cfg: TrainingConfig, run_dir: str | Path) -> list[str]:
    """Every override but the ``admire`` section and ``verl.overrides`` (what needs no file to exist)."""
    run = Path(run_dir).absolute()
    data = run / VERL_FOLDER
    actor = cfg.actor_rollout_ref.actor
    estimator = str(cfg.algorithm.adv_estimator)
    agg = actor.loss_agg_mode or DEFAULT_LOSS_AGG_MODE
    kl_coef = float(actor.kl_coef)
    eval_every = int(cfg.trainer.eval_every)
    batch = int(cfg.trainer.tasks_per_epoch)
    from admire.agent.lm_policy import DEFAULTS as LM_DEFAULTS
    from admire.integrations.verl.dataset import TRAIN_FILE, VAL_FILE

    pairs: list[tuple[str, Any]] = [
        ("actor_rollout_ref.model.path", _model_path(str(cfg.actor_rollout_ref.model.path))),
        ("actor_rollout_ref.rollout.name", cfg.actor_rollout_ref.rollout.name),
        ("actor_rollout_ref.rollout.n", int(cfg.actor_rollout_ref.rollout.n)),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1),  # any GPU count; verl.overrides raises it
        ("actor_rollout_ref.rollout.agent.default_agent_loop", AGENT_LOOP),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 1),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", 1),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", batch),
        ("actor_rollout_ref.actor.ppo_epochs", int(actor.ppo_epochs)),
        ("actor_rollout_ref.actor.optim.lr", float(actor.lr)),
        ("actor_rollout_ref.actor.optim.clip_grad", float(actor.max_grad_norm)),
        ("actor_rollout_ref.actor.grad_clip", float(actor.max_grad_norm)),
        ("actor_rollout_ref.actor.clip_ratio_low", float(actor.clip_ratio_low)),
        ("actor_rollout_ref.actor.clip_ratio_high", float(actor.clip_ratio_high)),
        ("actor_rollout_ref.actor.loss_agg_mode", str(agg)),
        ("actor_rollout_ref.actor.use_kl_loss", kl_coef > 0),
        ("actor_rollout_ref.actor.kl_loss_coef", kl_coef),
        ("actor_rollout_ref.actor.entropy_coeff", float(actor.entropy_coef)),
        ("algorithm.adv_estimator", f"{ESTIMATOR_PREFIX}{estimator}"),
        ("algorithm.norm_adv_by_std_in_grpo", bool(cfg.algorithm.norm_adv_by_std_in_grpo)),
        ("+algorithm.std_floor", float(cfg.algorithm.std_floor)),
        ("+algorithm.failed_group_baseline", str(cfg.algorithm.failed_group_baseline)),
        ("data.train_files", str(data / TRAIN_FILE)),
        ("data.val_files", str(data / VAL_FILE)),
        ("data.train_batch_size", batch),
        # A step's prompt is the system turn, the numbered screen and the history: a 20-element MiniWoB++
        # screen is ~650 tokens, past verl's 512, and verl cuts a long prompt from the left (the system turn).
        ("data.max_prompt_length", PROMPT_LENGTH),
        ("data.max_response_length", int(model_option(cfg, "max_new_tokens", LM_DEFAULTS["max_new_tokens"]))),
        ("data.shuffle", False),  # the dataset lists the CPU trainer's epochs in order (dataset.py)
        ("trainer.total_epochs", 1),  # one pass over that list ...
        ("trainer.total_training_steps", int(cfg.trainer.total_epochs)),  # ... = total_epochs updates
        ("trainer.test_freq", eval_every if eval_every > 0 else -1),
        ("trainer.val_before_train", eval_every > 0),  # eval_every=0: no validation at all
        ("trainer.save_freq", eval_every if eval_every > 0 else -1),
        ("trainer.max_actor_ckpt_to_keep", int(cfg.trainer.keep_checkpoints)),
        ("trainer.n_gpus_per_node", int(cfg.trainer.n_gpus_per_node)),
        ("trainer.nnodes", cfg.trainer.nnodes),
        ("trainer.logger", verl_loggers(cfg)),
        ("trainer.project_name", cfg.tracking.project),
        ("trainer.experiment_name", run.name),
        ("trainer.default_local_dir", str(run / "checkpoints")),
        ("trainer.use_v1", True),
        ("trainer.v1.trainer_mode", TRAINER),
        *device_pairs(cfg),
    ]
    return [f"{key}={hydra_value(value)}" for key, value in pairs]


CPU_WORKER_CPUS = 4
"""Ray's logical CPUs per verl worker on ``trainer.device=cpu``: a worker bundle takes 3 (verl's
``max_colocate_count``), plus room for the TransferQueue, agent-loop and rollout actors. Logical only: the
processes share the machine's cores whatever Ray counts."""
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def model_option(cfg: TrainingConfig, name: str, default: Any) -> Any:
    """A policy option of ``actor_rollout_ref.model`` (the section's extra keys), or ``default``."""
    return (cfg.actor_rollout_ref.model.model_extra or {}).get(name, default)


def attention(cfg: TrainingConfig) -> str:
    """The actor's attention kernel: flash-attention on a GPU where ``flash_attn`` is installed, else PyTorch's
    ``sdpa`` (verl's default, ``flash_attention_2``, fails to load where the package is missing). Decided where
    ``admire train`` runs: on a cluster, install ``flash_attn`` on every GPU node or on none."""
    if device(cfg) == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def device(cfg: TrainingConfig) -> str:
    """``trainer.device``: where verl's workers run."""
    return cfg.trainer.device


def device_pairs(cfg: TrainingConfig) -> list[tuple[str, Any]]:
    """The settings that follow from ``trainer.device`` and the rollout engine.

    Any device: the attention kernel (:func:`attention`); with the ``admire_hf`` rollout, no cache to free
    between rollouts. ``cpu`` (:mod:`admire.integrations.verl.cpu`): the CPU platform in every Ray worker, Ray
    told of ``n_gpus_per_node × nnodes`` GPU slots to schedule verl's workers on, FSDP2 with fp32 parameters
    (autocast to bf16 would change the numbers the CPU trainer is compared with), no ``torch.compile``, one
    agent-loop worker and one TransferQueue storage unit (each is a process on the same cores).
    """
    pairs: list[tuple[str, Any]] = [("++actor_rollout_ref.model.override_config.attn_implementation", attention(cfg))]
    if cfg.actor_rollout_ref.rollout.name == "admire_hf":
        pairs.append(("actor_rollout_ref.rollout.free_cache_engine", False))
    if device(cfg) != "cpu":
        return pairs
    workers = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
    return [
        *pairs,
        ("trainer.device", "cpu"),
        ("++ray_kwargs.ray_init.num_gpus", workers),
        ("ray_kwargs.ray_init.num_cpus", CPU_WORKER_CPUS * workers + 8),
        ("++ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM", PLATFORM_NAME),
        ("++ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS", "1"),
        ("actor_rollout_ref.actor.strategy", "fsdp2"),
        ("actor_rollout_ref.actor.fsdp_config.use_torch_compile", False),
        ("actor_rollout_ref.ref.fsdp_config.use_torch_compile", False),
        ("++actor_rollout_ref.actor.fsdp_config.mixed_precision", FP32),
        ("++actor_rollout_ref.ref.fsdp_config.mixed_precision", FP32),
        ("actor_rollout_ref.rollout.agent.num_workers", 1),
        ("transfer_queue.backend.SimpleStorage.num_data_storage_units", 1),
    ]


def admire_section_overrides(run_dir: str | Path) -> list[str]:
    """Load ``<run>/verl/admire/run.yaml`` (:func:`write_inputs`) as verl's ``admire`` section."""
    folder = Path(run_dir).absolute() / VERL_FOLDER
    return [f"hydra.searchpath=[{hydra_value(f'file://{folder}')}]", f"+{ADMIRE_GROUP}={ADMIRE_OPTION}",
            f"hydra.run.dir={hydra_value(str(folder / 'hydra'))}"]  # not ./outputs of the caller's directory


def user_overrides(cfg: TrainingConfig) -> list[str]:
    return list(cfg.verl.overrides)


def verl_loggers(cfg: TrainingConfig) -> list[str]:
    """``tracking.*`` as verl's ``trainer.logger``: console always, as on the CPU path, and verl's JSONL file
    (one per launch of verl, ``<run>/verl/metrics-<launch time>.jsonl``: verl's file logger truncates its file,
    so a resumed run writes a new one)."""
    tracking = cfg.tracking
    return ["console", "file", *[name for name in ("tensorboard", "swanlab", "wandb") if getattr(tracking, name)]]


def verl_environment(cfg: TrainingConfig, run_dir: str | Path) -> dict[str, str]:
    """Environment for verl's process: the trackers' modes and folders (verl reads them from there, not from
    its config) inside the run directory, and the plugin module for a checkout installed without its entry
    point (``import verl`` loads it either way; registering twice is a no-op)."""
    run = Path(run_dir).absolute()
    tracking = cfg.tracking
    env = {"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE, "TENSORBOARD_DIR": str(run / "tensorboard"),
           "VERL_FILE_LOGGER_PATH": str(run / VERL_FOLDER / f"{METRICS_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}.jsonl")}
    if device(cfg) == "cpu":
        env |= {"VERL_PLATFORM": PLATFORM_NAME, "OMP_NUM_THREADS": "1"}
    if tracking.swanlab:
        env |= {"SWANLAB_MODE": str(tracking.swanlab), "SWANLAB_LOG_DIR": str(run / "swanlab")}
    if tracking.wandb:
        env |= {"WANDB_MODE": str(tracking.wandb), "WANDB_DIR": str(run)}
    return env


def verl_command(cfg: TrainingConfig, run_dir: str | Path, python: str | None = None) -> list[str]:
    """``python -m verl.trainer.main_ppo <overrides>`` as an argv list."""
    return [python or sys.executable, "-m", ENTRY, *verl_overrides(cfg, run_dir)]


def show_command(command: Sequence[str], env: dict[str, str]) -> str:
    """The command as one shell line (environment first), for ``--dry-run`` and logs."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    return " ".join([*assignments, *(shlex.quote(part) for part in command)])


_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+\-]+$")


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar: numbers and booleans as themselves, a list bracketed, a string
    bare when it is a plain token, else single-quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return f"[{','.join(hydra_value(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in ("true", "false", "null") and not _numeric(text):
        return text
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _numeric(text: str) -> bool:
    """Hydra would read ``text`` as a number (so a string such as ``"1"`` must be quoted)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _model_path(path: str) -> str:
    """Absolute when it exists here: verl's Ray workers need not share this process's working directory."""
    local = Path(path).expanduser()
    return str(local.resolve()) if local.exists() else path


# --------------------------------------------------------------------------------------------------
# Checks, in the order admire train runs them: the config, verl's view of it, then this machine
# --------------------------------------------------------------------------------------------------

def check_verl_config(cfg: TrainingConfig) -> None:
    """What the CPU trainer has and verl does not: refused in one line rather than silently dropped.
    (``validate_config`` already checked every key; this is only what the verl backend cannot honour.)"""
    actor = cfg.actor_rollout_ref.actor
    for key in ("target_kl", "max_kl"):
        if getattr(actor, key) is not None:
            raise ValueError(f"actor_rollout_ref.actor.{key}: verl's actor has no KL limit; set "
                             f"actor_rollout_ref.actor.{key}=null for trainer.backend=verl")
    if actor.ppo_max_answer_tokens is not None:
        raise ValueError("actor_rollout_ref.actor.ppo_max_answer_tokens: verl sizes its micro-batches itself "
                         "(actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu or use_dynamic_bsz); set it to "
                         "null for trainer.backend=verl")
    if cfg.actor_rollout_ref.warm_start.enable:
        raise ValueError("actor_rollout_ref.warm_start.enable: the verl backend has no behaviour-cloning warm "
                         "start; start from a model that has one (admire models warm-start writes one) and set it "
                         "to false")
    if cfg.actor_rollout_ref.rollout.name == "admire_hf" and cfg.env.screenshots \
            and _vision_language(str(cfg.actor_rollout_ref.model.path)):
        raise ValueError("env.screenshots: the admire_hf rollout serves text models only, and this model reads "
                         "images; set env.screenshots=false, or roll out with actor_rollout_ref.rollout.name=vllm")


def _vision_language(model_path: str) -> bool:
    """The model directory's config has a vision tower (a model the agent loop would send screenshots to)."""
    import json

    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "vision_config" in config


def verl_config_dir() -> Path:
    """verl's packaged Hydra configs (``ppo_trainer.yaml`` …), found without importing verl."""
    from admire.extras import require

    require("verl", extra="verl", feature="trainer.backend=verl")
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "trainer" / "config"


def compose_verl_config(overrides: Sequence[str]) -> DictConfig:
    """verl's ``ppo_trainer`` config with ``overrides``, composed by Hydra as ``main_ppo`` would: an unknown
    key or a bad value is a ``ValueError`` (one line) here, not a traceback inside Ray."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return compose(config_name="ppo_trainer", overrides=list(overrides))
    except HydraException as exc:
        detail = "; ".join(" ".join(line.split()) for line in str(exc).splitlines() if line.strip())
        raise ValueError(f"verl's config refuses the composed overrides: {detail}; fix the key in verl.overrides "
                         "or report it (admire.integrations.verl.config)") from None
    finally:
        GlobalHydra.instance().clear()


def validate_verl_config(composed: DictConfig) -> None:
    """verl's own ``validate_config`` (batch sizes against GPUs, micro batches …), as ``main_ppo`` runs it
    first; its assertion becomes one line. Imports verl (seconds)."""
    import contextlib
    import io
    import logging
    import warnings

    logging.disable(logging.WARNING)  # at import verl warns that this machine has no GPU (the point here)
    try:
        with warnings.catch_warnings():  # and about engines this project does not use
            warnings.simplefilter("ignore")
            from verl.trainer.ppo.utils import need_critic, need_reference_policy
            from verl.utils.config import validate_config
    finally:
        logging.disable(logging.NOTSET)

    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # it prints "passed"
            warnings.simplefilter("ignore")
            validate_config(composed, use_reference_policy=need_reference_policy(composed),
                            use_critic=need_critic(composed))
    except (AssertionError, ValueError, TypeError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"verl refuses the composed config: {detail}; adjust trainer.tasks_per_epoch, "
                         "actor_rollout_ref.rollout.n, trainer.n_gpus_per_node or verl.overrides") from None


def check_machine(cfg: TrainingConfig) -> None:
    """What this machine must have for the run, before anything is written: one line naming the install or
    the setting for the first piece missing (:func:`machine_problems` lists them all)."""
    problems = machine_problems(cfg)
    if problems:
        raise ValueError(problems[0])


def machine_problems(cfg: TrainingConfig) -> list[str]:
    """Every piece the run needs that this machine lacks or has in a version verl 0.9.1 cannot drive: verl
    itself, the rollout engine (vLLM in ``constraints/gpu.txt``'s range), flash-attention where the overrides
    ask for it, Chromium for local MiniWoB++ envs, and the GPUs (``trainer.device=cuda``)."""
    problems: list[str] = []
    problems += _version_problems("verl", VERL_VERSIONS, "pip install -e '.[verl]'")
    engine = cfg.actor_rollout_ref.rollout.name
    if engine in ENGINES:
        module = ENGINES[engine]
        if importlib.util.find_spec(module) is None:
            problems.append(f"actor_rollout_ref.rollout.name: trainer.backend=verl rolls out with {engine}, which is "
                            f"not installed; on the GPU machine: pip install -c constraints/gpu.txt {engine} (or "
                            "actor_rollout_ref.rollout.name=admire_hf, Hugging Face transformers); --dry-run prints "
                            "the command without either")
        elif engine in ENGINE_VERSIONS:
            problems += _version_problems(engine, ENGINE_VERSIONS[engine], "pip install -c constraints/gpu.txt "
                                          f"{engine} (verl 0.9.1 drives its internals)")
    if _asks_flash_attention(cfg) and importlib.util.find_spec("flash_attn") is None:
        problems.append("verl.overrides: flash_attention_2 is asked for but flash_attn is not installed; "
                        "pip install flash-attn --no-build-isolation, or drop the override (sdpa is used)")
    if _local_miniwob(cfg):
        from admire.envs.miniwob_browser import BrowserNotFound, resolve_browser_paths

        try:
            resolve_browser_paths()
        except BrowserNotFound as exc:
            problems.append(f"env.src: the agent loops start MiniWoB++ browsers here; {exc}")
    if device(cfg) == "cpu":
        return problems
    import torch

    wanted = int(cfg.trainer.n_gpus_per_node)
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < wanted:
        problems.append(f"trainer.n_gpus_per_node: {wanted} GPU(s) wanted, this machine has {found} CUDA device(s); "
                        f"run on a GPU machine, set trainer.n_gpus_per_node={max(found, 1)}, or trainer.device=cpu "
                        "with actor_rollout_ref.rollout.name=admire_hf (--dry-run prints the command without a GPU)")
    return problems


VERL_VERSIONS = (">=0.9.1", "<0.10")
ENGINE_VERSIONS: dict[str, tuple[str, ...]] = {"vllm": (">=0.24", "<0.25"), "sglang": (">=0.5.12", "<0.6")}
"""The engine versions verl 0.9.1 was built against (``constraints/gpu.txt`` pins the same)."""


def installed_version(package: str) -> str | None:
    """The installed distribution's version, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _version_problems(package: str, bounds: Sequence[str], fix: str) -> list[str]:
    """One line when ``package`` is missing or outside ``bounds`` (verl drives its internals: another version
    fails deep inside a worker, not here)."""
    from packaging.specifiers import SpecifierSet

    found = installed_version(package)
    if found is None:
        return [f"trainer.backend=verl needs {package}, which is not installed; {fix}"]
    wanted = SpecifierSet(",".join(bounds))
    if found not in wanted:
        return [f"trainer.backend=verl needs {package}{wanted}, this machine has {found}; {fix}"]
    return []


def _asks_flash_attention(cfg: TrainingConfig) -> bool:
    return any("attn_implementation" in o and "flash_attention" in o for o in user_overrides(cfg))


def _local_miniwob(cfg: TrainingConfig) -> bool:
    return any(src.split(":", 1)[0] == "miniwob" for src in cfg.env.src)


# --------------------------------------------------------------------------------------------------
# Inputs written into the run directory
# --------------------------------------------------------------------------------------------------

def write_inputs(cfg: TrainingConfig, run_dir: str | Path) -> list[Path]:
    """verl's inputs under ``<run>/verl/``: the task dataset (``train.parquet``, ``val.parquet``) and the
    ``admire`` section (the resolved config plus ``run_dir``). Returns the paths written."""
    from admire.fileio import atomic_write_text
    from admire.integrations.verl.dataset import write_task_dataset

    run = Path(run_dir).absolute()
    folder = run / VERL_FOLDER
    paths = list(write_task_dataset(cfg, folder))
    section: dict[str, Any] = plain(cfg)
    section["run_dir"] = str(run)
    group = folder / ADMIRE_GROUP
    group.mkdir(parents=True, exist_ok=True)
    path = group / f"{ADMIRE_OPTION}.yaml"
    atomic_write_text(path, OmegaConf.to_yaml(OmegaConf.create(section)))
    return [*paths, path]
