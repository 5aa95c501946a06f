"""A run as the viewer sees it: lazy, cached reads of what the trainer wrote, and the aggregates pages show.

Everything is read on demand and cached by the file's size and modification time, so the viewer of a
live run shows new epochs on reload without re-reading the old ones. Screenshot bytes are never read
here except by ``screenshot_bytes`` (an image request or the static export); trajectory lists come from
the index (``viz.index``), which keeps a dozen fields per trajectory, and a trajectory page reads one
line of one file.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from admire.config_migration import migrate
from admire.fileio import UnreadableFile, read_bounded
from admire.milestones.bank import MilestoneBank, MilestoneBankError, MilestoneList, milestone_key
from admire.runs import MAX_TRAJECTORY_FILE_BYTES, RunDir
from admire.tracking import read_metrics
from admire.types import RewardBreakdown, Termination, Trajectory
from admire.viz.index import TrajectoryIndex, TrajectoryRow, read_line, signature

SCREENSHOT_REF = re.compile(r"sha256-[0-9a-f]{32}")
OUTCOMES = ("success", "failure")
TERMINATIONS = tuple(t.value for t in Termination)
T = TypeVar("T")
MAX_CONFIG_BYTES = 16 << 20
"""config.yaml and summary.json are a few kilobytes; past 16 MiB a file is not one the trainer wrote."""
MAX_SCREENSHOT_BYTES = 64 << 20
"""A screenshot PNG is well under a megabyte; 64 MiB leaves room for any real screen."""
MAX_REWARDS_FILE_BYTES = MAX_TRAJECTORY_FILE_BYTES
"""A rewards file has a few numbers per step of its trajectory file, so it is never the larger one."""
UNREADABLE_LINE = (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)
"""What parsing one damaged line can raise (torn, binary, JSON of another shape, nested too deeply)."""

logger = logging.getLogger("admire.viz")


class ScreenshotRefused(PermissionError):
    """A screenshot request that resolves outside the run's screenshot folder (a symlink, a crafted ref)."""


class ScreenshotNotFound(FileNotFoundError):
    """A screenshot ref that is not a content hash, or has no file."""


# --------------------------------------------------------------------------------------------------
# Filters (the query parameters of the trajectory list)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrajectoryFilter:
    """Which trajectories a list shows. Every field None means "all"."""

    kind: str | None = None
    task: str | None = None
    outcome: str | None = None
    epoch: int | None = None
    termination: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> TrajectoryFilter:
        """Read query parameters; a bad value is a ``ValueError`` that names the parameter and the choices."""
        values: dict[str, Any] = {}
        for name in ("kind", "task", "outcome", "epoch", "termination"):
            raw = query.get(name)
            if raw is None or str(raw).strip() == "":
                continue
            values[name] = str(raw).strip()
        if "kind" in values and not re.fullmatch(r"[a-z]+", values["kind"]):
            raise ValueError(f"kind must be a word such as train or eval, got {values['kind']!r}")
        if "outcome" in values and values["outcome"] not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, got {values['outcome']!r}")
        if "termination" in values and values["termination"] not in TERMINATIONS:
            raise ValueError(f"termination must be one of {', '.join(TERMINATIONS)}, got {values['termination']!r}")
        if "epoch" in values:
            try:
                values["epoch"] = int(values["epoch"])
            except ValueError:
                raise ValueError(f"epoch must be a whole number, got {values['epoch']!r}") from None
            if values["epoch"] < 0:
                raise ValueError(f"epoch must be >= 0, got {values['epoch']}")
        return cls(**values)

    def matches(self, row: TrajectoryRow) -> bool:
        if self.kind is not None and row.kind != self.kind:
            return False
        if self.task is not None and row.task != self.task:
            return False
        if self.outcome is not None and row.success != (self.outcome == "success"):
            return False
        if self.epoch is not None and row.epoch != self.epoch:
            return False
        return self.termination is None or row.termination == self.termination

    def as_query(self) -> dict[str, str]:
        return {f.name: str(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None}

    def with_(self, **changes: Any) -> TrajectoryFilter:
        return replace(self, **changes)


# --------------------------------------------------------------------------------------------------
# Aggregates
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskSuccess:
    """One row of the per-task table: training success overall and in the last epoch, held-out first/last."""

    task: str
    train_episodes: int
    train_success: float | None
    last_train_success: float | None
    eval_first: float | None
    eval_last: float | None


@dataclass(frozen=True)
class MilestoneHitRow:
    """How often one phrase was hit, per training epoch (None: the phrase was not in the list then)."""

    phrase: str
    current: bool
    rates: dict[int, float | None]
    hits: int
    trials: int

    @property
    def overall(self) -> float | None:
        return self.hits / self.trials if self.trials else None


@dataclass(frozen=True)
class MilestoneHitTable:
    key: str
    epochs: list[int]
    trajectories: dict[int, int]  # scored trajectories of this key per epoch
    rows: list[MilestoneHitRow]


@dataclass(frozen=True)
class Series:
    """One line of a chart: (x, y) points with a name."""

    name: str
    points: list[tuple[float, float]]
    dashed: bool = False
    markers: bool = False


@dataclass
class _Cached:
    sig: Any = None
    value: Any = None


@dataclass
class _Caches:
    by_name: dict[str, _Cached] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str, sig: Any, load: Callable[[], T]) -> T:
        with self.lock:
            entry = self.by_name.setdefault(name, _Cached())
            if entry.sig is None or entry.sig != sig:
                entry.value, entry.sig = load(), sig
            return entry.value


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------

class RunData:
    """Read access to ``runs/<name>`` for the viewer, the export and notebooks."""

    def __init__(self, path: str | Path) -> None:
        self.run = RunDir(path)
        if not self.run.path.is_dir():
            raise FileNotFoundError(f"{self.run.path} is not a run directory; train one with `admire train`")
        if not self.run.trajectories.is_dir() and not self.run.config.exists():
            raise FileNotFoundError(f"{self.run.path} has neither config.yaml nor trajectories/: not an admire run")
        self.index = TrajectoryIndex(self.run.trajectories)
        self._caches = _Caches()

    @property
    def name(self) -> str:
        return self.run.path.resolve().name

    # -- config, metrics, summary --------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        def load() -> dict[str, Any]:
            try:  # bounded: a FIFO or /dev/zero named config.yaml must not hang the viewer
                text = read_bounded(self.run.config, MAX_CONFIG_BYTES, "config file").decode("utf-8")
                loaded = yaml.safe_load(text)
            except (OSError, ValueError, RecursionError, yaml.YAMLError):
                return {}
            return migrate(loaded) if isinstance(loaded, dict) else {}

        return self._caches.get("config", signature(self.run.config), load)

    def _section(self, name: str) -> dict[str, Any]:
        section = self.config.get(name)
        return section if isinstance(section, dict) else {}

    @property
    def threshold(self) -> float | None:
        """δ of the run's matcher (``milestone_reward.threshold``)."""
        value = self._section("milestone_reward").get("threshold")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    @property
    def key_kind(self) -> str:
        return str(self._section("milestone_reward").get("key") or "task")

    @property
    def update_before_reward(self) -> bool:
        return bool(self._section("milestone_reward").get("update_before_reward", True))

    @property
    def metrics(self) -> list[dict[str, Any]]:
        def load() -> list[dict[str, Any]]:
            try:  # read_metrics skips damaged lines; a file that is no regular file is left out whole
                return read_metrics(self.run.metrics)
            except (OSError, ValueError) as error:
                logger.warning("%s is left out of the viewer: %s", self.run.metrics, error)
                return []

        return self._caches.get("metrics", signature(self.run.metrics), load)

    @property
    def summary(self) -> dict[str, Any] | None:
        def load() -> dict[str, Any] | None:
            try:
                loaded = json.loads(read_bounded(self.run.summary, MAX_CONFIG_BYTES, "summary file"))
            except (OSError, ValueError, RecursionError):
                return None
            return loaded if isinstance(loaded, dict) else None

        return self._caches.get("summary", signature(self.run.summary), load)

    # -- trajectories ---------------------------------------------------------------------------

    def rows(self, where: TrajectoryFilter | None = None) -> list[TrajectoryRow]:
        rows = self.index.rows()
        return rows if where is None else [row for row in rows if where.matches(row)]

    def row(self, address: str) -> TrajectoryRow:
        """The row at ``train-0003-12``; ``KeyError`` when there is none."""
        match = re.fullmatch(r"([a-z]+)-(\d{1,9})-(\d{1,9})", address)
        if match is None:
            raise KeyError(f"{address!r} is not a trajectory address (kind-epoch-position, e.g. train-0003-12)")
        kind, epoch, position = match[1], int(match[2]), int(match[3])
        for row in self.rows():
            if row.kind == kind and row.epoch == epoch and row.position == position:
                return row
        raise KeyError(f"no trajectory {address} in {self.run.path}")

    def trajectory(self, row: TrajectoryRow) -> Trajectory:
        return Trajectory.from_json(read_line(self.run.trajectory_file(row.kind, row.epoch), row))

    def readable_trajectories(self, kind: str, epoch: int) -> tuple[list[Trajectory], int]:
        """The trajectories of one file and how many of its lines were skipped as unreadable (torn, binary,
        JSON that is no trajectory): the lines the viewer's pages leave out are left unscored, not fatal.
        A file that cannot be read at all (a directory, FIFO or device of that name, too large) raises
        ``OSError`` or ``UnreadableFile``."""
        path = self.run.trajectory_file(kind, epoch)
        data = read_bounded(path, MAX_TRAJECTORY_FILE_BYTES, "trajectory file")
        trajectories: list[Trajectory] = []
        skipped = 0
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                trajectories.append(Trajectory.from_json(line))
            except UNREADABLE_LINE:
                skipped += 1
        return trajectories, skipped

    def tasks(self) -> list[str]:
        return sorted({row.task for row in self.rows()})

    def kinds(self) -> list[str]:
        return sorted({row.kind for row in self.rows()}, key=lambda k: (k != "train", k))

    def epochs(self, kind: str | None = None) -> list[int]:
        return sorted({row.epoch for row in self.rows() if kind is None or row.kind == kind})

    @staticmethod
    def neighbours(
        rows: Sequence[TrajectoryRow], row: TrajectoryRow
    ) -> tuple[TrajectoryRow | None, TrajectoryRow | None]:
        """The rows before and after ``row`` in ``rows`` (for prev/next trajectory links)."""
        for i, candidate in enumerate(rows):
            if candidate.address == row.address:
                return (rows[i - 1] if i > 0 else None, rows[i + 1] if i + 1 < len(rows) else None)
        return None, None

    # -- rewards --------------------------------------------------------------------------------

    def rewards(self, kind: str, epoch: int) -> dict[str, list[RewardBreakdown]]:
        """Breakdowns by trajectory id for one file ({} when the file was never scored)."""
        path = self.run.rewards_file(kind, epoch)
        return self._caches.get(f"rewards:{kind}:{epoch}", signature(path) or "missing",
                                lambda: read_rewards_file(path))

    def rewards_for(self, row: TrajectoryRow) -> list[RewardBreakdown] | None:
        rewards = self.rewards(row.kind, row.epoch).get(row.id)
        return rewards if rewards is not None and len(rewards) == row.num_steps else None

    def unscored_files(self) -> list[tuple[str, int]]:
        """(kind, epoch) of trajectory files that have no rewards file, or an older one."""
        missing = []
        for kind, epoch, path in self.index.files():
            written, rewards = signature(path), signature(self.run.rewards_file(kind, epoch))
            if written is None:  # gone, or a link to nowhere: nothing to score
                continue
            if rewards is None or rewards.mtime_ns < written.mtime_ns:
                missing.append((kind, epoch))
        return missing

    # -- milestones -----------------------------------------------------------------------------

    def milestone_history(self) -> dict[str, list[MilestoneList]]:
        """Every version of every list, by key (the bank is opened, read and closed)."""
        def load() -> dict[str, list[MilestoneList]]:
            if not self.run.bank.exists():
                return {}
            try:
                with MilestoneBank(self.run.bank, readonly=True) as bank:
                    return {name: bank.history(name) for name in bank.keys()}  # noqa: SIM118 - not a dict
            except MilestoneBankError:
                return {}

        wal = Path(f"{self.run.bank}-wal")
        return self._caches.get("bank", (signature(self.run.bank), signature(wal)), load)

    def milestone_key(self, row: TrajectoryRow) -> str:
        kind = "instruction" if self.key_kind == "instruction" else "task"
        return milestone_key(row.task, goal=row.goal, key=kind)

    def lists_in_force(self, epoch: int) -> dict[str, MilestoneList]:
        """The list of each key that scored training epoch ``epoch`` (see ``lists_in_force``)."""
        return lists_in_force(self.milestone_history(), epoch, self.name, self.update_before_reward)

    def scoring_epoch(self, row: TrajectoryRow) -> int:
        """The training epoch whose bank scored ``row``: its own for training, the one before an
        evaluation (``eval_epoch_0005`` ran after training epoch 4; ``eval_epoch_0000`` before any, -1)."""
        return row.epoch if row.kind == "train" else row.epoch - 1

    def list_for(self, row: TrajectoryRow) -> MilestoneList | None:
        """The milestone list ``row`` was (or, for an evaluation, would have been) matched against."""
        return self.lists_in_force(self.scoring_epoch(row)).get(self.milestone_key(row))

    def hit_table(self, key: str) -> MilestoneHitTable:
        """Per-epoch hit rate of every phrase the key has ever had, from the training rewards."""
        history = self.milestone_history().get(key, [])
        rows = [row for row in self.rows(TrajectoryFilter(kind="train"))
                if row.termination != Termination.ENV_ERROR and self.milestone_key(row) == key]
        by_epoch: dict[int, list[TrajectoryRow]] = defaultdict(list)
        for row in rows:
            by_epoch[row.epoch].append(row)
        epochs = sorted(by_epoch)
        hits: dict[tuple[int, str], int] = defaultdict(int)
        trials: dict[int, int] = {}
        in_force: dict[int, tuple[str, ...]] = {}
        for epoch in epochs:
            current = self.lists_in_force(epoch).get(key)
            phrases = current.milestones if current is not None else ()
            scored = [(row, self.rewards_for(row)) for row in by_epoch[epoch]]
            scored = [(row, r) for row, r in scored if r is not None]
            in_force[epoch] = phrases
            trials[epoch] = len(scored)
            for _, rewards in scored:
                for phrase in hit_phrases(rewards, phrases):
                    hits[(epoch, phrase)] += 1
        latest = history[-1].milestones if history else ()
        ordered = list(dict.fromkeys([*latest, *(p for version in history for p in version.milestones)]))
        table_rows = []
        for phrase in ordered:
            rates: dict[int, float | None] = {}
            total_hits = total_trials = 0
            for epoch in epochs:
                if phrase in in_force[epoch] and trials[epoch]:
                    rates[epoch] = hits[(epoch, phrase)] / trials[epoch]
                    total_hits += hits[(epoch, phrase)]
                    total_trials += trials[epoch]
                else:
                    rates[epoch] = None
            table_rows.append(MilestoneHitRow(phrase, phrase in latest, rates, total_hits, total_trials))
        return MilestoneHitTable(key, epochs, trials, table_rows)

    # -- aggregates for the run page ------------------------------------------------------------

    def task_table(self) -> list[TaskSuccess]:
        rows = [row for row in self.rows() if row.termination != Termination.ENV_ERROR]
        train = [row for row in rows if row.kind == "train"]
        last_epoch = max((row.epoch for row in train), default=None)
        evals = sorted({row.epoch for row in rows if row.kind == "eval"})
        table = []
        for task in sorted({row.task for row in rows}):
            mine = [row for row in train if row.task == task]
            last = [row for row in mine if row.epoch == last_epoch]
            first_eval = [row for row in rows if row.kind == "eval" and row.task == task and evals
                          and row.epoch == evals[0]]
            last_eval = [row for row in rows if row.kind == "eval" and row.task == task and evals
                         and row.epoch == evals[-1]]
            table.append(TaskSuccess(task, len(mine), _rate(mine), _rate(last), _rate(first_eval),
                                     _rate(last_eval)))
        return table

    def curves(self) -> dict[str, list[Series]]:
        """The learning curves of the run page, from metrics.jsonl, by chart title."""
        records = self.metrics

        def series(key: str, name: str, **style: bool) -> Series:
            points = [(float(r["step"]), float(r[key])) for r in records
                      if isinstance(r.get(key), int | float) and isinstance(r.get("step"), int | float)]
            return Series(name, points, **style)

        charts = {
            "success rate": [series("train/success", "train"),
                             series("eval/success", "held-out (greedy)", markers=True)],
            "mean step reward": [series("reward/total", "total"), series("reward/outcome", "outcome"),
                                 series("reward/format", "format (η·)"),
                                 series("reward/milestone", "milestone (before λ)"),
                                 series("reward/process", "process", dashed=True),
                                 series("reward/judge", "judge", dashed=True)],
            "milestones": [series("milestones/coverage", "coverage"), series("milestones/hit_rate", "hit rate")],
        }
        return {title: [s for s in lines if s.points] for title, lines in charts.items()}

    # -- screenshots ----------------------------------------------------------------------------

    def screenshot_file(self, ref: str) -> Path:
        """The PNG of ``ref``, refusing anything that is not a content hash inside the screenshot folder."""
        if not isinstance(ref, str) or not SCREENSHOT_REF.fullmatch(ref):
            raise ScreenshotNotFound(f"{ref!r} is not a screenshot reference (sha256-<32 hex digits>)")
        folder = self.run.screenshots.resolve()
        path = (folder / f"{ref}.png").resolve()
        if path.parent != folder:
            raise ScreenshotRefused(f"screenshot {ref} resolves outside {folder}")
        if not path.is_file():
            raise ScreenshotNotFound(f"no screenshot {ref} in {folder}")
        return path

    def screenshot_bytes(self, ref: str) -> bytes:
        """The PNG's bytes; ``UnreadableFile`` for one that is too large to be a screenshot."""
        return read_bounded(self.screenshot_file(ref), MAX_SCREENSHOT_BYTES, "screenshot")

    def screenshot_data_uri(self, ref: str) -> str | None:
        """The screenshot inline, or None when it is missing or unreadable (the step says so instead)."""
        try:
            return "data:image/png;base64," + base64.b64encode(self.screenshot_bytes(ref)).decode("ascii")
        except (OSError, UnreadableFile):  # ScreenshotNotFound and ScreenshotRefused are OSErrors too
            return None


# --------------------------------------------------------------------------------------------------
# Pure helpers (tested on their own)
# --------------------------------------------------------------------------------------------------

def lists_in_force(
    history: Mapping[str, Sequence[MilestoneList]], epoch: int, run_name: str, update_before_reward: bool = True
) -> dict[str, MilestoneList]:
    """The version of each list that scored epoch ``epoch``.

    The trainer updates the bank from an epoch's successes before scoring that epoch when
    ``update_before_reward`` is on (the default), so the lists written *at* epoch e count for e; otherwise
    only those of earlier epochs. Lists written by another run or imported (static milestones) were
    there from the start.
    """
    chosen: dict[str, MilestoneList] = {}
    for key, versions in history.items():
        for version in versions:
            foreign = version.provenance.run != run_name
            written = version.provenance.epoch <= epoch if update_before_reward else version.provenance.epoch < epoch
            if foreign or written:
                chosen[key] = version
    return chosen


def hit_phrases(rewards: Iterable[RewardBreakdown], phrases: Sequence[str]) -> set[str]:
    """The phrases of ``phrases`` that a trajectory's steps matched (by text: a list that changed shape
    between versions still counts the phrase it shares)."""
    wanted = set(phrases)
    return {r.matched_milestone for r in rewards if r.matched_milestone is not None and r.matched_milestone in wanted}


def read_rewards_file(path: Path) -> dict[str, list[RewardBreakdown]]:
    """Breakdowns by trajectory id from one rewards file ({} when there is none or it cannot be read).

    ``RunDir.read_rewards`` trusts the file; the viewer must not, since a hand-edited or damaged rewards
    file would otherwise fail every page that shows rewards. A damaged line loses only its trajectory's
    breakdowns, shown as "not scored".
    """
    try:
        data = read_bounded(path, MAX_REWARDS_FILE_BYTES, "rewards file")
    except FileNotFoundError:
        return {}
    except (OSError, UnreadableFile) as error:
        logger.warning("%s is left out of the viewer: %s", path, error)
        return {}
    rewards: dict[str, list[RewardBreakdown]] = {}
    for line in data.splitlines():
        if line.strip():
            with contextlib.suppress(*UNREADABLE_LINE):
                record = json.loads(line)
                rewards[str(record["id"])] = [RewardBreakdown.model_validate(b) for b in record["rewards"]]
    return rewards


def _rate(rows: Sequence[TrajectoryRow]) -> float | None:
    return sum(row.success for row in rows) / len(rows) if rows else None
