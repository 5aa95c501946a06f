"""Android emulators the env server and the trainer attach to: their ports, their health, their restart.

Why it is shaped this way:

* **The emulators are the user's.** ADMIRE attaches to emulators already running (``emulator -avd
  AndroidWorldAvd -port 5554 -grpc 8554``); it starts one only through a restart command the user
  wrote (:class:`RestartCommand`), so nothing here knows an SDK layout or downloads an image.
* **A device is a pair of ports.** An emulator takes an even console port (its adb port is the next
  one) and a gRPC port; AndroidWorld's ``load_and_setup_env`` is called with both. The pool builds devices
  through a zero-argument factory, so :class:`PortAllocator` hands each new device the lowest free pair
  and the env gives it back when closed (:class:`PortLeasedEnv`).
* **Health is asked of adb, never of the env.** ``sys.boot_completed`` says the emulator booted; the
  secure setting ``enabled_accessibility_services`` naming AndroidEnv's accessibility forwarder says the
  UI tree can reach us (AndroidEnv's ``A11yGrpcWrapper`` turns it on when AndroidWorld connects; with it
  off, every observation would come back without elements).
* **Nothing waits forever.** Every adb call has a timeout and runs in its own process group, which is
  killed when the timeout passes (a hung ``adb shell`` keeps its pipes open through its children);
  a failed probe is ``False``, a failed restart is :class:`~admire.envs.base.EnvCrashed`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shlex
import shutil
import signal
import string
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admire.envs.base import EnvCrashed, GuiEnv
from admire.errors import brief

ACCESSIBILITY_FORWARDER = ("com.google.androidenv.accessibilityforwarder/"
                           "com.google.androidenv.accessibilityforwarder.AccessibilityForwarder")
"""The service AndroidEnv's ``A11yGrpcWrapper`` writes into ``enabled_accessibility_services``."""
DEFAULT_LAUNCHER = "android_world.env.env_launcher:load_and_setup_env"
ANDROID_WORLD_ADB_PATH = "~/Android/Sdk/platform-tools/adb"
"""AndroidWorld's ``DEFAULT_ADB_PATH``: where Android Studio puts adb on Linux."""
FIRST_CONSOLE_PORT = 5554
GRPC_OFFSET = 3000
"""The default gRPC port of a console port: 5554 → 8554 (AndroidWorld's pair), 5556 → 8556, …"""
RESTART_FIELDS = ("console_port", "grpc_port", "serial", "adb")
"""The names a restart command may use: ``{console_port}``, ``{grpc_port}``, ``{serial}`` (emulator-5554)
and ``{adb}`` (the adb path)."""
_SHELL_SYNTAX = frozenset({"&&", "||", "&", ";", "|", ">", ">>", "<", "2>", "2>&1", "&>"})
_LAUNCHER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class DeviceSetupError(ValueError):
    """A port range, restart command or adb path the user gave cannot work; the message is one line
    that names the fix (``admire serve`` prints it and exits 2)."""


class NoFreePorts(RuntimeError):
    """Every emulator port pair is taken by a device: the pool cannot build another."""


# --------------------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class PortPair:
    """One emulator's ports: the console port (its adb port is ``console_port + 1``) and the gRPC port."""

    console_port: int
    grpc_port: int

    @property
    def serial(self) -> str:
        """The name adb knows the emulator by (``adb -s emulator-5554 …``)."""
        return f"emulator-{self.console_port}"


def parse_ports(text: str, what: str, *, step: int = 1) -> list[int]:
    """``"5554-5560"``, ``"5554"`` or ``"5554,5558-5560"`` as a list of ports; a range takes every
    ``step``-th port from its start. ``what`` names the option in the one-line error."""
    ports: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        low, dash, high = part.partition("-")
        try:
            start = int(low)
            end = int(high) if dash else start
        except ValueError:
            raise DeviceSetupError(f"{what}: {part!r} is not a port or a range; write e.g. 5554-5560 or "
                                   "5554,5558") from None
        if not 1 <= start <= end <= 65535:
            raise DeviceSetupError(f"{what}: {part!r} is not a range of ports 1-65535 from low to high; "
                                   "write e.g. 5554-5560")
        ports.extend(range(start, end + 1, step))
    duplicates = sorted({p for p in ports if ports.count(p) > 1})
    if duplicates:
        raise DeviceSetupError(f"{what}: port {duplicates[0]} is listed twice; list each port once")
    return ports


def console_ports(text: str, what: str = "--console-ports") -> list[int]:
    """Emulator console ports: even (the odd port after each is its adb port), from 1024 up."""
    ports = parse_ports(text, what, step=2)
    for port in ports:
        if port % 2 or not 1024 <= port <= 65534:
            raise DeviceSetupError(f"{what}: {port} cannot be an emulator console port (they are even, "
                                   f"1024-65534, usually 5554-5584); write e.g. 5554-5560")
    return ports


def default_console_ports(count: int) -> list[int]:
    """The ports emulators take when started without ``-port``: 5554, 5556, … (``count`` of them)."""
    return [FIRST_CONSOLE_PORT + 2 * i for i in range(count)]


def port_pairs(consoles: Sequence[int], grpc: Sequence[int] | None = None,
               what: tuple[str, str] = ("--console-ports", "--grpc-ports")) -> list[PortPair]:
    """Console ports paired in order with gRPC ports (default: each console port + 3000), checked so
    no port serves two purposes."""
    if not consoles:
        raise DeviceSetupError(f"{what[0]}: no port given; write e.g. 5554-5560")
    grpc = [c + GRPC_OFFSET for c in consoles] if grpc is None else list(grpc)
    if len(grpc) != len(consoles):
        raise DeviceSetupError(f"{what[1]} gives {len(grpc)} port(s) for {len(consoles)} emulator(s) of "
                               f"{what[0]}; give one gRPC port per console port")
    taken = {c for c in consoles} | {c + 1 for c in consoles}  # console and adb ports
    clash = next((g for g in grpc if g in taken), None)
    if clash is not None:
        raise DeviceSetupError(f"{what[1]}: {clash} is already an emulator's console or adb port; "
                               f"pick gRPC ports outside {min(taken)}-{max(taken)}")
    if len(set(grpc)) != len(grpc):
        raise DeviceSetupError(f"{what[1]}: a gRPC port is listed twice; give each emulator its own")
    return [PortPair(c, g) for c, g in zip(consoles, grpc, strict=True)]


class PortAllocator:
    """The emulators' port pairs, each held by at most one device; thread-safe.

    ``acquire`` gives the lowest free pair, so a device rebuilt after a hang usually gets its own emulator
    back (its pair was released when the hung env was closed)."""

    def __init__(self, pairs: Iterable[PortPair]) -> None:
        self.pairs = sorted(set(pairs))
        if not self.pairs:
            raise ValueError("a PortAllocator needs at least one port pair")
        self._held: set[PortPair] = set()
        self._lock = threading.Lock()

    def acquire(self) -> PortPair:
        with self._lock:
            pair = next((p for p in self.pairs if p not in self._held), None)
            if pair is None:
                raise NoFreePorts(f"all {len(self.pairs)} emulator port pair(s) are in use; add emulators "
                                  "to --console-ports (env.android_world.console_ports) or use fewer devices")
            self._held.add(pair)
            return pair

    def release(self, pair: PortPair) -> None:
        with self._lock:
            self._held.discard(pair)

    @property
    def held(self) -> list[PortPair]:
        with self._lock:
            return sorted(self._held)


# --------------------------------------------------------------------------------------------------
# The restart command
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestartCommand:
    """A command template that (re)starts one emulator, run without a shell.

    The template is split like a shell line (``shlex.split``) and each word is formatted with
    :data:`RESTART_FIELDS`, so a port can never become two words. Shell syntax (``&&``, ``&``, ``;``,
    ``|``, redirections) is refused as a word of its own: a template that needs a shell says so,
    ``sh -c '<adb> -s {serial} emu kill; emulator -avd AndroidWorldAvd -port {console_port} -grpc
    {grpc_port} -no-window &'``.
    """

    template: str
    words: tuple[str, ...]

    @classmethod
    def parse(cls, template: str, what: str = "--restart-command") -> RestartCommand:
        try:
            words = tuple(shlex.split(template))
        except ValueError as exc:
            raise DeviceSetupError(f"{what}: cannot split it into words ({exc}); quote it as in a shell") \
                from None
        if not words:
            raise DeviceSetupError(f"{what} is empty; give a command, e.g. \"sh -c 'emulator -avd "
                                   "AndroidWorldAvd -port {console_port} -grpc {grpc_port} -no-window &'\"")
        for word in words:
            if word in _SHELL_SYNTAX:
                raise DeviceSetupError(f"{what}: {word!r} is shell syntax but the command runs without a shell; "
                                       "wrap the whole command in sh -c '…'")
            _check_fields(word, what)
        return cls(template=template, words=words)

    def argv(self, pair: PortPair, adb: str) -> list[str]:
        """The words to run for ``pair``'s emulator."""
        values = {"console_port": pair.console_port, "grpc_port": pair.grpc_port, "serial": pair.serial,
                  "adb": adb}
        return [word.format(**values) for word in self.words]


def _check_fields(word: str, what: str) -> None:
    known = ", ".join("{" + f + "}" for f in RESTART_FIELDS)
    try:
        parsed = list(string.Formatter().parse(word))
    except ValueError as exc:
        raise DeviceSetupError(f"{what}: {word!r} is not a valid template ({exc}); write a literal brace "
                               "as {{ or }}") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in RESTART_FIELDS:
            raise DeviceSetupError(f"{what}: unknown field {{{field}}}; it may use only {known}")
        if spec or conversion:
            raise DeviceSetupError(f"{what}: {{{field}}} takes no format spec or conversion; write it as "
                                   f"{{{field}}}")


def check_launcher(path: str, what: str = "--android-launcher") -> str:
    """``module:attr`` naming a function like AndroidWorld's ``load_and_setup_env`` (not imported here)."""
    if not _LAUNCHER.match(path):
        raise DeviceSetupError(f"{what}: {path!r} is not module:attr; write e.g. {DEFAULT_LAUNCHER}")
    return path


def check_launcher_importable(path: str, what: str = "--android-launcher") -> str:
    """``check_launcher``, and its module can be found (found, not imported: importing AndroidWorld
    pulls in android_env and grpc, which the device start does anyway)."""
    module = check_launcher(path, what).partition(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        fix = ("install AndroidWorld from source (docs/android.md)" if path == DEFAULT_LAUNCHER
               else "give an importable module:attr")
        raise DeviceSetupError(f"{what}: cannot find the module {module!r}; {fix}")
    return path


def resolve_adb(adb_path: str | None, what: str = "--adb-path") -> str:
    """The adb to run: ``adb_path`` if given, else ``adb`` on PATH, else AndroidWorld's default location."""
    if adb_path is not None:
        found = shutil.which(os.path.expanduser(adb_path))
        if found is None:
            raise DeviceSetupError(f"{what}: {adb_path!r} is not an executable file; give the path of adb "
                                   "(Android SDK platform-tools)")
        return found
    found = shutil.which("adb") or shutil.which(os.path.expanduser(ANDROID_WORLD_ADB_PATH))
    if found is None:
        raise DeviceSetupError(f"adb is neither on PATH nor at {ANDROID_WORLD_ADB_PATH}; install the Android SDK "
                               f"platform-tools or pass {what}")
    return found


# --------------------------------------------------------------------------------------------------
# One emulator through adb
# --------------------------------------------------------------------------------------------------


def run_bounded(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """Run ``argv`` for at most ``timeout_s``; None when it could not start or ran out of time.

    The process gets a session of its own and the whole group is killed on timeout: ``subprocess.run``
    kills only the child, then waits for pipes a surviving grandchild still holds open."""
    try:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError:
        return None
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=5)
        return None
    return subprocess.CompletedProcess(list(argv), process.returncode, out, err)


class AdbDevice:
    """One emulator's health and restart, through ``adb -s emulator-<console_port>``.

    It is the ``device`` AndroidWorld's env is given: ``healthy()`` is cheap and never raises;
    ``restart()`` runs the restart command (when there is one) and waits for the emulator to boot, or
    raises ``EnvCrashed`` saying why it did not. The command's own processes (the emulator) are left
    running: they are the device, not this object's.
    """

    def __init__(self, console_port: int = FIRST_CONSOLE_PORT, grpc_port: int | None = None, *, adb_path: str = "adb",
                 restart_command: RestartCommand | str | None = None, boot_timeout_s: float = 300.0,
                 adb_timeout_s: float = 10.0, poll_interval_s: float = 2.0, down_wait_s: float = 30.0,
                 log_dir: str | Path | None = None) -> None:
        self.ports = PortPair(console_port, console_port + GRPC_OFFSET if grpc_port is None else grpc_port)
        self.adb_path = adb_path
        self.restart_command = (RestartCommand.parse(restart_command) if isinstance(restart_command, str)
                                else restart_command)
        for name, value in (("boot_timeout_s", boot_timeout_s), ("adb_timeout_s", adb_timeout_s),
                            ("poll_interval_s", poll_interval_s)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.boot_timeout_s = boot_timeout_s
        self.adb_timeout_s = adb_timeout_s
        self.poll_interval_s = poll_interval_s
        self.down_wait_s = max(0.0, down_wait_s)
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.gettempdir())
        self.last_problem: str | None = None
        """Why the last probe or restart failed, in one line (for logs and the dashboard)."""

    @property
    def serial(self) -> str:
        return self.ports.serial

    @property
    def log_path(self) -> Path:
        """Where the restart command's output goes (the emulator's, when the command starts one)."""
        return self.log_dir / f"admire-restart-{self.serial}.log"

    def __repr__(self) -> str:
        return f"AdbDevice({self.serial}, grpc {self.ports.grpc_port}, adb {self.adb_path!r})"

    # ---- probes -----------------------------------------------------------------------------------

    def adb(self, *args: str) -> str | None:
        """``adb -s <serial> <args>``'s output, stripped; None when it failed or timed out."""
        done = run_bounded([self.adb_path, "-s", self.serial, *args], self.adb_timeout_s)
        if done is None:
            self.last_problem = f"adb {' '.join(args)} on {self.serial} did not answer within {self.adb_timeout_s:g} s"
            return None
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout or "").split())[:200]
            self.last_problem = f"adb {' '.join(args)} on {self.serial} failed ({done.returncode}): {said}"
            return None
        return done.stdout.strip()

    def booted(self) -> bool:
        """``getprop sys.boot_completed`` is 1 (the emulator's own "boot finished" flag)."""
        value = self.adb("shell", "getprop", "sys.boot_completed")
        if value is not None and value != "1":
            self.last_problem = f"{self.serial} has not finished booting (sys.boot_completed={value!r})"
        return value == "1"

    def accessibility_forwarder_on(self) -> bool:
        """AndroidEnv's accessibility forwarder is among the enabled accessibility services."""
        value = self.adb("shell", "settings", "get", "secure", "enabled_accessibility_services")
        if value is None:
            return False
        if ACCESSIBILITY_FORWARDER not in value.split(":"):
            self.last_problem = f"the accessibility forwarder is not enabled on {self.serial}"
            return False
        return True

    def healthy(self) -> bool:
        """Booted and forwarding its accessibility tree. Never raises."""
        try:
            return self.booted() and self.accessibility_forwarder_on()
        except Exception as exc:  # noqa: BLE001 - a probe reports, it never fails its caller
            self.last_problem = f"health probe of {self.serial} failed: {brief(exc)}"
            return False

    # ---- restart ----------------------------------------------------------------------------------

    def restart(self) -> None:
        """Run the restart command, if any, then wait for the emulator to boot (``EnvCrashed`` if not).

        After a command, the emulator is first expected to go down (up to ``down_wait_s``), so the old,
        dying emulator is not taken for the new one; without a command this only waits for boot."""
        deadline = time.monotonic() + self.boot_timeout_s
        process = self._start_command() if self.restart_command is not None else None
        if process is not None:
            self._wait(lambda: not self.booted(), min(deadline, time.monotonic() + self.down_wait_s), process)
        if not self._wait(self.booted, deadline, process):
            how = ("and no restart command is set; pass --restart-command (env.android_world.restart_command)"
                   if self.restart_command is None else f"after its restart command (output: {self.log_path})")
            raise EnvCrashed(f"{self.serial} did not finish booting within {self.boot_timeout_s:g} s {how}")

    def _start_command(self) -> subprocess.Popen[bytes]:
        assert self.restart_command is not None
        argv = self.restart_command.argv(self.ports, self.adb_path)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        except OSError as exc:
            raise EnvCrashed(f"the restart command of {self.serial} could not start: {brief(exc)}") from None

    def _wait(self, condition: Callable[[], bool], deadline: float, process: subprocess.Popen[bytes] | None) -> bool:
        """Poll ``condition`` until it holds or ``deadline``; a restart command that failed ends the wait."""
        while True:
            if condition():
                return True
            code = process.poll() if process is not None else None
            if code not in (None, 0):
                raise EnvCrashed(f"the restart command of {self.serial} exited with status {code} "
                                 f"(output: {self.log_path})")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_interval_s, remaining))


# --------------------------------------------------------------------------------------------------
# Devices for the pool and the trainer
# --------------------------------------------------------------------------------------------------


class PortLeasedEnv:
    """An env holding an emulator's port pair, released when the env is closed.

    The pair is released *before* the env's own close: the emulator outlives the env (it is the user's),
    and the pool rebuilds a hung device while the old env's close may still be waiting out a frozen
    connection. Other attributes are the wrapped env's."""

    def __init__(self, env: GuiEnv, pair: PortPair, release: Callable[[PortPair], None]) -> None:
        self.env = env
        self.pair = pair
        self._release = release
        self._released = False

    def reset(self, task: Any) -> Any:
        return self.env.reset(task)

    def step(self, action: Any) -> Any:
        return self.env.step(action)

    def healthy(self) -> bool:
        return self.env.healthy()

    def restart(self) -> None:
        self.env.restart()

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._release(self.pair)
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def __enter__(self) -> PortLeasedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AndroidDeviceFactory:
    """A zero-argument factory of AndroidWorld envs, one emulator each: the pool's ``env_factory`` and the
    trainer's ``build``.

    Each call takes the lowest free port pair, makes sure its emulator has booted (restarting it with
    the restart command when there is one), and builds the env with ``build(console_port=…, grpc_port=…,
    adb_path=…, device=AdbDevice)``; the pair goes back when the env is closed.
    """

    def __init__(self, build: Callable[..., GuiEnv], pairs: Sequence[PortPair], *, adb_path: str,
                 restart_command: RestartCommand | None = None, boot_timeout_s: float = 300.0,
                 adb_timeout_s: float = 10.0, poll_interval_s: float = 2.0) -> None:
        self.build = build
        self.ports = PortAllocator(pairs)
        self.adb_path = adb_path
        self.restart_command = restart_command
        self.boot_timeout_s = boot_timeout_s
        self.adb_timeout_s = adb_timeout_s
        self.poll_interval_s = poll_interval_s

    def device(self, pair: PortPair) -> AdbDevice:
        return AdbDevice(pair.console_port, pair.grpc_port, adb_path=self.adb_path,
                         restart_command=self.restart_command, boot_timeout_s=self.boot_timeout_s,
                         adb_timeout_s=self.adb_timeout_s, poll_interval_s=self.poll_interval_s)

    def __call__(self) -> PortLeasedEnv:
        pair = self.ports.acquire()
        try:
            device = self.device(pair)
            if not device.booted():
                if self.restart_command is None:
                    raise EnvCrashed(f"{device.last_problem or pair.serial + ' is not booted'}; start it with "
                                     f"`emulator -avd AndroidWorldAvd -port {pair.console_port} -grpc "
                                     f"{pair.grpc_port}` or pass --restart-command")
                device.restart()
            env = self.build(console_port=pair.console_port, grpc_port=pair.grpc_port, adb_path=self.adb_path,
                             device=device)
        except BaseException:
            self.ports.release(pair)
            raise
        return PortLeasedEnv(env, pair, self.ports.release)


FLAG_NAMES: dict[str, str] = {
    "console_ports": "--console-ports", "grpc_ports": "--grpc-ports", "adb_path": "--adb-path",
    "restart_command": "--restart-command", "boot_timeout_s": "--boot-timeout", "launcher": "--android-launcher",
}
"""How ``admire serve`` names each setting in its errors."""
CONFIG_NAMES: dict[str, str] = {key: f"env.android_world.{key}" for key in (*FLAG_NAMES, "emulator_setup")}
"""How a training config names them."""


@dataclass(frozen=True)
class AndroidSettings:
    """Everything the devices of one server or one training run share, checked before any device starts."""

    pairs: tuple[PortPair, ...]
    adb_path: str
    restart_command: RestartCommand | None = None
    boot_timeout_s: float = 300.0
    launcher: str = DEFAULT_LAUNCHER
    emulator_setup: bool = False

    @classmethod
    def parse(cls, *, devices: int, console_ports: str | int | Sequence[int] | None = None,
              grpc_ports: str | int | Sequence[int] | None = None, adb_path: str | None = None,
              restart_command: str | None = None, boot_timeout_s: float = 300.0, launcher: str | None = None,
              emulator_setup: bool = False, names: Mapping[str, str] = FLAG_NAMES) -> AndroidSettings:
        """Settings as a user gives them (``"5554-5560"`` or a list of ports); ``devices`` is how many
        devices may exist at once, each needing an emulator of its own. ``DeviceSetupError`` otherwise."""
        consoles = (default_console_ports(max(1, devices)) if console_ports is None
                    else _port_list(console_ports, names["console_ports"], console=True))
        grpc = None if grpc_ports is None else _port_list(grpc_ports, names["grpc_ports"], console=False)
        pairs = port_pairs(consoles, grpc, (names["console_ports"], names["grpc_ports"]))
        if len(pairs) < devices:
            raise DeviceSetupError(f"{names['console_ports']} gives {len(pairs)} emulator(s) for up to {devices} "
                                   f"device(s); list one console port per device or use fewer devices")
        if not (boot_timeout_s > 0 and boot_timeout_s != float("inf")):
            raise DeviceSetupError(f"{names['boot_timeout_s']} must be a positive number of seconds, got "
                                   f"{boot_timeout_s}; pass e.g. 300")
        command = None if restart_command is None else RestartCommand.parse(restart_command, names["restart_command"])
        return cls(pairs=tuple(pairs), adb_path=resolve_adb(adb_path, names["adb_path"]), restart_command=command,
                   boot_timeout_s=float(boot_timeout_s),
                   launcher=check_launcher_importable(launcher or DEFAULT_LAUNCHER, names["launcher"]),
                   emulator_setup=bool(emulator_setup))

    def factory(self, build: Callable[..., GuiEnv]) -> AndroidDeviceFactory:
        """The devices' factory: ``build`` (the backend's factory, other options bound) gets the launcher,
        ``emulator_setup`` and each device's ports, adb path and :class:`AdbDevice`."""
        return AndroidDeviceFactory(functools.partial(build, launcher=self.launcher,
                                                      emulator_setup=self.emulator_setup),
                                    self.pairs, adb_path=self.adb_path, restart_command=self.restart_command,
                                    boot_timeout_s=self.boot_timeout_s)


def device_pool(section: Mapping[str, Any], count: int, build: Callable[..., GuiEnv]) -> AndroidDeviceFactory:
    """The ``android_world`` backend's device pool (``admire.envs.base.DEVICE_POOLS``): ``env.android_world``
    checked for ``count`` envs, one emulator each (docs/android.md), then the factory that gives each env the
    next free emulator."""
    return AndroidSettings.parse(devices=count, names=CONFIG_NAMES, **section).factory(build)


def _port_list(value: str | int | Sequence[int], what: str, *, console: bool) -> list[int]:
    if isinstance(value, str | int):
        return console_ports(str(value), what) if console else parse_ports(str(value), what)
    ports = [int(p) for p in value]
    text = ",".join(str(p) for p in ports)
    return console_ports(text, what) if console else parse_ports(text, what)


__all__ = [
    "ACCESSIBILITY_FORWARDER",
    "CONFIG_NAMES",
    "DEFAULT_LAUNCHER",
    "FLAG_NAMES",
    "AdbDevice",
    "AndroidDeviceFactory",
    "AndroidSettings",
    "DeviceSetupError",
    "NoFreePorts",
    "PortAllocator",
    "PortLeasedEnv",
    "PortPair",
    "RestartCommand",
    "check_launcher",
    "check_launcher_importable",
    "console_ports",
    "default_console_ports",
    "device_pool",
    "parse_ports",
    "port_pairs",
    "resolve_adb",
    "run_bounded",
]
