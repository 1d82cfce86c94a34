"""One compile per job: when processes of one job (its ranks: on one node, sharing the node's
cache dir; on every node, sharing a ``file://`` or Redis shared tier) compile the same function
at once and nothing is in the tiers yet, one of them traces and compiles it; each of the others
serves every frame from what that owner compiled, as soon as the owner has compiled it, and
traces nothing (``cache/inflight.py`` holds the claims and the frames in flight).

- ``claim`` (``wrapper/frames.py``, at ``torch.compile``'s lookup that found nothing): the owner
  compiles as usual; a waiter's ``torch.compile`` returns at once, as stock's does.
- The owner publishes what it compiled so far, while anyone waits, as soon as a frame is complete
  (in a rank of a job of several its backward is lowered with its forward; elsewhere a training frame is
  complete once its backward ran): at the end of each frame it traces, on the compiling thread
  (``traced``; spaced so that publishing costs that thread at most a tenth of its time), and from
  its watcher thread when it stops compiling (its frames run, or wait in a collective on the
  waiters' ranks: waiting for the whole step would wait forever). A publish serializes every
  frame so far under Dynamo's lock. The waiters meanwhile load and run what they have: their
  first run of the step's first frame (CUDA's and cuBLAS's start included) leaves their
  critical path, which the owner's next frame's compile covers.
- A waiter's frame (``serve``, where Dynamo would trace it) waits for the owner's frames, installs
  them, and runs the one whose guards its inputs pass. It traces the frame itself, counted, when
  the owner compiled that frame for other inputs or could not save it (both go on waiting for the
  frames after it), finished without it, died (its lock is free), or published nothing for
  ``wait_s``. Nothing waits longer.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cache import chunked
from ..cache.inflight import OWNER, Claims, FlightClaim
from ..observe.quiet import QUIET
from ..observe.stats import Stats
from . import compat

log = logging.getLogger("raycompile.frames")

POLL_S = 0.05  # how often a waiter looks for the owner's next frames
WATCH_S = 0.25  # how often an owner looks for waiters that came after its last frame
COALESCE_S = 0.2  # after a traced frame, how long the owner's watcher waits for the next before publishing
SPACING = 9.0  # the owner's compiling thread publishes once this many times the last publish's cost has passed


WHOLE, NAMES = "whole", "names"  # what a publish wrote: the frames serialized anew, or the names of converted ones
_FLIGHT = b"RCFLIGHT1"


def _keys(keys: list[tuple[Any, ...]]) -> list[list[Any]]:
    return [[f, line, name, code.hex() if isinstance(code, bytes) else ""] for f, line, name, code in keys]


def _unkeys(rows: list[list[Any]]) -> set[tuple[Any, ...]]:
    return {(f, line, name, bytes.fromhex(code)) for f, line, name, code in rows}


def pack(data: bytes, names: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]) -> bytes:
    """What a flight's publish holds: the entry's compressed bytes, and the ``code_key``s of the
    frames the owner converted that no entry will hold code for (``compat.precompile.flight_names``:
    unsaveable, trivial)."""
    head = json.dumps([_keys(names[0]), _keys(names[1])]).encode()
    return _FLIGHT + struct.pack(">I", len(head)) + head + data


def unpack(blob: bytes) -> tuple[bytes, set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """(the entry's compressed bytes, unsaveable, trivial) of ``pack``'s blob."""
    if not blob.startswith(_FLIGHT):
        raise ValueError("not frames in flight of this raycompile version")
    (size,) = struct.unpack_from(">I", blob, len(_FLIGHT))
    start = len(_FLIGHT) + 4
    unsaveable, trivial = json.loads(blob[start:start + size])
    return blob[start + size:], _unkeys(unsaveable), _unkeys(trivial)


@dataclass
class _Wait:
    claim: FlightClaim
    label: str
    reload: Callable[[], Any | None]  # the function's newest entry in the tiers, or None
    reloaded: bool = False
    started: float = field(default_factory=time.monotonic)
    installed: list[tuple[Any, Any, Any]] = field(default_factory=list)  # (code, guard manager, compiled code)
    unsaveable: set[tuple[Any, ...]] = field(default_factory=set)  # frames the owner could not save (traced here)
    trivial: set[tuple[Any, ...]] = field(default_factory=set)  # frames it compiled to nothing (skipped here)
    data: bytes = b""  # the installed entry's bytes in flight (a publish that only adds converted frames repeats them)
    frames: int = 0  # frames the installed entry holds (the owner's entry holds them: not this process's to write)
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
    ``publish(sid, claim, wait, whole)``: writes what the owner compiled so far into its claim
    (``pack``), waiting at most ``wait`` for Dynamo's lock; with ``whole`` False only the names of
    frames converted since, with the last bytes. Returns what it did: ``WHOLE``, ``NAMES`` or ""
    (``FrameCache``, which knows how an entry is made)."""

    def __init__(self, inflight: Claims, stats: Stats, wait_s: float,
                 publish: Callable[[str, FlightClaim, float, bool], str]) -> None:
        self.inflight, self.stats, self.wait_s, self._publish = inflight, stats, wait_s, publish
        self._waiting: weakref.WeakKeyDictionary[Any, _Wait] = weakref.WeakKeyDictionary()
        self._owned: dict[str, FlightClaim] = {}  # source id -> the claim this process owns
        self._waited_on: dict[str, bool] = {}  # source id -> whether the watcher last found waiters
        self._cost: dict[str, float] = {}  # source id -> seconds its last publish took
        self._last_end: dict[str, float] = {}  # source id -> when its last publish ended
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
        """The owner traced a frame (Dynamo calls this at the frame's end, holding its lock). Where
        waiters are known, what is complete is published here, before the next frame takes the
        lock again: the watcher would have to win that lock from this thread. A publish
        serializes every frame so far, so they are spaced to cost this thread at most
        ``1 / (1 + SPACING)`` of its time; the watcher publishes the rest (once the owner stops
        compiling: its frames run, or wait in a collective on the waiters' ranks, which releases
        the GIL and Dynamo's lock to it)."""
        claim = self._owned.get(sid)
        if claim is None:
            return
        self._wake.set()
        if self._waited_on.get(sid):
            try:
                self._publish_spaced(sid, claim, 0.0)
            except Exception as e:  # noqa: BLE001 - never into Dynamo's compile: the watcher tries again
                log.debug("raycompile: frames in flight not published (%s: %s)", type(e).__name__, e)

    def _publish_spaced(self, sid: str, claim: FlightClaim, wait: float) -> None:
        """Publish ``sid``'s frames: a serialization of them only once ``SPACING`` times the last
        one's cost has passed since it ended (it takes the GIL, and Dynamo's lock, from the
        owner's step); frames converted since, always (their names go with the last bytes)."""
        t0 = time.monotonic()
        whole = t0 - self._last_end.get(sid, 0.0) >= SPACING * self._cost.get(sid, 0.0)
        wrote = self._publish(sid, claim, wait, whole)
        took = time.monotonic() - t0
        if wrote:
            self.stats.add(dynamo_flight_published=1, dynamo_flight_publish_seconds=took)
        if wrote == WHOLE:
            self._cost[sid], self._last_end[sid] = took, time.monotonic()

    def finished(self, sid: str) -> None:
        """``sid``'s entry is in the tiers: its flight is over."""
        with self._lock:
            claim = self._owned.pop(sid, None)
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
            QUIET.checkpoint()  # none of this while this process times a kernel on its GPU
            with self._lock:
                owned = list(self._owned.items())
            if not owned:
                return
            # The lock is waited for one round at a time (counting the waiters renews a lease, and a
            # frame's compile can outlast one); nothing complete and unpublished takes no lock.
            compiling = compat.precompile.compiling()
            for sid, claim in owned:
                try:
                    self._waited_on[sid] = bool(claim.waiters())  # read by the compiling thread (traced)
                    if self._waited_on[sid]:
                        self._publish_spaced(sid, claim, WATCH_S if compiling else 0.0)
                except Exception as e:  # noqa: BLE001 - the waiters then trace it themselves, after their wait
                    log.debug("raycompile: frames in flight not published (%s: %s)", type(e).__name__, e)

    # -- a waiter ----------------------------------------------------------------------------------

    def serve(self, package: Any, code: Any, f_locals: Any) -> tuple[Any, Any] | object | None:
        """(guard manager, compiled code) for the frame of ``code`` that the owner compiled and
        whose guards ``f_locals`` pass, waiting for it; ``compat.precompile.SKIP`` for one the
        owner compiled to nothing; None: trace it here."""
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
                        data, unsaveable, trivial = unpack(blob)  # type: ignore[arg-type]
                        wait.unsaveable |= unsaveable
                        wait.trivial |= trivial
                        if data != wait.data:
                            entry, wait.data = compat.precompile.loads(chunked.decompress(data)), data
                    if entry is not None:
                        wait.installed = compat.precompile.install_into(package, entry)
                        wait.frames = compat.precompile.frames_in(entry)
                        wait.unsaveable |= compat.precompile.unsaveable_in(entry)
                        wait.trivial |= compat.precompile.trivial_in(entry)
                        wait.moved = compat.precompile.moved_from(entry) is not None
                except Exception as e:  # noqa: BLE001 - what does not install here is traced here
                    self._give_up(package, wait, f"the owner's frames do not install here ({type(e).__name__}: {e})")
                    return None
                continue
            key = compat.precompile.code_key(code)
            if not ours and key in wait.trivial:  # the owner compiled it to nothing: run as it is
                self.stats.add(dynamo_frames_served=1)
                return compat.precompile.SKIP
            if not ours and key in wait.unsaveable:  # the owner could not save it
                self.stats.add(dynamo_flight_traced=1)  # the frames after it are still served
                log.debug("raycompile: %s: frame %s is traced here: the owner has no saved code for it", wait.label,
                          getattr(code, "co_name", code))
                return None
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

    def served_frames(self, package: Any) -> int:
        """How many frames of ``package`` were installed from its owner's flight (0: none)."""
        wait = self._waiting.get(package)
        return wait.frames if wait is not None else 0

    def _give_up(self, package: Any, wait: _Wait, why: str) -> None:
        self._waiting.pop(package, None)
        wait.claim.stop_waiting()
        self.stats.add(dynamo_flight_gave_up=1)
        log.info("raycompile: %s: tracing it here: %s", wait.label, why)
