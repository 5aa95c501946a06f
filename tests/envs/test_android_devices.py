"""Android emulators through adb (``admire.envs.android_devices``), against a fake ``adb`` script: boot and
accessibility probes, a hung adb, restart command templates, port ranges and the port allocator."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from admire.envs.android_devices import (
    AdbDevice,
    AndroidDeviceFactory,
    DeviceSetupError,
    NoFreePorts,
    PortAllocator,
    PortPair,
    RestartCommand,
    check_launcher,
    console_ports,
    default_console_ports,
    parse_ports,
    port_pairs,
    resolve_adb,
)
from admire.envs.base import EnvCrashed
from tests.support.fake_adb import FakeAdb


@pytest.fixture
def adb(tmp_path: Path) -> FakeAdb:
    return FakeAdb(tmp_path / "sdk")


def device(adb: FakeAdb, port: int = 5554, **options: Any) -> AdbDevice:
    options = {"adb_timeout_s": 5.0, "poll_interval_s": 0.01, "boot_timeout_s": 20.0, "log_dir": adb.folder,
               **options}
    return AdbDevice(port, adb_path=str(adb.path), **options)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _ends(pid: int, within_s: float = 10.0) -> bool:
    """The process ends soon: a killed process closes its pipes a moment before the kernel marks it dead."""
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


# ---- health --------------------------------------------------------------------------------------


def test_a_booted_emulator_with_the_forwarder_on_is_healthy(adb: FakeAdb) -> None:
    phone = device(adb)
    assert phone.healthy()
    assert ["-s", "emulator-5554", "shell", "getprop", "sys.boot_completed"] in adb.calls()
    assert ["-s", "emulator-5554", "shell", "settings", "get", "secure", "enabled_accessibility_services"] \
        in adb.calls()


def test_an_emulator_still_booting_is_unhealthy_and_says_so(adb: FakeAdb) -> None:
    adb.set("emulator-5554", boot="0")
    phone = device(adb)
    assert not phone.booted()
    assert not phone.healthy()
    assert "sys.boot_completed='0'" in phone.last_problem
    assert device(adb, 5556).healthy()  # another emulator is not affected


def test_the_accessibility_forwarder_off_is_unhealthy(adb: FakeAdb) -> None:
    adb.set(a11y="com.google.android.marvin.talkback/com.google.android.marvin.talkback.TalkBackService")
    phone = device(adb)
    assert phone.booted()
    assert not phone.healthy()
    assert "accessibility forwarder is not enabled" in phone.last_problem


def test_an_adb_that_fails_or_is_missing_is_unhealthy_without_raising(adb: FakeAdb, tmp_path: Path) -> None:
    adb.set(fail=True)
    phone = device(adb)
    assert not phone.healthy()
    assert "not found" in phone.last_problem
    assert not AdbDevice(5554, adb_path=str(tmp_path / "no-such-adb")).healthy()


def test_a_hung_adb_is_unhealthy_and_its_children_are_killed(adb: FakeAdb) -> None:
    adb.set(hang=True)
    phone = device(adb, adb_timeout_s=1.0)
    assert not phone.healthy()
    assert "did not answer within 1 s" in phone.last_problem
    sleeper = adb.sleeper_pid()
    assert sleeper is not None and _ends(sleeper), "the hung call's child was not killed with it"
    assert not adb.sleeper_finished()  # killed, not waited for


# ---- restart -------------------------------------------------------------------------------------


def test_restart_runs_the_command_for_its_ports_then_waits_for_the_emulator_to_come_back(adb: FakeAdb) -> None:
    phone = device(adb, 5556, grpc_port=8600, restart_command="{adb} -s {serial} emu kill")
    phone.restart()
    calls = adb.calls()
    assert ["-s", "emulator-5556", "emu", "kill"] in calls
    probes = [c for c in calls[calls.index(["-s", "emulator-5556", "emu", "kill"]):] if c[-1] == "sys.boot_completed"]
    assert len(probes) >= 3  # down twice (the fake's boots_after_kill), then booted
    assert phone.healthy()


def test_restart_fails_when_the_command_fails(adb: FakeAdb) -> None:
    phone = device(adb, restart_command="sh -c 'echo no such avd; exit 3'")
    with pytest.raises(EnvCrashed, match="exited with status 3"):
        phone.restart()
    assert "no such avd" in phone.log_path.read_text()


def test_restart_fails_when_the_emulator_never_boots(adb: FakeAdb) -> None:
    adb.set(boot="0")
    with pytest.raises(EnvCrashed, match=r"did not finish booting within 0.3 s after its restart command"):
        device(adb, restart_command="true", boot_timeout_s=0.3).restart()
    with pytest.raises(EnvCrashed, match="no restart command is set; pass --restart-command"):
        device(adb, boot_timeout_s=0.3).restart()


def test_restart_without_a_command_only_waits_for_boot(adb: FakeAdb) -> None:
    device(adb).restart()
    assert all("emu" not in call for call in adb.calls())


# ---- the restart command template ----------------------------------------------------------------


def test_a_restart_template_is_formatted_word_by_word_with_its_fields() -> None:
    command = RestartCommand.parse("{adb} -s {serial} emu kill")
    assert command.argv(PortPair(5556, 8556), "/opt/my sdk/adb") == ["/opt/my sdk/adb", "-s", "emulator-5556", "emu",
                                                                     "kill"]
    shell = RestartCommand.parse("sh -c '{adb} -s {serial} emu kill; emulator -avd AndroidWorldAvd "
                                 "-port {console_port} -grpc {grpc_port} -no-window &'")
    assert shell.argv(PortPair(5558, 8558), "adb") == [
        "sh", "-c", "adb -s emulator-5558 emu kill; emulator -avd AndroidWorldAvd -port 5558 -grpc 8558 -no-window &"]
    assert RestartCommand.parse("echo {{literal}}").argv(PortPair(5554, 8554), "adb") == ["echo", "{literal}"]


@pytest.mark.parametrize(("template", "message"), [
    ("emulator -avd {avd} -port {console_port}", "unknown field {avd}; it may use only {console_port}"),
    ("emulator -port {}", "unknown field {}"),
    ("emulator -port {0}", "unknown field {0}"),
    ("emulator -port {console_port:05d}", "takes no format spec"),
    ("emulator -port {console_port!r}", "takes no format spec or conversion"),
    ("emulator -port {console_port", "not a valid template"),
    ("adb -s {serial} emu kill && emulator -avd AndroidWorldAvd",
     "'&&' is shell syntax but the command runs without a shell; wrap the whole command in sh -c"),
    ("emulator -avd AndroidWorldAvd &", "'&' is shell syntax"),
    ("sh -c 'unclosed", "cannot split it into words"),
    ("   ", "is empty"),
])
def test_a_restart_template_with_unknown_fields_or_shell_syntax_is_refused(template: str, message: str) -> None:
    with pytest.raises(DeviceSetupError) as caught:
        RestartCommand.parse(template)
    assert message in str(caught.value) and "\n" not in str(caught.value)


# ---- ports ---------------------------------------------------------------------------------------


def test_console_port_ranges_take_every_even_port() -> None:
    assert console_ports("5554-5560") == [5554, 5556, 5558, 5560]
    assert console_ports("5554, 5560-5562") == [5554, 5560, 5562]
    assert console_ports("5554-5555") == [5554]
    assert default_console_ports(3) == [5554, 5556, 5558]
    assert parse_ports("8554-8557", "--grpc-ports") == [8554, 8555, 8556, 8557]


@pytest.mark.parametrize(("text", "message"), [
    ("5555", "5555 cannot be an emulator console port"),
    ("5555-5561", "5555 cannot be an emulator console port"),
    ("554", "554 cannot be an emulator console port"),
    ("5560-5554", "from low to high"),
    ("55x4", "is not a port or a range"),
    ("5554,5554", "port 5554 is listed twice"),
    ("", "is not a port or a range"),
])
def test_bad_console_ports_are_one_line_naming_the_fix(text: str, message: str) -> None:
    with pytest.raises(DeviceSetupError) as caught:
        console_ports(text)
    assert message in str(caught.value)
    assert str(caught.value).startswith("--console-ports: ") and "; " in str(caught.value)  # what, then the fix
    assert "\n" not in str(caught.value)


def test_grpc_ports_default_to_the_console_port_plus_3000_and_must_pair_up() -> None:
    assert port_pairs([5554, 5556]) == [PortPair(5554, 8554), PortPair(5556, 8556)]
    assert port_pairs([5554, 5556], [9000, 9001]) == [PortPair(5554, 9000), PortPair(5556, 9001)]
    with pytest.raises(DeviceSetupError, match=r"gives 1 port.* for 2 emulator"):
        port_pairs([5554, 5556], [9000])
    with pytest.raises(DeviceSetupError, match="5555 is already an emulator's console or adb port"):
        port_pairs([5554, 5556], [5555, 9000])
    with pytest.raises(DeviceSetupError, match="listed twice"):
        port_pairs([5554, 5556], [9000, 9000])


def test_the_allocator_gives_the_lowest_free_pair_once() -> None:
    pairs = port_pairs(console_ports("5554-5558"))
    ports = PortAllocator(reversed(pairs))
    first, second, third = ports.acquire(), ports.acquire(), ports.acquire()
    assert [first, second, third] == pairs
    with pytest.raises(NoFreePorts, match="all 3 emulator port pair"):
        ports.acquire()
    ports.release(second)
    assert ports.acquire() == second
    assert ports.held == pairs


def test_the_allocator_never_hands_one_pair_to_two_threads() -> None:
    ports = PortAllocator(port_pairs(console_ports("5554-5592")))
    got: list[PortPair] = []
    lock = threading.Lock()

    def take() -> None:
        pair = ports.acquire()
        with lock:
            got.append(pair)

    threads = [threading.Thread(target=take) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(got)) == 20


# ---- the device factory --------------------------------------------------------------------------


class _Env:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def healthy(self) -> bool:
        return not self.closed


def test_the_factory_gives_each_env_its_own_emulator_and_takes_the_ports_back_on_close(adb: FakeAdb) -> None:
    factory = AndroidDeviceFactory(_Env, port_pairs([5554, 5556]), adb_path=str(adb.path))
    one, two = factory(), factory()
    assert (one.kwargs["console_port"], one.kwargs["grpc_port"]) == (5554, 8554)
    assert (two.kwargs["console_port"], two.kwargs["grpc_port"]) == (5556, 8556)
    assert two.kwargs["device"].serial == "emulator-5556" and two.kwargs["adb_path"] == str(adb.path)
    assert one.healthy()  # the wrapper answers for the env
    with pytest.raises(NoFreePorts):
        factory()
    one.close()
    assert one.env.closed and factory.ports.held == [PortPair(5556, 8556)]
    assert factory().kwargs["console_port"] == 5554


def test_the_factory_refuses_an_emulator_that_is_not_booted_and_keeps_its_ports_free(adb: FakeAdb) -> None:
    adb.set("emulator-5554", boot="")
    factory = AndroidDeviceFactory(_Env, port_pairs([5554]), adb_path=str(adb.path))
    with pytest.raises(EnvCrashed, match="emulator -avd AndroidWorldAvd -port 5554 -grpc 8554` or pass "
                                         "--restart-command"):
        factory()
    assert factory.ports.held == []


def test_the_factory_restarts_an_emulator_that_is_down_when_it_has_a_command(adb: FakeAdb) -> None:
    adb.set("emulator-5554", boot="", a11y="null")
    factory = AndroidDeviceFactory(_Env, port_pairs([5554]), adb_path=str(adb.path), poll_interval_s=0.01,
                                   restart_command=RestartCommand.parse("{adb} -s {serial} emu kill"))
    env = factory()
    assert ["-s", "emulator-5554", "emu", "kill"] in adb.calls()
    assert env.kwargs["device"].healthy()


def test_a_build_that_fails_gives_the_ports_back(adb: FakeAdb) -> None:
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("cannot connect to the gRPC port")

    factory = AndroidDeviceFactory(broken, port_pairs([5554]), adb_path=str(adb.path))
    with pytest.raises(RuntimeError, match="gRPC"):
        factory()
    assert factory.ports.held == []


# ---- launcher and adb ----------------------------------------------------------------------------


def test_launchers_are_module_colon_attr() -> None:
    assert check_launcher("tests.support.android_fake:load_and_setup_env")
    for bad in ("android_world.env.env_launcher", "a:b:c", "a b:c", ":load"):
        with pytest.raises(DeviceSetupError, match="is not module:attr"):
            check_launcher(bad)


def test_adb_is_the_given_path_or_found_on_path(adb: FakeAdb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_adb(str(adb.path)) == str(adb.path)
    with pytest.raises(DeviceSetupError, match=r"--adb-path: .* is not an executable file"):
        resolve_adb(str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", f"{adb.folder}{os.pathsep}{os.environ['PATH']}")
    assert resolve_adb(None) == str(adb.path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DeviceSetupError, match=r"adb is neither on PATH nor at .* pass --adb-path"):
        resolve_adb(None)
