"""Benchmark jobs: one candidate (a config of a Triton kernel, or a max-autotune choice) timed on
this process's GPU with Inductor's own benchmarker. Pure job code: no Ray import; the GPU actors
(orchestrator/gpu_pool.py) call ``GPUTiming``, tests call the helpers directly.

A job names its candidate; the kernel it belongs to travels once per node as a ``Payload``:
- ``template``: a max-autotune Triton template choice: Inductor's pickled ``TritonBenchmarkRequest``
  (it carries the input/output tensor metadata), the module source it loads (the file at its
  ``module_path`` exists only on the driver's node) and the kernel's Triton cache group (so the GPU
  node loads the farm's cubins instead of compiling again);
- ``inductor``: an Inductor ``CachingAutotuner`` kernel with several configs (pointwise,
  reduction, persistent reduction, a user's ``@triton.autotune`` kernel inside a compiled model):
  its module source, Triton cache group and a description of the arguments (shapes, strides,
  dtypes), which are made here as Inductor's compile-time autotune makes them (``rand_strided``);
- ``user``: a user's ``@triton.jit`` kernel (``raycompile.autotune``): its source bundle, its
  arguments by value and the launch grid.
"""

from __future__ import annotations

import collections
import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cache import keys
from .jobs import Versions
from .toolchain import Toolchain

INF = float("inf")

# A CUDA error after which the context is unusable: the process has to go (Inductor's
# TuningProcessPool restarts its subprocess on the first two, autotune_process.py).
STICKY_ERRORS = ("illegal memory access", "illegal address", "unspecified launch failure", "misaligned address",
                 "illegal instruction", "cudaErrorLaunchFailure", "cudaErrorIllegalAddress", "device-side assert")


def is_sticky(error: BaseException) -> bool:
    """Whether ``error`` left this process's CUDA context unusable (an illegal address): the
    worker process must exit and be restarted."""
    return any(s in str(error) for s in STICKY_ERRORS)


# --- arguments --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument: its layout, and its values only when shipped by value."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch dtype name: "float16"
    offset: int = 0  # storage offset, in elements
    data: bytes | None = None  # the bytes of elements [0, offset + extent), when shipped by value


def _extent(shape: Sequence[int], stride: Sequence[int]) -> int:
    if any(s == 0 for s in shape):
        return 0
    return sum((s - 1) * st for s, st in zip(shape, stride)) + 1


def describe_args(values: Sequence[Any], by_value: bool = False) -> tuple[Any, ...]:
    """Arguments as plain values: tensors become ``TensorArg`` (with their bytes if ``by_value``),
    lists and tuples are described item by item, anything else stays as it is."""
    import torch

    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            dtype = str(v.dtype).removeprefix("torch.")
            data = None
            if by_value:
                n = v.storage_offset() + _extent(v.shape, v.stride())
                flat = torch.as_strided(v, (n,), (1,), 0).detach().cpu().contiguous()
                data = flat.view(torch.uint8).numpy().tobytes() if n else b""
            return TensorArg(tuple(v.shape), tuple(v.stride()), dtype, v.storage_offset(), data)
        if isinstance(v, (list, tuple)):
            return type(v)(one(x) for x in v)
        return v

    return tuple(one(v) for v in values)


def make_args(described: Sequence[Any], device: Any, toolchain: Toolchain) -> list[Any]:
    """The arguments on ``device``: a ``TensorArg`` with values is copied there; one without is
    made as Inductor's compile-time autotune makes example arguments (``rand_strided``: random
    floats, zeros for integer and bool tensors)."""
    import torch

    def one(v: Any) -> Any:
        if isinstance(v, TensorArg):
            dtype = getattr(torch, v.dtype)
            if v.data is None:
                return toolchain.rand_strided(v.shape, v.stride, dtype, device, v.offset)
            n = v.offset + _extent(v.shape, v.stride)
            flat = torch.frombuffer(bytearray(v.data), dtype=torch.uint8).view(dtype) if n else \
                torch.empty(0, dtype=dtype)
            return torch.as_strided(flat.to(device), v.shape, v.stride, v.offset)
        if isinstance(v, (list, tuple)):
            return type(v)(one(x) for x in v)
        return v

    return [one(v) for v in described]


# --- what travels ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Payload:
    """A kernel whose candidates are benchmarked; sent once per node (``kernel_id`` names it)."""

    kind: str  # "template" | "inductor" | "user"
    name: str  # the kernel's name in its module
    source: str  # the module source (template, inductor) or the kernel's source bundle (user)
    files: dict[str, bytes] = field(default_factory=dict)  # the Triton cache group's blobs (cache/keys.py)
    bmreq: bytes = b""  # template: the pickled TritonBenchmarkRequest
    args: tuple[Any, ...] = ()  # inductor, user: described arguments (describe_args)
    kwargs: dict[str, Any] = field(default_factory=dict)
    grid: bytes = b""  # user: the cloudpickled grid (a tuple, or a callable of the config's meta)
    globals: bytes = b""  # user: the cloudpickled globals the kernel bundle refers to
    kernel_id: str = ""

    @classmethod
    def make(cls, kind: str, name: str, source: str, **kw: Any) -> Payload:
        digest = hashlib.sha256()
        for part in (kind, name, source, repr(kw.get("args", ())), repr(sorted(kw.get("kwargs", {}).items())),
                     kw.get("bmreq", b""), kw.get("grid", b""), kw.get("globals", b"")):
            digest.update(part if isinstance(part, bytes) else str(part).encode())
            digest.update(b"\0")
        return cls(kind, name, source, kernel_id=digest.hexdigest(), **kw)


@dataclass(frozen=True)
class BenchJob:
    """One candidate of one kernel: what a GPU actor times."""

    kernel_id: str
    label: str  # the kernel's name, for logs and errors
    index: int  # the candidate's position among its kernel's candidates
    config: dict[str, Any]  # inductor, user: the config (kwargs, num_warps, num_stages); template: {}
    versions: Versions

    @property
    def name(self) -> str:
        """A stable name of the candidate: kernel and config."""
        cfg = ",".join(f"{k}={v}" for k, v in sorted(self.config.items()))
        return f"{self.label}[{self.index}]({cfg})"


@dataclass(frozen=True)
class Timing:
    """A candidate's time in milliseconds (``inf``: it failed, ``error`` says why) and where it ran."""

    index: int
    ms: float
    error: str = ""
    seconds: float = 0.0  # the job's wall time on the actor
    gpu: str = ""
    node_id: str = ""
    pid: int = 0
    started: float = 0.0  # epoch seconds on the actor when the job began (0: it never reached one)


@dataclass(frozen=True)
class GPUDescription:
    model: str  # torch.cuda.get_device_name: "NVIDIA H200"
    arch: str  # "sm_90"
    index: str  # the physical GPU index on its node (what Ray assigned), or a stand-in's name
    uuid: str = ""  # the device's UUID: tells a GPU actor on the driver's own GPU (GPUPool.hold)

    @property
    def group(self) -> str:
        """What a benchmark must run on to be valid for a kernel: the GPU model and arch."""
        return f"{self.model} ({self.arch})"


def local_gpu(index: int | None = None) -> GPUDescription | None:
    """This process's GPU (the current CUDA device unless ``index``), or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    i = torch.cuda.current_device() if index is None else index
    major, minor = torch.cuda.get_device_capability(i)
    uuid = str(getattr(torch.cuda.get_device_properties(i), "uuid", "") or "")
    return GPUDescription(torch.cuda.get_device_name(i), f"sm_{major}{minor}", str(i), uuid)


def local_cpu() -> str:
    """This machine's CPU as far as a timing on it depends: its model name and the threads torch
    uses ("Intel(R) Xeon(R) Platinum 8480C x16")."""
    import torch

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    if not model:
        import platform

        model = platform.processor() or platform.machine()
    return f"{model} x{torch.get_num_threads()}"


# --- indirect indexing -------------------------------------------------------------------------

_MEMORY_OPS = ("load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg",
               "atomic_and", "atomic_or", "atomic_xor")


def has_indirect_indexing(source: str) -> bool:
    """Whether any kernel in ``source`` addresses memory through values it loaded (a gather or a
    scatter: ``tl.load(in_ptr1 + (64*tmp5))``). Random example inputs would send such a kernel
    out of bounds (or, with Inductor's zeros for integer tensors, all to one row: a misleading
    time), so it is tuned where it runs, with its real inputs."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # cannot tell: be safe
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        loaded: set[str] = set()

        def names(node: ast.AST) -> set[str]:
            return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

        def is_memory_call(node: ast.AST, ops: tuple[str, ...]) -> bool:
            return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ops)

        changed = True
        while changed:  # taint: names assigned from loads, then names assigned from those
            changed = False
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
                    continue
                value_loads = any(is_memory_call(n, ("load",)) for n in ast.walk(node.value))
                if value_loads or names(node.value) & loaded:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    new = set().union(*(names(t) for t in targets)) - loaded
                    if new:
                        loaded |= new
                        changed = True
        for node in ast.walk(fn):
            if is_memory_call(node, _MEMORY_OPS) and node.args and names(node.args[0]) & loaded:
                return True
    return False


# --- user kernels (raycompile.autotune; bundled by wrapper.compat.bundle_user_kernel) ------------


def load_user_kernel(name: str, source: str, values: dict[str, Any]) -> Any:
    """Rebuild a bundled kernel here: the source is written to a file (Triton reads a kernel's
    source with ``inspect``) and imported with ``values`` already in its globals."""
    import importlib.util

    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"raycompile_user_{digest}"
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], name)
    directory = os.path.join(tempfile.gettempdir(), f"raycompile-user-kernels-{os.getuid()}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{module_name}.py")
    from ..cache.files import write_atomic

    write_atomic(path, source.encode())
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(values)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def launch_options(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict (kwargs plus num_warps/num_stages/...) as keyword arguments of a launch."""
    return {k: v for k, v in config.items() if v is not None}


# --- timing -------------------------------------------------------------------------------------

def publish_triton_files(files: dict[str, bytes], triton_dir: str) -> None:
    """Write a kernel's Triton cache group where this process's Triton looks (``triton_dir``):
    its cubins load instead of being compiled again."""
    if files:
        from ..cache.files import publish

        publish(keys.triton_paths(files, triton_dir))


class GPUTiming:
    """Times candidates on this process's GPU, as Inductor does (its benchmarker: warm-up, L2
    flush, the median of repeats). Loaded kernels are kept (by ``Payload.kernel_id``) so each
    candidate after a kernel's first costs only its own timing."""

    def __init__(self, toolchain: Toolchain, keep: int = 64) -> None:
        self.toolchain = toolchain
        self._loaded: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._keep = keep

    def describe(self) -> GPUDescription:
        gpu = local_gpu()
        if gpu is None:
            raise RuntimeError("this GPU worker sees no CUDA device")
        return gpu

    def warm(self) -> None:
        """The one-time set-up of a GPU worker, done while it starts."""
        self.toolchain.warm_gpu_worker(self._device())

    def __call__(self, job: BenchJob, payload: Payload) -> float:
        """Milliseconds of ``job``'s candidate; raises what the candidate raised."""
        return {"template": self._template, "inductor": self._inductor, "user": self._user}[payload.kind](job, payload)

    def _memo(self, payload: Payload, load: Callable[[], Any]) -> Any:
        value = self._loaded.get(payload.kernel_id)
        if value is None:
            value = load()
            self._loaded[payload.kernel_id] = value
            while len(self._loaded) > self._keep:
                self._loaded.popitem(last=False)
        else:
            self._loaded.move_to_end(payload.kernel_id)
        return value

    @staticmethod
    def _device() -> Any:
        import torch

        return torch.device("cuda", torch.cuda.current_device())

    def _publish(self, payload: Payload, device: Any) -> None:
        self.toolchain.match_compile_env()
        publish_triton_files(payload.files, self.toolchain.triton_cache_dir(device.index))

    def _template(self, job: BenchJob, payload: Payload) -> float:
        tc, device = self.toolchain, self._device()
        self._publish(payload, device)
        bmreq = pickle.loads(payload.bmreq)
        tc.point_request_here(bmreq, tc.retarget_device(payload.source, device.index), device)
        return tc.run_request(bmreq)

    def _inductor(self, job: BenchJob, payload: Payload) -> float:
        tc, device = self.toolchain, self._device()

        def load() -> Any:
            self._publish(payload, device)
            return tc.load_autotuner(payload.name, tc.retarget_device(payload.source, device.index))

        kernel = self._memo(payload, load)
        launcher = tc.launcher_for(kernel, job.config)
        if launcher is None:
            raise RuntimeError(f"{job.name}: no compiled config of the kernel matches on this GPU")
        args = make_args(payload.args, device, tc)
        kwargs = dict(zip(payload.kwargs, make_args(list(payload.kwargs.values()), device, tc)))
        return tc.bench_launcher(kernel, launcher, args, kwargs)

    def _user(self, job: BenchJob, payload: Payload) -> float:
        import cloudpickle
        import torch

        device = self._device()
        kernel = self._memo(payload, lambda: load_user_kernel(
            payload.name, payload.source, cloudpickle.loads(payload.globals) if payload.globals else {}))
        args = make_args(payload.args, device, self.toolchain)
        grid = cloudpickle.loads(payload.grid)
        options = launch_options(job.config)
        kwargs = {**payload.kwargs, **options}

        def launch() -> None:
            kernel[grid](*args, **kwargs)

        launch()  # compiles this config; an error here is the config's
        torch.cuda.synchronize()
        return self.toolchain.benchmark_gpu(launch)


def fastest(timings: Sequence[Timing]) -> Timing | None:
    """The fastest finite timing (the first of equals, as Inductor's ``min`` picks), or None."""
    best = None
    for t in timings:
        if t.ms < INF and (best is None or t.ms < best.ms):
            best = t
    return best
