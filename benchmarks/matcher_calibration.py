"""How often does "similarity > δ" agree with a person's "same step?" label (METHOD §3, §7)?

The paper reports 81.3% agreement at δ = 0.75 on 500 pairs. ``data/matcher_pairs.jsonl`` holds this
project's own hand-labelled pairs of GUI steps, web and phone: a grounded description (what
``actions.describe`` writes) against a milestone phrase (what Φ writes), positives being the same
step in other words, negatives hard ones — the same verb on another element, the same element with
another action, a neighbouring step of the same task. Kinds: ``paraphrase_named`` (the milestone
names the element or app, "Login button clicked"), ``paraphrase_effect`` (it names only the effect,
"email sent"), ``grounded_*`` (the milestone is itself a grounded sentence, as the heuristic Φ writes
them), ``other_*`` (hard negatives), ``model_words`` (the model's own words, description mode
``model``).

Prints accuracy, precision and recall at δ (default 0.75), per kind of pair, and the δ that would
have agreed best with the labels. Usage: ``python benchmarks/matcher_calibration.py [--threshold 0.75]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "matcher_pairs.jsonl"


@dataclass(frozen=True)
class Pair:
    description: str
    milestone: str
    same_step: bool
    kind: str
    domain: str


@dataclass(frozen=True)
class Scores:
    threshold: float
    accuracy: float
    precision: float
    recall: float
    f1: float
    n: int


def load_pairs(path: Path) -> list[Pair]:
    pairs: list[Pair] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pairs.append(Pair(str(row["description"]), str(row["milestone"]), bool(row["same_step"]),
                              str(row.get("kind", "")), str(row.get("domain", ""))))
        except (ValueError, KeyError) as error:
            raise SystemExit(f"{path}:{number}: not a pair ({error}); each line is "
                             '{"description", "milestone", "same_step", "kind", "domain"}') from None
    return pairs


def score(similarities: np.ndarray, labels: np.ndarray, threshold: float) -> Scores:
    """Agreement of "similarity > threshold" (strict, as the matcher) with the labels."""
    predicted = similarities > threshold
    true_pos = int(np.sum(predicted & labels))
    false_pos = int(np.sum(predicted & ~labels))
    false_neg = int(np.sum(~predicted & labels))
    n = len(labels)
    accuracy = float(np.mean(predicted == labels)) if n else float("nan")
    precision = true_pos / (true_pos + false_pos) if true_pos + false_pos else float("nan")
    recall = true_pos / (true_pos + false_neg) if true_pos + false_neg else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else float("nan")
    return Scores(threshold, accuracy, precision, recall, f1, n)


def best_threshold(similarities: np.ndarray, labels: np.ndarray) -> Scores:
    """The δ on a 0.01 grid with the highest accuracy (the lowest such δ on ties)."""
    grid = np.round(np.arange(0.30, 0.96, 0.01), 2)
    return max((score(similarities, labels, float(t)) for t in grid), key=lambda s: (s.accuracy, -s.threshold))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="JSONL pairs (default: %(default)s)")
    parser.add_argument("--threshold", type=float, default=0.75, help="δ to report (default: 0.75)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from admire.milestones.matcher import Matcher, MiniLMEncoder

    pairs = load_pairs(args.data)
    matcher = Matcher(MiniLMEncoder(), threshold=args.threshold)
    started = time.perf_counter()
    vectors = matcher.embed([p.description for p in pairs] + [p.milestone for p in pairs])
    similarities = np.array([float(np.dot(vectors[p.description], vectors[p.milestone])) for p in pairs])
    elapsed = time.perf_counter() - started
    labels = np.array([p.same_step for p in pairs])

    at = score(similarities, labels, args.threshold)
    best = best_threshold(similarities, labels)
    positives = int(labels.sum())
    print(f"matcher calibration: {len(pairs)} hand-labelled pairs ({positives} same step, "
          f"{len(pairs) - positives} not), all-MiniLM-L6-v2, encoded in {elapsed:.1f} s")
    print(f"{'':<28}{'δ':>6}{'accuracy':>10}{'precision':>11}{'recall':>8}{'F1':>7}")
    for name, row in ((f"at δ = {args.threshold:.2f}", at), ("best δ (accuracy)", best)):
        print(f"{name:<28}{row.threshold:>6.2f}{row.accuracy:>10.1%}{row.precision:>11.1%}"
              f"{row.recall:>8.1%}{row.f1:>7.2f}")
    print("paper (500 pairs, its own labels): 81.3% accuracy at δ = 0.75")

    print(f"\nby kind of pair at δ = {args.threshold:.2f}:")
    print(f"{'kind':<36}{'pairs':>6}{'agree':>8}{'mean s':>8}{'min s':>7}{'max s':>7}")
    groups: dict[tuple[str, bool], list[int]] = {}
    for i, pair in enumerate(pairs):
        groups.setdefault((pair.kind, pair.same_step), []).append(i)
    breakdown = {}
    for (kind, same), members in sorted(groups.items(), key=lambda item: (not item[0][1], item[0][0])):
        s = similarities[members]
        agree = float(np.mean((s > args.threshold) == same))
        name = f"{kind} ({'same' if same else 'different'})"
        breakdown[name] = {"pairs": len(members), "agreement": agree, "mean": float(s.mean())}
        print(f"{name:<36}{len(members):>6}{agree:>8.1%}{s.mean():>8.3f}{s.min():>7.3f}{s.max():>7.3f}")
    for domain in sorted({p.domain for p in pairs}):
        members = [i for i, p in enumerate(pairs) if p.domain == domain]
        row = score(similarities[members], labels[members], args.threshold)
        print(f"domain {domain:<29}{row.n:>6}{row.accuracy:>8.1%}")

    wrong = sorted(((abs(similarities[i] - args.threshold), i) for i in range(len(pairs))
                    if (similarities[i] > args.threshold) != labels[i]), reverse=True)[:8]
    print("\nmost confident disagreements:")
    for _, i in wrong:
        p = pairs[i]
        print(f"  s={similarities[i]:.3f} labelled {'same' if p.same_step else 'different'}: "
              f"{p.description!r} vs {p.milestone!r}")

    if args.json:
        args.json.write_text(json.dumps({
            "pairs": len(pairs), "positives": positives,
            "at_threshold": at.__dict__, "best": best.__dict__, "by_kind": breakdown,
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
