"""The project's benchmarks: speed, calibration and learning, each a module with ``main(argv) -> int``.

They ship in the package so that ``admire bench`` runs them from an installed package as well as from
a clone; each runs in its own process (``admire bench NAME``, or ``python -m admire.benchmarks.NAME``)
and prints ratios measured side by side in one run, because these machines are shared and noisy and
absolute times mislead. A benchmark needs the extras of the parts it measures (``admire[dev]`` has
them all). Importing this package imports no benchmark.
"""
