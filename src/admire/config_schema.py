"""One typed schema of the training config, checked in one place before anything is written.

Hydra composes plain YAML, so before this module a typo or a bad value (``trainer.total_epochs=abc``,
``env.suite=nope``, ``algorithm.adv_estimator=bogus``) surfaced as a traceback deep in the run — after a
run directory was made, browsers started, sometimes after a whole epoch. ``validate_config`` checks every
key of ``configs/demo_miniwob.yaml`` — type, range, choice, and names that must be registered (suites,
environment backends, policies, advantage estimators, milestone generators) — and refuses unknown keys,
all without loading a model or starting a browser. Every failure is one ``ConfigError`` line of the form
``<key>: <what is wrong>; <fix>``.

Every default here is the shipped YAML's (a test fails when they drift). A run written before a key existed
is read with the value it ran with: ``config.read_run_config`` migrates a stored config to today's layout
(``admire.config_migration``, versioned by ``config_version``) before validation, so an old run's ``config.yaml``
resumes as it behaved, and validates.
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

from admire.config_files import DEFAULT_CONFIG, PACKAGED_CONFIGS, plain
from admire.config_migration import CONFIG_VERSION
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
DEFAULT_LOSS_AGG_MODE = "seq-mean-token-mean"
"""``actor_rollout_ref.actor.loss_agg_mode: null`` on both trainers: each step's tokens averaged, then the steps
(the paper's Eq. 12)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RunSection(_Section):
    name: Annotated[str | None, AfterValidator(_run_name)] = Field(
        None, description="Run folder name under run.dir, a plain name (no '/', not '.' or '..'); null = "
                          "<config>-<timestamp>.")
    dir: str = Field("runs", description="Folder that holds the run folders.")
    seed: int = Field(0, description="Seed of the run's random states: the policy's initial weights and the tasks "
                                     "sampled each epoch.")


class RaySection(_Section):
    address: str | None = Field(None, description="Ray cluster to join (auto: the one `ray start` began); null = a "
                                                  "new private Ray on this machine.")
    num_cpus_per_env: NonNeg = Field(0.5, description="Ray's logical CPU share of one device (a MiniWoB browser uses "
                                                      "half a core to one; 0.5 packs two per core).")
    resources: dict[str, NonNeg] | None = Field(
        None, description="Custom Ray resources each device needs, e.g. {browser: 1} for nodes started with "
                          "--resources='{\"browser\": 8}'; null = none.")
    timeout_s: Positive = Field(120.0, description="Seconds any call to a device actor may take before the device "
                                                   "counts as crashed (a hung browser).")
    start_timeout_s: Positive | None = Field(None, description="Seconds added to a new actor's first call (waiting "
                                                               "for a worker and free resources); null = 120.")
    health_timeout_s: Positive | None = Field(None, description="Seconds a device actor's health check may take "
                                                                "before it counts as unhealthy; null = 10.")


class AndroidWorldSection(_Section):
    """The emulators of ``env.src=[android_world]`` (docs/android.md), as ``admire serve``'s flags."""

    console_ports: Annotated[str | int | list[int] | None, _android_ports(console=True)] = Field(
        None, description="Emulator console ports, one per env: a range (5554-5560: every even port), a port or a "
                          "list; null = 5554, 5556, ...")
    grpc_ports: Annotated[str | int | list[int] | None, _android_ports(console=False)] = Field(
        None, description="The emulators' gRPC ports in the same order (e.g. 8554-8557); null = each console port + "
                          "3000.")
    adb_path: str | None = Field(None, description="The adb binary; null = adb on PATH, else "
                                                   "~/Android/Sdk/platform-tools/adb.")
    restart_command: str | None = Field(None, description="Run without a shell when an emulator must restart, with "
                                                          "fields {console_port} {grpc_port} {serial} {adb}; null = a "
                                                          "restart only waits for the emulator to boot.")
    launcher: Annotated[str, AfterValidator(_launcher)] = Field(
        "android_world.env.env_launcher:load_and_setup_env", description="module:attr of the function that connects "
                                                                         "to an emulator.")
    emulator_setup: bool = Field(False, description="Install AndroidWorld's apps on each emulator when it is attached "
                                                    "(once per AVD; takes minutes).")
    boot_timeout_s: Positive = Field(300.0, description="Seconds a restarted emulator may take to boot.")


class MiniWoBSection(_Section):
    """How the ``miniwob`` backend reads a page after reset and each action (:mod:`admire.envs.miniwob_clock`)."""

    settle: Annotated[str, _choice(*SETTLE_MODES)] = Field(
        DEFAULT_SETTLE, description="How a page is read after reset and each action: virtual (play the page's clock "
                                    "until it settles), wall (wait in real time) or off (at once).")
    settle_quiet_s: Annotated[float, Field(ge=0, le=SETTLE_QUIET_S_LIMIT)] = Field(
        DEFAULT_SETTLE_QUIET_S, description="settle=wall only: seconds with no DOM change that count as settled.")
    settle_max_s: Annotated[float, Field(ge=0, le=SETTLE_MAX_S_LIMIT)] = Field(
        DEFAULT_SETTLE_MAX_S, description="Seconds one settle plays (page time) or waits (wall time) at most.")


class EnvSection(_Section):
    src: Annotated[list[str], AfterValidator(_backends)] = Field(
        description="Environment backends (miniwob, android_world, remote:<url>); with several, each runs the "
                    "suite's tasks.")
    max_envs: PosInt | Annotated[list[PosInt], Field(min_length=1)] = Field(
        description="Devices stepping concurrently: one count per backend of env.src, or one number for each (2 on 2 "
                    "cores).")
    max_steps: PosInt = Field(description="Step budget of one episode.")
    suite: Suite = Field(description="Task suite: a built-in suite's name, or comma-separated <backend>/<task> names.")
    train_instances_per_task: PosInt | None = Field(
        None, description="null = fresh training seeds every epoch; N = a fixed pool of N seeds per task that recurs "
                          "(the paper's fixed task set).")
    screenshots: bool = Field(False, description="Keep screenshots in trajectories, for the viewer (off in training: "
                                                 "it halves step time).")
    executor: Annotated[str, AfterValidator(_executor)] = Field(
        "local", description="Where devices run: local (in this process) or ray (Ray actors, here or on a cluster).")
    ray: RaySection | None = Field(
        default_factory=RaySection, description="Placement and timeouts of devices run as Ray actors "
                                                "(env.executor=ray).")
    android_world: AndroidWorldSection | None = Field(
        default_factory=AndroidWorldSection, description="The running emulators of env.src=[android_world], one per "
                                                         "env.")
    miniwob: MiniWoBSection | None = Field(
        default_factory=MiniWoBSection, description="How the miniwob backend reads a page after reset and each "
                                                    "action.")

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
    path: str | None = Field(None, description="Weights to start from, never downloaded: lm: a local Hugging Face "
                                               "directory; dom: a checkpoint (a run directory, its checkpoints/, "
                                               "latest.json or an epoch_XXXX entry; never a pickle .pt); null = "
                                               "none.")
    name: Annotated[str, _registered("policy")] = Field(
        description="The policy, a registered name: dom (the CPU DOM policy) or lm (a Hugging Face language model).")
    # The dom policy's options (another policy ignores them while they keep these values: rl.builders).
    hidden_size: PosInt | None = Field(32, description="dom policy: width of its hidden layer.")
    prior_strength: NonNeg | None = Field(0.0, description="dom policy: strength of hand-set initial weights; 0 = a "
                                                           "plain random network.")
    # admire.embeddings
    encoder: Annotated[str, AfterValidator(_encoder)] | None = Field(
        "all-MiniLM-L6-v2", description="dom policy: its sentence encoder (as milestone_reward.encoder); set "
                                        "embedding_dim with another.")
    # list-item features (agent.features)
    block_features: bool | None = Field(False, description="dom policy: also see which list item (a post, a dish) a "
                                                           "repeated control belongs to (on for miniwob-long).")


class WarmStartSection(_Section):
    enable: bool = Field(False, description="Imitate oracle demonstrations of other tasks before RL (the analogue of "
                                            "a pretrained base).")
    suite: Suite = Field("miniwob-warmstart", description="Suite the demonstrations come from; it must share no task "
                                                          "with env.suite.")
    episodes_per_task: PosInt = Field(8, description="Oracle demonstrations recorded per task of the warm-start suite.")
    epochs: NonNegInt = Field(5, description="Passes of behaviour cloning over the demonstrations.")
    lr: Positive = Field(0.01, description="Learning rate of behaviour cloning.")
    max_steps: PosInt = Field(12, description="Step budget of one demonstration.")
    from_run: str | None = Field(None, description="A run directory whose warm start, random states and first "
                                                   "evaluation this run starts from, so the arms of a comparison "
                                                   "share one start; null = off.")


class RolloutSection(_Section):
    n: PosInt = Field(description="Group size B: rollouts of each task instance per batch.")
    # verl's rollout engine (trainer.backend=verl);
    # admire_hf: Hugging Face transformers, CPU or GPU (admire.integrations.verl.hf_rollout)
    name: Literal["vllm", "sglang", "admire_hf"] = Field(
        "vllm", description="verl's rollout engine (trainer.backend=verl): vllm, sglang or admire_hf (Hugging Face "
                            "transformers, CPU or GPU).")


class ActorSection(_Section):
    lr: Positive = Field(description="Learning rate of the PPO updates.")
    ppo_epochs: PosInt = Field(description="PPO passes over each batch (fewer when target_kl stops them early).")
    ppo_mini_batch_size: PosInt = Field(description="Samples (agent steps) per PPO minibatch.")
    clip_ratio_low: NonNeg = Field(description="PPO clip: the probability ratio is clipped below at 1 - this.")
    clip_ratio_high: NonNeg = Field(description="PPO clip: the probability ratio is clipped above at 1 + this.")
    kl_coef: NonNeg = Field(description="Weight of the k3 KL penalty to the reference policy; 0 = none.")
    max_grad_norm: Positive = Field(description="Gradient norm each optimizer step is clipped to.")
    entropy_coef: NonNeg = Field(0.0, description="Entropy bonus of the PPO loss (the paper: none); ppo/entropy is "
                                                  "logged either way.")
    target_kl: Positive | None = Field(0.02, description="Skip an epoch's remaining PPO passes once the approx KL "
                                                         "(k3) from the acting policy exceeds this; null = a fixed "
                                                         "ppo_epochs.")
    max_kl: Positive | None = Field(None, description="Trust region per optimizer step: a step past this approx KL is "
                                                      "shrunk along its direction and the update ends; null = off.")
    ppo_max_answer_tokens: PosInt | None = Field(
        None, description="lm policy: score and backpropagate a minibatch in parts of at most this many answer "
                          "tokens (same gradient, less memory); null = at once.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] | None = Field(
        None, description="How the loss is aggregated (verl's names, the same on both trainers); null = "
                          "seq-mean-token-mean (each step's tokens averaged, then the steps; DAPO: token-mean).")


class ActorRolloutRefSection(_Section):
    model: ModelSection = Field(description="The policy; keys not listed here are the policy's own options (lm: "
                                            "temperature, top_p, ...).")
    # a run that predates it gets {enable: false} (config_migration.LEGACY_DEFAULTS)
    warm_start: WarmStartSection = Field(description="Behaviour cloning on other tasks before RL.")
    rollout: RolloutSection = Field(description="The group size, and verl's rollout engine.")
    actor: ActorSection = Field(description="The PPO update.")


class AlgorithmSection(_Section):
    adv_estimator: Annotated[str, _registered("estimator")] = Field(
        description="Advantage estimator, a registered name: grpo_step (paper Eq. 13), grpo_traj, rloo_step or "
                    "dapo_step.")
    norm_adv_by_std_in_grpo: bool = Field(True, description="Divide by the group's std, A = (R - mean)/std (paper Eq. "
                                                            "13); false = centring only.")
    std_floor: NonNeg = Field(0.1, description="Divide by max(std, this), so λ(e) shrinks tie groups' advantages; 0.0 "
                                               "= the paper.")
    failed_group_baseline: Literal["mean", "zero"] = Field(
        "mean", description="A group with no success is centred on its mean (the paper) or on zero (its milestone "
                            "hits pushed up, its other steps left at 0).")
    filter_groups: bool = Field(False, description="Drop the groups the estimator does not keep (dapo_step: all "
                                                   "rewards tie) from the loss, on both trainers (DAPO: true).")


class TrainerSection(_Section):
    total_epochs: NonNegInt = Field(description="Epochs to train; 0 = evaluate only.")
    total_env_steps: PosInt | None = Field(None, description="Stop once this many env steps were taken (runs compared "
                                                             "at equal env steps); null = off.")
    tasks_per_epoch: PosInt = Field(description="Tasks sampled per epoch, one group each.")
    n_gpus_per_node: NonNegInt = Field(0, description="GPUs per node (trainer.backend=verl; with trainer.device=cpu: "
                                                      "worker processes); 0 on the CPU path.")
    eval_every: NonNegInt = Field(description="Evaluate greedily on held-out seeds every this many epochs; 0 = never.")
    # envs.suites.MAX_EVAL_EPISODES_PER_TASK
    eval_episodes: Annotated[int, Field(ge=1, le=100_000)] = Field(
        description="Held-out seeds per task at each evaluation.")
    # which held-out seeds (admire.envs.suites)
    eval_split: Literal["validation", "test"] = Field(
        "test", description="Which held-out seeds: validation (2,000,000 + i), read for every choice, or test "
                            "(1,000,000 + i), read once per configuration for a reported table.")
    threads: Annotated[int | str | None, AfterValidator(_threads)] = Field(
        "auto", description="torch threads: a whole number, or auto / null (1 on machines with up to 4 cores, else "
                            "half the cores).")
    keep_checkpoints: PosInt = Field(3, description="Newest epoch checkpoints kept in the run folder; older ones are "
                                                    "removed.")
    # verl: admire.integrations.verl composes and starts verl's trainer
    backend: Literal["cpu", "verl"] = Field("cpu", description="The trainer: cpu (this project's) or verl (verl + "
                                                               "Ray, admire.integrations.verl).")
    nnodes: PosInt = Field(1, description="Machines of n_gpus_per_node GPUs each (trainer.backend=verl).")
    # where verl's workers run (trainer.backend=verl); cpu: gloo, FSDP2,
    # the admire_hf rollout, n_gpus_per_node CPU worker processes (admire.integrations.verl.cpu)
    device: Literal["cuda", "cpu"] = Field("cuda", description="Where verl's workers run (trainer.backend=verl): "
                                                               "cuda, or cpu (gloo and FSDP2; needs "
                                                               "actor_rollout_ref.rollout.name=admire_hf).")


class LLMSection(_Section):
    base_url: str | None = Field(None, description="The llm generator's OpenAI-compatible endpoint; null = "
                                                   "OPENAI_BASE_URL.")
    model: str | None = Field(None, description="The served model's name.")
    api_key_env: str = Field(DEFAULT_API_KEY_ENV, description="Environment variable the API key is read from.")
    timeout: Positive = Field(30, description="Seconds one request may take.")
    max_retries: NonNegInt = Field(3, description="Retries of a failed request (Retry-After is honoured).")


class JudgeSection(LLMSection):
    """The step judge of ``reward.mode=judge``: an LLM endpoint, and how many steps one call judges."""

    base_url: str | None = Field(None, description="The step judge's OpenAI-compatible endpoint, e.g. "
                                                   "http://localhost:8000/v1; null = OPENAI_BASE_URL.")
    model: str | None = Field(None, description="The served model's name; required in judge mode.")
    max_steps_per_call: PosInt | None = Field(None, description="Judge long trajectories in windows of this many "
                                                                "steps; null = a whole trajectory per call.")


class RewardSection(_Section):
    mode: Annotated[str, _choice(*REWARD_MODES)] = Field(
        description="admire (outcome + format + milestone), outcome (the baseline: outcome + format) or judge (an "
                    "LLM judge's step scores).")
    format_weight: NonNeg = Field(description="η: weight of the format penalty (-1 on a step whose output is not a "
                                              "valid action).")
    judge_weight: NonNeg = Field(0.3, description="reward.mode=judge: λ0 of the judge's step scores (weighted like "
                                                  "the milestone reward).")
    judge_decay: Fraction = Field(0.9, description="reward.mode=judge: γ of the judge's weight λ0·γ^e.")
    judge: JudgeSection | None = Field(
        default_factory=JudgeSection, description="The LLM step judge of reward.mode=judge, any OpenAI-compatible "
                                                  "endpoint (vLLM, OpenAI...).")


class MilestoneSection(_Section):
    enable: bool = Field(description="Pay the milestone reward in reward.mode=admire (false: outcome + format only).")
    threshold: Fraction = Field(description="δ: the cosine similarity a step's description must exceed to hit a "
                                            "milestone.")
    weight: NonNeg = Field(description="λ0: the milestone reward's weight at epoch 0.")
    decay: Fraction = Field(description="γ of λ(e) = λ0·γ^e; 1.0 = no decay.")
    strategy: Annotated[str, _choice(*STRATEGIES)] = Field(
        description="mix (denoise successes, scaffold failures), success_only, failure_only or uniform (scaffold "
                    "both).")
    zeta: NonNeg = Field(description="ζ: weight of a hit's similarity on a failure's hit steps (progress k/K + "
                                     "ζ·similarity).")
    progress: Annotated[str, _choice(*PROGRESS_MODES)] = Field(
        description="A failure's progress k/K: prefix (only up to its last hit), total (every step, Eq. 11) or "
                    "running (the hits so far).")
    description: Annotated[str, _choice(*DESCRIPTION_SOURCES)] = Field(
        description="Which step description is matched: grounded (from the action taken), model (the policy's own) "
                    "or both (the better).")
    key: Annotated[str, _choice(*MILESTONE_KEYS)] = Field(
        description="What a milestone list is kept per: skeleton (task + instruction with its values as slots), "
                    "task, or instruction (the paper).")
    matcher: Annotated[str, _choice(*MATCHER_MODES)] = Field(
        "grounded", description="grounded (a hit also needs the step's verb, role, label and value to agree) or "
                                "sbert (text only, the paper).")
    contrast_margin: Annotated[float, Field(ge=0, le=MAX_CONTRAST_MARGIN)] | None = Field(
        0.05, description="grounded, milestones without a signature: the cosine gap by which the step must beat the "
                          "same action on the screen's other elements; 0 or null = off.")
    prose_threshold: Annotated[float, Field(ge=-1, le=1)] | None = Field(
        0.3, description="grounded, milestones without a signature: the cosine that suffices when the prose names "
                         "the step's action and element; null = off.")
    encoder: Annotated[str, AfterValidator(_encoder)] = Field(
        "all-MiniLM-L6-v2", description="The matcher's sentence encoder: the installed package's model or a local "
                                        "model directory.")
    update_rule: Annotated[str, _choice("common", "shorter")] = Field(
        "common", description="common (keep the checkpoints every success passes through) or shorter (replace only "
                              "with a strictly shorter list).")
    mode: Annotated[str, _choice("adaptive", "static")] = Field(
        description="adaptive (lists written and updated from successes) or static (imported from static_path, "
                    "frozen).")
    static_path: str | None = Field(None, description="Milestones JSON to import and freeze when mode=static (admire "
                                                      "milestones export writes one).")
    update_before_reward: bool = Field(description="Update the lists from a batch's successes before its rewards are "
                                                   "computed, so their failed siblings are already scaffolded.")
    generator: Annotated[str, _registered("generator")] = Field(
        description="What writes a success's milestones: heuristic (offline) or llm (an endpoint; the heuristic on "
                    "any failure).")
    llm: LLMSection = Field(default_factory=LLMSection, description="The endpoint of milestone_reward.generator=llm.")

    @model_validator(mode="after")
    def _static_needs_a_file(self) -> MilestoneSection:
        if self.mode == "static" and not self.static_path:
            raise ValueError("static_path: milestone_reward.mode=static needs milestones to freeze; set "
                             "milestone_reward.static_path=<file.json> (admire milestones export writes one)")
        return self


class ProcessRewardSection(_Section):
    enable: bool = Field(False, description="Replace the milestone term by its process return (off: the paper "
                                            "exactly).")
    weight: Number = Field(1.0, description="Weight of the process return: weight·Σ γ^(j-t)·R_mil(j).")
    decay_gamma: Fraction = Field(0.99, description="γ of the process return.")


class TrackingSection(_Section):
    project: str = Field("admire", description="The SwanLab / W&B project name (verl: trainer.project_name).")
    tensorboard: bool = Field(True, description="Write TensorBoard events into the run folder.")
    swanlab: Annotated[str, _choice("offline", "local", "cloud")] | None = Field(
        "offline", description="SwanLab mode: offline, local or cloud; null = off.")
    wandb: Annotated[str, _choice("offline", "online")] | None = Field(
        None, description="W&B mode: offline or online (only if installed); null = off.")


def _verl_override(value: str) -> str:
    key, sep, _ = value.partition("=")
    if not sep or not key.strip().lstrip("+~"):
        raise ValueError(f"must be verl Hydra overrides as key=value, got {value!r}; e.g. "
                         "verl.overrides=[actor_rollout_ref.rollout.tensor_model_parallel_size=1]")
    return value


class VerlSection(_Section):
    """verl's own settings that this project has no key for, as Hydra overrides passed to verl unchanged
    (``trainer.backend=verl``; ``admire.integrations.verl.config`` checks them against verl's config)."""

    overrides: list[Annotated[str, AfterValidator(_verl_override)]] = Field(
        default_factory=list, description="verl's own settings as key=value Hydra overrides, passed unchanged "
                                          "(trainer.backend=verl).")


class TrainingConfig(_Section):
    """The whole training config (the layout of ``configs/demo_miniwob.yaml``)."""

    config_version: Annotated[int, Field(ge=CONFIG_VERSION, le=CONFIG_VERSION)] = Field(
        CONFIG_VERSION, description="The layout of this config (admire.config_migration); a run's config.yaml "
                                    "records it, so an older run is migrated before it is read.")
    run: RunSection = Field(description="Where the run folder is written, and the seed.")
    resume: str | None = Field(None, description="A run directory to continue from its last checkpoint "
                                                 "(resume=runs/<name>); null = a new run.")
    env: EnvSection = Field(description="The environments: backends, how many devices, the task suite and the step "
                                        "budget.")
    actor_rollout_ref: ActorRolloutRefSection = Field(
        description="The policy, its optional warm start, the rollout group and the PPO actor.")
    algorithm: AlgorithmSection = Field(description="How advantages are computed from a group's rewards.")
    trainer: TrainerSection = Field(description="How long, on what and how often to train, evaluate and checkpoint.")
    reward: RewardSection = Field(description="The per-step reward: outcome, format penalty and the optional LLM "
                                              "judge.")
    milestone_reward: MilestoneSection = Field(description="ADMIRE's milestone reward: how steps are matched and "
                                                           "paid, and how milestone lists are made.")
    process_reward: ProcessRewardSection = Field(
        default_factory=ProcessRewardSection, description="The process return: milestone credit propagated to "
                                                          "earlier steps (off: the paper exactly).")
    tracking: TrackingSection = Field(
        default_factory=TrackingSection, description="Where metrics are logged besides runs/<name>/metrics.jsonl.")
    verl: VerlSection = Field(
        default_factory=lambda: VerlSection(), description="verl's own settings, passed to verl unchanged "
                                                           "(trainer.backend=verl).")

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
    def _estimator_takes_its_options(self) -> TrainingConfig:
        from admire.rl.advantages import ADVANTAGE_ESTIMATORS, CONFIG_KEYS, declared_options

        name = self.algorithm.adv_estimator
        taken = declared_options(ADVANTAGE_ESTIMATORS[name])
        for key, option in CONFIG_KEYS.items():
            value = getattr(self.algorithm, key)
            if option not in taken and value != AlgorithmSection.model_fields[key].default:
                raise ValueError(f"algorithm.{key}: the estimator {name!r} does not take it (it would be ignored), "
                                 f"got {_show(value)}; leave it at {_show(AlgorithmSection.model_fields[key].default)} "
                                 "or pick an estimator that takes it (grpo_step, grpo_traj, dapo_step)")
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

def validate_config(cfg: TrainingConfig | DictConfig | Mapping[str, Any]) -> TrainingConfig:
    """The typed config, or a ``ConfigError`` naming the first bad key, what is wrong and the fix. A typed config
    is checked again as a whole (its fields may have been assigned since it was built)."""
    values = plain(cfg) if isinstance(cfg, BaseModel | DictConfig) else dict(cfg)
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
               and not isinstance(default, dict) else "see docs/method.md#6-configuration-keys")
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
    return f"did you mean {close[0]}?" if close else "see docs/method.md#6-configuration-keys for the keys"


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


def experiment_values(cfg: TrainingConfig | DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Every key that defines the experiment (all but ``RESUMABLE_KEYS`` and where the run lives), dotted,
    with its resolved value: what each checkpoint records, so that a resume can tell that ``config.yaml``
    was edited by hand since (a ``resume=`` override of such a key is refused before it gets here)."""
    tree = plain(cfg) if isinstance(cfg, BaseModel | DictConfig) else cfg
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
