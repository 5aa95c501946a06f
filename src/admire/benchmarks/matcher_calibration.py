"""How often does the matcher's "hit" agree with a person's "same step?" label (method.md §3, §7)?

The paper reports 81.3% agreement at δ = 0.75 on 500 pairs. ``data/`` holds this project's own
hand-labelled pairs of GUI steps, web and phone: a grounded description (what ``actions.describe``
writes, slotted) against a milestone phrase, positives being the same step, negatives hard ones. Four
files, kept apart because of how they were written: ``matcher_pairs.jsonl`` (576 pairs: the first
release's 398 and 178 hard ones, the set the matcher was developed on), ``matcher_pairs_heldout.jsonl``
(180 pairs written without seeing the prose reading's rules; its errors were looked at once while the
rules were revised, so it is development data too), ``matcher_pairs_test.jsonl`` (160 pairs, other apps
and sites, written blind and scored once; its errors were then studied for the next revision of the
rules, so it is development data now) and ``matcher_pairs_test2.jsonl`` (200 pairs, yet other apps and
sites, written blind and scored once with the revised rules: the test set). Kinds:
``paraphrase_named`` (the milestone names the element or app, "Login button clicked"),
``paraphrase_effect`` (only the effect, "email sent"), ``grounded_*`` (the milestone is itself a grounded
sentence, as the heuristic Φ writes them and the LLM Φ is asked to: ``same``, ``other_element``,
``other_action``, ``field_swap`` — a value in the wrong field or the wrong value, with positional
slots —, ``toggle`` — checked vs unchecked —, ``index`` — 'Tab #2' vs 'Tab #1' —, ``value`` — another
literal value), ``other_*`` (hard negatives against prose milestones), ``model_words`` (the model's own
words, description mode ``model``).

Three matcher settings are scored on the same pairs: ``grounded`` (the default: signatures agree and
s > δ; a milestone in prose is read against the step, ``milestones.prose``: one naming another action or
element never hits, one naming this step needs s > ``prose_threshold``, the rest s > δ),
``grounded-no-prose`` (``prose_threshold=null``: prose by s > δ alone, the previous default) and ``sbert``
(s > δ, the paper's). Each pair is one ``Matcher.match`` of a one-step trajectory against a
one-milestone list, so this measures the shipped code. Printed: accuracy, precision and recall at δ
(default 0.75) for every setting, on all pairs and on each file, split by the kind of milestone (a
grounded sentence, which the default pipeline produces, or prose, which only an LLM Φ that paraphrases
produces), per kind of pair, and the δ that would have agreed best with the labels. Usage:
``admire bench matcher_calibration [--threshold 0.75] [--data FILE ...]``.
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

DATA_DIR = Path(__file__).resolve().parent / "data"
DATA = tuple(DATA_DIR / f"matcher_pairs{suffix}.jsonl" for suffix in ("", "_heldout", "_test", "_test2"))


@dataclass(frozen=True)
class Pair:
    description: str
    milestone: str
    same_step: bool
    kind: str
    domain: str
    source: str = ""


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
                              str(row.get("kind", "")), str(row.get("domain", "")), path.name))
        except (ValueError, KeyError) as error:
            raise SystemExit(f"{path}:{number}: not a pair ({error}); each line is "
                             '{"description", "milestone", "same_step", "kind", "domain"}') from None
    return pairs


def score(similarities: np.ndarray, labels: np.ndarray, threshold: float,
          always: np.ndarray | None = None) -> Scores:
    """Agreement of "similarity > threshold" (strict, as the matcher), or ``always``, with the labels."""
    predicted = similarities > threshold
    if always is not None:
        predicted = predicted | always
    true_pos = int(np.sum(predicted & labels))
    false_pos = int(np.sum(predicted & ~labels))
    false_neg = int(np.sum(~predicted & labels))
    n = len(labels)
    accuracy = float(np.mean(predicted == labels)) if n else float("nan")
    precision = true_pos / (true_pos + false_pos) if true_pos + false_pos else float("nan")
    recall = true_pos / (true_pos + false_neg) if true_pos + false_neg else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else float("nan")
    return Scores(threshold, accuracy, precision, recall, f1, n)


def best_threshold(similarities: np.ndarray, labels: np.ndarray, always: np.ndarray | None = None) -> Scores:
    """The δ on a 0.01 grid with the highest accuracy (the lowest such δ on ties)."""
    grid = np.round(np.arange(0.30, 0.96, 0.01), 2)
    return max((score(similarities, labels, float(t), always) for t in grid), key=lambda s: (s.accuracy, -s.threshold))


MODES = ("grounded", "grounded-no-prose", "sbert")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+", default=list(DATA),
                        help="JSONL pair files (default: the four files of data/)")
    parser.add_argument("--threshold", type=float, default=0.75, help="δ to report (default: 0.75)")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2",
                        help="milestone_reward.encoder: a model name or a local directory (default: %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from admire.embeddings import make_encoder
    from admire.milestones.matcher import DEFAULT_PROSE_THRESHOLD, Matcher
    from admire.milestones.signature import parse_signature, signatures_agree

    pairs = [pair for path in args.data for pair in load_pairs(path)]
    encoder = make_encoder(args.encoder)
    matchers = {"grounded": Matcher(encoder, threshold=args.threshold),
                "grounded-no-prose": Matcher(encoder, threshold=args.threshold, prose_threshold=None),
                "sbert": Matcher(encoder, threshold=args.threshold, mode="sbert")}
    started = time.perf_counter()
    vectors = matchers["sbert"].embed([p.description for p in pairs] + [p.milestone for p in pairs])
    similarities = np.array([float(np.dot(vectors[p.description], vectors[p.milestone])) for p in pairs])
    elapsed = time.perf_counter() - started
    labels = np.array([p.same_step for p in pairs])
    has_signature = np.array([parse_signature(p.milestone) is not None for p in pairs])

    # Each setting as "always | (gate & s > δ)": the gate says where δ decides, ``always`` the hits δ
    # cannot change (anchored prose above prose_threshold, as the grounded matcher's own verdicts say).
    # This lets best δ be searched without re-matching; at δ it must reproduce the matcher exactly,
    # which is checked below.
    results_of = {mode: matcher.match_many([([p.description], [p.milestone], ()) for p in pairs])
                  for mode, matcher in matchers.items()}
    hits = {mode: np.array([result.k == 1 for result in matched]) for mode, matched in results_of.items()}
    verdicts = [result.prose_verdicts[0] for result in results_of["grounded"]]
    agree = np.array([signatures_agree(parse_signature(p.description), parse_signature(p.milestone))
                      for p in pairs])
    neutral = np.array([v == "neutral" for v in verdicts])
    anchored = np.array([v == "anchored" for v in verdicts]) & (similarities > DEFAULT_PROSE_THRESHOLD)
    nothing = np.zeros(len(pairs), dtype=bool)
    settings = {"grounded": (np.where(has_signature, agree, neutral), anchored),
                "grounded-no-prose": (np.where(has_signature, agree, True), nothing),
                "sbert": (np.ones(len(pairs), dtype=bool), nothing)}
    for mode, (gate, always) in settings.items():
        expected = always | (gate & (similarities > args.threshold))
        if not np.array_equal(hits[mode], expected):
            raise SystemExit(f"internal error: the {mode} matcher disagrees with its gate on "
                             f"{int(np.sum(hits[mode] != expected))} pairs")

    positives = int(labels.sum())
    print(f"matcher calibration: {len(pairs)} hand-labelled pairs ({positives} same step, "
          f"{len(pairs) - positives} not; {int(has_signature.sum())} with a grounded milestone), "
          f"encoder {args.encoder}, prose_threshold {DEFAULT_PROSE_THRESHOLD}, encoded in {elapsed:.1f} s")
    print(f"{'':<44}{'δ':>6}{'accuracy':>10}{'precision':>11}{'recall':>8}{'F1':>7}")
    results: dict[str, dict[str, object]] = {}
    subsets = [("grounded milestones (default Φ)", has_signature),
               ("prose milestones (paraphrasing Φ)", ~has_signature)]
    files = [(name, np.array([p.source == name for p in pairs])) for name in dict.fromkeys(p.source for p in pairs)]
    for mode, (gate, always) in settings.items():
        sims = np.where(gate, similarities, -np.inf)
        at = score(sims, labels, args.threshold, always)
        best = best_threshold(sims, labels, always)
        results[mode] = {"at_threshold": at.__dict__, "best": best.__dict__}
        for name, row in ((f"{mode}, δ = {args.threshold:.2f}", at), (f"{mode}, best δ (accuracy)", best)):
            _print_row(name, row)
        for name, members in subsets + files:
            row = score(sims[members], labels[members], args.threshold, always[members])
            results[mode][name] = row.__dict__
            _print_row(f"  {name}", row)
    print(f"{'paper (500 pairs, its own labels, sbert)':<44}{0.75:>6.2f}{0.813:>10.1%}")

    print(f"\nby kind of pair at δ = {args.threshold:.2f} (agreement with the label):")
    print(f"{'kind':<36}{'pairs':>6}" + "".join(f"{mode:>19}" for mode in MODES) + f"{'mean s':>8}")
    groups: dict[tuple[str, bool], list[int]] = {}
    for i, pair in enumerate(pairs):
        groups.setdefault((pair.kind, pair.same_step), []).append(i)
    breakdown = {}
    for (kind, same), members in sorted(groups.items(), key=lambda item: (not item[0][1], item[0][0])):
        agreement = {mode: float(np.mean(hits[mode][members] == same)) for mode in MODES}
        name = f"{kind} ({'same' if same else 'different'})"
        breakdown[name] = {"pairs": len(members), "mean": float(similarities[members].mean()), **agreement}
        print(f"{name:<36}{len(members):>6}" + "".join(f"{agreement[mode]:>19.1%}" for mode in MODES)
              + f"{similarities[members].mean():>8.3f}")
    for domain in sorted({p.domain for p in pairs}):
        members = [i for i, p in enumerate(pairs) if p.domain == domain]
        print(f"{'domain ' + domain:<36}{len(members):>6}"
              + "".join(f"{float(np.mean(hits[mode][members] == labels[members])):>19.1%}" for mode in MODES))

    for title, mode, members in (("grounded milestones, grounded", "grounded", has_signature),
                                 ("prose milestones, grounded", "grounded", ~has_signature),
                                 ("prose milestones, sbert", "sbert", ~has_signature)):
        wrong = sorted(((abs(similarities[i] - args.threshold), i) for i in np.flatnonzero(members)
                        if hits[mode][i] != labels[i]), reverse=True)[:8]
        print(f"\nmost confident disagreements, {title}:")
        for _, i in wrong:
            p = pairs[i]
            reading = f" [{verdicts[i]}]" if verdicts[i] and mode == "grounded" else ""
            print(f"  s={similarities[i]:.3f}{reading} labelled {'same' if p.same_step else 'different'}: "
                  f"{p.description!r} vs {p.milestone!r}")

    if args.json:
        args.json.write_text(json.dumps({
            "pairs": len(pairs), "positives": positives, "grounded_milestones": int(has_signature.sum()),
            "threshold": args.threshold, "prose_threshold": DEFAULT_PROSE_THRESHOLD, "modes": results,
            "by_kind": breakdown,
        }, indent=2))
    return 0


def _print_row(name: str, row: Scores) -> None:
    print(f"{name:<44}{row.threshold:>6.2f}{row.accuracy:>10.1%}{row.precision:>11.1%}"
          f"{row.recall:>8.1%}{row.f1:>7.2f}")


if __name__ == "__main__":
    sys.exit(main())
