"""What job code needs from Inductor and Triton, as an interface. ``kernels/`` never imports the
Inductor adapter (``wrapper/compat``, a layer above it); the layer that wires the farm passes an
implementation in (``wrapper.compat.TOOLCHAIN``): to ``run_job``, to ``GPUTiming``, and through
the orchestrator to its workers, where it arrives pickled by reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Toolchain(Protocol):
    # -- compile workers
    def compile_triton(self, kernel_name: str, source: str, extra_env: dict[str, str],
                       extra_config: dict[str, Any], config_locks: str = "",
                       key: str = "") -> tuple[bytes, dict[str, bytes]]:
        """Compile every config of an Inductor Triton kernel module for the target its source
        records (cross-compiling without a GPU); return (the pickled compiled kernel, its Triton
        cache group as ``triton/GROUP/FILE`` blobs). ``config_locks``: each config under its
        lock there (named by ``key``), beside ``compile_triton_config``."""
        ...

    def compile_triton_here(self, kernel_name: str, source: str) -> tuple[bytes, dict[str, bytes]]:
        """``compile_triton`` in the driver's own process, whose env and config the job carries
        already: nothing is applied, nothing of the process is cleared."""
        ...

    def compile_triton_config(self, kernel_name: str, source: str, index: int, extra_env: dict[str, str],
                              extra_config: dict[str, Any], config_locks: str, key: str) -> float:
        """Compile config ``index`` of the kernel into this node's Triton cache under its lock in
        ``config_locks``, unless the kernel's own job finished first; the seconds it took."""
        ...

    def warm_compile_worker(self) -> None:
        """Import what a compile job uses."""
        ...

    # -- GPU benchmark workers
    def warm_gpu_worker(self, device: Any) -> None: ...

    def match_compile_env(self) -> None:
        """Compile and look up Triton kernels here as the farm's compile workers do."""
        ...

    def triton_cache_dir(self, device_index: int) -> str: ...

    def retarget_device(self, source: str, index: int) -> str: ...

    def rand_strided(self, shape: Sequence[int], stride: Sequence[int], dtype: Any, device: Any,
                     offset: int = 0) -> Any: ...

    def benchmark_gpu(self, fn: Callable[[], Any]) -> float: ...

    def point_request_here(self, bmreq: Any, source: str, device: Any) -> None: ...

    def run_request(self, bmreq: Any) -> float: ...

    def load_autotuner(self, name: str, source: str) -> Any: ...

    def launcher_for(self, kernel: Any, config: dict[str, Any]) -> Any: ...

    def bench_launcher(self, kernel: Any, launcher: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> float: ...
