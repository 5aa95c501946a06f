"""Checkpoints without pickle: every tensor in a safetensors file, everything else in JSON.

A ``.pt`` file is a pickle, and unpickling runs whatever code the file names, so a checkpoint someone
hands you could run a shell command the moment ``admire eval`` or ``resume=`` opened it (docs/decisions.md#d10). A
checkpoint here is two plain-data files that are only ever *parsed*:

```
checkpoints/
  epoch_0003.safetensors   every tensor: policy weights (and tensor extra state, e.g. the sampler's
                           generator state), optimizer moments and steps, the torch RNG state
  epoch_0003.json          everything else, as a tree whose tensor leaves name a tensor of the file
                           above: optimizer param_groups, python ``random`` and numpy RNG states, bank
                           version, TrainState (epoch, env steps, baseline, warm start); plus the
                           format version and the sha256 of the tensors file
  latest.json              the pointer, written last: the epoch, the names of its two files and the
                           sha256 of each
  start.*                  the run before its first epoch (after its warm start and its evaluation
                           before RL), never pruned: other runs may start from it
  warm.*                   only between the end of the warm start and start.*: a run killed while it
                           evaluates before RL resumes from here, its imitation kept
  rollout.*                the random states right after the newest epoch's rollouts, written before
                           them: a resume that reuses those rollouts puts these back; never latest
```

Writes are atomic and ordered (tensors, then the entry JSON, then ``latest.json``): a run killed
between any two writes still points at the previous checkpoint, whole. The JSON tree keeps Python
types exactly: tuples, dicts with non-string keys (optimizer state is keyed by parameter index), numpy
arrays (the numpy RNG state) and ``OrderedDict`` metadata are tagged objects ``{"__admire__": kind,
…}``; a leaf that is neither a tensor nor JSON data is refused when saving, never pickled.

Anything unreadable — missing, truncated, random bytes, a hash that does not match, a tree that names
a tensor the file lacks — raises :class:`CheckpointError`, a ``ValueError`` with a one-line message.
Old ``.pt`` checkpoints raise :class:`LegacyCheckpointError` naming the converter::

    python -m admire.checkpoints convert runs/<name> --trust

which is the only place ``torch.load`` runs: with ``weights_only=True`` first (torch's restricted
unpickler, enough for a bare state_dict), and with a full unpickle only when ``--trust`` is given.

Where a checkpoint is expected (``admire eval --checkpoint``, ``actor_rollout_ref.model.path``,
``resume=``) these forms are accepted: a run directory (its latest checkpoint), its ``checkpoints/``
folder, ``latest.json``, or one entry — ``epoch_XXXX.json`` or ``epoch_XXXX.safetensors`` (read with
the JSON beside it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from admire.errors import first_line
from admire.fileio import UnreadableFile, atomic_write_bytes, read_bounded

__all__ = [
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "LegacyCheckpointError",
    "convert",
    "has_checkpoint",
    "load",
    "load_policy",
    "load_rollout",
    "resolve",
    "save",
    "save_rollout",
    "save_start",
    "save_warm",
    "verify",
]

FORMAT = "admire-checkpoint"
VERSION = 1
LATEST = "latest.json"
START = "start"  # the entry written before the first epoch
WARM = "warm"  # the entry written once the warm start is done, before the evaluation before RL
ROLLOUT = "rollout"  # the random states right after an epoch's rollouts were written; latest.json never names it
TAG = "__admire__"
_ENTRY = re.compile(r"^epoch_(\d+)\.json$")
_NUMPY_KINDS = "biuf"  # the numpy dtypes a JSON array may be rebuilt as (never object arrays)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read as one: missing, truncated, corrupted, or of another format."""


class LegacyCheckpointError(CheckpointError):
    """A pickle ``.pt`` checkpoint from before the safetensors format; it is never unpickled."""


def legacy_message(path: Path) -> str:
    return (f"{path} is an old pickle checkpoint (.pt), and loading a pickle can run code, so admire no longer "
            f"loads them; if you trust where it came from, convert it with "
            f"`python -m admire.checkpoints convert {path} --trust`")


# ---- saving -------------------------------------------------------------------------------------

def save(directory: str | Path, state: Mapping[str, Any], epoch: int, keep: int = 3) -> Path:
    """Write ``epoch_XXXX.safetensors`` and ``epoch_XXXX.json``, then point ``latest.json`` at them; keep
    the newest ``keep`` epochs (``keep < 1`` keeps all). Returns the entry's JSON path."""
    folder = Path(directory)
    entry = _save_entry(folder, f"epoch_{int(epoch):04d}", state, int(epoch))
    prune(folder, keep)
    return entry


def save_start(directory: str | Path, state: Mapping[str, Any]) -> Path:
    """Write ``start.safetensors`` + ``start.json`` (the run before its first epoch: after the warm start and
    the evaluation before RL) and point ``latest.json`` at it. Pruning never removes it: other runs may start
    from it (``actor_rollout_ref.warm_start.from_run``)."""
    folder = Path(directory)
    entry = _save_entry(folder, START, state, 0)
    _remove_entry(folder, WARM)
    return entry


def save_warm(directory: str | Path, state: Mapping[str, Any]) -> Path:
    """Write ``warm.safetensors`` + ``warm.json`` (the run after its warm start, before its evaluation before
    RL) and point ``latest.json`` at it: a run killed while it evaluates resumes there instead of imitating
    the demonstrations again. :func:`save_start` removes it once the start is written."""
    return _save_entry(Path(directory), WARM, state, 0)


def save_rollout(directory: str | Path, state: Mapping[str, Any], epoch: int) -> Path:
    """Write ``rollout.safetensors`` + ``rollout.json``: what sampling left behind once ``epoch``'s rollouts
    are written (the random states). A run killed before that epoch's checkpoint reuses the written
    rollouts, and with these states the rest of its run samples what the uninterrupted run would have.
    ``latest.json`` is not moved: this is no point to resume from, and the next epoch's entry replaces it."""
    tensors_bytes, tree = encode({"epoch": int(epoch), "state": dict(state)})
    return write_entry(Path(directory), ROLLOUT, tensors_bytes, tree, epoch=int(epoch))


def load_rollout(directory: str | Path, epoch: int) -> dict[str, Any] | None:
    """The states :func:`save_rollout` wrote for ``epoch``; None when there are none (a run from before
    they were written) or they are another epoch's. An unreadable entry is a ``CheckpointError`` naming
    the way out: without it the written rollouts are reused with the checkpoint's random states."""
    entry = Path(directory) / f"{ROLLOUT}.json"
    if not entry.is_file():
        return None
    try:
        saved = load(entry)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; or delete {entry.parent / ROLLOUT}.* to resume without the random states "
                              "written after the last rollouts") from None
    if saved.get("epoch") != int(epoch) or not isinstance(saved.get("state"), dict):
        return None
    return dict(saved["state"])


def _save_entry(folder: Path, stem: str, state: Mapping[str, Any], epoch: int) -> Path:
    """Write the entry ``stem`` (tensors, then its JSON) and point ``latest.json`` at it."""
    tensors_bytes, tree = encode(state)
    entry = write_entry(folder, stem, tensors_bytes, tree, epoch=epoch)
    write_latest(folder, entry, epoch=epoch)
    return entry


def _remove_entry(folder: Path, stem: str) -> None:
    (folder / f"{stem}.json").unlink(missing_ok=True)  # the JSON first: no entry names a missing file
    (folder / f"{stem}.safetensors").unlink(missing_ok=True)


def encode(state: Mapping[str, Any]) -> tuple[bytes, Any]:
    """The safetensors bytes of every tensor in ``state`` and the JSON tree of the rest."""
    from safetensors.torch import save as save_tensors

    tensors: dict[str, Any] = {}
    tree = _encode(state, "", tensors)
    return save_tensors(tensors), tree


def write_entry(folder: Path, stem: str, tensors_bytes: bytes, tree: Any, epoch: int | None) -> Path:
    """Tensors first, then the JSON that names them and their hash: a JSON entry never points at a
    tensors file that is not yet whole."""
    tensors_name = f"{stem}.safetensors"
    atomic_write_bytes(folder / tensors_name, tensors_bytes)
    document = {"format": FORMAT, "version": VERSION, "epoch": epoch, "tensors": tensors_name,
                "tensors_sha256": _sha256(tensors_bytes), "state": tree}
    path = folder / f"{stem}.json"
    atomic_write_bytes(path, _dump(document))
    return path


def write_latest(folder: Path, entry: Path, epoch: int | None) -> Path:
    document = json.loads(entry.read_bytes())
    pointer = {"format": FORMAT, "version": VERSION, "kind": "latest", "epoch": epoch, "entry": entry.name,
               "entry_sha256": _sha256(entry.read_bytes()), "tensors": document["tensors"],
               "tensors_sha256": document["tensors_sha256"]}
    return atomic_write_bytes(folder / LATEST, _dump(pointer))


def prune(folder: Path, keep: int) -> None:
    """Remove entries older than the newest ``keep`` (both files); never the one ``latest.json`` names."""
    if keep < 1:
        return
    epochs = sorted({int(m.group(1)) for p in folder.glob("epoch_*.json") if (m := _ENTRY.match(p.name))})
    current = _latest_entry_name(folder)
    for epoch in epochs[:-keep]:
        stem = f"epoch_{epoch:04d}"
        if f"{stem}.json" == current:
            continue
        _remove_entry(folder, stem)


def _encode(value: Any, where: str, tensors: dict[str, Any]) -> Any:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        name = where or "tensor"
        while name in tensors:
            name += "'"
        tensors[name] = value.detach().to("cpu").contiguous().clone()  # its own storage: safetensors refuses shared
        return {TAG: "tensor", "name": name}
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):  # numpy float64 is a float; exact through JSON (repr round-trips)
        return int(value) if isinstance(value, int) else float(value)
    if isinstance(value, np.generic):
        return _encode(value.item(), where, tensors)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMPY_KINDS:
            raise TypeError(f"cannot store the {value.dtype} array at {where!r} in a checkpoint; only numeric arrays")
        return {TAG: "ndarray", "dtype": value.dtype.str, "shape": list(value.shape), "data": value.ravel().tolist()}
    if isinstance(value, tuple):
        return {TAG: "tuple", "items": [_encode(v, f"{where}/{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{where}/{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        items = [(k, _encode(v, f"{where}/{k}".lstrip("/"), tensors)) for k, v in value.items()]
        metadata = getattr(value, "_metadata", None)  # a module state_dict's per-module versions
        if all(isinstance(k, str) for k, _ in items) and TAG not in value and metadata is None:
            return dict(items)
        keys = [_encode(k, where, {}) if not isinstance(k, str) else k for k, _ in items]
        if any(isinstance(k, dict) for k in keys):
            raise TypeError(f"cannot store a dict key of type {type(next(iter(value))).__name__} at {where!r}")
        tagged: dict[str, Any] = {TAG: "dict", "items": [[k, v] for k, (_, v) in zip(keys, items, strict=True)]}
        if metadata is not None:
            tagged["metadata"] = _encode(dict(metadata), f"{where}/_metadata", {})
        return tagged
    raise TypeError(f"cannot store a {type(value).__name__} at {where!r} in a checkpoint: only tensors, numbers, "
                    "strings, lists, tuples, dicts and numeric numpy arrays are kept (nothing is pickled)")


# ---- loading ------------------------------------------------------------------------------------

def has_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` (a run or ``checkpoints/`` folder) holds a checkpoint, new or old format."""
    folder = _checkpoints_folder(Path(path))
    return (folder / LATEST).exists() or any(folder.glob("*.pt"))


def verify(path: str | Path) -> None:
    """Raise ``CheckpointError`` unless the checkpoint of a run (or ``checkpoints/`` folder), if it has one, is
    readable: a resume checks this before it opens the bank or starts a browser, so a broken or pickle
    checkpoint is one line with nothing changed on disk."""
    if has_checkpoint(path):
        load(path)


def resolve(path: str | Path) -> tuple[Path, str | None]:
    """The entry JSON that ``path`` names (see the module docstring for the accepted forms) and the
    sha256 it must have (known when reached through ``latest.json``)."""
    path = Path(path)
    if path.suffix == ".pt":
        if not path.exists():
            raise CheckpointError(f"no checkpoint at {path}")
        raise LegacyCheckpointError(legacy_message(path))
    if path.is_dir():
        folder = _checkpoints_folder(path)
        if (folder / LATEST).is_file():
            return _follow_latest(folder / LATEST)
        old = sorted(folder.glob("latest.pt")) or sorted(folder.glob("*.pt"))
        if old:
            raise LegacyCheckpointError(legacy_message(path))
        raise CheckpointError(f"no checkpoint in {path} (no {LATEST} under {folder}); pass a run directory "
                              "that has one, or a checkpoint's .json or .safetensors file")
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    if path.name == LATEST:
        return _follow_latest(path)
    if path.suffix == ".safetensors":
        entry = path.with_suffix(".json")
        if not entry.is_file():
            raise CheckpointError(f"{path} has no {entry.name} beside it, which holds the rest of the checkpoint")
        return entry, None
    if path.suffix == ".json":
        return path, None
    raise CheckpointError(f"{path} is not a checkpoint; pass a run directory, its checkpoints/ folder, or a "
                          "checkpoint's .json or .safetensors file")


def load(path: str | Path) -> dict[str, Any]:
    """The saved state, tensors on the CPU, with the types it was saved with. Nothing is unpickled."""
    entry, expected_sha = resolve(path)
    raw = _read(entry, MAX_DOCUMENT_BYTES)
    if expected_sha is not None and _sha256(raw) != expected_sha:
        raise CheckpointError(f"{entry} does not match the sha256 {LATEST} records (changed or half-copied); "
                              "restore it or pass another checkpoint")
    document = _parse_json(raw, entry)
    _check_header(document, entry)
    tensors_name = document.get("tensors")
    if not isinstance(tensors_name, str) or Path(tensors_name).name != tensors_name or not tensors_name:
        raise CheckpointError(f"{entry} names no tensors file of its own folder; it is not a valid checkpoint")
    tensors_path = entry.parent / tensors_name
    data = _read(tensors_path)
    if _sha256(data) != document.get("tensors_sha256"):
        raise CheckpointError(f"{tensors_path} does not match the sha256 in {entry.name} (truncated, changed or "
                              "from another save); restore it or pass another checkpoint")
    tensors = _load_tensors(data, tensors_path)
    used: set[str] = set()
    try:
        state = _decode(document.get("state"), tensors, used)
    except RecursionError:
        raise CheckpointError(f"{entry} is nested too deeply to be a checkpoint") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{entry} is not a valid checkpoint: {first_line(exc)}") from None
    if set(tensors) != used:
        raise CheckpointError(f"{tensors_path} holds tensors {entry.name} does not name; the two files are from "
                              "different saves")
    if not isinstance(state, dict):
        raise CheckpointError(f"{entry} holds no checkpoint state")
    return state


def load_policy(path: str | Path) -> dict[str, Any]:
    """The policy's state_dict from a checkpoint (any accepted form)."""
    state = load(path)
    policy = state.get("policy")
    if not isinstance(policy, Mapping):
        raise CheckpointError(f"the checkpoint at {path} holds no policy weights")
    return dict(policy) if not isinstance(policy, OrderedDict) else policy


def check_weight_types(expected: Mapping[str, Any], given: Mapping[str, Any], source: str | Path) -> None:
    """``CheckpointError`` when a tensor of ``given`` has another dtype than the tensor of the same name in
    ``expected`` (a module's ``state_dict``). ``load_state_dict`` would copy an int8 or float64 tensor into a
    float32 parameter without a word, so a tampered or foreign checkpoint would load as different weights."""
    for name, value in given.items():
        target = expected.get(name)
        if isinstance(value, Mapping) and isinstance(target, Mapping):  # a module's extra state
            check_weight_types(target, value, source)
            continue
        value_dtype, target_dtype = getattr(value, "dtype", None), getattr(target, "dtype", None)
        if value_dtype is not None and target_dtype is not None and value_dtype != target_dtype:
            raise CheckpointError(f"{source}: the weight {name!r} is {value_dtype} where the policy holds "
                                  f"{target_dtype}; a checkpoint of this policy stores it as it is trained")


def _checkpoints_folder(path: Path) -> Path:
    return path / "checkpoints" if (path / "checkpoints").is_dir() else path


def _follow_latest(pointer: Path) -> tuple[Path, str | None]:
    document = _parse_json(_read(pointer, MAX_DOCUMENT_BYTES), pointer)
    _check_header(document, pointer)
    name = document.get("entry")
    sha = document.get("entry_sha256")
    if not isinstance(name, str) or not name or Path(name).name != name or not isinstance(sha, str):
        raise CheckpointError(f"{pointer} names no checkpoint entry of its folder; it is not a valid pointer")
    entry = pointer.parent / name
    if not entry.is_file():
        raise CheckpointError(f"{pointer} points at {name}, which is missing; restore it or pass another checkpoint")
    return entry, sha


def _latest_entry_name(folder: Path) -> str | None:
    try:
        return str(json.loads((folder / LATEST).read_bytes()).get("entry"))
    except (OSError, ValueError, AttributeError):
        return None


def _check_header(document: Any, path: Path) -> None:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an admire checkpoint (no format {FORMAT!r})")
    version = document.get("version")
    if version != VERSION:
        raise CheckpointError(f"{path} is checkpoint format version {version!r}; this admire reads version "
                              f"{VERSION}; use the admire that wrote it")


MAX_TENSORS_BYTES = 64 << 30
"""A checkpoint's safetensors file may be at most 64 GiB (the CPU trainer's policies are megabytes; a LoRA
adapter of a 7B model is well under a gigabyte)."""
MAX_DOCUMENT_BYTES = 256 << 20
"""Its JSON entry and ``latest.json`` at most 256 MiB (they hold the tree, the RNG states, the bank version)."""


def _read(path: Path, limit: int = MAX_TENSORS_BYTES) -> bytes:
    try:
        return read_bounded(path, limit, "checkpoint file")
    except UnreadableFile as exc:
        raise CheckpointError(str(exc)) from None
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint file at {path}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None


def _parse_json(raw: bytes, path: Path) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(f"{path} is not readable JSON (truncated or corrupted); restore it or pass another "
                              "checkpoint") from None


def _load_tensors(data: bytes, path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load as load_tensors

    try:
        return load_tensors(data)
    except (SafetensorError, ValueError, RuntimeError, TypeError, OverflowError) as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({first_line(exc)}); restore it or pass "
                              "another checkpoint") from None


def _decode(value: Any, tensors: Mapping[str, Any], used: set[str]) -> Any:
    import numpy as np

    if isinstance(value, list):
        return [_decode(v, tensors, used) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    if kind is None:
        return {k: _decode(v, tensors, used) for k, v in value.items()}
    if kind == "tensor":
        name = value["name"]
        if name not in tensors:
            raise KeyError(f"it names tensor {name!r}, which its tensors file lacks")
        used.add(name)
        return tensors[name]
    if kind == "tuple":
        return tuple(_decode(v, tensors, used) for v in value["items"])
    if kind == "ndarray":
        dtype = np.dtype(str(value["dtype"]))
        if dtype.kind not in _NUMPY_KINDS:
            raise ValueError(f"array dtype {dtype} is not numeric")
        return np.asarray(value["data"], dtype=dtype).reshape([int(n) for n in value["shape"]])
    if kind == "dict":
        pairs = [(_decode(k, tensors, used), _decode(v, tensors, used)) for k, v in value["items"]]
        if "metadata" not in value:
            return dict(pairs)
        ordered: OrderedDict[Any, Any] = OrderedDict(pairs)
        ordered._metadata = _decode(value["metadata"], tensors, used)  # type: ignore[attr-defined]
        return ordered
    raise ValueError(f"unknown tagged value {kind!r}")


def _dump(document: Any) -> bytes:
    return (json.dumps(document, separators=(",", ":")) + "\n").encode("utf-8")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- converting old .pt checkpoints (the one place torch.load runs) ------------------------------

def convert(path: str | Path, trust: bool = False) -> list[Path]:
    """Rewrite old ``.pt`` checkpoints as safetensors + JSON beside them; returns the entries written.

    ``path`` is a run directory, its ``checkpoints/`` folder, or one ``.pt`` file. Each file is read with
    ``weights_only=True`` (torch's restricted unpickler) first; a full unpickle — which runs any code
    the file names — only with ``trust``. The ``.pt`` files are left in place.
    """
    path = Path(path)
    if path.is_dir():
        folder = _checkpoints_folder(path)
        files = sorted(folder.glob("epoch_*.pt"))
        if (folder / "latest.pt").is_file():
            files.append(folder / "latest.pt")
        if not files:
            raise CheckpointError(f"no .pt checkpoint in {folder}")
    elif path.is_file() and path.suffix == ".pt":
        files = [path]
    else:
        raise CheckpointError(f"no .pt checkpoint at {path}; pass a run directory or a .pt file")
    written: list[Path] = []
    for file in files:
        state = _torch_load(file, trust)
        if not (isinstance(state, Mapping) and "policy" in state):
            state = {"policy": state}  # a bare state_dict, as `actor_rollout_ref.model.path` accepted
        epoch = _epoch_of(file, state)
        stem = f"epoch_{epoch:04d}" if epoch is not None else file.stem
        tensors_bytes, tree = encode(state)
        entry = write_entry(file.parent, stem, tensors_bytes, tree, epoch=epoch)
        if file.name == "latest.pt":
            write_latest(file.parent, entry, epoch=epoch)
        written.append(entry)
    return written


def _torch_load(file: Path, trust: bool) -> Any:
    import torch

    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a hostile or odd pickle may raise anything; each is one line
        if not trust:
            raise CheckpointError(f"{file} cannot be read without a full unpickle ({first_line(exc)}), which runs "
                                  "any code the file names; if you trust where it came from, add --trust") from None
    try:
        return torch.load(file, map_location="cpu", weights_only=False)  # the user vouched for this file
    except Exception as exc:  # noqa: BLE001 - as above
        raise CheckpointError(f"{file} is not a readable torch checkpoint: {first_line(exc)}") from None


def _epoch_of(file: Path, state: Mapping[str, Any]) -> int | None:
    """The epoch a checkpoint finished: from its name (``epoch_0003.pt``), else from its state (the next
    epoch to run, less one), else none (a bare policy file keeps its own name)."""
    match = re.match(r"^epoch_(\d+)$", file.stem)
    if match:
        return int(match.group(1))
    train_state = state.get("state")
    if isinstance(train_state, Mapping) and isinstance(train_state.get("epoch"), int):
        return max(int(train_state["epoch"]) - 1, 0)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m admire.checkpoints",
                                     description="Convert old pickle (.pt) checkpoints to safetensors + JSON.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    convert_parser = sub.add_parser("convert", help="rewrite a run's (or one file's) .pt checkpoints")
    convert_parser.add_argument("path", help="a run directory, its checkpoints/ folder, or a .pt file")
    convert_parser.add_argument("--trust", action="store_true",
                                help="allow a full unpickle, which runs any code in the file: only for files "
                                     "you made or trust")
    args = parser.parse_args(argv)
    try:
        written = convert(args.path, trust=args.trust)
    except (CheckpointError, TypeError, OSError) as exc:
        print(f"admire.checkpoints convert: error: {first_line(exc)}", file=sys.stderr)
        return 2
    for entry in written:
        print(f"wrote {entry} (+ {entry.with_suffix('.safetensors').name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
