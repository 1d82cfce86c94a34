"""Routes Inductor's kernel compiles to the farm while it is enabled.

Two seams (DESIGN.md): ``AsyncCompile.process_pool()``, where Triton compiles (and max-autotune
template precompiles) are submitted, and ``AsyncCompile.submit``, the ``submit_fn`` of every C++
kernel build. Both are replaced by ``install`` and restored by ``uninstall``. A job the farm
cannot take (Ray gone, fallback) goes to the stock pool it replaced, counted in ``fallbacks``.
Where the farm would add no CPUs (``compile_jobs``: a one-node cluster), the same job runs in
those stock pools instead, counted in ``jobs_local``, and is cached and shared like a farm job.
``install`` also registers the farm's wrapper codegen (wrapper/codegen.py: the output module).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from ..cache import Cache, keys, publish, turns
from ..cache.isa import isa_exchange
from ..errors import CompileError
from ..kernels import Built, Failed, Job, Result, TritonJob, Versions, run_job
from ..kernels.priority import AtPriority
from ..kernels.triton_compile import run_triton_job
from ..observe.quiet import GatedThreadPool
from ..observe.stats import Stats
from . import compat
from .job_keys import cpp_job_for, local_paths, to_entry, triton_job_for
from .module_cache import ModuleFlights, make_backend
from .runtime import winner_for
from .spread import ConfigSpread

log = logging.getLogger("raycompile.hooks")

# threads compiling coordinate descent's candidates at once (each mostly waits on ptxas)
COORDESC_THREADS = min(8, os.cpu_count() or 1)


# What the Router talks to. The orchestrator provides them (wrapper/ and orchestrator/ never
# import each other: the session, which imports both, hands them over).

class FarmClient(Protocol):
    """Runs jobs on Ray's workers: ``orchestrator.farm.Farm``."""

    alive: bool

    def submit(self, job: Job) -> Future[Result]: ...


class Dedupe(Protocol):
    """One compile of a key among the cluster's drivers: ``orchestrator.coordinator.ClusterDedupe``.
    ``run`` calls ``compile`` where this driver compiles the key (its future resolves once the entry
    is in the cache), else ``reuse`` once another driver's entry is there."""

    def run(self, key: str, compile: Callable[[], Future[Any]], reuse: Callable[[], bool]) -> None: ...


class FarmSource(Protocol):
    """Where the Router gets the farm: ``orchestrator.startup.Startup`` (Ray started in the background
    at the first miss), or ``ReadyFarm`` for a farm that is up."""

    @property
    def farm(self) -> FarmClient | None: ...  # the farm once the start is done (never waits)

    @property
    def dedupe(self) -> Dedupe | None: ...

    def wait_farm(self) -> FarmClient | None: ...  # waits (bounded) for the start; None: compile locally

    def compiles_here(self, farm: FarmClient | None, wait: bool = False) -> bool: ...  # Inductor's workers, not Ray


class ReadyFarm:
    """A ``FarmSource`` for a farm already up (tests, a batch compile): jobs go to it while it is alive."""

    def __init__(self, farm: FarmClient, dedupe: Dedupe | None = None) -> None:
        self.farm: FarmClient | None = farm
        self.dedupe = dedupe

    def wait_farm(self) -> FarmClient | None:
        return self.farm if self.farm is not None and self.farm.alive else None

    def compiles_here(self, farm: FarmClient | None, wait: bool = False) -> bool:
        return False


class Router:
    """Sends jobs to the cache, then the farm (or the stock pools), and turns results into what
    Inductor expects.

    ``source`` is the session's ``orchestrator.startup.Startup`` (its ``wait_farm()`` waits for Ray to
    be up, and says whether to compile locally), or a ``ReadyFarm``; None: no farm (every miss
    compiles with stock Inductor, counted as a fallback). Nothing here blocks Inductor's
    thread on I/O: each request returns a future at once, and its cache lookup, the wait for the
    farm, unpacking a result and writing it to the tiers run on a small pool of threads, so the
    kernels of one output module are looked up at once and a slow shared tier delays no other
    result."""

    IO_THREADS = 8
    # Triton jobs compiled in this process at once while the node's compile workers start (stock
    # compiles one at a time in the driver then, on its main thread)
    IN_PROCESS = 1

    def __init__(self, source: FarmSource | None, stats: Stats, stock_process_pool: Callable[[], Any],
                 stock_submit: Callable[[Callable[[], Any]], Any], cache: Cache | None = None,
                 io: concurrent.futures.Executor | None = None, job_timeout_s: float = 600.0,
                 spread_configs: bool = True, worker_nice: int = 0) -> None:
        self._source = source
        self.job_timeout_s = job_timeout_s
        # a max-autotune kernel's configs compiled at once by several of the node's compile workers
        self.spread = ConfigSpread(stats, spread_configs)
        # the node's compile workers run the farm's jobs this much below this process's priority
        # (kernels/priority.py): the driver's threads and the node's GPU timings come first
        self.worker_nice = worker_nice
        self._workers: AtPriority | None = None
        self._workers_made: list[AtPriority] = []
        self._built_seen: set[str] = set()  # C++ libraries found built in Inductor's dir (lock paths)
        self.cache = cache
        self.stats = stats
        self.versions = Versions.here()
        self._stock_process_pool = stock_process_pool
        # the stock factory is an lru_cache, which two threads' first calls would each run: one
        # pool started and lost (the warm-up runs on an I/O thread while Inductor's jobs come)
        self._pool_lock = threading.RLock()
        self._stock_submit = stock_submit
        self._pid = os.getpid()
        self._warned = False
        self._pool_warming = False
        # set by the session when a graph compile starts (Inductor's backend called): Inductor's
        # readiness probe also comes from output modules loading (compiled frames), where nothing compiles
        self.compiling = threading.Event()
        self._probed = False  # Inductor probed the pool already (it does so once per process)
        # the stock pool's answer to a no-op job: done once its workers run (``_pool_answers``)
        self._pool_ready: Future[Any] | None = None
        self._in_process = threading.BoundedSemaphore(self.IN_PROCESS)
        self._lock = threading.Lock()
        self._own_io = io is None  # else the session's, which it shuts down
        self._io = io or GatedThreadPool(self.IO_THREADS, thread_name_prefix="raycompile-io")
        # called for each Triton job sent to the farm: the autotune session starts its GPU actors
        self.on_triton_job: Callable[[], None] | None = None

    @property
    def farm(self) -> FarmClient | None:
        """The farm if it is up now (never waits)."""
        farm = self._source.farm if self._source is not None else None
        return farm if farm is not None and farm.alive else None

    def _wait_farm(self) -> tuple[FarmClient | None, Dedupe | None]:
        """(farm, cluster dedupe) once the session's Ray side is up; (None, None): compile locally.
        Raises what the start raised where falling back is not allowed."""
        if self._source is None:
            return None, None
        return self._source.wait_farm(), self._source.dedupe

    # Inductor's process pool interface ---------------------------------------------------------

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        return self.submit_keyed(None, fn, *args)

    def submit_keyed(self, expected: str | None, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """``submit``, with the key the output module names the kernel by (``FarmCompile.triton``):
        the key computed here for the job is checked against it."""
        job = triton_job_for(fn, args, self.versions)
        if job is None:
            if compat.is_readiness_probe(fn):
                self._probed = True
                self._warm_stock_pool()
                ready: Future[Any] = Future()
                ready.set_result(fn(*args))
                return ready
            return self._pool().submit(fn, *args)  # not a compile: stock pool
        if expected is not None and expected != job.key:
            self._key_mismatch(job, expected)
        if self.on_triton_job is not None:
            self.on_triton_job()  # on Inductor's thread: it reads the compile's config
        return self._route(job, lambda: self._pool().submit(fn, *args))

    def _pool(self) -> Any:
        """Inductor's own compile pool (started at the first call, once)."""
        with self._pool_lock:
            return self._stock_process_pool()

    def _at_priority(self, pool: Any) -> AtPriority:
        """``pool`` sending the farm's jobs at the workers' priority (``worker_nice``); one object
        per pool, as callers tell pools apart by identity."""
        with self._pool_lock:
            if self._workers is None or self._workers.pool is not pool:
                self._workers = AtPriority(pool, self.worker_nice, self._pid)
                self._workers_made.append(self._workers)  # kept: callers key pools by id()
            return self._workers

    def compile_processes(self) -> Any | None:
        """This node's compile workers (Inductor's process pool) where they run already, for work
        that is this process's own (coordinate descent's candidates); None where none was started
        (this node's jobs go to Ray): nothing is started for it. A pool Inductor quiesced after a
        minute idle counts as running: the first candidate starts its workers again."""
        if os.getpid() != self._pid:  # a forked child: the pool and its pipes are the parent's
            return None
        return self._at_priority(self._pool()) if compat.pool_started(self._stock_process_pool) else None

    def start_compiling(self) -> None:
        """A graph compile starts (the session's gate on Inductor's backend). Inductor probes its
        pool once per process; where that probe came from a module loading (nothing compiled then,
        so nothing started), the pool is warmed now."""
        self.compiling.set()
        if self._probed:
            self._warm_stock_pool()

    def _warm_stock_pool(self) -> None:
        """Start Inductor's own compile workers now where this node's compiles will run in them.

        Inductor probes its pool (``AsyncCompile.wakeup``) as soon as a compile of CUDA inputs
        begins, so that the pool's processes start while AOTAutograd and lowering run; stock's
        pool is the Router now, which answers at once, and without this the stock pool (a sidecar
        process that imports torch, then its workers) started only at the first kernel job, on the
        compile's critical path. Where the answer needs the farm (``compile_jobs="auto"`` joining a
        cluster), it is waited for on an I/O thread; a node whose jobs go to Ray starts nothing."""
        if not self.compiling.is_set():  # a module loading, not a compile: no pool, no Ray
            return
        with self._lock:
            if self._pool_warming:
                return
            self._pool_warming = True

        def warm() -> None:
            try:
                if not self._compiles_here(None, wait=True):
                    farm, _ = self._wait_farm()
                    if farm is not None and not self._compiles_here(farm):
                        return  # jobs go to Ray: the stock pool is only the fallback's
                pool = self._pool()
                compat.wake_pool(pool)
                self._pool_answers(pool)
            except Exception as e:  # noqa: BLE001 - the first job starts the pool then, as before
                log.debug("raycompile: Inductor's compile workers not started early: %s", e)

        if self._compiles_here(None):
            warm()  # on Inductor's thread, as stock starts its pool
            return
        try:
            self._io.submit(warm)
        except RuntimeError:  # the session is closing: the first job starts the pool, if any comes
            pass

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Inductor calls this at exit; the farm is closed by ``raycompile.disable``."""

    def close(self) -> None:
        """Stop taking requests; those in flight finish on their threads."""
        if self._own_io:
            self._io.shutdown(wait=False)
        self.spread.close()

    # AsyncCompile.submit (C++ builds) ----------------------------------------------------------

    def _key_mismatch(self, job: Job, expected: str) -> None:
        """The output module was made where this kernel has another key (another ptxas, torch or
        settings): the key computed here, for this node's binary, is the one used."""
        self.stats.add(key_mismatches=1)
        log.warning("raycompile: %s: the output module names it %s, this node keys it %s (the module "
                    "was made with another toolchain or settings); using this node's key",
                    job.label, expected[:12], job.key[:12])

    def built_already(self, task: Callable[[], Any], inductor_dir: str) -> None:
        """A C++ kernel Inductor loaded, built, from its own cache dir ``inductor_dir`` (``task``,
        its build job, was never submitted: ``compat.when_loaded_from_disk``): its entry is written
        to the tiers where the local one has none, on an I/O thread, so another node (or a process
        with another Inductor cache dir) that loads an output module or compiled frames naming it
        finds it instead of compiling it. Counted ``kernels_from_inductor_dir``."""
        if self.cache is None:
            return
        parts = compat.cpp_job_parts(task)
        with self._lock:  # each library looked at once (its lock path is its own), before any work
            if parts is None or parts[0] in self._built_seen:
                return
            self._built_seen.add(parts[0])
        with contextlib.suppress(RuntimeError):  # the session is closing: not written, as before
            self._io.submit(self._publish_built, task, inductor_dir)

    def _publish_built(self, task: Callable[[], Any], inductor_dir: str) -> None:
        try:
            job = cpp_job_for(task, self.versions, self.job_timeout_s, inductor_dir)
            if job is None or self.cache is None:
                return
            local = self.cache.local
            if local is not None and local.has(job.key):
                return  # written when it was built (to every tier)
            files = {}
            for step in job.steps:
                with open(step.target, "rb") as f:
                    files[step.target] = f.read()
            if not all(files.values()):
                return  # an empty file: nothing to share
            self.cache.put(to_entry(Built(job.key, job.label, 0.0, files=files), inductor_dir))
            self.stats.add(kernels_from_inductor_dir=1)
        except Exception as e:  # noqa: BLE001 - not written: the next node compiles it, as before
            log.debug("raycompile: a C++ kernel built in Inductor's cache dir was not written to the tiers "
                      "(%s: %s)", type(e).__name__, e)

    def submit_task(self, task: Callable[[], Any]) -> Any:
        job = cpp_job_for(task, self.versions, self.job_timeout_s)
        if job is None:
            return self._stock_submit(task)
        return self._route(job, lambda: self._stock_submit(task))

    # ------------------------------------------------------------------------------------------

    def _route(self, job: Job, local: Callable[[], Any]) -> Future[Any]:
        out: Future[Any] = Future()
        try:
            self._io.submit(self._resolve, job, local, out)
        except RuntimeError:  # the session is closing: what stock Inductor would do
            _chain(self._fallback(local, "raycompile is shutting down"), out)
        return out

    def _resolve(self, job: Job, local: Callable[[], Any], out: Future[Any]) -> None:
        """On an I/O thread: the cache, else the farm (once it is up), else the stock pools."""
        try:
            key = job.key if self.cache is not None else ""
            if key and self._reuse(key, job, out):
                return
            if key:
                self.stats.add(kernel_misses=1)
                self.stats.missed(job.label, key)
            if self._compiles_here(None, wait=True):  # no Ray needed: not even waited for
                self._compile_here(job, out, local, key)
                return
            t0 = time.monotonic()
            farm, dedupe = self._wait_farm()
            waited = time.monotonic() - t0
            if waited > 0.01:
                self.stats.add(ray_wait_seconds=waited)
            if farm is None:  # the start (or the farm, when it failed) warned already, with the reason
                _chain(self._fallback(local, "the Ray cluster is not reachable", warn=False), out)
                return
            here = self._compiles_here(farm)

            def compile() -> Future[Any]:  # resolves after the entry is in the cache
                if here:
                    self._compile_here(job, out, local, key)
                else:
                    farm.submit(job).add_done_callback(
                        lambda f: self._io_or_here(self._deliver, f.result(), job, out, local, key))
                return out

            if key and dedupe is not None:  # one driver of the cluster compiles; the others read its entry
                dedupe.run(key, compile, lambda: self._reuse(key, job, out))
            else:
                compile()
        except BaseException as e:  # noqa: BLE001 - raised where Inductor waits (wait_named names the kernel)
            if not out.done():
                out.set_exception(e)

    def _compiles_here(self, farm: FarmClient | None, wait: bool = False) -> bool:
        """``wait``: on an I/O thread, for what decides it without Ray (the cluster probe's answer)."""
        return self._source is not None and self._source.compiles_here(farm, wait)

    def _compile_here(self, job: Job, out: Future[Any], local: Callable[[], Any], key: str) -> None:
        """Run the farm's job in this node's own Inductor workers (Triton: its process pool; C++:
        its thread pool), so the result is cached and shared exactly as a farm job's."""
        self.stats.add(jobs_local=1)
        try:
            if isinstance(job, TritonJob):
                pool = self._pool()
                if self._in_process_now(pool, job):  # on an I/O thread: never a coordinator's, say
                    self._io_or_here(self._compile_in_process, job, out, local, key)
                    return
                job = self.spread.prepare(job)
                workers = self._at_priority(pool)
                started: Any = workers.submit(run_job, job, compat.TOOLCHAIN)
                self.spread.send(job, workers)
            else:
                started = self._stock_submit(functools.partial(run_job, job, compat.TOOLCHAIN))
        except RuntimeError as e:  # the pool is shut down (interpreter exit): Inductor's own path
            _chain(self._fallback(local, f"Inductor's compile pool refused the job ({e})"), out)
            return
        if not isinstance(started, Future):  # one compile thread: it ran synchronously
            done: Future[Any] = Future()
            done.set_result(started)
            started = done

        def finished(f: Future[Any]) -> None:
            if f.exception() is not None:  # a pool worker died: Inductor's own compile of the kernel
                result: Result = Failed(job.key, job.label, f"{type(f.exception()).__name__}: {f.exception()}",
                                        kind="infrastructure")
            else:
                result = f.result()
                self.stats.ran(result)
            self._io_or_here(self._deliver, result, job, out, local, key)

        started.add_done_callback(finished)

    def _pool_answers(self, pool: Any) -> Future[Any]:
        """The stock pool's answer to a no-op job (sent once): done once its workers run."""
        with self._lock:
            if self._pool_ready is None:
                ready = pool.submit(os.getpid)
                if not isinstance(ready, Future):  # a pool that ran it at once: it answers
                    ready = Future()
                    ready.set_result(None)
                began = time.monotonic()
                ready.add_done_callback(lambda _: log.debug(
                    "raycompile: this node's compile workers answered after %.2f s", time.monotonic() - began))
                self._pool_ready = ready
            return self._pool_ready

    def _in_process_now(self, pool: Any, job: TritonJob) -> bool:
        """Whether ``job`` compiles in this process: the node's compile workers have not answered
        yet (they start: a sidecar process imports torch, then each worker), a slot is free, and
        the job is this process's own (its env and config are this process's). Stock compiles in
        the driver until its pool answers; sending every job to a pool still starting made the
        farm's first graph wait for the pool instead (4 s of a GPT-2 step's cold compile on an H100)."""
        if os.getpid() != self._pid:  # a forked child: the pool and the locks are the parent's
            return False
        try:
            if self._pool_answers(pool).done():
                return False
            if any(os.environ.get(k) != v for k, v in job.extra_env.items()):
                return False
            if job.config_locks or not compat.triton.config_is_current(job.extra_config):
                return False
            if self.spread.enabled and compat.spreads(job.source):
                return False  # a max-autotune kernel's configs: the workers compile them at once, soon
        except Exception as e:  # noqa: BLE001 - the workers compile it, as before
            log.debug("raycompile: %s not compiled in this process: %s", job.label, e)
            return False
        return self._in_process.acquire(blocking=False)

    def _compile_in_process(self, job: TritonJob, out: Future[Any], local: Callable[[], Any], key: str) -> None:
        """``job`` compiled on this thread (an I/O thread: the main thread goes on lowering), its
        result cached and delivered as a worker's. Holds the slot ``_in_process_now`` took."""
        self.stats.add(jobs_in_process=1)
        try:
            result = run_triton_job(job, compat.TOOLCHAIN, here=True)
        finally:
            self._in_process.release()
        self.stats.ran(result)
        self._deliver(result, job, out, local, key)

    def _io_or_here(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._io.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile: finish on this thread
            fn(*args)

    def _reuse(self, key: str, job: Job, out: Future[Any]) -> bool:
        """Deliver ``key`` from the cache; False if it is not there (or does not load)."""
        entry = self.cache.get(key) if self.cache is not None else None
        if entry is None:
            return False
        try:
            value = self._unpack(local_paths(entry.blobs, job), entry.blobs.get(keys.PAYLOAD), job,
                                 float(entry.meta.get("seconds", 0.0)))
        except Exception as e:  # noqa: BLE001 - a signed entry that still does not load (a torch change): compile
            log.warning("raycompile: cache entry for %s did not load (%s: %s); compiling", job.label,
                        type(e).__name__, e)
            return False
        if isinstance(job, TritonJob):
            _winner_ahead(key)
        out.set_result(value)
        return True

    def _fallback(self, local: Callable[[], Any], why: str, warn: bool = True) -> Future[Any]:
        self.stats.add(fallbacks=1)
        with self._lock:
            warn, self._warned = warn and not self._warned, self._warned or warn
        if warn:
            log.warning("raycompile: %s; compiling locally with stock Inductor (counted in "
                        "raycompile.stats()['fallbacks'])", why)
        result = local()
        if isinstance(result, Future):
            return result
        done: Future[Any] = Future()
        done.set_result(result)
        return done

    def _deliver(self, result: Result, job: Job, out: Future[Any], local: Callable[[], Any], key: str) -> None:
        try:
            if isinstance(result, Failed):
                if result.kind == "infrastructure":
                    _chain(self._fallback(local, f"a job failed in Ray ({result.message})"), out)
                    return
                raise CompileError(job.label, result.node_id, result.message)
            value = self._unpack(local_paths(result.files, job), result.payload, job, result.seconds)
            if key:
                self.cache.put(to_entry(result))
            out.set_result(value)
        except BaseException as e:  # noqa: BLE001 - raised where Inductor waits
            out.set_exception(e)

    @staticmethod
    def _unpack(files: dict[str, bytes], payload: bytes | None, job: Job, seconds: float) -> Any:
        """Write the artifacts where this process loads them; return what Inductor's job returns.

        ``payload`` is unpickled only from a fresh job result or a cache entry whose signature was
        verified (cache/store.py)."""
        publish(files)  # .so/.o at the paths Inductor loads; Triton's cache group
        if isinstance(job, TritonJob):
            kernel = pickle.loads(payload or b"")
            compat.set_autotuner_device(kernel, compat.device_index(job.source))  # an entry made by another rank
            compat.set_kernel_key(kernel, job.key)  # its winner is filed under this key (wrapper/gpu_autotune.py)
            return kernel, int(seconds * 1e6)
        return None


def _winner_ahead(key: str) -> None:
    """Look up the autotune winner of a kernel served from the cache here, on the I/O thread that
    served it, before the module waiting for the kernel gets it: the bound session's winner stores
    keep what they find, so the module's own lookup (``runtime.stitch``, on the main thread, one
    kernel after another) is answered from memory. Nothing found is no error: the module looks up
    again, as before."""
    try:
        winner_for(key)
    except Exception as e:  # noqa: BLE001 - the module's own lookup runs as before and reports its error
        log.debug("raycompile: a winner not looked up ahead for %s: %s", key[:12], e)


def _chain(source: Future[Any], target: Future[Any]) -> None:
    def copy(f: Future[Any]) -> None:
        if f.exception() is not None:
            target.set_exception(f.exception())
        else:
            target.set_result(f.result())

    source.add_done_callback(copy)


class Hooks:
    """Installs a Router into Inductor's async compile; ``uninstall`` restores stock exactly."""

    def __init__(self, router: Router, module_flights: ModuleFlights | None = None,
                 coordesc_next_sweeps: bool = True) -> None:
        self.router = router
        self.coordesc_next_sweeps = coordesc_next_sweeps  # AtLoad.next_sweeps, in max-autotune
        self.module_flights = module_flights  # whole graphs single-flighted among the node's processes
        self._installed = contextlib.ExitStack()
        self._codegen = False  # the output module's codegen installed (install_codegen)
        self._codegen_lock = threading.Lock()
        self.reservations: compat.tuning.Reservations | None = None
        self.coordesc_at_load: Any = None  # compat.coordesc.AtLoad, while installed

    def kernels_loaded(self, kernels: Any) -> None:
        """An output module's kernels, just loaded here (``runtime.Binding.loaded``). Where this
        process runs the node's compile workers (it compiles; a job's waiting ranks do not), it
        takes ahead the turns of those that will tune at their first run, so that a waiter that
        reaches one first waits for this process's pick instead of tuning it on its own threads."""
        reservations, at_load = self.reservations, self.coordesc_at_load
        workers = self.router.compile_processes()
        if reservations is None or workers is None:
            return
        taken = reservations.reserve(kernels)
        if taken:
            self.router.stats.add(tunings_reserved=taken)
        # ... and, in max-autotune, the first candidates of their coordinate descents compiled now
        if at_load is not None:
            at_load.load(kernels, workers)

    def install(self, codegen: bool = True) -> None:
        """Install every seam; when one fails (a seam moved: SeamMissing), undo the others and raise.
        ``codegen=False``: all but the output module's codegen (``install_codegen``), which only a
        graph's compile uses: a process that only loads compiled frames then never imports Inductor's
        codegen, scheduler, lowering and select_algorithm (1.0 s of a Mixtral-style warm start on the
        dev box), and only the seams of modules already imported are checked."""
        try:
            if codegen:
                compat.check()
            else:
                compat.check(imported_only=True)
            self._install()
            if codegen:
                self.install_codegen()
            else:
                compat.check(imported_only=True)  # the seams of what installing imported
        except BaseException:
            self._installed.close()
            raise

    def install_codegen(self) -> None:
        """The output module's codegen and the check of every seam, once (a graph's compile is
        about to start: Inductor's backend was called, so the session's gate calls this)."""
        with self._codegen_lock:
            if self._codegen:
                return
            compat.check()
            self._install_output_module()
            self._codegen = True

    def _install(self) -> None:
        router = self.router
        # Triton compiles and C++ builds go to the Router; the kernels Inductor compiles during
        # codegen (compat.EAGER_COMPILE_SITES) use stock ``AsyncCompile()`` objects, so the pool
        # seam is the one path every compile takes, the output module's included
        self._installed.enter_context(compat.pools_routed(router, router.submit_task))
        if router.cache is not None:
            cache, flights = router.cache, self.module_flights
            self._installed.enter_context(compat.remote_module_caches(lambda kind: make_backend(cache, kind, flights)))
            if flights is not None:
                self._installed.callback(flights.close)
        # the farm's workers compile with Inductor's ptxas; so does this process (its Triton
        # cache lookups then find the cubins they published)
        self._installed.enter_context(compat.inductor_ptxas())
        # the libraries of Inductor's CPU instruction-set checks go with compiled frames, and through
        # the tiers to the next node that checks without frames
        exchange = isa_exchange(router.cache, router.stats) if router.cache is not None else (None, None)
        self._installed.enter_context(compat.isa.isa_checks_recorded(*exchange))
        self._installed.enter_context(compat.compile_workers_in_processes())
        # max-autotune's coordinate descent at a kernel's first run: its candidates compiled at once
        # (in this node's compile workers where they run, else on threads), timed in stock's order
        stats = router.stats
        self.coordesc_at_load = self._installed.enter_context(compat.coordesc_prefetched(
            COORDESC_THREADS, lambda n: stats.add(coordesc_prefetched=n), router.compile_processes,
            lambda n: stats.add(coordesc_in_workers=n), lambda n: stats.add(coordesc_at_load=n),
            self.coordesc_next_sweeps, lambda n: stats.add(coordesc_speculated=n),
            lambda n: stats.add(coordesc_speculated_used=n)))
        # a kernel's first-run tuning, one process of the node at a time: the others (a job's
        # ranks) take its pick instead of timing the same candidates again on the same GPUs
        # ... and the process with the compile workers first, at the kernels of the modules it loads
        self.reservations = compat.tuning.Reservations(turns.try_take)
        self._installed.callback(self.reservations.close)
        self._installed.enter_context(compat.tuning.tuning_in_turns(
            turns.take, lambda name, waited: stats.add(tunings_adopted=1, tunings_adopted_wait_seconds=waited),
            self.reservations.claim))

    def _install_output_module(self) -> None:
        """The farm's wrapper codegen (wrapper/codegen.py) for cuda and cpu, and a cache-key tag so
        its modules and stock ones never share an FX-graph entry."""
        from .codegen import CACHE_KEY_TAG, DEVICES, FarmWrapperCodegen

        self._installed.enter_context(compat.cache_key_tag(CACHE_KEY_TAG))
        replaced = self._installed.enter_context(compat.wrapper_codegen_registered(FarmWrapperCodegen, DEVICES))
        for device in sorted(set(DEVICES) - set(replaced)):
            log.warning("raycompile: %s has its own wrapper codegen (%s); its output modules stay stock",
                        device, compat.wrapper_codegen_for(device))

    def uninstall(self) -> None:
        self._installed.close()
        self.router.close()
