"""verl's multi-turn agent loop for GUI episodes (``admire_gui``): one episode of a ``GuiEnv``, one sample per step.

Why it is shaped this way:

* **One verl sample per GUI step.** ``run`` returns a ``list[AgentLoopOutput]``, which verl's v1
  (TransferQueue) agent-loop worker keeps as separate samples keyed ``{uid}_{session_id}_{i}``: the prompt of
  sample ``i`` is step ``i``'s screen and history, its response the model's answer at that step. Each carries
  the stepwise contract fields (``uid``, ``admire_traj_id``, ``admire_step``, ``admire_num_steps``,
  ``admire_excluded``, ``admire_trajectory`` on the last step) in ``extra_fields``; ``reward_score`` is the episode's
  outcome (0 for an excluded one), which verl's validation reports; the training rewards are not computed here,
  because ADMIRE scores a whole batch at once (the milestone bank is updated from the batch's successes first),
  which the ``admire_step`` trainer does after the rollout.
* **The lm policy's prompt, token in and token out.** A step's messages are
  :func:`admire.agent.prompts.build_messages` — exactly what the CPU ``lm`` policy reads — rendered by verl's
  Continuous Token builder (the model's chat template); the rollout server answers with token ids and
  log-probs, and the text is decoded only to parse the action. The sample's ids are the ones sampled.
* **The CPU rollout's records.** Resets, steps, crashes and step records go through
  :mod:`admire.rl.rollout`'s own functions, so unparseable output is a format-error step (the env is not
  stepped), an impossible action an invalid-action step, and the ``Trajectory`` is the object the CPU trainer
  writes (grounded descriptions, termination, ``info``): rewards and the viewer cannot tell the two apart.
* **Crashes re-run, then exclude.** An env that crashes (``EnvCrashed``, a failed reset) is restarted and the
  episode played again from the start, up to ``admire.max_reruns`` times (2, as ``admire.rl.rollout.collect``);
  one that still crashes becomes an ``env_error`` trajectory, returned as a single placeholder sample with no
  trainable token (``response_mask`` all 0), ``admire_excluded=True`` and ``admire_num_steps=1`` (the number
  of *samples*; the trajectory JSON keeps the steps the crashed attempt took).
* **Envs are pooled per process and never block the event loop.** verl builds an agent loop per sample and
  runs every episode of a worker on one event loop, so the envs live in a module-level pool (one per env
  section) built by the CPU trainer's own ``make_envs`` — ``env.src`` names local backends or ``admire serve``
  servers (``remote:http://host:8765``), ``env.max_envs`` how many per backend, *per agent-loop worker process*
  — and an episode leases one for its length. Building the envs runs on the event loop's executor, resets,
  steps and restarts on the pool's own threads; the envs close when the process exits (:func:`close_env_pools`).

Configuration: verl's config carries the ADMIRE config under ``admire`` (``admire.env`` is required; the
step prompt's history window is ``admire.actor_rollout_ref.model.history_window``, as for the ``lm`` policy;
``admire.max_reruns`` overrides the re-runs). A screenshot goes into the prompt when verl gives the loop a
processor (a vision-language model) and ``env.screenshots`` is on — the ``lm`` policy's ``screenshots: auto``.
verl left-truncates a prompt longer than ``actor_rollout_ref.rollout.prompt_length`` (with a warning), which
cuts the system turn: size ``data.max_prompt_length`` for the longest screen.
A dataset row names its task with the columns of :mod:`admire.integrations.verl.dataset` (``admire_task``,
``admire_seed``, ``admire_params``); verl adds ``uid`` (the GRPO group) and ``session_id`` (the episode's place
in the group).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from admire.extras import require

require("verl", "torch", extra="verl", feature="the verl agent loop")

from omegaconf import DictConfig, OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput  # noqa: E402

from admire.actions import parse_model_output  # noqa: E402
from admire.agent.base import PolicyOutput  # noqa: E402
from admire.agent.prompts import DEFAULT_HISTORY_WINDOW, build_messages  # noqa: E402
from admire.config_schema import EnvSection  # noqa: E402
from admire.envs.base import EnvCrashed, GuiEnv, StepResult  # noqa: E402
from admire.integrations.verl.dataset import AGENT_NAME, task_from_row  # noqa: E402
from admire.rl.rollout import (  # noqa: E402
    EpisodeRequest,
    LiveEpisode,
    record_step,
    reset_env,
    restart_env,
    step_env,
    termination_of,
)
from admire.types import Observation, Termination, Trajectory  # noqa: E402

DEFAULT_MAX_RERUNS = 2
"""Re-runs of a crashed episode before it is excluded: ``admire.rl.rollout.collect``'s default."""
VERSION_KEYS = ("min_global_steps", "max_global_steps", "global_steps")
"""Where verl's rollout servers and server manager put the weight version of an answer."""

T = TypeVar("T")


# ------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class GuiLoopSettings:
    """What the agent loop reads from verl's config (the ``admire`` section)."""

    env: dict[str, Any]
    """ADMIRE's ``env`` section: ``src``, ``max_envs``, ``max_steps``, ``screenshots``, ``executor`` (+ its section)."""
    history_window: int = DEFAULT_HISTORY_WINDOW
    max_reruns: int = DEFAULT_MAX_RERUNS
    run_dir: str | None = None
    """The run folder (``admire.run_dir``): screenshots are written under it, the samples carry their hashes."""

    @property
    def max_steps(self) -> int:
        return int(self.env["max_steps"])

    @property
    def keep_screenshots(self) -> bool:
        return bool(self.env.get("screenshots", False))

    @classmethod
    def from_config(cls, config: DictConfig) -> GuiLoopSettings:
        section = OmegaConf.select(config, "admire.env", default=None)
        if section is None:
            raise ValueError("the admire_gui agent loop needs the ADMIRE config under 'admire' in verl's config "
                             "(admire.env.src, admire.env.max_steps, ...); start it with admire train "
                             "trainer.backend=verl")
        env = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section)
        assert isinstance(env, dict)
        missing = [key for key in ("src", "max_envs", "max_steps", "suite") if env.get(key) is None]
        if missing:
            raise ValueError(f"the admire_gui agent loop needs admire.env.{missing[0]} in verl's config")
        env_section(env)  # the same checks as the trainer's, in the worker, before any env is built
        window = OmegaConf.select(config, "admire.actor_rollout_ref.model.history_window",
                                  default=DEFAULT_HISTORY_WINDOW)
        reruns = OmegaConf.select(config, "admire.max_reruns", default=DEFAULT_MAX_RERUNS)
        run_dir = OmegaConf.select(config, "admire.run_dir", default=None)
        return cls(env={str(k): v for k, v in env.items()},
                   history_window=DEFAULT_HISTORY_WINDOW if window is None else int(window),
                   max_reruns=DEFAULT_MAX_RERUNS if reruns is None else int(reruns),
                   run_dir=None if run_dir is None else str(run_dir))


def env_section(values: dict[str, Any]) -> EnvSection:
    """``admire.env`` of verl's config as the typed section the env layer builds from; a bad value is one line."""
    from pydantic import ValidationError

    try:
        return EnvSection.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"admire.env.{where} in verl's config: {first['msg']}; compose it with admire train "
                         "trainer.backend=verl") from None


# ------------------------------------------------------------------------------------------ env pool


class EnvPool:
    """The envs of one env section, shared by every agent loop of this process (see the module docstring).

    The envs are built on first use, all at once, by the CPU trainer's ``make_envs`` (so ``env.src``,
    ``env.max_envs``, ``env.executor`` and the AndroidWorld emulator settings mean what they mean there). An
    episode leases one env for its whole length; a caller that finds none idle waits, on its own event loop,
    until one is released (waiters may sit on different loops: verl's worker has one, each test another).
    Blocking env calls run on the pool's own threads, one per env, so they never wait behind verl's work on
    the default executor.
    """

    def __init__(self, env_section: Mapping[str, Any]) -> None:
        self.env_section = dict(env_section)
        self.envs: list[GuiEnv] = []
        self._stack = ExitStack()
        self._build_lock = threading.Lock()
        self._lock = threading.Lock()
        self._idle: list[GuiEnv] = []
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[GuiEnv]]] = deque()
        self._threads: ThreadPoolExecutor | None = None
        self._closed = False

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[GuiEnv]:
        """An env for one episode, given back afterwards whatever happened."""
        env = await self.acquire()
        try:
            yield env
        finally:
            self.release(env)

    async def acquire(self) -> GuiEnv:
        loop = asyncio.get_running_loop()
        if not self.envs:
            await loop.run_in_executor(None, self._build)
        with self._lock:
            if self._idle:
                return self._idle.pop()
            waiter: asyncio.Future[GuiEnv] = loop.create_future()
            self._waiters.append((loop, waiter))
        return await waiter

    def release(self, env: GuiEnv) -> None:
        with self._lock:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._hand_over, waiter, env)
                    return
                except RuntimeError:  # that waiter's event loop is closed
                    continue
            self._idle.append(env)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on one of the pool's threads."""
        if self._threads is None:
            raise RuntimeError("the env pool has no envs yet; lease one first")
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(fn, *args))

    def close(self) -> None:
        """Close every env (blocking: call it off the event loop, or at exit)."""
        with self._build_lock:
            self._closed = True
            self._stack.close()
            if self._threads is not None:
                self._threads.shutdown(wait=False, cancel_futures=True)

    def _build(self) -> None:
        with self._build_lock:
            if self._closed:
                raise RuntimeError("this env pool is closed")
            if self.envs:
                return
            from admire.envs.building import make_envs

            envs = make_envs(env_section(self.env_section), self._stack)
            self._threads = ThreadPoolExecutor(max_workers=len(envs), thread_name_prefix="admire-env")
            with self._lock:
                self.envs = envs
                self._idle.extend(reversed(envs))

    def _hand_over(self, waiter: asyncio.Future[GuiEnv], env: GuiEnv) -> None:
        if waiter.done():  # its episode was cancelled while waiting
            self.release(env)
        else:
            waiter.set_result(env)


_POOLS: dict[str, EnvPool] = {}
_POOLS_LOCK = threading.Lock()


def env_pool(env_section: Mapping[str, Any]) -> EnvPool:
    """This process's pool for ``env_section`` (one per distinct section)."""
    key = json.dumps(env_section, sort_keys=True, default=str)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = EnvPool(env_section)
        return pool


@atexit.register
def close_env_pools() -> None:
    """Close every pool's envs (at exit; tests call it between cases)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


# ------------------------------------------------------------------------------------------ the loop


@dataclass
class _Turn:
    """The tokens of one step: what becomes one verl sample."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    log_probs: list[float] | None
    multi_modal_data: dict[str, Any] = field(default_factory=dict)
    versions: tuple[int, ...] = ()
    """The rollout's weight versions (verl's ``global_steps``) this answer was sampled with."""


@dataclass
class _Episode:
    trajectory: Trajectory
    turns: list[_Turn]


class AdmireGuiAgentLoop(AgentLoopBase):
    """One GUI episode per ``run``, one ``AgentLoopOutput`` per step (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = GuiLoopSettings.from_config(self.config)
        self.response_length = int(self.rollout_config.response_length)
        self.log_probs = bool(OmegaConf.select(self.config, "actor_rollout_ref.rollout.calculate_log_probs",
                                               default=False))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        """Play the row's task once (re-running it after env crashes); the steps as verl samples."""
        task = task_from_row(kwargs)
        uid = str(kwargs.get("uid", ""))
        request = EpisodeRequest(task=task, group=_as_int(kwargs.get("index")),
                                 replica=_as_int(kwargs.get("session_id")))
        epoch = _as_int(kwargs.get("global_steps"))
        pool = env_pool(self.settings.env)
        reruns = 0
        async with pool.lease() as env:
            episode = await self._play(pool, env, request, sampling_params, epoch, uid)
            while episode.trajectory.excluded and reruns < self.settings.max_reruns:
                reruns += 1
                episode = await self._play(pool, env, request, sampling_params, epoch, uid)
        trajectory = episode.trajectory
        # The weight versions the rollout server reported for this episode's answers (none: it reported none).
        info = {**trajectory.info, "weight_versions": sorted({v for turn in episode.turns for v in turn.versions})}
        if reruns:
            info["reruns"] = reruns
        trajectory = trajectory.model_copy(update={"info": info})
        trajectory = await asyncio.to_thread(self._by_reference, trajectory)
        return await self._outputs(trajectory, episode.turns, uid, rollout_step=max(epoch - 1, 0))

    def _by_reference(self, trajectory: Trajectory) -> Trajectory:
        """The trajectory with screenshot hashes in place of their bytes (which go to the run folder when there
        is one): the JSON crosses Ray and the TransferQueue, and verl copies a row into its padding rows."""
        if self.settings.run_dir is not None:
            from admire.runs import RunDir

            return RunDir(self.settings.run_dir).store_screenshots(trajectory)
        steps = tuple(step.model_copy(update={"observation": step.observation.model_copy(
            update={"screenshot": step.observation.screenshot.stored()})}) if step.observation.screenshot else step
            for step in trajectory.steps)
        return trajectory.model_copy(update={"steps": steps})

    # ---------------------------------------------------------------------------------------------

    async def _play(self, pool: EnvPool, env: GuiEnv, request: EpisodeRequest, sampling_params: dict[str, Any],
                    epoch: int, uid: str) -> _Episode:
        """One attempt at the episode, as ``admire.rl.rollout.collect`` plays it on one env."""
        keep = self.settings.keep_screenshots

        def finish(live: LiveEpisode, termination: Termination, outcome: float, info: dict[str, Any]) -> Trajectory:
            return live.trajectory(termination, outcome, {"uid": uid, **info}, epoch)

        first = await pool.call(reset_env, env, request.task)
        if not isinstance(first, Observation):  # reset_env restarted the env already
            live = LiveEpisode(0, request, Observation(goal=""), "")
            return _Episode(finish(live, Termination.ENV_ERROR, 0.0, {"env_error": first}), [])
        live = LiveEpisode(0, request, first if keep else first.without_screenshot(), first.goal)
        turns: list[_Turn] = []
        request_id = uuid.uuid4().hex  # one per attempt: the server may keep the episode's prefix cached
        while True:
            turn, output, policy_s = await self._generate(live, request_id, sampling_params)
            result, parse_error, env_s = await pool.call(step_env, env, output)
            if isinstance(result, EnvCrashed):
                await pool.call(restart_env, env)
                return _Episode(finish(live, Termination.ENV_ERROR, 0.0, {"env_error": str(result)}), turns)
            live.steps.append(record_step(live, output, result, parse_error, policy_s, env_s, keep))
            turns.append(turn)
            if isinstance(result, StepResult):
                live.observation = result.observation if keep else result.observation.without_screenshot()
                if result.done:
                    return _Episode(finish(live, termination_of(result), 1.0 if result.success else 0.0,
                                           {"raw_reward": result.info.get("raw_reward")}), turns)
            if len(live.steps) >= self.settings.max_steps:
                return _Episode(finish(live, Termination.MAX_STEPS, 0.0, {}), turns)

    async def _generate(self, live: LiveEpisode, request_id: str,
                        sampling_params: dict[str, Any]) -> tuple[_Turn, PolicyOutput, float]:
        """The step's prompt ids, the server's answer, and that answer read as the ``lm`` policy reads it."""
        messages = build_messages(live.observation, live.steps, history_window=self.settings.history_window,
                                  screenshot=self.processor is not None)
        multi_modal = await self.process_multi_modal_info(messages)
        self._assert_mm_supported(bool(multi_modal))
        images = multi_modal.get("images")
        prompt_ids = await self.ct_build_initial_tokens(messages, images=images)
        started = time.perf_counter()
        answer = await self.server_manager.generate(
            request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, image_data=images,
            mm_processor_kwargs=self._get_mm_processor_kwargs(None))
        policy_s = time.perf_counter() - started
        ids = [int(t) for t in answer.token_ids][: self.response_length]
        log_probs = [float(p) for p in answer.log_probs][: len(ids)] if answer.log_probs else None
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        parsed = parse_model_output(text)
        info: dict[str, Any] = {"num_tokens": len(ids), "parse_error": parsed.error, "stop_reason": answer.stop_reason}
        if log_probs is not None:
            info["token_log_probs"] = log_probs
        # log_prob stays None when the server gave none: the CPU trainer reads that as "not trainable here".
        output = PolicyOutput(text=text, action=parsed.action, info=info,
                              log_prob=sum(log_probs) if log_probs is not None else None)  # type: ignore[arg-type]
        mask = [1] * len(ids)
        if not ids:  # verl puts the reward on the last response token: keep one, untrainable
            ids, mask, log_probs = [self._filler_id()], [0], ([0.0] if log_probs is not None else None)
        versions = tuple(int(v) for v in (answer.extra_fields.get(key) for key in VERSION_KEYS) if v is not None)
        return _Turn(prompt_ids, ids, mask, log_probs, multi_modal, versions), output, policy_s

    async def _outputs(self, trajectory: Trajectory, turns: list[_Turn], uid: str,
                       rollout_step: int) -> list[AgentLoopOutput]:
        """One sample per step; an excluded episode is one placeholder sample without trainable tokens.

        Every sample carries the weight versions its episode was sampled across (``min_global_steps`` /
        ``max_global_steps``: verl tags each sample with them and reads them as integers for its staleness
        metrics); an episode that never reached the rollout server was sampled by ``rollout_step``'s weights.
        The placeholder is shaped like its batch's other samples: log-probs when the rollout computes them
        (verl's batch keeps a field only if every row has it), a text-only prompt (a vision model's image
        tokens would need an image).
        """
        versions = [v for turn in turns for v in turn.versions] or [rollout_step]
        if trajectory.excluded:
            prompt = await self.ct_build_initial_tokens(
                [{"role": "user", "content": f"{trajectory.task.name}: the env crashed (excluded episode)"}])
            turns = [_Turn(list(prompt), [self._filler_id()], [0], [0.0] if self.log_probs else None)]
        outputs = []
        for i, turn in enumerate(turns):
            timings = trajectory.steps[i].timings if i < len(trajectory.steps) and not trajectory.excluded else {}
            last = i == len(turns) - 1
            outputs.append(AgentLoopOutput(
                prompt_ids=turn.prompt_ids, response_ids=turn.response_ids, response_mask=turn.response_mask,
                response_logprobs=turn.log_probs, multi_modal_data=turn.multi_modal_data,
                # The outcome, for verl's validation score; training rewards are the admire_step trainer's.
                reward_score=0.0 if trajectory.excluded else float(trajectory.outcome),
                num_turns=2,
                metrics=AgentLoopMetrics(generate_sequences=timings.get("policy_s", 0.0),
                                         tool_calls=timings.get("env_s", 0.0)),
                extra_fields={
                    "uid": uid,
                    "admire_traj_id": trajectory.id,
                    "admire_step": i,
                    "admire_num_steps": len(turns),
                    "admire_excluded": trajectory.excluded,
                    "admire_trajectory": trajectory.to_json() if last else None,
                    "reward_extra_info": {},  # verl's v1 worker copies the last sample's onto the others
                    "global_steps": max(versions),
                    "min_global_steps": min(versions),
                    "max_global_steps": max(versions),
                },
            ))
        return outputs

    def _filler_id(self) -> int:
        for token in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id):
            if token is not None:
                return int(token)
        return 0


def register() -> None:
    """Put ``admire_gui`` into verl's agent-loop registry (idempotent: the entry is the same every time)."""
    from verl.experimental.agent_loop.agent_loop import register as register_agent_loop

    register_agent_loop(AGENT_NAME)(AdmireGuiAgentLoop)


def _as_int(value: Any) -> int:
    """A row value verl may hand over as a numpy scalar or a 0-d tensor (absent: 0)."""
    if value is None:
        return 0
    return int(value.item() if hasattr(value, "item") else value)
