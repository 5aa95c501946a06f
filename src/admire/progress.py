"""Progress of long loops — evaluation episodes, warm-start demonstrations — and the bar that shows it.

The loops take a plain callback, ``progress(done, total)``, so they stay free of any display: the
trainer turns the reports into the status text of its epoch bar, ``admire eval`` into a bar of its
own (:func:`progress_bar`), and a test into a list.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)``: called with ``done=0`` before the work starts, then after each unit."""


@contextmanager
def progress_bar(description: str, console: Any = None) -> Iterator[ProgressFn]:
    """A rich bar (done/total, elapsed, remaining) fed by the ``ProgressFn`` it yields."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(description, total=None)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield report


def counting(progress: ProgressFn | None, total: int) -> Callable[[Any], None] | None:
    """A per-item callback (``on_episode``) that reports to ``progress``, which is told ``0/total`` now."""
    if progress is None:
        return None
    progress(0, total)
    done = 0

    def one_more(_item: Any) -> None:
        nonlocal done
        done += 1
        progress(done, total)

    return one_more


STATUS_EVERY_S = 5.0
"""How often, at most, a counting status line (``… episode 3/20``) is rewritten to ``status_file``; a line of
another phase is written at once."""


def _phase(text: str) -> str:
    """A status line without its numbers: two lines of one phase differ only in their counts."""
    return re.sub(r"\d+", "", text)


class TrainingProgress:
    """A rich progress bar over epochs with ETA and the live training success rate.

    With ``status_file``, the bar's status line is also written there (at most every ``STATUS_EVERY_S``,
    and at the end): a run started with ``--quiet`` by ``admire bench learning`` shows no bar, and the
    benchmark's heartbeat reads this file to say what the run is doing (a warm start's minibatch, an
    evaluation's episode) before its first epoch is logged."""

    def __init__(self, total: int, completed: int, console: Any = None, status_file: Path | None = None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]epoch {task.completed}/{task.total}"), BarColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console,
            transient=False,
        )
        self._task = self._progress.add_task("train", total=total, completed=completed, info="starting")
        self._status_file = status_file
        self._written_at = -STATUS_EVERY_S
        self._last = "starting"

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()
        self._write_status(force=True)

    def status(self, text: str) -> None:
        self._progress.update(self._task, info=text)
        changed = _phase(text) != _phase(self._last)  # a new phase is written at once; a counter is throttled
        self._last = text
        self._write_status(force=changed)

    def _write_status(self, force: bool = False) -> None:
        if self._status_file is None or (not force and time.monotonic() - self._written_at < STATUS_EVERY_S):
            return
        from admire.fileio import atomic_write_text

        self._written_at = time.monotonic()
        with contextlib.suppress(OSError):  # a status line is a courtesy: never the reason a run stops
            atomic_write_text(self._status_file, self._last + "\n")

    def counter(self, label: str) -> ProgressFn:
        """A ``progress(done, total)`` that shows ``<label> done/total`` as the bar's status."""
        return lambda done, total: self.status(f"{label} {done}/{total}")

    def advance(self, metrics: dict[str, float]) -> None:
        info = (f"success {metrics['train/success']:.0%}  milestone {metrics['reward/milestone']:+.3f}  "
                f"{metrics['env/steps_per_s']:.1f} steps/s")
        if "eval/success" in metrics:
            info += f"  eval {metrics['eval/success']:.0%}"
        self._progress.update(self._task, advance=1, info=info)
        self._last = info
        self._write_status(force=True)
