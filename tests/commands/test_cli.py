"""The ``admire`` entry point: every command is listed, bad input is a usage error."""

from __future__ import annotations

import pytest

from admire.cli import COMMANDS, main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fly"])
    assert info.value.code == 2
    assert "invalid choice: 'fly'" in capsys.readouterr().err


def test_bad_training_override_names_the_key(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--quiet", f"run.dir={tmp_path}", "nope.key=1"]) == 2
    assert "nope.key" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written for a run that never started


def test_resuming_something_that_is_not_a_run_says_so(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", f"resume={tmp_path}"]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_bench_list_names_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    names = capsys.readouterr().out.split()
    assert {"env_throughput", "matcher_calibration", "matcher_speed", "reward_speed"} <= set(names)


def test_version_is_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"admire {version('admire')}"
