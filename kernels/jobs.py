"""The jobs the farm runs and the results they return: plain, picklable values.

A job carries everything a worker on another node needs (sources, command lines, target arch),
the versions of the driver that made it, and its key: the kernel's identity (``cache/keys.py``),
computed once when the job is made (``wrapper/job_keys.py``) and used by the farm's dedupe, the cache
tiers and the cluster coordinator alike. A result is either ``Built`` or ``Failed``.
Failures travel as values until the one wait point (STYLE.md habit 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Versions:
    """The toolchain a binary depends on. A worker refuses a job whose versions differ."""

    torch: str
    triton: str

    @classmethod
    def here(cls) -> Versions:
        import torch

        try:
            import triton

            triton_version = triton.__version__
        except ImportError:  # a CPU-only install may lack triton; C++ jobs still work
            triton_version = "none"
        return cls(torch=torch.__version__, triton=triton_version)

    @classmethod
    def installed(cls) -> Versions:
        """The versions of the torch and triton installed here, read from their package metadata
        without importing them (importing torch takes seconds on a fresh process): what the
        first-contact probe compares, on the driver and on every node alike. Falls back to
        ``here()`` when torch has no package metadata (a source tree on the path)."""
        from importlib import metadata

        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return cls.here()
        for dist in ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"):
            try:
                return cls(torch=torch_version, triton=metadata.version(dist))
            except metadata.PackageNotFoundError:
                continue
        return cls(torch=torch_version, triton="none")


@dataclass(frozen=True)
class TritonJob:
    """Compile one Inductor Triton kernel module (all its configs) for the target in its source."""

    kernel_name: str
    source: str
    versions: Versions
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_config: dict[str, object] = field(default_factory=dict)
    key: str = field(kw_only=True)  # cache.keys.triton_key
    # a directory of this node where each config is compiled under a lock of its own, so a config
    # that another worker compiles at once (``run_triton_config``) is waited for and then found in
    # Triton's cache, never compiled twice; "" for none (wrapper/spread.py)
    config_locks: str = field(default="", kw_only=True)

    @property
    def label(self) -> str:
        return self.kernel_name


@dataclass(frozen=True)
class CppStep:
    """One compiler invocation of a C++ kernel build (compile, or link)."""

    command: list[str]
    target: str  # absolute path of the file this step produces
    build_dir: str  # scratch dir the command runs in


@dataclass(frozen=True)
class CppJob:
    """Build one C++ kernel library: its steps run in order; every step's target comes back.

    ``inputs`` are the files the steps read that the driver wrote (sources, the precompiled-header
    text), so a worker on another node can build without a shared filesystem.
    """

    name: str
    steps: tuple[CppStep, ...]
    inputs: dict[str, bytes]
    versions: Versions
    lock_path: str = ""
    timeout_s: float = 600.0  # each compiler run, and the wait for the library's lock (job_timeout_s)
    key: str = field(kw_only=True)  # cache.keys.cpp_build_key

    @property
    def label(self) -> str:
        return self.name


Job = TritonJob | CppJob


@dataclass(frozen=True)
class Built:
    """A job that succeeded. ``files`` maps absolute paths to bytes the driver must have."""

    key: str
    label: str
    seconds: float
    payload: bytes = b""  # the pickled CachingAutotuner for Triton jobs
    files: dict[str, bytes] = field(default_factory=dict)
    node_id: str = ""
    pid: int = 0
    started: float = 0.0  # wall clock (epoch s) on the worker when the job began
    failed: ClassVar[bool] = False


@dataclass(frozen=True)
class Failed:
    """A job that failed: the compiler's message, where it ran, and whether retrying could help."""

    key: str
    label: str
    message: str
    kind: str = "compile"  # "compile" | "version" | "timeout" | "infrastructure"
    seconds: float = 0.0
    node_id: str = ""
    pid: int = 0
    started: float = 0.0
    failed: ClassVar[bool] = True


Result = Built | Failed

