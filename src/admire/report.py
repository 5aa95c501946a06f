"""What a run tells its user at the end: the before/after table and the learning-curve plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def _per_task(result: Mapping[str, float]) -> dict[str, float]:
    return {k.split("/", 1)[1]: v for k, v in result.items() if k.startswith("success/")}


def print_summary(summary: Mapping[str, Any], console: Console) -> None:
    """Held-out success per task before and after training, then the average and the cost."""
    before, after = _per_task(summary["before"]), _per_task(summary["after"])
    table = Table(title=f"{summary['suite']} — held-out success ({summary['reward_mode']} rewards)")
    table.add_column("task")
    table.add_column("before RL", justify="right")
    table.add_column("after RL", justify="right")
    table.add_column("change", justify="right")
    for task in sorted(set(before) | set(after)):
        b, a = before.get(task, 0.0), after.get(task, 0.0)
        table.add_row(task, f"{b:.0%}", f"{a:.0%}", f"{(a - b) * 100:+.0f} pts")
    b, a = summary["before"]["success"], summary["after"]["success"]
    table.add_row("[bold]average", f"[bold]{b:.0%}", f"[bold]{a:.0%}", f"[bold]{(a - b) * 100:+.0f} pts")
    console.print(table)
    if summary.get("warm_start"):
        ws = summary["warm_start"]
        console.print(f"before RL = after a behaviour-cloning warm start on {ws['demonstrations']:.0f} oracle "
                      "demonstrations of other tasks (warm_start.suite)")
    console.print(f"{summary['epochs']} epochs, {summary['env_steps']} env steps, {summary['wall_s']:.0f} s; "
                  f"milestone bank version {summary['bank_version']}")


def print_evaluation(result: Mapping[str, float], console: Console, title: str) -> None:
    table = Table(title=title)
    table.add_column("task")
    table.add_column("success", justify="right")
    for task, value in sorted(_per_task(result).items()):
        table.add_row(task, f"{value:.0%}")
    table.add_row("[bold]average", f"[bold]{result['success']:.0%}")
    console.print(table)


def plot_learning_curve(records: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Success (train and held-out) and reward components per epoch, as one PNG."""
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["step"] for r in records]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(epochs, [r.get("train/success", 0.0) for r in records], label="train success")
    evals = [(r["step"], r["eval/success"]) for r in records if r.get("eval/success") is not None]
    if evals:
        top.plot(*zip(*evals, strict=True), "o-", label="held-out success (greedy)")
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("success rate")
    top.legend(loc="lower right")
    labels = {"reward/total": "total", "reward/outcome": "outcome", "reward/milestone": "milestone (before λ)",
              "reward/format": "format"}
    for key, label in labels.items():
        bottom.plot(epochs, [r.get(key, 0.0) for r in records], label=label)
    bottom.set_xlabel("epoch")
    bottom.set_ylabel("mean step reward")
    bottom.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
