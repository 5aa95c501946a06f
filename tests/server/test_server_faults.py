"""Fault injection on real MiniWoB++ devices behind a real server: a browser killed or frozen in the
middle of an episode is an env error for that episode only; the device comes back and the next
episode on it is solved."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from admire.envs.base import EnvCrashed, make_task
from admire.envs.oracles import get_oracle, run_oracle
from admire.envs.remote import RemoteEnv
from admire.server import metrics
from admire.server.app import create_app
from admire.server.pool import DevicePool, PoolConfig
from tests.support.server_helpers import RecordingFactory, RemoteWithGroundTruth, running_server

pytestmark = pytest.mark.browser


@dataclass
class RealServer:
    pool: DevicePool
    devices: RecordingFactory
    url: str


def real_server(**config) -> Iterator[RealServer]:
    from admire.envs.miniwob import MiniWoBEnv

    devices = RecordingFactory(lambda: MiniWoBEnv(max_steps=10))
    pool = DevicePool(devices, PoolConfig(num_devices=1, lease_wait_s=60.0, **config), backend="miniwob")
    with pool, running_server(create_app(pool)) as url:
        yield RealServer(pool, devices, url)


@pytest.fixture
def server() -> Iterator[RealServer]:
    yield from real_server()


def start_login(env: RemoteWithGroundTruth, seed: int) -> None:
    """Reset login-user and type the username: the episode is under way when the fault hits."""
    observation = env.reset(make_task("miniwob/login-user", seed=seed))
    first = get_oracle("login-user")(observation, env.ground_truth(), ())
    assert first.action_type == "input_text"
    assert not env.step(first).done


def test_a_browser_killed_mid_episode_is_an_env_error_and_the_restarted_device_solves_the_next(
        server: RealServer) -> None:
    with RemoteEnv(server.url, max_steps=10) as remote:
        env = RemoteWithGroundTruth(remote, server.devices)
        start_login(env, seed=21)
        device = server.devices.envs[0]
        killed = device.browser_pid()
        assert killed is not None
        os.kill(killed, signal.SIGKILL)

        with pytest.raises(EnvCrashed, match="device 0 crashed"):
            remote.step({"action_type": "click", "index": 0})
        assert remote.session_id is None

        run = run_oracle(env, make_task("miniwob/login-user", seed=22), max_steps=10)  # waits for the restart
        assert run.success and run.termination == "success"
        assert remote.device_id == 0 and device.browser_pid() not in (None, killed)

    (view,) = server.pool.devices()
    assert (view.state, view.restarts, view.failures) == ("idle", 1, 0)
    assert [e.outcome for e in server.pool.recent_episodes()] == ["success", "env_error"]
    lines = metrics.render(server.pool.stats()).splitlines()
    assert "admire_device_restarts_total 1.0" in lines and "admire_env_errors_total 1.0" in lines


@pytest.mark.slow
def test_a_frozen_browser_times_out_and_the_device_is_replaced() -> None:
    for server in real_server(call_timeout_s=10.0):
        with RemoteEnv(server.url, max_steps=10) as remote:
            env = RemoteWithGroundTruth(remote, server.devices)
            start_login(env, seed=31)
            frozen = server.devices.envs[0]
            os.kill(frozen.browser_pid(), signal.SIGSTOP)  # alive but answering nothing: a hang, not a crash
            with pytest.raises(EnvCrashed, match="took longer than 10 s"):
                remote.step({"action_type": "click", "index": 0})
            assert server.pool.settle(60)
            assert len(server.devices.envs) == 2 and frozen.process_ids() == {}  # the frozen browser is gone
            run = run_oracle(env, make_task("miniwob/login-user", seed=32), max_steps=10)
            assert run.success
        assert server.pool.stats().counters["timeouts"] == 1
