"""``admire train [key=value ...]`` — train on the embedded default or any config, or resume a run."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

HELP = "train a GUI agent with milestone rewards (Hydra overrides as key=value; resume=runs/<name>)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="config overrides, e.g. trainer.total_epochs=5 reward.mode=outcome resume=runs/x")
    parser.add_argument("--config", "-c", default="demo_miniwob",
                        help="config name under configs/ or a path to a YAML file (default: demo_miniwob)")
    parser.add_argument("--config-dir", default=None, help="folder of configs (default: the packaged configs/)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary table")


def run(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf
    from rich.console import Console

    from admire.config import load_config, load_run_config
    from admire.report import print_summary
    from admire.rl.trainer import check_config, train
    from admire.runs import RunDir, atomic_write_text

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console(quiet=args.quiet)
    resume = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("resume=")), None)
    overrides = [o for o in args.overrides if not o.startswith("resume=")]
    try:
        if resume:
            run_dir = RunDir(resume)
            cfg = load_run_config(run_dir.path, overrides)
        else:
            cfg = load_config(args.config, overrides, args.config_dir)
        check_config(cfg)  # a bad key or a judge without an endpoint: one line, before a run dir is made
    except (ValueError, FileNotFoundError) as exc:
        print(f"admire train: error: {exc}", file=sys.stderr)
        return 2
    if resume:
        console.print(f"[bold]resuming[/bold] {run_dir.path}")
    else:
        name = cfg.run.name or f"{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = RunDir(Path(cfg.run.dir) / name).create()
        cfg.run.name = name
        atomic_write_text(run_dir.config, OmegaConf.to_yaml(cfg, resolve=True))
        console.print(f"[bold]run[/bold] {run_dir.path}")
    summary = train(cfg, run_dir, console=console)
    print_summary(summary, console)
    return 0
