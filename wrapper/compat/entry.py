"""Seam family "entry": where the session meets torch.compile and Inductor's compile pools
(the backend object, the config patches of a mode, the two pool seams the Router replaces, the
remote FX-graph and AOTAutograd caches, the cache-key tag). Checked on torch 2.11.0, 2.13.0 and 2.15.0."""

from __future__ import annotations

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
}


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
