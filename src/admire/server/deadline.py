"""Calls into a device that may hang: a deadline for any call, and a hard kill for what hung.

A browser that stops answering blocks the thread that called it, possibly for minutes; the pool
must give up on it within ``call_timeout_s`` and carry on, so each call runs on its own thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("admire.server")

T = TypeVar("T")


class CallTimedOut(Exception):
    """A call ran past its deadline; the thread running it is left behind (a daemon)."""


def run_with_deadline(fn: Callable[[], T], timeout_s: float, name: str) -> T:
    """``fn()`` on a daemon thread; ``CallTimedOut`` if it has not returned within ``timeout_s``.

    A thread per call (about 0.1 ms) rather than an executor: a hung call keeps its thread, and an
    executor's workers would all end up hung on one broken browser.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, daemon=True, name=name).start()
    if not done.wait(timeout_s):
        raise CallTimedOut(f"{name} did not return within {timeout_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def kill_processes_of(env: Any, label: str) -> None:
    """SIGKILL a hung env's processes when it lists them (``MiniWoBEnv.process_ids``): a polite close
    of a frozen browser would wait out the driver's timeouts and retries (about 40 s) first."""
    process_ids = getattr(env, "process_ids", None)
    if process_ids is None:
        return
    try:
        pids = list(process_ids())
    except Exception as exc:  # noqa: BLE001 - best effort: the close that follows still runs
        log.warning("%s: could not list its processes: %s", label, exc)
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)
    log.warning("%s: killed %d process(es) of the hung env", label, len(pids))
