"""Compiled frames in the tiers: a warm process's ``torch.compile(model)`` loads what another
process compiled (Dynamo's guards and bytecode, the AOTAutograd forward and backward, their output
modules) and skips Dynamo tracing, AOTAutograd and Inductor's lowering; the output modules' kernels
and autotune winners then come from the farm's cache as usual. On with ``settings.dynamo_cache``.

The storage is Dynamo's own precompile cache, redirected (``compat.frames_stored``); this module
decides what an entry is called, where it lives, and when it is written:

- Key (``cache.keys.frames_key``, from ``identity``): torch's id of a compiled function is its
  qualname and first line, nothing else. raycompile's adds the module and a hash of its source;
  the compile options (backend, Inductor's config with mode and options applied, dynamic,
  fullgraph); Dynamo's, AOTAutograd's and Inductor's global configs; the python, torch, CUDA,
  triton versions and the GPU name; and the output-module tag. The model itself (its types,
  attributes, shapes, dtypes, devices) is not in the key: every guard Dynamo made is kept and
  re-created in the loading process (``compat/guards.py``), so another model or shape fails them
  and is traced, as stock would.
- Generations (``KEY.g0`` .. ``KEY.g7``): tiers never replace an entry, and a function's entry
  grows when a process meets a new shape (a guard miss traces it, and the entry written then holds
  the old frames and the new). A load looks up every generation in one batch and installs the
  newest that loads; a write takes the next free one.
- Nothing is unpickled before the tier verified the entry's signature and sha256. Then the entry is
  checked (``compat.loads``: versions, inlined sources unchanged, backends present, guards
  unpickle); one that fails is counted ``dynamo_invalid`` and an older generation, else tracing,
  takes over. A guard miss on a loaded function traces as stock does (counted).
- Writing: in the background, once no frame was traced for ``PUBLISH_DELAY_S``, Dynamo is not
  compiling and the call that traced the last frame returned (at most ``CALL_WAIT_S``), so the
  frames of one step, a graph break's resume functions, go into one generation, and a single
  flight does not end before its step's later frames;
  ``close()`` and the interpreter's exit write what is left. Only complete packages are written
  (each frame with its forward and backward). A frame torch cannot save (it cannot name its code:
  a function reached through a property; an object Dynamo installed by id, other than a module) is
  compiled as usual and left out, counted ``dynamo_unsaveable``: a warm process traces it.
- The backward: lowered at its first backward, as stock lowers it, so a training frame's package is
  complete, and written, once its backward ran; with the forward in a rank of a job; lowered ahead
  where it never ran, else noted in the tiers for the next process (``wrapper/backwards.py``).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .._version import __version__
from ..cache import Cache, Entry, chunked, keys
from ..cache.inflight import Claims
from ..cache.keys import FRAMES_GENERATIONS, frames_backward_note, frames_generation, frames_key
from ..observe.stats import Stats
from . import compat
from .backwards import NO_BACKWARD_S, job_of_ranks, lower_ahead
from .flights import NAMES, WHOLE, Flights, pack

log = logging.getLogger("raycompile.frames")

# the backends whose compiled frames are saved: Inductor's output, which loads without the backend
SAVED_BACKENDS = frozenset({"inductor", "raycompile"})
# an entry is written once no frame was traced for this long and none is being compiled
PUBLISH_DELAY_S = 5.0
# ... and once the call that traced the last frame returned, or this long after that frame
CALL_WAIT_S = 300.0
# a publish waits this long for one already running (the timer's, lowering backwards ahead, say)
PUBLISH_WAIT_S = 900.0
BLOB = "entry"
_DESCRIBE_DEPTH = 3  # how deep non-module attributes (configs) are described
_DESCRIBE_ITEMS = 64  # items of a container described, beyond which its length stands in


@dataclass
class _Known:
    """A function this process keyed: its base key, the next generation to write, its label, and
    how many frames its last written (or loaded) entry had."""

    base: str
    next_generation: int
    label: str
    written_frames: int = 0
    traced: int = 0  # frames this process traced itself (a function whose frames were all loaded or served has none)
    last_traced: float = 0.0  # when (time.monotonic) this process last traced one of its frames
    backward_noted: bool = False  # a process ran no backward of its training frames (frames_backward_note)
    device: int | None = None  # the CUDA device its frames were last traced on (None: CPU, or CUDA not up)


class FrameCache:
    """``cache``: the session's tiers; ``stats``: its counters; ``on_miss``: told of a function
    nothing loads for (it will be traced and compiled), with its compile options; ``before_load``: called before an
    entry is installed (the session installs its Inductor hooks there, so the output modules'
    kernels come from the farm's cache); ``output_tag``: the output modules' cache-key tag."""

    def __init__(self, cache: Cache, stats: Stats, before_load: Callable[[], None], output_tag: str,
                 publish_delay_s: float = PUBLISH_DELAY_S, on_miss: Callable[[dict[str, Any]], None] | None = None,
                 inflight: Claims | None = None, flight_wait_s: float = 1800.0) -> None:
        self.cache, self.stats, self.before_load = cache, stats, before_load
        # single flight among the job's processes (wrapper/flights.py), where the node has a cache dir
        self.flights = Flights(inflight, stats, flight_wait_s, self._publish_in_flight) if inflight else None
        self._route = threading.local()  # .claim: where write() puts an entry in flight instead of a generation
        self._told: dict[str, int] = {}  # source id -> frames converted when its flight was last published
        self._in_flight: dict[str, tuple[int, bytes]] = {}  # source id -> (frames, bytes) it last published
        self.on_miss = on_miss  # a function with nothing to load is traced and compiled (with these options)
        self.output_tag = output_tag
        self.publish_delay_s = publish_delay_s
        self._known: dict[str, _Known] = {}  # torch's source id -> ours
        self._lock = threading.Lock()
        # one publish at a time: the timer's may still be running when close() publishes (a
        # cancelled timer's callback that began goes on), and two would each find the same package
        # unwritten and write it twice, as two generations
        self._publishing = threading.Lock()
        self._timer: threading.Timer | None = None
        # the call that traced the last frame: (its thread's id, its outermost torch.compile frame, when)
        self._call: tuple[int, Any, float] | None = None
        # when the timer last found a compile (a lazy backward's too) or that call running: a
        # backward is lowered ahead only once neither was seen for ``NO_BACKWARD_S``
        self._busy_at = 0.0
        self._closed = False
        self._installed: Any = None
        self._install_error: Exception | None = None
        self._stock_compile: Any = None
        self._compile: Any = None

    # -- on and off ----------------------------------------------------------------------------

    def install(self) -> None:
        """Redirect Dynamo's precompile cache here, now (imports Dynamo: about a second)."""
        self._installed = compat.frames_stored(self, backward_with_forward=job_of_ranks())
        self._installed.__enter__()
        atexit.register(self._at_exit)

    def install_at_compile(self) -> None:
        """``install`` at the next ``torch.compile``, on its thread: Dynamo is imported there (as
        stock imports it there), and torch's configs are per thread, so ``caching_precompile`` is
        set where the compile runs. Importing Dynamo on a thread of our own while the script builds
        its model was measured: the two contend for the GIL and the build grew more than the
        compile shrank (README, compiled frames)."""
        stock = torch.compile

        @functools.wraps(stock)
        def compile(*args: Any, **kwargs: Any) -> Any:
            self.ensure_installed()
            return stock(*args, **kwargs)

        self._stock_compile, self._compile = stock, compile
        torch.compile = compile

    def ensure_installed(self) -> None:
        """``install`` once, on the calling thread; a failure turns compiled frames off, warned."""
        with self._lock:
            if self._installed is not None or self._closed or self._install_error is not None:
                return
            try:
                self.install()
            except Exception as e:  # noqa: BLE001 - a seam moved (SeamMissing) or the like: compile without
                self._install_error = e
                log.warning("raycompile: compiled frames are off for this session: %s: %s", type(e).__name__, e)

    def close(self) -> None:
        """Write what is complete and unwritten, then hand Dynamo's cache and torch.compile back."""
        if self._compile is not None and torch.compile is self._compile:
            torch.compile = self._stock_compile
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
            self._call = None
        if timer is not None:
            timer.cancel()
        self.publish(final=True)
        if self.flights is not None:
            self.flights.close()
        atexit.unregister(self._at_exit)
        if self._installed is not None:
            self._installed.__exit__(None, None, None)
            self._installed = None

    def _at_exit(self) -> None:
        """A script that exits without ``disable()``: its frames are still written."""
        if not self._closed:
            self.publish(final=True)

    # -- what Dynamo's cache calls -------------------------------------------------------------

    def saves(self, options: dict[str, Any]) -> bool:
        """Whether frames compiled with these options are saved and loaded (Inductor's only)."""
        return options.get("backend") in SAVED_BACKENDS

    def load(self, fn: Callable[..., Any], options: dict[str, Any] | None, package: Any = None) -> Any | None:
        """The newest entry of ``fn`` compiled with ``options`` that loads here, else None (then
        Dynamo traces it, or, where another process of the node is compiling it, ``serve``s its
        frames from there into ``package``, the loading ``torch.compile``'s)."""
        if options is None:
            self.stats.add(dynamo_unkeyed=1)
            return None
        if not self.saves(options):
            # another backend's own compile step (and whatever it does beside) must run in every
            # process, as it does without raycompile: never loaded, never written
            self.stats.add(dynamo_unkeyed=1)
            self.stats.unsaveable(f"compiled with backend {options.get('backend')!r}, not Inductor")
            return None
        # the session's Inductor hooks first, so that every key is made under the configs they set
        # (the remote AOTAutograd cache): whether an earlier compile of this process loaded or not
        self.before_load()
        try:
            sid = compat.source_id(fn)
            label = _label(fn)
            base = frames_key(self.identity(fn, options))
        except Exception as e:  # noqa: BLE001 - a function torch or we cannot name: traced as stock
            self.stats.add(dynamo_unkeyed=1)
            log.debug("raycompile: no precompile key for %r (%s: %s); tracing it", fn, type(e).__name__, e)
            return None
        known = _Known(base, 0, label)
        with self._lock:
            self._known[sid] = known
        entry = self._newest(known)
        if entry is not None:
            return entry
        self.stats.add(dynamo_misses=1)
        self.stats.missed(f"compiled frames of {label}", base)
        if self.flights is not None and not self.flights.claim(base, sid, label, package, lambda: self._newest(known)):
            return None  # another process of this node compiles it: its frames are served as they come
        if (known.backward_noted or job_of_ranks()) and not compat.precompile.backward_with_forward():
            compat.precompile.lower_backward_with_forward()  # its entry is complete without a backward
        if self.on_miss is not None:
            self.on_miss(options)
        return None

    def _newest(self, known: _Known) -> Any | None:
        """The newest generation of ``known``'s entry that loads here (counted), else None."""
        keys = [frames_generation(known.base, g) for g in range(FRAMES_GENERATIONS)]
        note = frames_backward_note(known.base)
        found = self.cache.lookup_many([*keys, note])
        known.backward_noted = isinstance(found.get(note), Entry)
        taken = [g for g, k in enumerate(keys) if k in found and not _absent(found[k])]
        known.next_generation = max(taken, default=-1) + 1
        for g in reversed(taken):
            got = found[keys[g]]
            if not isinstance(got, Entry):  # refused or corrupt: counted by the cache, never unpickled
                continue
            try:
                entry = compat.precompile.loads(chunked.decompress(got.blobs[BLOB]))
                frames = compat.precompile.frames_in(entry)
            except Exception as e:  # noqa: BLE001 - any reason it does not install here: an older one, else trace
                self.stats.add(dynamo_invalid=1)
                log.debug("raycompile: precompile entry %s of %s does not load here (%s: %s)", g, known.label,
                          type(e).__name__, str(e)[:300])
                continue
            try:  # what rides along: without it, this node builds them itself, as stock does
                compat.triton.install_helper_modules(got.blobs)  # before Triton's driver starts
                compat.isa.install_isa_libraries(got.blobs)  # before Inductor checks this CPU
            except OSError as e:
                log.debug("raycompile: helper modules of %s not installed (%s)", known.label, e)
            known.written_frames = frames
            self.stats.add(dynamo_hits=1, dynamo_frames_loaded=frames,
                           dynamo_frames_moved=frames if compat.precompile.moved_from(entry) is not None else 0)
            self.stats.frames(known.label, loaded=frames, generation=g)
            log.debug("raycompile: %s: %d compiled frames loaded (generation %d)", known.label, frames, g)
            return entry
        return None

    def serve(self, package: Any, code: Any, f_locals: Any) -> tuple[Any, Any] | object | None:
        """A frame another process of this node compiles (single flight), served from its compile:
        (guard manager, compiled code), ``compat.precompile.SKIP`` (run it as it is), or None to
        trace it here."""
        if self.flights is None:
            return None
        found = self.flights.serve(package, code, f_locals)
        known = self._known.get(getattr(package, "source_id", ""))
        if found is not None and known is not None:
            # what the owner's entry holds is written already: this process writes only frames
            # of its own beyond it (not one it traced that cannot be saved, say)
            known.written_frames = max(known.written_frames, self.flights.served_frames(package))
        return found

    def traced(self, sid: str) -> None:
        """Dynamo traced a frame of function ``sid``: count it, and write its entry soon."""
        known = self._known.get(sid)
        self.stats.add(dynamo_frames_traced=1)
        if known is not None:
            known.traced += 1
            known.last_traced = time.monotonic()
            known.device = compat.devices.current_index()
            self.stats.frames(known.label, traced=1)
        if self.flights is not None:
            self.flights.traced(sid)
        call = compat.dynamo.compiled_call()
        with self._lock:
            self._call = (threading.get_ident(), call, time.monotonic()) if call is not None else None
        self._schedule()

    def unsaveable(self, sid: str, why: str) -> None:
        """A frame torch cannot save (of ``sid``, where known): compiled as usual, left out of the
        entry; the reason is kept for ``stats()['dynamo_unsaveable_reasons']``."""
        self.stats.unsaveable(why)
        log.debug("raycompile: a compiled frame of %s is not saved (%s); other processes trace it",
                  getattr(self._known.get(sid), "label", sid or "?"), why)

    def unbuilt(self, why: str) -> None:
        """A loaded frame's guards did not build in this process: it is installed so that no call
        passes them, and traced as stock would (counted ``dynamo_invalid``)."""
        self.stats.add(dynamo_invalid=1)
        log.warning("raycompile: a loaded compiled frame is traced again: %s", why)

    def write(self, entry: Any, sid: str) -> None:
        """Write ``entry`` (what Dynamo's ``save_to_dynamo_cache`` made for ``sid``) as the next
        generation of its key. One that cannot be written is counted and left out; torch's save
        goes on with the other functions' entries. Frames in flight raise instead: the watcher
        tries them again at its next round."""
        if getattr(self._route, "claim", None) is not None:
            self._write(entry, sid)
            return
        try:
            self._write(entry, sid)
        except Exception as e:  # noqa: BLE001 - this function's next process traces it, never this one
            self.stats.add(dynamo_write_failed=1)
            log.warning("raycompile: could not write the compiled frames of %s to the cache (%s: %s); the next "
                        "process traces them again", getattr(self._known.get(sid), "label", sid), type(e).__name__, e)

    def _write(self, entry: Any, sid: str) -> None:
        began = time.monotonic()
        known = self._known.get(sid)
        if known is None:  # compiled outside torch.compile's load: no key to file it under
            return
        claim = getattr(self._route, "claim", None)
        if claim is not None:  # frames in flight, for this node's processes waiting on them
            entry, _ = compat.precompile.portable(entry)
            data, frames = chunked.compress(compat.precompile.dumps(entry)), compat.precompile.frames_in(entry)
            self._in_flight[sid] = (frames, data)
            claim.publish(pack(data, compat.precompile.flight_names(sid)), frames)
            return
        if known.next_generation >= FRAMES_GENERATIONS:
            self.stats.add(dynamo_full=1)
            log.debug("raycompile: %s used all %d entry generations; not written again", known.label,
                      FRAMES_GENERATIONS)
            return
        entry, dropped = compat.precompile.portable(entry)
        for _ in range(dropped):
            self.stats.unsaveable("it names an object Dynamo installed by id (not a module)")
        if dropped:
            log.debug("raycompile: %s: %d compiled frames name objects only this process has; left out",
                      known.label, dropped)
        # the frames this process compiled to nothing are named too: a waiter of its flight that
        # finds the flight over reads this entry, and skips them instead of waiting for them
        blob = chunked.compress(compat.precompile.dumps(compat.precompile.with_trivial(entry, sid)))
        frames = compat.precompile.frames_in(entry)
        # the first free generation: another process (a node's owner, say) may have written since the load
        later = [frames_generation(known.base, g) for g in range(known.next_generation, FRAMES_GENERATIONS)]
        found = self.cache.lookup_many(later)
        taken = [i for i, k in enumerate(later) if k in found and not _absent(found[k])]
        generation = known.next_generation + (max(taken) + 1 if taken else 0)
        if generation >= FRAMES_GENERATIONS:
            self.stats.add(dynamo_full=1)
            return
        # Triton's compiled helper modules and the libraries of Inductor's CPU checks ride along: a
        # node that loads these frames need not build them
        helpers = {**compat.triton.helper_modules(), **compat.isa.isa_libraries()}
        self.cache.put(Entry(frames_generation(known.base, generation), {BLOB: blob, **helpers},
                             {"label": f"compiled frames of {known.label}", "frames": frames,
                              "generation": generation, "parts": keys.parts_of(known.base) or {}}))
        known.next_generation, known.written_frames = generation + 1, frames
        self.stats.add(dynamo_published=1)
        self.stats.frames(known.label, generation=generation)
        if self.flights is not None:
            self.flights.finished(sid)
            self._in_flight.pop(sid, None)  # the flight's last bytes: nobody reads them now
        log.debug("raycompile: %s: %d compiled frames written (generation %d, %d bytes, %.2f s)", known.label,
                  frames, generation, len(blob), time.monotonic() - began)

    # -- writing ---------------------------------------------------------------------------------

    def _schedule(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.publish_delay_s, self._publish_when_idle)
            self._timer.daemon = True
            self._timer.name = "raycompile-frames"
            self._timer.start()

    def _publish_when_idle(self) -> None:
        """The timer's: write now, unless Dynamo is compiling (the next frame of the same step,
        most likely), or the call that traced the last frame is still running (its frames may run
        longer than ``publish_delay_s`` before the next is traced: a graph break's resume frame
        after a first run that tunes kernels, say): then wait again, so one step's frames go into
        one generation. Writing the entry ends the function's single flight (its waiters then
        trace what it lacks), so a step's later frames must not miss it."""
        with self._lock:
            self._timer = None
        if compat.precompile.compiling() or self._in_traced_call():
            self._busy_at = time.monotonic()
            self._schedule()
            return
        self.publish()

    def _in_traced_call(self) -> bool:
        """Whether the call that traced the last frame is still running (for at most ``CALL_WAIT_S``)."""
        with self._lock:
            call = self._call
        if call is None:
            return False
        thread_id, frame, since = call
        if time.monotonic() - since < CALL_WAIT_S and _running(thread_id, frame):
            return True
        with self._lock:
            if self._call is call:
                self._call = None  # its frame's locals (the call's arguments) are let go
        return False

    def _publish_in_flight(self, sid: str, claim: Any, wait: float, whole: bool) -> str:
        """What this process compiled of ``sid`` so far, into its claim, if complete and grown:
        more frames (serialized anew, under Dynamo's lock, waited for at most ``wait``; only where
        ``whole``), or only more frames converted (the waiters trace or skip those the entry has
        no code for: their names go with the last bytes, no lock taken). Returns what it did
        (``WHOLE``, ``NAMES`` or "")."""
        ready, incomplete = compat.precompile.recorded()
        frames, converted = ready.get(sid, 0), compat.precompile.converted_count(sid)
        log.debug("raycompile: in flight: %s has %d complete frames (%d published; incomplete: %s)",
                  getattr(self._known.get(sid), "label", sid), frames, claim.frames, sid in incomplete)
        if sid not in ready or (frames <= claim.frames and converted <= self._told.get(sid, 0)):
            return ""
        last = self._in_flight.get(sid)  # written by the last whole publish, which set claim.frames
        if frames <= claim.frames and last is not None:
            claim.publish(pack(last[1], compat.precompile.flight_names(sid)), last[0])
            self._told[sid] = converted
            return NAMES
        if not whole:
            return ""
        self._route.claim = claim
        t0 = time.monotonic()
        try:
            if not compat.precompile.save({sid}, wait):
                return ""
        finally:
            self._route.claim = None
        claim.frames, self._told[sid] = frames, converted
        log.debug("raycompile: in flight: %d frames published in %.2f s", frames, time.monotonic() - t0)
        return WHOLE

    def publish(self, final: bool = False) -> int:
        """Write every keyed function whose complete package has frames its last entry lacks;
        returns how many. ``final``: also count the packages left incomplete."""
        if not self._publishing.acquire(timeout=PUBLISH_WAIT_S):
            log.warning("raycompile: a write of compiled frames still runs after %.0f s; this one is skipped, "
                        "and what it would have written is traced again by the next process", PUBLISH_WAIT_S)
            return 0
        try:
            return self._publish(final)
        finally:
            self._publishing.release()

    def _publish(self, final: bool) -> int:
        try:
            ready, incomplete = compat.precompile.recorded()
            with self._lock:
                due = {sid for sid, frames in ready.items()
                       if sid in self._known and frames > self._known[sid].written_frames and self._known[sid].traced}
            if due:
                compat.precompile.save(due)
            with self._lock:
                lacking = [(sid, self._known[sid]) for sid in incomplete
                           if sid in self._known and self._known[sid].traced]
            if lacking:
                self._without_backward(lacking, final)
            if final:
                _, incomplete = compat.precompile.recorded()
                left = [sid for sid in incomplete if sid in self._known]
                if left:
                    self.stats.add(dynamo_incomplete=len(left))
            return len(due)
        except Exception as e:  # noqa: BLE001 - a write that fails costs the next process a trace, never this one
            self.stats.add(dynamo_write_failed=1)
            log.warning("raycompile: could not write compiled frames to the cache (%s: %s); the next process "
                        "traces them again", type(e).__name__, e)
            return 0

    def _without_backward(self, lacking: list[tuple[str, _Known]], final: bool) -> None:
        """Functions whose traced frames lack a backward (lowered lazily, at the first backward):
        written once it ran (looked at again after ``publish_delay_s``); noted once none ran for
        ``NO_BACKWARD_S`` (no frame traced, nothing compiled and the tracing call not running;
        not while its first backward lowers it lazily, which would lower it twice) or by
        ``close()`` (``frames_backward_note``)."""
        if compat.precompile.backward_with_forward():
            return  # lowered with the forward: what lacks a backend failed, and a note changes nothing
        now = time.monotonic()
        due = [(sid, known) for sid, known in lacking if not known.backward_noted
               and (final or now - max(known.last_traced, self._busy_at) >= NO_BACKWARD_S)]
        waiting = len(due) < len([k for _, k in lacking if not k.backward_noted])
        if due:  # lowered here, as their first backward would: the packages complete, written
            done, lowered = lower_ahead({sid: known.device for sid, known in due})
            if done:
                compat.precompile.save(done)
            self.stats.add(dynamo_backward_ahead=lowered)
            due = [(sid, known) for sid, known in due if sid not in done]
        for sid, known in due:
            known.backward_noted = True
            self.cache.put(Entry(frames_backward_note(known.base), {"note": b"no backward ran"},
                                 {"label": f"compiled frames of {known.label}: no backward ran",
                                  "parts": keys.parts_of(known.base) or {}}))
            self.stats.add(dynamo_no_backward=1)
            if self.flights is not None:
                self.flights.finished(sid)  # nothing complete is coming: its waiters trace it
            log.info("raycompile: %s ran no backward of its training frames, so its compiled frames are not "
                     "written; the next process lowers its backward with the forward and writes them", known.label)
        if waiting and not final:
            self._schedule()

    # -- the key ---------------------------------------------------------------------------------

    def identity(self, fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
        """Everything ``fn``'s compiled frames depend on that torch's own id and kept guards miss."""
        inner = compat.compiled_function(fn)
        code = getattr(inner, "__code__", None)
        module = sys.modules.get(getattr(inner, "__module__", "") or "")
        try:
            module_source = inspect.getsource(module) if module is not None else ""
        except (OSError, TypeError):
            module_source = ""
        tag = str(torch.compiler.config.cache_key_tag or "")
        tag = "+".join(t for t in tag.split("+") if t and t != self.output_tag)
        return {
            "function": {"module": getattr(inner, "__module__", None), "qualname": getattr(inner, "__qualname__", None),
                         "line": getattr(code, "co_firstlineno", None),
                         "module_source": hashlib.sha256(module_source.encode()).hexdigest()},
            "options": options,
            "config": compat.dynamo.global_config(),
            "system": compat.dynamo.system(),
            "raycompile": __version__,
            "tag": [tag, self.output_tag],
        }


def _running(thread_id: int, frame: Any) -> bool:
    """Whether ``frame`` is on the stack of thread ``thread_id`` now."""
    current = sys._current_frames().get(thread_id)
    while current is not None:
        if current is frame:
            return True
        current = current.f_back
    return False


def _absent(got: Any) -> bool:
    return not isinstance(got, Entry) and got.reason in ("absent", "unavailable")


def _label(fn: Callable[..., Any]) -> str:
    inner = compat.compiled_function(fn)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"
