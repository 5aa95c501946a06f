"""``admire`` — one entry point, one module per subcommand.

Each subcommand lives in its own module exposing ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; a module imports its heavy dependencies (torch, selenium) inside ``run``, so
``admire --help`` stays instant and a command never pays for another's imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "train": "admire.commands.train",
    "eval": "admire.commands.eval",
    "serve": "admire.commands.serve",
    "viz": "admire.commands.viz",
    "milestones": "admire.commands.milestones",
    "rewards": "admire.commands.rewards",
    "bench": "admire.commands.bench",
    "models": "admire.commands.models",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="admire", description="Train GUI agents with reinforcement learning and adaptive milestone rewards."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)  # light: heavy imports live inside run()
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser


def installed_version() -> str:
    """The version pip installed (package metadata), so a bug report names the exact build."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("admire")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command])
    try:
        return int(module.run(args) or 0)
    except ImportError as exc:  # a part whose optional extra is not installed: one line naming pip install
        from admire.extras import hint_for

        hint = hint_for(exc)
        if hint is None:
            raise
        print(f"admire {args.command}: error: {hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
