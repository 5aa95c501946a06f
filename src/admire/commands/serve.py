"""``admire serve``: placeholder until its issue lands."""

from __future__ import annotations

import argparse

HELP = "(being built)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def run(args: argparse.Namespace) -> int:
    raise SystemExit("admire serve is not built yet")
