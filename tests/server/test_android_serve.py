"""``admire serve --backend android_world`` on fake devices: AndroidWorld's real code over the faithful fake
``AsyncEnv`` (``tests/support/android_fake.py``), health and restarts through a fake ``adb`` script
(``tests/support/fake_adb.py``).

* a real ``admire serve`` subprocess, played through ``RemoteEnv`` by the trainer's own ``collect``: the
  device crashes mid-episode, the episode is ``env_error`` on the server and re-run by the rollout, the pool
  restarts the device with the restart command and the re-run succeeds;
* the pool built from serve's own flag handling, in this process: a frozen device is replaced, and the
  replacement gets the same emulator's ports back.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from admire.actions import format_output, parse_model_output
from admire.agent.base import PolicyOutput
from admire.envs import make_task
from admire.envs.android_devices import PortPair
from admire.envs.remote import RemoteEnv
from admire.rl.rollout import RolloutStats, collect, group_requests
from admire.server.background import free_port
from admire.server.errors import DeviceFailed
from admire.server.pool import DevicePool, PoolConfig
from admire.types import Action, Observation, Step, Termination
from tests.support.fake_adb import FakeAdb
from tests.support.paths import REPO

LAUNCHER = "tests.support.android_fake:load_and_setup_env"
TASK = "android_world/NotesAddNote"


class NotesPolicy:
    """Adds the note the goal names: open Notes, type the title, save, say done (a ``Policy``)."""

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        outputs = []
        for observation, history in zip(observations, histories, strict=True):
            action = self._next(observation, len(history))
            text = format_output(action, reason="scripted")
            outputs.append(PolicyOutput(text=text, action=parse_model_output(text).action, log_prob=0.0))
        return outputs

    @staticmethod
    def _next(observation: Observation, done: int) -> Action:
        elements = observation.ui_elements
        if done == 0:
            return Action(action_type="click", index=next(i for i, e in enumerate(elements) if e.text == "Notes"))
        if done == 1:
            title = re.search(r"'([^']+)'", observation.goal).group(1)
            return Action(action_type="input_text", index=next(i for i, e in enumerate(elements) if e.is_editable),
                          text=title)
        if done == 2:
            return Action(action_type="click", index=next(i for i, e in enumerate(elements) if e.text == "Save"))
        return Action(action_type="status", goal_status="complete")

    def log_prob(self, decisions: Any) -> Any:
        raise NotImplementedError


def _wait_until_idle(url: str, server: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert server.poll() is None, "admire serve exited"
        try:
            if httpx.get(f"{url}/health", timeout=2).json()["devices"]["idle"] >= 1:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "admire serve did not start its device"
        time.sleep(0.25)


def test_a_crashed_phone_is_restarted_by_the_pool_and_its_episode_re_run(tmp_path: Path) -> None:
    adb = FakeAdb(tmp_path / "sdk")
    port = free_port()
    environment = {**os.environ, "ADMIRE_ANDROID_FAKE_CRASH_AFTER": "2"}  # the first device dies at its 2nd action
    server = subprocess.Popen(
        [sys.executable, "-m", "admire.cli", "serve", "--backend", "android_world", "--num-devices", "1",
         "--console-ports", "5554", "--android-launcher", LAUNCHER, "--adb-path", str(adb.path),
         "--restart-command", "{adb} -s {serial} emu kill", "--port", str(port), "--log-level", "warning"],
        cwd=REPO, env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_idle(url, server)
        stats = RolloutStats()
        with RemoteEnv(url, max_steps=6) as env:
            [trajectory] = collect(group_requests([make_task(TASK, seed=3)], 1), [env], NotesPolicy(), max_steps=6,
                                   stats=stats)
        assert trajectory.termination is Termination.SUCCESS and trajectory.outcome == 1.0
        assert stats.reruns == 1  # the crashed attempt was excluded and the episode run again
        outcomes = [e["outcome"] for e in httpx.get(f"{url}/episodes").json()]
        assert sorted(outcomes) == ["env_error", "success"]
        [device] = httpx.get(f"{url}/devices").json()
        assert device["restarts"] == 1 and device["state"] == "idle"
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0
    calls = adb.calls()
    assert ["-s", "emulator-5554", "emu", "kill"] in calls  # the restart command ran for this emulator
    kill = calls.index(["-s", "emulator-5554", "emu", "kill"])
    assert ["-s", "emulator-5554", "shell", "getprop", "sys.boot_completed"] in calls[kill + 1:]  # then waited
    assert all(call[:2] == ["-s", "emulator-5554"] for call in calls)


def test_a_frozen_phone_is_replaced_on_the_same_emulator(tmp_path: Path) -> None:
    from admire.commands.serve import add_arguments, android_settings, check_arguments, device_factory
    from tests.support import android_fake

    adb = FakeAdb(tmp_path / "sdk")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--backend", "android_world", "--num-devices", "1", "--max-devices", "1",
                              "--console-ports", "5556", "--grpc-ports", "9100", "--android-launcher", LAUNCHER,
                              "--adb-path", str(adb.path), "--call-timeout", "3"])
    check_arguments(args, None)
    factory = device_factory(args.backend, args.max_steps, args.screenshots, android=android_settings(args))
    pool = DevicePool(factory, PoolConfig(num_devices=1, call_timeout_s=3.0, close_timeout_s=1.0), backend=args.backend)
    frozen = None
    try:
        first = pool.create_session(make_task(TASK, seed=1))
        pool.step(first.session_id, Action(action_type="click", index=1), seq=0)
        frozen = android_fake.DEVICES[5556]
        assert (frozen.console_port, frozen.grpc_port) == (5556, 9100)
        frozen.freeze()
        with pytest.raises(DeviceFailed, match="took longer than 3 s"):
            pool.step(first.session_id, Action(action_type="click", index=0), seq=1)
        assert pool.settle(timeout_s=60)
        [device] = pool.devices()
        assert (device.state, device.restarts) == ("idle", 1)
        assert factory.ports.held == [PortPair(5556, 9100)]  # released by the frozen env, taken by its successor
        second = pool.create_session(make_task(TASK, seed=1))
        assert android_fake.DEVICES[5556] is not frozen  # a new connection to the emulator
        assert second.observation.goal == first.observation.goal
        pool.close_session(second.session_id)
        assert [e.outcome for e in pool.recent_episodes()] == ["abandoned", "env_error"]  # newest first
    finally:
        if frozen is not None:
            frozen.unfreeze()
        pool.close()
    assert factory.ports.held == []
