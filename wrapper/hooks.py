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
import hashlib
import logging
import os
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..cache import Cache, Entry, kernel_key, publish
from ..errors import CompileError
from ..kernels import Built, CppJob, CppStep, Failed, Job, Result, TritonJob, Versions, run_job
from ..kernels.cpp_compile import compiler_version, resolve_command
from ..kernels.triton_compile import device_index, ptxas_version, target_of
from . import compat

log = logging.getLogger("raycompile.hooks")


def triton_job(fn: Callable[..., Any], args: tuple[Any, ...], versions: Versions) -> TritonJob | None:
    parts = compat.triton_job_args(fn, args)
    if parts is None:
        return None
    name, source, env, config = parts
    return TritonJob(name, source, versions, env, config)


def _cpp_label(steps: list[CppStep], inputs: dict[str, bytes]) -> str:
    """A C++ job's label where the output module's kernel name is not known: the library's hash
    and the length of the kernel's source (the ``.cpp`` inputs the job already carries),
    ``C++ kernel c7vumwyt (120 lines)``."""
    lines = sum(compat.cpp_kernel_lines(data.decode(errors="replace"))
                for path, data in inputs.items() if path.endswith(".cpp"))
    return f"C++ kernel {os.path.basename(steps[-1].target).split('.')[0][:8]} ({lines} lines)"


def cpp_job(task: Callable[..., Any], versions: Versions) -> CppJob | None:
    """Turn Inductor's C++ build partial into a self-contained job: resolved command lines (with
    ``-march=native`` expanded for THIS machine) and the input files a remote node lacks. Its
    label is the kernel's name in the output module (``cpp_fused_relu_0``) where this runs under
    that module's definition of it (Inductor calls it there), else ``_cpp_label``."""
    parts = compat.cpp_job_parts(task)
    if parts is None:
        return None
    lock_path, builders = parts
    steps: list[CppStep] = []
    inputs: dict[str, bytes] = {}
    produced: set[str] = set()
    for builder in builders:
        command, target, sources, _ = compat.builder_parts(builder)
        argv = resolve_command(command)
        needed = [s for s in sources if s not in produced]
        needed += [argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "-include"]
        for path in needed:
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    inputs[path] = f.read()
        steps.append(CppStep(argv, target, f"{target}.rcbuild"))
        produced.add(target)
    name = compat.defining_cpp_kernel() or _cpp_label(steps, inputs)
    return CppJob(name, tuple(steps), inputs, versions, lock_path)


def cache_key(job: Job) -> str:
    """The job's cache key (cache/keys.py): source, versions, ptxas or compiler, arch, settings."""
    if isinstance(job, TritonJob):
        device, cc, warp = target_of(job.source)
        return kernel_key("triton", [job.source], job.versions.torch, job.versions.triton, ptxas_version(),
                          f"{device}:{cc}:{warp}", job.extra_config)
    # paths under this process's Inductor cache dir are named relative to it, so a node with
    # another TORCHINDUCTOR_CACHE_DIR finds the same entry
    base = compat.inductor_cache_dir()
    parts = [" ".join(step.command).replace(base, "<inductor-cache>") for step in job.steps]
    parts += [f"{path.replace(base, '<inductor-cache>')}:{hashlib.sha256(data).hexdigest()}"
              for path, data in sorted(job.inputs.items())]
    return kernel_key("cpp", parts, job.versions.torch, job.versions.triton,
                      compiler_version(job.steps[0].command[0]), "", {})


def _to_local_paths(files: dict[str, bytes], job: Job) -> dict[str, bytes]:
    """Names in a result or cache entry -> paths on this node: ``triton/GROUP/FILE`` under this
    process's Triton cache dir, ``inductor/REL`` under its Inductor cache dir, absolute as is."""
    out = {}
    triton_dir = compat.driver_triton_cache_dir(device_index(job.source)) if isinstance(job, TritonJob) else ""
    for name, data in files.items():
        if name.startswith("triton/"):
            out[os.path.join(triton_dir, name[len("triton/"):])] = data
        elif name.startswith("inductor/"):
            out[os.path.join(compat.inductor_cache_dir(), name[len("inductor/"):])] = data
        elif os.path.isabs(name):
            out[name] = data
        # anything else (the pickled autotuner, "payload") is not a file to write
    return out


def _to_entry(key: str, result: Built) -> Entry:
    base = compat.inductor_cache_dir() + os.sep
    blobs = {("inductor/" + n[len(base):] if n.startswith(base) else n): d for n, d in result.files.items()}
    if result.payload:
        blobs["payload"] = result.payload
    return Entry(key, blobs, {"label": result.label, "seconds": result.seconds})


class Router:
    """Sends jobs to the cache, then the farm (or the stock pools), and turns results into what
    Inductor expects.

    ``farm`` is the session's ``orchestrator.startup.Startup`` (its ``wait_farm()`` waits for Ray to be
    up, and says whether to compile locally), or a ``Farm`` itself. Nothing here blocks Inductor's
    thread on I/O: each request returns a future at once, and its cache lookup, the wait for the
    farm, unpacking a result and writing it to the tiers run on a small pool of threads, so the
    kernels of one output module are looked up at once and a slow shared tier delays no other
    result."""

    IO_THREADS = 8

    def __init__(self, farm: Any | None, stats: Any, stock_process_pool: Callable[[], Any],
                 stock_submit: Callable[[Callable[[], Any]], Any], cache: Cache | None = None,
                 dedupe: Any | None = None, io: concurrent.futures.Executor | None = None) -> None:
        self._source = farm
        self.cache = cache
        self.dedupe = dedupe  # cluster-wide: orchestrator.coordinator.ClusterDedupe, or None
        self.stats = stats
        self.versions = Versions.here()
        self._stock_process_pool = stock_process_pool
        self._stock_submit = stock_submit
        self._warned = False
        self._lock = threading.Lock()
        self._own_io = io is None  # else the session's, which it shuts down
        self._io = io or concurrent.futures.ThreadPoolExecutor(self.IO_THREADS, thread_name_prefix="raycompile-io")
        # called for each Triton job sent to the farm: the autotune session starts its GPU actors
        self.on_triton_job: Callable[[], None] | None = None

    @property
    def farm(self) -> Any | None:
        """The farm if it is up now (never waits)."""
        source = self._source
        if source is None or not hasattr(source, "wait_farm"):
            return source
        return source.farm if source.farm is not None and source.farm.alive else None

    def _wait_farm(self) -> tuple[Any | None, Any | None]:
        """(farm, cluster dedupe) once the session's Ray side is up; (None, None): compile locally.
        Raises what the start raised where falling back is not allowed."""
        source = self._source
        if source is None or not hasattr(source, "wait_farm"):
            return (source if source is not None and source.alive else None), self.dedupe
        return source.wait_farm(), source.dedupe

    # Inductor's process pool interface ---------------------------------------------------------

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        job = triton_job(fn, args, self.versions)
        if job is None:
            if getattr(fn, "__name__", "") == "_get_ready":  # Inductor's readiness probe
                ready: Future[Any] = Future()
                ready.set_result(fn(*args))
                return ready
            return self._stock_process_pool().submit(fn, *args)  # not a compile: stock pool
        if self.on_triton_job is not None:
            self.on_triton_job()  # on Inductor's thread: it reads the compile's config
        return self._route(job, lambda: self._stock_process_pool().submit(fn, *args))

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Inductor calls this at exit; the farm is closed by ``raycompile.disable``."""

    def close(self) -> None:
        """Stop taking requests; those in flight finish on their threads."""
        if self._own_io:
            self._io.shutdown(wait=False)

    # AsyncCompile.submit (C++ builds) ----------------------------------------------------------

    def submit_task(self, task: Callable[[], Any]) -> Any:
        job = cpp_job(task, self.versions)
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
            key = cache_key(job) if self.cache is not None else ""
            if key and self._reuse(key, job, out):
                return
            if self._compiles_here(None):  # no Ray needed: not even waited for
                self._compile_here(job, out, local, key)
                return
            farm, dedupe = self._wait_farm()
            if farm is None:
                _chain(self._fallback(local, "the Ray cluster is not reachable"), out)
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

    def _compiles_here(self, farm: Any | None) -> bool:
        source = self._source
        return hasattr(source, "compiles_here") and source.compiles_here(farm)

    def _compile_here(self, job: Job, out: Future[Any], local: Callable[[], Any], key: str) -> None:
        """Run the farm's job in this node's own Inductor workers (Triton: its process pool; C++:
        its thread pool), so the result is cached and shared exactly as a farm job's."""
        self.stats.add(jobs_local=1)
        try:
            if isinstance(job, TritonJob):
                started: Any = self._stock_process_pool().submit(run_job, job)
            else:
                started = self._stock_submit(functools.partial(run_job, job))
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
            value = self._unpack(_to_local_paths(entry.blobs, job), entry.blobs.get("payload"), job,
                                 float(entry.meta.get("seconds", 0.0)))
        except Exception as e:  # a signed entry that still does not load (a torch change): compile
            log.warning("raycompile: cache entry for %s did not load (%s: %s); compiling", job.label,
                        type(e).__name__, e)
            return False
        out.set_result(value)
        return True

    def _fallback(self, local: Callable[[], Any], why: str) -> Future[Any]:
        self.stats.add(fallbacks=1)
        with self._lock:
            warn, self._warned = not self._warned, True
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
            value = self._unpack(_to_local_paths(result.files, job), result.payload, job, result.seconds)
            if key:
                self.cache.put(_to_entry(key, result))
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
            compat.set_autotuner_device(kernel, device_index(job.source))  # an entry made by another rank
            return kernel, int(seconds * 1e6)
        return None


def _chain(source: Future[Any], target: Future[Any]) -> None:
    def copy(f: Future[Any]) -> None:
        if f.exception() is not None:
            target.set_exception(f.exception())
        else:
            target.set_result(f.result())

    source.add_done_callback(copy)


class Hooks:
    """Installs a Router into Inductor's async compile; ``uninstall`` restores stock exactly."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._saved: dict[str, Any] = {}
        self._module_caches: Any = None
        self._installed = contextlib.ExitStack()

    def install(self) -> None:
        compat.check()
        ac = compat.async_compile_class()
        config = compat.inductor_config()
        self._saved = {
            "process_pool": ac.__dict__["process_pool"],
            "submit": ac.__dict__["submit"],
            "compile_threads": config.compile_threads,
        }
        router = self.router
        # lru_cache, like the stock one: Inductor's atexit hook calls process_pool.cache_clear()
        ac.process_pool = staticmethod(functools.lru_cache(1)(lambda: router))
        ac.submit = classmethod(lambda cls, task: router.submit_task(task))
        ac._ready_future = None
        # Inductor compiles synchronously in-process when it has one compile thread; the farm
        # is the pool, so ask for the asynchronous path whatever this machine's core count.
        threads = config.compile_threads or compat.decide_compile_threads()
        config.compile_threads = max(2, threads)
        if self.router.cache is not None:
            from .module_cache import make_backend

            cache = self.router.cache
            self._module_caches = compat.remote_module_caches(lambda kind: make_backend(cache, kind))
            self._module_caches.__enter__()
        self._install_output_module()
        # the farm's workers compile with Inductor's ptxas; so does this process (its Triton
        # cache lookups then find the cubins they published)
        self._installed.enter_context(compat.inductor_ptxas())
        self._installed.enter_context(compat.compile_workers_in_processes())

    def _install_output_module(self) -> None:
        """The farm's wrapper codegen (wrapper/codegen.py) for cuda and cpu, and a cache-key tag so
        its modules and stock ones never share an FX-graph entry. The two patches above stay: the
        kernels Inductor compiles during codegen (compat.EAGER_COMPILE_SITES) use stock
        ``AsyncCompile()`` objects, and C++ builds reach ``submit`` from Inductor's code cache;
        the pool seam is the one path every compile takes, the output module's included."""
        from .codegen import CACHE_KEY_TAG, DEVICES, FarmWrapperCodegen

        self._installed.enter_context(compat.cache_key_tag(CACHE_KEY_TAG))
        replaced = self._installed.enter_context(compat.wrapper_codegen_registered(FarmWrapperCodegen, DEVICES))
        for device in sorted(set(DEVICES) - set(replaced)):
            log.warning("raycompile: %s has its own wrapper codegen (%s); its output modules stay stock",
                        device, compat.wrapper_codegen_for(device))

    def uninstall(self) -> None:
        self._installed.close()
        self.router.close()
        if not self._saved:
            return
        ac = compat.async_compile_class()
        ac.process_pool = self._saved["process_pool"]
        ac.submit = self._saved["submit"]
        ac._ready_future = None
        compat.inductor_config().compile_threads = self._saved["compile_threads"]
        self._saved = {}
        if self._module_caches is not None:
            self._module_caches.__exit__(None, None, None)
            self._module_caches = None


def stock_pools() -> tuple[Callable[[], Any], Callable[[Callable[[], Any]], Any]]:
    """The stock process pool factory and thread-pool submit, captured before install."""
    ac = compat.async_compile_class()
    process_pool = ac.__dict__["process_pool"].__func__
    submit = ac.__dict__["submit"].__func__
    return process_pool, lambda task: submit(ac, task)
