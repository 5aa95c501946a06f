"""The device pool: GUI envs leased to sessions, checked, restarted when they crash, quarantined when
they keep crashing.

Why it is shaped this way:

* **A session is one episode on one leased device.** Its episode is recorded exactly once, with the
  outcome ``success``/``failure`` (the env said done), ``env_error`` (the device crashed or hung) or
  ``abandoned`` (closed early or reclaimed after ``lease_ttl_s`` without a request), so a training run
  can account for every episode it started.
* **Env calls run outside the pool's lock** (one device never waits for another) and on a helper
  thread with a deadline, so a hung browser becomes a crash instead of a stuck request.
* **Restarts run in the background**; a new session waits up to ``lease_wait_s`` for a device that is
  starting or restarting, so a crash costs the next client a short wait, not an error.
* **Steps are idempotent under retry**: a step carries ``seq`` (the number of steps taken before it);
  repeating the last ``seq`` returns the recorded reply instead of acting twice.
* **A session belongs to its creator**: created with an ``owner`` (the API passes the client's id), it
  answers only that owner; to anyone else it is an unknown session, so its existence is not revealed.

Everything the pool does to a device is logged on the ``admire.server`` logger.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from admire.envs.base import GuiEnv, InvalidAction, StepResult
from admire.errors import brief
from admire.server.deadline import CallTimedOut, DeviceWorker, kill_processes_of, run_with_deadline
from admire.server.errors import (
    DeviceFailed,
    EpisodeOver,
    NoCapacity,
    PoolClosed,
    PoolError,
    RequestIdReused,
    SessionExpired,
    StepOutOfOrder,
    TaskRejected,
    UnknownSession,
)
from admire.server.stats import LatencyHistogram, PoolStats
from admire.server.views import DeviceState, DeviceView, EpisodeOutcome, EpisodeView
from admire.types import Action, Observation, Task

log = logging.getLogger("admire.server")

T = TypeVar("T")
EnvFactoryFn = Callable[[], GuiEnv]
OUTCOMES: tuple[EpisodeOutcome, ...] = ("running", "success", "failure", "env_error", "abandoned")
DEVICE_STATES: tuple[DeviceState, ...] = ("starting", "idle", "leased", "stepping", "restarting", "quarantined",
                                          "stopped")
_BUSY = frozenset({"leased", "stepping"})
"""A leased device's states: a session owns it, and it steps or waits for the session's next step."""


@dataclass(frozen=True)
class PoolConfig:
    """How many devices, how long things may take, and when a device is given up on."""

    num_devices: int = 1
    """Devices started with the pool."""
    max_devices: int | None = None
    """The pool grows on demand up to this many (default: ``num_devices``). Quarantined ones count."""
    concurrency_limit: int | None = None
    """At most this many resets/steps run at once across all devices (default: ``max_devices``)."""
    lease_ttl_s: float = 300.0
    """A session with no request for this long is reclaimed and its episode recorded ``abandoned``."""
    crashed_device_restart: bool = True
    """Restart a device that crashed or hung; when off, such a device is quarantined at once."""
    max_consecutive_failures: int = 3
    """Quarantine a device after this many failures (crash, hang, failed restart) with no success between."""
    call_timeout_s: float = 120.0
    """A reset, step, health check or restart that takes longer counts as a crash."""
    close_timeout_s: float = 30.0
    """How long closing a broken env may take (a frozen browser makes a polite quit wait for its own
    timeout before the processes are killed); past it the close goes on in the background."""
    lease_wait_s: float = 5.0
    """How long a new session waits for a device that is busy, starting or restarting."""
    queue_wait_s: float = 60.0
    """How long a step waits for a concurrency slot before it is refused with ``no_capacity``."""
    episode_history: int = 1000
    """Episodes kept for ``recent_episodes``."""

    def __post_init__(self) -> None:
        if self.num_devices < 0:
            raise ValueError(f"num_devices must be >= 0, got {self.num_devices}")
        if self.devices_cap < max(1, self.num_devices):
            raise ValueError(f"max_devices ({self.max_devices}) must be >= num_devices ({self.num_devices}) and >= 1")
        if self.concurrency_limit is not None and self.concurrency_limit < 1:
            raise ValueError(f"concurrency_limit must be >= 1, got {self.concurrency_limit}")
        if self.max_consecutive_failures < 1:
            raise ValueError(f"max_consecutive_failures must be >= 1, got {self.max_consecutive_failures}")
        for name in ("lease_ttl_s", "call_timeout_s", "close_timeout_s", "queue_wait_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.lease_wait_s < 0:
            raise ValueError(f"lease_wait_s must be >= 0, got {self.lease_wait_s}")

    @property
    def devices_cap(self) -> int:
        return self.num_devices if self.max_devices is None else self.max_devices

    @property
    def step_slots(self) -> int:
        return self.devices_cap if self.concurrency_limit is None else self.concurrency_limit


@dataclass
class _Device:
    id: int
    env: GuiEnv | None
    state: DeviceState = "starting"
    task: str | None = None
    session_id: str | None = None
    restarts: int = 0
    failures: int = 0
    last_screenshot: bytes | None = None
    last_change: float = field(default_factory=time.time)
    worker: DeviceWorker = field(init=False)
    """Runs the env's calls under the deadline; a hung call leaves its thread behind with the env."""

    def __post_init__(self) -> None:
        self.worker = DeviceWorker(f"device-{self.id}")

    def view(self, owner: str | None = None) -> DeviceView:
        return DeviceView(id=self.id, state=self.state, task=self.task, session_id=self.session_id,
                          restarts=self.restarts, failures=self.failures, last_screenshot=self.last_screenshot,
                          last_change=self.last_change, owner=owner)


@dataclass
class _Session:
    id: str
    task: Task
    device: _Device | None
    screenshots: bool
    request_id: str | None
    owner: str | None
    started_at: float
    last_active: float
    steps: int = 0
    outcome: EpisodeOutcome = "running"
    finished_at: float | None = None
    busy: bool = False
    first: SessionStart | None = None
    last_seq: int | None = None
    last_reply: StepResult | PoolError | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def view(self, device_id: int) -> EpisodeView:
        return EpisodeView(session_id=self.id, device_id=device_id, task=self.task.name, seed=self.task.seed,
                           steps=self.steps, outcome=self.outcome, started_at=self.started_at,
                           finished_at=self.finished_at, owner=self.owner)


@dataclass(frozen=True)
class SessionStart:
    """What ``create_session`` answers: the session, its device and the first screen."""

    session_id: str
    device_id: int
    task: Task
    observation: Observation


class DevicePool:
    """Devices from ``env_factory`` (local MiniWoB envs, fakes, Ray actors), leased to sessions.

    ``backend`` (e.g. ``"miniwob"``), when given, is the only task backend accepted. ``clock`` is the
    monotonic clock lease expiry is measured on (tests pass a fake one). Thread-safe.
    """

    def __init__(self, env_factory: EnvFactoryFn, config: PoolConfig | None = None, *, backend: str | None = None,
                 clock: Callable[[], float] = time.monotonic, reap_interval_s: float | None = None) -> None:
        self.config = config or PoolConfig()
        self.backend = backend
        self._factory = env_factory
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._devices: list[_Device] = []
        self._sessions: dict[str, _Session] = {}
        self._by_request: dict[tuple[str | None, str], str] = {}
        self._creating: dict[tuple[str | None, str], threading.Event] = {}  # request ids whose session is starting
        self._expired: OrderedDict[str, str | None] = OrderedDict()  # session id -> its owner
        self._episodes: OrderedDict[str, EpisodeView] = OrderedDict()
        self._slots = threading.BoundedSemaphore(self.config.step_slots)
        self._counters: Counter[str] = Counter()
        self._outcomes: Counter[str] = Counter()
        self._latency = {name: LatencyHistogram() for name in ("step", "reset", "queue_wait")}
        self._background: set[threading.Thread] = set()
        self._closed = False
        self._stop = threading.Event()
        for _ in range(self.config.num_devices):
            self._add_device()
        interval = reap_interval_s if reap_interval_s is not None else min(max(self.config.lease_ttl_s / 4, 0.5), 10)
        self._reaper = threading.Thread(target=self._reap_forever, args=(interval,), daemon=True,
                                        name="admire-pool-reaper")
        self._reaper.start()
        log.info("pool started: %d device(s), up to %d, %d concurrent step(s), lease ttl %.0f s",
                 len(self._devices), self.config.devices_cap, self.config.step_slots, self.config.lease_ttl_s)

    # ---------------------------------------------------------------------------------- sessions

    def create_session(self, task: Task, *, screenshots: bool = True, request_id: str | None = None,
                       owner: str | None = None) -> SessionStart:
        """Lease a device and start ``task`` on it for ``owner``. A repeated ``request_id`` of the same
        owner returns the session it created before (a client retrying a lost reply gets its session,
        not a second one); the same ``request_id`` with another task is ``RequestIdReused``."""
        self._check_open()
        if self.backend is not None and task.backend != self.backend:
            raise TaskRejected(f"this server runs {self.backend!r} tasks ('{self.backend}/<task>'); "
                               f"got {task.name!r}")
        if request_id is None:
            return self._create_session(task, screenshots, None, owner)
        key = (owner, request_id)
        while True:  # a request id in flight is waited for: two concurrent sends of one request lease one device
            replay = self._replay_creation(request_id, owner, task, screenshots)
            if replay is not None:
                return replay
            with self._lock:
                pending = self._creating.get(key)
                if pending is None:
                    self._creating[key] = threading.Event()
                    break
            pending.wait(timeout=1.0)
            self._check_open()
        try:
            return self._create_session(task, screenshots, request_id, owner)
        finally:
            with self._lock:
                self._creating.pop(key).set()

    def _create_session(self, task: Task, screenshots: bool, request_id: str | None,
                        owner: str | None) -> SessionStart:
        self.reclaim_expired()
        session_id = uuid.uuid4().hex
        device = self._lease(session_id, task)
        now = time.time()
        session = _Session(id=session_id, task=task, device=device, screenshots=screenshots, request_id=request_id,
                           owner=owner, started_at=now, last_active=self._clock())
        try:
            observation = self._call(device, "reset", lambda env: env.reset(task))
        except TaskRejected:
            self._give_back(device, why="task rejected")
            raise
        except (DeviceFailed, NoCapacity, PoolClosed) as exc:
            if isinstance(exc, DeviceFailed):
                with self._lock:
                    session.device = None
                    self._finish(session, "env_error", device.id)
            else:
                self._give_back(device, why="no step slot")
            raise
        self._remember_screenshot(device, observation)
        start = SessionStart(session_id=session_id, device_id=device.id, task=task,
                             observation=observation if screenshots else observation.without_screenshot())
        with self._lock:
            session.first = start
            self._sessions[session_id] = session
            if request_id is not None:
                self._by_request[(owner, request_id)] = session_id
            self._record(session, device.id)
            self._counters["sessions_created"] += 1
        log.info("session %s: %s seed %d on device %d", session_id, task.name, task.seed, device.id)
        return start

    def step(self, session_id: str, action: Action, seq: int | None = None, *, owner: str | None = None) -> StepResult:
        """One step of the session's episode. ``seq`` (steps taken before this one) makes retries
        safe: the reply to the last ``seq`` is returned again instead of stepping twice. ``owner``
        (when given) must be the session's: another's session is ``UnknownSession``."""
        session = self._session(session_id, owner)
        with session.lock:
            if seq is not None and seq == session.last_seq and session.last_reply is not None:
                with self._lock:
                    self._counters["step_replays"] += 1
                    self._touch(session)
                if isinstance(session.last_reply, PoolError):
                    raise session.last_reply
                return session.last_reply
            if session.outcome != "running" or session.device is None:
                raise EpisodeOver(f"the episode of session {session_id} is over ({session.outcome}); "
                                  "create a new session")
            if seq is not None and seq != session.steps:
                raise StepOutOfOrder(f"step seq {seq} is out of order: this session has taken {session.steps} "
                                     f"step(s), so the next seq is {session.steps}", expected=session.steps)
            device = session.device
            with self._lock:
                session.busy = True
                self._touch(session)
            try:
                result = self._call(device, "step", lambda env: env.step(action))
            except DeviceFailed as exc:
                with self._lock:
                    session.device = None
                    self._finish(session, "env_error", device.id)
                self._cache(session, seq, exc)
                raise
            finally:
                with self._lock:
                    session.busy = False
                    self._touch(session)
            self._remember_screenshot(device, result.observation)
            shown = result.observation if session.screenshots else result.observation.without_screenshot()
            reply = StepResult(observation=shown, done=result.done,
                               success=result.success, info=result.info)
            with self._lock:
                session.steps += 1
                self._counters["steps"] += 1
                if result.done:
                    session.device = None
                    self._finish(session, "success" if result.success else "failure", device.id)
                else:
                    self._record(session, device.id)
            if result.done:
                self._give_back(device, why=f"episode {'succeeded' if result.success else 'failed'}")
            self._cache(session, seq, reply)
            return reply

    def close_session(self, session_id: str, *, owner: str | None = None) -> EpisodeOutcome:
        """End a session; an episode still running is recorded ``abandoned``. Returns the outcome.
        ``owner`` (when given) must be the session's, as for ``step``."""
        session = self._session(session_id, owner)
        with session.lock:
            device = session.device
            with self._lock:
                if session.outcome == "running" and device is not None:
                    session.device = None
                    self._finish(session, "abandoned", device.id)
                self._forget(session)
            if device is not None:
                self._give_back(device, why="session closed")
        log.info("session %s closed (%s)", session_id, session.outcome)
        return session.outcome

    def reclaim_expired(self, now: float | None = None) -> list[str]:
        """Close sessions idle for ``lease_ttl_s`` (running episodes become ``abandoned``); the ids."""
        now = self._clock() if now is None else now
        with self._lock:
            stale = [s for s in self._sessions.values()
                     if not s.busy and now - s.last_active > self.config.lease_ttl_s]
        reclaimed = []
        for session in stale:
            if not session.lock.acquire(blocking=False):
                continue  # a request is being served for it right now: it is not idle
            try:
                with self._lock:
                    if session.id not in self._sessions or now - session.last_active <= self.config.lease_ttl_s:
                        continue
                    device = session.device
                    if session.outcome == "running" and device is not None:
                        session.device = None
                        self._finish(session, "abandoned", device.id)
                        self._counters["leases_reclaimed"] += 1
                    self._forget(session)
                    self._expired[session.id] = session.owner
                    while len(self._expired) > 10_000:
                        self._expired.popitem(last=False)
                if device is not None:
                    log.warning("session %s idle for over %.0f s: reclaimed device %d", session.id,
                                self.config.lease_ttl_s, device.id)
                    self._give_back(device, why="lease expired")
                reclaimed.append(session.id)
            finally:
                session.lock.release()
        return reclaimed

    # ----------------------------------------------------------------------------------- views

    def devices(self) -> list[DeviceView]:
        with self._lock:
            return [d.view(self._owner_of(d.session_id)) for d in self._devices]

    def recent_episodes(self, limit: int = 50) -> list[EpisodeView]:
        """The newest episodes first (running ones included)."""
        with self._lock:
            views = list(self._episodes.values())
        return list(reversed(views))[: max(0, int(limit))]

    def stats(self) -> PoolStats:
        with self._lock:
            states = Counter(d.state for d in self._devices)
            latency = {name: histogram.snapshot() for name, histogram in self._latency.items()}
            return PoolStats(counters=dict(self._counters), episodes={o: self._outcomes[o] for o in OUTCOMES[1:]},
                             devices={state: states[state] for state in DEVICE_STATES},
                             sessions_active=sum(1 for s in self._sessions.values() if s.outcome == "running"),
                             latency=latency, concurrency_limit=self.config.step_slots,
                             max_devices=self.config.devices_cap)

    def device_screenshot(self, device_id: int, owner: str | None = None) -> bytes | None:
        """The device's last screenshot, for the owner of the session leasing it only: a screen shows what
        that client's task shows. None for a device that does not exist, has no screenshot, is not leased, or
        is leased by someone else (indistinguishable to the caller, so nothing is revealed)."""
        with self._lock:
            if 0 <= device_id < len(self._devices):
                device = self._devices[device_id]
                leaser = self._owner_of(device.session_id) if device.session_id is not None else None
                if device.session_id is not None and leaser == owner:
                    return device.last_screenshot
        return None

    # ----------------------------------------------------------------------------------- life

    def settle(self, timeout_s: float = 60.0) -> bool:
        """Wait for background restarts to finish (tests, shutdown); False if some still run."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                running = [t for t in self._background if t.is_alive()]
            if not running:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            running[0].join(remaining)

    def close(self) -> None:
        """Abandon running episodes, close every env. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            self._changed.notify_all()
        self.settle(self.config.call_timeout_s + self.config.close_timeout_s)
        with self._lock:
            for session in list(self._sessions.values()):
                if session.outcome == "running" and session.device is not None:
                    device_id = session.device.id
                    session.device = None
                    self._finish(session, "abandoned", device_id)
            self._sessions.clear()
            devices = list(self._devices)
        for device in devices:
            self._close_env(device)
            device.worker.close()
            with self._lock:
                self._set_state(device, "stopped", "pool closed")
        log.info("pool closed")

    def __enter__(self) -> DevicePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------- internals

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the env server is shutting down")

    def _session(self, session_id: str, owner: str | None = None) -> _Session:
        """The session, for ``owner`` (None: any). Another owner's session, live or expired, is unknown."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and (owner is None or session.owner == owner):
                return session
            if session is None and session_id in self._expired and owner in (None, self._expired[session_id]):
                raise SessionExpired(f"session {session_id} expired after {self.config.lease_ttl_s:.0f} s without "
                                     "a request; its device was reclaimed: create a new session")
        raise UnknownSession(f"unknown session {session_id!r} (never created, or already closed)")

    def _owner_of(self, session_id: str | None) -> str | None:
        session = self._sessions.get(session_id) if session_id is not None else None
        return session.owner if session is not None else None

    def _replay_creation(self, request_id: str, owner: str | None, task: Task,
                         screenshots: bool) -> SessionStart | None:
        with self._lock:
            session_id = self._by_request.get((owner, request_id))
            session = self._sessions.get(session_id) if session_id else None
            if session is None or session.first is None:
                return None
            if (session.task, session.screenshots) != (task, screenshots):
                raise RequestIdReused(f"request_id {request_id!r} already created session {session.id} for "
                                      f"{session.task.name} seed {session.task.seed}; a retry repeats its request "
                                      "exactly, a new request needs a new request_id")
            self._touch(session)
            self._counters["session_replays"] += 1
            return session.first

    def _touch(self, session: _Session) -> None:
        session.last_active = self._clock()

    def _cache(self, session: _Session, seq: int | None, reply: StepResult | PoolError) -> None:
        session.last_seq, session.last_reply = seq, reply

    def _forget(self, session: _Session) -> None:
        self._sessions.pop(session.id, None)
        if session.request_id is not None:
            self._by_request.pop((session.owner, session.request_id), None)

    def _record(self, session: _Session, device_id: int) -> None:
        self._episodes[session.id] = session.view(device_id)
        while len(self._episodes) > self.config.episode_history:
            self._episodes.popitem(last=False)

    def _finish(self, session: _Session, outcome: EpisodeOutcome, device_id: int) -> None:
        """Record the end of an episode; the one place an outcome is counted (so: once)."""
        if session.outcome != "running":
            return
        session.outcome = outcome
        session.finished_at = time.time()
        self._outcomes[outcome] += 1
        self._record(session, device_id)
        log.info("episode of session %s (%s seed %d) ended after %d step(s): %s", session.id, session.task.name,
                 session.task.seed, session.steps, outcome)

    def _set_state(self, device: _Device, state: DeviceState, why: str) -> None:
        if device.state == state:
            return
        busy_only = device.state in _BUSY and state in _BUSY
        log.log(logging.DEBUG if busy_only else logging.INFO, "device %d: %s -> %s (%s)", device.id, device.state,
                state, why)
        device.state = state
        device.last_change = time.time()
        if busy_only:  # every step passes here twice; nobody waits for a leased device to step
            return
        if state not in _BUSY:
            device.task = device.session_id = None
        self._changed.notify_all()

    def _add_device(self) -> _Device:
        """Create a device in ``starting`` and build its env (outside the lock)."""
        with self._lock:
            device = _Device(id=len(self._devices), env=None)
            self._devices.append(device)
            log.info("device %d: created (starting)", device.id)
        self._build_env(device, why="started")
        return device

    def _build_env(self, device: _Device, why: str) -> bool:
        try:
            env = run_with_deadline(self._factory, self.config.call_timeout_s, f"device-{device.id}-start")
        except Exception as exc:  # noqa: BLE001 - any factory failure is a failed start, never a crash
            with self._lock:
                self._fail(device, f"could not start: {brief(exc)}")
            return False
        with self._lock:
            device.env = env
            if self._closed:
                self._set_state(device, "stopped", "pool closed while starting")
            else:
                self._set_state(device, "idle", why)
        return True

    def _lease(self, session_id: str, task: Task) -> _Device:
        """An idle healthy device, a new one while below ``max_devices``, or ``NoCapacity``."""
        deadline = time.monotonic() + self.config.lease_wait_s
        for _ in range(max(3, 2 * self.config.devices_cap)):
            grow = False
            with self._lock:
                device = self._wait_for_device(deadline)
                if device is None:
                    device = _Device(id=len(self._devices), env=None)
                    self._devices.append(device)
                    grow = True
                    log.info("device %d: created on demand (starting)", device.id)
                else:
                    self._claim(device, session_id, task)
            if grow:
                if not self._build_env(device, why="grown on demand"):
                    continue
                with self._lock:
                    if device.state != "idle":
                        continue
                    self._claim(device, session_id, task)
            if self._check_health(device, when="lease"):
                return device
        self._count("no_capacity")
        raise NoCapacity("no healthy device could be leased (they keep failing health checks)", retry_after_s=2.0)

    def _wait_for_device(self, deadline: float) -> _Device | None:
        """Under the lock: an idle device, or None to grow; raises ``NoCapacity`` at the deadline."""
        while True:
            self._check_open()
            idle = next((d for d in self._devices if d.state == "idle"), None)
            if idle is not None:
                return idle
            if len(self._devices) < self.config.devices_cap:
                return None
            can_free_up = any(d.state not in ("quarantined", "stopped") for d in self._devices)
            remaining = deadline - time.monotonic()
            if not can_free_up or remaining <= 0:
                self._counters["no_capacity"] += 1  # under the lock already
                why = ("every device is quarantined" if not can_free_up else
                       f"all {len(self._devices)} device(s) are busy, starting or restarting")
                raise NoCapacity(f"no device available: {why}; retry later", retry_after_s=1.0 if can_free_up else 30.0)
            self._changed.wait(remaining)

    def _claim(self, device: _Device, session_id: str, task: Task) -> None:
        self._set_state(device, "leased", f"session {session_id}")
        device.task, device.session_id = task.name, session_id
        self._counters["leases"] += 1

    def _check_health(self, device: _Device, when: str) -> bool:
        """``env.healthy()`` under the call deadline; an unhealthy device is failed (restarted)."""
        try:
            ok = bool(device.worker.call(device.env.healthy, self.config.call_timeout_s, "health"))
            reason = "health check failed"
        except Exception as exc:  # noqa: BLE001 - a health check that raises is a failed one
            ok, reason = False, f"health check raised {brief(exc)}"
        if ok:
            return True
        with self._lock:
            self._counters["health_check_failures"] += 1
            self._fail(device, f"{reason} on {when}")
        return False

    def _give_back(self, device: _Device, why: str) -> None:
        """Return a leased device: idle when healthy, else restarted."""
        if self._closed:
            return
        if self._check_health(device, when="return"):
            with self._lock:
                if device.state in ("leased", "stepping"):
                    self._set_state(device, "idle", why)
                    self._counters["returns"] += 1

    def _call(self, device: _Device, what: str, fn: Callable[[GuiEnv], T]) -> T:
        """Run ``fn(env)`` within a concurrency slot and the call deadline; translate failures."""
        self._check_open()
        queued = time.perf_counter()
        if not self._slots.acquire(timeout=self.config.queue_wait_s):
            self._count("no_capacity")
            raise NoCapacity(f"{self.config.step_slots} step(s) already running and none finished within "
                             f"{self.config.queue_wait_s:.0f} s; retry later", retry_after_s=1.0)
        started = time.perf_counter()
        try:
            with self._lock:
                self._latency["queue_wait"].add(started - queued)
                self._set_state(device, "stepping", what)
            env = device.env
            try:
                result = device.worker.call(lambda: fn(env), self.config.call_timeout_s, what)
            except ValueError as exc:  # InvalidAction is one too
                if what == "reset":
                    raise TaskRejected(str(exc)) from exc
                if isinstance(exc, InvalidAction):
                    self._count("invalid_actions")
                    raise
                raise self._crashed(device, what, exc) from exc
            except CallTimedOut as exc:
                self._count("timeouts")
                raise self._crashed(device, what, exc, hung=True) from exc
            except Exception as exc:
                raise self._crashed(device, what, exc) from exc
            with self._lock:
                if what == "step":  # a reset alone proves little: a device may crash on every first step
                    device.failures = 0
                self._latency[what].add(time.perf_counter() - started)
            return result
        finally:
            self._slots.release()
            with self._lock:
                if device.state == "stepping":
                    self._set_state(device, "leased", f"{what} done")

    def _crashed(self, device: _Device, what: str, exc: BaseException, hung: bool = False) -> DeviceFailed:
        reason = (f"{what} took longer than {self.config.call_timeout_s:.0f} s" if hung
                  else f"{what} failed: {brief(exc)}")
        with self._lock:
            self._counters["env_errors"] += 1
            self._fail(device, reason, replace=hung)
        return DeviceFailed(f"device {device.id} crashed ({reason}); the episode is lost (env_error) and the device "
                            "is being restarted: start a new session")

    def _fail(self, device: _Device, reason: str, replace: bool = False) -> None:
        """Under the lock: count a failure, then quarantine, or restart in the background."""
        device.failures += 1
        log.warning("device %d: failure %d/%d: %s", device.id, device.failures,
                    self.config.max_consecutive_failures, reason)
        if device.failures >= self.config.max_consecutive_failures:
            self._quarantine(device, f"{device.failures} consecutive failures, last: {reason}")
        elif not self.config.crashed_device_restart:
            self._quarantine(device, f"{reason}; crashed_device_restart is off")
        elif self._closed:
            self._set_state(device, "stopped", "pool closed")
        else:
            self._set_state(device, "restarting", reason)
            self._spawn(f"admire-restart-{device.id}", self._restart, device, replace)

    def _quarantine(self, device: _Device, reason: str) -> None:
        self._counters["quarantines"] += 1
        self._set_state(device, "quarantined", reason)
        log.error("device %d quarantined: %s", device.id, reason)
        self._spawn(f"admire-close-{device.id}", self._close_env, device)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        """Under the lock: run ``target`` on a tracked background thread (``settle`` waits for it)."""

        def run() -> None:
            try:
                target(*args)
            finally:
                with self._lock:
                    self._background.discard(thread)

        thread = threading.Thread(target=run, daemon=True, name=name)
        self._background.add(thread)
        thread.start()

    def _count(self, name: str) -> None:
        with self._lock:
            self._counters[name] += 1

    def _restart(self, device: _Device, replace: bool) -> None:
        """Background: ``env.restart()`` (the ``GuiEnv`` protocol's) when the env did not hang, else a new env;
        a restart that fails counts as a failure, so the next attempt replaces the env."""
        try:
            if not replace:
                device.worker.call(device.env.restart, self.config.call_timeout_s, "restart")
            else:
                if replace:
                    kill_processes_of(device.env, f"device {device.id}")
                self._close_env(device)
                device.env = run_with_deadline(self._factory, self.config.call_timeout_s, f"device-{device.id}-start")
            healthy = bool(device.worker.call(device.env.healthy, self.config.call_timeout_s, "health"))
            error = None if healthy else "unhealthy after restart"
        except Exception as exc:  # noqa: BLE001 - a failed restart is a failure of the device
            error = f"restart failed: {brief(exc)}"
        with self._lock:
            if error is not None:
                self._counters["restart_failures"] += 1
                self._fail(device, error, replace=True)
                return
            device.restarts += 1
            self._counters["restarts"] += 1
            self._set_state(device, "stopped" if self._closed else "idle", f"restart {device.restarts} done")

    def _close_env(self, device: _Device) -> None:
        env = device.env
        if env is None:
            return
        try:
            run_with_deadline(env.close, self.config.close_timeout_s, f"device-{device.id}-close")
        except Exception as exc:  # noqa: BLE001 - closing a broken env may fail; it is gone either way
            log.warning("device %d: close failed: %s", device.id, brief(exc))

    def _remember_screenshot(self, device: _Device, observation: Observation) -> None:
        if observation.screenshot is not None and observation.screenshot.png is not None:
            with self._lock:
                device.last_screenshot = observation.screenshot.png

    def _reap_forever(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.reclaim_expired()
            except Exception:
                log.exception("reclaiming expired sessions failed")
