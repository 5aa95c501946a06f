"""``admire serve --backend android_world``'s flags, probed like the other serve arguments
(``tests/support/probe_harness.py``): each bad one is one ``admire serve: error:`` line naming the fix,
exit 2, before anything starts (no pool, no port, no adb call)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_adb import FakeAdb
from tests.support.probe_harness import CliProbe, run_cli_probe


def _adb(tmp: Path) -> None:
    FakeAdb(tmp / "sdk")


ANDROID = ("serve", "--backend", "android_world", "--adb-path", "{tmp}/sdk/adb")


def probe(id: str, argv: tuple[str, ...], message: str) -> CliProbe:
    return CliProbe(id, argv, 2, message, setup=_adb)


CLI_PROBES = [
    probe("console-ports-without-android", ("serve", "--console-ports", "5554"),
          r"--console-ports is only for --backend android_world; drop it or pass --backend android_world"),
    probe("emulator-setup-without-android", ("serve", "--emulator-setup"), r"--emulator-setup is only for --backend"),
    probe("android-on-ray", (*ANDROID, "--executor", "ray"), r"--executor ray is not supported for it"),
    probe("odd-console-port", (*ANDROID, "--console-ports", "5555"),
          r"--console-ports: 5555 cannot be an emulator console port"),
    probe("reversed-range", (*ANDROID, "--console-ports", "5560-5554"), r"from low to high"),
    probe("fewer-emulators-than-devices", (*ANDROID, "--num-devices", "3", "--console-ports", "5554-5556"),
          r"--console-ports gives 2 emulator\(s\) for up to 3 device\(s\)"),
    probe("fewer-emulators-than-max-devices", (*ANDROID, "--num-devices", "1", "--max-devices", "2",
                                               "--console-ports", "5554"), r"for up to 2 device\(s\)"),
    probe("grpc-count", (*ANDROID, "--num-devices", "1", "--console-ports", "5554-5556", "--grpc-ports", "8554"),
          r"--grpc-ports gives 1 port\(s\) for 2 emulator\(s\)"),
    probe("grpc-on-an-adb-port", (*ANDROID, "--num-devices", "1", "--grpc-ports", "5555"),
          r"--grpc-ports: 5555 is already an emulator's console or adb port"),
    probe("restart-unknown-field", (*ANDROID, "--restart-command", "emulator -avd {avd} -port {console_port}"),
          r"--restart-command: unknown field \{avd\}; it may use only \{console_port\}"),
    probe("restart-shell-syntax", (*ANDROID, "--restart-command", "adb emu kill && emulator -avd AndroidWorldAvd"),
          r"'&&' is shell syntax .* sh -c"),
    probe("launcher-not-module-attr", (*ANDROID, "--android-launcher", "tests.support.android_fake"),
          r"--android-launcher: .* is not module:attr"),
    probe("launcher-missing", (*ANDROID, "--android-launcher", "no_such_package_here.launch:load"),
          r"cannot find the module 'no_such_package_here.launch'; give an importable module:attr"),
    probe("adb-missing", ("serve", "--backend", "android_world", "--adb-path", "{tmp}/no-adb"),
          r"--adb-path: .* is not an executable file"),
    probe("boot-timeout-above-call-timeout", (*ANDROID, "--boot-timeout", "200"),
          r"--boot-timeout must be a positive number of seconds below --call-timeout \(120\), got 200"),
    probe("boot-timeout-nan", (*ANDROID, "--boot-timeout", "nan"), r"--boot-timeout must be a positive number"),
]


@pytest.mark.parametrize("probe", CLI_PROBES, ids=[p.id for p in CLI_PROBES])
def test_android_serve_flag_probe(probe: CliProbe, tmp_path, capsys, monkeypatch, nothing_starts) -> None:
    run_cli_probe(probe, tmp_path, capsys, monkeypatch)
    assert not (tmp_path / "sdk" / "calls.jsonl").exists(), "adb ran before the arguments were checked"
