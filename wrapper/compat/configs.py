"""Seam family "configs": a kernel's configs compiled by several compile workers at once
(``wrapper/spread.py``). Under max-autotune a pointwise or reduction kernel has several configs,
which Inductor's worker compiles one after another (``CachingAutotuner._precompile_worker``
compiles ``self.configs`` in order, each with ``self._precompile_config``). Here each config after
the first is compiled by a worker of its own (``compile_config_at``) while the kernel's job
compiles each under a lock of the config's own (``with_config_locks``), so none is compiled twice
and the kernel is the one its job alone makes. Checked on torch 2.11.0 and 2.13.0."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from collections.abc import Callable
from typing import Any

from ._base import Seams
from .triton import _load_kernel, _worker_env, compile_pickled, target_driver

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    # with CachingAutotuner._precompile_config (family "coordesc"): it compiles self.configs in order
    "CachingAutotuner._precompile_worker": ("torch._inductor.runtime.triton_heuristics",
                                            "CachingAutotuner._precompile_worker"),
    "config.patch": ("torch._inductor", "config.patch"),  # the driver's config for a config's compile
}

log = logging.getLogger("raycompile.compile")

CONFIG_LOCK_WAIT_S = 600.0  # the longest a worker waits for another's compile of one config
_SPREAD_DECORATOR = re.compile(r"@triton_heuristics\.(?:pointwise|reduction|persistent_reduction)\(")
_MAX_AUTOTUNE = re.compile(r"""['"]max_autotune(?:_pointwise)?['"]\s*:\s*True""")


def done_mark(config_locks: str, key: str) -> str:
    return os.path.join(config_locks, f"{key}.done")


def config_lock(config_locks: str, key: str, index: int) -> Any:
    """The lock (a ``filelock.FileLock``) config ``index`` of kernel ``key`` is compiled under."""
    import filelock

    return filelock.FileLock(os.path.join(config_locks, f"{key}.{index}.lock"), timeout=CONFIG_LOCK_WAIT_S)


def with_config_locks(load: Callable[[], Any], config_locks: str, key: str) -> Any:
    """``load()``'s kernel, each of whose configs its precompile compiles under ``config_lock``."""
    import filelock

    kernel = load()
    stock = kernel._precompile_config
    configs = list(kernel.configs)

    def locked(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        index = next((i for i, c in enumerate(configs) if c is cfg), None)
        if index is None:
            return stock(cfg, *args, **kwargs)
        lock = config_lock(config_locks, key, index)
        try:
            lock.acquire()
        except (filelock.Timeout, OSError):  # another worker's compile of it hangs, or the locks are
            return stock(cfg, *args, **kwargs)  # gone (the session ended): compiled here, as stock
        try:
            return stock(cfg, *args, **kwargs)
        finally:
            lock.release()

    kernel._precompile_config = locked  # read by _precompile_worker as self._precompile_config(c)
    return kernel


def compile_with_config_locks(kernel_name: str, source: str, extra_env: dict[str, str],
                              extra_config: dict[str, Any], config_locks: str,
                              key: str) -> tuple[bytes, dict[str, bytes]]:
    """``compile_pickled`` with each config compiled under its lock in ``config_locks``
    (``config_lock``), so a config that another worker compiles at once (``compile_config_at``)
    is waited for and then found in Triton's cache; the kernel's ``done`` mark is left there at the
    end, whatever happened. The lock's wrapper is set on the kernel's instance only, and taken off
    before the pickle."""
    load = functools.partial(with_config_locks, functools.partial(_load_kernel, kernel_name, source),
                             config_locks, key)
    try:
        return compile_pickled(kernel_name, source, extra_env, extra_config, load)
    finally:
        with contextlib.suppress(OSError):
            open(done_mark(config_locks, key), "wb").close()


def spreads(source: str) -> bool:
    """Whether ``source`` is a kernel whose configs are worth compiling at once by several
    workers: a pointwise or reduction kernel of a max-autotune compile (stock compiles its several
    configs one after another in one worker; a default-mode kernel has one or two)."""
    return bool(_SPREAD_DECORATOR.search(source) and _MAX_AUTOTUNE.search(source))


def config_count(kernel_name: str, source: str) -> int:
    """How many configs the kernel of ``source`` is compiled for: its module loaded here (its
    heuristics choose them), nothing compiled; 1 where it does not load here."""
    try:
        with target_driver(source):  # its driver swap holds the process's driver lock
            return len(_load_kernel(kernel_name, source).configs)
    except Exception as e:  # noqa: BLE001 - its job compiles every config itself, as stock
        log.debug("raycompile: %s: its configs not counted: %s", kernel_name, e)
        return 1


def compile_config_at(kernel_name: str, source: str, index: int, extra_env: dict[str, str],
                      extra_config: dict[str, Any], config_locks: str, key: str) -> float:
    """Config ``index`` of an Inductor Triton kernel compiled into this node's Triton cache, in a
    compile worker, while the kernel's own job (``compile_with_config_locks``)
    runs in another: under the config's lock, so neither compiles it twice (the later one finds
    it in Triton's cache). Nothing where the job has finished already, or its locks are gone (the
    session ended). Returns the seconds it took."""
    import time

    from torch._inductor import config

    start = time.perf_counter()
    done = done_mark(config_locks, key)
    if not os.path.isdir(config_locks) or os.path.exists(done):
        return 0.0
    _worker_env(extra_env)
    with target_driver(source), config.patch(extra_config):
        kernel = _load_kernel(kernel_name, source)
        cfg = kernel.configs[index]
        with config_lock(config_locks, key, index):
            if os.path.exists(done):
                return 0.0
            kernel._precompile_config(cfg)
    return time.perf_counter() - start
