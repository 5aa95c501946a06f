"""Rollouts: groups of episodes over a pool of environments, stepping together.

All live episodes advance in lockstep: one batched policy call decides for every environment, then
the environments step concurrently in threads (a browser or an emulator is I/O, so threads suffice
and the policy keeps the CPU). An environment that crashes is restarted and its episode re-run, so
groups stay full and a crash is never scored as a failure (method.md §5).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from admire.actions import describe, parse_model_output
from admire.agent.base import Policy, PolicyOutput
from admire.envs.base import EnvCrashed, GuiEnv, InvalidAction, StepResult
from admire.types import Observation, Step, Task, Termination, Trajectory

logger = logging.getLogger("admire.rollout")


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to run: the task, which group it belongs to, and its place in the group."""

    task: Task
    group: int
    replica: int


@dataclass
class LiveEpisode:
    """An episode in flight on one environment: what ``collect`` and the verl agent loop
    (``admire.integrations.verl.agent_loop``) both step, so that both record steps and build trajectories
    the same way."""

    ticket: int
    request: EpisodeRequest
    observation: Observation
    goal: str
    steps: list[Step] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def trajectory(self, termination: Termination, outcome: float, info: dict[str, Any], epoch: int) -> Trajectory:
        """The finished episode; ``info`` adds to the replica and wall time every trajectory carries."""
        return Trajectory(
            id=uuid.uuid4().hex[:16],
            task=self.request.task,
            goal=self.goal,
            steps=tuple(self.steps),
            outcome=outcome,
            termination=termination,
            epoch=epoch,
            group=self.request.group,
            info={"replica": self.request.replica, "wall_s": time.perf_counter() - self.started, **info},
        )


@dataclass
class RolloutStats:
    env_steps: int = 0
    env_errors: int = 0
    reruns: int = 0
    wall_s: float = 0.0

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.wall_s if self.wall_s > 0 else 0.0


def group_requests(tasks: Sequence[Task], n: int) -> list[EpisodeRequest]:
    """``n`` episodes of each task (the GRPO group), same seed within a group."""
    return [EpisodeRequest(task=task, group=g, replica=r) for g, task in enumerate(tasks) for r in range(n)]


def collect(
    requests: Sequence[EpisodeRequest],
    envs: Sequence[GuiEnv],
    policy: Policy,
    *,
    max_steps: int,
    greedy: bool = False,
    epoch: int = 0,
    keep_screenshots: bool = False,
    max_reruns: int = 2,
    on_episode: Callable[[Trajectory], None] | None = None,
    stats: RolloutStats | None = None,
) -> list[Trajectory]:
    """Run every requested episode and return the trajectories in request order.

    An episode whose environment crashed is re-run up to ``max_reruns`` times; if it still fails it is
    returned with termination ``env_error`` so that callers can see it and exclude it.
    """
    if not envs:
        raise ValueError("collect() needs at least one environment")
    stats = stats if stats is not None else RolloutStats()
    started = time.perf_counter()
    queue: deque[int] = deque(range(len(requests)))  # tickets: positions in ``requests``
    attempts: dict[int, int] = {}
    results: dict[int, Trajectory] = {}
    live: dict[int, LiveEpisode] = {}

    def finish(slot: int, termination: Termination, outcome: float, info: dict[str, Any]) -> None:
        episode = live.pop(slot)
        trajectory = episode.trajectory(termination, outcome, info, epoch)
        ticket = episode.ticket
        if termination is Termination.ENV_ERROR and attempts.get(ticket, 0) < max_reruns:
            attempts[ticket] = attempts.get(ticket, 0) + 1
            stats.reruns += 1
            queue.appendleft(ticket)
            return
        results[ticket] = trajectory
        if on_episode is not None:
            on_episode(trajectory)

    with ThreadPoolExecutor(max_workers=len(envs), thread_name_prefix="env") as pool:
        while queue or live:
            # Start episodes on idle environments (resets run concurrently).
            idle = [slot for slot in range(len(envs)) if slot not in live]
            starting = [(slot, queue.popleft()) for slot in idle[: len(queue)]]
            for (slot, ticket), outcome in zip(
                starting, pool.map(lambda st: reset_env(envs[st[0]], requests[st[1]].task), starting), strict=True
            ):
                if isinstance(outcome, Observation):
                    shown = outcome if keep_screenshots else outcome.without_screenshot()
                    live[slot] = LiveEpisode(ticket, requests[ticket], shown, outcome.goal)
                else:
                    stats.env_errors += 1
                    live[slot] = LiveEpisode(ticket, requests[ticket], Observation(goal=""), "")
                    finish(slot, Termination.ENV_ERROR, 0.0, {"env_error": outcome})
            if not live:
                continue

            # One batched decision for every live episode.
            slots = sorted(live)
            t0 = time.perf_counter()
            outputs = policy.act(
                [live[s].observation for s in slots], [tuple(live[s].steps) for s in slots], greedy=greedy
            )
            policy_s = (time.perf_counter() - t0) / len(slots)

            # Step the environments concurrently.
            stepped = list(pool.map(lambda so: step_env(envs[so[0]], so[1]), zip(slots, outputs, strict=True)))
            for slot, output, (result, parse_error, env_s) in zip(slots, outputs, stepped, strict=True):
                episode = live[slot]
                if isinstance(result, EnvCrashed):
                    stats.env_errors += 1
                    restart_env(envs[slot])
                    finish(slot, Termination.ENV_ERROR, 0.0, {"env_error": str(result)})
                    continue
                episode.steps.append(
                    record_step(episode, output, result, parse_error, policy_s, env_s, keep_screenshots))
                if isinstance(result, StepResult):
                    stats.env_steps += 1
                    episode.observation = (result.observation if keep_screenshots
                                           else result.observation.without_screenshot())
                    if result.done:
                        finish(slot, termination_of(result), 1.0 if result.success else 0.0,
                               {"raw_reward": result.info.get("raw_reward")})
                        continue
                if len(episode.steps) >= max_steps:
                    finish(slot, Termination.MAX_STEPS, 0.0, {})
    stats.wall_s += time.perf_counter() - started
    return [results[t] for t in range(len(requests))]


def reset_env(env: GuiEnv, task: Task) -> Observation | str:
    """The first screen, or the failure as text after restarting the env: a reset that fails is an env error
    of that episode (re-run, then excluded), never an exception out of the rollout."""
    try:
        return env.reset(task)
    except Exception as exc:  # noqa: BLE001 - any reset failure is an env error, never a crash
        logger.warning("reset of %s failed: %s", task.name, exc)
        restart_env(env)
        return f"reset failed: {type(exc).__name__}: {exc}"


def step_env(env: GuiEnv, output: PolicyOutput) -> tuple[StepResult | Exception | None, str | None, float]:
    """Execute one decision; (result, invalid-action error, seconds). Unparseable output never reaches the env."""
    t0 = time.perf_counter()
    if output.action is None:
        return None, None, 0.0  # the format error is read off the text when the step is recorded
    try:
        return env.step(output.action), None, time.perf_counter() - t0
    except InvalidAction as exc:
        return exc, f"invalid action: {exc}", time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a crashed backend, reported as such
        return (exc if isinstance(exc, EnvCrashed) else EnvCrashed(f"{type(exc).__name__}: {exc}")), None, 0.0


def record_step(
    episode: LiveEpisode,
    output: PolicyOutput,
    result: StepResult | Exception | None,
    parse_error: str | None,
    policy_s: float,
    env_s: float,
    keep_screenshots: bool,
) -> Step:
    """The step as trajectories keep it. The text is parsed again for its reason and description, and the
    grounded description is computed only for a valid action (what milestones match against)."""
    parsed = parse_model_output(output.text)
    if output.action is None:
        parse_error = parsed.error or "output did not parse into an action"
    valid = output.action is not None and parse_error is None
    info = dict(output.info)
    screen_changed = False
    if isinstance(result, StepResult):
        screen_changed = bool(result.info.get("screen_changed", True))
        info.update({k: v for k, v in result.info.items() if k in ("raw_reward", "termination")})
    return Step(
        index=len(episode.steps),
        observation=episode.observation,
        raw_output=output.text,
        action=output.action,
        parse_error=parse_error,
        format_valid=valid,
        reason=parsed.reason,
        model_description=parsed.description,
        grounded_description=describe(output.action, episode.observation) if valid and output.action else "",
        screen_changed=screen_changed,
        log_prob=output.log_prob,
        timings={"policy_s": policy_s, "env_s": env_s},
        info=info,
    )


def termination_of(result: StepResult) -> Termination:
    """How an episode that the env ended (``done``) ended."""
    if result.success:
        return Termination.SUCCESS
    if result.info.get("termination") == "max_steps":
        return Termination.MAX_STEPS
    return Termination.AGENT_STOP  # the agent's status action, or an answer the page judged wrong


def restart_env(env: GuiEnv) -> None:
    """Restart a crashed env; a failed restart is logged, and the next reset reports it as an env error."""
    try:
        env.restart()
    except Exception as exc:  # noqa: BLE001 - the next reset reports it again
        logger.error("restarting the environment failed: %s", exc)
