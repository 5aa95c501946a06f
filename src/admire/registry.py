"""Name → factory registries for what users extend, in one plug-in style.

ADMIRE has seven: environment backends (``admire.envs.base.ENVS``), device pools of backends whose every
env needs a device of its own (``admire.envs.base.DEVICE_POOLS``), policies (``admire.agent.base.POLICIES``),
milestone generators (``admire.milestones.generator.GENERATORS``), advantage estimators
(``admire.rl.advantages.ADVANTAGE_ESTIMATORS``), env executors (``admire.envs.executors.EXECUTORS``) and
preparable local models (``admire.models.MODELS``). Each is a
``Registry``, and each entry arrives one of three ways:

1. **Declared as a string** beside the protocol, as Gymnasium's ``register(id, entry_point="pkg.mod:Cls")``
   does. The built-ins are declared so (``"miniwob": "admire.envs.miniwob:MiniWoBEnv"``), which is why a
   protocol module (``envs/base.py``, ``agent/base.py``) imports no implementation: the string is
   resolved — the module imported, the attribute read — only when the name is looked up.
2. **A package entry point**, for third-party plug-ins: an installed distribution names its object in
   one of the groups below, and ADMIRE finds it on the first ``lookup``/``names()`` of that registry,
   without the user importing anything.
3. **The decorator**, ``@REGISTRY.register("name")`` (or ``register_env``, ``register_policy``,
   ``register_generator``, ``register_advantage``), for code that is imported anyway: a test, a notebook,
   a script.

A name is taken once: registering a different object under a taken name is an error, re-registering the
same one is harmless (a decorator on the object a string declares counts as the same). An unknown name
lists the known ones; a plug-in that fails to load is one line naming the plug-in, its ``module:attr``
and the error (``PluginError``), not a traceback, and it does not stop the other names from working.

Adding a backend, a policy, an estimator … from another package (what CONTRIBUTING.md points to)
---------------------------------------------------------------------------------------------------
Write the object against the protocol (``admire.envs.base.GuiEnv``, ``admire.agent.base.Policy``,
``admire.milestones.generator.MilestoneGenerator``, an estimator ``f(samples, **options) ->
AdvantageResult`` of ``admire.rl.advantages``, an executor ``f(spec, settings, **options) -> factory`` of
``admire.envs.executors``), then name it in your ``pyproject.toml``::

    [project.entry-points."admire.envs"]
    android = "my_pkg.android:AndroidEnv"          # make_env("android"), env.src=[android]

    [project.entry-points."admire.policies"]
    my-vlm = "my_pkg.policy:build_vlm_policy"      # actor_rollout_ref.model.name=my-vlm

    [project.entry-points."admire.generators"]
    rules = "my_pkg.milestones:RuleGenerator"      # milestone_reward.generator=rules

    [project.entry-points."admire.advantages"]
    outcome_sign = "my_pkg.adv:outcome_sign"       # algorithm.adv_estimator=outcome_sign

    [project.entry-points."admire.device_pools"]
    my-phones = "my_pkg.phones:phone_pool"          # env.src=[my-phones]: each env on the next free phone

    [project.entry-points."admire.executors"]
    k8s = "my_pkg.k8s:k8s_executor"                # env.executor=k8s

    [project.entry-points."admire.models"]
    my-tiny = "my_pkg.models:TINY_RECIPE"          # admire models prepare my-tiny DIR (a ModelRecipe)

After ``pip install -e .`` of your package the name is usable in configs and on the command line;
``python -m admire.envs.check_env android`` checks a new backend against the protocol. Within ADMIRE
itself, a built-in is one line in the ``builtins`` of its registry (a ``module:attr`` string), never an
import in the protocol module.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TypeVar

from admire.errors import brief

T = TypeVar("T")
F = TypeVar("F")

log = logging.getLogger("admire.registry")


class PluginError(ValueError):
    """A registered ``module:attr`` could not be loaded (its module or one of its imports is missing,
    the attribute is absent, or importing it raised). The message is one line and names the plug-in."""


@dataclass(frozen=True)
class _Declared:
    """An entry not yet imported: where it lives and who declared it (for the error message)."""

    target: str
    origin: str


def _check_target(target: str) -> str:
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"a plug-in is named as 'package.module:attribute', got {target!r}")
    return target


def _where(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', '?')}"


class Registry(MutableMapping[str, T]):
    """One kind of plug-in: ``kind`` names it in messages, ``group`` is its entry-point group, and
    ``builtins`` maps names to the ``module:attr`` of the objects ADMIRE ships."""

    def __init__(self, kind: str, *, group: str | None = None, builtins: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, T | _Declared] = {}
        self._plugins_loaded = group is None
        for name, target in (builtins or {}).items():
            self.declare(name, target, origin="built-in")

    # ------------------------------------------------------------------------------ registering

    def declare(self, name: str, target: str, *, origin: str = "declared") -> None:
        """Register ``module:attr`` under ``name`` without importing it (it is imported on lookup)."""
        declared = _Declared(_check_target(target), origin)
        existing = self._entries.get(name)
        if existing is None:
            self._entries[name] = declared
        elif not self._same(existing, declared.target):
            raise ValueError(f"a {self.kind} named {name!r} is already registered ({self._show(existing)}); "
                             "pick another name")

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@REGISTRY.register("name")`` on a class or factory function."""

        def decorator(obj: F) -> F:
            existing = self._entries.get(name)
            if existing is not None and existing is not obj and not self._same(existing, _where(obj)):
                raise ValueError(f"a {self.kind} named {name!r} is already registered ({self._show(existing)}); "
                                 "pick another name")
            self._entries[name] = obj  # type: ignore[assignment]
            return obj

        return decorator

    # -------------------------------------------------------------------------------- looking up

    def lookup(self, name: str) -> T:
        """The entry for ``name``, imported if it was declared as a string; an unknown name lists the
        known ones, a plug-in that cannot be loaded is a ``PluginError``."""
        if name not in self._entries:
            self._load_plugins()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {', '.join(self.names()) or 'none'}")
        return self[name]

    def names(self) -> list[str]:
        """Every registered name, plug-ins included; nothing is imported."""
        self._load_plugins()
        return sorted(self._entries)

    def target(self, name: str) -> str:
        """Where ``name`` lives (``module:attr``), without importing it: for listings and messages."""
        entry = self._entries[name]
        return entry.target if isinstance(entry, _Declared) else _where(entry)

    # -------------------------------------------------------------------- the mapping interface

    @property
    def entries(self) -> MutableMapping[str, object]:
        """The raw entries, for swapping one in and out of a test (``monkeypatch.setitem(ENVS.entries, "miniwob",
        FakeEnv)``): the one way to replace a taken name, undone as monkeypatch undoes it."""
        return self._entries

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, _Declared):
            entry = self._resolve(name, entry)
            self._entries[name] = entry
        return entry

    def __setitem__(self, name: str, value: T) -> None:
        """``REGISTRY[name] = obj`` registers as the decorator does: a taken name with another object is refused."""
        self.register(name)(value)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries  # never imports: a broken plug-in is still a known name

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={sorted(self._entries)})"

    # ------------------------------------------------------------------------------- internals

    def _resolve(self, name: str, declared: _Declared) -> T:
        module_name, _, attr = declared.target.partition(":")
        try:
            obj: object = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - any failure of a plug-in's import is reported as one line
            raise PluginError(f"{self.kind} {name!r} ({declared.origin}, {declared.target}) cannot be loaded: "
                              f"{brief(exc)}") from None
        return obj  # type: ignore[return-value]

    def _load_plugins(self) -> None:
        """Add the entry points of ``group`` (once); names already taken keep their entry."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        try:
            found = entry_points(group=self.group)
        except Exception as exc:  # noqa: BLE001 - broken metadata of some distribution must not break lookups
            log.warning("could not read the %s entry points: %s", self.group, exc)
            return
        for point in found:
            dist = getattr(getattr(point, "dist", None), "name", None) or "an installed package"
            origin = f"plug-in from {dist}"
            try:
                self.declare(point.name, point.value, origin=origin)
            except ValueError as exc:
                log.warning("ignoring the %s entry point %r of %s: %s", self.group, point.name, dist, exc)

    @staticmethod
    def _same(existing: object, target: str) -> bool:
        if isinstance(existing, _Declared):
            return existing.target == target
        return _where(existing) == target

    @staticmethod
    def _show(entry: object) -> str:
        return entry.target if isinstance(entry, _Declared) else _where(entry)
