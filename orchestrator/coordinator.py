"""Cluster-wide dedupe: when several drivers (say 64 training ranks starting together) miss the
cache on the same key, one compiles it and the others wait, then read its entry from the shared
tier.

``Coordinator`` is a plain class (testable without Ray) that ``ClusterDedupe.start`` runs as a
named, detached actor on the head node. A driver ``claim``s a key before compiling it: the first
claimant gets "compile" and a lease it renews while the compile runs; later claimants get "wait"
and ``poll`` until the owner reports ``done`` (then they re-read the shared tier), or until the
lease runs out (the owner died): the next poller takes the lease over and compiles. Every wait
has a time-out, and a coordinator that cannot be reached is skipped (counted), never a crash.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..errors import FarmUnavailableError
from ..observe.stats import Stats

log = logging.getLogger("raycompile.coordinator")

COORDINATOR_NAME = "raycompile-coordinator"
LEASE_S = 20.0  # a lease outlives its owner by at most this; renewed every poll while compiling
POLL_S = 0.2  # how often a driver renews its leases and asks about the keys it waits on
RETRY_AFTER_S = 30.0  # after the coordinator failed to answer, compile without it this long

# What claim/poll answer
COMPILE, WAIT, DONE, FAILED = "compile", "wait", "done", "failed"


@dataclass
class _Lease:
    owner: str
    deadline: float
    started: float
    waiters: set[str] = field(default_factory=set)


class Coordinator:
    """Who compiles which key. Time comes from ``clock`` (monotonic seconds), so tests drive it.

    A finished key is remembered (the ``remember`` most recent ones) so that a driver that misses
    the cache just after the owner published still reads the entry instead of compiling again.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, remember: int = 100_000) -> None:
        self._clock = clock
        self._leases: dict[str, _Lease] = {}
        self._done: OrderedDict[str, bool] = OrderedDict()  # key -> compiled ok, oldest first
        self._remember = remember
        self.counts: Counter[str] = Counter()

    def _grant(self, key: str, owner: str, lease_s: float) -> str:
        now = self._clock()
        old = self._leases.get(key)
        if old is not None and old.owner != owner:
            self.counts["takeovers"] += 1
        self._leases[key] = _Lease(owner, now + lease_s, now, old.waiters - {owner} if old else set())
        self._done.pop(key, None)
        self.counts["compiles"] += 1
        return COMPILE

    def claim(self, key: str, owner: str, lease_s: float = LEASE_S) -> str:
        """"compile": ``owner`` now holds the lease for ``key`` (renew it, then call ``done``);
        "wait": another driver holds a live lease (``poll`` until it is done); "done": the key was
        compiled already (read it from the shared tier)."""
        self.counts["claims"] += 1
        if self._done.get(key):
            self.counts["answered_done"] += 1
            return DONE
        lease = self._leases.get(key)
        if lease is not None and lease.owner != owner and lease.deadline >= self._clock():
            lease.waiters.add(owner)
            self.counts["waits"] += 1
            return WAIT
        return self._grant(key, owner, lease_s)

    def poll(self, owner: str, keys: list[str], lease_s: float = LEASE_S) -> dict[str, str]:
        """For each key ``owner`` waits on: "done", "failed" (the owner's compile failed: compile
        it yourself), "wait", or "compile" (the lease had run out or was lost: ``owner`` takes it
        over)."""
        now = self._clock()
        out: dict[str, str] = {}
        for key in keys:
            if key in self._done:
                out[key] = DONE if self._done[key] else FAILED
                continue
            lease = self._leases.get(key)
            if lease is not None and lease.owner != owner and lease.deadline >= now:
                out[key] = WAIT
            else:
                out[key] = self._grant(key, owner, lease_s)
        return out

    def renew(self, owner: str, keys: list[str], lease_s: float = LEASE_S) -> list[str]:
        """Extend ``owner``'s leases on ``keys``; return the keys it no longer holds (taken over)."""
        now = self._clock()
        lost = []
        for key in keys:
            lease = self._leases.get(key)
            if lease is None and key not in self._done:  # the coordinator restarted: hold it again
                self._leases[key] = _Lease(owner, now + lease_s, now)
            elif lease is not None and lease.owner == owner:
                lease.deadline = now + lease_s
            elif lease is not None:
                lost.append(key)
        return lost

    def sync(self, owner: str, held: list[str], waiting: list[str], lease_s: float = LEASE_S) -> dict[str, str]:
        """One round trip a driver makes every ``POLL_S``: ``renew(held)`` then ``poll(waiting)``."""
        self.renew(owner, held, lease_s)
        return self.poll(owner, waiting, lease_s)

    def done(self, key: str, owner: str, ok: bool = True) -> None:
        """``owner`` finished ``key``: ok means its entry is in the shared tier. A failure of an owner
        whose lease was taken over is ignored (the new owner is still compiling)."""
        lease = self._leases.get(key)
        if not ok and lease is not None and lease.owner != owner:
            return
        self._leases.pop(key, None)
        self._done[key] = ok
        self._done.move_to_end(key)
        while len(self._done) > self._remember:
            self._done.popitem(last=False)
        self.counts["done" if ok else "failed"] += 1

    def state(self) -> dict[str, Any]:
        """What ``raycompile status`` shows: the keys in flight (owner, age, lease left, waiters)."""
        now = self._clock()
        return {
            "in_flight": [
                {"key": k, "owner": v.owner, "age_s": round(now - v.started, 1),
                 "lease_left_s": round(v.deadline - now, 1), "waiters": len(v.waiters)}
                for k, v in self._leases.items()
            ],
            "remembered": len(self._done),
            "counts": dict(self.counts),
        }


@dataclass
class _Waiter:
    compile: Callable[[], Future[Any]]
    reuse: Callable[[], bool]
    deadline: float


class ClusterDedupe:
    """A driver's side of the coordinator. ``run(key, compile, reuse)`` is called on a cache miss:
    it compiles (``compile()`` returns a future that resolves once the entry is published), or
    leaves the key to another driver and later calls ``reuse()`` (read the entry; False if it is
    not there, then it compiles after all). One background thread renews leases and polls.

    ``actor`` is anything with Ray-actor-like methods (``claim.remote`` ...), read with ``get``;
    ``failures`` are what those raise when the coordinator cannot be reached (with Ray:
    ``raycalls.failures()``), and ``connected`` says whether it can be asked at all (with Ray:
    whether this process is connected; a call would otherwise start a new local Ray).

    What its public methods raise: ``start`` and ``run`` nothing (a coordinator that cannot be
    reached is skipped and counted in ``coordinator_unavailable``); ``close`` nothing.
    """

    def __init__(self, actor: Any, get: Callable[[Any, float], Any], stats: Stats, scope: str = "",
                 wait_timeout_s: float = 1800.0, call_timeout_s: float = 10.0, lease_s: float = LEASE_S,
                 poll_s: float = POLL_S, failures: tuple[type[BaseException], ...] = (OSError,),
                 connected: Callable[[], bool] = lambda: True) -> None:
        self._actor, self._get, self.stats = actor, get, stats
        self._failures, self._connected = failures, connected
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._scope = scope
        self.wait_timeout_s, self.call_timeout_s, self.lease_s, self.poll_s = (
            wait_timeout_s, call_timeout_s, lease_s, poll_s)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._held: dict[str, int] = {}  # coordinator key -> compiles of it in flight here
        self._waiting: dict[str, list[_Waiter]] = {}
        self._skip_until = 0.0
        self._closed = False
        self._thread: threading.Thread | None = None

    @classmethod
    def start(cls, settings: Any, stats: Stats, scope: str) -> ClusterDedupe | None:
        """Start (or find) the cluster's coordinator actor; None, logged, if Ray refuses."""
        import ray

        from . import raycalls

        try:
            raycalls.require(settings.address or "the embedded local Ray")  # .remote() would start a new Ray
            actor = ray.remote(Coordinator).options(
                name=COORDINATOR_NAME, namespace=settings.namespace, lifetime="detached", get_if_exists=True,
                num_cpus=0, resources={"node:__internal_head__": 0.001}, max_restarts=-1, max_task_retries=2,
            ).remote()
        except (FarmUnavailableError, *raycalls.failures()) as e:
            log.warning("raycompile: no cluster coordinator (%s); drivers may compile the same kernels", e)
            stats.add(coordinator_unavailable=1)
            return None
        client = cls(actor, lambda ref, timeout: ray.get(ref, timeout=timeout), stats, scope,
                     wait_timeout_s=2 * settings.job_timeout_s + LEASE_S,  # the farm re-runs a timed-out job once
                     call_timeout_s=min(settings.connect_timeout_s, 10.0),
                     failures=raycalls.failures(), connected=raycalls.connected)
        try:  # the first driver starts the actor (a worker process): wait for it here, not at the first claim
            client._call("state")
        except client._failures as e:
            client._unreachable(e)
            stats.add(coordinator_unavailable=1)
        return client

    def _call(self, method: str, *args: Any) -> Any:
        """One round trip to the coordinator. Raises one of ``failures`` when it cannot be had."""
        if not self._connected():
            raise ConnectionError("Ray is not connected in this process any more")
        return self._get(getattr(self._actor, method).remote(*args), self.call_timeout_s)

    def _tell(self, method: str, *args: Any) -> None:
        """A call to the coordinator nobody waits for. Raises one of ``failures`` when it cannot be sent."""
        if not self._connected():
            raise ConnectionError("Ray is not connected in this process any more")
        getattr(self._actor, method).remote(*args)

    def _key(self, key: str) -> str:
        return f"{self._scope}|{key}"  # drivers that share no tier never wait on each other

    def _unreachable(self, e: BaseException) -> None:
        if time.monotonic() >= self._skip_until:
            log.warning("raycompile: the cluster coordinator did not answer (%s); compiling without it "
                        "for %.0f s (counted in stats()['coordinator_unavailable'])", e, RETRY_AFTER_S)
        self._skip_until = time.monotonic() + RETRY_AFTER_S

    def run(self, key: str, compile: Callable[[], Future[Any]], reuse: Callable[[], bool]) -> None:
        """Compile ``key`` once in the cluster; see the class docstring. Never raises."""
        ckey = self._key(key)
        if self._closed or time.monotonic() < self._skip_until:
            if not self._closed:
                self.stats.add(coordinator_unavailable=1)
            compile()
            return
        try:
            verdict = self._call("claim", ckey, self.owner, self.lease_s)
        except self._failures as e:  # RayActorError, GetTimeoutError, the cluster gone
            self._unreachable(e)
            self.stats.add(coordinator_unavailable=1)
            compile()
            return
        if verdict == DONE:
            self._reuse_or_compile(_Waiter(compile, reuse, 0.0))
        elif verdict == WAIT:
            with self._lock:
                self._waiting.setdefault(ckey, []).append(
                    _Waiter(compile, reuse, time.monotonic() + self.wait_timeout_s))
                self._ensure_thread()
        else:
            self._compile_held(ckey, compile)

    def _reuse_or_compile(self, w: _Waiter) -> None:
        if w.reuse():
            self.stats.add(dedupe_cluster=1)
        else:  # evicted, or published to another tier: compile here, without a lease
            w.compile()

    def _compile_held(self, ckey: str, compile: Callable[[], Future[Any]]) -> None:
        with self._lock:
            self._held[ckey] = self._held.get(ckey, 0) + 1
            self._ensure_thread()
        compile().add_done_callback(lambda f: self._finished(ckey, f.exception() is None))

    def _finished(self, ckey: str, ok: bool) -> None:
        with self._lock:
            if ckey not in self._held:  # closed meanwhile: close() handed the lease back
                return
            self._held[ckey] -= 1
            if self._held[ckey] > 0:
                return
            del self._held[ckey]
        try:  # fire and forget: a lost "done" only makes waiters wait out the lease
            self._tell("done", ckey, self.owner, ok)
        except self._failures as e:
            self._unreachable(e)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="raycompile-coordinator", daemon=True)
            self._thread.start()
        self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._held and not self._waiting:
                    self._wake.wait()
                if self._closed:
                    return
                held, waiting = list(self._held), list(self._waiting)
            try:
                verdicts = self._call("sync", self.owner, held, waiting, self.lease_s)
            except self._failures as e:  # nobody to coordinate with: compile what we wait on here
                self._unreachable(e)
                verdicts = dict.fromkeys(waiting, FAILED)
                self.stats.add(coordinator_unavailable=len(waiting))
            now = time.monotonic()
            for ckey, verdict in verdicts.items():
                with self._lock:
                    waiters = self._waiting.get(ckey, [])
                    if verdict == WAIT:
                        late = [w for w in waiters if w.deadline < now]
                        waiters[:] = [w for w in waiters if w.deadline >= now]
                    else:
                        late = []
                    if verdict != WAIT or not waiters:
                        self._waiting.pop(ckey, None)
                if verdict == DONE:
                    for w in waiters:
                        self._reuse_or_compile(w)
                elif verdict == COMPILE:  # took over a dead driver's lease
                    for w in waiters:
                        self._compile_held(ckey, w.compile)
                elif verdict == FAILED:
                    for w in waiters:
                        w.compile()
                for w in late:
                    log.warning("raycompile: waited %.0f s for another driver's compile; compiling here",
                                self.wait_timeout_s)
                    w.compile()
            with self._lock:  # at most one round trip per poll_s, however many keys arrive meanwhile
                deadline = time.monotonic() + self.poll_s
                while not self._closed and deadline > time.monotonic():
                    self._wake.wait(deadline - time.monotonic())

    def close(self) -> None:
        """Stop polling; compile here what still waits (so no future is left unresolved) and hand
        back the leases still held."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:  # let a round in progress finish first: no waiter served twice
            self._thread.join(timeout=10)
        with self._lock:
            waiting, self._waiting = self._waiting, {}
            held, self._held = list(self._held), {}
        for waiters in waiting.values():
            for w in waiters:
                w.compile()
        for ckey in held:
            try:
                self._tell("done", ckey, self.owner, False)
            except self._failures:  # the coordinator or Ray is gone: its leases run out by themselves
                break
