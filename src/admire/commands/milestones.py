"""``admire milestones show | history | export | import`` — inspect and move milestone banks.

BANK is a bank file (``*.sqlite``) or a run directory, whose bank is ``<run>/milestones.sqlite``.
``export`` writes the latest lists as JSON; ``import`` adds a JSON file (an export, or a hand-written
``{"<key>": ["phrase", ...]}``) as new versions, frozen unless ``--no-freeze``: the static milestones
of the paper's Table 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from admire.milestones.bank import MilestoneBank, MilestoneBankError, MilestoneList

if TYPE_CHECKING:  # rich is imported only when a table is printed
    from rich.table import Table

HELP = "show, export, import and trace the milestone lists of a run (the milestone bank)"
BANK_FILE_NAME = "milestones.sqlite"
_BANK_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    bank_help = f"a bank file, or a run directory (its {BANK_FILE_NAME})"

    show = sub.add_parser("show", help="the latest list of every key")
    show.add_argument("bank", help=bank_help)
    show.add_argument("--key", help="only this key")
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")

    history = sub.add_parser("history", help="every version of one key, with its provenance")
    history.add_argument("bank", help=bank_help)
    history.add_argument("key", help="the key, e.g. miniwob/login-user")
    history.add_argument("--json", action="store_true", help="print JSON instead of a table")

    export = sub.add_parser("export", help="write the latest lists to a JSON file")
    export.add_argument("bank", help=bank_help)
    export.add_argument("output", help="the JSON file to write")

    load = sub.add_parser("import", help="add the lists of a JSON file as new versions (frozen by default)")
    load.add_argument("bank", help=bank_help + "; created when missing")
    load.add_argument("input", help="an `admire milestones export` file, or {\"<key>\": [\"phrase\", ...]}")
    load.add_argument("--no-freeze", dest="freeze", action="store_false",
                      help="let training update the imported lists (default: frozen)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "import":
            with MilestoneBank(bank_path(args.bank)) as bank:
                imported = bank.import_json(args.input, freeze=args.freeze)
                state = "frozen" if args.freeze else "adaptive"
                print(f"imported {len(imported)} list(s) ({state}) into {bank.path}; bank version {bank.version}")
            return 0
        path = bank_path(args.bank)
        if not path.is_file():
            raise FileNotFoundError(f"no milestone bank at {path}; pass a bank file or a run directory that "
                                    f"has a {BANK_FILE_NAME}")
        with MilestoneBank(path) as bank:
            if args.action == "show":
                return _show(bank, args.key, args.json)
            if args.action == "history":
                return _history(bank, args.key, args.json)
            target = bank.export_json(args.output)
            print(f"exported {len(bank.keys())} list(s) from {bank.path} to {target}")
            return 0
    except (FileNotFoundError, ValueError, MilestoneBankError) as error:
        print(f"admire milestones {args.action}: {error}", file=sys.stderr)
        return 2


def bank_path(location: str | Path) -> Path:
    """A bank file stays a file; a run directory (existing, or a new path without a suffix) gets its bank."""
    path = Path(location)
    if path.is_dir() or (not path.exists() and path.suffix.lower() not in _BANK_SUFFIXES):
        return path / BANK_FILE_NAME
    return path


def _show(bank: MilestoneBank, key: str | None, as_json: bool) -> int:
    lists = bank.latest()
    if key is not None:
        lists = [item for item in lists if item.key == key]
        if not lists:
            raise ValueError(f"no milestones for key {key!r} in {bank.path}; keys: {', '.join(bank.keys()) or 'none'}")
    if as_json:
        print(json.dumps({"bank_version": bank.version, "lists": [_as_dict(i) for i in lists]}, indent=2,
                         ensure_ascii=False))
        return 0
    table = _table(f"{bank.path}: {len(lists)} list(s), bank version {bank.version}", "key")
    for item in lists:
        table.add_row(item.key, _about(item), _numbered(item))
    _print(table)
    return 0


def _history(bank: MilestoneBank, key: str, as_json: bool) -> int:
    versions = bank.history(key)
    if not versions:
        raise ValueError(f"no milestones for key {key!r} in {bank.path}; keys: {', '.join(bank.keys()) or 'none'}")
    if as_json:
        print(json.dumps({"key": key, "versions": [_as_dict(i) for i in versions]}, indent=2, ensure_ascii=False))
        return 0
    table = _table(f"{key}: {len(versions)} version(s)", "created")
    for item in versions:
        created = datetime.fromtimestamp(item.provenance.created_at).strftime("%Y-%m-%d\n%H:%M:%S")
        table.add_row(created, _about(item), _numbered(item))
    _print(table)
    return 0


def _about(item: MilestoneList) -> str:
    """The version and its provenance, one short line each, so the milestones get the width."""
    lines = [f"version {item.version}, K={len(item.milestones)}", f"by {item.provenance.generator}",
             f"run {item.provenance.run or '-'}, epoch {item.provenance.epoch}"]
    if item.provenance.trajectory_id:
        lines.append(f"from {item.provenance.trajectory_id}")
    if item.frozen:
        lines.append("frozen")
    return "\n".join(lines)


def _as_dict(item: MilestoneList) -> dict[str, object]:
    data = asdict(item)
    data["milestones"] = list(item.milestones)
    return data


def _numbered(item: MilestoneList) -> str:
    return "\n".join(f"{i}. {phrase}" for i, phrase in enumerate(item.milestones, start=1))


def _table(title: str, first: str) -> Table:
    from rich.table import Table

    table = Table(title=title, show_lines=True)
    table.add_column(first, overflow="fold", ratio=1)
    table.add_column("version", overflow="fold", ratio=1)
    table.add_column("milestones", overflow="fold", ratio=3)
    return table


def _print(table: Table) -> None:
    from rich.console import Console

    Console().print(table)
