"""A conformance suite for env backends, like Gymnasium's ``check_env``: does this backend keep the
``GuiEnv`` protocol the rollout, the trainer and the env server rely on?

Run it on a backend, in this process or behind an executor::

    python -m admire.envs.check_env miniwob
    python -m admire.envs.check_env remote:http://127.0.0.1:8765
    python -m admire.envs.check_env miniwob --executor ray
    python -m admire.envs.check_env my_pkg.envs:MyEnv --task my/first-task    # any factory, by module:attr

It exits 0 with a one-line report when every check passes, 1 with one line per failed check, and 2 on
a usage error. In code, ``check_env(env, task)`` returns the ``CheckResult`` of each check (the caller
keeps an env it passes in open when ``close=False``, e.g. a test's shared browser).

What is checked, and why each matters:

* **protocol** — ``reset``/``step``/``close``/``healthy``/``restart`` exist (``isinstance(env, GuiEnv)``).
* **healthy** — ``healthy()`` answers a bool without raising: the pool probes devices with it.
* **reset** — an ``Observation`` with a non-empty goal, ``UIElement``s, ``step == 0``, that survives a
  JSON round trip (observations cross the wire and are stored in trajectories).
* **seeded reset** — the same task and seed give the same first screen: runs are reproducible.
* **step** — a ``StepResult`` with an ``Observation``, bool ``done``/``success``, a JSON-able ``info``;
  the observation's ``step`` counts the steps taken.
* **invalid action** — an element index that does not exist raises ``InvalidAction`` (a format error
  for the agent), not another exception, and leaves the env usable.
* **step budget** — a task with ``max_steps`` ends after that many steps with ``done=True``,
  ``success=False`` and ``info["termination"] == "max_steps"``.
* **step after the end** — stepping an ended episode is refused with ``RuntimeError``, not acted on.
* **agent stop** — the ``status`` action ends the episode without success.
* **restart** — ``restart()`` leaves a healthy env that can ``reset`` again.
* **close** — ``close()`` twice is fine, ``healthy()`` is then False, and ``reset`` afterwards is a
  ``RuntimeError`` that says the env is closed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from admire.envs.base import GuiEnv, InvalidAction, StepResult
from admire.errors import brief
from admire.types import Action, Observation, Task, UIElement

DEFAULT_TASK = "miniwob/click-test"
"""A task every MiniWoB-serving backend has (``miniwob``, ``remote``); other backends name theirs."""
WAIT = Action(action_type="wait")
STOP = Action(action_type="status", goal_status="infeasible")
NO_SUCH_ELEMENT = Action(action_type="click", index=10_000)


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False

    def line(self) -> str:
        return f"{self.name}: {self.detail}" if self.detail else self.name


class CheckFailed(AssertionError):
    """A check's expectation did not hold; its message is the one-line reason."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# --------------------------------------------------------------------------------------------------
# The checks: each takes the env and the task and raises CheckFailed (or anything) when it fails
# --------------------------------------------------------------------------------------------------

def check_protocol(env: Any, task: Task) -> None:
    missing = [m for m in ("reset", "step", "close", "healthy", "restart") if not callable(getattr(env, m, None))]
    _expect(not missing, f"missing method(s) {', '.join(missing)} of the GuiEnv protocol")
    _expect(isinstance(env, GuiEnv), "not an instance of the GuiEnv protocol")


def check_healthy(env: GuiEnv, task: Task) -> None:
    answer = env.healthy()
    _expect(isinstance(answer, bool), f"healthy() returned {answer!r}, not a bool")
    _expect(answer, "healthy() is False on a new env")


def check_reset(env: GuiEnv, task: Task) -> None:
    _check_observation(env.reset(task), "reset", step=0)


def check_seeded_reset(env: GuiEnv, task: Task) -> None:
    first, second = _screen(env.reset(task)), _screen(env.reset(task))
    _expect(first == second, f"two resets of {task.name} seed {task.seed} gave different first screens")


def check_step(env: GuiEnv, task: Task) -> None:
    env.reset(task)
    result = env.step(WAIT)
    _check_result(result, "step(wait)")
    if not result.done:
        _expect(result.observation.step == 1, f"the observation after one step has step={result.observation.step}, "
                                              "expected 1")


def check_invalid_action(env: GuiEnv, task: Task) -> None:
    env.reset(task)
    try:
        env.step(NO_SUCH_ELEMENT)
    except InvalidAction:
        pass
    except Exception as exc:  # noqa: BLE001 - the point of the check
        raise CheckFailed(f"a click on element 10000 raised {brief(exc)}, expected InvalidAction") from None
    else:
        raise CheckFailed("a click on element 10000 (there is none) was accepted, expected InvalidAction")
    _expect(env.healthy(), "the env is unhealthy after an invalid action")
    _check_result(env.step(WAIT), "step(wait) after an invalid action")


def check_step_budget(env: GuiEnv, task: Task) -> None:
    budget = 2
    env.reset(task.model_copy(update={"max_steps": budget}))
    results = [env.step(WAIT) for _ in range(budget)]
    _expect(not results[0].done, f"the episode ended after 1 of {budget} steps on 'wait'")
    last = results[-1]
    _expect(last.done and not last.success, f"after max_steps={budget} steps: done={last.done}, "
                                            f"success={last.success}; expected done and not success")
    termination = last.info.get("termination")
    _expect(termination == "max_steps", f"info['termination'] is {termination!r} when the step budget is spent, "
                                        "expected 'max_steps'")


def check_step_after_end(env: GuiEnv, task: Task) -> None:
    env.reset(task.model_copy(update={"max_steps": 1}))
    _expect(env.step(WAIT).done, "the episode did not end after max_steps=1")
    try:
        env.step(WAIT)
    except RuntimeError:
        return
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"a step after the episode ended raised {brief(exc)}, expected RuntimeError") from None
    raise CheckFailed("a step after the episode ended was accepted, expected RuntimeError")


def check_agent_stop(env: GuiEnv, task: Task) -> None:
    env.reset(task)
    result = env.step(STOP)
    _check_result(result, "step(status)")
    _expect(result.done and not result.success, f"the status action gave done={result.done}, "
                                                f"success={result.success}; expected done and not success")


def check_restart(env: GuiEnv, task: Task) -> None:
    env.reset(task)
    env.restart()
    _expect(env.healthy() is True, "healthy() is not True after restart()")
    _check_observation(env.reset(task), "reset after restart", step=0)


def check_close(env: GuiEnv, task: Task) -> None:
    env.close()
    try:
        env.close()
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"a second close() raised {brief(exc)}; close must be idempotent") from None
    _expect(env.healthy() is False, "healthy() is not False after close()")
    try:
        env.reset(task)
    except RuntimeError as exc:
        _expect("close" in str(exc).lower(), f"reset after close raised {brief(exc)}, which does not say "
                                             "the env is closed")
        return
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"reset after close raised {brief(exc)}, expected a RuntimeError saying it is closed") \
            from None
    raise CheckFailed("reset after close() was accepted, expected a RuntimeError saying the env is closed")


Check = Callable[[GuiEnv, Task], None]
CHECKS: tuple[tuple[str, Check], ...] = (
    ("protocol", check_protocol),
    ("healthy", check_healthy),
    ("reset", check_reset),
    ("seeded reset", check_seeded_reset),
    ("step", check_step),
    ("invalid action", check_invalid_action),
    ("step budget", check_step_budget),
    ("step after the end", check_step_after_end),
    ("agent stop", check_agent_stop),
    ("restart", check_restart),
    ("close", check_close),
)
"""In order: ``close`` is last because it ends the env."""


def _check_observation(observation: Any, where: str, step: int | None = None) -> None:
    _expect(isinstance(observation, Observation), f"{where} returned {type(observation).__name__}, not an Observation")
    _expect(isinstance(observation.goal, str) and observation.goal.strip() != "", f"{where}: the goal is empty")
    _expect(all(isinstance(e, UIElement) for e in observation.ui_elements), f"{where}: ui_elements are not UIElements")
    if step is not None:
        _expect(observation.step == step, f"{where}: observation.step is {observation.step}, expected {step}")
    try:
        again = Observation.model_validate_json(observation.model_dump_json())
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"{where}: the observation does not survive a JSON round trip ({brief(exc)})") from None
    _expect(_screen(again) == _screen(observation), f"{where}: the observation changes in a JSON round trip")


def _check_result(result: Any, where: str) -> None:
    _expect(isinstance(result, StepResult), f"{where} returned {type(result).__name__}, not a StepResult")
    _check_observation(result.observation, where)
    _expect(isinstance(result.done, bool) and isinstance(result.success, bool),
            f"{where}: done={result.done!r} and success={result.success!r} must be bools")
    _expect(not result.success or result.done, f"{where}: success without done")
    _expect(isinstance(result.info, dict), f"{where}: info is {type(result.info).__name__}, not a dict")
    try:
        json.dumps(result.info)
    except (TypeError, ValueError) as exc:
        raise CheckFailed(f"{where}: info is not JSON-serialisable ({brief(exc)})") from None


def _screen(observation: Observation) -> tuple[str, tuple[UIElement, ...]]:
    return observation.goal, observation.ui_elements


# --------------------------------------------------------------------------------------------------
# Running the suite
# --------------------------------------------------------------------------------------------------

def check_env(env: GuiEnv, task: Task, *, close: bool = True, skip: Sequence[str] = ()) -> list[CheckResult]:
    """Run every check on ``env`` with ``task`` (an episode of it must not end by itself on ``wait``).

    ``close=False`` leaves the env open (the ``close`` check is skipped): for an env the caller keeps
    using. ``skip`` names checks not to run. A check that raises fails with its one-line reason; the
    suite goes on, so one run reports every failure.
    """
    known = {name for name, _ in CHECKS}
    unknown = sorted(set(skip) - known)
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; checks: {', '.join(n for n, _ in CHECKS)}")
    results = []
    for name, check in CHECKS:
        if name in skip or (name == "close" and not close):
            results.append(CheckResult(name, ok=True, detail="skipped", skipped=True))
            continue
        try:
            check(env, task)
        except CheckFailed as exc:
            results.append(CheckResult(name, ok=False, detail=str(exc)))
        except Exception as exc:  # noqa: BLE001 - an unexpected exception is a failed check, not a crash
            results.append(CheckResult(name, ok=False, detail=f"raised {brief(exc)}"))
        else:
            results.append(CheckResult(name, ok=True))
    return results


def failures(results: Sequence[CheckResult]) -> list[CheckResult]:
    return [r for r in results if not r.ok]


def build_factory(spec: str, executor: str = "local", **options: Any) -> Callable[[], GuiEnv]:
    """A factory for ``spec``: a registered backend (``miniwob``, ``remote:<url>``) through ``executor``,
    or ``package.module:Factory`` for a backend that is not registered (always local)."""
    from admire.envs.base import ENVS
    from admire.envs.executors import env_factory

    backend = spec.partition(":")[0]
    if backend not in ENVS.names() and "." in backend:
        module, _, attr = spec.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return lambda: obj(**options)
    return env_factory(executor, spec, None, **options)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m admire.envs.check_env",
        description="Check that an env backend keeps the GuiEnv protocol (exit 0: all checks pass, 1: a check "
                    "failed, 2: a usage error).")
    parser.add_argument("backend", help="a registered backend ('miniwob', 'remote:http://host:8765') or a "
                                        "factory as 'package.module:attr'")
    parser.add_argument("--task", default=None, help=f"the task to run (default: {DEFAULT_TASK} for MiniWoB-serving "
                                                     "backends; needed for others)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--executor", default="local", help="where the env runs: local (default), ray, or a "
                                                            "plug-in's executor")
    parser.add_argument("--max-steps", type=int, default=10, help="the backend's own step budget (default 10)")
    parser.add_argument("--skip", action="append", default=[], metavar="CHECK",
                        help="a check not to run (repeatable): " + ", ".join(n for n, _ in CHECKS))
    args = parser.parse_args(argv)
    prog = parser.prog
    backend = args.backend.partition(":")[0]
    task_name = args.task or (DEFAULT_TASK if backend in ("miniwob", "remote") else None)
    try:
        if ":" not in args.backend or "." not in backend:  # a registered name: unknown ones say which exist
            from admire.envs.base import ENVS

            ENVS.lookup(backend)
        if task_name is None:
            raise ValueError(f"--task is needed for the backend {args.backend!r}, e.g. --task {backend}/<task>")
        from admire.envs.base import make_task

        task = make_task(task_name, seed=args.seed)
        options: dict[str, Any] = {"max_steps": args.max_steps} if "." not in backend else {}
        factory = build_factory(args.backend, args.executor, **options)
    except (ValueError, ImportError, AttributeError) as exc:
        print(f"{prog}: error: {brief(exc) if not isinstance(exc, ValueError) else exc}", file=sys.stderr)
        return 2
    try:
        env = factory()
    except (TypeError, ValueError) as exc:  # the spec's argument or options do not fit the factory
        print(f"{prog}: error: cannot build {args.backend!r}: {brief(exc)}", file=sys.stderr)
        return 2
    if not all(callable(getattr(env, method, None)) for method in ("reset", "step", "close")):
        print(f"{prog}: error: {args.backend!r} built a {type(env).__name__}, not an env (no reset/step/close); "
              "name a GuiEnv backend or factory", file=sys.stderr)
        return 2
    try:
        results = check_env(env, task, skip=args.skip)
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        with contextlib.suppress(Exception):  # the close check has reported a close that fails
            env.close()
    failed = failures(results)
    where = f"{args.backend}" + (f" ({args.executor} executor)" if args.executor != "local" else "")
    for result in failed:
        print(f"{prog} {where}: FAIL {result.line()}", file=sys.stderr)
    ran = [r for r in results if not r.skipped]
    if failed:
        print(f"{prog} {where}: {len(failed)} of {len(ran)} checks failed", file=sys.stderr)
        return 1
    skipped = [r.name for r in results if r.skipped]
    print(f"{prog} {where}: all {len(ran)} checks passed on {task.name} seed {task.seed}"
          + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
