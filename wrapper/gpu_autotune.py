"""Autotuning on the farm's GPU actors: the Inductor side.

Two seams while the farm has GPUs of the driver's model (``AutotuneHooks``):
- max-autotune (``select_algorithm``): with ``config.autotune_in_subproc``, ATen choices are
  timed in this process and Triton template choices go to
  ``autotune_process.get_tuning_process_pool().benchmark(choices)``. That pool is replaced by
  ``FarmTuningPool``, which sends each choice's ``bmreq`` (with its module source and Triton
  cache group) to the GPU actors;
- a Triton kernel with several configs (``CachingAutotuner.benchmark_all_configs``, called by
  ``autotune_to_one_config`` at the first run, or at compile time with
  ``config.triton.autotune_at_compile_time``): its configs are timed on the GPU actors in parallel
  and the timings handed back to Inductor, which keeps the fastest launcher as it always does. The
  winner is stored (``cache/winners.py``); a process that loads the kernel later gets it stitched
  in (``wrapper/runtime.py``'s ``winners``) and benchmarks nothing.

Timings from the actors rank the candidates; they are not compared as they are with the timings
this process takes itself. A choice's time on an actor (another process, perhaps another GPU)
is not the time Inductor would measure here, and on small kernels the two differ by more than the
candidates differ from each other: max-autotune compares Triton choices timed on the actors with
ATen choices timed here, and an actor's bias would pick Triton kernels that stock Inductor, timing
everything in one process, would not. So the apparent fastest candidates are timed again here
with Inductor's own in-process benchmark (``confirm_fastest``) until the fastest is one timed
here (at most ``VERIFY`` per decision; past that the rest are scaled by the here/actor ratio seen).
The decision is then made, as stock makes it, between timings taken in this process.

Pipelined: a max-autotune decision's Triton choices are sent to the actors as soon as Inductor
has made them and their precompiles (farm jobs) are done (``prefetch_installed``, at
``make_precompile_fn``), in the background; the benchmark Inductor asks for later (at once, or when
the scheduler settles a ``MultiTemplateBuffer``) collects those timings. So the decisions of a
graph are timed at once, spread over every actor, while lowering goes on. Whenever this process
times a candidate itself (``benchmarker.benchmark_gpu``: ATen choices, confirmations, epilogue
fusions), the actors on its own GPU are held out (``driver_timing_held``), so no timing here
shares the GPU with one on an actor, and raycompile's own threads in this process hold still
(``QuietTimer``, ``raycompile/observe/quiet.py``): a launch that waits for the GIL while another
thread runs Python is timed as GPU time.

The seams themselves (each a context manager restoring Inductor exactly), and the touch points
the GPU actors' benchmark jobs use, are the adapter's (``compat/autotune.py``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import pickle
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from ..cache import keys
from ..errors import RaycompileError
from ..kernels import Versions
from ..kernels.benchmark import BenchJob, Payload, describe_args, has_indirect_indexing
from ..observe.quiet import QUIET, GatedThreadPool, Hold, QuietTimer
from ..observe.stats import Stats
from . import compat
from .compat.autotune import (
    Timed,
    choice_failed,
    choice_label,
    config_benchmarks_installed,
    driver_timing_held,
    is_gpu_template_choice,
    local_template_ms,
    prefetch_installed,
    stock_tuning_pool,
    subproc_results_parked,
    template_request,
    tuning_pool_installed,
)
from .job_keys import triton_key

log = logging.getLogger("raycompile.autotune")

INF = float("inf")

# At most this many candidates of one decision are timed again in this process (confirm_fastest).
VERIFY = 5
# Candidates the actors timed within this fraction of their fastest are all timed again here: the
# actors' ranking of near-equal candidates is noise (another process, perhaps another GPU), and on
# the H200 a farm that re-timed only the apparent fastest kept a GEMM 10% slower than stock's pick.
NEAR = 0.10

# jobs -> timings, in order: the orchestrator's GPU pool, bound to one GPU group
Runner = Callable[[Sequence[tuple[Any, Any]]], list[Any]]
# How long a benchmark waits for its choices' background timings before timing them itself. Each
# background run is bounded (precompiles by Inductor's precompilation time-out, every actor job
# by job_timeout_s); this bounds the wait on top of those.
PREFETCH_WAIT_S = 3600.0
K = TypeVar("K", bound=Hashable)


# --- driver side: what is sent -------------------------------------------------------------------


def module_source(path: str) -> str:
    with open(path) as f:
        return f.read()


def triton_files(cache: Any, name: str, source: str) -> dict[str, bytes]:
    """The Triton cache group the farm compiled for ``source`` (from the local tier; not counted as
    a lookup), or {} when it has none (the GPU node then compiles the kernel itself)."""
    local = getattr(cache, "local", None)
    if local is None:
        return {}
    from ..cache import Entry

    entry = local.get(triton_key(name, source))
    return keys.triton_blobs(entry.blobs) if isinstance(entry, Entry) else {}


def template_payload(choice: Any, cache: Any) -> tuple[Any, dict[str, Any]]:
    """(Payload, label) of a max-autotune Triton template choice."""
    name, path, state = template_request(choice)
    source = module_source(path)
    payload = Payload.make("template", name, source, bmreq=pickle.dumps(state), files=triton_files(cache, name, source))
    return payload, {}


# --- driver side: confirming the fastest here -----------------------------------------------------


def confirm_fastest(actor: Mapping[K, float], here: Callable[[K], float],
                    budget: int = VERIFY, near: float = NEAR) -> tuple[dict[K, float], dict[K, float]]:
    """Timings of one decision's candidates, the fastest of them confirmed in this process.

    ``actor``: candidate -> milliseconds on the GPU actors (``inf``: failed). ``here(candidate)``
    times one candidate in this process, as stock Inductor does. Every candidate the actors timed
    within ``near`` of their fastest is timed here (the actors cannot rank those), then the
    apparent fastest of the new timings, until the fastest is one timed here. After ``budget``
    candidates timed here, the others are scaled by the median here/actor ratio seen (a bias common
    to them all). A candidate that fails here is ``inf``. Returns (timings, the ones timed here)."""
    timed: dict[K, float] = {}
    timings = dict(actor)

    def time_here(k: K) -> None:
        try:
            ms = float(here(k))
        except Exception as e:  # noqa: BLE001 - the candidate's own error: Inductor's benchmark makes it inf too
            log.debug("raycompile: %s failed when timed here (%s: %s); it is inf", k, type(e).__name__, e)
            ms = INF
        timed[k] = timings[k] = ms if not math.isnan(ms) else INF

    ranked = sorted((k for k, ms in actor.items() if ms < INF), key=actor.__getitem__)  # stable: ties keep order
    for k in ranked:
        if len(timed) >= budget or actor[k] > actor[ranked[0]] * (1 + near):
            break
        time_here(k)
    while True:
        finite = [k for k, ms in timings.items() if ms < INF]
        if not finite:
            break
        best = min(finite, key=timings.__getitem__)  # the first of equals, as Inductor's min
        if best in timed:
            break
        if len(timed) >= budget:
            timings = _calibrated(actor, timed)
            break
        time_here(best)
    return timings, timed


def _calibrated(actor: Mapping[K, float], timed: Mapping[K, float]) -> dict[K, float]:
    ratios = [timed[k] / actor[k] for k in timed if 0 < actor[k] < INF and timed[k] < INF]
    ratio = statistics.median(ratios) if ratios else 1.0
    return {k: timed[k] if k in timed else ms * ratio for k, ms in actor.items()}


def _gpu_here() -> bool:
    import torch

    return bool(torch.cuda.is_available())


# --- driver side: the seams ----------------------------------------------------------------------


class FarmTuningPool:
    """Stands in for Inductor's ``TuningProcessPool``: ``benchmark(choices)`` times each GPU
    Triton template choice on the GPU actors; any other choice (CUTLASS) goes to the stock pool.
    A choice that failed or crashed its GPU is ``inf``, as in ``TuningProcessPool.target``."""

    def __init__(self, run: Runner, cache: Any, stock: Callable[[], Any], stats: Stats | None = None,
                 here: Callable[[Any], float] | None = None, verify: int = VERIFY,
                 background: Runner | None = None, wait_s: float = PREFETCH_WAIT_S,
                 warn: Callable[[Exception], None] | None = None) -> None:
        self._run, self._cache, self._stock = run, cache, stock
        self._warn = warn or LocalWarning()
        self._stats, self._here, self._verify = stats, here, verify
        self._background, self._wait_s = background, wait_s
        self._lock = threading.Lock()
        # id(choice) -> (choice, its decision's background timings): choice -> ms
        self._pending: dict[int, tuple[Any, concurrent.futures.Future[dict[Any, float]]]] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def _work(self, choices: Sequence[Any]) -> list[tuple[Any, Any]]:
        versions = Versions.here()
        work = []
        for c in choices:
            QUIET.checkpoint()  # reading and pickling: none while this process times a kernel
            payload, config = template_payload(c, self._cache)
            work.append((BenchJob(payload.kernel_id, payload.name, 0, config, versions), payload))
        return work

    def prefetch(self, choices: Sequence[Any], precompile: Callable[[], Any] = lambda: None) -> bool:
        """Time ``choices``' GPU Triton templates on the actors in the background, once
        ``precompile()`` (Inductor's wait on their compiles) returns; ``benchmark`` collects them.
        False (nothing started) without a background runner or such a choice."""
        ours = [c for c in choices if is_gpu_template_choice(c)]
        if self._background is None or not ours:
            return False
        background = self._background

        def job() -> dict[Any, float]:
            precompile()
            failed = [c for c in ours if choice_failed(c)]  # its precompile failed: inf, not sent
            ok = [c for c in ours if c not in failed]
            return {**dict.fromkeys(failed, INF), **dict(zip(ok, (t.ms for t in background(self._work(ok)))))}

        with self._lock:
            if self._executor is None:
                self._executor = GatedThreadPool(16, thread_name_prefix="raycompile-prefetch")
            future = self._executor.submit(job)
            for c in ours:
                self._pending[id(c)] = (c, future)
        return True

    def _take_prefetched(self, choices: Sequence[Any]) -> dict[Any, float]:
        """The background timings of those of ``choices`` that have them (waited for)."""
        with self._lock:
            found = [self._pending.pop(id(c)) for c in choices if self._pending.get(id(c), (None,))[0] is c]
        futures = {id(f): f for _, f in found}
        if not futures:
            return {}
        t0 = time.monotonic()
        out: dict[Any, float] = {}
        try:
            for future in futures.values():
                out.update(future.result(timeout=max(0.0, self._wait_s - (time.monotonic() - t0))))
        except Exception as e:  # noqa: BLE001 - a time-out, the orchestrator's errors, or what Inductor's
            # precompile (run in the background job) raised: the caller times these candidates itself
            self._warn(e)
            return {}
        finally:
            if self._stats is not None:
                self._stats.add(benchmark_wall_seconds=time.monotonic() - t0)
        return {c: out[c] for c, _ in found if c in out}

    def benchmark(self, choices: Sequence[Any]) -> dict[Any, float]:
        ours = [c for c in choices if is_gpu_template_choice(c)]
        rest = [c for c in choices if not is_gpu_template_choice(c)]
        timings: dict[Any, float] = {}
        if ours:
            actor = self._take_prefetched(ours)
            missing = [c for c in ours if c not in actor]
            try:
                if missing:
                    actor.update(zip(missing, (t.ms for t in self._run(self._work(missing)))))
            except RaycompileError as e:  # no GPU of this model (NoGPUError), or Ray is gone: time them here
                self._warn(e)
                rest = [*ours, *rest]
            else:
                timings.update(self._confirmed({c: actor[c] for c in ours}))
        if rest:
            timings.update(self._stock().benchmark(rest))
        return {c: timings[c] for c in choices}

    def forget(self) -> None:
        """Drop background timings nobody collected (decisions Inductor answered from its cache)."""
        with self._lock:
            self._pending.clear()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _confirmed(self, actor: dict[Any, float]) -> dict[Any, float]:
        """The actors' timings with the fastest Triton choices timed again here: Inductor compares
        them with the ATen choices it timed in this process (``confirm_fastest``)."""
        if self._here is None or self._verify <= 0:
            return actor
        timings, timed = confirm_fastest(actor, self._here, self._verify)
        if self._stats is not None:
            self._stats.add(benchmarks_verified=len(timed))
        for c, ms in timed.items():
            log.debug("raycompile: %s: %.4f ms on the GPU actors, %.4f ms here", choice_label(c),
                      actor[c], ms)
        return timings

    def shutdown(self) -> None:
        """Inductor's atexit hook calls this; the GPU actors belong to the raycompile session."""


class ConfigTuner:
    """An Inductor Triton kernel's configs at its first run (``benchmark_all_configs``): a winner
    filed in the cache answers at once; else ``mode`` "local" times them here, as stock does, and
    files the winner (another node that loads the kernel benchmarks nothing), "actors" times them
    on the GPU actors in parallel and confirms the fastest here.

    "local" is the default: the first run of a training step meets its kernels one after another,
    so each kernel's configs are timed on the critical path either way, and a round trip to an
    actor (sending the kernel, loading it there, making its arguments, then confirming the
    fastest here) costs more than stock's few milliseconds of timing here (on an H200, a
    GPT-2-style step's first call took 7 s longer with "actors")."""

    def __init__(self, run: Runner, cache: Any, winners: Any, stats: Stats,
                 here: Callable[[Any, Any, Sequence[Any], dict[str, Any]], float] | None = None,
                 verify: int = VERIFY, mode: str = "local", warn: Callable[[Exception], None] | None = None) -> None:
        self._run, self._cache, self._winners, self._stats = run, cache, winners, stats
        self._warn = warn or LocalWarning()
        self._here, self._verify, self.mode = here, verify, mode

    def key_of(self, kernel: Any) -> tuple[str, str, str] | None:
        found = compat.autotuner_source(kernel)
        if found is None:
            return None
        name, source = found
        # the key its job had (carried from the Router); a kernel compiled elsewhere gets the same
        # function's key, made now
        return name, source, compat.kernel_key_of(kernel) or triton_key(name, source)

    def benchmark_all_configs(self, kernel: Any, stock: Callable[..., dict[Any, float]], *args: Any,
                              **kwargs: Any) -> dict[Any, float]:
        with QUIET.released():  # a first run inside a timing (a subgraph choice's kernels): see Quiet.released
            return self._benchmark_all_configs(kernel, stock, *args, **kwargs)

    def _benchmark_all_configs(self, kernel: Any, stock: Callable[..., dict[Any, float]], *args: Any,
                               **kwargs: Any) -> dict[Any, float]:
        launchers = compat.launchers(kernel)
        if not compat.is_cuda_kernel(kernel) or len(launchers) < 2:
            return stock(kernel, *args, **kwargs)
        found = self.key_of(kernel)
        if found is None:
            log.debug("raycompile: %s: source unknown; autotuning locally", compat.kernel_label(kernel))
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        name, source, key = found
        configs = compat.launcher_configs(kernel)
        known = self._winners.get(key)
        if known is not None and known in configs:
            self._stats.add(autotune_cached=1)
            return {launcher: (0.0 if cfg == known else INF) for launcher, cfg in zip(launchers, configs)}
        if self.mode == "local" or has_indirect_indexing(source):
            self._stats.add(benchmarks_local=1)
            timings = stock(kernel, *args, **kwargs)
            finite = {launcher: ms for launcher, ms in timings.items() if math.isfinite(ms)}
            if finite:
                best = min(finite, key=finite.__getitem__)  # as autotune_to_one_config picks
                if best in launchers:
                    self._winners.put(key, configs[launchers.index(best)], {"kernel": name, "ms": finite[best]})
            return timings
        payload = Payload.make("inductor", name, source, files=triton_files(self._cache, name, source),
                               args=describe_args(args), kwargs=dict(zip(kwargs, describe_args(list(kwargs.values())))))
        versions = Versions.here()
        work = [(BenchJob(payload.kernel_id, name, i, cfg, versions), payload) for i, cfg in enumerate(configs)]
        try:
            results = self._run(work)
        except RaycompileError as e:  # no GPU of this model in the cluster (NoGPUError), or Ray is gone
            self._warn(e)
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        if all(t.ms == INF for t in results):  # every config failed there: let Inductor time them here
            log.warning("raycompile: %s: no config could be timed on the GPU actors (%s); autotuning locally",
                        name, results[0].error if results else "no result")
            self._stats.add(benchmarks_local=1)
            return stock(kernel, *args, **kwargs)
        timings = {launcher: t.ms for launcher, t in zip(launchers, results)}
        if self._here is not None and self._verify > 0:  # the fastest confirmed with the real arguments
            here = self._here
            timings, timed = confirm_fastest(timings, lambda launcher: here(kernel, launcher, args, kwargs),
                                             self._verify)
            self._stats.add(benchmarks_verified=len(timed))
        best = launchers.index(min(timings, key=timings.__getitem__))  # as autotune_to_one_config picks
        self._winners.put(key, configs[best], {"kernel": name, "ms": timings[launchers[best]]})
        return timings


class LocalWarning:
    """Warns once per distinct reason that benchmarks fall back to this GPU (one per session)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, error: Exception) -> None:
        text = f"{type(error).__name__}: {error}"
        with self._lock:
            if text in self._seen:
                return
            self._seen.add(text)
        log.warning("raycompile: the GPU workers cannot take benchmarks (%s); benchmarking on this GPU", text)


def _stock_pool_unset() -> Any:
    raise RuntimeError("raycompile: max-autotune's tuning pool asked for before its seams were installed")


class AutotuneHooks:
    """Installs both seams for one GPU group and registers the winner store with the output
    module's runtime; ``uninstall`` restores stock Inductor exactly."""

    def __init__(self, run: Runner, cache: Any, winners: Any, stats: Stats, verify: int | None = None,
                 background: Runner | None = None, hold: Hold | None = None, configs: str = "local",
                 registry: Any = None, quiet: bool = True) -> None:
        # the fastest candidates are timed again here where this process has a GPU to time them on
        verify = (VERIFY if _gpu_here() else 0) if verify is None else verify
        warn = LocalWarning()
        # Inductor's own tuning pool factory is captured at ``install_compile``: importing
        # autotune_process here would cost a process that only loads compiled frames (0.6 s, dev box)
        self.pool = FarmTuningPool(run, cache, _stock_pool_unset, stats, local_template_ms, verify,
                                   background=background, warn=warn)
        self.tuner = ConfigTuner(run, cache, winners, stats, compat.bench_launcher, verify, mode=configs, warn=warn)
        self.winners = winners
        self.registry = registry  # the session's runtime.Winners: output modules stitch these winners in
        self.timer: Timed = QuietTimer(hold, stats, quiet)
        self.quiet = quiet
        self._stack: contextlib.ExitStack | None = None
        self._compile_seams = False
        self._lock = threading.Lock()

    def install(self, compile_seams: bool = True) -> None:
        """The seams a kernel's first run uses (config timings, the driver's timings held, the
        winners registered); with ``compile_seams``, also max-autotune's (``install_compile``)."""
        with self._lock:
            if self._stack is None:
                stack = contextlib.ExitStack()
                stack.enter_context(config_benchmarks_installed(self.tuner))
                stack.enter_context(driver_timing_held(self.timer))
                if self.registry is not None:
                    stack.callback(self.registry.add(self.winners.get))
                self._stack = stack
        if compile_seams:
            self.install_compile()

    def install_compile(self) -> None:
        """Max-autotune's seams (its tuning pool, its choices' prefetch), once: a graph's compile
        uses them, and they import Inductor's select_algorithm and autotune_process (1.4 s and
        0.6 s on the dev box), which a process that only loads compiled frames never needs."""
        with self._lock:
            if self._stack is None or self._compile_seams:
                return
            self.pool._stock = stock_tuning_pool()  # stock's, captured before the seam replaces it
            self._stack.enter_context(tuning_pool_installed(self.pool))
            self._stack.enter_context(prefetch_installed(self.pool))
            if self.quiet:  # the compile pool's results wait while this process times a kernel
                self._stack.enter_context(subproc_results_parked(QUIET.checkpoint))
            self._compile_seams = True

    def uninstall(self) -> None:
        with self._lock:
            stack, self._stack = self._stack, None
            self._compile_seams = False
        if stack is not None:
            stack.close()

