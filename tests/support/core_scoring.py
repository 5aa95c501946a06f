"""Score recorded trajectories with the core alone: run by ``test_packaging`` inside a fresh virtualenv
where only ``pip install admire`` (no extras) was done, so it may import numpy and the package's core
but nothing a test helper or an extra brings (no pytest, torch, browser or server).

``python core_scoring.py BATCH.jsonl`` prints one JSON object: per reward mode (``outcome`` and
``admire``, the latter with milestones distilled by the heuristic generator and matched by the encoder
defined here), each trajectory's milestone terms, milestone hits and ``grpo_step`` advantages, and the
top-level modules the process imported.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from admire.actions import describe
from admire.milestones.bank import MilestoneBank
from admire.milestones.generator import make_generator
from admire.milestones.matcher import Matcher
from admire.milestones.update import update_bank
from admire.rewards import RewardConfig, score_batch
from admire.rl.advantages import compute_advantages, group_samples
from admire.types import Trajectory


class TextHashEncoder:
    """The encoder the test passes in: a unit vector per text, seeded by the text (cosine 1 for the same
    sentence, about 0 for two different ones), so no model is needed."""

    dim = 128

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(vector / np.linalg.norm(vector))
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dim)


def described(trajectory: Trajectory) -> Trajectory:
    """Every executed step with a grounded description, as a rollout writes it (a recording may lack them)."""
    steps = tuple(step if step.grounded_description or step.action is None
                  else step.model_copy(update={"grounded_description": describe(step.action, step.observation)})
                  for step in trajectory.steps)
    return trajectory.model_copy(update={"steps": steps})


def score(batch: Sequence[Trajectory], mode: str) -> dict[str, Any]:
    cfg = RewardConfig.from_mapping({"reward": {"mode": mode}})
    bank = MilestoneBank(":memory:")  # distilled from this batch's successes first, as the trainer does
    matcher = None
    if cfg.matches_milestones:
        update_bank(bank, [t for t in batch if not t.excluded], make_generator("heuristic"), key=cfg.milestone_key)
        matcher = Matcher(TextHashEncoder(), threshold=cfg.threshold, mode=cfg.matcher)
    rewards = score_batch(batch, bank, matcher, cfg, epoch=0)
    bank.close()
    result = compute_advantages("grpo_step", group_samples(batch, rewards), norm_by_std=True)
    return {
        "milestone": {t.id: [b.milestone for b in r] for t, r in zip(batch, rewards, strict=True)},
        "hits": {t.id: max((b.hits for b in r), default=0) for t, r in zip(batch, rewards, strict=True)},
        "advantages": {t.id: None if a is None else list(a) for t, a in zip(batch, result.advantages, strict=True)},
    }


def main(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as lines:
        batch = [described(Trajectory.from_json(line)) for line in lines if line.strip()]
    report: dict[str, Any] = {mode: score(batch, mode) for mode in ("outcome", "admire")}
    report["modules"] = sorted({name.split(".")[0] for name in sys.modules})
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
