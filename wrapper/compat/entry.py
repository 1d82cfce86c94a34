"""Seam family "entry": where the session meets torch.compile and Inductor's compile pools
(the backend object, the config patches of a mode, the two pool seams the Router replaces, the
remote FX-graph and AOTAutograd caches, the cache-key tag). Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "_TorchCompileInductorWrapper.__call__": ("torch", "_TorchCompileInductorWrapper.__call__"),
    "_TorchCompileInductorWrapper.__init__": ("torch", "_TorchCompileInductorWrapper.__init__"),
    "AsyncCompile.process_pool": ("torch._inductor.async_compile", "AsyncCompile.process_pool"),
    "AsyncCompile.submit": ("torch._inductor.async_compile", "AsyncCompile.submit"),
    "AsyncCompile._ready_future": ("torch._inductor.async_compile", "AsyncCompile._ready_future"),
    "config.decide_compile_threads": ("torch._inductor.config", "decide_compile_threads"),
    "config.compile_threads": ("torch._inductor.config", "compile_threads"),
    "config.max_autotune": ("torch._inductor.config", "max_autotune"),
    "config.max_autotune_gemm": ("torch._inductor.config", "max_autotune_gemm"),
    # config.compile_worker_mode (torch 2.15: compile in threads) is read with hasattr: absent before 2.15
    "config.fx_graph_remote_cache": ("torch._inductor.config", "fx_graph_remote_cache"),
    "functorch.config.enable_remote_autograd_cache": ("torch._functorch.config", "enable_remote_autograd_cache"),
    "RemoteCacheBackend": ("torch._inductor.remote_cache", "RemoteCacheBackend"),
    "RemoteFxGraphCache.backend_override_cls": (
        "torch._inductor.remote_cache", "RemoteFxGraphCache.backend_override_cls"),
    "RemoteAOTAutogradCache.backend_override_cls": (
        "torch._inductor.remote_cache", "RemoteAOTAutogradCache.backend_override_cls"),
    "fresh_cache": ("torch._inductor.utils", "fresh_cache"),
    "cache_dir": ("torch._inductor.runtime.runtime_utils", "cache_dir"),
    "compiler.config.cache_key_tag": ("torch.compiler.config", "cache_key_tag"),
    "FxGraphHashDetails.cache_key_tag": ("torch._inductor.codecache", "FxGraphHashDetails.__init__"),
    "compiled_fx_graph_hash": ("torch._inductor.codecache", "compiled_fx_graph_hash"),
    "codecache.torch_key": ("torch._inductor.codecache", "torch_key"),
    "triton_compat.triton_key": ("torch._inductor.runtime.triton_compat", "triton_key"),
}


def version_hashes_ahead(submit: Callable[..., Any]) -> None:
    """Have ``submit`` (I/O threads) compute the hashes of torch's and Triton's own source files
    that Inductor's cache keys and Triton's kernel loads ask for (``torch_key``, ``triton_key``:
    every file read and hashed, 0.1-0.2 s and 0.4 s on an H200 host when nothing else runs, once
    per process), so the first call finds them cached instead of computing them on its thread. The
    modules are imported here, on the caller's thread (the first call imports them anyway): an
    import on another thread could deadlock with the caller's own imports. The values are torch's
    and Triton's own, computed by their own functions.

    A caller that asks for ``torch_key`` while the I/O thread computes it waits for it at most
    ``KEY_WAIT_S``, then computes it itself, as stock does (``_key_ahead``). The I/O thread's
    computation holds the GIL for a moment per file, and beside a busy main thread (Dynamo tracing)
    each moment waits for the GIL: it took 8.2 s under max-autotune on an H200 host (stop 56),
    where stock's main thread computes it in 0.1 s, and a first call that waited for it as long as
    it took lost 2.0 s there."""
    try:
        from torch._inductor import codecache
        from torch._inductor.runtime import triton_compat
    except ImportError:
        return
    triton_key = getattr(triton_compat, "triton_key", None) if getattr(triton_compat, "HAS_TRITON", False) else None
    computes = [_key_ahead(codecache.torch_key) or _quietly(codecache.torch_key)]
    if triton_key is not None:
        computes.append(_quietly(triton_key))
    for compute in computes:
        try:
            submit(compute)
        except RuntimeError:  # the executor is shutting down: the first call computes them, as stock
            undo = getattr(compute, "undo", None)
            if undo is not None:
                undo()


def _quietly(key: Callable[[], Any]) -> Callable[[], None]:
    def compute() -> None:
        try:
            key()
        except Exception:  # noqa: BLE001 - the caller computes it where it needs it, and sees its error
            pass

    return compute


# how long a caller of torch_key waits for the I/O thread's value before computing it itself, as
# stock: about what computing it costs a main thread that has the GIL to itself (0.1-0.3 s)
KEY_WAIT_S = 0.25


def _key_ahead(key: Any) -> Callable[[], None] | None:
    """``torch_key``'s cache computed on an I/O thread, its caller waiting for that at most
    ``KEY_WAIT_S``: returns what computes the value with the cache's own function (``func`` of the
    wrapper's closure) and puts it in the cache, and, until it is in, makes ``func`` a short wait
    for it, after which the caller computes it as stock. The caches: torch 2.11's
    (``codecache.torch_key_cache``: the value in the closure's list ``_cache``, no lock) and 2.13's
    (``prefetchable_cache``: ``set``; the caller computes under its lock, so the I/O thread does
    not take that lock while it computes). ``func`` is stock's again once the value is in. None
    where ``torch_key`` is neither, or 2.11's holds its value already."""
    cells = dict(zip(getattr(getattr(key, "__code__", None), "co_freevars", ()),
                     getattr(key, "__closure__", None) or ()))
    func, cache = cells.get("func"), cells.get("_cache")
    try:
        stock, values = func.cell_contents, cache.cell_contents  # type: ignore[union-attr]
    except (AttributeError, ValueError):  # another cache, or an empty cell
        return None
    if not callable(stock):
        return None
    if isinstance(values, list):  # 2.11

        def cached() -> bool:
            return bool(values)

        def store(value: Any) -> None:
            if not values:
                values.append(value)
    elif callable(getattr(key, "set", None)):  # 2.13: unset, ``_cache`` holds the module's bare ``object()``
        lock = cells.get("_lock")

        def cached() -> bool:
            return type(cache.cell_contents) is not object  # type: ignore[union-attr]

        def store(value: Any) -> None:
            if lock is not None and lock.cell_contents.locked():  # the caller computes it, and caches its own
                return
            try:
                key.set(value)
            except RuntimeError:  # the caller computed it first
                pass
    else:
        return None
    if cached():
        return None
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def waited() -> Any:
        try:
            return done.result(timeout=KEY_WAIT_S)
        except Exception:  # noqa: BLE001 - its computation failed or is not done: computed here, as stock
            return stock()

    def undo() -> None:
        if func.cell_contents is waited:  # type: ignore[union-attr]
            func.cell_contents = stock  # type: ignore[union-attr]

    def compute() -> None:
        if cached():  # the caller computed it while this waited in the I/O queue
            undo()
            done.cancel()
            return
        try:
            value = stock()
        except BaseException as e:  # noqa: BLE001 - a waiting caller computes it and sees the error
            undo()
            done.set_exception(e)
            return
        done.set_result(value)  # first: a 2.13 caller waits for it holding the lock that ``set`` takes
        store(value)
        undo()

    func.cell_contents = waited  # type: ignore[union-attr]
    compute.undo = undo  # type: ignore[attr-defined]
    return compute


@contextlib.contextmanager
def inductor_entry_gated(before: Callable[[bool], None]) -> Iterator[None]:
    """Run ``before(max_autotune)`` at the start of every Inductor compile ``torch.compile`` makes
    (the backend object of ``backend="inductor"``, ``torch._TorchCompileInductorWrapper``, called
    with the graph Dynamo traced), so the session installs its Inductor hooks there, not at
    ``enable()``: importing Inductor takes seconds, and stock pays it at the same point.
    ``max_autotune``: whether the compile's mode or options turn max-autotune on (its config
    patches, which Inductor applies only inside the call). Restored on exit. Imports nothing
    beyond ``torch``."""
    import torch

    cls = torch._TorchCompileInductorWrapper
    stock = cls.__dict__["__call__"]

    @functools.wraps(stock)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        patches = getattr(self, "config", None) or {}
        before(bool(patches.get("max_autotune") or patches.get("max_autotune_gemm")))
        return stock(self, *args, **kwargs)

    cls.__call__ = __call__
    try:
        yield
    finally:
        cls.__call__ = stock


def inductor_loaded() -> bool:
    """Whether Inductor is imported in this process already (so installing hooks costs ms)."""
    return "torch._inductor.compile_fx" in sys.modules


def inductor_backend(mode: str | None, options: dict[str, Any] | None) -> Callable[..., Any]:
    """What ``torch.compile(backend="inductor", mode=..., options=...)`` compiles with: Inductor
    with that mode's and those options' config patches (raises RuntimeError, as torch.compile
    does, for an unknown option)."""
    import torch

    return torch._TorchCompileInductorWrapper(mode, options, None)


def inductor_config() -> Any:
    from torch._inductor import config

    return config


def inductor_cache_dir() -> str:
    from torch._inductor.runtime.runtime_utils import cache_dir

    return cache_dir()


@contextlib.contextmanager
def compile_workers_in_processes() -> Iterator[None]:
    """Inductor's compile jobs go to ``AsyncCompile.process_pool`` (the farm's seam) while inside.

    torch 2.15 can compile in threads instead (``config.compile_worker_mode`` "thread", or "auto"
    on a free-threaded Python: ``AsyncCompile.get_worker_pool`` then hands jobs to its
    ``thread_pool``, past the farm), so the mode is pinned to "process" and restored on exit. A
    no-op on a torch without the setting (2.11, 2.13)."""
    config = inductor_config()
    if not hasattr(config, "compile_worker_mode"):
        yield
        return
    saved = config.compile_worker_mode
    config.compile_worker_mode = "process"
    try:
        yield
    finally:
        config.compile_worker_mode = saved


def max_autotune_on() -> bool:
    """Whether the compile running on this thread asked for max-autotune (its mode's or
    options' config patches are in force while Inductor compiles)."""
    config = inductor_config()
    return bool(config.max_autotune or config.max_autotune_gemm)


def async_compile_class() -> Any:
    from torch._inductor.async_compile import AsyncCompile

    return AsyncCompile


def stock_pools() -> tuple[Callable[[], Any], Callable[[Callable[[], Any]], Any]]:
    """Inductor's stock process pool factory and thread-pool submit (captured before
    ``pools_routed`` replaces them)."""
    ac = async_compile_class()
    process_pool = ac.__dict__["process_pool"].__func__
    submit = ac.__dict__["submit"].__func__
    return process_pool, lambda task: submit(ac, task)


@contextlib.contextmanager
def pools_routed(pool: Any, submit: Callable[[Callable[[], Any]], Any]) -> Iterator[None]:
    """Inductor's Triton compiles (``AsyncCompile.process_pool()``) go to ``pool`` and its C++
    builds (``AsyncCompile.submit``, their ``submit_fn``) to ``submit`` while inside; restored
    exactly on exit. Inductor compiles synchronously in-process when it has one compile thread, so
    ``compile_threads`` is at least 2 inside, whatever this machine's core count."""
    ac = async_compile_class()
    config = inductor_config()
    saved = (ac.__dict__["process_pool"], ac.__dict__["submit"], config.compile_threads)
    # lru_cache, like the stock one: Inductor's atexit hook calls process_pool.cache_clear()
    ac.process_pool = staticmethod(functools.lru_cache(1)(lambda: pool))
    ac.submit = classmethod(lambda cls, task: submit(task))
    ac._ready_future = None
    config.compile_threads = max(2, config.compile_threads or int(config.decide_compile_threads()))
    try:
        yield
    finally:
        ac.process_pool, ac.submit, config.compile_threads = saved
        ac._ready_future = None


def pool_started(process_pool: Callable[[], Any]) -> bool:
    """Whether ``process_pool`` (``stock_pools()``'s factory: ``AsyncCompile.process_pool``, an
    ``lru_cache`` of one) made its pool already, so asking for it starts nothing."""
    info = getattr(process_pool, "cache_info", None)
    return callable(info) and info().currsize > 0


def wake_pool(pool: Any) -> None:
    """Start a stock compile pool's workers now (``SubprocPool.wakeup``: its sidecar process
    starts its ProcessPoolExecutor), as ``AsyncCompile.wakeup`` does for stock's own pool; a
    no-op for a pool without it."""
    wakeup = getattr(pool, "wakeup", None)
    if callable(wakeup):
        wakeup()


def is_readiness_probe(fn: Any) -> bool:
    """Whether ``fn`` is Inductor's probe of a warm pool (``AsyncCompile._get_ready``'s job)."""
    return getattr(fn, "__name__", "") == "_get_ready"


@contextlib.contextmanager
def remote_module_caches(make_backend: Callable[[str], Any]) -> Iterator[None]:
    """Turn on Inductor's remote FX-graph and AOTAutograd caches with ``make_backend(kind)`` as
    their storage (``RemoteCache.backend_override_cls``, Inductor's own hook for a custom backend).
    """
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_cfg
    from torch._inductor import remote_cache as rc

    saved = (rc.RemoteFxGraphCache.__dict__.get("backend_override_cls"),
             rc.RemoteAOTAutogradCache.__dict__.get("backend_override_cls"),
             inductor_cfg.fx_graph_remote_cache, functorch_config.enable_remote_autograd_cache)
    rc.RemoteFxGraphCache.backend_override_cls = lambda: make_backend("fx")
    rc.RemoteAOTAutogradCache.backend_override_cls = lambda: make_backend("aot")
    inductor_cfg.fx_graph_remote_cache = True
    functorch_config.enable_remote_autograd_cache = True
    try:
        yield
    finally:
        for cls, value in ((rc.RemoteFxGraphCache, saved[0]), (rc.RemoteAOTAutogradCache, saved[1])):
            cls.backend_override_cls = value
        inductor_cfg.fx_graph_remote_cache = saved[2]
        functorch_config.enable_remote_autograd_cache = saved[3]


def remote_cache_backend_base() -> Any:
    from torch._inductor.remote_cache import RemoteCacheBackend

    return RemoteCacheBackend


def fresh_cache() -> contextlib.AbstractContextManager[Any]:
    """Inductor's context manager that gives a fresh, empty on-disk and in-memory cache."""
    from torch._inductor.utils import fresh_cache as fc

    return fc()


@contextlib.contextmanager
def cache_key_tag(tag: str) -> Iterator[str]:
    """Add ``tag`` to ``torch.compiler.config.cache_key_tag`` (which enters the FX-graph and
    AOTAutograd keys through ``FxGraphHashDetails.cache_key_tag``, and the autotune keys), so
    modules made by the farm's codegen and stock ones never share an entry; restored on exit."""
    from torch.compiler import config as cconfig

    saved = cconfig.cache_key_tag
    cconfig.cache_key_tag = f"{saved}+{tag}" if saved else tag
    try:
        yield cconfig.cache_key_tag
    finally:
        cconfig.cache_key_tag = saved


def fx_graph_key(gm: Any, example_inputs: list[Any]) -> str:
    """Inductor's FX-graph cache key of ``gm`` (no compile kwargs): a test seam for the tag."""
    from torch._inductor.codecache import compiled_fx_graph_hash

    return compiled_fx_graph_hash(gm, example_inputs, {}, [])[0]
