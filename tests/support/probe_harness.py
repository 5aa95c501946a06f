"""Hostile-input probes of the ``admire`` CLI, as rows of a table.

A probe is what a careless or hostile user types: a command line, and the files it finds in its
working directory. Every probe must end the same way — the exit code it names, one ``admire <command>:
error: …`` line on stderr that matches its message, no traceback — and leave every file as it was, so
nothing is half-written, overwritten or silently changed. ``run_cli_probe`` checks all of that; each
area's test module lists its probes in a ``PROBES`` table and parametrizes over it.

Probes run ``admire.cli.main`` in-process (in ``tmp_path`` as the working directory), which is the
real CLI minus the interpreter start-up, so a table of fifty probes costs seconds rather than minutes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from admire.cli import main

Setup = Callable[[Path], None]


@dataclass(frozen=True)
class CliProbe:
    """One row: ``argv`` after ``admire`` (``{tmp}`` is replaced by the probe's folder), the exit code,
    and a regex the single error line must match (searched, case-insensitive)."""

    id: str
    argv: tuple[str, ...]
    exit_code: int = 2
    message: str = ""
    setup: Setup | None = None
    held: bool = False
    """True for a probe that held before its row's fix was needed: kept so it keeps holding."""
    unchanged: bool = True
    """False when the command is expected to write (a probe of a command that succeeds)."""
    ignore: tuple[str, ...] = field(default_factory=tuple)
    """Paths (relative to the probe's folder) whose changes are expected, e.g. a log."""


def snapshot(root: Path, ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file and folder under ``root`` with a hash of its bytes and its mode: what 'unchanged' means."""
    state: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if any(relative == skip or relative.startswith(skip.rstrip("/") + "/") for skip in ignore):
            continue
        if path.is_dir():
            state[relative + "/"] = oct(path.stat().st_mode)
        elif path.is_file():
            state[relative] = f"{oct(path.stat().st_mode)} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        else:
            state[relative] = "special"
    return state


def run_cli_probe(
    probe: CliProbe, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """Run one probe and assert its contract; returns the error line for extra checks."""
    monkeypatch.chdir(tmp_path)
    if probe.setup is not None:
        probe.setup(tmp_path)
    before = snapshot(tmp_path, probe.ignore)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in probe.argv]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback" not in err and "Traceback" not in captured.out, f"{probe.id}: traceback\n{err}"
    assert code == probe.exit_code, f"{probe.id}: exit {code}, expected {probe.exit_code}\nstderr: {err}"
    line = ""
    if probe.exit_code != 0:
        lines = [ln for ln in err.splitlines() if ln.strip() and not _is_usage(ln)]
        assert len(lines) == 1, f"{probe.id}: expected one error line, got {len(lines)}:\n{err}"
        line = lines[0]
        assert re.match(r"admire( \w+)*: error: ", line), f"{probe.id}: not an 'admire …: error:' line: {line}"
        assert re.search(probe.message, line, re.IGNORECASE), f"{probe.id}: {line!r} !~ {probe.message!r}"
    if probe.unchanged:
        assert snapshot(tmp_path, probe.ignore) == before, f"{probe.id}: files changed"
    return line


def _is_usage(line: str) -> bool:
    """argparse prints its usage (possibly wrapped) before its one error line."""
    return line.startswith("usage:") or line.startswith(" ")
