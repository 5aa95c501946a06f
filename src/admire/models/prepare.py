"""Write a prepared model directory: checked first, built beside the target, renamed into place.

A half-written model directory is worse than none — a later ``actor_rollout_ref.model.path`` would load
it and fail somewhere inside transformers, or not fail at all — so the recipe builds into a hidden
sibling of ``DIR`` (same file system, so the final ``rename`` is atomic) and only a finished build is
renamed to ``DIR``. An interrupted build leaves ``DIR`` as it was. An existing non-empty ``DIR`` is
replaced only when asked (``force``), and then only after the new build has finished.

Each directory gets ``admire-model.json``: the recipe's name, the package it was built from and that
package's version, when, and the sha256 of every weight file — what a later check of a model path can
read to say which model it holds, and whether its weights changed since.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import uuid
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from admire.extras import MissingExtra, missing
from admire.fileio import unwritable_reason
from admire.models import MANIFEST, MODELS, ModelRecipe
from admire.progress import ProgressFn


class PrepareError(ValueError):
    """Input a user can fix (an unknown name, a directory in the way); the message is one line."""


def recipe(name: str) -> ModelRecipe:
    """The recipe registered as ``name``; an unknown name lists the known ones."""
    try:
        return MODELS.lookup(name)
    except ValueError as exc:  # the registry's message already names every known model
        raise PrepareError(str(exc)) from None


def check_installed(found: ModelRecipe) -> None:
    """Raise :class:`MissingExtra` (one line with the install command) when an import ``found`` needs is absent."""
    absent = missing(*found.requires)
    if absent:
        raise MissingExtra(f"model {found.name!r} needs {', '.join(absent)}: {found.install}")


REPLACEABLE = (MANIFEST, "admire-warm-start.json")
"""The records that mark a directory as written by ``admire models``: only such a directory is replaced."""


def check_target(directory: Path, force: bool) -> None:
    """Refuse a target that is a file, or a non-empty directory unless ``force`` and it is a model directory
    ``admire models`` wrote (its record is there): ``--force`` must never empty a folder of other files."""
    if directory.exists() and not directory.is_dir():
        raise PrepareError(f"{directory} exists and is not a directory; choose another DIR")
    if directory.is_dir() and any(directory.iterdir()):
        if not force:
            raise PrepareError(f"{directory} exists and is not empty; choose another DIR or pass --force to replace "
                               "it")
        if not any((directory / record).is_file() for record in REPLACEABLE):
            raise PrepareError(f"{directory} is not a model directory admire models wrote (no {MANIFEST}): --force "
                               "replaces only those; choose another DIR, or empty this one yourself")
    reason = unwritable_reason(directory)  # the build is staged beside DIR, so DIR's parent must take it
    if reason:
        raise PrepareError(f"cannot write {directory}: {reason}")


def check(name: str, directory: str | Path, force: bool = False) -> tuple[ModelRecipe, Path]:
    """Everything ``prepare`` refuses, checked without writing: the recipe and the absolute target."""
    found = recipe(name)
    target = Path(directory).expanduser().absolute()
    check_target(target, force)
    check_installed(found)
    return found, target


def prepare(name: str, directory: str | Path, *, force: bool = False,
            progress: ProgressFn | None = None) -> dict[str, Any]:
    """Write model ``name`` to ``directory`` and return its ``admire-model.json`` record.

    Everything a user can get wrong — the name, the target, a missing package — is checked before any
    file is written. ``progress(done, total)`` follows the recipe's stages.
    """
    found, target = check(name, directory, force)
    build = _resolve(found.build)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.preparing-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        build(staging, progress or (lambda done, total: None))
        record = manifest(found, staging)
        (staging / MANIFEST).write_text(json.dumps(record, indent=2) + "\n")
        _move_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


def manifest(found: ModelRecipe, directory: Path) -> dict[str, Any]:
    """The ``admire-model.json`` record of a built directory."""
    try:
        source_version = version(found.source)
    except PackageNotFoundError:
        source_version = None
    try:
        admire_version = version("admire")
    except PackageNotFoundError:
        admire_version = None
    weights = sorted(p for p in directory.iterdir() if p.suffix in {".safetensors", ".bin", ".gguf"})
    return {
        "name": found.name,
        "kind": found.kind,
        "source": {"package": found.source, "version": source_version},
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "admire_version": admire_version,
        "weights": {p.name: sha256(p) for p in weights},
    }


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(directory: str | Path) -> dict[str, Any] | None:
    """The ``admire-model.json`` of a directory, or None when it has none (not prepared by ``admire models``)."""
    path = Path(directory) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _move_into_place(staging: Path, target: Path) -> None:
    """``staging`` becomes ``target``; an old ``target`` (empty, or replaced under ``force``) is removed after."""
    if not target.exists():
        os.replace(staging, target)
        return
    old = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:8]}"
    os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(old, target)  # put the previous directory back
        raise
    shutil.rmtree(old, ignore_errors=True)
