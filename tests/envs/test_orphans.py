"""The trainer owns its browsers: however `admire train` is stopped, none of its browsers outlive it.

The reaper is tested alone first (a dummy process group stands in for a browser), then the real CLI
with real Chromium is stopped with SIGTERM and with SIGKILL of the process alone (not its group, so
nothing but the trainer's own machinery can clean up). Each run gets a TMPDIR of its own; every
process of that run carries it in its environment or command line, which is how these tests tell the
run's processes apart from other browsers on the machine, and the only processes they ever signal.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from admire.envs.reaper import Reaper

GONE_WITHIN_S = 10.0  # the bound, from the signal to the last browser process
START_TIMEOUT_S = 180.0  # torch import, baseline evaluation start, first Chromium on a loaded machine


def wait_for(predicate, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)


def processes_mentioning(marker: str) -> dict[int, str]:
    """Live processes (any name) with ``marker`` in their environment or command line: pid -> name."""
    needle = marker.encode()
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                text = f.read()
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                text += f.read()
        except (OSError, ValueError):
            continue
        if needle in text:
            found[int(entry.name)] = stat[stat.index("(") + 1: stat.rindex(")")]
    return found


def browsers_of(marker: str) -> dict[int, str]:
    return {pid: name for pid, name in processes_mentioning(marker).items() if name.startswith("chrom")}


# --------------------------------------------------------------------------------------------------
# The reaper alone
# --------------------------------------------------------------------------------------------------

def test_reaper_kills_a_registered_group_and_removes_its_folder_when_the_pipe_closes(tmp_path):
    scratch, kept = tmp_path / "scratch", tmp_path / "kept"
    scratch.mkdir()
    kept.mkdir()
    doomed = subprocess.Popen(["sleep", "300"], start_new_session=True)
    spared = subprocess.Popen(["sleep", "300"], start_new_session=True)
    watchdog = Reaper()  # not this process's own: that one guards the session's shared browser
    try:
        watchdog.register(scratch, pgid=doomed.pid)
        watchdog.register(kept, pgid=spared.pid)
        watchdog.unregister(kept)  # a browser closed cleanly is no longer the reaper's business
        assert watchdog.pid is not None and doomed.poll() is None
        watchdog.close()  # closes the pipe, as the kernel does when this process dies
        assert doomed.wait(timeout=GONE_WITHIN_S) == -signal.SIGKILL
        assert not scratch.exists()
        assert spared.poll() is None and kept.exists()
    finally:
        watchdog.close()
        for process in (doomed, spared):
            process.kill()
            process.wait()


def test_reaper_outlives_a_sigkilled_launcher_and_kills_what_it_registered(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time; from pathlib import Path; from admire.envs import reaper; "
         "p = subprocess.Popen(['sleep', '300'], start_new_session=True); "
         "reaper.register_browser(Path(sys.argv[1]), pgid=p.pid); print(p.pid, flush=True); time.sleep(300)",
         str(scratch)],
        stdout=subprocess.PIPE, text=True)
    with launcher.stdout:
        sleeper = int(launcher.stdout.readline())
    try:
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        assert wait_for(lambda: not is_running(sleeper), GONE_WITHIN_S)
        assert wait_for(lambda: not scratch.exists(), GONE_WITHIN_S)
    finally:
        if is_running(sleeper):
            os.kill(sleeper, signal.SIGKILL)


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# --------------------------------------------------------------------------------------------------
# `admire train` with real browsers
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def run_tmpdir():
    """A TMPDIR unique to one run, short enough that Chromium's socket path fits under it."""
    base = tempfile.gettempdir()
    base = base if len(base) <= 20 else "/tmp"
    path = tempfile.mkdtemp(prefix="orph-", dir=base)
    yield path
    for pid in processes_mentioning(path):  # a failed test must not leave its processes behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def start_training(run_tmpdir: str, runs: Path, log_dir: Path) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ, TMPDIR=run_tmpdir, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    stderr = log_dir / "stderr.txt"
    with stderr.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "admire.cli", "train", f"run.dir={runs}", "trainer.total_epochs=50",
             "env.max_envs=[1]", "trainer.eval_episodes=1", "tracking.tensorboard=false",
             "tracking.swanlab=null", "--quiet"],
            env=env, stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True)
    if not wait_for(lambda: browsers_of(run_tmpdir) or process.poll() is not None, START_TIMEOUT_S, 0.25):
        process.kill()
        pytest.fail("admire train started no browser in time")
    if process.poll() is not None:
        pytest.fail(f"admire train ended before starting a browser: {stderr.read_text()[-2000:]}")
    return process, stderr


@pytest.mark.browser
def test_sigterm_closes_the_browsers_and_says_how_to_resume(run_tmpdir, tmp_path):
    process, stderr = start_training(run_tmpdir, tmp_path / "runs", tmp_path)
    os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + GONE_WITHIN_S
    try:
        status = process.wait(timeout=GONE_WITHIN_S)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"admire train did not stop within {GONE_WITHIN_S} s of SIGTERM")
    gone = wait_for(lambda: not processes_mentioning(run_tmpdir), max(0.0, deadline - time.monotonic()))
    assert gone, f"still running {GONE_WITHIN_S} s after SIGTERM: {processes_mentioning(run_tmpdir)}"
    text = stderr.read_text()
    assert status == 128 + signal.SIGTERM, text
    assert "Traceback" not in text
    pattern = rf"admire train: stopped by SIGTERM; resume with: admire train resume={re.escape(str(tmp_path))}/runs/\S+"
    assert re.fullmatch(pattern, text.strip().splitlines()[-1]), text
    assert not list(Path(run_tmpdir).glob("admire-miniwob-*"))


@pytest.mark.browser
def test_sigkill_of_the_trainer_alone_leaves_no_browser(run_tmpdir, tmp_path):
    process, _ = start_training(run_tmpdir, tmp_path / "runs", tmp_path)
    os.kill(process.pid, signal.SIGKILL)  # the process alone: its group (chromedriver's is apart anyway) lives on
    process.wait()
    gone = wait_for(lambda: not processes_mentioning(run_tmpdir), GONE_WITHIN_S)
    assert gone, f"still running {GONE_WITHIN_S} s after SIGKILL: {processes_mentioning(run_tmpdir)}"
    assert not list(Path(run_tmpdir).glob("admire-miniwob-*"))
