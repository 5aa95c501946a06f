"""One typed schema of the training config, checked in one place before anything is written.

Hydra composes plain YAML, so before this module a typo or a bad value (``trainer.total_epochs=abc``,
``env.suite=nope``, ``algorithm.adv_estimator=bogus``) surfaced as a traceback deep in the run — after a
run directory was made, browsers started, sometimes after a whole epoch. ``validate_config`` checks every
key of ``configs/demo_miniwob.yaml`` — type, range, choice, and names that must be registered (suites,
environment backends, policies, advantage estimators, milestone generators) — and refuses unknown keys,
all without loading a model or starting a browser. Every failure is one ``ConfigError`` line of the form
``<key>: <what is wrong>; <fix>``.

Every default here is the shipped YAML's (a test fails when they drift). A run written before a key existed
is read with the value it ran with, which ``config.LEGACY_DEFAULTS`` gives and ``config.load_run_config`` fills
in before validation: an old run's ``config.yaml`` resumes as it behaved, and validates.
``actor_rollout_ref.model`` accepts extra keys: they are the chosen policy's own options.

``RESUMABLE_KEYS`` lists what an override given with ``resume=`` may change: how long and how often to
train, evaluate and checkpoint, how many browsers, where they run, logging, and the endpoints and
timeouts of LLM services — never what defines the experiment (rewards, model, algorithm, suite, seed).
"""

from __future__ import annotations

import difflib
import fnmatch
import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from admire.config_files import DEFAULT_CONFIG, PACKAGED_CONFIGS
from admire.envs.miniwob_settle import (
    DEFAULT_SETTLE,
    DEFAULT_SETTLE_MAX_S,
    DEFAULT_SETTLE_QUIET_S,
    SETTLE_MAX_S_LIMIT,
    SETTLE_MODES,
    SETTLE_QUIET_S_LIMIT,
)
from admire.rewards import (
    DESCRIPTION_SOURCES,
    MATCHER_MODES,
    MAX_CONTRAST_MARGIN,
    MILESTONE_KEYS,
    PROGRESS_MODES,
    REWARD_MODES,
    STRATEGIES,
)


class ConfigError(ValueError):
    """A bad configuration, as one line: ``<key>: <what is wrong>; <fix>``."""


# --------------------------------------------------------------------------------------------------
# Value checks that need more than a type
# --------------------------------------------------------------------------------------------------

def _choice(*options: str) -> AfterValidator:
    def check(value: str) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return AfterValidator(check)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    return value


DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
"""The variable an LLM service's key is read from unless ``api_key_env`` names another."""


def _suite(value: str) -> str:
    """A built-in suite, or an ad-hoc comma-separated list of ``<backend>/<task>`` names."""
    from admire.envs.suites import list_suites

    if "/" in value:
        tasks = [t.strip() for t in value.split(",") if t.strip()]
        bad = [t for t in tasks if not _is_task_name(t)]
        if not tasks or bad:
            raise ValueError(f"an ad-hoc suite is comma-separated '<backend>/<task>' names, got {value!r}")
        _check_miniwob_tasks([t for t in tasks if t.startswith("miniwob/")])
        return value
    known = list_suites()
    if value not in known:
        raise ValueError(f"unknown suite {value!r}{_did_you_mean(value, known)}; known suites: {', '.join(known)}")
    return value


def _check_miniwob_tasks(tasks: list[str]) -> None:
    """A MiniWoB++ task name the installed package does not have (``miniwob/click-tset``) is refused here,
    with the close names, rather than by every episode's reset (excluded, so epochs of nothing trained).
    Without the miniwob package installed the backend itself says so when the run starts."""
    if not tasks:
        return
    try:
        from admire.envs.miniwob import check_task
    except ImportError:
        return
    from admire.types import Task

    for task in tasks:
        check_task(Task(name=task))


def _is_task_name(name: str) -> bool:
    backend, sep, template = name.partition("/")
    return bool(sep and backend and template)


def _backends(value: Sequence[str]) -> Sequence[str]:
    if not value:
        raise ValueError("needs at least one environment backend")
    for spec in value:
        _check_registered("env", spec.partition(":")[0])
    return value


def _executor(value: str) -> str:
    """A registered env executor (``local``, ``ray``, or a plug-in's), looked up without importing it."""
    from admire.envs.executors import EXECUTORS

    known = EXECUTORS.names()
    if value not in known:
        raise ValueError(f"must be one of {', '.join(known)}, got {value!r}")
    return value


def _android_ports(console: bool) -> AfterValidator:
    """Emulator ports as ``admire serve`` takes them (``5554-5560``, a port, or a list), checked without adb."""

    def check(value: str | int | list[int] | None) -> str | int | list[int] | None:
        if value is None:
            return value
        from admire.envs.android_devices import DeviceSetupError, console_ports, parse_ports

        text = ",".join(str(p) for p in value) if isinstance(value, list) else str(value)
        try:
            console_ports(text, "ports") if console else parse_ports(text, "ports")
        except DeviceSetupError as exc:
            raise ValueError(str(exc).removeprefix("ports: ")) from None
        return value

    return AfterValidator(check)


def _launcher(value: str) -> str:
    from admire.envs.android_devices import DeviceSetupError, check_launcher

    try:
        return check_launcher(value, "launcher")
    except DeviceSetupError as exc:
        raise ValueError(str(exc).removeprefix("launcher: ")) from None


def _encoder(value: str) -> str:
    """A sentence encoder ``make_encoder`` knows (checked without loading a model or importing torch)."""
    from admire.embeddings import make_encoder

    make_encoder(value)
    return value


def _registered(kind: str) -> AfterValidator:
    """A name that must be in one of the registries (looked up, never built)."""

    def check(value: str) -> str:
        _check_registered(kind, value)
        return value

    return AfterValidator(check)


def _check_registered(kind: str, name: str) -> None:
    """``name`` is in the registry of ``kind`` and loads; otherwise one line: a plug-in that cannot be loaded
    says why (a missing extra, its import failing), an unknown name gets a close match and the known names."""
    from admire.registry import PluginError

    registry = _registry(kind)
    try:
        registry.lookup(name)
    except PluginError as exc:  # a known name: calling it unknown would send the user hunting for a typo
        raise ValueError(str(exc)) from None
    except ValueError:
        known = registry.names()
        raise ValueError(f"unknown {registry.kind} {name!r}{_did_you_mean(name, known)}; "
                         f"registered: {', '.join(known) or 'none'}") from None


def _registry(kind: str) -> Any:
    if kind == "env":
        from admire.envs.base import ENVS

        return ENVS
    if kind == "policy":
        from admire.agent.base import POLICIES

        return POLICIES
    if kind == "estimator":
        from admire.rl.advantages import ADVANTAGE_ESTIMATORS

        return ADVANTAGE_ESTIMATORS
    from admire.milestones.generator import GENERATORS

    return GENERATORS


def _threads(value: int | str | None) -> int | str | None:
    if isinstance(value, str) and value != "auto":
        raise ValueError(f"must be 'auto', null or a whole number >= 1, got {value!r}")
    if isinstance(value, int) and value < 1:
        raise ValueError(f"must be 'auto', null or a whole number >= 1, got {value!r}")
    return value


def _run_name(value: str | None) -> str | None:
    if value is not None and (not value.strip() or "/" in value or "\\" in value or value in (".", "..")):
        raise ValueError(f"must be a plain folder name (no '/', not '.' or '..'), got {value!r}")
    return value


NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
Number = Annotated[float, AfterValidator(_finite)]
NonNeg = Annotated[float, Field(ge=0), AfterValidator(_finite)]
Positive = Annotated[float, Field(gt=0), AfterValidator(_finite)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Suite = Annotated[str, AfterValidator(_suite)]

# Estimators that compare whole trajectories need two in a group: with one, every advantage is 0 and
# the run trains on nothing. An estimator registered elsewhere can say so with ``min_group_size``.
GROUP_MINIMUM = {"grpo_traj": 2, "rloo_step": 2}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RunSection(_Section):
    name: Annotated[str | None, AfterValidator(_run_name)] = None
    dir: str = "runs"
    seed: int = 0


class RaySection(_Section):
    address: str | None = None
    num_cpus_per_env: NonNeg = 0.5
    resources: dict[str, NonNeg] | None = None
    timeout_s: Positive = 120.0
    start_timeout_s: Positive | None = None
    health_timeout_s: Positive | None = None


class AndroidWorldSection(_Section):
    """The emulators of ``env.src=[android_world]`` (docs/android.md), as ``admire serve``'s flags."""

    console_ports: Annotated[str | int | list[int] | None, _android_ports(console=True)] = None
    grpc_ports: Annotated[str | int | list[int] | None, _android_ports(console=False)] = None
    adb_path: str | None = None
    restart_command: str | None = None
    launcher: Annotated[str, AfterValidator(_launcher)] = "android_world.env.env_launcher:load_and_setup_env"
    emulator_setup: bool = False
    boot_timeout_s: Positive = 300.0


class MiniWoBSection(_Section):
    """How the ``miniwob`` backend reads a page after reset and each action (:mod:`admire.envs.miniwob_clock`)."""

    settle: Annotated[str, _choice(*SETTLE_MODES)] = DEFAULT_SETTLE
    settle_quiet_s: Annotated[float, Field(ge=0, le=SETTLE_QUIET_S_LIMIT)] = DEFAULT_SETTLE_QUIET_S
    settle_max_s: Annotated[float, Field(ge=0, le=SETTLE_MAX_S_LIMIT)] = DEFAULT_SETTLE_MAX_S


class EnvSection(_Section):
    src: Annotated[list[str], AfterValidator(_backends)]
    max_envs: PosInt | Annotated[list[PosInt], Field(min_length=1)]
    max_steps: PosInt
    suite: Suite
    train_instances_per_task: PosInt | None = None
    screenshots: bool = False
    executor: Annotated[str, AfterValidator(_executor)] = "local"
    ray: RaySection | None = Field(default_factory=RaySection)
    android_world: AndroidWorldSection | None = Field(default_factory=AndroidWorldSection)
    miniwob: MiniWoBSection | None = Field(default_factory=MiniWoBSection)

    @model_validator(mode="after")
    def _one_count_per_backend(self) -> EnvSection:
        if isinstance(self.max_envs, list) and len(self.max_envs) != len(self.src):
            raise ValueError(f"max_envs: has {len(self.max_envs)} count(s) but env.src has {len(self.src)} "
                             f"backend(s); give one count per backend, e.g. env.max_envs="
                             f"[{','.join(['4'] * len(self.src))}]")
        if "android_world" in self.src and self.executor != "local":
            raise ValueError("executor: env.src=[android_world] attaches to emulators on this machine; "
                             "use env.executor=local")
        return self


class ModelSection(BaseModel):
    """The policy and its options: keys other than ``name`` and ``path`` go to the policy's factory."""

    model_config = ConfigDict(extra="allow", strict=True)
    path: str | None = None
    name: Annotated[str, _registered("policy")]
    # The dom policy's options (another policy ignores them while they keep these values: rl.builders).
    hidden_size: PosInt | None = 32
    prior_strength: NonNeg | None = 0.0
    encoder: Annotated[str, AfterValidator(_encoder)] | None = "all-MiniLM-L6-v2"  # admire.embeddings
    block_features: bool | None = False  # list-item features (agent.features)


class WarmStartSection(_Section):
    enable: bool = False
    suite: Suite = "miniwob-warmstart"
    episodes_per_task: PosInt = 8
    epochs: NonNegInt = 5
    lr: Positive = 0.01
    max_steps: PosInt = 12
    from_run: str | None = None


class RolloutSection(_Section):
    n: PosInt
    name: Literal["vllm", "sglang", "admire_hf"] = "vllm"  # verl's rollout engine (trainer.backend=verl);
    # admire_hf: Hugging Face transformers, CPU or GPU (admire.integrations.verl.hf_rollout)


class ActorSection(_Section):
    lr: Positive
    ppo_epochs: PosInt
    ppo_mini_batch_size: PosInt
    clip_ratio_low: NonNeg
    clip_ratio_high: NonNeg
    kl_coef: NonNeg
    max_grad_norm: Positive
    entropy_coef: NonNeg = 0.0
    target_kl: Positive | None = 0.02
    max_kl: Positive | None = None
    ppo_max_answer_tokens: PosInt | None = None
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] | None = None


class ActorRolloutRefSection(_Section):
    model: ModelSection
    warm_start: WarmStartSection  # a run that predates it gets {enable: false} (config.LEGACY_DEFAULTS)
    rollout: RolloutSection
    actor: ActorSection


class AlgorithmSection(_Section):
    adv_estimator: Annotated[str, _registered("estimator")]
    norm_adv_by_std_in_grpo: bool = True
    std_floor: NonNeg = 0.1
    failed_group_baseline: Literal["mean", "zero"] = "mean"


class TrainerSection(_Section):
    total_epochs: NonNegInt
    total_env_steps: PosInt | None = None
    tasks_per_epoch: PosInt
    n_gpus_per_node: NonNegInt = 0
    eval_every: NonNegInt
    eval_episodes: Annotated[int, Field(ge=1, le=100_000)]  # envs.suites.MAX_EVAL_EPISODES_PER_TASK
    eval_split: Literal["validation", "test"] = "test"  # which held-out seeds (admire.envs.suites)
    threads: Annotated[int | str | None, AfterValidator(_threads)] = "auto"
    keep_checkpoints: PosInt = 3
    backend: Literal["cpu", "verl"] = "cpu"  # verl: admire.integrations.verl composes and starts verl's trainer
    nnodes: PosInt = 1  # machines of n_gpus_per_node GPUs each (trainer.backend=verl)
    device: Literal["cuda", "cpu"] = "cuda"  # where verl's workers run (trainer.backend=verl); cpu: gloo, FSDP2,
    # the admire_hf rollout, n_gpus_per_node CPU worker processes (admire.integrations.verl.cpu)


class JudgeSection(_Section):
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    timeout: Positive = 30
    max_retries: NonNegInt = 3
    max_steps_per_call: PosInt | None = None


class LLMSection(_Section):
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    timeout: Positive = 30
    max_retries: NonNegInt = 3


class RewardSection(_Section):
    mode: Annotated[str, _choice(*REWARD_MODES)]
    format_weight: NonNeg
    judge_weight: NonNeg = 0.3
    judge_decay: Fraction = 0.9
    judge: JudgeSection | None = Field(default_factory=JudgeSection)


class MilestoneSection(_Section):
    enable: bool
    threshold: Fraction
    weight: NonNeg
    decay: Fraction
    strategy: Annotated[str, _choice(*STRATEGIES)]
    zeta: NonNeg
    progress: Annotated[str, _choice(*PROGRESS_MODES)]
    description: Annotated[str, _choice(*DESCRIPTION_SOURCES)]
    key: Annotated[str, _choice(*MILESTONE_KEYS)]
    matcher: Annotated[str, _choice(*MATCHER_MODES)] = "grounded"
    contrast_margin: Annotated[float, Field(ge=0, le=MAX_CONTRAST_MARGIN)] | None = 0.05
    prose_threshold: Annotated[float, Field(ge=-1, le=1)] | None = 0.3
    encoder: Annotated[str, AfterValidator(_encoder)] = "all-MiniLM-L6-v2"
    update_rule: Annotated[str, _choice("common", "shorter")] = "common"
    mode: Annotated[str, _choice("adaptive", "static")]
    static_path: str | None = None
    update_before_reward: bool
    generator: Annotated[str, _registered("generator")]
    llm: LLMSection = Field(default_factory=LLMSection)

    @model_validator(mode="after")
    def _static_needs_a_file(self) -> MilestoneSection:
        if self.mode == "static" and not self.static_path:
            raise ValueError("static_path: milestone_reward.mode=static needs milestones to freeze; set "
                             "milestone_reward.static_path=<file.json> (admire milestones export writes one)")
        return self


class ProcessRewardSection(_Section):
    enable: bool = False
    weight: Number = 1.0
    decay_gamma: Fraction = 0.99


class TrackingSection(_Section):
    project: str = "admire"  # the SwanLab / W&B project (verl's trainer.project_name)
    tensorboard: bool = True
    swanlab: Annotated[str, _choice("offline", "local", "cloud")] | None = "offline"
    wandb: Annotated[str, _choice("offline", "online")] | None = None


def _verl_override(value: str) -> str:
    key, sep, _ = value.partition("=")
    if not sep or not key.strip().lstrip("+~"):
        raise ValueError(f"must be verl Hydra overrides as key=value, got {value!r}; e.g. "
                         "verl.overrides=[actor_rollout_ref.rollout.tensor_model_parallel_size=1]")
    return value


class VerlSection(_Section):
    """verl's own settings that this project has no key for, as Hydra overrides passed to verl unchanged
    (``trainer.backend=verl``; ``admire.integrations.verl.config`` checks them against verl's config)."""

    overrides: list[Annotated[str, AfterValidator(_verl_override)]] = Field(default_factory=list)


class TrainingConfig(_Section):
    """The whole training config (the layout of ``configs/demo_miniwob.yaml``)."""

    run: RunSection
    resume: str | None = None
    env: EnvSection
    actor_rollout_ref: ActorRolloutRefSection
    algorithm: AlgorithmSection
    trainer: TrainerSection
    reward: RewardSection
    milestone_reward: MilestoneSection
    process_reward: ProcessRewardSection = Field(default_factory=ProcessRewardSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    verl: VerlSection = Field(default_factory=lambda: VerlSection())

    @model_validator(mode="after")
    def _verl_trains_a_model_on_gpus(self) -> TrainingConfig:
        if self.trainer.backend != "verl":
            return self
        model = self.actor_rollout_ref.model
        if model.name != "lm" or not model.path:
            raise ValueError("actor_rollout_ref.model: trainer.backend=verl trains a Hugging Face model; set "
                             "actor_rollout_ref.model.name=lm and actor_rollout_ref.model.path=<model directory>")
        if self.trainer.n_gpus_per_node < 1:
            raise ValueError("trainer.n_gpus_per_node: trainer.backend=verl trains on GPUs; set the GPUs of each "
                             "node, e.g. trainer.n_gpus_per_node=8 (with trainer.device=cpu: worker processes)")
        if self.trainer.device == "cpu" and self.trainer.nnodes > 1:
            raise ValueError("trainer.nnodes: trainer.device=cpu runs verl's workers on this machine only (its Ray "
                             "is started here, with CPU slots standing in for GPUs); set trainer.nnodes=1")
        if self.trainer.device == "cpu" and self.actor_rollout_ref.rollout.name != "admire_hf":
            raise ValueError(f"actor_rollout_ref.rollout.name: {self.actor_rollout_ref.rollout.name} needs a GPU; "
                             "with trainer.device=cpu set actor_rollout_ref.rollout.name=admire_hf")
        return self

    @model_validator(mode="after")
    def _group_size_fits_the_estimator(self) -> TrainingConfig:
        from admire.rl.advantages import ADVANTAGE_ESTIMATORS

        name = self.algorithm.adv_estimator
        needed = getattr(ADVANTAGE_ESTIMATORS[name], "min_group_size", GROUP_MINIMUM.get(name, 1))
        n = self.actor_rollout_ref.rollout.n
        if n < needed:
            raise ValueError(f"actor_rollout_ref.rollout.n: {name} compares the episodes of a group, so it needs "
                             f"n >= {needed}, got {n} (every advantage would be 0); set "
                             f"actor_rollout_ref.rollout.n={max(needed, 4)} or algorithm.adv_estimator=grpo_step")
        return self

    @model_validator(mode="after")
    def _warm_start_on_other_tasks(self) -> TrainingConfig:
        warm = self.actor_rollout_ref.warm_start
        if not warm.enable or "/" in self.env.suite:
            return self
        from admire.envs.suites import get_suite

        overlap = sorted(set(get_suite(warm.suite).tasks) & set(get_suite(self.env.suite).tasks))
        if overlap:
            raise ValueError(f"actor_rollout_ref.warm_start.suite: {warm.suite!r} shares tasks with env.suite "
                             f"{self.env.suite!r} ({', '.join(overlap)}); demonstrations must come from other "
                             "tasks: pick another warm_start.suite")
        return self


# --------------------------------------------------------------------------------------------------
# Validation, and errors as one line
# --------------------------------------------------------------------------------------------------

def validate_config(cfg: DictConfig | Mapping[str, Any]) -> TrainingConfig:
    """The typed config, or a ``ConfigError`` naming the first bad key, what is wrong and the fix."""
    values = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    try:
        return TrainingConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, values)) from None


def _one_line(exc: ValidationError, values: Any) -> str:
    error = _most_telling(exc.errors(include_url=False))
    key = _dotted([part for part in error["loc"] if not _is_union_tag(part)])
    kind = error["type"]
    if kind == "extra_forbidden":
        full = _first_leaf(key, error.get("input"))
        return f"{full}: unknown key; {suggest(full)}"
    top = key.split("[", 1)[0]
    default = shipped_default(top)
    example = (f"e.g. {top}={_show(default)}" if default is not _NONE and default is not None
               and not isinstance(default, dict) else "see the README's 'Configuration keys'")
    if kind == "missing":
        return f"{key}: missing; add it, {example}"
    message = str(error["msg"])
    if kind == "value_error":
        what = message.removeprefix("Value error, ")
        head, sep, rest = what.partition(": ")
        if sep and " " not in head and "'" not in head:  # a model validator names its key itself
            return f"{key}.{head}: {rest}" if key else what
    else:
        what = message.replace("Input should be", "must be", 1)
        what = f"{what[0].lower()}{what[1:]}, got {_show(error.get('input'))}"
    return f"{key}: {what}" if "; " in what else f"{key}: {what}; {example}"


def _most_telling(errors: Sequence[Any]) -> Any:
    """Of a union's errors (``5`` or ``[5]``), the branch whose type matched but whose value did not."""
    for error in errors:
        if not str(error["type"]).endswith("_type") and error["type"] != "union_tag_invalid":
            return error
    return errors[0]


def _is_union_tag(part: Any) -> bool:
    """Pydantic names the branch of a union in an error's location (``int``, ``list[...]``, ``function-after[...]``)."""
    return isinstance(part, str) and (part in ("int", "str", "float", "bool", "none") or not part.isidentifier())


def _dotted(loc: Sequence[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _first_leaf(key: str, value: Any) -> str:
    """``nope`` given as ``{key: 1}`` is reported as ``nope.key``: the key the user typed."""
    while isinstance(value, Mapping) and len(value) == 1:
        (child, value), = value.items()
        key = f"{key}.{child}"
    return key


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value and value.strip() == value and "," not in value else repr(value)
    return str(value).replace(" ", "")


_NONE = object()


@cache
def _shipped() -> dict[str, Any]:
    loaded = OmegaConf.to_container(OmegaConf.load(PACKAGED_CONFIGS / f"{DEFAULT_CONFIG}.yaml"), resolve=False)
    assert isinstance(loaded, dict)
    return loaded


def shipped_default(key: str) -> Any:
    """The value of a dotted key in the packaged config (``_NONE`` when it has none)."""
    node: Any = _shipped()
    for part in key.replace("[", ".[").split("."):
        if part.startswith("["):
            index = int(part.strip("[]"))
            node = node[index] if isinstance(node, list) and index < len(node) else _NONE
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _NONE
    return node


@cache
def known_keys() -> list[str]:
    """Every dotted key of the schema (``trainer.total_epochs``…), for close matches."""
    keys: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            nested = [a for a in (annotation, *getattr(annotation, "__args__", ())) if isinstance(a, type)
                      and issubclass(a, BaseModel)]
            if nested:
                walk(nested[0], f"{prefix}{name}.")
            else:
                keys.append(f"{prefix}{name}")

    walk(TrainingConfig, "")
    return keys


def suggest(key: str) -> str:
    """``; did you mean <key>?`` for a misspelt dotted key, or a pointer to the list of keys."""
    close = difflib.get_close_matches(key, known_keys(), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else "see the README's 'Configuration keys' for the keys"


def _did_you_mean(value: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# --------------------------------------------------------------------------------------------------
# Overrides given on resume
# --------------------------------------------------------------------------------------------------

RESUMABLE_KEYS: tuple[str, ...] = (
    "trainer.total_epochs",
    "trainer.total_env_steps",
    "trainer.eval_every",
    "trainer.eval_episodes",
    "trainer.threads",
    "trainer.keep_checkpoints",
    "env.max_envs",
    "env.src",
    "env.executor",
    "env.ray.*",
    "env.screenshots",
    "tracking.*",
    "reward.judge.base_url",
    "reward.judge.api_key_env",
    "reward.judge.timeout",
    "reward.judge.max_retries",
    "milestone_reward.llm.base_url",
    "milestone_reward.llm.api_key_env",
    "milestone_reward.llm.timeout",
    "milestone_reward.llm.max_retries",
)
"""What a ``resume=`` override may change: length, evaluation cadence, checkpoints kept, threads, how
many browsers and where they run, logging, and where the LLM services are and how patiently they are
called. ``env.src`` may name another address for the same backends (a server that moved), not other
backends (``admire train`` checks). Everything else defines the experiment; changing it mid-run would mix
two experiments."""


def parse_override(override: str) -> tuple[str, str]:
    """``key=value`` (a leading ``+`` allowed) as ``(key, value)``; anything else is a ``ConfigError``."""
    key, sep, value = override.lstrip("+").partition("=")
    if not sep or not key or key.startswith("~"):
        raise ConfigError(f"{override}: not a key=value override; write it as key=value, "
                          "e.g. trainer.total_epochs=80")
    return key.strip(), value


def check_resume_overrides(overrides: Sequence[str]) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs of resume overrides, each a known key that may change on resume; a key
    given under verl's name is returned under this project's (``trainer.test_freq`` -> ``trainer.eval_every``;
    ``trainer.logger`` -> each ``tracking.*`` key it sets)."""
    from admire.config_names import canonical_key

    pairs = []
    known = set(known_keys())
    for given, value in (parse_override(o) for o in overrides):
        for key in canonical_key(given):
            if key not in known and not key.startswith("actor_rollout_ref.model."):  # the policy's own options
                raise ConfigError(f"{given}: unknown key; {suggest(given)}")
            if not any(fnmatch.fnmatch(key, pattern) for pattern in RESUMABLE_KEYS):
                raise ConfigError(f"{given}: may not change when resuming (it defines the experiment); start a new "
                                  f"run instead, or change only {', '.join(RESUMABLE_KEYS)}")
            pairs.append((key, value))
    return pairs


# --------------------------------------------------------------------------------------------------
# The experiment a run's checkpoints were trained under
# --------------------------------------------------------------------------------------------------

WHERE_THE_RUN_IS: tuple[str, ...] = ("run.dir", "run.name")
"""Where a run lives, not what it is: a run folder may be moved or renamed and still resume."""


def experiment_values(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Every key that defines the experiment (all but ``RESUMABLE_KEYS`` and where the run lives), dotted,
    with its resolved value: what each checkpoint records, so that a resume can tell that ``config.yaml``
    was edited by hand since (a ``resume=`` override of such a key is refused before it gets here)."""
    tree = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping) and node:
            for name, value in node.items():
                walk(value, f"{prefix}{name}.")
            return
        key = prefix.rstrip(".")
        if key not in WHERE_THE_RUN_IS and not any(fnmatch.fnmatch(key, p) for p in RESUMABLE_KEYS):
            flat[key] = node

    walk(tree, "")
    return flat


def experiment_changes(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``key: was → now`` for each experiment key whose value differs from what a checkpoint recorded. A key
    the checkpoint does not know (one added to the schema since) is not a change."""
    missing = object()
    return [f"{key}: {recorded[key]!r} -> {current.get(key, '(removed)')!r}" for key in sorted(recorded)
            if current.get(key, missing) != recorded[key]]
