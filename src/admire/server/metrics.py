"""The pool's counters in Prometheus' text exposition format (version 0.0.4), written by hand: a
dozen lines do not justify a client library, and the format is stable and simple."""

from __future__ import annotations

from collections.abc import Iterator

from admire.server.stats import PoolStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

COUNTERS: dict[str, tuple[str, str]] = {
    # metric name: (pool counter, help)
    "admire_leases_total": ("leases", "Devices leased to sessions."),
    "admire_leases_reclaimed_total": ("leases_reclaimed", "Leases reclaimed from sessions idle past lease_ttl."),
    "admire_device_returns_total": ("returns", "Devices returned healthy to the pool."),
    "admire_device_restarts_total": ("restarts", "Successful device restarts."),
    "admire_device_restart_failures_total": ("restart_failures", "Device restarts that failed."),
    "admire_device_quarantines_total": ("quarantines", "Devices quarantined after repeated failures."),
    "admire_health_check_failures_total": ("health_check_failures", "Failed device health checks."),
    "admire_env_errors_total": ("env_errors", "Resets or steps that crashed or hung a device."),
    "admire_call_timeouts_total": ("timeouts", "Resets or steps that ran past call_timeout_s."),
    "admire_sessions_created_total": ("sessions_created", "Sessions created."),
    "admire_steps_total": ("steps", "Steps executed on devices."),
    "admire_step_replays_total": ("step_replays", "Retried steps answered from the recorded reply."),
    "admire_invalid_actions_total": ("invalid_actions", "Actions the device refused as invalid."),
    "admire_no_capacity_total": ("no_capacity", "Requests refused with 503 for lack of a device or step slot."),
}

LATENCIES: dict[str, tuple[str, str]] = {
    "admire_step_latency_seconds": ("step", "Time a device took to execute a step."),
    "admire_reset_latency_seconds": ("reset", "Time a device took to start an episode."),
    "admire_queue_wait_seconds": ("queue_wait", "Time a reset or step waited for a concurrency slot."),
}


def render(stats: PoolStats) -> str:
    return "".join(f"{line}\n" for line in _lines(stats))


def _lines(stats: PoolStats) -> Iterator[str]:
    for name, (key, help_text) in COUNTERS.items():
        yield from _header(name, "counter", help_text)
        yield f"{name} {stats.counters.get(key, 0)}"
    yield from _header("admire_episodes_total", "counter", "Finished episodes by outcome.")
    for outcome, count in stats.episodes.items():
        yield f'admire_episodes_total{{outcome="{outcome}"}} {count}'
    yield from _header("admire_devices", "gauge", "Devices by state.")
    for state, count in stats.devices.items():
        yield f'admire_devices{{state="{state}"}} {count}'
    yield from _header("admire_devices_max", "gauge", "Most devices the pool may grow to.")
    yield f"admire_devices_max {stats.max_devices}"
    yield from _header("admire_concurrency_limit", "gauge", "Most resets or steps running at once.")
    yield f"admire_concurrency_limit {stats.concurrency_limit}"
    yield from _header("admire_sessions_active", "gauge", "Sessions whose episode is running.")
    yield f"admire_sessions_active {stats.sessions_active}"
    for name, (key, help_text) in LATENCIES.items():
        sample = stats.latency[key]
        yield from _header(name, "summary", help_text)
        for label, quantile in (("0.5", "p50"), ("0.99", "p99")):
            value = sample[quantile]
            yield f'{name}{{quantile="{label}"}} {"NaN" if value is None else repr(float(value))}'
        yield f"{name}_sum {float(sample['sum'] or 0.0)!r}"
        yield f"{name}_count {int(sample['count'] or 0)}"


def _header(name: str, kind: str, help_text: str) -> Iterator[str]:
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"
