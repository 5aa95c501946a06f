"""Devices as Ray actors: one trainer (or one env server) drives browsers and emulators on many machines.

A :class:`RayEnv` is a ``GuiEnv`` whose real env lives in a Ray actor, so rollouts, the trainer and the
device pool use it exactly as they use a local env. What crosses the wire is what a local env returns
(``Observation``, ``StepResult``), pickled by Ray.

Failures keep the meaning they have locally, because the rollout's crash handling depends on it:

* the env raises ``EnvCrashed`` inside the actor, or the actor dies, or a call outlives ``timeout_s``
  → ``EnvCrashed`` here (the episode becomes ``env_error`` and is re-run after ``restart()``);
* ``InvalidAction`` (and any other error of the env, e.g. a bad task name) → the same exception here.

Errors of the env travel back as return values rather than as Ray task errors, so that an ordinary
``InvalidAction`` costs one round trip and no traceback in Ray's logs.

``ray`` is imported lazily: ``admire`` works without it, and only ``env.executor=ray`` needs it. This is
the ``ray`` entry of :data:`admire.envs.executors.EXECUTORS` (``ray_executor``).
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from admire.envs.base import ENVS, EnvCrashed, GuiEnv, StepResult
from admire.types import Action, Observation, Task

log = logging.getLogger(__name__)

_RAY_LOCK = threading.Lock()


# --------------------------------------------------------------------------------------------------
# Starting Ray
# --------------------------------------------------------------------------------------------------


def ensure_ray(address: str | None = None, *, num_cpus: float | None = None, **init_options: Any) -> None:
    """Initialise Ray once per process; later calls (from every device) are no-ops.

    ``address=None`` starts a private local cluster sized to this machine, without Ray's dashboard
    (a web server nobody asked for) and with worker logs kept out of the console, since env errors come
    back as values anyway. ``address="auto"`` (or ``"ray://host:10001"``, ``"host:6379"``) joins a
    cluster started with ``ray start --head``; its size is the cluster's, so ``num_cpus`` is ignored.
    ``RAY_ADDRESS`` in the environment counts as ``address``.
    """
    ray = _ray()
    address = address or os.environ.get("RAY_ADDRESS") or None  # Ray's own variable names a cluster too
    with _RAY_LOCK:
        if ray.is_initialized():
            return
        options: dict[str, Any] = {
            "ignore_reinit_error": True,
            "logging_level": logging.WARNING,
            "log_to_driver": False,
            "configure_logging": True,
        }
        if address is None:  # "local": a new private instance, even when `ray start` runs on this machine
            options.update(address="local", include_dashboard=False,
                           num_cpus=num_cpus if num_cpus is not None else os.cpu_count() or 1)
        else:
            options["address"] = address
        options.update(init_options)
        ray.init(**options)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is in the [server] extra
        raise ImportError("env.executor=ray needs Ray: pip install 'admire[server]' (or pip install ray)") from exc
    return ray


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RaySettings:
    """Where and how device actors run (the ``env.ray`` config section).

    ``num_cpus`` is Ray's logical CPU share of one device (a MiniWoB browser uses half a core to one
    core; 0.5 packs two per core). ``resources`` places devices on nodes that advertise a custom
    resource, e.g. ``{"browser": 1}`` with ``ray start --resources='{"browser": 8}'`` on browser hosts.
    ``timeout_s`` bounds every call (a hung browser is a crash); ``start_timeout_s`` is added to the
    first call of a new actor, which waits for a worker process and possibly for free resources.
    """

    address: str | None = None
    num_cpus: float = 1.0
    resources: Mapping[str, float] = field(default_factory=dict)
    timeout_s: float = 120.0
    start_timeout_s: float = 120.0
    health_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.num_cpus < 0:
            raise ValueError(f"env.ray.num_cpus_per_env must be >= 0, got {self.num_cpus}")
        for name in ("timeout_s", "start_timeout_s", "health_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"env.ray.{name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> RaySettings:
        """From the ``env.ray`` section; unknown keys are an error that lists the known ones."""
        values = dict(section or {})
        if "num_cpus_per_env" in values:
            values["num_cpus"] = values.pop("num_cpus_per_env")
        known = {"address", "num_cpus", "resources", "timeout_s", "start_timeout_s", "health_timeout_s"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown key(s) in env.ray: {', '.join(unknown)}; known: address, num_cpus_per_env, "
                             "resources, timeout_s, start_timeout_s, health_timeout_s")
        for name in ("num_cpus", "timeout_s", "start_timeout_s", "health_timeout_s"):
            if values.get(name) is not None:
                values[name] = float(values[name])
        values["resources"] = {str(k): float(v) for k, v in dict(values.get("resources") or {}).items()}
        return cls(**{k: v for k, v in values.items() if v is not None or k == "address"})

    def actor_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "max_restarts": 0}
        if self.resources:
            options["resources"] = dict(self.resources)
        return options


# --------------------------------------------------------------------------------------------------
# The actor side
# --------------------------------------------------------------------------------------------------


class EnvHost:
    """Owns the real env inside the actor process. ``call`` and ``restart_env`` answer
    ``(ok, value_or_exception)``."""

    def __init__(self, factory: Callable[..., GuiEnv], options: Mapping[str, Any]) -> None:
        self._factory = factory
        self._options = dict(options)
        self._env: GuiEnv | None = None

    def call(self, method: str, *args: Any) -> tuple[bool, Any]:
        try:
            if self._env is None:
                self._env = self._factory(**self._options)  # here, so that a start failure comes back as a value
            return True, getattr(self._env, method)(*args)
        except Exception as exc:  # noqa: BLE001 - every env error goes back to the caller, typed
            return False, _portable(exc)

    def restart_env(self) -> tuple[bool, Any]:
        """Restart the env in place (a new browser, same actor); one not built yet is built by the next call."""
        try:
            if self._env is not None:
                self._env.restart()
            return True, None
        except Exception as exc:  # noqa: BLE001
            return False, _portable(exc)

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            env.close()

    def ping(self) -> dict[str, Any]:
        """Where this actor runs (for operators and tests)."""
        return {"pid": os.getpid(), "node": _ray().util.get_node_ip_address()}


@functools.cache
def _remote_host() -> Any:
    """``EnvHost`` as a Ray actor class, made once: Ray exports a class each time it is wrapped."""
    return _ray().remote(EnvHost)


def _portable(exc: Exception) -> Exception:
    """The exception itself when it survives pickling, else a RuntimeError that keeps its text."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


# --------------------------------------------------------------------------------------------------
# The caller side
# --------------------------------------------------------------------------------------------------


class RayEnv:
    """A ``GuiEnv`` whose env (``make_env(name, **options)``) runs in a Ray actor.

    The backend name is resolved here, in the caller, and its factory shipped to the actor, so an
    unknown name fails at once with the list of known backends, and a backend registered by a plugin
    module works on the workers as long as that module is importable there.
    """

    def __init__(self, name: str, options: Mapping[str, Any] | None = None,
                 settings: RaySettings | None = None) -> None:
        self.name = name
        self.options = dict(options or {})
        self.settings = settings or RaySettings()
        self._factory = resolve_factory(name)
        ensure_ray(self.settings.address)
        self._actor: Any = None
        self._fresh = True    # the next call is the actor's first: allow for its start
        self._lost = False    # the actor died or hung; only restart() or close() help
        self._closed = False
        self._new_actor()

    # ---------------------------------------------------------------------------------- GuiEnv

    def reset(self, task: Task) -> Observation:
        return self.call("reset", task)

    def step(self, action: Action) -> StepResult:
        return self.call("step", action)

    def close(self) -> None:
        """Close the env in the actor (its browser exits cleanly), then end the actor. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._actor is None:
            return
        ray = _ray()
        if not self._lost:
            try:
                ray.get(self._actor.close.remote(), timeout=self.settings.timeout_s)
            except Exception as exc:  # noqa: BLE001 - the actor is killed next whatever happened
                log.warning("closing the env in its actor failed: %s", exc)
        self._kill()

    def healthy(self) -> bool:
        if self._closed or self._lost:
            return False
        ray = _ray()
        try:
            ok, value = ray.get(self._actor.call.remote("healthy"),
                                timeout=self._timeout(self.settings.health_timeout_s))
        except Exception:  # noqa: BLE001 - an actor that cannot answer is not healthy
            return False
        self._fresh = False
        return bool(ok and value)

    # ------------------------------------------------------------------------------- beyond GuiEnv

    def restart(self) -> None:
        """Get a working env again: restart it inside the actor when the actor still answers,
        otherwise replace the actor (which may then land on another node)."""
        self._check_open()
        ray = _ray()
        if not self._lost:
            try:
                ok, value = ray.get(self._actor.restart_env.remote(), timeout=self._timeout(self.settings.timeout_s))
                if ok:
                    self._fresh = False
                    return
                log.warning("restarting the env inside its actor failed (%s); replacing the actor", value)
            except Exception as exc:  # noqa: BLE001
                log.warning("the device actor did not restart its env (%s); replacing the actor", exc)
        self._kill()
        self._new_actor()
        try:
            ray.get(self._actor.ping.remote(), timeout=self._timeout(self.settings.timeout_s))
        except Exception as exc:
            self._lost = True
            raise EnvCrashed(f"a new device actor for {self.name!r} did not start: {type(exc).__name__}"
                             f"{self._capacity_hint()}") from exc
        self._fresh = False

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` of the env in the actor: the way to reach what a backend has beyond
        ``GuiEnv`` (``browser_pid``, ``process_ids``); errors are mapped as for ``reset``/``step``."""
        self._check_open()
        if self._lost:
            raise EnvCrashed(f"the device actor for {self.name!r} is gone; call restart()")
        ray = _ray()
        timeout = self._timeout(self.settings.timeout_s)
        try:
            ok, value = ray.get(self._actor.call.remote(method, *args), timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            self._lost = True
            raise EnvCrashed(f"the device actor for {self.name!r} did not answer {method}() within {timeout:.0f} s"
                             f"{self._capacity_hint() if self._fresh else ''}; call restart()") from exc
        except ray.exceptions.RayError as exc:  # the actor died (killed, node lost, OOM) or a result was lost
            self._lost = True
            raise EnvCrashed(f"the device actor for {self.name!r} died during {method}(): "
                             f"{type(exc).__name__}; call restart()") from exc
        self._fresh = False
        if not ok:
            raise value
        return value

    def ground_truth(self) -> dict[str, str]:
        """ORACLE-ONLY, as on the local env: for scripted oracles and tests, never for agents."""
        return self.call("ground_truth")

    @property
    def actor(self) -> Any:
        """The Ray actor handle (for tests and operators: ``ray.kill(env.actor)``)."""
        return self._actor

    def __enter__(self) -> RayEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ internals

    def _new_actor(self) -> None:
        self._actor = _remote_host().options(**self.settings.actor_options()).remote(self._factory, self.options)
        self._fresh, self._lost = True, False

    def _kill(self) -> None:
        if self._actor is None:
            return
        try:
            _ray().kill(self._actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - already gone
            log.debug("killing the device actor: %s", exc)
        self._actor = None

    def _timeout(self, seconds: float) -> float:
        return seconds + (self.settings.start_timeout_s if self._fresh else 0.0)

    def _capacity_hint(self) -> str:
        try:
            free = _ray().available_resources().get("CPU", 0.0)
        except Exception:  # noqa: BLE001 - a hint only
            return ""
        return (f" (a device asks for num_cpus={self.settings.num_cpus:g}"
                f"{f', resources={dict(self.settings.resources)}' if self.settings.resources else ''}; "
                f"the cluster has {free:g} CPU free: lower env.ray.num_cpus_per_env or add nodes)")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"this RayEnv ({self.name!r}) is closed; make a new one")


def resolve_factory(name: str) -> Callable[..., GuiEnv]:
    """The factory ``make_env(name, ...)`` would call, as an object to ship to an actor; a spec
    ``<backend>:<argument>`` binds the argument, as ``make_env`` does."""
    backend, sep, argument = name.partition(":")
    factory = ENVS.lookup(backend)
    return functools.partial(factory, argument) if sep else factory


def ray_env_factory(name: str, settings: RaySettings | None = None, **options: Any) -> Callable[[], RayEnv]:
    """A device factory for the env server's pool (or ``make_envs``): each call starts one actor."""
    resolve_factory(name)  # an unknown backend fails here, not at the first device
    settings = settings or RaySettings()

    def build() -> RayEnv:
        return RayEnv(name, options, settings)

    return build


def ray_executor(spec: str, settings: Mapping[str, Any] | None = None, **options: Any) -> Callable[[], RayEnv]:
    """The ``ray`` executor: ``settings`` is the ``env.ray`` section (``address``, ``num_cpus_per_env``,
    ``resources``, ``timeout_s`` …); each call of the factory starts one actor."""
    return ray_env_factory(spec, RaySettings.from_config(settings), **options)
