"""Kill a browser of a running ``admire serve`` in the middle of an episode (fault injection).

A crashed device is the failure the whole rollout path is built to survive: the episode is an ``env_error``,
excluded from rewards, advantages and the milestone bank, and the device is restarted. Unit tests cover each
piece; this is how an end-to-end run proves it (``scripts/cpu_smoke.sh`` runs it beside a verl training run)::

    python -m admire.server.faults http://127.0.0.1:8765 SCRATCH_ROOT [--timeout 600] [--min-steps 1]

It polls the server's ``/episodes`` until an episode is running with at least ``--min-steps`` steps taken,
then SIGKILLs the main Chromium process of a browser whose scratch folder lies under ``SCRATCH_ROOT`` (the
server's ``TMPDIR``), prints its pid and exits 0; nothing running before ``--timeout``: exit 1. With one
device, the browser killed is the running episode's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

from admire.envs.miniwob_browser import parent_pid
from admire.envs.reaper import browser_processes


def running_episode(url: str, min_steps: int, token: str | None = None) -> dict[str, object] | None:
    """An episode the server reports as running with at least ``min_steps`` steps, or None."""
    request = urllib.request.Request(f"{url.rstrip('/')}/episodes")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        episodes = json.loads(reply.read())
    return next((e for e in episodes if e.get("outcome") == "running" and int(e.get("steps", 0)) >= min_steps),
                None)


def browser_mains(scratch_root: Path) -> list[int]:
    """The main Chromium processes of the browsers under ``scratch_root``: those whose parent is not a
    Chromium process itself (it is the chromedriver that started them)."""
    found = browser_processes(scratch_root)
    chromium = {pid for pid, name in found.items() if name.startswith("chrom") and name != "chromedriver"}
    return sorted(pid for pid in chromium if parent_pid(pid) not in chromium)


def kill_mid_episode(url: str, scratch_root: Path, *, min_steps: int = 1, timeout_s: float = 600.0,
                     poll_s: float = 0.05, token: str | None = None) -> int | None:
    """Wait for a running episode, kill one browser; its pid, or None when nothing ran in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            episode = running_episode(url, min_steps, token)
        except OSError:  # the server is still starting, or busy
            episode = None
        if episode is not None:
            mains = browser_mains(scratch_root)
            if mains:
                os.kill(mains[0], signal.SIGKILL)
                return mains[0]
        time.sleep(poll_s)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m admire.server.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the env server, e.g. http://127.0.0.1:8765")
    parser.add_argument("scratch_root", type=Path, help="the server's TMPDIR (its browsers' scratch folders)")
    parser.add_argument("--min-steps", type=int, default=1, help="steps the episode has taken (default 1)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    args = parser.parse_args(argv)
    pid = kill_mid_episode(args.url, args.scratch_root, min_steps=args.min_steps, timeout_s=args.timeout,
                           token=os.environ.get("ADMIRE_SERVER_TOKEN"))
    if pid is None:
        print(f"no episode ran on {args.url} within {args.timeout:.0f} s; nothing killed", file=sys.stderr)
        return 1
    print(f"killed browser {pid} in the middle of an episode on {args.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
