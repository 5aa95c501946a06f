"""``admire bench [NAME ...]`` — run the benchmarks of ``benchmarks/`` (speed and calibration).

Benchmarks live beside the tests, not in the package, because they are part of the repository's
evidence rather than the library; each is a script with ``main(argv) -> int`` that prints ratios
measured side by side in one run (these machines are shared and noisy, so absolute times mislead).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

HELP = "run benchmarks (default: all) from the repository's benchmarks/ folder"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", help="benchmarks to run (file names without .py); default: all")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--dir", default=None, help="benchmarks folder (default: ./benchmarks or the repo's)")


def benchmarks_dir(explicit: str | None = None) -> Path:
    candidates = [Path(explicit)] if explicit else [Path.cwd() / "benchmarks",
                                                    Path(__file__).resolve().parents[3] / "benchmarks"]
    for folder in candidates:
        if folder.is_dir():
            return folder
    raise FileNotFoundError("no benchmarks/ folder found: run from a clone of the repository or pass --dir")


def discover(folder: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")}


def run(args: argparse.Namespace) -> int:
    folder = benchmarks_dir(args.dir)
    found = discover(folder)
    if args.list:
        for name in found:
            print(name)
        return 0
    unknown = [n for n in args.names if n not in found]
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(found)}")
        return 2
    failures = 0
    for name in args.names or list(found):
        print(f"\n=== {name} ===", flush=True)
        spec = importlib.util.spec_from_file_location(f"admire_bench_{name}", found[name])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        started = time.perf_counter()
        code = int(module.main([]) or 0)
        print(f"--- {name}: exit {code}, {time.perf_counter() - started:.1f} s", flush=True)
        failures += code != 0
    return 1 if failures else 0
