"""The two benchmarks that compare the settle modes, each run small on real Chromium: every mode gets its
row, measured in the same run."""

from __future__ import annotations

import pytest

from admire.benchmarks import env_throughput, settle
from admire.envs.miniwob_settle import SETTLE_MODES

pytestmark = pytest.mark.browser


def test_env_throughput_times_raw_miniwob_and_each_settle_mode_side_by_side() -> None:
    rows = env_throughput.overhead(steps=10)
    assert [screenshots for screenshots, _, _ in rows] == ["off", "on"]
    for _, raw_ms, wrapper_ms in rows:
        assert raw_ms > 0
        assert sorted(wrapper_ms) == sorted(SETTLE_MODES) and all(ms > 0 for ms in wrapper_ms.values())


def test_the_settle_benchmark_prints_a_row_per_mode_with_its_replays(capsys: pytest.CaptureFixture[str]) -> None:
    assert settle.main(["--policy", "oracle", "--tasks", "use-autocomplete", "--seeds", "1", "--think-s", "0"]) == 0
    rows = {line.split()[1]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("use-autocomplete")}
    assert sorted(rows) == sorted(SETTLE_MODES)
    for mode in ("wall", "virtual"):
        assert rows[mode][5] == "0/0"  # both passes of the settled modes played the same episode
        assert rows[mode][6] == "100%/100%"  # and the oracle, which waits for the menu, solved it
