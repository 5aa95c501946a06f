"""``admire.errors.brief``: an exception as one line, whatever its message."""

from __future__ import annotations

from admire.errors import brief


def test_brief_is_the_type_and_the_first_line() -> None:
    exc = RuntimeError("session not created\n  Stacktrace:\n#0 0x55d0 <unknown>")
    assert brief(exc) == "RuntimeError: session not created"


def test_brief_of_an_empty_message_is_the_type_alone() -> None:
    assert brief(TimeoutError()) == "TimeoutError"
    assert brief(ValueError("  \n ")) == "ValueError"


def test_brief_is_bounded() -> None:
    assert len(brief(OSError("x" * 10_000))) == 300
    assert brief(OSError("x" * 100), limit=20) == "OSError: " + "x" * 11
