"""Whole compiled modules in raycompile's cache: Inductor's FX-graph and AOTAutograd caches use
our tiers as their remote backend, so a new process on another node loads the compiled module
(its kernels then come from the kernel cache) instead of lowering the graph again.

Single flight of whole graphs (``ModuleFlights``): where processes of one node (its ranks,
sharing the node's cache dir) miss AOTAutograd's cache on the same graph at once, one compiles it
and the others wait for its entry and load it: they trace, but do not lower. This is what covers
a function whose compiled frames cannot be saved (or ``dynamo_cache`` off); where they can be,
the ranks wait earlier, at the frame, and trace nothing (``wrapper/flights.py``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..cache import Cache, Entry
from ..cache.inflight import OWNER, Claim, InFlight
from ..cache.keys import module_key
from ..observe.stats import Stats
from . import compat

log = logging.getLogger("raycompile.frames")

POLL_S = 0.1  # how often a waiting process looks for the owner's entry
WATCH_S = 0.25  # how often the owner looks whether its graphs' compiles are over


class ModuleFlights:
    """Claims on AOTAutograd-cache keys among this node's processes (``claims``: the node's
    flights, in its cache dir). A waiter waits at most ``wait_s`` for the owner's entry.

    The owner's claim ends when its entry is written, or when the process stops compiling
    (Dynamo's lock free: that graph's compile is over, its entry written or not: a save torch
    bypassed, a failed compile). Waiting processes whose owner ended without an entry, or died,
    compile the graph themselves, counted."""

    def __init__(self, claims: InFlight, cache: Cache, stats: Stats, wait_s: float) -> None:
        self.claims, self.cache, self.stats, self.wait_s = claims, cache, stats, wait_s
        self._owned: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()

    def get(self, mkey: str) -> Entry | None:
        """After a miss of ``mkey``: None when this process compiles it (it owns the claim, or
        waited for an owner that ended without it), else the owner's entry, waited for. Without
        the backward lowered with the forward (``dynamo_cache`` off), a training graph's entry
        would come only at its first backward, after its owner's compile: no flight, as stock."""
        # closed: torch keeps the remote cache it made for the process's first session (its
        # get_remote_cache is a functools.cache), so a later session's graphs may still come here
        if self._stop.is_set() or not compat.precompile.backward_with_forward():
            return None
        # Dynamo compiles one graph at a time: a graph this process claimed before has been
        # compiled by now, its entry written or never to be (a bypassed save), so its claim ends
        # here, before this process waits on anyone (two owners of unwritten graphs, each waiting
        # on the other's, would both wait out wait_s) or claims the same graph again (an identical
        # graph of its next frame: a claim of its own would wait on itself)
        self._release_all()
        try:
            claim = self.claims.claim(mkey)
        except OSError as e:  # the node's flights dir cannot take a claim (full, read-only): compile it, as stock
            log.debug("raycompile: no graph flight for %s (%s)", mkey[:12], e)
            return None
        if claim.role == OWNER:
            got = self._lookup(mkey)  # written by an owner that finished between the miss and the claim
            if got is not None:
                claim.release()
                return got
            with self._lock:
                self._owned[mkey] = claim
            self.stats.add(graph_flight_owned=1)
            self._watch()
            return None
        return self._wait(mkey, claim)

    def put(self, mkey: str) -> None:
        """``mkey``'s entry is in the tiers: its waiters load it."""
        with self._lock:
            claim = self._owned.pop(mkey, None)
        if claim is not None:
            claim.release()

    def close(self) -> None:
        self._stop.set()
        self._release_all()

    def _wait(self, mkey: str, claim: Claim) -> Entry | None:
        t0 = time.monotonic()
        try:
            while True:
                alive = claim.owner_alive()  # before the lookup: an owner that wrote, then ended, is found
                # the owner is of this node and writes the local tier first: polled there; the
                # tiers whole once it has ended
                got = self._local(mkey) if alive else self._lookup(mkey)
                if got is not None:
                    self.stats.add(graph_flight_served=1, graph_flight_wait_seconds=time.monotonic() - t0)
                    return got
                waited = time.monotonic() - t0
                if not alive or waited > self.wait_s:
                    self.stats.add(graph_flight_gave_up=1, graph_flight_wait_seconds=waited)
                    why = "its owner ended without its entry" if not alive else f"no entry within {self.wait_s:.0f} s"
                    log.info("raycompile: a graph another process of this node was compiling is compiled here: %s",
                             why)
                    return None
                time.sleep(POLL_S)  # another process's file: nothing to wait on
        finally:
            claim.stop_waiting()

    def _local(self, mkey: str) -> Entry | None:
        if self.cache.local is None:  # no node tier (the session makes none then): the tiers whole
            return self._lookup(mkey)
        got = self.cache.local.get(mkey)
        return got if isinstance(got, Entry) else None

    def _lookup(self, mkey: str) -> Entry | None:
        got = self.cache.lookup_many([mkey]).get(mkey)
        return got if isinstance(got, Entry) else None

    def _release_all(self) -> None:
        with self._lock:
            owned, self._owned = list(self._owned.values()), {}
        for claim in owned:
            claim.release()

    def _watch(self) -> None:
        with self._lock:
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_loop, name="raycompile-graph-flights",
                                                 daemon=True)
                self._watcher.start()

    def _watch_loop(self) -> None:
        while not self._stop.wait(WATCH_S):
            if not compat.precompile.compiling():  # every graph it claimed is compiled, or never will be
                self._release_all()
            with self._lock:
                if not self._owned:  # the next claim starts another watcher
                    self._watcher = None
                    return


def make_backend(cache: Cache, kind: str, flights: ModuleFlights | None = None) -> Any:
    """A ``RemoteCacheBackend`` over ``cache``; values are Inductor's serialized entries (bytes),
    stored signed and verified like every other entry before Inductor unpickles them.
    ``flights``: AOTAutograd's misses (``kind`` "aot") single-flighted among the node's processes."""
    flights = flights if kind == "aot" else None

    class FarmModuleCacheBackend(compat.remote_cache_backend_base()):  # type: ignore[misc]
        def _get(self, key: str) -> bytes | None:
            entry = cache.get(module_key(kind, key))
            if entry is None and flights is not None:
                entry = flights.get(module_key(kind, key))
            return entry.blobs.get("value") if entry is not None else None

        def _put(self, key: str, data: bytes) -> None:
            cache.put(Entry(module_key(kind, key), {"value": data}, {"label": f"{kind} module"}))
            if flights is not None:
                flights.put(module_key(kind, key))

    return FarmModuleCacheBackend()
