"""Jobs made from what Inductor asks for, each with its key computed once, here
(``cache/keys.py`` defines it): the Router's jobs, the output module's manifest keys and the
autotune winners' keys all come from these functions, so they cannot drift apart.

Also the conversion between a job's result or cache entry and the files this node loads."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from ..cache import Entry, keys
from ..kernels import Built, CppJob, CppStep, Job, TritonJob, Versions
from ..kernels.cpp_compile import compiler_version, native_march_flags, resolve_command
from . import compat

log = logging.getLogger("raycompile.jobs")


def triton_job(kernel_name: str, source: str, extra_env: dict[str, str] | None = None,
               extra_config: dict[str, Any] | None = None, versions: Versions | None = None) -> TritonJob:
    """The job compiling Inductor Triton kernel module ``source``, keyed. ``extra_config``
    defaults to what ``AsyncCompile.triton`` would send with it (``compat.triton_extra_config``),
    so a key made at codegen equals the Router's key for the job Inductor submits."""
    versions = versions or Versions.here()
    config = compat.triton_extra_config(source) if extra_config is None else dict(extra_config)
    key = keys.triton_key(compat.without_device_index(source), versions.torch, versions.triton,
                          compat.ptxas_version(), compat.target_of(source), config)
    return TritonJob(kernel_name, source, versions, dict(extra_env or {}), config, key=key)


def triton_key(kernel_name: str, source: str) -> str:
    """The key of the Triton kernel module ``source``: what the farm files its compile under, what
    the output module names it by, what its autotune winner is filed under."""
    return triton_job(kernel_name, source).key


def triton_job_for(fn: Callable[..., Any], args: tuple[Any, ...], versions: Versions) -> TritonJob | None:
    """The job of a call Inductor submits to its process pool, or None when it is not a Triton
    compile."""
    parts = compat.triton_job_args(fn, args)
    if parts is None:
        return None
    name, source, env, config = parts
    try:
        return triton_job(name, source, env, config, versions)
    except ValueError as e:  # no target the farm can read (a HIP or XPU kernel): Inductor's own pool compiles it
        log.debug("raycompile: %s is not a kernel the farm can key (%s); compiling it with stock Inductor", name, e)
        return None


def _cpp_label(steps: list[CppStep], inputs: dict[str, bytes]) -> str:
    """A C++ job's label where the output module's kernel name is not known: the library's hash
    and the length of the kernel's source (the ``.cpp`` inputs the job already carries),
    ``C++ kernel c7vumwyt (120 lines)``."""
    lines = sum(compat.cpp_kernel_lines(data.decode(errors="replace"))
                for path, data in inputs.items() if path.endswith(".cpp"))
    return f"C++ kernel {os.path.basename(steps[-1].target).split('.')[0][:8]} ({lines} lines)"


def cpp_job_for(task: Callable[..., Any], versions: Versions, timeout_s: float = 600.0,
                inductor_dir: str | None = None) -> CppJob | None:
    """Turn Inductor's C++ build partial into a self-contained, keyed job: resolved command lines
    (with ``-march=native`` expanded for THIS machine) and the input files a remote node lacks.
    Its label is the kernel's name in the output module (``cpp_fused_relu_0``) where this runs
    under that module's definition of it (Inductor calls it there), else ``_cpp_label``. None
    when ``task`` is not a C++ build. ``inductor_dir``: Inductor's cache dir the build was made
    in, where that is not the current one (default: the current one)."""
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
    key = keys.cpp_build_key([s.command for s in steps], inputs, versions.torch, versions.triton,
                             compiler_version(steps[0].command[0]), inductor_dir or compat.inductor_cache_dir())
    return CppJob(name, tuple(steps), inputs, versions, lock_path, timeout_s, key=key)


def cpp_source_key(argtypes: list[str], source: str) -> str:
    """The output module's key of a C++ kernel (its build commands do not exist yet at codegen)."""
    v, cxx = Versions.here(), compat.cpp_compiler()
    return keys.cpp_source_key(argtypes, source, v.torch, v.triton, compiler_version(cxx),
                               " ".join(native_march_flags(cxx)))


def local_paths(blobs: dict[str, bytes], job: Job) -> dict[str, bytes]:
    """A result's files or an entry's blobs -> paths on this node (cache/keys.py's layout)."""
    triton_dir = compat.driver_triton_cache_dir(compat.device_index(job.source)) if isinstance(job, TritonJob) else ""
    return keys.to_paths(blobs, triton_dir, compat.inductor_cache_dir())


def to_entry(result: Built, inductor_dir: str | None = None) -> Entry:
    """The cache entry of a built job: its files as blobs, its compiled kernel as the payload
    (``inductor_dir``: the Inductor cache dir its files are in; default: the current one)."""
    blobs = keys.from_paths(result.files, inductor_dir or compat.inductor_cache_dir())
    if result.payload:
        blobs[keys.PAYLOAD] = result.payload
    meta: dict[str, Any] = {"label": result.label, "seconds": result.seconds}
    parts = keys.parts_of(result.key)
    if parts is not None:  # what the key was made of (`raycompile explain`), signed with the entry
        meta["parts"] = parts
    return Entry(result.key, blobs, meta)
