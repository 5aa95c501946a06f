"""Read-only views of the device pool, shared by the HTTP API and the dashboard.

The pool hands out copies rather than its live records so that a slow page render can never hold a
lock a stepping device needs, and so that the dashboard can be developed and tested against any
object with ``devices()`` and ``recent_episodes()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from admire.wire import DeviceState, EpisodeOutcome

__all__ = ["DeviceState", "DeviceView", "EpisodeOutcome", "EpisodeView", "PoolView"]


@dataclass(frozen=True)
class DeviceView:
    id: int
    state: DeviceState
    task: str | None = None
    session_id: str | None = None
    restarts: int = 0
    failures: int = 0                     # consecutive failures; quarantined past the pool's limit
    last_screenshot: bytes | None = None  # PNG of the last observation that carried one
    last_change: float = 0.0              # time.time() of the last state change
    owner: str | None = None              # the leasing session's owner (client id): never shown, only compared


@dataclass(frozen=True)
class EpisodeView:
    session_id: str
    device_id: int
    task: str
    seed: int
    steps: int
    outcome: EpisodeOutcome
    started_at: float
    finished_at: float | None = None
    owner: str | None = None  # the client id that created the session: never shown, only compared


class PoolView(Protocol):
    """What the dashboard needs from a pool."""

    def devices(self) -> list[DeviceView]: ...

    def recent_episodes(self, limit: int = 50) -> list[EpisodeView]: ...
