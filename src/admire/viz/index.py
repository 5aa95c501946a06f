"""A light index of a run's trajectories: one row per trajectory, and where its line lies in its file.

Listing and filtering trajectories needs a dozen fields, not every step's UI tree. One pass over an
epoch's JSONL file records those fields with the byte offset of each line, so that opening one
trajectory later reads one line (seek + read) instead of parsing the whole file. Rows are cached per
file and invalidated by the file's size and modification time, which is exactly what changes when
the trainer atomically replaces a file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from admire.fileio import UnreadableFile, check_stat
from admire.runs import MAX_TRAJECTORY_FILE_BYTES

FILE_PATTERN = re.compile(r"^(?P<kind>[a-z]+)_epoch_(?P<epoch>\d{4,})\.jsonl$")


logger = logging.getLogger("admire.viz")

@dataclass(frozen=True)
class TrajectoryRow:
    """What a list of trajectories shows, plus where the full record is."""

    kind: str
    epoch: int  # the number in the file name (for eval files: the evaluation's index, 0 = before RL)
    position: int  # the line number within the file
    offset: int
    length: int
    id: str
    task: str
    seed: int
    goal: str
    outcome: float
    termination: str
    num_steps: int
    invalid_steps: int
    group: int

    @property
    def address(self) -> str:
        """A stable, URL- and anchor-safe name: ``train-0003-12``."""
        return f"{self.kind}-{self.epoch:04d}-{self.position}"

    @property
    def success(self) -> bool:
        return self.outcome >= 1.0


@dataclass(frozen=True)
class _Signature:
    size: int
    mtime_ns: int


def signature(path: Path) -> _Signature | None:
    """Size and modification time, or None for a file that is gone or cannot be looked at (a dangling or
    looping link, a folder without permission): such a file is simply not there for the viewer."""
    try:
        info = path.stat()
    except OSError:
        return None
    return _Signature(info.st_size, info.st_mtime_ns)


@contextlib.contextmanager
def open_regular(path: Path, limit: int = MAX_TRAJECTORY_FILE_BYTES,
                 what: str = "trajectory file") -> Iterator[BinaryIO]:
    """``path`` opened for reading when it is a regular file of at most ``limit`` bytes, else
    ``UnreadableFile``: a FIFO named like a trajectory file would block a plain ``open`` forever and a link
    to ``/dev/zero`` would never end. Opened without blocking and checked on the descriptor (as
    ``fileio.read_bounded`` does), so the file checked is the file read."""
    with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as handle:
        check_stat(path, os.fstat(handle.fileno()), limit, what)
        yield handle


def index_file(path: Path, kind: str, epoch: int) -> list[TrajectoryRow]:
    """Rows of one trajectory file; a torn last line (a killed writer) is skipped, not fatal. A file that is
    not a regular file or is too large is ``UnreadableFile``; reading stops at the size cap even when the
    file grows while it is read."""
    rows: list[TrajectoryRow] = []
    offset = 0
    with open_regular(path) as handle:
        for line in handle:
            if offset > MAX_TRAJECTORY_FILE_BYTES:
                break
            length = len(line)
            # A line that is not a trajectory (torn by a killed writer, binary, of another shape) is left out.
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError, OverflowError):
                rows.append(_row(json.loads(line), kind, epoch, len(rows), offset, length))
            offset += length
    return rows


def _row(record: dict, kind: str, epoch: int, position: int, offset: int, length: int) -> TrajectoryRow:
    task = record["task"]
    steps = record.get("steps") or ()
    return TrajectoryRow(
        kind=kind,
        epoch=epoch,
        position=position,
        offset=offset,
        length=length,
        id=str(record["id"]),
        task=str(task["name"]),
        seed=int(task.get("seed", 0)),
        goal=str(record.get("goal", "")),
        outcome=float(record.get("outcome", 0.0)),
        termination=str(record["termination"]),
        num_steps=len(steps),
        invalid_steps=sum(1 for step in steps if not step.get("format_valid", True)),
        group=int(record.get("group", 0)),
    )


def read_line(path: Path, row: TrajectoryRow) -> bytes:
    """The one line of ``row``, read without touching the rest of the file."""
    with open_regular(path) as handle:
        handle.seek(row.offset)
        return handle.read(row.length)


class TrajectoryIndex:
    """Rows of every trajectory file under ``folder``, re-read only for files that changed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: dict[Path, tuple[_Signature, list[TrajectoryRow]]] = {}
        self._left_out: set[Path] = set()
        self._lock = threading.Lock()

    def left_out(self, path: Path) -> bool:
        """Whether the last look at ``path`` found it unreadable as a whole and already warned about it, so
        that a caller (scoring) need not say the same thing again."""
        with self._lock:
            return path in self._left_out

    def files(self) -> list[tuple[str, int, Path]]:
        """(kind, epoch, path) of every trajectory file, ordered by kind then epoch."""
        found = []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        for name in names:
            match = FILE_PATTERN.match(name)
            if match:
                found.append((match["kind"], int(match["epoch"]), self.folder / name))
        return sorted(found)

    def rows(self) -> list[TrajectoryRow]:
        rows: list[TrajectoryRow] = []
        with self._lock:
            seen = set()
            for kind, epoch, path in self.files():
                seen.add(path)
                sig = signature(path)
                if sig is None:
                    continue
                cached = self._files.get(path)
                if cached is None or cached[0] != sig:
                    try:
                        cached = (sig, index_file(path, kind, epoch))
                        self._left_out.discard(path)
                    except (OSError, UnreadableFile) as error:  # a directory, FIFO or device of that name
                        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
                        logger.warning("%s is left out of the viewer: %s", path, reason)
                        self._left_out.add(path)
                        cached = (sig, [])
                    self._files[path] = cached
                rows.extend(cached[1])
            for gone in set(self._files) - seen:
                del self._files[gone]
            self._left_out &= seen
        return rows
