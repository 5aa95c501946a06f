"""``admire serve`` — a pool of GUI environments behind HTTP (docs/server.md).

Binds to 127.0.0.1 by default; on any other address it refuses to start without a token, because
the API drives real browsers or phones for whoever can reach it. Without a token it answers only
requests whose Host is a loopback name (a web page rebinding its domain to 127.0.0.1 is refused).

Every argument is checked before anything starts (no device, no Ray, no port): a bad one is one line
``admire serve: error: <what>; <fix>`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import logging
import math
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from admire.envs.miniwob_settle import SETTLE_MODES, check_settle_options
from admire.server.slow_clients import DEFAULT_REQUEST_TIMEOUT_S, MIN_REQUEST_TIMEOUT_S

if TYPE_CHECKING:
    from admire.envs.android_devices import AndroidSettings

log = logging.getLogger("admire.server")

HELP = "serve a pool of GUI environments (MiniWoB++ browsers, Android emulators) over HTTP"
TOKEN_ENV = "ADMIRE_SERVER_TOKEN"
DASHBOARD_TOKEN_ENV = "ADMIRE_DASHBOARD_TOKEN"
MINIWOB = "miniwob"
MINIWOB_FLAGS = {"settle": "--settle", "settle_quiet_s": "--settle-quiet-s", "settle_max_s": "--settle-max-s"}
ANDROID = "android_world"
ANDROID_FLAGS = {"console_ports": "--console-ports", "grpc_ports": "--grpc-ports", "adb_path": "--adb-path",
                 "restart_command": "--restart-command", "boot_timeout": "--boot-timeout",
                 "android_launcher": "--android-launcher", "emulator_setup": "--emulator-setup"}
"""The flags of ``--backend android_world`` (attribute -> flag); each is None/False unless given."""
MAX_DEVICES = 1024
DEFAULT_MAX_STEPS = 10
"""The step budget of a device whose tasks set none; AndroidWorld's tasks carry their own (complexity)."""
MAX_REQUEST_BYTES = 64 << 20
"""Bodies are buffered in memory before they are checked: a limit beyond this helps no client."""


class UsageError(ValueError):
    """A bad argument or setup: reported as one line, exit status 2, before anything starts."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="miniwob", help="environment backend (default: miniwob)")
    parser.add_argument("--num-devices", type=int, default=2, help="devices started at once (default: 2)")
    parser.add_argument("--max-devices", type=int, default=None,
                        help="grow on demand up to this many devices (default: --num-devices)")
    parser.add_argument("--crashed-device-restart", action=argparse.BooleanOptionalAction, default=True,
                        help="restart a device that crashed or hung (default: on); off quarantines it")
    parser.add_argument("--max-failures", type=int, default=3,
                        help="quarantine a device after this many consecutive failures (default: 3)")
    parser.add_argument("--concurrency-limit", type=int, default=None,
                        help="most resets/steps running at once (default: --max-devices)")
    parser.add_argument("--lease-ttl", type=float, default=300.0,
                        help="seconds without a request before a session's device is reclaimed (default: 300)")
    parser.add_argument("--call-timeout", type=float, default=120.0,
                        help="seconds a reset or step may take before the device counts as hung (default: 120)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="a device's step budget for tasks that set none (default: 10; android_world: "
                             "AndroidWorld's int(10 × complexity) of each task)")
    parser.add_argument("--screenshots", action="store_true", help="devices attach a PNG to every observation")
    parser.add_argument("--executor", default="local", choices=["local", "ray"],
                        help="run each device in this process (local) or in a Ray actor (ray; docs/scale-out.md)")
    parser.add_argument("--ray-address", default=None,
                        help="Ray cluster to join with --executor ray (default: a private local Ray; 'auto' joins "
                             "the cluster started by `ray start`)")
    parser.add_argument("--ray-cpus-per-device", type=float, default=1.0,
                        help="Ray CPUs reserved per device actor (default: 1)")
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                        help="serve the device dashboard at /ui (default: on; with a token, only behind the login "
                             "of --dashboard-token)")
    parser.add_argument("--dashboard-token", default=None,
                        help=f"the dashboard's login password (default: ${DASHBOARD_TOKEN_ENV}), not the clients' "
                             "token: the dashboard shows every client's screen, so with a token and none of "
                             "these the dashboard is off")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    parser.add_argument("--token", default=None,
                        help=f"bearer token clients must send (default: ${TOKEN_ENV}); required off loopback")
    parser.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body (default: 1 MiB)")
    parser.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT_S,
                        help="seconds a client has to send a whole request; a slower one is disconnected "
                             f"(default: {DEFAULT_REQUEST_TIMEOUT_S:g})")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    pages = parser.add_argument_group("MiniWoB++ pages (--backend miniwob)")
    pages.add_argument("--settle", default=None, choices=SETTLE_MODES,
                       help="how a page is read after reset and each action: virtual plays the page's clock until "
                            "it settles, wall waits in real time, off reads at once (default: virtual)")
    pages.add_argument("--settle-quiet-s", type=float, default=None,
                       help="wall only: no DOM change for this long counts as settled (default: 0.02)")
    pages.add_argument("--settle-max-s", type=float, default=None,
                       help="the most one settle plays (page time) or waits (wall time) (default: 1.5)")
    android = parser.add_argument_group("Android emulators (--backend android_world; docs/android.md)")
    android.add_argument("--console-ports", default=None,
                         help="console ports of running emulators, e.g. 5554-5560 (every even port in a range; "
                              "default: 5554, 5556, … one per device)")
    android.add_argument("--grpc-ports", default=None,
                         help="their gRPC ports in the same order, e.g. 8554-8557 (default: each console port + 3000)")
    android.add_argument("--adb-path", default=None,
                         help="the adb to run (default: adb on PATH, else ~/Android/Sdk/platform-tools/adb)")
    android.add_argument("--restart-command", default=None,
                         help="command that (re)starts one emulator, run without a shell (use sh -c '…' for one); "
                              "fields {console_port} {grpc_port} {serial} {adb} (default: none, a restart only "
                              "waits for the emulator to boot)")
    android.add_argument("--boot-timeout", type=float, default=None,
                         help="seconds a restarted emulator may take to boot; below --call-timeout, which bounds a "
                              "whole restart (default: 90%% of --call-timeout)")
    android.add_argument("--android-launcher", default=None,
                         help="module:attr of the function that connects to an emulator (default: AndroidWorld's "
                              "android_world.env.env_launcher:load_and_setup_env)")
    android.add_argument("--emulator-setup", action="store_true", default=False,
                         help="install AndroidWorld's apps on each emulator as it is attached (once per AVD; minutes)")


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


MIN_LEASE_TTL_S = 1.0
"""Shortest lease: below a second a session's lease lapses between two of its own calls."""
MIN_TOKEN_CHARS = 16
"""Shortest bearer token (``openssl rand -hex 16`` gives 32)."""


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to expose devices beyond this machine without a token."""
    if not token and not is_loopback(host):
        raise UsageError(f"refusing to listen on {host!r} without a token: anyone who can reach it could drive the "
                         f"devices; pass --token (or set {TOKEN_ENV}), or bind to 127.0.0.1")


def check_secret(what: str, secret: str | None) -> None:
    """A token travels in an HTTP header and must not be guessed: printable ASCII, at least 16 characters."""
    if secret is None:
        return
    if not all(33 <= ord(ch) <= 126 for ch in secret):
        raise UsageError(f"{what} must be printable ASCII without spaces (it travels in an HTTP header); "
                         "use e.g. $(openssl rand -hex 16)")
    if len(secret) < MIN_TOKEN_CHARS:
        raise UsageError(f"{what} has {len(secret)} character(s); at least {MIN_TOKEN_CHARS} are needed (a short "
                         "one is guessed); use e.g. $(openssl rand -hex 16)")


def check_arguments(args: argparse.Namespace, token: str | None) -> None:
    """Every argument's range, named by its flag, before anything starts (``UsageError``)."""
    whole = [("--num-devices", args.num_devices, 0, MAX_DEVICES), ("--max-failures", args.max_failures, 1, 1000),
             ("--port", args.port, 1, 65535),
             ("--max-request-bytes", args.max_request_bytes, 1024, MAX_REQUEST_BYTES)]
    if args.max_steps is not None:
        whole.append(("--max-steps", args.max_steps, 1, 1000))
    if args.max_devices is not None:
        whole.append(("--max-devices", args.max_devices, 1, MAX_DEVICES))
    if args.concurrency_limit is not None:
        whole.append(("--concurrency-limit", args.concurrency_limit, 1, 100_000))
    for flag, value, low, high in whole:
        if not low <= value <= high:
            raise UsageError(f"{flag} must be between {low} and {high}, got {value}; pass a value in that range")
    for flag, value in (("--lease-ttl", args.lease_ttl), ("--call-timeout", args.call_timeout),
                        ("--request-timeout", args.request_timeout),
                        ("--ray-cpus-per-device", args.ray_cpus_per_device)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a positive number of {'CPUs' if 'cpus' in flag else 'seconds'}, "
                             f"got {value}; pass e.g. {flag} 1")
    if args.lease_ttl < MIN_LEASE_TTL_S:
        raise UsageError(f"--lease-ttl must be at least {MIN_LEASE_TTL_S:g} seconds, got {args.lease_ttl:g}: a "
                         "shorter lease expires between a client's calls; pass e.g. --lease-ttl 300")
    if args.request_timeout < MIN_REQUEST_TIMEOUT_S:
        raise UsageError(f"--request-timeout must be at least {MIN_REQUEST_TIMEOUT_S:g} seconds, got "
                         f"{args.request_timeout:g}; pass e.g. --request-timeout {DEFAULT_REQUEST_TIMEOUT_S:g}")
    if args.num_devices == 0 and args.max_devices is None:
        raise UsageError("--num-devices 0 starts devices only on demand, up to --max-devices; pass --max-devices N "
                         "(or --num-devices 1 or more)")
    if args.max_devices is not None and args.max_devices < max(1, args.num_devices):
        raise UsageError(f"--max-devices ({args.max_devices}) must be >= --num-devices ({args.num_devices}); "
                         "raise --max-devices or lower --num-devices")
    if not args.host.strip():
        raise UsageError("--host is empty; pass an address such as 127.0.0.1")
    check_secret("the token", token)
    dashboard_token = getattr(args, "dashboard_token", None)
    check_secret("the dashboard token", dashboard_token)
    if dashboard_token is not None and dashboard_token == token:
        raise UsageError("the dashboard token equals the clients' token, so every client could watch every other "
                         "client's screen; give the dashboard a token of its own")
    check_exposure(args.host, token)
    pages = [flag for name, flag in MINIWOB_FLAGS.items() if getattr(args, name, None) is not None]
    if pages and args.backend != MINIWOB:
        raise UsageError(f"{pages[0]} is only for --backend {MINIWOB}; drop it or pass --backend {MINIWOB}")
    try:
        check_settle_options(0.0 if args.settle_quiet_s is None else args.settle_quiet_s,
                             0.0 if args.settle_max_s is None else args.settle_max_s)
    except ValueError as exc:
        raise UsageError(f"--{str(exc).replace('_', '-')}; pass a value in that range") from None
    given = [flag for name, flag in ANDROID_FLAGS.items() if getattr(args, name, None) not in (None, False)]
    if given and args.backend != ANDROID:
        raise UsageError(f"{given[0]} is only for --backend {ANDROID}; drop it or pass --backend {ANDROID}")
    if args.backend == ANDROID and args.executor == "ray":
        raise UsageError(f"--backend {ANDROID} attaches to emulators on this machine; --executor ray is not "
                         "supported for it, use --executor local")


def android_settings(args: argparse.Namespace) -> AndroidSettings:
    """The emulators' ports, adb, restart command and launcher from the flags, each checked (``UsageError``).

    Every device the pool may hold (``--max-devices``, else ``--num-devices``) needs an emulator of its own.
    A restart runs under ``--call-timeout``, so the boot wait must end before it."""
    from admire.envs.android_devices import AndroidSettings, DeviceSetupError

    boot_timeout = args.boot_timeout if args.boot_timeout is not None else 0.9 * args.call_timeout
    if not (math.isfinite(boot_timeout) and 0 < boot_timeout < args.call_timeout):
        raise UsageError(f"--boot-timeout must be a positive number of seconds below --call-timeout "
                         f"({args.call_timeout:g}), got {boot_timeout:g}; lower it or raise --call-timeout")
    devices = args.max_devices if args.max_devices is not None else args.num_devices
    try:
        return AndroidSettings.parse(devices=max(1, devices), console_ports=args.console_ports,
                                     grpc_ports=args.grpc_ports, adb_path=args.adb_path,
                                     restart_command=args.restart_command, boot_timeout_s=boot_timeout,
                                     launcher=args.android_launcher, emulator_setup=args.emulator_setup)
    except DeviceSetupError as exc:
        raise UsageError(str(exc)) from None


def check_port_free(host: str, port: int) -> None:
    """Bind and release ``host:port`` now, so a taken port is a clear error before any device starts
    (uvicorn would only find out after the pool had started every device)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            probe.bind(address)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port or --host") \
            from None


def page_options(args: argparse.Namespace) -> dict[str, Any]:
    """The MiniWoB++ options given on the command line (``--settle`` …), as the env takes them."""
    return {name: getattr(args, name) for name in MINIWOB_FLAGS if getattr(args, name, None) is not None}


def device_factory(backend: str, max_steps: int | None, screenshots: bool, executor: str = "local",
                   ray_address: str | None = None, ray_cpus: float = 1.0, android: AndroidSettings | None = None,
                   options: dict[str, Any] | None = None):
    """A zero-argument factory of the backend's envs (in this process or in Ray actors), or a clear
    ``UsageError`` for a backend we lack. With ``android`` (``--backend android_world``) each env built
    takes the next free emulator of its port ranges and gives it back when closed. ``options``: the
    backend's own (``--settle`` …), passed to every env it builds, wherever it runs."""
    from admire.envs.base import ENVS

    try:
        factory = ENVS.lookup(backend)
    except ValueError as exc:
        raise UsageError(f"{exc}") from None
    if backend == "remote":
        raise UsageError("the 'remote' backend is a client of another server; serve a device backend")
    if android is not None:
        if executor != "local":
            raise UsageError(f"--backend {ANDROID} supports only --executor local")
        return android.factory(functools.partial(factory, max_steps=max_steps, screenshots=screenshots))
    max_steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps
    extra = dict(options or {})
    if executor == "ray":
        from admire.envs.executors.ray import RaySettings, ensure_ray, ray_env_factory

        try:
            settings = RaySettings(address=ray_address, num_cpus=ray_cpus)
        except ValueError as exc:
            raise UsageError(f"{exc}") from None
        ensure_ray(settings.address)
        return ray_env_factory(backend, settings, max_steps=max_steps, screenshots=screenshots, **extra)
    return lambda: factory(max_steps=max_steps, screenshots=screenshots, **extra)


def run(args: argparse.Namespace) -> int:
    from admire.extras import require

    require("fastapi", "uvicorn", "gradio", "prometheus_client", extra="server", feature="the env server")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    args.dashboard_token = args.dashboard_token or os.environ.get(DASHBOARD_TOKEN_ENV) or None
    try:
        check_arguments(args, token)
        check_port_free(args.host, args.port)
        android = android_settings(args) if args.backend == ANDROID else None
        factory = device_factory(args.backend, args.max_steps, args.screenshots, args.executor, args.ray_address,
                                 args.ray_cpus_per_device, android, options=page_options(args))
    except UsageError as exc:
        print(f"admire serve: error: {exc}", file=sys.stderr)
        return 2

    import uvicorn

    from admire.server.app import LOOPBACK_HOSTS, create_app
    from admire.server.pool import DevicePool, PoolConfig
    from admire.server.slow_clients import request_deadline_protocol

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = PoolConfig(num_devices=args.num_devices, max_devices=args.max_devices,
                        concurrency_limit=args.concurrency_limit, lease_ttl_s=args.lease_ttl,
                        crashed_device_restart=args.crashed_device_restart,
                        max_consecutive_failures=args.max_failures, call_timeout_s=args.call_timeout)
    try:  # fail now, with the backend's own message (e.g. how to install Chromium), not on the first request
        factory().close()
    except Exception as exc:  # noqa: BLE001 - any reason a device cannot be built ends the command cleanly
        message = " ".join(str(exc).split())[:500]
        print(f"admire serve: error: cannot create a {args.backend} device: {message}", file=sys.stderr)
        return 1
    # Without a token the server trusts whoever reaches it: only this machine, by its loopback names.
    allowed_hosts = None if token else LOOPBACK_HOSTS | {args.host.strip("[]").lower()}
    pool = DevicePool(factory, config, backend=args.backend)
    try:
        app = create_app(pool, token=token, max_request_bytes=args.max_request_bytes, allowed_hosts=allowed_hosts)
        if args.dashboard and token and not args.dashboard_token:
            log.info("dashboard off: it shows every client's screen, and clients hold the token; serve it with "
                     "--dashboard-token (or $%s), a token of its own", DASHBOARD_TOKEN_ENV)
        elif args.dashboard:
            from admire.server.dashboard import mount_dashboard

            # Without any token the server answers this machine only (loopback Host names), the page included.
            mount_dashboard(app, pool, auth=("admire", args.dashboard_token) if args.dashboard_token else None)
            log.info("dashboard at http://%s:%d/ui", args.host, args.port)
        with _stop_quietly_on_signals():
            uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                        http=request_deadline_protocol(args.request_timeout))
    except _Stopped:
        pass
    finally:
        pool.close()  # every browser or emulator the pool started goes with it
    return 0


class _Stopped(Exception):
    """SIGTERM/SIGINT after uvicorn's graceful shutdown."""


@contextlib.contextmanager
def _stop_quietly_on_signals():
    """uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again for the handler
    it found; this handler turns that into a normal return, so the pool still closes its devices
    (Python's default SIGTERM handling would end the process before any ``finally`` runs)."""

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
