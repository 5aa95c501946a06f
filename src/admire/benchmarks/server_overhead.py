"""Env server step overhead: the same MiniWoB++ env stepped in-process and through ``admire serve``.

Workload: ``click-checkboxes``, one step = one click on a checkbox (it toggles, so the episode never
ends and every step changes the page), as in ``env_throughput.py``.

* **In-process**: ``MiniWoBEnv`` objects in this process.
* **Through the server**: an ``admire serve`` subprocess on 127.0.0.1 with the same number of devices,
  driven by ``RemoteEnv`` clients over HTTP (JSON action in, JSON observation out).

At 1 and 2 devices, each with one stepping thread, the two kinds step in alternating blocks in the
same run, so machine load hits both alike. The table gives the median step time of each and the
server's overhead, ``remote / local - 1`` (target: <= 15%).

Usage: ``admire bench server_overhead [--steps 80] [--devices 1,2] [--screenshots]``; about a
minute on 2 cores. ``main(argv)`` is what ``admire bench`` calls.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

TASK = "miniwob/click-checkboxes"
SEED = 4
BLOCK = 10
BUDGET = 1000  # step budget of the never-ending episode (the server accepts up to 1000)


def _defaults() -> None:
    os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Clicker:
    """Any ``GuiEnv`` on ``click-checkboxes``, reduced to "click the first checkbox once"."""

    def __init__(self, env: Any) -> None:
        from admire.envs import make_task
        from admire.types import Action

        self.env = env
        observation = env.reset(make_task(TASK, seed=SEED).model_copy(update={"max_steps": BUDGET}))
        box = next(i for i, e in enumerate(observation.ui_elements) if e.is_checkable)
        self.action = Action(action_type="click", index=box)

    def step(self) -> float:
        start = time.perf_counter()
        self.env.step(self.action)
        return time.perf_counter() - start

    def close(self) -> None:
        self.env.close()


@contextlib.contextmanager
def admire_server(devices: int, screenshots: bool) -> Iterator[str]:
    """An ``admire serve`` subprocess with ``devices`` MiniWoB++ devices; yields its URL once healthy."""
    import httpx

    from admire.server.background import free_port

    port = free_port()
    command = [sys.executable, "-m", "admire.cli", "serve", "--backend", "miniwob", "--num-devices", str(devices),
               "--port", str(port), "--max-steps", str(BUDGET), "--log-level", "warning"]
    if screenshots:
        command.append("--screenshots")
    process = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"admire serve exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                health = httpx.get(url + "/health", timeout=2).json()
                if health.get("devices", {}).get("idle", 0) >= devices:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("admire serve did not become healthy within 120 s")
            time.sleep(0.25)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_blocks(clickers: Sequence[Clicker], steps: int) -> list[float]:
    """Each clicker on its own thread takes ``steps`` steps; returns every step time."""
    times: list[list[float]] = [[] for _ in clickers]
    errors: list[BaseException] = []

    def work(clicker: Clicker, out: list[float]) -> None:
        try:
            out.extend(clicker.step() for _ in range(steps))
        except Exception as exc:  # noqa: BLE001 - re-raised by the caller after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=pair) for pair in zip(clickers, times, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [t for per_env in times for t in per_env]


def side_by_side(local: Sequence[Clicker], remote: Sequence[Clicker], steps: int) -> tuple[float, float]:
    """Median step seconds (local, remote), stepped in alternating blocks after a warm-up."""
    run_blocks(local, 3)
    run_blocks(remote, 3)
    local_times: list[float] = []
    remote_times: list[float] = []
    for _ in range(max(1, steps // BLOCK)):
        local_times += run_blocks(local, BLOCK)
        remote_times += run_blocks(remote, BLOCK)
    return statistics.median(local_times), statistics.median(remote_times)


def measure(devices: int, steps: int, screenshots: bool) -> tuple[float, float]:
    from admire.envs.miniwob import MiniWoBEnv
    from admire.envs.remote import RemoteEnv

    opened: list[Clicker] = []

    def opened_clicker(make: Callable[[], Any]) -> Clicker:
        opened.append(Clicker(make()))
        return opened[-1]

    with admire_server(devices, screenshots) as url:
        try:
            local = [opened_clicker(lambda: MiniWoBEnv(max_steps=BUDGET, screenshots=screenshots))
                     for _ in range(devices)]
            remote = [opened_clicker(lambda: RemoteEnv(url, max_steps=BUDGET, screenshots=screenshots))
                      for _ in range(devices)]
            return side_by_side(local, remote, steps)
        finally:
            for clicker in opened:
                with contextlib.suppress(Exception):
                    clicker.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80, help="steps per env and kind (in blocks of 10)")
    parser.add_argument("--devices", default="1,2", help="comma-separated device counts")
    parser.add_argument("--screenshots", action="store_true", help="observations carry a PNG")
    args = parser.parse_args(argv)
    _defaults()
    began = time.perf_counter()
    counts = [int(n) for n in args.devices.split(",") if n.strip()]
    print(f"Env server overhead: {TASK}, one checkbox click per step, screenshots "
          f"{'on' if args.screenshots else 'off'}, {os.cpu_count()} CPUs, {args.steps} steps per env and kind")
    print(f"{'devices':>7} | {'in-process ms':>13} | {'server ms':>9} | {'overhead':>8} | target <= 15%")
    for devices in counts:
        local_s, remote_s = measure(devices, args.steps, args.screenshots)
        overhead = remote_s / local_s - 1
        verdict = "ok" if overhead <= 0.15 else "OVER"
        print(f"{devices:>7} | {1000 * local_s:13.1f} | {1000 * remote_s:9.1f} | {100 * overhead:7.1f}% | {verdict}")
    print(f"\n(total {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
