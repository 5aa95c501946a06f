"""The ``check_env`` conformance suite: it passes on every backend we ship (the test fake, real MiniWoB++,
the remote backend over an in-process server; the Ray executor in tests/envs/test_ray_executor.py) and fails,
one line per broken promise, on a fake that breaks the protocol."""

from __future__ import annotations

import pytest

from admire.envs.base import StepResult
from admire.envs.check_env import CHECKS, check_env, failures, main
from admire.envs.remote import RemoteEnv
from admire.server.app import create_app
from admire.types import Action, Observation, Task
from tests.support.fakes import FormEnv
from tests.support.server_helpers import form_task, make_pool, running_server

FORM = Task(name="fake/form", seed=0, params={"name": "ann"})
ALL_CHECKS = [name for name, _ in CHECKS]


def passed(results) -> list[str]:
    return [r.name for r in results if r.ok and not r.skipped]


class BrokenEnv(FormEnv):
    """Breaks four promises: an unknown index is an IndexError, the step budget is ignored, a second
    close raises, and a closed env still resets."""

    def reset(self, task: Task) -> Observation:
        self.closed = False  # "reopens" silently instead of refusing
        return super().reset(task.model_copy(update={"max_steps": None}))

    def _step(self, action: Action) -> StepResult:
        if action.index is not None and action.index > 1:
            raise IndexError("list index out of range")
        return super()._step(action)

    def close(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        super().close()


def test_the_test_fake_passes_every_check() -> None:
    env = FormEnv()
    results = check_env(env, FORM)
    assert failures(results) == [] and passed(results) == ALL_CHECKS
    assert env.closed  # the suite ends by closing the env it was given


def test_a_broken_fake_fails_exactly_the_checks_it_breaks() -> None:
    results = check_env(BrokenEnv(), FORM)
    failed = {r.name: r.detail for r in failures(results)}
    assert set(failed) == {"invalid action", "step budget", "step after the end", "close"}
    assert failed["invalid action"].startswith("a click on element 10000 raised IndexError")
    assert "expected 'max_steps'" in failed["step budget"] or "done=False" in failed["step budget"]
    assert "idempotent" in failed["close"]
    assert all("\n" not in detail for detail in failed.values())


def test_close_false_keeps_the_env_open_and_skip_skips() -> None:
    env = FormEnv()
    results = check_env(env, FORM, close=False, skip=["agent stop"])
    assert not env.closed and env.healthy()
    assert {r.name for r in results if r.skipped} == {"close", "agent stop"} and failures(results) == []
    with pytest.raises(ValueError, match="unknown check"):
        check_env(env, FORM, skip=["nope"])


def test_the_command_exits_0_on_a_conforming_backend_1_on_a_broken_one_and_2_on_usage_errors(capsys) -> None:
    assert main(["tests.support.fakes:FormEnv", "--task", "fake/form"]) == 0
    out, err = capsys.readouterr()
    assert f"all {len(ALL_CHECKS)} checks passed on fake/form seed 0" in out and err == ""

    assert main(["tests.envs.test_check_env:BrokenEnv", "--task", "fake/form"]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 5 and lines[-1].endswith(f"4 of {len(ALL_CHECKS)} checks failed")
    assert any("FAIL invalid action: a click on element 10000 raised IndexError" in line for line in lines)

    assert main(["no-such-backend", "--task", "x/y"]) == 2
    assert "unknown environment backend 'no-such-backend'" in capsys.readouterr().err
    assert main(["no-such-backend"]) == 2  # an unknown name is named before the missing task
    assert "unknown environment backend 'no-such-backend'" in capsys.readouterr().err
    assert main(["tests.support.fakes:FormEnv"]) == 2
    assert "--task is needed" in capsys.readouterr().err
    assert main(["miniwob", "--executor", "k8s"]) == 2
    assert "env.executor must be 'local' or 'ray', got 'k8s'" in capsys.readouterr().err


def test_a_spec_the_factory_cannot_take_or_a_factory_that_builds_no_env_is_one_line_exit_2(capsys) -> None:
    # A registered backend given an argument it takes none for: its constructor's TypeError, in one line.
    assert main(["miniwob:extra"]) == 2  # MiniWoBEnv takes no argument after ':' (no browser starts)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot build 'miniwob:extra': TypeError" in err
    assert main(["os.path:join", "--task", "os.path/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot build 'os.path:join': TypeError" in err
    assert main(["os.path:sep.upper", "--task", "os.path/x"]) == 2  # builds a str
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'os.path:sep.upper' built a str, not an env" in err


def test_the_remote_backend_passes_over_an_in_process_server() -> None:
    with make_pool(FormEnv, num_devices=1, lease_wait_s=5.0) as pool, running_server(create_app(pool)) as url:
        env = RemoteEnv(url, backoff_s=0.01, max_backoff_s=0.05)
        results = check_env(env, form_task(seed=2))
        assert failures(results) == [] and passed(results) == ALL_CHECKS
        assert main([f"remote:{url}", "--task", "fake/form"]) == 0


@pytest.mark.browser
def test_real_miniwob_passes_on_the_shared_browser(miniwob_env) -> None:
    results = check_env(miniwob_env, Task(name="miniwob/click-test", seed=5), close=False)
    assert failures(results) == [], [r.line() for r in failures(results)]
    assert passed(results) == [name for name in ALL_CHECKS if name != "close"]
    assert miniwob_env.healthy()


@pytest.mark.browser
def test_a_new_miniwob_env_passes_every_check_including_close() -> None:
    from admire.envs.miniwob import MiniWoBEnv

    env = MiniWoBEnv(max_steps=5)
    try:
        results = check_env(env, Task(name="miniwob/click-test", seed=1), skip=["seeded reset", "agent stop"])
    finally:
        env.close()
    assert failures(results) == [], [r.line() for r in failures(results)]
    assert env.process_ids() == {}  # close left no browser behind
