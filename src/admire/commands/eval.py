"""``admire eval --checkpoint … --suite …`` — greedy success of a trained policy on held-out seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "evaluate a checkpoint (or a run directory) greedily on held-out seeds of a suite"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="a checkpoint .pt file or a run directory")
    parser.add_argument("--suite", default=None, help="suite to evaluate on (default: the run's suite)")
    parser.add_argument("--episodes", type=int, default=None, help="held-out seeds per task")
    parser.add_argument("--max-envs", type=int, default=None, help="browsers stepping concurrently")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from admire.config import load_config, load_run_config
    from admire.report import print_evaluation
    from admire.rl.trainer import evaluate_checkpoint

    path = Path(args.checkpoint)
    run_dir = path if path.is_dir() else path.parent.parent
    if (run_dir / "config.yaml").exists():
        cfg = load_run_config(run_dir, args.overrides)
    else:
        cfg = load_config(overrides=args.overrides)
    if args.suite:
        cfg.env.suite = args.suite
    if args.episodes:
        cfg.trainer.eval_episodes = args.episodes
    if args.max_envs:
        cfg.env.max_envs = [args.max_envs]
    result = evaluate_checkpoint(cfg, path)
    print_evaluation(result, Console(), title=f"{cfg.env.suite}: {path}")
    return 0
