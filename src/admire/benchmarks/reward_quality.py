"""How good is a run's step reward, measured against the oracles? (``admire bench reward_quality --run RUN …``)

A step reward is useful when it pays the steps that lead to success and only those. Outcome and held-out
success say whether a policy learned; this says whether the reward it learned from was right, per run,
so the shipped defaults and the paper's reading can be put side by side. From each run's training
trajectories and the rewards they were paid (``trajectories/``, ``trajectories/rewards/``):

- **step gap**: the mean per-step shaping (reward minus outcome) of successful episodes minus that of failed
  ones, and divided by the shaping's spread (the trainer logs it every epoch as ``reward/step_gap``);
- **hits on the oracle's path**: of the steps paid a milestone hit, the share whose grounded description is a
  step the task's oracle takes on that same instance (a hit off that path pays a detour);
- **oracle steps hit**: of the oracle's steps on those instances, the share that the run's last milestone
  bank would pay a hit (scored with the run's own reward settings; a miss leaves a right step unpaid).

The oracle replays every (task, seed) the run trained on, up to ``--max-instances`` of them, in MiniWoB++
(tasks without an oracle are left out and counted). Nothing in the run folder is written: its bank is read
from a copy.

Usage::

    admire bench reward_quality --run runs/admire-s0 --run runs/paper-s0 --json reward-quality.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RUN_BY_DEFAULT = False
"""It replays oracles in a browser for the runs it is given: `admire bench` alone has none to give it."""


def normalised(description: str) -> str:
    return " ".join(description.lower().split())


def paid_runs(run_path: Path) -> list[tuple[Any, list[Any]]]:
    """Every non-excluded training trajectory of the run with the rewards it was paid, epoch by epoch."""
    from admire.runs import RunDir

    run = RunDir(run_path)
    paid: list[tuple[Any, list[Any]]] = []
    for epoch in run.trajectory_epochs("train"):
        trajectories = run.read_trajectories("train", epoch) or []
        rewards = run.read_rewards("train", epoch) or {}
        paid += [(t, list(rewards[t.id])) for t in trajectories if not t.excluded and t.id in rewards]
    return paid


def hits_on_path(paid: Sequence[tuple[Any, list[Any]]], oracle_paths: dict[tuple[str, int], set[str]]
                 ) -> tuple[int, int]:
    """(hits whose step is on the oracle's path, hits on instances the oracle played)."""
    on_path = total = 0
    for trajectory, breakdowns in paid:
        path = oracle_paths.get((trajectory.task.name, trajectory.task.seed))
        if path is None:
            continue
        for step, breakdown in zip(trajectory.steps, breakdowns, strict=False):
            if breakdown.matched_milestone is not None:
                total += 1
                on_path += normalised(step.grounded_description) in path
    return on_path, total


def oracle_steps_hit(run_path: Path, oracles: Sequence[Any]) -> tuple[int, int]:
    """(oracle steps the run's last bank pays a hit, oracle steps), scored with the run's reward settings."""
    from admire.config import load_run_config
    from admire.config_files import plain
    from admire.milestones.bank import MilestoneBank
    from admire.rewards import RewardConfig, score_batch
    from admire.rl.scoring import build_matcher

    cfg = load_run_config(run_path)
    reward = RewardConfig.from_mapping(plain(cfg))
    if not reward.matches_milestones or not oracles:
        return 0, sum(len(t.steps) for t in oracles)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "milestones.sqlite"
        for suffix in ("", "-wal"):  # the write-ahead log holds what a running or killed run wrote last
            if (run_path / f"milestones.sqlite{suffix}").is_file():
                shutil.copyfile(run_path / f"milestones.sqlite{suffix}", Path(f"{copy}{suffix}"))
        bank = MilestoneBank(copy, mode=cfg.milestone_reward.mode)  # type: ignore[arg-type]
        try:
            scored = score_batch(oracles, bank, build_matcher(reward), reward, epoch=10**6)
        finally:
            bank.close()
    hits = sum(b.matched_milestone is not None for breakdowns in scored for b in breakdowns)
    return hits, sum(len(breakdowns) for breakdowns in scored)


def replay_oracles(instances: Sequence[Any], max_steps: int) -> tuple[list[Any], list[str], int]:
    """The oracle's successful episode on each instance (a ``Task``) that has an oracle; the tasks that have
    none; and how many replays did not succeed (left out)."""
    from admire.agent.pretrain import record_oracle_demonstrations
    from admire.envs.base import ENVS
    from admire.envs.oracles import oracle_tasks

    known = set(oracle_tasks())
    playable = [task for task in instances if task.template in known]
    without = sorted({task.name for task in instances if task.template not in known})
    if not playable:
        return [], without, 0
    env = ENVS["miniwob"](max_steps=max_steps)
    try:
        demos = record_oracle_demonstrations(env, playable, max_steps=max_steps)
    finally:
        env.close()
    solved = [d for d in demos if d.success]
    return solved, without, len(demos) - len(solved)


def measure(run_path: Path, max_instances: int) -> dict[str, Any]:
    from admire.config import load_run_config
    from admire.rl.scoring import step_reward_gap

    paid = paid_runs(run_path)
    by_instance = {(t.task.name, t.task.seed): t.task for t, _ in paid}
    instances = [by_instance[key] for key in sorted(by_instance)[:max_instances]]
    oracles, without, failed = replay_oracles(instances, int(load_run_config(run_path).env.max_steps))
    paths = {(o.task.name, o.task.seed): {normalised(s.grounded_description) for s in o.steps} for o in oracles}
    on_path, hits = hits_on_path(paid, paths)
    oracle_hits, oracle_steps = oracle_steps_hit(run_path, oracles)
    gap = step_reward_gap(paid)
    return {
        "run": str(run_path), "episodes": len(paid), "instances": len(instances), "oracle_episodes": len(oracles),
        "oracle_failures": failed, "tasks_without_oracle": without, "step_gap": gap.get("reward/step_gap"),
        "step_gap_norm": gap.get("reward/step_gap_norm"), "hits": hits, "hits_on_oracle_path": on_path,
        "share_hits_on_path": on_path / hits if hits else None, "oracle_steps": oracle_steps,
        "oracle_steps_hit": oracle_hits, "share_oracle_steps_hit": oracle_hits / oracle_steps if oracle_steps else None,
    }


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def print_table(results: Sequence[dict[str, Any]]) -> None:
    from admire.benchmarks.intervals import percent  # here: intervals imports numpy, the parser does not need it

    print("| run | episodes | step gap (norm) | hits on the oracle's path (%) | oracle steps hit (%) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['run']} | {r['episodes']} | {_num(r['step_gap'])} ({_num(r['step_gap_norm'])}) "
              f"| {percent(r['share_hits_on_path'])} of {r['hits']} | {percent(r['share_oracle_steps_hit'])} of "
              f"{r['oracle_steps']} |")
    for r in results:
        if r["tasks_without_oracle"]:
            print(f"{r['run']}: no oracle for {', '.join(r['tasks_without_oracle'])} (left out)")
        if r["oracle_failures"]:
            print(f"{r['run']}: {r['oracle_failures']} oracle replays did not succeed within env.max_steps (left out)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="admire bench reward_quality", description=__doc__.splitlines()[0])
    parser.add_argument("--run", dest="runs", action="append", type=Path, required=True, metavar="RUN",
                        help="a training run directory (repeatable: the runs side by side)")
    parser.add_argument("--max-instances", type=int, default=200, metavar="N",
                        help="oracle replays per run, the first N (task, seed) instances in order (default 200)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write every number to OUT")
    args = parser.parse_args(argv)
    if args.max_instances < 1:
        parser.error("--max-instances must be at least 1")
    for run in args.runs:
        if not (run / "config.yaml").is_file() or not (run / "milestones.sqlite").is_file():
            parser.error(f"--run {run}: not a training run directory (it needs config.yaml and milestones.sqlite)")
    results = [measure(run, args.max_instances) for run in args.runs]
    print_table(results)
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": results}, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r["episodes"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

