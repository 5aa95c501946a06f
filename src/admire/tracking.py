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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger("admire.tracking")


class Sink(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """One JSON object per logged step, flushed at once so a killed run keeps every finished line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

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
    """The records of a ``metrics.jsonl``; a torn last line (killed writer) is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def truncate_metrics(path: Path, before_step: int) -> None:
    """Keep only records logged before ``before_step``: a resumed run rewrites what came after."""
    if not path.exists():
        return
    kept = [r for r in read_metrics(path) if int(r.get("step", 0)) < before_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept), encoding="utf-8")
    tmp.replace(path)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
