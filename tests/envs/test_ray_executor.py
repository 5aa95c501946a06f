"""Devices in Ray actors (``env.executor=ray``): error mapping on a probe env, real MiniWoB++ episodes,
crash and restart, and the trainer's ``make_envs`` feeding ``collect``.

Ray starts once for the file (about 4–8 s on 2 cores) and is shut down at its end.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack

import pytest

from admire.actions import format_output
from admire.agent.base import PolicyOutput
from admire.config import load_config
from admire.envs.base import ENVS, EnvCrashed, InvalidAction, StepResult, register_env
from admire.envs.oracles import get_oracle, run_oracle
from admire.types import Action, Observation, Screenshot, Step, Task, Termination, UIElement

ray = pytest.importorskip("ray")

from admire.envs.executors.ray import RayEnv, RaySettings, ensure_ray, ray_env_factory  # noqa: E402

log = logging.getLogger(__name__)
PROBE = "ray-probe"
CLICK_TEST = Task(name="miniwob/click-test", seed=3)
FAST = RaySettings(num_cpus=0.25, timeout_s=20, start_timeout_s=60)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[float]:
    """A local Ray for the session; yields how long it took to start (printed in the report)."""
    if ray.is_initialized():
        yield 0.0
        return
    started = time.perf_counter()
    ensure_ray(None, num_cpus=2)
    seconds = time.perf_counter() - started
    log.warning("local Ray started in %.1f s", seconds)
    yield seconds
    ray.shutdown()


# --------------------------------------------------------------------------------------------------
# A probe env (registered so that RayEnv finds it by name): each action type provokes one behaviour
# --------------------------------------------------------------------------------------------------


@register_env(PROBE)
class ProbeEnv:
    """click 0 wins; a large index is invalid; navigate_back crashes; navigate_home raises a plain
    error; wait sleeps ``Task.params['sleep_s']``. Counts resets and restarts, reports its pid."""

    def __init__(self, label: str = "probe") -> None:
        self.label = label
        self.resets = 0
        self.restarts = 0
        self._task: Task | None = None

    def reset(self, task: Task) -> Observation:
        self.resets += 1
        self._task = task
        return Observation(goal=f"{self.label} {task.seed}",
                           ui_elements=(UIElement(text="Go", class_name="button", is_clickable=True),))

    def step(self, action: Action) -> StepResult:
        assert self._task is not None
        if action.action_type == "navigate_back":
            raise EnvCrashed("the probe's device fell over")
        if action.action_type == "navigate_home":
            raise LookupError("no home screen on a probe")
        if action.action_type == "wait":
            time.sleep(float(self._task.params.get("sleep_s", 0)))  # type: ignore[arg-type]
        if action.index is not None and action.index > 0:
            raise InvalidAction(f"index {action.index} is out of range (1 element)")
        won = action.action_type == "click"
        return StepResult(Observation(goal=f"{self.label} {self._task.seed}", step=1), done=won, success=won,
                          info={"termination": "success" if won else None})

    def counters(self) -> dict[str, int]:
        return {"resets": self.resets, "restarts": self.restarts, "pid": os.getpid()}

    def restart(self) -> None:
        self.restarts += 1

    def close(self) -> None:
        pass

    def healthy(self) -> bool:
        return True


@pytest.fixture
def probe(ray_cluster: float) -> Iterator[RayEnv]:
    env = RayEnv(PROBE, {"label": "remote"}, FAST)
    yield env
    env.close()


def act(action_type: str, **fields: object) -> Action:
    return Action(action_type=action_type, **fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# What crosses the wire
# --------------------------------------------------------------------------------------------------


def test_observations_and_step_results_survive_ray_serialisation(ray_cluster: float) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    observation = Observation(goal="Click the button.", step=2, screenshot=Screenshot.from_png(png, 160, 210),
                              ui_elements=(UIElement(text="ONE", class_name="button", bbox=(1, 2, 3, 4)),))
    result = StepResult(observation, done=True, success=True, info={"raw_reward": 1.0, "termination": "success"})
    assert pickle.loads(pickle.dumps(observation)) == observation
    back = ray.get(ray.put(result))
    assert back == result and back.observation.screenshot.png == png
    with pytest.raises(Exception, match="frozen"):
        back.observation.goal = "changed"  # still a frozen record on this side


def test_a_probe_episode_runs_in_another_process(probe: RayEnv) -> None:
    observation = probe.reset(Task(name="ray-probe/x", seed=4))
    assert isinstance(observation, Observation) and observation.goal == "remote 4"
    result = probe.step(act("click", index=0))
    assert isinstance(result, StepResult) and result.done and result.success
    assert probe.healthy()
    assert probe.call("counters")["pid"] != os.getpid()


def test_invalid_action_passes_through_and_the_episode_goes_on(probe: RayEnv) -> None:
    probe.reset(Task(name="ray-probe/x"))
    with pytest.raises(InvalidAction, match="out of range"):
        probe.step(act("click", index=3))
    assert probe.step(act("click", index=0)).success
    assert probe.call("counters")["restarts"] == 0


def test_a_crash_inside_is_env_crashed_and_restart_restarts_in_place(probe: RayEnv) -> None:
    probe.reset(Task(name="ray-probe/x"))
    pid = probe.call("counters")["pid"]
    with pytest.raises(EnvCrashed, match="fell over"):
        probe.step(act("navigate_back"))
    probe.restart()
    counters = probe.call("counters")
    assert counters["restarts"] == 1 and counters["pid"] == pid  # same actor, env restarted inside it


def test_other_env_errors_keep_their_type(probe: RayEnv) -> None:
    probe.reset(Task(name="ray-probe/x"))
    with pytest.raises(LookupError, match="no home screen"):
        probe.step(act("navigate_home"))
    with pytest.raises(AttributeError):
        probe.call("no_such_method")
    assert probe.healthy()


def test_a_killed_actor_is_env_crashed_until_restart_replaces_it(probe: RayEnv) -> None:
    probe.reset(Task(name="ray-probe/x"))
    old_pid = probe.call("counters")["pid"]
    ray.kill(probe.actor)
    assert actor_ended(probe.actor)
    with pytest.raises(EnvCrashed, match="died"):
        probe.step(act("click", index=0))
    assert not probe.healthy()
    with pytest.raises(EnvCrashed, match="restart"):
        probe.reset(Task(name="ray-probe/x"))  # refused at once, not sent to a dead actor
    probe.restart()
    assert probe.healthy()
    assert probe.reset(Task(name="ray-probe/x", seed=1)).goal == "remote 1"
    counters = probe.call("counters")
    assert counters["pid"] != old_pid and counters["resets"] == 1  # a fresh env in a fresh actor


def test_a_hung_call_times_out_as_env_crashed(ray_cluster: float) -> None:
    with RayEnv(PROBE, settings=RaySettings(num_cpus=0.25, timeout_s=3, start_timeout_s=60)) as env:
        env.reset(Task(name="ray-probe/x", params={"sleep_s": 30}))
        with pytest.raises(EnvCrashed, match="did not answer step"):
            env.step(act("wait"))
        assert not env.healthy()
        env.restart()  # the hung actor cannot restart in place: it is replaced
        assert env.reset(Task(name="ray-probe/x", seed=2)).goal == "probe 2"


def test_unknown_backend_and_bad_settings_fail_in_the_caller(ray_cluster: float) -> None:
    with pytest.raises(ValueError, match=r"unknown environment backend 'nope'.*miniwob"):
        ray_env_factory("nope")
    with pytest.raises(ValueError, match=r"unknown key.*num_cpu"):
        RaySettings.from_config({"num_cpu": 1})
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        RaySettings.from_config({"timeout_s": 0})
    settings = RaySettings.from_config({"address": None, "num_cpus_per_env": 0.5, "resources": {"browser": 1}})
    assert settings.actor_options() == {"num_cpus": 0.5, "max_restarts": 0, "resources": {"browser": 1.0}}


def test_the_config_section_reads_with_command_line_overrides() -> None:

    cfg = load_config(overrides=["env.executor=ray", "env.ray.address=auto", "env.ray.num_cpus_per_env=1",
                                 "env.ray.resources={browser: 1}"])
    settings = RaySettings.from_config(cfg.env.ray.model_dump())
    assert (settings.address, settings.num_cpus, dict(settings.resources)) == ("auto", 1.0, {"browser": 1.0})
    default = RaySettings.from_config(load_config().env.ray.model_dump())
    assert (default.address, default.num_cpus, dict(default.resources)) == (None, 0.5, {})


def test_a_closed_env_refuses_calls(ray_cluster: float) -> None:
    env = RayEnv(PROBE, settings=FAST)
    env.reset(Task(name="ray-probe/x"))
    actor = env.actor
    env.close()
    env.close()  # idempotent
    assert not env.healthy()
    with pytest.raises(RuntimeError, match="closed"):
        env.reset(Task(name="ray-probe/x"))
    assert actor_ended(actor)


# --------------------------------------------------------------------------------------------------
# Real MiniWoB++ in an actor
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def remote_miniwob(ray_cluster: float) -> Iterator[RayEnv]:
    env = RayEnv("miniwob", {"max_steps": 10, "screenshots": True}, FAST)
    yield env
    env.close()


def actor_ended(actor: object, wait_s: float = 30.0) -> bool:
    """Whether the actor is gone (``ray.kill`` takes effect shortly after it returns)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ping.remote(), timeout=wait_s)  # type: ignore[attr-defined]
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.2)
    return False


def browser_gone(pids: Sequence[int], wait_s: float = 20.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.2)
    return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.browser
def test_a_real_miniwob_episode_in_an_actor_matches_the_local_env(remote_miniwob: RayEnv, miniwob_env) -> None:
    remote = remote_miniwob.reset(CLICK_TEST)
    local = miniwob_env.reset(CLICK_TEST)
    assert isinstance(remote, Observation) and remote.goal == local.goal == "Click the button."
    assert [(e.class_name, e.text) for e in remote.ui_elements] == [(e.class_name, e.text) for e in local.ui_elements]
    assert remote.screenshot is not None and remote.screenshot.png.startswith(b"\x89PNG")
    run = run_oracle(remote_miniwob, CLICK_TEST)
    assert run.success and run.termination == "success"


@pytest.mark.browser
def test_a_killed_browser_in_an_actor_is_env_crashed_and_restart_recovers(remote_miniwob: RayEnv) -> None:
    task = Task(name="miniwob/login-user", seed=5)
    observation = remote_miniwob.reset(task)
    os.kill(remote_miniwob.call("browser_pid"), signal.SIGKILL)  # the actor runs on this machine
    with pytest.raises(EnvCrashed):
        remote_miniwob.step(get_oracle(task.template)(observation, remote_miniwob.ground_truth(), ()))
    assert not remote_miniwob.healthy()
    remote_miniwob.restart()
    assert remote_miniwob.healthy()
    assert run_oracle(remote_miniwob, task).success


@pytest.mark.browser
def test_a_killed_actor_takes_its_browser_with_it_and_restart_recovers(remote_miniwob: RayEnv) -> None:
    remote_miniwob.reset(CLICK_TEST)
    pids = list(remote_miniwob.call("process_ids"))
    assert pids
    ray.kill(remote_miniwob.actor)
    assert actor_ended(remote_miniwob.actor)
    with pytest.raises(EnvCrashed, match="died"):
        remote_miniwob.reset(CLICK_TEST)
    assert browser_gone(pids), "Chromium outlived its actor"
    remote_miniwob.restart()
    assert run_oracle(remote_miniwob, Task(name="miniwob/click-test", seed=8)).success


class ClickTestOracle:
    """A policy that plays the click-test oracle (which needs no ground truth)."""

    def act(self, observations: Sequence[Observation], histories: Sequence[Sequence[Step]],
            greedy: bool = False) -> list[PolicyOutput]:
        oracle = get_oracle("click-test")
        outputs = []
        for observation, history in zip(observations, histories, strict=True):
            action = oracle(observation, {}, tuple(s.action for s in history if s.action is not None))
            outputs.append(PolicyOutput(text=format_output(action, reason="oracle"), action=action, log_prob=0.0))
        return outputs

    def log_prob(self, decisions: object) -> None:
        raise NotImplementedError


@pytest.mark.browser
def test_make_envs_with_the_ray_executor_feeds_a_real_rollout(ray_cluster: float) -> None:
    from admire.envs.building import make_envs
    from admire.rl.rollout import collect, group_requests

    cfg = load_config(overrides=["env.executor=ray", "env.max_envs=[1]", "env.ray.num_cpus_per_env=0.25",
                                 "env.miniwob.settle=wall"])
    with ExitStack() as stack:
        envs = make_envs(cfg.env, stack)
        assert len(envs) == 1 and isinstance(envs[0], RayEnv)
        out = collect(group_requests([Task(name="miniwob/click-test", seed=11)], 2), envs, ClickTestOracle(),
                      max_steps=4)
        first = envs[0].reset(Task(name="miniwob/click-test", seed=12))
        button = next(i for i, e in enumerate(first.ui_elements) if e.class_name == "button")
        step = envs[0].step(Action(action_type="click", index=button))
        actor = envs[0].actor
    assert [t.termination for t in out] == [Termination.SUCCESS, Termination.SUCCESS]
    assert out[0].goal == "Click the button." and out[0].steps[0].grounded_description.startswith("clicked")
    assert step.info["settle_mode"] == "wall"  # env.miniwob reached the env inside the actor
    assert actor_ended(actor)  # the stack closed the device


def test_an_unknown_executor_is_refused_before_any_env_is_built() -> None:
    with pytest.raises(ValueError, match=r"^env\.executor: must be one of local, ray, got 'k8s'"):
        load_config(overrides=["env.executor=k8s"])


def test_a_backend_spec_binds_its_argument_as_make_env_does(ray_cluster: float) -> None:
    with RayEnv(f"{PROBE}:spec-label", settings=FAST) as env:
        assert env.reset(Task(name="ray-probe/x", seed=6)).goal == "spec-label 6"


# --------------------------------------------------------------------------------------------------
# The conformance suite through the executor
# --------------------------------------------------------------------------------------------------


def test_an_env_behind_the_ray_executor_passes_the_conformance_suite(ray_cluster: float) -> None:
    from admire.envs.check_env import check_env, failures
    from admire.envs.executors import env_factory
    from tests.support.fakes import FormEnv

    if "ray-form" not in ENVS:
        register_env("ray-form")(FormEnv)
    env = env_factory("ray", "ray-form", {"num_cpus_per_env": 0.25, "timeout_s": 20, "start_timeout_s": 60})()
    assert isinstance(env, RayEnv)
    actor = env.actor
    results = check_env(env, Task(name="fake/form", seed=1, params={"name": "ann"}))
    assert failures(results) == [], [r.line() for r in failures(results)]
    assert env.actor is None and actor_ended(actor)  # the close check ended the actor
