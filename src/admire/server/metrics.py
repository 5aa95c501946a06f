"""The pool's counters, gauges and latency histograms for ``/metrics``, on ``prometheus_client``.

Each app gets its own ``CollectorRegistry`` (:func:`registry_for`), never the process-global one, so
several servers or tests in one process do not collide. The collector reads ``pool.stats()`` at
scrape time, so the pool keeps plain counters under its own lock and needs no client library.
Latencies are histograms (bucket counts add up across servers; ``histogram_quantile`` gives p50/p99).
Every name below is listed in docs/server.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from admire.extras import require
from admire.server.stats import PoolStats

require("prometheus_client", extra="server")  # without it: one line naming pip install 'admire[server]'

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402 - after the check
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What ``generate_latest`` writes: the classic text format, which every Prometheus scrapes."""

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

HISTOGRAMS: dict[str, tuple[str, str]] = {
    "admire_step_latency_seconds": ("step", "Time a device took to execute a step."),
    "admire_reset_latency_seconds": ("reset", "Time a device took to start an episode."),
    "admire_queue_wait_seconds": ("queue_wait", "Time a reset or step waited for a concurrency slot."),
}


class PoolCollector(Collector):
    """Turns one ``PoolStats`` snapshot per scrape into metric families."""

    def __init__(self, stats: Callable[[], PoolStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        for name, (key, help_text) in COUNTERS.items():
            yield CounterMetricFamily(name, help_text, value=stats.counters.get(key, 0))
        episodes = CounterMetricFamily("admire_episodes_total", "Finished episodes by outcome.", labels=["outcome"])
        for outcome, count in stats.episodes.items():
            episodes.add_metric([outcome], count)
        yield episodes
        devices = GaugeMetricFamily("admire_devices", "Devices by state.", labels=["state"])
        for state, count in stats.devices.items():
            devices.add_metric([state], count)
        yield devices
        yield GaugeMetricFamily("admire_devices_max", "Most devices the pool may grow to.", value=stats.max_devices)
        yield GaugeMetricFamily("admire_concurrency_limit", "Most resets or steps running at once.",
                                value=stats.concurrency_limit)
        yield GaugeMetricFamily("admire_sessions_active", "Sessions whose episode is running.",
                                value=stats.sessions_active)
        for name, (key, help_text) in HISTOGRAMS.items():
            histogram = stats.latency[key]
            family = HistogramMetricFamily(name, help_text)
            family.add_metric([], [(_bound(le), n) for le, n in histogram.buckets], sum_value=histogram.sum)
            yield family


def registry_for(stats: Callable[[], PoolStats]) -> CollectorRegistry:
    """A fresh registry holding one collector over ``stats`` (e.g. ``pool.stats``): one per app."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(stats))
    return registry


def scrape(registry: CollectorRegistry) -> bytes:
    """What ``GET /metrics`` answers: every family in ``registry`` as Prometheus text."""
    return generate_latest(registry)


def render(stats: PoolStats) -> str:
    """One snapshot as Prometheus text (for tests and scripts; the app scrapes its registry)."""
    return generate_latest(registry_for(lambda: stats)).decode()


def _bound(upper: float) -> str:
    return "+Inf" if upper == float("inf") else repr(float(upper))
