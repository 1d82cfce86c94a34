"""The Inductor adapter: every touch point with Inductor's and Triton's private API, and nothing
else. No other module of raycompile imports ``torch._*`` or a Triton internal (the layering test,
``tests/unit/test_layers.py``, fails on one).

It is split by seam family, each module listing the internals it reaches (``SEAMS``) and the torch
versions it was checked on (``CHECKED_ON``):

- ``entry``: torch.compile's backend, Inductor's config and compile pools, its remote caches;
- ``triton``: compiling a Triton kernel (cross-compiling without a GPU), Triton's cache, ptxas,
  the ``DeviceProperties`` text of a kernel source (parsed here only);
- ``cpp``: C++ kernel builds; ``isa``: the libraries of Inductor's checks of this CPU's vector
  instruction sets, which travel with compiled frames;
- ``codegen``: the output module's wrapper codegen and futures;
- ``autotuner``: a compiled kernel's configs and winners, user ``@triton.jit`` kernels;
- ``coordesc``: coordinate descent's candidates compiled at once (in the compile workers);
  ``configs``: a max-autotune kernel's configs compiled at once, by several compile workers;
- ``autotune``: max-autotune's tuning pool, config benchmarks, the GPU actors' touch points;
- ``tuning``: a kernel's first-run tuning taken in turns by the processes of a node;
- ``graphs``: a graph's whole Inductor compile sent out of process (Inductor's out-of-process
  compile seam) and its output loaded here;
- ``dynamo``: Dynamo's precompile cache redirected to raycompile (compiled frames a warm process
  loads instead of tracing), and what keys them; ``guards``: their guards, every one kept and
  re-created in the loading process (``guard_refs``: how the objects they name travel);
  ``precompile``: those entries, checked and loaded; ``devices``: an entry made on one CUDA index
  moved to another; ``light``: a process that loads them imports none of Inductor's compile
  modules;
- ``toolchain``: what job code (``kernels/``) calls, handed to it as ``TOOLCHAIN``.

``check()`` verifies that every seam exists in the installed torch; ``tests/unit/test_compat.py``
calls it, so a torch upgrade that moves a seam fails loudly, naming it, instead of silently
falling back.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from . import (
    autograd,
    autotune,
    autotuner,
    codegen,
    configs,
    coordesc,
    cpp,
    devices,
    dynamo,
    entry,
    fx_cache,
    graphs,
    guards,
    isa,
    light,
    precompile,
    triton,
    tuning,
)
from ._base import SeamMissing, Seams, resolve
from .autotuner import (
    autotuner_source,
    bench_launcher,
    bundle_user_kernel,
    config_dict,
    inductor_best_config,
    is_caching_autotuner,
    is_cuda_kernel,
    kernel_attribute_name,
    kernel_key_of,
    kernel_label,
    launcher_configs,
    launcher_for,
    launchers,
    load_autotuner,
    restrict_autotuner,
    set_autotuner_device,
    set_kernel_key,
)
from .codegen import (
    STOCK_IMPORT,
    STOCK_INSTANCE,
    deferred_line,
    future_done,
    is_future,
    loaded_output_modules,
    replace_line,
    wait_timeout_s,
    wrapper_codegen_classes,
    wrapper_codegen_for,
    wrapper_codegen_registered,
)
from .configs import config_count, spreads
from .coordesc import coordesc_first_sweep, coordesc_prefetched
from .cpp import (
    builder_parts,
    cpp_compiler,
    cpp_job_parts,
    cpp_kernel_lines,
    defining_cpp_kernel,
    when_loaded_from_disk,
)
from .dynamo import compiled_function, frames_stored, inductor_compiling, source_id
from .entry import (
    async_compile_class,
    cache_key_tag,
    compile_workers_in_processes,
    fresh_cache,
    fx_graph_key,
    inductor_backend,
    inductor_cache_dir,
    inductor_config,
    inductor_entry_gated,
    inductor_loaded,
    is_readiness_probe,
    max_autotune_on,
    pool_started,
    pools_routed,
    remote_cache_backend_base,
    remote_module_caches,
    stock_pools,
    wake_pool,
)
from .graph_wire import compile_here as compile_graph_here
from .graph_wire import worker_warm as graph_worker_warm
from .graphs import graphs_routed
from .light import LIGHT_LINES, ExternKernels
from .toolchain import TOOLCHAIN, InductorToolchain
from .triton import (
    CUDA_ARCHES,
    compile_only_driver,
    device_index,
    driver_triton_cache_dir,
    gpu_driver_check_disabled,
    inductor_ptxas,
    parse_arch,
    ptxas_version,
    retarget,
    retarget_device,
    target_of,
    triton_extra_config,
    triton_job_args,
    without_device_index,
    worker_compile_triton,
)

FAMILIES = {"entry": entry, "triton": triton, "cpp": cpp, "codegen": codegen, "autotuner": autotuner,
            "autotune": autotune, "dynamo": dynamo, "guards": guards, "precompile": precompile, "devices": devices,
            "graphs": graphs, "autograd": autograd, "tuning": tuning, "isa": isa, "coordesc": coordesc,
            "configs": configs, "fx_cache": fx_cache, "light": light}

# name -> (module, attribute path), every family's
SEAMS: Seams = {name: seam for family in FAMILIES.values() for name, seam in family.SEAMS.items()}
# name -> the torch versions its family was checked on
CHECKED_ON: dict[str, tuple[str, ...]] = {
    name: family.CHECKED_ON for family in FAMILIES.values() for name in family.SEAMS}

# Where Inductor compiles a Triton kernel during codegen, outside the output module's
# ``async_compile``: name -> (module, text its source must contain, the torch version it appeared
# in: an older torch has no such module, and so no such site). Every one of them calls
# ``AsyncCompile.triton`` on a stock ``AsyncCompile()`` when the pool is warm, so it reaches the
# farm through the same seam as the output module (``AsyncCompile.process_pool`` -> Router), and the
# output module's own call then joins the future Inductor saved (``CompiledTritonKernels``).
# ``tests/unit/test_compat.py`` fails, naming the site, when one moves. Checked on 2.13.0 and 2.11.0.
EAGER_COMPILE_SITES: dict[str, tuple[str, str, str]] = {
    # every pointwise/reduction/template kernel, as soon as its source is generated
    "TritonScheduling.define_kernel (warm pool)": (
        "torch._inductor.codegen.triton", "async_compile.triton(subs_name", "2.11"),
    # max-autotune: each Triton template choice, before benchmarking (non-Triton choices: threads)
    "AlgorithmSelectorCache precompile (max-autotune)": (
        "torch._inductor.select_algorithm", "async_compile.triton(", "2.11"),
    # benchmark_fusion / multi-template epilogues: the fused candidate, then precompiled in-process
    # from the Triton cache the farm's result was published to
    "Scheduler.compile_kernel (benchmark fusion)": ("torch._inductor.scheduler", "async_compile.triton(", "2.11"),
    # cpp_wrapper without autotune_at_compile_time: kernels compiled when the model loads
    "triton_lazy_compile (cpp_wrapper)": ("torch._inductor.runtime.triton_lazy_compile", "AsyncCompile()", "2.13"),
}
# Compiles that stay in-process (not routed, by design; listed so nobody looks for them):
# - AsyncCompile.triton's serial branch: only when use_process_pool() is False, i.e. in a daemonic
#   multiprocessing process or with config.triton.proton_profiling (the farm keeps compile_threads >= 2);
# - benchmark_kernel / benchmark_combo_kernel / TritonScheduling.benchmark_fused_nodes without a warm
#   pool: PyCodeCache.load(src) and a first call, on the GPU that benchmarks it;
# - the autotune benchmark subprocess (autotune_process.py) and CachingAutotuner.run's lazy
#   precompile: they load binaries the farm already published to this node's Triton cache.


def check(imported_only: bool = False) -> None:
    """Raise SeamMissing naming every touch point the installed torch lacks. ``imported_only``:
    only the seams whose module this process has imported already (importing none)."""
    import torch

    missing = []
    try:
        if not imported_only:  # (with it, Triton's seams are checked where Triton is imported)
            importlib.import_module("triton")
        has_triton = True
    except ImportError:
        has_triton = False
    for name, (module, path) in SEAMS.items():
        if module.split(".")[0] == "triton" and not has_triton:
            continue  # a CPU-only install without Triton: C++ kernels only, no Triton seam is reached
        if imported_only and module not in sys.modules:
            continue
        try:
            resolve(module, path)
        except (ImportError, AttributeError) as e:
            missing.append(f"{name} ({module}.{path}: {e})")
    if missing:
        raise SeamMissing(
            f"torch {torch.__version__} lacks Inductor internals raycompile needs: "
            + "; ".join(missing)
            + ". raycompile is checked on torch 2.11 and 2.13; pin one of those."
        )


def check_eager_compile_sites() -> None:
    """Raise SeamMissing naming every EAGER_COMPILE_SITES entry whose code has moved: a compile
    made during codegen that might no longer go through ``AsyncCompile.triton`` (and the farm)."""
    import torch

    here = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    moved = []
    for name, (module, needle, since) in EAGER_COMPILE_SITES.items():
        try:
            source = inspect.getsource(importlib.import_module(module))
        except ModuleNotFoundError as e:
            if here < tuple(int(p) for p in since.split(".")):
                continue  # this torch predates the site
            moved.append(f"{name} ({module}: {e})")
            continue
        except (ImportError, OSError) as e:
            moved.append(f"{name} ({module}: {e})")
            continue
        if needle not in source:
            moved.append(f"{name} ({module} no longer contains {needle!r})")
    if moved:
        raise SeamMissing(
            f"torch {torch.__version__}: Inductor's codegen-time compile sites changed: " + "; ".join(moved)
            + ". Check that each still compiles through AsyncCompile.triton, then update EAGER_COMPILE_SITES."
        )


__all__ = [
    "kernel_key_of",
    "launchers",
    "set_kernel_key",
    "load_autotuner",
    "launcher_for",
    "launcher_configs",
    "kernel_label",
    "kernel_attribute_name",
    "is_cuda_kernel",
    "bench_launcher",
    "CHECKED_ON",
    "CUDA_ARCHES",
    "EAGER_COMPILE_SITES",
    "ExternKernels",
    "FAMILIES",
    "InductorToolchain",
    "SEAMS",
    "LIGHT_LINES",
    "STOCK_IMPORT",
    "STOCK_INSTANCE",
    "SeamMissing",
    "Seams",
    "TOOLCHAIN",
    "async_compile_class",
    "autotune",
    "autotuner",
    "autotuner_source",
    "builder_parts",
    "bundle_user_kernel",
    "cache_key_tag",
    "check",
    "check_eager_compile_sites",
    "codegen",
    "compile_only_driver",
    "config_count",
    "compile_workers_in_processes",
    "config_dict",
    "compiled_function",
    "cpp",
    "cpp_compiler",
    "cpp_job_parts",
    "when_loaded_from_disk",
    "coordesc_first_sweep",
    "coordesc_prefetched",
    "cpp_kernel_lines",
    "deferred_line",
    "defining_cpp_kernel",
    "device_index",
    "driver_triton_cache_dir",
    "dynamo",
    "entry",
    "fresh_cache",
    "frames_stored",
    "inductor_compiling",
    "compile_graph_here",
    "graphs",
    "graphs_routed",
    "graph_worker_warm",
    "future_done",
    "fx_graph_key",
    "gpu_driver_check_disabled",
    "inductor_backend",
    "inductor_best_config",
    "inductor_cache_dir",
    "inductor_config",
    "inductor_entry_gated",
    "inductor_loaded",
    "inductor_ptxas",
    "is_caching_autotuner",
    "is_future",
    "is_readiness_probe",
    "wake_pool",
    "loaded_output_modules",
    "max_autotune_on",
    "parse_arch",
    "pool_started",
    "pools_routed",
    "precompile",
    "ptxas_version",
    "remote_cache_backend_base",
    "remote_module_caches",
    "replace_line",
    "resolve",
    "restrict_autotuner",
    "retarget",
    "retarget_device",
    "source_id",
    "set_autotuner_device",
    "spreads",
    "stock_pools",
    "target_of",
    "triton",
    "triton_extra_config",
    "triton_job_args",
    "wait_timeout_s",
    "without_device_index",
    "worker_compile_triton",
    "wrapper_codegen_classes",
    "wrapper_codegen_for",
    "wrapper_codegen_registered",
]
