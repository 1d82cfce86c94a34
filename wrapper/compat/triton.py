"""Seam family "triton": compiling an Inductor Triton kernel (on a node with or without a GPU),
Triton's cache layout and ptxas, and the text of a kernel source (its ``DeviceProperties``).
Checked on torch 2.11.0 (triton 3.6), 2.13.0 (triton 3.7) and 2.15.0 (triton 3.9).

On a node without a GPU, Triton cannot pick an active driver, and Inductor's kernel module asks
for one. A compile-only driver stands in: it reports the target recorded in the kernel source
(``DeviceProperties(cc=..., warp_size=...)``) and is never asked to launch anything, so ptxas
builds cubins for the GPUs' arch on a CPU-only box (DESIGN.md, "Compiling Triton on a node
WITHOUT a GPU").
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ...cache import keys, write_missing
from ...errors import UnknownArchError
from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0", "2.15.0")

SEAMS: Seams = {
    "_load_triton_kernel_from_source": ("torch._inductor.codecache", "_load_triton_kernel_from_source"),
    "CachingAutotuner.prepare_for_pickle": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.prepare_for_pickle"),
    "CachingAutotuner.restore_after_unpickle": (
        "torch._inductor.runtime.triton_heuristics", "CachingAutotuner.restore_after_unpickle"),
    "_worker_compile_triton": ("torch._inductor.runtime.compile_tasks", "_worker_compile_triton"),
    "_set_triton_ptxas_path": ("torch._inductor.runtime.compile_tasks", "_set_triton_ptxas_path"),
    "triton_helpers.set_driver_to_gpu": ("torch._inductor.runtime.triton_helpers", "set_driver_to_gpu"),
    "triton_hash_to_path_key": ("torch._inductor.runtime.runtime_utils", "triton_hash_to_path_key"),
    "triton_cache_dir": ("torch._inductor.runtime.runtime_utils", "triton_cache_dir"),
    "config.use_static_triton_launcher": ("torch._inductor.config", "use_static_triton_launcher"),
    # read only when config.autotune_lookup_table (read with getattr) has entries
    "async_compile.size_hints_regex": ("torch._inductor.async_compile", "size_hints_regex"),
    "generate_lookup_hash_from_source_code": (
        "torch._inductor.runtime.triton_heuristics", "generate_lookup_hash_from_source_code"),
    "triton.runtime.driver.set_active": ("triton.runtime", "driver.set_active"),
    "triton.runtime.driver._active": ("triton.runtime", "driver"),  # the attribute is set lazily
    "triton.backends.nvidia.driver.CudaDriver": ("triton.backends.nvidia.driver", "CudaDriver"),
    "triton.backends.compiler.GPUTarget": ("triton.backends.compiler", "GPUTarget"),
    "triton.backends.nvidia.compiler.get_ptxas_version": ("triton.backends.nvidia.compiler", "get_ptxas_version"),
}

# Compute capabilities Triton's bundled ptxas (CUDA 12.9) builds for.
CUDA_ARCHES = (75, 80, 86, 87, 89, 90, 100, 103, 120)


def parse_arch(arch: str) -> int:
    """'sm_90' / 'sm90' / '90' / 'sm_90a' -> 90; raise UnknownArchError for anything else."""
    m = re.fullmatch(r"(?:sm_?)?(\d{2,3})a?", arch.strip().lower())
    if not m or int(m.group(1)) not in CUDA_ARCHES:
        raise UnknownArchError(arch, ", ".join(f"sm_{a}" for a in CUDA_ARCHES))
    return int(m.group(1))


# --- a kernel source's recorded target: one parse of Inductor's DeviceProperties text ---------

# DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, ..., warp_size=32)
_DEVICE_PROPS = re.compile(r"DeviceProperties\(type='(?P<type>\w+)'(?P<body>[^)]*)\)")
_FIELD = r"\b{}=(\d+)"


def _props(source: str) -> re.Match[str] | None:
    return _DEVICE_PROPS.search(source)


def target_of(source: str) -> tuple[str, int, int]:
    """(device type, compute capability, warp size) recorded in an Inductor kernel source."""
    m = _props(source)
    cc = re.search(_FIELD.format("cc"), m.group("body")) if m else None
    warp = re.search(_FIELD.format("warp_size"), m.group("body")) if m else None
    if not (m and cc and warp):
        raise ValueError("no DeviceProperties(type=..., cc=..., warp_size=...) in the kernel source")
    return m.group("type"), int(cc.group(1)), int(warp.group(1))


def device_index(source: str) -> int:
    """The CUDA device index recorded in an Inductor kernel source (0 when none is)."""
    m = _props(source)
    index = re.search(_FIELD.format("index"), m.group("body")) if m else None
    return int(index.group(1)) if index else 0


def _edit_props(source: str, edit: Callable[[str], str]) -> str:
    return _DEVICE_PROPS.sub(lambda m: f"DeviceProperties(type='{m.group('type')}'{edit(m.group('body'))})", source)


def without_device_index(source: str) -> str:
    """The kernel source with its recorded device index removed (it does not change the binary,
    so it is not part of the kernel's key: ranks on cuda:0 and cuda:1 share one entry)."""
    return _edit_props(source, lambda body: re.sub(r",\s*index=\d+\b", "", body, count=1))


def retarget(source: str, arch: int) -> str:
    """The same kernel source with its recorded target changed to compute capability ``arch``."""
    return _edit_props(source, lambda body: re.sub(r"\bmajor=\d+", f"major={arch // 10}",
                                                   re.sub(r"\bcc=\d+", f"cc={arch}", body)))


def retarget_device(source: str, index: int) -> str:
    """``source`` with its recorded CUDA device index set to ``index`` (a GPU actor sees only its
    own GPU, as device 0 in most clusters; the cubins do not depend on the index)."""
    return _edit_props(source, lambda body: re.sub(r"\bindex=\d+", f"index={index}", body, count=1))


# --- a kernel module's text --------------------------------------------------------------------

_JIT_DEF = re.compile(r"^@triton\.jit\s*\ndef (\w+)\(", re.MULTILINE)


def is_inductor_kernel(text: str) -> bool:
    """Whether ``text`` is a Triton kernel module as Inductor writes one."""
    return "@triton.jit" in text and "triton_meta=" in text and "@triton_heuristics." in text


# An output module (the wrapper Inductor writes per graph) holds its kernels' sources inline, so it
# passes the test above, but it is no kernel: it has ``call`` (a function, or a Runner's method
# bound at module level) and the one wait on its kernels, stock's ``async_compile.wait(globals())``
# or raycompile's ``async_compile.wait_named(...)`` (wrapper/codegen.py). A kernel module has neither.
_OUTPUT_WAIT = re.compile(r"^[^#'\n]*\basync_compile\.wait(?:_named)?\(", re.MULTILINE)
_CALL = re.compile(r"^\s*def call\(", re.MULTILINE)


def is_output_module(text: str) -> bool:
    """Whether ``text`` is an Inductor output module (``call()`` and the wait on its kernels)."""
    return bool(_CALL.search(text) and _OUTPUT_WAIT.search(text))


def jit_function_name(text: str) -> str | None:
    """The name of the first ``@triton.jit`` function in a kernel module (None: there is none)."""
    m = _JIT_DEF.search(text)
    return m.group(1) if m else None


# --- compiling ----------------------------------------------------------------------------------


def worker_compile_triton(
    kernel_name: str, source: str, extra_env: dict[str, str], extra_config: dict[str, Any],
    load: Callable[[], Any] | None = None,
) -> tuple[Any, int]:
    """Inductor's own worker job: load the kernel module (``load``, else as Inductor loads it),
    precompile every config, return it."""
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    return _worker_compile_triton(load or functools.partial(_load_kernel, kernel_name, source), extra_env,
                                  extra_config)


def triton_job_args(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, str, dict, dict] | None:
    """If ``fn(*args)`` is Inductor's Triton compile job, return (name, source, env, config)."""
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    if fn is not _worker_compile_triton or len(args) != 3:
        return None
    load_kernel, extra_env, extra_config = args
    if not (
        isinstance(load_kernel, functools.partial)
        and load_kernel.func is _load_triton_kernel_from_source
        and len(load_kernel.args) == 2
    ):
        return None
    name, source = load_kernel.args
    return name, source, dict(extra_env), dict(extra_config)


def triton_extra_config(source: str) -> dict[str, Any]:
    """The ``extra_config`` that ``AsyncCompile.triton`` sends with ``source``'s compile job, so
    a key made at codegen equals the Router's key for the job (async_compile.py, 2.13.0)."""
    from torch._inductor import config

    extra: dict[str, Any] = {"use_static_triton_launcher": config.use_static_triton_launcher}
    table = getattr(config, "autotune_lookup_table", None)
    if table and "@triton.jit\n" in source:
        from torch._inductor.async_compile import size_hints_regex
        from torch._inductor.runtime.triton_heuristics import generate_lookup_hash_from_source_code

        m = size_hints_regex.search(source)
        fn_hash = generate_lookup_hash_from_source_code(m.group(1) if m else str(None),
                                                        source.split("@triton.jit\n")[1])
        if fn_hash in table:
            extra["autotune_lookup_table"] = {fn_hash: table[fn_hash]}
    return extra


@contextlib.contextmanager
def gpu_driver_check_disabled() -> Iterator[None]:
    """Make ``triton_helpers.set_driver_to_gpu`` a no-op while cross-compiling on a CPU-only node.

    It raises "Could not find an active GPU backend" without a GPU, although the compile itself
    only needs the target, which the kernel's DeviceProperties carry."""
    from torch._inductor.runtime import triton_helpers

    original = triton_helpers.set_driver_to_gpu
    triton_helpers.set_driver_to_gpu = lambda: None
    try:
        yield
    finally:
        triton_helpers.set_driver_to_gpu = original


_ACTIVE_DRIVER = threading.RLock()  # held while compile_only_driver swaps Triton's active driver


def _driver_lock_after_fork() -> None:
    global _ACTIVE_DRIVER
    _ACTIVE_DRIVER = threading.RLock()  # a thread of the parent may have held it: never in the child


os.register_at_fork(after_in_child=_driver_lock_after_fork)


@contextlib.contextmanager
def compile_only_driver(device_type: str, arch: int, warp_size: int) -> Iterator[None]:
    """Make Triton compile for (device_type, arch) on a node with no GPU of that kind."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver

    if device_type != "cuda":
        raise UnknownArchError(device_type, "cuda (cross-compiling targets only NVIDIA GPUs)")

    class CompileOnlyCudaDriver(CudaDriver):
        def __init__(self) -> None:  # no CudaUtils: that needs libcuda
            self.target = GPUTarget("cuda", arch, warp_size)

        def get_current_target(self) -> GPUTarget:
            return self.target

        @staticmethod
        def is_active() -> bool:
            return True

        def get_current_device(self) -> int:
            return 0

    runtime_driver = triton.runtime.driver
    with _ACTIVE_DRIVER:  # one process-wide driver: one thread swaps it at a time
        previous = runtime_driver._active  # reset_active() would probe for a real GPU driver and fail
        runtime_driver.set_active(CompileOnlyCudaDriver())
        try:
            with gpu_driver_check_disabled():
                yield
        finally:
            runtime_driver._active = previous


def compile_for_target(kernel_name: str, source: str, extra_env: dict[str, str],
                       extra_config: dict[str, Any], load: Callable[[], Any] | None = None) -> Any:
    """Compile every config of an Inductor Triton kernel module for the target its source
    records: on this GPU, or cross-compiled where this node has none. Returns the autotuner.
    ``load``: what makes the kernel before it compiles (default: Inductor's own load of
    ``source``; ``configs.compile_with_config_locks`` passes one whose configs compile under locks)."""
    with target_driver(source):
        kernel, _elapsed_us = worker_compile_triton(kernel_name, source, extra_env, extra_config, load)
    return kernel


def compile_pickled(kernel_name: str, source: str, extra_env: dict[str, str], extra_config: dict[str, Any],
                    load: Callable[[], Any] | None = None) -> tuple[bytes, dict[str, bytes]]:
    """``compile_for_target`` in a compile worker, the kernel pickled as Inductor's worker job
    returns it, with its Triton cache group; then the kernel made whole again.

    Inductor's job (``_worker_compile_triton``) empties the kernel for its pickle
    (``prepare_for_pickle``) and drops what it took out. That kernel is the one the worker's module
    cache holds for ``source``, so a coordinate-descent candidate of the same kernel sent later to
    this worker (``compile_config_for_target``) loaded an empty Triton function and failed there (a
    review, stop 57). Here the job's own ``prepare_for_pickle`` is watched for what it takes out,
    and that is put back after the pickle, as ``compile_here`` and Inductor's bundler do. Two jobs of
    one source in one process (threads) take turns: each would otherwise save what the other
    emptied. ``load``: as ``compile_for_target``'s."""
    with _source_lock(source):
        return _compile_pickled(kernel_name, source, extra_env, extra_config, load)


_SOURCE_LOCKS = [threading.Lock() for _ in range(64)]  # striped: two sources may share one, harmlessly


def _source_lock(source: str) -> threading.Lock:
    return _SOURCE_LOCKS[hash(source) % len(_SOURCE_LOCKS)]


def _source_locks_after_fork() -> None:
    _SOURCE_LOCKS[:] = [threading.Lock() for _ in range(len(_SOURCE_LOCKS))]  # a parent's thread may hold one


os.register_at_fork(after_in_child=_source_locks_after_fork)


def _compile_pickled(kernel_name: str, source: str, extra_env: dict[str, str], extra_config: dict[str, Any],
                     load: Callable[[], Any] | None) -> tuple[bytes, dict[str, bytes]]:
    base = load or functools.partial(_load_kernel, kernel_name, source)
    loaded: list[Any] = []
    saved: list[Any] = []

    def load_watched() -> Any:
        kernel = base()
        loaded.append(kernel)

        def prepare_for_pickle() -> Any:
            saved.append(type(kernel).prepare_for_pickle(kernel))
            return saved[-1]

        kernel.prepare_for_pickle = prepare_for_pickle  # read by the job as kernel.prepare_for_pickle()
        return kernel

    try:
        kernel = compile_for_target(kernel_name, source, extra_env, extra_config, load_watched)
    finally:
        for k in loaded:  # the watches, and a load's own wrappers, are this instance's only
            k.__dict__.pop("prepare_for_pickle", None)
            k.__dict__.pop("_precompile_config", None)
    return _pickled_then_restored(kernel, saved[-1] if saved else None)


def _pickled_then_restored(kernel: Any, saved: Any) -> tuple[bytes, dict[str, bytes]]:
    """``kernel`` (emptied by ``prepare_for_pickle``, which returned ``saved``) pickled with its
    Triton cache group, then made whole again (nothing to put back where ``saved`` is None)."""
    try:
        return pickle.dumps(kernel), cache_group_blobs(kernel)
    finally:
        if saved is not None:
            kernel.restore_after_unpickle(saved)


def compile_here(kernel_name: str, source: str) -> tuple[bytes, dict[str, bytes]]:
    """Compile every config of an Inductor Triton kernel module in this process, as
    ``AsyncCompile.triton`` compiles in the driver while its compile workers start: the process's
    own env, config and ptxas (a worker's job applies the driver's; here they are the driver's),
    and Python's line cache left alone (a worker clears its own). Returns the kernel pickled as a
    worker's job returns it, and its Triton cache group.

    The kernel is the one Inductor's module cache holds for ``source`` (``PyCodeCache``), and the
    object Inductor's reload of the kernel in this process returns (coordinate descent's first
    run reloads it). ``prepare_for_pickle`` empties its Triton function (its ``fn``, its hash
    lock), so it is restored after the pickle, as Inductor's bundler restores a kernel it pickles:
    left empty, coordinate descent's first compile of a config failed on an H200 (``'NoneType'
    object does not support the context manager protocol``, stop 57)."""
    with target_driver(source):
        kernel = _load_kernel(kernel_name, source)
        kernel.precompile(warm_cache_only=True)
    return _pickled_then_restored(kernel, kernel.prepare_for_pickle())


def config_is_current(extra_config: dict[str, Any]) -> bool:
    """Whether a compile job's ``extra_config`` (what ``AsyncCompile.triton`` sends a worker to
    apply) holds this process's own Inductor config: its lookup table's entries, any other name's
    value; and this process compiles a kernel as a worker would (no C++ wrapper patched in, under
    which a kernel is not statically launched: ``can_statically_launch``)."""
    from torch._inductor import config

    if config.cpp_wrapper:
        return False
    missing = object()
    for name, value in extra_config.items():
        current = getattr(config, name, missing)
        if name == "autotune_lookup_table" and isinstance(value, dict) and isinstance(current, dict):
            if any(current.get(k, missing) != v for k, v in value.items()):
                return False
        elif current != value:
            return False
    return True


def target_driver(source: str) -> contextlib.AbstractContextManager[None]:
    """Where this node has no GPU of the kind ``source`` was generated for, the compile-only
    driver of its target (``compile_only_driver``); else nothing."""
    import torch

    device_type, arch, warp_size = target_of(source)
    # device_count() asks NVML where it can: ``is_available()`` initializes the CUDA driver (cuInit)
    # in each compile worker, which stock's own compile job never does: 0.19 CPU-s a worker process
    # against 0.015 on an H100 (benchmarks/results/gpu_s51_cudainit.log)
    if device_type == "cuda" and torch.cuda.device_count() == 0:
        return compile_only_driver(device_type, arch, warp_size)
    return contextlib.nullcontext()


def compile_config_for_target(kernel_name: str, source: str, cfg: Any, extra_env: dict[str, str],
                              extra_config: dict[str, Any]) -> tuple[str | None, float]:
    """One config ``cfg`` (a ``triton.Config``) of an Inductor Triton kernel module compiled into
    this node's Triton cache, as a stock compile worker compiles each of a kernel's configs
    (``_worker_compile_triton``: Inductor's ptxas, the driver's env and config, then
    ``CachingAutotuner._precompile_config``); cross-compiled where this node has no GPU. Run in a
    compile worker: the driver's own ``_precompile_config(cfg)`` then finds it in the cache.
    Returns (the binary's Triton cache key, the seconds it took)."""
    import time

    from torch._inductor import config
    from torch._inductor.codecache import _load_triton_kernel_from_source

    start = time.perf_counter()
    _worker_env(extra_env)
    with target_driver(source), config.patch(extra_config):
        result = _load_triton_kernel_from_source(kernel_name, source)._precompile_config(cfg)
    return compiled_hash(result), time.perf_counter() - start


def _load_kernel(kernel_name: str, source: str) -> Any:
    from torch._inductor.codecache import _load_triton_kernel_from_source

    return _load_triton_kernel_from_source(kernel_name, source)


def _worker_env(extra_env: dict[str, str]) -> None:
    """What ``_worker_compile_triton`` sets up before a compile: Inductor's ptxas, the driver's
    env, its libdevice."""
    set_inductor_ptxas()
    os.environ.update(extra_env)
    libdevice = extra_env.get("TRITON_LIBDEVICE_PATH")  # as _worker_compile_triton applies it
    if libdevice:
        with contextlib.suppress(ImportError, AttributeError):
            from triton import knobs

            knobs.nvidia.libdevice_path = libdevice


def compiled_hash(result: Any) -> str | None:
    """The Triton cache key of a ``CachingAutotuner._precompile_config`` result (its binary's hash)."""
    return getattr(getattr(result, "kernel", None), "hash", None)


def compile_job_env() -> dict[str, str]:
    """What ``AsyncCompile.triton`` sends a compile worker of this process's environment (its
    Inductor and Triton cache dirs, libdevice), so a worker's compile lands where this process
    looks."""
    names = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_LIBDEVICE_PATH")
    return {v: os.environ[v] for v in names if v in os.environ}


def warm_compile_worker() -> None:
    """Import what a compile job uses (seconds on a fresh worker process)."""
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.runtime.triton_heuristics  # noqa: F401

    with contextlib.suppress(ImportError):  # a CPU-only install without triton: C++ jobs only
        import triton.compiler  # noqa: F401


# --- Triton's cache --------------------------------------------------------------------------


def triton_cache_group_dirs(kernel: Any) -> list[str]:
    """Directories of Triton's cache holding the artifacts of each compiled config of ``kernel``."""
    from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key

    base = os.environ.get("TRITON_CACHE_DIR")
    if not base:
        return []
    return [
        os.path.join(base, triton_hash_to_path_key(result.kernel.hash))
        for result in getattr(kernel, "compile_results", None) or []
    ]


def cache_group_blobs(kernel: Any) -> dict[str, bytes]:
    """Triton's cache artifacts of every compiled config of ``kernel``, as ``triton/GROUP/FILE``
    blobs (cache/keys.py): the driver writes them into ITS Triton cache dir, where its
    TritonBundler looks for them (the TritonBundler trap in DESIGN.md)."""
    files: dict[str, bytes] = {}
    for group in triton_cache_group_dirs(kernel):
        if not os.path.isdir(group):
            continue
        for name in sorted(os.listdir(group)):
            path = os.path.join(group, name)
            if os.path.isfile(path) and not name.startswith("tmp."):
                with open(path, "rb") as f:
                    files[keys.triton_blob(os.path.basename(group), name)] = f.read()
    return files


def driver_triton_cache_dir(device_index: int) -> str:
    """Where this process's Triton writes and Inductor's TritonBundler reads (env first)."""
    from torch._inductor.runtime.runtime_utils import triton_cache_dir

    return os.environ.get("TRITON_CACHE_DIR") or triton_cache_dir(device_index)


# --- Triton's own helper modules ------------------------------------------------------------------
# Triton compiles a small C module the first time its driver starts in a Triton cache dir
# (``cuda_utils``: triton/runtime/build.py ``compile_module_from_src``, ``<sha256 of source and
# platform>/<name><EXT_SUFFIX>``), 0.5-0.7 s on the GPU machine: on a warm start from an empty cache
# that is a fifth of the first call. Compiled frames carry them, so a node that loads them does not.
# The group is named by that sha256 in base32 (triton/runtime/cache.py ``_base32``, triton 3.x: 52
# characters); a hex name is an older Triton's. (Matching hex only, none was ever carried: a warm
# Mixtral-style step on an H200 still built cuda_utils, 0.63 s of its 3.63 s.)
_HELPER_KEY = re.compile(r"^(?:[0-9a-f]{64}|[A-Z2-7]{52})$")
HELPER_BLOB = "triton-helper:"  # blob name prefix: triton-helper:<key>/<file name>


def _helper_dirs() -> list[str]:
    dirs = [driver_triton_cache_dir(0)]
    try:
        from triton import knobs

        dirs.append(str(knobs.cache.dir))
    except (ImportError, AttributeError):  # an older triton: its cache dir is the env's, or the default
        dirs.append(os.path.join(os.path.expanduser("~"), ".triton", "cache"))
    return list(dict.fromkeys(d for d in dirs if d))


def helper_modules() -> dict[str, bytes]:
    """The compiled helper modules in this process's Triton cache dirs, as blobs
    (``triton-helper:<key>/<file name>``)."""
    out: dict[str, bytes] = {}
    for root in _helper_dirs():
        try:
            groups = [g for g in os.listdir(root) if _HELPER_KEY.match(g)]
        except OSError:
            continue
        for group in groups:
            try:
                names = [n for n in os.listdir(os.path.join(root, group)) if n.endswith(".so")]
            except OSError:
                continue
            for name in names:
                with open(os.path.join(root, group, name), "rb") as f:
                    out[f"{HELPER_BLOB}{group}/{name}"] = f.read()
    return out


def install_helper_modules(blobs: dict[str, bytes]) -> int:
    """Put helper modules (blobs of ``helper_modules``, from a signed entry) where this process's
    Triton looks for them, unless they are there; returns how many were written."""
    files = {}
    for blob, data in blobs.items():
        if not blob.startswith(HELPER_BLOB):
            continue
        group, _, name = blob[len(HELPER_BLOB):].partition("/")
        if _HELPER_KEY.match(group) and name.endswith(".so") and "/" not in name:
            files.update({os.path.join(root, group, name): data for root in _helper_dirs()})
    return write_missing(files)


# --- ptxas ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def ptxas_version() -> str:
    """The version line of the ptxas Triton uses (part of the cache key); "none" without one."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version

        return str(get_ptxas_version()).strip().splitlines()[-1]
    except Exception:  # noqa: BLE001 - no NVIDIA backend in this triton, or no ptxas: not a CUDA build box
        return "none"


def set_inductor_ptxas() -> None:
    """Point this process's Triton at the ptxas Inductor ships, as each stock compile worker does
    first (a no-op where torch ships none)."""
    from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path

    _set_triton_ptxas_path()


@contextlib.contextmanager
def inductor_ptxas() -> Iterator[str | None]:
    """This process's Triton uses the ptxas Inductor ships (``_set_triton_ptxas_path``: what each
    stock compile worker, and stock's own in-process compile, does first) inside the block;
    yields its path (None: Inductor ships none, or TRITON_PTXAS_PATH was set already).

    The farm's workers compile with that ptxas, and its version is part of Triton's cache key and
    of the farm's (``cache.keys.triton_key``): a driver left on Triton's bundled ptxas would key
    kernels by a ptxas that did not build them, and miss in Triton's cache every cubin the farm
    published when it loads a kernel itself (a benchmark request). A no-op where torch ships no
    ptxas (the CPU wheel; torch 2.11+cu130 on the H200 machine). Triton caches the version it
    read, so that cache is cleared."""
    before = os.environ.get("TRITON_PTXAS_PATH")
    set_inductor_ptxas()
    after = os.environ.get("TRITON_PTXAS_PATH")
    if after == before:
        yield None
        return
    _ptxas_version_changed()
    try:
        yield after
    finally:
        if os.environ.get("TRITON_PTXAS_PATH") == after:
            os.environ.pop("TRITON_PTXAS_PATH", None)
            _ptxas_version_changed()


def _ptxas_version_changed() -> None:
    ptxas_version.cache_clear()
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version
    except ImportError:  # a Triton without the NVIDIA backend: nothing cached
        return
    clear = getattr(get_ptxas_version, "cache_clear", None)
    if clear is not None:
        clear()
