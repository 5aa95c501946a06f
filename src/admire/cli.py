"""``admire`` — one entry point, one module per subcommand.

Each subcommand lives in its own module exposing ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; the modules are imported only when their command runs, so ``admire --help``
stays instant and a command never pays for another's heavy imports (torch, selenium).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "train": "admire.commands.train",
    "eval": "admire.commands.eval",
    "milestones": "admire.commands.milestones",
    "bench": "admire.commands.bench",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="admire", description=__doc__.splitlines()[0].strip("`"))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=f"see 'admire {name} --help'", add_help=False)
            continue
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        parser = argparse.ArgumentParser(prog="admire")
        sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        for name in COMMANDS:
            sub.add_parser(name)
        if command is not None:
            parser.error(f"unknown command {command!r}; choose from {', '.join(COMMANDS)}")
        parser.print_help()
        return 0 if "-h" in argv or "--help" in argv else 2
    args = build_parser(only=command).parse_args(argv)
    module = importlib.import_module(COMMANDS[command])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
