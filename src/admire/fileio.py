"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half of one.

A written file gets the mode a plain ``open(path, "w")`` would give it — an existing file keeps its
mode, a new one gets ``0o666 & ~umask`` — not ``mkstemp``'s 0600, so a run's config, summary,
trajectories and checkpoints are as readable as its ``metrics.jsonl`` (which is opened plainly).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

PARTIAL_SUFFIX = ".tmp"


def is_partial_write(name: str) -> bool:
    """Whether a file name is that of an atomic write's temporary file (``.<target>.<random>.tmp``)."""
    return name.startswith(".") and name.endswith(PARTIAL_SUFFIX) and name.count(".") >= 3


def atomic_write_bytes(path: str | Path, data: bytes, *, overwrite: bool = True) -> Path:
    """Write to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    ``overwrite=False`` never replaces an existing file, even one created while this call runs: the
    temporary file is hard-linked to ``path`` (which fails if ``path`` exists) instead of renamed, and
    ``FileExistsError`` is raised with nothing changed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not overwrite and (target.exists() or target.is_symlink()):
        raise FileExistsError(f"{target} exists")
    mode = _mode_for(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, target)
        else:
            _link_exclusive(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | Path, text: str, *, overwrite: bool = True) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the process's umask."""
    return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``os.umask`` can only be read by
    setting it, which would briefly change it for every other thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)  # an existing file keeps its mode, as open() keeps it
    except OSError:
        return default_file_mode()


def _link_exclusive(tmp: str, target: Path) -> None:
    """Publish ``tmp`` as ``target`` only if ``target`` does not exist; ``tmp`` is removed either way."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise FileExistsError(f"{target} exists") from None
    except OSError:  # a file system without hard links: check, then rename (a small race, no worse than open)
        if target.exists():
            raise FileExistsError(f"{target} exists") from None
        os.replace(tmp, target)
        return
    Path(tmp).unlink(missing_ok=True)


def unwritable_reason(target: str | Path) -> str | None:
    """Why a new file at ``target`` could not be written (its nearest existing folder is not a writable
    directory), or None: lets a command refuse a bad output path before it does any work."""
    folder = Path(target).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None


class UnreadableFile(ValueError):
    """A file that is not a regular file or is larger than its kind may be: read, it would block forever (a
    FIFO) or fill the memory (``/dev/zero``, a huge file)."""


def read_bounded(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes, else ``UnreadableFile``
    naming it (``FileNotFoundError`` and other ``OSError``s pass through for the caller's message). The
    file is opened first and checked on its descriptor, so a swap between the check and the read cannot
    hand over another file; the read stops one byte past the size it had then."""
    target = Path(path)
    with open(target, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as handle:
        info = check_stat(target, os.fstat(handle.fileno()), limit, what)
        data = handle.read(info.st_size + 1)  # one byte more than it said: a file still growing is noticed
    if len(data) > info.st_size:
        raise UnreadableFile(f"{target} grew while being read; give a {what} that is complete")
    return data


def check_readable(path: str | Path, limit: int, what: str) -> None:
    """``UnreadableFile`` unless ``path`` (when it exists) is a regular file of at most ``limit`` bytes: what
    :func:`read_bounded` would refuse, found without reading, so a command can refuse before it acts."""
    target = Path(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return
    check_stat(target, info, limit, what)


def check_stat(target: Path, info: os.stat_result, limit: int, what: str) -> os.stat_result:
    """``info`` (of ``target``, opened or not) when it is a regular file of at most ``limit`` bytes, else
    ``UnreadableFile``: the one rule every bounded reader applies."""
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFile(f"{target} is not a regular file (a FIFO, device or socket); give the {what} itself")
    if info.st_size > limit:
        raise UnreadableFile(f"{target} is {info.st_size} bytes; a {what} may be at most {limit}")
    return info
