"""Waiting in tests without betting on how fast a loaded machine is: a test waits for the
condition it needs, with a time-out that only a hang reaches, never for a number of seconds.

Where there is something to wait on (an Event, a Future, a thread, a Barrier), a test waits on
that. ``wait_until`` is for state that offers none: another process's port, file or counter, a
field another thread sets."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """``condition()``'s first true value, asked every ``interval`` seconds; fails the test (an
    AssertionError naming ``what``) when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(interval)
