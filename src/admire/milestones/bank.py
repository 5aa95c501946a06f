"""The milestone bank: durable, versioned milestone lists per key (method.md §2, Durability).

SQLite in WAL mode, one row per version, nothing ever overwritten: a run killed at any instant
reopens with the last committed version of every list, and the history of a list (who wrote it, from
which trajectory, at which epoch) stays inspectable. Every write is one ``BEGIN IMMEDIATE``
transaction, so several processes (rollout workers, a trainer, the CLI) can share one bank file; a
busy timeout makes writers queue rather than fail.

``version`` is a global counter over all lists (the row id, never reused), which a checkpoint records
so that a resumed run can tell whether the bank moved on.

The bank never writes into a file it did not create: an existing database is checked to be a bank
before anything else happens (no table added, no switch to WAL), ``readonly=True`` opens it with
SQLite's ``mode=ro`` for commands that only read, and every number a write stores is checked first
(a ``created_at`` of NaN or 1e300 would otherwise be stored for good and break every later reader).
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from admire.fileio import UnreadableFile, atomic_write_text, read_bounded
from admire.milestones.slots import skeleton
from admire.types import Task, Trajectory

BankMode = Literal["adaptive", "static"]
KeyKind = Literal["task", "instruction", "skeleton"]
SCHEMA_VERSION = 1
EXPORT_FORMAT = "admire-milestones"
BUSY_TIMEOUT_MS = 60_000
MAX_CREATED_AT = 253_402_300_799.0
"""The last second of year 9999: later (or negative) times are not times a list was written, and
``datetime`` cannot show them."""
MAX_EPOCH = 2**63 - 1
"""SQLite's INTEGER range."""
MAX_PHRASES = 256
"""Phrases per list at most (a generator writes up to eight; a hand-written static list may hold more)."""
MAX_PHRASE_CHARS = 1000
"""Characters per phrase at most: a milestone is a sentence, not a page."""
MAX_KEYS = 100_000
"""Keys in one milestone file at most: one per task template (AndroidWorld has 116, MiniWoB++ 128)."""
MAX_MILESTONE_FILE_BYTES = 256 << 20
"""An exported bank is far smaller than 256 MiB; a larger file (or a FIFO, a device) is not read."""
SQLITE_MAGIC = b"SQLite format 3\x00"


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


MilestoneEntry = tuple[str, tuple[str, ...], Provenance | None]
"""One list of a milestone file: key, phrases and the provenance it was exported with (if any)."""


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

    def __init__(self, path: str | Path, mode: BankMode = "adaptive", *, readonly: bool = False) -> None:
        """Open (or create) the bank at ``path``.

        ``readonly=True`` opens an existing bank for reading only (``MilestoneBankError`` when the file is
        missing or is not a bank) and never changes the file: what ``admire milestones show`` uses.
        """
        if mode not in ("adaptive", "static"):
            raise ValueError(f"the bank mode is 'adaptive' or 'static', got {mode!r}")
        self.mode: BankMode = mode
        self.path = str(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        if readonly:
            self._db = _connect_readonly(self.path)
            try:
                self._check_is_bank(empty_ok=False)
            except BaseException:
                self._db.close()
                raise
            return
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as error:
            raise MilestoneBankError(f"cannot open the milestone bank {self.path}: {error}") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._check_is_bank(empty_ok=True)  # before anything that writes: a foreign file stays untouched
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            # FULL: a committed version survives power loss too, not only a killed process. Writes
            # are rare (at most one per key per batch), so the extra fsync costs nothing that matters.
            self._db.execute("PRAGMA synchronous = FULL")
            self._create_schema()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise MilestoneBankError(f"{self.path} is not a usable milestone bank: {error}") from None
        except BaseException:
            self._db.close()
            raise

    # -- setup -----------------------------------------------------------------------------------

    def _check_is_bank(self, *, empty_ok: bool) -> None:
        """Refuse a database that is not a bank, reading only: ``empty_ok`` accepts one with no tables
        (a new file, which the writer then initialises)."""
        try:
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables and empty_ok:
                return
            schema = None
            if {"meta", "versions"} <= tables:
                columns = {row[1] for row in self._db.execute("PRAGMA table_info(versions)")}
                row = self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
                if set(_COLUMNS.replace(" ", "").split(",")) <= columns and row is not None:
                    schema = row[0]
        except sqlite3.DatabaseError as error:
            raise MilestoneBankError(f"{self.path} is not a usable milestone bank: {error}") from None
        if schema is None:
            what = f"it has the tables {', '.join(sorted(tables))}" if tables else "it is an empty database"
            raise MilestoneBankError(f"{self.path} is not an ADMIRE milestone bank ({what}); pass a bank file or "
                                     "a run directory, and leave other databases alone")
        if not str(schema).isdigit() or int(schema) > SCHEMA_VERSION:
            raise MilestoneBankError(
                f"{self.path} was written by a newer admire (bank schema {schema}, this one reads "
                f"{SCHEMA_VERSION}); upgrade admire to open it"
            )

    def _create_schema(self) -> None:
        with self._write() as db:
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
            # A name for this bank, kept by its copies: a run's checkpoint records it, so a resume tells its own
            # bank (or a backup of it) from another run's bank at the same or a higher version.
            db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('identity', ?)", (uuid.uuid4().hex,))
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
        if self.readonly:
            raise MilestoneBankError(f"the milestone bank {self.path} was opened read-only")
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
    def identity(self) -> str | None:
        """This bank's name, made when it was first opened for writing (None: a bank only ever read)."""
        row = self._read("SELECT value FROM meta WHERE name = 'identity'")
        return str(row[0][0]) if row else None

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
        try:
            with self._write() as db:
                return db.execute("DELETE FROM versions WHERE seq > ?", (int(version),)).rowcount
        except sqlite3.DatabaseError as error:  # a damaged file that still opened, a read-only one
            raise MilestoneBankError(f"{self.path} cannot be rolled back to version {version}: {error}") from None

    def export_json(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the latest version of every list to a JSON file (atomically) that ``import_json`` reads.

        An existing file is replaced only with ``overwrite=True`` (``FileExistsError`` otherwise), and
        never when it is this bank or its journal: exporting over the bank would destroy it.
        """
        target = Path(path)
        if self.is_own_file(target):
            raise MilestoneBankError(f"{target} is the milestone bank itself; export to a new .json file")
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
        return atomic_write_text(target, json.dumps(document, indent=2, ensure_ascii=False) + "\n",
                                 overwrite=overwrite)

    def is_own_file(self, path: str | Path) -> bool:
        """Whether writing ``path`` would write this bank's file or one of SQLite's side files for it."""
        return self.path != ":memory:" and _same_file_or_journal(Path(path), Path(self.path))

    def import_json(self, path: str | Path, freeze: bool = True) -> list[MilestoneList]:
        """Add the lists of a milestone file as new versions; ``freeze`` makes training leave them alone.

        Reads an ``export_json`` file, or a file written by hand: ``{"<key>": ["phrase", …], …}``.
        The file is checked completely before anything is written, and all of it is written in one
        transaction, so a bad file changes nothing. Importing works in static mode too: it is how
        static milestones get into a bank.
        """
        source = Path(path)
        return self.import_lists(read_milestone_file(source), source.name, freeze=freeze)

    def import_lists(self, entries: Sequence[MilestoneEntry], source: str, freeze: bool = True) -> list[MilestoneList]:
        """Add already-read entries (``read_milestone_file``) in one transaction: all of them or none.

        Entries without provenance are recorded as imported from ``source`` now. Every entry is checked
        before the transaction starts, so a bad one is named and nothing is written.
        """
        fallback = Provenance(run=f"import:{source}", epoch=0, trajectory_id=None, generator="manual",
                              created_at=time.time())
        checked = [(_check_key(key), _check_milestones(phrases, f"the milestones for {key!r}"),
                    _check_provenance(provenance or fallback, f"the provenance of {key!r}"))
                   for key, phrases, provenance in entries]
        with self._write() as db:
            return [_insert(db, key, phrases, provenance, frozen=freeze) for key, phrases, provenance in checked]

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
    _check_provenance(provenance, f"the provenance of {key!r}")
    (latest,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM versions WHERE key = ?", (key,)).fetchone()
    version = int(latest) + 1
    db.execute(
        f"INSERT INTO versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (key, version, json.dumps(list(phrases), ensure_ascii=False), provenance.run, int(provenance.epoch),
         provenance.trajectory_id, provenance.generator, float(provenance.created_at), int(frozen)),
    )
    return MilestoneList(key, version, phrases, provenance, frozen)


def _row_to_list(row: Sequence[Any]) -> MilestoneList:
    """A stored row as a list, tolerating values no check would let in today (a bank written by an older
    admire, or edited by hand): a reader shows them rather than failing on them."""
    key, version, milestones, run, epoch, trajectory_id, generator, created_at, frozen = row
    try:
        phrases = json.loads(milestones)
        if not isinstance(phrases, list):
            phrases = [milestones]
    except (TypeError, ValueError, RecursionError):
        phrases = [milestones]
    return MilestoneList(
        key=str(key),
        version=_int_or(version, 0),
        milestones=tuple(str(phrase) for phrase in phrases),
        provenance=Provenance(str(run), _int_or(epoch, 0), None if trajectory_id is None else str(trajectory_id),
                              str(generator), _float_or_nan(created_at)),
        frozen=bool(frozen),
    )


def _int_or(value: object, default: int) -> int:
    try:
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError, OverflowError):
        return default


def _float_or_nan(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"a milestone key must be a non-empty string, got {key!r}")
    return key


def _check_milestones(milestones: object, what: str) -> tuple[str, ...]:
    """The phrases, whitespace-normalised; at most ``MAX_PHRASES`` of at most ``MAX_PHRASE_CHARS`` characters
    of real Unicode each (a list of a million phrases took minutes to show; a lone surrogate cannot be stored)."""
    if isinstance(milestones, str) or not isinstance(milestones, Sequence):
        raise ValueError(f"{what} must be a list of phrases, got {type(milestones).__name__}")
    if len(milestones) > MAX_PHRASES:
        raise ValueError(f"{what} hold {len(milestones)} phrases; a list holds at most {MAX_PHRASES}")
    phrases: list[str] = []
    for i, phrase in enumerate(milestones):
        if not isinstance(phrase, str) or not phrase.strip():
            raise ValueError(f"{what}: phrase {i} must be a non-empty string, got {phrase!r:.80}")
        if len(phrase) > MAX_PHRASE_CHARS:
            raise ValueError(f"{what}: phrase {i} has {len(phrase)} characters; at most {MAX_PHRASE_CHARS}")
        try:
            phrase.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what}: phrase {i} holds a lone UTF-16 surrogate, which is not text") from None
        phrases.append(" ".join(phrase.split()))
    if not phrases:
        raise ValueError(f"{what} are empty; a milestone list needs at least one phrase")
    return tuple(phrases)


def _check_provenance(provenance: object, what: str = "the provenance") -> Provenance:
    """The provenance, if every field holds a value a reader can use; ValueError naming the field if not."""
    if not isinstance(provenance, Provenance):
        raise TypeError(f"provenance must be a Provenance, got {type(provenance).__name__}")
    for name in ("run", "generator"):
        if not isinstance(getattr(provenance, name), str):
            raise ValueError(f"{what}: {name} must be a string, got {getattr(provenance, name)!r}")
    if provenance.trajectory_id is not None and not isinstance(provenance.trajectory_id, str):
        raise ValueError(f"{what}: trajectory_id must be a string or null, got {provenance.trajectory_id!r}")
    _check_epoch(provenance.epoch, what)
    _check_created_at(provenance.created_at, what)
    return provenance


def _check_epoch(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise ValueError(f"{what}: epoch must be an integer from 0 to {MAX_EPOCH}, got {value!r}")
    return value


def _check_created_at(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not 0 <= value <= MAX_CREATED_AT:
        raise ValueError(f"{what}: created_at must be a Unix time in seconds from 0 to {MAX_CREATED_AT:.0f} "
                         f"(the year 9999), got {value!r}")
    return float(value)


def read_milestone_file(path: str | Path) -> list[MilestoneEntry]:
    """Every list of a milestone file, checked completely (keys, phrases, provenance and its numbers).

    ``FileNotFoundError`` or a ``ValueError`` naming the file, the key and the field; reading only, so
    a caller can check a file before it opens (or creates) a bank.
    """
    path = Path(path)
    try:
        document = json.loads(read_bounded(path, MAX_MILESTONE_FILE_BYTES, "milestone file").decode("utf-8"))
    except UnreadableFile as error:
        raise ValueError(str(error)) from None
    except FileNotFoundError:
        raise FileNotFoundError(f"no milestone file at {path}") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not a JSON milestone file") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        detail = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise ValueError(f"{path} is not a JSON milestone file: {detail}") from None
    except OSError as error:
        raise ValueError(f"cannot read the milestone file {path}: {error.strerror or error}") from None
    if not isinstance(document, Mapping):
        raise ValueError(f"{path}: a milestone file is a JSON object, either an `admire milestones export` "
                         'or {"<key>": ["phrase", ...]}')
    exported = document.get("format") == EXPORT_FORMAT
    lists = document.get("lists") if exported else document
    if not isinstance(lists, Mapping):
        raise ValueError(f"{path}: 'lists' must be an object of key → list")
    if len(lists) > MAX_KEYS:
        raise ValueError(f"{path} holds {len(lists)} keys; a milestone file may hold at most {MAX_KEYS} (a suite's "
                         "tasks); split it, or keep the keys a run trains on")
    entries: list[MilestoneEntry] = []
    for key, value in lists.items():
        where = f"{path}: key {key!r}"
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{path}: a milestone key must be a non-empty string, got {key!r}")
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
    missing = [name for name in ("run", "epoch", "generator", "created_at") if name not in data]
    if missing:
        raise ValueError(f"{where}: bad provenance (missing {', '.join(missing)})")
    provenance = Provenance(run=data["run"], epoch=data["epoch"], trajectory_id=data.get("trajectory_id"),
                            generator=data["generator"], created_at=data["created_at"])
    return _check_provenance(provenance, f"{where}: provenance")


def _connect_readonly(path: str) -> sqlite3.Connection:
    """A read-only connection (SQLite ``mode=ro``) that leaves the file and its folder as they were.

    A database with no ``-wal`` (or ``-journal``) beside it has everything in the main file and no other
    connection, so it is opened ``immutable``: SQLite then creates no ``-shm``/``-wal`` files either. One
    in use (a training run writing its bank) is opened plainly read-only, sharing that run's WAL.
    """
    file = Path(path)
    if path == ":memory:" or not file.is_file():
        raise MilestoneBankError(f"no milestone bank at {path}; pass a bank file or a run directory that has one")
    try:
        with file.open("rb") as handle:
            header = handle.read(len(SQLITE_MAGIC))
    except OSError as error:
        raise MilestoneBankError(f"cannot read {path}: {error.strerror or error}") from None
    if header != SQLITE_MAGIC:
        what = "an empty file" if not header else "not an SQLite database"
        raise MilestoneBankError(f"{path} is not an ADMIRE milestone bank ({what}); pass a bank file or a run "
                                 "directory")
    in_use = any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-journal"))
    uri = file.resolve().as_uri() + ("?mode=ro" if in_use else "?mode=ro&immutable=1")
    try:
        db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                             check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    except sqlite3.Error as error:
        raise MilestoneBankError(f"cannot open the milestone bank {path}: {error}") from None
    return db


def _same_file_or_journal(target: Path, bank: Path) -> bool:
    """Whether writing ``target`` would write the bank or one of its SQLite side files."""
    resolved = target.resolve()
    bank = bank.resolve()
    if resolved in {bank, Path(f"{bank}-wal"), Path(f"{bank}-shm"), Path(f"{bank}-journal")}:
        return True
    try:
        return target.exists() and bank.exists() and target.samefile(bank)
    except OSError:
        return False


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
