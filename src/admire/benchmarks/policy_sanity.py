"""Does the ``dom`` policy learn? A plain REINFORCE loop with outcome reward on real MiniWoB++ tasks.

Not the trainer (that is ``admire.rl.trainer``): a deliberately minimal loop, so that a failure to
learn here points at the policy's features and not at rewards, milestones or PPO. It prints, per task,
the success rate of the untrained policy (sampled and greedy), then the sampled success rate of each
update's batch, then greedy and sampled success after training, all measured in this one run.

    admire bench policy_sanity --tasks login-user click-checkboxes --updates 30

``--pretrain-tasks`` first clones oracle demonstrations of *other* tasks (``agent.pretrain``) and shows
the success rates after that warm start too.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")

import torch

from admire.agent.base import Decision
from admire.agent.dom_policy import DomPolicy
from admire.agent.pretrain import pretrain, record_oracle_demonstrations
from admire.envs.base import GuiEnv, make_env, make_task
from admire.types import Step


def run_episodes(policy: DomPolicy, envs: Sequence[GuiEnv], tasks: Sequence[str], seeds: Sequence[int],
                 max_steps: int, greedy: bool) -> list[tuple[str, bool, list[Decision]]]:
    """Episodes in lockstep over ``envs`` (one act() per step for all of them)."""
    results: list[tuple[str, bool, list[Decision]]] = []
    jobs = list(zip(tasks, seeds, strict=True))
    for start in range(0, len(jobs), len(envs)):
        chunk = jobs[start:start + len(envs)]
        live = {i: env.reset(make_task("miniwob/" + task, seed)) for i, ((task, seed), env)
                in enumerate(zip(chunk, envs, strict=False))}
        histories: dict[int, list[Step]] = {i: [] for i in live}
        success = dict.fromkeys(live, False)
        for t in range(max_steps):
            if not live:
                break
            order = sorted(live)
            outputs = policy.act([live[i] for i in order], [histories[i] for i in order], greedy=greedy)
            for i, out in zip(order, outputs, strict=True):
                step = Step(index=t, observation=live[i], raw_output=out.text, action=out.action)
                result = envs[i].step(out.action)
                histories[i].append(step)
                if result.done:
                    success[i] = result.success
                    del live[i]
                else:
                    live[i] = result.observation
        for i, (task, _seed) in enumerate(chunk):
            steps = histories[i]
            decisions = [Decision(s.observation, tuple(steps[:k]), s.raw_output) for k, s in enumerate(steps)]
            results.append((task, success[i], decisions))
    return results


def success_by_task(results: Sequence[tuple[str, bool, list[Decision]]]) -> dict[str, float]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task, ok, _ in results:
        counts[task][0] += int(ok)
        counts[task][1] += 1
    return {task: wins / total for task, (wins, total) in sorted(counts.items())}


def show(label: str, rates: dict[str, float]) -> None:
    print(f"{label:<28}" + "  ".join(f"{task}={rate:.2f}" for task, rate in rates.items()), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["login-user", "click-checkboxes", "enter-password"])
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--group", type=int, default=8, help="episodes per task per update")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--eval-episodes", type=int, default=16, help="per task, for before/after")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--prior", type=float, default=0.0, help="prior_strength of the policy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrain-tasks", nargs="*", default=[], help="oracle demos of these tasks first")
    parser.add_argument("--pretrain-episodes", type=int, default=8, help="demos per pretrain task")
    parser.add_argument("--pretrain-epochs", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    policy = DomPolicy(seed=args.seed, prior_strength=args.prior)
    params = sum(p.numel() for p in policy.parameters())
    print(f"dom policy: {params} parameters, prior_strength={args.prior}, tasks={args.tasks}", flush=True)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    envs = [make_env("miniwob", max_steps=args.max_steps) for _ in range(args.envs)]
    eval_seeds = [10_000 + k for k in range(args.eval_episodes)]
    try:
        def evaluate(label: str) -> None:
            tasks = [t for t in args.tasks for _ in eval_seeds]
            seeds = [s for _ in args.tasks for s in eval_seeds]
            show(f"{label} sampled", success_by_task(run_episodes(policy, envs, tasks, seeds,
                                                                  args.max_steps, greedy=False)))
            show(f"{label} greedy", success_by_task(run_episodes(policy, envs, tasks, seeds,
                                                                 args.max_steps, greedy=True)))

        started = time.perf_counter()
        evaluate("untrained")
        if args.pretrain_tasks:
            demo_tasks = [make_task("miniwob/" + t, 50_000 + k) for t in args.pretrain_tasks
                          for k in range(args.pretrain_episodes)]
            demos = record_oracle_demonstrations(envs[0], demo_tasks, max_steps=args.max_steps)
            metrics = pretrain(policy, demos, epochs=args.pretrain_epochs)
            elapsed = time.perf_counter() - started
            print(f"behaviour cloning on {len(demos)} oracle episodes ({elapsed:.0f}s): "
                  + ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()), flush=True)
            evaluate("after cloning")
        seed = 0
        for update in range(1, args.updates + 1):
            tasks = [t for t in args.tasks for _ in range(args.group)]
            seeds = list(range(seed, seed + len(tasks)))
            seed += len(tasks)
            results = run_episodes(policy, envs, tasks, seeds, args.max_steps, greedy=False)
            # REINFORCE with a per-task mean baseline, averaged over all steps of the batch.
            by_task: dict[str, list[float]] = defaultdict(list)
            for task, ok, _ in results:
                by_task[task].append(float(ok))
            decisions, advantages = [], []
            for task, ok, steps in results:
                baseline = sum(by_task[task]) / len(by_task[task])
                decisions.extend(steps)
                advantages.extend([float(ok) - baseline] * len(steps))
            log_probs = policy.log_prob(decisions)
            loss = -(torch.tensor(advantages) * log_probs).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            show(f"update {update:3d} ({time.perf_counter() - started:5.0f}s)", success_by_task(results))
        evaluate("trained")
        print(f"total {time.perf_counter() - started:.0f}s", flush=True)
    finally:
        for env in envs:
            env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
