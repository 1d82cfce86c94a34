"""Single flight: when the ranks of a job compile the same function at once, one of them, the
owner, compiles it, and the others wait for what it has compiled so far, frame by frame, instead
of tracing it again. Why frame by frame: an owner's step may wait in a collective on the waiters'
ranks, so what it compiled must reach them before it runs, not once the whole step is done.

Where the claims live decides who shares a flight (``Flights.claim`` picks):
- in the shared tier, when it is a ``file://`` directory (``<dir>/flights``: every node that mounts
  it), Redis or ``ray://head`` (``LeaseInFlight``): one owner for the whole cluster;
- else in this node's cache dir (``<cache_dir>/flights``): one owner per node.

In a directory (``InFlight``), a claim is an exclusive ``flock`` on ``<root>/<key>.lock``: the
first process to take it owns the compile; the kernel (or, on a network file system, its lock
manager) drops the lock when the owner exits or dies, so a waiter that finds the lock free knows
the owner is gone. Waiters announce themselves (``<key>.waiting.<host>-<pid>``, refreshed while
they wait); while any waits, the owner publishes its compiled frames after each one (``publish``):
a signed entry of the claims' tier (``<key>.inflight.<token>.<n>``: the tier verifies it before
anything unpickles it) and an index naming the newest (``<key>.json``, replaced atomically).
Waiters read the newest (``latest``). In Redis and in the ``ray://head`` service, the lock is a
lease the owner renews (``LeaseClaim``), the waiters announcements each refreshes.

Nothing here imports torch or Ray; what a published blob holds is the caller's business.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .files import write_atomic
from .store import Entry, FileTier, RedisTier

log = logging.getLogger("raycompile.frames")

BLOB = "entry"
OWNER, WAITER = "owner", "waiter"
NODE, CLUSTER = "node", "cluster"  # where a flight's claims live: who shares it
HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]  # this host, in a shared dir's names
FRESH_S = 15.0  # a waiter on another host counts while it refreshed its announcement this recently
REFRESH_S = 1.0  # how often a waiter refreshes it
LEASE_S = 10.0  # a Redis owner's lease (renewed every few tenths of a second while it compiles)
KEEP_S = 24 * 3600.0  # a Redis flight's index and waiters expire this long after their last write


class FlightClaim(Protocol):
    """One process's part in one key's flight (``Claim``, ``LeaseClaim``)."""

    key: str
    role: str
    where: str
    published: int
    frames: int

    def waiters(self) -> int: ...
    def publish(self, blob: bytes, frames: int) -> None: ...
    def release(self, done: bool = True) -> None: ...
    def latest(self) -> tuple[bytes | None, bool]: ...
    def owner_alive(self) -> bool: ...
    def stop_waiting(self) -> None: ...


def _in_flight(key: str, token: str, n: int) -> str:
    return f"{key}.inflight.{token}.{n}"


@dataclass
class Claim:
    """One process's part in one key's flight: ``role`` is "owner" or "waiter"."""

    root: str
    key: str
    role: str
    tier: FileTier
    where: str = NODE
    _fd: int | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    published: int = 0
    frames: int = 0  # frames in the newest published blob (the publisher's count)
    seen: int = 0
    _announced: float = 0.0

    # -- owner --------------------------------------------------------------------------------

    def waiters(self) -> int:
        """How many live processes wait on this key: on this host, their announcements with their
        pids alive; on another (a shared directory), those refreshed within ``FRESH_S``."""
        prefix, count = f"{self.key}.waiting.", 0
        try:
            names = os.listdir(self.root)
        except OSError:
            return 0
        for name in names:
            if not name.startswith(prefix):
                continue
            host, _, pid = name[len(prefix):].rpartition("-")
            path = os.path.join(self.root, name)
            if host != HOST:
                with contextlib.suppress(OSError):
                    count += time.time() - os.stat(path).st_mtime < FRESH_S
                continue
            try:
                os.kill(int(pid), 0)
                count += 1
            except (ValueError, ProcessLookupError):
                with contextlib.suppress(OSError):
                    os.unlink(path)
            except PermissionError:  # alive, another user's
                count += 1
        return count

    def publish(self, blob: bytes, frames: int) -> None:
        """Make ``blob`` (what the owner compiled so far: ``frames`` frames) the newest."""
        n = self.published + 1
        self.tier.put(Entry(_in_flight(self.key, self.token, n), {BLOB: blob},
                            {"label": "compiled frames in flight", "frames": frames}))
        write_atomic(self._index(), json.dumps({"token": self.token, "n": n, "done": False}).encode())
        self.published = n
        if n > 2:  # a waiter reading the index just before this publish still finds the one before
            self.tier.drop(_in_flight(self.key, self.token, n - 2))

    def release(self, done: bool = True) -> None:
        """The owner is finished (its entry is in the tiers, or it gave up): waiters stop waiting,
        and what it published in flight goes (a waiter then reads the entry in the tiers)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            write_atomic(self._index(), json.dumps({"token": self.token, "n": self.published, "done": done}).encode())
        os.close(self._fd)  # drops the lock
        self._fd = None
        for n in range(max(1, self.published - 1), self.published + 1):
            self.tier.drop(_in_flight(self.key, self.token, n))

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
        self._announce()
        if n > self.seen and index.get("token"):
            got = self.tier.get(_in_flight(self.key, index["token"], n))
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
            os.unlink(self._waiting())

    def _announce(self) -> None:
        """Refresh this waiter's announcement (what an owner on another host goes by)."""
        now = time.time()
        if now - self._announced >= REFRESH_S:
            self._announced = now
            with contextlib.suppress(OSError), open(self._waiting(), "a"):
                os.utime(self._waiting())

    # -- paths -----------------------------------------------------------------------------------

    def _waiting(self) -> str:
        return os.path.join(self.root, f"{self.key}.waiting.{HOST}-{os.getpid()}")

    def _lock(self) -> str:
        return os.path.join(self.root, f"{self.key}.lock")

    def _index(self) -> str:
        return os.path.join(self.root, f"{self.key}.json")


class InFlight:
    """Flights under ``root``, their blobs in ``tier``: this node's (in its cache dir, blobs in
    the local tier, shared by the processes of one user), or a shared directory's (``where``
    CLUSTER: ``<dir>/flights``, blobs in the shared tier)."""

    def __init__(self, root: str, tier: FileTier, where: str = NODE) -> None:
        self.root, self.tier, self.where = root, tier, where
        os.makedirs(root, mode=0o700, exist_ok=True)

    def claim(self, key: str) -> Claim:
        """Own ``key``'s compile (the lock is free) or wait on its owner. Owning clears what an
        earlier owner left (a done flight whose entry this process missed, or a dead owner's)."""
        claim = Claim(self.root, key, OWNER, self.tier, self.where)
        fd = os.open(claim._lock(), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            claim.role = WAITER
            claim._announce()
            return claim
        claim._fd = fd
        with contextlib.suppress(FileNotFoundError):
            os.unlink(claim._index())
        return claim


# -- leases: one owner per cluster, through the shared tier's server (Redis, the head's service) ----


class Leases(Protocol):
    """What a lease claim needs of a server: ``RedisLeases``, ``LeaseBoard`` (the ``ray://head``
    service holds one). ``index`` is the owner's JSON (token, newest publish, done)."""

    def acquire(self, key: str, token: str, lease_s: float) -> bool: ...
    def renew(self, key: str, token: str, lease_s: float) -> None: ...
    def finish(self, key: str, token: str, index: str) -> None: ...
    def set_index(self, key: str, index: str) -> None: ...
    def read(self, key: str) -> tuple[str | None, bool]: ...  # (index, whether a lease is held)
    def announce(self, key: str, waiter: str) -> None: ...
    def waiters(self, key: str, fresh_s: float) -> int: ...
    def leave(self, key: str, waiter: str) -> None: ...


# KEYS[1] the lock, ARGV[1] the owner's token, ARGV[2] ms: renew (or, with ms 0, drop) only our own lease
_OWN = """if redis.call('get', KEYS[1]) == ARGV[1] then
  if tonumber(ARGV[2]) > 0 then return redis.call('pexpire', KEYS[1], ARGV[2]) end
  return redis.call('del', KEYS[1])
end
return 0"""


class RedisLeases:
    """Leases in Redis: ``raycompile:flight:<key>:lock`` (the owner's token, with a time to live),
    ``:index``, ``:waiting`` (a sorted set scored by each waiter's last refresh)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @staticmethod
    def _name(key: str, what: str) -> str:
        return f"raycompile:flight:{key}:{what}"

    def acquire(self, key: str, token: str, lease_s: float) -> bool:
        if not self._client.set(self._name(key, "lock"), token, nx=True, px=int(lease_s * 1000)):
            return False
        self._client.delete(self._name(key, "index"))
        return True

    def renew(self, key: str, token: str, lease_s: float) -> None:
        self._client.eval(_OWN, 1, self._name(key, "lock"), token, int(lease_s * 1000))

    def finish(self, key: str, token: str, index: str) -> None:
        self.set_index(key, index)
        self._client.eval(_OWN, 1, self._name(key, "lock"), token, 0)

    def set_index(self, key: str, index: str) -> None:
        self._client.set(self._name(key, "index"), index, px=int(KEEP_S * 1000))

    def read(self, key: str) -> tuple[str | None, bool]:
        pipe = self._client.pipeline(transaction=False)
        pipe.get(self._name(key, "index"))
        pipe.exists(self._name(key, "lock"))
        index, held = pipe.execute()
        return (index.decode() if index else None), bool(held)

    def announce(self, key: str, waiter: str) -> None:
        self._client.zadd(self._name(key, "waiting"), {waiter: time.time()})
        self._client.pexpire(self._name(key, "waiting"), int(KEEP_S * 1000))

    def waiters(self, key: str, fresh_s: float) -> int:
        self._client.zremrangebyscore(self._name(key, "waiting"), "-inf", time.time() - fresh_s)
        return int(self._client.zcard(self._name(key, "waiting")))

    def leave(self, key: str, waiter: str) -> None:
        self._client.zrem(self._name(key, "waiting"), waiter)


@dataclass
class _Board:
    owner: str | None = None
    expires: float = 0.0
    index: str | None = None
    waiting: dict[str, float] = field(default_factory=dict)
    touched: float = 0.0


class LeaseBoard:
    """Leases in one process's memory, on its own clock (``clock``: monotonic seconds): what the
    ``ray://head`` cache service holds for every node. Keys untouched for ``KEEP_S`` are forgotten."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._boards: dict[str, _Board] = {}

    def _board(self, key: str) -> _Board:
        now = self._clock()
        if len(self._boards) > 1024:
            for old in [k for k, b in self._boards.items() if now - b.touched > KEEP_S]:
                del self._boards[old]
        board = self._boards.setdefault(key, _Board())
        board.touched = now
        return board

    def _held(self, board: _Board) -> bool:
        return board.owner is not None and self._clock() < board.expires

    def acquire(self, key: str, token: str, lease_s: float) -> bool:
        board = self._board(key)
        if self._held(board):
            return False
        board.owner, board.expires, board.index = token, self._clock() + lease_s, None
        return True

    def renew(self, key: str, token: str, lease_s: float) -> None:
        board = self._board(key)
        if board.owner == token and self._held(board):
            board.expires = self._clock() + lease_s

    def finish(self, key: str, token: str, index: str) -> None:
        board = self._board(key)
        board.index = index
        if board.owner == token:
            board.owner = None

    def set_index(self, key: str, index: str) -> None:
        self._board(key).index = index

    def read(self, key: str) -> tuple[str | None, bool]:
        board = self._board(key)
        return board.index, self._held(board)

    def announce(self, key: str, waiter: str) -> None:
        self._board(key).waiting[waiter] = self._clock()

    def waiters(self, key: str, fresh_s: float) -> int:
        board, now = self._board(key), self._clock()
        board.waiting = {w: t for w, t in board.waiting.items() if now - t < fresh_s}
        return len(board.waiting)

    def leave(self, key: str, waiter: str) -> None:
        self._board(key).waiting.pop(waiter, None)


@dataclass
class LeaseClaim:
    """A claim held as a lease (``LEASE_S``) on a server (``leases``), renewed each time the
    owner's watcher counts the waiters; waiters refresh their announcement as they poll. A lease
    that lapses (the owner died, or hung past ``LEASE_S``) means the owner is gone. The frames in
    flight are entries of ``tier``, the shared tier."""

    key: str
    role: str
    tier: Any  # the shared tier: get, put, drop
    leases: Leases
    where: str = CLUSTER
    # the lease's value: which process holds it (host, pid), for an operator reading the server
    token: str = field(default_factory=lambda: f"{HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    published: int = 0
    frames: int = 0
    seen: int = 0
    _announced: float = 0.0
    _held: bool = False

    # -- owner --------------------------------------------------------------------------------

    def waiters(self) -> int:
        if self._held:
            self.leases.renew(self.key, self.token, LEASE_S)
        return self.leases.waiters(self.key, FRESH_S)

    def publish(self, blob: bytes, frames: int) -> None:
        n = self.published + 1
        self.tier.put(Entry(_in_flight(self.key, self.token, n), {BLOB: blob},
                            {"label": "compiled frames in flight", "frames": frames}))
        self.leases.set_index(self.key, json.dumps({"token": self.token, "n": n, "done": False}))
        self.published = n
        if n > 2:
            self.tier.drop(_in_flight(self.key, self.token, n - 2))

    def release(self, done: bool = True) -> None:
        if not self._held:
            return
        self._held = False
        try:
            self.leases.finish(self.key, self.token, json.dumps({"token": self.token, "n": self.published,
                                                                 "done": done}))
            for n in range(max(1, self.published - 1), self.published + 1):
                self.tier.drop(_in_flight(self.key, self.token, n))
        except Exception as e:  # noqa: BLE001 - the lease lapses by itself; waiters then see the owner gone
            log.debug("raycompile: a flight's release failed (%s: %s)", type(e).__name__, e)

    # -- waiter ---------------------------------------------------------------------------------

    def latest(self) -> tuple[bytes | None, bool]:
        """As ``Claim.latest``; a server that fails to answer reads as the owner gone (the waiter
        then compiles the frame itself, counted)."""
        try:
            return self._latest()
        except Exception as e:  # noqa: BLE001 - redis-py's errors, Ray's: never into the frame's evaluation
            log.warning("raycompile: a flight's owner cannot be asked (%s: %s)", type(e).__name__, e)
            return None, True

    def _latest(self) -> tuple[bytes | None, bool]:
        now = time.time()
        if now - self._announced >= REFRESH_S:
            self._announced = now
            self.leases.announce(self.key, self._waiter())
        raw, held = self.leases.read(self.key)
        try:
            index = json.loads(raw or "{}")
        except ValueError:
            index = {}
        blob = None
        n = int(index.get("n", 0))
        if n > self.seen and index.get("token"):
            got = self.tier.get(_in_flight(self.key, index["token"], n))
            if isinstance(got, Entry):
                blob, self.seen = got.blobs[BLOB], n
        return blob, bool(index.get("done")) or not held

    def owner_alive(self) -> bool:
        try:
            return self.leases.read(self.key)[1]
        except Exception:  # noqa: BLE001 - unanswered: gone, as far as a waiter can tell
            return False

    def stop_waiting(self) -> None:
        with contextlib.suppress(Exception):
            self.leases.leave(self.key, self._waiter())

    @staticmethod
    def _waiter() -> str:
        return f"{HOST}-{os.getpid()}"


class LeaseInFlight:
    """Flights as leases on the shared tier's server, their blobs entries of that tier."""

    where = CLUSTER

    def __init__(self, tier: Any, leases: Leases) -> None:
        self.tier, self.leases = tier, leases

    def claim(self, key: str) -> LeaseClaim:
        claim = LeaseClaim(key, OWNER, self.tier, self.leases)
        if self.leases.acquire(key, claim.token, LEASE_S):
            claim._held = True
            return claim
        claim.role = WAITER
        claim.latest()  # announces it
        return claim


class Claims:
    """Where a key's flight is claimed: in the shared tier when it can hold claims (a ``file://``
    directory or Redis: one owner for every process that shares the tier), else this node's
    ``node`` flights. ``shared()`` is the shared tier, once known (None: none, or not yet).
    A shared store that fails to answer (Redis down, a directory gone) falls back to the node's."""

    def __init__(self, node: InFlight, shared: Callable[[], Any]) -> None:
        self.node, self._shared = node, shared
        self._store: InFlight | LeaseInFlight | None = None

    def store(self) -> InFlight | LeaseInFlight:
        if self._store is None:
            tier = self._shared()
            if isinstance(tier, FileTier):
                try:
                    self._store = InFlight(os.path.join(tier.root, "flights"), tier, CLUSTER)
                except OSError as e:  # a read-only or full shared directory: lookups still work
                    log.warning("raycompile: single flight across nodes is unavailable (no claims can be made "
                                "in %s: %s); compiling once per node", tier.root, e)
                    self._store = self.node
            elif isinstance(tier, RedisTier):
                self._store = LeaseInFlight(tier, RedisLeases(tier._client))
            elif hasattr(tier, "leases"):  # the ray://head service's (orchestrator/cache_service.py)
                self._store = LeaseInFlight(tier, tier.leases())
            else:
                return self.node  # none, or not known yet: asked again at the next claim
        return self._store

    def claim(self, key: str) -> FlightClaim:
        store = self.store()
        if store is not self.node:
            try:
                return store.claim(key)
            except OSError as e:  # the shared directory cannot take claims (read-only, full): from now on, the node's
                log.warning("raycompile: single flight across nodes is unavailable (%s: %s); compiling "
                            "once per node", type(e).__name__, e)
                self._store = self.node
            except Exception as e:  # noqa: BLE001 - Redis or the head service unreachable: this node's, this time
                log.warning("raycompile: single flight across nodes is unavailable (%s: %s); compiling "
                            "once per node", type(e).__name__, e)
        return self.node.claim(key)
