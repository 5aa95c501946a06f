"""The paper's comparisons, in the paper's shape, on this benchmark's runs (``admire bench learning --table N``).

Why a module of its own: the learning benchmark's main table lists variants; the paper argues with three
tables whose rows and columns mean something (which reward, which milestones, which algorithm), and a reader
checks our numbers against theirs cell by cell. ``TABLES`` names each table's variants; ``--table N`` trains
exactly those (unless ``--variants`` says otherwise), and the report renders every table that has at least
one finished row. A row that cannot run here is planned out with its reason and printed as "not run":

- Table 1, the reward signal: outcome-only, a process reward by an LLM judge, ADMIRE. The judge row needs an
  OpenAI-compatible endpoint (``reward.judge.base_url`` and ``.model``, through ``--set``).
- Table 3, where milestones come from: written by hand for the suite's tasks (a file shipped in
  ``admire/milestones/static/<suite>.json``), frozen from another run (the same seed's ADMIRE bank), adaptive.
- Table 4, the algorithm with and without the milestone term: GRPO, RLOO and DAPO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from admire.benchmarks.intervals import interval_text, mean_pm_std


@dataclass(frozen=True)
class PaperTable:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[str, ...]], ...]
    """(row name, the variant of each column)."""

    @property
    def variants(self) -> list[str]:
        return [variant for _, cells in self.rows for variant in cells]


TABLES: dict[str, PaperTable] = {
    "1": PaperTable("Table 1: the reward signal", ("held-out success after RL",),
                    (("outcome-only", ("outcome",)), ("process reward (LLM judge)", ("judge",)),
                     ("ADMIRE", ("admire",)))),
    "3": PaperTable("Table 3: where the milestones come from", ("held-out success after RL",),
                    (("static, written by hand", ("static_hand",)), ("static, frozen from another run", ("static",)),
                     ("adaptive (ADMIRE)", ("admire",)))),
    "4": PaperTable("Table 4: the RL algorithm, without and with the milestone term",
                    ("outcome-only", "with milestones (ADMIRE)"),
                    (("GRPO", ("outcome", "admire")), ("RLOO", ("outcome_rloo", "rloo")),
                     ("DAPO", ("outcome_dapo", "dapo")))),
}


def table_variants(numbers: Sequence[str]) -> list[str]:
    """The variants of the tables named, in order, each once; an unknown table is a one-line error."""
    unknown = [n for n in numbers if n not in TABLES]
    if unknown:
        raise ValueError(f"--table {unknown[0]}: the paper's tables here are {', '.join(TABLES)}")
    return list(dict.fromkeys(v for n in numbers for v in TABLES[n].variants))


def hand_written_milestones(suite: str) -> Path | None:
    """The milestones written by hand for ``suite``'s tasks, or None where none are shipped."""
    path = resources.files("admire.milestones").joinpath("static", f"{suite}.json")
    return Path(str(path)) if path.is_file() else None


def judge_configured(overrides: Sequence[str]) -> bool:
    """Whether a run with ``overrides`` and ``reward.mode=judge`` names an endpoint to judge with."""
    from admire.config import load_config
    from admire.llm import missing_endpoint_keys

    cfg = load_config(overrides=[*overrides, "reward.mode=judge"])
    section = cfg.reward.judge
    return not missing_endpoint_keys(section.model_dump() if section is not None else {})


def not_runnable(variants: Sequence[str], suite: str, common: Sequence[str]) -> dict[str, str]:
    """The variants among ``variants`` that cannot run here, with the reason the report prints."""
    reasons: dict[str, str] = {}
    if "judge" in variants and not judge_configured(common):
        reasons["judge"] = ("no judge endpoint: --set reward.judge.base_url=URL --set reward.judge.model=NAME "
                            "(or OPENAI_BASE_URL)")
    if "static_hand" in variants and hand_written_milestones(suite) is None:
        reasons["static_hand"] = f"no milestones written by hand for {suite} (admire/milestones/static/{suite}.json)"
    return reasons


def render_tables(summary: Mapping[str, Mapping[str, Any]], not_run: Mapping[str, str]) -> list[str]:
    """Every table with at least one finished row: after-RL success in % with its 95% interval over seeds and
    episodes (mean over seeds where no episodes were read), a row that did not run named with its reason."""
    lines: list[str] = []
    for number, table in TABLES.items():
        if not any(_finished(summary.get(v)) for v in table.variants):
            continue
        lines += ["", f"**{table.title}** (`--table {number}`)", "",
                  "| | " + " | ".join(table.columns) + " |", "|---|" + "---|" * len(table.columns)]
        for name, cells in table.rows:
            lines.append(f"| {name} | " + " | ".join(_cell(summary.get(v), not_run.get(v), v) for v in cells) + " |")
    return lines


def _finished(row: Mapping[str, Any] | None) -> bool:
    return bool(row) and (row.get("after") or {}).get("mean") is not None  # type: ignore[union-attr]


def _cell(row: Mapping[str, Any] | None, reason: str | None, variant: str) -> str:
    """A finished row's numbers (a row once left out and trained later shows its numbers, not the old reason)."""
    if not _finished(row):
        return f"not run: {reason}" if reason is not None else f"– (`{variant}`: no finished run)"
    assert row is not None
    interval = row.get("after_ci")
    after = row["after"]
    seeds = f"{after['n']} seed{'s' if after['n'] != 1 else ''}"
    return f"{interval_text(interval) if interval else mean_pm_std(after)} ({seeds})"
