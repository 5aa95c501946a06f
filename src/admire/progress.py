"""Progress of long loops — evaluation episodes, warm-start demonstrations — and the bar that shows it.

The loops take a plain callback, ``progress(done, total)``, so they stay free of any display: the
trainer turns the reports into the status text of its epoch bar, ``admire eval`` into a bar of its
own (:func:`progress_bar`), and a test into a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
