"""``admire serve`` — a pool of GUI environments behind HTTP (docs/server.md).

Binds to 127.0.0.1 by default; on any other address it refuses to start without a token, because
the API drives real browsers or phones for whoever can reach it.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal

log = logging.getLogger("admire.server")

HELP = "serve a pool of GUI environments (MiniWoB++ browsers, Android emulators) over HTTP"
TOKEN_ENV = "ADMIRE_SERVER_TOKEN"
NOT_BUILT_YET = {"android_world": "the android_world backend is not part of this version of ADMIRE yet "
                                  "(it needs running emulators and the 'android' extra)"}


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
    parser.add_argument("--max-steps", type=int, default=10,
                        help="a device's step budget for tasks that set none (default: 10)")
    parser.add_argument("--screenshots", action="store_true", help="devices attach a PNG to every observation")
    parser.add_argument("--executor", default="local", choices=["local", "ray"],
                        help="run each device in this process (local) or in a Ray actor (ray; docs/scale-out.md)")
    parser.add_argument("--ray-address", default=None,
                        help="Ray cluster to join with --executor ray (default: a private local Ray; 'auto' joins "
                             "the cluster started by `ray start`)")
    parser.add_argument("--ray-cpus-per-device", type=float, default=1.0,
                        help="Ray CPUs reserved per device actor (default: 1)")
    parser.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                        help="serve the device dashboard at /ui (default: on; behind a login when a token is set)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    parser.add_argument("--token", default=None,
                        help=f"bearer token clients must send (default: ${TOKEN_ENV}); required off loopback")
    parser.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body (default: 1 MiB)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_exposure(host: str, token: str | None) -> None:
    """Refuse to expose devices beyond this machine without a token."""
    if not token and not is_loopback(host):
        raise SystemExit(f"admire serve: refusing to listen on {host!r} without a token: anyone who can reach it "
                         f"could drive the devices. Pass --token (or set {TOKEN_ENV}), or bind to 127.0.0.1.")


def device_factory(backend: str, max_steps: int, screenshots: bool, executor: str = "local",
                   ray_address: str | None = None, ray_cpus: float = 1.0):
    """A zero-argument factory of the backend's envs (in this process or in Ray actors), or a clear
    ``SystemExit`` for a backend we lack."""
    from admire.envs.base import ENVS

    servable = [name for name in ENVS.names() if name != "remote"]
    if backend in NOT_BUILT_YET and backend not in servable:
        raise SystemExit(f"admire serve: {NOT_BUILT_YET[backend]}. Available backends: {', '.join(servable)}.")
    try:
        factory = ENVS.lookup(backend)
    except ValueError as exc:
        raise SystemExit(f"admire serve: {exc}") from None
    if backend == "remote":
        raise SystemExit("admire serve: the 'remote' backend is a client of another server; serve a device backend")
    if executor == "ray":
        from admire.server.ray_executor import RaySettings, ensure_ray, ray_env_factory

        try:
            settings = RaySettings(address=ray_address, num_cpus=ray_cpus)
        except ValueError as exc:
            raise SystemExit(f"admire serve: {exc}") from None
        ensure_ray(settings.address)
        return ray_env_factory(backend, settings, max_steps=max_steps, screenshots=screenshots)
    return lambda: factory(max_steps=max_steps, screenshots=screenshots)


def run(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV) or None
    check_exposure(args.host, token)
    factory = device_factory(args.backend, args.max_steps, args.screenshots, args.executor, args.ray_address,
                             args.ray_cpus_per_device)

    import uvicorn

    from admire.server.app import create_app
    from admire.server.pool import DevicePool, PoolConfig

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = PoolConfig(num_devices=args.num_devices, max_devices=args.max_devices,
                            concurrency_limit=args.concurrency_limit, lease_ttl_s=args.lease_ttl,
                            crashed_device_restart=args.crashed_device_restart,
                            max_consecutive_failures=args.max_failures, call_timeout_s=args.call_timeout)
    except ValueError as exc:
        raise SystemExit(f"admire serve: {exc}") from None
    try:  # fail now, with the backend's own message (e.g. how to install Chromium), not on the first request
        factory().close()
    except Exception as exc:  # noqa: BLE001 - any reason a device cannot be built ends the command cleanly
        raise SystemExit(f"admire serve: cannot create a {args.backend} device: {exc}") from None
    pool = DevicePool(factory, config, backend=args.backend)
    try:
        app = create_app(pool, token=token, max_request_bytes=args.max_request_bytes)
        if args.dashboard:
            from admire.server.dashboard import mount_dashboard

            mount_dashboard(app, pool, auth=("admire", token) if token else None)
            log.info("dashboard at http://%s:%d/ui", args.host, args.port)
        with _stop_quietly_on_signals():
            uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
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
