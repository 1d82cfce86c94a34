"""One compile per job: when processes of one job (its ranks: on one node, sharing the node's
cache dir; on every node, sharing a ``file://`` or Redis shared tier) compile the same function
at once and nothing is in the tiers yet, one of them traces and compiles it; each of the others
serves every frame from what that owner compiled, as soon as the owner has compiled it, and
traces nothing (``cache/inflight.py`` holds the claims and the frames in flight).

- ``claim`` (``wrapper/frames.py``, at ``torch.compile``'s lookup that found nothing): the owner
  compiles as usual; a waiter's ``torch.compile`` returns at once, as stock's does.
- The owner's watcher thread publishes what it compiled so far once the owner stops compiling
  (its frames run, or wait in a collective) after a frame it traced, and whenever a waiter has
  appeared since (each frame complete: in a rank of a job its backward is lowered with its
  forward; elsewhere a training frame is complete once its backward ran): the owner's
  first step may wait in a collective on the waiters' ranks, so waiting for the whole step would
  wait forever; a frame blocked there leaves the watcher free to publish it. While the owner
  compiles, a publish (every frame so far, serialized under Dynamo's lock) comes only at the end
  of a frame once the last is ``STALE_S`` old.
- A waiter's frame (``serve``, where Dynamo would trace it) waits for the owner's frames, installs
  them, and runs the one whose guards its inputs pass. It traces the frame itself, counted, when
  the owner compiled that frame for other inputs, finished without it, died (its lock is free), or
  published nothing for ``wait_s``. Nothing waits longer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cache.inflight import OWNER, Claims, FlightClaim
from ..observe.stats import Stats
from . import compat

log = logging.getLogger("raycompile.frames")

POLL_S = 0.05  # how often a waiter looks for the owner's next frames
STALE_S = 15.0  # an owner compiling longer than this publishes at its next frame's end all the same
WATCH_S = 0.25  # how often an owner looks for waiters that came after its last frame
COALESCE_S = 0.2  # after a traced frame, how long the owner's watcher waits for the next before publishing


@dataclass
class _Wait:
    claim: FlightClaim
    label: str
    reload: Callable[[], Any | None]  # the function's newest entry in the tiers, or None
    reloaded: bool = False
    started: float = field(default_factory=time.monotonic)
    installed: list[tuple[Any, Any, Any]] = field(default_factory=list)  # (code, guard manager, compiled code)
    moved: bool = False  # what is installed was made on another CUDA device (compat.devices)


def _device_tag() -> str:
    """Which ranks share a flight, as far as ``torch.compile``'s call can tell. An entry made on
    one CUDA device is installed on another by moving it to the loading process's current device
    (``compat.devices``), so the ranks of a job share one flight whatever GPU each has, once each
    has made its GPU the current device (``torch.cuda.set_device(local_rank)``, as torchrun's
    scripts do). A rank whose current device is not its GPU (torchrun's ``LOCAL_RANK`` names
    another: the script moved its model to ``cuda:LOCAL_RANK`` without ``set_device``), or that has
    not started CUDA yet, would get the frames moved to the wrong device, fail their guards and
    trace them after the owner: it flies alone (its own tag). On CPU every rank shares."""
    import torch

    if not torch.cuda.is_available():
        return ""
    rank = os.environ.get("LOCAL_RANK", "")
    if not rank.isdigit():
        return ""
    if torch.cuda.is_initialized() and int(rank) % torch.cuda.device_count() == torch.cuda.current_device():
        return ""
    return f"rank{rank}"


class Flights:
    """``inflight``: where claims are made (the shared tier's, or this node's); ``stats``: the
    session's counters; ``wait_s``: how long a waiter waits for the owner's next frame;
    ``publish(sid, claim, wait)``: writes what the owner compiled so far into its claim, waiting
    at most ``wait`` for Dynamo's lock; whether it did (``FrameCache``, which knows how an entry
    is made)."""

    def __init__(self, inflight: Claims, stats: Stats, wait_s: float,
                 publish: Callable[[str, FlightClaim, float], bool]) -> None:
        self.inflight, self.stats, self.wait_s, self._publish = inflight, stats, wait_s, publish
        self._waiting: weakref.WeakKeyDictionary[Any, _Wait] = weakref.WeakKeyDictionary()
        self._owned: dict[str, FlightClaim] = {}  # source id -> the claim this process owns
        self._published: dict[str, float] = {}  # source id -> when its frames were last published (or claimed)
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # a frame was traced: publish soon

    # -- both ---------------------------------------------------------------------------------------

    def claim(self, key: str, sid: str, label: str, package: Any, reload: Callable[[], Any | None]) -> bool:
        """Claim ``key``'s compile: True when this process compiles it (the owner), False when it
        waits on another process's (its frames are then served by ``serve``; ``reload`` finds the
        entry the owner wrote, where its frames in flight lack one). A function this process
        compiles already (again after ``torch._dynamo.reset()``, say) is compiled again here, as stock does."""
        key = f"{key}.{device}" if (device := _device_tag()) else key
        with self._lock:
            mine = any(claim.key == key for claim in self._owned.values())
        if mine:
            return True
        claim = self.inflight.claim(key)
        if claim.role == OWNER:
            with self._lock:
                old = self._owned.pop(sid, None)
                self._owned[sid] = claim
                self._published[sid] = time.monotonic()
            if old is not None:
                old.release()
            self.stats.flight(label, "owner", claim.where)
            self._watch()
            return True
        if package is None:  # nothing to serve frames into: trace, as before
            claim.stop_waiting()
            return True
        self._waiting[package] = _Wait(claim, label, reload)
        self.stats.flight(label, "waiter", claim.where)
        log.debug("raycompile: %s is being compiled by another process of this %s; its frames are served "
                  "from there", label, claim.where)
        return False

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            owned, self._owned = list(self._owned.values()), {}
        for claim in owned:
            claim.release()
        for wait in list(self._waiting.values()):
            wait.claim.stop_waiting()

    # -- the owner ---------------------------------------------------------------------------------

    def traced(self, sid: str) -> None:
        """The owner traced a frame: the watcher publishes it (if anyone waits) off the compiling
        thread, after the frames traced right after it (one publish serializes every frame so far).
        A frame that then waits in a collective on the waiters' ranks releases the GIL and Dynamo's
        lock to the watcher, so they get it before that collective can complete."""
        if sid in self._owned:
            self._wake.set()

    def finished(self, sid: str) -> None:
        """``sid``'s entry is in the tiers: its flight is over."""
        with self._lock:
            claim = self._owned.pop(sid, None)
            self._published.pop(sid, None)
        if claim is not None:
            claim.release()

    def _watch(self) -> None:
        with self._lock:
            if self._watcher is not None and self._watcher.is_alive():
                return
            self._watcher = threading.Thread(target=self._watch_loop, name="raycompile-flights", daemon=True)
            self._watcher.start()

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            if self._wake.wait(WATCH_S):
                self._wake.clear()
                time.sleep(COALESCE_S)  # the frames traced right after go into the same publish
            with self._lock:
                owned = list(self._owned.items())
            if not owned:
                return
            # While the owner traces or lowers its next frame, nothing is published: a publish
            # takes Dynamo's lock and holds the next frame back while it serializes every frame
            # so far. What the owner compiled goes out once it stops compiling (its step runs, or
            # waits in a collective): one publish, not one per frame; and, when it has compiled
            # for STALE_S since the last, at the end of its current frame, so that its waiters see
            # progress. The lock is never waited for longer than one round: counting the waiters
            # renews a lease, and a frame's compile can outlast one.
            compiling = compat.precompile.compiling()
            for sid, claim in owned:
                try:
                    if not claim.waiters():
                        continue
                    stale = time.monotonic() - self._published.get(sid, 0.0) > STALE_S
                    if (not compiling or stale) and self._publish(sid, claim, WATCH_S if compiling else 0.0):
                        self._published[sid] = time.monotonic()
                except Exception as e:  # noqa: BLE001 - the waiters then trace it themselves, after their wait
                    log.debug("raycompile: frames in flight not published (%s: %s)", type(e).__name__, e)

    # -- a waiter ----------------------------------------------------------------------------------

    def serve(self, package: Any, code: Any, f_locals: Any) -> tuple[Any, Any] | None:
        """(guard manager, compiled code) for the frame of ``code`` that the owner compiled and
        whose guards ``f_locals`` pass, waiting for it; None: trace it here."""
        wait = self._waiting.get(package)
        if wait is None:
            return None
        log.debug("raycompile: %s: frame %s waits for the owner's compile", wait.label, getattr(code, "co_name", code))
        t0 = time.monotonic()
        progress = t0
        while True:
            # what is installed first: each install deserializes every frame the owner compiled so
            # far, so a newer flight is read only when the installed one lacks this frame.
            # By value: installing a newer flight makes the resume functions' code objects anew,
            # while the frame asking runs the one installed before.
            ours = [(gm, compiled) for target, gm, compiled in wait.installed if target is code or target == code]
            for guard_manager, compiled in ours:
                if compat.precompile.passes(guard_manager, f_locals):
                    self.stats.add(dynamo_frames_served=1, dynamo_flight_wait_seconds=time.monotonic() - t0,
                                   dynamo_frames_moved=int(wait.moved))
                    self.stats.frames(wait.label, served=1)
                    return guard_manager, compiled
            blob, finished = wait.claim.latest()
            entry = None
            if blob is None and finished and not wait.reloaded:  # it is done: its entry is in the tiers
                wait.reloaded, entry = True, wait.reload()
            if blob is not None or entry is not None:
                progress = time.monotonic()
                try:
                    if entry is None:
                        entry = compat.precompile.loads(zlib.decompress(blob))  # type: ignore[arg-type]
                    wait.installed = compat.precompile.install_into(package, entry)
                    wait.moved = compat.precompile.moved_from(entry) is not None
                except Exception as e:  # noqa: BLE001 - what does not install here is traced here
                    self._give_up(package, wait, f"the owner's frames do not install here ({type(e).__name__}: {e})")
                    return None
                continue
            if ours:  # the owner compiled this frame for other inputs: nothing more is coming for these
                self.stats.add(dynamo_flight_traced=1)
                return None
            if finished and wait.reloaded:
                self._give_up(package, wait, "the owner finished (or exited) without compiling this frame")
                return None
            if time.monotonic() - progress > self.wait_s:
                self._give_up(package, wait, f"the owner published nothing for {self.wait_s:.0f} s")
                return None
            time.sleep(POLL_S)  # polled: another process's files, with nothing to wait on

    def _give_up(self, package: Any, wait: _Wait, why: str) -> None:
        self._waiting.pop(package, None)
        wait.claim.stop_waiting()
        self.stats.add(dynamo_flight_gave_up=1)
        log.info("raycompile: %s: tracing it here: %s", wait.label, why)
