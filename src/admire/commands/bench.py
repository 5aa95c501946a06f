"""``admire bench [NAME ...] [-- ARGS]`` — run the benchmarks of ``admire.benchmarks``, each in its own process.

The benchmarks ship in the package (``src/admire/benchmarks/``), so they run from an installed package
as well as from a clone; each is a module with ``main(argv) -> int`` that prints ratios measured side by
side in one run (these machines are shared and noisy, so absolute times mislead). ``--dir`` runs the
``*.py`` files of another folder the same way.

Each benchmark runs in a fresh Python process: one that crashes, exits non-zero or hangs past
``--timeout`` is reported and the others still run, and no benchmark inherits another's imports,
threads or browser processes. The child imports the packaged module by its name (a file from ``--dir``
is loaded under a module name registered in ``sys.modules``: a dataclass needs its module there) and
calls ``main(argv)``. A header before each benchmark says which one runs and how many remain.

Arguments after a single name go to that benchmark (``admire bench learning --seeds 0 1 2``; a ``--``
before them is optional); with several names, none are passed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HELP = "run the packaged benchmarks (default: all but the opt-in ones), each in its own process"
PACKAGE = "admire.benchmarks"

# What the child process runs: import the packaged module (or load a --dir file as a registered module),
# call main(argv) (or main() for a script that reads sys.argv itself), exit with its return code.
_RUNNER = """\
import importlib, importlib.util, inspect, os, sys
name, path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [path, *argv]
if name.startswith('admire.benchmarks.'):
    module = importlib.import_module(name)
else:
    sys.path.insert(0, os.path.dirname(path))  # sibling helpers import as they do from a script
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
main = getattr(module, 'main', None)
if main is None:
    sys.exit(f'admire bench: {path} has no main(argv) function')
takes_argv = bool(inspect.signature(main).parameters)
sys.exit(int((main(argv) if takes_argv else main()) or 0))
"""


@dataclass(frozen=True)
class Outcome:
    """How one benchmark ended: its exit code (``None`` when it was stopped at the timeout)."""

    name: str
    code: int | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.code == 0

    def describe(self) -> str:
        state = "ok" if self.ok else ("timed out" if self.code is None else "FAILED")
        code = "-" if self.code is None else str(self.code)
        return f"{self.name:<24} {state:<9} exit {code:>4}  {self.seconds:8.1f} s"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--dir", default=None,
                        help="run the *.py benchmarks of this folder instead of the packaged ones")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop a benchmark after this many seconds and report it as timed out")
    parser.add_argument("names", nargs=argparse.REMAINDER, metavar="NAME [-- ARGS]",
                        help="benchmarks to run (file names without .py; default: all); arguments after a "
                             "single name are passed to its main(argv)")


def benchmarks_dir(explicit: str | None = None) -> Path:
    """The folder of the packaged benchmarks (``admire/benchmarks``, wherever the package is installed),
    or ``explicit``."""
    if explicit is None:
        return Path(__file__).resolve().parents[1] / "benchmarks"
    folder = Path(explicit)
    if not folder.is_dir():
        raise FileNotFoundError(f"--dir: no folder {folder}")
    return folder


def discover(folder: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")}


def module_name(name: str, path: Path) -> str:
    """What the child imports: ``admire.benchmarks.<name>`` for a packaged benchmark, else a private
    name under which the file is loaded."""
    packaged = path.resolve().parent == benchmarks_dir().resolve()
    return f"{PACKAGE}.{name}" if packaged else f"admire_bench_{name}"


_OPT_IN = re.compile(r"^RUN_BY_DEFAULT\s*=\s*False\b", re.MULTILINE)


def runs_by_default(path: Path) -> bool:
    """False for a benchmark that declares ``RUN_BY_DEFAULT = False`` (hours of training, such as
    ``learning``): ``admire bench`` alone skips it, ``admire bench NAME`` runs it. Read from the text, so
    listing benchmarks imports none of them."""
    return _OPT_IN.search(path.read_text(encoding="utf-8")) is None


def split_names(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """Leading bare words are benchmark names; everything from the first option (or ``--``) on is
    the benchmark's own arguments."""
    names: list[str] = []
    for i, token in enumerate(tokens):
        if token.startswith("-"):
            rest = list(tokens[i:])
            return names, rest[1:] if rest[0] == "--" else rest
        names.append(token)
    return names, []


def run(args: argparse.Namespace) -> int:
    try:
        folder = benchmarks_dir(args.dir)
    except FileNotFoundError as exc:
        print(f"admire bench: error: {exc}", file=sys.stderr)
        return 2
    found = discover(folder)
    if args.list:
        for name in found:
            print(name)
        return 0
    names, passed = split_names(args.names)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"admire bench: error: unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(found)}",
              file=sys.stderr)
        return 2
    if passed and len(names) != 1:
        print("admire bench: error: arguments for a benchmark need exactly one benchmark name before them",
              file=sys.stderr)
        return 2
    selected = names or [name for name, path in found.items() if runs_by_default(path)]
    skipped = [name for name in found if not names and name not in selected]
    print(f"admire bench: {len(selected)} benchmark(s), each in its own process: {', '.join(selected)}"
          + (f" (opt-in, run only when named: {', '.join(skipped)})" if skipped else ""), flush=True)
    outcomes = [run_one(name, found[name], passed, index=i, total=len(selected), timeout=args.timeout)
                for i, name in enumerate(selected, start=1)]
    print_summary(outcomes)
    return 0 if all(o.ok for o in outcomes) else 1


def run_one(name: str, path: Path, argv: Sequence[str], *, index: int, total: int,
            timeout: float | None = None) -> Outcome:
    """Run one benchmark in a child process, its output passed straight through."""
    shown = " ".join([name, *argv])
    remaining = total - index
    print(f"\n=== [{index}/{total}] {shown} ({remaining} more after this) ===", flush=True)
    command = [sys.executable, "-c", _RUNNER, module_name(name, path), str(path.resolve()), *argv]
    started = time.perf_counter()
    try:
        code: int | None = subprocess.run(command, timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:  # subprocess.run has killed the child
        code = None
    outcome = Outcome(name, code, time.perf_counter() - started)
    print(f"--- [{index}/{total}] {outcome.describe()}", flush=True)
    return outcome


def print_summary(outcomes: Sequence[Outcome]) -> None:
    failed = [o.name for o in outcomes if not o.ok]
    print(f"\n=== summary: {len(outcomes) - len(failed)}/{len(outcomes)} benchmarks ok"
          + (f"; failed: {', '.join(failed)}" if failed else "") + " ===")
    for outcome in outcomes:
        print(outcome.describe())
