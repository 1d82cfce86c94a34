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

This module holds the spec and what runs inside one variant's task (no Ray import); the fan-out
is ``orchestrator/variants.py``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import runpy
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import SpecError

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class InputSpec:
    """One example input: random values of this shape and dtype (integers in [0, high))."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int = 2
    requires_grad: bool = False


@dataclass(frozen=True)
class Variant:
    """One thing to compile: ``entry(**kwargs)`` (a module or a function) called on ``inputs``."""

    name: str
    entry: str  # "package.module:callable"
    inputs: tuple[InputSpec, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None
    dynamic: bool | None = None
    fullgraph: bool = False
    backward: bool = False  # also compile the backward (sum of the outputs, .backward())
    device: str = "auto"  # auto: cuda when the task has a GPU, else cpu
    dtype: str | None = None  # cast a module's parameters, e.g. bfloat16
    threads: int | None = None  # torch.set_num_threads (Ray workers run with 1; CPU kernels depend on it)
    seed: int = 0


@dataclass(frozen=True)
class VariantResult:
    """How one variant went: status "ok" | "failed" | "timeout"."""

    name: str
    status: str
    seconds: float = 0.0
    jobs: int = 0
    cache_hits: int = 0
    node: str = ""
    error: str = ""


# -- the spec ------------------------------------------------------------------------------------


def load_spec(path: str) -> list[Variant]:
    """Read and check a spec file. Raises SpecError naming the file and what is wrong."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise SpecError(path, f"cannot read it ({e.strerror})") from None
    if path.endswith(".json"):
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise SpecError(path, f"not valid JSON ({e})") from None
    else:
        import yaml  # a dependency of ray

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(path, f"not valid YAML ({' '.join(str(e).split())})") from None
    return parse_spec(doc, path)


def parse_spec(doc: Any, path: str = "<spec>") -> list[Variant]:
    """``doc``: a list of variants, or ``{"defaults": {...}, "variants": [...]}``."""
    if isinstance(doc, list):
        doc = {"variants": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("variants"), list) or not doc["variants"]:
        raise SpecError(path, "expected a non-empty list under 'variants'")
    extra = set(doc) - {"defaults", "variants"}
    if extra:
        raise SpecError(path, f"unknown top-level key(s) {sorted(extra)}; known: defaults, variants")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise SpecError(path, "'defaults' must be a mapping")
    variants = [_variant({**defaults, **v} if isinstance(v, dict) else v, i, path)
                for i, v in enumerate(doc["variants"])]
    names = [v.name for v in variants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(path, f"variant names must be unique: {dupes}")
    return variants


def _variant(raw: Any, i: int, path: str) -> Variant:
    where = f"variant {i}"
    if not isinstance(raw, dict):
        raise SpecError(path, f"{where} must be a mapping")
    known = {f.name for f in fields(Variant)}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(path, f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    entry = raw.get("entry")
    if not isinstance(entry, str) or not _ENTRY.match(entry):
        raise SpecError(path, f"{where}: 'entry' must be 'package.module:callable', got {entry!r}")
    where = f"variant {raw.get('name', i)!r}"
    inputs = raw.get("inputs")
    if not isinstance(inputs, list):
        raise SpecError(path, f"{where}: 'inputs' must be a list of {{shape, dtype}}")
    checks: list[tuple[str, Callable[[Any], bool], str]] = [
        ("name", lambda x: isinstance(x, str) and x != "", "a non-empty string"),
        ("kwargs", lambda x: isinstance(x, dict), "a mapping"),
        ("mode", lambda x: x in MODES, f"one of {[m for m in MODES if m]}"),
        ("dynamic", lambda x: x is None or isinstance(x, bool), "true, false or null"),
        ("fullgraph", lambda x: isinstance(x, bool), "true or false"),
        ("backward", lambda x: isinstance(x, bool), "true or false"),
        ("device", lambda x: isinstance(x, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", x), "auto, cpu or cuda"),
        ("dtype", lambda x: x is None or _is_dtype(x), "a torch dtype name such as bfloat16"),
        ("threads", lambda x: x is None or (isinstance(x, int) and x >= 1), "an integer >= 1"),
        ("seed", lambda x: isinstance(x, int), "an integer"),
    ]
    for name, ok, what in checks:
        if name in raw and not ok(raw[name]):
            raise SpecError(path, f"{where}: '{name}' must be {what}, got {raw[name]!r}")
    values = {k: v for k, v in raw.items() if k not in ("inputs", "name")}
    name = raw.get("name") or f"{entry.rsplit(':', 1)[1]}-{i}"
    return Variant(name=name, inputs=tuple(_input(x, where, path) for x in inputs), **values)


def _is_dtype(name: Any) -> bool:
    import torch

    return isinstance(name, str) and isinstance(getattr(torch, name, None), torch.dtype)


def _input(raw: Any, where: str, path: str) -> InputSpec:
    if not isinstance(raw, dict) or set(raw) - {"shape", "dtype", "high", "requires_grad"}:
        raise SpecError(path, f"{where}: an input is {{shape: [..], dtype: float32, high: 2, requires_grad: false}}, "
                              f"got {raw!r}")
    shape = raw.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise SpecError(path, f"{where}: an input's 'shape' must be a list of sizes, got {shape!r}")
    dtype = raw.get("dtype", "float32")
    if not _is_dtype(dtype):
        raise SpecError(path, f"{where}: unknown dtype {dtype!r} (use torch's names: float32, bfloat16, int64, ...)")
    return InputSpec(tuple(shape), dtype, int(raw.get("high", 2)), bool(raw.get("requires_grad", False)))


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
    except Exception as e:
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
        torch._dynamo.reset()  # Ray may run several variants in one worker process
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
    return VariantResult(variant.name, "failed" if error else "ok", time.perf_counter() - started,
                         s["jobs"], s.get("local_hits", 0) + s.get("shared_hits", 0), host, error)


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
