"""``raycompile precompile``: fill the cluster's cache before training starts.

Two ways: run a user's script with the farm enabled (its torch.compile calls go through the
farm), or compile the variants of a spec file (entry point, input shapes and dtypes, mode,
dynamic), each variant a Ray task that enables the farm, compiles and runs the variant once, so a
model's shapes and modes all compile at once and land in the shared cache.

A spec (JSON or YAML)::

    defaults: {entry: "mypkg.models:build_model", kwargs: {layers: 4}, mode: max-autotune}
    variants:
      - {name: b8, inputs: [{shape: [8, 512], dtype: int64, high: 32000}]}
      - {name: b16, inputs: [{shape: [16, 512], dtype: int64, high: 32000}], dynamic: false}

The spec's format and its reading are ``spec.py``; this module holds what runs inside one
variant's task (no Ray import); the fan-out is ``orchestrator/variants.py``.
"""

from __future__ import annotations

import importlib
import os
import runpy
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import SpecError
from .spec import InputSpec, Variant, load_spec, parse_spec

# the spec's names stay importable from here (orchestrator/variants.py, older callers)
__all__ = ["InputSpec", "Variant", "VariantResult", "load_entry", "load_spec", "make_inputs", "parse_spec",
           "run_script", "run_variant", "table"]


@dataclass(frozen=True)
class VariantResult:
    """How one variant went: status "ok" | "failed" | "timeout"."""

    name: str
    status: str
    seconds: float = 0.0
    jobs: int = 0  # compile jobs: on Ray plus those in the node's Inductor workers
    cache_hits: int = 0
    node: str = ""
    error: str = ""


def load_entry(entry: str, paths: Sequence[str] = ()) -> Callable[..., Any]:
    """Import ``package.module:callable`` (after putting ``paths`` first on sys.path).

    Raises SpecError when the module or the name is missing or not callable."""
    for p in reversed(paths):
        if os.path.isdir(p) and p not in sys.path:
            sys.path.insert(0, p)
    module_name, _, attr = entry.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise SpecError(entry, f"cannot import module {module_name!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(entry, f"module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise SpecError(entry, f"{attr!r} is not callable")
    return obj


# -- one variant (runs in a Ray task) ------------------------------------------------------------


def make_inputs(specs: Sequence[InputSpec], device: str, seed: int) -> list[Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for s in specs:
        dtype = getattr(torch, s.dtype)
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(s.shape, generator=gen).to(dtype)
        elif dtype == torch.bool:
            t = torch.randint(0, 2, s.shape, generator=gen).bool()
        else:
            t = torch.randint(0, s.high, s.shape, generator=gen).to(dtype)
        out.append(t.to(device).requires_grad_(s.requires_grad))
    return out


def run_variant(variant: Variant, paths: Sequence[str] = (), address: str = "auto") -> VariantResult:
    """Enable the farm (joining the cluster), torch.compile the variant and run it once.

    Never raises: a failure comes back as a result with status "failed" and the error."""
    import torch

    import raycompile

    from .wrapper import compat

    started = time.perf_counter()
    host = socket.gethostname()
    try:
        raycompile.enable(address=address)
    except raycompile.RaycompileError as e:  # a bad setting, or no cluster to join: the variant's result
        return VariantResult(variant.name, "failed", time.perf_counter() - started, node=host, error=_why(e))
    error = ""
    try:
        if variant.threads:
            torch.set_num_threads(variant.threads)
        build = load_entry(variant.entry, paths)
        device = variant.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.manual_seed(variant.seed)
        target = build(**variant.kwargs)
        if isinstance(target, torch.nn.Module):
            target = target.to(device)
            if variant.dtype:
                target = target.to(getattr(torch, variant.dtype))
        inputs = make_inputs(variant.inputs, device, variant.seed)
        torch.compiler.reset()  # Ray may run several variants in one worker process
        # Inductor's own on-disk caches empty: a module this node compiled before would load from
        # them and never reach the shared tier; this way every kernel is a cache hit or a farm job
        with compat.fresh_cache():
            compiled = torch.compile(target, mode=variant.mode, dynamic=variant.dynamic, fullgraph=variant.fullgraph)
            out = compiled(*inputs)
            if variant.backward:
                tensors = [t for t in torch.utils._pytree.tree_leaves(out)
                           if isinstance(t, torch.Tensor) and t.requires_grad]
                if not tensors:
                    raise ValueError("backward: true, but no output requires grad")
                sum(t.float().sum() for t in tensors).backward()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
    except BaseException as e:  # the user's code: anything, reported, never raised
        error = _why(e)
    finally:
        s = raycompile.stats()
        raycompile.disable()
    jobs = s["jobs"] + s.get("jobs_local", 0)  # on Ray, or in the node's own Inductor workers (compile_jobs)
    return VariantResult(variant.name, "failed" if error else "ok", time.perf_counter() - started,
                         jobs, s.get("local_hits", 0) + s.get("shared_hits", 0), host, error)


def _why(e: BaseException) -> str:
    """The exception and where in the user's code it came from, in a few lines."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    text = str(e).strip()
    return f"{type(e).__name__}: {text[:1500]}{where}"


def table(results: Sequence[VariantResult]) -> str:
    """The per-variant table the CLI prints at the end, with a total line."""
    width = max([7, *(len(r.name) for r in results)]) + 2
    lines = [f"{'variant':<{width}}{'status':<9}{'seconds':>9}{'jobs':>7}{'cache hits':>12}  node"]
    for r in results:
        lines.append(f"{r.name:<{width}}{r.status:<9}{r.seconds:>9.1f}{r.jobs:>7}{r.cache_hits:>12}  {r.node}")
    for r in results:
        if r.error:
            lines.append(f"FAILED {r.name}: {r.error}")
    failed = sum(r.status != "ok" for r in results)
    lines.append(f"precompiled {len(results)} variants ({failed} failed): "
                 f"{sum(r.jobs for r in results)} compile jobs, {sum(r.cache_hits for r in results)} cache hits")
    return "\n".join(lines)


# -- a user's script -----------------------------------------------------------------------------


def run_script(script: str, args: Sequence[str], address: str | None) -> int:
    """Run ``script`` as ``__main__`` (sys.argv = [script, *args]) with the farm enabled and
    Inductor's on-disk caches empty; print ``raycompile.report()``. Returns the script's exit
    status (1 if it raised). Raises SpecError when there is no such script."""
    import raycompile

    from .wrapper import compat

    if not os.path.isfile(script):
        raise SpecError(script, "no such script")
    raycompile.enable(address=address)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    status = 0
    try:
        # Inductor's own on-disk caches empty, as for a variant: what the script compiles is a hit
        # in raycompile's tiers or a farm job, so it all lands in the shared tier
        with compat.fresh_cache():
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        raycompile.disable()
    print(raycompile.report())
    return status
