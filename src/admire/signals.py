"""Turn a scheduler's SIGTERM or a closed terminal's SIGHUP into an exception, as Ctrl-C already is.

Python's default for SIGTERM and SIGHUP is to die on the spot: no ``finally``, no ``with`` exit, so
the trainer's browsers stay behind and a run file being written is left as a temp file. Raised as
:class:`Terminated` in the main thread instead, the signal unwinds the stack like ``KeyboardInterrupt``:
the ``ExitStack`` closes the envs, writes in progress either complete or are discarded (every run file
is written to a temp file and renamed), and the run stays resumable from its last checkpoint.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """The process was asked to stop by ``signum``. A ``BaseException``, as ``KeyboardInterrupt`` is,
    so that an ``except Exception`` on the way up (a retry loop, a crash guard) cannot swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def terminate_on_signals(signums: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, the first of ``signums`` raises :class:`Terminated` in the main thread; the
    ones after it are ignored, so that a second SIGTERM cannot cut the clean-up short (SIGKILL still
    can; the browser reaper covers that). Outside the main thread this does nothing (Python delivers
    signals to the main thread only), and the previous handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise Terminated(signum)

    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def report_stop(command: str, exc: BaseException, resume_hint: str) -> int:
    """Print the one line that says how ``exc`` (``Terminated`` or ``KeyboardInterrupt``) stopped the
    command and how to go on; return 128 + the signal number, as a shell reports a process killed by
    it (143 for SIGTERM, 130 for Ctrl-C)."""
    signum = exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT)
    print(f"admire {command}: stopped by {signal.Signals(signum).name}; resume with: {resume_hint}",
          file=sys.stderr)
    return 128 + signum
