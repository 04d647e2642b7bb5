"""Ctrl-C as people expect it: the first finishes the load point being measured, writes what
was measured and stops; the second stops at once. Both tear every engine down (the
``with`` blocks that own them run on the way out), and ``--resume`` continues either.

``install`` puts the handler in place for the length of a command; the runner calls ``check``
where stopping loses nothing (after a point is written, before a trial starts, while an engine
starts up). SIGTERM stops at once, like a second Ctrl-C: whoever sends it wants the process
gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType


class StopRequested(KeyboardInterrupt):
    """The first Ctrl-C, acted on where the run can stop cleanly."""


class _Stop:
    def __init__(self) -> None:
        self.requested = False
        # A stop-now queued on an event loop that may end before it runs (tuner/run/stop.py
        # ``_interrupt_now``): the next ``check`` raises it instead.
        self.now = False

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            _interrupt_now()
            return
        self.requested = True
        # os.write, not print: a handler that prints while the interrupted code prints fails
        # with "reentrant call".
        os.write(
            sys.stderr.fileno(),
            b"\nautotune: stopping after the current load point (Ctrl-C again to stop now)\n",
        )

    def check(self) -> None:
        if self.now:
            self.now = False
            raise KeyboardInterrupt
        if self.requested:
            raise StopRequested


STOP = _Stop()


def check() -> None:
    """Raise StopRequested if a first Ctrl-C came in; KeyboardInterrupt if a stop-now (a
    second Ctrl-C, SIGTERM) was queued on an event loop that ended before it ran."""
    STOP.check()


def sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as an immediate interrupt (the same clean-up as Ctrl-C)."""
    _interrupt_now()


def _raise_interrupt() -> None:
    STOP.now = False
    raise KeyboardInterrupt


def _interrupt_now() -> None:
    """KeyboardInterrupt, raised where nothing can swallow it.

    Raised from the handler, it lands in whatever code was running. During a load point that
    is aiohttp's protocol callbacks, which turn any exception into ``ClientPayloadError``: the
    request became a failed record and the point ran on to its end (measured: 1 second Ctrl-C in
    15). Inside an event loop it is raised from a callback of the loop's own instead; the loop
    (asyncio's and uvloop's alike) lets KeyboardInterrupt out, cancelling the requests in flight.
    A loop already shutting down may never run that callback: the flag it leaves makes the
    next ``check`` raise it.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise KeyboardInterrupt from None
    STOP.now = True
    loop.call_soon_threadsafe(_raise_interrupt)


def install() -> Callable[[], None]:
    """Take SIGINT and SIGTERM for a command; returns what puts the caller's handlers back."""
    STOP.requested = STOP.now = False
    previous = signal.signal(signal.SIGINT, STOP.on_sigint), signal.signal(signal.SIGTERM, sigterm)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        STOP.requested = STOP.now = False

    return restore
