"""Seam family "tuning": a Triton kernel's tuning at its first run (``CachingAutotuner``: its
configs timed by ``autotune_to_one_config``, then max-autotune's coordinate descent by
``coordinate_descent_tuning``), taken in turns by the processes of one node, where Inductor files
its result (the kernel's ``.best_config`` in the node's cache dir, through its ``AutotuneCache``).
Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from ._base import Seams
from .autotuner import (
    _config_matches,
    _kernel_loaded,
    config_dict,
    coordesc_eligible,
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


@contextlib.contextmanager
def tuning_in_turns(take: Callable[[str], Any], adopted: Callable[[str, float], None]) -> Iterator[None]:
    """A kernel's first-run tuning done by one process of the node at a time: ``take(path)``
    gives this process the turn at the kernel filed at ``path`` (``cache.turns.take``: a
    ``Turn``, or None to tune as stock). Where another process tuned the kernel whole before this
    one got the turn (``Turn.finished``), what it filed is taken instead of tuning: the configs'
    pick, or coordinate descent's. Inductor files both in turn, the first marked as descent's, so
    the turn is held from the configs' timing through coordinate descent, a holder that fails or
    dies in between leaves nothing to take, and a process never takes a filing of its own.
    ``adopted(kernel name, seconds waited)`` counts each pick taken; where none can be taken, this
    process tunes, as stock. Restored on exit."""
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
