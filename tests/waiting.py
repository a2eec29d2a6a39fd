"""Waiting on another process with a deadline: poll for the condition, never sleep a fixed time and then assert
(too short on a loaded machine, and wasted time on an idle one)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call `predicate` until it returns something true, and return that. Fails, naming `what` (the condition, as
    in "the grandchild has exited"), when it is still false `timeout` seconds on; it is asked once more at the
    deadline, so that a slow machine's last chance counts."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"never happened within {timeout:g} s: {what}")
        time.sleep(interval)
