"""What the pool measures: latency histograms and the snapshot ``/metrics`` and ``/health`` read.

Latencies are kept as cumulative bucket counts (a Prometheus histogram), not as quantiles over recent
samples: bucket counts from several servers add up, so a fleet's p99 can be computed from the sum of
their ``/metrics`` (``histogram_quantile``), which quantiles computed per server never allow. This
module needs no client library; :mod:`admire.server.metrics` exposes the snapshot through
``prometheus_client``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

LATENCY_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                                        120.0, math.inf)
"""Upper bounds (seconds) of the latency buckets: a MiniWoB step takes 50–300 ms, a reset 0.2–1 s, a
fresh browser a few seconds, and ``call_timeout_s`` (60 s by default) caps the rest."""


@dataclass
class LatencyHistogram:
    """Counts of observations per bucket, plus their count and sum. Not thread-safe (the pool locks)."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(init=False)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.bounds or self.bounds[-1] != math.inf or list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"histogram bounds must increase strictly and end with inf, got {self.bounds}")
        self.counts = [0] * len(self.bounds)

    def add(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def snapshot(self) -> LatencySnapshot:
        cumulative, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            running += n
            cumulative.append((bound, running))
        return LatencySnapshot(buckets=tuple(cumulative), count=running, sum=self.total)


@dataclass(frozen=True)
class LatencySnapshot:
    """One histogram at one moment: ``buckets`` are (upper bound, observations <= bound), cumulative."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    sum: float


@dataclass(frozen=True)
class PoolStats:
    """A consistent snapshot of the pool's counters, for ``/metrics`` and ``/health``."""

    counters: dict[str, int]
    episodes: dict[str, int]
    devices: dict[str, int]
    sessions_active: int
    latency: dict[str, LatencySnapshot]
    """metric (``step``, ``reset``, ``queue_wait``) -> its histogram."""
    concurrency_limit: int
    max_devices: int
