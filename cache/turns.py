"""Turns: one process of a node at a time does a piece of work that every process of the node
would otherwise do alike, and the others take its result instead of doing it again.

The work here is a Triton kernel's tuning at its first run (its configs timed, then coordinate
descent), which Inductor files next to the kernel in the node's cache dir (``.best_config``). When
the ranks of a job run the same kernel at once, each would time the same candidates on the same
GPUs (or the one GPU they share, each disturbing the others' timings) and could pick another
config. With turns, the first takes the kernel's turn (an exclusive ``flock`` on
``<best_config>.turn``) and tunes; the others wait for it to let go and read what it filed.

The turn's file says whether its last holder finished: a holder empties it when it takes the
turn and writes ``done`` into it when its work ended whole, before it lets go. A holder that dies
(the kernel drops its lock with its process) or fails leaves it empty, and the next holder takes
nothing from it (``finished`` False: what was filed may be half the work) and does the work
itself. A wait longer than ``wait_s`` gives up: the waiter works without the turn. Nothing here
imports torch.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from dataclasses import dataclass, field

log = logging.getLogger("raycompile.autotune")

WAIT_S = 60.0  # the longest one kernel's tuning is waited for (a coordinate descent takes seconds)
POLL_S = 0.005
DONE = b"done"


@dataclass
class Turn:
    """One process's turn at one piece of work. ``waited``: another process held it when this
    one asked; ``held``: this process holds it now (False after a wait that gave up);
    ``waited_s``: how long it waited; ``finished``: the last holder before this one ended its
    work whole (what it filed may be taken); ``fresh``: the holder has yet to look for what
    another process filed (the caller's to clear)."""

    path: str
    fd: int | None
    waited: bool
    waited_s: float = 0.0
    finished: bool = False
    fresh: bool = True
    released: bool = field(default=False)

    @property
    def held(self) -> bool:
        return self.fd is not None and not self.released

    def forget(self) -> None:
        """Close this process's descriptor without letting go (a forked child's copy of its
        parent's turn: the lock stays the parent's until it lets go)."""
        if self.released:
            return
        self.released = True
        if self.fd is not None:
            os.close(self.fd)

    def release(self, done: bool) -> None:
        """Let go of the turn; ``done``: this holder's work ended whole (the next may take it)."""
        if self.released:
            return
        self.released = True
        if self.fd is None:
            return
        try:
            if done:
                os.pwrite(self.fd, DONE, 0)
        except OSError as e:  # the next holder then does the work itself
            log.debug("raycompile: %s: %s", self.path, e)
        finally:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)


def _held(path: str, fd: int, waited: bool, waited_s: float = 0.0) -> Turn:
    """The turn just locked on ``fd``: what its last holder left, then emptied for this one."""
    finished = os.pread(fd, len(DONE), 0) == DONE
    os.ftruncate(fd, 0)
    return Turn(path, fd, waited=waited, waited_s=waited_s, finished=finished)


def _open(path: str) -> int | None:
    """The turn's lock file, opened (made with its directory where missing); None where it cannot be."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        return os.open(path + ".turn", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        log.debug("raycompile: no turn at %s: %s", path, e)
        return None


def try_take(path: str) -> Turn | None:
    """The turn at the work filed at ``path`` if no other process holds it now, else None (also
    where the lock cannot be made): never waits. For taking a turn ahead of the work (a process
    that will do it soon, so that the others wait for it rather than doing it first)."""
    fd = _open(path)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return _held(path, fd, waited=False)
    except OSError:  # held by another process (BlockingIOError), or no flock here
        os.close(fd)
        return None


def take(path: str, wait_s: float = WAIT_S) -> Turn | None:
    """The turn at the work filed at ``path`` (its lock is ``path + ".turn"``): at once when no
    other process holds it, else after the holder lets go (``waited``), or after ``wait_s``
    without it (``held`` False). None where the lock cannot be made (a read-only cache dir, a
    file system without ``flock``): the caller works alone, as stock."""
    fd = _open(path)
    if fd is None:
        return None
    start = time.monotonic()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return _held(path, fd, waited=False)
        except BlockingIOError:
            pass
        deadline = start + wait_s
        while True:
            time.sleep(POLL_S)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return _held(path, fd, waited=True, waited_s=time.monotonic() - start)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
    except OSError as e:  # no flock here, or the turn's file unreadable
        os.close(fd)
        log.debug("raycompile: no turn at %s: %s", path, e)
        return None
    except BaseException:  # interrupted while waiting: the descriptor is not left open
        os.close(fd)
        raise
    os.close(fd)
    log.warning("raycompile: another process has been tuning %s for over %.0f s; tuning it here too",
                os.path.basename(path), wait_s)
    return Turn(path, None, waited=True, waited_s=time.monotonic() - start)
