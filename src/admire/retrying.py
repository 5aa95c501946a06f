"""How a client waits before trying a request again: the server's ``Retry-After`` when it sent one, else an
exponential backoff with random jitter (so that many clients refused together do not return together).
The LLM client (``admire.llm``) and the env server's client (``admire.envs.remote``) both wait this way."""

from __future__ import annotations

import email.utils
import math
import random
import time
from datetime import UTC


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for: delay-seconds or an HTTP date; None when absent or
    unreadable. A date in the past is a wait of 0."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def backoff_seconds(retry: int, *, base: float, cap: float, jitter: tuple[float, float] = (1.0, 1.0),
                    rng: random.Random | None = None) -> float:
    """The wait before retry number ``retry`` (0 for the first): ``base * 2**retry`` times a factor drawn
    uniformly from ``jitter``, at most ``cap`` seconds."""
    low, high = jitter
    factor = (rng or random).uniform(low, high) if low != high else low
    return min(base * 2**retry * factor, cap)
