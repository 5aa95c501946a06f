"""Exceptions as one line, for logs, health reasons and error messages that must stay on one line.

A browser driver's or a subprocess's message runs to many lines (Selenium appends a stack trace), so
printing ``str(exc)`` would break a log line, a device's health reason or a CLI error in pieces.
"""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The message's first line, or the exception's type name when it has no message."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def brief(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (just ``Type`` when there is none), at most ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else ""
    return (f"{type(exc).__name__}: {first}" if first else type(exc).__name__)[:limit]
