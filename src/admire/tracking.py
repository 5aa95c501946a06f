"""Metrics to every place a researcher looks: console, JSONL, TensorBoard, SwanLab, W&B.

``metrics.jsonl`` is the record of truth (the viewer and ``summary.json`` read it); the other sinks are
mirrors, each optional: a sink whose package is missing is skipped with one warning, and a sink that
fails mid-run is dropped rather than stopping training. SwanLab runs offline by default (the original
project used it); W&B only when installed and asked for.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from admire.fileio import atomic_write_text, read_bounded

MAX_METRICS_BYTES = 256 << 20
"""A run's metrics.jsonl may be at most 256 MiB (a line per epoch is a few KB); a larger one, a FIFO or a
device in its place is refused in one line instead of filling the memory or blocking."""

logger = logging.getLogger("admire.tracking")


class Sink(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """One JSON object per logged step, flushed and fsynced at once.

    The trainer logs an epoch's line right before it writes that epoch's checkpoint (which is fsynced),
    so a line on disk is durable before the checkpoint that covers it exists: a crash or power loss can
    tear only a line whose checkpoint was never written, which a resume truncates and re-logs anyway.
    One fsync per epoch costs nothing that matters.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    def __init__(self, logdir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package

        self._writer = SummaryWriter(log_dir=str(logdir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            if _is_number(value):
                self._writer.add_scalar(key, float(value), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class SwanLabSink:
    def __init__(self, logdir: Path, project: str, name: str, config: Mapping[str, Any], mode: str) -> None:
        import swanlab

        self._swanlab = swanlab
        swanlab.init(project=project, experiment_name=name, config=dict(config), mode=mode, logdir=str(logdir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._swanlab.log({k: float(v) for k, v in metrics.items() if _is_number(v)}, step=step)

    def close(self) -> None:
        self._swanlab.finish()


class WandbSink:
    def __init__(self, logdir: Path, project: str, name: str, config: Mapping[str, Any], mode: str) -> None:
        import wandb

        self._run = wandb.init(project=project, name=name, config=dict(config), mode=mode, dir=str(logdir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log({k: float(v) for k, v in metrics.items() if _is_number(v)}, step=step)

    def close(self) -> None:
        self._run.finish()


class Tracker:
    """Fans metrics out to the configured sinks; never lets a mirror stop training."""

    def __init__(
        self,
        run_dir: Path,
        *,
        name: str,
        config: Mapping[str, Any] | None = None,
        tensorboard: bool = True,
        swanlab: str | None = "offline",
        wandb: str | None = None,
        project: str = "admire",
    ) -> None:
        config = config or {}
        self.sinks: list[Sink] = [JsonlSink(run_dir / "metrics.jsonl")]
        optional = [
            ("tensorboard", tensorboard, lambda: TensorBoardSink(run_dir / "tensorboard")),
            ("swanlab", swanlab, lambda: SwanLabSink(run_dir / "swanlab", project, name, config, swanlab or "")),
            ("wandb", wandb, lambda: WandbSink(run_dir, project, name, config, wandb or "")),
        ]
        for label, wanted, build in optional:
            if not wanted:
                continue
            try:
                self.sinks.append(build())
            except ImportError as exc:
                logger.warning("%s logging is off: %s (pip install %s)", label, exc, label)
            except Exception as exc:  # noqa: BLE001 - a mirror must not stop training
                logger.warning("%s logging is off: %s", label, exc)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for sink in list(self.sinks):
            try:
                sink.log(metrics, step)
            except Exception as exc:
                if isinstance(sink, JsonlSink):
                    raise
                logger.warning("dropping %s after an error: %s", type(sink).__name__, exc)
                self.sinks.remove(sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001
                logger.warning("closing %s failed: %s", type(sink).__name__, exc)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``, in file order.

    A line that is not a JSON object with an integer ``step`` is skipped with a warning naming the file
    and the line: a torn last line (a writer killed mid-write), a corrupted line, or a hand edit. None of
    them is fatal, since the other lines are still the run's record.
    """
    return _parse_metrics(path)[0]


def truncate_metrics(path: Path, before_step: int) -> None:
    """Keep only records logged before ``before_step``: a resumed run rewrites what came after.

    The file is rewritten atomically (a crash leaves the old file or the new one) and only when something
    changes. Malformed lines are reported (``read_metrics``) and dropped. When fewer epochs than
    ``before_step`` have a line — the checkpoint covers epochs whose metrics are gone — one warning says
    which: those numbers cannot be recreated without redoing the epochs, so the curve has a gap there.
    """
    if before_step < 0:
        raise ValueError(f"truncate_metrics: before_step must be >= 0, got {before_step}")
    if not path.exists():
        if before_step > 0:
            _warn_missing(path, [], before_step, before_step)
        return
    records, malformed, torn = _parse_metrics(path)
    kept = [r for r in records if r["step"] < before_step]
    seen = {r["step"] for r in kept}
    if len(seen) < before_step:  # never a set of every epoch: a checkpoint may claim a huge one
        first = [step for step in range(min(before_step, len(seen) + 10)) if step not in seen][:10]
        _warn_missing(path, first, before_step - len(seen), before_step)
    if len(kept) != len(records) or malformed or torn:  # torn: a kept last line needs its newline
        atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def _parse_metrics(path: Path) -> tuple[list[dict[str, Any]], int, bool]:
    """(good records, number of malformed lines, whether the file ends mid-line); each malformed line is
    logged once."""
    if not path.exists():
        return [], 0, False
    records: list[dict[str, Any]] = []
    malformed = 0
    data = read_bounded(path, MAX_METRICS_BYTES, "metrics file")
    lines = data.split(b"\n")
    torn_tail = bool(lines) and lines[-1] != b""  # the file does not end in a newline: the writer stopped mid-line
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        problem = _check_line(raw)
        if isinstance(problem, dict):
            records.append(problem)
            continue
        malformed += 1
        if number == len(lines) and torn_tail:
            problem = f"a torn last line ({problem}), as a writer killed mid-line leaves"
        logger.warning("%s line %d skipped: %s", path, number, problem)
    return records, malformed, torn_tail


def _check_line(raw: bytes) -> dict[str, Any] | str:
    """The record on one line, or what is wrong with it."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except (json.JSONDecodeError, RecursionError) as error:
        return f"not JSON ({error})"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"no valid 'step' (got {step!r}; a record needs an integer step >= 0)"
    return record


def _warn_missing(path: Path, first: list[int], count: int, covered: int) -> None:
    """``count`` epochs have no line; ``first`` are the first of them (up to ten)."""
    shown = ", ".join(str(step) for step in (first or list(range(min(count, 10))))) + (", ..." if count > 10 else "")
    logger.warning(
        "%s has no metrics for %d of the %d epoch(s) the checkpoint covers (epoch %s); they cannot be "
        "recreated without the data, so the learning curve has a gap there",
        path, count, covered, shown,
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
