"""Intervals and paired tests for held-out success, over seeds *and* episodes.

A learning run is scored on a fixed set of held-out episodes, so its success rate carries two kinds of noise:
training (which seed) and evaluation (which episodes happened to be drawn). A standard deviation over seeds
sees only the first; with 20 episodes per task the second is about 10 points per task. The functions here
account for both:

- ``bootstrap_interval``: a hierarchical bootstrap (resample seeds, then within each resampled seed the
  episodes of each task), the suite's success being the mean over tasks of each task's success;
- ``paired_difference``: the same for the difference of two arms run on the same seeds and the same episodes,
  resampling seeds and then episode *pairs*, so what the two arms share is not counted as noise;
- ``sign_flip_p``: the exact two-sided sign-flip test of the per-seed differences (with n seeds its smallest
  p is 2/2^n, so 3 seeds can never reach 0.05: the report says so rather than hiding it);
- ``paired_permutation_p``: a two-sided permutation test over episode pairs, pooled over seeds (swap each
  pair's arms at random), which has power where few seeds do but treats the seeds as fixed.

Outcomes are 0/1 (or any number in [0, 1]); an episode is identified by (seed, task, task seed), so the two
arms' pairs are the same instances. Pure numpy, seeded: the same input gives the same interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Episodes = Mapping[str, Mapping[int, float]]
"""One run's held-out episodes: task → {task seed: outcome}."""

RESAMPLES = 4000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high}


def suite_success(episodes: Episodes) -> float:
    """The suite's success: the mean over tasks of each task's mean outcome (as the trainer reports it)."""
    rates = [float(np.mean(list(outcomes.values()))) for outcomes in episodes.values() if outcomes]
    return float(np.mean(rates)) if rates else 0.0


def bootstrap_interval(runs: Mapping[int, Episodes], *, resamples: int = RESAMPLES, level: float = LEVEL,
                       seed: int = 0) -> Interval | None:
    """The mean over seeds of the suite's success, with a hierarchical-bootstrap interval; None without runs."""
    seeds = sorted(s for s in runs if runs[s])
    if not seeds:
        return None
    rng = np.random.default_rng(seed)
    tables = [_as_arrays(runs[s]) for s in seeds]
    estimates = np.empty(resamples)
    for r in range(resamples):
        picked = rng.integers(0, len(seeds), size=len(seeds))
        estimates[r] = np.mean([_resampled_success(tables[i], rng) for i in picked])
    mean = float(np.mean([suite_success(runs[s]) for s in seeds]))
    return _interval(mean, estimates, level)


def paired_difference(arm: Mapping[int, Episodes], baseline: Mapping[int, Episodes], *, resamples: int = RESAMPLES,
                      level: float = LEVEL, seed: int = 0) -> Interval | None:
    """Mean over the shared seeds of (arm − baseline) suite success, with a paired hierarchical-bootstrap
    interval (seeds resampled, then the episode pairs of each task within a seed); None without shared seeds."""
    pairs = {s: _pairs(arm[s], baseline[s]) for s in sorted(set(arm) & set(baseline))}
    pairs = {s: p for s, p in pairs.items() if p}
    if not pairs:
        return None
    rng = np.random.default_rng(seed)
    seeds = sorted(pairs)
    estimates = np.empty(resamples)
    for r in range(resamples):
        picked = rng.integers(0, len(seeds), size=len(seeds))
        values = []
        for i in picked:
            tasks = pairs[seeds[i]]
            per_task = []
            for a, b in tasks.values():
                draw = rng.integers(0, len(a), size=len(a))
                per_task.append(a[draw].mean() - b[draw].mean())
            values.append(np.mean(per_task))
        estimates[r] = np.mean(values)
    mean = float(np.mean([np.mean([a.mean() - b.mean() for a, b in pairs[s].values()]) for s in seeds]))
    return _interval(mean, estimates, level)


def sign_flip_p(differences: Sequence[float]) -> float | None:
    """Exact two-sided p of the per-seed differences' mean under random signs; None without differences."""
    values = np.asarray(differences, dtype=float)
    if values.size == 0:
        return None
    signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * values.size)).reshape(values.size, -1).T
    observed = abs(values.mean())
    flipped = np.abs((signs * values).mean(axis=1))
    return float(np.mean(flipped >= observed - 1e-12))


def paired_permutation_p(arm: Mapping[int, Episodes], baseline: Mapping[int, Episodes], *,
                         resamples: int = 20_000, seed: int = 0) -> float | None:
    """Two-sided p of the mean episode-pair difference (all shared seeds and tasks pooled) under random swaps
    of each pair's arms; None without pairs. Exact ties (both arms equal on every pair) give 1."""
    differences = np.concatenate([a - b for s in sorted(set(arm) & set(baseline))
                                  for a, b in _pairs(arm[s], baseline[s]).values()] or [np.zeros(0)])
    if differences.size == 0:
        return None
    observed = abs(differences.mean())
    if observed == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1.0, 1.0], size=(resamples, differences.size))
    permuted = np.abs((signs * differences).mean(axis=1))
    return float((1 + np.sum(permuted >= observed - 1e-12)) / (resamples + 1))


def _as_arrays(episodes: Episodes) -> list[np.ndarray]:
    return [np.asarray(list(outcomes.values()), dtype=float) for outcomes in episodes.values() if outcomes]


def _resampled_success(tasks: list[np.ndarray], rng: np.random.Generator) -> float:
    return float(np.mean([values[rng.integers(0, len(values), size=len(values))].mean() for values in tasks]))


def _pairs(arm: Episodes, baseline: Episodes) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task, the outcomes of the episodes both runs played (the same task seeds), aligned."""
    pairs = {}
    for task in sorted(set(arm) & set(baseline)):
        shared = sorted(set(arm[task]) & set(baseline[task]))
        if shared:
            pairs[task] = (np.array([arm[task][k] for k in shared], dtype=float),
                           np.array([baseline[task][k] for k in shared], dtype=float))
    return pairs


def _interval(mean: float, estimates: np.ndarray, level: float) -> Interval:
    tail = (1.0 - level) / 2
    low, high = np.quantile(estimates, [tail, 1.0 - tail])
    return Interval(mean, float(low), float(high))


# --------------------------------------------------------------------------------------------------
# As the benchmark reports print them (fractions shown as percent)
# --------------------------------------------------------------------------------------------------


def percent(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}"


def mean_pm_std(stats: Mapping[str, Any] | None) -> str:
    """``mean ± std`` of a spread over seeds, in percent."""
    if not stats or stats["mean"] is None:
        return "–"
    return f"{percent(stats['mean'])} ± {percent(stats['std'])}"


def interval_text(stats: Mapping[str, Any] | None) -> str:
    """``mean [low, high]`` of an interval (``Interval.as_dict``), in percent."""
    if not stats:
        return "–"
    return f"{percent(stats['mean'])} [{percent(stats['low'])}, {percent(stats['high'])}]"
