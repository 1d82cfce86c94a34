"""Autotuning on the cluster's GPUs: the session's part, and ``raycompile.autotune`` for a user's
own Triton kernel.

While the farm is enabled and the cluster has GPUs of the driver's model, Inductor's autotune
benchmarks (max-autotune choices, and the configs of every Triton kernel with several) run on GPU
actors, one per GPU of every GPU node, in parallel (``wrapper/autotune.py``,
``orchestrator/gpu_pool.py``); winners are cached, so a later process benchmarks nothing. Every
max-autotune decision's timings are filed in the cache too (``cache/decisions.py``), on GPU or CPU:
a process, on any node, that meets a decision already made takes its timings, so it picks the same,
and compiles and times no candidate. ``stats()`` counts ``benchmarks``, ``benchmark_seconds`` and
``gpus`` (GPU id -> benchmarks)."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import AutotuneError, FarmUnavailableError, NoGPUError
from .settings import Settings

log = logging.getLogger("raycompile.autotune")


class AutotuneSession:
    """The GPU actors of a raycompile session and, when this process has a GPU (or ``group`` is
    given), the Inductor hooks that send its max-autotune benchmarks to the actors of its GPU
    model and file every Triton kernel's config winner in the cache.

    ``source``: where the session's ``GPUPool`` comes from (``orchestrator.startup.Startup``:
    ``gpu_pool()`` waits for Ray, None without it; ``started_gpu_pool()`` never waits), so nothing
    here waits for Ray until a benchmark needs the actors; default: a pool of its own on the Ray
    this process is connected to. ``measure`` replaces the GPU timing on the actors of
    that pool (tests pass a test double)."""

    def __init__(self, stats: Any, cache: Any, settings: Settings, group: str | None = None,
                 measure: Any = None, source: Any = None, submit: Callable[..., Any] | None = None,
                 registry: Any = None) -> None:
        from .cache.decisions import DecisionStore
        from .cache.winners import WinnerStore
        from .kernels.benchmark import GPUTiming, local_cpu, local_gpu
        from .wrapper import compat
        from .wrapper.autotune import AutotuneHooks
        from .wrapper.decisions import SharedDecisions

        self.stats, self.settings = stats, settings
        self._own: Any = None
        if source is None:
            from .orchestrator.gpu_pool import GPUPool

            self._own = GPUPool(stats, measure or GPUTiming(compat.TOOLCHAIN), job_timeout_s=settings.job_timeout_s,
                                profile=settings.profile_gpu_workers)
        self._source = source
        self._prestarted = False
        self.winners = WinnerStore(cache, submit=submit)
        here = local_gpu() if group is None else None
        self.group = group or (here.group if here is not None else None)
        self.hooks: AutotuneHooks | None = None
        if self.group is not None:
            self.hooks = AutotuneHooks(self._runner(wall=True), cache, self.winners, stats,
                                       background=self._runner(wall=False), hold=self._hold,
                                       configs=settings.autotune_configs, registry=registry)
            self.hooks.install()
        # max-autotune's decisions (GPU or CPU) shared through the cache: every process picks the same
        self.decisions = SharedDecisions(DecisionStore(cache, submit=submit), stats, (self.group, local_cpu()))
        self._decisions: contextlib.ExitStack | None = contextlib.ExitStack()
        self._decisions.enter_context(self.decisions.install())

    @property
    def pool(self) -> Any:
        """The GPU pool (waits for the session's Ray). Raises FarmUnavailableError without Ray."""
        pool = self._own if self._own is not None else self._source.gpu_pool()
        if pool is None:
            raise FarmUnavailableError("the session's Ray", "no Ray connection, so no GPU workers")
        return pool

    def _runner(self, wall: bool) -> Callable[[Sequence[Any]], list[Any]]:
        group = self.group
        return lambda work: self.pool.run(work, group, wall)

    def _hold(self) -> contextlib.AbstractContextManager[None]:
        """While this process times a candidate itself: the actors on its GPU take no job (only
        if they exist: holding never starts them, nor waits for Ray)."""
        pool = self._own if self._own is not None else self._source.started_gpu_pool()
        return pool.hold_here() if pool is not None and pool.started else contextlib.nullcontext()

    @classmethod
    def for_session(cls, stats: Any, cache: Any, settings: Settings, source: Any,
                    submit: Callable[..., Any] | None = None, registry: Any = None) -> AutotuneSession | None:
        """A session's autotuning, or None when turned off (``autotune=False``: Inductor benchmarks
        as it always does). Made at the session's first Inductor compile (it asks CUDA for this
        process's GPU); the actors start only when a benchmark goes to them."""
        if not settings.autotune:
            return None
        return cls(stats, cache, settings, source=source, submit=submit, registry=registry)

    def prestart(self) -> None:
        """Start the GPU actors in the background when this process will send benchmarks to them
        (max-autotune, or ``autotune_configs="actors"``). The Router calls this at each Triton
        kernel it sends to the farm, on Inductor's thread, so it reads the compile's config; it
        never waits."""
        from .wrapper import compat

        if self.hooks is None or self._prestarted:
            return
        if not (compat.max_autotune_on() or self.settings.autotune_configs == "actors"):
            return
        self._prestarted = True
        if self._own is not None:
            self._own.prestart()
            return

        def start() -> None:
            try:
                pool = self.pool
            except FarmUnavailableError:
                return
            pool.prestart()

        threading.Thread(target=start, name="raycompile-gpu-prestart", daemon=True).start()

    def close(self) -> None:
        if self.hooks is not None:
            self.hooks.uninstall()
        decisions, self._decisions = self._decisions, None
        if decisions is not None:
            decisions.close()
        if self._own is not None:
            self._own.close()


@dataclass(frozen=True)
class AutotuneResult:
    """What ``raycompile.autotune`` found: the fastest config, and every config's time."""

    best: Any  # the fastest triton.Config (one of those passed in)
    ms: float  # its time in milliseconds
    timings: list[tuple[Any, float]]  # (config, milliseconds; inf: failed), in the order given
    errors: dict[int, str]  # config position -> why it failed
    gpus: list[str]  # the GPU ids that timed them


def autotune(kernel: Any, configs: Sequence[Any], args: Sequence[Any], grid: Any, *,
             kwargs: dict[str, Any] | None = None, gpu: str | None = None) -> AutotuneResult:
    """Benchmark a ``@triton.jit`` kernel over ``configs`` on the cluster's GPU actors, in parallel,
    and return the fastest (``AutotuneResult.best``) with every config's time.

    ``configs``: ``triton.Config`` objects (their kwargs are the kernel's constexpr meta-parameters,
    plus num_warps/num_stages). ``args``: the kernel's positional arguments; tensors are shipped by
    value (so index tensors stay valid). ``grid``: a tuple, or a callable of the config's
    meta-parameters (it must pickle with cloudpickle). ``kwargs``: other keyword arguments of the
    launch. ``gpu``: the GPU group to time on ("NVIDIA H200 (sm_90)"); default: the model of this
    process's GPU, else the cluster's only GPU group. Times are Inductor's benchmarker's (warm-up,
    L2 flush, the median of repeats). Uses the session of ``raycompile.enable()``.

    Raises FarmUnavailableError without an enabled session on Ray, NoGPUError when the cluster has
    no GPU of that group (or several groups and none chosen), AutotuneError when the kernel cannot
    be sent (a global that does not pickle) or every config failed, and TypeError when ``kernel``
    is not a ``@triton.jit`` function.
    """
    import cloudpickle

    from .kernels import Versions
    from .kernels.benchmark import INF, BenchJob, Payload, describe_args, local_gpu
    from .session import current
    from .wrapper import compat

    session = current()
    if session is None:
        raise FarmUnavailableError("(no session)", "raycompile.autotune needs raycompile.enable() on a Ray cluster")
    session.install()
    tuning: AutotuneSession | None = session.autotune
    if tuning is None:  # autotune=False
        raise NoGPUError(gpu or "any GPU", [])
    tuning.pool  # noqa: B018 - raises FarmUnavailableError without Ray, before anything is sent
    source, values = compat.bundle_user_kernel(kernel)
    name = kernel.__name__
    try:
        with _by_value(kernel, grid):
            grid_blob, globals_blob = cloudpickle.dumps(grid), cloudpickle.dumps(values)
        payload = Payload.make("user", name, source, args=describe_args(args, by_value=True),
                               kwargs=dict(kwargs or {}), grid=grid_blob, globals=globals_blob)
    except Exception as e:  # noqa: BLE001 - whatever cloudpickle raises for a global or grid it cannot take
        raise AutotuneError(name, f"it cannot be sent to the GPU workers: {type(e).__name__}: {e}") from e
    group = gpu or tuning.group or _default_group(tuning, local_gpu)
    versions = Versions.here()
    work = [(BenchJob(payload.kernel_id, name, i, _config_dict(compat, c), versions), payload)
            for i, c in enumerate(configs)]
    timings = tuning.pool.run(work, group)
    ok = [t for t in timings if math.isfinite(t.ms)]
    errors = {t.index: t.error for t in timings if t.ms == INF}
    if not ok:
        detail = "; ".join(f"config {i}: {e.splitlines()[0] if e else 'failed'}" for i, e in sorted(errors.items()))
        raise AutotuneError(name, f"every config failed on {group}: {detail}")
    best = min(ok, key=lambda t: t.ms)
    return AutotuneResult(configs[best.index], best.ms, [(configs[t.index], t.ms) for t in timings], errors,
                          sorted({t.gpu for t in timings if t.gpu}))


@contextlib.contextmanager
def _by_value(kernel: Any, grid: Any) -> Iterator[None]:
    """Pickle the user's own functions (the grid lambda, helpers) by value: the module that defines
    them is not importable on the GPU nodes (cloudpickle would send a reference to it)."""
    import cloudpickle

    names = {getattr(getattr(kernel, "fn", None), "__module__", None)}
    if isinstance(grid, types.FunctionType):
        names.add(grid.__module__)
    registered = []
    for name in names - {None, "__main__"}:
        module = sys.modules.get(str(name))
        if module is None or str(name).split(".")[0] in ("triton", "torch"):
            continue
        try:
            cloudpickle.register_pickle_by_value(module)
            registered.append(module)
        except ValueError:  # already registered
            pass
    try:
        yield
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def _config_dict(compat: Any, config: Any) -> dict[str, Any]:
    out = compat.config_dict(config)
    for extra in ("num_ctas", "maxnreg"):
        value = getattr(config, extra, None)
        if value is not None and not (extra == "num_ctas" and value == 1):
            out[extra] = value
    return out


def _default_group(tuning: AutotuneSession, local_gpu: Callable[[], Any]) -> str:
    here = local_gpu()
    if here is not None:
        return str(here.group)
    groups = sorted(tuning.pool.groups())
    if len(groups) == 1:
        return groups[0]
    raise NoGPUError("(not chosen: this process has no GPU)", groups)
