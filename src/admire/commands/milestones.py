"""``admire milestones show | history | export | import`` — inspect and move milestone banks.

BANK is a bank file (``*.sqlite``) or a run directory, whose bank is ``<run>/milestones.sqlite``.
``export`` writes the latest lists as JSON; ``import`` adds a JSON file (an export, or a hand-written
``{"<key>": ["phrase", ...]}``) as new versions, frozen unless ``--no-freeze``: the static milestones
of the paper's Table 3.

The command never writes into a file it did not create: ``show`` and ``history`` open the bank
read-only and refuse any file that is not a bank; ``export`` refuses an existing file (``--force``
replaces one that is not a database, never the bank); ``import`` checks the whole JSON file before it
opens the bank, refuses an existing file that is not a bank, and writes all lists in one transaction
(a new bank it created is removed again if that fails). Every refusal is one line and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sqlite3
import sys
import unicodedata
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from admire.fileio import unwritable_reason
from admire.milestones.bank import (
    SQLITE_MAGIC,
    MilestoneBank,
    MilestoneBankError,
    MilestoneList,
    read_milestone_file,
)

if TYPE_CHECKING:  # rich is imported only when a table is printed
    from rich.table import Table
    from rich.text import Text

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
    export.add_argument("output", help="the JSON file to write (must not exist yet)")
    export.add_argument("--force", action="store_true",
                        help="replace an existing output file (never a database, never the bank)")

    load = sub.add_parser("import", help="add the lists of a JSON file as new versions (frozen by default)")
    load.add_argument("bank", help=bank_help + "; created when missing")
    load.add_argument("input", help="an `admire milestones export` file, or {\"<key>\": [\"phrase\", ...]}")
    load.add_argument("--no-freeze", dest="freeze", action="store_false",
                      help="let training update the imported lists (default: frozen)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "import":
            return _import(bank_path(args.bank), Path(args.input), args.freeze)
        path = bank_path(args.bank)
        if not path.is_file():
            raise FileNotFoundError(f"no milestone bank at {path}; pass a bank file or a run directory that "
                                    f"has a {BANK_FILE_NAME}")
        with MilestoneBank(path, readonly=True) as bank:
            if args.action == "show":
                return _show(bank, args.key, args.json)
            if args.action == "history":
                return _history(bank, args.key, args.json)
            return _export(bank, Path(args.output), args.force)
    except (OSError, ValueError, MilestoneBankError, sqlite3.Error) as error:
        print(f"admire milestones {args.action}: error: {_message(error)}", file=sys.stderr)
        return 2


def _import(path: Path, source: Path, freeze: bool) -> int:
    """Check the file, then the bank, then write: a refusal at any point leaves every file as it was."""
    entries = read_milestone_file(source)
    if path.exists() or path.is_symlink():
        MilestoneBank(path, readonly=True).close()  # an existing file must already be a bank
        created: list[Path] = []
    else:
        created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        with MilestoneBank(path) as bank:
            imported = bank.import_lists(entries, source.name, freeze=freeze)
            state = "frozen" if freeze else "adaptive"
            print(f"imported {len(imported)} list(s) ({state}) into {bank.path}; bank version {bank.version}")
    except BaseException:
        _remove_created(created)
        raise
    return 0


def _export(bank: MilestoneBank, target: Path, force: bool) -> int:
    if bank.is_own_file(target):
        raise ValueError(f"{target} is the milestone bank itself; export to a new .json file")
    if target.is_dir():
        raise ValueError(f"{target} is a directory; give the JSON file to write, e.g. {target / 'milestones.json'}")
    if target.exists() or target.is_symlink():
        if not force:
            raise FileExistsError(f"{target} exists; export to a new file, or pass --force to replace it")
        if _is_sqlite(target):
            raise FileExistsError(f"{target} is a database; --force replaces only a JSON file, export to a "
                                  "new .json file")
    reason = unwritable_reason(target)
    if reason:
        raise ValueError(f"cannot write {target}: {reason}; choose a writable path")
    try:
        written = bank.export_json(target, overwrite=force)
    except FileExistsError:
        if not target.exists():
            raise
        raise FileExistsError(f"{target} exists; export to a new file, or pass --force to replace it") from None
    print(f"exported {len(bank.keys())} list(s) from {bank.path} to {written}")
    return 0


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _remove_created(created: list[Path]) -> None:
    """Undo a bank this command created (its file, SQLite's side files, the folders made for it)."""
    if not created:
        return
    bank = created[0]
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{bank}{suffix}").unlink(missing_ok=True)
    for folder in created[1:]:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _message(error: BaseException) -> str:
    """One line for an error: an OS error as 'what: path; the fix' rather than its errno repr."""
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror.lower()}{where}; check the path and its permissions"
    if isinstance(error, sqlite3.Error):
        return f"the bank could not be read ({error}); is it a milestone bank?"
    return " ".join(str(error).split())


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
                         ensure_ascii=False, allow_nan=False))
        return 0
    table = _table(f"{bank.path}: {len(lists)} list(s), bank version {bank.version}", "key")
    for item in lists:
        table.add_row(_plain(item.key), _plain(_about(item)), _plain(_numbered(item)))
    _print(table)
    return 0


def _history(bank: MilestoneBank, key: str, as_json: bool) -> int:
    versions = bank.history(key)
    if not versions:
        raise ValueError(f"no milestones for key {key!r} in {bank.path}; keys: {', '.join(bank.keys()) or 'none'}")
    if as_json:
        print(json.dumps({"key": key, "versions": [_as_dict(i) for i in versions]}, indent=2, ensure_ascii=False,
                         allow_nan=False))
        return 0
    table = _table(f"{key}: {len(versions)} version(s)", "created")
    for item in versions:
        table.add_row(_created(item.provenance.created_at), _plain(_about(item)), _plain(_numbered(item)))
    _print(table)
    return 0


def _created(timestamp: float) -> str:
    """The time a version was written, or the raw value when it is no time (a bank written before the
    import checked its numbers may hold NaN or 1e300): one bad row must not hide the others."""
    try:
        return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d\n%H:%M:%S")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"? ({timestamp!r})"


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
    created = item.provenance.created_at
    if not isinstance(created, int | float) or not math.isfinite(created):
        data["provenance"]["created_at"] = None  # JSON has no NaN: the output stays valid JSON
    return data


def _numbered(item: MilestoneList) -> str:
    return "\n".join(f"{i}. {phrase}" for i, phrase in enumerate(item.milestones, start=1))


def _plain(text: str) -> Text:
    """``text`` as rich shows it literally: never read as markup (a phrase is what an agent typed, and
    ``[/]`` or ``[link=…]`` in it must not crash or render), control characters (ANSI and OSC escapes)
    shown as ``\x1b``-style escapes rather than sent to the terminal; newlines and tabs kept."""
    from rich.text import Text

    return Text("".join(c if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf") else
                        repr(c)[1:-1] for c in text))


def _table(title: str, first: str) -> Table:
    from rich.table import Table

    table = Table(title=_plain(title), show_lines=True)
    table.add_column(first, overflow="fold", ratio=1)
    table.add_column("version", overflow="fold", ratio=1)
    table.add_column("milestones", overflow="fold", ratio=3)
    return table


def _print(table: Table) -> None:
    from rich.console import Console

    Console().print(table)
