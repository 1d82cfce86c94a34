"""The adapter's implementation of ``kernels.toolchain.Toolchain``: what job code calls in
Inductor and Triton, handed to it by the session (``TOOLCHAIN``; it pickles by reference, so a
Ray worker imports this module, not a copy of it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from . import autotune, autotuner, configs, triton


class InductorToolchain:
    """Stateless: every method reaches the installed torch and triton through the adapter."""

    def compile_triton(self, kernel_name: str, source: str, extra_env: dict[str, str],
                       extra_config: dict[str, Any], config_locks: str = "",
                       key: str = "") -> tuple[bytes, dict[str, bytes]]:
        if config_locks:
            return configs.compile_with_config_locks(kernel_name, source, extra_env, extra_config,
                                                     config_locks, key)
        return triton.compile_pickled(kernel_name, source, extra_env, extra_config)

    def compile_triton_here(self, kernel_name: str, source: str) -> tuple[bytes, dict[str, bytes]]:
        return triton.compile_here(kernel_name, source)

    def compile_triton_config(self, kernel_name: str, source: str, index: int, extra_env: dict[str, str],
                              extra_config: dict[str, Any], config_locks: str, key: str) -> float:
        return configs.compile_config_at(kernel_name, source, index, extra_env, extra_config, config_locks, key)

    def warm_compile_worker(self) -> None:
        triton.warm_compile_worker()

    def warm_gpu_worker(self, device: Any) -> None:
        autotune.warm_gpu_worker(device)

    def match_compile_env(self) -> None:
        # the ptxas is part of Triton's cache key: a GPU actor that skipped this would miss the
        # cubins the farm compiled and time a binary from another ptxas than the driver runs
        with contextlib.suppress(ImportError):  # an Inductor without it: nothing to match
            triton.set_inductor_ptxas()

    def triton_cache_dir(self, device_index: int) -> str:
        return triton.driver_triton_cache_dir(device_index)

    def retarget_device(self, source: str, index: int) -> str:
        return triton.retarget_device(source, index)

    def rand_strided(self, shape: Sequence[int], stride: Sequence[int], dtype: Any, device: Any,
                     offset: int = 0) -> Any:
        return autotune.rand_strided(shape, stride, dtype, device, offset)

    def benchmark_gpu(self, fn: Callable[[], Any]) -> float:
        return autotune.benchmark_gpu(fn)

    def point_request_here(self, bmreq: Any, source: str, device: Any) -> None:
        autotune.point_request_here(bmreq, source, device)

    def run_request(self, bmreq: Any) -> float:
        return autotune.run_request(bmreq)

    def load_autotuner(self, name: str, source: str) -> Any:
        return autotuner.load_autotuner(name, source)

    def launcher_for(self, kernel: Any, config: dict[str, Any]) -> Any:
        return autotuner.launcher_for(kernel, config)

    def bench_launcher(self, kernel: Any, launcher: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> float:
        return autotuner.bench_launcher(kernel, launcher, args, kwargs)


TOOLCHAIN = InductorToolchain()
