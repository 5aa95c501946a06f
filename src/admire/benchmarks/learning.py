"""Does ADMIRE learn more than outcome-only RL at the same env-step budget? (``admire bench learning``)

Trains every variant of ``VARIANTS`` for every seed as its own ``admire train`` process (so a run that
crashes is reported and the others go on, and runs share the machine's cores through ``--parallel``),
then reads each run's ``summary.json`` and ``metrics.jsonl`` and writes into ``--out``:

- ``results.json``: every number, per run and per variant (mean, sample std and per-seed values);
- ``results.md``: one table row per variant — held-out success before → after RL, env steps, effective
  sample utilisation (mean ``adv/nonzero_frac``: the share of trained steps with a non-zero advantage),
  milestone cost (Σ ``time/milestone_s`` / Σ ``time/epoch_s``) and the bank's coverage at the end;
- ``curves.png``: held-out success against env steps, mean over seeds per variant.

Runs live in ``<out>/runs/<variant>-s<seed>``, their output in ``<out>/logs/<variant>-s<seed>.log``.
The ``static`` ablation imports the milestone bank of the same seed's ``admire`` run (exported with
``admire milestones export``), so it starts once that run has finished. With a warm start, a run
``start-s<seed>`` makes the warm start and the evaluation before RL once per seed, and every arm of that
seed begins from it (``actor_rollout_ref.warm_start.from_run``); ``results.json`` records the hash of
each start's weights.

Runs are evaluated on the validation split's held-out seeds unless ``--split test`` is given: choices are
made on validation seeds, and the test split is read once per configuration for a reported table.

Usage::

    admire bench learning --suite miniwob-long --variants outcome admire --seeds 0 1 2 --parallel 2
    admire bench learning --suite miniwob-long --split test --seeds 0 1 2 3 4 --parallel 2
    admire bench learning --suite miniwob-demo --sweep actor_rollout_ref.actor.lr=0.03,0.003 --out OUT
    admire bench learning --suite miniwob-demo --split test --tuned-from OUT   # each arm at its own best
    admire bench learning --suite miniwob-demo --table 4      # GRPO / RLOO / DAPO, with and without milestones
    admire bench learning --quick                  # two tiny runs on miniwob-smoke (a smoke test)
    admire bench learning --report-only --out bench-results/learning-miniwob-long
    admire bench learning --report-only --out OUT --archive docs/results/NAME  # small enough to commit
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from admire.benchmarks.intervals import (
    Episodes,
    bootstrap_interval,
    interval_text,
    mean_pm_std,
    paired_difference,
    paired_permutation_p,
    percent,
    sign_flip_p,
    suite_success,
)
from admire.benchmarks.learning_archive import START_HASH, archive, check_target
from admire.benchmarks.paper_tables import TABLES, hand_written_milestones, not_runnable, render_tables, table_variants
from admire.benchmarks.sweep import (
    NO_SWEEP,
    SEPARATOR,
    Setting,
    base_variant,
    best_settings,
    check_sweep,
    label,
    override_key,
    parse_sweeps,
    render_sweep,
    tag,
    tuned_overrides,
)
from admire.tracking import read_metrics

# DAPO: step-level advantages without the groups whose rewards all tie, the wider upper clip, token-mean loss.
DAPO = ("algorithm.adv_estimator=dapo_step", "algorithm.filter_groups=true",
        "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean")
# The variants, each a list of overrides on top of the shared base. `admire` is the shipped default.
VARIANTS: dict[str, tuple[str, ...]] = {
    "outcome": ("reward.mode=outcome",),
    # Outcome-only with classic GRPO: one advantage per trajectory, every step of it trained with it.
    "outcome_traj": ("reward.mode=outcome", "algorithm.adv_estimator=grpo_traj"),
    "admire": (),
    "judge": ("reward.mode=judge",),  # a process reward: an LLM judge scores every step (needs an endpoint)
    "rloo": ("algorithm.adv_estimator=rloo_step",),
    "outcome_rloo": ("reward.mode=outcome", "algorithm.adv_estimator=rloo_step"),
    "dapo": DAPO,
    "outcome_dapo": ("reward.mode=outcome", *DAPO),
    "success_only": ("milestone_reward.strategy=success_only",),
    "failure_only": ("milestone_reward.strategy=failure_only",),
    "uniform": ("milestone_reward.strategy=uniform",),
    "static": ("milestone_reward.mode=static",),  # + milestone_reward.static_path, added per seed
    "static_hand": ("milestone_reward.mode=static",),  # + the suite's milestones written by hand
    "sbert": ("milestone_reward.matcher=sbert",),
    "no_decay": ("milestone_reward.decay=1.0",),
    # The paper's exact reading, every key where the shipped default departs from it (docs/method.md).
    "paper": (
        "milestone_reward.key=instruction",
        "milestone_reward.matcher=sbert",
        "milestone_reward.progress=total",
        "milestone_reward.update_rule=shorter",
        "algorithm.std_floor=0",
        "algorithm.failed_group_baseline=mean",
        "env.train_instances_per_task=null",
        "actor_rollout_ref.actor.target_kl=null",
    ),
}
STATIC = "static"
STATIC_SOURCE = "admire"  # the variant whose bank a static run imports
# With a warm start, one run per seed makes the start every arm of that seed begins from (warm_start.from_run):
# the warm start and the evaluation before RL, no epoch. It is not a variant and has no row of its own.
START = "start"
DEFAULT_VARIANTS = ("outcome", "admire")

# Every run: one browser each (2 cores shared fairly between --parallel runs), only the JSONL log.
BASE_OVERRIDES: tuple[str, ...] = (
    "env.max_envs=[1]",
    "tracking.tensorboard=false",
    "tracking.swanlab=null",
    "trainer.keep_checkpoints=1",
)
# Suites that start RL from the behaviour-cloned warm start by default, and the suite it imitates.
WARM_START_SUITES: dict[str, str] = {"miniwob-long": "miniwob-long-warmstart-lists", "miniwob-lm": "miniwob-warmstart",
                                     "miniwob-email-nl": "miniwob-long-warmstart-lists"}
# What a suite's runs need besides (before --set): miniwob-long's lists need the dom policy's list-item
# features, which the longer warm start teaches; its longest oracle path is 15 steps; and from that sharper
# warm start the first PPO update moved the policy by an approx KL of 2.7-3.2 under either reward and
# collapsed it, and with a trust region alone (max_kl 0.1) both rewards still drifted from 22% to 0% held-out
# success at the demo's learning rate, so RL from it takes a tenth of that rate (docs/results.md).
SUITE_OVERRIDES: dict[str, tuple[str, ...]] = {
    "miniwob-long": ("actor_rollout_ref.model.block_features=true", "actor_rollout_ref.warm_start.epochs=20",
                     "env.max_steps=24", "actor_rollout_ref.actor.max_kl=0.1", "actor_rollout_ref.actor.lr=0.003"),
    # Pre-registered before any run on it (docs/results.md): miniwob-long's policy, warm start and trust region,
    # a step cap of twice the longest oracle path, 50 held-out episodes per task evaluated before and after RL.
    "miniwob-email-nl": ("actor_rollout_ref.model.block_features=true", "actor_rollout_ref.warm_start.epochs=20",
                         "env.max_steps=12", "actor_rollout_ref.actor.max_kl=0.1",
                         "actor_rollout_ref.actor.lr=0.003", "trainer.eval_episodes=50", "trainer.eval_every=0"),
    # The language-model suite: SmolLM2-135M (`admire models prepare smollm2-135m models/smollm2-135m`) with a
    # LoRA adapter, fixed before any run on it (docs/lm-policy.md says why each value): answers of at most 64
    # tokens (a demonstrated answer is about 50), four browsers so the policy acts on four screens at once,
    # one PPO pass over minibatches of 16 answers, a budget in env steps rather than epochs, and 20 held-out
    # episodes per task evaluated only before and after RL. The adapter is on all 30 layers: on the top 8
    # only (cheaper per step) the same warm start ended at 1.7% and 0% held-out on the validation seeds.
    # Rollouts draft with float16 weights packed for fbgemm and are scored by the float32 weights, on every
    # CPU (whatever ``auto`` would pick there), so every seed draws from the same distribution; on a CPU
    # without fbgemm's kernels (AVX2, F16C) the policy refuses it in one line.
    "miniwob-lm": (
        "actor_rollout_ref.model.name=lm", "actor_rollout_ref.model.path=models/smollm2-135m",
        "+actor_rollout_ref.model.sampler_dtype=packed_float16",
        "+actor_rollout_ref.model.lora=true", "+actor_rollout_ref.model.max_new_tokens=64",
        "actor_rollout_ref.warm_start.episodes_per_task=4", "actor_rollout_ref.warm_start.epochs=3",
        "actor_rollout_ref.warm_start.lr=0.001",
        "env.max_envs=[4]", "env.max_steps=6", "trainer.threads=1",
        "trainer.tasks_per_epoch=6", "actor_rollout_ref.rollout.n=4", "trainer.total_epochs=50",
        "trainer.total_env_steps=320", "trainer.eval_every=0", "trainer.eval_episodes=20",
        "actor_rollout_ref.actor.lr=0.0002", "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    ),
}
QUICK_SUITE = "miniwob-smoke"
QUICK_OVERRIDES: tuple[str, ...] = (
    "trainer.tasks_per_epoch=3",
    "trainer.eval_every=1",
    "trainer.eval_episodes=2",
    "actor_rollout_ref.rollout.n=2",
    "env.max_steps=4",
)
HEARTBEAT_S = 60.0
POLL_S = 1.0

RUN_BY_DEFAULT = False
"""Hours of training: `admire bench` alone skips it; `admire bench learning` runs it."""


# --------------------------------------------------------------------------------------------------
# The plan: which runs, with which overrides
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One training run of the benchmark; ``needs`` is a run that must finish first (a start, static's bank)."""

    variant: str
    seed: int
    overrides: tuple[str, ...]
    needs: str | None = None

    @property
    def name(self) -> str:
        return run_name(self.variant, self.seed)


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


def merge_overrides(*groups: Iterable[str]) -> list[str]:
    """Overrides in order, a later one for the same key replacing an earlier one (Hydra would refuse
    the duplicate, and a variant's own keys must win over ``--set``)."""
    merged: dict[str, str] = {}
    for group in groups:
        for override in group:
            if "=" not in override:
                raise ValueError(f"override {override!r} is not key=value")
            key = override_key(override)
            merged.pop(key, None)
            merged[key] = override
    return list(merged.values())


def common_overrides(suite: str, *, epochs: int | None = None, env_steps: int | None = None,
                     warm_start: bool | None = None, quick: bool = False, split: str = "validation",
                     extra: Sequence[str] = ()) -> list[str]:
    """What every run of one invocation shares: the base, the suite, the held-out split and the budget,
    then ``--set``."""
    suite_keys = [f"env.suite={suite}", f"trainer.eval_split={split}", *SUITE_OVERRIDES.get(suite, ())]
    if warm_start is None:
        warm_start = suite in WARM_START_SUITES
    if warm_start:
        suite_keys.append("actor_rollout_ref.warm_start.enable=true")
        if suite in WARM_START_SUITES:
            suite_keys.append(f"actor_rollout_ref.warm_start.suite={WARM_START_SUITES[suite]}")
    else:
        suite_keys.append("actor_rollout_ref.warm_start.enable=false")
    budget = list(QUICK_OVERRIDES) if quick else []
    if epochs is not None:
        budget.append(f"trainer.total_epochs={epochs}")
    if env_steps is not None:
        budget.append(f"trainer.total_env_steps={env_steps}")
    return merge_overrides(BASE_OVERRIDES, suite_keys, budget, extra)


def static_path(out: Path, source_run: str) -> Path:
    """Where a static run's bank is exported to: the bank of ``source_run`` (the same seed's admire run)."""
    return (out / "milestones" / f"{source_run}.json").resolve()


def build_plan(variants: Sequence[str], seeds: Sequence[int], common: Sequence[str], out: Path,
               settings: Sequence[Setting] = NO_SWEEP, tuned: Mapping[str, Sequence[str]] | None = None,
               ) -> list[RunSpec]:
    """Runs seed by seed (so a stopped benchmark has balanced variants); static runs last, each after
    the same seed's ``admire`` run, which is added when ``static`` is asked for without it. With a sweep,
    every variant runs in every setting (``admire.benchmarks.sweep``); ``tuned`` gives a variant its own extra
    overrides (``--tuned-from``). A start is shared by every arm of a seed whose start keys are equal: a
    setting or tuned value of a key that decides the start (``START_KEYS``) gets a start of its own."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    chosen = list(dict.fromkeys(variants))
    if STATIC in chosen and STATIC_SOURCE not in chosen:
        chosen.insert(chosen.index(STATIC), STATIC_SOURCE)
    tuned = tuned or {}
    runs_dir = (out / "runs").resolve()
    shared = "actor_rollout_ref.warm_start.enable=true" in common
    suite = next((o.split("=", 1)[1] for o in common if override_key(o) == "env.suite"), "")
    hand_file = hand_written_milestones(suite)
    plan: list[RunSpec] = []
    starts: set[str] = set()

    def arm(variant: str, setting: Setting, seed: int, extra: Sequence[str] = (), needs: str | None = None) -> RunSpec:
        own = [*setting.overrides, *tuned.get(variant, ())]
        start = start_label(own)
        if shared and run_name(start, seed) not in starts:
            starts.add(run_name(start, seed))
            plan.append(RunSpec(start, seed, tuple(run_overrides(start, seed, common, runs_dir,
                                                                 [*start_overrides(own), "trainer.total_epochs=0"]))))
        from_run = [f"actor_rollout_ref.warm_start.from_run={runs_dir / run_name(start, seed)}"] if shared else []
        name = label(variant, setting)
        if variant == "static_hand" and hand_file is not None:
            extra = [*extra, f"milestone_reward.static_path={hand_file}"]
        return RunSpec(name, seed, tuple(run_overrides(name, seed, common, runs_dir, [*own, *extra, *from_run])),
                       needs=needs or (run_name(start, seed) if shared else None))

    for seed in seeds:
        for setting in settings:
            plan.extend(arm(variant, setting, seed) for variant in chosen if variant != STATIC)
    if STATIC in chosen:
        for seed in seeds:
            for setting in settings:
                source = run_name(label(STATIC_SOURCE, setting), seed)
                plan.append(arm(STATIC, setting, seed, [f"milestone_reward.static_path={static_path(out, source)}"],
                                needs=source))
    return plan


def start_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides among ``overrides`` whose key decides a run's start (``admire.rl.shared_start``)."""
    from admire.rl.shared_start import NOT_COMPARED, START_KEYS

    return [o for o in overrides if override_key(o) not in NOT_COMPARED
            and any(override_key(o) == k or override_key(o).startswith(f"{k}.") for k in START_KEYS)]


def start_label(overrides: Sequence[str]) -> str:
    """``start``, or ``start@<those values>`` where ``overrides`` change what the start is: arms whose start
    values are equal share one start, whatever else their settings change."""
    changing = start_overrides(overrides)
    return label(START, Setting(tuple(changing), tag(changing))) if changing else START


def run_overrides(variant: str, seed: int, common: Sequence[str], runs_dir: Path,
                  extra: Sequence[str] = ()) -> list[str]:
    """Shared overrides, then the variant's own (they define it), then the run's identity."""
    identity = [f"run.dir={runs_dir}", f"run.name={run_name(variant, seed)}", f"run.seed={seed}"]
    return merge_overrides(common, VARIANTS.get(base_variant(variant), ()), extra, identity)


# --------------------------------------------------------------------------------------------------
# Running the plan: `admire train` processes, at most `parallel` at once
# --------------------------------------------------------------------------------------------------


@dataclass
class Execution:
    """How a run ended in this invocation: exit code (None when it never started) and why."""

    code: int | None
    seconds: float = 0.0
    note: str = ""


def admire_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "admire.cli", *args]


# Keys a continued run takes from this invocation (``--epochs``, ``--env-steps``): every unfinished run
# of the folder then stops at the same budget.
BUDGET_KEYS = ("trainer.total_epochs", "trainer.total_env_steps")


def train_command(spec: RunSpec, run_dir: Path) -> list[str]:
    """A fresh run, or the continuation of one a previous invocation started (``--resume``), to this
    invocation's budget."""
    if (run_dir / "config.yaml").exists():
        budget = [o for o in spec.overrides if override_key(o) in BUDGET_KEYS and base_variant(spec.variant) != START]
        return admire_command("train", "--quiet", f"resume={run_dir}", *budget)
    return admire_command("train", "--quiet", *spec.overrides)


class Scheduler:
    """Starts the plan's runs as subprocesses, ``parallel`` at a time, respecting ``needs``."""

    def __init__(self, plan: Sequence[RunSpec], out: Path, parallel: int, *, resume: bool,
                 say: Callable[[str], None] = print) -> None:
        self.plan = list(plan)
        self.out = out
        self.parallel = max(1, parallel)
        self.resume = resume
        self.say = say
        self.results: dict[str, Execution] = {}
        self.running: dict[str, tuple[subprocess.Popen[bytes], TextIO, float]] = {}
        self.started = time.perf_counter()

    def run(self) -> dict[str, Execution]:
        pending = []
        for spec in self.plan:
            if self.resume and (self.run_dir(spec) / "summary.json").exists():
                self.results[spec.name] = Execution(0, note="finished earlier")
                self.say(f"[learning] {spec.name}: finished earlier, kept")
            else:
                pending.append(spec)
        last_beat = time.perf_counter()
        try:
            while pending or self.running:
                pending = self._start_ready(pending)
                self._reap()
                if time.perf_counter() - last_beat >= HEARTBEAT_S and self.running:
                    self._heartbeat()
                    last_beat = time.perf_counter()
                if self.running:
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.say("[learning] interrupted: stopping the running runs (resume later with --resume)")
            for process, log, _ in self.running.values():
                process.terminate()
                process.wait()
                log.close()
            raise
        return self.results

    def run_dir(self, spec: RunSpec) -> Path:
        return self.out / "runs" / spec.name

    def log_path(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.log"

    def _start_ready(self, pending: list[RunSpec]) -> list[RunSpec]:
        waiting: list[RunSpec] = []
        for spec in pending:
            if spec.needs is not None and spec.needs not in self.results:
                waiting.append(spec)
            elif spec.needs is not None and self.results[spec.needs].code != 0:
                self.results[spec.name] = Execution(None, note=f"not started: {spec.needs} failed")
                self.say(f"[learning] {spec.name}: not started, {spec.needs} failed")
            elif len(self.running) >= self.parallel:
                waiting.append(spec)
            else:
                self._start(spec)
        return waiting

    def _start(self, spec: RunSpec) -> None:
        log_path = self.log_path(spec.name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("a", encoding="utf-8")
        if base_variant(spec.variant) == STATIC and spec.needs:  # export the bank of the run it imitates, first
            target = static_path(self.out, spec.needs)
            target.parent.mkdir(parents=True, exist_ok=True)
            command = admire_command("milestones", "export", str(self.out / "runs" / spec.needs), str(target))
            code = self._log_and_call(command, log)
            if code != 0:
                log.close()
                self.results[spec.name] = Execution(code, note=f"exporting {spec.needs}'s milestones failed")
                self.say(f"[learning] {spec.name}: exporting {spec.needs}'s milestones failed (exit {code}), "
                         f"log {log_path}")
                return
        command = train_command(spec, self.run_dir(spec).resolve())
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.running[spec.name] = (process, log, time.perf_counter())
        finished = len(self.results)
        self.say(f"[learning] start {spec.name} ({finished} of {len(self.plan)} finished, "
                 f"{len(self.running)} running, {clock(self.elapsed)}) log {log_path}")

    @staticmethod
    def _log_and_call(command: list[str], log: TextIO) -> int:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode

    def _reap(self) -> None:
        for name, (process, log, began) in list(self.running.items()):
            code = process.poll()
            if code is None:
                continue
            log.close()
            del self.running[name]
            seconds = time.perf_counter() - began
            self.results[name] = Execution(code, seconds)
            state = "ok" if code == 0 else f"FAILED (exit {code}), log {self.log_path(name)}"
            self.say(f"[learning] done  {name}: {state} in {clock(seconds)} "
                     f"({len(self.results)} of {len(self.plan)} finished, {clock(self.elapsed)})")

    def _heartbeat(self) -> None:
        parts = []
        for name in self.running:
            last = last_metrics(self.out / "runs" / name / "metrics.jsonl")
            if last is None:
                parts.append(f"{name} {run_status(self.out / 'runs' / name)}")
            else:
                parts.append(f"{name} epoch {int(last.get('step', 0)) + 1}, "
                             f"{int(last.get('env_steps_total', 0))} env steps")
        self.say(f"[learning] {clock(self.elapsed)}: {len(self.results)} of {len(self.plan)} finished; "
                 + "; ".join(parts))

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def run_status(run_dir: Path) -> str:
    """The run's own status line (``status.txt``, the trainer's progress), or "starting" before it has one."""
    try:
        text = (run_dir / "status.txt").read_text(encoding="utf-8").strip()
    except OSError:
        return "starting"
    return text[:120] or "starting"


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def last_metrics(path: Path) -> dict[str, Any] | None:
    records = metrics_by_step(path)
    return records[-1] if records else None


# --------------------------------------------------------------------------------------------------
# Reading runs and building the report
# --------------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What one run left behind, reduced to the numbers of the report (fractions, not percent)."""

    variant: str
    seed: int
    name: str
    status: str  # ok | failed | incomplete | not started
    exit_code: int | None = None
    note: str = ""
    log: str | None = None
    before: dict[str, float] | None = None
    after: dict[str, float] | None = None
    env_steps: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    """The trainer process's CPU time (a run's minutes of one core, whatever ran beside it); None before it was
    recorded."""
    epochs: int | None = None
    utilisation: float | None = None
    milestone_cost: float | None = None
    coverage: float | None = None
    step_gap: float | None = None
    """Reward quality: mean over epochs of ``reward/step_gap`` (successes' shaping minus failures')."""
    step_gap_norm: float | None = None
    curve: list[tuple[float, float]] = field(default_factory=list)
    episodes_before: dict[str, dict[int, float]] | None = None
    """The held-out episodes before RL (task → {task seed: outcome}), from the run or its shared start."""
    episodes_after: dict[str, dict[int, float]] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def metrics_by_step(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl (read as ``tracking.read_metrics`` reads it: damaged lines skipped with a warning) as one
    record per step in step order, the last record of a step winning: a run stopped between its log line
    and its checkpoint logs that step again when resumed."""
    by_step = {int(record["step"]): record for record in read_metrics(path)}
    return [by_step[step] for step in sorted(by_step)]


def _numbers(records: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in records if isinstance(r.get(key), int | float)]


def eval_episodes(path: Path) -> dict[str, dict[int, float]] | None:
    """An evaluation's episodes (``trajectories/eval_epoch_*.jsonl``) as task → {task seed: outcome}, the
    excluded ones (an environment error) left out; None when the file is missing or unreadable."""
    from admire.types import Trajectory

    if not path.is_file():
        return None
    episodes: dict[str, dict[int, float]] = {}
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                trajectory = Trajectory.from_json(line)
                if not trajectory.excluded:
                    episodes.setdefault(trajectory.task.name, {})[trajectory.task.seed] = float(trajectory.outcome)
    except (OSError, ValueError) as exc:
        print(f"[learning] {path}: unreadable evaluation ({exc}); its intervals are left out")
        return None
    return episodes


def evaluation_files(run_dir: Path) -> list[Path]:
    """A run's evaluation files in epoch order (``eval_epoch_0000`` is the evaluation before RL)."""
    return sorted((run_dir / "trajectories").glob("eval_epoch_*.jsonl"))


def read_run(run_dir: Path, variant: str, seed: int, execution: Execution | None = None,
             log: Path | None = None) -> RunResult:
    """The report's numbers for one run directory (which may be missing or unfinished)."""
    result = RunResult(variant, seed, run_dir.name, status="incomplete",
                       log=str(log) if log is not None and log.exists() else None)
    if execution is not None:
        result.exit_code, result.note = execution.code, execution.note
    summary_path = run_dir / "summary.json"
    if summary_path.is_file() and (execution is None or execution.code == 0):
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        result.status = "ok"
        result.before, result.after = summary.get("before"), summary.get("after")
        result.env_steps = summary.get("env_steps")
        result.wall_s = summary.get("wall_s")
        result.cpu_s = summary.get("cpu_s")
    elif execution is not None:
        result.status = "not started" if execution.code is None else "failed"
    records = metrics_by_step(run_dir / "metrics.jsonl")
    result.epochs = len(records)
    utilisation = _numbers(records, "adv/nonzero_frac")
    result.utilisation = statistics.fmean(utilisation) if utilisation else None
    epoch_s, milestone_s = sum(_numbers(records, "time/epoch_s")), sum(_numbers(records, "time/milestone_s"))
    result.milestone_cost = milestone_s / epoch_s if epoch_s > 0 else None
    coverage = _numbers(records, "milestones/coverage")
    result.coverage = coverage[-1] if coverage else None
    gaps, normalised = _numbers(records, "reward/step_gap"), _numbers(records, "reward/step_gap_norm")
    result.step_gap = statistics.fmean(gaps) if gaps else None
    result.step_gap_norm = statistics.fmean(normalised) if normalised else None
    result.curve = learning_curve(records, result.before, result.after, result.env_steps)
    if result.status == "ok":
        files = evaluation_files(run_dir)
        start = run_dir.parent / run_name(START, seed) / "trajectories" / "eval_epoch_0000.jsonl"
        before = run_dir / "trajectories" / "eval_epoch_0000.jsonl"
        result.episodes_before = eval_episodes(before if before.is_file() else start)
        result.episodes_after = eval_episodes(files[-1]) if files else None
    return result


def learning_curve(records: Sequence[Mapping[str, Any]], before: Mapping[str, float] | None,
                   after: Mapping[str, float] | None, env_steps: int | None) -> list[tuple[float, float]]:
    """Held-out success against env steps: the start, every evaluation, and the final one."""
    curve: list[tuple[float, float]] = []
    if before is not None and "success" in before:
        curve.append((0.0, float(before["success"])))
    for record in records:
        if isinstance(record.get("eval/success"), int | float):
            curve.append((float(record.get("env_steps_total", 0)), float(record["eval/success"])))
    if after is not None and "success" in after and env_steps is not None and (
            not curve or curve[-1][0] != float(env_steps)):
        curve.append((float(env_steps), float(after["success"])))
    return curve


def spread(values: Mapping[int, float]) -> dict[str, Any]:
    """Mean, sample standard deviation (0 for one seed) and the per-seed values."""
    data = list(values.values())
    return {
        "mean": statistics.fmean(data) if data else None,
        "std": statistics.stdev(data) if len(data) > 1 else (0.0 if data else None),
        "n": len(data),
        "per_seed": {str(seed): value for seed, value in sorted(values.items())},
    }


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def summarise(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per variant (in ``VARIANTS`` order): success before and after, the paired gain over outcome-only,
    and the means of env steps, utilisation, milestone cost and coverage over the finished seeds; where the
    runs' evaluation episodes are on disk, 95% intervals over seeds and episodes, the paired difference from
    outcome-only with its interval and p-values (``admire.benchmarks.intervals``), and per-task success."""
    order = {name: i for i, name in enumerate(VARIANTS)}
    variants = sorted({r.variant for r in results}, key=lambda v: (order.get(base_variant(v), len(order)), v))
    outcome_after: dict[str, dict[int, float]] = {}
    for r in results:
        if base_variant(r.variant) == "outcome" and r.ok and r.after is not None:
            outcome_after.setdefault(r.variant, {})[r.seed] = r.after["success"]
    table: dict[str, dict[str, Any]] = {}
    for variant in variants:
        runs = sorted((r for r in results if r.variant == variant), key=lambda r: r.seed)
        done = [r for r in runs if r.ok and r.before is not None and r.after is not None]
        after = {r.seed: float(r.after["success"]) for r in done}  # type: ignore[index]
        baseline = baseline_of(variant)  # outcome-only in the same setting
        versus = outcome_after.get(baseline, {})
        paired = {seed: value - versus[seed] for seed, value in after.items() if seed in versus}
        table[variant] = {
            "runs": len(runs),
            "ok": len(done),
            "before": spread({r.seed: float(r.before["success"]) for r in done}),  # type: ignore[index]
            "after": spread(after),
            "gain_over_outcome": spread(paired) if variant != baseline and paired else None,
            "env_steps": _mean(r.env_steps for r in done),
            "utilisation": _mean(r.utilisation for r in done),
            "milestone_cost": _mean(r.milestone_cost for r in done),
            "coverage": _mean(r.coverage for r in done),
            "step_gap": _mean(r.step_gap for r in done),
            "step_gap_norm": _mean(r.step_gap_norm for r in done),
            "wall_s": _mean(r.wall_s for r in done),
            "cpu_s": _mean(r.cpu_s for r in done),
            "metrics_seeds": sorted(r.seed for r in done if r.epochs),
            **episode_statistics(done, [r for r in results if r.variant == baseline and r.ok], variant != baseline),
            "not_ok": [{"run": r.name, "status": r.status, "exit_code": r.exit_code, "log": r.log, "note": r.note}
                       for r in runs if not r.ok],
        }
    return table


def baseline_of(variant: str) -> str:
    """The outcome-only configuration a variant is compared with: ``outcome`` in the same sweep setting."""
    _, _, setting = variant.partition(SEPARATOR)
    return label("outcome", Setting(label=setting))


def episode_statistics(done: Sequence[RunResult], outcome: Sequence[RunResult], compared: bool) -> dict[str, Any]:
    """The episode-level numbers of one variant's finished runs: intervals, the paired test against
    outcome-only on the same seeds and episodes (when ``compared``: not for outcome-only itself), and success per
    task (mean over seeds, and per seed).

    A finished run whose evaluation files are gone (a results folder kept as its summaries only) still counts
    where its summary suffices: in the sign-flip test over seeds and in the per-task rows (its summary's
    per-task success); the bootstrap intervals and the episode permutation test need the episodes and cover
    the seeds listed in ``episode_seeds``."""
    before: dict[int, Episodes] = {r.seed: r.episodes_before for r in done if r.episodes_before}
    after: dict[int, Episodes] = {r.seed: r.episodes_after for r in done if r.episodes_after}
    baseline: dict[int, Episodes] = {r.seed: r.episodes_after for r in outcome if r.episodes_after}
    stats: dict[str, Any] = {"before_ci": _as_dict(bootstrap_interval(before)),
                             "after_ci": _as_dict(bootstrap_interval(after)), "vs_outcome": None,
                             "episode_seeds": sorted(after),
                             "seeds_without_episodes": sorted(r.seed for r in done if not r.episodes_after)}
    if compared and baseline:
        shared = sorted(set(after) & set(baseline))
        per_seed = {seed: suite_success(after[seed]) - suite_success(baseline[seed]) for seed in shared}
        per_seed.update(_summary_differences(done, outcome, exclude=shared))
        difference = paired_difference(after, baseline)
        stats["vs_outcome"] = None if difference is None else {
            **difference.as_dict(), "seeds": len(shared),
            "per_seed": {str(k): v for k, v in sorted(per_seed.items())},
            "p_sign_flip_seeds": sign_flip_p(list(per_seed.values())),
            "p_permutation_episodes": paired_permutation_p(after, baseline),
        }
    tasks = sorted({task for episodes in (*before.values(), *after.values()) for task in episodes})
    summaries_before = {r.seed: r.before for r in done if r.before is not None}
    summaries_after = {r.seed: r.after for r in done if r.after is not None}
    stats["per_task"] = {task: {"before": _task_rates(before, task, summaries_before),
                                "after": _task_rates(after, task, summaries_after)} for task in tasks}
    return stats


def _summary_differences(done: Sequence[RunResult], outcome: Sequence[RunResult],
                         exclude: Sequence[int]) -> dict[int, float]:
    """Per seed not in ``exclude``, success after RL minus outcome-only's on that seed, from the summaries."""
    theirs = {r.seed: r.after["success"] for r in outcome if r.after is not None and "success" in r.after}
    return {r.seed: r.after["success"] - theirs[r.seed] for r in done
            if r.seed not in exclude and r.seed in theirs and r.after is not None and "success" in r.after}


def _task_rates(runs: Mapping[int, Episodes], task: str,
                summaries: Mapping[int, Mapping[str, float]]) -> dict[str, Any]:
    """A task's success per seed: from the episodes where they are on disk, else from the seed's summary
    (``success/<task>``); ``episodes`` counts the episodes read from disk only."""
    rates = {seed: statistics.fmean(e[task].values()) for seed, e in runs.items() if e.get(task)}
    for seed, summary in summaries.items():
        if seed not in runs and f"success/{task}" in summary:
            rates[seed] = float(summary[f"success/{task}"])
    rates = dict(sorted(rates.items()))
    return {"mean": statistics.fmean(rates.values()) if rates else None, "episodes": sum(
        len(e.get(task, {})) for e in runs.values()), "per_seed": {str(k): v for k, v in rates.items()}}


def _as_dict(interval: Any) -> dict[str, float] | None:
    return None if interval is None else interval.as_dict()


def _per_seed(runs: Sequence[RunResult]) -> str:
    parts = []
    for run in sorted(runs, key=lambda r: r.seed):
        if run.ok and run.before is not None and run.after is not None:
            parts.append(f"s{run.seed}: {percent(run.before['success'], 0)} → {percent(run.after['success'], 0)}")
        elif run.status == "failed":
            parts.append(f"s{run.seed}: failed (exit {run.exit_code})")
        else:
            parts.append(f"s{run.seed}: {run.status}")
    return ", ".join(parts)


def render_markdown(results: Sequence[RunResult], table: Mapping[str, Mapping[str, Any]], *, suite: str,
                    commands: Sequence[str] = (), common: Sequence[str] = (),
                    configurations: Mapping[str, Sequence[str]] | None = None,
                    best: Mapping[str, Mapping[str, Any]] | None = None,
                    not_run: Mapping[str, str] | None = None) -> str:
    """results.md: the table, the runs that did not finish (with their logs), and how to reproduce."""
    split = next((o.split("=", 1)[1] for o in common if override_key(o) == "trainer.eval_split"), None)
    lines = [f"## Learning benchmark on `{suite}`" + (f", {split} split" if split else ""), ""]
    if commands:
        lines += ["Produced by:", "", "```sh", *commands, "```", ""]
    lines += [
        "Held-out success (greedy, on the split's held-out seeds) in %, mean ± sample std over seeds, "
        "before RL → after RL; Δ: after minus outcome-only's after on the same seed; utilisation: mean share "
        "of trained steps with a non-zero advantage (`adv/nonzero_frac`); milestone cost: milestone work "
        "(bank update, matching, reward) as a share of epoch wall time; coverage: share of the epoch's "
        "milestone keys with a list in the bank, at the last epoch; step gap: reward quality, the mean per-step "
        "shaping (reward minus outcome) of successful training episodes minus that of failed ones, mean over "
        "epochs (normalised by its spread in brackets).",
        "",
        "| variant | seeds ok | success before → after | per seed (before → after) | Δ vs outcome | env steps "
        "| utilisation | milestone cost | coverage | step gap |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, row in table.items():
        runs = [r for r in results if r.variant == variant]
        env_steps = "–" if row["env_steps"] is None else f"{row['env_steps']:,.0f}"
        lines.append(
            f"| {variant} | {row['ok']}/{row['runs']} | {mean_pm_std(row['before'])} → {mean_pm_std(row['after'])} "
            f"| {_per_seed(runs)} | {mean_pm_std(row['gain_over_outcome'])} | {env_steps} "
            f"| {percent(row['utilisation'])}% | {percent(row['milestone_cost'])}% | {percent(row['coverage'])}% "
            f"| {_gap(row)} |")
    for variant, row in table.items():
        measured = row.get("metrics_seeds")
        if measured is not None and len(measured) < row["ok"]:
            lines += ["", f"`{variant}`: utilisation, milestone cost, coverage and step gap are means over seed(s) "
                      f"{', '.join(map(str, measured)) or 'none'}, the finished runs with a metrics.jsonl on disk."]
    lines += render_intervals(table)
    lines += render_sweep(table, best or {})
    lines += render_tables(table, not_run or {})
    not_ok = [r for r in results if not r.ok]
    if not_ok:
        lines += ["", "Runs without a result:", ""]
        for run in sorted(not_ok, key=lambda r: (r.variant, r.seed)):
            code = "" if run.exit_code is None else f", exit {run.exit_code}"
            note = f" ({run.note})" if run.note else ""
            lines.append(f"- `{run.name}`: {run.status}{code}{note}; log `{run.log or '–'}`")
    lines += ["", "Overrides of every run" + (f": `{' '.join(common)}`" if common else " (as in each run's "
              "config.yaml)") + "; per variant:", ""]
    configurations = configurations or {}
    for variant in table:
        own = " ".join([*VARIANTS.get(base_variant(variant), ()), *configurations.get(variant, ())])
        static = (" + `milestone_reward.static_path=<the same seed's admire bank>`"
                  if base_variant(variant) == STATIC else "")
        lines.append(f"- `{variant}`: `{own or '(shipped defaults)'}`{static}")
    return "\n".join(lines) + "\n"


def _gap(row: Mapping[str, Any]) -> str:
    if row.get("step_gap") is None:
        return "–"
    normalised = row.get("step_gap_norm")
    return f"{row['step_gap']:.3f}" + ("" if normalised is None else f" ({normalised:.2f})")


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def render_intervals(table: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The episode-level tables: 95% intervals and the paired test, then success per task."""
    if not any(row.get("after_ci") for row in table.values()):
        return []
    lines = ["", "Held-out success with 95% intervals over seeds and episodes (hierarchical bootstrap), and the "
             "difference from outcome-only on the same seeds and episodes (paired bootstrap); p: exact sign-flip "
             "test over the per-seed differences (with n seeds never below 2/2^n), and a permutation test over "
             "the episode pairs pooled across seeds (seeds taken as fixed).", "",
             "| variant | before | after | Δ vs outcome | p (seeds) | p (episodes) |", "|---|---|---|---|---|---|"]
    for variant, row in table.items():
        versus = row.get("vs_outcome") or {}
        lines.append(f"| {variant} | {interval_text(row.get('before_ci'))} | {interval_text(row.get('after_ci'))} "
                     f"| {interval_text(versus) if versus else '–'} | {_p(versus.get('p_sign_flip_seeds'))} "
                     f"| {_p(versus.get('p_permutation_episodes'))} |")
    for variant, row in table.items():
        missing, kept = row.get("seeds_without_episodes") or [], row.get("episode_seeds") or []
        if missing:
            lines += ["", f"`{variant}`: no evaluation episodes on disk for seed(s) "
                      f"{', '.join(map(str, missing))} (their summaries only): they count in the sign-flip test and "
                      f"the per-task rows; the intervals and the episode permutation test cover seed(s) "
                      f"{', '.join(map(str, kept)) or 'none'}."]
    tasks = sorted({task for row in table.values() for task in (row.get("per_task") or {})})
    if tasks:
        lines += ["", "Success per task in %, before → after (mean over seeds; per seed in brackets):", "",
                  "| task | " + " | ".join(table) + " |", "|---|" + "---|" * len(table)]
        for task in tasks:
            cells = []
            for row in table.values():
                entry = (row.get("per_task") or {}).get(task)
                if not entry:
                    cells.append("–")
                    continue
                seeds = ", ".join(percent(v, 0) for v in entry["after"]["per_seed"].values())
                cells.append(f"{percent(entry['before']['mean'], 0)} → {percent(entry['after']['mean'], 0)} ({seeds})")
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return lines


def plot_curves(results: Sequence[RunResult], path: Path, suite: str) -> Path | None:
    """curves.png: each seed faint, the mean over seeds (aligned by evaluation index) bold."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[learning] matplotlib is not installed: no curves.png (pip install 'admire[viz]')")
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    order = {name: i for i, name in enumerate(VARIANTS)}  # the same colour for a variant in every plot
    variants = sorted({r.variant for r in results if r.ok and r.curve},
                      key=lambda v: (order.get(base_variant(v), len(order)), v))
    for variant in variants:
        color = f"C{variants.index(variant) % 10}" if SEPARATOR in variant else \
            f"C{order.get(variant, len(order)) % 10}"
        curves = [r.curve for r in results if r.variant == variant and r.ok and r.curve]
        for curve in curves:
            axes.plot([x for x, _ in curve], [100 * y for _, y in curve], color=color, alpha=0.25, linewidth=1)
        length = min(len(c) for c in curves)
        xs = [statistics.fmean(c[j][0] for c in curves) for j in range(length)]
        ys = [100 * statistics.fmean(c[j][1] for c in curves) for j in range(length)]
        axes.plot(xs, ys, color=color, linewidth=2.2, marker="o", markersize=3,
                  label=f"{variant} (n={len(curves)})")
    axes.set_xlabel("env steps")
    axes.set_ylabel("held-out success (%)")
    axes.set_title(f"admire bench learning: {suite}")
    axes.set_ylim(-2, 102)
    axes.grid(alpha=0.3)
    if variants:
        axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def discover_runs(runs_dir: Path) -> list[tuple[str, int]]:
    """``(variant, seed)`` of every ``<variant>-s<seed>`` folder under ``runs_dir``."""
    found: list[tuple[str, int]] = []
    if not runs_dir.is_dir():
        return found
    for folder in sorted(runs_dir.iterdir()):
        variant, _, seed = folder.name.rpartition("-s")
        if folder.is_dir() and base_variant(variant) in VARIANTS and seed.isdigit():
            found.append((variant, int(seed)))
    return found


def shared_starts(runs_dir: Path) -> dict[str, str]:
    """Per seed's start run, the sha256 of the weights every arm of that seed began from."""
    found: dict[str, str] = {}
    for entry in sorted(runs_dir.glob(f"{START}*-s*/checkpoints/{START}.json")):
        if base_variant(entry.parents[1].name.rpartition("-s")[0]) != START:
            continue
        try:
            found[entry.parents[1].name] = str(json.loads(entry.read_text(encoding="utf-8"))["tensors_sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            found[entry.parents[1].name] = "unreadable"
    for entry in sorted(runs_dir.glob(f"{START}*-s*/checkpoints/{START_HASH}")):  # an archive keeps the hash only
        if base_variant(entry.parents[1].name.rpartition("-s")[0]) == START:
            found.setdefault(entry.parents[1].name, entry.read_text(encoding="utf-8").strip() or "unreadable")
    return dict(sorted(found.items()))


def write_report(out: Path, suite: str | None, executions: Mapping[str, Execution] | None = None,
                 planned: Sequence[RunSpec] = (), common: Sequence[str] = ()) -> tuple[str, list[RunResult]]:
    """Read every run under ``<out>/runs`` (and the planned ones, finished or not) and write the report."""
    executions = executions or {}
    keys = list(dict.fromkeys([*discover_runs(out / "runs"),
                               *((s.variant, s.seed) for s in planned if base_variant(s.variant) in VARIANTS)]))
    results = [read_run(out / "runs" / run_name(v, s), v, s, executions.get(run_name(v, s)),
                        out / "logs" / f"{run_name(v, s)}.log") for v, s in keys]
    table = summarise(results)
    invocations = read_invocations(out)
    commands = list(dict.fromkeys(i["command"] for i in invocations))
    if not common and invocations:  # --report-only: the overrides of the last invocation that trained
        common = invocations[-1].get("common", [])
    if suite is None:
        suite = next((i["suite"] for i in reversed(invocations) if "suite" in i), "?")
    configurations: dict[str, list[str]] = {}
    not_run: dict[str, str] = {}
    for invocation in invocations:  # what each configuration adds to its variant (a sweep's setting, a tuned value)
        configurations.update(invocation.get("configurations", {}))
        not_run.update(invocation.get("not_run", {}))
    best = best_settings(table, configurations)
    markdown = render_markdown(results, table, suite=suite, commands=commands, common=common,
                               configurations=configurations, best=best, not_run=not_run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown, encoding="utf-8")
    split = next((o.split("=", 1)[1] for o in common if override_key(o) == "trainer.eval_split"), "test")
    payload = {"suite": suite, "split": split, "commands": commands, "common_overrides": list(common),
               "variants": {v: list(VARIANTS.get(base_variant(v), ())) for v in table}, "summary": table,
               "shared_starts": shared_starts(out / "runs"), "runs": [asdict(r) for r in results]}
    if configurations:
        payload["configurations"] = configurations
    if not_run:
        payload["not_run"] = not_run
    if any(SEPARATOR in name for name in table):
        payload["sweep"] = {"best": best}
    (out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    plot_curves(results, out / "curves.png", suite)
    return markdown, results


def record_invocation(out: Path, argv: Sequence[str], suite: str, common: Sequence[str],
                      configurations: Mapping[str, Sequence[str]] | None = None,
                      not_run: Mapping[str, str] | None = None) -> None:
    """Append this invocation to ``<out>/invocations.jsonl``: the report names the exact commands
    behind its numbers, even when the runs came from several invocations (``--resume``, batches), and
    what each configuration adds to its variant (``configurations``: a sweep's setting, a tuned value)."""
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "suite": suite, "common": list(common),
                              "command": "admire bench learning " + shlex.join(argv)}
    if configurations:
        record["configurations"] = {name: list(values) for name, values in configurations.items()}
    if not_run:
        record["not_run"] = dict(not_run)
    with (out / "invocations.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def configurations(plan: Sequence[RunSpec], settings: Sequence[Setting],
                   tuned: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """What each planned configuration adds to its variant's own overrides (none outside sweeps and tuning)."""
    added: dict[str, list[str]] = {}
    for spec in plan:
        variant = base_variant(spec.variant)
        setting = next((s for s in settings if label(variant, s) == spec.variant), None)
        extra = [*(setting.overrides if setting else ()), *tuned.get(variant, ())]
        if extra and variant != START:
            added[spec.variant] = extra
    return added


def read_invocations(out: Path) -> list[dict[str, Any]]:
    path = out / "invocations.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="admire bench learning", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=None, help="task suite (default: miniwob-long; --quick: miniwob-smoke)")
    parser.add_argument("--variants", nargs="+", default=None, metavar="VARIANT",
                        help=f"variants to train (default: {' '.join(DEFAULT_VARIANTS)}); known: {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: 0 1 2; --quick: 0)")
    parser.add_argument("--epochs", type=int, default=None, help="trainer.total_epochs (default: the config's)")
    parser.add_argument("--env-steps", type=int, default=None,
                        help="trainer.total_env_steps: every run stops at this env-step budget")
    parser.add_argument("--warm-start", action=argparse.BooleanOptionalAction, default=None,
                        help=f"behaviour-cloned warm start (default: on for {', '.join(WARM_START_SUITES)})")
    parser.add_argument("--split", choices=("validation", "test"), default="validation",
                        help="held-out seeds the runs are evaluated on: validation (default), where every choice "
                             "is made, or test, read once per configuration for a reported table")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra override for every run (repeatable); a variant's own keys still win")
    parser.add_argument("--table", dest="tables", action="append", default=[], choices=sorted(TABLES),
                        help="train the variants of the paper's table N (repeatable): 1 reward signal, 3 static vs "
                             "adaptive milestones, 4 GRPO/RLOO/DAPO with and without milestones")
    parser.add_argument("--sweep", dest="sweeps", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="train every variant in every value of KEY (repeatable: every combination), on "
                             "validation seeds; the report marks each variant's best setting")
    parser.add_argument("--tuned-from", default=None, metavar="OUT",
                        help="give each variant the best setting of the sweep whose results OUT holds")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (default: 1)")
    parser.add_argument("--out", default=None, help="results folder (default: bench-results/learning-<suite>)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: tiny runs on miniwob-smoke, 2 epochs, seed 0")
    parser.add_argument("--resume", action="store_true",
                        help="keep finished runs, continue unfinished ones from their last checkpoint")
    parser.add_argument("--report-only", action="store_true", help="only re-read the runs under --out")
    parser.add_argument("--archive", default=None, metavar="DIR",
                        help="after the report, copy what it reads into DIR, small enough to commit (the "
                             "evaluation episodes without their screens); --report-only --out DIR re-reads it")
    args = parser.parse_args(argv)
    args.explicit_suite = args.suite  # --report-only otherwise names the suite its runs were trained on
    if args.quick:
        args.suite = args.suite or QUICK_SUITE
        args.seeds = args.seeds or [0]
        args.epochs = 2 if args.epochs is None else args.epochs
    args.suite = args.suite or "miniwob-long"
    args.seeds = args.seeds or [0, 1, 2]
    args.variants = args.variants or (table_variants(args.tables) if args.tables else list(DEFAULT_VARIANTS))
    args.out = Path(args.out or f"bench-results/learning-{args.suite}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    out: Path = args.out
    try:
        common = common_overrides(args.suite, epochs=args.epochs, env_steps=args.env_steps,
                                  warm_start=args.warm_start, quick=args.quick, split=args.split, extra=args.sets)
        settings = parse_sweeps(args.sweeps)
        not_run = {} if args.report_only else not_runnable(args.variants, args.suite, common)
        args.variants = [v for v in args.variants if v not in not_run]
        if not args.variants:
            raise ValueError("no variant can run here: " + "; ".join(f"{v}: {r}" for v, r in not_run.items()))
        check_sweep(settings, args.variants, VARIANTS, args.split)
        if args.tuned_from and args.sweeps:
            raise ValueError("--tuned-from runs the settings a sweep chose; it does not sweep again")
        wanted = [*args.variants, *([STATIC_SOURCE] if STATIC in args.variants else [])]  # static's bank source
        tuned = tuned_overrides(Path(args.tuned_from), list(dict.fromkeys(wanted)), args.suite) \
            if args.tuned_from else {}
        plan = build_plan(args.variants, args.seeds, common, out, settings, tuned)
        if args.archive is not None:
            check_target(out, Path(args.archive))
    except ValueError as exc:
        print(f"admire bench learning: {exc}", file=sys.stderr)
        return 2
    if args.report_only:
        markdown, results = write_report(out, args.explicit_suite)
        print(markdown)
        _archive(out, args.archive)
        return 0 if results else 1
    existing = [s.name for s in plan if (out / "runs" / s.name).exists()]
    if existing and not args.resume:
        print(f"admire bench learning: {out / 'runs'} already has {', '.join(existing)}; pass --resume to keep "
              "and continue them, --report-only to re-read them, or another --out", file=sys.stderr)
        return 2
    record_invocation(out, argv, args.suite, common, configurations(plan, settings, tuned), not_run)
    for variant, reason in not_run.items():
        print(f"[learning] {variant}: not run, {reason}", flush=True)
    print(f"[learning] {len(plan)} runs ({', '.join(s.name for s in plan)}) into {out}, "
          f"{args.parallel} at a time; overrides for all: {' '.join(common)}", flush=True)
    executions = Scheduler(plan, out, args.parallel, resume=args.resume,
                           say=lambda line: print(line, flush=True)).run()
    markdown, results = write_report(out, args.suite, executions, plan, common)
    print(markdown)
    print(f"[learning] wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'curves.png'}")
    _archive(out, args.archive)
    planned = {s.name for s in plan}
    return 0 if all(r.ok for r in results if r.name in planned) else 1


def _archive(out: Path, target: str | None) -> None:
    if target is not None:
        written = archive(out, Path(target))
        size = sum(p.stat().st_size for p in written)
        print(f"[learning] archived {len(written)} files ({size / 1e6:.1f} MB) into {target}; "
              f"`admire bench learning --report-only --out {target}` re-reads them")


if __name__ == "__main__":
    sys.exit(main())
