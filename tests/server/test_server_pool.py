"""The device pool on fake devices: leasing, growth, TTL reclaim, the concurrency limit, restarts,
quarantine, episode records and metrics."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from admire.envs.base import make_task
from admire.server import metrics
from admire.server.deadline import CallTimedOut, DeviceWorker
from admire.server.errors import (
    DeviceFailed,
    EpisodeOver,
    NoCapacity,
    RequestIdReused,
    SessionExpired,
    StepOutOfOrder,
    TaskRejected,
    UnknownSession,
)
from admire.server.pool import PoolConfig
from admire.server.views import DeviceView, EpisodeView
from admire.types import Action
from tests.support.fakes import FormEnv
from tests.support.server_helpers import (
    SOLVE_ANN,
    FakeClock,
    Gate,
    GatedEnv,
    HangingEnv,
    RecordingFactory,
    SickEnv,
    TaskCheckingEnv,
    WithoutRestart,
    form_task,
    make_pool,
)

TYPE_ANN = SOLVE_ANN[0]
SUBMIT = SOLVE_ANN[1]


def solve(pool, session_id: str) -> None:
    for seq, action in enumerate(SOLVE_ANN):
        result = pool.step(session_id, action, seq=seq)
    assert result.done and result.success


def test_a_session_leases_a_device_and_closing_returns_it() -> None:
    with make_pool() as pool:
        start = pool.create_session(form_task())
        (device,) = pool.devices()
        assert (device.state, device.session_id, device.task) == ("leased", start.session_id, "fake/form")
        assert start.observation.goal == 'Enter "ann" and press Submit.'
        assert pool.close_session(start.session_id) == "abandoned"
        (device,) = pool.devices()
        assert (device.state, device.session_id, device.task) == ("idle", None, None)
        with pytest.raises(UnknownSession, match="unknown session"):
            pool.step(start.session_id, TYPE_ANN)


def test_a_finished_episode_returns_its_device_at_once() -> None:
    with make_pool() as pool:
        start = pool.create_session(form_task())
        solve(pool, start.session_id)
        assert pool.devices()[0].state == "idle"
        with pytest.raises(EpisodeOver, match="over \\(success\\)"):
            pool.step(start.session_id, SUBMIT)
        assert pool.close_session(start.session_id) == "success"


def test_the_pool_grows_on_demand_up_to_max_devices_then_refuses() -> None:
    factory = RecordingFactory()
    with make_pool(factory, num_devices=1, max_devices=3) as pool:
        assert len(factory.envs) == 1
        sessions = [pool.create_session(form_task(seed=i)) for i in range(3)]
        assert len(factory.envs) == 3
        assert sorted(s.device_id for s in sessions) == [0, 1, 2]
        with pytest.raises(NoCapacity, match="all 3 device\\(s\\) are busy"):
            pool.create_session(form_task())
        pool.close_session(sessions[1].session_id)
        assert pool.create_session(form_task()).device_id == 1  # reused, not grown
        assert len(factory.envs) == 3


def test_a_new_session_waits_for_a_device_that_frees_up() -> None:
    with make_pool(lease_wait_s=30.0) as pool:
        first = pool.create_session(form_task())
        waiting = ThreadPoolExecutor(1).submit(pool.create_session, form_task(seed=1))
        pool.close_session(first.session_id)
        assert waiting.result(timeout=30).device_id == 0


def test_an_idle_session_is_reclaimed_after_lease_ttl_and_recorded_abandoned() -> None:
    clock = FakeClock()
    with make_pool(clock=clock, lease_ttl_s=300.0) as pool:
        kept = pool.create_session(form_task(seed=1))
        clock.now += 200
        pool.step(kept.session_id, TYPE_ANN, seq=0)  # activity renews the lease
        clock.now += 250
        assert pool.reclaim_expired() == []
        clock.now += 100
        assert pool.reclaim_expired() == [kept.session_id]
        assert pool.devices()[0].state == "idle"
        (episode,) = pool.recent_episodes()
        assert (episode.outcome, episode.steps) == ("abandoned", 1)
        with pytest.raises(SessionExpired, match="expired after 300 s"):
            pool.step(kept.session_id, SUBMIT, seq=1)
        assert pool.stats().counters["leases_reclaimed"] == 1


def test_the_concurrency_limit_bounds_simultaneous_steps() -> None:
    gate = Gate()
    with make_pool(lambda: GatedEnv(gate), num_devices=2, concurrency_limit=1, queue_wait_s=0.2) as pool:
        a, b = (pool.create_session(form_task(seed=i)) for i in range(2))
        with ThreadPoolExecutor(1) as executor:
            held = executor.submit(pool.step, a.session_id, TYPE_ANN, 0)
            assert gate.entered.acquire(timeout=30)  # a's step is inside its device, holding the only slot
            with pytest.raises(NoCapacity, match="1 step\\(s\\) already running"):
                pool.step(b.session_id, TYPE_ANN, seq=0)
            gate.open.set()
            assert not held.result(timeout=30).done
        assert not pool.step(b.session_id, TYPE_ANN, seq=0).done  # refused before acting: seq 0 is still next
        assert gate.max_active == 1
        stats = pool.stats()
        assert stats.latency["queue_wait"].count == 4  # two resets, two steps that got a slot
        assert stats.counters["no_capacity"] == 1


def test_steps_on_different_devices_run_at_once_up_to_the_limit() -> None:
    gate = Gate()
    with make_pool(lambda: GatedEnv(gate), num_devices=2, concurrency_limit=2) as pool:
        a, b = (pool.create_session(form_task(seed=i)) for i in range(2))
        with ThreadPoolExecutor(2) as executor:
            futures = [executor.submit(pool.step, s.session_id, TYPE_ANN, 0) for s in (a, b)]
            assert gate.entered.acquire(timeout=30) and gate.entered.acquire(timeout=30)
            assert gate.active == 2
            assert {d.state for d in pool.devices()} == {"stepping"}
            gate.open.set()
            for future in futures:
                future.result(timeout=30)
        assert gate.max_active == 2


def test_a_crashed_device_is_restarted_and_serves_the_next_session() -> None:
    factory = RecordingFactory(lambda: FormEnv(crash_on_step=1))
    with make_pool(factory) as pool:
        start = pool.create_session(form_task())
        pool.step(start.session_id, TYPE_ANN, seq=0)
        with pytest.raises(DeviceFailed, match=r"device 0 crashed .*the fake browser died"):
            pool.step(start.session_id, SUBMIT, seq=1)
        assert pool.settle(30)
        (device,) = pool.devices()
        assert (device.state, device.restarts, device.failures) == ("idle", 1, 1)
        assert factory.envs[0].restarts == 1 and len(factory.envs) == 1  # restart(), not a new env
        solve(pool, pool.create_session(form_task(seed=1)).session_id)
        assert pool.devices()[0].failures == 0  # a successful step clears the count
        outcomes = [e.outcome for e in pool.recent_episodes()]
        assert outcomes == ["success", "env_error"]


def test_a_device_without_restart_is_closed_and_replaced() -> None:
    factory = RecordingFactory(lambda: WithoutRestart(crash_on_step=0))
    with make_pool(factory) as pool:
        start = pool.create_session(form_task())
        with pytest.raises(DeviceFailed):
            pool.step(start.session_id, TYPE_ANN, seq=0)
        assert pool.settle(30)
        assert len(factory.envs) == 2 and factory.envs[0].inner.closed and not factory.envs[1].inner.closed
        assert pool.devices()[0].state == "idle"


def test_with_restart_off_a_crashed_device_is_quarantined() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=0), crashed_device_restart=False) as pool:
        start = pool.create_session(form_task())
        with pytest.raises(DeviceFailed):
            pool.step(start.session_id, TYPE_ANN, seq=0)
        assert pool.devices()[0].state == "quarantined"
        with pytest.raises(NoCapacity, match="every device is quarantined"):
            pool.create_session(form_task())


def test_a_device_that_keeps_crashing_is_quarantined_and_closed() -> None:
    factory = RecordingFactory(lambda: FormEnv(crash_on_step=0, crash_times=100))
    with make_pool(factory, max_consecutive_failures=3, lease_wait_s=30.0) as pool:
        for attempt in range(3):
            session = pool.create_session(form_task(seed=attempt))  # waits for the restart to finish
            with pytest.raises(DeviceFailed):
                pool.step(session.session_id, TYPE_ANN, seq=0)
        assert pool.settle(30)
        (device,) = pool.devices()
        assert (device.state, device.failures, device.restarts) == ("quarantined", 3, 2)
        assert factory.envs[0].closed
        with pytest.raises(NoCapacity, match="quarantined"):
            pool.create_session(form_task())
        stats = pool.stats()
        assert stats.counters["quarantines"] == 1 and stats.episodes["env_error"] == 3


def test_a_hung_step_times_out_and_the_env_is_replaced() -> None:
    release = threading.Event()
    factory = RecordingFactory(lambda: HangingEnv(release))
    try:
        with make_pool(factory, call_timeout_s=0.3) as pool:
            start = pool.create_session(form_task())
            with pytest.raises(DeviceFailed, match="took longer than"):
                pool.step(start.session_id, TYPE_ANN, seq=0)
            assert pool.settle(30)
            assert len(factory.envs) == 2 and factory.envs[0].closed  # the hung env is not reused
            assert pool.devices()[0].state == "idle"
            assert pool.stats().counters["timeouts"] == 1
    finally:
        release.set()


class HeldRestartEnv(SickEnv):
    """A sick env whose restart waits for the test: otherwise a fast restart can make device 0 idle (and
    healthy) again before the lease looks at device 1, and leasing it then would be right."""

    def __init__(self) -> None:
        super().__init__()
        self.may_restart = threading.Event()

    def restart(self) -> None:
        self.may_restart.wait(30)
        super().restart()


def test_an_unhealthy_device_is_not_leased_but_restarted() -> None:
    factory = RecordingFactory(HeldRestartEnv)
    with make_pool(factory, num_devices=2) as pool:
        factory.envs[0].sick_checks = 1
        start = pool.create_session(form_task())
        assert start.device_id == 1
        factory.envs[0].may_restart.set()
        assert pool.settle(30)
        assert (pool.devices()[0].state, pool.devices()[0].restarts) == ("idle", 1)
        assert factory.envs[0].restarts == 1
        assert pool.stats().counters["health_check_failures"] == 1


def test_a_device_unhealthy_on_return_is_restarted() -> None:
    factory = RecordingFactory(SickEnv)
    with make_pool(factory) as pool:
        start = pool.create_session(form_task())
        factory.envs[0].sick_checks = 1
        pool.close_session(start.session_id)
        assert pool.settle(30)
        assert (pool.devices()[0].state, pool.devices()[0].restarts) == ("idle", 1)


def test_a_task_of_another_backend_or_unknown_to_the_device_is_rejected_and_costs_nothing() -> None:
    with make_pool(TaskCheckingEnv) as pool:
        with pytest.raises(TaskRejected, match="runs 'fake' tasks"):
            pool.create_session(make_task("miniwob/login-user"))
        with pytest.raises(TaskRejected, match="unknown task 'unknown'"):
            pool.create_session(make_task("fake/unknown"))
        (device,) = pool.devices()
        assert (device.state, device.failures) == ("idle", 0)
        assert pool.recent_episodes() == []


def test_an_invalid_action_leaves_the_episode_running() -> None:
    with make_pool() as pool:
        start = pool.create_session(form_task())
        with pytest.raises(ValueError, match="out of range"):
            pool.step(start.session_id, Action(action_type="click", index=7), seq=0)
        solve(pool, start.session_id)  # seq 0 is still the next step
        assert pool.stats().counters["invalid_actions"] == 1


def test_a_repeated_seq_replays_the_reply_instead_of_stepping_twice() -> None:
    factory = RecordingFactory()
    with make_pool(factory) as pool:
        start = pool.create_session(form_task())
        first = pool.step(start.session_id, TYPE_ANN, seq=0)
        again = pool.step(start.session_id, TYPE_ANN, seq=0)
        assert again == first and factory.envs[0]._steps == 1
        with pytest.raises(StepOutOfOrder, match="next seq is 1") as refused:
            pool.step(start.session_id, SUBMIT, seq=5)
        assert refused.value.expected == 1
        assert pool.step(start.session_id, SUBMIT, seq=1).success
        assert pool.stats().counters["step_replays"] == 1


def test_a_repeated_seq_after_a_crash_replays_the_crash() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=0)) as pool:
        start = pool.create_session(form_task())
        with pytest.raises(DeviceFailed) as first:
            pool.step(start.session_id, TYPE_ANN, seq=0)
        with pytest.raises(DeviceFailed) as again:
            pool.step(start.session_id, TYPE_ANN, seq=0)
        assert again.value is first.value
        assert pool.stats().episodes["env_error"] == 1


def test_a_repeated_request_id_returns_the_same_session() -> None:
    with make_pool(num_devices=1, max_devices=2) as pool:
        first = pool.create_session(form_task(), request_id="abc")
        again = pool.create_session(form_task(), request_id="abc")
        assert again.session_id == first.session_id
        assert [d.state for d in pool.devices()] == ["leased"]


class SlowResetEnv(FormEnv):
    """A reset that waits for ``go``: holds a session's creation in flight."""

    def __init__(self, started: threading.Semaphore, go: threading.Event) -> None:
        super().__init__()
        self.started, self.go = started, go

    def reset(self, task):
        self.started.release()
        self.go.wait(30)
        return super().reset(task)


def test_one_request_id_sent_twice_at_once_leases_one_device() -> None:
    started, go = threading.Semaphore(0), threading.Event()
    with make_pool(lambda: SlowResetEnv(started, go), num_devices=2, max_devices=2) as pool, \
            ThreadPoolExecutor(2) as workers:
        first = workers.submit(pool.create_session, form_task(), request_id="same", owner="client-0001")
        assert started.acquire(timeout=10)  # the first creation is resetting its device
        second = workers.submit(pool.create_session, form_task(), request_id="same", owner="client-0001")
        assert not started.acquire(timeout=0.5)  # the second waits instead of leasing another device
        go.set()
        assert first.result(10).session_id == second.result(10).session_id
        assert sorted(d.state for d in pool.devices()) == ["idle", "leased"]


def test_every_episode_is_recorded_once_with_its_outcome() -> None:
    factory = RecordingFactory()
    factory.make = lambda: FormEnv(crash_on_step=1 if len(factory.envs) == 2 else None)  # device 2 crashes
    with make_pool(factory, num_devices=1, max_devices=4) as pool:
        won = pool.create_session(form_task(seed=1))
        pool.step(won.session_id, TYPE_ANN, seq=0)
        lost = pool.create_session(form_task(seed=2, name="bob"))
        pool.step(lost.session_id, TYPE_ANN, seq=0)
        crashed = pool.create_session(form_task(seed=3))
        pool.step(crashed.session_id, TYPE_ANN, seq=0)
        left = pool.create_session(form_task(seed=4))
        assert pool.step(lost.session_id, SUBMIT, seq=1).success is False  # typed ann, wanted bob
        with pytest.raises(DeviceFailed):
            pool.step(crashed.session_id, SUBMIT, seq=1)
        pool.close_session(left.session_id)
        pool.close_session(lost.session_id)  # closing a finished session changes nothing
        episodes = {e.session_id: e for e in pool.recent_episodes()}
        assert all(isinstance(e, EpisodeView) for e in episodes.values())
        assert {sid: e.outcome for sid, e in episodes.items()} == {
            won.session_id: "running", lost.session_id: "failure",
            crashed.session_id: "env_error", left.session_id: "abandoned"}
        assert episodes[lost.session_id].finished_at is not None and episodes[won.session_id].finished_at is None
        assert pool.stats().episodes == {"success": 0, "failure": 1, "env_error": 1, "abandoned": 1}
        assert pool.stats().sessions_active == 1
        assert [e.session_id for e in pool.recent_episodes(limit=2)] == [left.session_id, crashed.session_id]


def test_devices_are_reported_as_the_dashboard_views() -> None:
    with make_pool(num_devices=2) as pool:
        views = pool.devices()
        assert all(isinstance(v, DeviceView) for v in views)
        assert [v.id for v in views] == [0, 1] and {v.state for v in views} == {"idle"}


def test_concurrent_sessions_lose_and_double_count_nothing() -> None:
    with make_pool(num_devices=2, max_devices=4, lease_wait_s=30.0) as pool:

        def play(i: int) -> str:
            start = pool.create_session(form_task(seed=i))
            if i % 3 == 0:
                return pool.close_session(start.session_id)
            solve(pool, start.session_id)
            return "success"

        with ThreadPoolExecutor(8) as executor:
            outcomes = list(executor.map(play, range(60)))
        stats = pool.stats()
        assert stats.episodes["success"] == outcomes.count("success") == 40
        assert stats.episodes["abandoned"] == outcomes.count("abandoned") == 20
        assert stats.counters["leases"] == 60 and stats.counters["steps"] == 80
        assert {d.state for d in pool.devices()} == {"idle"}


def test_metrics_render_the_counters_in_prometheus_text() -> None:
    with make_pool(lambda: FormEnv(crash_on_step=1), lease_wait_s=30.0) as pool:
        crashed = pool.create_session(form_task())
        pool.step(crashed.session_id, TYPE_ANN, seq=0)
        with pytest.raises(DeviceFailed):
            pool.step(crashed.session_id, SUBMIT, seq=1)  # the fake crashes once, on its second step
        solve(pool, pool.create_session(form_task(seed=1)).session_id)
        pool.close()
        text = metrics.render(pool.stats())
    lines = text.splitlines()
    assert "admire_leases_total 2.0" in lines
    assert "admire_device_restarts_total 1.0" in lines
    assert 'admire_episodes_total{outcome="env_error"} 1.0' in lines
    assert 'admire_devices{state="stopped"} 1.0' in lines
    assert "admire_steps_total 3.0" in lines and "admire_step_latency_seconds_count 3.0" in lines
    assert 'admire_step_latency_seconds_bucket{le="+Inf"} 3.0' in lines
    assert "# TYPE admire_step_latency_seconds histogram" in lines
    assert "# TYPE admire_queue_wait_seconds histogram" in lines


def test_state_changes_are_logged_on_the_admire_server_logger(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="admire.server"), make_pool(lambda: FormEnv(crash_on_step=0)) as pool:
        start = pool.create_session(form_task())
        with pytest.raises(DeviceFailed):
            pool.step(start.session_id, TYPE_ANN, seq=0)
        pool.settle(30)
    messages = [r.getMessage() for r in caplog.records if r.name == "admire.server"]
    for expected in ("device 0: idle -> leased", "device 0: stepping -> restarting", "device 0: restarting -> idle",
                     "ended after 0 step(s): env_error", "device 0: idle -> stopped (pool closed)"):
        assert any(expected in m for m in messages), expected


def test_bad_pool_configs_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="max_devices"):
        PoolConfig(num_devices=4, max_devices=2)
    with pytest.raises(ValueError, match="concurrency_limit"):
        PoolConfig(concurrency_limit=0)
    with pytest.raises(ValueError, match="lease_ttl_s"):
        PoolConfig(lease_ttl_s=0)


def test_a_device_worker_runs_calls_on_one_thread_and_hands_back_results_and_errors() -> None:
    worker = DeviceWorker("device-test")
    try:
        threads = {worker.call(lambda: threading.get_ident(), 5, "step") for _ in range(3)}
        assert len(threads) == 1 and threading.get_ident() not in threads
        with pytest.raises(ValueError, match="bad action"):
            worker.call(lambda: (_ for _ in ()).throw(ValueError("bad action")), 5, "step")
        assert worker.call(lambda: threading.get_ident(), 5, "step") in threads  # an error does not cost the thread
    finally:
        worker.close()


def test_a_device_worker_leaves_a_hung_call_behind_and_serves_the_next_on_a_new_thread() -> None:
    worker = DeviceWorker("device-test")
    release = threading.Event()
    try:
        first = worker.call(lambda: threading.get_ident(), 5, "step")
        with pytest.raises(CallTimedOut, match="device-test-step did not return"):
            worker.call(lambda: release.wait(30), 0.2, "step")
        second = worker.call(lambda: threading.get_ident(), 5, "health")
        assert second != first
    finally:
        release.set()
        worker.close()


def test_a_call_made_while_the_worker_is_busy_gets_a_thread_of_its_own() -> None:
    worker = DeviceWorker("device-test")
    inside, release = threading.Event(), threading.Event()

    def slow() -> int:
        inside.set()
        release.wait(30)
        return threading.get_ident()

    try:
        with ThreadPoolExecutor(1) as executor:
            busy = executor.submit(worker.call, slow, 30, "step")
            assert inside.wait(10)
            other = worker.call(lambda: threading.get_ident(), 5, "close")  # does not wait for the slow call
            release.set()
            assert busy.result(10) != other
    finally:
        release.set()
        worker.close()


def test_a_session_is_known_only_to_its_owner_live_or_expired() -> None:
    clock = FakeClock()
    with make_pool(clock=clock, lease_ttl_s=60) as pool:
        start = pool.create_session(form_task(), owner="alice-0001", request_id="r1")
        with pytest.raises(UnknownSession):
            pool.step(start.session_id, SOLVE_ANN[0], 0, owner="mallory-01")
        with pytest.raises(UnknownSession):
            pool.close_session(start.session_id, owner="mallory-01")
        assert pool.step(start.session_id, SOLVE_ANN[0], 0, owner="alice-0001").observation is not None
        with pytest.raises(RequestIdReused):
            pool.create_session(form_task(seed=5), owner="alice-0001", request_id="r1")
        assert pool.create_session(form_task(), owner="alice-0001", request_id="r1") == start
        (device,) = pool.devices()
        assert device.owner == "alice-0001" and pool.recent_episodes()[0].owner == "alice-0001"
        clock.now += 61
        pool.reclaim_expired()
        with pytest.raises(UnknownSession) as other:
            pool.step(start.session_id, SOLVE_ANN[1], 1, owner="mallory-01")
        assert not isinstance(other.value, SessionExpired)  # not even that it existed
        with pytest.raises(SessionExpired):
            pool.step(start.session_id, SOLVE_ANN[1], 1, owner="alice-0001")


def test_one_request_id_sent_twice_at_once_over_http_gives_one_session_on_one_device() -> None:
    # The same race through the real server: two connections, one client id, one request id, the second
    # arriving while the first is resetting its device.
    from admire.envs.remote import KeepAlive
    from admire.server.app import create_app
    from admire.server.background import serve_in_thread

    started, go = threading.Semaphore(0), threading.Event()
    body = b'{"task": "fake/form", "seed": 3, "request_id": "twice-at-once"}'
    headers = {"Content-Type": "application/json", "X-Admire-Client": "client-0001"}
    with make_pool(lambda: SlowResetEnv(started, go), num_devices=2, max_devices=2) as pool, \
            serve_in_thread(create_app(pool)) as url, ThreadPoolExecutor(2) as workers:
        connections = [KeepAlive(url, timeout_s=30, connect_timeout_s=5) for _ in range(2)]
        first = workers.submit(connections[0].send, "POST", "/sessions", body, headers)
        assert started.acquire(timeout=10)
        second = workers.submit(connections[1].send, "POST", "/sessions", body, headers)
        assert not started.acquire(timeout=0.5)  # no second device is being reset for it
        go.set()
        replies = [first.result(20), second.result(20)]
        for connection in connections:
            connection.close()
        assert [r.status for r in replies] == [201, 201]
        assert replies[0].json()["session_id"] == replies[1].json()["session_id"]
        assert sorted(d.state for d in pool.devices()) == ["idle", "leased"]
