"""Milestone matching speed: comparisons per second with and without the embedding cache.

A synthetic batch shaped like a training batch (default 256 trajectories × 20 steps over 16 task
templates, 5 milestones each, instruction values drawn per episode) is matched with the real
all-MiniLM-L6-v2 encoder in four ways, side by side in one run:

* ``per trajectory, no cache``: ``Matcher.match`` once per trajectory, cache off — the naive way;
* ``batched, no cache``: one ``match_many`` call, cache off — every text of the batch encoded once;
* ``batched, next batch``: a *new* batch of the same tasks on a matcher that has seen one batch —
  the steady state of training, where most slotted descriptions are already cached;
* ``batched, same batch again``: everything cached — the cost of the pointer itself.

A comparison is one (step description, milestone) similarity the pointer evaluates.
Usage: ``admire bench matcher_speed [--trajectories 256] [--steps 20] [--description both]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable, Sequence

FIELDS = ["Username", "Password", "Search", "To", "Message", "First name", "Phone", "Title", "Amount", "Name"]
BUTTONS = ["Submit", "Login", "Save", "Send", "Reply", "Next", "OK", "Cancel", "Search", "Done", "Menu", "Add"]
NAMES = ["karrie", "vina", "nathalie", "keneth", "Audrey", "Hedy", "Bobine", "Cora", "Lyda", "Myron", "Ferne"]
# Link texts and model words vary freely, as MiniWoB++'s lorem-ipsum links and a policy's own words do.
_LOREM_TEXT = """lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore
et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo
consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint
occaecat cupidatat non proident sunt culpa qui officia deserunt mollit"""
LOREM = _LOREM_TEXT.split()


def make_task(rng: random.Random, index: int) -> dict[str, list[str]]:
    """A task template: its 5 slotted milestones and the step sentences an episode draws from."""
    fields = rng.sample(FIELDS, 2)
    buttons = rng.sample(BUTTONS, 3)
    milestones = [f"typed \"<value>\" into the '{fields[0]}' field", f"clicked the '{buttons[0]}' button",
                  f"typed \"<value>\" into the '{fields[1]}' field", "checked the '<value>' checkbox",
                  f"clicked the '{buttons[1]}' button"]
    return {"name": [f"task-{index}"], "milestones": milestones, "fields": fields, "buttons": buttons}


def make_batch(rng: random.Random, tasks: list[dict[str, list[str]]], trajectories: int, steps: int,
               both: bool) -> list[tuple[list[tuple[str, ...]], list[str], list[str]]]:
    """Trajectories as (per-step descriptions, milestones, slot values); ``both`` adds the model's words."""
    batch = []
    for _ in range(trajectories):
        task = rng.choice(tasks)
        values = [*rng.sample(NAMES, 2), f"{rng.randrange(100)}"]
        descriptions = []
        for _ in range(steps):
            kind = rng.randrange(6)
            if kind == 0:
                grounded = f"typed \"{rng.choice(values)}\" into the '{rng.choice(task['fields'])}' field"
            elif kind == 1:
                grounded = f"checked the '{rng.choice(values)}' checkbox"
            elif kind == 2:
                grounded = f"clicked the '{rng.choice(LOREM)} {rng.choice(LOREM)}' link"
            else:
                grounded = f"clicked the '{rng.choice(task['buttons'] + BUTTONS[:4])}' button"
            model = (f"I {rng.choice(['click', 'type', 'open', 'select'])} the {rng.choice(LOREM)} "
                     f"{rng.choice(LOREM)} to {rng.choice(LOREM)} the {rng.choice(LOREM)}")
            descriptions.append((grounded, model) if both else (grounded,))
        batch.append((descriptions, task["milestones"], values))
    return batch


def comparisons(results: Sequence[object], batch: Sequence[tuple[Sequence[Sequence[str]], object, object]]) -> int:
    total = 0
    for result, (descriptions, _, _) in zip(results, batch, strict=True):
        total += sum(len(alts) for alts, checked in zip(descriptions, result.checked, strict=True)  # type: ignore[attr-defined]
                     if checked is not None)
    return total


def timed(run: Callable[[], list[object]]) -> tuple[float, list[object]]:
    started = time.perf_counter()
    results = run()
    return time.perf_counter() - started, results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--description", choices=["grounded", "both"], default="grounded",
                        help="what is matched (milestone_reward.description); 'both' adds a free-text model "
                             "description per step, which is nearly always new to the cache (default: grounded)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the encoder (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    torch.set_num_threads(args.threads)
    from admire.embeddings import MiniLMEncoder
    from admire.milestones.matcher import Matcher

    rng = random.Random(args.seed)
    tasks = [make_task(rng, i) for i in range(args.tasks)]
    both = args.description == "both"
    batch = make_batch(rng, tasks, args.trajectories, args.steps, both)
    next_batch = make_batch(rng, tasks, args.trajectories, args.steps, both)
    encoder = MiniLMEncoder()
    encoder.encode(["warm up the encoder"])  # model loading is not matching

    rows: list[tuple[str, float, int, int]] = []

    uncached = Matcher(encoder, cache_size=0)
    seconds, results = timed(lambda: [uncached.match(*item) for item in batch])
    rows.append(("per trajectory, no cache", seconds, comparisons(results, batch), uncached.cache_info().misses))

    uncached = Matcher(encoder, cache_size=0)
    seconds, results = timed(lambda: uncached.match_many(batch))
    rows.append(("batched, no cache", seconds, comparisons(results, batch), uncached.cache_info().misses))

    cached = Matcher(encoder)
    cached.match_many(batch)
    before = cached.cache_info().misses
    seconds, results = timed(lambda: cached.match_many(next_batch))
    rows.append(("batched, next batch", seconds, comparisons(results, next_batch),
                 cached.cache_info().misses - before))

    before = cached.cache_info().misses
    seconds, results = timed(lambda: cached.match_many(next_batch))
    rows.append(("batched, same batch again", seconds, comparisons(results, next_batch),
                 cached.cache_info().misses - before))

    print(f"matcher speed: {args.trajectories} trajectories x {args.steps} steps, {args.tasks} tasks, "
          f"description mode {args.description!r}, all-MiniLM-L6-v2 on {args.threads} CPU thread(s)")
    print(f"{'':<28}{'seconds':>9}{'comparisons':>13}{'texts encoded':>15}{'comparisons/s':>15}{'vs naive':>10}")
    naive_rate = rows[0][2] / rows[0][1]
    for name, seconds, count, encoded in rows:
        rate = count / seconds
        print(f"{name:<28}{seconds:>9.3f}{count:>13}{encoded:>15}{rate:>15,.0f}{rate / naive_rate:>9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
