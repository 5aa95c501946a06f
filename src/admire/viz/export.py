"""The viewer as one self-contained HTML file: images as data URIs, style and script inline.

The file opens from disk on a machine with no network and no admire: every page of the served viewer is
a ``<section class="page">`` with an anchor, and the inline script shows one section at a time (without
script, all sections show one after the other). Which trajectories go in is capped, because each brings
its screenshots: by default every held-out evaluation and the last training epoch.

The export writes one file and never replaces one it did not write: the target must be a new path or a
previous export (an admire report, which the viewer marks ``data-exported``); a directory, any other
file, or a path that cannot be written is refused (``ExportTargetError``) before anything is rendered.
The file is written to a temporary file beside the target and renamed, so a failure leaves no half file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from html import escape as html_escape
from pathlib import Path

from admire.errors import first_line
from admire.fileio import atomic_write_text, unwritable_reason
from admire.viz import render
from admire.viz.data import RunData, TrajectoryFilter
from admire.viz.index import TrajectoryRow

DEFAULT_MAX_TRAJECTORIES = 200
_EXPORT_MARKS = (b"<!doctype html>", b"admire report</title>", b'<body data-exported="1">')
_MARK_SCAN_BYTES = 1 << 20


class ExportTargetError(ValueError):
    """The export cannot go where it was asked to; the message names the path and what to do."""


def default_selection(data: RunData, max_trajectories: int = DEFAULT_MAX_TRAJECTORIES) -> list[TrajectoryRow]:
    """The last training epoch first (what the policy does now), then evaluations from the latest back."""
    if max_trajectories < 0:
        raise ValueError(f"max_trajectories must be >= 0, got {max_trajectories}")
    rows = data.rows()
    train_epochs = data.epochs("train")
    last_train = [row for row in rows if row.kind == "train" and train_epochs and row.epoch == train_epochs[-1]]
    evals = sorted((row for row in rows if row.kind == "eval"), key=lambda r: (-r.epoch, r.position))
    chosen = (last_train + evals)[:max_trajectories]
    return sorted(chosen, key=lambda r: (r.kind != "train", r.kind, r.epoch, r.position))


def export_html(data: RunData, rows: Sequence[TrajectoryRow] | None = None,
                max_trajectories: int = DEFAULT_MAX_TRAJECTORIES) -> str:
    rows = list(default_selection(data, max_trajectories) if rows is None else rows)
    keys = set(data.milestone_history())
    links = _CachedAnchorLinks(data, {row.address for row in rows}, keys)
    sections = [
        _page("run", render.run_section(data, links)),
        _page("trajectories", render.trajectory_list_section(data, TrajectoryFilter(), links, form=False, rows=rows)
              + f'<p class="note">This export holds {len(rows)} of {len(data.rows())} trajectories '
              "(`admire viz --export --max-trajectories N` to change it; the served viewer has them all).</p>"),
    ]
    for i, row in enumerate(rows):
        neighbours = (rows[i - 1] if i > 0 else None, rows[i + 1] if i + 1 < len(rows) else None)
        try:
            section = render.trajectory_section(data, row, links, neighbours=neighbours)
        except ValueError as exc:  # a damaged line: its page says so, the rest of the report is written
            detail = first_line(exc)
            section = f"<p>{html_escape(row.address)} is not a readable trajectory: {html_escape(detail)}</p>"
        sections.append(_page(f"t-{row.address}", section))
    sections.append(_page("milestones", render.milestones_index_section(data, links)))
    for key in sorted(keys):
        sections.append(_page(render.page_id_for_key(key), render.milestone_section(data, key, links)))
    return render.document(f"{data.name} — admire report", "".join(sections), links, data.name, exported=True)


def write_export(data: RunData, path: str | Path, max_trajectories: int = DEFAULT_MAX_TRAJECTORIES) -> Path:
    """Render the export and write it to ``path``, atomically; ``ExportTargetError`` for a target that is not
    a new file or a previous export, or that cannot be written (nothing is left behind then)."""
    target = Path(path)
    replace = check_export_target(target)
    html = export_html(data, max_trajectories=max_trajectories)
    created = [folder for folder in target.parents if not folder.exists()]
    try:
        return atomic_write_text(target, html, overwrite=replace)
    except FileExistsError:
        raise ExportTargetError(f"{target} appeared while the report was written; export again") from None
    except OSError as error:
        for folder in created:  # innermost first: remove only the folders this call made, if still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise ExportTargetError(f"cannot write {target}: {_reason(error)}; choose a writable path") from None


def check_export_target(target: Path) -> bool:
    """Whether ``target`` may be written, and if so whether it replaces a previous export (True) or is new.

    Refused: a directory (the export is one file), an existing file that is not an admire export, and a
    path whose nearest existing folder is not a writable directory.
    """
    if target.is_dir():
        raise ExportTargetError(f"{target} is a directory; the export is one HTML file, e.g. "
                                f"--export {target / 'report.html'}")
    if target.exists() or target.is_symlink():
        if target.is_symlink() or not target.is_file() or not is_previous_export(target):
            raise ExportTargetError(f"{target} exists and is not an admire export; choose a new file name "
                                    "(only a previous export is replaced)")
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise ExportTargetError(f"cannot write {target}: its folder is not writable; choose a writable path")
        return True
    reason = unwritable_reason(target)
    if reason:
        raise ExportTargetError(f"cannot write {target}: {reason}; choose a writable path")
    return False


def is_previous_export(path: Path) -> bool:
    """Whether ``path`` is a report ``admire viz --export`` wrote (the marks of ``render.document``)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_MARK_SCAN_BYTES)
    except OSError:
        return False
    return head.startswith(_EXPORT_MARKS[0]) and all(mark in head for mark in _EXPORT_MARKS[1:])


def _reason(error: OSError) -> str:
    return (error.strerror or str(error)).lower()


def _page(anchor: str, body: str) -> str:
    return f'<section class="page" id="{render.esc(anchor)}">{body}</section>'


class _CachedAnchorLinks(render.AnchorLinks):
    """Anchor links that read each screenshot once, however many steps show it."""

    def __init__(self, data: RunData, included: set[str], keys: set[str]) -> None:
        super().__init__(data, included, keys)
        self._uris: dict[str, str | None] = {}

    def screenshot(self, ref: str) -> str | None:
        if ref not in self._uris:
            self._uris[ref] = self.data.screenshot_data_uri(ref)
        return self._uris[ref]
