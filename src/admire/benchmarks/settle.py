"""The settle wait: what it costs in env speed, and what it buys in reproducibility.

Three ``MiniWoBEnv``s live in one run: ``off`` reads the page right after each action, ``wall`` waits in
real time for it to settle, ``virtual`` plays the page's own clock until it settles (the default; see
:mod:`admire.envs.miniwob_clock`). The same seeded greedy evaluation
(held-out seeds ``EVAL_SEED_START + i``) runs **twice** on each — pass 2 with ``--think-s`` (0.4 s) of
thinking before each decision, as on a slower machine or with a bigger model — the passes interleaved
task by task (off, wall, virtual, off, wall, virtual) so that the machine's load hits every setting alike.
Printed:

* **speed**: env steps per second of env time (reset + steps, policy and thinking time left out)
  and their ratio to ``off``, per task and overall, plus the mean settle wait per step;
* **reproducibility**: for each setting, how many episodes differ between pass 1 and pass 2 in their
  outcome, and how many in their action sequence; and success per pass.

Policies: ``dom`` (the untrained dom policy with its hand-set prior, ``prior_strength=1``, greedy: a
policy that acts on whatever it sees, like a held-out evaluation) or ``oracle`` (the
scripted oracles, which wait for what they expect and so mostly hide the problem).

Usage: ``admire bench settle [--policy dom] [--tasks use-autocomplete,click-tab-2,...] [--seeds 10]``;
the default run takes about two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TASKS = ("use-autocomplete", "click-collapsible", "click-tab-2", "choose-date-easy")
"""Timing-sensitive: a delayed menu, an animated accordion, jQuery-UI tabs, a datepicker."""


@dataclass
class Episode:
    success: bool
    actions: tuple[str, ...]


@dataclass
class Tally:
    env_s: float = 0.0
    steps: int = 0
    settle_s: float = 0.0
    episodes: list[list[Episode]] = field(default_factory=lambda: [[], []])  # per pass


def _defaults() -> None:
    os.environ.setdefault("MINIWOB_CHROME_BINARY", "/usr/bin/chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", "/usr/bin/chromedriver")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


class TimedEnv:
    """Wraps an env to add up the time spent in reset and step, and the settle waits."""

    def __init__(self, env, tally: Tally) -> None:
        self.env, self.tally = env, tally

    def reset(self, task):
        t0 = time.perf_counter()
        try:
            return self.env.reset(task)
        finally:
            self.tally.env_s += time.perf_counter() - t0
            self.tally.settle_s += self.env.last_settle.waited_s

    def step(self, action):
        t0 = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            self.tally.env_s += time.perf_counter() - t0
            self.tally.steps += 1
            self.tally.settle_s += self.env.last_settle.waited_s

    def __getattr__(self, name):
        return getattr(self.env, name)


class ThinkingPolicy:
    """Waits ``think_s`` before each decision: a slower model or a busier machine."""

    def __init__(self, policy, think_s: float) -> None:
        self.policy, self.think_s = policy, think_s

    def act(self, observations, histories, greedy: bool = False):
        time.sleep(self.think_s)
        return self.policy.act(observations, histories, greedy=greedy)


def run_pass(env: TimedEnv, tasks: Sequence, policy_name: str, policy, max_steps: int,
             think_s: float = 0.0) -> list[Episode]:
    """One greedy pass over ``tasks`` (seeded): per-episode success and action sequence."""
    if policy_name == "oracle":
        from admire.envs.oracles import run_oracle

        oracle = None
        if think_s:  # every task of a pass has the same template
            from admire.envs.oracles import get_oracle

            inner = get_oracle(tasks[0].template)

            def oracle(observation, truth, history):
                time.sleep(think_s)
                return inner(observation, truth, history)

        runs = [run_oracle(env, task, oracle=oracle, max_steps=max_steps) for task in tasks]
        return [Episode(run.success, tuple(a.model_dump_json(exclude_none=True) for a in run.actions))
                for run in runs]
    import torch

    from admire.rl.rollout import collect, group_requests

    with torch.no_grad():
        acting = ThinkingPolicy(policy, think_s) if think_s else policy
        trajectories = collect(group_requests(list(tasks), 1), [env], acting, max_steps=max_steps, greedy=True)
    return [Episode(t.outcome == 1.0, tuple(s.raw_output.split("Action:")[-1].strip() for s in t.steps))
            for t in trajectories]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", choices=("dom", "oracle"), default="dom")
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--think-s", type=float, default=0.4,
                        help="pass 2 waits this long before each decision, as a slower machine would")
    parser.add_argument("--quiet", default="",
                        help="comma-separated settle_quiet_s values of the wall setting to compare (default: the "
                             "env's default)")
    args = parser.parse_args(argv)
    _defaults()
    from admire.envs import make_task
    from admire.envs.miniwob import MiniWoBEnv
    from admire.envs.suites import EVAL_SEED_START

    policy = None
    if args.policy == "dom":
        import torch

        from admire.agent.base import make_policy

        torch.set_num_threads(1)
        policy = make_policy("dom", seed=0, prior_strength=1.0)
        policy.eval()
    templates = [t.strip() for t in args.tasks.split(",") if t.strip()]
    settings: dict[str, dict[str, Any]] = {"off": {"settle": "off"}}
    quiets = [float(q) for q in args.quiet.split(",") if q.strip()]
    for quiet in quiets or [None]:
        wall: dict[str, Any] = {"settle": "wall"}
        if quiet is not None:
            wall["settle_quiet_s"] = quiet
        settings["wall" if quiet is None else f"wall q={quiet:g}"] = wall
    settings["virtual"] = {"settle": "virtual"}
    tallies = {name: {t: Tally() for t in templates} for name in settings}
    envs = {name: MiniWoBEnv(max_steps=args.max_steps, **options) for name, options in settings.items()}
    try:
        for template in templates:
            tasks = [make_task(f"miniwob/{template}", seed=EVAL_SEED_START + i) for i in range(args.seeds)]
            for pass_index in (0, 1):
                for name, env in envs.items():
                    tally = tallies[name][template]
                    episodes = run_pass(TimedEnv(env, tally), tasks, args.policy, policy, args.max_steps,
                                        think_s=args.think_s if pass_index else 0.0)
                    tally.episodes[pass_index] = episodes
            print(f"done: {template}", file=sys.stderr)
    finally:
        for env in envs.values():
            env.close()
    report(tallies, templates, args)
    return 0


def report(tallies: dict[str, dict[str, Tally]], templates: Sequence[str], args: argparse.Namespace) -> None:
    print(f"policy={args.policy} seeds={args.seeds}, two passes per setting; off: read at once; wall: wait in real "
          "time until the page settles; virtual: play the page's clock until it settles")
    print(f"{'task':<20} {'setting':<12} {'steps/s':>8} {'vs off':>7} {'wait ms':>8} {'diff o/a':>9} {'success':>10}")
    totals = {name: Tally() for name in tallies}
    for template in [*templates, "ALL"]:
        speeds = {}
        for name in tallies:
            if template == "ALL":
                tally = totals[name]
            else:
                tally = tallies[name][template]
                total = totals[name]
                total.env_s += tally.env_s
                total.steps += tally.steps
                total.settle_s += tally.settle_s
                for i in (0, 1):
                    total.episodes[i] = total.episodes[i] + tally.episodes[i]
            first, second = tally.episodes
            outcome_diff = sum(a.success != b.success for a, b in zip(first, second, strict=True))
            action_diff = sum(a.actions != b.actions for a, b in zip(first, second, strict=True))
            success = "/".join(f"{sum(e.success for e in p) / max(1, len(p)):.0%}" for p in (first, second))
            speeds[name] = tally.steps / tally.env_s if tally.env_s else 0.0
            ratio = speeds[name] / speeds["off"] if speeds.get("off") else float("nan")
            print(f"{template:<20} {name:<12} {speeds[name]:>8.1f} {ratio:>7.2f} "
                  f"{1000 * tally.settle_s / max(1, tally.steps):>8.1f} {f'{outcome_diff}/{action_diff}':>9} "
                  f"{success:>10}")
    print("steps/s: env steps per second of env time (resets included); vs off: that over the 'off' setting, "
          "measured side by side; wait ms: mean settle wait per step, in page time on virtual (resets' waits "
          "included); diff o/a: "
          "episodes whose outcome / action sequence differs between the two passes; success: pass 1 / pass 2.")


if __name__ == "__main__":
    sys.exit(main())
