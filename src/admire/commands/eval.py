"""``admire eval --checkpoint … --suite …`` — greedy success of a trained policy on held-out seeds.

Everything is checked before a browser starts — the arguments, the config (``admire.config_schema``),
and the checkpoint, which is read and fitted to the policy first — and every bad input is one line
and exit 2. A bar on stderr counts the episodes; the table of results goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from admire.config_schema import TrainingConfig

HELP = "evaluate a checkpoint (or a run directory) greedily on held-out seeds of a suite"


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (``--max-envs 0`` is refused, not read as 'unset')."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {value}")
    return value


def episode_count(text: str) -> int:
    """argparse type: ``positive_int`` up to ``MAX_EVAL_EPISODES_PER_TASK`` (``--episodes 10**20`` is refused,
    not run until killed)."""
    from admire.envs.suites import MAX_EVAL_EPISODES_PER_TASK

    value = positive_int(text)
    if value > MAX_EVAL_EPISODES_PER_TASK:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_EVAL_EPISODES_PER_TASK}, got {str(value)[:40]}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="a run directory (its latest checkpoint), its checkpoints/ folder or a checkpoint file")
    parser.add_argument("--suite", default=None, help="suite to evaluate on (default: the run's suite)")
    parser.add_argument("--episodes", type=episode_count, default=None,
                        help="held-out seeds per task, >= 1 (default: the run's trainer.eval_episodes)")
    parser.add_argument("--max-envs", type=positive_int, default=None,
                        help="browsers stepping concurrently, >= 1 (default: the run's env.max_envs)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def run(args: argparse.Namespace) -> int:
    from admire.commands.train import TRAIN_IMPORTS
    from admire.extras import require

    require(*TRAIN_IMPORTS, extra="train", feature="evaluation")
    from rich.console import Console

    from admire.progress import progress_bar
    from admire.report import print_evaluation
    from admire.rl.builders import policy_from_checkpoint
    from admire.rl.evaluation import NoUsableEpisodes, evaluate_policy

    path = Path(args.checkpoint)
    try:
        cfg = _config(args, path)
        policy = policy_from_checkpoint(cfg, path)
    except (ValueError, FileNotFoundError) as exc:  # CheckpointError is a ValueError
        print(f"admire eval: error: {exc}", file=sys.stderr)
        return 2
    try:
        with progress_bar(f"eval {cfg.env.suite}: episodes", Console(stderr=True)) as progress:
            result = evaluate_policy(cfg, policy, progress=progress)
    except NoUsableEpisodes as exc:  # no browser started, or every episode crashed: no success rate to print
        print(f"admire eval: error: {exc}", file=sys.stderr)
        return 1
    print_evaluation(result, Console(), title=f"{cfg.env.suite}: {path}")
    return 0


def _config(args: argparse.Namespace, path: Path) -> TrainingConfig:
    """The run's config (or the default one) with the arguments applied, validated by the schema."""
    from admire.config import load_config, load_run_config
    from admire.rl.builders import check_config

    if not path.exists():
        raise FileNotFoundError(f"--checkpoint: no such file or folder {path}; give a run directory (runs/<name>) "
                                "or a checkpoint in its checkpoints/ folder")
    run_dir = path if path.is_dir() else path.parent.parent
    if path.is_dir() and path.name == "checkpoints" and not (path / "config.yaml").exists():
        run_dir = path.parent
    flags = [f"{key}={value}" for key, value in (("env.suite", args.suite), ("trainer.eval_episodes", args.episodes),
                                                 ("env.max_envs", args.max_envs))  # that many of each backend
             if value is not None]
    if (run_dir / "config.yaml").exists():
        cfg = load_run_config(run_dir, [*args.overrides, *flags])
    else:
        cfg = load_config(overrides=[*args.overrides, *flags])
    check_config(cfg, judge_given=True)  # evaluation scores success only: no judge needed
    return cfg
