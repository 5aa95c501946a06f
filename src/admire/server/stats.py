"""What the pool measures: latency samples and the snapshot ``/metrics`` and ``/health`` read."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class LatencySamples:
    """Recent samples for quantiles, plus running totals for a Prometheus summary."""

    window: int
    samples: deque[float] = field(init=False)
    count: int = 0
    total: float = 0.0

    def __post_init__(self) -> None:
        self.samples = deque(maxlen=self.window)

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)
        self.count += 1
        self.total += seconds

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile of the recent samples; None before the first one."""
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    def summary(self) -> dict[str, float | None]:
        return {"p50": self.quantile(0.5), "p99": self.quantile(0.99), "count": float(self.count), "sum": self.total}


@dataclass(frozen=True)
class PoolStats:
    """A consistent snapshot of the pool's counters, for ``/metrics`` and ``/health``."""

    counters: dict[str, int]
    episodes: dict[str, int]
    devices: dict[str, int]
    sessions_active: int
    latency: dict[str, dict[str, float | None]]
    """metric -> {"p50", "p99", "count", "sum"}; quantiles are None before the first sample."""
    concurrency_limit: int
    max_devices: int
