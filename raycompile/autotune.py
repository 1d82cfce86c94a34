"""``raycompile.autotune``: a user's own ``@triton.jit`` kernel benchmarked over its configs on the
cluster's GPU actors, in parallel, through the enabled session's ``AutotuneSession``
(``raycompile/autotune_session.py``)."""

from __future__ import annotations

import contextlib
import math
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .autotune_session import AutotuneSession
from .errors import AutotuneError, FarmUnavailableError, NoGPUError


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
