"""Tuning every arm alike: ``admire bench learning --sweep KEY=V1,V2,…`` on validation seeds, then a test run
in which each arm takes its own best setting (``--tuned-from``).

Why a module of its own: a comparison is only fair when the baseline was tuned as hard as the method. A sweep
trains every variant in every setting (the product of the swept keys' values) on every seed, each pair as its
own configuration labelled ``<variant>@<key>:<value>[+<key>:<value>…]`` (a key by its last dotted part, or
whole where two swept keys share it; no ``=`` or ``,``, which a command-line override would split on). Its
report ranks each variant's settings by mean held-out success over the seeds and marks the best among those
whose every seed finished (a tie goes to the setting the command listed first); ``results.json`` keeps the
choice (``sweep.best``), and ``--tuned-from OUT`` hands each variant the overrides of its own best setting.

Refused, each in one line: a sweep on the test split (a choice is made on validation seeds only), a key a
chosen variant defines (``outcome`` is ``reward.mode=outcome``: sweeping that key would erase the variant), a
value that cannot name a run folder, and a ``--tuned-from`` folder whose sweep was not on validation seeds or
has no best setting for a variant asked for.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admire.benchmarks.intervals import mean_pm_std, percent

SEPARATOR = "@"
"""Between a variant and its setting in a configuration's label (``admire@lr=0.003``)."""
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._\-]+$")


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: its overrides and the label its runs carry ("" outside a sweep)."""

    overrides: tuple[str, ...] = ()
    label: str = ""


NO_SWEEP = (Setting(),)


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def parse_sweeps(specs: Sequence[str]) -> tuple[Setting, ...]:
    """The settings of ``--sweep KEY=V1,V2,…`` (repeatable: the product of every key's values), in order."""
    if not specs:
        return NO_SWEEP
    keys: list[str] = []
    choices: list[list[str]] = []
    for spec in specs:
        key, sep, raw = spec.partition("=")
        values = [v.strip() for v in raw.split(",")]
        if not sep or not key.strip() or not raw.strip():
            raise ValueError(f"--sweep {spec!r}: write KEY=V1,V2,… (e.g. actor_rollout_ref.actor.lr=0.01,0.003)")
        bad = next((v for v in values if not _SAFE_VALUE.match(v)), None)
        if bad is not None:
            raise ValueError(f"--sweep {spec!r}: value {bad!r} cannot name a run folder; sweep values are plain "
                             "numbers or words (letters, digits, . _ -)")
        if len(set(values)) != len(values):
            raise ValueError(f"--sweep {spec!r}: a value is listed twice")
        if override_key(key) in map(override_key, keys):
            raise ValueError(f"--sweep names {override_key(key)} twice; give all its values in one --sweep")
        keys.append(key.strip())
        choices.append(values)
    return tuple(Setting(overrides, tag(overrides))
                 for overrides in (tuple(f"{k}={v}" for k, v in zip(keys, combo, strict=True))
                                   for combo in itertools.product(*choices)))


def tag(overrides: Sequence[str]) -> str:
    """The label part for ``overrides``: ``lr:0.01+max_kl:0.1`` (each key by its last dotted part where that
    is unambiguous)."""
    keys = [override_key(o) for o in overrides]
    names = short_names(keys)
    return "+".join(f"{name}:{o.split('=', 1)[1]}" for name, o in zip(names, overrides, strict=True))


def short_names(keys: Sequence[str]) -> list[str]:
    """Each key's last dotted part, or the whole key where two keys share their last part."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return [part if last.count(part) == 1 else key for key, part in zip(keys, last, strict=True)]


def label(variant: str, setting: Setting) -> str:
    return f"{variant}{SEPARATOR}{setting.label}" if setting.label else variant


def base_variant(name: str) -> str:
    """The variant a configuration's label names (``admire@lr=0.003`` → ``admire``)."""
    return name.split(SEPARATOR, 1)[0]


def check_sweep(settings: Sequence[Setting], variants: Sequence[str], variant_keys: Mapping[str, Sequence[str]],
                split: str) -> None:
    """Refuse a sweep on the test split and a swept key that a chosen variant defines."""
    if settings == NO_SWEEP:
        return
    if split != "validation":
        raise ValueError("--sweep chooses settings, and choices are made on validation seeds: drop --split test "
                         "(then run the test split once with --tuned-from)")
    swept = {override_key(o) for o in settings[0].overrides}
    for variant in variants:
        clash = sorted(swept & {override_key(o) for o in variant_keys.get(variant, ())})
        if clash:
            raise ValueError(f"--sweep {clash[0]}: the variant {variant!r} is defined by that key; sweep another "
                             "key, or leave that variant out")


def best_settings(table: Mapping[str, Mapping[str, Any]], settings: Mapping[str, Sequence[str]]
                  ) -> dict[str, dict[str, Any]]:
    """Per variant, the configuration with the highest mean held-out success after RL over its seeds, among
    those whose every planned seed finished (so every candidate is judged on the same seeds); a tie goes to the
    configuration listed first in ``settings`` (the plan's order: the order the command gave the values)."""
    order = [name for name in settings if name in table] + [name for name in table if name not in settings]
    best: dict[str, dict[str, Any]] = {}
    for name in order:
        row = table[name]
        if SEPARATOR not in name:
            continue
        mean = (row.get("after") or {}).get("mean")
        if mean is None or row.get("ok", 0) < row.get("runs", 0):
            continue
        variant = base_variant(name)
        if variant not in best or mean > best[variant]["after_mean"]:
            best[variant] = {"label": name, "overrides": list(settings.get(name, ())), "after_mean": mean,
                             "seeds": (row.get("after") or {}).get("n", 0)}
    return best


def tuned_overrides(folder: Path, variants: Sequence[str], suite: str) -> dict[str, list[str]]:
    """Each variant's best setting from the sweep on ``suite`` whose results ``folder`` holds (``--tuned-from``)."""
    path = folder / "results.json"
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tuned-from {folder}: no readable results.json ({exc.__class__.__name__}); run the "
                         "sweep there first (admire bench learning --sweep …)") from None
    sweep = payload.get("sweep") if isinstance(payload, dict) else None
    if not isinstance(sweep, dict) or not isinstance(sweep.get("best"), dict):
        raise ValueError(f"--tuned-from {folder}: its results hold no sweep; point it at a --sweep benchmark")
    if payload.get("suite") != suite:
        raise ValueError(f"--tuned-from {folder}: its sweep ran on {payload.get('suite')!r}, not {suite!r}; "
                         "settings are chosen on the suite they are used on")
    if payload.get("split") != "validation":
        raise ValueError(f"--tuned-from {folder}: its sweep ran on the {payload.get('split')!r} split; settings "
                         "are chosen on validation seeds only")
    missing = [v for v in variants if v not in sweep["best"]]
    if missing:
        raise ValueError(f"--tuned-from {folder}: no finished setting of {', '.join(missing)} in that sweep; "
                         "sweep those variants too, or leave them out")
    return {v: [str(o) for o in sweep["best"][v]["overrides"]] for v in variants}


def render_sweep(table: Mapping[str, Mapping[str, Any]], best: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The sweep's table: every configuration's held-out success, the best of each variant in bold."""
    rows = [name for name in table if SEPARATOR in name]
    if not rows:
        return []
    chosen = {entry["label"] for entry in best.values()}
    lines = ["", "Sweep (validation seeds): held-out success after RL in %, mean ± sample std over seeds, with its "
             "95% interval over seeds and episodes; each variant's best setting in bold is the one "
             "`--tuned-from` gives it.", "", "| configuration | seeds ok | after | 95% interval |",
             "|---|---|---|---|"]
    for name in rows:
        row = table[name]
        after = row.get("after") or {}
        interval = row.get("after_ci")
        shown = f"**{name}**" if name in chosen else name
        ci = "–" if not interval else f"[{percent(interval['low'])}, {percent(interval['high'])}]"
        lines.append(f"| {shown} | {row.get('ok', 0)}/{row.get('runs', 0)} | {mean_pm_std(after)} | {ci} |")
    return lines
