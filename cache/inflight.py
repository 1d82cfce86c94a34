"""Single flight on one node: when the ranks of a job (processes sharing one cache dir) compile the
same function at once, one of them, the owner, compiles it, and the others wait for what it has
compiled so far, frame by frame, instead of tracing it again.

A claim is an exclusive ``flock`` on ``<root>/<key>.lock``: the first process to take it owns the
compile; the kernel drops the lock when the owner exits or dies, so a waiter that finds the lock
free knows the owner is gone. Waiters announce themselves (``<key>.waiting.<pid>``); while any
waits, the owner publishes its compiled frames after each one (``publish``): a signed entry of the
local tier (``<key>.inflight.<token>.<n>``: the tier verifies it before anything unpickles it) and
an index naming the newest (``<key>.json``, replaced atomically). Waiters read the newest
(``latest``). Why frame by frame: an owner's step may wait in a collective on the waiters' ranks,
so what it compiled must reach them before it runs, not once the whole step is done.

Nothing here imports torch or Ray; what a published blob holds is the caller's business.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from dataclasses import dataclass, field

from .files import write_atomic
from .store import Entry, FileTier

BLOB = "entry"
OWNER, WAITER = "owner", "waiter"


@dataclass
class Claim:
    """One process's part in one key's flight: ``role`` is "owner" or "waiter"."""

    root: str
    key: str
    role: str
    tier: FileTier
    _fd: int | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    published: int = 0
    frames: int = 0  # frames in the newest published blob (the publisher's count)
    seen: int = 0

    # -- owner --------------------------------------------------------------------------------

    def waiters(self) -> int:
        """How many live processes wait on this key (their announcements, their pids alive)."""
        prefix, count = f"{self.key}.waiting.", 0
        try:
            names = os.listdir(self.root)
        except OSError:
            return 0
        for name in names:
            if name.startswith(prefix):
                try:
                    os.kill(int(name[len(prefix):]), 0)
                    count += 1
                except (ValueError, ProcessLookupError):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self.root, name))
                except PermissionError:  # alive, another user's
                    count += 1
        return count

    def publish(self, blob: bytes, frames: int) -> None:
        """Make ``blob`` (what the owner compiled so far: ``frames`` frames) the newest."""
        n = self.published + 1
        self.tier.put(Entry(f"{self.key}.inflight.{self.token}.{n}", {BLOB: blob},
                            {"label": "compiled frames in flight", "frames": frames}))
        write_atomic(self._index(), json.dumps({"token": self.token, "n": n, "done": False}).encode())
        self.published = n

    def release(self, done: bool = True) -> None:
        """The owner is finished (its entry is in the tiers, or it gave up): waiters stop waiting."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            write_atomic(self._index(), json.dumps({"token": self.token, "n": self.published, "done": done}).encode())
        os.close(self._fd)  # drops the lock
        self._fd = None

    # -- waiter ---------------------------------------------------------------------------------

    def latest(self) -> tuple[bytes | None, bool]:
        """(the owner's newest blob if newer than the last one read, else None; whether the owner
        is finished: done, or gone without saying so)."""
        try:
            with open(self._index(), "rb") as f:
                index = json.loads(f.read() or b"{}")
        except (OSError, ValueError):
            index = {}
        blob = None
        n = int(index.get("n", 0))
        if n > self.seen and index.get("token"):
            got = self.tier.get(f"{self.key}.inflight.{index['token']}.{n}")
            if isinstance(got, Entry):
                blob, self.seen = got.blobs[BLOB], n
        return blob, bool(index.get("done")) or not self.owner_alive()

    def owner_alive(self) -> bool:
        """Whether a process still holds the key's lock."""
        try:
            fd = os.open(self._lock(), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops a lock taken just now
        return False

    def stop_waiting(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.root, f"{self.key}.waiting.{os.getpid()}"))

    # -- paths -----------------------------------------------------------------------------------

    def _lock(self) -> str:
        return os.path.join(self.root, f"{self.key}.lock")

    def _index(self) -> str:
        return os.path.join(self.root, f"{self.key}.json")


class InFlight:
    """The node's flights, under ``root`` (in the node's cache dir), their blobs in ``tier`` (the
    node's local tier, shared by the processes of one user)."""

    def __init__(self, root: str, tier: FileTier) -> None:
        self.root, self.tier = root, tier
        os.makedirs(root, mode=0o700, exist_ok=True)

    def claim(self, key: str) -> Claim:
        """Own ``key``'s compile (the lock is free) or wait on its owner. Owning clears what an
        earlier owner left (a done flight whose entry this process missed, or a dead owner's)."""
        claim = Claim(self.root, key, OWNER, self.tier)
        fd = os.open(claim._lock(), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            claim.role = WAITER
            with open(os.path.join(self.root, f"{key}.waiting.{os.getpid()}"), "w"):
                pass
            return claim
        claim._fd = fd
        with contextlib.suppress(FileNotFoundError):
            os.unlink(claim._index())
        return claim
