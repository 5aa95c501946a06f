"""The milestone bank: durable, versioned milestone lists per key (method.md §2, Durability).

SQLite in WAL mode, one row per version, nothing ever overwritten: a run killed at any instant
reopens with the last committed version of every list, and the history of a list (who wrote it, from
which trajectory, at which epoch) stays inspectable. Every write is one ``BEGIN IMMEDIATE``
transaction, so several processes (rollout workers, a trainer, the CLI) can share one bank file; a
busy timeout makes writers queue rather than fail.

``version`` is a global counter over all lists (the row id, never reused), which a checkpoint records
so that a resumed run can tell whether the bank moved on.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from admire.fileio import atomic_write_text
from admire.milestones.slots import skeleton
from admire.types import Task, Trajectory

BankMode = Literal["adaptive", "static"]
KeyKind = Literal["task", "instruction", "skeleton"]
SCHEMA_VERSION = 1
EXPORT_FORMAT = "admire-milestones"
BUSY_TIMEOUT_MS = 60_000


class MilestoneBankError(RuntimeError):
    """The bank file cannot be used (wrong schema, not a bank)."""


class FrozenMilestonesError(MilestoneBankError):
    """A write to a static bank or a frozen list. Static milestones change only by an explicit import."""


@dataclass(frozen=True)
class Provenance:
    """Where a version came from: the run, epoch and trajectory it was distilled from, and by which Φ."""

    run: str
    epoch: int
    trajectory_id: str | None
    generator: str
    created_at: float


@dataclass(frozen=True)
class MilestoneList:
    key: str
    version: int
    milestones: tuple[str, ...]
    provenance: Provenance
    frozen: bool


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS versions (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    key           TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    milestones    TEXT    NOT NULL,
    run           TEXT    NOT NULL,
    epoch         INTEGER NOT NULL,
    trajectory_id TEXT,
    generator     TEXT    NOT NULL,
    created_at    REAL    NOT NULL,
    frozen        INTEGER NOT NULL,
    UNIQUE (key, version)
);
"""
_COLUMNS = "key, version, milestones, run, epoch, trajectory_id, generator, created_at, frozen"


class MilestoneBank:
    """Milestone lists by key, every version kept.

    ``mode="static"`` (the paper's Table 3 controls) makes the bank read-only for training: ``put``
    raises ``FrozenMilestonesError``, as it does for a list imported with ``freeze=True``. Raising
    rather than ignoring the write keeps a misconfigured run from silently training on lists it
    believes are adaptive; ``update_bank`` checks first and never tries.
    """

    def __init__(self, path: str | Path, mode: BankMode = "adaptive") -> None:
        if mode not in ("adaptive", "static"):
            raise ValueError(f"the bank mode is 'adaptive' or 'static', got {mode!r}")
        self.mode: BankMode = mode
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as error:
            raise MilestoneBankError(f"cannot open the milestone bank {self.path}: {error}") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            # FULL: a committed version survives power loss too, not only a killed process. Writes
            # are rare (at most one per key per batch), so the extra fsync costs nothing that matters.
            self._db.execute("PRAGMA synchronous = FULL")
            self._create_schema()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise MilestoneBankError(f"{self.path} is not a usable milestone bank: {error}") from None

    # -- setup -----------------------------------------------------------------------------------

    def _create_schema(self) -> None:
        with self._write() as db:
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta (name, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise MilestoneBankError(
                    f"{self.path} was written by a newer admire (bank schema {row[0]}, this one reads "
                    f"{SCHEMA_VERSION}); upgrade admire to open it"
                )

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. BEGIN IMMEDIATE takes the database's write lock up front, so two
        processes never both read the latest version and then collide on the insert."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: str) -> MilestoneList | None:
        """The latest version for ``key``, or None when it has no milestones yet."""
        rows = self._read(f"SELECT {_COLUMNS} FROM versions WHERE key = ? ORDER BY version DESC LIMIT 1",
                          (_check_key(key),))
        return _row_to_list(rows[0]) if rows else None

    def history(self, key: str) -> list[MilestoneList]:
        """Every version for ``key``, oldest first."""
        rows = self._read(f"SELECT {_COLUMNS} FROM versions WHERE key = ? ORDER BY version", (_check_key(key),))
        return [_row_to_list(row) for row in rows]

    def keys(self) -> list[str]:
        return [row[0] for row in self._read("SELECT DISTINCT key FROM versions ORDER BY key")]

    def latest(self) -> list[MilestoneList]:
        """The latest version of every list, by key."""
        rows = self._read(
            f"SELECT {_COLUMNS} FROM versions AS v WHERE version = "
            "(SELECT MAX(version) FROM versions WHERE key = v.key) ORDER BY key"
        )
        return [_row_to_list(row) for row in rows]

    @property
    def version(self) -> int:
        """A global version, raised by every write: 0 for an empty bank."""
        row = self._read("SELECT MAX(seq) FROM versions")[0]
        return int(row[0] or 0)

    def coverage(self, keys_seen: Iterable[str]) -> float:
        """Keys with milestones / keys seen (0.0 when nothing was seen): a logged metric (method.md §2)."""
        seen = set(keys_seen)
        if not seen:
            return 0.0
        return len(seen & set(self.keys())) / len(seen)

    # -- writing ---------------------------------------------------------------------------------

    def put(self, key: str, milestones: Sequence[str], provenance: Provenance) -> MilestoneList:
        """Store a new version of ``key``'s list and return it."""
        key = _check_key(key)
        phrases = _check_milestones(milestones, f"the milestones for {key!r}")
        if self.mode == "static":
            raise FrozenMilestonesError(
                f"the milestone bank {self.path} is static (milestone_reward.mode: static): its lists change "
                "only by `admire milestones import`; use mode 'adaptive' to let training write milestones"
            )
        with self._write() as db:
            latest = db.execute("SELECT version, frozen FROM versions WHERE key = ? ORDER BY version DESC "
                                "LIMIT 1", (key,)).fetchone()
            if latest is not None and latest[1]:
                raise FrozenMilestonesError(
                    f"the milestones for {key!r} were imported frozen (version {latest[0]}); import an "
                    "unfrozen list (`admire milestones import --no-freeze`) to let training change them"
                )
            return _insert(db, key, phrases, provenance, frozen=False)

    def rollback(self, version: int) -> int:
        """Forget every write after global ``version``; returns how many versions were removed.

        A resumed training run restores the bank to its checkpoint so that the epoch it redoes
        writes the same lists again instead of stacking a second copy on top of the first.
        """
        if int(version) < 0:
            raise ValueError(f"a bank version is >= 0, got {version}")
        with self._write() as db:
            return db.execute("DELETE FROM versions WHERE seq > ?", (int(version),)).rowcount

    def export_json(self, path: str | Path) -> Path:
        """Write the latest version of every list to a JSON file (atomically) that ``import_json`` reads."""
        lists = self.latest()
        document = {
            "format": EXPORT_FORMAT,
            "format_version": 1,
            "bank_version": self.version,
            "lists": {
                item.key: {
                    "milestones": list(item.milestones),
                    "version": item.version,
                    "frozen": item.frozen,
                    "provenance": asdict(item.provenance),
                }
                for item in lists
            },
        }
        return atomic_write_text(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")

    def import_json(self, path: str | Path, freeze: bool = True) -> list[MilestoneList]:
        """Add the lists of a milestone file as new versions; ``freeze`` makes training leave them alone.

        Reads an ``export_json`` file, or a file written by hand: ``{"<key>": ["phrase", …], …}``.
        The file is checked completely before anything is written, and all of it is written in one
        transaction, so a bad file changes nothing. Importing works in static mode too: it is how
        static milestones get into a bank.
        """
        source = Path(path)
        entries = _read_milestone_file(source)
        fallback = Provenance(run=f"import:{source.name}", epoch=0, trajectory_id=None, generator="manual",
                              created_at=time.time())
        with self._write() as db:
            return [_insert(db, key, phrases, provenance or fallback, frozen=freeze)
                    for key, phrases, provenance in entries]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> MilestoneBank:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MilestoneBank({self.path!r}, mode={self.mode!r})"


def _insert(db: sqlite3.Connection, key: str, phrases: tuple[str, ...], provenance: Provenance,
            frozen: bool) -> MilestoneList:
    """Append the next version of ``key``; the caller holds the write transaction."""
    _check_provenance(provenance)
    (latest,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM versions WHERE key = ?", (key,)).fetchone()
    version = int(latest) + 1
    db.execute(
        f"INSERT INTO versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (key, version, json.dumps(list(phrases), ensure_ascii=False), provenance.run, int(provenance.epoch),
         provenance.trajectory_id, provenance.generator, float(provenance.created_at), int(frozen)),
    )
    return MilestoneList(key, version, phrases, provenance, frozen)


def _row_to_list(row: Sequence[Any]) -> MilestoneList:
    key, version, milestones, run, epoch, trajectory_id, generator, created_at, frozen = row
    return MilestoneList(
        key=key,
        version=int(version),
        milestones=tuple(json.loads(milestones)),
        provenance=Provenance(run, int(epoch), trajectory_id, generator, float(created_at)),
        frozen=bool(frozen),
    )


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"a milestone key must be a non-empty string, got {key!r}")
    return key


def _check_milestones(milestones: object, what: str) -> tuple[str, ...]:
    if isinstance(milestones, str) or not isinstance(milestones, Sequence):
        raise ValueError(f"{what} must be a list of phrases, got {type(milestones).__name__}")
    phrases: list[str] = []
    for i, phrase in enumerate(milestones):
        if not isinstance(phrase, str) or not phrase.strip():
            raise ValueError(f"{what}: phrase {i} must be a non-empty string, got {phrase!r}")
        phrases.append(" ".join(phrase.split()))
    if not phrases:
        raise ValueError(f"{what} are empty; a milestone list needs at least one phrase")
    return tuple(phrases)


def _check_provenance(provenance: object) -> None:
    if not isinstance(provenance, Provenance):
        raise TypeError(f"provenance must be a Provenance, got {type(provenance).__name__}")


def _read_milestone_file(path: Path) -> list[tuple[str, tuple[str, ...], Provenance | None]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no milestone file at {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a JSON milestone file: {error}") from None
    if not isinstance(document, Mapping):
        raise ValueError(f"{path}: a milestone file is a JSON object, either an `admire milestones export` "
                         'or {"<key>": ["phrase", ...]}')
    exported = document.get("format") == EXPORT_FORMAT
    lists = document.get("lists") if exported else document
    if not isinstance(lists, Mapping):
        raise ValueError(f"{path}: 'lists' must be an object of key → list")
    entries: list[tuple[str, tuple[str, ...], Provenance | None]] = []
    for key, value in lists.items():
        where = f"{path}: key {key!r}"
        _check_key(key)
        provenance = None
        if exported:
            if not isinstance(value, Mapping) or "milestones" not in value:
                raise ValueError(f"{where} must be an object with 'milestones'")
            provenance = _provenance_from(value.get("provenance"), where)
            value = value["milestones"]
        entries.append((key, _check_milestones(value, where), provenance))
    return entries


def _provenance_from(data: object, where: str) -> Provenance | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: 'provenance' must be an object")
    try:
        return Provenance(run=str(data["run"]), epoch=int(data["epoch"]),
                          trajectory_id=None if data.get("trajectory_id") is None else str(data["trajectory_id"]),
                          generator=str(data["generator"]), created_at=float(data["created_at"]))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: bad provenance ({error})") from None


def milestone_key(
    source: Trajectory | Task | str,
    goal: str | None = None,
    key: KeyKind = "task",
) -> str:
    """The key a list is stored under (method.md §2, Key; §7).

    ``task``: the task name (``miniwob/login-user``), shared by every instance of the template.
    ``instruction``: the instruction itself, prefixed with the task name so that two suites that
    happen to phrase a goal alike never share milestones; whitespace is normalised.
    ``skeleton``: the task name and the instruction with its values replaced by positional placeholders
    (``slots.skeleton``), so instances of one structure share a list ("Select <v1>, <v2> and click
    Submit." is not "Select <v1> and click Submit.") and positional slots are safe (``slots.slot_scheme``).
    ``source`` is a trajectory, or a task (or task name) with ``goal`` for the instruction and skeleton keys.
    """
    if isinstance(source, Trajectory):
        task_name, goal = source.task.name, source.goal if goal is None else goal
    elif isinstance(source, Task):
        task_name = source.name
    elif isinstance(source, str) and source.strip():
        task_name = source
    else:
        raise TypeError(f"milestone_key needs a Trajectory, a Task or a task name, got {source!r}")
    if key == "task":
        return task_name
    if key in ("instruction", "skeleton"):
        if not isinstance(goal, str) or not goal.strip():
            raise ValueError(f"milestone_key(key={key!r}) needs the instruction: pass a Trajectory or goal=")
        text = skeleton(goal) if key == "skeleton" else " ".join(goal.split())
        return f"{task_name}::{text}"
    raise ValueError(f"milestone_reward.key is 'task', 'instruction' or 'skeleton', got {key!r}")
