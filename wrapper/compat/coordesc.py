"""Seam family "coordesc": coordinate descent's candidates compiled at once. The max-autotune modes
tune a pointwise or reduction kernel at its first run (``CachingAutotuner.coordinate_descent_tuning``):
Inductor's ``CoordescTuner`` times the neighbours of the best config, field by field, and stock
compiles each just before timing it. Here each sweep's candidates are found ahead (a dry run of the
kernel's own tuner) and compiled at once, in the node's compile workers where they run
(``in_compile_workers``), else on threads; the timings and the pick stay stock's
(docs/max-autotune.md). Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import functools
import heapq
import itertools
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Any

from ...observe.quiet import QUIET, GatedThreadPool
from ._base import Seams
from .autotuner import _kernel_loaded, autotuner_source, coordesc_eligible, descends_from_one, kernel_configs

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "CachingAutotuner.coordinate_descent_tuning": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.coordinate_descent_tuning"),
    "CachingAutotuner._precompile_config": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner._precompile_config"),
    "CoordescTuner.autotune": ("torch._inductor.runtime.coordinate_descent_tuner", "CoordescTuner.autotune"),
    "CoordescTuner.compare_config": (
        "torch._inductor.runtime.coordinate_descent_tuner", "CoordescTuner.compare_config"),
    "triton_config_to_hashable": ("torch._inductor.runtime.coordinate_descent_tuner", "triton_config_to_hashable"),
}

log = logging.getLogger("raycompile.autotune")

COORDESC_WAIT_S = 600.0  # a candidate's compile on a prefetch thread, waited for at its turn
AT_LOAD = "_raycompile_coordesc_at_load"  # a kernel's first sweep: config key -> its compile begun at load


def _config_key(cfg: Any) -> Any:
    from torch._inductor.runtime.coordinate_descent_tuner import triton_config_to_hashable

    return triton_config_to_hashable(cfg)


def coordesc_first_sweep(kernel: Any, baseline: Any) -> list[Any]:
    """The configs the kernel's coordinate descent times first from ``baseline`` (the first sweep:
    each tunable field's neighbours), in its order, found by running its own tuner on a copy with
    a stand-in timing under which no candidate improves (nothing is compiled or timed). [] where
    the kernel is not tuned this way or its tuner is not the one this reads."""
    if not coordesc_eligible(kernel):
        return []
    tuner = getattr(kernel, "coordesc_tuner", None)
    if tuner is None or not isinstance(getattr(tuner, "cached_benchmark_results", None), dict):
        return []
    dry = copy.copy(tuner)
    dry.cached_benchmark_results = {}  # the copy's own: the real tuner's cache stays untouched
    base = _config_key(baseline)
    seen: dict[Any, Any] = {}

    def never_better(cfg: Any) -> float:
        key = _config_key(cfg)
        if key == base:
            return 1.0
        seen.setdefault(key, cfg)
        return float("inf")

    try:
        dry.autotune(never_better, baseline, None)
    except Exception as e:  # noqa: BLE001 - a tuner this cannot dry-run: stock's sequence, nothing ahead
        log.debug("raycompile: coordinate descent's candidates not found ahead: %s", e)
        return []
    return list(seen.values())


# ids of compile pools whose binaries this process did not find in Triton's cache (another key)
ELSEWHERE: set[int] = set()

# id(a kernel's CoordescTuner) -> its tuning in progress with candidates compiled ahead
COORDESC_ACTIVE: dict[int, CoordescPrefetch] = {}


class CoordescPrefetch:
    """One kernel's coordinate descent with its candidates compiled ahead, sweep by sweep.

    ``ahead_from(config)`` compiles at once (on ``pool``) every config of the sweep from
    ``config`` (``coordesc_first_sweep``) that is neither timed already (the tuner's own cache) nor
    compiled or in flight, and waits for them all: nothing is timed while they compile. The tuner
    asks ``precompile_config`` where it would compile one, and gets the compile made ahead.
    ``seen_best(config)`` is called before each comparison with the tuner's best config: where it
    changed (a candidate won), the sweep from the new best is compiled ahead the same way, so a
    later sweep's candidates are not compiled one at a time either. ``counted(n)``: n compiled.
    ``ahead(config)``, where given, is what a prefetch thread runs for a config instead of
    ``compile_one`` (``in_compile_workers``: the compile in a worker process, then the load here).
    ``speculate(configs, skip=keys)``, where given, is told each sweep's candidates before they
    are waited for, and the configs it compiles itself (``AtLoad.next_sweeps``: the sweeps from
    them, compiled while they are timed)."""

    def __init__(self, kernel: Any, compile_one: Callable[..., Any], pool: concurrent.futures.Executor,
                 counted: Callable[[int], None], ahead: Callable[[Any], Any] | None = None,
                 speculate: Callable[[list[Any]], Any] | None = None) -> None:
        self.kernel, self.compile_one, self.pool, self.counted = kernel, compile_one, pool, counted
        self.ahead = ahead or compile_one  # what a prefetch thread runs for one config
        self.speculate = speculate
        self.futures: dict[Any, concurrent.futures.Future[Any]] = {}
        self.handed: set[Any] = set()  # configs the tuner took: never compiled again
        self.best: Any = None

    def ahead_from(self, config: Any) -> int:
        """Compile the sweep from ``config`` ahead; how many configs it sent."""
        self.best = _config_key(config)
        timed = getattr(getattr(self.kernel, "coordesc_tuner", None), "cached_benchmark_results", None) or {}
        todo: dict[Any, Any] = {}
        sweep = coordesc_first_sweep(self.kernel, config)
        for cfg in sweep:
            key = _config_key(cfg)
            if key not in timed and key not in self.futures and key not in self.handed and key != self.best:
                todo[key] = cfg
        new = {key: self.pool.submit(self.ahead, cfg) for key, cfg in todo.items()}
        self.futures.update(new)
        if self.speculate is not None and sweep:
            try:  # what is compiled or in flight here already is not queued there again
                self.speculate(sweep, skip={*self.futures, *self.handed, self.best})
            except Exception as e:  # noqa: BLE001 - each next sweep is compiled when the tuner gets there
                log.debug("raycompile: coordinate descent's next sweeps not compiled ahead: %s", e)
        if new:
            concurrent.futures.wait(new.values(), timeout=COORDESC_WAIT_S)
            self.counted(sum(1 for f in new.values() if f.done() and f.exception() is None))
        return len(new)

    def seen_best(self, config: Any) -> None:
        if _config_key(config) != self.best:
            self.ahead_from(config)

    def precompile_config(self, cfg: Any, *more: Any, **options: Any) -> Any:
        key = _config_key(cfg)
        future = None if (more or options) else self.futures.pop(key, None)
        self.handed.add(key)
        if future is not None:
            try:
                return future.result(timeout=COORDESC_WAIT_S)
            except Exception:  # noqa: BLE001 - compiled again here: stock's error is stock's to raise
                pass
        return self.compile_one(cfg, *more, **options)

    def close(self) -> None:
        for future in self.futures.values():  # candidates the tuner never asked for
            future.cancel()
        self.futures.clear()


class EarlyCompile:
    """One candidate of a kernel's coordinate descent, to be compiled in the compile workers before
    the kernel's tuning asks for it (``AtLoad``). ``take()``, at the kernel's tuning: the compile's
    result, (binary hash, seconds), waited for where it began; None where it had not begun (it then
    never will: the tuning compiles the candidate itself) or failed. ``drop()``: never begin it
    (its kernel's tuning is over). ``speculative``: a candidate of a sweep the tuner may never
    reach (``AtLoad.next_sweeps``)."""

    def __init__(self, compile: Callable[[], Any], speculative: bool = False) -> None:
        self._compile = compile
        self.speculative = speculative
        self._lock = threading.Lock()
        # -> "begun" (by a thread of AtLoad), "taken" (by the tuning first) or "dropped" (never begun)
        self._state = "queued"
        self._done = threading.Event()
        self._result: Any = None

    def run(self) -> None:
        with self._lock:
            if self._state != "queued":
                return
            self._state = "begun"
        try:
            self._result = self._compile()
        except Exception as e:  # noqa: BLE001 - the tuning compiles it itself, as without this
            log.debug("raycompile: a coordinate-descent candidate not compiled ahead: %s", e)
        finally:
            self._done.set()

    def take(self) -> Any:
        with self._lock:
            if self._state in ("queued", "dropped"):  # never begun: nothing to wait for
                self._state = "taken"
                return None
        self._done.wait(COORDESC_WAIT_S)
        return self._result

    def drop(self) -> None:
        with self._lock:
            if self._state == "queued":
                self._state = "dropped"

    @property
    def queued(self) -> bool:
        return self._state == "queued"


class AtLoad:
    """Coordinate-descent candidates compiled in the node's compile workers before a kernel's tuning
    asks for them, at most ``threads`` at a time (part of the node's CPUs stay free for the
    process's timings, which go on meanwhile; the threads only send and wait), highest priority
    first:

    1. ``next_sweeps(kernel, configs, workers)``: while a kernel's tuning times a sweep's
       candidates (``configs``), the sweep from each of them, one of which the tuner moves to where
       that candidate wins. Stock finds the next sweep only then, and the tuner waited for its
       compiles at each move (12 s of the GPT-2 step's first output on an H200, stop 50). The
       newest sweeps go first: they are the tuner's next. Speculative: those of a candidate that
       does not win are compiled for nothing, on workers that idle otherwise, and whatever has not
       begun when the kernel's tuning ends is dropped.
    2. ``load(kernels, workers)``: the first sweep (``coordesc_first_sweep`` from the one config a
       kernel has) of each kernel of a module just loaded, while the process goes on to the kernels'
       first runs. The workers idle then (the module's kernels are compiled). A kernel with several
       configs (its baseline is their timing's pick, known only then) is left to its tuning.

    Each candidate is an ``EarlyCompile`` kept in the kernel's ``AT_LOAD``, which the tuning takes
    (``in_compile_workers``). ``counted(n)``: n first-sweep candidates queued at load;
    ``speculated(n)``: n next-sweep candidates queued."""

    def __init__(self, threads: int, counted: Callable[[int], None],
                 speculated: Callable[[int], None] | None = None) -> None:
        self.pool = GatedThreadPool(max(1, threads), thread_name_prefix="raycompile-coordesc-load")
        self.counted = counted
        self.speculated = speculated or (lambda n: None)
        self._lock = threading.Lock()
        self._queue: list[tuple[tuple[int, int, int], EarlyCompile]] = []  # a heap by priority
        self._seq = itertools.count()
        self._batches = itertools.count(1)

    def load(self, kernels: Any, workers: Any) -> int:
        queued = 0
        for kernel in kernels:
            try:
                found = autotuner_source(kernel) if descends_from_one(kernel) else None
                sweep = coordesc_first_sweep(kernel, kernel_configs(kernel)[0]) if found is not None else []
            except Exception as e:  # noqa: BLE001 - its tuning compiles its candidates, as without this
                log.debug("raycompile: coordinate descent's first sweep not found at load: %s", e)
                continue
            queued += self._queue_configs(kernel, found, sweep, workers, 1, 0)
        if queued:
            self.counted(queued)
        return queued

    def next_sweeps(self, kernel: Any, configs: list[Any], workers: Any, skip: Collection[Any] = ()) -> int:
        """Queue the sweep from each of ``configs`` (candidates of the sweep the kernel's tuning is
        about to time) ahead of everything queued at load, less the configs keyed in ``skip`` (the
        tuning compiles them itself); how many configs it queued."""
        try:
            found = autotuner_source(kernel)
            sweeps = [coordesc_first_sweep(kernel, cfg) for cfg in configs] if found is not None else []
        except Exception as e:  # noqa: BLE001 - the tuning compiles each sweep when it gets there, as before
            log.debug("raycompile: coordinate descent's next sweeps not found ahead: %s", e)
            return 0
        batch = -next(self._batches)  # the newest batch first: it is the tuner's next
        wanted = {_config_key(cfg) for sweep in sweeps for cfg in sweep}
        early = kernel.__dict__.setdefault(AT_LOAD, {})
        for key, job in list(early.items()):
            if not (job.speculative and job.queued):
                continue
            if key in wanted:  # queued for an earlier sweep: now among the newest
                with self._lock:
                    heapq.heappush(self._queue, ((0, batch, next(self._seq)), job))
            else:  # from a config the tuner has moved past: it never times this one now
                job.drop()
                early.pop(key, None)
        todo = [cfg for sweep in sweeps for cfg in sweep if _config_key(cfg) not in skip]  # repeats: queued once
        queued = self._queue_configs(kernel, found, todo, workers, 0, batch, speculative=True)
        if queued:
            self.speculated(queued)
        return queued

    def _queue_configs(self, kernel: Any, found: tuple[str, str] | None, configs: list[Any], workers: Any,
                       tier: int, batch: int, speculative: bool = False) -> int:
        from .triton import compile_config_for_target, compile_job_env, triton_extra_config

        if not configs or found is None or id(workers) in ELSEWHERE:
            return 0
        name, source = found
        env, extra = compile_job_env(), triton_extra_config(source)
        timed = getattr(getattr(kernel, "coordesc_tuner", None), "cached_benchmark_results", None) or {}
        early = kernel.__dict__.setdefault(AT_LOAD, {})
        queued = 0
        for cfg in configs:
            key = _config_key(cfg)
            if key in early or key in timed:
                continue
            job = EarlyCompile(functools.partial(_compile_in, workers, compile_config_for_target,
                                                 name, source, cfg, env, extra), speculative)
            early[key] = job
            with self._lock:
                heapq.heappush(self._queue, ((tier, batch, next(self._seq)), job))
            try:
                self.pool.submit(self._run_next)  # one run for each job queued: the best one then
            except RuntimeError:  # closed: the tuning compiles it itself
                job.drop()
                continue
            queued += 1
        return queued

    def _run_next(self) -> None:
        with self._lock:  # the best job not dropped meanwhile (a later run then finds none: fine)
            while self._queue:
                _, job = heapq.heappop(self._queue)
                if job.queued:
                    break
            else:
                return
        job.run()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for _, job in self._queue:
                job.drop()
            self._queue.clear()


def _compile_in(workers: Any, job: Callable[..., Any], *args: Any) -> Any:
    return workers.submit(job, *args).result(timeout=COORDESC_WAIT_S)


def in_compile_workers(kernel: Any, compile_one: Callable[[Any], Any], processes: Callable[[], Any],
                       counted: Callable[[int], None],
                       speculated_used: Callable[[int], None] = lambda n: None) -> Callable[[Any], Any] | None:
    """For ``CoordescPrefetch(ahead=...)``: a config of ``kernel`` compiled in this node's compile
    workers (``processes()``: Inductor's process pool, None where it is not running), then taken
    here with ``compile_one`` (``_precompile_config``), which finds it in Triton's cache. Triton's
    front end holds the GIL for much of a compile, so configs compiled at once on threads of this
    process wait on each other; in worker processes they do not. A compile the workers could not
    make (a broken pool, a key that differs) is made here, as before; ``counted(1)`` for each the
    workers made and this process then found in Triton's cache (the same binary's hash);
    ``speculated_used(1)`` for each taken from a next sweep compiled ahead (``AtLoad.next_sweeps``).
    None where the kernel's source is unknown or no pool runs."""
    found = autotuner_source(kernel)
    workers = processes() if found is not None else None
    if workers is None or found is None or id(workers) in ELSEWHERE:
        return None
    from .triton import compile_config_for_target, compile_job_env, compiled_hash, triton_extra_config

    name, source = found
    env, config = compile_job_env(), triton_extra_config(source)

    early = kernel.__dict__.setdefault(AT_LOAD, {})  # AtLoad's compiles of this kernel's candidates

    def ahead(cfg: Any) -> Any:
        built = None
        try:
            at_load = early.pop(_config_key(cfg), None)
            done = at_load.take() if at_load is not None else None  # compiled ahead (at load, or a sweep's)
            if done is not None and at_load.speculative:
                speculated_used(1)
            built, _ = done or workers.submit(compile_config_for_target, name, source, cfg, env,
                                              config).result(timeout=COORDESC_WAIT_S)
        except Exception as e:  # noqa: BLE001 - compiled here instead, as on a prefetch thread before
            log.debug("raycompile: a coordinate-descent candidate not compiled in the compile workers: %s", e)
        result = compile_one(cfg)
        if built is not None and compiled_hash(result) == built:  # the workers' binary, found here
            counted(1)
        elif built is not None and id(workers) not in ELSEWHERE:
            # their binaries are not the ones this process loads (workers started before the farm's
            # set-up, say): sending them more is only work lost, so the threads compile from now on
            ELSEWHERE.add(id(workers))
            log.info("raycompile: a coordinate-descent candidate the compile workers built has another Triton "
                     "cache key than this process's (%s, %s); the candidates compile on this process's threads "
                     "from now on", built, compiled_hash(result))
        return result

    return ahead


@contextlib.contextmanager
def coordesc_prefetched(workers: int, counted: Callable[[int], None], processes: Callable[[], Any] | None = None,
                        in_workers: Callable[[int], None] | None = None,
                        at_load: Callable[[int], None] | None = None, next_sweeps: bool = True,
                        speculated: Callable[[int], None] | None = None,
                        speculated_used: Callable[[int], None] | None = None) -> Iterator[AtLoad]:
    """Coordinate descent (max-autotune's tuning of a pointwise or reduction kernel at its first
    run, ``CachingAutotuner.coordinate_descent_tuning``) compiles each candidate config (Triton,
    then ptxas) just before timing it, one after another, on the step's critical path. Inside,
    the candidates of its first sweep (``coordesc_first_sweep``) are compiled at once on
    ``workers`` threads before the tuner starts, and those of the sweep from each new best config
    as soon as the tuner moves to it (``CoordescPrefetch``, seen through
    ``CoordescTuner.compare_config``); the tuner takes each compile where it would have made it.
    Nothing is timed while they compile (a timing beside busy threads would be another timing than
    stock's); the timings, their order and so the pick are stock's. ``counted(n)``: n candidates
    compiled ahead. ``processes``: this node's compile workers where they run (else None), which
    then compile the candidates (``in_compile_workers``, ``in_workers(n)`` counting them) while
    the threads wait for them and load them; with ``next_sweeps``, the workers also compile the
    sweeps from each candidate while the tuner times them (``AtLoad.next_sweeps``; ``speculated(n)``:
    n queued; ``speculated_used(n)``: n of them a tuning took). Yields the ``AtLoad`` (``at_load(n)``
    counting), for the first sweeps of a module's kernels to be compiled when it loads. Restored on
    exit."""
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    stock = CachingAutotuner.__dict__["coordinate_descent_tuning"]
    stock_compare = CoordescTuner.__dict__["compare_config"]
    pool = GatedThreadPool(max(1, workers), thread_name_prefix="raycompile-coordesc")
    # at most half of the node's CPUs (8 of 16) compile ahead of need: the other half stays free for
    # what a tuning needs now (its own sweep, sent by the prefetch threads) and for the timings
    early = AtLoad(max(1, min(workers, (os.cpu_count() or 2) // 2)), at_load or (lambda n: None), speculated)
    active = COORDESC_ACTIVE

    def coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        with QUIET.released():  # a first run inside a timing: its candidates come from the parked threads
            return _coordinate_descent_tuning(self, launcher, *args, **kwargs)

    def _coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        tuner = getattr(self, "coordesc_tuner", None)
        if (not coordesc_first_sweep(self, launcher.config) or "_precompile_config" in self.__dict__
                or id(tuner) in active or not _kernel_loaded(self)):
            return stock(self, launcher, *args, **kwargs)
        ahead = speculate = None
        if processes is not None:
            try:
                ahead = in_compile_workers(self, self._precompile_config, processes, in_workers or (lambda n: None),
                                           speculated_used or (lambda n: None))
                workers = processes() if ahead is not None and next_sweeps else None
                if workers is not None:
                    speculate = functools.partial(early.next_sweeps, self, workers=workers)
            except Exception as e:  # noqa: BLE001 - the threads compile them, as before
                log.debug("raycompile: coordinate descent's candidates compiled on threads: %s", e)
        prefetch = CoordescPrefetch(self, self._precompile_config, pool, counted, ahead, speculate)
        prefetch.ahead_from(launcher.config)
        self._precompile_config = prefetch.precompile_config  # this kernel's tuning only: removed below
        active[id(tuner)] = prefetch
        try:
            return stock(self, launcher, *args, **kwargs)
        finally:
            active.pop(id(tuner), None)
            self.__dict__.pop("_precompile_config", None)
            for job in (self.__dict__.pop(AT_LOAD, None) or {}).values():
                job.drop()  # its tuning is over: nothing more is compiled for it
            prefetch.close()

    def compare_config(self: Any, func: Any, candidate_config: Any, best_config: Any, best_timing: Any) -> Any:
        prefetch = active.get(id(self))
        if prefetch is not None:
            try:
                prefetch.seen_best(best_config)
            except Exception as e:  # noqa: BLE001 - the tuner compiles what it needs itself, as stock
                log.debug("raycompile: coordinate descent's next sweep not compiled ahead: %s", e)
        return stock_compare(self, func, candidate_config, best_config, best_timing)

    CachingAutotuner.coordinate_descent_tuning = coordinate_descent_tuning
    CoordescTuner.compare_config = compare_config
    try:
        yield early
    finally:
        CachingAutotuner.coordinate_descent_tuning = stock
        CoordescTuner.compare_config = stock_compare
        pool.shutdown(wait=False, cancel_futures=True)
        early.close()
        ELSEWHERE.clear()  # the next session's pool is judged anew
