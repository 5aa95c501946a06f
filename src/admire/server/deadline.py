"""Calls into a device that may hang: a deadline for any call, and a hard kill for what hung.

A browser that stops answering blocks the thread that called it, possibly for minutes; the pool
must give up on it within ``call_timeout_s`` and carry on, so calls never run on the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("admire.server")

T = TypeVar("T")


class CallTimedOut(Exception):
    """A call ran past its deadline; the thread running it is left behind (a daemon)."""


def run_with_deadline(fn: Callable[[], T], timeout_s: float, name: str) -> T:
    """``fn()`` on a new daemon thread; ``CallTimedOut`` if it has not returned within ``timeout_s``.

    For rare calls (starting an env, closing one); a device's frequent calls go to its ``DeviceWorker``.
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


class DeviceWorker:
    """One long-lived thread that runs a device's calls, each under a deadline.

    Starting a thread per call cost about as much CPU as the rest of the pool's work on a step. A call
    that misses its deadline keeps the thread (it is abandoned with the hung env, and exits if the call
    ever returns); the next call starts a fresh thread. A call made while another is still running (a
    close racing a step) gets a thread of its own, so one call never waits behind another's deadline.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._busy = threading.Lock()
        self._inbox: queue.SimpleQueue[Callable[[], Any] | None] | None = None
        self._outbox: queue.SimpleQueue[tuple[bool, Any]] | None = None
        self._closed = False

    def call(self, fn: Callable[[], T], timeout_s: float, what: str) -> T:
        """``fn()`` on the worker thread; ``CallTimedOut`` if it has not returned within ``timeout_s``."""
        label = f"{self.name}-{what}"
        if self._closed or not self._busy.acquire(blocking=False):
            return run_with_deadline(fn, timeout_s, label)
        try:
            if self._inbox is None or self._outbox is None:
                self._inbox, self._outbox = queue.SimpleQueue(), queue.SimpleQueue()
                threading.Thread(target=_serve, args=(self._inbox, self._outbox), daemon=True, name=self.name).start()
            self._inbox.put(fn)
            try:
                ok, value = self._outbox.get(timeout=timeout_s)
            except queue.Empty:
                self._abandon()
                raise CallTimedOut(f"{label} did not return within {timeout_s:.0f} s") from None
        finally:
            self._busy.release()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Let the thread end (after its current call, if one hangs); later calls get threads of their own."""
        self._closed = True
        self._abandon()

    def _abandon(self) -> None:
        if self._inbox is not None:
            self._inbox.put(None)
        self._inbox = self._outbox = None


def _serve(inbox: queue.SimpleQueue[Callable[[], Any] | None], outbox: queue.SimpleQueue[tuple[bool, Any]]) -> None:
    while (fn := inbox.get()) is not None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome = (False, exc)
        outbox.put(outcome)
        del fn, outcome  # do not hold the last result (an observation) while idle


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
