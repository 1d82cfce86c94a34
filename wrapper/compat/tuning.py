"""Seam family "tuning": a Triton kernel's tuning at its first run (``CachingAutotuner``: its
configs timed by ``autotune_to_one_config``, then max-autotune's coordinate descent by
``coordinate_descent_tuning``), taken in turns by the processes of one node, where Inductor files
its result (the kernel's ``.best_config`` in the node's cache dir, through its ``AutotuneCache``).
Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ...observe.quiet import QUIET
from ._base import Seams
from .autotuner import (
    _config_matches,
    _kernel_loaded,
    config_dict,
    coordesc_eligible,
    descends_from_one,
    kernel_configs,
    kernel_label,
    restrict_autotuner,
)

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "CachingAutotuner.autotune_to_one_config (turns)": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.autotune_to_one_config"),
    "CachingAutotuner.coordinate_descent_tuning (turns)": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.coordinate_descent_tuning"),
    "CachingAutotuner._precompile_config (turns)": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner._precompile_config"),
    "AutotuneCache.local_cache": ("torch._inductor.runtime.autotune_cache", "AutotuneCache"),
    "AutotuneCache.read_best (turns)": ("torch._inductor.runtime.autotune_cache", "AutotuneCache.read_best"),
}

log = logging.getLogger("raycompile.autotune")

_TURN = "_raycompile_turn"  # a kernel's turn, held from its configs' timing to its coordinate descent's end
_TUNED_HERE = "_raycompile_tuned_here"  # this process timed the kernel's configs itself
_ALONE = "_raycompile_turn_given_up"  # ... after a wait for the turn that gave up

RESERVE_S = 300.0  # how long a turn taken ahead is kept for this process's first run of its kernel
RESERVE_MOST = 512  # turns taken ahead and held at once (each an open file)


def best_config_path(kernel: Any) -> str | None:
    """Where Inductor files ``kernel``'s tuning in this node's cache dir (its ``AutotuneCache``'s
    local ``.best_config``); None where it files none (``autotune_local_cache`` off)."""
    cache = getattr(getattr(kernel, "save_cache_hook", None), "__self__", None)
    local = getattr(cache, "local_cache", None)
    if not (isinstance(local, tuple) and len(local) == 2 and isinstance(local[1], str)):
        return None
    return local[1]


def _filed(kernel: Any) -> Any:
    """The config another process filed for ``kernel`` (a Triton ``Config``; with
    ``found_by_coordesc`` set where coordinate descent found it), or None."""
    cache = getattr(kernel.save_cache_hook, "__self__", None)
    configs = [launcher.config for launcher in kernel.launchers] or list(kernel.configs or [])
    try:
        return cache.read_best(kernel.inductor_meta, configs) if cache is not None else None
    except Exception as e:  # noqa: BLE001 - an unreadable entry: tuned here, as stock tunes
        log.debug("raycompile: %s: the filed tuning is unreadable: %s", kernel_label(kernel), e)
        return None


def _launcher_for(kernel: Any, config: Any) -> Any:
    """A launcher of ``kernel`` for ``config``, as ``kernel.launchers`` (one) should then be: one of
    its own, the others let go of as ``autotune_to_one_config`` lets go of them (``restrict_autotuner``),
    where it has it; else compiled as coordinate descent compiles a candidate (Triton's cache has
    it: the filer compiled it). Raises where it cannot be compiled here."""
    found = getattr(config, "found_by_coordesc", False)
    if restrict_autotuner(kernel, {**config_dict(config), "found_by_coordesc": found}):
        return kernel.launchers[0]
    wanted = config_dict(config)
    for launcher in kernel.launchers:
        if _config_matches(launcher.config, wanted) and len(launcher.config.kwargs) == len(config.kwargs):
            launcher.config.found_by_coordesc = found
            return launcher
    if not _kernel_loaded(kernel):  # compiled in a worker: its Triton function is loaded first, as stock's tuning does
        raise RuntimeError("the kernel's Triton function could not be loaded")
    with getattr(kernel, "lock", None) or contextlib.nullcontext():
        launcher = kernel._precompile_config(config).make_launcher()
    launcher.config.found_by_coordesc = found
    return launcher


def _descends(kernel: Any) -> bool:
    """Whether coordinate descent tunes ``kernel`` (max-autotune's, at its first run): False for
    the kernels it leaves alone (templates, fixed configs, a user's autotuned kernel)."""
    return bool(kernel.inductor_meta.get("coordinate_descent_tuning")) and coordesc_eligible(kernel)


def _descent_follows(kernel: Any) -> bool:
    """Whether ``CachingAutotuner.run`` calls coordinate descent right after the configs' timing
    (coordinate descent on and tuning this kernel, the pick not one it found), so the turn is kept
    until it ends; never for a subclass with a ``run`` of its own (which may not call it)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    return (_descends(kernel) and len(kernel.launchers) == 1
            and not getattr(kernel.launchers[0].config, "found_by_coordesc", False)
            and type(kernel).run is CachingAutotuner.run)


def _open_files_allowed() -> int:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return soft if soft > 0 else 1 << 20
    except (ImportError, OSError, ValueError):
        return 1024


def will_tune(kernel: Any) -> bool:
    """Whether ``kernel``'s first run tunes it here: its configs timed (more than one left), or
    coordinate descent from its one config (not one that descent found). False for a kernel
    restricted to a known pick, a template's timing run, a kernel filed nowhere, and a subclass
    with a ``run`` of its own (Inductor's ``DebugAutotuner``, say), which may call neither."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    if best_config_path(kernel) is None or type(kernel).run is not CachingAutotuner.run:
        return False
    return len(kernel_configs(kernel)) > 1 or descends_from_one(kernel)


class Reservations:
    """Turns this process takes ahead, at the kernels of a module it has just loaded and will run
    next, so that a process of the node that reaches one of them first waits for this one's pick
    instead of tuning it itself. The process that compiled a module has the node's compile workers
    (its coordinate descent compiles there), and the others (a job's waiting ranks) do not: a
    waiter that tuned a kernel first on its own threads made the compiling process wait for it.

    ``reserve(kernels)`` takes the turn (``try_take(path)``: at once or not at all) of each kernel
    that ``will_tune``; ``claim(path)`` hands one to the kernel's first-run tuning
    (``tuning_in_turns(reserved=...)``). A turn unclaimed ``hold_s`` after it was taken (a kernel
    this process never runs) is let go of as it was found; so are all at ``close``."""

    def __init__(self, try_take: Callable[[str], Any], hold_s: float = RESERVE_S, most: int = RESERVE_MOST) -> None:
        self.try_take, self.hold_s = try_take, hold_s
        self.most = min(most, _open_files_allowed() // 8)  # a small share of this process's open files
        self._held: dict[str, tuple[Any, float]] = {}  # path -> (its turn, when it is let go of)
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._closed = False
        self._pid = os.getpid()
        forget = weakref.WeakMethod(self._forked)
        os.register_at_fork(after_in_child=lambda: (forget() or (lambda: None))())

    def _forked(self) -> None:
        """In a forked child: the turns are the parent's (one lock, shared with its descriptors).
        The child's copies are closed without letting go, and it takes or claims none."""
        self._closed = True
        self._timer = None
        self._lock = threading.Lock()  # the parent's may have been held by another of its threads
        held, self._held = self._held, {}
        for turn, _ in held.values():
            turn.forget()

    def reserve(self, kernels: Any) -> int:
        """Take ahead the turns of ``kernels`` that will tune here; how many were taken."""
        taken = 0
        for kernel in kernels:
            try:
                path = best_config_path(kernel) if will_tune(kernel) else None
            except Exception as e:  # noqa: BLE001 - a kernel this cannot read: its turn is taken at its run
                log.debug("raycompile: %s: no turn taken ahead: %s", kernel_label(kernel), e)
                path = None
            if path is None:
                continue
            with self._lock:
                if self._closed or path in self._held or len(self._held) >= self.most:
                    continue
                turn = self.try_take(path)
                if turn is None or not turn.held:
                    continue
                self._held[path] = (turn, time.monotonic() + self.hold_s)
                taken += 1
        if taken:
            self._schedule()
        return taken

    def claim(self, path: str) -> Any:
        """The turn taken ahead at ``path`` (then the caller's to let go of), or None."""
        if os.getpid() != self._pid:
            return None
        with self._lock:
            turn, _ = self._held.pop(path, (None, 0.0))
        return turn if turn is not None and turn.held else None

    def _schedule(self) -> None:
        with self._lock:
            if self._timer is not None or self._closed or not self._held:
                return
            due = min(deadline for _, deadline in self._held.values())
            self._timer = threading.Timer(max(0.0, due - time.monotonic()) + 0.05, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self, everything: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            self._timer = None
            stale = [path for path, (_, deadline) in self._held.items() if everything or deadline <= now]
            turns = [self._held.pop(path)[0] for path in stale]
        for turn in turns:  # as found: the holder before this one's mark kept
            turn.release(done=turn.finished)
        if stale and not everything:
            log.debug("raycompile: %d turns taken ahead were not used within %.0f s", len(stale), self.hold_s)
        self._schedule()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self._expire(everything=True)


@contextlib.contextmanager
def tuning_in_turns(take: Callable[[str], Any], adopted: Callable[[str, float], None],
                    reserved: Callable[[str], Any] | None = None) -> Iterator[None]:
    """A kernel's first-run tuning done by one process of the node at a time: ``take(path)``
    gives this process the turn at the kernel filed at ``path`` (``cache.turns.take``: a
    ``Turn``, or None to tune as stock). Where another process tuned the kernel whole before this
    one got the turn (``Turn.finished``), what it filed is taken instead of tuning: the configs'
    pick, or coordinate descent's. Inductor files both in turn, the first marked as descent's, so
    the turn is held from the configs' timing through coordinate descent, a holder that fails or
    dies in between leaves nothing to take, and a process never takes a filing of its own.
    ``adopted(kernel name, seconds waited)`` counts each pick taken; where none can be taken, this
    process tunes, as stock. ``reserved(path)``: a turn this process took ahead at the kernel
    (``Reservations.claim``), used before asking ``take``. Restored on exit."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    stock_one = CachingAutotuner.autotune_to_one_config  # whatever is installed now (its wrappers kept)
    stock_coordesc = CachingAutotuner.coordinate_descent_tuning

    def turn_of(kernel: Any) -> Any:
        turn = kernel.__dict__.get(_TURN)
        if turn is not None and turn.held:
            return turn
        path = best_config_path(kernel)
        if path is None:
            return None
        turn = reserved(path) if reserved is not None else None
        if turn is None:
            turn = take(path)
        if turn is not None and kernel.__dict__.get(_TUNED_HERE):
            turn.fresh = False  # this process timed the configs itself: what is filed may be its own
        return turn

    def taken(kernel: Any, turn: Any) -> Any:
        """What another process filed for the kernel, tuned whole, before this one got the turn
        (while it waited, or since the kernel was loaded here), looked for once per turn; None:
        tune here."""
        if not (turn.held and turn.fresh):
            return None
        turn.fresh = False
        return _filed(kernel) if turn.finished else None

    def adopting(kernel: Any, config: Any) -> Any:
        """A launcher for the filed ``config``, or None (then this process tunes, as stock)."""
        try:
            return _launcher_for(kernel, config)
        except Exception as e:  # noqa: BLE001 - tuned here instead: stock's own path, its own errors
            log.debug("raycompile: %s: the filed pick could not be taken (%s); tuning here",
                      kernel_label(kernel), e)
            return None

    def autotune_to_one_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        with QUIET.released():  # a first run inside a timing: the turn's waits need the parked threads
            return _autotune_to_one_config(self, *args, **kwargs)

    def _autotune_to_one_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        turn = turn_of(self)
        if turn is None or not turn.held:  # no turn here, or a wait that gave up: tuned here whole
            self.__dict__[_TUNED_HERE] = True
            self.__dict__[_ALONE] = turn is not None
            return stock_one(self, *args, **kwargs)
        ok = keep = False
        try:
            adopt = taken(self, turn)
            launcher = adopting(self, adopt) if adopt is not None else None
            if launcher is not None:
                self.launchers = [launcher]
                adopted(kernel_label(self), turn.waited_s)
                ok = True
                return None
            self.__dict__[_TUNED_HERE] = True
            result = stock_one(self, *args, **kwargs)
            ok = True
            keep = turn.held and _descent_follows(self)
            if keep:
                self.__dict__[_TURN] = turn  # let go of at coordinate descent's end
            return result
        finally:
            if not keep:
                turn.release(done=ok)

    def coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        with QUIET.released():
            return _coordinate_descent_tuning(self, launcher, *args, **kwargs)

    def _coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        held = self.__dict__.pop(_TURN, None)
        if held is None and (not _descends(self) or self.__dict__.pop(_ALONE, False)):
            # nothing to tune (templates' timing runs: no turn), or this process gave up waiting
            # for the turn at the configs' timing: its descent goes on without it too
            return stock_coordesc(self, launcher, *args, **kwargs)
        turn = held if held is not None and held.held else turn_of(self)
        if turn is None:
            return stock_coordesc(self, launcher, *args, **kwargs)
        ok = False
        try:
            adopt = taken(self, turn)
            if adopt is not None and getattr(adopt, "found_by_coordesc", False):
                taken_launcher = adopting(self, adopt)
                if taken_launcher is not None:
                    adopted(kernel_label(self), turn.waited_s)
                    ok = True
                    return taken_launcher
            result = stock_coordesc(self, launcher, *args, **kwargs)
            ok = True
            return result
        finally:
            turn.release(done=ok)

    CachingAutotuner.autotune_to_one_config = autotune_to_one_config
    CachingAutotuner.coordinate_descent_tuning = coordinate_descent_tuning
    try:
        yield
    finally:
        CachingAutotuner.autotune_to_one_config = stock_one
        CachingAutotuner.coordinate_descent_tuning = stock_coordesc
