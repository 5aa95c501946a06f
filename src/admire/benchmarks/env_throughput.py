"""MiniWoB++ env speed: this wrapper against raw ``miniwob`` gym steps, and steps/s with 1, 2, 4 envs.

Workload: ``click-checkboxes``, one step = one click on a checkbox (it toggles, so the episode never
ends and every step changes the page). Both envs lift the in-page timer, so nothing times out.

* **Overhead, side by side**: one raw ``gym.make("miniwob/...")`` env and three ``MiniWoBEnv``s, one per
  settle mode (``off``, ``wall``, ``virtual``), live in the same run and step in alternating blocks, so
  machine load hits them alike; the table gives the median step time of each and each wrapper's ratio to
  raw (target: wrapper <= 1.10 x raw), with and without screenshots. The wrapper's step includes building
  the ``Observation`` (elements, screenshot PNG); the raw step includes miniwob's observation dict (DOM,
  screenshot array).
* **Concurrency**: 1, 2 and 4 wrapper envs stepping at once, one thread each, for a few seconds each,
  with and without screenshots: total env steps per second.

Usage: ``admire bench env_throughput [--steps 60] [--seconds 4] [--envs 1,2,4]``; the default
run takes about a minute on 2 cores. ``main(argv)`` is what ``admire bench`` calls.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

TASK = "click-checkboxes"
SEED = 4
BLOCK = 10


def _defaults() -> None:
    os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")


# --------------------------------------------------------------------------------------------------
# The two envs, each reduced to "take one step"
# --------------------------------------------------------------------------------------------------

class WrapperStepper:
    """A ``MiniWoBEnv`` clicking the first checkbox of ``click-checkboxes`` again and again."""

    def __init__(self, screenshots: bool, settle: str | None = None) -> None:
        from admire.envs import make_task
        from admire.envs.miniwob import MiniWoBEnv
        from admire.envs.miniwob_settle import DEFAULT_SETTLE
        from admire.types import Action

        self.env = MiniWoBEnv(max_steps=10**9, screenshots=screenshots, settle=settle or DEFAULT_SETTLE)
        observation = self.env.reset(make_task(f"miniwob/{TASK}", seed=SEED))
        box = next(i for i, e in enumerate(observation.ui_elements) if e.is_checkable)
        self.action = Action(action_type="click", index=box)

    def set_screenshots(self, on: bool) -> None:
        self.env.screenshots = on

    def step(self) -> None:
        self.env.step(self.action)

    def close(self) -> None:
        self.env.close()


class RawGymStepper:
    """miniwob's own gym env doing the same clicks (``CLICK_ELEMENT`` on the checkbox's ref)."""

    def __init__(self, screenshots: bool) -> None:
        import gymnasium
        import miniwob  # noqa: F401 - registers the gym ids
        from miniwob.action import ActionTypes

        self.scratch = tempfile.mkdtemp(prefix="admire-bench-raw-")  # miniwob's Chromium litters TMPDIR
        with _tmpdir(self.scratch):
            self.env = gymnasium.make(f"miniwob/{TASK}-v1")
        self.env.unwrapped.instance.driver.execute_script("core.EPISODE_MAX_TIME = 1e9;")
        observation, _ = self.env.reset(seed=SEED, options={"record_screenshots": screenshots})
        ref = next(int(e["ref"]) for e in observation["dom_elements"] if e["tag"] == "input_checkbox")
        self.action = self.env.unwrapped.create_action(ActionTypes.CLICK_ELEMENT, ref=ref)

    def set_screenshots(self, on: bool) -> None:
        self.env.unwrapped.set_record_screenshots(on)

    def step(self) -> None:
        self.env.step(self.action)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.env.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


@contextlib.contextmanager
def _tmpdir(path: str) -> Iterator[None]:
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old


def timed_steps(step: Callable[[], None], n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


# --------------------------------------------------------------------------------------------------
# The two measurements
# --------------------------------------------------------------------------------------------------

def overhead(steps: int) -> list[tuple[str, float, dict[str, float]]]:
    """(screenshots, raw median ms, {settle mode: wrapper median ms}) measured in alternating blocks."""
    from admire.envs.miniwob_settle import SETTLE_MODES

    raw = RawGymStepper(False)
    wrappers = {mode: WrapperStepper(False, settle=mode) for mode in SETTLE_MODES}
    rows = []
    try:
        for screenshots in (False, True):
            everyone: dict[str, Any] = {"raw": raw, **wrappers}
            times: dict[str, list[float]] = {name: [] for name in everyone}
            for stepper in everyone.values():
                stepper.set_screenshots(screenshots)
                timed_steps(stepper.step, 3)  # warm each up in this mode
            for _ in range(max(1, steps // BLOCK)):
                for name, stepper in everyone.items():
                    times[name] += timed_steps(stepper.step, BLOCK)
            medians = {name: 1000 * statistics.median(t) for name, t in times.items()}
            rows.append(("on" if screenshots else "off", medians.pop("raw"), medians))
    finally:
        for stepper in [raw, *wrappers.values()]:
            stepper.close()
    return rows


def concurrency(env_counts: Sequence[int], seconds: float) -> list[tuple[int, str, int, float, float]]:
    """(envs, screenshots, steps, steps/s, median step ms) with that many envs stepping at once."""
    steppers = [WrapperStepper(False) for _ in range(max(env_counts))]
    rows = []
    try:
        for screenshots in (False, True):
            for stepper in steppers:
                stepper.set_screenshots(screenshots)
            for count in env_counts:
                rows.append((count, "on" if screenshots else "off", *_run_together(steppers[:count], seconds)))
    finally:
        for stepper in steppers:
            stepper.close()
    return rows


def _run_together(steppers: Sequence[WrapperStepper], seconds: float) -> tuple[int, float, float]:
    times: list[list[float]] = [[] for _ in steppers]
    errors: list[BaseException] = []
    start_line = threading.Barrier(len(steppers) + 1)

    def work(stepper: WrapperStepper, out: list[float]) -> None:
        try:
            start_line.wait()
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                out += timed_steps(stepper.step, 1)
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, t)) for s, t in zip(steppers, times, strict=True)]
    for thread in threads:
        thread.start()
    start_line.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    every = [t for per_env in times for t in per_env]
    return len(every), len(every) / elapsed, 1000 * statistics.median(every)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per env and mode in the overhead test")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per concurrency setting")
    parser.add_argument("--envs", default="1,2,4", help="comma-separated numbers of concurrent envs")
    args = parser.parse_args(argv)
    env_counts = [int(n) for n in args.envs.split(",") if n.strip()]
    _defaults()
    began = time.perf_counter()
    print(f"MiniWoB++ env throughput: task {TASK}, one checkbox click per step, {os.cpu_count()} CPUs")

    print(f"\nWrapper vs raw miniwob gym, side by side ({args.steps} steps each, alternating blocks of {BLOCK}); "
          "the wrapper with each settle mode (off: read at once, as raw miniwob does; wall: wait in real time "
          "until the page settles; virtual: play the page's clock until it settles):")
    print(f"{'screenshots':>11} | {'raw gym ms':>10} | {'settle':>7} | {'wrapper ms':>10} | {'ratio':>5} | "
          "target <= 1.10")
    for screenshots, raw_ms, wrapper_ms in overhead(args.steps):
        for mode, ms in wrapper_ms.items():
            ratio = ms / raw_ms
            verdict = "ok" if ratio <= 1.10 else "OVER"
            print(f"{screenshots:>11} | {raw_ms:10.1f} | {mode:>7} | {ms:10.1f} | {ratio:5.2f} | {verdict}")

    print(f"\nConcurrent envs (wrapper, one thread each, {args.seconds:g} s per row):")
    print(f"{'envs':>4} | {'screenshots':>11} | {'steps':>5} | {'steps/s':>7} | {'per env':>7} | {'median ms':>9}")
    for count, screenshots, steps, rate, median_ms in concurrency(env_counts, args.seconds):
        print(f"{count:>4} | {screenshots:>11} | {steps:>5} | {rate:7.1f} | {rate / count:7.1f} | {median_ms:9.1f}")
    print(f"\n(total {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

