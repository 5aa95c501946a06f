"""Helpers for the env server's tests: devices built on ``tests.support.fakes.FormEnv`` that can be told to
hang, fail health checks or block, and a real uvicorn server on a free port in a thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from admire.server.background import serve_in_thread
from admire.server.pool import DevicePool, PoolConfig
from admire.types import Action, Observation, Screenshot, Task
from tests.support.fakes import FormEnv

SOLVE_ANN = [Action(action_type="input_text", index=0, text="ann"), Action(action_type="click", index=1)]
"""The two steps that solve ``form_task()``."""

FAKE_PNG = b"\x89PNG\r\n\x1a\n-fake-image-bytes"
"""PNG-signed bytes: the pool and the API pass screenshots through without decoding them."""


def form_task(seed: int = 0, name: str = "ann") -> Task:
    return Task(name="fake/form", seed=seed, params={"name": name})


class RecordingFactory:
    """A device factory that keeps every env it built, so a test can reach the server-side env."""

    def __init__(self, make: Callable[[], Any] = FormEnv) -> None:
        self.make = make
        self.envs: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        env = self.make()
        with self._lock:
            self.envs.append(env)
        return env


class TaskCheckingEnv(FormEnv):
    """Records the tasks it was reset with; refuses the template ``unknown`` like a real backend."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks: list[Task] = []

    def reset(self, task: Task) -> Observation:
        if task.template == "unknown":
            raise ValueError(f"unknown task {task.template!r}")
        self.tasks.append(task)
        return super().reset(task)


class Gate:
    """Shared by ``GatedEnv``s: counts steps running at once and holds them until opened."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.entered = threading.Semaphore(0)


class GatedEnv(FormEnv):
    """A step waits at its gate: lets a test hold steps in flight and see how many run at once."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate

    def step(self, action: Action):
        with self.gate.lock:
            self.gate.active += 1
            self.gate.max_active = max(self.gate.max_active, self.gate.active)
        self.gate.entered.release()
        try:
            self.gate.open.wait(30)
            return super().step(action)
        finally:
            with self.gate.lock:
                self.gate.active -= 1


class HangingEnv(FormEnv):
    """Its steps hang until ``release`` is set (a browser that stopped answering)."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def step(self, action: Action):
        self.release.wait(60)
        return super().step(action)


class SickEnv(FormEnv):
    """Fails its next ``sick_checks`` health checks."""

    def __init__(self) -> None:
        super().__init__()
        self.sick_checks = 0

    def healthy(self) -> bool:
        if self.sick_checks > 0:
            self.sick_checks -= 1
            return False
        return super().healthy()


class WithoutRestart:
    """A ``FormEnv`` without ``restart`` (it breaks the ``GuiEnv`` protocol): its restart fails, and the pool
    answers a failed restart by closing the env and building a new one."""

    def __init__(self, crash_on_step: int | None = None) -> None:
        self.inner = FormEnv(crash_on_step=crash_on_step)

    def reset(self, task: Task) -> Observation:
        return self.inner.reset(task)

    def step(self, action: Action):
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()

    def healthy(self) -> bool:
        return self.inner.healthy()


class ScreenshotEnv(FormEnv):
    """Attaches a PNG to every observation, as ``MiniWoBEnv(screenshots=True)`` does."""

    def _observation(self) -> Observation:
        shot = Screenshot.from_png(FAKE_PNG, 1, 1)
        return super()._observation().model_copy(update={"screenshot": shot})


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_pool(factory: Callable[[], Any] = FormEnv, **config: Any) -> DevicePool:
    """A pool of fakes for the ``fake`` backend; a slow reaper so tests drive ``reclaim_expired``."""
    clock = config.pop("clock", None)
    options: dict[str, Any] = {"num_devices": 1, "lease_wait_s": 0.0, **config}
    extra = {"clock": clock} if clock is not None else {}
    return DevicePool(factory, PoolConfig(**options), backend="fake", reap_interval_s=3600, **extra)


running_server = serve_in_thread  # one way to serve an app for real: admire.server.background


class RemoteWithGroundTruth:
    """A ``RemoteEnv`` plus the ground truth of the server-side device it plays on, so that an oracle
    (``admire.envs.oracles.run_oracle``) can drive a real task through the API. Tests only: the
    truth is read from the device object in this process, never sent over HTTP."""

    def __init__(self, remote: Any, devices: RecordingFactory) -> None:
        self.remote = remote
        self.devices = devices  # one-device pools: the newest env built is the device's env

    def reset(self, task: Task) -> Observation:
        return self.remote.reset(task)

    def step(self, action: Action):
        return self.remote.step(action)

    def close(self) -> None:
        self.remote.close()

    def healthy(self) -> bool:
        return self.remote.healthy()

    def ground_truth(self) -> dict[str, str]:
        return self.devices.envs[-1].ground_truth()


class OraclePolicy:
    """A ``Policy`` that writes what a task's oracle would do, given where to read the ground truth."""

    def __init__(self, template: str, truth: Callable[[], dict[str, str]]) -> None:
        from admire.envs.oracles import get_oracle

        self.oracle = get_oracle(template)
        self.truth = truth

    def act(self, observations, histories, greedy: bool = False):
        from admire.actions import format_output, parse_model_output
        from admire.agent.base import PolicyOutput

        outputs = []
        for observation, history in zip(observations, histories, strict=True):
            done = tuple(step.action for step in history if step.action is not None)
            text = format_output(self.oracle(observation, self.truth(), done), reason="oracle")
            outputs.append(PolicyOutput(text=text, action=parse_model_output(text).action, log_prob=0.0))
        return outputs

    def log_prob(self, decisions):
        raise NotImplementedError
