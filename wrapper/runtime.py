"""What an output module made by the farm's codegen imports (wrapper/codegen.py).

``FarmCompile`` is Inductor's ``AsyncCompile`` with three additions: each kernel is defined with
its cache key; the module waits ONCE, on an explicit dict of named futures (``wait_named``, no
scan of ``globals()``); and each Triton kernel gets the autotune winner known for it stitched in,
so a warm module launches that config without benchmarking. Compiles go where ``AsyncCompile``
sends them: to the farm while it is enabled (its hooks own Inductor's pools), to stock Inductor's
pools otherwise, so a module loaded after ``raycompile.disable()`` runs as Inductor's would.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, runtime_checkable

from ..errors import CompileError
from . import compat

log = logging.getLogger("raycompile.runtime")

# the output module's ``extern_kernels`` (``compat.LIGHT_LINES``): Inductor's, imported at first use
extern_kernels = compat.ExternKernels()

MANY = 16  # show a progress bar while waiting on at least this many kernels (on a terminal)

Winner = dict[str, Any]  # a Triton config: its kwargs, plus "num_warps" and "num_stages"


class Winners:
    """Where autotune winners come from, by kernel cache key. A store of winners (the farm's
    autotuning) ``add``s a lookup; the first lookup that knows a key answers."""

    def __init__(self) -> None:
        self._lookups: list[Callable[[str], Winner | None]] = []
        self._lock = threading.Lock()

    def add(self, lookup: Callable[[str], Winner | None]) -> Callable[[], None]:
        """Consult ``lookup(key)`` from now on; returns the function that removes it again."""
        with self._lock:
            self._lookups.append(lookup)

        def remove() -> None:
            with self._lock:
                if lookup in self._lookups:
                    self._lookups.remove(lookup)

        return remove

    def winner_for(self, key: str) -> Winner | None:
        with self._lock:
            lookups = list(self._lookups)
        for lookup in lookups:
            try:
                winner = lookup(key)
            except Exception as e:  # noqa: BLE001 - a broken store must not break loading a module
                log.warning("raycompile: winner lookup %r failed for %s: %s", lookup, key[:12], e)
                continue
            if winner:
                return dict(winner)
        return None


class Binding:
    """What a module loaded while a session is enabled reaches of it: the session's winners
    registry, its ``progress`` setting and its batched shared-tier lookup. The session makes one
    and ``bind``s it; a module loaded with no session bound stitches only the winners it carries
    (and Inductor's own), shows no progress bar, and looks nothing up in advance."""

    def __init__(self, winners: Winners | None = None, progress: bool | None = None,
                 show_progress: Callable[[], bool] = lambda: False,
                 prefetch: Callable[[list[str]], object] | None = None,
                 loaded: Callable[[tuple[Any, ...]], object] | None = None,
                 built: Callable[[Callable[..., Any], str], object] | None = None) -> None:
        self.winners = winners if winners is not None else Winners()
        self.progress = progress  # the setting: True forces a bar even off a terminal
        self.show_progress = show_progress  # whether a bar is wanted now
        self.prefetch = prefetch  # looks up a module's kernels in the shared tier, batched
        self.loaded = loaded  # told of a module's kernels once they are all loaded
        # told of a C++ kernel Inductor loaded built from its own cache dir (its build job, that
        # dir): no job ran for it, so no entry was written (the session's Router writes one)
        self.built = built


# The one reference from generated modules (loaded by import, with no handle passed) to the
# enabled session: set and cleared only by ``bind``.
_bound: Binding | None = None
_bind_lock = threading.Lock()


def bind(binding: Binding) -> Callable[[], None]:
    """Make ``binding`` the one modules loaded from now on use; returns the function that unbinds it."""
    global _bound
    with _bind_lock:
        _bound = binding

    def unbind() -> None:
        global _bound
        with _bind_lock:
            if _bound is binding:
                _bound = None

    return unbind


def bound() -> Binding | None:
    return _bound


def winner_for(key: str) -> Winner | None:
    """The autotune winner the bound session knows for the kernel with cache key ``key`` (a config
    dict, as in Inductor's ``.best_config`` files), or None."""
    binding = _bound
    return binding.winners.winner_for(key) if binding is not None else None


@runtime_checkable
class KeyedPool(Protocol):
    """A compile pool that takes the key the output module names a kernel by with the compile (the
    Router, while the farm is on), so it can check the key it computes against it."""

    def submit_keyed(self, key: str, fn: Callable[..., Any], *args: Any) -> Any: ...


class _Keyed:
    """The pool ``FarmCompile.triton`` hands Inductor for one kernel: its submit carries the key."""

    def __init__(self, pool: KeyedPool, key: str) -> None:
        self.pool, self.key = pool, key

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.pool.submit_keyed(self.key, fn, *args)


class FarmCompile(compat.async_compile_class()):  # type: ignore[misc]
    """Inductor's ``AsyncCompile``, with kernels named by cache key and one explicit wait."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[str, str] = {}  # kernel name -> cache key

    def prefetch(self, keys: list[str]) -> None:
        """The module's kernel keys, before any is defined: the bound session looks up those it
        lacks locally in the shared tier in one batched round trip, in the background."""
        binding = _bound
        if binding is not None and binding.prefetch is not None and keys:
            binding.prefetch(list(keys))

    def triton(self, kernel_name: str, source_code: str, device_str: str = "cuda", key: str | None = None) -> Any:
        if not key or _bound is None:  # no session: stock's own pool, asked for only by stock's code
            return super().triton(kernel_name, source_code, device_str)
        self.keys[kernel_name] = key
        pool = type(self).process_pool()  # Inductor's pool: the Router while the farm is on
        if not isinstance(pool, KeyedPool):
            return super().triton(kernel_name, source_code, device_str)
        # Inductor's AsyncCompile.triton submits through self.process_pool() and has no parameter
        # for the key: for this one call, this object's pool is one whose submit passes it on
        self.process_pool = lambda: _Keyed(pool, key)  # type: ignore[method-assign]
        try:
            return super().triton(kernel_name, source_code, device_str)
        finally:
            del self.process_pool

    def cpp_pybinding(self, argtypes: list[str], source_code: str, key: str | None = None) -> Any:
        loaded = super().cpp_pybinding(argtypes, source_code)
        binding = _bound
        if binding is not None and binding.built is not None:
            built, where = binding.built, compat.inductor_cache_dir()  # the dir the kernel was found in
            try:  # found built in Inductor's dir: no job ran, so no entry yet; told once it loaded
                compat.when_loaded_from_disk(loaded, lambda task: built(task, where))
            except Exception as e:  # noqa: BLE001 - never in the way of a load: not written, as before
                log.debug("raycompile: a C++ kernel found in Inductor's cache dir is not written (%s: %s)",
                          type(e).__name__, e)
        return loaded

    def wait_named(self, manifest: Mapping[str, Any], futures: Mapping[str, Any]) -> tuple[Any, ...]:
        """Resolve each named kernel future, in order; return the kernels in that order.

        A Triton kernel with a known autotune winner (``winner_for`` its key, else the winner the
        manifest carries, else Inductor's ``.best_config``) is restricted to that config. Raises
        what a kernel's compile raised (``raycompile.CompileError`` names the kernel and node)."""
        keys = {**self.keys, **(manifest.get("kernels") or {})}
        carried = manifest.get("winners") or {}
        kernels = []
        with _progress(futures) as advance:
            for name, value in futures.items():
                kernel = _result(name, value)
                if compat.is_caching_autotuner(kernel):
                    stitch(name, kernel, keys.get(name), carried.get(name))
                kernels.append(kernel)
                advance()
        super().wait({})  # Inductor's bookkeeping after its wait (compile-time metrics); scans nothing
        binding = _bound
        if binding is not None and binding.loaded is not None:
            try:
                binding.loaded(tuple(kernels))
            except Exception as e:  # noqa: BLE001 - the module runs as it would without the session's note
                log.debug("raycompile: the session was not told of a module's kernels: %s", e)
        return tuple(kernels)


def _result(name: str, value: Any) -> Any:
    if not compat.is_future(value):
        return value  # compiled synchronously (one compile thread), or not a compile at all
    timeout = compat.wait_timeout_s()
    try:
        # torch 2.11's LambdaFuture.result takes no timeout (nor has Inductor a wait timeout there)
        return value.result() if timeout is None else value.result(timeout=timeout)
    except FutureTimeout:
        raise CompileError(name, "", f"no result within {timeout:.0f} s (TORCHINDUCTOR_COMPILE_WORKER_WAIT_TIMEOUT; "
                                     "raise it, or RAYCOMPILE_JOB_TIMEOUT_S, for kernels this large)") from None


def stitch(name: str, kernel: Any, key: str | None, carried: Winner | None) -> Winner | None:
    """Restrict ``kernel`` to its known autotune winner; return the winner used (None: none known,
    or it matches none of the kernel's compiled configs, and the kernel autotunes as usual)."""
    winner = (winner_for(key) if key else None) or carried or compat.inductor_best_config(kernel)
    if winner and compat.restrict_autotuner(kernel, winner):
        log.debug("raycompile: %s launches its known winner %s", name, winner)
        return winner
    return None


@contextlib.contextmanager
def _progress(futures: Mapping[str, Any]) -> Iterator[Callable[[], None]]:
    """A bar while the module waits on many unfinished kernels, only where the bound session wants
    progress (a terminal outside Ray jobs, or RAYCOMPILE_PROGRESS=1); otherwise nothing."""
    pending = [v for v in futures.values() if compat.is_future(v) and not compat.future_done(v)]
    binding = _bound
    show = binding is not None and binding.show_progress() and len(futures) >= MANY and bool(pending)
    force = binding is not None and binding.progress is True
    if not show:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=sys.stdout, force_terminal=force or None)
    bar = Progress(TextColumn("raycompile: waiting for kernels"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, transient=True)
    task = bar.add_task("wait", total=len(futures))
    with bar:
        yield lambda: bar.advance(task)
