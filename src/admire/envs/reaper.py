"""Find and kill one browser's processes, now or after the process that launched it has died.

A browser outlives a Python process killed with SIGKILL (or dead of an OOM kill, or SIGTERM without a
handler): nothing runs in the process any more to close it, and chromedriver, Chromium and its helpers
are re-parented to PID 1 and keep their gigabyte. So the first browser a process launches also starts
one small *reaper* process (this file run as a script: stdlib only, no ``site``; 0.5 ms to spawn, about
35 ms of CPU to start in the background, 13 MB) that holds the read end of a pipe whose write end only
the launching process holds. The launcher registers each browser's scratch folder (and chromedriver's
process group) over the pipe and unregisters it once the browser is shut down. The kernel closes the
write end however the launcher ends, so the reaper sees end-of-file, kills what is still registered,
removes those scratch folders and exits: no polling, no pid files. The reaper detaches (it runs as a
grandchild re-parented away from the launcher), because a supervisor may kill the launcher's direct
children along with it — Ray does so to an actor's — and the reaper must outlive that to do its job.

Why a pipe rather than ``prctl(PR_SET_PDEATHSIG)``: the death signal fires when the *thread* that
spawned the child exits, and browsers are launched from rollout and server worker threads.

A browser's processes are found two ways, and the reaper uses both. chromedriver runs in a session and
process group of its own (see ``launch_driver``), which Chromium, its zygotes, renderers and GPU process
stay in, so one ``killpg`` stops them all at once; but ``chrome_crashpad_handler`` calls ``setsid`` and
leaves the group, so the group alone is not enough. Every process also carries the browser's scratch
folder in its environment (``TMPDIR``) or command line, which :func:`browser_processes` scans for.

The functions here run both in the launcher (``shut_down``) and in the reaper, so this module imports
nothing but the standard library and nothing from ``admire``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# The processes of one browser
# --------------------------------------------------------------------------------------------------


def browser_processes(scratch: Path) -> dict[int, str]:
    """Live (non-zombie) processes launched for the browser that uses ``scratch``: pid -> name.

    Linux only (reads /proc). Zombies are left out: they hold no memory, and where PID 1 does not reap
    orphans (some containers) Chromium's children stay zombies forever after a clean quit.
    """
    marker = str(scratch).encode()
    env_marker = b"TMPDIR=" + marker + b"\0"
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            name, state = _name_and_state(pid)
            if state == "Z":
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if marker in cmdline:
                found[pid] = name
                continue
            if not name.startswith("chrom"):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if env_marker in f.read() + b"\0":
                    found[pid] = name
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


def _name_and_state(pid: int) -> tuple[str, str]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read().decode(errors="replace")
    name = stat[stat.index("(") + 1: stat.rindex(")")]
    state = stat[stat.rindex(")") + 2:].split(" ", 1)[0]
    return name, state


def kill_processes(pids: list[int], wait_s: float = 3.0) -> None:
    """SIGKILL each pid and wait until none of them runs (zombies count as gone)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        pending = [pid for pid in pending if _is_running(pid)]
        if pending:
            time.sleep(0.02)


def _is_running(pid: int) -> bool:
    try:
        return _name_and_state(pid)[1] != "Z"
    except (OSError, ValueError):
        return False


def kill_browser(scratch: Path, pgid: int | None = None, rounds: int = 3) -> None:
    """Kill chromedriver's process group, then every process still marked with ``scratch``; remove it.

    The group goes first so that chromedriver cannot start anything new while the scan runs; the scan
    repeats (a few rounds) for a process that was being forked while the previous round ran.
    """
    if pgid is not None and pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for _ in range(rounds):
        pids = list(browser_processes(scratch))
        if not pids:
            break
        kill_processes(pids)
    shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# The launcher's side: one reaper per process, started on the first registration
# --------------------------------------------------------------------------------------------------

_ADD, _DEL = b"+", b"-"


class Reaper:
    """One reaper process and the pipe to it; started on the first registration. Thread-safe.

    A process normally needs one, :data:`PROCESS_REAPER`, which the module functions use.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.pid: int | None = None
        self._entries: dict[str, int | None] = {}

    def register(self, scratch: Path, pgid: int | None = None) -> None:
        """Kill the browser using ``scratch`` (and the group ``pgid``) and remove ``scratch`` should
        this process die before :meth:`unregister`. A reaper that cannot start costs a warning, not
        the browser."""
        key = str(scratch)
        with self._lock:
            self._entries[key] = pgid
            try:
                self._send(_record(_ADD, key, pgid))
            except OSError as exc:
                log.warning("could not start the browser reaper (%s); a killed process may leave its browser", exc)

    def unregister(self, scratch: Path) -> None:
        """The browser using ``scratch`` is gone: the reaper must not touch it (or its folder) any more."""
        key = str(scratch)
        with self._lock:
            if key not in self._entries:
                return
            del self._entries[key]
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    self._send(_record(_DEL, key, None))

    def close(self) -> None:
        """Close the pipe now, as dying would: the reaper kills what is still registered and exits."""
        with self._lock:
            self._stop()
            self._entries.clear()

    def _send(self, record: bytes) -> None:
        """Write one record, (re)starting the reaper first when there is none or it has died."""
        if self._fd is None:
            self._start()
        try:
            _write_all(self._fd, record)
        except BrokenPipeError:  # the reaper was killed: start another and tell it everything again
            log.warning("the browser reaper (pid %s) died; starting a new one", self.pid)
            self._stop()
            self._start()
            _write_all(self._fd, record)

    def _start(self) -> None:
        read_end, write_end = os.pipe()  # both close-on-exec: no other child inherits the write end
        pid_read, pid_write = os.pipe()
        try:
            intermediate = os.posix_spawn(
                sys.executable, [sys.executable, "-I", "-S", os.path.abspath(__file__), "--detach"],
                dict(os.environ),
                file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0), (os.POSIX_SPAWN_DUP2, pid_write, 1)],
                setsid=True,  # out of the terminal's process group: Ctrl-C must not reach it
            )
            os.close(pid_write)
            pid_write = -1
            with os.fdopen(pid_read, "rb") as answer:
                pid_read = -1
                reply = answer.read()
            os.waitpid(intermediate, 0)
            self.pid = int(reply.strip())
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
            for fd in (pid_read, pid_write):
                if fd >= 0:
                    os.close(fd)
        self._fd = write_end
        for scratch, pgid in self._entries.items():
            _write_all(write_end, _record(_ADD, scratch, pgid))

    def _stop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.pid is not None:
            _wait_gone(self.pid, REAPER_EXIT_WAIT_S)  # it exits once it has killed what was registered
            self.pid = None

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's browsers and reaper are the parent's business."""
        self._lock = threading.Lock()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None
        self.pid = None
        self._entries = {}


REAPER_EXIT_WAIT_S = 15.0
"""How long ``close`` waits for the reaper to finish killing what was still registered."""


def _wait_gone(pid: int, timeout_s: float) -> None:
    """Wait for a process that is not our child (the reaper is detached) to exit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.02)


PROCESS_REAPER = Reaper()
"""This process's reaper; ``launch_driver`` registers every browser with it."""
os.register_at_fork(after_in_child=PROCESS_REAPER._forget_after_fork)


def register_browser(scratch: Path, pgid: int | None = None) -> None:
    """:meth:`Reaper.register` on this process's reaper."""
    PROCESS_REAPER.register(scratch, pgid)


def unregister_browser(scratch: Path) -> None:
    """:meth:`Reaper.unregister` on this process's reaper."""
    PROCESS_REAPER.unregister(scratch)


def _record(kind: bytes, scratch: str, pgid: int | None) -> bytes:
    # NUL-terminated: the one byte a path cannot contain. One record is far below PIPE_BUF (atomic).
    return kind + b" " + str(pgid or 0).encode() + b" " + os.fsencode(scratch) + b"\0"


def _write_all(fd: int | None, data: bytes) -> None:
    assert fd is not None
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --------------------------------------------------------------------------------------------------
# The reaper's side
# --------------------------------------------------------------------------------------------------


def serve(fd: int) -> dict[str, int | None]:
    """Read records from ``fd`` until end-of-file; return what was registered and not unregistered."""
    entries: dict[str, int | None] = {}
    pending = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return entries
        pending += chunk
        *records, pending = pending.split(b"\0")
        for record in records:
            kind, pgid, scratch = record.split(b" ", 2)
            key = os.fsdecode(scratch)
            if kind == _ADD:
                entries[key] = int(pgid) or None
            else:
                entries.pop(key, None)


def main() -> int:
    if "--detach" in sys.argv[1:]:
        # Run as a grandchild of the launcher, re-parented away from it: a supervisor that kills the
        # launcher's direct children with it (Ray kills an actor's children) must not take the reaper
        # along before it has done its job. The launcher learns the reaper's pid from stdout.
        child = os.fork()
        if child:
            os.write(1, f"{child}\n".encode())
            os._exit(0)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    # Only end-of-file ends the reaper: a signal meant for the launcher (a scheduler's SIGTERM to
    # everything, a closed terminal) must not take the watchdog down before it has done its job.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    for scratch, pgid in serve(0).items():
        kill_browser(Path(scratch), pgid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
