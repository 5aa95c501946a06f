"""Fixtures shared by the command tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``admire serve`` probe must fail before a pool, a device or a listening socket exists."""
    import uvicorn

    from admire.commands.serve import TOKEN_ENV
    from admire.server import pool

    def started(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("admire serve started something before refusing its arguments")

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.setattr(uvicorn, "run", started)
    monkeypatch.setattr(pool.DevicePool, "__init__", started)
